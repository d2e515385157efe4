//! The host rig (`cfg(test)` or feature `host-rig`): real `Core`s over real virtio-net drivers whose devices are played by
//! `drivers::sim` on the drivers' own split-ring memory, pages from a real `mm::Zone` backed by
//! host memory (page frame number = host address >> 12, so `PageBuf` bytes are real).
//!
//! Used by the dataplane's host tests and by the host twin of the deterministic benchmark
//! (`unikernel/benches/datapath.rs`). Test scaffolding: it leaks its memory and panics on any
//! set-up error.

use crate::dataplane::snap::PairSnap;
use crate::dataplane::{
    Core, CoreParams, CoreRouter, CoreRouter6, Fabric, LinearError, MgmtPlane, PageBuf, Platform,
    QuitPhase, RouteState,
};
use core::cell::Cell;
use core::marker::PhantomData;
use drivers::ddnic::DdNic;
use drivers::nic::{EitherNic, Nic};
use drivers::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
use drivers::sim::{HostHal, HostSimDd, HostSimNet, SimDevice, SimShared, SimTransport};
use mm::{Page, PerCpuPages, Pfn, Zone, PAGE_SIZE};
use netstack::config::PORTS;
use netstack::router::fib6::{Node6, Poptrie, Route6, DIRECT_LEN};
use netstack::router::icmp::TokenBucket;
use netstack::router::setup6::{collect6, count6};
use netstack::router::v6::{NextHop6, Port6};
use netstack::router::{PortConfig, Router, RouterConfig};
use netstack::{Config, MacAddr};
use std::alloc::{alloc_zeroed, Layout};
use std::boxed::Box;
use std::vec::Vec;

std::thread_local! {
    /// The test clock, ns (advanced by the tests).
    pub static NOW_NS: Cell<u64> = const { Cell::new(0) };
    /// Cycle counter: +1 per read.
    static CYCLES: Cell<u64> = const { Cell::new(0) };
    /// Wake-ups asked for, per core.
    pub static WAKES: Cell<[u64; 4]> = const { Cell::new([0; 4]) };
}

/// The management plane as tests see it: records what it was given.
#[derive(Default)]
pub struct FakeMgmt {
    /// Its local port.
    pub port: usize,
    /// Frames pushed (copies).
    pub frames: Vec<Vec<u8>>,
    /// Frames it will send at the next poll.
    pub to_send: Vec<Vec<u8>>,
    /// Send every frame given to [`MgmtPlane::rx_now`] back as it came (a stand-in for a
    /// jumbo echo reply).
    pub echo: bool,
}

std::thread_local! {
    /// [`Platform::with_linear`] calls that made a linear copy (the host's stand-in for a
    /// per-core view).
    pub static LINEAR: Cell<u64> = const { Cell::new(0) };
}

impl MgmtPlane for FakeMgmt {
    type Counters = u64;
    fn port(&self) -> usize {
        self.port
    }
    fn queue_max(&self) -> usize {
        1514
    }
    fn push_rx(&mut self, frame: &[u8]) -> bool {
        self.frames.push(frame.to_vec());
        true
    }
    fn rx_now(&mut self, _now_ms: i64, frame: &[u8]) -> bool {
        self.frames.push(frame.to_vec());
        if self.echo {
            self.to_send.push(frame.to_vec());
        }
        true
    }
    fn rx_pending(&self) -> usize {
        0
    }
    fn rx_room(&self) -> usize {
        16
    }
    fn poll(&mut self, _now_ms: i64, _m: &mut dyn FnMut(&mut dyn core::fmt::Write, &u64)) {}
    fn drain_tx(&mut self, send: &mut dyn FnMut(&[u8])) {
        for f in self.to_send.drain(..) {
            send(&f);
        }
    }
}

/// The test platform, its ports of NIC type `N`.
pub struct TestPlatformOf<N>(PhantomData<N>);

/// The test platform on virtio-net ports (most tests).
pub type TestPlatform = TestPlatformOf<SimNic>;

/// A virtio-net driver on a simulated device.
pub type SimNic = HostSimNet<'static>;

/// The DD-bit driver (`drivers::ddnic`, 0 header bytes, DD completion) on a simulated NIC.
pub type SimDd = HostSimDd<'static>;

/// The DD-bit driver writing frames 12 bytes into the page (virtio-net's header room), so it
/// shares a core with a virtio-net port ([`SimMixed`]).
pub type SimDd12 = DdNic<HostHal, SimDdRegs<'static>, 12>;

/// Ports of two drivers on one core: even ports (port 0) virtio-net, odd ports (port 1) the
/// DD-bit NIC.
pub type SimMixed = EitherNic<SimNic, SimDd12>;

/// The player of an [`EitherNic`] port: the device of whichever driver it is.
pub enum EitherDev<A, B> {
    /// The device of driver `A`.
    A(A),
    /// The device of driver `B`.
    B(B),
}

impl<A: SimPlayer, B: SimPlayer> SimPlayer for EitherDev<A, B> {
    fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize {
        match self {
            EitherDev::A(d) => d.deliver_rx(frame, n),
            EitherDev::B(d) => d.deliver_rx(frame, n),
        }
    }
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize {
        match self {
            EitherDev::A(d) => d.complete_tx(f),
            EitherDev::B(d) => d.complete_tx(f),
        }
    }
}

/// The player of a port's simulated device, as the rig's tests drive it.
pub trait SimPlayer {
    /// Deliver `frame` `n` times into the port's RX ring; returns how many were delivered.
    fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize;
    /// Send every frame posted on the port's TX ring, each shown to `f`; returns how many.
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize;
}

impl SimPlayer for SimDevice<'static> {
    fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize {
        SimDevice::deliver_rx(self, frame, n)
    }
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize {
        SimDevice::complete_tx(self, f)
    }
}

impl SimPlayer for SimDdDevice<'static> {
    fn deliver_rx(&mut self, frame: &[u8], n: usize) -> usize {
        SimDdDevice::deliver_rx(self, frame, n)
    }
    fn complete_tx(&mut self, f: impl FnMut(&[u8])) -> usize {
        SimDdDevice::complete_tx(self, f)
    }
}

/// A NIC type the rig builds ports of: the driver on a simulated device, and the device's
/// player.
pub trait SimPort: Nic + Sized {
    /// The device's player.
    type Dev: SimPlayer;
    /// A port with MAC `mac` (device memory leaked) and its player.
    fn sim_port(mac: [u8; 6]) -> (Self, Self::Dev);
}

impl SimPort for SimNic {
    type Dev = SimDevice<'static>;
    fn sim_port(mac: [u8; 6]) -> (Self, Self::Dev) {
        let s: &'static SimShared = Box::leak(Box::new(SimShared::new(mac)));
        let nic = SimNic::new(SimTransport::new(s)).expect("sim init");
        // SAFETY: the HostHal rings and the zone's pages are host memory at their "physical"
        // address; nothing else plays this device.
        (nic, unsafe { SimDevice::new(s) })
    }
}

impl SimPort for SimDd {
    type Dev = SimDdDevice<'static>;
    fn sim_port(mac: [u8; 6]) -> (Self, Self::Dev) {
        let s: &'static SimDdShared = Box::leak(Box::new(SimDdShared::new(mac)));
        let nic = SimDd::new(SimDdRegs(s)).expect("ring memory");
        // SAFETY: as for the virtio-net port.
        (nic, unsafe { SimDdDevice::new(s) })
    }
}

impl SimPort for SimDd12 {
    type Dev = SimDdDevice<'static>;
    fn sim_port(mac: [u8; 6]) -> (Self, Self::Dev) {
        let s: &'static SimDdShared = Box::leak(Box::new(SimDdShared::new(mac)));
        let nic = SimDd12::new(SimDdRegs(s)).expect("ring memory");
        // SAFETY: as for the virtio-net port.
        (nic, unsafe { SimDdDevice::new(s) })
    }
}

impl<A: SimPort, B: SimPort> SimPort for EitherNic<A, B> {
    type Dev = EitherDev<A::Dev, B::Dev>;
    /// Port `i` ([`port_mac`]`(i)`): driver `A` for even `i`, `B` for odd.
    fn sim_port(mac: [u8; 6]) -> (Self, Self::Dev) {
        if mac[5].wrapping_sub(1).is_multiple_of(2) {
            let (n, d) = A::sim_port(mac);
            (EitherNic::A(n), EitherDev::A(d))
        } else {
            let (n, d) = B::sim_port(mac);
            (EitherNic::B(n), EitherDev::B(d))
        }
    }
}

impl<N: Nic> Platform for TestPlatformOf<N> {
    type Nic = N;
    type Mgmt = FakeMgmt;
    fn cycles() -> u64 {
        CYCLES.with(|c| {
            c.set(c.get() + 1);
            c.get()
        })
    }
    fn uptime_ns() -> u64 {
        NOW_NS.with(|c| {
            // Time moves on a little at every read, so bounded waits end.
            c.set(c.get() + 1000);
            c.get()
        })
    }
    fn wake(k: usize) {
        WAKES.with(|w| {
            let mut a = w.get();
            a[k.min(3)] += 1;
            w.set(a);
        });
    }
    /// A copy (host memory has no per-core windows), with the kernel's layout checks.
    fn with_linear(
        pages: &[PageBuf],
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LinearError> {
        let n = pages.len();
        let end = <Self::Nic as Nic>::FRAME_OFFSET + len;
        if n == 0 || n > 16 || end > n * PAGE_SIZE || end <= (n - 1) * PAGE_SIZE {
            return Err(LinearError::Layout);
        }
        let mut bytes = Vec::with_capacity(n * PAGE_SIZE);
        for p in pages {
            bytes.extend_from_slice(p.page());
        }
        LINEAR.with(|c| c.set(c.get() + 1));
        f(&bytes[<Self::Nic as Nic>::FRAME_OFFSET..end]);
        Ok(())
    }
    fn write_metrics(_: &[PairSnap], _: &u64, w: &mut dyn core::fmt::Write) {
        let _ = w.write_str("metrics\n");
    }
}

/// A zone of `pages` pages of host memory (4 MiB aligned, so buddy blocks of every order fit).
pub fn zone(pages: usize) -> &'static Zone {
    let bytes = pages * PAGE_SIZE;
    let layout = Layout::from_size_align(bytes, 4 << 20).unwrap();
    // SAFETY: non-zero size.
    let base = unsafe { alloc_zeroed(layout) } as u64;
    assert_ne!(base, 0);
    let map: &'static [Page] = Box::leak((0..pages).map(|_| Page::new()).collect());
    let start = Pfn::from_addr(base);
    let z: &'static Zone = Box::leak(Box::new(Zone::new(start, map)));
    z.add_free_range(start, Pfn(start.0 + pages as u64));
    z
}

/// MAC of global port `i`.
pub fn port_mac(i: usize) -> MacAddr {
    MacAddr([0x52, 0x54, 0, 0, 0, i as u8 + 1])
}

/// One core with its two simulated ports of NIC type `N`.
pub struct SimCoreOf<N: SimPort> {
    /// The core.
    pub core: Core<TestPlatformOf<N>>,
    /// The device players of its ports 0 and 1.
    pub dev: [N::Dev; PORTS],
}

/// One core on virtio-net ports.
pub type SimCore = SimCoreOf<SimNic>;

/// Cores over one zone and fabric, on virtio-net ports.
pub type Rig = RigOf<SimNic>;

/// Cores over one zone and fabric, their ports of NIC type `N`.
pub struct RigOf<N: SimPort> {
    /// The zone every page comes from.
    pub zone: &'static Zone,
    /// The fabric the cores share.
    pub fabric: &'static Fabric,
    /// The cores, in pair order.
    pub cores: Vec<SimCoreOf<N>>,
    /// The zone's free pages before the cores were built.
    pub free_at_start: u64,
}

impl<N: SimPort> RigOf<N> {
    /// `n` cores with configuration `cmdline`, over a zone of `pages` pages. In router mode each
    /// core gets a router over one FIB; core 0 gets a [`FakeMgmt`] if the config has one.
    pub fn new(cmdline: &str, n: usize, pages: usize) -> Self {
        let cfg = Config::parse(cmdline).unwrap_or_else(|e| panic!("{cmdline}: {e}"));
        let zone = zone(pages);
        let free_at_start = zone.free_pages();
        let fabric: &'static Fabric = Box::leak(Box::new(Fabric::new()));
        fabric.set_topology(n, 1);
        let fib = (cfg.mode == netstack::Mode::Router).then(|| build_fib(&cfg));
        let fib6 = (cfg.mode == netstack::Mode::Router)
            .then(|| build_fib6(&cfg))
            .flatten();
        let cores = (0..n)
            .map(|k| {
                let [(n0, d0), (n1, d1)] =
                    core::array::from_fn(|j| N::sim_port(port_mac(PORTS * k + j).0));
                let nics = [n0, n1];
                let macs = [port_mac(PORTS * k), port_mac(PORTS * k + 1)];
                let router = fib.map(|f| {
                    let r = CoreRouter::new(
                        f,
                        &ports(&cfg, macs),
                        RouterConfig::for_core(k as u16, n as u16),
                    )
                    .unwrap();
                    let r6 = fib6.map(|(trie, nexthops)| router6(&cfg, macs, trie, nexthops, k, n));
                    // Kept for the rig's life, as the kernel keeps it in a zone block.
                    &mut *Box::leak(Box::new(RouteState::new(r).with_router6(r6)))
                });
                let mgmt = cfg.mgmt_port().filter(|_| k == 0).map(|port| FakeMgmt {
                    port,
                    ..FakeMgmt::default()
                });
                let core = Core::new(CoreParams {
                    cfg: cfg.clone(),
                    pair: k,
                    nics,
                    zone,
                    pcp: PerCpuPages::new(zone, n),
                    fabric,
                    router,
                    mgmt,
                    mgmt_remote: cfg.mgmt_port().filter(|_| k != 0),
                })
                .unwrap();
                SimCoreOf {
                    core,
                    dev: [d0, d1],
                }
            })
            .collect();
        RigOf {
            zone,
            fabric,
            cores,
            free_at_start,
        }
    }

    /// Run one poll iteration on every core, in order. Returns the work done.
    pub fn poll(&mut self) -> usize {
        self.cores.iter_mut().map(|c| c.core.poll_once()).sum()
    }

    /// `quit` as the kernel runs it: core 0 leads, the others follow each phase when core 0
    /// waits for them. Returns the phases each other core ran, in order, and the report.
    pub fn quit(&mut self) -> (Vec<(usize, QuitPhase)>, crate::dataplane::QuitReport) {
        let (first, rest) = self.cores.split_first_mut().expect("one core");
        let mut seen = Vec::new();
        let report = first
            .core
            .lead_quit(
                1_000_000_000,
                || {},
                |k, phase| {
                    let c = &mut rest[k - 1].core;
                    c.follow_phase(phase);
                    seen.push((k, phase));
                },
            )
            .expect("quit");
        (seen, report)
    }

    /// Quit and check that every page came back: no pool counts a page in flight and the zone
    /// holds as many free pages as before the cores were built.
    pub fn quit_and_check(&mut self) {
        let (_, report) = self.quit();
        assert_eq!(report.leaked, 0, "pages in flight after quit");
        assert_eq!(
            self.zone.free_pages(),
            self.free_at_start,
            "free pages after quit"
        );
    }
}

/// The router's ports from the configuration.
fn ports(cfg: &Config, macs: [MacAddr; PORTS]) -> [PortConfig; PORTS] {
    core::array::from_fn(|i| PortConfig {
        mac: macs[i],
        addr: cfg.ip[i].unwrap(),
    })
}

/// A FIB for `cfg` (connected routes and `route=`) in leaked host memory.
fn build_fib(cfg: &Config) -> &'static netstack::router::Fib<'static> {
    use netstack::router::{Fib, RuleSlot, TBL24_LEN, TBL8_GROUP_LEN};
    let tbl24: &'static mut [core::sync::atomic::AtomicU32] = Box::leak(
        core::iter::repeat_with(Default::default)
            .take(TBL24_LEN)
            .collect(),
    );
    let tbl8: &'static mut [u32] =
        Box::leak(std::vec![0u32; 16 * TBL8_GROUP_LEN].into_boxed_slice());
    let rules: &'static mut [RuleSlot] =
        Box::leak(std::vec![RuleSlot::EMPTY; 1024].into_boxed_slice());
    let fib = Fib::new(tbl24, tbl8, rules).unwrap();
    let macs = [port_mac(0), port_mac(1)];
    let mut r =
        Router::<'static, Pfn>::new(fib, &ports(cfg, macs), RouterConfig::default()).unwrap();
    for (net, gw) in cfg.router.routes.iter() {
        r.add_route(*net, *gw).unwrap();
    }
    Box::leak(Box::new(r.into_fib()))
}

/// The IPv6 FIB for `cfg` (the ports' prefixes and `route=` IPv6 routes) in leaked host
/// memory, with its next hops, as `setup::fib6` builds it at boot; `None` without
/// `ip6_0=`/`ip6_1=`.
fn build_fib6(cfg: &Config) -> Option<(&'static Poptrie<'static>, &'static [NextHop6])> {
    let [Some(a), Some(b)] = cfg.router.ip6 else {
        return None;
    };
    let room = count6(PORTS, cfg.router.routes6.len(), None);
    let no_route = Route6 {
        prefix: 0,
        len: 0,
        nh: 0,
    };
    let routes = Box::leak(std::vec![no_route; room].into_boxed_slice());
    let nexthops = Box::leak(std::vec![NextHop6::Connected { port: 0 }; room].into_boxed_slice());
    let n = collect6(&[a, b], &cfg.router.routes6, None, routes, nexthops).unwrap();
    let routes = &mut routes[..n];
    let size = Poptrie::size(routes).unwrap();
    let direct = Box::leak(std::vec![0u32; DIRECT_LEN].into_boxed_slice());
    let nodes = Box::leak(std::vec![Node6::default(); size.nodes].into_boxed_slice());
    let leaves = Box::leak(std::vec![0u32; size.leaves].into_boxed_slice());
    let trie = Poptrie::build(routes, direct, nodes, leaves).unwrap();
    Some((Box::leak(Box::new(trie)), &nexthops[..n]))
}

/// Core `k`'s (of `n`) IPv6 router over `trie`, its ports' MACs `macs`, MTU 1,500.
fn router6(
    cfg: &Config,
    macs: [MacAddr; PORTS],
    trie: &'static Poptrie<'static>,
    nexthops: &'static [NextHop6],
    k: usize,
    n: usize,
) -> CoreRouter6 {
    let ports: [Port6; PORTS] = core::array::from_fn(|i| Port6 {
        mac: macs[i],
        addr: cfg.router.ip6[i].unwrap(),
        mtu: 1500,
    });
    let rc = RouterConfig::for_core(k as u16, n as u16);
    let bucket = TokenBucket::new(rc.icmp_rate_per_sec, rc.icmp_burst);
    CoreRouter6::new(&ports, trie, nexthops, rc.neigh, bucket).unwrap()
}
