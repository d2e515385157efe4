//! Router mode: RFC 1812 forwarding through [`netstack::router::Router::process`] (one action
//! per frame), the router's events (ARP requests, frames released by ARP replies), neighbour
//! sync between cores, and the management plane's frames.
//!
//! Past ~800 lines because the per-frame verdict, the router's events and neighbour sync all work
//! on `RouteState`, whose fields the fast path needs inline.

use super::page::{frame_room, page_bytes, PageBuf};
use super::pages::Pages;
use super::percore::{count_give_back, Core, Deferred, MgmtPlane, Platform, RouteState};
use core::marker::PhantomData;
use drivers::nic::Nic;
use drivers::nic::{ForwardOps, GiveBack, MultiFrame, RxVerdict, MAX_FRAME_PAGES};
use mm::Pfn;
use netstack::config::PORTS;
use netstack::router::frag::Fragmenter;
use netstack::router::{set_macs, Action, Event, NeighUpdate};
use netstack::wire::{ARP_OPER, ARP_REQUEST, ARP_TPA, ETHERTYPE, ETHERTYPE_ARP, ETH_HDR_LEN};
use netstack::{DropReason, PortCounters};

/// The router's neighbour timers (ARP retransmit 1 s, queue timeout, ageing) run at least this
/// often while traffic flows: 10 ms.
pub const ROUTER_TIMER_NS: u64 = 10_000_000;

/// Router mode: the dataplane's side of the fused burst (RX port `p`, fast TX out of the other
/// port). A frame the router forwards out of the other port is sent by the burst itself; ARP
/// frames and every other action are deferred (`RouteState::deferred`), a queued frame is
/// left to the neighbour queue and a dropped one recycled on the spot. `N`: the ports' NIC
/// type (its frame offset lays out the pages this builds frames in).
struct RouteOps<'a, N> {
    rs: &'a mut RouteState,
    pages: &'a mut Pages,
    counters: &'a mut [PortCounters; PORTS],
    p: usize,
    now: u64,
    nic: PhantomData<fn() -> N>,
}

impl<N: Nic> RouteOps<'_, N> {
    #[inline(always)]
    fn recycle(&mut self, pfn: Pfn) {
        // SAFETY: the page came off port `p`'s RX ring, which only port `p`'s pool fills, and
        // nobody else holds it.
        let page = unsafe { PageBuf::from_raw(self.pages.raw(self.p, pfn)) };
        self.pages.recycle(page);
    }

    /// Keep `pfn` for after the burst; if the list is full (it holds a burst), drop it.
    #[cold]
    #[inline(never)]
    fn defer(&mut self, d: Deferred) -> RxVerdict {
        if let Err(d) = self.rs.deferred.push(d) {
            self.counters[self.p].drop(DropReason::TxRingFull);
            match d {
                Deferred::Arp { pfn, .. } | Deferred::Act { pfn, .. } => self.recycle(pfn),
                Deferred::Icmp { pfn, icmp, .. } => {
                    self.recycle(pfn);
                    // SAFETY: the spare page taken for this error, ours.
                    self.pages.recycle(unsafe { PageBuf::from_raw(icmp) });
                }
                // SAFETY: a page taken for a fragment, ours.
                Deferred::Tx { page, .. } => self.pages.recycle(unsafe { PageBuf::from_raw(page) }),
            }
        }
        RxVerdict::Consumed
    }

    /// Recycle every page of a multi-page frame.
    fn recycle_all(&mut self, pages: &[Pfn]) {
        for &pfn in pages {
            self.recycle(pfn);
        }
    }

    /// Fragment the (rewritten) datagram in `segments` for an egress `mtu` (RFC 791 §3.2,
    /// RFC 1812 §5.2.6: [`cut_fragments`]) into fresh pages of pool 0, each deferred for
    /// transmission on `port`.
    fn fragment(&mut self, segments: &[&[u8]], port: u8, mtu: u16) {
        let egress = usize::from(port) % PORTS;
        let (pages, counters, rs) = (&mut *self.pages, &mut *self.counters, &mut *self.rs);
        let mut overflow = 0;
        cut_fragments::<N>(
            pages,
            &mut counters[egress],
            segments,
            mtu,
            |pages, page, len| {
                let d = Deferred::Tx {
                    page: page.into_raw(),
                    port,
                    len: len as u16,
                };
                if let Err(Deferred::Tx { page, .. }) = rs.deferred.push(d) {
                    // SAFETY: the fragment's page, given up just above.
                    pages.recycle(unsafe { PageBuf::from_raw(page) });
                    overflow += 1;
                }
            },
        );
        // The deferred list holds a burst; no room is counted as `defer` counts it.
        for _ in 0..overflow {
            self.counters[self.p].drop(DropReason::TxRingFull);
        }
    }
}

impl<N: Nic> ForwardOps for RouteOps<'_, N> {
    #[inline(never)]
    fn rx_page(&mut self) -> Option<Pfn> {
        self.pages.alloc(self.p).map(|page| page.into_raw().pfn)
    }

    #[inline(always)]
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        self.pages.port(self.p).alloc_cached_raw()
    }

    #[inline(always)]
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        let len = frame.len() as u16;
        // The router's fast path (no ICMP buffer, nothing prepared for ARP): out of the other
        // port it is the burst's to send; a hairpin is sent after the burst.
        if let Some((port, n)) = self.rs.router.forward_fast(self.p, frame, self.now) {
            if usize::from(port) == 1 - self.p {
                return if n == usize::from(len) {
                    RxVerdict::Forward
                } else {
                    RxVerdict::ForwardFirst(n)
                };
            }
            let action = Action::Forward { port, len: n };
            return self.defer(Deferred::Act { pfn, len, action });
        }
        self.forward_slow(pfn, frame)
    }

    #[cold]
    #[inline(never)]
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        count_give_back(self.counters, self.p, why);
        self.recycle(pfn);
    }

    /// A frame of several pages (a jumbo frame): routed on its headers (all in the first
    /// page) with the router's fast path, else its slow path; sent zero copy as the same pages
    /// when it leaves through the other port whole, fragmented into fresh pages when the
    /// egress MTU is smaller (DF clear), answered with an ICMP error (e.g. Fragmentation
    /// Needed, DF set) or dropped otherwise. Waiting for ARP, its other pages are kept
    /// (`RouteState::multi`) beside the first, which the neighbour queue holds. Inlined into
    /// the driver's chain loop (its only hot caller): the fast path's decision is made there,
    /// everything else is out of line.
    #[inline(always)]
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        // Taken apart, the fields handed to the slow path as arguments: passed on whole (by
        // reference to a stack copy), the frame was written to the stack, seven stores, before
        // the fast path's first test (guest router 9018 B K=32: 27 instructions per frame).
        let MultiFrame {
            pages,
            lens,
            head,
            len,
            ..
        } = frame;
        let fast = self.rs.router.forward_fast_len(self.p, head, len, self.now);
        if let Some((port, n)) = fast {
            if usize::from(port) == 1 - self.p {
                return if n == len {
                    RxVerdict::Forward
                } else {
                    RxVerdict::ForwardFirst(n)
                };
            }
            return self.multi_hairpin(pages);
        }
        self.multi_slow(pages, lens, head, len)
    }
}

impl<N: Nic> RouteOps<'_, N> {
    /// A hairpin of a multi-page frame ([`ForwardOps::forward_multi`]): not sent (the
    /// deferred path is one page), dropped as too big.
    #[cold]
    #[inline(never)]
    fn multi_hairpin(&mut self, pages: &[Pfn]) -> RxVerdict {
        self.counters[self.p].drop(DropReason::TooBig);
        self.recycle_all(pages);
        RxVerdict::Consumed
    }

    /// [`ForwardOps::forward_multi`] past the router's fast path: `Router::process_slow_len`
    /// with the spare page for an ICMP error. Takes the [`MultiFrame`]'s fields one by one
    /// (the fast path then builds no frame on the stack).
    #[cold]
    #[inline(never)]
    fn multi_slow(
        &mut self,
        pages: &[Pfn],
        lens: &[u16],
        head: &mut [u8],
        len: usize,
    ) -> RxVerdict {
        let frame = MultiFrame {
            pages,
            lens,
            head,
            len,
            offset: N::FRAME_OFFSET,
        };
        let (len, pfn0) = (frame.len, frame.pages[0]);
        if self.rs.spare.is_none() {
            self.rs.spare = self.pages.alloc(0);
        }
        let icmp = match self.rs.spare.as_mut() {
            Some(sp) => sp.room_mut::<N>(),
            None => &mut [][..],
        };
        let action = self
            .rs
            .router
            .process_slow_len(self.p, frame.head, len, pfn0, self.now, icmp);
        match action {
            Action::Forward { port, len: n } if usize::from(port) == 1 - self.p => {
                if n == len {
                    RxVerdict::Forward
                } else {
                    RxVerdict::ForwardFirst(n)
                }
            }
            Action::Fragment { port, mtu } => {
                let mut segs: heapless::Vec<&[u8], 4> = heapless::Vec::new();
                let _ = segs.push(&frame.head[..]);
                for i in 1..frame.pages.len() {
                    if let Some((pfn, range)) = frame.segment(i) {
                        // SAFETY: the page came off the RX ring with `range` written by the
                        // device; nobody else holds it until it is recycled below.
                        let bytes = unsafe { page_bytes(pfn, range) };
                        let _ = segs.push(bytes);
                    }
                }
                self.fragment(&segs, port, mtu);
                self.recycle_all(frame.pages);
                RxVerdict::Consumed
            }
            Action::Icmp { port, len: n, .. } => {
                self.recycle_all(&frame.pages[1..]);
                match self.rs.spare.take() {
                    Some(sp) => self.defer(Deferred::Icmp {
                        pfn: pfn0,
                        icmp: sp.into_raw(),
                        port,
                        len: n as u16,
                    }),
                    None => {
                        self.recycle(pfn0);
                        RxVerdict::Consumed
                    }
                }
            }
            Action::Queued => {
                // The neighbour queue holds the first page; keep the others beside it.
                let rest: heapless::Vec<Pfn, 3> =
                    frame.pages[1..].iter().copied().take(3).collect();
                if let Err((_, rest)) = self.rs.multi.push((pfn0, rest)) {
                    // No room: the frame goes out (or is dropped) as its first page only,
                    // which `router_events` refuses (`too_big`).
                    self.recycle_all(&rest);
                }
                RxVerdict::Consumed
            }
            Action::Drop(_) => {
                self.recycle_all(frame.pages);
                RxVerdict::Consumed
            }
            Action::ToHost => self.multi_to_host(&frame),
            // Anything else (a reply, a hairpin) is one page's business: a multi-page frame
            // is dropped, counted.
            _ => {
                self.counters[self.p].drop(DropReason::TooBig);
                self.recycle_all(frame.pages);
                RxVerdict::Consumed
            }
        }
    }
}

impl<N: Nic> RouteOps<'_, N> {
    /// A multi-page frame for the management plane (e.g. a jumbo ping to the router): its
    /// other pages wait in the stash (`RouteState::multi`) beside the first, which is deferred
    /// with `Action::ToHost` (the management plane sees frames in order, after the burst).
    /// Its pages must be laid out as one run (every page but the last full, VIRTIO 1.2
    /// §5.1.6.4), else it is a `bad_desc` drop; no room to keep it is counted in
    /// `RouteState::mgmt_unkept` (`STATS` `mgmt.linear_failed`).
    fn multi_to_host(&mut self, frame: &MultiFrame<'_>) -> RxVerdict {
        let n = frame.pages.len();
        let full = (2..=MAX_FRAME_PAGES).contains(&n)
            && frame.lens.len() == n
            && frame.lens[..n - 1].iter().enumerate().all(|(i, &l)| {
                usize::from(l)
                    == if i == 0 {
                        frame_room::<N>()
                    } else {
                        mm::PAGE_SIZE
                    }
            });
        if !full || frame.len > usize::from(u16::MAX) {
            self.counters[self.p].drop(DropReason::BadDesc);
            self.recycle_all(frame.pages);
            return RxVerdict::Consumed;
        }
        let rest: heapless::Vec<Pfn, 3> = frame.pages[1..].iter().copied().collect();
        if self.rs.deferred.is_full() || self.rs.multi.is_full() {
            self.rs.mgmt_unkept += 1;
            self.recycle_all(frame.pages);
            return RxVerdict::Consumed;
        }
        let pfn = frame.pages[0];
        let _ = self.rs.multi.push((pfn, rest));
        let d = Deferred::Act {
            pfn,
            len: frame.len as u16,
            action: Action::ToHost,
        };
        // Room checked above: this cannot refuse.
        self.defer(d)
    }

    /// A frame the router's fast path did not take: ARP (deferred whole: the management plane
    /// must see it before the router answers), else `Router::process_slow` with the spare page
    /// for an ICMP error.
    #[cold]
    #[inline(never)]
    fn forward_slow(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        let len = frame.len() as u16;
        if frame.get(ETHERTYPE) == Some(&ETHERTYPE_ARP.to_be_bytes()[..]) {
            return self.defer(Deferred::Arp { pfn, len });
        }
        if self.rs.spare.is_none() {
            self.rs.spare = self.pages.alloc(0);
        }
        let icmp = match self.rs.spare.as_mut() {
            Some(sp) => sp.room_mut::<N>(),
            None => &mut [][..],
        };
        match self
            .rs
            .router
            .process_slow(self.p, frame, pfn, self.now, icmp)
        {
            Action::Forward { port, len: n } if usize::from(port) == 1 - self.p => {
                if n == usize::from(len) {
                    RxVerdict::Forward
                } else {
                    RxVerdict::ForwardFirst(n)
                }
            }
            // The router's neighbour queue holds the page (by frame number) until `poll`
            // hands it back in an Event.
            Action::Queued => RxVerdict::Consumed,
            Action::Drop(_) => {
                self.recycle(pfn);
                RxVerdict::Consumed
            }
            Action::Icmp { port, len: n, .. } => match self.rs.spare.take() {
                Some(sp) => self.defer(Deferred::Icmp {
                    pfn,
                    icmp: sp.into_raw(),
                    port,
                    len: n as u16,
                }),
                None => {
                    self.recycle(pfn);
                    RxVerdict::Consumed
                }
            },
            action => self.defer(Deferred::Act { pfn, len, action }),
        }
    }
}

/// Most fragments [`Core::fragment_pages`] stages from one datagram: 64 (a 9,014-byte frame
/// at the 576-byte minimum MTU a host must accept, RFC 791, needs 17; at the absolute minimum
/// of 68 bytes it would need 187, and those beyond 64 are a counted drop).
const MAX_STAGED_FRAGMENTS: usize = 64;

/// Cut the datagram in `segments` (a rewritten frame, as scatter segments) for an egress
/// `mtu` with `netstack::router::frag::Fragmenter` (RFC 791 §3.2, RFC 1812 §5.2.6), each
/// fragment written into a fresh page of pool 0 and handed to `sink` with its length. A
/// datagram the fragmenter refuses (malformed, MTU too small) is a `too_big` drop on
/// `egress`; no page for the next fragment counts `no_buffer` (the fragments made so far go
/// out).
fn cut_fragments<N: Nic>(
    pages: &mut Pages,
    egress: &mut PortCounters,
    segments: &[&[u8]],
    mtu: u16,
    mut sink: impl FnMut(&mut Pages, PageBuf, usize),
) {
    let Ok(mut frags) = Fragmenter::new(segments, mtu) else {
        egress.drop(DropReason::TooBig);
        return;
    };
    loop {
        let Some(mut page) = pages.alloc(0) else {
            egress.no_buffer += 1;
            return;
        };
        match frags.next_into(page.room_mut::<N>()) {
            Ok(Some(len)) => sink(pages, page, len),
            Ok(None) => {
                pages.recycle(page);
                return;
            }
            Err(_) => {
                pages.recycle(page);
                egress.drop(DropReason::TooBig);
                return;
            }
        }
    }
}

impl<P: Platform> Core<P> {
    /// Receive a burst on local port `p`, route each frame, transmit what leaves, then run the
    /// router's pending events. Returns RX buffers completed.
    ///
    /// One fused burst (`Nic::forward_burst`, as `l2`): frames the router forwards out
    /// of the other port go straight to its TX ring; the rest are handled after the burst.
    #[inline(always)]
    pub(crate) fn rx_route(&mut self, p: usize) -> usize {
        // An empty port costs one load here, before any of the burst's set-up.
        if !self.nics[p].rx_ready() {
            return 0;
        }
        let q = 1 - p;
        let owner = self.pages.tx_owner(p);
        let max = self.burst_max(q);
        let Some(rs) = self.route.as_mut() else {
            return 0;
        };
        let (pages, counters) = (&mut self.pages, &mut self.counters);
        // The clock is read only when a frame is waiting (the burst makes its ops then); the
        // burst's time is kept for the events that follow it.
        let ops = move || {
            let (rs, pages, counters) = ({ rs }, { pages }, { counters });
            let now = P::uptime_ns();
            rs.burst_ns = now;
            RouteOps::<P::Nic> {
                rs,
                pages,
                counters,
                p,
                now,
                nic: PhantomData,
            }
        };
        let [a, b] = &mut self.nics;
        let (rx, tx): (&mut P::Nic, &mut P::Nic) = if p == 0 { (a, b) } else { (b, a) };
        // SAFETY: `RouteOps` hands out fresh pages of port `p`'s pool (given up with
        // `into_raw`), the RX ring of port `p` is refilled only from that pool, and a frame
        // forwarded stays `tx`'s until `tx_reap` takes it back with its owner tag, `owner`
        // (that pool's id).
        let st = unsafe { rx.forward_burst(tx, max, owner, ops) };
        let n = st.buffers;
        if n == 0 {
            return 0;
        }
        let now = self.route.as_ref().map_or(0, |r| r.burst_ns);
        self.count_burst(p, &st);
        self.route_deferred(p, now);
        if self.mgmt().is_some_and(|m| m.rx_pending() > 0) {
            self.mgmt_poll();
        }
        // The neighbour table's scan is O(entries): run it after a burst only when the burst
        // gave it work, else at most every ROUTER_TIMER_NS for its timers.
        let r = self.route.as_ref().expect("rx_route in router mode");
        if now.saturating_sub(r.polled_ns) >= ROUTER_TIMER_NS || r.router.needs_poll() {
            self.route.as_mut().expect("router mode").polled_ns = now;
            self.router_events(now);
        }
        self.flush_all();
        n
    }

    /// The frames the fused burst on local port `p` deferred, in their order.
    fn route_deferred(&mut self, p: usize, now: u64) {
        let n = self.route.as_ref().map_or(0, |rs| rs.deferred.len());
        for i in 0..n {
            // Read in place (the list is 10 KiB: moving it out would copy it every burst);
            // handling a frame never defers another.
            let Some(&d) = self.route.as_ref().and_then(|rs| rs.deferred.get(i)) else {
                break;
            };
            match d {
                Deferred::Arp { pfn, len } => {
                    // SAFETY: the burst handed the page over (Consumed) and nobody else holds
                    // it; it came off port `p`'s ring, filled only from pool `p`.
                    let page = unsafe { PageBuf::from_raw(self.pages.raw(p, pfn)) };
                    self.route_one(p, page, usize::from(len), now);
                }
                Deferred::Act { pfn, len, action } => {
                    // SAFETY: as above.
                    let page = unsafe { PageBuf::from_raw(self.pages.raw(p, pfn)) };
                    self.route_action(p, page, usize::from(len), action);
                }
                Deferred::Icmp {
                    pfn,
                    icmp,
                    port,
                    len,
                } => {
                    // SAFETY: as above for the frame; `icmp` is the spare page taken for the
                    // error (from pool 0), ours.
                    let (page, sp) = unsafe {
                        (
                            PageBuf::from_raw(self.pages.raw(p, pfn)),
                            PageBuf::from_raw(icmp),
                        )
                    };
                    self.stage_tx(usize::from(port), sp, usize::from(len));
                    self.pages.recycle(page);
                }
                Deferred::Tx { page, port, len } => {
                    // SAFETY: a page taken for a fragment (pool 0), ours.
                    let page = unsafe { PageBuf::from_raw(page) };
                    self.stage_tx(usize::from(port), page, usize::from(len));
                }
            }
        }
        if let Some(rs) = self.route.as_mut() {
            rs.deferred.clear();
        }
    }

    /// Route one frame received on local port `p`: the router's fast path (nothing prepared
    /// for ICMP or ARP), else [`Core::route_slow`].
    #[inline(always)]
    fn route_one(&mut self, p: usize, mut page: PageBuf, len: usize, now: u64) {
        let rs = self.route.as_mut().expect("router mode");
        if let Some((port, len)) = rs
            .router
            .forward_fast(p, page.frame_mut::<P::Nic>(len), now)
        {
            self.stage_tx(usize::from(port), page, len);
            return;
        }
        self.route_slow(p, page, len, now);
    }

    /// Route one frame the fast path did not take (ARP, ICMP, options, the first frame to a
    /// next hop, ...): the management plane's copy of ARP, the spare page for an ICMP error,
    /// the router's full path.
    #[cold]
    #[inline(never)]
    fn route_slow(&mut self, p: usize, mut page: PageBuf, len: usize, now: u64) {
        let handle = page.pfn();
        let frame = page.frame_mut::<P::Nic>(len);
        // smoltcp learns neighbours only from ARP: let it see the ARP frames too, but for the
        // requests for the port's address, which the router answers (smoltcp would answer
        // them a second time; it learns its peers from the replies to its own requests).
        if frame.get(ETHERTYPE) == Some(&ETHERTYPE_ARP.to_be_bytes()[..])
            && !self.router_answers_arp(p, frame)
        {
            self.copy_to_mgmt(p, frame);
        }
        self.ensure_spare();
        let rs = self.route.as_mut().expect("router mode");
        let icmp = match rs.spare.as_mut() {
            Some(sp) => sp.room_mut::<P::Nic>(),
            None => &mut [][..],
        };
        let action = rs.router.process_slow(p, frame, handle, now, icmp);
        // What an ARP frame taught this core goes to the other cores' routers
        // (`route_action`).
        self.route_action(p, page, len, action);
    }

    /// Carry out the router's `action` for `page` (a frame of `len` bytes received on local
    /// port `p`).
    fn route_action(&mut self, p: usize, mut page: PageBuf, len: usize, action: Action) {
        if matches!(action, Action::Consumed | Action::Reply { .. }) {
            if let Some(u) = self.route.as_mut().and_then(|rs| rs.router.take_learned()) {
                self.share_learned(u);
            }
        }
        match action {
            Action::Forward { port, len } | Action::Reply { port, len } => {
                self.stage_tx(usize::from(port), page, len)
            }
            Action::Icmp { port, len, .. } => {
                let rs = self.route.as_mut().expect("router mode");
                let sp = rs.spare.take().expect("ICMP built in the spare page");
                self.stage_tx(usize::from(port), sp, len);
                self.pages.recycle(page);
            }
            // The router's neighbour queue holds the page (by frame number) until `poll`
            // hands it back in an Event.
            Action::Queued => {
                let _ = page.into_raw();
            }
            Action::ToHost if len > frame_room::<P::Nic>() => {
                // A multi-page frame (`RouteOps::multi_to_host`): its other pages are in the
                // stash.
                let rest = self.take_multi(page.pfn());
                self.multi_to_mgmt(p, page, &rest, len);
            }
            Action::ToHost => {
                self.copy_to_mgmt(p, page.frame_mut::<P::Nic>(len));
                self.pages.recycle(page)
            }
            Action::Consumed | Action::Drop(_) => self.pages.recycle(page),
            // A one-page datagram longer than the egress MTU (DF clear): fragments in fresh
            // pages, sent at once.
            Action::Fragment { port, mtu } => {
                self.fragment_pages(&[page.frame_mut::<P::Nic>(len)], port, mtu);
                self.pages.recycle(page);
                self.flush_all();
            }
        }
    }

    /// The other pages of the multi-page frame whose first page is `first`, if the stash
    /// kept them (`RouteState::multi`), taken out of it.
    fn take_multi(&mut self, first: Pfn) -> heapless::Vec<Pfn, 3> {
        let Some(rs) = self.route.as_mut() else {
            return heapless::Vec::new();
        };
        match rs.multi.iter().position(|(f, _)| *f == first) {
            Some(i) => rs.multi.swap_remove(i).1,
            None => heapless::Vec::new(),
        }
    }

    /// Fragment the datagram in `segments` (its frame, already rewritten) for an egress
    /// `mtu` ([`cut_fragments`]) into fresh pages of pool 0, staged for `port` at once.
    fn fragment_pages(&mut self, segments: &[&[u8]], port: u8, mtu: u16) {
        let egress = usize::from(port) % PORTS;
        let mut made: heapless::Vec<(PageBuf, usize), MAX_STAGED_FRAGMENTS> = heapless::Vec::new();
        let mut extra = 0;
        cut_fragments::<P::Nic>(
            &mut self.pages,
            &mut self.counters[egress],
            segments,
            mtu,
            |pages, page, len| {
                if let Err((page, _)) = made.push((page, len)) {
                    pages.recycle(page);
                    extra += 1;
                }
            },
        );
        for (page, len) in made {
            self.stage_tx(egress, page, len);
        }
        if extra > 0 {
            self.counters[egress].drop(DropReason::TooBig);
        }
    }

    /// Keep a spare page (from pool 0) for ICMP errors and ARP requests.
    #[inline]
    fn ensure_spare(&mut self) {
        if let Some(r) = self.route.as_mut() {
            if r.spare.is_none() {
                r.spare = self.pages.alloc(0);
            }
        }
    }

    /// Tell every other core's router what this one learned from ARP (a full ring drops the
    /// update, counted; that core resolves by its own ARP request).
    fn share_learned(&mut self, u: NeighUpdate) {
        let fabric = self.fabric;
        for (k, ring) in fabric.neigh.iter().enumerate().take(fabric.cores()) {
            if k == self.pair {
                continue;
            }
            let sync = &mut self.route.as_mut().expect("router mode").sync;
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
    /// updates other cores sent (then release what was queued behind them) and, on core 0,
    /// feed the management plane the frames other cores handed over. Returns items taken.
    pub(crate) fn router_sync(&mut self) -> usize {
        let ring = &self.fabric.neigh[self.pair];
        let mut n = 0;
        let mut now = 0;
        if let Some(rs) = self.route.as_mut() {
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
                self.router_events(now);
            }
        }
        if self.mgmt().is_some() && !self.fabric.mgmt.is_empty() {
            n += self.drain_mgmt_ring();
        }
        if n > 0 {
            self.flush_all();
        }
        n
    }

    /// Whether `frame` (ARP) is a request for port `p`'s address: the router answers it.
    fn router_answers_arp(&self, p: usize, frame: &[u8]) -> bool {
        let arp = frame.get(ETH_HDR_LEN..).unwrap_or(&[]);
        let me = self
            .route
            .as_ref()
            .and_then(|rs| rs.router.ports().get(p))
            .map(|c| c.addr.addr.octets());
        arp.get(ARP_OPER) == Some(&ARP_REQUEST.to_be_bytes()[..])
            && me.is_some_and(|me| arp.get(ARP_TPA) == Some(&me[..]))
    }

    /// Run the router's pending work: ARP requests to send, queued frames now resolved (or
    /// dropped on timeout).
    pub(crate) fn router_events(&mut self, now: u64) {
        loop {
            self.ensure_spare();
            let Some(rs) = self.route.as_mut() else {
                return;
            };
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
                    let rest = self.take_multi(handle);
                    if len > frame_room::<P::Nic>() || !rest.is_empty() {
                        // A multi-page frame released by ARP: sent as a chain of its pages.
                        set_macs(page.frame_mut::<P::Nic>(frame_room::<P::Nic>()), dst, src);
                        self.send_multi(usize::from(port), page, &rest, len);
                        continue;
                    }
                    set_macs(page.frame_mut::<P::Nic>(len), dst, src);
                    self.stage_tx(usize::from(port), page, len);
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
                    let rest = self.take_multi(handle);
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
                    if left > 0 {
                        // Its other pages were not kept (the stash was full).
                        self.counters[usize::from(port) % PORTS].drop(DropReason::TooBig);
                    } else {
                        self.fragment_pages(&segs, port, mtu);
                    }
                    drop(segs);
                    self.recycle_raw(&rest);
                    self.pages.recycle(page);
                }
                Some(Event::Dropped { handle, .. }) => {
                    // SAFETY: as above: handed back by the router's queue.
                    let page = unsafe { self.pages.adopt(handle) };
                    let rest = self.take_multi(handle);
                    self.recycle_raw(&rest);
                    self.pages.recycle(page);
                }
            }
        }
    }
}
