//! The `STATS {json}` line: per-port counters, pools, allocator and datapath cost.
//!
//! Keys (stable; the xtask and the tests parse them): `mode`, `tsc_hz`, `busy_cycles` (TSC
//! cycles spent in poll iterations that did work), `forwarded` (frames queued for TX on any
//! port), `kicks` (notifications written), `halts` (idle halts taken), `queues` (virtio-net queue
//! pairs per port), `free_pages_boot`, `free_pages_now`, `ports[]` (one per port and queue pair:
//! `port`, `queue` (queue pair, 0 without multi-queue), `cpu`, `mac`, `rx`, `rx_bytes`, `tx`, `tx_bytes`, `kicks_rx`, `kicks_tx`, `no_buffer`,
//! `drops{tx_ring_full, too_big, bad_desc, runt}`), `pools[]` (`id`, `in_flight`, `cached`,
//! `alloc_fast`, `alloc_slow`, `alloc_empty`, `refill_pages`, `refill_failed`, `recycle_cached`,
//! `recycle_cache_full`, `recycle_ring`, `recycle_ring_full`, `released`), and in router mode
//! `router` (`rx`, `forwarded`, `arp_replies`, `echo_replies`, `arp_consumed`, `arp_requests`,
//! `to_host`, `queued`, `queued_now`, `icmp_sent`, `icmp_rate_limited`, `icmp_suppressed`,
//! `no_buffer`, `drops{…}` by [`RouterDrop`] name; summed over the cores' routers, plus
//! `neigh_sync{sent, applied, dropped}` (neighbour updates between cores) and `mgmt_handoff`,
//! `mgmt_handoff_dropped` (frames for the management plane handed to core 0)).

use core::fmt;
use mm::Zone;
use netstack::router::RouterDrop;
use netstack::DropReason;
use netstack::Mode;
use unikernel::dataplane::snap::{router_totals, PairSnap, PoolSnap};

/// Formats one page_pool's counters as a JSON object (in `STATS` and on the `pools` console
/// line).
pub struct PoolJson(pub PoolSnap);

impl fmt::Display for PoolJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.0;
        let s = &p.stats;
        write!(
            f,
            "{{\"id\":{},\"refill_mode\":\"{}\",\"in_flight\":{},\"cached\":{},\"alloc_fast\":{},\"alloc_slow\":{},\"alloc_empty\":{},\"refill_pages\":{},\"refill_failed\":{},\"recycle_cached\":{},\"recycle_cache_full\":{},\"recycle_ring\":{},\"recycle_ring_full\":{},\"released\":{}}}",
            p.id,
            match p.mode {
                mm::page_pool::RefillMode::Bulk => "bulk",
                mm::page_pool::RefillMode::Single => "single",
            },
            p.in_flight,
            p.cached,
            s.alloc_fast,
            s.alloc_slow,
            s.alloc_empty,
            s.refill_pages,
            s.refill_failed,
            s.recycle_cached,
            s.recycle_cache_full,
            s.recycle_ring,
            s.recycle_ring_full,
            s.released
        )
    }
}

/// What STATS and `/metrics` are formatted from: snapshots of every forwarding core and a few
/// machine-wide facts. Nothing here reads live per-core state.
pub struct StatsView<'a> {
    /// Every forwarding core's snapshot, core 0 first.
    pub pairs: &'a [PairSnap],
    /// The forwarding mode.
    pub mode: Mode,
    /// TSC frequency, Hz.
    pub tsc_hz: u64,
    /// CPUs online.
    pub cpus_online: usize,
    /// virtio-net queue pairs per port.
    pub queues: usize,
    /// Free pages right after the allocator came up.
    pub free_pages_boot: u64,
    /// The zone (free pages, buddyinfo).
    pub zone: &'a Zone,
}

/// Formats a [`StatsView`] as the STATS JSON object.
pub struct Snapshot<'a>(pub &'a StatsView<'a>);

impl fmt::Display for Snapshot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let pairs = v.pairs;
        let sum = |g: fn(&PairSnap) -> u64| pairs.iter().map(g).sum::<u64>();
        let forwarded = sum(|p| p.counters.iter().map(|c| c.tx).sum());
        let pcp = sum(|p| p.pcp_count);
        // Multi-queue: a core's two "ports" are queue pair `cpu` of ports 0 and 1.
        let mq = v.queues > 1;
        write!(
            f,
            "{{\"mode\":\"{}\",\"tsc_hz\":{},\"busy_cycles\":{},\"forwarded\":{},\"kicks\":{},\"halts\":{},\"cpus_online\":{},\"pairs\":{},\"queues\":{},\"pcp_count\":{},\"refill_cycles\":{},\"refill_pages\":{},\"free_pages_boot\":{},\"free_pages_now\":{},\"ports\":[",
            v.mode.as_str(),
            v.tsc_hz,
            sum(|p| p.prof.busy_cycles),
            forwarded,
            sum(|p| p.prof.kicks),
            sum(|p| p.prof.halts),
            v.cpus_online,
            pairs.len(),
            v.queues,
            pcp,
            sum(|p| p.prof.refill_cycles),
            sum(|p| p.pools.iter().map(|q| q.stats.refill_pages).sum()),
            v.free_pages_boot,
            v.zone.free_pages() + pcp,
        )?;
        for (n, (pair, j)) in pairs
            .iter()
            .flat_map(|p| (0..2).map(move |j| (p, j)))
            .enumerate()
        {
            let (c, ds) = (&pair.counters[j], &pair.nic[j]);
            if n > 0 {
                f.write_str(",")?;
            }
            write!(
                f,
                "{{\"port\":{},\"queue\":{},\"cpu\":{},\"mac\":\"{}\",\"rx\":{},\"rx_bytes\":{},\"tx\":{},\"tx_bytes\":{},\"kicks_rx\":{},\"kicks_tx\":{},\"no_buffer\":{},\"drops\":{{",
                if mq { j } else { 2 * pair.pair + j },
                if mq { pair.pair } else { 0 },
                pair.pair,
                pair.macs[j],
                c.rx,
                c.rx_bytes,
                c.tx,
                c.tx_bytes,
                ds.kicks_rx,
                ds.kicks_tx,
                c.no_buffer
            )?;
            for (k, r) in DropReason::ALL.iter().enumerate() {
                if k > 0 {
                    f.write_str(",")?;
                }
                write!(f, "\"{}\":{}", r.as_str(), c.drops_for(*r))?;
            }
            f.write_str("}}")?;
        }
        f.write_str("],\"pools\":[")?;
        for (n, p) in pairs.iter().flat_map(|p| p.pools.iter()).enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", PoolJson(*p))?;
        }
        let phase = |i: usize| pairs.iter().map(|p| p.prof.phase_cycles[i]).sum::<u64>();
        write!(
            f,
            "],\"busy_iters\":{},\"phase_cycles\":{{\"rx_forward\":{},\"tx_reap\":{},\"refill\":{},\"kick\":{}}}",
            sum(|p| p.prof.busy_iters),
            phase(0),
            phase(1),
            phase(2),
            phase(3)
        )?;
        f.write_str(",\"per_cpu\":[")?;
        for (n, p) in pairs.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(
                f,
                "{{\"cpu\":{},\"forwarded\":{},\"busy_cycles\":{},\"kicks\":{},\"halts\":{}}}",
                p.pair,
                p.counters.iter().map(|c| c.tx).sum::<u64>(),
                p.prof.busy_cycles,
                p.prof.kicks,
                p.prof.halts
            )?;
        }
        f.write_str("]")?;
        if let Some(rs) = router_totals(pairs) {
            let c = &rs.counters;
            write!(
                f,
                ",\"router\":{{\"rx\":{},\"forwarded\":{},\"arp_replies\":{},\"echo_replies\":{},\"arp_consumed\":{},\"arp_requests\":{},\"to_host\":{},\"queued\":{},\"queued_now\":{},\"icmp_sent\":{},\"icmp_rate_limited\":{},\"icmp_suppressed\":{},\"no_buffer\":{},\"drops\":{{",
                c.rx,
                c.forwarded,
                c.arp_replies,
                c.echo_replies,
                c.arp_consumed,
                c.arp_requests,
                c.to_host,
                c.queued,
                rs.queued_now,
                c.icmp_sent,
                c.icmp_rate_limited,
                c.icmp_suppressed,
                c.no_buffer
            )?;
            for (j, why) in RouterDrop::ALL.iter().enumerate() {
                if j > 0 {
                    f.write_str(",")?;
                }
                write!(f, "\"{}\":{}", why.as_str(), c.drops_for(*why))?;
            }
            let y = &rs.sync;
            write!(
                f,
                "}},\"neigh_sync\":{{\"sent\":{},\"applied\":{},\"dropped\":{}}},\"mgmt_handoff\":{},\"mgmt_handoff_dropped\":{}}}",
                y.neigh_sent,
                y.neigh_applied,
                y.neigh_dropped,
                y.mgmt_handoff,
                y.mgmt_handoff_dropped
            )?;
        }
        f.write_str("}")
    }
}

/// Write the counters in the Prometheus text exposition format (version 0.0.4): per-port
/// packets, bytes and drops by reason, per-CPU forwarded packets, page_pool and allocator
/// state, buddyinfo, router outcomes and the management plane's own counters.
pub fn write_prometheus(
    v: &StatsView<'_>,
    mgmt: Option<super::mgmt::MgmtCounters>,
    w: &mut dyn core::fmt::Write,
) -> fmt::Result {
    // Ports and CPU lines are the boot CPU's pair (as before the snapshot view).
    let Some(own) = v.pairs.first() else {
        return Ok(());
    };
    let counter = |w: &mut dyn core::fmt::Write, name: &str, help: &str| {
        writeln!(w, "# HELP {name} {help}\n# TYPE {name} counter")
    };
    let gauge = |w: &mut dyn core::fmt::Write, name: &str, help: &str| {
        writeln!(w, "# HELP {name} {help}\n# TYPE {name} gauge")
    };
    for (name, help, get) in [
        (
            "gannet_port_rx_packets_total",
            "Frames received.",
            (|c: &netstack::PortCounters| c.rx) as fn(&netstack::PortCounters) -> u64,
        ),
        ("gannet_port_rx_bytes_total", "Bytes received.", |c| {
            c.rx_bytes
        }),
        (
            "gannet_port_tx_packets_total",
            "Frames queued for transmission.",
            |c| c.tx,
        ),
        (
            "gannet_port_tx_bytes_total",
            "Bytes queued for transmission.",
            |c| c.tx_bytes,
        ),
        (
            "gannet_port_rx_no_buffer_total",
            "RX refills that found no page.",
            |c| c.no_buffer,
        ),
    ] {
        counter(w, name, help)?;
        for (i, c) in own.counters.iter().enumerate() {
            writeln!(w, "{name}{{port=\"{i}\"}} {}", get(c))?;
        }
    }
    counter(w, "gannet_port_drops_total", "Frames dropped, by reason.")?;
    for (i, c) in own.counters.iter().enumerate() {
        for r in DropReason::ALL {
            writeln!(
                w,
                "gannet_port_drops_total{{port=\"{i}\",reason=\"{}\"}} {}",
                r.as_str(),
                c.drops_for(r)
            )?;
        }
    }
    counter(
        w,
        "gannet_cpu_forwarded_packets_total",
        "Frames forwarded, by CPU.",
    )?;
    let forwarded: u64 = own.counters.iter().map(|c| c.tx).sum();
    writeln!(
        w,
        "gannet_cpu_forwarded_packets_total{{cpu=\"0\"}} {forwarded}"
    )?;
    counter(
        w,
        "gannet_cpu_busy_cycles_total",
        "TSC cycles in poll iterations that did work.",
    )?;
    writeln!(
        w,
        "gannet_cpu_busy_cycles_total{{cpu=\"0\"}} {}",
        own.prof.busy_cycles
    )?;
    gauge(
        w,
        "gannet_pool_in_flight_pages",
        "Pages handed out by a page_pool and not returned.",
    )?;
    for p in own.pools.iter() {
        writeln!(
            w,
            "gannet_pool_in_flight_pages{{pool=\"{}\"}} {}",
            p.id, p.in_flight
        )?;
    }
    gauge(
        w,
        "gannet_pool_cached_pages",
        "Pages in a page_pool's alloc cache.",
    )?;
    for p in own.pools.iter() {
        writeln!(
            w,
            "gannet_pool_cached_pages{{pool=\"{}\"}} {}",
            p.id, p.cached
        )?;
    }
    counter(
        w,
        "gannet_pool_alloc_slow_total",
        "page_pool refills from the allocator.",
    )?;
    for p in own.pools.iter() {
        writeln!(
            w,
            "gannet_pool_alloc_slow_total{{pool=\"{}\"}} {}",
            p.id, p.stats.alloc_slow
        )?;
    }
    gauge(
        w,
        "gannet_free_pages",
        "Free pages in the allocator (buddy + per-CPU lists).",
    )?;
    writeln!(
        w,
        "gannet_free_pages {}",
        v.zone.free_pages() + own.pcp_count
    )?;
    gauge(
        w,
        "gannet_buddyinfo_free_blocks",
        "Free buddy blocks per order (/proc/buddyinfo).",
    )?;
    for (order, n) in v.zone.buddyinfo().iter().enumerate() {
        writeln!(
            w,
            "gannet_buddyinfo_free_blocks{{zone=\"0\",order=\"{order}\"}} {n}"
        )?;
    }
    if let Some(rs) = router_totals(v.pairs) {
        let c = &rs.counters;
        counter(w, "gannet_router_forwarded_total", "Frames routed.")?;
        writeln!(w, "gannet_router_forwarded_total {}", c.forwarded)?;
        counter(w, "gannet_router_icmp_sent_total", "ICMP errors sent.")?;
        writeln!(w, "gannet_router_icmp_sent_total {}", c.icmp_sent)?;
        counter(
            w,
            "gannet_router_drops_total",
            "Frames the router dropped, by reason.",
        )?;
        for why in RouterDrop::ALL {
            writeln!(
                w,
                "gannet_router_drops_total{{reason=\"{}\"}} {}",
                why.as_str(),
                c.drops_for(why)
            )?;
        }
    }
    if let Some(c) = mgmt {
        counter(
            w,
            "gannet_mgmt_frames_total",
            "Frames through the management plane.",
        )?;
        writeln!(w, "gannet_mgmt_frames_total{{dir=\"rx\"}} {}", c.rx)?;
        writeln!(w, "gannet_mgmt_frames_total{{dir=\"tx\"}} {}", c.tx)?;
        writeln!(
            w,
            "gannet_mgmt_frames_total{{dir=\"rx_dropped\"}} {}",
            c.rx_dropped
        )?;
        writeln!(
            w,
            "gannet_mgmt_frames_total{{dir=\"tx_dropped\"}} {}",
            c.tx_dropped
        )?;
        counter(
            w,
            "gannet_mgmt_http_requests_total",
            "/metrics responses served.",
        )?;
        writeln!(w, "gannet_mgmt_http_requests_total {}", c.http_requests)?;
    }
    Ok(())
}
