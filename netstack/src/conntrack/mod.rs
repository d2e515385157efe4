//! Connection tracking, sans I/O: a fixed-capacity table of flows keyed by their 5-tuples
//! (both directions find one entry), TCP states as Linux keeps them, UDP and ICMP query
//! flows, idle timeouts of the RFCs, expiry without a global scan, a flood policy that never
//! evicts an established flow, and the stateful firewall over them. The NAT ([`crate::nat`])
//! keeps its sessions in the same table. No heap, no clock (every call takes `now` in
//! nanoseconds), no `unsafe`; the kernel wiring is a later step (docs/DESIGN.md, *Stateful
//! network functions*).
//!
//! * [`tcp`]: the TCP state machine, Linux's `tcp_conntracks` table.
//! * [`table`]: the table over caller storage: two tuples per entry, one hash for both, one
//!   LRU list per timeout class (expiry by heads, lazy expiry on lookup), the flood policy,
//!   the memory per entry.
//! * [`mod@parse`]: an Ethernet/IPv4 frame to its flow: tuple, TCP flags, ICMP query or error
//!   with the embedded header; hostile input refused by reason.
//! * [`track`]: a packet's effect on its entry (direction, TCP transition, class), shared by
//!   the firewall and the NAT.
//! * [`show`]: an entry as a console listing line and a filter over entries (the session
//!   table listed on the console, issue 38 item 7).
//! * [`firewall`]: the policy "new connections only from inside, established and related
//!   (ICMP errors and RSTs of known flows) from anywhere", every refusal counted by reason.

pub mod firewall;
pub mod parse;
pub mod show;
pub mod table;
pub mod tcp;
pub mod track;

pub use firewall::{Firewall, FwCounters, FwDrop, FwVerdict};
pub use parse::{parse, Flow, ParseError, L4};
pub use table::{Class, Entry, Full, Table, TableCounters, TableError, Timeouts, NIL};
pub use tcp::{TcpFlags, TcpState};

/// The side a packet arrived from. An entry keeps one tuple per side: the packet as it looks
/// when it arrives from there (a firewall's outside tuple is the inside one reversed; a NAT's
/// names the translated address).
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum Side {
    /// The protected network (the NAT's private addresses).
    Inside = 0,
    /// The rest of the world.
    Outside = 1,
}

impl Side {
    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Inside => Side::Outside,
            Side::Outside => Side::Inside,
        }
    }
}

/// A flow's 5-tuple as one packet carries it, addresses and ports in host order. For ICMP
/// queries (echo) both ports hold the query identifier (Linux's conntrack keys ICMP by id),
/// so a reply, addresses swapped, reverses to the request's tuple.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, Hash)]
pub struct Tuple {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port (ICMP: the identifier).
    pub sport: u16,
    /// Destination port (ICMP: the identifier).
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl Tuple {
    /// The tuple of a packet going the other way.
    pub fn reversed(self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }

    /// A 64-bit hash keyed with `seed` (SplitMix64's finaliser, twice).
    pub fn hash(&self, seed: u64) -> u64 {
        let a = (u64::from(self.src) << 32) | u64::from(self.dst);
        let b =
            (u64::from(self.sport) << 32) | (u64::from(self.dport) << 16) | u64::from(self.proto);
        crate::rng::mix(crate::rng::mix(a ^ seed) ^ b)
    }
}
