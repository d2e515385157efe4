//! The `STATS {json}` line: per-port counters, pools, allocator and datapath cost.
//!
//! Keys (stable; the xtask and the tests parse them): `mode`, `tsc_hz`, `busy_cycles` (TSC
//! cycles spent in poll iterations that did work), `forwarded` (frames queued for TX on any
//! port), `kicks` (notifications written), `halts` (idle halts taken), `free_pages_boot`, `free_pages_now`, `ports[]`
//! (`port`, `mac`, `rx`, `rx_bytes`, `tx`, `tx_bytes`, `kicks_rx`, `kicks_tx`, `no_buffer`,
//! `drops{tx_ring_full, too_big, bad_desc, runt}`), `pools[]` (`id`, `in_flight`, `cached`,
//! `alloc_fast`, `alloc_slow`, `alloc_empty`, `refill_pages`, `refill_failed`, `recycle_cached`,
//! `recycle_cache_full`, `recycle_ring`, `recycle_ring_full`, `released`), and in router mode
//! `router` (`rx`, `forwarded`, `arp_replies`, `arp_consumed`, `arp_requests`, `to_host`,
//! `queued`, `queued_now`, `icmp_sent`, `icmp_rate_limited`, `icmp_suppressed`, `no_buffer`,
//! `drops{…}` by [`RouterDrop`] name).

use crate::forwarder::Forwarder;
use crate::time::tsc_hz;
use core::fmt;
use netstack::router::RouterDrop;
use netstack::DropReason;

/// Formats a [`Forwarder`] as the STATS JSON object.
pub struct Snapshot<'a, 'z>(pub &'a Forwarder<'z>);

impl fmt::Display for Snapshot<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fw = self.0;
        let forwarded: u64 = fw.counters.iter().map(|c| c.tx).sum();
        write!(
            f,
            "{{\"mode\":\"{}\",\"tsc_hz\":{},\"busy_cycles\":{},\"forwarded\":{},\"kicks\":{},\"halts\":{},\"free_pages_boot\":{},\"free_pages_now\":{},\"ports\":[",
            fw.cfg.mode.as_str(),
            tsc_hz(),
            fw.busy_cycles,
            forwarded,
            fw.kicks,
            fw.halts,
            fw.free_pages_boot,
            fw.zone.free_pages() + fw.pcp.count() as u64,
        )?;
        for (i, c) in fw.counters.iter().enumerate() {
            let ds = fw.nic_stats(i);
            if i > 0 {
                f.write_str(",")?;
            }
            write!(
                f,
                "{{\"port\":{i},\"mac\":\"{}\",\"rx\":{},\"rx_bytes\":{},\"tx\":{},\"tx_bytes\":{},\"kicks_rx\":{},\"kicks_tx\":{},\"no_buffer\":{},\"drops\":{{",
                fw.macs[i], c.rx, c.rx_bytes, c.tx, c.tx_bytes, ds.kicks_rx, ds.kicks_tx, c.no_buffer
            )?;
            for (j, r) in DropReason::ALL.iter().enumerate() {
                if j > 0 {
                    f.write_str(",")?;
                }
                write!(f, "\"{}\":{}", r.as_str(), c.drops_for(*r))?;
            }
            f.write_str("}}")?;
        }
        f.write_str("],\"pools\":[")?;
        for (i, p) in fw.pools.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let s = p.stats();
            write!(
                f,
                "{{\"id\":{},\"in_flight\":{},\"cached\":{},\"alloc_fast\":{},\"alloc_slow\":{},\"alloc_empty\":{},\"refill_pages\":{},\"refill_failed\":{},\"recycle_cached\":{},\"recycle_cache_full\":{},\"recycle_ring\":{},\"recycle_ring_full\":{},\"released\":{}}}",
                p.id(),
                p.in_flight(),
                p.cached(),
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
            )?;
        }
        f.write_str("]")?;
        if let Some(r) = &fw.router {
            let c = r.counters();
            write!(
                f,
                ",\"router\":{{\"rx\":{},\"forwarded\":{},\"arp_replies\":{},\"arp_consumed\":{},\"arp_requests\":{},\"to_host\":{},\"queued\":{},\"queued_now\":{},\"icmp_sent\":{},\"icmp_rate_limited\":{},\"icmp_suppressed\":{},\"no_buffer\":{},\"drops\":{{",
                c.rx,
                c.forwarded,
                c.arp_replies,
                c.arp_consumed,
                c.arp_requests,
                c.to_host,
                c.queued,
                r.queued_frames(),
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
            f.write_str("}}")?;
        }
        f.write_str("}")
    }
}
