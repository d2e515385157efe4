//! The `STATS {json}` line, the `pools` console lines and the `/metrics` body, formatted from
//! snapshots only: the forwarding cores' [`PairSnap`]s and a [`SystemSnap`] of the rest.
//!
//! The schema is [`netstack::stats::Stats`] (its keys and units are documented there; the host
//! tools parse the line into the same type): [`stats`] builds one from the snapshots, and it is
//! serialised with serde-json-core into a static buffer of [`JSON_MAX`] bytes, large enough for
//! the largest value (16 cores, every counter at `u64::MAX`; a netstack test checks it). The
//! Prometheus exposition is [`netstack::stats::write_prometheus`] of the same value.

use crate::dataplane::snap::{router_totals, PairSnap, PoolSnap};
use crate::println;
use core::fmt;
use log::error;
use netstack::stats::{
    to_json, CounterValues, CpuStats, MgmtStats, NeighSync, NfCounters, PhaseCycles, PoolStats,
    PortDrops, PortStats, Router6Stats, RouterStats, Stats, JSON_MAX, POOL_JSON_MAX,
};
use netstack::{Mode, RefillMode};

// Every forwarding core fits in the schema's fixed-size arrays.
const _: () = assert!(crate::percpu::MAX_CPUS <= netstack::stats::MAX_CPUS);

/// What the cores run (`appliance::Appliance::label`: the NF's name, or the stock mode), for
/// `STATS` `nf_name` and the `/metrics` `nf` label; set when forwarding starts.
pub static NF_NAME: spin::Once<&'static str> = spin::Once::new();

/// What `STATS` and `/metrics` need besides the pairs' snapshots, copied by the caller.
#[derive(Copy, Clone, Debug)]
pub struct SystemSnap {
    /// Forwarding mode.
    pub mode: Mode,
    /// What the cores run ([`NF_NAME`], else the mode).
    pub nf_name: &'static str,
    /// TSC frequency (Hz).
    pub tsc_hz: u64,
    /// CPUs online.
    pub cpus_online: usize,
    /// virtio-net queue pairs per port.
    pub queues: usize,
    /// Free pages (buddy + pcp lists) when forwarding started.
    pub free_pages_boot: u64,
    /// Free pages in the buddy lists now (the pairs' pcp lists are added to it).
    pub zone_free_pages: u64,
    /// Free buddy blocks per order (`/metrics` only).
    pub buddyinfo: [u64; mm::MAX_ORDER + 1],
    /// Router mode: the FIB and its live reloads.
    pub fib: Option<netstack::stats::FibStats>,
    /// ACL mode: the rule set and its live replacements.
    pub acl: Option<netstack::stats::AclStats>,
}

/// The `router` and `router6` objects: the routers' counters summed over `pairs` (`None`
/// outside router mode, and `router6` without IPv6).
fn router_stats(pairs: &[PairSnap]) -> (Option<RouterStats>, Option<Router6Stats>) {
    let Some(rs) = router_totals(pairs) else {
        return (None, None);
    };
    let y = &rs.sync;
    let sync = NeighSync {
        sent: y.neigh_sent,
        applied: y.neigh_applied,
        dropped: y.neigh_dropped,
    };
    (
        Some(RouterStats::new(&rs.counters, rs.queued_now, sync)),
        rs.v6.map(|(c, q)| Router6Stats::new(&c, q)),
    )
}

/// The `STATS` value of `pairs` (this core's first, then the others' last published).
pub fn stats(pairs: &[PairSnap], sys: &SystemSnap) -> Stats {
    let sum = |g: fn(&PairSnap) -> u64| pairs.iter().map(g).sum::<u64>();
    let forwarded = |p: &PairSnap| p.counters.iter().map(|c| c.tx).sum::<u64>();
    let pcp = sum(|p| p.pcp_count);
    // Multi-queue: a core's two "ports" are queue pair `cpu` of ports 0 and 1.
    let mq = sys.queues > 1;
    let (router, router6) = router_stats(pairs);
    let mut s = Stats {
        mode: sys.mode,
        tsc_hz: sys.tsc_hz,
        busy_cycles: sum(|p| p.prof.busy_cycles),
        forwarded: pairs.iter().map(forwarded).sum(),
        kicks: sum(|p| p.prof.kicks),
        halts: sum(|p| p.prof.halts),
        cpus_online: sys.cpus_online as u32,
        pairs: pairs.len() as u32,
        queues: sys.queues as u32,
        pcp_count: pcp,
        refill_cycles: sum(|p| p.prof.refill_cycles),
        refill_pages: sum(|p| p.pools.iter().map(|q| q.stats.refill_pages).sum()),
        free_pages_boot: sys.free_pages_boot,
        free_pages_now: sys.zone_free_pages + pcp,
        busy_iters: sum(|p| p.prof.busy_iters),
        phase_cycles: PhaseCycles::from(core::array::from_fn(|i| {
            pairs.iter().map(|p| p.prof.phase_cycles[i]).sum::<u64>()
        })),
        router,
        router6,
        fib: sys.fib,
        acl: sys.acl,
        faults: super::faults::stats(),
        nf: pairs.iter().fold(NfCounters::default(), |mut t, p| {
            t.add(&p.nf);
            t
        }),
        // A name longer than the schema's is refused at compile time (`check_counters`); the
        // stock modes' are short.
        nf_name: heapless::String::try_from(sys.nf_name).unwrap_or_default(),
        nf_counters: nf_own(pairs).to_stats(),
        mgmt: pairs.iter().filter_map(|p| p.mgmt).reduce(|mut t, m| {
            t.add(&m);
            t
        }),
        ..Stats::default()
    };
    // The pushes cannot fail: at most smp::MAX_CPUS pairs (asserted above to fit).
    for pair in pairs {
        for (j, (c, ds)) in pair.counters.iter().zip(&pair.nic).enumerate() {
            let _ = s.ports.push(PortStats {
                port: (if mq { j } else { 2 * pair.pair + j }) as u32,
                queue: if mq { pair.pair as u32 } else { 0 },
                cpu: pair.pair as u32,
                mac: pair.macs[j],
                rx: c.rx,
                rx_bytes: c.rx_bytes,
                tx: c.tx,
                tx_bytes: c.tx_bytes,
                kicks_rx: ds.kicks_rx,
                kicks_tx: ds.kicks_tx,
                no_buffer: c.no_buffer,
                bad_token: ds.bad_token,
                drops: PortDrops::from(c),
                nic: nic_stats(ds),
            });
        }
        for p in &pair.pools {
            let _ = s.pools.push(pool_stats(p));
        }
        let _ = s.per_cpu.push(CpuStats {
            cpu: pair.pair as u32,
            forwarded: forwarded(pair),
            busy_cycles: pair.prof.busy_cycles,
            kicks: pair.prof.kicks,
            halts: pair.prof.halts,
            busy_iters: pair.prof.busy_iters,
            tlb: tlb_stats(pair.pair),
        });
    }
    s
}

/// The network function's own counters summed over the cores (every core runs the same NF:
/// the first core's declaration is every core's).
fn nf_own(pairs: &[PairSnap]) -> CounterValues {
    let mut total = pairs
        .first()
        .map(|p| CounterValues::new(p.nf_own.defs()))
        .unwrap_or_default();
    for p in pairs {
        total.add(&p.nf_own);
    }
    total
}

/// CPU `cpu`'s TLB shootdown counters as a `per_cpu[].tlb` entry.
fn tlb_stats(cpu: usize) -> netstack::stats::TlbCpuStats {
    let t = crate::tlb::stats(cpu);
    netstack::stats::TlbCpuStats {
        pages_unmapped: t.pages_unmapped,
        batches: t.batches,
        ipis_sent: t.ipis_sent,
        poll_requests: t.poll_requests,
        flushes_received: t.flushes_received,
        invlpg_pages: t.invlpg_pages,
        full_flushes: t.full_flushes,
        wait_cycles: t.wait_cycles,
        pending_pages: t.pending_pages,
    }
}

/// One page_pool as a `pools[]` entry (its counters are the pool's own struct).
pub fn pool_stats(p: &PoolSnap) -> PoolStats {
    PoolStats {
        id: p.id,
        refill_mode: match p.mode {
            mm::page_pool::RefillMode::Bulk => RefillMode::Bulk,
            mm::page_pool::RefillMode::Single => RefillMode::Single,
        },
        in_flight: p.in_flight,
        cached: p.cached as u64,
        counters: p.stats,
    }
}

/// The buffer the `STATS` line is serialised into (the console runs on the boot CPU only; the
/// lock only keeps the buffer off the stack).
static STATS_BUF: spin::Mutex<[u8; JSON_MAX]> = spin::Mutex::new([0; JSON_MAX]);

/// `stats`: prints `STATS {json}`. A value that does not fit the buffer (impossible by the
/// schema's size test) is logged as an error instead.
pub fn print_stats(pairs: &[PairSnap], sys: &SystemSnap) {
    let s = stats(pairs, sys);
    let mut buf = STATS_BUF.lock();
    match to_json(&s, &mut buf[..]) {
        Ok(json) => println!("STATS {json}"),
        Err(e) => error!("STATS: {e} (more than {JSON_MAX} bytes)"),
    }
}

/// `pools`: one `pool {json}` line per page_pool of every pair.
pub fn print_pools(pairs: &[PairSnap]) {
    let mut buf = [0u8; POOL_JSON_MAX];
    for p in pairs.iter().flat_map(|p| p.pools.iter()) {
        match to_json(&pool_stats(p), &mut buf) {
            Ok(json) => println!("pool {json}"),
            Err(e) => error!("pool {}: {e}", p.id),
        }
    }
}

/// The `/metrics` body (Prometheus text exposition format 0.0.4) of `pairs`, the system
/// snapshot and the management plane's counters.
pub fn write_prometheus(
    pairs: &[PairSnap],
    sys: &SystemSnap,
    mgmt: Option<&MgmtStats>,
    w: &mut dyn fmt::Write,
) -> fmt::Result {
    let defs = pairs.first().map_or(&[][..], |p| p.nf_own.defs());
    netstack::stats::write_prometheus(&stats(pairs, sys), &sys.buddyinfo, mgmt, defs, w)
}

/// A port's NIC-level counters for STATS, when its driver keeps them (it counts register
/// reads: the e1000e driver).
fn nic_stats(ds: &drivers::nic::DriverStats) -> Option<netstack::stats::NicStats> {
    let reads = ds.mmio_reads?;
    let hw = ds.hw.unwrap_or_default();
    Some(netstack::stats::NicStats {
        mmio_reads: reads,
        link_up: ds.link_up.unwrap_or(false),
        link_speed_mbps: ds.link_speed_mbps.unwrap_or(0),
        link_changes: ds.link_changes,
        rx_errors: ds.rx_errors,
        missed: hw.missed,
        crc_errors: hw.crc_errors,
        rx_no_buffer: hw.no_buffer,
    })
}
