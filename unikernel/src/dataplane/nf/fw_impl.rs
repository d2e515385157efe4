//! The stock connection-tracking firewall (`mode=firewall`): `netstack::conntrack::firewall`
//! (Linux nf_conntrack's TCP states, UDP and ICMP flows, related ICMP errors and RSTs;
//! sans-IO, host-tested) run as a network function, one per forwarding core over a table
//! carved from the zone at boot (`setup::firewall`).
//!
//! Shape: a bump in the wire between two links, port 0 the inside, port 1 the outside, frames
//! forwarded untouched (as `mode=acl`). The policy: new connections only from the inside;
//! established traffic, its replies, ICMP errors quoting a tracked flow and RSTs of tracked
//! connections from anywhere; every other IPv4 frame from the outside dropped and counted by
//! reason (`drops`, indexed as [`DROP_NAMES`]). Frames that are not IPv4 (ARP) pass, as the
//! ACL lets them.
//!
//! One core per port pair: both directions of a connection must meet one table, and unlike
//! the NAT the firewall does not hand frames between cores (`queues=` > 1 is a config error).

use super::{CounterDef, CounterValues, Ctx, NetworkFunction, Packet, Verdict};
use crate::dataplane::percore::Platform;
use crate::dataplane::slots::CoreSlots;
use netstack::conntrack::firewall::{Firewall, FwVerdict};
use netstack::conntrack::Side;

/// The drop reasons' names, by index in the `drops` counter (`FwDrop`'s, in
/// `netstack::conntrack::firewall::FwCounters`' order).
pub const DROP_NAMES: [&str; 6] = [
    "malformed",
    "new_from_outside",
    "unrelated_icmp_error",
    "tcp_invalid",
    "unmatched_reply",
    "table_full",
];

/// The firewall's counters: `STATS` `nf_counters`, `/metrics`
/// `gannet_nf_firewall_<name>_total`.
const COUNTERS: &[CounterDef] = &[
    CounterDef::one(
        "established",
        "Frames accepted as part of a tracked connection, either way (frames).",
    ),
    CounterDef::one("new", "Connections opened from the inside (frames)."),
    CounterDef::one(
        "related",
        "ICMP errors accepted quoting a tracked connection (frames).",
    ),
    CounterDef::per_index(
        "drops",
        "reason",
        DROP_NAMES.len(),
        "Frames the firewall dropped, by reason index: 0 malformed, 1 new_from_outside, 2 unrelated_icmp_error, 3 tcp_invalid, 4 unmatched_reply, 5 table_full (frames).",
    ),
    CounterDef::gauge(
        "connections",
        "Connections tracked now, summed over the cores (connections; each core holds fw_sessions).",
    ),
];

/// The stock firewall of one core (see the `fw_impl` module's documentation).
pub struct FirewallNf {
    fw: Firewall<'static>,
}

impl core::fmt::Debug for FirewallNf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FirewallNf")
            .field("counters", &self.fw.counters())
            .finish()
    }
}

/// What [`FirewallNf`] decided for a frame (two verdicts: the fused loop's `match` stays
/// branches).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
enum Step {
    Forward,
    Drop,
}

impl FirewallNf {
    /// The firewall `fw` on a core.
    pub fn new(fw: Firewall<'static>) -> FirewallNf {
        FirewallNf { fw }
    }

    /// The firewall (its table and counters).
    pub fn firewall(&self) -> &Firewall<'static> {
        &self.fw
    }

    /// The frame judged and tracked. Out of line, as the NAT's: inlined, the tracker's
    /// `match`es become jump tables the `nocall` check cannot bound.
    #[inline(never)]
    fn decide(&mut self, pkt: &Packet<'_>) -> Step {
        let from = if pkt.in_port() == 0 {
            Side::Inside
        } else {
            Side::Outside
        };
        // A frame of several pages (jumbo) is judged by its headers in the first page.
        match self
            .fw
            .filter_len(pkt.head(), pkt.len(), from, pkt.now_ns())
        {
            FwVerdict::Accept | FwVerdict::NotIpv4 => Step::Forward,
            FwVerdict::Drop(_) => Step::Drop,
        }
    }
}

impl NetworkFunction for FirewallNf {
    const NAME: &'static str = "firewall";
    const CLOCK: bool = true;
    const TAKES: bool = false;
    const COUNTERS: &'static [CounterDef] = COUNTERS;

    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        match self.decide(pkt) {
            Step::Forward => Verdict::Forward,
            Step::Drop => Verdict::Drop,
        }
    }

    /// Expired connections freed beyond the per-frame sweep.
    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.fw.tick(ctx.now_ns(), super::nat_impl::TICK_SWEEP);
    }

    fn counters(&self, out: &mut CounterValues) {
        let c = self.fw.counters();
        out.set(0, c.established);
        out.set(1, c.new);
        out.set(2, c.related);
        out.set_per_index(
            3,
            [
                c.malformed,
                c.new_from_outside,
                c.unrelated_icmp_error,
                c.tcp_invalid,
                c.unmatched_reply,
                c.table_full,
            ],
        );
        out.set(4, self.fw.connections() as u64);
    }
}

/// Each CPU's firewall from the boot (`setup::firewall`) until its core takes it.
static FWS: CoreSlots<Firewall<'static>> = CoreSlots::new();

/// Keep `fw` for core `k` until [`take_firewall`] (the boot, before any core starts).
pub fn install_firewall(k: usize, fw: Firewall<'static>) {
    FWS.put(k, fw);
}

/// Core `k`'s firewall, once.
pub fn take_firewall(k: usize) -> Option<Firewall<'static>> {
    FWS.take(k)
}
