//! [`Core`]: one forwarding core's state (its port pair or queue pair, pages, TX staging,
//! router and counters) and its poll iteration. Generic over [`Platform`], so the same code
//! runs on the metal (virtio-net over PCI, TSC, IPIs) and in host tests (a simulated device on
//! split-ring memory).

use super::fabric::Fabric;
use super::held::{Held, Stash, StashHandle};
use super::mgmt_side::MgmtSide;
use super::nf_side::NfSide;
use super::page::PageBuf;
use super::pages::Pages;
use super::snap::{PairSnap, PoolSnap, Profile, RouterSnap, RouterSync};
use super::stage::TxStage;
use core::num::NonZeroUsize;
use drivers::nic::Nic;
use drivers::nic::{
    buffer_pages_for_mtu, BurstStats, DriverStats, GiveBack, RxBuf, RxStatus, RING_SIZE,
};
use mm::page_pool::{PagePool, PagePoolParams, RefillMode as PoolRefill, PP_ALLOC_CACHE_REFILL};
use mm::{PerCpuPages, Pfn, Zone};
use netstack::config::MAX_BURST;
use netstack::config::PORTS;
use netstack::router::{Fib, Router};
use netstack::{Config, DropReason, MacAddr, MacRewrite, PortCounters, RefillMode};

/// A core's router: its own neighbour table, ICMP bucket and counters over the one shared,
/// read-only FIB. Its queue handle is the frame's slot in the core's `RouteState::held`
/// (a [`Stash`]).
pub type CoreRouter = Router<'static, StashHandle, 64, 8, &'static Fib<'static>>;

/// A core's IPv6 router (`ip6_0=`/`ip6_1=`): over the one boot IPv6 FIB, queue handles slots
/// of `RouteState::held6` as [`CoreRouter`]'s.
pub type CoreRouter6 = netstack::router::v6::Router6<'static, StashHandle, 64, 8>;

/// Frames a core's router (each family) holds while their next hop resolves: 128, the most
/// its neighbour table queues behind the entries that may be Incomplete at once
/// (`NeighTable::MAX_INCOMPLETE` = 64 / 4, 8 frames each). A frame the router queues while the
/// stash is full is dropped and counted `tx_dropped` when the router releases it.
pub const ROUTER_HELD: usize = 128;

/// Refill a port's RX ring once this many slots are empty (DPDK's default `rx_free_thresh`,
/// 32); the ring keeps at least 224 of its 256 buffers posted.
pub const RX_FREE_THRESH: usize = 32;

/// Count a page a fused burst from local port `p` hands back (`why`): `tx_ring_full` on the
/// other port, or as [`count_rx_reject`] says. The caller recycles the page.
pub(crate) fn count_give_back(counters: &mut [PortCounters; PORTS], p: usize, why: GiveBack) {
    match why {
        GiveBack::TxFull => counters[1 - p].drop(DropReason::TxRingFull),
        GiveBack::Rx(status) => count_rx_reject(&mut counters[p], status),
        GiveBack::Multi { first } => {
            if first {
                counters[p].drop(DropReason::TooBig);
            }
        }
        GiveBack::Unused => {}
    }
}

/// Count an RX buffer that carried no whole frame (`status` other than [`RxStatus::Ok`]): a
/// frame too big for one page counts as received and dropped (`too_big`), a malformed buffer
/// as `bad_desc`, a continuation of a too-big frame not at all (its frame is counted once).
pub(crate) fn count_rx_reject(c: &mut PortCounters, status: RxStatus) {
    match status {
        RxStatus::Ok => {}
        RxStatus::TooBig => {
            c.rx += 1;
            c.drop(DropReason::TooBig);
        }
        RxStatus::Continuation | RxStatus::Unused => {}
        RxStatus::Malformed => c.drop(DropReason::BadDesc),
    }
}

pub use super::mtu::{port_mtu, port_mtu_source, rx_frame_limit};

/// What the dataplane needs from the machine it runs on. Implemented by the kernel (TSC, IPIs,
/// virtio-net over PCI, smoltcp) and by host tests.
pub trait Platform {
    /// A port's queues.
    type Nic: Nic;
    /// The management plane (smoltcp on the metal).
    type Mgmt: MgmtPlane;
    /// A cycle counter (TSC; one guest instruction per tick under `-icount shift=0`).
    fn cycles() -> u64;
    /// Nanoseconds since boot.
    fn uptime_ns() -> u64;
    /// Wake core `k` if it may be halted (an IPI), so it sees what was just pushed to it.
    fn wake(k: usize);
    /// One step of a wait loop (quit phases): the kernel services TLB flush requests here,
    /// so a core waiting for another never blocks that core's shootdown; then a spin hint.
    fn relax() {
        core::hint::spin_loop();
    }
    /// Run `f` on a frame of `len` bytes held in `pages` as one linear, read-only slice: the
    /// frame starts after the NIC's header area of `pages[0]`
    /// ([`Nic::FRAME_OFFSET`] of [`Platform::Nic`]) and runs on from offset 0
    /// of each following page (every page but the last full). The kernel maps the pages into
    /// this CPU's own window (a per-core view, `mem::kmap::LocalView`: unmapped with a local
    /// `invlpg`, no IPI); host tests copy. The pages stay the caller's.
    ///
    /// # Errors
    /// [`LinearError`] when no linear view could be made (`f` did not run).
    fn with_linear(
        pages: &[PageBuf],
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LinearError>;
    /// Write the `/metrics` body (Prometheus text) for `pairs` and the management counters.
    fn write_metrics(
        pairs: &[PairSnap],
        mgmt: &<Self::Mgmt as MgmtPlane>::Counters,
        w: &mut dyn core::fmt::Write,
    );
}

/// Why [`Platform::with_linear`] made no linear view of a frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum LinearError {
    /// `len` does not fit the pages as laid out (or more pages than a view holds).
    Layout,
    /// The machine could not map the view (this CPU's window busy, no vmap space).
    Map,
}

/// The management plane as the dataplane sees it: frames in (copies, or a frame of several
/// pages made linear for one call), frames out (copied into pool pages; several pages sent as
/// one descriptor chain), bounded work per poll.
pub trait MgmtPlane {
    /// Its counters, handed to [`Platform::write_metrics`].
    type Counters;
    /// The local port it lives on.
    fn port(&self) -> usize;
    /// Longest frame [`MgmtPlane::push_rx`] queues (bytes); a longer one (up to the port's
    /// MTU + 14) goes through [`MgmtPlane::rx_now`].
    fn queue_max(&self) -> usize;
    /// Queue a copy of `frame`; `false` (counted) when its queue is full.
    fn push_rx(&mut self, frame: &[u8]) -> bool;
    /// Process `frame` at once, borrowed (no copy; e.g. a per-core view of a jumbo frame's
    /// pages, valid only for this call); frames queued before it are processed first. What it
    /// produces waits for [`MgmtPlane::drain_tx`], which the caller runs next. `false`
    /// (counted) when it could not take the frame (longer than its MTU allows, or no room for
    /// a reply).
    fn rx_now(&mut self, now_ms: i64, frame: &[u8]) -> bool;
    /// Frames queued and not yet processed.
    fn rx_pending(&self) -> usize;
    /// Room in its RX queue.
    fn rx_room(&self) -> usize;
    /// Run it (bounded); `metrics` writes the `/metrics` body when a request is complete.
    fn poll(
        &mut self,
        now_ms: i64,
        metrics: &mut dyn FnMut(&mut dyn core::fmt::Write, &Self::Counters),
    );
    /// Hand every frame it produced to `send`.
    fn drain_tx(&mut self, send: &mut dyn FnMut(&[u8]));
}

/// Router mode: a core's router and what goes with it. It lives outside the [`Core`] (the
/// kernel carves it from the zone at boot, the host rig leaks a `Box`): each poll iteration
/// lends it to the router's network function (`route::RouterNf`), a pointer move, and
/// everything outside the iteration reaches it through [`Core::route`].
pub struct RouteState {
    /// The router.
    pub router: CoreRouter,
    /// A page for an ICMP error or ARP request, from pool 0 (kept until used).
    pub(crate) spare: Option<Held>,
    /// When the neighbour timers last ran (ns since boot).
    pub(crate) polled_ns: u64,
    /// Cross-core counters.
    pub sync: RouterSync,
    /// The frames `router` queued for a next hop to resolve, by its queue handle.
    pub(crate) held: Stash<ROUTER_HELD>,
    /// The frames `router6` queued for Neighbor Discovery, by its queue handle.
    pub(crate) held6: Stash<ROUTER_HELD>,
    /// The IPv6 router (frames of EtherType 0x86DD), with `ip6_0=`/`ip6_1=`.
    pub router6: Option<CoreRouter6>,
    /// The local port whose management plane has its IPv6 address too: `to_host` IPv6 frames
    /// and a copy of each Neighbor Advertisement on it go there (`route6.rs`).
    pub(crate) mgmt6: Option<usize>,
}

impl RouteState {
    /// The state of a core running `router`, nothing held yet.
    pub fn new(router: CoreRouter) -> RouteState {
        RouteState {
            router,
            spare: None,
            polled_ns: 0,
            sync: RouterSync::default(),
            held: Stash::new(),
            held6: Stash::new(),
            router6: None,
            mgmt6: None,
        }
    }

    /// With the IPv6 router `r6` beside the IPv4 one.
    pub fn with_router6(mut self, r6: Option<CoreRouter6>) -> RouteState {
        self.router6 = r6;
        self
    }

    /// With the management plane on local port `p` over IPv6 too (`None`: IPv4 only).
    pub fn with_mgmt6(mut self, p: Option<usize>) -> RouteState {
        self.mgmt6 = p;
        self
    }
}

/// What [`Core::new`] needs.
pub struct CoreParams<P: Platform> {
    /// The boot configuration.
    pub cfg: Config,
    /// This core's pair number (ports `2k`, `2k + 1`; queue pair `k` with multi-queue).
    pub pair: usize,
    /// The pair's two ports, already initialised.
    pub nics: [P::Nic; PORTS],
    /// The zone and this core's pcp list.
    pub zone: &'static Zone,
    /// This core's pcp list.
    pub pcp: PerCpuPages,
    /// Shared with the other cores.
    pub fabric: &'static Fabric,
    /// Router mode: this core's router, in storage kept for the kernel's life
    /// ([`RouteState::new`]).
    pub router: Option<&'static mut RouteState>,
    /// The management plane, if it runs on this core.
    pub mgmt: Option<P::Mgmt>,
    /// The local port of a management address served by another core (core 0).
    pub mgmt_remote: Option<usize>,
}

/// Why a core could not be set up.
#[derive(Debug)]
pub enum CoreError {
    /// A page_pool could not be created or attached to its ring (pool id, reason).
    Pool(u32, &'static str),
    /// The router refused a port's MTU (port, MTU in bytes): below RFC 791's 68.
    Mtu(usize, u16),
}

/// One forwarding core.
pub struct Core<P: Platform> {
    pub(crate) cfg: Config,
    pub(crate) pair: usize,
    /// `ManuallyDrop`: quit drops the devices (freeing their rings) before the final counters.
    /// (One per port rather than around the array: rustc 1.95 hits an internal compiler error
    /// in MIR validation on the array's drop glue for an associated type.)
    pub(crate) nics: [core::mem::ManuallyDrop<P::Nic>; PORTS],
    nics_dropped: Option<[DriverStats; PORTS]>,
    pub(crate) pages: Pages,
    pub(crate) counters: [PortCounters; PORTS],
    pub(crate) macs: [MacAddr; PORTS],
    /// `io`/`l2`: the rewrite of a frame leaving local port `q` (its MAC, its peer's), made once.
    pub(crate) rewrite: [MacRewrite; PORTS],
    pub(crate) tx: TxStage,
    pub(crate) prof: Profile,
    pub(crate) route: Option<&'static mut RouteState>,
    /// The management plane's side of this core (any network function).
    pub(crate) mgmt: MgmtSide<P::Mgmt>,
    pub(crate) fabric: &'static Fabric,
    /// Scratch arrays, allocated once.
    pub(crate) rx_scratch: [RxBuf; MAX_BURST],
    pub(crate) page_scratch: [Pfn; RING_SIZE],
    /// Pages lost so far in the quit phases (reported with the final counters).
    pub(crate) quit_leaked: u64,
    /// The network function's verdict counts and the frames it took this iteration
    /// ([`Core::poll_nf`]).
    pub(crate) nf_side: NfSide,
    /// Outside router mode, per egress port `q`: the longest frame (bytes) it may send, when
    /// that is less than the other port receives ([`rx_frame_limit`] of both MTUs); `None`
    /// when every frame the other port takes fits. A longer frame bound for `q` is dropped
    /// and counted `over_mtu` on `q` (the fused burst checks it only when `Some`).
    pub(crate) tx_cap: [Option<NonZeroUsize>; PORTS],
    /// [`Core::tx_cap`] from the MTUs alone, while the port's link is up.
    pub(crate) mtu_cap: [Option<NonZeroUsize>; PORTS],
    /// Per port: its link was down at the last poll (`Core::poll_links`): every frame bound
    /// for it is dropped and counted `link_down` (its [`Core::tx_cap`] is then 1 byte).
    pub(crate) link_down: [bool; PORTS],
    /// Housekeeping ticks until the next link poll.
    pub(crate) link_poll_in: u8,
    /// Whether either port has a [`Core::tx_cap`]: the poll iteration then runs its NF behind
    /// `nf::ops::Capped` (chosen once per iteration).
    pub(crate) tx_capped: bool,
    /// `xcore=on` or [`Core::tx_capped`]: l2/io's iteration may leave its own path (one test
    /// per iteration, as `xcore=on`'s alone was).
    pub(crate) l2_divert: bool,
}

impl<P: Platform> Core<P> {
    /// Set up a core: its two page_pools (ids `2k`, `2k + 1`, attached to their recycle rings
    /// in the fabric), MACs published, RX rings filled and kicked.
    ///
    /// # Errors
    /// [`CoreError::Pool`] when a pool cannot be created or attached.
    pub fn new(p: CoreParams<P>) -> Result<Core<P>, CoreError> {
        let k = p.pair;
        let macs = [MacAddr(p.nics[0].mac()), MacAddr(p.nics[1].mac())];
        // An array built in place: through a `heapless::Vec` and `into_array` LLVM copied the
        // two pools (2.3 KiB) word by word twice, ~1,200 straight-line instructions that TCG
        // translated at every boot.
        let pools: [PagePool; PORTS] = [
            Self::port_pool(&p, PORTS * k, macs[0])?,
            Self::port_pool(&p, PORTS * k + 1, macs[1])?,
        ];
        let rewrite = core::array::from_fn(|q| MacRewrite::new(p.cfg.mode, macs[q], p.cfg.peer[q]));
        let mut route = p.router;
        if let Some(rs) = route.as_deref_mut() {
            // The egress MTU per port: `mtuN=`, else the device's (VIRTIO_NET_F_MTU), else
            // Ethernet's 1500 (RFC 894).
            for (port, nic) in p.nics.iter().enumerate() {
                let mtu = port_mtu(p.cfg.mtu[port], nic);
                rs.router
                    .set_mtu(port, mtu)
                    .map_err(|_| CoreError::Mtu(port, mtu))?;
            }
        }
        // Outside the router the kernel steers the management address's frames off (the router
        // recognises its own addresses).
        let mgmt_port = p.mgmt.as_ref().map(|m| m.port()).or(p.mgmt_remote);
        let steer = mgmt_port
            .filter(|_| route.is_none())
            .and_then(|q| Some((q, p.cfg.ip.get(q).copied().flatten()?.addr)));
        let mgmt = MgmtSide {
            plane: p.mgmt,
            remote: p.mgmt_remote,
            steer,
            ..MgmtSide::none()
        };
        let mut core: Core<P> = Core {
            mgmt,
            cfg: p.cfg,
            pair: k,
            nics: p.nics.map(core::mem::ManuallyDrop::new),
            nics_dropped: None,
            pages: Pages::new(p.zone, p.pcp, pools, k, p.fabric),
            counters: [PortCounters::default(); PORTS],
            macs,
            rewrite,
            tx: TxStage::default(),
            prof: Profile::default(),
            route,
            fabric: p.fabric,
            rx_scratch: [RxBuf {
                pfn: Pfn(0),
                len: 0,
                status: RxStatus::Ok,
            }; MAX_BURST],
            page_scratch: [Pfn(0); RING_SIZE],
            quit_leaked: 0,
            nf_side: NfSide::default(),
            tx_cap: [None; PORTS],
            mtu_cap: [None; PORTS],
            link_down: [false; PORTS],
            link_poll_in: 0,
            tx_capped: false,
            l2_divert: false,
        };
        for port in 0..PORTS {
            // A jumbo MTU: RX buffers of several pages, so each frame is one used element
            // (`Nic::set_rx_buffer_pages`); without indirect descriptors the device
            // spreads such frames over one-page buffers (mergeable), which works too.
            let mtu = core.set_rx_frame_limit(port, k == 0);
            let want = buffer_pages_for_mtu(mtu, <P::Nic as Nic>::FRAME_OFFSET);
            if want > 1 {
                if let Err(e) = core.nics[port].set_rx_buffer_pages(want) {
                    log::warn!(
                        "port {}: MTU {mtu}: RX buffers stay one page ({e}); frames of several pages arrive in several buffers (virtio-net: mergeable; DD-bit NICs: several descriptors)",
                        PORTS * k + port
                    );
                }
            }
            core.refill(port);
        }
        core.tx_capped = core.tx_cap.iter().any(Option::is_some);
        core.l2_divert = core.cfg.xcore || core.tx_capped;
        core.kick_all();
        Ok(core)
    }

    /// Port `id`'s page_pool (pool id = global port number): refill batch, the allocator's
    /// clock, the refill mode, its recycle ring attached; the port's MAC published to the
    /// fabric.
    fn port_pool(p: &CoreParams<P>, id: usize, mac: MacAddr) -> Result<PagePool, CoreError> {
        let id32 = id as u32;
        let mut pool = PagePool::new(PagePoolParams {
            id: id32,
            refill: PP_ALLOC_CACHE_REFILL,
        })
        .map_err(|_| CoreError::Pool(id32, "bad parameters"))?;
        // The slow path is timed inside the pool: `refill_cycles / refill_pages` is the
        // allocator's cost per page, and the fast path pays nothing for it.
        pool.set_clock(P::cycles);
        pool.set_refill_mode(match p.cfg.refill {
            RefillMode::Bulk => PoolRefill::Bulk,
            RefillMode::Single => PoolRefill::Single,
        });
        pool.attach_ring(&p.fabric.pool_rings[id])
            .map_err(|_| CoreError::Pool(id32, "recycle ring already attached"))?;
        p.fabric.set_port_mac(id, mac);
        Ok(pool)
    }

    /// This core's pair number.
    pub fn pair(&self) -> usize {
        self.pair
    }

    /// The boot configuration.
    pub fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// The pair's ports; `None` once `quit` has torn them down.
    pub fn nics(&self) -> Option<&[core::mem::ManuallyDrop<P::Nic>; PORTS]> {
        (!self.torn_down()).then_some(&self.nics)
    }

    /// Whether `quit`'s last phase dropped the devices. Every public entry point that reaches
    /// them ([`Core::poll_once`], [`Core::idle_tick`], [`Core::arm_interrupts`],
    /// [`Core::park_interrupts`], [`Core::nics`], [`Core::quit_phase`]) checks it first.
    #[inline]
    pub fn torn_down(&self) -> bool {
        self.nics_dropped.is_some()
    }

    /// Port counters.
    pub fn counters(&self) -> &[PortCounters; PORTS] {
        &self.counters
    }

    /// The page owner (pcp list, pools, zone).
    pub fn pages(&self) -> &Pages {
        &self.pages
    }

    /// Mutable page owner (the console's `drain`).
    pub fn pages_mut(&mut self) -> &mut Pages {
        &mut self.pages
    }

    /// The router state, mutable (host tests).
    #[cfg(any(test, feature = "host-rig"))]
    pub fn route_mut(&mut self) -> Option<&mut RouteState> {
        self.route.as_deref_mut()
    }

    /// Router mode: the router state.
    pub fn route(&self) -> Option<&RouteState> {
        self.route.as_deref()
    }

    /// Router mode: switch this core's router to `fib` (live route reload). Call only at a
    /// quiescent point of this core (between poll iterations, e.g. its housekeeping): no frame
    /// is in the middle of a lookup then. Returns the FIB the router used before; `Ok(None)`
    /// outside router mode.
    ///
    /// # Errors
    /// [`netstack::router::RouterError::FibLacksPort`] if `fib` lacks a port's connected route
    /// (the router keeps its FIB).
    pub fn set_fib(
        &mut self,
        fib: &'static Fib<'static>,
    ) -> Result<Option<&'static Fib<'static>>, netstack::router::RouterError> {
        match self.route.as_mut() {
            Some(r) => r.router.set_fib(fib).map(Some),
            None => Ok(None),
        }
    }

    /// Router mode: record that the neighbour timers just ran at `now_ns`, so the next poll
    /// iteration does not run them (the deterministic benchmark keeps them out of its bracket).
    pub fn router_timers_ran(&mut self, now_ns: u64) {
        if let Some(r) = self.route.as_mut() {
            r.polled_ns = now_ns;
        }
    }

    /// The cycle profile.
    pub fn profile_mut(&mut self) -> &mut Profile {
        &mut self.prof
    }

    /// The fabric shared with the other cores.
    pub fn fabric(&self) -> &'static Fabric {
        self.fabric
    }

    /// Fill every empty RX slot of local port `p` from its page_pool: one batch of pages
    /// (`rx_buffer_pages` per slot; with big buffers in rounds of whole buffers that fit the
    /// scratch array).
    pub(crate) fn refill(&mut self, p: usize) {
        let per = self.nics[p].rx_buffer_pages().max(1);
        let round = RING_SIZE / per * per;
        loop {
            let want = (self.nics[p].rx_free_slots() * per).min(round);
            let mut n = 0;
            while n < want {
                match self.pages.alloc(p) {
                    Some(page) => {
                        self.page_scratch[n] = page.into_raw().pfn;
                        n += 1;
                    }
                    None => {
                        self.counters[p].no_buffer += 1;
                        break;
                    }
                }
            }
            if n == 0 {
                return;
            }
            // SAFETY: the pages come fresh from the pool (given up with `into_raw` above);
            // those accepted belong to the RX ring until `rx_burst` or `take_pages` returns
            // them.
            let posted = unsafe { self.nics[p].rx_refill(&self.page_scratch[..n]) };
            for i in posted..n {
                // SAFETY: refused by the ring (or short of a whole buffer): still ours, from
                // pool `p`.
                let page = unsafe { PageBuf::from_raw(self.pages.raw(p, self.page_scratch[i])) };
                self.pages.recycle(page);
            }
            // (`posted == 0` is below `want`: `n > 0` pages were asked for.)
            if posted < want {
                return;
            }
        }
    }

    /// Receive a burst on local port `p` into `rx_scratch`, re-posting each emptied RX slot at
    /// once with a page from port `p`'s pool (published in batches of 32; slots the pool cannot
    /// fill wait for [`Core::refill`]). Returns the buffers completed.
    #[inline(always)]
    pub(crate) fn rx_burst(&mut self, p: usize) -> usize {
        // With big RX buffers one element hands out up to `2 × pages − 1` buffers (its pages,
        // and a released slot's others): room for two elements' worth whatever `burst=` says,
        // or a small burst would take nothing, ever.
        let per = self.nics[p].rx_buffer_pages();
        let burst = if per > 1 {
            self.cfg.burst.max(4 * per).min(MAX_BURST)
        } else {
            self.cfg.burst
        };
        let pages = &mut self.pages;
        let alloc = || pages.alloc(p).map(|page| page.into_raw().pfn);
        // SAFETY: each page comes fresh from port `p`'s pool and is given up (`into_raw`) to
        // the RX ring of port `p`, which is refilled only from that pool; it comes back from
        // an RX burst or `take_pages`.
        unsafe { self.nics[p].rx_burst_refill(&mut self.rx_scratch[..burst], alloc) }
    }

    /// Add a fused burst's counts (`st`, RX on local port `p`, TX on the other) to the ports'
    /// counters.
    #[inline(always)]
    pub(crate) fn count_burst(&mut self, p: usize, st: &BurstStats) {
        let c = &mut self.counters[p];
        c.rx += st.rx_frames as u64;
        c.rx_bytes += st.rx_bytes;
        let c = &mut self.counters[1 - p];
        c.tx += st.tx_frames as u64;
        c.tx_bytes += st.tx_bytes;
    }

    /// Notify every port of what was published (at most one kick per queue).
    pub(crate) fn kick_all(&mut self) {
        for nic in self.nics.iter_mut() {
            self.prof.kicks += u64::from(nic.kick());
        }
    }

    /// [`Core::kick_all`] inline with constant ports, for the poll iteration: no call, and each
    /// queue's "anything published since the last kick" test at a fixed offset from `self`.
    #[inline(always)]
    fn kick_both(&mut self) {
        const { assert!(PORTS == 2) };
        let k = self.nics[0].kick() + self.nics[1].kick();
        self.prof.kicks += u64::from(k);
    }

    /// Take the page of completed RX buffer `b` of local port `p` and count it; a buffer that
    /// carries no whole frame (too big, a continuation of one, malformed) is counted under its
    /// drop reason and recycled. Returns the page when it holds a frame (of `b.len` bytes).
    #[inline(always)]
    pub(crate) fn rx_accept(&mut self, p: usize, b: RxBuf) -> Option<PageBuf> {
        // SAFETY: the RX ring returned the page in a used entry: it is ours again, and port
        // `p`'s ring is refilled only from pool `p` (`refill`).
        let page = unsafe { PageBuf::from_raw(self.pages.raw(p, b.pfn)) };
        if b.status == RxStatus::Ok {
            self.counters[p].rx += 1;
            self.counters[p].rx_bytes += b.len as u64;
            return Some(page);
        }
        count_rx_reject(&mut self.counters[p], b.status);
        self.pages.recycle(page);
        None
    }

    /// One poll iteration: cross-core input, RX and forward (or route) on both ports, TX reap,
    /// hand-offs; if that did work, refill RX (batched) and kick. Returns the work done (frames
    /// and pages moved); 0 means idle. Profiled in [`Profile`] when busy.
    pub fn poll_once(&mut self) -> usize {
        if self.torn_down() {
            return 0;
        }
        if self.route.is_some() {
            self.poll_route()
        } else {
            self.poll_l2()
        }
    }

    /// The rest of a poll iteration after RX (`work` frames and pages moved so far, `t0` its
    /// start in cycles): TX reap, hand-offs, and if anything was done, refill, kick and
    /// profile. Returns the work done.
    #[inline(always)]
    pub(crate) fn poll_tail(&mut self, t0: u64, mut work: usize) -> usize {
        // The phase split (`phases=on`) costs three TSC reads more; off, they are skipped.
        let phases = self.cfg.phases;
        let t_rx = if phases { P::cycles() } else { 0 };
        work += self.tx_reap(false);
        if self.cfg.xcore {
            work += self.drain_handoff();
        }
        if work == 0 {
            return 0;
        }
        let t_reap = if phases { P::cycles() } else { 0 };
        self.refill_short();
        let t_refill = if phases { P::cycles() } else { 0 };
        self.kick_both();
        let t1 = P::cycles();
        let pr = &mut self.prof;
        pr.busy_cycles += t1 - t0;
        pr.busy_iters += 1;
        if phases {
            pr.phase_cycles[0] += t_rx - t0;
            pr.phase_cycles[1] += t_reap - t_rx;
            pr.phase_cycles[2] += t_refill - t_reap;
            pr.phase_cycles[3] += t1 - t_refill;
        }
        work
    }

    /// Refill every port whose RX ring is short by [`RX_FREE_THRESH`] slots or more (like
    /// DPDK's `rx_free_thresh`: a batch of empty slots at once). Returns whether any was; the
    /// caller kicks.
    #[inline(always)]
    fn refill_short(&mut self) -> bool {
        let mut any = false;
        for p in 0..PORTS {
            if self.nics[p].rx_free_slots() >= RX_FREE_THRESH {
                self.refill(p);
                any = true;
            }
        }
        any
    }

    /// Every 10 ms, busy or idle: the router's timers (ARP retransmits, queue timeouts) and the
    /// management plane (whatever the NF), then send and kick.
    pub fn idle_tick(&mut self) {
        if self.torn_down() {
            return;
        }
        // [`Core::poll_once`] refills only after an iteration that did work: a ring its pool
        // could not refill (the pool ran dry) may be empty, and then no frame comes to make
        // one. This brings it back once the pool has pages again.
        let refilled = self.refill_short();
        self.poll_links();
        if self.route.is_none() {
            if self.mgmt.plane.is_some() {
                self.mgmt_tick();
            } else if refilled {
                self.kick_all();
            }
            return;
        }
        self.mgmt_poll();
        if let Some(rs) = self.route.take() {
            self.router_tick(rs);
            self.route = Some(rs);
        } else {
            self.flush_all();
            self.kick_all();
        }
    }

    /// Before halting: say so in the fabric (other cores then wake this one after handing it
    /// work) and arm RX interrupts on every port. Returns `true` if a frame or a hand-off
    /// slipped in meanwhile (do not halt).
    pub fn arm_interrupts(&mut self) -> bool {
        if self.torn_down() {
            return false;
        }
        let k = self.pair;
        self.fabric.set_sleeping(k, true);
        let mut pending = self.fabric.has_work_for(k);
        for nic in self.nics.iter_mut() {
            // Buffers re-posted in place but not yet published go to the device first.
            nic.rx_publish();
            pending |= nic.rx_arm_interrupt();
        }
        pending
    }

    /// After waking (or deciding not to halt): stop device interrupts again.
    pub fn park_interrupts(&mut self) {
        self.fabric.set_sleeping(self.pair, false);
        if self.torn_down() {
            return;
        }
        for nic in self.nics.iter_mut() {
            nic.park_interrupts();
        }
    }

    /// After handing core `k` work through the fabric: wake it if it is halted (an IPI only
    /// then, so a busy or polling core is never interrupted).
    #[inline]
    pub(crate) fn wake_if_sleeping(&self, k: usize) {
        if self.fabric.is_sleeping(k) {
            P::wake(k);
        }
    }

    /// Driver counters of local port `i`.
    pub fn nic_stats(&self, i: usize) -> DriverStats {
        match &self.nics_dropped {
            Some(s) => s[i],
            None => self.nics[i].stats(),
        }
    }

    /// Drop the devices (their rings go back to the zone); counters are kept.
    pub(crate) fn drop_nics(&mut self) {
        if self.nics_dropped.is_some() {
            return;
        }
        self.nics_dropped = Some([self.nics[0].stats(), self.nics[1].stats()]);
        for nic in self.nics.iter_mut() {
            // SAFETY: `nics_dropped` is set, so `self.nics` is never used again: every public
            // entry point that reaches it checks `torn_down` first (see there), the internal
            // ones are reached only through those, and this runs once.
            unsafe { core::mem::ManuallyDrop::drop(nic) };
        }
    }

    /// What this core looks like now (`done` once torn down, `leaked` pages lost).
    pub fn snap(&self, done: bool, leaked: u64) -> PairSnap {
        PairSnap {
            pair: self.pair,
            macs: self.macs,
            counters: self.counters,
            nic: [self.nic_stats(0), self.nic_stats(1)],
            pools: core::array::from_fn(|i| PoolSnap::of(&self.pages.pools[i])),
            prof: Profile {
                refill_cycles: self
                    .pages
                    .pools
                    .iter()
                    .map(|q| q.stats().refill_cycles)
                    .sum(),
                ..self.prof
            },
            pcp_count: self.pages.pcp.count() as u64,
            router: self.route.as_ref().map(|r| RouterSnap {
                counters: *r.router.counters(),
                queued_now: r.router.queued_frames() as u64,
                sync: r.sync,
                v6: r
                    .router6
                    .as_ref()
                    .map(|r6| (*r6.counters(), r6.queued_frames() as u64)),
            }),
            nf: self.nf_side.counters,
            nf_own: self.nf_side.own,
            mgmt: self.mgmt_path(),
            done,
            leaked,
        }
    }

    /// Publish this core's counters for the boot CPU.
    pub fn publish(&self, done: bool, leaked: u64) {
        *self.fabric.snaps[self.pair].lock() = Some(self.snap(done, leaked));
    }

    /// Every forwarding core's counters: this core's (live) then the others' last published.
    pub fn all_pairs(&self) -> heapless::Vec<PairSnap, { super::MAX_CORES }> {
        let mut v = heapless::Vec::new();
        let _ = v.push(self.snap(false, 0));
        for (_, s) in self.fabric.others() {
            if let Some(p) = s {
                let _ = v.push(p);
            }
        }
        v
    }
}
