//! IPv4 router fast path (RFC 1812), beside smoltcp (which does not forward between
//! interfaces): DIR-24-8 FIB ([`fib`]), ARP neighbour table ([`neigh`], [`arp`]), header
//! validation and the RFC 1624 TTL update ([`ipv4`]), ICMP errors with a rate limit ([`icmp`]),
//! configuration parsers ([`parse`]), the listed text forms of routes and neighbours
//! ([`show`]), and the cross-core neighbour sync ([`sync`]: what one
//! core's router learns reaches the others through a [`NeighRing`], `mm`'s generic ring).
//!
//! One entry point per received frame, [`Router::process`], which returns exactly one
//! [`Action`] and counts exactly one outcome in [`RouterCounters`] (a queued frame is counted
//! when it leaves its queue). Timers and ARP resolution are driven by [`Router::poll`]. No
//! clock, no heap: time comes in as nanoseconds, the FIB's tables are caller storage.
//!
//! `process` has a fast path ([`Router::forward_fast`]) for the common case, valid IPv4
//! without options, TTL > 1, unicast, to a resolved next hop: the header checks, one DIR-24-8
//! lookup, then the FIB next-hop index selects a per-router (per-core) cache entry holding the
//! rewrite (the gateway's MAC and the output port's), as DPDK l3fwd's next-hop array does; a
//! host on a connected network is looked up in the neighbour table instead. The cache is filled
//! by the slow path (everything else, `#[cold]`: RFC 1812's checks in order, ARP, ICMP, options,
//! queueing for ARP) and dropped whenever the neighbour table reports that an entry that was
//! Reachable changed, and whenever the FIB changes (a next-hop index means another next hop in
//! another FIB): the two paths give the same result for every frame (tested differentially).
//!
//! Choices where RFC 1812 leaves one (relevant for the differential test against Linux):
//! - IP options (§5.3.13): Record Route records the outgoing port's address, Timestamp gets a
//!   timestamp (milliseconds since boot with the high-order bit set: no UT clock), preceded by
//!   the incoming port's address for flag 1 (as Linux), only at our prespecified addresses for
//!   flag 3, or an overflow count when full; other options pass unchanged; a malformed RR/TS
//!   option drops the datagram (`bad_options`) with a Parameter Problem pointing at the byte
//!   (§4.3.3.5; the same pointers as Linux's `ip_options_compile`). Source routes
//!   (§5.3.13.4, always accepted; Linux's default `accept_source_route=0` drops them): at the
//!   address the datagram was sent to, the destination becomes the route's next address and
//!   the outgoing port's address is recorded; a strict route whose next hop is not directly
//!   connected, a strict route reaching a router not in it (Linux answers that with Parameter
//!   Problem at the destination field), or a next address that cannot be routed (Linux drops
//!   it silently) gets Destination Unreachable, source route failed (RFC 1122 §3.3.5).
//! - Fragments are forwarded as they are (no reassembly); no ICMP error about a non-first
//!   fragment (§4.3.2.7).
//! - ICMP errors quote as much of the datagram as fits in 576 bytes (§4.3.2.3, as Linux), use
//!   TTL 64 and TOS 0xc0 (precedence 6, TOS bits 0 per RFC 1349; Linux keeps the offending
//!   datagram's TOS bits), come from the address of the port the datagram came in on, and go
//!   back to the frame's source MAC on that port (no route lookup for the error). They carry
//!   no IP options and quote the header as received (Linux returns the offending datagram's
//!   Record Route/Timestamp on the error and quotes them after its own update).
//! - ICMP echo requests to any of our addresses are answered in the fast path (§4.3.3.6):
//!   from the address pinged, with the request's precedence/DSCP, Record Route and Timestamp
//!   updated on arrival and departure and returned (NOPs and other options are not), back on
//!   the input port. Source-routed ones go to the host.
//! - No ICMP redirects when a datagram leaves through the port it came in on; it is forwarded.
//! - No Host Unreachable when ARP fails: the queued frames are dropped as `neigh_timeout`.
//! - Directed broadcasts to a connected network and the limited broadcast are not forwarded
//!   (RFC 2644); IPv4 in link-layer broadcast/multicast frames is dropped (§5.3.4).
//! - Ethernet padding is removed: a forwarded frame is 14 + IP total length bytes.
//! - Per-port IP MTU ([`Router::set_mtu`], default 1500). A datagram longer than the egress
//!   port's MTU leaves the fast path; with DF set it is dropped (`frag_needed`) with Destination
//!   Unreachable code 4 carrying the MTU (RFC 1191 §4, RFC 1812 §5.2.7.1), quoting it as
//!   received; with DF clear it is rewritten as for forwarding and returned as
//!   [`Action::Fragment`] (counted `forwarded` and `fragmented`) for the caller to cut with
//!   [`frag::Fragmenter`] (RFC 791 §3.2, RFC 1812 §5.2.6). Fragments that fit are forwarded as
//!   they are.
//! - Frames longer than their first buffer ([`Router::forward_fast_len`],
//!   [`Router::process_slow_len`]): only the head is read and written, lengths are checked
//!   against the whole frame; what needs more than the head is dropped as `beyond_head`,
//!   except datagrams to us (an echo request too), which go to the host whole.
//!
//! Past ~800 lines because `Router` is one sans-IO state machine whose per-frame path, slow
//! path and configuration share its private state; its parts by protocol are the submodules.

pub mod arp;
pub mod check;
pub mod fib;
pub mod fib6;
pub mod frag;
pub mod icmp;
pub mod icmp6;
pub mod ipv4;
pub mod ipv6;
pub mod ndp;
pub mod neigh;
pub mod parse;
pub mod parse6;
pub mod setup6;
pub mod show;
pub mod sync;
pub mod v6;

#[cfg(test)]
mod tests;

use crate::wire::{
    ETHERTYPE, ETHERTYPE_IPV6, ETH_DST, ETH_HDR_LEN, ETH_SRC, ICMP_CHECKSUM, ICMP_CODE,
    ICMP_HDR_LEN, ICMP_TYPE, IPPROTO_ICMP, IPV4_DST, IPV4_FLAGS_FRAG, IPV4_IDENT, IPV4_SRC,
    IPV4_TOS, IPV4_TOTAL_LEN, IPV4_TTL, IPV4_VER_IHL,
};
use crate::MacAddr;
pub use check::{check_route, RouteChange, RouteCheck, RouteError};
use core::net::Ipv4Addr;
pub use fib::{
    Fib, FibError, Ipv4Net, NextHop, RuleSlot, SparseStats, Tbl24Chunk, MAX_NEXTHOPS, TBL24_CHUNKS,
    TBL24_CHUNK_LEN, TBL24_LEN, TBL8_GROUP_LEN,
};
use icmp::TokenBucket;
use ipv4::{be16, DstClass};
use neigh::{Confirm, NeighEvent, NeighTable, Resolve};
pub use neigh::{NeighConfig, NeighInfo, NeighState};
pub use parse::{parse_ipv4_cidr, parse_route, ParseError};
pub use show::Route;
pub use sync::{NeighRing, NeighRing6, NeighUpdate, NeighUpdate6};

/// Ports a router can have.
pub const MAX_PORTS: usize = 8;

/// A port's IP MTU until [`Router::set_mtu`] (bytes): Ethernet's (RFC 894).
pub const DEFAULT_MTU: u16 = 1500;
/// The smallest IP MTU [`Router::set_mtu`] takes (bytes): RFC 791 §3.2, "every internet module
/// must be able to forward a datagram of 68 octets without further fragmentation" (a 60-byte
/// header and an 8-byte fragment).
pub const MIN_MTU: u16 = 68;

/// Why the router dropped a frame. Every drop is counted under exactly one reason.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum RouterDrop {
    /// Shorter than an Ethernet header.
    Runt,
    /// Received on a port the router does not have.
    UnknownPort,
    /// Destination MAC neither the port's nor broadcast.
    NotForUs,
    /// IPv4 in a link-layer broadcast frame (RFC 1812 §5.3.4).
    LinkBroadcast,
    /// Neither IPv4, ARP nor IPv6 (VLAN tags, ...).
    UnsupportedEthertype,
    /// IPv6 (EtherType 0x86DD) while the router has no IPv6 addresses: without
    /// `ip6_0=`/`ip6_1=`; with them the kernel hands IPv6 to `v6::Router6` before this
    /// router sees it.
    Ipv6Off,
    /// ARP that is not Ethernet/IPv4 request/reply, too short, or from a multicast MAC.
    BadArp,
    /// ARP not addressed to our address and teaching nothing.
    ArpNotForUs,
    /// Fewer than 20 bytes after the Ethernet header.
    Truncated,
    /// IP version not 4.
    BadVersion,
    /// IHL below 5.
    BadIhl,
    /// Total length below the header length or beyond the frame.
    BadTotalLen,
    /// Header checksum wrong.
    BadChecksum,
    /// Needs bytes of the frame past its head (the contiguous first part given to
    /// [`Router::process_slow_len`]): an IPv4 header longer than the head. (A datagram to us
    /// longer than the head, an echo request included, goes to the host instead.)
    BeyondHead,
    /// A malformed Record Route or Timestamp option (RFC 791: the datagram is in error;
    /// answered with Parameter Problem unless rate-limited).
    BadOptions,
    /// Source 0/8, 127/8, multicast, class E or the limited broadcast, or (RFC 1812 §5.3.7:
    /// "an IP broadcast address" or "an address of the router itself") one of our port
    /// addresses or a connected network's network or broadcast address (Linux's martian
    /// source). Never answered with an ICMP error or an echo reply (§4.3.2.7).
    MartianSrc,
    /// Destination 0/8, 127/8 or class E.
    MartianDst,
    /// Destination the limited broadcast or a connected network's broadcast.
    Broadcast,
    /// Destination multicast (no multicast routing).
    Multicast,
    /// A strict source route whose next hop is not directly connected or that reached a router
    /// it does not name, or a source route's next address that cannot be routed (answered with
    /// Destination Unreachable, source route failed, unless rate-limited).
    SourceRouteFailed,
    /// No route (answered with Destination Unreachable unless rate-limited).
    NoRoute,
    /// TTL ≤ 1 (answered with Time Exceeded unless rate-limited).
    TtlExpired,
    /// Longer than the egress port's MTU ([`Router::mtu`]) with DF set (answered with
    /// Destination Unreachable, fragmentation needed and DF set, carrying the MTU, unless
    /// rate-limited: RFC 1191 §4, RFC 1812 §5.2.7.1).
    FragNeeded,
    /// Next hop unresolved and no neighbour entry free.
    NeighTableFull,
    /// Next hop unresolved and its queue full.
    NeighQueueFull,
    /// Queued for a next hop that never answered ARP.
    NeighTimeout,
    /// Queued and given back by [`Router::flush`].
    NeighFlushed,
    /// Queued for a next hop still unresolved when its entry was taken by a newer one (at most
    /// a quarter of the neighbour table is unresolved; see [`neigh`]).
    NeighEvicted,
}

impl RouterDrop {
    /// Number of reasons.
    pub const COUNT: usize = 28;

    /// Every reason, in counter order.
    pub const ALL: [RouterDrop; RouterDrop::COUNT] = [
        RouterDrop::Runt,
        RouterDrop::UnknownPort,
        RouterDrop::NotForUs,
        RouterDrop::LinkBroadcast,
        RouterDrop::UnsupportedEthertype,
        RouterDrop::Ipv6Off,
        RouterDrop::BadArp,
        RouterDrop::ArpNotForUs,
        RouterDrop::Truncated,
        RouterDrop::BadVersion,
        RouterDrop::BadIhl,
        RouterDrop::BadTotalLen,
        RouterDrop::BadChecksum,
        RouterDrop::BeyondHead,
        RouterDrop::BadOptions,
        RouterDrop::MartianSrc,
        RouterDrop::MartianDst,
        RouterDrop::Broadcast,
        RouterDrop::Multicast,
        RouterDrop::SourceRouteFailed,
        RouterDrop::NoRoute,
        RouterDrop::TtlExpired,
        RouterDrop::FragNeeded,
        RouterDrop::NeighTableFull,
        RouterDrop::NeighQueueFull,
        RouterDrop::NeighTimeout,
        RouterDrop::NeighFlushed,
        RouterDrop::NeighEvicted,
    ];

    /// The counter's name.
    pub fn as_str(self) -> &'static str {
        match self {
            RouterDrop::Runt => "runt",
            RouterDrop::UnknownPort => "unknown_port",
            RouterDrop::NotForUs => "not_for_us",
            RouterDrop::LinkBroadcast => "link_broadcast",
            RouterDrop::UnsupportedEthertype => "unsupported_ethertype",
            RouterDrop::Ipv6Off => "ipv6_off",
            RouterDrop::BadArp => "bad_arp",
            RouterDrop::ArpNotForUs => "arp_not_for_us",
            RouterDrop::Truncated => "ip_truncated",
            RouterDrop::BadVersion => "bad_version",
            RouterDrop::BadIhl => "bad_ihl",
            RouterDrop::BadTotalLen => "bad_total_len",
            RouterDrop::BadChecksum => "bad_checksum",
            RouterDrop::BeyondHead => "beyond_head",
            RouterDrop::BadOptions => "bad_options",
            RouterDrop::MartianSrc => "martian_src",
            RouterDrop::MartianDst => "martian_dst",
            RouterDrop::Broadcast => "broadcast",
            RouterDrop::Multicast => "multicast",
            RouterDrop::SourceRouteFailed => "source_route_failed",
            RouterDrop::NoRoute => "no_route",
            RouterDrop::TtlExpired => "ttl_expired",
            RouterDrop::FragNeeded => "frag_needed",
            RouterDrop::NeighTableFull => "neigh_table_full",
            RouterDrop::NeighQueueFull => "neigh_queue_full",
            RouterDrop::NeighTimeout => "neigh_timeout",
            RouterDrop::NeighFlushed => "neigh_flushed",
            RouterDrop::NeighEvicted => "neigh_evicted",
        }
    }
}

/// The router's counters. Frame accounting: every frame given to [`Router::process`] ends in
/// exactly one of `forwarded`, `tx_dropped`, `arp_replies`, `echo_replies`, `arp_consumed`,
/// `to_host` or a drop reason, or is still queued for ARP; [`RouterCounters::outcomes`] + [`Router::queued_frames`] == `rx`.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct RouterCounters {
    /// Frames given to [`Router::process`].
    pub rx: u64,
    /// Frames forwarded (at once, or from a neighbour queue after ARP resolved), including
    /// those that are fragmented on the way out (`fragmented`). The router counts a frame here
    /// when it decides to forward it; a caller whose egress port then drops it (a full TX
    /// ring, no page for a fragment, too many fragments) moves it to `tx_dropped`
    /// ([`Router::tx_dropped`]), so that `forwarded` is the frames handed to a TX ring whole.
    pub forwarded: u64,
    /// Frames the router forwarded that their egress port dropped before any of them reached
    /// its TX ring (the port counts why: `tx_ring_full`, `too_big`, or `no_buffer` for a
    /// fragment train short of pages); a fragment train counts once.
    pub tx_dropped: u64,
    /// ARP requests for our address answered (in place).
    pub arp_replies: u64,
    /// ICMP echo requests to one of our addresses answered (in place, RFC 1812 §4.3.3.6).
    pub echo_replies: u64,
    /// ARP frames that taught the neighbour table (replies, gratuitous ARP) or were
    /// addressed to us, without needing an answer.
    pub arp_consumed: u64,
    /// Frames for one of our addresses, handed to the host (management plane).
    pub to_host: u64,
    /// Frames dropped, indexed like [`RouterDrop::ALL`].
    pub drops: [u64; RouterDrop::COUNT],
    // Not frame outcomes:
    /// Frames that entered a neighbour queue (their outcome is counted when they leave it).
    pub queued: u64,
    /// ICMP errors built (their trigger is counted under `no_route`/`ttl_expired`/
    /// `bad_options`/`frag_needed`/`source_route_failed`).
    pub icmp_sent: u64,
    /// ICMP errors not sent because of the rate limit.
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent because RFC 1812 §4.3.2.7 forbids them (about an ICMP error or a
    /// non-first fragment).
    pub icmp_suppressed: u64,
    /// ICMP errors or ARP requests not built because the caller's buffer was too small.
    pub no_buffer: u64,
    /// ARP requests built.
    pub arp_requests: u64,
    /// Forwarded frames (also counted in `forwarded`) longer than the egress port's MTU with DF
    /// clear, handed to the caller to fragment ([`Action::Fragment`], [`Event::Fragment`]):
    /// datagrams, not the fragments made of them.
    pub fragmented: u64,
}

impl RouterCounters {
    /// Drops counted under `why`.
    pub fn drops_for(&self, why: RouterDrop) -> u64 {
        self.drops[why as usize]
    }

    /// All drops.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Frames with a final outcome (everything but those still queued).
    pub fn outcomes(&self) -> u64 {
        self.forwarded
            + self.tx_dropped
            + self.arp_replies
            + self.echo_replies
            + self.arp_consumed
            + self.to_host
            + self.drops_total()
    }

    fn drop(&mut self, why: RouterDrop) {
        self.drops[why as usize] += 1;
    }
}

/// One port of the router: its MAC and its address with the connected network's length.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct PortConfig {
    /// The port's MAC (frames to other MACs are dropped).
    pub mac: MacAddr,
    /// The port's address, e.g. `10.0.0.1/24` (`ipN=` on the command line).
    pub addr: Ipv4Net,
}

/// Router-wide settings.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RouterConfig {
    /// Neighbour timers.
    pub neigh: NeighConfig,
    /// ICMP errors per second (token bucket rate; 0 disables ICMP errors).
    pub icmp_rate_per_sec: u32,
    /// ICMP errors in a burst (bucket size).
    pub icmp_burst: u32,
    /// IPv4 Identification of the datagrams the router originates (ICMP errors, echo
    /// replies): `ident_first`, then `ident_first + ident_step`, … (wrapping). One router per
    /// core: core `k` of `n` uses first `k + 1`, step `n`, so the cores never hand out the same
    /// ID at once (RFC 6864 §4: unique per source, destination and protocol while it may be
    /// reassembled). Default 1, step 1 (a step of 0 counts as 1).
    pub ident_first: u16,
    /// See [`RouterConfig::ident_first`].
    pub ident_step: u16,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            neigh: NeighConfig::default(),
            icmp_rate_per_sec: 1000,
            icmp_burst: 50,
            ident_first: 1,
            ident_step: 1,
        }
    }
}

impl RouterConfig {
    /// The defaults for the router of core `core` of `cores` (one router per core): IP IDs
    /// `core + 1`, `core + 1 + cores`, … (see [`RouterConfig::ident_first`]).
    pub fn for_core(core: u16, cores: u16) -> Self {
        RouterConfig {
            ident_first: core.wrapping_add(1),
            ident_step: cores.max(1),
            ..RouterConfig::default()
        }
    }
}

/// Why the router could not be set up or a route not installed.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RouterError {
    /// No port, or more than [`MAX_PORTS`].
    BadPortCount,
    /// Two ports on the same network.
    DuplicateNetwork,
    /// A port address that is not unicast, or is the network or broadcast address of its
    /// network.
    BadPortAddress,
    /// A static route [`check_route`] refuses, or a duplicate ([`Existing::Refuse`]).
    Route(RouteError),
    /// The FIB refused.
    Fib(FibError),
    /// The router's FIB is shared read-only (`&Fib`): routes cannot be added or deleted.
    ReadOnlyFib,
    /// A shared FIB lacks a port's connected route (it was not built for these ports).
    FibLacksPort,
    /// A port address with a /32 prefix: it leaves no connected network (its /32 is the local
    /// route), so no neighbour or gateway could be reached through the port. RFC 1812 §2.2.5.2
    /// unnumbered links are not supported; /31 (RFC 3021) is the smallest.
    HostPrefixPort,
    /// An MTU below 68 bytes, RFC 791 §3.2's minimum ([`Router::set_mtu`]).
    BadMtu,
    /// A port number the router does not have ([`Router::set_mtu`]).
    NoSuchPort,
}

impl From<RouteError> for RouterError {
    fn from(e: RouteError) -> Self {
        RouterError::Route(e)
    }
}

impl RouterError {
    /// Whether the route itself is at fault (the client's error: a refused route, a
    /// duplicate, a deletion of a route that is not there, a bad prefix), not the router's
    /// limits (rule table, tbl8 groups or next hops exhausted) or its setup.
    pub fn is_route_error(&self) -> bool {
        matches!(
            self,
            RouterError::Route(_)
                | RouterError::Fib(
                    FibError::NotFound | FibError::BadPrefixLen | FibError::HostBitsSet
                )
        )
    }
}

impl From<FibError> for RouterError {
    fn from(e: FibError) -> Self {
        RouterError::Fib(e)
    }
}

impl core::fmt::Display for RouterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouterError::BadPortCount => write!(f, "a router needs 1..={MAX_PORTS} ports"),
            RouterError::DuplicateNetwork => f.write_str("two ports on the same network"),
            RouterError::BadPortAddress => f.write_str("port address is not a host address"),
            RouterError::Route(e) => e.fmt(f),
            RouterError::Fib(e) => e.fmt(f),
            RouterError::ReadOnlyFib => f.write_str("the FIB is shared read-only"),
            RouterError::FibLacksPort => {
                f.write_str("the shared FIB lacks a port's connected route")
            }
            RouterError::HostPrefixPort => {
                f.write_str("a /32 port address leaves no connected network (use /31 or shorter)")
            }
            RouterError::BadMtu => write!(f, "an MTU must be {MIN_MTU}..=65535 bytes"),
            RouterError::NoSuchPort => f.write_str("no such port"),
        }
    }
}

/// What [`Router::add_static`] does when the FIB holds a static route for the prefix already:
/// the layers of the configuration (`route=` < routes file or `PUT /routes` body < console
/// changes) override each other, and no layer names a prefix twice.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Existing {
    /// Replace it (a higher layer over a lower one: the console's changes).
    Replace,
    /// Keep it and add nothing (a lower layer added after a higher one: `route=` after the
    /// routes file).
    Keep,
    /// Refuse the route as [`RouteError::Duplicate`] (the same layer: a routes file's lines).
    Refuse,
}

/// What to do with a frame given to [`Router::process`]. Exactly one per frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Action {
    /// Transmit `frame[..len]` on `port`: rewritten in place (MACs, TTL, checksum; Ethernet
    /// padding cut off).
    Forward {
        /// Output port.
        port: u8,
        /// Bytes to send.
        len: usize,
    },
    /// Transmit `frame[..len]` on `port` (the input port): the frame was an ARP request for
    /// our address or an ICMP echo request to one of our addresses, and has been rewritten in
    /// place into the reply (counted as `arp_replies` or `echo_replies`).
    Reply {
        /// Output port.
        port: u8,
        /// Bytes to send.
        len: usize,
    },
    /// The frame is dropped (counted under `cause`: `no_route`, `ttl_expired`, `frag_needed`,
    /// `source_route_failed` or `bad_options`) and an ICMP error about it was built in
    /// `icmp_out[..len]`: transmit that on `port` (the input port) and recycle the frame.
    Icmp {
        /// Output port.
        port: u8,
        /// Bytes of `icmp_out` to send.
        len: usize,
        /// Why the frame was not forwarded.
        cause: RouterDrop,
    },
    /// The frame waits for ARP: the router now holds its handle and gives it back through
    /// [`Router::poll`] ([`Event::Transmit`] or [`Event::Dropped`]) or [`Router::flush`]. The
    /// frame is already rewritten except its MAC addresses.
    Queued,
    /// For one of our addresses: hand it to the host (management plane).
    ToHost,
    /// An ARP frame that was used (learned from) and needs no answer: recycle it.
    Consumed,
    /// Recycle the frame; counted under the reason.
    Drop(RouterDrop),
    /// The frame is rewritten for forwarding out of `port` (TTL decremented, header checksum
    /// updated, MACs set, options updated, Ethernet padding cut: `14 + IP total length` bytes)
    /// but its datagram is longer than the port's MTU and may be fragmented (DF clear): make
    /// the fragments with [`frag::Fragmenter`] at `mtu` and transmit them on `port`, then
    /// recycle the frame (RFC 791 §3.2, RFC 1812 §5.2.6). Counted as `forwarded` and
    /// `fragmented`.
    Fragment {
        /// Output port.
        port: u8,
        /// The output port's IP MTU in bytes ([`Router::mtu`]).
        mtu: u16,
    },
}

/// Work from [`Router::poll`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Event<H> {
    /// Transmit `out[..len]` (an ARP request) on `port`.
    SendArp {
        /// Output port.
        port: u8,
        /// Bytes of `out` to send.
        len: usize,
    },
    /// A queued frame's next hop is resolved: write `dst`/`src` into its first 12 bytes
    /// ([`set_macs`]) and transmit `len` bytes on `port`. Counted as forwarded.
    Transmit {
        /// The frame's handle, as given to [`Router::process`].
        handle: H,
        /// Output port.
        port: u8,
        /// Bytes to send.
        len: usize,
        /// Destination MAC.
        dst: MacAddr,
        /// Source MAC (the output port's).
        src: MacAddr,
    },
    /// A queued frame's next hop is resolved, but its datagram is longer than `port`'s MTU
    /// (DF clear; the port's MTU was larger when it was queued, or it is one that needed
    /// fragmenting): write `dst`/`src` as for [`Event::Transmit`], then fragment its `len`
    /// bytes at `mtu` ([`frag::Fragmenter`]) and transmit the fragments on `port`. Counted as
    /// forwarded and fragmented.
    Fragment {
        /// The frame's handle, as given to [`Router::process`].
        handle: H,
        /// Output port.
        port: u8,
        /// Bytes of the frame (14 + IP total length).
        len: usize,
        /// Destination MAC.
        dst: MacAddr,
        /// Source MAC (the output port's).
        src: MacAddr,
        /// The output port's IP MTU in bytes.
        mtu: u16,
    },
    /// A queued frame is dropped: recycle it. Counted under `reason`.
    Dropped {
        /// The frame's handle.
        handle: H,
        /// Why.
        reason: RouterDrop,
    },
}

/// Write the Ethernet destination and source addresses of `frame` (at least 12 bytes).
#[inline]
pub fn set_macs(frame: &mut [u8], dst: MacAddr, src: MacAddr) {
    frame[ETH_DST].copy_from_slice(&dst.0);
    frame[ETH_SRC].copy_from_slice(&src.0);
}

/// The Ethernet source address of `frame` (at least 12 bytes): where a reply goes back to.
#[inline(always)]
fn src_mac(frame: &[u8]) -> MacAddr {
    let s = ETH_SRC.start;
    MacAddr([
        frame[s],
        frame[s + 1],
        frame[s + 2],
        frame[s + 3],
        frame[s + 4],
        frame[s + 5],
    ])
}

const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// The value written into Timestamp options at `now_ns`: milliseconds since boot with the
/// high-order bit set, RFC 791's mark of a time that is not milliseconds since midnight UT
/// (Gannet has no UT clock).
#[inline]
pub fn option_timestamp(now_ns: u64) -> u32 {
    ((now_ns / 1_000_000) as u32 & 0x7fff_ffff) | 0x8000_0000
}

/// Where a [`Router`] finds its FIB: owned ([`Fib`]: the router installs its ports' routes
/// and can add and delete routes) or shared read-only (`&Fib`: one FIB, built once, read
/// without a lock by the routers of several cores; routes are fixed).
pub trait FibRef<'a> {
    /// The FIB, for lookups.
    fn fib(&self) -> &Fib<'a>;
    /// The FIB for changes, `None` when it is shared read-only.
    fn fib_mut(&mut self) -> Option<&mut Fib<'a>>;
}

impl<'a> FibRef<'a> for Fib<'a> {
    #[inline(always)]
    fn fib(&self) -> &Fib<'a> {
        self
    }
    #[inline(always)]
    fn fib_mut(&mut self) -> Option<&mut Fib<'a>> {
        Some(self)
    }
}

impl<'a> FibRef<'a> for &Fib<'a> {
    #[inline(always)]
    fn fib(&self) -> &Fib<'a> {
        self
    }
    #[inline(always)]
    fn fib_mut(&mut self) -> Option<&mut Fib<'a>> {
        None
    }
}

/// One FIB next hop as the fast path sees it, cached per router (per core), filled by the slow
/// path when it forwards through the next hop and dropped, all at once, when the FIB changes
/// (its next-hop indexes are the FIB's) or the neighbour table says an entry that was Reachable
/// changed:
/// - [`ADJ_GATEWAY`]: through a gateway whose neighbour entry `neigh` is Reachable with nothing
///   queued: the destination MAC (the gateway's) and source MAC (the output port's) as the
///   frame's first 12 bytes, and the output port. DPDK l3fwd's per-port destination MAC array,
///   per next hop.
/// - [`ADJ_CONNECTED`]: a connected network on `port` (source MAC in `macs[6..]`): the
///   destination itself is the neighbour, looked up per frame
///   ([`NeighTable::reachable`](neigh::NeighTable::reachable)).
#[derive(Copy, Clone, Debug)]
#[repr(C, align(16))]
struct Adjacency {
    macs: [u8; 12],
    port: u8,
    kind: u8,
    neigh: u16,
}

/// [`Adjacency::kind`]: nothing cached (the slow path decides).
const ADJ_NONE: u8 = 0;
/// [`Adjacency::kind`]: a resolved gateway, MACs ready.
const ADJ_GATEWAY: u8 = 1;
/// [`Adjacency::kind`]: a connected network, the destination's MAC looked up per frame.
const ADJ_CONNECTED: u8 = 2;

const NO_ADJACENCY: Adjacency = Adjacency {
    macs: [0; 12],
    port: 0,
    kind: ADJ_NONE,
    neigh: 0,
};

/// The 14 + 20 bytes the fast path reads: Ethernet header and an IPv4 header without options.
const FAST_HDR: usize = ETH_HDR_LEN + ipv4::IPV4_MIN_HDR;

/// The first bytes of a frame the fast path takes, after the destination MAC: EtherType IPv4
/// (bytes 12–13) and version 4 with IHL 5 (byte 14), as a little-endian load of bytes 12–15
/// masked to 24 bits.
const IPV4_IHL5: u32 = u32::from_le_bytes([0x08, 0x00, 0x45, 0]);

#[inline(always)]
fn le32_at<const L: usize>(b: &[u8; L], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// By first byte of an address: 1 for 0/8, 127/8 and 224/3, neither a source to forward from
/// nor a unicast destination (see [`ipv4::is_martian_src`] and [`ipv4::classify_dst`]).
static NOT_UNICAST: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut a = 0;
    while a < 256 {
        t[a] = (a == 0 || a == 127 || a >= 224) as u8;
        a += 1;
    }
    t
};

/// The IPv4 router. `H` is the caller's frame handle (a page frame number in the kernel),
/// `N` neighbour entries with `Q` queued frames each, `F` the FIB: owned ([`Fib`], the
/// default) or shared read-only (`&Fib`, see [`FibRef`]; one per core over one FIB).
pub struct Router<'a, H: Copy, const N: usize = 64, const Q: usize = 8, F: FibRef<'a> = Fib<'a>> {
    ports: [PortConfig; MAX_PORTS],
    nports: usize,
    fib: F,
    neigh: NeighTable<H, N, Q>,
    icmp_bucket: TokenBucket,
    /// The last IP ID handed out.
    ip_ident: u16,
    ident_step: u16,
    counters: RouterCounters,
    /// What the last ARP frame taught the neighbour table (see [`Router::take_learned`]).
    learned: Option<NeighUpdate>,
    /// Bit `b` is set when some address of [`Router::is_own_or_broadcast`] has `b` as its low 6
    /// bits: most sources are cleared by one bit test, without the per-port comparisons.
    bad_src_bits: u64,
    /// Each port's MAC as the low 48 bits of a little-endian `u64` (`u64::MAX` for ports the
    /// router does not have: no frame matches), for the fast path's one-compare check.
    mac_words: [u64; MAX_PORTS],
    /// Per FIB next hop: the cached rewrite of the fast path (see [`Adjacency`]).
    adj: [Adjacency; MAX_NEXTHOPS],
    /// Whether some `adj` entry is valid (so dropping them all is a no-op otherwise).
    adj_filled: bool,
    /// Per port: the IP MTU, the largest IPv4 total length that may leave it (bytes).
    mtu: [u16; MAX_PORTS],
    _fib: core::marker::PhantomData<Fib<'a>>,
}

impl<'a, H: Copy, const N: usize, const Q: usize, F: FibRef<'a>> Router<'a, H, N, Q, F> {
    /// A router over `ports` (port `i` is `ports[i]`). With an owned `fib` (which should be
    /// empty) it installs for each port: the connected network (`Connected`), its address /32
    /// (`Local`) and, for networks up to /30, their broadcast address /32 (`Broadcast`). A
    /// shared `&Fib` is not changed: it must already hold those routes (built by a router
    /// with an owned FIB over the same ports, then [`Router::into_fib`]), else
    /// [`RouterError::FibLacksPort`].
    pub fn new(mut fib: F, ports: &[PortConfig], cfg: RouterConfig) -> Result<Self, RouterError> {
        if ports.is_empty() || ports.len() > MAX_PORTS {
            return Err(RouterError::BadPortCount);
        }
        for (i, p) in ports.iter().enumerate() {
            let a = p.addr.addr.to_bits();
            if ipv4::classify_dst(a) != DstClass::Unicast
                || (p.addr.len <= 30
                    && (a == p.addr.network().addr.to_bits() || p.addr.addr == p.addr.broadcast()))
            {
                return Err(RouterError::BadPortAddress);
            }
            if p.addr.len == 32 {
                return Err(RouterError::HostPrefixPort);
            }
            let port = i as u8;
            let Some(fib) = fib.fib_mut() else {
                if fib.fib().get(p.addr.network()) != Some(NextHop::Connected { port }) {
                    return Err(RouterError::FibLacksPort);
                }
                continue;
            };
            if fib.get(p.addr.network()).is_some() {
                return Err(RouterError::DuplicateNetwork);
            }
            fib.add(p.addr.network(), NextHop::Connected { port })?;
            fib.add(Ipv4Net::new(p.addr.addr, 32).unwrap(), NextHop::Local)?;
            if p.addr.len <= 30 {
                fib.add(
                    Ipv4Net::new(p.addr.broadcast(), 32).unwrap(),
                    NextHop::Broadcast,
                )?;
            }
        }
        let mut all = [PortConfig {
            mac: MacAddr::default(),
            addr: Ipv4Net::new(Ipv4Addr::UNSPECIFIED, 32).unwrap(),
        }; MAX_PORTS];
        all[..ports.len()].copy_from_slice(ports);
        let mut bad_src_bits = 0u64;
        for p in ports {
            let net = p.addr.network().addr.to_bits();
            let bcast = p.addr.broadcast().to_bits();
            for a in [p.addr.addr.to_bits(), net, bcast] {
                bad_src_bits |= 1 << (a & 63);
            }
        }
        let mut mac_words = [u64::MAX; MAX_PORTS];
        for (w, p) in mac_words.iter_mut().zip(ports) {
            let m = p.mac.0;
            *w = u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
        }
        Ok(Router {
            ports: all,
            nports: ports.len(),
            fib,
            neigh: NeighTable::new(cfg.neigh),
            icmp_bucket: TokenBucket::new(cfg.icmp_rate_per_sec, cfg.icmp_burst),
            ip_ident: cfg.ident_first.wrapping_sub(cfg.ident_step.max(1)),
            ident_step: cfg.ident_step.max(1),
            counters: RouterCounters::default(),
            learned: None,
            bad_src_bits,
            mac_words,
            adj: [NO_ADJACENCY; MAX_NEXTHOPS],
            adj_filled: false,
            mtu: [DEFAULT_MTU; MAX_PORTS],
            _fib: core::marker::PhantomData,
        })
    }

    /// The router's FIB, giving up the router (its neighbour table must hold no frame: see
    /// [`Router::flush`]). Build the FIB with an owned-FIB router and its
    /// [`Router::add_route`], then share it read-only between per-core routers.
    pub fn into_fib(self) -> F {
        debug_assert_eq!(self.neigh.queued(), 0, "frames still queued");
        self.fib
    }

    /// Install a static route `prefix → gateway`, replacing a static one with the same prefix
    /// ([`Router::add_static`] with [`Existing::Replace`]).
    ///
    /// # Errors
    /// As [`Router::add_static`].
    pub fn add_route(&mut self, prefix: Ipv4Net, gateway: Ipv4Addr) -> Result<(), RouterError> {
        self.add_static(prefix, gateway, Existing::Replace)
            .map(|_| ())
    }

    /// Install a static route `prefix → gateway` checked by [`check_route`] against the
    /// router's ports; it goes out of the first port whose network holds the gateway.
    /// `existing` says what happens when the FIB holds a static route for `prefix` already
    /// (one route per prefix): replaced, kept (`Ok(false)`: this route is not added), or
    /// refused as a duplicate. `Ok(true)` when the route was added.
    ///
    /// # Errors
    /// [`RouterError::Route`] naming why the route is refused (a duplicate with
    /// [`Existing::Refuse`]), [`RouterError::ReadOnlyFib`] with a shared FIB,
    /// [`RouterError::Fib`] when the FIB is full. A prefix whose FIB entry is a connected,
    /// local or broadcast route is [`RouteError::OverConnected`] even where the ports do not
    /// say so (a FIB built over other ports).
    pub fn add_static(
        &mut self,
        prefix: Ipv4Net,
        gateway: Ipv4Addr,
        existing: Existing,
    ) -> Result<bool, RouterError> {
        let ports = RouteCheck::new(self.ports().iter().map(|p| p.addr));
        let port = ports.check(prefix, gateway)?;
        let fib = self.fib.fib_mut().ok_or(RouterError::ReadOnlyFib)?;
        match fib.get(prefix) {
            Some(NextHop::Connected { .. } | NextHop::Local | NextHop::Broadcast) => {
                return Err(RouteError::OverConnected.into())
            }
            Some(NextHop::Via { .. }) if existing == Existing::Keep => return Ok(false),
            Some(NextHop::Via { .. }) if existing == Existing::Refuse => {
                let first = None;
                return Err(RouteError::Duplicate { prefix, first }.into());
            }
            _ => {}
        }
        let added = fib.add(
            prefix,
            NextHop::Via {
                port: port as u8,
                gateway,
            },
        );
        // A next-hop index may now name another next hop (indexes are reused).
        self.forget_adjacencies();
        added?;
        Ok(true)
    }

    /// Remove the route `prefix` ([`RouterError::ReadOnlyFib`] with a shared FIB).
    pub fn delete_route(&mut self, prefix: Ipv4Net) -> Result<(), RouterError> {
        let fib = self.fib.fib_mut().ok_or(RouterError::ReadOnlyFib)?;
        let deleted = fib.delete(prefix);
        self.forget_adjacencies();
        Ok(deleted?)
    }

    /// Switch to another FIB (live route reload, RCU style: call between frames, at the
    /// caller's quiescent point, never in the middle of [`Router::process`]). The new FIB
    /// must hold each port's connected route, as [`Router::new`] checks for a shared FIB;
    /// else [`RouterError::FibLacksPort`] and the router keeps its FIB. The neighbour table,
    /// queued frames, ICMP bucket and counters are kept: queued frames wait for a next-hop
    /// address, not for a FIB entry. Returns the FIB it used before, which the caller may
    /// retire once no router uses it.
    ///
    /// The per-core next-hop cache of the fast path is indexed by the FIB's next-hop indexes,
    /// which mean something else in another FIB: it is dropped here, and the first frame to
    /// each next hop of the new FIB takes the slow path (FIB lookup, neighbour lookup) and
    /// fills it again from the neighbour table, which survives.
    pub fn set_fib(&mut self, fib: F) -> Result<F, RouterError> {
        for (i, p) in self.ports().iter().enumerate() {
            if fib.fib().get(p.addr.network()) != Some(NextHop::Connected { port: i as u8 }) {
                return Err(RouterError::FibLacksPort);
            }
        }
        self.forget_adjacencies();
        Ok(core::mem::replace(&mut self.fib, fib))
    }

    /// Drop every cached next-hop rewrite (the FIB changed, or a neighbour entry did).
    #[cold]
    fn forget_adjacencies(&mut self) {
        if core::mem::take(&mut self.adj_filled) {
            self.adj = [NO_ADJACENCY; MAX_NEXTHOPS];
        }
    }

    /// After any call into the neighbour table: if an entry that was Reachable changed, the
    /// cached rewrites may name a stale MAC (or one whose frames must queue): drop them.
    #[inline]
    fn sync_adjacencies(&mut self) {
        if self.neigh.take_reachable_changed() {
            self.forget_adjacencies();
        }
    }

    /// Whether FIB next hop `nhi` has a cached gateway rewrite (tests).
    #[cfg(test)]
    fn adjacency_cached(&self, nhi: u32) -> bool {
        self.adj
            .get(nhi as usize)
            .is_some_and(|a| a.kind == ADJ_GATEWAY)
    }

    /// Set port `port`'s IP MTU: the largest IPv4 total length in bytes (header included,
    /// Ethernet header not) that may leave it; [`DEFAULT_MTU`] (1500) until set. A datagram
    /// longer than the egress port's MTU is fragmented ([`Action::Fragment`]) or, with DF set,
    /// answered with Destination Unreachable code 4 carrying the MTU (RFC 1191 §4,
    /// [`RouterDrop::FragNeeded`]). `mtu` must be at least [`MIN_MTU`] (68, RFC 791 §3.2),
    /// else [`RouterError::BadMtu`]; a port the router does not have is
    /// [`RouterError::NoSuchPort`]. Call it between frames (the dataplane does at boot, from
    /// the device's MTU or `mtuN=`).
    pub fn set_mtu(&mut self, port: usize, mtu: u16) -> Result<(), RouterError> {
        if port >= self.nports {
            return Err(RouterError::NoSuchPort);
        }
        if mtu < MIN_MTU {
            return Err(RouterError::BadMtu);
        }
        self.mtu[port] = mtu;
        Ok(())
    }

    /// Port `port`'s IP MTU in bytes (see [`Router::set_mtu`]); 0 for a port the router does
    /// not have.
    pub fn mtu(&self, port: usize) -> u16 {
        match port < self.nports {
            true => self.mtu[port],
            false => 0,
        }
    }

    /// The ports.
    pub fn ports(&self) -> &[PortConfig] {
        &self.ports[..self.nports]
    }

    /// The FIB (console `routes`: [`Fib::routes`]).
    pub fn fib(&self) -> &Fib<'a> {
        self.fib.fib()
    }

    /// What the last ARP reply to us given to [`Router::process`] said (from a sender on the
    /// port's network), taken once, whether or not this router had an entry for it; `None`
    /// after any other frame. With one router per core, hand it to the other cores'
    /// [`Router::learn`] (the reply may land on another core than the one that asked).
    #[inline]
    pub fn take_learned(&mut self) -> Option<NeighUpdate> {
        self.learned.take()
    }

    /// Apply what another core's router heard in an ARP reply to us: the entry for `u.ip` on
    /// `u.port`, if this router has one, becomes Reachable with `u.mac` (frames queued behind
    /// it are released by the next [`Router::poll`]); none is created (`arp_accept=0`: each
    /// core creates its own entries when it forwards). Returns whether the table changed
    /// (`false` for a port the router does not have or no entry). Does not set
    /// [`Router::take_learned`].
    pub fn learn(&mut self, u: NeighUpdate, now_ns: u64) -> bool {
        let changed = usize::from(u.port) < self.nports
            && self
                .neigh
                .confirm(u.ip, u.port, u.mac, Confirm::Reply, now_ns);
        self.sync_adjacencies();
        changed
    }

    /// Whether `src` is one of our port addresses, or the network or broadcast address of a
    /// connected network up to /30 (a /31 or /32 has neither: RFC 3021): a source that must
    /// not be forwarded from (RFC 1812 §5.3.7).
    #[inline(always)]
    fn is_own_or_broadcast(&self, src: u32) -> bool {
        (self.bad_src_bits >> (src & 63)) & 1 != 0 && self.own_or_broadcast_slow(src)
    }

    #[cold]
    #[inline(never)]
    fn own_or_broadcast_slow(&self, src: u32) -> bool {
        self.ports().iter().any(|p| {
            src == p.addr.addr.to_bits()
                || (p.addr.len <= 30
                    && (src == p.addr.network().addr.to_bits()
                        || src == p.addr.broadcast().to_bits()))
        })
    }

    /// The neighbour entries (console `neigh`).
    pub fn neighbours(&self) -> impl Iterator<Item = NeighInfo> + '_ {
        self.neigh.entries()
    }

    /// The counters.
    pub fn counters(&self) -> &RouterCounters {
        &self.counters
    }

    /// A frame (or the whole fragment train of one datagram, `fragmented`) this router
    /// counted `forwarded` was dropped by its egress port before any of it reached the TX
    /// ring: counted `tx_dropped` instead (and no longer `fragmented`). The caller counts the
    /// drop's reason on the egress port.
    pub fn tx_dropped(&mut self, fragmented: bool) {
        let c = &mut self.counters;
        c.forwarded = c.forwarded.saturating_sub(1);
        if fragmented {
            c.fragmented = c.fragmented.saturating_sub(1);
        }
        c.tx_dropped += 1;
    }

    /// Whether [`Router::poll`] has work that does not wait for a timer (an ARP request due,
    /// queued frames whose next hop resolved). Call `poll` after a burst when this is true, and
    /// in any case every few milliseconds for the timers.
    #[inline]
    pub fn needs_poll(&self) -> bool {
        self.neigh.needs_poll()
    }

    /// Frames held in neighbour queues.
    pub fn queued_frames(&self) -> usize {
        self.neigh.queued()
    }

    /// Decide what to do with `frame`, received on port `in_port` at `now_ns`, and rewrite it
    /// in place. `handle` names the frame's buffer: the router keeps it only when it returns
    /// [`Action::Queued`]. `icmp_out` is a spare buffer (at least
    /// [`icmp::ICMP_ERROR_MAX_FRAME`] bytes) used only when it returns [`Action::Icmp`].
    /// Never panics; every call counts exactly one outcome (see [`RouterCounters`]).
    ///
    /// The common case takes [`Router::forward_fast`]; everything else (and the first frame to
    /// each next hop) the out-of-line slow path, which does every check of RFC 1812 in order.
    #[inline(always)]
    pub fn process(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        handle: H,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        let frame_len = frame.len();
        if let Some((port, len)) = self.forward_fast_len(in_port, frame, frame_len, now_ns) {
            return Action::Forward { port, len };
        }
        self.process_slow_len(in_port, frame, frame_len, handle, now_ns, icmp_out)
    }

    /// The fast path of [`Router::process`], alone: a frame to this port's MAC carrying IPv4
    /// without options, with a good header checksum and total length, TTL > 1, unicast
    /// addresses (no martian, broadcast or own source), whose FIB route leads through a
    /// gateway this router has resolved (its rewrite cached per next hop: see
    /// [`Router::set_fib`]), or to a host on a connected network whose neighbour entry is
    /// Reachable with nothing queued (one neighbour lookup), is forwarded: TTL decremented
    /// with the RFC 1624 checksum update, MACs rewritten, counted as `rx` and `forwarded`, and
    /// `Some((port, len))` returned as [`Action::Forward`] would say. Anything else returns
    /// `None` having changed nothing (no byte, no counter): give it to
    /// [`Router::process_slow`] (or [`Router::process`]). Needs no ICMP buffer. A datagram
    /// longer than the egress port's MTU ([`Router::mtu`]) is refused too: the slow path
    /// fragments it or answers it.
    #[inline(always)]
    pub fn forward_fast(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        now_ns: u64,
    ) -> Option<(u8, usize)> {
        let frame_len = frame.len();
        self.forward_fast_len(in_port, frame, frame_len, now_ns)
    }

    /// [`Router::forward_fast`] for a frame of `frame_len` bytes of which `head` is the first
    /// `head.len()` (a frame received in several buffers, `head` the contiguous first one,
    /// holding the headers): every length check uses `frame_len`, and only the Ethernet and
    /// IPv4 headers in `head` are read and written. Returns `Some((port, len))` with `len` ≤
    /// `frame_len` the bytes of the frame to send (Ethernet padding cut). A `head` shorter
    /// than 34 bytes is refused (`None`); `frame_len` is meant to be ≥ `head.len()`.
    #[inline(always)]
    pub fn forward_fast_len(
        &mut self,
        in_port: usize,
        head: &mut [u8],
        frame_len: usize,
        now_ns: u64,
    ) -> Option<(u8, usize)> {
        let &want = self.mac_words.get(in_port)?;
        let f = head.first_chunk_mut::<FAST_HDR>()?;
        let dst_mac = u64::from_le_bytes([f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]]);
        if dst_mac & 0xffff_ffff_ffff != want
            || le32_at(f, ETHERTYPE.start) & 0xff_ffff != IPV4_IHL5
        {
            return None;
        }
        // RFC 1071 over the 20-byte header: its one's-complement sum is 0xffff exactly when the
        // plain sum of its 32-bit words is a non-zero multiple of 0xffff (2^16 ≡ 1 modulo
        // 0xffff, and folding with end-around carries never makes a non-zero sum 0; it is
        // non-zero, byte 14 being 0x45). In the machine's byte order: a byte swap multiplies
        // a word by 2^8 modulo 0xffff, which keeps multiples of 0xffff exactly those.
        let ip = ETH_HDR_LEN;
        let mut sum = 0u64;
        for k in 0..5 {
            sum += u64::from(le32_at(f, ip + 4 * k));
        }
        let total_len = usize::from(be16(f, ip + IPV4_TOTAL_LEN.start));
        let src = le32_at(f, ip + IPV4_SRC.start).swap_bytes();
        let dst = le32_at(f, ip + IPV4_DST.start).swap_bytes();
        let ttl = f[ip + IPV4_TTL];
        if !sum.is_multiple_of(0xffff)
            || total_len < ipv4::IPV4_MIN_HDR
            || ETH_HDR_LEN + total_len > frame_len
            || ttl <= 1
            || NOT_UNICAST[(src >> 24) as usize] | NOT_UNICAST[(dst >> 24) as usize] != 0
            || (self.bad_src_bits >> (src & 63)) & 1 != 0
        {
            return None;
        }
        let nhi = self.fib.fib().lookup_index(dst)?;
        let adj = *self.adj.get(nhi as usize)?;
        // The egress MTU (one load: `port % MAX_PORTS` needs no bounds check). Longer: the
        // slow path fragments it or answers "fragmentation needed".
        if total_len > usize::from(self.mtu[usize::from(adj.port) % MAX_PORTS]) {
            return None;
        }
        if adj.kind != ADJ_GATEWAY {
            return self.forward_connected(f, adj, dst, total_len, now_ns);
        }
        Some(self.forward_rewrite(f, &adj, total_len, now_ns))
    }

    /// The fast path's last step, the only one that writes: TTL and checksum, MACs, the
    /// neighbour entry's use, the counters. Returns the output port and the frame's length.
    #[inline(always)]
    fn forward_rewrite(
        &mut self,
        f: &mut [u8; FAST_HDR],
        adj: &Adjacency,
        total_len: usize,
        now_ns: u64,
    ) -> (u8, usize) {
        ipv4::decrement_ttl(&mut f[ETH_HDR_LEN..]);
        f[..12].copy_from_slice(&adj.macs);
        self.neigh.touch(usize::from(adj.neigh), now_ns);
        self.counters.rx += 1;
        self.counters.forwarded += 1;
        (adj.port, ETH_HDR_LEN + total_len)
    }

    /// The fast path for a next hop that is not a cached gateway: a connected network's host
    /// `dst` whose neighbour entry is Reachable with nothing queued is forwarded (one lookup);
    /// anything else is refused, unchanged. Out of line: the gateway case pays nothing for it.
    #[inline(never)]
    fn forward_connected(
        &mut self,
        f: &mut [u8; FAST_HDR],
        mut adj: Adjacency,
        dst: u32,
        total_len: usize,
        now_ns: u64,
    ) -> Option<(u8, usize)> {
        if adj.kind != ADJ_CONNECTED {
            return None;
        }
        let (neigh, mac) = self.neigh.reachable(dst, adj.port)?;
        adj.macs[..6].copy_from_slice(&mac.0);
        adj.neigh = neigh as u16;
        Some(self.forward_rewrite(f, &adj, total_len, now_ns))
    }

    /// [`Router::process`] without the fast path, for a frame [`Router::forward_fast`] did not
    /// take (any frame is handled correctly): every check in RFC 1812's order, ARP, ICMP,
    /// options, neighbour resolution and queueing; fills the next-hop cache.
    #[cold]
    #[inline(never)]
    pub fn process_slow(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        handle: H,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        let frame_len = frame.len();
        self.process_slow_len(in_port, frame, frame_len, handle, now_ns, icmp_out)
    }

    /// [`Router::process_slow`] for a frame of `frame_len` bytes of which `head` is the first
    /// `head.len()` (a frame received in several buffers; `head`, the contiguous first one,
    /// holds the headers). Length checks use `frame_len`; only `head` is read and written
    /// (the actions' `len` are frame lengths, ≤ `frame_len`). What would need bytes past the
    /// head is dropped as [`RouterDrop::BeyondHead`] (an IPv4 header not in it) or, for a
    /// datagram to us, goes to the host ([`Action::ToHost`]; an echo request longer than the
    /// head too: the management plane sees the frame linear); ICMP errors quote at most the
    /// head. A `frame_len` below
    /// `head.len()` cuts the head to `frame_len` bytes.
    #[cold]
    #[inline(never)]
    pub fn process_slow_len(
        &mut self,
        in_port: usize,
        head: &mut [u8],
        frame_len: usize,
        handle: H,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        self.counters.rx += 1;
        let head_len = head.len().min(frame_len);
        let frame = &mut head[..head_len];
        let a = self.classify(in_port, frame, frame_len, handle, now_ns, icmp_out);
        self.sync_adjacencies();
        let c = &mut self.counters;
        match a {
            Action::Forward { .. } => c.forwarded += 1,
            Action::Fragment { .. } => {
                c.forwarded += 1;
                c.fragmented += 1;
            }
            Action::Reply { .. } if be16(frame, ETHERTYPE.start) == arp::ETHERTYPE_ARP => {
                c.arp_replies += 1
            }
            Action::Reply { .. } => c.echo_replies += 1,
            Action::Icmp { cause, .. } => {
                c.icmp_sent += 1;
                c.drop(cause);
            }
            Action::Queued => c.queued += 1,
            Action::ToHost => c.to_host += 1,
            Action::Consumed => c.arp_consumed += 1,
            Action::Drop(r) => c.drop(r),
        }
        a
    }

    /// `frame` is the head (≤ `frame_len` bytes) of a frame of `frame_len` bytes.
    #[inline]
    fn classify(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        frame_len: usize,
        handle: H,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        if in_port >= self.nports {
            return Action::Drop(RouterDrop::UnknownPort);
        }
        if frame.len() < ETH_HDR_LEN {
            return Action::Drop(RouterDrop::Runt);
        }
        if be16(frame, ETHERTYPE.start) == ETHERTYPE_IPV6 {
            return Action::Drop(RouterDrop::Ipv6Off);
        }
        let port = self.ports[in_port];
        let to_us = frame[ETH_DST] == port.mac.0;
        if !to_us && frame[ETH_DST] != BROADCAST_MAC {
            return Action::Drop(RouterDrop::NotForUs);
        }
        match be16(frame, ETHERTYPE.start) {
            arp::ETHERTYPE_IPV4 if to_us => {
                self.ipv4(in_port, frame, frame_len, handle, now_ns, icmp_out)
            }
            arp::ETHERTYPE_IPV4 => Action::Drop(RouterDrop::LinkBroadcast),
            arp::ETHERTYPE_ARP => self.arp(in_port, frame, now_ns),
            _ => Action::Drop(RouterDrop::UnsupportedEthertype),
        }
    }

    fn arp(&mut self, in_port: usize, frame: &mut [u8], now_ns: u64) -> Action {
        let port = self.ports[in_port];
        let Some(a) = arp::parse(&frame[ETH_HDR_LEN..]) else {
            return Action::Drop(RouterDrop::BadArp);
        };
        if a.sha.0[0] & 1 != 0 {
            return Action::Drop(RouterDrop::BadArp);
        }
        let me = port.addr.addr.to_bits();
        let for_us = a.tpa == me;
        // Never learned: a sender naming one of our own MACs (frames for it would come back
        // to us) or addresses, as an ARP spoof or a looped-back frame would.
        let sender_ok = a.spa != me
            && !self
                .ports
                .iter()
                .any(|p| p.mac == a.sha || p.addr.addr.to_bits() == a.spa)
            && ipv4::classify_dst(a.spa) == DstClass::Unicast
            && port.addr.len < 32
            && port.addr.contains(Ipv4Addr::from_bits(a.spa))
            && a.spa != port.addr.broadcast().to_bits();
        // RFC 826: update an entry for the sender if we have one; add it if we are the target
        // of a request. Linux's arp_process with arp_accept=0 decides the state (see
        // `neigh::Confirm`): Reachable only from a reply unicast to us.
        let unicast_reply = a.op == arp::ARP_REPLY && frame[ETH_DST] == port.mac.0;
        let how = match a.op {
            _ if unicast_reply => Confirm::Reply,
            arp::ARP_REQUEST if for_us => Confirm::Request,
            _ => Confirm::Overheard,
        };
        let learned = sender_ok && self.neigh.confirm(a.spa, in_port as u8, a.sha, how, now_ns);
        if sender_ok && unicast_reply && for_us {
            self.learned = Some(NeighUpdate {
                ip: a.spa,
                port: in_port as u8,
                mac: a.sha,
            });
        }
        if for_us && a.op == arp::ARP_REQUEST {
            let reply = arp::Arp {
                op: arp::ARP_REPLY,
                sha: port.mac,
                spa: me,
                tha: a.sha,
                tpa: a.spa,
            };
            let len = arp::write(frame, a.sha, port.mac, &reply);
            return Action::Reply {
                port: in_port as u8,
                len,
            };
        }
        if for_us || learned {
            Action::Consumed
        } else {
            Action::Drop(RouterDrop::ArpNotForUs)
        }
    }

    #[inline(always)]
    fn ipv4(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        frame_len: usize,
        handle: H,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        let h = match ipv4::validate_len(&frame[ETH_HDR_LEN..], frame_len - ETH_HDR_LEN) {
            Ok(h) => h,
            Err(r) => return Action::Drop(r),
        };
        if ipv4::is_martian_src(h.src) || self.is_own_or_broadcast(h.src) {
            return Action::Drop(RouterDrop::MartianSrc);
        }
        match ipv4::classify_dst(h.dst) {
            DstClass::Unicast => {}
            DstClass::Martian => return Action::Drop(RouterDrop::MartianDst),
            DstClass::Multicast => return Action::Drop(RouterDrop::Multicast),
            DstClass::LimitedBroadcast => return Action::Drop(RouterDrop::Broadcast),
        }
        let mut h = h;
        let mut sr_hop = None;
        if h.header_len > ipv4::IPV4_MIN_HDR {
            match self.source_route_arrival(in_port, frame, &mut h, now_ns, icmp_out) {
                Ok(sr) => sr_hop = sr,
                Err(a) => return a,
            }
        }
        let Some(nhi) = self.fib.fib().lookup_index(h.dst) else {
            // A source route's next address we cannot reach: source route failed (RFC 1122
            // §3.3.5, "because of a routing problem"; Linux drops it silently).
            let (code, cause) = match sr_hop {
                Some(_) => (icmp::ICMP_SR_FAILED, RouterDrop::SourceRouteFailed),
                None => (icmp::ICMP_NET_UNREACH, RouterDrop::NoRoute),
            };
            return self.icmp_error(
                in_port,
                frame,
                &h,
                (icmp::ICMP_DEST_UNREACH, code, 0),
                cause,
                now_ns,
                icmp_out,
            );
        };
        let (out_port, nh_ip, via_gateway) = match self.fib.fib().next_hop(nhi) {
            NextHop::Connected { port } => (port, h.dst, false),
            NextHop::Via { port, gateway } => (port, gateway.to_bits(), true),
            NextHop::Local | NextHop::Broadcast if sr_hop.is_some() => {
                return Action::Drop(RouterDrop::SourceRouteFailed)
            }
            NextHop::Local => return self.local(in_port, frame, &h, now_ns, icmp_out),
            NextHop::Broadcast => return Action::Drop(RouterDrop::Broadcast),
        };
        if h.ttl <= 1 {
            return self.icmp_error(
                in_port,
                frame,
                &h,
                (icmp::ICMP_TIME_EXCEEDED, icmp::ICMP_TTL_EXCEEDED, 0),
                RouterDrop::TtlExpired,
                now_ns,
                icmp_out,
            );
        }
        // RFC 1812 §5.2.7.1 / RFC 1191 §4: too long for the egress port with DF set, answered
        // quoting the datagram as received (before its options are updated), as Linux's
        // ip_forward does; with DF clear it is forwarded and the caller fragments it.
        let mtu = self.mtu[usize::from(out_port) % MAX_PORTS];
        let too_long = h.total_len > usize::from(mtu);
        if too_long && h.df {
            return self.icmp_error(
                in_port,
                frame,
                &h,
                (
                    icmp::ICMP_DEST_UNREACH,
                    icmp::ICMP_FRAG_NEEDED,
                    u32::from(mtu),
                ),
                RouterDrop::FragNeeded,
                now_ns,
                icmp_out,
            );
        }
        if h.header_len > ipv4::IPV4_MIN_HDR {
            let out = (out_port, via_gateway);
            if let Err(a) =
                self.options_departure(in_port, frame, &h, sr_hop, out, now_ns, icmp_out)
            {
                return a;
            }
        }
        let len = ETH_HDR_LEN + h.total_len;
        ipv4::decrement_ttl(&mut frame[ETH_HDR_LEN..]);
        let src = self.ports[usize::from(out_port)].mac;
        let (resolved, cacheable) = self.neigh.resolve_cacheable(nh_ip, out_port, now_ns);
        match resolved {
            Resolve::Mac(dst) => {
                match (via_gateway, cacheable) {
                    (true, Some(neigh)) => self.cache_adjacency(nhi, out_port, dst, src, neigh),
                    (false, _) => self.cache_adjacency_connected(nhi, out_port, src),
                    (true, None) => {}
                }
                set_macs(frame, dst, src);
                match too_long {
                    false => Action::Forward {
                        port: out_port,
                        len,
                    },
                    true => Action::Fragment {
                        port: out_port,
                        mtu,
                    },
                }
            }
            // The queue keeps 16-bit frame lengths: a longer frame (only with an MTU above
            // 65521) cannot wait in it.
            Resolve::Pending(i) => match u16::try_from(len) {
                Ok(len16) => match self.neigh.enqueue(i, handle, len16) {
                    Ok(()) => Action::Queued,
                    Err(_) => Action::Drop(RouterDrop::NeighQueueFull),
                },
                Err(_) => Action::Drop(RouterDrop::NeighQueueFull),
            },
            Resolve::TableFull => Action::Drop(RouterDrop::NeighTableFull),
        }
    }

    /// Cache FIB next hop `nhi`'s rewrite for the fast path: through a gateway resolved by
    /// neighbour entry `neigh` (Reachable, nothing queued) to `dst` on `port` (MAC `src`).
    fn cache_adjacency(&mut self, nhi: u32, port: u8, dst: MacAddr, src: MacAddr, neigh: usize) {
        let (Some(a), Ok(neigh)) = (self.adj.get_mut(nhi as usize), u16::try_from(neigh)) else {
            return;
        };
        let mut macs = [0u8; 12];
        macs[..6].copy_from_slice(&dst.0);
        macs[6..].copy_from_slice(&src.0);
        *a = Adjacency {
            macs,
            port,
            kind: ADJ_GATEWAY,
            neigh,
        };
        self.adj_filled = true;
    }

    /// Cache FIB next hop `nhi` for the fast path: a connected network on `port` (MAC `src`).
    fn cache_adjacency_connected(&mut self, nhi: u32, port: u8, src: MacAddr) {
        let Some(a) = self.adj.get_mut(nhi as usize) else {
            return;
        };
        let mut macs = [0u8; 12];
        macs[6..].copy_from_slice(&src.0);
        *a = Adjacency {
            macs,
            port,
            kind: ADJ_CONNECTED,
            neigh: 0,
        };
        self.adj_filled = true;
    }

    /// A source route that cannot be followed: Destination Unreachable, source route failed
    /// (RFC 1122 §3.3.5, code 5), counted as `source_route_failed`.
    #[cold]
    fn source_route_failed(
        &mut self,
        in_port: usize,
        frame: &[u8],
        h: &ipv4::Ipv4Hdr,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        let code = (icmp::ICMP_DEST_UNREACH, icmp::ICMP_SR_FAILED, 0);
        self.icmp_error(
            in_port,
            frame,
            h,
            code,
            RouterDrop::SourceRouteFailed,
            now_ns,
            icmp_out,
        )
    }

    /// A malformed option: Parameter Problem pointing at byte `at` of the header (RFC 1812
    /// §4.3.3.5), counted as `bad_options`.
    #[cold]
    fn bad_option(
        &mut self,
        in_port: usize,
        frame: &[u8],
        h: &ipv4::Ipv4Hdr,
        at: usize,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        let pointer = (
            icmp::ICMP_PARAMETER_PROBLEM,
            icmp::ICMP_PP_POINTER,
            (at as u32) << 24,
        );
        self.icmp_error(
            in_port,
            frame,
            h,
            pointer,
            RouterDrop::BadOptions,
            now_ns,
            icmp_out,
        )
    }

    /// Options on arrival (IHL > 5; out of line so plain headers pay nothing for them): a
    /// source route (RFC 1812 §5.3.13.4, RFC 791) sent to one of our addresses makes its next
    /// address the destination (`h.dst` is updated and the route returned); elsewhere a loose
    /// route is forwarded like any datagram and a strict one has failed. `Err` is the action
    /// to take instead of forwarding.
    #[cold]
    #[inline(never)]
    fn source_route_arrival(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        h: &mut ipv4::Ipv4Hdr,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Result<Option<ipv4::SourceRoute>, Action> {
        let Some(sr) = ipv4::find_source_route(&frame[ETH_HDR_LEN..ETH_HDR_LEN + h.header_len])
        else {
            return Ok(None);
        };
        let fib = self.fib.fib();
        let for_us = fib
            .lookup_index(h.dst)
            .is_some_and(|i| fib.next_hop(i) == NextHop::Local);
        if !for_us {
            return match sr.strict {
                true => Err(self.source_route_failed(in_port, frame, h, now_ns, icmp_out)),
                false => Ok(None),
            };
        }
        match ipv4::source_route_next(&frame[ETH_HDR_LEN..ETH_HDR_LEN + h.header_len], &sr) {
            Ok(None) => Ok(None),
            Ok(Some(next)) if ipv4::classify_dst(next) == DstClass::Unicast => {
                h.dst = next;
                Ok(Some(sr))
            }
            Ok(Some(_)) => Err(self.source_route_failed(in_port, frame, h, now_ns, icmp_out)),
            Err(at) => Err(self.bad_option(in_port, frame, h, at, now_ns, icmp_out)),
        }
    }

    /// Options on departure (IHL > 5, out of line): advance a source route we are the
    /// current hop of (a strict one must not need a gateway), then update Record Route and
    /// Timestamp (RFC 1812 §5.3.13.5/6) with the outgoing port's address; the header checksum
    /// is recomputed when anything changed. A malformed option gets Parameter Problem pointing
    /// at the offending byte (§4.3.3.5; the header is quoted as it is, unchanged up to the
    /// error). `out` is the outgoing port and whether the next hop is a gateway.
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    fn options_departure(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        h: &ipv4::Ipv4Hdr,
        sr_hop: Option<ipv4::SourceRoute>,
        (out_port, via_gateway): (u8, bool),
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Result<(), Action> {
        let out_addr = self.ports[usize::from(out_port)].addr.addr.to_bits();
        if let Some(sr) = sr_hop {
            if sr.strict && via_gateway {
                return Err(self.source_route_failed(in_port, frame, h, now_ns, icmp_out));
            }
            let hdr = &mut frame[ETH_HDR_LEN..ETH_HDR_LEN + h.header_len];
            hdr[IPV4_DST].copy_from_slice(&h.dst.to_be_bytes());
            ipv4::source_route_advance(hdr, &sr, out_addr);
            ipv4::fill_checksum(hdr);
        }
        let ctx = ipv4::OptionContext {
            in_addr: self.ports[in_port].addr.addr.to_bits(),
            out_addr,
            timestamp: option_timestamp(now_ns),
        };
        let ports = &self.ports[..self.nports];
        let hdr = &mut frame[ETH_HDR_LEN..ETH_HDR_LEN + h.header_len];
        match ipv4::forward_options(hdr, &ctx, |a| {
            ports.iter().any(|p| p.addr.addr.to_bits() == a)
        }) {
            Ok(true) => {
                ipv4::fill_checksum(hdr);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(at) => Err(self.bad_option(in_port, frame, h, at, now_ns, icmp_out)),
        }
    }

    /// A datagram for one of our addresses: an ICMP echo request (not a fragment, valid ICMP
    /// checksum, no source route) is answered in place, from the address it was sent to
    /// (RFC 1812 §4.3.3.6, RFC 1122 §3.2.2.6) with the request's precedence and DSCP (§4.3.2.5
    /// MUST for the precedence; ECN not reflected), TTL [`icmp::ICMP_TTL`], a fresh ID and DF
    /// clear, back to the frame's source MAC on the input port. Its Record Route and Timestamp
    /// options are updated on arrival and again for the reply and returned (§4.3.3.6 SHOULD;
    /// [`ipv4::echo_reply_options`]); a malformed one is answered with Parameter Problem.
    /// Everything else goes to the host (management plane), source-routed echo requests too.
    fn local(
        &mut self,
        in_port: usize,
        frame: &mut [u8],
        h: &ipv4::Ipv4Hdr,
        now_ns: u64,
        icmp_out: &mut [u8],
    ) -> Action {
        let end = ETH_HDR_LEN + h.total_len;
        let hl = h.header_len;
        let at = ETH_HDR_LEN + hl;
        if end > frame.len() {
            // Past the head (a jumbo echo request too): the reply would be built in place and
            // its checksum is over the whole message, which only the host sees linear (the
            // management plane answers echo requests to its address).
            return Action::ToHost;
        }
        let is_echo = h.protocol == IPPROTO_ICMP
            && h.total_len >= hl + ICMP_HDR_LEN
            && be16(frame, ETH_HDR_LEN + IPV4_FLAGS_FRAG.start) & 0x3fff == 0
            && frame[at + ICMP_TYPE] == icmp::ICMP_ECHO_REQUEST
            && frame[at + ICMP_CODE] == 0
            && ipv4::ones_sum(&frame[at..end]) == 0xffff
            && !ipv4::has_source_route(&frame[ETH_HDR_LEN..at]);
        if !is_echo {
            return Action::ToHost;
        }
        let mut opts = [0u8; ipv4::IPV4_MAX_OPTIONS];
        let mut olen = 0;
        if hl > ipv4::IPV4_MIN_HDR {
            // On arrival, the pinged address is the one "known in the environment"; the reply
            // leaves from it too.
            let ctx = ipv4::OptionContext {
                in_addr: h.dst,
                out_addr: h.dst,
                timestamp: option_timestamp(now_ns),
            };
            let ports = self.ports;
            let nports = self.nports;
            let ours = |a| ports[..nports].iter().any(|p| p.addr.addr.to_bits() == a);
            if let Err(at) = ipv4::forward_options(&mut frame[ETH_HDR_LEN..at], &ctx, ours) {
                return self.bad_option(in_port, frame, h, at, now_ns, icmp_out);
            }
            match ipv4::echo_reply_options(&frame[ETH_HDR_LEN..at], &ctx, ours, &mut opts) {
                Some(n) => olen = n,
                None => return Action::Drop(RouterDrop::BadOptions),
            }
        }
        let new_hl = ipv4::IPV4_MIN_HDR + olen;
        let icmp_len = end - at;
        // The reply's options are never longer than the request's: the message moves left.
        frame.copy_within(at..end, ETH_HDR_LEN + new_hl);
        let new_end = ETH_HDR_LEN + new_hl + icmp_len;
        let port = self.ports[in_port];
        let prev_hop = src_mac(frame);
        set_macs(frame, prev_hop, port.mac);
        self.ip_ident = self.ip_ident.wrapping_add(self.ident_step);
        let ip = &mut frame[ETH_HDR_LEN..new_end];
        ip[IPV4_VER_IHL] = 0x40 | (new_hl / 4) as u8;
        ip[IPV4_TOS] &= 0xfc;
        ip[IPV4_TOTAL_LEN].copy_from_slice(&((new_hl + icmp_len) as u16).to_be_bytes());
        ip[IPV4_IDENT].copy_from_slice(&self.ip_ident.to_be_bytes());
        ip[IPV4_FLAGS_FRAG].copy_from_slice(&[0, 0]);
        ip[IPV4_TTL] = icmp::ICMP_TTL;
        ip[IPV4_SRC].copy_from_slice(&h.dst.to_be_bytes());
        ip[IPV4_DST].copy_from_slice(&h.src.to_be_bytes());
        ip[ipv4::IPV4_MIN_HDR..new_hl].copy_from_slice(&opts[..olen]);
        ipv4::fill_checksum(&mut ip[..new_hl]);
        // Echo (8) becomes Echo Reply (0): the type/code word changes, and the ICMP checksum
        // with it (RFC 1624).
        let old = be16(ip, new_hl + ICMP_TYPE);
        let new = u16::from(icmp::ICMP_ECHO_REPLY) << 8;
        let csum = new_hl + ICMP_CHECKSUM.start;
        let c = ipv4::csum_update16(be16(ip, csum), old, new);
        ip[new_hl + ICMP_TYPE] = icmp::ICMP_ECHO_REPLY;
        ip[csum..csum + 2].copy_from_slice(&c.to_be_bytes());
        Action::Reply {
            port: in_port as u8,
            len: new_end,
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[cold]
    fn icmp_error(
        &mut self,
        in_port: usize,
        frame: &[u8],
        h: &ipv4::Ipv4Hdr,
        (ty, code, rest): (u8, u8, u32),
        cause: RouterDrop,
        now_ns: u64,
        out: &mut [u8],
    ) -> Action {
        if !icmp::may_send_error_about(h, &frame[ETH_HDR_LEN..]) {
            self.counters.icmp_suppressed += 1;
            return Action::Drop(cause);
        }
        if !self.icmp_bucket.take(now_ns) {
            self.counters.icmp_rate_limited += 1;
            return Action::Drop(cause);
        }
        let port = self.ports[in_port];
        let prev_hop = src_mac(frame);
        self.ip_ident = self.ip_ident.wrapping_add(self.ident_step);
        match icmp::build_error(
            out,
            prev_hop,
            port.mac,
            port.addr.addr.to_bits(),
            self.ip_ident,
            ty,
            code,
            rest,
            h,
            &frame[ETH_HDR_LEN..],
        ) {
            Some(len) => Action::Icmp {
                port: in_port as u8,
                len,
                cause,
            },
            None => {
                self.counters.no_buffer += 1;
                Action::Drop(cause)
            }
        }
    }

    /// Advance the neighbour timers and return one piece of work, or `None`. Call it after
    /// each burst (and at least every few milliseconds) until it returns `None`. `out` is a
    /// spare buffer (≥ 60 bytes) used only by [`Event::SendArp`].
    pub fn poll(&mut self, now_ns: u64, out: &mut [u8]) -> Option<Event<H>> {
        loop {
            let ev = self.neigh.poll(now_ns);
            self.sync_adjacencies();
            match ev? {
                NeighEvent::Request { port, ip } => {
                    if out.len() < arp::ETH_ZLEN {
                        self.counters.no_buffer += 1;
                        continue;
                    }
                    let p = self.ports[usize::from(port)];
                    let req = arp::Arp {
                        op: arp::ARP_REQUEST,
                        sha: p.mac,
                        spa: p.addr.addr.to_bits(),
                        tha: MacAddr([0; 6]),
                        tpa: ip,
                    };
                    let len = arp::write(
                        &mut out[..arp::ETH_ZLEN],
                        MacAddr(BROADCAST_MAC),
                        p.mac,
                        &req,
                    );
                    self.counters.arp_requests += 1;
                    return Some(Event::SendArp { port, len });
                }
                NeighEvent::Release {
                    handle,
                    len,
                    port,
                    mac,
                } => {
                    self.counters.forwarded += 1;
                    let mtu = self.mtu[usize::from(port) % MAX_PORTS];
                    if usize::from(len) > ETH_HDR_LEN + usize::from(mtu) {
                        self.counters.fragmented += 1;
                        return Some(Event::Fragment {
                            handle,
                            port,
                            len: usize::from(len),
                            dst: mac,
                            src: self.ports[usize::from(port)].mac,
                            mtu,
                        });
                    }
                    return Some(Event::Transmit {
                        handle,
                        port,
                        len: usize::from(len),
                        dst: mac,
                        src: self.ports[usize::from(port)].mac,
                    });
                }
                NeighEvent::Dropped { handle, .. } => {
                    self.counters.drop(RouterDrop::NeighTimeout);
                    return Some(Event::Dropped {
                        handle,
                        reason: RouterDrop::NeighTimeout,
                    });
                }
                NeighEvent::Evicted { handle } => {
                    self.counters.drop(RouterDrop::NeighEvicted);
                    return Some(Event::Dropped {
                        handle,
                        reason: RouterDrop::NeighEvicted,
                    });
                }
            }
        }
    }

    /// Give back one queued frame (counted as `neigh_flushed`); call until `None` at shutdown.
    pub fn flush(&mut self) -> Option<H> {
        let h = self.neigh.flush();
        self.sync_adjacencies();
        let h = h?;
        self.counters.drop(RouterDrop::NeighFlushed);
        Some(h)
    }
}

impl core::ops::AddAssign<&RouterCounters> for RouterCounters {
    /// Add another router's counters (one router per core: the router-wide totals).
    fn add_assign(&mut self, o: &RouterCounters) {
        self.rx += o.rx;
        self.forwarded += o.forwarded;
        self.tx_dropped += o.tx_dropped;
        self.arp_replies += o.arp_replies;
        self.echo_replies += o.echo_replies;
        self.arp_consumed += o.arp_consumed;
        self.to_host += o.to_host;
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a += b;
        }
        self.queued += o.queued;
        self.icmp_sent += o.icmp_sent;
        self.icmp_rate_limited += o.icmp_rate_limited;
        self.icmp_suppressed += o.icmp_suppressed;
        self.no_buffer += o.no_buffer;
        self.arp_requests += o.arp_requests;
        self.fragmented += o.fragmented;
    }
}
