//! The run-to-completion poll loop: RX burst → rewrite → TX burst on the other port → TX
//! completions back to their page_pool → RX refill from the pool → at most one kick per queue.
//!
//! One core, no interrupts, no locks on the hot path: the loop owns both devices, both pools
//! and this CPU's pcp list.

use crate::console::{Command, Console, HELP};
use crate::mem::KernelHal;
use crate::mgmt::{Mgmt, MgmtCounters};
use crate::time::{rdtsc, tsc_hz};
use crate::{fail, println};
use core::mem::ManuallyDrop;
use drivers::pci::{
    find_virtio_net, msix_route, virtio_notify_cfg, PortIoCam, VIRTIO_MSI_NO_VECTOR,
};
use drivers::virtio_net::{
    DriverStats, RxBuf, RxStatus, TxBuf, VirtioNet, MAX_FRAME_LEN as MAX_FRAME, MAX_QUEUE_PAIRS,
    NET_HDR_LEN, QUEUE_SIZE,
};
use log::{error, info, warn};
use mm::page_pool::{
    IdentityDma, PagePool, PagePoolParams, RefillMode as PoolRefill, PP_ALLOC_CACHE_REFILL,
};
use mm::{PerCpuPages, Pfn, Zone, PAGE_SIZE};
use netstack::config::{MAX_BURST, PORTS};
use netstack::router::{
    set_macs, Action, Event, Fib, NeighRing, PortConfig, Router, RouterConfig, RouterCounters,
    RuleSlot, TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::Mode;
use netstack::{
    forward_frame, Config, DropReason, IdleMode, MacAddr, PoolMode, PortCounters, Queues,
    RefillMode, Verdict, MAX_QUEUES,
};
use virtio_drivers::transport::pci::bus::PciRoot;
use virtio_drivers::transport::pci::PciTransport;

type Nic = VirtioNet<KernelHal, PciTransport>;
/// A core's router: its own neighbour table, ICMP bucket and counters over the one FIB
/// ([`SHARED_FIB`]), read without a lock.
type Rt = Router<'static, Pfn, 64, 8, &'static Fib<'static>>;
/// The router that builds the FIB on the boot CPU (connected routes, `route=`, routes file).
type FibBuilder = Router<'static, Pfn>;

/// The FIB, built once on the boot CPU before any other core starts; read-only afterwards
/// (routes never change after boot), shared by every core's [`Rt`].
static SHARED_FIB: spin::Once<Fib<'static>> = spin::Once::new();
/// Slots of each core's neighbour-update ring (updates are rare: one per ARP exchange).
const NEIGH_RING_SLOTS: usize = 64;
/// Per core: what other cores' routers learned from ARP, drained at the top of each poll
/// iteration into this core's neighbour table.
static NEIGH_RINGS: [NeighRing<NEIGH_RING_SLOTS>; MAX_CPUS] =
    [const { NeighRing::new() }; MAX_CPUS];
/// Router mode with several cores: frames for the management plane (ARP on its port, and
/// frames for the host) that arrived on another core, copied into a page of that core's pool
/// (length and port in the page's first 4 bytes, as for [`HANDOFF`]) for core 0, which runs
/// smoltcp. Bounded; a full ring drops the frame (counted in `mgmt_handoff_dropped`).
static MGMT_RING: RecycleRing = RecycleRing::new();

/// DIR-24-8 second-level groups (256 entries each): prefixes longer than /24 under 1024
/// distinct /24s. 1 MiB.
const TBL8_GROUPS: usize = 1024;
/// FIB rule slots (a power of two, at least 8/7 of the routes): room for ~114,000 routes
/// (a full-table-sized routes file), 1.5 MiB.
const FIB_RULES: usize = 1 << 17;
/// Bytes of contiguous RAM the router's FIB needs, set aside at boot (`mode=router`): the
/// 2^24-entry tbl24 (64 MiB) + tbl8 + rule slots.
pub const ROUTER_RESERVE_BYTES: u64 = (TBL24_LEN * 4
    + TBL8_GROUPS * TBL8_GROUP_LEN * 4
    + FIB_RULES * core::mem::size_of::<RuleSlot>()) as u64;

/// How often the idle loop looks at the serial console: every 10 ms of TSC time. Port I/O
/// takes QEMU's big lock, so polling it every iteration would slow the datapath.
const CONSOLE_POLL_HZ: u64 = 100;
/// Router mode: the neighbour table's timers (ARP retransmit 1 s, queue timeout, ageing) run
/// at least this often while traffic flows: 10 ms.
const ROUTER_TIMER_NS: u64 = 10_000_000;
/// How long `quit` waits for in-flight TX to complete before resetting the devices: 100 ms.
const TX_DRAIN_MS: u64 = 100;
/// Reap TX completions of a port once this many descriptors are outstanding (DPDK's default
/// `tx_free_thresh`, 32): the ring walk is paid once per batch of completions.
const TX_FREE_THRESH: usize = 32;
/// Refill a port's RX ring once this many slots are empty (DPDK's default `rx_free_thresh`,
/// 32); the ring keeps at least 224 of its 256 buffers posted.
const RX_FREE_THRESH: usize = 32;
/// With `idle=halt`: how long a core polls empty rings before it halts, in µs. 50 µs covers a
/// few inter-arrival times at the rates QEMU delivers, so a busy port never sleeps.
const IDLE_POLL_US: u64 = 50;
/// With `idle=halt`: the LAPIC timer period that bounds a halt (and paces the console) in µs.
const IDLE_TIMER_US: u64 = 10_000;

/// Everything the loop owns.
pub struct Forwarder<'z> {
    pub(crate) cfg: Config,
    pub(crate) zone: &'z Zone,
    pub(crate) pcp: PerCpuPages,
    /// `ManuallyDrop`: `quit` drops the devices (freeing their rings) before the final STATS.
    pub(crate) nics: ManuallyDrop<[Nic; PORTS]>,
    /// Driver counters frozen when the devices are dropped.
    nic_stats_final: Option<[DriverStats; PORTS]>,
    pub(crate) pools: [PagePool; PORTS],
    pub(crate) counters: [PortCounters; PORTS],
    pub(crate) macs: [MacAddr; PORTS],
    pub(crate) busy_cycles: u64,
    pub(crate) kicks: u64,
    pub(crate) free_pages_boot: u64,
    /// Which port pair this core forwards (ports `2 * pair` and `2 * pair + 1`).
    pub(crate) pair: usize,
    /// TSC cycles (instructions under icount) spent in page_pool slow-path allocations.
    pub(crate) refill_cycles: u64,
    /// Busy poll iterations (that did work).
    pub(crate) busy_iters: u64,
    /// TSC cycles of busy iterations by phase: RX + forward + TX post, TX reap, RX refill, kick.
    pub(crate) phase_cycles: [u64; 4],
    /// Halts taken while idle (`idle=halt`).
    pub(crate) halts: u64,
    /// Whether idle halting is on (config `idle=halt` and MSI-X set up on every port).
    halt_when_idle: bool,
    dma: IdentityDma,
    /// Scratch arrays, allocated once (not re-initialised on every poll iteration).
    rx_scratch: [RxBuf; MAX_BURST],
    page_scratch: [Pfn; QUEUE_SIZE],
    /// Router mode: the IPv4 router (and below it, for every mode, the per-port TX staging
    /// flushed once per burst; in router mode also a spare page for ICMP errors and ARP
    /// requests).
    pub(crate) router: Option<Rt>,
    tx_stage: [[TxBuf; MAX_BURST]; PORTS],
    tx_n: [usize; PORTS],
    spare: Option<Pfn>,
    /// When the router's neighbour timers last ran (ns since boot).
    router_polled_ns: u64,
    /// Router mode: the management plane (smoltcp) on one port's address (core 0 only).
    pub(crate) mgmt: Option<Mgmt>,
    /// Router mode on a core other than 0 with a management plane: its port (frames for it
    /// are handed to core 0 through [`MGMT_RING`]).
    mgmt_remote: Option<usize>,
    /// Router mode: this core's cross-core counters.
    pub(crate) sync: RouterSync,
}

/// Router mode, per core: traffic between the cores' routers and to the management plane.
#[derive(Copy, Clone, Default, Debug)]
pub struct RouterSync {
    /// Neighbour updates this core learned from ARP and pushed to another core's ring (one per
    /// other core).
    pub neigh_sent: u64,
    /// Neighbour updates from other cores applied to this core's table.
    pub neigh_applied: u64,
    /// Neighbour updates not sent because the other core's ring was full.
    pub neigh_dropped: u64,
    /// Frames for the management plane handed to core 0.
    pub mgmt_handoff: u64,
    /// Frames for the management plane dropped: core 0's ring full, or no page for the copy.
    pub mgmt_handoff_dropped: u64,
}

impl core::ops::AddAssign<&RouterSync> for RouterSync {
    fn add_assign(&mut self, o: &RouterSync) {
        self.neigh_sent += o.neigh_sent;
        self.neigh_applied += o.neigh_applied;
        self.neigh_dropped += o.neigh_dropped;
        self.mgmt_handoff += o.mgmt_handoff;
        self.mgmt_handoff_dropped += o.mgmt_handoff_dropped;
    }
}

/// The router's ports: port `i` has MAC `macs[i]` and address `ip{i}=`.
fn router_ports(cfg: &Config, macs: [MacAddr; PORTS]) -> [PortConfig; PORTS] {
    core::array::from_fn(|i| PortConfig {
        mac: macs[i],
        addr: cfg.ip[i].expect("Config::parse requires ip0/ip1 in router mode"),
    })
}

/// Boot CPU, once: build the FIB over the storage `mem::init` set aside (connected routes,
/// the static routes of the command line and of the routes file) and publish it in
/// [`SHARED_FIB`]. Fails (config error) on a bad port address or route.
fn build_fib(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    reserved: Option<(u64, u64)>,
    routes_file: Option<&str>,
) -> &'static Fib<'static> {
    let Some((addr, bytes)) = reserved.filter(|r| r.1 >= ROUTER_RESERVE_BYTES) else {
        fail(format_args!(
            "router: no FIB memory reserved ({ROUTER_RESERVE_BYTES} bytes needed)"
        ))
    };
    let base = addr as *mut u8;
    // SAFETY: [addr, addr + bytes) was set aside by mem::init for us alone: identity-mapped RAM
    // outside the zone and the image, never freed. The three tables do not overlap, each is
    // aligned (4 KiB base, u32-sized offsets) and every RuleSlot is written before the slice
    // over them is made; u32 tables may hold any bit pattern (Fib::new clears them).
    let (tbl24, tbl8, rules) = unsafe {
        let tbl24 = core::slice::from_raw_parts_mut(base.cast::<u32>(), TBL24_LEN);
        let t8 = base.add(TBL24_LEN * 4).cast::<u32>();
        let tbl8 = core::slice::from_raw_parts_mut(t8, TBL8_GROUPS * TBL8_GROUP_LEN);
        let r = base
            .add(TBL24_LEN * 4 + TBL8_GROUPS * TBL8_GROUP_LEN * 4)
            .cast::<RuleSlot>();
        for i in 0..FIB_RULES {
            r.add(i).write(RuleSlot::EMPTY);
        }
        (tbl24, tbl8, core::slice::from_raw_parts_mut(r, FIB_RULES))
    };
    debug_assert!(bytes >= ROUTER_RESERVE_BYTES);
    let fib = match Fib::new(tbl24, tbl8, rules) {
        Ok(f) => f,
        Err(e) => fail(format_args!("router: FIB: {e}")),
    };
    let ports = router_ports(cfg, macs);
    let mut router = match FibBuilder::new(fib, &ports, RouterConfig::default()) {
        Ok(r) => r,
        Err(e) => fail(format_args!("config error: ip0/ip1: router: {e}")),
    };
    for (net, gw) in cfg.routes.iter() {
        if let Err(e) = router.add_route(*net, *gw) {
            fail(format_args!("config error: route={net},{gw}: {e}"));
        }
    }
    if let Some(text) = routes_file {
        let mut n = 0;
        for r in netstack::parse_routes_file(text) {
            match r {
                Ok((line, (net, gw))) => {
                    if let Err(e) = router.add_route(net, gw) {
                        fail(format_args!(
                            "config error: routes file line {line}: {net},{gw}: {e}"
                        ));
                    }
                    n += 1;
                }
                Err((line, text, why)) => fail(format_args!(
                    "config error: routes file line {line}: `{text}`: {why} (expected PREFIX/LEN,GATEWAY)"
                )),
            }
        }
        info!("router: {n} routes from the routes file");
    }
    info!(
        "router: {} routes in the FIB (connected, local, broadcast, static)",
        router.fib().len()
    );
    SHARED_FIB.call_once(|| router.into_fib())
}

/// Core `k`'s router (of `cores`) over the shared FIB (built by [`build_fib`] on the boot CPU
/// before any other core starts); its IP IDs interleave with the other cores'.
fn core_router(cfg: &Config, macs: [MacAddr; PORTS], k: usize, cores: usize) -> Rt {
    let Some(fib) = SHARED_FIB.get() else {
        fail(format_args!(
            "router: the FIB was not built before this core started"
        ))
    };
    let rc = RouterConfig::for_core(k as u16, cores as u16);
    match Rt::new(fib, &router_ports(cfg, macs), rc) {
        Ok(r) => r,
        Err(e) => fail(format_args!("config error: ip0/ip1: router: {e:?}")),
    }
}

/// Carve the management plane's storage from the zone (kept for the kernel's life).
fn mgmt_storage(zone: &Zone) -> &'static mut [u8] {
    let order = crate::mgmt::STORAGE_BYTES
        .div_ceil(PAGE_SIZE)
        .next_power_of_two()
        .trailing_zeros() as usize;
    let Some(pfn) = zone.alloc_pages(order) else {
        fail(format_args!(
            "mgmt: no memory for {} bytes",
            crate::mgmt::STORAGE_BYTES
        ))
    };
    let bytes = PAGE_SIZE << order;
    // SAFETY: a fresh buddy block of `bytes`, identity-mapped, never freed: ours for 'static.
    unsafe {
        core::ptr::write_bytes(pfn.addr() as *mut u8, 0, bytes);
        core::slice::from_raw_parts_mut(pfn.addr() as *mut u8, bytes)
    }
}

/// How long `drain_all_pages` waits for every CPU: 1 s.
const DRAIN_TIMEOUT_MS: u64 = 1000;

use crate::smp::{current_cpu, DRAIN, MAX_CPUS};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use drivers::pci::MAX_NICS;
use mm::page_pool::RecycleRing;
use virtio_drivers::transport::pci::bus::DeviceFunction;

/// How long the boot CPU waits for the other cores to bring their pairs up: 2 s.
const CORE_START_MS: u64 = 2000;
/// How long `quit` waits for the other cores to finish each phase: 2 s.
const CORE_STOP_MS: u64 = 2000;
/// `quit` phases (see [`Forwarder::quit_phase`]).
const QUIT_PHASES: u8 = 5;

/// What the boot CPU hands to the other forwarding cores.
struct Setup {
    cfg: Config,
    /// Port pairs forwarding (one per core, cores `0..pairs`). With multi-queue, the "pair" of
    /// core `k` is queue pair `k` of port 0 and of port 1.
    pairs: usize,
    /// Queue pairs per port: 1, or (multi-queue) `pairs`.
    queues: usize,
}

/// A device handle (a whole single-queue device, or one queue pair of a multi-queue device) on
/// its way from the boot CPU, which sets up every device, to the core that owns it.
struct MqHandle {
    nic: Nic,
    /// Its RX queue's MSI-X entry is routed to the owning core.
    routed: bool,
}

// SAFETY: a queue-pair handle owns its rings and pages outright (no state shared with other
// handles but the device itself, whose registers it touches only through its own doorbells);
// the raw doorbell pointers are MMIO addresses valid on every core. It is moved once, from the
// boot CPU to its owner, through `MQ_NICS`' lock, before the owner uses it.
unsafe impl Send for MqHandle {}

/// The console's `neigh` asks core `k` (router mode on several cores) to print its own
/// neighbour table from its poll loop: each core's table is its own, not shared.
static NEIGH_DUMP: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Device handles set up by the boot CPU: `[core][port]` (port 0/1 of the core's pair), taken
/// by the owning core.
static MQ_NICS: spin::Mutex<[[Option<MqHandle>; PORTS]; MAX_CPUS]> =
    spin::Mutex::new([const { [const { None }; PORTS] }; MAX_CPUS]);

/// How long the boot CPU waits for `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` to be acknowledged: 1 s.
const CTRL_TIMEOUT_MS: u64 = 1000;

static SETUP: spin::Once<Setup> = spin::Once::new();
/// Set by the boot CPU for each core that should forward pair `cpu`.
static START: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// What each forwarding core publishes (every 10 ms and when it stops) for `stats` and `quit`.
static SNAPS: [spin::Mutex<Option<PairSnap>>; MAX_CPUS] =
    [const { spin::Mutex::new(None) }; MAX_CPUS];

/// Each page_pool's recycle ring (pool `id` = port `id`): where other cores return its pages.
static POOL_RINGS: [RecycleRing; MAX_NICS] = [const { RecycleRing::new() }; MAX_NICS];
/// Cross-core hand-off (`xcore=on`): frames other cores send out of this core's ports. The
/// frame length and the local output port travel in the page's first 4 bytes (its virtio-net
/// header area, rewritten by TX anyway).
static HANDOFF: [RecycleRing; MAX_CPUS] = [const { RecycleRing::new() }; MAX_CPUS];
/// Every port's MAC (as u64), for the l2 rewrite of frames that leave through another core.
static PORT_MACS: [AtomicU64; MAX_NICS] = [const { AtomicU64::new(0) }; MAX_NICS];
/// `quit` phases every forwarding core goes through together (0 = forwarding).
static QUIT_PHASE: AtomicU8 = AtomicU8::new(0);
/// Per core: the last quit phase it finished.
static PHASE_DONE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];

/// Whether the boot CPU asked this AP to forward a pair.
pub fn start_requested(cpu: usize) -> bool {
    START.get(cpu).is_some_and(|s| s.load(Ordering::Acquire))
}

/// Port pairs forwarding (1 before set-up).
pub fn pairs() -> usize {
    SETUP.get().map_or(1, |s| s.pairs)
}

/// virtio-net queue pairs per port (1 before set-up and without multi-queue).
pub fn queues() -> usize {
    SETUP.get().map_or(1, |s| s.queues)
}

/// Multi-queue: how many queue pairs per port to use, from `queues=` (see
/// [`netstack::Queues`]), the CPUs online and what ports 0 and 1 offer. Fails with a config
/// error when an explicit `queues=N` cannot be had.
fn choose_queues(cfg: &Config, root: &mut PciRoot<PortIoCam>, ports: &[DeviceFunction]) -> usize {
    let cpus = crate::smp::ONLINE.load(Ordering::Acquire).max(1);
    let want = match cfg.queues {
        Queues::Count(n) => usize::from(n),
        Queues::Auto if cfg.mode == Mode::Router || cpus == 1 => return 1,
        Queues::Auto => cpus.min(MAX_QUEUES),
    };
    if want == 1 {
        return 1;
    }
    let mut offered = usize::MAX;
    for (i, df) in ports.iter().take(PORTS).enumerate() {
        // A transport only to read features and config; dropping it resets the untouched device.
        let max = match PciTransport::new::<KernelHal, _>(root, *df) {
            Ok(mut t) => usize::from(Nic::probe_queue_pairs(&mut t)),
            Err(e) => fail(format_args!("port {i} ({df}): virtio PCI transport: {e}")),
        };
        offered = offered.min(max);
    }
    let have = offered.min(cpus).min(MAX_QUEUE_PAIRS);
    match cfg.queues {
        Queues::Count(_) if want > have => fail(format_args!(
            "config error: queues={want}: the ports offer {offered} queue pair(s) (VIRTIO_NET_F_MQ; QEMU: --backend tap --queues N) and {cpus} CPU(s) are online"
        )),
        Queues::Count(_) => want,
        Queues::Auto => have.min(want).max(1),
    }
}

/// Multi-queue: bring up ports 0 and 1 with `queues` queue pairs each on the boot CPU (the
/// device's common configuration is one register file, so one CPU programs it): doorbells and
/// each RX queue's MSI-X entry routed to the core that will own the pair (entry `k` for pair
/// `k`, vector `DEVICE_VECTOR_BASE + port` on that core). The handles wait in [`MQ_NICS`].
fn setup_mq(cfg: &Config, ports: &[DeviceFunction], queues: usize) {
    let mut root = PciRoot::new(PortIoCam);
    let mut stash = MQ_NICS.lock();
    for (j, df) in ports.iter().take(PORTS).enumerate() {
        let transport = match PciTransport::new::<KernelHal, _>(&mut root, *df) {
            Ok(t) => t,
            Err(e) => fail(format_args!("port {j} ({df}): virtio PCI transport: {e}")),
        };
        let deadline = rdtsc() + tsc_hz() / 1000 * CTRL_TIMEOUT_MS;
        let handles = match Nic::new_mq(transport, queues as u16, || rdtsc() > deadline) {
            Ok(h) => h,
            Err(e) => fail(format_args!(
                "port {j} ({df}): virtio-net multi-queue init: {e}"
            )),
        };
        let Some(n) = virtio_notify_cfg(*df) else {
            fail(format_args!(
                "port {j} ({df}): multi-queue needs the virtio notify capability (doorbells)"
            ))
        };
        for (k, mut nic) in handles.into_iter().enumerate() {
            let (rxq, txq) = nic.queue_indices();
            let apic_id = crate::smp::CPUS[k].apic_id.load(Ordering::Acquire);
            // SAFETY: set-up time, on the boot CPU only (queue_select is not shared with anyone
            // else yet: the other cores get their handles afterwards); the BARs lie below 4 GiB
            // (identity-mapped, checked by the HAL when the transport mapped them) and belong
            // to this device.
            let routed = unsafe {
                nic.set_doorbells(n.doorbell(rxq), n.doorbell(txq));
                cfg.idle == IdleMode::Halt
                    && msix_route(
                        *df,
                        k as u16,
                        crate::apic::msi_address(apic_id),
                        u32::from(crate::apic::DEVICE_VECTOR_BASE) + j as u32,
                    )
                    .map_err(|e| warn!("port {j} queue pair {k}: MSI-X: {e:?}"))
                    .is_ok()
                    && n.set_queue_vector(rxq, k as u16) == k as u16
                    && n.set_queue_vector(txq, VIRTIO_MSI_NO_VECTOR) == VIRTIO_MSI_NO_VECTOR
            };
            if k == 0 {
                info!(
                    "port {j}: {df} multi-queue: {} of {} queue pairs active (VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET acked)",
                    nic.active_queue_pairs(),
                    nic.max_queue_pairs()
                );
            }
            stash[k][j] = Some(MqHandle { nic, routed });
        }
    }
}

/// Single-queue: bring up every port's device on the boot CPU, ports `2k`, `2k + 1` for core
/// `k`: transport, feature negotiation, virtqueues, doorbells, and the RX queue's MSI-X entry 0
/// routed to core `k` (vector `DEVICE_VECTOR_BASE + j`). The handles wait in [`MQ_NICS`] for
/// their owner, which only fills the RX rings and forwards.
///
/// Why not on each owning core: PCI set-up (memory decode, MSI-X enable) makes QEMU rebuild its
/// memory map, and QEMU 7.2 under multi-threaded TCG crashes (SIGSEGV in
/// `memory_region_dispatch_read`) when one vCPU does that while another reads device or port
/// I/O, as the boot CPU does once its own pair forwards (seen in about 1 boot in 6 with 2 CPUs
/// and 4 ports on a loaded host). Doing all of it on one CPU before any core forwards avoids it.
fn setup_single_queue(cfg: &Config, ports: &[DeviceFunction], pairs: usize) {
    let mut root = PciRoot::new(PortIoCam);
    let mut stash = MQ_NICS.lock();
    for k in 0..pairs {
        let apic_id = crate::smp::CPUS[k].apic_id.load(Ordering::Acquire);
        for j in 0..PORTS {
            let i = PORTS * k + j;
            let df = ports[i];
            let transport = match PciTransport::new::<KernelHal, _>(&mut root, df) {
                Ok(t) => t,
                Err(e) => fail(format_args!("port {i} ({df}): virtio PCI transport: {e}")),
            };
            let mut nic = match VirtioNet::new(transport) {
                Ok(n) => n,
                Err(e) => fail(format_args!("port {i} ({df}): virtio-net init: {e}")),
            };
            let routed = match virtio_notify_cfg(df) {
                // SAFETY: set-up time, on the boot CPU before the owner gets the handle; the
                // BARs lie below 4 GiB (identity-mapped, checked by the HAL when the transport
                // mapped them) and belong to this device.
                Some(n) => unsafe {
                    nic.set_doorbells(n.doorbell(0), n.doorbell(1));
                    // RX used-buffer notifications -> MSI-X entry 0 -> vector 0x40 + j on core
                    // k; TX completions never interrupt.
                    let vector = crate::apic::DEVICE_VECTOR_BASE + j as u8;
                    let routed = cfg.idle == IdleMode::Halt
                        && msix_route(df, 0, crate::apic::msi_address(apic_id), vector.into())
                            .map_err(|e| warn!("port {i}: MSI-X: {e:?}"))
                            .is_ok()
                        && n.set_queue_vector(0, 0) == 0
                        && n.set_queue_vector(1, VIRTIO_MSI_NO_VECTOR) == VIRTIO_MSI_NO_VECTOR;
                    if cfg.idle == IdleMode::Halt && !routed {
                        warn!(
                            "port {i}: RX interrupt not available; idle=halt falls back to polling"
                        );
                    }
                    routed
                },
                None => {
                    warn!("port {i}: notify capability not found; kicks use the transport");
                    false
                }
            };
            info!(
                "port {i}: {df} virtio-net MAC {} queues {}x{} offered {:#x} negotiated {:?} (cpu {k})",
                MacAddr(nic.mac()),
                2,
                QUEUE_SIZE,
                nic.offered_features().bits(),
                nic.features()
            );
            stash[k][j] = Some(MqHandle { nic, routed });
        }
    }
}

/// The boot CPU: bring up pair 0 here and one pair on each further core, then forward until
/// `quit`. Never returns.
pub fn run(
    cfg: &Config,
    zone: &'static Zone,
    reserved: Option<(u64, u64)>,
    routes_file: Option<&str>,
) -> ! {
    // Taken before the boot free-page count: it is never returned.
    let mgmt_mem = cfg.mgmt_port().map(|_| mgmt_storage(zone));
    let mut pcp = PerCpuPages::new(zone, crate::smp::ONLINE.load(Ordering::Acquire).max(1));
    // The pcp rule (mm::pcp docs): only the owning CPU, thread context. Checked in debug builds.
    mm::pcp::set_context_hooks(crate::trap::in_interrupt, current_cpu);
    pcp.set_owner(current_cpu());
    // Free pages right after the allocator is up, before any device took memory: `quit` must
    // come back to exactly this number.
    let free_pages_boot = zone.free_pages() + pcp.count() as u64;
    info!(
        "mm: pcp high={} batch={}; {} free pages at boot",
        pcp.high(),
        pcp.batch(),
        free_pages_boot
    );
    let mut root = PciRoot::new(PortIoCam);
    let (found, ignored) = find_virtio_net(&mut root);
    if found.len() < PORTS {
        fail(format_args!(
            "need {PORTS} virtio-net ports, found {} (add -device virtio-net-pci,… per port)",
            found.len()
        ));
    }
    let cpus = crate::smp::ONLINE.load(Ordering::Acquire);
    let dfs: heapless::Vec<DeviceFunction, MAX_NICS> = found.iter().map(|(df, _)| *df).collect();
    // Multi-queue: one queue pair of each of ports 0 and 1 per core (in router mode too: one
    // router per core over one FIB).
    let queues = choose_queues(cfg, &mut root, &dfs);
    // Else one port pair per core (router mode: one pair; its two ports are the router's).
    let (pairs, nics_used) = if queues > 1 {
        (queues, PORTS)
    } else if cfg.mode == Mode::Router {
        (1, PORTS)
    } else {
        let p = (found.len() / PORTS).min(cpus).max(1);
        (p, p * PORTS)
    };
    if found.len() > nics_used || ignored > 0 {
        warn!(
            "{} virtio-net functions found; using the first {} ({} pairs on {} CPUs)",
            found.len() + ignored,
            nics_used,
            pairs,
            cpus
        );
    }
    if queues > 1 {
        setup_mq(cfg, &dfs, queues);
    } else {
        setup_single_queue(cfg, &dfs, pairs);
    }
    if routes_file.is_some() && cfg.mode != Mode::Router {
        fail(format_args!(
            "config error: a routes file (--routes) needs `mode=router`"
        ));
    }
    let setup = SETUP.call_once(|| Setup {
        cfg: cfg.clone(),
        pairs,
        queues,
    });
    let mut fwd = build_pair(
        0,
        setup,
        zone,
        pcp,
        free_pages_boot,
        reserved,
        routes_file,
        mgmt_mem,
    );
    for start in START.iter().take(pairs).skip(1) {
        start.store(true, Ordering::Release);
    }
    if pairs > 1 {
        crate::smp::wake_others();
        // Wait (bounded) until every core reports its pair up, so `ready` means all forward.
        let deadline = rdtsc() + tsc_hz() / 1000 * CORE_START_MS;
        for (k, snap) in SNAPS.iter().enumerate().take(pairs).skip(1) {
            while snap.lock().is_none() {
                if rdtsc() > deadline {
                    fail(format_args!(
                        "cpu {k} did not bring up port pair {k} within {CORE_START_MS} ms"
                    ));
                }
                core::hint::spin_loop();
            }
        }
    }
    if queues > 1 {
        info!("multi-queue: core k forwards queue pair k of port 0 <-> queue pair k of port 1");
    }
    // With multi-queue the cores share one port pair (each owns a queue pair of it).
    let port_pairs = if queues > 1 { 1 } else { pairs };
    info!(
        "forwarding {} port pair(s) on {} core(s), {} queue pair(s) per port, mode {}, burst {}",
        port_pairs,
        pairs,
        queues,
        cfg.mode.as_str(),
        cfg.burst
    );
    println!("gannet: ready");
    fwd.poll_loop()
}

/// An AP asked to forward pair `cpu` (from its idle loop): bring the pair up and forward until
/// `quit`. Never returns.
pub fn run_core(cpu: usize) -> ! {
    let setup = SETUP.get().expect("START is set after SETUP");
    let zone = crate::mem::ZONE.get().expect("zone set up at boot");
    let mut pcp = PerCpuPages::new(zone, crate::smp::ONLINE.load(Ordering::Acquire).max(1));
    pcp.set_owner(current_cpu());
    let mut fwd = build_pair(cpu, setup, zone, pcp, 0, None, None, None);
    fwd.publish(false);
    fwd.poll_loop()
}

/// Bring up port pair `k` (ports `2k`, `2k + 1`) on the calling core: devices, MSI-X to this
/// core, page_pools `2k` and `2k + 1`, RX rings filled, and (pair 0) the router and
/// management plane.
#[allow(clippy::too_many_arguments)]
fn build_pair(
    k: usize,
    setup: &Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    free_pages_boot: u64,
    reserved: Option<(u64, u64)>,
    routes_file: Option<&str>,
    mgmt_mem: Option<&'static mut [u8]>,
) -> Forwarder<'static> {
    let cfg = &setup.cfg;
    // This core's LAPIC (its devices' MSI-X entries were routed to its APIC ID at set-up).
    crate::apic::init();
    let mut halt_when_idle = cfg.idle == IdleMode::Halt;
    let mut nics: heapless::Vec<Nic, PORTS> = heapless::Vec::new();
    // The boot CPU set up this core's devices (setup_mq / setup_single_queue).
    {
        let mut stash = MQ_NICS.lock();
        for (j, slot) in stash[k].iter_mut().enumerate() {
            let Some(h) = slot.take() else {
                fail(format_args!("port {j}: no device for pair {k} was set up"))
            };
            halt_when_idle &= h.routed;
            if setup.queues > 1 {
                let (rxq, txq) = h.nic.queue_indices();
                info!(
                    "port {j} queue pair {k} (virtqueues {rxq}/{txq}): cpu {k}, MSI-X entry {k} -> vector {:#x}{}",
                    crate::apic::DEVICE_VECTOR_BASE + j as u8,
                    if h.routed { "" } else { " (not routed: polling)" }
                );
            }
            let _ = nics.push(h.nic);
        }
    }
    let Ok(nics) = nics.into_array::<PORTS>() else {
        unreachable!()
    };
    let macs = [MacAddr(nics[0].mac()), MacAddr(nics[1].mac())];
    let pools = core::array::from_fn(|j| {
        let id = (PORTS * k + j) as u32;
        match PagePool::new(PagePoolParams {
            id,
            refill: PP_ALLOC_CACHE_REFILL,
        }) {
            Ok(mut p) => {
                p.set_refill_mode(match cfg.refill {
                    RefillMode::Bulk => PoolRefill::Bulk,
                    RefillMode::Single => PoolRefill::Single,
                });
                p
            }
            Err(e) => fail(format_args!("page_pool {id}: {e:?}")),
        }
    });
    let mut pools: [PagePool; PORTS] = pools;
    for (j, pool) in pools.iter_mut().enumerate() {
        let id = PORTS * k + j;
        if let Err(e) = pool.attach_ring(&POOL_RINGS[id]) {
            fail(format_args!("page_pool {id}: recycle ring: {e:?}"));
        }
        PORT_MACS[id].store(mac_u64(macs[j]), Ordering::Release);
    }
    // Router mode: the boot CPU builds the one FIB first; every core gets its own router
    // (neighbour table, ICMP bucket, counters) over it.
    if k == 0 && cfg.mode == Mode::Router {
        build_fib(cfg, macs, reserved, routes_file);
    }
    let router = (cfg.mode == Mode::Router).then(|| core_router(cfg, macs, k, setup.pairs));
    // The management plane runs on core 0; other cores hand its frames over (MGMT_RING).
    let mgmt_remote = cfg.mgmt_port().filter(|_| k != 0);
    let mgmt = cfg.mgmt_port().zip(mgmt_mem).map(|(p, mem)| {
        let net = cfg.ip[p].expect("router mode has ip0/ip1");
        info!(
            "mgmt: {} on port {p}: ARP, ICMP echo, http://{}:{}/metrics",
            net,
            net.addr,
            crate::mgmt::METRICS_PORT
        );
        Mgmt::new(p, macs[p].0, net.addr, net.len, mem, now_ms(), rdtsc())
    });
    let mut fwd = Forwarder {
        cfg: cfg.clone(),
        zone,
        pcp,
        nics: ManuallyDrop::new(nics),
        nic_stats_final: None,
        pools,
        counters: [PortCounters::default(); PORTS],
        macs,
        busy_cycles: 0,
        kicks: 0,
        free_pages_boot,
        pair: k,
        halts: 0,
        busy_iters: 0,
        phase_cycles: [0; 4],
        refill_cycles: 0,
        halt_when_idle,
        dma: IdentityDma,
        rx_scratch: [RxBuf {
            pfn: Pfn(0),
            len: 0,
            status: RxStatus::Ok,
        }; MAX_BURST],
        page_scratch: [Pfn(0); QUEUE_SIZE],
        router,
        tx_stage: [[TxBuf {
            pfn: Pfn(0),
            len: 0,
        }; MAX_BURST]; PORTS],
        tx_n: [0; PORTS],
        spare: None,
        router_polled_ns: 0,
        mgmt,
        mgmt_remote,
        sync: RouterSync::default(),
    };
    for p in 0..PORTS {
        fwd.refill(p);
    }
    fwd.kick_all();
    for p in 0..PORTS {
        info!(
            "port {}: {} RX buffers posted from page_pool {} (refill batch {})",
            PORTS * k + p,
            fwd.nics[p].rx_posted(),
            PORTS * k + p,
            PP_ALLOC_CACHE_REFILL
        );
    }
    if fwd.halt_when_idle {
        let hz = crate::apic::start_periodic_timer(IDLE_TIMER_US);
        info!(
            "idle (cpu {k}): poll {IDLE_POLL_US} us, then halt until RX MSI-X or the {} ms LAPIC timer ({hz} Hz)",
            IDLE_TIMER_US / 1000
        );
    } else {
        info!("idle (cpu {k}): busy polling");
    }
    fwd
}

impl Forwarder<'_> {
    /// Give a page back to the pool that owns it (same core: straight into its alloc cache).
    #[inline]
    fn recycle(&mut self, pfn: Pfn) {
        let owner = self.zone.page(pfn).pool();
        match owner.and_then(|id| self.local_pool(id)) {
            Some(i) => self.pools[i].recycle_direct(pfn, &mut self.pcp, self.zone, &mut self.dma),
            // Another core's pool: back through its recycle ring (unmapped and freed here if
            // the ring is full).
            None if owner.is_some_and(|id| (id as usize) < MAX_NICS) => {
                let id = owner.expect("checked") as usize;
                let _ = POOL_RINGS[id].recycle_remote(
                    pfn,
                    self.zone,
                    Some(&mut self.pcp),
                    &mut self.dma,
                );
            }
            _ => {
                // Not a pool page: a bug somewhere; free it rather than leak it.
                error!(
                    "page {:#x} has no owning pool (owner {owner:?}); freeing it",
                    pfn.addr()
                );
                self.pcp.free_page(self.zone, pfn);
            }
        }
    }

    /// This core's index of page_pool `id` (pools are numbered by port: pair `k` owns pools
    /// `2k` and `2k + 1`).
    #[inline]
    fn local_pool(&self, id: u32) -> Option<usize> {
        let i = (id as usize).wrapping_sub(2 * self.pair);
        (i < PORTS).then_some(i)
    }

    /// A transmitted page is done: back to its pool, or, with `pool=release`, released to the
    /// allocator (unmapped, ownership cleared) so the pool stays empty.
    #[inline]
    fn tx_done(&mut self, pfn: Pfn) {
        if self.cfg.pool == PoolMode::Recycle {
            return self.recycle(pfn);
        }
        match self
            .zone
            .page(pfn)
            .pool()
            .and_then(|id| self.local_pool(id))
        {
            Some(i) => self.pools[i].release_page(pfn, &mut self.pcp, self.zone, &mut self.dma),
            None => self.recycle(pfn),
        }
    }

    /// Fill every empty RX slot of port `p` from its page_pool, in one batch.
    fn refill(&mut self, p: usize) {
        let want = self.nics[p].rx_free_slots();
        if want == 0 {
            return;
        }
        let mut n = 0;
        while n < want {
            // An empty alloc cache means this call takes the slow path (allocator refill and
            // DMA mapping): time it, so `refill_cycles / refill_pages` isolates the allocator's
            // cost per page from the rest of the datapath (bulk vs single refill).
            let slow = self.pools[p].cached() == 0;
            let t0 = if slow { rdtsc() } else { 0 };
            let got = self.pools[p].alloc(&mut self.pcp, self.zone, &mut self.dma);
            if slow {
                self.refill_cycles += rdtsc() - t0;
            }
            match got {
                Some(pfn) => {
                    self.page_scratch[n] = pfn;
                    n += 1;
                }
                None => {
                    self.counters[p].no_buffer += 1;
                    break;
                }
            }
        }
        // SAFETY: the pages come fresh from the pool; nothing else references them.
        let posted = unsafe { self.nics[p].rx_refill(&self.page_scratch[..n]) };
        for i in posted..n {
            self.recycle(self.page_scratch[i]);
        }
    }

    fn kick_all(&mut self) {
        for nic in self.nics.iter_mut() {
            self.kicks += u64::from(nic.kick());
        }
    }

    /// Receive a burst on port `p` and send what survives out of the other port. Returns the
    /// number of RX buffers completed.
    fn rx_forward(&mut self, p: usize) -> usize {
        if self.cfg.xcore && pairs() > 1 {
            return self.rx_forward_xcore(p);
        }
        let q = 1 - p;
        let n = self.nics[p].rx_burst(&mut self.rx_scratch[..self.cfg.burst]);
        if n == 0 {
            return 0;
        }
        for i in 0..n {
            let b = self.rx_scratch[i];
            if !self.rx_accept(p, b) {
                continue;
            }
            // SAFETY: the page came back from the RX ring and is ours.
            let frame = unsafe { frame_bytes(b.pfn, b.len) };
            match forward_frame(self.cfg.mode, frame, self.macs[q], self.cfg.peer[q]) {
                Verdict::Forward => self.stage_tx(q, b.pfn, b.len),
                Verdict::Drop(why) => {
                    self.counters[p].drop(why);
                    self.recycle(b.pfn);
                }
            }
        }
        self.flush_tx(q);
        n
    }

    /// Count one completed RX buffer of port `p`; a buffer that carries no whole frame (too
    /// big, a continuation of one, malformed) is counted under its drop reason and recycled.
    /// Returns whether `b` holds a frame to process.
    #[inline]
    fn rx_accept(&mut self, p: usize, b: RxBuf) -> bool {
        match b.status {
            RxStatus::Ok => {
                self.counters[p].rx += 1;
                self.counters[p].rx_bytes += b.len as u64;
                return true;
            }
            RxStatus::TooBig => {
                self.counters[p].rx += 1;
                self.counters[p].drop(DropReason::TooBig);
            }
            RxStatus::Continuation => {}
            RxStatus::Malformed => self.counters[p].drop(DropReason::BadDesc),
        }
        self.recycle(b.pfn);
        false
    }

    /// A page for an ICMP error or ARP request, from pool 0 (kept until used).
    fn spare_page(&mut self) -> Option<Pfn> {
        if self.spare.is_none() {
            self.spare = self.pools[0].alloc(&mut self.pcp, self.zone, &mut self.dma);
        }
        self.spare
    }

    /// Queue `len` frame bytes of page `pfn` for TX on `port` (sent at the next flush).
    fn stage_tx(&mut self, port: usize, pfn: Pfn, len: usize) {
        if self.tx_n[port] == MAX_BURST {
            self.flush_tx(port);
        }
        self.tx_stage[port][self.tx_n[port]] = TxBuf { pfn, len };
        self.tx_n[port] += 1;
    }

    /// Send what is staged for `port`; what does not fit the ring is dropped and counted.
    fn flush_tx(&mut self, q: usize) {
        let n = core::mem::take(&mut self.tx_n[q]);
        if n == 0 {
            return;
        }
        // SAFETY: each staged page holds a frame at NET_HDR_LEN and is handed to the TX ring.
        let sent = unsafe { self.nics[q].tx_burst(&self.tx_stage[q][..n]) };
        self.counters[q].tx += sent as u64;
        self.counters[q].tx_bytes += self.tx_stage[q][..sent]
            .iter()
            .map(|t| t.len as u64)
            .sum::<u64>();
        for i in sent..n {
            self.counters[q].drop(DropReason::TxRingFull);
            self.recycle(self.tx_stage[q][i].pfn);
        }
    }

    /// Router mode: receive a burst on port `p`, route each frame (RFC 1812), transmit what
    /// leaves, then run the router's pending events. Returns RX buffers completed.
    fn rx_route(&mut self, p: usize) -> usize {
        let n = self.nics[p].rx_burst(&mut self.rx_scratch[..self.cfg.burst]);
        if n == 0 {
            return 0;
        }
        let now = crate::time::uptime_ns();
        for i in 0..n {
            let b = self.rx_scratch[i];
            if !self.rx_accept(p, b) {
                continue;
            }
            // SAFETY: the page came back from the RX ring and is ours; the frame lies at
            // [NET_HDR_LEN, NET_HDR_LEN + len) within the page.
            let frame = unsafe { frame_bytes(b.pfn, b.len) };
            // smoltcp learns neighbours only from ARP: let it see the ARP frames too (the
            // router answers requests for the port address itself).
            if frame.len() >= 14 && frame[12..14] == [0x08, 0x06] {
                self.copy_to_mgmt(p, frame);
            }
            let spare = self.spare_page();
            // SAFETY: the spare page is ours (allocated from the pool, not posted anywhere).
            let icmp = spare.map_or(&mut [][..], |sp| unsafe { frame_bytes(sp, MAX_FRAME) });
            let router = self.router.as_mut().expect("rx_route in router mode");
            let action = router.process(p, frame, b.pfn, now, icmp);
            // What an ARP frame taught this core goes to the other cores' routers.
            if matches!(action, Action::Consumed | Action::Reply { .. }) {
                if let Some(u) = router.take_learned() {
                    self.share_learned(u);
                }
            }
            match action {
                Action::Forward { port, len } | Action::Reply { port, len } => {
                    self.stage_tx(usize::from(port), b.pfn, len)
                }
                Action::Icmp { port, len, .. } => {
                    let sp = self.spare.take().expect("ICMP built in the spare page");
                    self.stage_tx(usize::from(port), sp, len);
                    self.recycle(b.pfn);
                }
                Action::Queued => {}
                Action::ToHost => {
                    // SAFETY: the page is still ours (ToHost leaves it to us).
                    self.copy_to_mgmt(p, unsafe { frame_bytes(b.pfn, b.len) });
                    self.recycle(b.pfn)
                }
                Action::Consumed | Action::Drop(_) => self.recycle(b.pfn),
            }
        }
        if self.mgmt.as_ref().is_some_and(|m| m.rx_pending() > 0) {
            self.mgmt_poll();
        }
        // The neighbour table's scan is O(entries): run it after a burst only when the burst
        // gave it work, else at most every ROUTER_TIMER_NS for its timers.
        let due = now.saturating_sub(self.router_polled_ns) >= ROUTER_TIMER_NS;
        if due || self.router.as_ref().is_some_and(|r| r.needs_poll()) {
            self.router_polled_ns = now;
            self.router_events(now);
        }
        for q in 0..PORTS {
            self.flush_tx(q);
        }
        n
    }

    /// Router mode on several cores: tell every other core's router what this one learned
    /// from ARP (lock-free push into each one's [`NEIGH_RINGS`] entry; a full ring drops the
    /// update, counted, and that core resolves by its own ARP request).
    fn share_learned(&mut self, u: netstack::router::NeighUpdate) {
        for (k, ring) in NEIGH_RINGS.iter().enumerate().take(pairs()) {
            if k == self.pair {
                continue;
            }
            match ring.push(u) {
                Ok(()) => {
                    self.sync.neigh_sent += 1;
                    self.wake(k);
                }
                Err(_) => self.sync.neigh_dropped += 1,
            }
        }
    }

    /// With `idle=halt`: wake core `k` (IPI) so a halted core takes what was just pushed to
    /// it now rather than at its next 10 ms timer tick. Rare (ARP learning, management
    /// frames).
    fn wake(&self, k: usize) {
        if self.cfg.idle == IdleMode::Halt {
            crate::smp::send_ipi(crate::smp::IpiTarget::One(k), crate::smp::WAKE_VECTOR);
        }
    }

    /// Router mode on several cores, at the top of every poll iteration: apply the neighbour
    /// updates other cores sent (then release what was queued behind them) and, on core 0,
    /// feed the management plane the frames other cores handed over. Returns items taken.
    fn router_sync(&mut self) -> usize {
        let ring = &NEIGH_RINGS[self.pair];
        let mut n = 0;
        if let Some(r) = self.router.as_mut() {
            let mut now = 0;
            while let Some(u) = ring.pop() {
                if n == 0 {
                    now = crate::time::uptime_ns();
                }
                r.learn(u, now);
                n += 1;
            }
            self.sync.neigh_applied += n as u64;
            if n > 0 && r.needs_poll() {
                self.router_polled_ns = now;
                self.router_events(now);
            }
        }
        if self.mgmt.is_some() && !MGMT_RING.is_empty() {
            n += self.drain_mgmt_ring();
        }
        if n > 0 {
            for q in 0..PORTS {
                self.flush_tx(q);
            }
        }
        n
    }

    /// Core 0: give the management plane the frames other cores handed over, recycle their
    /// pages (to the other cores' pools) and run it. Returns frames taken.
    fn drain_mgmt_ring(&mut self) -> usize {
        let mut got = [Pfn(0); crate::mgmt::RX_QUEUE];
        // Take only what smoltcp's RX queue has room for; the rest waits in the ring.
        let room = self
            .mgmt
            .as_ref()
            .map_or(0, |m| crate::mgmt::RX_QUEUE.saturating_sub(m.rx_pending()));
        let n = MGMT_RING.pop_batch(&mut got[..room]);
        for &pfn in &got[..n] {
            // SAFETY: the sending core wrote length and port into the page's header area and
            // gave the page up with the push; it is ours now.
            let len = unsafe { (pfn.addr() as *const u16).read_unaligned() } as usize;
            if let Some(m) = self.mgmt.as_mut() {
                // SAFETY: as above; the frame lies at [NET_HDR_LEN, NET_HDR_LEN + len).
                m.push_rx(unsafe { frame_bytes(pfn, len.min(MAX_FRAME)) });
            }
            self.recycle(pfn);
        }
        if n > 0 {
            self.mgmt_poll();
        }
        n
    }

    /// A core other than 0: copy a frame for the management plane (on `port`) into a page of
    /// this core's pool and hand it to core 0 ([`MGMT_RING`]); counted, and dropped when no
    /// page is free or the ring is full.
    /// A copy of `frame` (received on port `p`) for the management plane: straight into
    /// smoltcp when it lives on this core and port, handed to core 0 when it lives there, else
    /// nothing (no management address on `p`).
    fn copy_to_mgmt(&mut self, p: usize, frame: &[u8]) {
        if let Some(m) = self.mgmt.as_mut().filter(|m| m.port == p) {
            m.push_rx(frame);
        } else if self.mgmt_remote == Some(p) {
            self.mgmt_handoff(p, frame);
        }
    }

    fn mgmt_handoff(&mut self, port: usize, frame: &[u8]) {
        let Some(pfn) = self.pools[port].alloc(&mut self.pcp, self.zone, &mut self.dma) else {
            self.sync.mgmt_handoff_dropped += 1;
            return;
        };
        let len = frame.len().min(MAX_FRAME);
        // SAFETY: a fresh pool page, ours until pushed; the header area [0, NET_HDR_LEN) and
        // the frame area [NET_HDR_LEN, NET_HDR_LEN + len) lie within it.
        unsafe {
            frame_bytes(pfn, len).copy_from_slice(&frame[..len]);
            let h = pfn.addr() as *mut u8;
            (h as *mut u16).write_unaligned(len as u16);
            h.add(2).write(port as u8);
        }
        match MGMT_RING.push(pfn) {
            Ok(()) => {
                self.sync.mgmt_handoff += 1;
                self.wake(0);
            }
            Err(pfn) => {
                self.sync.mgmt_handoff_dropped += 1;
                self.recycle(pfn);
            }
        }
    }

    /// Run the router's pending work: ARP requests to send, queued frames now resolved (or
    /// dropped on timeout).
    fn router_events(&mut self, now: u64) {
        loop {
            let spare = self.spare_page();
            // SAFETY: the spare page is ours.
            let out = spare.map_or(&mut [][..], |sp| unsafe { frame_bytes(sp, MAX_FRAME) });
            let Some(router) = self.router.as_mut() else {
                return;
            };
            match router.poll(now, out) {
                None => return,
                Some(Event::SendArp { port, len }) => {
                    let sp = self
                        .spare
                        .take()
                        .expect("ARP request built in the spare page");
                    self.stage_tx(usize::from(port), sp, len);
                }
                Some(Event::Transmit {
                    handle,
                    port,
                    len,
                    dst,
                    src,
                }) => {
                    // SAFETY: the router handed the queued page back to us.
                    set_macs(unsafe { frame_bytes(handle, len) }, dst, src);
                    self.stage_tx(usize::from(port), handle, len);
                }
                Some(Event::Dropped { handle, .. }) => self.recycle(handle),
            }
        }
    }

    /// Run the management plane (bounded work) and send what it produced, each frame copied
    /// into a page from the mgmt port's pool.
    fn mgmt_poll(&mut self) {
        let Some(mut m) = self.mgmt.take() else {
            return;
        };
        m.poll(now_ms(), |w, c| self.write_metrics(w, Some(c)));
        let port = m.port;
        m.drain_tx(|f| {
            let Some(pfn) = self.pools[port].alloc(&mut self.pcp, self.zone, &mut self.dma) else {
                self.counters[port].no_buffer += 1;
                return;
            };
            // SAFETY: a fresh pool page, ours until handed to the TX ring.
            unsafe { frame_bytes(pfn, f.len()) }.copy_from_slice(f);
            self.stage_tx(port, pfn, f.len());
        });
        self.mgmt = Some(m);
    }

    /// The `/metrics` body, Prometheus text exposition format 0.0.4.
    fn write_metrics(&self, w: &mut dyn core::fmt::Write, mgmt: Option<MgmtCounters>) {
        let mgmt = mgmt.or_else(|| self.mgmt.as_ref().map(|m| m.counters()));
        let _ = crate::stats::write_prometheus(&all_pairs(self), &self.system_snap(), mgmt, w);
    }

    /// Router timers while idle (ARP retransmits, queue timeouts): run events, send, kick.
    fn router_tick(&mut self) {
        if self.router.is_none() {
            return;
        }
        self.mgmt_poll();
        let now = crate::time::uptime_ns();
        self.router_polled_ns = now;
        self.router_events(now);
        for q in 0..PORTS {
            self.flush_tx(q);
        }
        self.kick_all();
    }

    /// `routes`: the FIB's rules.
    pub(crate) fn print_routes(&self) {
        let Some(r) = &self.router else {
            return println!("routes: not in router mode");
        };
        for (net, nh) in r.fib().routes() {
            println!("route {net} {nh:?}");
        }
    }

    /// `neigh`: the neighbour table.
    pub(crate) fn print_neigh(&self) {
        let Some(r) = &self.router else {
            return println!("neigh: not in router mode");
        };
        for n in r.neighbours() {
            println!(
                "neigh cpu {} {} port {} mac {} {:?} queued {}",
                self.pair,
                core::net::Ipv4Addr::from_bits(n.ip),
                n.port,
                n.mac,
                n.state,
                n.queued
            );
        }
    }

    /// `xcore=on`: frames received on local port `p` leave through port `1 - p` of the next
    /// pair, which another core owns: rewrite them for that port, write length and port into
    /// the page's header area and hand them to that core's hand-off ring.
    fn rx_forward_xcore(&mut self, p: usize) -> usize {
        let n = self.nics[p].rx_burst(&mut self.rx_scratch[..self.cfg.burst]);
        if n == 0 {
            return 0;
        }
        let dst_core = (self.pair + 1) % pairs();
        let dst_port = 1 - p;
        let global = PORTS * dst_core + dst_port;
        let out_mac = MacAddr(u64_mac(PORT_MACS[global].load(Ordering::Acquire)));
        let peer = self.cfg.peer[dst_port];
        for i in 0..n {
            let b = self.rx_scratch[i];
            if !self.rx_accept(p, b) {
                continue;
            }
            // SAFETY: the page came back from the RX ring and is ours.
            let frame = unsafe { frame_bytes(b.pfn, b.len) };
            match forward_frame(self.cfg.mode, frame, out_mac, peer) {
                Verdict::Forward => {
                    // SAFETY: the header area [0, NET_HDR_LEN) of our page; TX rewrites it.
                    unsafe {
                        let h = b.pfn.addr() as *mut u8;
                        (h as *mut u16).write_unaligned(b.len as u16);
                        h.add(2).write(dst_port as u8);
                    }
                    if HANDOFF[dst_core].push(b.pfn).is_err() {
                        self.counters[p].drop(DropReason::TxRingFull);
                        self.recycle(b.pfn);
                    }
                }
                Verdict::Drop(why) => {
                    self.counters[p].drop(why);
                    self.recycle(b.pfn);
                }
            }
        }
        n
    }

    /// Transmit what other cores handed to this core (`xcore=on`). Returns frames taken.
    fn drain_handoff(&mut self) -> usize {
        let ring = &HANDOFF[self.pair];
        if ring.is_empty() {
            return 0;
        }
        let mut got = [Pfn(0); 64];
        let n = ring.pop_batch(&mut got);
        for &pfn in &got[..n] {
            // SAFETY: the sending core wrote length and port into the page's header area and
            // gave the page up with the push; it is ours now.
            let (len, port) = unsafe {
                let h = pfn.addr() as *const u8;
                (
                    (h as *const u16).read_unaligned() as usize,
                    usize::from(h.add(2).read()),
                )
            };
            self.stage_tx(port.min(PORTS - 1), pfn, len.min(MAX_FRAME));
        }
        for q in 0..PORTS {
            self.flush_tx(q);
        }
        n
    }

    /// Return completed TX pages of every port to their pools.
    fn tx_reap(&mut self, force: bool) -> usize {
        let mut total = 0;
        for q in 0..PORTS {
            // Like DPDK's tx_free_thresh: reap only once enough descriptors are outstanding,
            // so the ring walk is paid for a batch of completions, not per iteration.
            if !force && self.nics[q].tx_posted() < TX_FREE_THRESH {
                continue;
            }
            let m = self.nics[q].tx_complete(&mut self.page_scratch);
            for i in 0..m {
                self.tx_done(self.page_scratch[i]);
            }
            total += m;
        }
        total
    }

    fn poll_loop(&mut self) -> ! {
        let bsp = self.pair == 0;
        let mut console = Console::new();
        let console_every = (tsc_hz() / CONSOLE_POLL_HZ).max(1);
        let idle_poll = tsc_hz() / 1_000_000 * IDLE_POLL_US;
        let mut next_console = rdtsc() + console_every;
        let mut idle_since = rdtsc();
        loop {
            let t0 = rdtsc();
            if !bsp && QUIT_PHASE.load(Ordering::Relaxed) != 0 {
                self.stop_core();
            }
            let mut work = 0;
            if self.router.is_some() && pairs() > 1 {
                work += self.router_sync();
            }
            for p in 0..PORTS {
                work += if self.router.is_some() {
                    self.rx_route(p)
                } else {
                    self.rx_forward(p)
                };
            }
            let t_rx = rdtsc();
            work += self.tx_reap(false);
            if self.cfg.xcore {
                work += self.drain_handoff();
            }
            if work > 0 {
                let t_reap = rdtsc();
                for p in 0..PORTS {
                    // Like DPDK's rx_free_thresh: refill a batch of empty slots at once.
                    if self.nics[p].rx_free_slots() >= RX_FREE_THRESH {
                        self.refill(p);
                    }
                }
                let t_refill = rdtsc();
                self.kick_all();
                let t1 = rdtsc();
                self.busy_cycles += t1 - t0;
                // Where a busy iteration's cycles go (instructions under icount).
                self.phase_cycles[0] += t_rx - t0;
                self.phase_cycles[1] += t_reap - t_rx;
                self.phase_cycles[2] += t_refill - t_reap;
                self.phase_cycles[3] += t1 - t_refill;
                self.busy_iters += 1;
                idle_since = t1;
                if !bsp && t1 >= next_console {
                    // Keep the published counters fresh while busy too.
                    next_console = t1 + console_every;
                    self.publish(false);
                    if NEIGH_DUMP[self.pair].swap(false, Ordering::AcqRel) {
                        self.print_neigh();
                    }
                }
            } else if self.halt_when_idle && t0 - idle_since > idle_poll {
                self.halt();
                idle_since = rdtsc();
                // The timer tick that may have woken us also paces the console.
                next_console = 0;
            } else if t0 >= next_console {
                next_console = t0 + console_every;
                // Drain requests from other CPUs are honoured here, in thread context.
                let (pcp, zone) = (&mut self.pcp, self.zone);
                if DRAIN.poll(current_cpu() as usize, || pcp.drain_local_pages(zone)) {
                    crate::smp::CPUS[current_cpu() as usize]
                        .drains
                        .fetch_add(1, Ordering::Relaxed);
                }
                // Every core's router runs its neighbour timers (ARP retransmits, queue
                // timeouts) while idle.
                self.router_tick();
                if !bsp {
                    self.publish(false);
                    if NEIGH_DUMP[self.pair].swap(false, Ordering::AcqRel) {
                        self.print_neigh();
                    }
                    continue;
                }
                match console.poll() {
                    Some(Command::Stats) => self.print_stats(),
                    Some(Command::Help) => println!("{HELP}"),
                    Some(Command::Buddyinfo) => self.print_buddyinfo(),
                    Some(Command::Pools) => self.print_pools(),
                    Some(Command::Routes) => self.print_routes(),
                    Some(Command::Neigh) => {
                        self.print_neigh();
                        // Each other routing core prints its own table from its loop.
                        for (k, dump) in NEIGH_DUMP.iter().enumerate().take(pairs()).skip(1) {
                            dump.store(true, Ordering::Release);
                            self.wake(k);
                        }
                    }
                    Some(Command::Drain) => self.drain_all(),
                    Some(Command::Cpus) => self.print_cpus(),
                    Some(Command::Ipi) => ipi_ping(),
                    Some(Command::Quit) => self.shutdown(),
                    None => {}
                }
            }
        }
    }

    /// Sleep until a device interrupt or the timer: arm RX interrupts on every port, and only
    /// if no frame slipped in meanwhile, `sti; hlt` (the `sti` shadow makes the pair atomic, so
    /// a wake-up between the check and the halt is not lost).
    fn halt(&mut self) {
        let mut pending = false;
        for nic in self.nics.iter_mut() {
            pending |= nic.rx_arm_interrupt();
        }
        if !pending {
            self.halts += 1;
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
        }
        for nic in self.nics.iter_mut() {
            nic.park_interrupts();
        }
    }

    /// `cpus`: per-CPU state.
    fn print_cpus(&self) {
        use core::sync::atomic::Ordering::Relaxed;
        for (i, c) in crate::smp::CPUS.iter().enumerate() {
            if !c.online.load(Relaxed) {
                continue;
            }
            let pairs = all_pairs(self);
            let (role, fwd, halts) = match pairs.iter().find(|p| p.pair == i) {
                Some(p) => (
                    "forwarding",
                    p.counters.iter().map(|c| c.tx).sum::<u64>(),
                    p.halts,
                ),
                None => ("idle", 0, c.halts.load(Relaxed)),
            };
            // Multi-queue: which queue pair (of both ports) the core forwards.
            let mq = if queues() > 1 && role == "forwarding" {
                Some(i)
            } else {
                None
            };
            println!(
                "cpu {i}: apic {} online {role} forwarded {fwd}{}{} halts {halts} drains {}",
                c.apic_id.load(Relaxed),
                if mq.is_some() { " queue_pair " } else { "" },
                MaybeNum(mq),
                c.drains.load(Relaxed)
            );
        }
    }

    /// `drain`: `drain_all_pages` — this CPU drains its own lists, every other online CPU is
    /// asked to and acknowledged (bounded wait).
    fn drain_all(&mut self) {
        let before = self.pcp.count();
        let deadline = rdtsc() + tsc_hz() / 1000 * DRAIN_TIMEOUT_MS;
        let (pcp, zone) = (&mut self.pcp, self.zone);
        let mut woken = false;
        match DRAIN.drain_all_pages(
            Some(current_cpu() as usize),
            || pcp.drain_local_pages(zone),
            || {
                // The requests are posted by now: wake halted CPUs to honour them.
                if !core::mem::replace(&mut woken, true) {
                    crate::smp::wake_others();
                }
                rdtsc() > deadline
            },
        ) {
            Ok(()) => println!(
                "drain_all_pages: ok on {} CPUs ({before} pcp pages returned on cpu 0; {} free pages in the buddy lists)",
                crate::smp::ONLINE.load(core::sync::atomic::Ordering::Acquire),
                self.zone.free_pages()
            ),
            Err(e) => println!("drain_all_pages: {e:?}"),
        }
    }

    /// Driver counters of port `i`.
    pub(crate) fn nic_stats(&self, i: usize) -> DriverStats {
        match &self.nic_stats_final {
            Some(s) => s[i],
            None => self.nics[i].stats(),
        }
    }

    /// `buddyinfo`: free blocks per order (like /proc/buddyinfo) and the unusable-free-space
    /// index per order in thousandths (like /sys/kernel/debug/extfrag/unusable_index).
    pub(crate) fn print_buddyinfo(&self) {
        let z = self.zone;
        crate::serial::print(format_args!("buddyinfo zone 0 free blocks per order:"));
        for n in z.buddyinfo() {
            crate::serial::print(format_args!(" {n}"));
        }
        crate::serial::print(format_args!(
            "\nunusable_index zone 0 (per mille) per order:"
        ));
        for o in 0..=mm::MAX_ORDER {
            crate::serial::print(format_args!(" {}", z.unusable_index(o)));
        }
        println!();
    }

    /// `pools`: one line per page_pool.
    /// One line per page_pool of every forwarding core (other cores' as last published).
    pub(crate) fn print_pools(&self) {
        crate::stats::print_pools(&all_pairs(self));
    }

    pub(crate) fn print_stats(&self) {
        crate::stats::print_stats(&all_pairs(self), &self.system_snap());
    }

    /// `quit`: stop receiving, let TX finish (bounded), reset the devices and take back every
    /// page, return all pages to the allocator, check nothing leaked, print the final STATS
    /// and exit.
    /// What this core's pair looks like now, for the boot CPU's `stats` and `quit`.
    pub(crate) fn snap(&self, done: bool, leaked: u64) -> PairSnap {
        PairSnap {
            pair: self.pair,
            macs: self.macs,
            counters: self.counters,
            nic: [self.nic_stats(0), self.nic_stats(1)],
            pools: core::array::from_fn(|i| PoolSnap::of(&self.pools[i])),
            busy_cycles: self.busy_cycles,
            kicks: self.kicks,
            halts: self.halts,
            pcp_count: self.pcp.count() as u64,
            refill_cycles: self.refill_cycles,
            busy_iters: self.busy_iters,
            phase_cycles: self.phase_cycles,
            router: self.router.as_ref().map(|r| RouterSnap {
                counters: *r.counters(),
                queued_now: r.queued_frames() as u64,
                sync: self.sync,
            }),
            done,
            leaked,
        }
    }

    /// What `STATS` and `/metrics` need besides the pairs' snapshots.
    fn system_snap(&self) -> crate::stats::SystemSnap {
        crate::stats::SystemSnap {
            mode: self.cfg.mode,
            tsc_hz: tsc_hz(),
            cpus_online: crate::smp::ONLINE.load(Ordering::Acquire),
            queues: queues(),
            free_pages_boot: self.free_pages_boot,
            zone_free_pages: self.zone.free_pages(),
            buddyinfo: self.zone.buddyinfo(),
        }
    }

    /// Publish this core's counters (`done` once its pair is torn down).
    fn publish(&self, done: bool) {
        *SNAPS[self.pair].lock() = Some(self.snap(done, 0));
    }

    /// Another core's `quit`: go through the quit phases with every core, publish the final
    /// counters, halt for good.
    fn stop_core(&mut self) -> ! {
        let mut leaked = 0;
        for phase in 1..=QUIT_PHASES {
            while QUIT_PHASE.load(Ordering::Acquire) < phase {
                core::hint::spin_loop();
            }
            leaked += self.quit_phase(phase);
            if phase == QUIT_PHASES {
                // The final counters go out before the last phase is reported done: the boot
                // CPU prints them as soon as it sees that.
                *SNAPS[self.pair].lock() = Some(self.snap(true, leaked));
            }
            PHASE_DONE[self.pair].store(phase, Ordering::Release);
        }
        loop {
            x86_64::instructions::interrupts::disable();
            x86_64::instructions::hlt();
        }
    }

    /// One phase of `quit` (every core finishes a phase before any starts the next, so no page
    /// is handed to a core or pool that is already gone):
    /// 1. stop: let TX finish (bounded);
    /// 2. reset: reset the devices this core owns (with multi-queue the boot CPU owns them, and
    ///    every core's queues stop at once);
    /// 3. take back: take every page off this core's rings, return them (foreign pages to their
    ///    pool's ring);
    /// 4. hand-off: return pages other cores handed over just before they stopped;
    /// 5. destroy: destroy the pools (draining their rings), drain the pcp list.
    ///
    /// Returns pages lost (phase 5).
    fn quit_phase(&mut self, phase: u8) -> u64 {
        match phase {
            1 => {
                self.drain_tx();
                0
            }
            2 => {
                for nic in self.nics.iter_mut() {
                    nic.reset_device();
                }
                0
            }
            3 => {
                self.release_rings();
                0
            }
            4 => {
                let mut got = [Pfn(0); 64];
                loop {
                    let n = HANDOFF[self.pair].pop_batch(&mut got);
                    if n == 0 {
                        break;
                    }
                    for &pfn in &got[..n] {
                        self.recycle(pfn);
                    }
                }
                // Core 0: frames handed over for the management plane and not yet taken.
                while self.pair == 0 {
                    let n = MGMT_RING.pop_batch(&mut got);
                    if n == 0 {
                        break;
                    }
                    for &pfn in &got[..n] {
                        self.recycle(pfn);
                    }
                }
                0
            }
            _ => self.destroy_pools(),
        }
    }

    /// `quit` on the boot CPU: run the quit phases on every core in step (bounded waits), check
    /// that every page came back, print the final STATS and exit.
    fn shutdown(&mut self) -> ! {
        info!("quit: draining");
        let mut leaked = 0;
        for phase in 1..=QUIT_PHASES {
            QUIT_PHASE.store(phase, Ordering::Release);
            crate::smp::wake_others();
            leaked += self.quit_phase(phase);
            let deadline = rdtsc() + tsc_hz() / 1000 * CORE_STOP_MS;
            for (k, done) in PHASE_DONE.iter().enumerate().take(pairs()).skip(1) {
                while done.load(Ordering::Acquire) < phase {
                    if rdtsc() > deadline {
                        error!(
                            "quit: cpu {k} did not finish phase {phase} within {CORE_STOP_MS} ms"
                        );
                        crate::exit::exit(crate::exit::ExitCode::Failure);
                    }
                    core::hint::spin_loop();
                }
            }
        }
        for (k, snap) in SNAPS.iter().enumerate().take(pairs()).skip(1) {
            match *snap.lock() {
                Some(s) if s.done => leaked += s.leaked,
                _ => {
                    error!("quit: cpu {k} finished without its final counters");
                    crate::exit::exit(crate::exit::ExitCode::Failure);
                }
            }
        }
        self.print_stats();
        let now = self.zone.free_pages() + self.pcp.count() as u64;
        for (i, c) in self.counters.iter().enumerate() {
            info!(
                "port {i}: rx {} tx {} drops {}",
                c.rx,
                c.tx,
                c.drops_total()
            );
        }
        self.print_pools();
        self.print_buddyinfo();
        if leaked > 0 || now != self.free_pages_boot {
            error!(
                "page leak: {now} free pages now, {} at boot, {leaked} in flight",
                self.free_pages_boot
            );
            crate::exit::exit(crate::exit::ExitCode::Failure);
        }
        info!("gannet: shutdown clean ({now} free pages, as at boot)");
        crate::exit::exit(crate::exit::ExitCode::Success)
    }

    /// Quit phase 1: let TX finish (bounded).
    fn drain_tx(&mut self) {
        let deadline = rdtsc() + tsc_hz() / 1000 * TX_DRAIN_MS;
        while self.nics.iter().any(|n| n.tx_posted() > 0) && rdtsc() < deadline {
            self.tx_reap(true);
        }
    }

    /// Quit phase 3 (every device was reset in phase 2): take back every page of this core's
    /// rings and return them all (foreign pages to their pool's ring).
    fn release_rings(&mut self) {
        let mut back: heapless::Vec<Pfn, { 2 * PORTS * QUEUE_SIZE }> = heapless::Vec::new();
        for nic in self.nics.iter_mut() {
            // SAFETY: phase 2 reset every device (its owner did, on this or the boot CPU) and
            // every core finished phase 2 before any started phase 3.
            unsafe {
                nic.take_pages(|pfn| {
                    let _ = back.push(pfn);
                })
            };
        }
        for pfn in back {
            self.recycle(pfn);
        }
        while let Some(pfn) = self.router.as_mut().and_then(|r| r.flush()) {
            self.recycle(pfn);
        }
        for q in 0..PORTS {
            // Staged frames never reached a ring.
            for i in 0..core::mem::take(&mut self.tx_n[q]) {
                self.recycle(self.tx_stage[q][i].pfn);
            }
        }
        if let Some(sp) = self.spare.take() {
            self.recycle(sp);
        }
    }

    /// Quit phase 5: destroy the pools (their rings are drained first), drop the devices
    /// (their virtqueue memory goes back to the zone) and drain this core's pcp list. Returns
    /// pages still in flight (lost: a bug).
    fn destroy_pools(&mut self) -> u64 {
        let mut leaked = 0;
        let held: u64 = self
            .nics
            .iter()
            .map(|n| (n.rx_posted() + n.tx_posted()) as u64)
            .sum();
        for (i, pool) in self.pools.iter_mut().enumerate() {
            if let Err(e) = pool.destroy(&mut self.pcp, self.zone, &mut self.dma) {
                // Nothing but the rings holds pool pages, and the rings were just reclaimed.
                error!(
                    "page_pool {i}: destroy: {e:?}; the device rings hold {held} pages, the rest are lost"
                );
                leaked += pool.in_flight();
            }
        }
        // The devices' virtqueue rings go back to the zone when the devices are dropped; the
        // loop never returns, so drop them explicitly here.
        self.nic_stats_final = Some([self.nics[0].stats(), self.nics[1].stats()]);
        // SAFETY: `self.nics` is never used again (nic_stats reads the frozen copy): we print
        // and exit below.
        unsafe { ManuallyDrop::drop(&mut self.nics) };
        self.pcp.drain_local_pages(self.zone);
        leaked
    }
}

/// One page_pool's counters, copied for another core to print.
#[derive(Copy, Clone)]
pub struct PoolSnap {
    /// Pool id (= port number).
    pub id: u32,
    /// Pages out of the pool.
    pub in_flight: u64,
    /// Pages in the alloc cache.
    pub cached: usize,
    /// Bulk or single refill.
    pub mode: PoolRefill,
    /// Event counters.
    pub stats: mm::page_pool::PagePoolStats,
}

impl PoolSnap {
    fn of(p: &PagePool) -> PoolSnap {
        PoolSnap {
            id: p.id(),
            in_flight: p.in_flight(),
            cached: p.cached(),
            mode: p.refill_mode(),
            stats: p.stats(),
        }
    }
}

/// A core's port pair, as published for the boot CPU.
#[derive(Copy, Clone)]
pub struct PairSnap {
    /// Pair number (= CPU number).
    pub pair: usize,
    /// Port MACs.
    pub macs: [MacAddr; PORTS],
    /// Port counters.
    pub counters: [PortCounters; PORTS],
    /// Driver counters.
    pub nic: [DriverStats; PORTS],
    /// The pair's page_pools.
    pub pools: [PoolSnap; PORTS],
    /// TSC cycles in poll iterations that did work.
    pub busy_cycles: u64,
    /// Notifications written.
    pub kicks: u64,
    /// Idle halts.
    pub halts: u64,
    /// Pages on this core's pcp list.
    pub pcp_count: u64,
    /// Cycles in page_pool slow-path refills.
    pub refill_cycles: u64,
    /// Busy poll iterations.
    pub busy_iters: u64,
    /// Busy-iteration cycles by phase (RX+forward+TX post, TX reap, refill, kick).
    pub phase_cycles: [u64; 4],
    /// Router mode: this core's router.
    pub router: Option<RouterSnap>,
    /// The pair is torn down (after `quit`).
    pub done: bool,
    /// Pages that did not come back at teardown.
    pub leaked: u64,
}

/// One core's router counters, copied for the boot CPU (STATS sums them over cores).
#[derive(Copy, Clone, Default)]
pub struct RouterSnap {
    /// Frame outcomes and the rest of [`RouterCounters`].
    pub counters: RouterCounters,
    /// Frames held in the neighbour queues now.
    pub queued_now: u64,
    /// Cross-core neighbour updates and management hand-offs.
    pub sync: RouterSync,
}

/// The router counters summed over every core's router (`None` outside router mode).
pub fn router_totals(pairs: &[PairSnap]) -> Option<RouterSnap> {
    let mut total: Option<RouterSnap> = None;
    for r in pairs.iter().filter_map(|p| p.router.as_ref()) {
        let t = total.get_or_insert_with(RouterSnap::default);
        t.counters += &r.counters;
        t.queued_now += r.queued_now;
        t.sync += &r.sync;
    }
    total
}

/// Every forwarding pair's counters: this core's (`own`, live) then the others' last published.
pub fn all_pairs(own: &Forwarder<'_>) -> heapless::Vec<PairSnap, MAX_CPUS> {
    let mut v = heapless::Vec::new();
    let _ = v.push(own.snap(false, 0));
    for s in SNAPS.iter().take(pairs()).skip(1) {
        if let Some(p) = *s.lock() {
            let _ = v.push(p);
        }
    }
    v
}

/// The frame bytes of page `pfn`: `len` bytes from [`NET_HDR_LEN`] (clamped to the page).
///
/// # Safety
/// The caller owns the page (not posted to a ring, not aliased) for the slice's lifetime.
unsafe fn frame_bytes<'a>(pfn: Pfn, len: usize) -> &'a mut [u8] {
    // SAFETY: identity-mapped RAM page owned by the caller; the range stays within the page.
    unsafe {
        core::slice::from_raw_parts_mut(
            (pfn.addr() as usize + NET_HDR_LEN) as *mut u8,
            len.min(PAGE_SIZE - NET_HDR_LEN),
        )
    }
}

/// Milliseconds since boot (smoltcp's clock).
fn now_ms() -> i64 {
    (crate::time::uptime_us() / 1000) as i64
}

/// `ipi`: ping all other CPUs, then each alone and a set of all of them, through the IPI
/// registry; print how many answered (each handler counts its pings), waiting at most 100 ms.
fn ipi_ping() {
    use crate::smp::{send_ipi, IpiTarget, CPUS, PING_VECTOR};
    let online: u64 = CPUS
        .iter()
        .enumerate()
        .filter(|(_, c)| c.online.load(Ordering::Acquire))
        .fold(0, |m, (i, _)| m | 1 << i);
    let me = current_cpu() as usize;
    let total = |i: usize| CPUS[i].pings.load(Ordering::Acquire);
    for (name, targets) in [
        ("all others", IpiTarget::AllOthers),
        ("set", IpiTarget::Set(online)),
    ]
    .into_iter()
    .chain(
        (0..64)
            .filter(|i| online & (1 << i) != 0 && *i != me)
            .map(|i| ("one", IpiTarget::One(i))),
    ) {
        let before: [u64; crate::smp::MAX_CPUS] = core::array::from_fn(total);
        let sent = send_ipi(targets, PING_VECTOR);
        let deadline = rdtsc() + tsc_hz() / 10;
        let answered = || {
            (0..crate::smp::MAX_CPUS)
                .filter(|&i| total(i) > before[i])
                .count()
        };
        while answered() < sent && rdtsc() < deadline {
            core::hint::spin_loop();
        }
        println!(
            "ipi {name} {targets:?}: {} of {sent} CPUs answered",
            answered()
        );
    }
}

/// Formats `Some(n)` as `n` and `None` as nothing.
struct MaybeNum(Option<usize>);

impl core::fmt::Display for MaybeNum {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => Ok(()),
        }
    }
}

/// A MAC as the low 48 bits of a u64 (for the atomic per-port table).
fn mac_u64(m: MacAddr) -> u64 {
    let mut b = [0u8; 8];
    b[..6].copy_from_slice(&m.0);
    u64::from_le_bytes(b)
}

/// Inverse of [`mac_u64`].
fn u64_mac(v: u64) -> [u8; 6] {
    let b = v.to_le_bytes();
    [b[0], b[1], b[2], b[3], b[4], b[5]]
}
