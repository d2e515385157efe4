//! The stock ACL firewall (`mode=acl`) on the NF API: every IPv4 frame's 5-tuple classified by
//! the rule set ([`netstack::acl`]: tuple-space search, first match wins), allowed frames
//! forwarded untouched out of the other port, denied ones dropped (`nf.dropped`); frames that
//! are not IPv4 (ARP, IPv6, ...) pass. Each rule's hits are counted per core in a shared table
//! ([`AclTable`]), which the console's `acl` sums, and which `STATS` and `/metrics` show as the
//! NF's own counters ([`Acl::COUNTERS`](NetworkFunction::COUNTERS)): `rule_hits` per rule for
//! the first [`STATS_RULES`] rules, `later_rule_hits` for the rest summed, `default_hits`.
//!
//! The set is replaced live ([`ACL`], a [`Shared`]): each core classifies a whole burst with
//! the set it read at its last quiescent point and switches in its tick ([`AclCore::refresh`]),
//! so a frame is judged by the old set or the new one, never by neither: a frame both allow is
//! forwarded across the swap, none is held back or dropped for it. The hits of a new set start
//! from 0.

pub use super::acl_table::{AclBuildError, AclTable};
use super::{CounterDef, CounterValues, NetworkFunction, Packet, Reader, Shared, Verdict};
use crate::dataplane::MAX_CORES;
use core::sync::atomic::{AtomicU64, Ordering};
use netstack::acl::{Action, FiveTuple};
use netstack::wire::{IPPROTO_TCP, IPPROTO_UDP};

/// Rules whose hits `STATS` and `/metrics` show one by one (`rule_hits`, rules 0 to 31 in the
/// rules file's order); the hits of later rules are summed (`later_rule_hits`). Bounded so
/// that every core's snapshot and the `STATS` line keep a fixed size (the console's `acl`
/// prints every rule).
pub const STATS_RULES: usize = 32;

/// The rule set every core reads (`mode=acl`), replaced live (console `acl reload`, `PUT
/// /rules`): set once at boot, before any core starts; unset in other modes.
pub static ACL: spin::Once<Shared<AclTable, MAX_CORES>> = spin::Once::new();

/// One core's firewall over the published rule set: its [`Acl`] (what the poll loop runs) and
/// its [`Reader`] of [`ACL`], switched at the core's quiescent point ([`AclCore::refresh`]).
pub struct AclCore {
    /// The firewall over the set this core uses now.
    pub nf: Acl,
    reader: Reader<AclTable>,
    shared: &'static Shared<AclTable, MAX_CORES>,
    core: usize,
}

impl core::fmt::Debug for AclCore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AclCore")
            .field("core", &self.core)
            .field("reader", &self.reader)
            .finish()
    }
}

impl AclCore {
    /// Core `k`'s firewall over `shared`'s current set.
    pub fn new(shared: &'static Shared<AclTable, MAX_CORES>, k: usize) -> AclCore {
        let reader = Reader::new(shared, k);
        AclCore {
            nf: Acl::new(reader.get(), k),
            reader,
            shared,
            core: k,
        }
    }

    /// At this core's quiescent point (its tick, between poll iterations: no frame is being
    /// classified): switch to the newest set if one was published (one `Acquire` load when
    /// none was), and record that this core no longer reads the one before. Returns whether
    /// it switched. The hits of the new set start from 0.
    pub fn refresh(&mut self) -> bool {
        if !self.reader.refresh(self.shared) {
            return false;
        }
        self.nf = Acl::new(self.reader.get(), self.core);
        true
    }

    /// The set this core uses now.
    pub fn table(&self) -> &'static AclTable {
        self.reader.get()
    }
}

/// `mode=acl` on one core: the table's rules, this core's row of hit counters.
#[derive(Copy, Clone, Debug)]
pub struct Acl {
    acl: &'static netstack::acl::Acl<'static>,
    hits: &'static [AtomicU64],
}

impl Acl {
    /// The firewall of core `k` over `table`.
    pub fn new(table: &'static AclTable, k: usize) -> Acl {
        Acl {
            acl: &table.acl,
            hits: table.row(k),
        }
    }
}

/// Offset of the Protocol field in the IPv4 header (RFC 791 §3.1), bytes.
const IPV4_PROTOCOL: usize = 9;

/// The 5-tuple of `pkt`, when it is IPv4: ports from its TCP or UDP header when it is a first
/// (or only) fragment, else 0 (a later fragment carries no transport header). The ports are
/// the first four bytes of either header (RFC 768, RFC 9293 §3.1), read from the one IPv4 view.
#[inline(always)]
fn five_tuple(pkt: &Packet<'_>) -> Option<FiveTuple> {
    let ip = pkt.ipv4()?;
    // The Protocol field as the byte it is: `next_header()` maps it to smoltcp's enum and
    // `u8::from` maps it back, an out-of-line call and two jump tables per frame. The view is
    // checked (`Packet::ipv4`), so its 20-byte header holds the byte.
    let &proto = ip.as_ref().get(IPV4_PROTOCOL)?;
    let ports = (proto == IPPROTO_UDP || proto == IPPROTO_TCP) && ip.frag_offset() == 0;
    let (sport, dport) = match ip.payload().first_chunk::<4>() {
        Some(p) if ports => (
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        ),
        _ => (0, 0),
    };
    Some(FiveTuple {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        proto,
        sport,
        dport,
    })
}

impl NetworkFunction for Acl {
    const NAME: &'static str = "acl";
    const TAKES: bool = false;
    // `/metrics`: gannet_nf_acl_rule_hits_total{rule="N"}, gannet_nf_acl_later_rule_hits_total,
    // gannet_nf_acl_default_hits_total.
    const COUNTERS: &'static [CounterDef] = &[
        CounterDef::per_index(
            "rule_hits",
            "rule",
            STATS_RULES,
            "Frames matched by each rule, numbered from 0 in the rules file's order (the first 32 rules).",
        ),
        CounterDef::one(
            "later_rule_hits",
            "Frames matched by a rule past the first 32, summed.",
        ),
        CounterDef::one(
            "default_hits",
            "Frames no rule matched (the default action's).",
        ),
    ];

    /// This core's row: one load per rule (every 10 ms; 10,000 rules take a few µs).
    fn counters(&self, out: &mut CounterValues) {
        let load = |h: &AtomicU64| h.load(Ordering::Relaxed);
        let n = self.acl.len();
        let (shown, later) = self.hits[..n.min(self.hits.len())].split_at(n.min(STATS_RULES));
        out.set_per_index(0, shown.iter().map(load));
        out.set(1, later.iter().map(load).sum());
        out.set(2, self.hits.get(n).map_or(0, load));
    }

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        let Some(t) = five_tuple(pkt) else {
            return Verdict::Forward;
        };
        let m = self.acl.classify(&t);
        let i = m.rule.map_or(self.acl.len(), |r| r as usize);
        if let Some(h) = self.hits.get(i) {
            // This core is the row's only writer: a load and a store, no locked RMW.
            h.store(h.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        match m.action {
            Action::Allow => Verdict::Forward,
            Action::Deny => Verdict::Drop,
        }
    }
}
