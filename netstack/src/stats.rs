//! The schema of the `STATS {json}` console line, and the Prometheus exposition of `/metrics`.
//!
//! One set of types for both sides: the guest builds a [`Stats`] from its snapshots and
//! serialises it with serde-json-core ([`to_json`]); the host tools deserialise the line into
//! the same [`Stats`] with serde_json. A counter renamed here is renamed on both sides, and code
//! that reads the old name no longer builds. Field names are the JSON keys (the README and the
//! integration tests rely on them); the JSON keys appear in declaration order.
//!
//! Where each counter set is defined (once; the definitions flow up the crates' dependencies,
//! since `mm` cannot depend on this crate): the page_pool's counters are `mm`'s
//! `PagePoolStats`, which [`PoolStats`] holds and writes inline; the kernel's counters this
//! crate can see are defined here and counted into by the kernel as they are ([`NfCounters`],
//! [`MgmtPath`], [`MgmtStats`]); a network function's own counters are declared by the NF
//! ([`CounterDef`], [`nf_own`]) and carried by name. The tests check that serde-json-core's
//! line reads back through serde_json to the same JSON object, key for key.
//!
//! Units: "frames" count Ethernet frames, "bytes" frame bytes (no virtio header, no FCS),
//! "cycles" TSC cycles (guest instructions under `-icount shift=0`), "pages" 4 KiB pages.
//! Every counter counts from boot and never decreases; gauges are marked as such.
//!
//! Sizes are fixed: at most [`MAX_CPUS`] forwarding cores, [`MAX_PORT_ENTRIES`] `ports[]` and
//! `pools[]` entries, and the serialised object fits in [`JSON_MAX`] bytes (a host test checks
//! the largest possible value).
//!
//! [`write_prometheus`] renders the same [`Stats`] (plus the buddy allocator's free lists and
//! the management plane's counters, which `STATS` does not carry) in the Prometheus text
//! exposition format 0.0.4.
//!
//! Past ~800 lines because the schema is one contract between the guest and the tools: every
//! counter struct of `STATS` and the Prometheus writer over the same structs stay side by side,
//! so a renamed field and its metric change in one place (the tests are `stats/tests.rs`).

use crate::config::Mode;
use crate::counters::{DropReason, PortCounters};
use crate::router::{RouterCounters, RouterDrop};
use crate::MacAddr;
use core::fmt;
use heapless::Vec;
use serde::{Deserialize, Serialize};

/// Declares a drop table `$name`: one `u64` field per variant of the drop reason `$reason`
/// (its `ALL` in counter order), each field named as the reason's `as_str` (checked by the
/// tests), the exhaustive mapping both ways (`get`, `From<&$counters>` through its
/// `drops_for`), `iter` in `ALL` order and `total`. One macro for the IPv4 and the IPv6
/// router's tables, so the two stay alike.
macro_rules! drop_table {
    ($(#[$doc:meta])* $name:ident: $reason:ident from $counters:ident;
     $($field:ident: $variant:ident,)*) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct $name {
            $(
                #[doc = concat!("[`", stringify!($reason), "::", stringify!($variant), "`].")]
                pub $field: u64,
            )*
        }

        impl $name {
            /// The counter of `why`.
            pub fn get(&self, why: $reason) -> u64 {
                match why {
                    $($reason::$variant => self.$field,)*
                }
            }

            /// Every reason with its counter, in `ALL` order.
            pub fn iter(&self) -> impl Iterator<Item = ($reason, u64)> + '_ {
                $reason::ALL.into_iter().map(|r| (r, self.get(r)))
            }

            /// All drops.
            pub fn total(&self) -> u64 {
                self.iter().map(|(_, n)| n).sum()
            }
        }

        impl From<&$counters> for $name {
            fn from(c: &$counters) -> Self {
                $name {
                    $($field: c.drops_for($reason::$variant),)*
                }
            }
        }
    };
}

pub mod nf_own;
mod nic;
mod pool;
mod router6;
/// `pools[]`' counters, defined in `mm` (re-exported for the tools, which need not name `mm`).
pub use mm::page_pool::PagePoolStats;
pub use nf_own::{
    check_counters, CounterDef, CounterDefError, CounterValues, NfOwnCounters, NfValue, PerIndex,
    MAX_NF_COUNTERS, MAX_NF_VALUES, NF_NAME_MAX,
};
pub use pool::PoolStats;
pub use router6::{write_prometheus6, Router6Drops, Router6Stats};

/// Most forwarding cores a `STATS` line describes (the kernel's `smp::MAX_CPUS` must not be
/// larger).
pub const MAX_CPUS: usize = 16;
/// Most `ports[]` (and `pools[]`) entries: two per forwarding core.
pub const MAX_PORT_ENTRIES: usize = crate::config::PORTS * MAX_CPUS;
/// Longest serialised [`Stats`] in bytes (every array full, every counter `u64::MAX`; checked
/// by a test). The guest's `STATS` buffer has this size.
pub const JSON_MAX: usize = 48 * 1024;
/// Longest serialised [`PoolStats`] in bytes (the `pools` console line).
pub const POOL_JSON_MAX: usize = 512;

/// The whole `STATS` object: totals over every forwarding core, then one entry per port (queue
/// pair), page_pool and core, and the router's counters in router mode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Forwarding mode, as `mode=` was parsed (`"io"`, `"l2"`, `"router"`, `"acl"`; `"l2"` by
    /// default, a user's NF included: what ran is [`Stats::nf_name`]).
    pub mode: Mode,
    /// TSC frequency in Hz (cycles per second).
    pub tsc_hz: u64,
    /// Cycles spent in poll iterations that did work, summed over the cores.
    pub busy_cycles: u64,
    /// Frames queued for TX on any port (the sum of every `ports[].tx`).
    pub forwarded: u64,
    /// Device notifications (kicks) written, summed over the cores.
    pub kicks: u64,
    /// Idle halts taken (`idle=halt`), summed over the cores.
    pub halts: u64,
    /// CPUs online (forwarding or not).
    pub cpus_online: u32,
    /// Forwarding cores (one port pair, or one queue pair of ports 0 and 1, each).
    pub pairs: u32,
    /// virtio-net queue pairs per port (1 without multi-queue).
    pub queues: u32,
    /// Gauge: pages on the forwarding cores' per-CPU (pcp) lists now.
    pub pcp_count: u64,
    /// Cycles spent in page_pool slow-path refills, summed over the cores.
    pub refill_cycles: u64,
    /// Pages the page_pools took from the allocator in refills (sum of `pools[].refill_pages`).
    pub refill_pages: u64,
    /// Free pages (buddy lists + pcp lists) when forwarding started.
    pub free_pages_boot: u64,
    /// Gauge: free pages (buddy lists + pcp lists) now; equal to `free_pages_boot` after a clean
    /// `quit`.
    pub free_pages_now: u64,
    /// One entry per port and queue pair, core by core.
    pub ports: Vec<PortStats, MAX_PORT_ENTRIES>,
    /// One entry per page_pool (one per port and queue pair), core by core.
    pub pools: Vec<PoolStats, MAX_PORT_ENTRIES>,
    /// Poll iterations that did work, summed over the cores.
    pub busy_iters: u64,
    /// `busy_cycles` split by phase of the poll iteration, summed over the cores; all zero
    /// unless the kernel runs with `phases=on`.
    pub phase_cycles: PhaseCycles,
    /// One entry per forwarding core.
    pub per_cpu: Vec<CpuStats, MAX_CPUS>,
    /// Router mode only (the key is absent otherwise): the routers' counters summed over the
    /// cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterStats>,
    /// Router mode with `ip6_0=`/`ip6_1=` only (the key is absent otherwise): the IPv6
    /// routers' counters summed over the cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router6: Option<Router6Stats>,
    /// Router mode only (the key is absent otherwise): the FIB and its live reloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fib: Option<FibStats>,
    /// ACL mode only (the key is absent otherwise): the rule set and its live replacements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<AclStats>,
    /// The fault image only (the key is absent otherwise): faults injected since boot, by
    /// kind (`mm::fault`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults: Option<FaultStats>,
    /// The network function's verdicts (the NF is the one `mode` names), summed over the
    /// cores. For the stock `io` and `l2`, which forward every frame, only `to_mgmt` counts:
    /// the management address's frames the kernel steered off; the router does not run on
    /// the NF API yet.
    #[serde(default)]
    pub nf: NfCounters,
    /// The network function the cores ran: its `NetworkFunction::NAME` (`"port_filter"` for
    /// the template's, `"acl"`), or for the stock image's `io`, `l2` and router the mode.
    /// The `nf` label of `/metrics`. Empty in lines from before the key.
    #[serde(default)]
    pub nf_name: heapless::String<NF_NAME_MAX>,
    /// The counters the network function declares itself (`NetworkFunction::COUNTERS`), by
    /// name, summed over the cores (the key is absent when it declares none; the stock `io`,
    /// `l2` and router declare none). Read from the NF every 10 ms and at `quit`, so a value
    /// may trail the frames by up to 10 ms. See [`nf_own`].
    #[serde(default, skip_serializing_if = "NfOwnCounters::is_empty")]
    pub nf_counters: NfOwnCounters,
    /// With a management address only (the key is absent otherwise): the dataplane's side of
    /// the management plane, summed over the cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mgmt: Option<MgmtPath>,
}

/// What a core's network function decided for the frames it did not forward, and what its
/// hooks did with the frames it kept (frames; forwarded frames are `ports[].tx`). The one
/// definition: the dataplane counts into it (`unikernel::dataplane::nf::NfCounters` is this
/// type), `STATS` carries it as `nf`, `/metrics` as `gannet_nf_frames_total{nf,verdict}` with
/// the field names as `verdict`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NfCounters {
    /// Frames dropped by the NF's `Drop` verdict or its hooks' `Ctx::drop`.
    pub dropped: u64,
    /// Frames kept by the `Keep` verdict (handed to its end-of-burst hook).
    pub kept: u64,
    /// Frames given to the management plane (`ToMgmt`, `Ctx::to_mgmt`).
    pub to_mgmt: u64,
    /// Frames for the management plane on a port that has none (dropped).
    pub mgmt_unavailable: u64,
    /// Frames kept or for the management plane past the 64 one poll iteration holds
    /// (dropped).
    pub keep_overflow: u64,
    /// Frames the NF asked to send on a port the core does not have (dropped).
    pub bad_port: u64,
    /// Kept or built frames the NF sent (`Ctx::send`).
    pub sent_held: u64,
    /// Frames the NF handed to another core (`Ctx::hand_off`: the core that owns their
    /// flow), counted by the core that handed them.
    #[serde(default)]
    pub handed_off: u64,
    /// Frames the NF handed to another core whose hand-off ring was full, or to a core that
    /// does not forward (dropped).
    #[serde(default)]
    pub handoff_dropped: u64,
    /// Kept frames the NF took in and counts itself (`Ctx::consume`: an ARP reply the router
    /// learned from), neither sent nor dropped.
    #[serde(default)]
    pub consumed: u64,
}

impl NfCounters {
    /// Every counter with its name (the JSON key and the Prometheus `verdict` label), in
    /// declaration order.
    pub fn iter(&self) -> [(&'static str, u64); 10] {
        [
            ("dropped", self.dropped),
            ("kept", self.kept),
            ("to_mgmt", self.to_mgmt),
            ("mgmt_unavailable", self.mgmt_unavailable),
            ("keep_overflow", self.keep_overflow),
            ("bad_port", self.bad_port),
            ("sent_held", self.sent_held),
            ("handed_off", self.handed_off),
            ("handoff_dropped", self.handoff_dropped),
            ("consumed", self.consumed),
        ]
    }

    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &NfCounters) {
        self.dropped += o.dropped;
        self.kept += o.kept;
        self.to_mgmt += o.to_mgmt;
        self.mgmt_unavailable += o.mgmt_unavailable;
        self.keep_overflow += o.keep_overflow;
        self.bad_port += o.bad_port;
        self.sent_held += o.sent_held;
        self.handed_off += o.handed_off;
        self.handoff_dropped += o.handoff_dropped;
        self.consumed += o.consumed;
    }
}

/// Faults injected by the fault image (`faults`; `fault=` and the console's `fault`
/// command), each kind as `mm::fault::Fault::name` says. Each is counted again by what
/// handled it: `rx_bad_id` + `tx_bad_id` in `ports[].bad_token`, `rx_bad_len` in
/// `ports[].drops.bad_desc`, `tx_ring_full` in `ports[].drops.tx_ring_full`, `dma_map` in
/// `pools[].refill_failed`, `bulk_zero` in `pools[].alloc_empty`, `recycle_full` in
/// `pools[].released`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultStats {
    /// RX used elements given an out-of-range id.
    pub rx_bad_id: u64,
    /// RX used elements given a length over the buffer.
    pub rx_bad_len: u64,
    /// TX used elements given an out-of-range id.
    pub tx_bad_id: u64,
    /// Frames that found the TX ring "full".
    pub tx_ring_full: u64,
    /// `alloc_pages_bulk` calls cut to half.
    pub bulk_short: u64,
    /// `alloc_pages_bulk` calls that returned no page.
    pub bulk_zero: u64,
    /// DMA mappings that failed.
    pub dma_map: u64,
    /// TX reclaims whose pages were released instead of cached.
    pub recycle_full: u64,
    /// Starvation windows (console `fault dry MS`) started.
    pub pool_dry_windows: u64,
    /// Time every page_pool was starved, summed over the windows, ms.
    pub pool_dry_ms: u64,
}

/// The FIB and its live reloads (`fib`; console `routes commit` / `routes reload`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FibStats {
    /// Generation of the published FIB (1 = the one built at boot; +1 per reload).
    pub generation: u64,
    /// Reloads published since boot (`routes commit`, `routes reload`).
    pub reloads: u64,
    /// Reloads refused (a bad route, out of memory, a previous FIB not yet retired): the
    /// published FIB stayed.
    pub failed: u64,
    /// Rules (routes) in the published FIB.
    pub routes: u64,
    /// 4 KiB pages the published FIB holds (tbl24 own + shared pages, tbl8, rules).
    pub pages: u64,
    /// Pages the FIB built at boot held (taken before `free_pages_boot`).
    pub pages_boot: u64,
    /// Pages held by FIBs retired but not yet freed (waiting for a quiescent state).
    pub pages_retiring: u64,
    /// Boot-CPU time the last build took (the sum of its steps), ms.
    pub last_build_ms: u64,
    /// Time from the last publish until every routing core switched to it, µs.
    pub last_swap_us: u64,
    /// Old FIBs freed (unmapped, shot down, freed).
    pub retired: u64,
    /// Shootdown batches those retirements took.
    pub retire_batches: u64,
    /// Pages holding `PUT /routes` bodies: the routes file's text after a `PUT /routes`
    /// (kept for rebuilds, freed when the next one replaces it) and a body being received.
    /// Counted with the FIB pages in the leak check.
    #[serde(default)]
    pub routes_text_pages: u64,
    /// Steps the last reload's build took (a reload builds in bounded steps between the boot
    /// CPU's poll iterations; the boot FIB in one).
    #[serde(default)]
    pub build_steps: u64,
    /// Longest single step of any reload's build or retirement since boot, µs: the longest
    /// the boot CPU stopped forwarding for a reload.
    #[serde(default)]
    pub max_step_us: u64,
}

/// The ACL firewall's rule set and its live replacements (`acl`, `mode=acl` only; console
/// `acl reload`, `PUT /rules`). The per-rule hits are the NF's own counters (`nf_counters`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclStats {
    /// Generation of the published rule set (1 = the boot's; +1 per replacement).
    pub generation: u64,
    /// Rules in the published set.
    pub rules: u64,
    /// Tuples (distinct source and destination prefix-length pairs) of the published set.
    pub tuples: u64,
    /// Replacements published since boot.
    pub reloads: u64,
    /// Replacements refused after their text was accepted (no memory, the previous set still
    /// retiring): the published set stayed.
    pub failed: u64,
    /// 4 KiB pages the published set holds (classifier, hit counters, its header).
    pub pages: u64,
    /// Pages the boot's set held (taken before `free_pages_boot`).
    pub pages_boot: u64,
    /// Pages of replaced sets not yet freed (some core may still read them).
    pub pages_retiring: u64,
    /// Replaced sets freed (every core had moved on).
    pub retired: u64,
    /// Time from the last publish until every core used the new set, µs.
    pub last_swap_us: u64,
}

impl Stats {
    /// `busy_cycles / forwarded` (`None` when nothing was forwarded).
    pub fn cycles_per_packet(&self) -> Option<f64> {
        (self.forwarded > 0).then(|| self.busy_cycles as f64 / self.forwarded as f64)
    }

    /// `kicks / forwarded` (`None` when nothing was forwarded).
    pub fn kicks_per_packet(&self) -> Option<f64> {
        (self.forwarded > 0).then(|| self.kicks as f64 / self.forwarded as f64)
    }
}

/// One port's queue pair (`ports[]`): what the core that owns it counted.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStats {
    /// Port number (the virtio-net device, in PCI order).
    pub port: u32,
    /// Queue pair of the port (0 without multi-queue).
    pub queue: u32,
    /// The CPU that polls this queue pair.
    pub cpu: u32,
    /// The port's MAC (`"02:00:00:00:00:01"`).
    pub mac: MacAddr,
    /// Frames received (including those later dropped).
    pub rx: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames queued for transmission.
    pub tx: u64,
    /// Bytes queued for transmission.
    pub tx_bytes: u64,
    /// Notifications written for the RX queue.
    pub kicks_rx: u64,
    /// Notifications written for the TX queue.
    pub kicks_tx: u64,
    /// RX refills that found no page (slots left unfilled; not a frame drop), and in router
    /// mode the fragment trains this port (their egress) dropped for want of pages (each a
    /// routed frame, counted `router.tx_dropped`).
    pub no_buffer: u64,
    /// Used-ring elements (RX or TX) whose id was not a descriptor the driver had posted: a
    /// device bug (or an injected fault); the element is skipped.
    #[serde(default)]
    pub bad_token: u64,
    /// Frames dropped, by reason.
    pub drops: PortDrops,
    /// The NIC's own counters, for a driver that keeps them (e1000e); absent for virtio-net
    /// (the key is left out, so virtio-net's STATS line is unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicStats>,
}

/// A port's NIC-level counters (`ports[].nic`): what the driver counted and read from the
/// device off the hot path, each time STATS or `/metrics` is made.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicStats {
    /// Device register (MMIO) reads so far, set-up included: none per forwarded frame.
    pub mmio_reads: u64,
    /// Link up (`STATUS.LU` on an Intel NIC) when last read.
    pub link_up: bool,
    /// The link's speed when up (Mb/s, `STATUS.SPEED`); 0 while down.
    #[serde(default)]
    pub link_speed_mbps: u32,
    /// Link state changes seen between reads.
    pub link_changes: u64,
    /// Received descriptors with an error bit (dropped, counted `drops.bad_desc` too).
    pub rx_errors: u64,
    /// The NIC's missed-frames counter (`MPC`).
    pub missed: u64,
    /// The NIC's CRC error counter (`CRCERRS`).
    pub crc_errors: u64,
    /// The NIC's receive-no-buffers counter (`RNBC`).
    pub rx_no_buffer: u64,
}

impl NicStats {
    /// Adds `o`'s counters (another queue of the same port); the link is `o`'s.
    pub fn add(&mut self, o: &NicStats) {
        let NicStats {
            mmio_reads,
            link_up,
            link_speed_mbps,
            link_changes,
            rx_errors,
            missed,
            crc_errors,
            rx_no_buffer,
        } = *o;
        self.mmio_reads += mmio_reads;
        self.link_up = link_up;
        self.link_speed_mbps = link_speed_mbps;
        self.link_changes += link_changes;
        self.rx_errors += rx_errors;
        self.missed += missed;
        self.crc_errors += crc_errors;
        self.rx_no_buffer += rx_no_buffer;
    }
}

impl PortStats {
    /// Adds `o`'s counters (another queue pair of the same port); keeps `port`, `queue`,
    /// `cpu` and `mac`.
    pub fn add(&mut self, o: &PortStats) {
        // Destructured without `..`: a new counter must be added here too.
        let PortStats {
            port: _,
            queue: _,
            cpu: _,
            mac: _,
            rx,
            rx_bytes,
            tx,
            tx_bytes,
            kicks_rx,
            kicks_tx,
            no_buffer,
            bad_token,
            drops,
            nic,
        } = o;
        match (&mut self.nic, nic) {
            (Some(a), Some(b)) => a.add(b),
            (a @ None, Some(b)) => *a = Some(*b),
            (_, None) => {}
        }
        self.rx += rx;
        self.rx_bytes += rx_bytes;
        self.tx += tx;
        self.tx_bytes += tx_bytes;
        self.kicks_rx += kicks_rx;
        self.kicks_tx += kicks_tx;
        self.no_buffer += no_buffer;
        self.bad_token += bad_token;
        let PortDrops {
            tx_ring_full,
            too_big,
            bad_desc,
            runt,
            over_mtu,
            link_down,
        } = drops;
        let d = &mut self.drops;
        d.tx_ring_full += tx_ring_full;
        d.too_big += too_big;
        d.bad_desc += bad_desc;
        d.runt += runt;
        d.over_mtu += over_mtu;
        d.link_down += link_down;
    }
}

/// A port's drops by [`DropReason`] (frames); the keys are [`DropReason::as_str`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortDrops {
    /// [`DropReason::TxRingFull`].
    pub tx_ring_full: u64,
    /// [`DropReason::TooBig`].
    pub too_big: u64,
    /// [`DropReason::BadDesc`].
    pub bad_desc: u64,
    /// [`DropReason::Runt`].
    pub runt: u64,
    /// [`DropReason::OverMtu`] (absent in `STATS` from images before it: 0).
    #[serde(default)]
    pub over_mtu: u64,
    /// [`DropReason::LinkDown`] (absent in `STATS` from images before it: 0).
    #[serde(default)]
    pub link_down: u64,
}

impl PortDrops {
    /// The counter of `why`.
    pub fn get(&self, why: DropReason) -> u64 {
        match why {
            DropReason::TxRingFull => self.tx_ring_full,
            DropReason::TooBig => self.too_big,
            DropReason::BadDesc => self.bad_desc,
            DropReason::Runt => self.runt,
            DropReason::OverMtu => self.over_mtu,
            DropReason::LinkDown => self.link_down,
        }
    }

    /// Every reason with its counter, in [`DropReason::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.into_iter().map(|r| (r, self.get(r)))
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.iter().map(|(_, n)| n).sum()
    }
}

impl From<&PortCounters> for PortDrops {
    fn from(c: &PortCounters) -> Self {
        let d = |r| c.drops_for(r);
        PortDrops {
            tx_ring_full: d(DropReason::TxRingFull),
            too_big: d(DropReason::TooBig),
            bad_desc: d(DropReason::BadDesc),
            runt: d(DropReason::Runt),
            over_mtu: d(DropReason::OverMtu),
            link_down: d(DropReason::LinkDown),
        }
    }
}

/// Busy-iteration cycles by phase of the poll loop.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseCycles {
    /// RX burst, rewrite or route, TX post.
    pub rx_forward: u64,
    /// TX completions reaped.
    pub tx_reap: u64,
    /// RX refill from the page_pool.
    pub refill: u64,
    /// Notifications.
    pub kick: u64,
}

impl From<[u64; 4]> for PhaseCycles {
    /// From the poll loop's array (rx_forward, tx_reap, refill, kick).
    fn from(c: [u64; 4]) -> Self {
        PhaseCycles {
            rx_forward: c[0],
            tx_reap: c[1],
            refill: c[2],
            kick: c[3],
        }
    }
}

/// One forwarding core (`per_cpu[]`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuStats {
    /// CPU number (it forwards pair `cpu`).
    pub cpu: u32,
    /// Frames it queued for TX (its ports' `tx`).
    pub forwarded: u64,
    /// Cycles in its poll iterations that did work.
    pub busy_cycles: u64,
    /// Notifications it wrote.
    pub kicks: u64,
    /// Idle halts it took.
    pub halts: u64,
    /// Its poll iterations that did work (`forwarded / busy_iters`: frames per busy iteration).
    pub busy_iters: u64,
    /// Its TLB shootdown counters (as initiator and as target).
    #[serde(default)]
    pub tlb: TlbCpuStats,
}

/// One CPU's TLB shootdown counters (`per_cpu[].tlb`; `mm::tlb::TlbStats`). Totals since boot
/// except `pending_pages`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlbCpuStats {
    /// Virtual pages in the batches it dispatched (pages unmapped or remapped).
    pub pages_unmapped: u64,
    /// Batches it dispatched.
    pub batches: u64,
    /// TLB IPIs it sent.
    pub ipis_sent: u64,
    /// Flush requests it posted in other CPUs' poll words (one per target per batch).
    pub poll_requests: u64,
    /// Flush requests from other CPUs it serviced.
    pub flushes_received: u64,
    /// Pages it flushed one `invlpg` each.
    pub invlpg_pages: u64,
    /// Full flushes (CR3 reloads) it did.
    pub full_flushes: u64,
    /// TSC cycles its batches waited for acknowledgements.
    pub wait_cycles: u64,
    /// Frames in its dispatched batches waiting to be freed (gauge).
    pub pending_pages: u64,
}

/// The router's counters (`router`), summed over every core's router. Frames unless noted.
/// Every frame in `rx` ends in exactly one of `forwarded`, `tx_dropped`, `arp_replies`,
/// `echo_replies`, `arp_consumed`, `to_host` or a drop, or is still queued (`queued_now`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterStats {
    /// Frames given to the router.
    pub rx: u64,
    /// Frames routed and handed whole to the egress port's TX ring (at once, or from a
    /// neighbour queue after ARP resolved); a fragmented datagram counts once, when all its
    /// fragments were queued.
    pub forwarded: u64,
    /// Frames routed that the egress port dropped before any of them reached its TX ring
    /// (the port counts why: `tx_ring_full`, `too_big`, `no_buffer`); a fragment train once.
    #[serde(default)]
    pub tx_dropped: u64,
    /// Routed frames longer than the egress port's MTU, handed on to be fragmented
    /// (datagrams, not fragments).
    pub fragmented: u64,
    /// ARP requests for our address answered.
    pub arp_replies: u64,
    /// ICMP echo requests to our addresses answered.
    pub echo_replies: u64,
    /// ARP frames that taught the neighbour table or were for us and needed no answer.
    pub arp_consumed: u64,
    /// ARP requests built.
    pub arp_requests: u64,
    /// Frames for our addresses handed to the management plane.
    pub to_host: u64,
    /// Frames that entered a neighbour queue (counted again when they leave it).
    pub queued: u64,
    /// Gauge: frames in the neighbour queues now.
    pub queued_now: u64,
    /// ICMP errors sent.
    pub icmp_sent: u64,
    /// ICMP errors not sent because of the rate limit.
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent because RFC 1812 §4.3.2.7 forbids them.
    pub icmp_suppressed: u64,
    /// ICMP errors or ARP requests not built for want of a buffer.
    pub no_buffer: u64,
    /// Frames dropped, by reason.
    pub drops: RouterDrops,
    /// Neighbour updates between the cores' routers.
    pub neigh_sync: NeighSync,
}

impl RouterStats {
    /// The `router` object from the summed router counters, the frames queued now and the
    /// cores' neighbour updates.
    pub fn new(c: &RouterCounters, queued_now: u64, neigh_sync: NeighSync) -> Self {
        RouterStats {
            rx: c.rx,
            forwarded: c.forwarded,
            tx_dropped: c.tx_dropped,
            fragmented: c.fragmented,
            arp_replies: c.arp_replies,
            echo_replies: c.echo_replies,
            arp_consumed: c.arp_consumed,
            arp_requests: c.arp_requests,
            to_host: c.to_host,
            queued: c.queued,
            queued_now,
            icmp_sent: c.icmp_sent,
            icmp_rate_limited: c.icmp_rate_limited,
            icmp_suppressed: c.icmp_suppressed,
            no_buffer: c.no_buffer,
            drops: RouterDrops::from(c),
            neigh_sync,
        }
    }
}

/// Neighbour updates between the cores' routers (`router.neigh_sync`), in updates.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighSync {
    /// Updates learned from ARP and pushed to another core (one per other core).
    pub sent: u64,
    /// Updates from other cores applied to a core's table.
    pub applied: u64,
    /// Updates not sent because the other core's ring was full.
    pub dropped: u64,
}

drop_table! {
    /// The router's drops by [`RouterDrop`] (frames); the keys are [`RouterDrop::as_str`].
    RouterDrops: RouterDrop from RouterCounters;
    runt: Runt,
    unknown_port: UnknownPort,
    not_for_us: NotForUs,
    link_broadcast: LinkBroadcast,
    unsupported_ethertype: UnsupportedEthertype,
    ipv6_off: Ipv6Off,
    bad_arp: BadArp,
    arp_not_for_us: ArpNotForUs,
    ip_truncated: Truncated,
    bad_version: BadVersion,
    bad_ihl: BadIhl,
    bad_total_len: BadTotalLen,
    bad_checksum: BadChecksum,
    beyond_head: BeyondHead,
    bad_options: BadOptions,
    martian_src: MartianSrc,
    martian_dst: MartianDst,
    broadcast: Broadcast,
    multicast: Multicast,
    source_route_failed: SourceRouteFailed,
    no_route: NoRoute,
    ttl_expired: TtlExpired,
    frag_needed: FragNeeded,
    neigh_table_full: NeighTableFull,
    neigh_queue_full: NeighQueueFull,
    neigh_timeout: NeighTimeout,
    neigh_flushed: NeighFlushed,
    neigh_evicted: NeighEvicted,
}

/// The management plane's counters (frames; `/metrics` only, not in `STATS`). The one
/// definition: the kernel's management plane counts into it (`control::mgmt::MgmtCounters` is
/// this type) and [`write_prometheus`] renders it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MgmtStats {
    /// Frames handed to smoltcp.
    pub rx: u64,
    /// Frames dropped because smoltcp's RX queue was full.
    pub rx_dropped: u64,
    /// Frames smoltcp sent.
    pub tx: u64,
    /// Frames smoltcp wanted to send while its TX queue was full.
    pub tx_dropped: u64,
    /// `/metrics` responses served (requests).
    pub http_requests: u64,
    /// Connections reset without a complete request within the request timeout (5 s).
    pub request_timeouts: u64,
    /// Connections reset after the idle timeout (10 s without progress).
    pub idle_timeouts: u64,
    /// Connections reset for holding the response buffer past the response timeout (5 s).
    pub response_timeouts: u64,
    /// Connections closed (our FIN) after the client's FIN came before a complete request.
    pub fin_before_request: u64,
    /// Connections reset for sending more than the drain limit (64 KiB) past a request that
    /// was already answered or refused (the rest of a refused body is read and dropped up to
    /// that bound, so the client can read the answer).
    #[serde(default)]
    pub drain_limit: u64,
    /// `PUT /routes` requests by outcome, in the order of [`PUT_ROUTES_RESULTS`].
    pub put_routes: [u64; PUT_ROUTES_RESULTS.len()],
    /// `PUT /rules` requests (the ACL's rules file) by outcome, in the order of
    /// [`PUT_ROUTES_RESULTS`] (the same outcomes; `failed`: the set could not be built or
    /// swapped).
    #[serde(default)]
    pub put_rules: [u64; PUT_ROUTES_RESULTS.len()],
    /// `PUT /nat_timeouts` requests (the NAT's timeouts) by outcome, in the order of
    /// [`PUT_ROUTES_RESULTS`].
    #[serde(default)]
    pub put_nat_timeouts: [u64; PUT_ROUTES_RESULTS.len()],
    /// `PUT` requests of an image's own network function's files (`PUT /NAME`, every file
    /// it declares counted together) by outcome, in the order of [`PUT_ROUTES_RESULTS`]
    /// (`bad_request`: a line the NF's parser refused).
    #[serde(default)]
    pub put_nf_files: [u64; PUT_ROUTES_RESULTS.len()],
}

/// The dataplane's side of the management plane (`STATS` key `mgmt`, absent without a
/// management address; frames, summed over the cores): what reached it other than as one
/// page on core 0. The one definition: the dataplane counts into it
/// (`unikernel::dataplane::mgmt`), `STATS` carries it. Whatever the network function: the
/// router hands the management plane its frames, any other NF through the kernel's steering
/// (the management address's ARP and IPv4 frames on its port).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MgmtPath {
    /// Frames for the management plane handed to core 0 by another core.
    pub handoff: u64,
    /// Frames for the management plane dropped on the way to core 0 (its ring full, or no
    /// page for the copy).
    pub handoff_dropped: u64,
    /// Frames of several pages (jumbo frames) made linear for the management plane: one
    /// per-core view each (mapped on core 0, unmapped with a local flush).
    pub linear: u64,
    /// Frames of several pages for the management plane dropped unseen: no linear view could
    /// be made (pages not laid out as the length says, the window busy, no vmap space), or
    /// their pages could not be kept.
    pub linear_failed: u64,
}

impl MgmtPath {
    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &MgmtPath) {
        self.handoff += o.handoff;
        self.handoff_dropped += o.handoff_dropped;
        self.linear += o.linear;
        self.linear_failed += o.linear_failed;
    }
}

/// The outcomes of `PUT /routes` and `PUT /rules` (the `result` label of
/// `gannet_mgmt_put_routes_total` and `gannet_mgmt_put_rules_total`):
/// `ok` (200: the new FIB is published), `forbidden` (403: no `mgmt_token=` set),
/// `unauthorized` (401: wrong or missing bearer token), `length_required` (411: no
/// `Content-Length`), `too_large` (413: above the size cap), `bad_request` (400: a bad header,
/// a bad line, a route refused as it arrives or by the build), `busy` (503: another upload in
/// progress, or no memory for the body), `failed` (500/503: the build ran into the router's
/// limits, or the swap failed; the old FIB stays), `timeout` (408: the body arrived slower
/// than the management plane's minimum rate; or reset: no byte for the request timeout),
/// `aborted` (the client closed or reset the connection before its body was complete),
/// `precondition_failed` (412: `If-Match` named a generation no longer published), `checked`
/// (200 to a validate-only `PUT /routes?check`: the body passed, nothing built). Every
/// accepted `PUT` head ends in exactly one of these (a client that leaves while its rebuild
/// runs is counted under the rebuild's result).
pub const PUT_ROUTES_RESULTS: [&str; 12] = [
    "ok",
    "forbidden",
    "unauthorized",
    "length_required",
    "too_large",
    "bad_request",
    "busy",
    "failed",
    "timeout",
    "aborted",
    "precondition_failed",
    "checked",
];

// ---------------------------------------------------------------------------------------------
// JSON

/// Serialises `value` (a [`Stats`], a [`PoolStats`], …) as compact JSON into `buf` with
/// serde-json-core, returning the text. Fails only when `buf` is too small (see [`JSON_MAX`]).
pub fn to_json<'b, T: Serialize>(
    value: &T,
    buf: &'b mut [u8],
) -> Result<&'b str, serde_json_core::ser::Error> {
    let n = serde_json_core::to_slice(value, buf)?;
    // serde-json-core writes UTF-8 only (keys, numbers and escaped strings).
    core::str::from_utf8(&buf[..n]).map_err(|_| serde_json_core::ser::Error::BufferFull)
}

impl Serialize for MacAddr {
    /// As the string `aa:bb:cc:dd:ee:ff`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    /// From the string `aa:bb:cc:dd:ee:ff` ([`MacAddr::parse`]).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = MacAddr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a MAC address aa:bb:cc:dd:ee:ff")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MacAddr, E> {
                MacAddr::parse(v)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(Visitor)
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus

/// Writes `s` in the Prometheus text exposition format (version 0.0.4), one metric family
/// after another with its `# HELP` and `# TYPE` lines: per-port frames, bytes and drops by
/// reason (each port's queue pairs summed), per-CPU forwarded frames and busy cycles, page_pool
/// state, free pages, the buddy allocator's free blocks per order (`buddyinfo`, zone 0), the
/// router's outcomes (router mode), the management plane's counters (`mgmt`, when there is
/// one) and the network function's own counters (`s.nf_counters`, each
/// `gannet_nf_<nf>_<counter>_total`, with its help from `nf_defs`, the NF's declaration).
pub fn write_prometheus(
    s: &Stats,
    buddyinfo: &[u64],
    mgmt: Option<&MgmtStats>,
    nf_defs: &[CounterDef],
    w: &mut dyn fmt::Write,
) -> fmt::Result {
    type PortGet = fn(&PortStats) -> u64;
    let ports = port_totals(s);
    for (name, help, get) in [
        (
            "gannet_port_rx_packets_total",
            "Frames received.",
            (|p| p.rx) as PortGet,
        ),
        ("gannet_port_rx_bytes_total", "Bytes received.", |p| {
            p.rx_bytes
        }),
        (
            "gannet_port_tx_packets_total",
            "Frames queued for transmission.",
            |p| p.tx,
        ),
        (
            "gannet_port_tx_bytes_total",
            "Bytes queued for transmission.",
            |p| p.tx_bytes,
        ),
        (
            "gannet_port_rx_no_buffer_total",
            "RX refills that found no page.",
            |p| p.no_buffer,
        ),
    ] {
        counter(w, name, help)?;
        for p in &ports {
            writeln!(w, "{name}{{port=\"{}\"}} {}", p.port, get(p))?;
        }
    }
    counter(w, "gannet_port_drops_total", "Frames dropped, by reason.")?;
    for p in &ports {
        for (r, n) in p.drops.iter() {
            writeln!(
                w,
                "gannet_port_drops_total{{port=\"{}\",reason=\"{}\"}} {n}",
                p.port,
                r.as_str()
            )?;
        }
    }
    nic::write_prometheus_nic(&ports, w)?;
    type CpuGet = fn(&CpuStats) -> u64;
    for (name, help, get) in [
        (
            "gannet_cpu_forwarded_packets_total",
            "Frames forwarded, by CPU.",
            (|c| c.forwarded) as CpuGet,
        ),
        (
            "gannet_cpu_busy_cycles_total",
            "TSC cycles in poll iterations that did work.",
            |c| c.busy_cycles,
        ),
        (
            "gannet_tlb_pages_unmapped_total",
            "Virtual pages in TLB shootdown batches this CPU dispatched.",
            |c| c.tlb.pages_unmapped,
        ),
        (
            "gannet_tlb_batches_total",
            "TLB shootdown batches this CPU dispatched.",
            |c| c.tlb.batches,
        ),
        (
            "gannet_tlb_ipis_sent_total",
            "TLB shootdown IPIs this CPU sent.",
            |c| c.tlb.ipis_sent,
        ),
        (
            "gannet_tlb_poll_requests_total",
            "TLB flush requests this CPU posted in other CPUs' poll words.",
            |c| c.tlb.poll_requests,
        ),
        (
            "gannet_tlb_flushes_received_total",
            "TLB flush requests from other CPUs this CPU serviced.",
            |c| c.tlb.flushes_received,
        ),
        (
            "gannet_tlb_invlpg_pages_total",
            "Pages this CPU flushed with one invlpg each.",
            |c| c.tlb.invlpg_pages,
        ),
        (
            "gannet_tlb_full_flushes_total",
            "Full TLB flushes (CR3 reloads) this CPU did.",
            |c| c.tlb.full_flushes,
        ),
        (
            "gannet_tlb_wait_cycles_total",
            "TSC cycles this CPU's shootdown batches waited for acknowledgements.",
            |c| c.tlb.wait_cycles,
        ),
    ] {
        counter(w, name, help)?;
        for c in &s.per_cpu {
            writeln!(w, "{name}{{cpu=\"{}\"}} {}", c.cpu, get(c))?;
        }
    }
    type PoolGet = fn(&PoolStats) -> u64;
    for (name, help, get, kind) in [
        (
            "gannet_pool_in_flight_pages",
            "Pages handed out by a page_pool and not returned.",
            (|p| p.in_flight) as PoolGet,
            "gauge",
        ),
        (
            "gannet_pool_cached_pages",
            "Pages in a page_pool's alloc cache.",
            |p| p.cached,
            "gauge",
        ),
        (
            "gannet_pool_alloc_slow_total",
            "page_pool refills from the allocator.",
            |p| p.counters.alloc_slow,
            "counter",
        ),
    ] {
        family(w, name, help, kind)?;
        for p in &s.pools {
            writeln!(w, "{name}{{pool=\"{}\"}} {}", p.id, get(p))?;
        }
    }
    gauge(
        w,
        "gannet_free_pages",
        "Free pages in the allocator (buddy + per-CPU lists).",
    )?;
    writeln!(w, "gannet_free_pages {}", s.free_pages_now)?;
    gauge(
        w,
        "gannet_buddyinfo_free_blocks",
        "Free buddy blocks per order (/proc/buddyinfo).",
    )?;
    for (order, n) in buddyinfo.iter().enumerate() {
        writeln!(
            w,
            "gannet_buddyinfo_free_blocks{{zone=\"0\",order=\"{order}\"}} {n}"
        )?;
    }
    counter(
        w,
        "gannet_nf_frames_total",
        "Frames the network function did not forward, by verdict (and held frames it sent).",
    )?;
    let nf = nf_label(s);
    for (verdict, n) in s.nf.iter() {
        writeln!(
            w,
            "gannet_nf_frames_total{{nf=\"{nf}\",verdict=\"{verdict}\"}} {n}"
        )?;
    }
    write_nf_counters(s, nf_defs, w)?;
    if let Some(f) = &s.fib {
        gauge(
            w,
            "gannet_fib_generation",
            "Generation of the published FIB.",
        )?;
        writeln!(w, "gannet_fib_generation {}", f.generation)?;
        counter(w, "gannet_fib_reloads_total", "FIB reloads published.")?;
        writeln!(w, "gannet_fib_reloads_total {}", f.reloads)?;
        gauge(w, "gannet_fib_pages", "4 KiB pages of the published FIB.")?;
        writeln!(w, "gannet_fib_pages {}", f.pages)?;
    }
    if let Some(r) = &s.router {
        counter(
            w,
            "gannet_router_forwarded_total",
            "Frames routed and handed whole to a TX ring.",
        )?;
        writeln!(w, "gannet_router_forwarded_total {}", r.forwarded)?;
        counter(
            w,
            "gannet_router_tx_dropped_total",
            "Frames routed that the egress port dropped before its TX ring.",
        )?;
        writeln!(w, "gannet_router_tx_dropped_total {}", r.tx_dropped)?;
        counter(
            w,
            "gannet_router_fragmented_total",
            "Routed datagrams longer than the egress MTU, fragmented.",
        )?;
        writeln!(w, "gannet_router_fragmented_total {}", r.fragmented)?;
        counter(w, "gannet_router_icmp_sent_total", "ICMP errors sent.")?;
        writeln!(w, "gannet_router_icmp_sent_total {}", r.icmp_sent)?;
        counter(
            w,
            "gannet_router_drops_total",
            "Frames the router dropped, by reason.",
        )?;
        for (why, n) in r.drops.iter() {
            writeln!(
                w,
                "gannet_router_drops_total{{reason=\"{}\"}} {n}",
                why.as_str()
            )?;
        }
    }
    if let Some(r) = &s.router6 {
        write_prometheus6(r, w)?;
    }
    if let Some(m) = mgmt {
        counter(
            w,
            "gannet_mgmt_frames_total",
            "Frames through the management plane.",
        )?;
        for (dir, n) in [
            ("rx", m.rx),
            ("tx", m.tx),
            ("rx_dropped", m.rx_dropped),
            ("tx_dropped", m.tx_dropped),
        ] {
            writeln!(w, "gannet_mgmt_frames_total{{dir=\"{dir}\"}} {n}")?;
        }
        counter(
            w,
            "gannet_mgmt_http_requests_total",
            "/metrics responses served.",
        )?;
        writeln!(w, "gannet_mgmt_http_requests_total {}", m.http_requests)?;
        counter(
            w,
            "gannet_mgmt_tcp_closed_total",
            "Metrics connections closed by the management plane, by reason.",
        )?;
        for (reason, n) in [
            ("request_timeout", m.request_timeouts),
            ("idle_timeout", m.idle_timeouts),
            ("response_timeout", m.response_timeouts),
            ("fin_before_request", m.fin_before_request),
            ("drain_limit", m.drain_limit),
        ] {
            writeln!(w, "gannet_mgmt_tcp_closed_total{{reason=\"{reason}\"}} {n}")?;
        }
        counter(
            w,
            "gannet_mgmt_put_routes_total",
            "PUT /routes requests, accepted (ok) or refused, by result.",
        )?;
        for (result, n) in PUT_ROUTES_RESULTS.iter().zip(m.put_routes) {
            writeln!(w, "gannet_mgmt_put_routes_total{{result=\"{result}\"}} {n}")?;
        }
        counter(
            w,
            "gannet_mgmt_put_rules_total",
            "PUT /rules requests (the ACL's rules), accepted (ok) or refused, by result.",
        )?;
        for (result, n) in PUT_ROUTES_RESULTS.iter().zip(m.put_rules) {
            writeln!(w, "gannet_mgmt_put_rules_total{{result=\"{result}\"}} {n}")?;
        }
        counter(
            w,
            "gannet_mgmt_put_nat_timeouts_total",
            "PUT /nat_timeouts requests (the NAT's timeouts), accepted (ok) or refused, by result.",
        )?;
        for (result, n) in PUT_ROUTES_RESULTS.iter().zip(m.put_nat_timeouts) {
            writeln!(
                w,
                "gannet_mgmt_put_nat_timeouts_total{{result=\"{result}\"}} {n}"
            )?;
        }
        counter(
            w,
            "gannet_mgmt_put_nf_files_total",
            "PUT requests of the network function's own files (an image of one's own), accepted (ok) or refused, by result.",
        )?;
        for (result, n) in PUT_ROUTES_RESULTS.iter().zip(m.put_nf_files) {
            writeln!(
                w,
                "gannet_mgmt_put_nf_files_total{{result=\"{result}\"}} {n}"
            )?;
        }
    }
    Ok(())
}

/// The `nf` label: [`Stats::nf_name`], or the mode in a line from before it.
fn nf_label(s: &Stats) -> &str {
    match s.nf_name.as_str() {
        "" => s.mode.as_str(),
        n => n,
    }
}

/// The network function's own counters: `gannet_nf_<nf>_<counter>_total` (a gauge:
/// `gannet_nf_<nf>_<gauge>`), one series (or one per index, labelled as declared) each, with
/// the help of `defs` (a counter missing from `defs` gets a generic one).
fn write_nf_counters(s: &Stats, defs: &[CounterDef], w: &mut dyn fmt::Write) -> fmt::Result {
    let nf = nf_label(s);
    for (name, v) in &s.nf_counters.0 {
        let def = defs.iter().find(|d| d.name == name.as_str());
        let help = def.map_or("A counter the network function declares.", |d| d.help);
        let (total, kind) = match def.is_some_and(|d| d.gauge) {
            true => ("", "gauge"),
            false => ("_total", "counter"),
        };
        writeln!(
            w,
            "# HELP gannet_nf_{nf}_{name}{total} {help}\n# TYPE gannet_nf_{nf}_{name}{total} {kind}"
        )?;
        match v {
            NfValue::One(n) => writeln!(w, "gannet_nf_{nf}_{name}{total} {n}")?,
            NfValue::PerIndex(vals) => {
                let label = def.and_then(|d| d.per).map_or("index", |p| p.label);
                for (i, n) in vals.iter().enumerate() {
                    writeln!(w, "gannet_nf_{nf}_{name}{total}{{{label}=\"{i}\"}} {n}")?;
                }
            }
        }
    }
    Ok(())
}

/// `# HELP` and `# TYPE` of a metric family of type `kind`.
fn family(w: &mut dyn fmt::Write, name: &str, help: &str, kind: &str) -> fmt::Result {
    writeln!(w, "# HELP {name} {help}\n# TYPE {name} {kind}")
}

fn counter(w: &mut dyn fmt::Write, name: &str, help: &str) -> fmt::Result {
    family(w, name, help, "counter")
}

fn gauge(w: &mut dyn fmt::Write, name: &str, help: &str) -> fmt::Result {
    family(w, name, help, "gauge")
}

/// One entry per port number, its queue pairs' counters summed (`queue` and `cpu` 0), in port
/// order: a Prometheus series is a port, not a queue.
fn port_totals(s: &Stats) -> Vec<PortStats, MAX_PORT_ENTRIES> {
    let mut v: Vec<PortStats, MAX_PORT_ENTRIES> = Vec::new();
    for p in &s.ports {
        match v.iter_mut().find(|t| t.port == p.port) {
            Some(t) => t.add(p),
            None => {
                // Capacity: `s.ports` has at most as many entries as `v` can hold.
                let _ = v.push(PortStats {
                    queue: 0,
                    cpu: 0,
                    ..*p
                });
            }
        }
    }
    v.sort_unstable_by_key(|p| p.port);
    v
}

#[cfg(test)]
mod tests;
