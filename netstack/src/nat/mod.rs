//! NAT44 with port translation (NAPT), sans I/O: what RFC 4787 (UDP), RFC 5382 (TCP),
//! RFC 5508 (ICMP) and RFC 7857 ask of a NAT, over the connection table of
//! [`crate::conntrack`]. One [`Nat`] per core; `translate(frame, from, now)` rewrites an
//! Ethernet frame in place and returns a [`Verdict`]. No heap, no clock, no `unsafe`; the
//! kernel wiring (an NF chained after the router, ARP for the pool, the hand-off) is a later
//! step (docs/DESIGN.md, *Stateful network functions*).
//!
//! * Mapping: **endpoint-independent** (RFC 4787 REQ-1, RFC 5382 REQ-1): an inside
//!   (address, port, protocol) keeps one outside (address, port) for every destination while
//!   any of its sessions lives (a mapping is freed with its last session).
//! * Filtering: **address-and-port-dependent** by default, **endpoint-independent** as an
//!   option ([`Filtering`]; RFC 4787 REQ-8).
//! * Pooling: **paired** (REQ-2): an inside address always gets the same outside address
//!   ([`ports::paired_address`]).
//! * Ports: each core hands out its own block of the dynamic range ([`ports::PortPlan`]);
//!   ICMP query identifiers are mapped the same way (RFC 5508 REQ-2). Port exhaustion is a
//!   counted drop ([`NatDrop::PortsExhausted`]); ports are not preserved or parity-kept
//!   (REQ-3, REQ-4 are "MAY"/"RECOMMENDED").
//! * **Hairpinning** (REQ-9, RFC 5382 REQ-8): a packet from the inside to an outside address
//!   of the pool is translated outbound (its source becomes its mapping), then inbound as if
//!   it came from the outside (filtering included), and sent back inside ([`Verdict::Hairpin`]).
//! * **Static forwards** (DNAT): an outside (address, port) fixed to an inside one, open to
//!   new connections from the outside ([`Forward`]).
//! * **ICMP errors** (RFC 5508 REQ-3, REQ-4): the outer header and the quoted datagram
//!   (addresses, ports or identifier, the quoted IPv4 and transport checksums when quoted)
//!   translated; an error of no session dropped; an error quoting an error dropped.
//! * **Checksums** updated incrementally ([`csum`], RFC 1624).
//! * TCP state and timeouts: [`crate::conntrack::tcp`], [`Timeouts`] (RFC 5382 REQ-5;
//!   RFC 7857 §2.2 keeps a RST'd session for the transitory timeout).
//!
//! Files: [`ports`] (cores, blocks, allocation), [`csum`] (RFC 1624), [`translate`] ([`Nat`]
//! and the TCP/UDP/query paths), [`icmp`] (errors).

pub mod csum;
pub mod icmp;
pub mod ports;
pub mod translate;

#[cfg(test)]
mod tests;

pub use crate::conntrack::Timeouts;
pub use translate::Nat;

use crate::conntrack::parse::ParseError;
use crate::conntrack::table::{Entry, TableError};
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};

/// Which inbound packets reach a mapping (RFC 4787 §5).
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub enum Filtering {
    /// Only from an (address, port) the inside endpoint has sent to (REQ-8's default here).
    #[default]
    AddressAndPortDependent,
    /// From anyone, once the mapping exists (REQ-8's recommendation for transparency).
    EndpointIndependent,
}

/// A static forward: new connections to `outside` (an address of the pool, a port outside
/// the dynamic range) go to `inside`; the inside endpoint's own outbound flows use `outside`
/// as their mapping.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Forward {
    /// [`IPPROTO_TCP`] or [`IPPROTO_UDP`].
    pub proto: u8,
    /// Outside address (host order).
    pub outside_addr: u32,
    /// Outside port.
    pub outside_port: u16,
    /// Inside address (host order).
    pub inside_addr: u32,
    /// Inside port.
    pub inside_port: u16,
}

/// A NAT's configuration: the same on every core but `core`.
#[derive(Copy, Clone, Debug)]
pub struct NatConfig<'c> {
    /// Outside addresses (host order), 1 to [`ports::MAX_POOL`].
    pub pool: &'c [u32],
    /// First port of the dynamic range (≥ 1).
    pub port_lo: u16,
    /// Last port of the dynamic range.
    pub port_hi: u16,
    /// Forwarding cores sharing the range (≥ 1).
    pub cores: u16,
    /// This core (< `cores`).
    pub core: u16,
    /// Inbound filtering.
    pub filtering: Filtering,
    /// Static forwards (at most [`MAX_FORWARDS`]).
    pub forwards: &'c [Forward],
    /// Idle timeouts.
    pub timeouts: Timeouts,
    /// Key of the owner and pairing hashes: the same on every core.
    pub key: u64,
    /// Key of the table's hash (a random one per boot; may differ per core).
    pub seed: u64,
}

/// Most static forwards.
pub const MAX_FORWARDS: usize = 64;

/// Why a configuration or its storage was refused.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum NatError {
    /// The pool is empty or longer than [`ports::MAX_POOL`] (its length).
    PoolSize(usize),
    /// `port_lo` is 0, above `port_hi`, or the range has fewer ports than cores.
    PortRange(u16, u16),
    /// `cores` is 0 or `core` not below it (core, cores).
    Core(u16, u16),
    /// More than [`MAX_FORWARDS`] forwards.
    TooManyForwards(usize),
    /// Forward number `.0` (from 0) is refused, for the reason `.1`.
    BadForward(usize, ForwardFault),
    /// The port bitmap needs `.0` words.
    PortStorage(usize),
    /// The mapping table is smaller than the session table plus the forwards plus one (it
    /// needs `.0`).
    MapStorage(usize),
    /// The session or mapping table refused its storage.
    Table(TableError),
}

impl core::fmt::Display for NatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            NatError::PoolSize(n) => {
                write!(f, "the pool has {n} addresses (1 to {})", ports::MAX_POOL)
            }
            NatError::PortRange(lo, hi) => write!(
                f,
                "the port range {lo}-{hi} is empty, starts at 0 or has fewer ports than cores"
            ),
            NatError::Core(core, cores) => write!(f, "core {core} of {cores}"),
            NatError::TooManyForwards(n) => {
                write!(f, "{n} static forwards (at most {MAX_FORWARDS})")
            }
            NatError::BadForward(i, why) => {
                let why = match why {
                    ForwardFault::Protocol => "its protocol is not tcp or udp",
                    ForwardFault::NotInPool => "its outside address is not in the pool",
                    ForwardFault::ZeroPort => "a port is 0",
                    ForwardFault::InDynamicRange => {
                        "its outside port is in the dynamic range (nat_ports)"
                    }
                    ForwardFault::Clash => {
                        "an earlier forward has the same outside or inside endpoint"
                    }
                };
                write!(f, "static forward {}: {why}", i + 1)
            }
            NatError::PortStorage(w) => write!(f, "the port bitmap needs {w} words"),
            NatError::MapStorage(m) => write!(f, "the mapping table needs {m} entries"),
            NatError::Table(e) => write!(f, "the table refused its storage: {e:?}"),
        }
    }
}

/// Why a static forward was refused ([`NatError::BadForward`]).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum ForwardFault {
    /// A protocol other than TCP or UDP.
    Protocol,
    /// The outside address is not in the pool.
    NotInPool,
    /// The outside or the inside port is 0.
    ZeroPort,
    /// The outside port is in the dynamic range, whose ports the mappings take.
    InDynamicRange,
    /// An earlier forward has the same outside or the same inside endpoint.
    Clash,
}

/// Why the NAT dropped a frame. Every drop is counted under its reason ([`NatCounters`]).
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum NatDrop {
    /// The frame did not parse (never `NotIpv4`: that is [`Verdict::NotIpv4`]).
    Malformed(ParseError),
    /// Its source is an outside address of the NAT (spoofed, or looped).
    OwnAddressSource,
    /// From the outside to an address not in the pool.
    NotPoolAddress,
    /// From the outside to a pool (address, port) with no mapping.
    NoMapping,
    /// From the outside to a mapping, from an endpoint the inside has not sent to
    /// (address-and-port-dependent filtering).
    Filtered,
    /// No free outside port for the inside endpoint's address and protocol on this core.
    PortsExhausted,
    /// The session (or mapping) table is full of entries that may not be evicted.
    TableFull,
    /// A TCP segment invalid in its session's state, or one that cannot open a session; an
    /// ICMP echo reply with no session.
    Invalid,
    /// An ICMP error quoting a datagram of no session.
    IcmpErrorNoSession,
    /// An ICMP error from the inside to an outside address of the pool (not hairpinned).
    IcmpErrorHairpin,
}

impl NatDrop {
    /// Number of reasons (the counters' array length).
    pub const COUNT: usize = 10;

    /// The reason's index in [`NatCounters::drops`].
    pub fn index(self) -> usize {
        match self {
            NatDrop::Malformed(_) => 0,
            NatDrop::OwnAddressSource => 1,
            NatDrop::NotPoolAddress => 2,
            NatDrop::NoMapping => 3,
            NatDrop::Filtered => 4,
            NatDrop::PortsExhausted => 5,
            NatDrop::TableFull => 6,
            NatDrop::Invalid => 7,
            NatDrop::IcmpErrorNoSession => 8,
            NatDrop::IcmpErrorHairpin => 9,
        }
    }

    /// Counter names, by [`NatDrop::index`].
    pub const NAMES: [&'static str; NatDrop::COUNT] = [
        "malformed",
        "own_address_source",
        "not_pool_address",
        "no_mapping",
        "filtered",
        "ports_exhausted",
        "table_full",
        "invalid",
        "icmp_error_no_session",
        "icmp_error_hairpin",
    ];
}

/// Where a frame arrives from.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Ingress {
    /// The inside port.
    Inside,
    /// The outside port.
    Outside,
    /// Another core, as [`Verdict::HandOff`] asked: a hairpinned frame already translated
    /// outbound (its source a pool address), to translate inbound and send inside.
    Hairpin,
}

/// What to do with a frame after [`Nat::translate`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Verdict {
    /// Translated in place: send it out of the other side (from the inside: outside; from
    /// the outside or a hairpin hand-off: inside).
    Forward,
    /// Translated twice in place (a hairpin): send it back out of the inside port.
    Hairpin,
    /// Another core owns the flow: hand the frame (untouched, or for `Hairpin` translated
    /// outbound) to `core`, which calls `translate(frame, from, now)` with this `from`.
    HandOff {
        /// The owning core.
        core: u16,
        /// What the owner passes as `from`.
        from: Ingress,
    },
    /// Not IPv4 (ARP, IPv6): untouched, the caller's to handle.
    NotIpv4,
    /// Drop it (counted). The frame is as it came, but for a hairpin dropped in its inbound
    /// half (already translated outbound; its outbound session stays, as for any packet
    /// that left).
    Drop(NatDrop),
}

/// What a NAT did, per core.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct NatCounters {
    /// Frames translated from the inside out.
    pub outbound: u64,
    /// Frames translated from the outside in (hairpin hand-offs included).
    pub inbound: u64,
    /// Frames hairpinned on this core.
    pub hairpinned: u64,
    /// ICMP errors translated.
    pub icmp_errors: u64,
    /// Frames handed to another core.
    pub handed_off: u64,
    /// Sessions opened.
    pub sessions_opened: u64,
    /// Mappings opened (static forwards not counted).
    pub mappings_opened: u64,
    /// Drops by [`NatDrop::index`].
    pub drops: [u64; NatDrop::COUNT],
}

/// A session's value: the index of its mapping in the mapping table.
pub type Session = u32;
/// A mapping's value: how many sessions use it.
pub type Mapping = u32;

/// Storage of one core's NAT (see [`NatStorage::bytes`]).
pub struct NatStorage<'a> {
    /// Session entries (64 bytes each).
    pub sessions: &'a mut [Entry<Session>],
    /// Session buckets (power of two; 4 bytes each).
    pub session_buckets: &'a mut [u32],
    /// Mapping entries: at least sessions + forwards + 1 (64 bytes each).
    pub maps: &'a mut [Entry<Mapping>],
    /// Mapping buckets (power of two).
    pub map_buckets: &'a mut [u32],
    /// The port bitmap ([`ports::PortAlloc::words_for`] the core's block).
    pub ports: &'a mut [u64],
}

impl NatStorage<'_> {
    /// Bytes of a core's storage for `sessions` sessions (as many buckets, rounded up to a
    /// power of two), as many mappings plus `forwards`, and a port bitmap of `port_words`:
    /// 136 bytes per session (with the mapping it may need) plus the buckets' rounding and
    /// 8 per bitmap word; 1,000,000 sessions take 144 MB, 100,000 take 14.3 MB.
    pub const fn bytes(sessions: usize, forwards: usize, port_words: usize) -> usize {
        let b = sessions.next_power_of_two();
        let m = sessions + forwards + 1;
        sessions * 64 + b * 4 + m * 64 + m.next_power_of_two() * 4 + port_words * 8
    }
}

/// Protocols the NAT translates.
pub(crate) fn has_ports(proto: u8) -> bool {
    matches!(proto, IPPROTO_TCP | IPPROTO_UDP | IPPROTO_ICMP)
}
