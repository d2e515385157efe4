//! Snapshots: a core's counters copied for another core (the boot CPU's `stats`, `pools`,
//! `/metrics` and `quit`). The control plane formats these, never the live per-core state.

use drivers::nic::DriverStats;
use mm::page_pool::{PagePool, PagePoolStats, RefillMode};
use netstack::config::PORTS;
use netstack::router::v6::Counters6;
use netstack::router::RouterCounters;
use netstack::{MacAddr, PortCounters};

/// One page_pool's counters.
#[derive(Copy, Clone, Debug)]
pub struct PoolSnap {
    /// Pool id (= global port number).
    pub id: u32,
    /// Pages out of the pool.
    pub in_flight: u64,
    /// Pages in the alloc cache.
    pub cached: usize,
    /// Bulk or single refill.
    pub mode: RefillMode,
    /// Event counters.
    pub stats: PagePoolStats,
}

impl PoolSnap {
    /// The counters of `p` now.
    pub fn of(p: &PagePool) -> PoolSnap {
        PoolSnap {
            id: p.id(),
            in_flight: p.in_flight(),
            cached: p.cached(),
            mode: p.refill_mode(),
            stats: p.stats(),
        }
    }
}

/// Router mode, per core: neighbour updates between the cores' routers.
#[derive(Copy, Clone, Default, Debug)]
pub struct RouterSync {
    /// Neighbour updates learned from ARP and pushed to another core's ring (one per other
    /// core).
    pub neigh_sent: u64,
    /// Neighbour updates from other cores applied to this core's table.
    pub neigh_applied: u64,
    /// Neighbour updates not sent because the other core's ring was full.
    pub neigh_dropped: u64,
}

impl core::ops::AddAssign<&RouterSync> for RouterSync {
    fn add_assign(&mut self, o: &RouterSync) {
        self.neigh_sent += o.neigh_sent;
        self.neigh_applied += o.neigh_applied;
        self.neigh_dropped += o.neigh_dropped;
    }
}

/// One core's router counters.
#[derive(Copy, Clone, Default, Debug)]
pub struct RouterSnap {
    /// Frame outcomes and the rest of [`RouterCounters`].
    pub counters: RouterCounters,
    /// Frames held in the neighbour queues now.
    pub queued_now: u64,
    /// Cross-core neighbour updates and management hand-offs.
    pub sync: RouterSync,
    /// The IPv6 router's counters and the frames it holds queued now (`ip6_0=`/`ip6_1=`).
    pub v6: Option<(Counters6, u64)>,
}

/// Where a busy poll iteration's cycles go (TSC cycles; guest instructions under icount).
#[derive(Copy, Clone, Default, Debug)]
pub struct Profile {
    /// Cycles in poll iterations that did work.
    pub busy_cycles: u64,
    /// Busy poll iterations.
    pub busy_iters: u64,
    /// Busy-iteration cycles by phase: RX + forward + TX post, TX reap, RX refill, kick.
    pub phase_cycles: [u64; 4],
    /// Notifications written.
    pub kicks: u64,
    /// Idle halts taken.
    pub halts: u64,
    /// Cycles in page_pool slow-path allocations.
    pub refill_cycles: u64,
}

/// A core's port pair (or queue pair), as published.
#[derive(Copy, Clone, Debug)]
pub struct PairSnap {
    /// Pair number (= core number).
    pub pair: usize,
    /// Port MACs.
    pub macs: [MacAddr; PORTS],
    /// Port counters.
    pub counters: [PortCounters; PORTS],
    /// Driver counters.
    pub nic: [DriverStats; PORTS],
    /// The pair's page_pools.
    pub pools: [PoolSnap; PORTS],
    /// Cycle profile, kicks, halts.
    pub prof: Profile,
    /// Pages on this core's pcp list.
    pub pcp_count: u64,
    /// Router mode: this core's router.
    pub router: Option<RouterSnap>,
    /// The network function's verdicts on this core.
    pub nf: netstack::stats::NfCounters,
    /// The network function's own counters on this core, as last read (every 10 ms and
    /// before `quit`); none for an NF that declares none.
    pub nf_own: netstack::stats::CounterValues,
    /// The management plane's frames on this core; `None` when this core's ports carry no
    /// management address.
    pub mgmt: Option<netstack::stats::MgmtPath>,
    /// The pair is torn down (after `quit`).
    pub done: bool,
    /// Pages that did not come back at teardown.
    pub leaked: u64,
}

/// The router counters summed over every core's router (`None` outside router mode).
pub fn router_totals(pairs: &[PairSnap]) -> Option<RouterSnap> {
    let mut total: Option<RouterSnap> = None;
    for r in pairs.iter().filter_map(|p| p.router.as_ref()) {
        let t = total.get_or_insert_with(RouterSnap::default);
        t.counters += &r.counters;
        t.queued_now += r.queued_now;
        t.sync += &r.sync;
        if let Some((c, q)) = &r.v6 {
            let (tc, tq) = t.v6.get_or_insert_with(Default::default);
            *tc += c;
            *tq += q;
        }
    }
    total
}
