//! Router mode: RFC 1812 forwarding through [`netstack::router::Router`] as a network function
//! on the public API ([`RouterNf`]): its fast path is `process` (one verdict per frame in the
//! driver's fused loop); everything else (ARP, ICMP, options, the first frame to a next hop,
//! hairpins, fragments, frames for the management plane) is kept and routed in
//! `end_of_burst`; then the router's events (ARP requests, frames released by ARP replies),
//! neighbour sync between cores, and the neighbour timers in the core's housekeeping.
//!
//! The router's state ([`RouteState`]) lives outside the core: each poll iteration lends it to
//! [`RouterNf`] (a pointer move) and takes it back. Its slow path reaches the core's kernel
//! services (neighbour sync, fragments, the management plane's ARP copy) through the
//! in-crate `Ctx::core`, not public API yet.

use super::nf::Capped;
use super::nf::{Chain, Ctx, Held, NetworkFunction, Packet, Verdict};
use super::page::{frame_room, page_bytes, PageBuf};
use super::percore::{Core, MgmtPlane, Platform, RouteState};
use drivers::nic::{Nic, MAX_FRAME_PAGES};
use mm::Pfn;
use netstack::config::PORTS;
use netstack::router::frag::Fragmenter;
use netstack::router::{set_macs, Action, Event, NeighUpdate};
use netstack::wire::{ARP_OPER, ARP_REQUEST, ARP_TPA, ETHERTYPE, ETHERTYPE_ARP, ETH_HDR_LEN};
use netstack::DropReason;

/// The router's neighbour timers (ARP retransmit 1 s, queue timeout, ageing) run at least this
/// often, busy or idle (the core's housekeeping): 10 ms.
pub const ROUTER_TIMER_NS: u64 = 10_000_000;

/// [`Packet::set_mark`] of a hairpin the fast path rewrote (out of the port it came in on):
/// this bit, with the bytes to send below it.
const HAIRPIN: u16 = 0x8000;

/// The router as a network function over one core's [`RouteState`], lent to it for one poll
/// iteration.
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
    /// `tx_dropped`) out of the other, the others routed by the slow path; then the router's events if it has some (an ARP request for a
    /// frame just queued), and the management plane's input (the ARP copies and the frames
    /// for its address just handed to it: polled once [`Core::poll_route`] has the router's
    /// state back).
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
            ctx.core().route_kept(self.rs, h, now);
        }
        if self.rs.router.needs_poll() {
            self.rs.polled_ns = now;
            ctx.core().router_events(self.rs, now);
        }
        let core = ctx.core();
        if core.mgmt().is_some_and(|m| m.rx_pending() > 0) {
            core.mgmt_poll();
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

/// The later pages of a [`Held`] frame.
type HeldRest = heapless::Vec<PageBuf, { MAX_FRAME_PAGES - 1 }>;

/// The frame numbers of `rest`, given up (the caller hands them on as raw pages).
fn raw_pfns(rest: HeldRest) -> heapless::Vec<Pfn, 3> {
    rest.into_iter().map(|pg| pg.into_raw().pfn).collect()
}

/// Most fragments [`Core::fragment_pages`] makes of one datagram: 64 (a 9,014-byte frame at
/// the 576-byte minimum MTU a host must accept, RFC 791, needs 17; at the absolute minimum of
/// 68 bytes it would need 187: such a datagram is refused before any fragment is made,
/// `too_big` on the egress port).
const MAX_STAGED_FRAGMENTS: usize = 64;

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

    /// A frame [`RouterNf`] kept (not a hairpin), routed by the slow path: one page through
    /// [`Core::route_slow`], several through [`Core::route_slow_multi`].
    /// IPv6 frames go to the IPv6 router ([`Core::route6`]) when there is one.
    fn route_kept(&mut self, rs: &mut RouteState, h: Held, now: u64) {
        let len = h.len();
        let Held {
            mut page,
            rest,
            port,
            ..
        } = h;
        let p = usize::from(port);
        if Self::takes_ipv6(rs, &mut page) {
            if rest.is_empty() {
                return self.route6(rs, p, page, len, now);
            }
            self.refuse6(rs);
            return self.recycle_all(page, rest);
        }
        if rest.is_empty() {
            return self.route_slow(rs, p, page, len, now);
        }
        self.route_slow_multi(rs, p, page, rest, len, now);
    }

    /// A frame of several pages (a jumbo frame) past the fast path: `Router::process_slow_len`
    /// on its headers (all in the first page) with the spare page for an ICMP error. Forwarded
    /// as the same pages (one descriptor chain), fragmented into fresh pages when the egress
    /// MTU is smaller (DF clear), answered with an ICMP error (e.g. Fragmentation Needed, DF
    /// set), given to the management plane, or dropped; waiting for ARP, its other pages are
    /// kept (`RouteState::multi`) beside the first, which the neighbour queue holds.
    #[cold]
    #[inline(never)]
    fn route_slow_multi(
        &mut self,
        rs: &mut RouteState,
        p: usize,
        mut page: PageBuf,
        rest: HeldRest,
        len: usize,
        now: u64,
    ) {
        self.ensure_spare(rs);
        let icmp = match rs.spare.as_mut() {
            Some(sp) => sp.room_mut::<P::Nic>(),
            None => &mut [][..],
        };
        let pfn0 = page.pfn();
        let head = page.frame_mut::<P::Nic>(frame_room::<P::Nic>());
        let action = rs.router.process_slow_len(p, head, len, pfn0, now, icmp);
        match action {
            Action::Forward { port, len: n } => {
                if !self.send_multi(usize::from(port), page, &raw_pfns(rest), n) {
                    rs.router.tx_dropped(false);
                }
            }
            Action::Fragment { port, mtu } => {
                let mut segs: heapless::Vec<&[u8], MAX_FRAME_PAGES> = heapless::Vec::new();
                let head = len.min(frame_room::<P::Nic>());
                let _ = segs.push(&page.page()[<P::Nic as Nic>::FRAME_OFFSET..][..head]);
                let mut left = len - head;
                for pg in &rest {
                    let take = left.min(mm::PAGE_SIZE);
                    let _ = segs.push(&pg.page()[..take]);
                    left -= take;
                }
                let sent = self.fragment_pages(&segs, port, mtu);
                drop(segs);
                self.recycle_all(page, rest);
                if !sent {
                    rs.router.tx_dropped(true);
                }
            }
            Action::Icmp { port, len: n, .. } => {
                let sp = rs.spare.take().expect("ICMP built in the spare page");
                self.stage_tx(usize::from(port), sp, n);
                self.recycle_all(page, rest);
            }
            Action::Queued => {
                // The neighbour queue holds the first page (by frame number); the others wait
                // in the stash beside it.
                let rest = raw_pfns(rest);
                let first = page.into_raw().pfn;
                if let Err((_, rest)) = rs.multi.push((first, rest)) {
                    // No room: the frame goes out (or is dropped) as its first page only,
                    // which `router_events` refuses (`too_big`).
                    self.recycle_raw(&rest);
                }
            }
            Action::ToHost => self.multi_to_mgmt(p, page, &raw_pfns(rest), len),
            Action::Drop(_) | Action::Consumed => self.recycle_all(page, rest),
            // A reply is one page's business: a multi-page frame is dropped, counted.
            Action::Reply { .. } => {
                self.counters[p].drop(DropReason::TooBig);
                self.recycle_all(page, rest);
            }
        }
    }

    /// Every page of a frame back to its pool.
    pub(crate) fn recycle_all(&mut self, page: PageBuf, rest: HeldRest) {
        self.pages.recycle(page);
        for pg in rest {
            self.pages.recycle(pg);
        }
    }

    /// Route one frame the fast path did not take (ARP, ICMP, options, the first frame to a
    /// next hop, ...): the management plane's copy of ARP, the spare page for an ICMP error,
    /// the router's full path.
    #[cold]
    #[inline(never)]
    fn route_slow(
        &mut self,
        rs: &mut RouteState,
        p: usize,
        mut page: PageBuf,
        len: usize,
        now: u64,
    ) {
        let handle = page.pfn();
        let frame = page.frame_mut::<P::Nic>(len);
        // smoltcp learns neighbours only from ARP: let it see the ARP frames too, but for the
        // requests for the port's address, which the router answers (smoltcp would answer
        // them a second time; it learns its peers from the replies to its own requests).
        if frame.get(ETHERTYPE) == Some(&ETHERTYPE_ARP.to_be_bytes()[..])
            && !router_answers_arp(rs, p, frame)
        {
            self.copy_to_mgmt(p, frame);
        }
        self.ensure_spare(rs);
        let icmp = match rs.spare.as_mut() {
            Some(sp) => sp.room_mut::<P::Nic>(),
            None => &mut [][..],
        };
        let action = rs.router.process_slow(p, frame, handle, now, icmp);
        // What an ARP frame taught this core goes to the other cores' routers
        // (`route_action`).
        self.route_action(rs, p, page, len, action);
    }

    /// Carry out the router's `action` for `page` (a frame of `len` bytes received on local
    /// port `p`).
    fn route_action(
        &mut self,
        rs: &mut RouteState,
        p: usize,
        mut page: PageBuf,
        len: usize,
        action: Action,
    ) {
        if matches!(action, Action::Consumed | Action::Reply { .. }) {
            if let Some(u) = rs.router.take_learned() {
                self.share_learned(rs, u);
            }
        }
        match action {
            Action::Forward { port, len } => self.send_routed(rs, usize::from(port), page, len),
            Action::Reply { port, len } => self.stage_tx(usize::from(port), page, len),
            Action::Icmp { port, len, .. } => {
                let sp = rs.spare.take().expect("ICMP built in the spare page");
                self.stage_tx(usize::from(port), sp, len);
                self.pages.recycle(page);
            }
            // The router's neighbour queue holds the page (by frame number) until `poll`
            // hands it back in an Event.
            Action::Queued => {
                let _ = page.into_raw();
            }
            Action::ToHost => {
                self.copy_to_mgmt(p, page.frame_mut::<P::Nic>(len));
                self.pages.recycle(page)
            }
            Action::Consumed | Action::Drop(_) => self.pages.recycle(page),
            // A one-page datagram longer than the egress MTU (DF clear): fragments in fresh
            // pages, sent at once (or none of them).
            Action::Fragment { port, mtu } => {
                let sent = self.fragment_pages(&[page.frame_mut::<P::Nic>(len)], port, mtu);
                self.pages.recycle(page);
                self.flush_all();
                if !sent {
                    rs.router.tx_dropped(true);
                }
            }
        }
    }

    /// The other pages of the multi-page frame whose first page is `first`, if the stash
    /// kept them (`RouteState::multi`), taken out of it.
    fn take_multi(rs: &mut RouteState, first: Pfn) -> heapless::Vec<Pfn, 3> {
        match rs.multi.iter().position(|(f, _)| *f == first) {
            Some(i) => rs.multi.swap_remove(i).1,
            None => heapless::Vec::new(),
        }
    }

    /// A frame the router forwarded (one page, `len` bytes), staged for local `port` if its
    /// TX ring has a slot left for it beyond what is staged; else dropped now, counted
    /// `tx_ring_full` on `port` (`link_down` when its link is down) and `tx_dropped` by the
    /// router (no longer `forwarded`).
    fn send_routed(&mut self, rs: &mut RouteState, port: usize, page: PageBuf, len: usize) {
        let port = port % PORTS;
        if let Some(why) = self.tx_refusal(port, 1) {
            self.counters[port].drop(why);
            self.pages.recycle(page);
            rs.router.tx_dropped(false);
            return;
        }
        self.stage_tx(port, page, len);
    }

    /// Fragment the datagram in `segments` (its frame, already rewritten) for an egress `mtu`
    /// with `netstack::router::frag::Fragmenter` (RFC 791 §3.2, RFC 1812 §5.2.6) into fresh
    /// pages of pool 0, all staged for `port`, or none: the train is checked whole before the
    /// first fragment is made. Refused, each counted once on the egress port: a datagram the
    /// fragmenter refuses (malformed, MTU too small) or one of more than
    /// [`MAX_STAGED_FRAGMENTS`] fragments (`too_big`), a TX ring without a slot for every
    /// fragment beyond what is staged (`tx_ring_full`), too few pages for every fragment
    /// (`no_buffer`). Returns whether the train was staged (every slot it needs was free, so
    /// the flush hands all of it to the ring).
    fn fragment_pages(&mut self, segments: &[&[u8]], port: u8, mtu: u16) -> bool {
        let egress = usize::from(port) % PORTS;
        let mut frags = match Fragmenter::new(segments, mtu) {
            Ok(f) if f.count() <= MAX_STAGED_FRAGMENTS => f,
            _ => {
                self.counters[egress].drop(DropReason::TooBig);
                return false;
            }
        };
        let n = frags.count();
        if let Some(why) = self.tx_refusal(egress, n) {
            self.counters[egress].drop(why);
            return false;
        }
        let mut made: heapless::Vec<(PageBuf, usize), MAX_STAGED_FRAGMENTS> = heapless::Vec::new();
        while made.len() < n {
            let Some(page) = self.pages.alloc(0) else {
                self.counters[egress].no_buffer += 1;
                return self.unmake(made);
            };
            let _ = made.push((page, 0));
        }
        for (page, len) in made.iter_mut() {
            match frags.next_into(page.room_mut::<P::Nic>()) {
                Ok(Some(n)) => *len = n,
                // The fragmenter's count said otherwise, or a fragment did not fit a page.
                Ok(None) | Err(_) => {
                    self.counters[egress].drop(DropReason::TooBig);
                    return self.unmake(made);
                }
            }
        }
        for (page, len) in made {
            self.stage_tx(egress, page, len);
        }
        true
    }

    /// The pages of a fragment train not sent, back to their pool. Returns `false` (not sent).
    fn unmake(&mut self, made: heapless::Vec<(PageBuf, usize), MAX_STAGED_FRAGMENTS>) -> bool {
        for (page, _) in made {
            self.pages.recycle(page);
        }
        false
    }

    /// Keep a spare page (from pool 0) for ICMP errors and ARP requests.
    #[inline]
    fn ensure_spare(&mut self, rs: &mut RouteState) {
        if rs.spare.is_none() {
            rs.spare = self.pages.alloc(0);
        }
    }

    /// Tell every other core's router what this one learned from ARP (a full ring drops the
    /// update, counted; that core resolves by its own ARP request).
    fn share_learned(&mut self, rs: &mut RouteState, u: NeighUpdate) {
        let fabric = self.fabric;
        for (k, ring) in fabric.neigh.iter().enumerate().take(fabric.cores()) {
            if k == self.pair {
                continue;
            }
            let sync = &mut rs.sync;
            match ring.push(u) {
                Ok(()) => {
                    sync.neigh_sent += 1;
                    self.wake_if_sleeping(k);
                }
                Err(_) => sync.neigh_dropped += 1,
            }
        }
    }

    /// Router mode on several cores, at the top of every poll iteration: apply the neighbour
    /// updates other cores sent to `rs` (then release what was queued behind them) and, on
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
        rs.sync.neigh_applied += n as u64;
        if n > 0 && rs.router.needs_poll() {
            rs.polled_ns = now;
            self.router_events(rs, now);
        }
        if self.mgmt().is_some() && !self.fabric.mgmt.is_empty() {
            n += self.drain_mgmt_ring();
        }
        if n > 0 {
            self.flush_all();
        }
        n
    }

    /// Run the router's pending work: ARP requests to send, queued frames now resolved (or
    /// dropped on timeout).
    pub(crate) fn router_events(&mut self, rs: &mut RouteState, now: u64) {
        loop {
            self.ensure_spare(rs);
            let out = match rs.spare.as_mut() {
                Some(sp) => sp.room_mut::<P::Nic>(),
                None => &mut [][..],
            };
            let ev = rs.router.poll(now, out);
            match ev {
                None => return,
                Some(Event::SendArp { port, len }) => {
                    let sp = rs
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
                    // SAFETY: the router's queue held the page (given up at Action::Queued)
                    // and hands it back now.
                    let mut page = unsafe { self.pages.adopt(handle) };
                    let rest = Self::take_multi(rs, handle);
                    if len > frame_room::<P::Nic>() || !rest.is_empty() {
                        // A multi-page frame released by ARP: sent as a chain of its pages.
                        set_macs(page.frame_mut::<P::Nic>(frame_room::<P::Nic>()), dst, src);
                        if !self.send_multi(usize::from(port), page, &rest, len) {
                            rs.router.tx_dropped(false);
                        }
                        continue;
                    }
                    set_macs(page.frame_mut::<P::Nic>(len), dst, src);
                    self.send_routed(rs, usize::from(port), page, len);
                }
                Some(Event::Fragment {
                    handle,
                    port,
                    len,
                    dst,
                    src,
                    mtu,
                }) => {
                    // SAFETY: as for Transmit: handed back by the router's queue.
                    let mut page = unsafe { self.pages.adopt(handle) };
                    let rest = Self::take_multi(rs, handle);
                    let head = len.min(frame_room::<P::Nic>());
                    set_macs(page.frame_mut::<P::Nic>(head), dst, src);
                    let mut segs: heapless::Vec<&[u8], 4> = heapless::Vec::new();
                    let _ = segs.push(page.frame_mut::<P::Nic>(head));
                    let mut left = len - head;
                    for &pfn in &rest {
                        let take = left.min(mm::PAGE_SIZE);
                        // SAFETY: a page of the frame, kept in the stash since the router
                        // queued the frame; nobody else holds it.
                        let _ = segs.push(unsafe { page_bytes(pfn, 0..take) });
                        left -= take;
                    }
                    let sent = if left > 0 {
                        // Its other pages were not kept (the stash was full).
                        self.counters[usize::from(port) % PORTS].drop(DropReason::TooBig);
                        false
                    } else {
                        self.fragment_pages(&segs, port, mtu)
                    };
                    drop(segs);
                    self.recycle_raw(&rest);
                    self.pages.recycle(page);
                    if !sent {
                        rs.router.tx_dropped(true);
                    }
                }
                Some(Event::Dropped { handle, .. }) => {
                    // SAFETY: as above: handed back by the router's queue.
                    let page = unsafe { self.pages.adopt(handle) };
                    let rest = Self::take_multi(rs, handle);
                    self.recycle_raw(&rest);
                    self.pages.recycle(page);
                }
            }
        }
    }
}

/// Whether `frame` (ARP) is a request for port `p`'s address: the router answers it.
fn router_answers_arp(rs: &RouteState, p: usize, frame: &[u8]) -> bool {
    let arp = frame.get(ETH_HDR_LEN..).unwrap_or(&[]);
    let me = rs.router.ports().get(p).map(|c| c.addr.addr.octets());
    arp.get(ARP_OPER) == Some(&ARP_REQUEST.to_be_bytes()[..])
        && me.is_some_and(|me| arp.get(ARP_TPA) == Some(&me[..]))
}
