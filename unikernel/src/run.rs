//! Forwarding: the boot CPU sets up the devices and its own core, starts one core per further
//! port pair (or queue pair), and every core runs [`poll_loop`] until `quit`.
//!
//! Past ~800 lines because the boot CPU's bring-up (the devices of each NIC kind, the simulated
//! NICs, the tables, the management plane) and every core's poll loop and housekeeping share
//! the one `Appliance` type parameter; the management plane's construction (`build_mgmt`,
//! `put_files`, `mgmt_storage`) is the next part to move out.

use crate::appliance::{Appliance, StockAcl, StockAclRouter, StockFirewall, StockNat};
use crate::arch::apic;
use crate::arch::phases::{self, Phase};
use crate::arch::time::{ms_to_tsc, rdtsc, us_to_tsc, Deadline};
use crate::control::commands::{self, BootFacts};
use crate::control::console::Console;
use crate::control::mgmt::{self, Mgmt, PutFiles};
use crate::dataplane::nf::builtin::ACL;
use crate::dataplane::{
    port_mtu, BurstIn, Core, CoreParams, RouteState, BURSTIN_USED, BURSTIN_WAIT_MS, MAX_CORES,
};
use crate::percpu::{current_cpu, online, CPUS, MAX_CPUS};
use crate::platform::{KernelCore, KernelPlatformOf, FABRIC, FABRIC_MODE, FACTS};
use crate::setup::fib::{self, build_fib, core_router};
use crate::setup::fib6::{build_fib6, core_router6};
use crate::setup::{setup_devices, take_devices, Topology};
use crate::smp::{self, DRAIN};
use crate::{fail, println};
use core::mem::MaybeUninit;
use core::sync::atomic::Ordering;
use log::{debug, info};
use mm::page_pool::PP_ALLOC_CACHE_REFILL;
use mm::{PerCpuPages, Zone, PAGE_SIZE};
use netstack::config::{SimNic, PORTS};
use netstack::{Config, IdleMode, MacAddr, Mode};

const _: () = assert!(MAX_CPUS == MAX_CORES, "one dataplane core slot per CPU");

/// How often the idle loop looks at the serial console: every 10 ms of TSC time. Port I/O
/// takes QEMU's big lock, so polling it every iteration would slow the datapath.
const CONSOLE_POLL_HZ: u64 = 100;
/// How long the boot CPU waits for the other cores to bring their pairs up: 2 s.
const CORE_START_MS: u64 = 2000;
/// With `idle=halt`: how long a core polls empty rings before it halts, in µs. 50 µs covers a
/// few inter-arrival times at the rates QEMU delivers, so a busy port never sleeps.
const IDLE_POLL_US: u64 = 50;
/// With `idle=halt`: the LAPIC timer period that bounds a halt (and paces the console) in µs.
const IDLE_TIMER_US: u64 = 10_000;

/// What the boot CPU hands to the other forwarding cores.
struct Setup {
    cfg: Config,
    topo: Topology,
}

static SETUP: spin::Once<Setup> = spin::Once::new();

/// One router state per forwarding core (`mode=router`), carved by the boot CPU before the boot
/// free-page count (kept for good, like the boot FIB) and taken by core `k` in `core_over`.
static ROUTE_SLOTS: spin::Mutex<[Option<&'static mut MaybeUninit<RouteState>>; MAX_CORES]> =
    spin::Mutex::new([const { None }; MAX_CORES]);

/// Carve each core's router state into [`ROUTE_SLOTS`] (a core per pair at most, a pair per
/// CPU at most); a zone without the room stops the boot with a named error.
fn carve_route_slots(zone: &Zone) {
    let mut slots = ROUTE_SLOTS.lock();
    for (k, slot) in slots.iter_mut().take(online()).enumerate() {
        *slot = Some(
            crate::mem::alloc_forever_for::<RouteState>(zone).unwrap_or_else(|| {
                fail(format_args!("core {k}: no memory for the router's state"))
            }),
        );
    }
}

/// The tables the mode needs, built before the boot free-page count: the boot FIB and each
/// core's router state (`mode=router`), the ACL's rule set (`mode=acl`, or `mode=router` with a
/// rules file: the ACL in front of the router). `quit` accounts for the FIB and the rule sets
/// (and for what live replacements put in their place) separately. A failure stops the boot.
fn build_tables(
    cfg: &Config,
    zone: &'static Zone,
    routes_file: Option<&'static str>,
    rules_file: Option<&'static str>,
) {
    if cfg.mode == Mode::Router {
        if let Err(e) = build_fib(cfg, zone, routes_file) {
            fail(format_args!("{}", e.0));
        }
        if let Err(e) = build_fib6(cfg, zone, routes_file) {
            fail(format_args!("{}", e.0));
        }
        carve_route_slots(zone);
    }
    let chained = matches!(cfg.mode, Mode::Router | Mode::Firewall) && rules_file.is_some();
    if cfg.mode == Mode::Acl || chained {
        build_acl(zone, rules_file);
    }
    if cfg.mode == Mode::Nat {
        build_nat(cfg, zone);
    }
    if cfg.mode == Mode::Firewall {
        build_firewall(cfg, zone);
    }
}

/// `mode=firewall`: each CPU's connection table (`setup::firewall`), or the boot stops naming
/// why.
fn build_firewall(cfg: &Config, zone: &'static Zone) {
    let cpus = online();
    match crate::setup::firewall::build(cfg, zone, cpus, rdtsc()) {
        Ok(bytes) => info!(
            "firewall: {} connections per core, {} KiB on each of {cpus} CPU(s); new connections from port 0 (inside) only",
            cfg.fw.sessions,
            bytes.div_ceil(1024)
        ),
        Err(e) => fail(format_args!("{e}")),
    }
}

/// `mode=nat`: each CPU's translator (`setup::nat`), or the boot stops naming why.
fn build_nat(cfg: &Config, zone: &'static Zone) {
    let cpus = online();
    match crate::setup::nat::build(cfg, zone, cpus, rdtsc()) {
        Ok(bytes) => {
            let s = &cfg.nat;
            info!(
                "nat: pool of {} address(es), ports {}-{}, {:?} filtering, {} static forward(s); {} sessions per core, {} KiB on each of {cpus} CPU(s)",
                s.pool.len(),
                s.port_lo,
                s.port_hi,
                s.filtering,
                s.forwards.len(),
                s.sessions,
                bytes.div_ceil(1024)
            );
        }
        Err(e) => fail(format_args!("{e}")),
    }
}

/// The boot CPU: set up every device, bring up core 0 here and one core per further pair,
/// then forward until `quit`. Never returns.
pub fn run<A: Appliance>(
    cfg: &Config,
    zone: &'static Zone,
    routes_file: Option<&'static str>,
    rules_file: Option<&'static str>,
) -> ! {
    // Taken before the boot free-page count: it is never returned.
    let mgmt_mem = cfg.mgmt_port().map(|_| {
        (
            mgmt_storage(zone, mgmt::STORAGE_BYTES),
            mgmt_storage(zone, mgmt::JUMBO_STORAGE_BYTES),
        )
    });
    build_tables(cfg, zone, routes_file, rules_file);
    let mut pcp = PerCpuPages::new(zone, online());
    // The pcp rule (mm::pcp docs): only the owning CPU, thread context. Checked in debug builds.
    mm::pcp::set_context_hooks(crate::percpu::in_interrupt, current_cpu);
    pcp.set_owner(current_cpu());
    // Free pages right after the allocator is up, before any device took memory: `quit` must
    // come back to exactly this number.
    // (With the page guard, pages freed straight to the zone that wait for their shootdown
    // count as free, as in the quit count.)
    let free_pages_boot = zone.free_pages() + zone.guard_pending() + pcp.count() as u64;
    info!(
        "mm: pcp high={} batch={}; {} free pages at boot",
        pcp.high(),
        pcp.batch(),
        free_pages_boot
    );
    phases::mark(Phase::PreDevices);
    let topo = if cfg.sim.is_some() {
        // The deterministic benchmark: ports 0 and 1 are simulated, one pair on this core.
        if cfg.sim_nic == SimNic::Virtio {
            crate::simbench::setup_ports().unwrap_or_else(|e| fail(format_args!("{e}")));
        }
        Topology {
            pairs: 1,
            queues: 1,
            port_pairs: 1,
        }
    } else {
        setup_devices(cfg, online()).unwrap_or_else(|e| fail(format_args!("{e}")))
    };
    phases::mark(Phase::Devices);
    if routes_file.is_some() && cfg.mode != Mode::Router {
        fail(format_args!(
            "config error: a routes file (--routes) needs `mode=router`"
        ));
    }
    FABRIC.set_topology(topo.pairs, topo.queues);
    FACTS.call_once(|| BootFacts {
        free_pages_boot,
        zone,
    });
    FABRIC_MODE.call_once(|| cfg.mode);
    let setup = SETUP.call_once(|| Setup {
        cfg: cfg.clone(),
        topo,
    });
    let (pcp, mgmt_mem) = run_other_nics::<A>(setup, zone, pcp, mgmt_mem);
    let mut halt = false;
    let mut core = build_core(0, setup, zone, pcp, mgmt_mem, &mut halt);
    if cfg.sim.is_some() {
        sim_line(cfg);
        if A::STOCK && cfg.mode == Mode::Acl {
            crate::simbench::run::<StockAcl>(core)
        }
        if A::STOCK && cfg.mode == Mode::Router && ACL.get().is_some() {
            crate::simbench::run::<StockAclRouter>(core)
        }
        if A::STOCK && cfg.mode == Mode::Nat {
            crate::simbench::run::<StockNat>(core)
        }
        if A::STOCK && cfg.mode == Mode::Firewall {
            crate::simbench::run::<StockFirewall>(core)
        }
        crate::simbench::run::<A>(core)
    }
    smp::register_ap_entry(run_core::<A>);
    for k in 1..topo.pairs {
        smp::start_ap_work(k);
    }
    wait_cores_up(topo.pairs);
    log_topology::<A>(&topo, cfg);
    phases::mark(Phase::Cores);
    // The phase report comes just before the ready marker, so whoever saw `ready` has it.
    println!("{}", phases::report(rdtsc()));
    // The fault image: injecting starts now, with every RX ring filled.
    crate::control::faults::arm(cfg);
    println!("gannet: ready");
    forward::<A, _>(&mut core, halt)
}

/// Core 0's management storage (small and jumbo frames), when a management port is
/// configured.
type MgmtMem = Option<(&'static mut [u8], &'static mut [u8])>;

/// The boot CPU on ports of a NIC type other than virtio-net, if set-up made them (the
/// simulated DD-bit NICs of `sim_nic=dd|e1000e|igb`; a mixed pair; e1000e or igb ports): never
/// returns then. Else gives the per-CPU pages and management memory back.
fn run_other_nics<A: Appliance>(
    setup: &'static Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: MgmtMem,
) -> (PerCpuPages, MgmtMem) {
    let cfg = &setup.cfg;
    if let (Some(_), SimNic::Dd | SimNic::E1000e) = (cfg.sim, cfg.sim_nic) {
        sim_dd::<A>(setup, zone, pcp, mgmt_mem)
    }
    if let (Some(_), SimNic::Igb) = (cfg.sim, cfg.sim_nic) {
        sim_igb::<A>(setup, zone, pcp, mgmt_mem)
    }
    if crate::setup::mixed::ports_are_mixed() {
        run_polled::<A, _>(setup, zone, pcp, mgmt_mem, crate::setup::mixed::take_ports)
    }
    if crate::setup::e1000e::ports_are_e1000e() {
        run_polled::<A, _>(setup, zone, pcp, mgmt_mem, crate::setup::e1000e::take_ports)
    }
    if crate::setup::igb::ports_are_igb() {
        run_polled::<A, _>(setup, zone, pcp, mgmt_mem, crate::setup::igb::take_ports)
    }
    (pcp, mgmt_mem)
}

/// What forwards where, in the boot log (just before the phase report and `ready`).
fn log_topology<A: Appliance>(topo: &Topology, cfg: &Config) {
    if topo.queues > 1 {
        info!("multi-queue: core k forwards queue pair k of port 0 <-> queue pair k of port 1");
    }
    info!(
        "forwarding {} port pair(s) on {} core(s), {} queue pair(s) per port, mode {}, burst {}",
        topo.port_pairs,
        topo.pairs,
        topo.queues,
        A::label(cfg),
        cfg.burst
    );
}

/// Wait (bounded) until every other core reports its pair up, so `ready` means all forward.
fn wait_cores_up(pairs: usize) {
    let deadline = Deadline::after_ms(CORE_START_MS);
    for (k, snap) in FABRIC.snaps.iter().enumerate().take(pairs).skip(1) {
        while snap.lock().is_none() {
            if deadline.expired() {
                fail(format_args!(
                    "cpu {k} did not bring up port pair {k} within {CORE_START_MS} ms"
                ));
            }
            crate::tlb::service();
            core::hint::spin_loop();
        }
    }
}

/// An AP asked to forward pair `cpu` (registered with [`smp::register_ap_entry`]): bring the
/// pair up and forward until `quit`. Never returns.
fn run_core<A: Appliance>(cpu: usize) -> ! {
    let Some(setup) = SETUP.get() else {
        fail(format_args!("cpu {cpu} started before set-up"))
    };
    let Some(zone) = crate::mem::ZONE.get() else {
        fail(format_args!("cpu {cpu} started before the zone"))
    };
    let mut pcp = PerCpuPages::new(zone, online());
    pcp.set_owner(current_cpu());
    if crate::setup::e1000e::ports_are_e1000e() {
        let take = crate::setup::e1000e::take_ports;
        let mut core = polled_core(cpu, setup, zone, pcp, None, take);
        core.publish(false, 0);
        forward::<A, _>(&mut core, false)
    }
    if crate::setup::igb::ports_are_igb() {
        let take = crate::setup::igb::take_ports;
        let mut core = polled_core(cpu, setup, zone, pcp, None, take);
        core.publish(false, 0);
        forward::<A, _>(&mut core, false)
    }
    let mut halt = false;
    let mut core = build_core(cpu, setup, zone, pcp, None, &mut halt);
    core.publish(false, 0);
    forward::<A, _>(&mut core, halt)
}

/// The boot CPU with polled ports of another NIC type `N` (e1000e ports, or a virtio-net and an
/// e1000e port, `setup::mixed`), `take(k)` giving pair `k`'s: core 0 over its two ports
/// (another monomorphised core), one more core per further pair, then forward until `quit`.
/// Never returns.
fn run_polled<A: Appliance, N: drivers::nic::Nic>(
    setup: &'static Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: Option<(&'static mut [u8], &'static mut [u8])>,
    take: fn(usize) -> Option<[N; PORTS]>,
) -> ! {
    let mut core = polled_core(0, setup, zone, pcp, mgmt_mem, take);
    smp::register_ap_entry(run_core::<A>);
    for k in 1..setup.topo.pairs {
        smp::start_ap_work(k);
    }
    wait_cores_up(setup.topo.pairs);
    log_topology::<A>(&setup.topo, &setup.cfg);
    phases::mark(Phase::Cores);
    println!("{}", phases::report(rdtsc()));
    crate::control::faults::arm(&setup.cfg);
    println!("gannet: ready");
    forward::<A, _>(&mut core, false)
}

/// Pair `k`'s core over its two polled ports (`take(k)`, set up by the boot CPU); busy
/// polling.
fn polled_core<N: drivers::nic::Nic>(
    k: usize,
    setup: &Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: Option<(&'static mut [u8], &'static mut [u8])>,
    take: fn(usize) -> Option<[N; PORTS]>,
) -> Core<KernelPlatformOf<N>> {
    apic::init();
    let Some(nics) = take(k) else {
        fail(format_args!("no ports were set up for pair {k}"))
    };
    let core = core_over(k, setup, zone, pcp, mgmt_mem, nics);
    info!("idle (cpu {k}): busy polling");
    core
}

/// The benchmark's set-up line (`sim=K`).
fn sim_line(cfg: &Config) {
    info!(
        "sim: {} frames per poll iteration, {} warm-up and {} measured iterations, mode {}, burst {}, NIC {}",
        cfg.sim.unwrap_or(0),
        crate::simbench::WARMUP_ITERS,
        cfg.sim_iters,
        cfg.mode.as_str(),
        cfg.burst,
        match cfg.sim_nic {
            SimNic::Virtio => "virtio-net",
            SimNic::Dd => "DD-bit",
            SimNic::E1000e => "DD-bit as an 82574L (e1000e bring-up)",
            SimNic::Igb => "DD-bit as an 82576 (igb bring-up, advanced descriptors)",
        }
    );
}

/// `sim=K sim_nic=dd`: core 0 over two simulated DD-bit NICs (another NIC type, another
/// monomorphised core), then the benchmark. Never returns.
fn sim_dd<A: Appliance>(
    setup: &Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: Option<(&'static mut [u8], &'static mut [u8])>,
) -> ! {
    apic::init();
    let nics = crate::simbench::dd_ports(&setup.cfg).unwrap_or_else(|e| fail(format_args!("{e}")));
    let core = core_over(0, setup, zone, pcp, mgmt_mem, nics);
    sim_line(&setup.cfg);
    if A::STOCK && setup.cfg.mode == Mode::Acl {
        crate::simbench::run_dd::<StockAcl, _>(core)
    }
    if A::STOCK && setup.cfg.mode == Mode::Router && ACL.get().is_some() {
        crate::simbench::run_dd::<StockAclRouter, _>(core)
    }
    if A::STOCK && setup.cfg.mode == Mode::Nat {
        crate::simbench::run_dd::<StockNat, _>(core)
    }
    if A::STOCK && setup.cfg.mode == Mode::Firewall {
        crate::simbench::run_dd::<StockFirewall, _>(core)
    }
    crate::simbench::run_dd::<A, _>(core)
}

/// [`sim_dd`] on the simulated NICs brought up as 82576s (`sim_nic=igb`): a core of the igb
/// port type (advanced descriptors). Never returns.
fn sim_igb<A: Appliance>(
    setup: &Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: Option<(&'static mut [u8], &'static mut [u8])>,
) -> ! {
    apic::init();
    let nics = crate::simbench::igb_ports(&setup.cfg).unwrap_or_else(|e| fail(format_args!("{e}")));
    let core = core_over(0, setup, zone, pcp, mgmt_mem, nics);
    sim_line(&setup.cfg);
    if A::STOCK && setup.cfg.mode == Mode::Acl {
        crate::simbench::run_dd::<StockAcl, _>(core)
    }
    if A::STOCK && setup.cfg.mode == Mode::Router && ACL.get().is_some() {
        crate::simbench::run_dd::<StockAclRouter, _>(core)
    }
    if A::STOCK && setup.cfg.mode == Mode::Nat {
        crate::simbench::run_dd::<StockNat, _>(core)
    }
    if A::STOCK && setup.cfg.mode == Mode::Firewall {
        crate::simbench::run_dd::<StockFirewall, _>(core)
    }
    crate::simbench::run_dd::<A, _>(core)
}

/// Bring up pair `k` on the calling core: its devices (set up by the boot CPU), LAPIC, pools,
/// RX rings, and in router mode the router (core 0 builds the FIB first) and the management
/// plane (core 0). Returns the core (by value into the caller's slot: the ~100 KiB core is not
/// copied again through a tuple) and sets `halt` to whether it may halt when idle.
fn build_core(
    k: usize,
    setup: &Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: Option<(&'static mut [u8], &'static mut [u8])>,
    halt_when_idle: &mut bool,
) -> KernelCore {
    let cfg = &setup.cfg;
    // This core's LAPIC (its devices' MSI-X entries were routed to its APIC ID at set-up).
    apic::init();
    let Some(handles) = take_devices(k) else {
        fail(format_args!("no devices were set up for pair {k}"))
    };
    // `burstin=on` busy-polls the used indices while it waits: no halt.
    let halt = cfg.idle == IdleMode::Halt && !cfg.burstin && handles.iter().all(|h| h.routed);
    if setup.topo.queues > 1 {
        for (j, h) in handles.iter().enumerate() {
            let (rxq, txq) = h.nic.queue_indices();
            info!(
                "port {j} queue pair {k} (virtqueues {rxq}/{txq}): cpu {k}, MSI-X entry {k} -> vector {:#x}{}",
                apic::DEVICE_VECTOR_BASE + j as u8,
                if h.routed { "" } else { " (not routed: polling)" }
            );
        }
    }
    let [h0, h1] = handles;
    let core: KernelCore = core_over(k, setup, zone, pcp, mgmt_mem, [h0.nic, h1.nic]);
    if halt {
        let hz = apic::start_periodic_timer(IDLE_TIMER_US);
        debug!("idle (cpu {k}): LAPIC timer at {hz} Hz");
        info!(
            "idle (cpu {k}): poll {IDLE_POLL_US} us, then halt until RX MSI-X or the {} ms LAPIC timer",
            IDLE_TIMER_US / 1000
        );
    } else {
        info!("idle (cpu {k}): busy polling");
    }
    if cfg.burstin {
        info!(
            "burstin (cpu {k}): RX left alone until a used ring holds {BURSTIN_USED} entries or {BURSTIN_WAIT_MS} ms passed, then drained in bursts of {}; only the drain iterations are busy (bench only)",
            cfg.burst
        );
    }
    *halt_when_idle = halt;
    core
}

/// Pair `k`'s core over its two ports `nics` (of any NIC type: virtio-net, or the DD-bit NIC of
/// `sim_nic=dd`): its router (router mode), the management plane (core 0), pools and RX
/// rings; the RX buffers logged (and checked, on real devices).
fn core_over<N: drivers::nic::Nic>(
    k: usize,
    setup: &Setup,
    zone: &'static Zone,
    pcp: PerCpuPages,
    mgmt_mem: Option<(&'static mut [u8], &'static mut [u8])>,
    nics: [N; PORTS],
) -> Core<KernelPlatformOf<N>> {
    let cfg = &setup.cfg;
    let macs = [MacAddr(nics[0].mac()), MacAddr(nics[1].mac())];
    let router = (cfg.mode == Mode::Router).then(|| {
        // The boot CPU built the one FIB and carved this core's slot (`run`); every core gets
        // its own router over the FIB (each poll iteration lends it to the router's network
        // function).
        let r = core_router(cfg, macs, k, setup.topo.pairs)
            .unwrap_or_else(|e| fail(format_args!("{}", e.0)));
        let mtu = core::array::from_fn(|i| port_mtu(cfg.mtu[i], &nics[i]));
        let r6 = core_router6(cfg, macs, mtu, k, setup.topo.pairs)
            .unwrap_or_else(|e| fail(format_args!("{}", e.0)));
        ROUTE_SLOTS.lock()[k]
            .take()
            .unwrap_or_else(|| fail(format_args!("core {k}: no router state carved at boot")))
            .write(
                RouteState::new(r)
                    .with_router6(r6)
                    .with_mgmt6(mgmt6_port(cfg)),
            )
    });
    // The management plane runs on core 0; other cores hand its frames over.
    let mgmt = cfg.mgmt_port().zip(mgmt_mem).map(|(p, mem)| {
        let mtu = port_mtu(cfg.mtu[p], &nics[p]);
        build_mgmt(cfg, p, macs[p], mtu, mem)
    });
    let core = Core::<KernelPlatformOf<N>>::new(CoreParams {
        cfg: cfg.clone(),
        pair: k,
        nics,
        zone,
        pcp,
        fabric: &FABRIC,
        router,
        mgmt,
        // Another core's frames for the management address: the router's on every core; any
        // other NF's only with multi-queue (its pairs are then queue pairs of the same two
        // ports; with several port pairs the address is on pair 0's port only).
        mgmt_remote: cfg
            .mgmt_port()
            .filter(|_| k != 0 && (cfg.mode == Mode::Router || setup.topo.queues > 1)),
    })
    .unwrap_or_else(|e| fail(format_args!("pair {k}: {e:?}")));
    let (posted, per) = log_rx_posted(k, setup.topo.queues > 1, &core);
    if cfg.sim.is_none() {
        check_rx_rings(k, &posted, &per, zone);
    }
    core
}

/// The pair's RX buffers posted per port and the pages in each, logged in one line (one per
/// pair, not per port: each boot-log byte is a host write under QEMU's 16550, docs/benchmarks-journal.md,
/// "Boot time, fifth pass"); port `p`'s buffers come from page_pool `p`. Buffers, not pages:
/// with a jumbo MTU each buffer is several pages (one frame, one used element:
/// `VirtioNet::set_rx_buffer_pages`).
fn log_rx_posted<N: drivers::nic::Nic>(
    k: usize,
    multi_queue: bool,
    core: &Core<KernelPlatformOf<N>>,
) -> ([usize; PORTS], [usize; PORTS]) {
    let per: [usize; PORTS] =
        core::array::from_fn(|p| core.nics().map_or(1, |n| n[p].rx_buffer_pages().max(1)));
    let posted: [usize; PORTS] =
        core::array::from_fn(|p| core.nics().map_or(0, |n| n[p].rx_posted() / per[p]));
    // "256" for one-page buffers, "256 of 3 pages" for big ones, per port.
    let of = |p: usize| PagesOf(posted[p], per[p]);
    // With multi-queue, pair `k` is queue pair `k` of ports 0 and 1; else ports 2k and 2k + 1.
    let port = |p: usize| PortOf { k, p, multi_queue };
    let jumbo = if per == [1; PORTS] {
        ""
    } else {
        "jumbo MTU: one buffer per frame, an indirect table of pages; "
    };
    info!(
        "RX buffers posted: {} on {}, {} on {} ({jumbo}one page_pool per port, refill batch {PP_ALLOC_CACHE_REFILL})",
        of(0),
        port(0),
        of(1),
        port(1),
    );
    (posted, per)
}

/// Port `p` of pair `k` as the boot log names it: `port 2k+p` with one queue pair per port,
/// `port p queue k` with multi-queue (where every pair shares ports 0 and 1).
struct PortOf {
    k: usize,
    p: usize,
    multi_queue: bool,
}

impl core::fmt::Display for PortOf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.multi_queue {
            write!(f, "port {} queue {}", self.p, self.k)
        } else {
            write!(f, "port {}", PORTS * self.k + self.p)
        }
    }
}

/// `N` buffers of `K` pages as the boot log says it: `N` for one page each, `N of K pages`.
struct PagesOf(usize, usize);

impl core::fmt::Display for PagesOf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.1 > 1 {
            write!(f, "{} of {} pages", self.0, self.1)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Least RX buffers a port's ring must hold before `ready`: half the ring
/// ([`drivers::virtio_net::QUEUE_SIZE`] descriptors). Below that a port drops most of a burst,
/// or (0 posted) never receives at all.
const RX_MIN_POSTED: usize = drivers::virtio_net::QUEUE_SIZE / 2;

/// Stop the boot (a named memory error) if a port of pair `k` got fewer than
/// [`RX_MIN_POSTED`] RX buffers, saying how much more memory full rings would take: `per[p]`
/// 4 KiB pages per missing buffer of port `p`, at least.
fn check_rx_rings(k: usize, posted: &[usize; PORTS], per: &[usize; PORTS], zone: &Zone) {
    let ring = drivers::virtio_net::QUEUE_SIZE;
    let missing: usize = posted
        .iter()
        .zip(per)
        .map(|(&n, &per)| ring.saturating_sub(n) * per)
        .sum();
    for (p, &n) in posted.iter().enumerate() {
        if n < RX_MIN_POSTED {
            let kib = missing * PAGE_SIZE / 1024;
            fail(format_args!(
                "memory error: port {}: only {n} of {ring} RX buffers posted (at least {RX_MIN_POSTED} needed before ready); {} pages free: give the guest at least {} MiB more memory (QEMU -m; {kib} KiB for full RX rings on pair {k})",
                PORTS * k + p,
                zone.free_pages(),
                kib.div_ceil(1024),
            ));
        }
    }
}

/// The management plane on local port `p` (MAC `mac`, IP MTU `mtu`) over its storage (main
/// block, jumbo block).
fn build_mgmt(
    cfg: &Config,
    p: usize,
    mac: MacAddr,
    mtu: u16,
    (mem, jumbo): (&'static mut [u8], &'static mut [u8]),
) -> Mgmt {
    let net = cfg.ip[p].expect("Config::mgmt_port names a port with an address");
    let now_ms = (crate::arch::time::uptime_us() / 1000) as i64;
    let m = Mgmt::new(
        p,
        mac.0,
        (net.addr, net.len),
        mtu,
        mem,
        jumbo,
        now_ms,
        rdtsc(),
    );
    info!(
        "mgmt: {} on port {p}: ARP, ICMP echo, http://{}:{}/metrics; frames up to {} bytes (MTU {mtu}; longer than {} through a per-core view)",
        net,
        net.addr,
        mgmt::METRICS_PORT,
        m.frame_max(),
        mgmt::FRAME_MAX,
    );
    let m = match mgmt6_port(cfg).and_then(|p| cfg.router.ip6[p]) {
        Some(a) => {
            info!(
                "mgmt: also {}/{} on port {p}: ICMPv6 echo, http://[{}]:{}/metrics (the router answers its Neighbor Discovery)",
                core::net::Ipv6Addr::from_bits(a.addr),
                a.len,
                core::net::Ipv6Addr::from_bits(a.addr),
                mgmt::METRICS_PORT
            );
            m.with_ipv6(a.addr, a.len)
        }
        None => m,
    };
    m.with_put(put_files(cfg))
}

/// The port whose management plane has the port's IPv6 address too: the management port in
/// router mode when it has `ip6_N=` (the router does IPv6's Neighbor Discovery).
fn mgmt6_port(cfg: &Config) -> Option<usize> {
    let p = cfg.mgmt_port()?;
    (cfg.mode == Mode::Router && cfg.router.ip6[p].is_some()).then_some(p)
}

/// What `PUT` replaces on the management plane: the router's routes file, the ACL's rules
/// file (`mode=acl`, and an ACL in front of the router or the firewall: a published rule set),
/// or both, the NAT's timeouts (with the `mgmt_token=` token, logged by length only), or
/// nothing for another network function.
fn put_files(cfg: &Config) -> PutFiles {
    let token = cfg.mgmt_token.clone();
    let rules = crate::dataplane::nf::builtin::ACL.get().is_some();
    let own = crate::appliance::nf_texts::hook();
    let files = match cfg.mode {
        // An image of one's own: its NF's files (`/metrics` stays the metrics').
        _ if let Some(h) = own => {
            let mut files = h.names.clone();
            files.retain(|&n| n != "metrics");
            let empty = files.is_empty();
            let files = PutFiles::Nf {
                nf: h.nf,
                files,
                token,
            };
            if empty {
                info!("mgmt: no PUT ({} has no files)", h.nf);
                return files;
            }
            files
        }
        Mode::Router if rules => PutFiles::RoutesAndRules(token),
        Mode::Router => PutFiles::Routes(token),
        Mode::Acl => PutFiles::Rules(token),
        Mode::Firewall if rules => PutFiles::Rules(token),
        Mode::Nat => PutFiles::NatTimeouts(token),
        _ => {
            info!("mgmt: no PUT (mode={} has no files)", cfg.mode.as_str());
            return PutFiles::None(cfg.mode.as_str());
        }
    };
    let path = files.paths();
    match &cfg.mgmt_token {
        Some(t) => info!("mgmt: PUT {path} on (bearer token of {} bytes)", t.len()),
        None => info!("mgmt: PUT {path} off (no mgmt_token=)"),
    }
    files
}

/// Carve `want` bytes of the management plane's storage from the zone (one zeroed buddy
/// block, kept for the kernel's life).
fn mgmt_storage(zone: &Zone, want: usize) -> &'static mut [u8] {
    crate::mem::alloc_forever(zone, want).unwrap_or_else(|| {
        fail(format_args!(
            "memory error: no room for the management plane's {want} bytes (one order-{} block): give the guest at least 1 MiB more memory (QEMU -m)",
            crate::mem::order_for(want.div_ceil(PAGE_SIZE))
        ))
    })
}

/// `mode=acl`: the rule set from `rules_file`, built and published (`setup::acl`), or the boot
/// stops naming why.
fn build_acl(zone: &'static Zone, rules_file: Option<&'static str>) {
    let Some(text) = rules_file else {
        fail(format_args!(
            "config error: mode=acl needs a rules file (a bundle's `--- rules`, as -initrd or fw_cfg opt/gannet/bundle)"
        ))
    };
    match crate::setup::acl::build(zone, text, online()) {
        Ok((rules, tuples, bytes, pages)) => info!(
            "acl: {rules} rules in {tuples} tuples (tuple-space search), {} KiB ({pages} pages with the hit counters)",
            bytes.div_ceil(1024)
        ),
        Err(e) => fail(format_args!("{e}")),
    }
}

/// Forward with `A` until `quit`; the stock image's `mode=acl` with [`StockAcl`], its
/// `mode=router` with a rules file with [`StockAclRouter`], its `mode=nat` with [`StockNat`]
/// and its `mode=firewall` with [`StockFirewall`] (chosen here, once, so no loop tests the
/// mode per iteration).
fn forward<A: Appliance, N: drivers::nic::Nic>(
    core: &mut Core<KernelPlatformOf<N>>,
    halt_when_idle: bool,
) -> ! {
    if A::STOCK && core.cfg().mode == Mode::Acl {
        poll_loop::<StockAcl, N>(core, halt_when_idle)
    }
    if A::STOCK && core.cfg().mode == Mode::Router && ACL.get().is_some() {
        poll_loop::<StockAclRouter, N>(core, halt_when_idle)
    }
    if A::STOCK && core.cfg().mode == Mode::Nat {
        poll_loop::<StockNat, N>(core, halt_when_idle)
    }
    if A::STOCK && core.cfg().mode == Mode::Firewall {
        poll_loop::<StockFirewall, N>(core, halt_when_idle)
    }
    poll_loop::<A, N>(core, halt_when_idle)
}

/// A core's loop: the appliance's poll iteration ([`Appliance::poll`]); when idle for [`IDLE_POLL_US`], halt (`idle=halt`);
/// every 10 ms, busy or not, [`housekeeping`]. The other cores follow `quit` from here.
fn poll_loop<A: Appliance, N: drivers::nic::Nic>(
    core: &mut Core<KernelPlatformOf<N>>,
    halt_when_idle: bool,
) -> ! {
    let bsp = core.pair() == 0;
    let facts = *FACTS.get().expect("set before any core forwards");
    let mut console = Console::new();
    let console_every = ms_to_tsc(1000 / CONSOLE_POLL_HZ).max(1);
    let idle_poll = us_to_tsc(IDLE_POLL_US);
    let mut next_console = rdtsc() + console_every;
    let mut idle_since = rdtsc();
    // Deferred mem_map initialisation (`mm::Zone::deferred_init_step`): the boot CPU writes
    // one chunk per idle poll iteration and one per housekeeping tick until the span is done.
    let mut deferred = bsp;
    let mut deferred_listed = 0;
    // `burstin=on` (bench only): a poll iteration runs only when the gate is open.
    let mut gate = core
        .cfg()
        .burstin
        .then(|| BurstIn::new(ms_to_tsc(BURSTIN_WAIT_MS), rdtsc()));
    // What this core runs: its per-core state, made now that its ports are up; its name for
    // STATS and /metrics (every core runs the same).
    let mut state = A::new_core(core);
    crate::control::stats::NF_NAME.call_once(|| A::label(core.cfg()));
    loop {
        if !bsp && FABRIC.quit.requested() {
            A::release(&mut state, core);
            core.follow_quit();
            halt_forever();
        }
        // Flush requests from CPUs that unmapped pages we may cache (one load when none).
        crate::tlb::service();
        let t0 = rdtsc();
        // Waiting for a burst: no poll iteration (nothing counted busy), only the periodic
        // work below.
        let run = gate.as_mut().is_none_or(|g| g.open(core, t0));
        let forwarded = if run { A::poll(&mut state, core) } else { 0 };
        if forwarded > 0 {
            idle_since = t0;
        } else if deferred {
            // Work to do: not idle (no halt until the span is written).
            deferred = deferred_step(facts.zone, &mut deferred_listed);
            idle_since = t0;
        }
        if bsp && fib::busy() {
            // A route reload under way: one bounded step between poll iterations (at most
            // every other slot of forwarding while busy; no halt until it is done).
            fib::poll_build(core, forwarded == 0);
        } else if forwarded == 0 && halt_when_idle && t0 - idle_since > idle_poll {
            halt(core);
            idle_since = rdtsc();
            // The timer tick that may have woken us also paces the console.
            next_console = 0;
            continue;
        }
        // Every 10 ms, busy or not (a loaded port must not starve the console, drain requests
        // or the router's timers).
        if t0 >= next_console {
            next_console = t0 + console_every;
            if deferred {
                deferred = deferred_step(facts.zone, &mut deferred_listed);
            }
            housekeeping::<A, N>(core, &mut state, &mut console, &facts);
        }
    }
}

/// Pages of `mem_map` the boot CPU writes per step after `ready`: one 4 MiB block, ~6k guest
/// instructions (a few µs: no burst waits long behind it).
const DEFERRED_STEP_PAGES: u64 = mm::DEFERRED_GROW_PAGES;

/// One step of deferred mem_map initialisation (its pages added to `listed`); whether any is
/// left. The last says so at `log=debug`.
fn deferred_step(zone: &Zone, listed: &mut u64) -> bool {
    match zone.deferred_init_step(DEFERRED_STEP_PAGES) {
        Some(n) => {
            *listed += n;
            true
        }
        None => {
            debug!(
                "mm: deferred mem_map initialisation done: {listed} free pages listed after ready"
            );
            false
        }
    }
}

/// A core's periodic work: honour drain requests (in thread context), run the router's
/// neighbour timers and the management plane, then publish the counters (other cores) or read
/// the console (the boot CPU).
fn housekeeping<A: Appliance, N: drivers::nic::Nic>(
    core: &mut Core<KernelPlatformOf<N>>,
    state: &mut A::PerCore,
    console: &mut Console,
    facts: &BootFacts,
) {
    let pages = core.pages_mut();
    let (pcp, zone) = (&mut pages.pcp, pages.zone);
    let cpu = current_cpu() as usize;
    if DRAIN.poll(cpu, || pcp.drain_local_pages(zone)) {
        CPUS[cpu].drains.fetch_add(1, Ordering::Relaxed);
    }
    core.idle_tick();
    A::tick(state, core);
    // The RCU quiescent point of live route reload: no lookup is in progress here.
    fib::quiescent(core);
    if core.pair() != 0 {
        publish(core);
    } else {
        crate::control::faults::tick();
        if let Some(cmd) = console.poll().or_else(commands::power_button) {
            commands::run(cmd, core, facts, &mut |c| A::release(state, c));
        }
        // A `PUT /routes` the management plane received: its build starts here (and runs
        // between poll iterations), never inside smoltcp's poll.
        if core.route().is_some() {
            fib::poll_put();
        }
        // The ACL's replacements (`acl reload`, `PUT /rules`): the old set freed once every
        // core took the new one up in its tick, a new set built and published.
        crate::setup::acl::poll(core.fabric().cores());
        // An image's own NF's files (`PUT /NAME`): checked and published, the replaced body
        // given back once every core restarted its NF with the new set.
        crate::setup::nf_files::poll(core.fabric().cores());
    }
}

/// A core other than the boot CPU: publish its counters, and print its neighbour table when
/// the console asked.
fn publish<N: drivers::nic::Nic>(core: &Core<KernelPlatformOf<N>>) {
    core.publish(false, 0);
    if FABRIC.neigh_dump[core.pair()].swap(false, Ordering::AcqRel) {
        commands::print_neigh(core);
    }
}

/// Sleep until a device interrupt or the timer: arm RX interrupts on every port, and only if no
/// frame slipped in meanwhile, `sti; hlt` (the `sti` shadow makes the pair atomic, so a wake-up
/// between the check and the halt is not lost).
/// A TLB flush request that slipped in also cancels the halt (`tlb::halt_allowed`).
fn halt<N: drivers::nic::Nic>(core: &mut Core<KernelPlatformOf<N>>) {
    if !core.arm_interrupts() {
        crate::tlb::set_halted(true);
        if crate::tlb::halt_allowed() {
            core.profile_mut().halts += 1;
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
            crate::tlb::set_halted(false);
        }
    }
    core.park_interrupts();
}

/// After `quit` on a core other than the boot CPU: nothing left to do but answer TLB
/// shootdowns (the boot CPU's last phases may still flush guarded pages): halt with interrupts
/// on, marked halted, so a flush request comes as an IPI.
fn halt_forever() -> ! {
    loop {
        crate::tlb::set_halted(true);
        if crate::tlb::halt_allowed() {
            x86_64::instructions::interrupts::enable_and_hlt();
            x86_64::instructions::interrupts::disable();
            crate::tlb::set_halted(false);
        }
        crate::tlb::service();
    }
}
