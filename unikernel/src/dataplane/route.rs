//! Router mode: RFC 1812 forwarding through [`netstack::router::Router`] as a network function
//! on the public API ([`RouterNf`]): its fast path is `process` (one verdict per frame in the
//! driver's fused loop); everything else (ARP, ICMP, options, the first frame to a next hop,
//! hairpins, fragments, IPv6, frames for the management plane) is kept and routed in
//! `end_of_burst` by the slow path (`route_slow`, `route6`: [`Ctx`] methods only); the
//! router's events (ARP requests, frames released by ARP replies) after it and in `tick`
//! (its timers), neighbour sync between cores before each iteration.
//!
//! The router's state ([`RouteState`]) lives outside the core: each poll iteration lends it to
//! [`RouterNf`] (a pointer move) and takes it back. Frames waiting for a next hop are
//! [`Held`](super::nf::Held)s in the state's [`Stash`](super::nf::Stash)es, under the handle
//! the router's neighbour queue keeps. What is not public API: the neighbour updates between
//! cores' routers (`Ctx::share_neigh`, the fabric's rings), and the ARP copy the management
//! plane gets is [`Ctx::copy_to_mgmt`], public.

use super::nf::Capped;
use super::nf::{Chain, Ctx, NetworkFunction, Packet, Verdict};
use super::percore::{Core, Platform, RouteState};
use drivers::nic::MAX_FRAME_PAGES;

/// The router's neighbour timers (ARP retransmit 1 s, queue timeout, ageing) run at least this
/// often, busy or idle (the core's housekeeping): 10 ms.
pub const ROUTER_TIMER_NS: u64 = 10_000_000;

/// [`Packet::set_mark`] of a hairpin the fast path rewrote (out of the port it came in on):
/// this bit, with the bytes to send below it.
const HAIRPIN: u16 = 0x8000;

/// The router as a network function over one core's [`RouteState`], lent to it for one poll
/// iteration (or for its timers, or for the neighbour updates of other cores).
pub(crate) struct RouterNf<'a> {
    pub(crate) rs: &'a mut RouteState,
}

impl NetworkFunction for RouterNf<'_> {
    const NAME: &'static str = "router";
    /// Neighbour entries record their last use.
    const CLOCK: bool = true;

    /// The router's fast path (`Router::forward_fast_len`: IPv4 without options to a resolved
    /// next hop, rewritten in place): out of the other port it is forwarded by the loop; a
    /// hairpin (already rewritten, marked [`HAIRPIN`]) and everything the fast path refuses
    /// are kept for [`NetworkFunction::end_of_burst`].
    #[inline(always)]
    fn process(&mut self, pkt: &mut Packet<'_>) -> Verdict {
        let (p, len, now) = (pkt.in_port(), pkt.len(), pkt.now_ns());
        match self.rs.router.forward_fast_len(p, pkt.head_mut(), len, now) {
            Some((port, n)) if usize::from(port) == 1 - p => {
                if n == len {
                    Verdict::Forward
                } else {
                    Verdict::ForwardFirst(n)
                }
            }
            Some((_, n)) => {
                mark_hairpin(pkt, n);
                Verdict::Keep
            }
            None => Verdict::Keep,
        }
    }

    /// A frame the fast path forwarded that the egress ring refused: not `forwarded` but
    /// `tx_dropped` (the port counts `tx_ring_full`).
    #[cold]
    fn tx_refused(&mut self) {
        self.rs.router.tx_dropped(false);
    }

    /// A hairpin (rewritten and counted `forwarded` by the fast path) the iteration's kept
    /// list had no room for: `tx_dropped` (`nf.keep_overflow` says why). Other kept frames
    /// reached no router counter yet.
    #[cold]
    fn keep_lost(&mut self, mark: u16) {
        if mark & HAIRPIN != 0 {
            self.rs.router.tx_dropped(false);
        }
    }

    /// The kept frames in arrival order: hairpins sent back out of their port, IPv6 datagrams
    /// the IPv6 fast path takes (`Router6::forward_fast`: here, not in `process`, so IPv4's
    /// per-frame code stays as it was; a refusal of the egress port is `Router6`'s
    /// `tx_dropped`) out of the other, the others routed by the slow path; then the router's
    /// events if it has some (an ARP request for a frame just queued). The management plane's
    /// input (the ARP copies and the frames for its address) is polled by the kernel after
    /// this hook, once `Core::poll_route` has the router's state back.
    fn end_of_burst<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        let now = ctx.now_ns();
        while let Some(mut h) = ctx.next_kept() {
            if h.mark() & HAIRPIN != 0 {
                h.set_len(usize::from(h.mark() & !HAIRPIN));
                let port = h.port();
                if !ctx.send_whole(h, port) {
                    self.rs.router.tx_dropped(false);
                }
                continue;
            }
            if let Some(r6) = self.rs.router6.as_mut() {
                // The IPv6 fast path first, for a frame IPv4's refused: out of the other port.
                let (port, len) = (h.port(), h.len());
                if let Some((_, n)) = r6.forward_fast(port, h.head_mut(), len, now) {
                    h.set_len(n);
                    if !ctx.send_whole(h, 1 - port) {
                        r6.tx_dropped();
                    }
                    continue;
                }
            }
            self.route_kept(ctx, h);
        }
        if self.rs.router.needs_poll() {
            self.rs.polled_ns = now;
            self.events(ctx);
        }
    }

    /// The neighbour timers of both families (ARP and Neighbor Discovery retransmits, queue
    /// timeouts, ageing): every 10 ms from the core's housekeeping, busy or idle.
    fn tick<P: Platform>(&mut self, ctx: &mut Ctx<'_, P>) {
        self.rs.polled_ns = ctx.now_ns();
        self.events(ctx);
        if self.rs.router6.is_some() {
            self.events6(ctx);
        }
    }
}

/// Mark a hairpin of `n` bytes, to be kept (`n` fits below [`HAIRPIN`]: a frame is at most
/// `MAX_FRAME_PAGES` pages). Returns nothing so that the verdict stays a constant at the call
/// site: a verdict returned from an out-of-line call is matched through a jump table on its
/// discriminant, which the no-indirect-call check cannot bound.
#[cold]
#[inline(never)]
fn mark_hairpin(pkt: &mut Packet<'_>, n: usize) {
    const { assert!(MAX_FRAME_PAGES * mm::PAGE_SIZE < HAIRPIN as usize) };
    pkt.set_mark(HAIRPIN | n as u16);
}

impl<P: Platform> Core<P> {
    /// [`Core::poll_once`] in router mode: the neighbour updates other cores sent, then one
    /// iteration of [`RouterNf`] over this core's [`RouteState`] (lent for it).
    #[inline(never)]
    pub(crate) fn poll_route(&mut self) -> usize {
        let t0 = P::cycles();
        self.poll_route_nf(t0, |r| r, |r| r.rs)
    }

    /// `Core::poll_route` with the filter `first` in front of the router, composed at
    /// compile time ([`Chain`]`<&mut F, RouterNf>`: the ACL in front of the router when
    /// `mode=router` has a rules file).
    #[inline(never)]
    pub fn poll_route_after<F: NetworkFunction>(&mut self, first: &mut F) -> usize {
        let t0 = P::cycles();
        self.poll_route_nf(t0, |r| Chain::new(first, r), |c| c.second.rs)
    }

    /// One iteration of the network function `lend` makes of this core's [`RouteState`]
    /// (lent to it; `back` takes it back), after the neighbour updates other cores sent; the
    /// management plane's poll waits until the state is back.
    #[inline(always)]
    fn poll_route_nf<F: NetworkFunction>(
        &mut self,
        t0: u64,
        lend: impl FnOnce(RouterNf<'static>) -> F,
        back: impl FnOnce(F) -> &'static mut RouteState,
    ) -> usize {
        let Some(rs) = self.route.take() else {
            return 0;
        };
        let pre = if self.fabric.cores() > 1 {
            self.router_sync(rs)
        } else {
            0
        };
        let mut nf = lend(RouterNf { rs });
        self.mgmt.wait = true;
        let work = if self.tx_capped {
            self.poll_route_capped(t0, pre, &mut nf)
        } else {
            self.poll_nf_from(t0, pre, &mut nf)
        };
        self.mgmt.wait = false;
        self.route = Some(back(nf));
        if self.mgmt.due {
            self.mgmt_due();
        }
        work
    }

    /// [`Core::poll_nf_from`] of the router's NF behind `Capped`: a port's link is down
    /// (`Core::poll_links`), so the frames it routes there are dropped and counted `link_down`
    /// (the router's MTUs set no cap: it fragments instead). Out of line: a second
    /// instantiation of the fused loops, for the outage only.
    #[cold]
    #[inline(never)]
    fn poll_route_capped<F: NetworkFunction>(&mut self, t0: u64, pre: usize, nf: &mut F) -> usize {
        let (caps, down) = (self.tx_cap, self.link_down);
        self.poll_nf_from(t0, pre, Capped::new(nf, caps, down))
    }

    /// The router's timers ([`RouterNf`]'s `tick`) over `rs`, from the core's housekeeping;
    /// what they sent flushed and kicked.
    pub(crate) fn router_tick(&mut self, rs: &mut RouteState) {
        self.run_hook(&mut RouterNf { rs }, |nf, ctx| nf.tick(ctx));
    }

    /// The management plane's poll that waited for the router's state during the iteration
    /// (see `MgmtSide::wait`), its output sent and kicked.
    #[cold]
    #[inline(never)]
    fn mgmt_due(&mut self) {
        self.mgmt.due = false;
        self.mgmt_poll();
        self.flush_all();
        self.kick_all();
    }

    /// Router mode on several cores, at the top of every poll iteration: apply the neighbour
    /// updates (ARP and Neighbor Discovery) other cores sent to `rs` (then release what was
    /// queued behind them) and, on
    /// core 0, feed the management plane the frames other cores handed over. Returns items
    /// taken.
    pub(crate) fn router_sync(&mut self, rs: &mut RouteState) -> usize {
        let ring = &self.fabric.neigh[self.pair];
        let mut n = 0;
        let mut now = 0;
        while let Some(u) = ring.pop() {
            if n == 0 {
                now = P::uptime_ns();
            }
            rs.router.learn(u, now);
            n += 1;
        }
        let ring6 = &self.fabric.neigh6[self.pair];
        let mut n6 = 0;
        while let Some(u) = ring6.pop() {
            if n + n6 == 0 {
                now = P::uptime_ns();
            }
            if let Some(r6) = rs.router6.as_mut() {
                r6.learn(u, now);
            }
            n6 += 1;
        }
        rs.sync.neigh_applied += (n + n6) as u64;
        if n > 0 && rs.router.needs_poll() {
            rs.polled_ns = now;
            RouterNf { rs }.events(&mut Ctx::new(self, now));
        }
        if n6 > 0 && rs.router6.as_ref().is_some_and(|r6| r6.needs_poll()) {
            RouterNf { rs }.events6(&mut Ctx::new(self, now));
        }
        n += n6;
        if self.mgmt().is_some() && !self.fabric.mgmt.is_empty() {
            n += self.drain_mgmt_ring();
        }
        if n > 0 {
            self.flush_all();
        }
        n
    }
}
