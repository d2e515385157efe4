//! How a [`NetworkFunction`] runs on a [`Core`]: [`Core::poll_nf`] (one poll iteration, the
//! NF's `process` monomorphised into each port's fused burst through `NfOps`, the
//! dataplane's side of [`ForwardOps`]), the frames kept during the iteration handed to
//! [`NetworkFunction::end_of_burst`] through a [`Ctx`], and the tick and release hooks.
//!
//! Past ~800 lines because the per-frame side (`NfOps`) and the hooks' side (`Ctx`) hand the
//! same taken frames and pages to each other: splitting them would expose their fields across
//! files.

pub(crate) use super::handles::{Capped, NfHandle, Stateless};
use super::packet::Packet;
use super::{NetworkFunction, Verdict};
use crate::dataplane::handoff::Handoff;
use crate::dataplane::held::Held;
use crate::dataplane::nf_side::{NfCounters, NfSide, RestPages, Taken, NO_REST};
use crate::dataplane::page::PageBuf;
use crate::dataplane::pages::Pages;
use crate::dataplane::percore::{count_give_back, Core, MgmtPlane, Platform};
use drivers::nic::{ForwardOps, GiveBack, MultiFrame, Nic, RxVerdict, MAX_FRAME_PAGES};
use mm::Pfn;
use netstack::config::PORTS;
use netstack::{DropReason, PortCounters};

/// The dataplane's side of the fused burst from local port `RX` for the NF held by `H`: built
/// on the stack by the burst. `process` is inlined into [`ForwardOps::forward`]; every other
/// verdict leaves through a cold function.
struct NfOps<'a, H, const RX: usize> {
    nf: H,
    pages: &'a mut Pages,
    counters: &'a mut [PortCounters; PORTS],
    side: &'a mut NfSide,
    /// The burst's time for [`Packet::now_ns`] (0 unless the NF's `CLOCK`).
    now: u64,
}

impl<H: NfHandle, const RX: usize> NfOps<'_, H, RX> {
    /// A page of port `RX`'s pool the burst is done with: back into that pool.
    #[inline(always)]
    fn recycle(&mut self, pfn: Pfn) {
        // SAFETY: the page came off port `RX`'s RX ring, which only port `RX`'s pool fills,
        // and the burst handed it to us (nobody else holds it).
        let page = unsafe { PageBuf::from_raw(self.pages.raw(RX, pfn)) };
        self.pages.recycle(page);
    }

    /// A frame shorter than the NF's minimum: counted `runt`, recycled.
    #[cold]
    #[inline(never)]
    fn runt(&mut self, pfn: Pfn) -> RxVerdict {
        self.counters[RX].drop(DropReason::Runt);
        self.recycle(pfn);
        RxVerdict::Consumed
    }

    /// [`Verdict::Drop`]: counted, recycled.
    #[cold]
    #[inline(never)]
    fn drop_frame(&mut self, pfn: Pfn) -> RxVerdict {
        self.side.counters.dropped += 1;
        self.recycle(pfn);
        RxVerdict::Consumed
    }

    /// [`Verdict::Keep`] (`mgmt` false) or [`Verdict::ToMgmt`]: onto the iteration's list,
    /// or dropped (counted) when it is full.
    #[cold]
    #[inline(never)]
    fn take(&mut self, pfn: Pfn, len: usize, mgmt: bool, mark: u16) -> RxVerdict {
        let t = Taken {
            pfn,
            len: len as u16,
            port: RX as u8,
            mgmt,
            rest: NO_REST,
            mark,
        };
        match self.side.taken.push(t) {
            Ok(()) if !mgmt => self.side.counters.kept += 1,
            Ok(()) => {}
            Err(_) => {
                self.side.counters.keep_overflow += 1;
                if !mgmt {
                    self.nf.nf().keep_lost(mark);
                }
                self.recycle(pfn);
            }
        }
        RxVerdict::Consumed
    }

    /// [`Verdict::Keep`] (`mgmt` false) or [`Verdict::ToMgmt`] of a frame of several pages:
    /// onto the iteration's list with its later pages beside it (`NfSide::rest`), or dropped
    /// and counted: `keep_overflow` when either list is full, `bad_desc` when its pages are
    /// not laid out as one run (every page but the last full, VIRTIO 1.2 §5.1.6.4: what
    /// [`Held::segments`] and a TX chain assume) or it is longer than 65,535 bytes.
    #[cold]
    #[inline(never)]
    fn take_multi(
        &mut self,
        pages: &[Pfn],
        lens: &[u16],
        offset: usize,
        len: usize,
        mgmt: bool,
        mark: u16,
    ) -> RxVerdict {
        let n = pages.len();
        let full = |i: usize, l: u16| {
            let room = if i == 0 {
                mm::PAGE_SIZE - offset
            } else {
                mm::PAGE_SIZE
            };
            usize::from(l) == room
        };
        let laid_out = (2..=MAX_FRAME_PAGES).contains(&n)
            && lens.len() == n
            && lens[..n - 1].iter().enumerate().all(|(i, &l)| full(i, l))
            && len <= usize::from(u16::MAX);
        if !laid_out {
            if !mgmt {
                self.nf.nf().keep_lost(mark);
            }
            return self.drop_multi(pages, Some(DropReason::BadDesc));
        }
        if self.side.taken.is_full() || self.side.rest.is_full() {
            self.side.counters.keep_overflow += 1;
            if !mgmt {
                self.nf.nf().keep_lost(mark);
            }
            for &pfn in pages {
                self.recycle(pfn);
            }
            return RxVerdict::Consumed;
        }
        let rest: RestPages = pages[1..].iter().copied().collect();
        let t = Taken {
            pfn: pages[0],
            len: len as u16,
            port: RX as u8,
            mgmt,
            rest: self.side.rest.len() as u8,
            mark,
        };
        // Room checked above: neither push can refuse.
        let _ = self.side.rest.push(rest);
        let _ = self.side.taken.push(t);
        if !mgmt {
            self.side.counters.kept += 1;
        }
        RxVerdict::Consumed
    }

    /// Every page of a frame of several pages, dropped: counted once, under `why` when it
    /// is a port's drop reason (else as an NF drop).
    #[cold]
    #[inline(never)]
    fn drop_multi(&mut self, pages: &[Pfn], why: Option<DropReason>) -> RxVerdict {
        match why {
            Some(why) => self.counters[RX].drop(why),
            None => self.side.counters.dropped += 1,
        }
        for &pfn in pages {
            self.recycle(pfn);
        }
        RxVerdict::Consumed
    }

    /// A forwarded frame longer than the egress port's MTU allows ([`Capped`]): counted
    /// `over_mtu` on the egress port, its pages recycled.
    #[cold]
    #[inline(never)]
    fn over_mtu(&mut self, pages: &[Pfn]) -> RxVerdict {
        self.counters[1 - RX].drop(self.nf.cap_reason(1 - RX));
        // Forwarded by the NF, not sent: as a TX ring's refusal for an NF that counts.
        self.nf.nf().tx_refused();
        for &pfn in pages {
            self.recycle(pfn);
        }
        RxVerdict::Consumed
    }

    /// `v` (a forward of a frame of `len` bytes), unless [`NfHandle::CAPPED`] and the bytes it
    /// sends are over the cap: then [`NfOps::over_mtu`].
    #[inline(always)]
    fn capped(&mut self, v: RxVerdict, len: usize, pages: &[Pfn]) -> RxVerdict {
        if H::CAPPED {
            let sent = match v {
                RxVerdict::ForwardFirst(n) => n.min(len),
                _ => len,
            };
            if sent > self.nf.tx_cap(1 - RX) {
                return self.over_mtu(pages);
            }
        }
        v
    }
}

impl<H: NfHandle, const RX: usize> ForwardOps for NfOps<'_, H, RX> {
    const MIN_FRAME: usize = {
        assert!(
            H::Nf::MIN_FRAME >= netstack::wire::ETH_HDR_LEN,
            "NetworkFunction::MIN_FRAME is below an Ethernet header"
        );
        H::Nf::MIN_FRAME
    };

    #[inline(never)]
    fn rx_page(&mut self) -> Option<Pfn> {
        self.pages.port(RX).alloc_raw()
    }

    #[inline(always)]
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        self.pages.pools[RX].alloc_cached()
    }

    #[inline(always)]
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        if frame.len() < Self::MIN_FRAME {
            return self.runt(pfn);
        }
        let len = frame.len();
        let mut pkt = Packet::new(frame, len, RX, self.now);
        match self.nf.nf().process(&mut pkt) {
            Verdict::Forward => self.capped(RxVerdict::Forward, len, &[pfn]),
            Verdict::ForwardFirst(n) => self.capped(RxVerdict::ForwardFirst(n), len, &[pfn]),
            Verdict::Drop => self.drop_frame(pfn),
            Verdict::Keep | Verdict::ToMgmt if !H::Nf::TAKES => self.drop_frame(pfn),
            Verdict::Keep => self.take(pfn, len, false, pkt.mark()),
            Verdict::ToMgmt => self.take(pfn, len, true, 0),
        }
    }

    #[cold]
    #[inline(never)]
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        if why == GiveBack::TxFull {
            self.nf.nf().tx_refused();
        }
        count_give_back(self.counters, RX, why);
        self.recycle(pfn);
    }

    /// A frame of several pages: its headers are in the first page, which `process` sees
    /// ([`Packet::head`]); forwarded as the same pages, kept or given to the management plane
    /// with all of them ([`NfOps::take_multi`]). Inlined into the driver's chain loop, its
    /// one hot caller (taken apart there: whole, the frame was stored to the stack before the
    /// first test).
    #[inline(always)]
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        let MultiFrame {
            pages,
            lens,
            head,
            len,
            offset,
        } = frame;
        if head.len() < Self::MIN_FRAME {
            return self.drop_multi(pages, Some(DropReason::Runt));
        }
        let mut pkt = Packet::new(head, len, RX, self.now);
        match self.nf.nf().process(&mut pkt) {
            Verdict::Forward => self.capped(RxVerdict::Forward, len, pages),
            Verdict::ForwardFirst(n) => self.capped(RxVerdict::ForwardFirst(n), len, pages),
            Verdict::Drop => self.drop_multi(pages, None),
            Verdict::Keep | Verdict::ToMgmt if !H::Nf::TAKES => self.drop_multi(pages, None),
            Verdict::Keep => self.take_multi(pages, lens, offset, len, false, pkt.mark()),
            Verdict::ToMgmt => self.take_multi(pages, lens, offset, len, true, 0),
        }
    }
}

/// What [`NetworkFunction::end_of_burst`], [`NetworkFunction::tick`] and
/// [`NetworkFunction::release_all`] work with: the frames kept in this iteration, and the core
/// to send, drop or build frames on. Frames sent here are staged and flushed (one TX burst per
/// port) when the hook returns.
pub struct Ctx<'a, P: Platform> {
    core: &'a mut Core<P>,
    /// The next of the core's taken frames (`NfSide::taken`) to look at.
    next: usize,
    now_ns: u64,
}

impl<'a, P: Platform> Ctx<'a, P> {
    /// A context over `core` with no kept frame, at `now_ns` (for the in-crate router's work
    /// outside an iteration's end: its cross-core sync and its timers).
    pub(crate) fn new(core: &'a mut Core<P>, now_ns: u64) -> Self {
        Ctx {
            core,
            next: 0,
            now_ns,
        }
    }
}

impl<P: Platform> Ctx<'_, P> {
    /// The next frame kept ([`Verdict::Keep`]) in this iteration, in arrival order; `None`
    /// when there is none left (always, in `tick` and `release_all`).
    pub fn next_kept(&mut self) -> Option<Held> {
        while let Some(&t) = self.core.nf_side.taken.get(self.next) {
            self.next += 1;
            if !t.mgmt {
                return Some(self.adopt(t));
            }
        }
        None
    }

    /// Nanoseconds since boot, read once when the hook started.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Send `h` out of local port `port` (0 or 1), as it is (a frame of several pages as one
    /// descriptor chain of the same pages, after what is staged for the port). A port the core
    /// does not have drops it, counted in [`NfCounters::bad_port`]; a full TX ring drops it
    /// (at the flush for a frame of one page), counted `tx_ring_full` on the port; outside
    /// router mode, a frame longer than a smaller-MTU port takes (the longest the other port
    /// receives fits) is dropped, counted `over_mtu` on the port.
    pub fn send(&mut self, h: Held, port: usize) {
        let _ = self.send_frame(h, port);
    }

    /// [`Ctx::send`] that knows whether the ring takes the frame: a frame of one page is
    /// staged only if the port's TX ring has a slot for it beyond what is staged, else dropped
    /// now (counted `tx_ring_full` on the port; `link_down` when the port's link is down), so
    /// that a staged frame is one the flush hands to the ring. Returns whether it was handed to the ring (or staged with a slot).
    pub(crate) fn send_whole(&mut self, h: Held, port: usize) -> bool {
        // A frame of several pages is checked by the ring itself (`Core::send_multi`).
        let refused = match port {
            p if p >= PORTS => None,
            p if !h.rest.is_empty() => self.core.link_down[p].then_some(DropReason::LinkDown),
            p => self.core.tx_refusal(p, 1),
        };
        if let Some(why) = refused {
            self.core.nf_side.counters.sent_held += 1;
            self.core.counters[port].drop(why);
            self.recycle(h);
            return false;
        }
        self.send_frame(h, port)
    }

    /// [`Ctx::send`]; `false` when the frame was dropped here (a bad port, a frame of several
    /// pages the ring refused).
    fn send_frame(&mut self, h: Held, port: usize) -> bool {
        if port >= PORTS {
            self.core.nf_side.counters.bad_port += 1;
            self.recycle(h);
            return false;
        }
        self.core.nf_side.counters.sent_held += 1;
        let len = h.len();
        if self.core.tx_cap[port].is_some_and(|cap| len > cap.get()) {
            let why = self.core.cap_reason(port);
            self.core.counters[port].drop(why);
            self.recycle(h);
            return false;
        }
        let Held { page, rest, .. } = h;
        if rest.is_empty() {
            self.core.stage_tx(port, page, len);
            return true;
        }
        let rest: RestPages = rest.into_iter().map(|p| p.into_raw().pfn).collect();
        self.core.send_multi(port, page, &rest, len)
    }

    /// Hand `h` to forwarding core `core` (`0..` the number of forwarding cores), the one
    /// that owns its flow: that core's poll iteration gives it to its instance of this NF's
    /// [`NetworkFunction::handed`], with `mark` as its [`Held::mark`] and its port as it
    /// came in. Counted in [`NfCounters::handed_off`]; the frame is dropped, counted in
    /// [`NfCounters::handoff_dropped`], when that core's hand-off ring is full (256 frames),
    /// `core` is this core or not a forwarding core. The other core is woken if it halted.
    /// For an NF whose [`NetworkFunction::HANDS_OFF`] is `true` (else nothing takes the
    /// frames: the ring fills and they are dropped at `quit`).
    pub fn hand_off(&mut self, h: Held, core: usize, mark: u16) {
        let fabric = self.core.fabric;
        if core >= fabric.cores() || core == self.core.pair() {
            self.core.nf_side.counters.handoff_dropped += 1;
            return self.recycle(h);
        }
        let Held {
            page,
            rest,
            len,
            port,
            ..
        } = h;
        let ho = Handoff {
            page,
            rest: rest.into_iter().collect(),
            len,
            port,
            mark,
        };
        match fabric.handoff[core].push(ho) {
            Ok(()) => {
                self.core.nf_side.counters.handed_off += 1;
                self.core.wake_if_sleeping(core);
            }
            Err(ho) => {
                self.core.nf_side.counters.handoff_dropped += 1;
                for page in ho.into_pages() {
                    self.core.pages.recycle(page);
                }
            }
        }
    }

    /// Drop `h`: its pages back to their pool, counted in [`NfCounters::dropped`].
    pub fn drop(&mut self, h: Held) {
        self.core.nf_side.counters.dropped += 1;
        self.recycle(h);
    }

    /// Give a copy of `h` to the management plane of the port it came in on (counted in
    /// [`NfCounters::to_mgmt`], or [`NfCounters::mgmt_unavailable`] when that port has none);
    /// its pages go back to their pool. A frame of several pages is made linear for it on
    /// this core, or handed to core 0 with its pages when the management plane runs there.
    pub fn to_mgmt(&mut self, h: Held) {
        let port = h.port();
        if !h.rest.is_empty() {
            let len = h.len();
            let Held { page, rest, .. } = h;
            let rest: RestPages = rest.into_iter().map(|p| p.into_raw().pfn).collect();
            let serves = self.core.mgmt_serves(port);
            let counters = &mut self.core.nf_side.counters;
            if serves {
                counters.to_mgmt += 1;
            } else {
                counters.mgmt_unavailable += 1;
            }
            return self.core.multi_to_mgmt(port, page, &rest, len);
        }
        if self.core.copy_to_mgmt(port, h.bytes()) {
            self.core.nf_side.counters.to_mgmt += 1;
        } else {
            self.core.nf_side.counters.mgmt_unavailable += 1;
        }
        self.recycle(h);
    }

    /// Give the management plane of `h`'s port a copy of its bytes and keep `h` (a frame the
    /// NF acts on itself and the management plane should see too: the router lets smoltcp
    /// see the ARP frames it learns from). Not a verdict: no [`NfCounters`] field counts it.
    /// `false` when the port has no management plane or `h` is of several pages.
    pub fn copy_to_mgmt(&mut self, h: &Held) -> bool {
        h.rest.is_empty() && self.core.copy_to_mgmt(h.port(), h.bytes())
    }

    /// A frame the NF took in and counted itself (an ARP reply the router learned from, a
    /// frame its own counters name): its pages back to their pool, counted in
    /// [`NfCounters::consumed`] (not `dropped`: the NF's counters say what became of it).
    pub fn consume(&mut self, h: Held) {
        self.core.nf_side.counters.consumed += 1;
        self.recycle(h);
    }

    /// Count a frame the NF could not send out of local port `port` (0 or 1) for `why`
    /// (`too_big`, `no_buffer`, ...) in the port's drops, as the driver counts its own; a
    /// port the core does not have is ignored.
    pub fn count_port_drop(&mut self, port: usize, why: DropReason) {
        if let Some(c) = self.core.counters.get_mut(port) {
            c.drop(why);
        }
    }

    /// Send every frame of `frames` out of local port `port`, or none of them: staged only if
    /// the port's TX ring has a slot for each beyond what is staged (a train that must arrive
    /// whole: the fragments of one datagram). Refused, the frames are dropped, counted once
    /// on the port (`tx_ring_full`, or `link_down` while its link is down; a port the core does
    /// not have: [`NfCounters::bad_port`]). Frames of one page only (a frame of several is
    /// dropped, counted `too_big` on the port). Returns whether they were staged.
    pub fn send_all<const N: usize>(
        &mut self,
        frames: heapless::Vec<Held, N>,
        port: usize,
    ) -> bool {
        let refused = if port >= PORTS {
            self.core.nf_side.counters.bad_port += 1;
            None
        } else if frames.iter().any(|h| !h.rest.is_empty()) {
            Some(DropReason::TooBig)
        } else {
            self.core.tx_refusal(port, frames.len())
        };
        if port >= PORTS || refused.is_some() {
            if let Some(why) = refused {
                self.core.counters[port].drop(why);
            }
            for h in frames {
                self.recycle(h);
            }
            return false;
        }
        for h in frames {
            self.core.nf_side.counters.sent_held += 1;
            let len = h.len();
            self.core.stage_tx(port, h.page, len);
        }
        true
    }

    /// Tell every other forwarding core's router what this core's learned from ARP (the
    /// fabric's neighbour rings; an in-crate service of the stock router). Returns the
    /// updates sent and those a full ring dropped (that core resolves by its own request).
    pub(crate) fn share_neigh(&mut self, u: netstack::router::NeighUpdate) -> (u64, u64) {
        let fabric = self.core.fabric;
        self.share(&fabric.neigh, u)
    }

    /// [`Ctx::share_neigh`] for the IPv6 routers: what this core's learned from a solicited
    /// Neighbor Advertisement.
    pub(crate) fn share_neigh6(&mut self, u: netstack::router::NeighUpdate6) -> (u64, u64) {
        let fabric = self.core.fabric;
        self.share(&fabric.neigh6, u)
    }

    /// Push `u` on every other forwarding core's ring of `rings`, waking it if it sleeps:
    /// (pushed, dropped on a full ring).
    fn share<T: Copy, const S: usize>(
        &mut self,
        rings: &[mm::ptr_ring::MpscRing<T, S>],
        u: T,
    ) -> (u64, u64) {
        let fabric = self.core.fabric;
        let me = self.core.pair();
        let (mut sent, mut dropped) = (0, 0);
        for (k, ring) in rings.iter().enumerate().take(fabric.cores()) {
            if k == me {
                continue;
            }
            match ring.push(u) {
                Ok(()) => {
                    sent += 1;
                    self.core.wake_if_sleeping(k);
                }
                Err(_) => dropped += 1,
            }
        }
        (sent, dropped)
    }

    /// Every page of `h` back to its pool.
    fn recycle(&mut self, h: Held) {
        let Held { page, rest, .. } = h;
        self.core.pages.recycle(page);
        for p in rest {
            self.core.pages.recycle(p);
        }
    }

    /// A fresh page of local port `port`'s pool to build a frame in (length 0:
    /// [`Held::set_len`]); `None` when the pool and the allocator are empty or `port` is not
    /// 0 or 1.
    pub fn alloc(&mut self, port: usize) -> Option<Held> {
        if port >= PORTS {
            return None;
        }
        let page = self.core.pages.alloc(port)?;
        Some(Held {
            page,
            rest: heapless::Vec::new(),
            len: 0,
            offset: <P::Nic as Nic>::FRAME_OFFSET as u16,
            port: port as u8,
            mark: 0,
        })
    }

    /// `n` fresh pages of local port `port`'s pool to build a train of frames in (each as
    /// [`Ctx::alloc`] gives one), or none: too few pages is counted `no_buffer` on the port
    /// (as the driver counts a refill that found none); `n` over `N` or a port the core does
    /// not have gives `None` uncounted.
    pub fn alloc_train<const N: usize>(
        &mut self,
        port: usize,
        n: usize,
    ) -> Option<heapless::Vec<Held, N>> {
        if port >= PORTS || n > N {
            return None;
        }
        let mut made = heapless::Vec::new();
        while made.len() < n {
            let Some(h) = self.alloc(port) else {
                self.core.counters[port].no_buffer += 1;
                for h in made {
                    self.free(h);
                }
                return None;
            };
            // At most n ≤ N pushes.
            let _ = made.push(h);
        }
        Some(made)
    }

    /// Give back a page from [`Ctx::alloc`] or [`Ctx::alloc_train`] the NF did not use
    /// (no frame in it: nothing counted). A received frame is dropped with [`Ctx::drop`].
    pub fn free(&mut self, h: Held) {
        self.recycle(h);
    }

    /// The frame `t` took, as a held frame.
    fn adopt(&mut self, t: Taken) -> Held {
        let port = usize::from(t.port);
        // SAFETY: the burst gave the page to the NF's side (`RxVerdict::Consumed`) and only
        // this list holds it; it came off port `t.port`'s RX ring, which only that port's
        // pool fills.
        let page = unsafe { PageBuf::from_raw(self.core.pages.raw(port, t.pfn)) };
        let mut rest = heapless::Vec::new();
        let later = self.core.nf_side.rest.get(usize::from(t.rest));
        for &pfn in later.into_iter().flatten() {
            // SAFETY: a later page of the same frame, kept beside it (`NfSide::rest`) since
            // the burst and by nothing else; off the same RX ring, so of the same pool. At most
            // MAX_FRAME_PAGES - 1 of them: the push cannot refuse.
            let _ = rest.push(unsafe { PageBuf::from_raw(self.core.pages.raw(port, pfn)) });
        }
        Held {
            page,
            rest,
            len: t.len,
            offset: <P::Nic as Nic>::FRAME_OFFSET as u16,
            port: t.port,
            mark: t.mark,
        }
    }

    /// The frames for the management plane, first (before the NF sees its kept ones).
    fn deliver_mgmt(&mut self) {
        for i in 0..self.core.nf_side.taken.len() {
            let t = self.core.nf_side.taken[i];
            if t.mgmt {
                let h = self.adopt(t);
                self.to_mgmt(h);
            }
        }
    }

    /// The kept frames the NF did not take: dropped, counted; the list emptied.
    fn finish(&mut self) {
        while let Some(h) = self.next_kept() {
            self.drop(h);
        }
        self.core.nf_side.taken.clear();
        self.core.nf_side.rest.clear();
    }
}

impl<P: Platform> Core<P> {
    /// One poll iteration running network function `nf` on this core's pair: each port's
    /// burst through the fused RX→TX loop with `nf.process` per frame, then (when it kept
    /// frames, or after every busy iteration with [`NetworkFunction::EVERY_BURST`]) its
    /// end-of-burst hook, then TX reap, refill and kick as [`Core::poll_once`]. Returns the
    /// work done (frames and pages moved); 0 means idle.
    #[inline(never)]
    pub fn poll_nf<F: NetworkFunction>(&mut self, nf: &mut F) -> usize {
        if self.torn_down() {
            return 0;
        }
        if self.tx_capped {
            return self.poll_nf_capped(nf);
        }
        match self.mgmt.steer {
            None => self.poll_nf_body(nf),
            Some((port, addr)) => self.poll_nf_steered(nf, port, addr),
        }
    }

    /// [`Core::poll_nf`] inline, for a caller that is itself the iteration's function, with
    /// the NF held as `H` says.
    #[inline(always)]
    pub(crate) fn poll_nf_body<H: NfHandle>(&mut self, nf: H) -> usize {
        self.poll_nf_from(P::cycles(), 0, nf)
    }

    /// [`Core::poll_nf_body`] for an iteration that started at `t0` (cycles) and already did
    /// `pre` work (frames and pages moved: the router's cross-core sync).
    #[inline(always)]
    pub(crate) fn poll_nf_from<H: NfHandle>(&mut self, t0: u64, pre: usize, mut nf: H) -> usize {
        // Two calls with constant ports, not a loop: each port's burst then addresses its
        // rings and counters at fixed offsets from `self` (a loop over the port made LLVM hoist
        // ~40 address computations to the stack per iteration: 459 -> 374 guest instructions
        // per packet at K=1 when l2 was split this way).
        const { assert!(PORTS == 2) };
        let work = pre + self.nf_burst::<H, 0>(&mut nf) + self.nf_burst::<H, 1>(&mut nf);
        let took = H::Nf::TAKES && !self.nf_side.taken.is_empty();
        if took || (H::Nf::EVERY_BURST && work > 0) {
            self.nf_after_burst(nf.nf());
        }
        // One load and test per iteration, for an NF that hands frames between cores only.
        let handed = if H::Nf::HANDS_OFF && !self.fabric.handoff[self.pair].is_empty() {
            self.nf_take_handed(nf.nf())
        } else {
            0
        };
        self.poll_tail(t0, work + handed)
    }

    /// What other cores' instances of the NF handed to this core ([`Ctx::hand_off`]), up to
    /// one ring's batch (64), each given to [`NetworkFunction::handed`]; what it sent is
    /// flushed. Returns the frames taken.
    #[inline(never)]
    fn nf_take_handed<F: NetworkFunction>(&mut self, nf: &mut F) -> usize {
        let fabric = self.fabric;
        let offset = <P::Nic as Nic>::FRAME_OFFSET as u16;
        let mut ctx = Ctx {
            now_ns: P::uptime_ns(),
            core: self,
            next: 0,
        };
        let n = fabric.handoff[ctx.core.pair()].pop_each(64, |h| {
            let held = Held {
                page: h.page,
                rest: h.rest.into_iter().collect(),
                len: h.len,
                offset,
                port: h.port,
                mark: h.mark,
            };
            nf.handed(held, &mut ctx);
        });
        ctx.finish();
        self.flush_all();
        n
    }

    /// One fused burst from local port `RX` to the other through the NF `nf` holds. Returns
    /// RX buffers completed.
    #[inline(always)]
    fn nf_burst<H: NfHandle, const RX: usize>(&mut self, nf: &mut H) -> usize {
        // An empty port costs one load here, before any of the burst's set-up.
        let pending = self.nics[RX].rx_pending();
        if pending == 0 {
            return 0;
        }
        self.nf_burst_pending::<H, RX>(nf, pending)
    }

    /// [`Core::nf_burst`] with port `RX`'s [`Nic::rx_pending`] (`pending`, not 0) read by the
    /// caller.
    #[inline(always)]
    pub(crate) fn nf_burst_pending<H: NfHandle, const RX: usize>(
        &mut self,
        nf: &mut H,
        pending: usize,
    ) -> usize {
        let q = 1 - RX;
        let owner = self.pages.tx_owner(RX);
        let max = self.burst_max(q);
        let (pages, counters, side) = (&mut self.pages, &mut self.counters, &mut self.nf_side);
        let nf = nf.for_burst();
        let ops = move || {
            let (pages, counters, side) = ({ pages }, { counters }, { side });
            // One clock read per burst, and only for an NF that asks (`CLOCK`).
            let now = if H::Nf::CLOCK { P::uptime_ns() } else { 0 };
            NfOps::<_, RX> {
                nf,
                pages,
                counters,
                side,
                now,
            }
        };
        let [a, b] = &mut self.nics;
        let (rx, tx): (&mut P::Nic, &mut P::Nic) = if RX == 0 { (a, b) } else { (b, a) };
        // SAFETY: `NfOps::rx_page` hands out fresh pages of port `RX`'s pool (given up with
        // `into_raw`), and the RX ring of port `RX` is refilled only from that pool; a frame
        // forwarded stays `tx`'s until `tx_reap` takes it back with its owner tag, `owner`
        // (that pool's id).
        let st = unsafe { rx.forward_burst_pending(tx, pending, max, owner, ops) };
        self.count_burst(RX, &st);
        st.buffers
    }

    /// After the bursts of an iteration that took frames (or of every busy one, with
    /// [`NetworkFunction::EVERY_BURST`]): the management plane's frames delivered, the NF's
    /// end-of-burst hook, what it left dropped, what it sent flushed.
    #[cold]
    #[inline(never)]
    pub(crate) fn nf_after_burst<F: NetworkFunction>(&mut self, nf: &mut F) {
        let now_ns = P::uptime_ns();
        let mut ctx = Ctx {
            core: self,
            next: 0,
            now_ns,
        };
        ctx.deliver_mgmt();
        if ctx.core.mgmt().is_some_and(|m| m.rx_pending() > 0) {
            ctx.core.mgmt_poll();
        }
        nf.end_of_burst(&mut ctx);
        ctx.finish();
        // What the hook gave the management plane (the router's frames for its address).
        if self.mgmt().is_some_and(|m| m.rx_pending() > 0) {
            self.mgmt_poll();
        }
        self.flush_all();
    }

    /// Run `nf`'s [`NetworkFunction::tick`] (the kernel's housekeeping, every 10 ms), then
    /// send what it staged and kick, then read its counters ([`Core::read_nf_counters`]).
    /// Does nothing once the core is torn down.
    pub fn tick_nf<F: NetworkFunction>(&mut self, nf: &mut F) {
        if self.torn_down() {
            return;
        }
        self.run_hook(nf, |nf, ctx| nf.tick(ctx));
        self.read_nf_counters(nf);
    }

    /// Before `quit`: run `nf`'s [`NetworkFunction::release_all`] so it hands back every frame
    /// it holds, then send what it staged, then read its counters a last time (the final
    /// `STATS`). Does nothing once the core is torn down.
    pub fn release_nf<F: NetworkFunction>(&mut self, nf: &mut F) {
        if self.torn_down() {
            return;
        }
        self.run_hook(nf, |nf, ctx| nf.release_all(ctx));
        self.read_nf_counters(nf);
    }

    /// Copy `nf`'s own counters ([`NetworkFunction::counters`]) into this core's snapshot
    /// ([`Core::snap`]'s `nf_own`), which `STATS` and `/metrics` sum over the cores. Off the
    /// per-frame path: the kernel calls it every 10 ms and before `quit` (through
    /// [`Core::tick_nf`] and [`Core::release_nf`]). Nothing for an NF that declares no
    /// counter. Its name and declaration are checked at compile time
    /// ([`netstack::stats::check_counters`]).
    pub fn read_nf_counters<F: NetworkFunction>(&mut self, nf: &F) {
        const {
            assert!(
                netstack::stats::check_counters(F::NAME, F::COUNTERS).is_ok(),
                "NetworkFunction::NAME or ::COUNTERS breaks netstack::stats::check_counters's rules"
            )
        };
        if F::COUNTERS.is_empty() {
            return;
        }
        let mut v = super::CounterValues::new(F::COUNTERS);
        nf.counters(&mut v);
        if !self.nf_side.carry.defs().is_empty() {
            v.add(&self.nf_side.carry);
        }
        self.nf_side.own = v;
    }

    /// Replace this core's instance `nf` with `fresh` (its files replaced by a `PUT`: the NF
    /// restarts as at boot). The old instance first hands back every frame it holds
    /// ([`Core::release_nf`]); its counts carry on into the new one's (a counter never goes
    /// back; gauges are the new instance's own: `CounterValues::counts_only`). Between poll
    /// iterations (the core's tick): no frame of the old instance is in the iteration's lists.
    pub(crate) fn restart_nf<F: NetworkFunction>(&mut self, nf: &mut F, fresh: F) {
        self.release_nf(nf);
        // `own` holds the old instance's counts plus what earlier instances carried.
        self.nf_side.carry = self.nf_side.own.counts_only();
        *nf = fresh;
        self.read_nf_counters(nf);
    }

    /// Run `hook` with a [`Ctx`] holding no kept frames, then flush and kick.
    pub(crate) fn run_hook<F>(&mut self, nf: &mut F, hook: impl FnOnce(&mut F, &mut Ctx<'_, P>)) {
        let now_ns = P::uptime_ns();
        let mut ctx = Ctx {
            core: self,
            next: 0,
            now_ns,
        };
        hook(nf, &mut ctx);
        self.flush_all();
        self.kick_all();
    }

    /// The counts of the NF verdicts on this core.
    pub fn nf_counters(&self) -> &NfCounters {
        &self.nf_side.counters
    }
}
