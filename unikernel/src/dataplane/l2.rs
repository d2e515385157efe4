//! `io` and `l2` forwarding: frames received on one port leave through the other, rewritten
//! per [`netstack::forward_frame`]; with `xcore=on`, through the next core's pair.

use super::handoff::Handoff;
use super::page::{frame_room, PageBuf, RawPage};
use super::pages::{Pages, PortPages};
use super::percore::{count_give_back, Core, Platform};
use drivers::nic::Nic;
use drivers::nic::{BurstStats, ForwardOps, GiveBack, MultiFrame, RxVerdict, TxOwner};
use mm::Pfn;
use netstack::config::PORTS;
use netstack::{forward_frame, DropReason, MacRewrite, PortCounters, Verdict};

/// `io`/`l2` on one core: the dataplane's side of the fused burst (RX port `P`, TX the other).
/// Three words and the rewrite: the burst builds it on the stack (its cold paths take it by
/// reference), so the port is a constant and the pool's [`PortPages`] view is made only on
/// the paths that need more than the alloc cache.
struct L2Ops<'a, const P: usize, const L2: bool> {
    pages: &'a mut Pages,
    counters: &'a mut [PortCounters; PORTS],
    /// [`MacRewrite::words`] (written when `L2`; `io` leaves frames alone).
    words: (u64, u32),
}

impl<const P: usize, const L2: bool> L2Ops<'_, P, L2> {
    /// Port `P`'s pool with what a refill or a recycle needs besides it.
    #[inline(always)]
    fn port_pages(&mut self) -> PortPages<'_> {
        self.pages.port(P)
    }

    /// A page of port `P`'s pool the burst is done with: back into that pool.
    #[inline(always)]
    fn recycle(&mut self, pfn: Pfn) {
        let mut pages = self.port_pages();
        // SAFETY: the page came off port `P`'s RX ring, which only port `P`'s pool fills, and
        // nobody else holds it.
        let page = unsafe {
            PageBuf::from_raw(RawPage {
                pfn,
                pool: pages.id(),
            })
        };
        pages.recycle(page);
    }

    /// A frame `forward_frame` refused (a runt): counted, its page recycled.
    #[cold]
    #[inline(never)]
    fn drop_frame(&mut self, pfn: Pfn, why: DropReason) -> RxVerdict {
        self.counters[P].drop(why);
        self.recycle(pfn);
        RxVerdict::Consumed
    }
}

impl<const P: usize, const L2: bool> ForwardOps for L2Ops<'_, P, L2> {
    /// `forward` drops every frame shorter than an Ethernet header (a runt).
    const MIN_FRAME: usize = netstack::wire::ETH_HDR_LEN;

    #[inline(never)]
    fn rx_page(&mut self) -> Option<Pfn> {
        self.port_pages().alloc_raw()
    }

    #[inline(always)]
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        self.pages.pools[P].alloc_cached()
    }

    #[inline(always)]
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        match MacRewrite::apply_words::<L2>(self.words, frame) {
            Verdict::Forward => RxVerdict::Forward,
            Verdict::Drop(why) => self.drop_frame(pfn, why),
        }
    }

    #[cold]
    #[inline(never)]
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        count_give_back(self.counters, P, why);
        self.recycle(pfn);
    }

    /// A frame of several pages: its headers are in the first page, so it is rewritten and
    /// sent (as the same pages) exactly like a one-page frame. Inlined: the driver calls it
    /// from its cold paths only (once per multi-page frame).
    #[inline]
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        match MacRewrite::apply_words::<L2>(self.words, frame.head) {
            Verdict::Forward => RxVerdict::Forward,
            Verdict::Drop(why) => {
                self.counters[P].drop(why);
                for &pfn in frame.pages {
                    self.recycle(pfn);
                }
                RxVerdict::Consumed
            }
        }
    }
}

impl<P: Platform> Core<P> {
    /// Receive a burst on local port `PORT` and send what survives out of the other port.
    /// Returns RX buffers completed.
    #[inline(always)]
    pub(crate) fn rx_forward<const PORT: usize>(&mut self) -> usize {
        let p = PORT;
        // An empty port costs one load here, before any of the burst's set-up; the count read
        // goes on to size the burst (`used->idx` read once per port and iteration).
        let pending = self.nics[p].rx_pending();
        if pending == 0 {
            return 0;
        }
        if self.cfg.xcore && self.fabric.cores() > 1 {
            return self.rx_forward_xcore(p);
        }
        let q = 1 - p;
        let owner = self.pages.tx_owner(p);
        let max = self.burst_max(q);
        // The mode picked once per burst: each mode's loop writes the addresses or not with
        // no per-frame test.
        let st = match self.rewrite[q].words() {
            Some(words) => self.l2_burst::<PORT, true>(pending, max, owner, words),
            None => self.l2_burst::<PORT, false>(pending, max, owner, (0, 0)),
        };
        let (c, d) = (&mut self.counters[p], st.rx_frames as u64);
        c.rx += d;
        c.rx_bytes += st.rx_bytes;
        let c = &mut self.counters[q];
        c.tx += st.tx_frames as u64;
        c.tx_bytes += st.tx_bytes;
        st.buffers
    }

    /// [`Core::rx_forward`]'s fused burst from port `PORT` to the other, `L2`: with the MAC
    /// rewrite (`words`, [`MacRewrite::words`]), else `io`; `pending` is port `PORT`'s
    /// [`Nic::rx_pending`].
    #[inline(always)]
    fn l2_burst<const PORT: usize, const L2: bool>(
        &mut self,
        pending: usize,
        max: usize,
        owner: TxOwner,
        words: (u64, u32),
    ) -> BurstStats {
        let (pages, counters) = (&mut self.pages, &mut self.counters);
        let ops = move || {
            let (pages, counters) = ({ pages }, { counters });
            L2Ops::<PORT, L2> {
                pages,
                counters,
                words,
            }
        };
        let [a, b] = &mut self.nics;
        let (rx, tx): (&mut P::Nic, &mut P::Nic) = if PORT == 0 { (a, b) } else { (b, a) };
        // SAFETY: `L2Ops::rx_page` hands out fresh pages of port `PORT`'s pool (given up with
        // `into_raw`), and the RX ring of port `PORT` is refilled only from that pool; a frame
        // forwarded stays `tx`'s until `tx_reap` takes it back with its owner tag, `owner`
        // (that pool's id).
        unsafe { rx.forward_burst_pending(tx, pending, max, owner, ops) }
    }

    /// `xcore=on`: frames received on local port `p` leave through port `1 - p` of the next
    /// pair, which another core owns: rewrite them for that port and hand them to that core.
    fn rx_forward_xcore(&mut self, p: usize) -> usize {
        let n = self.rx_burst(p);
        if n == 0 {
            return 0;
        }
        let dst_core = (self.pair + 1) % self.fabric.cores();
        let dst_port = 1 - p;
        let out_mac = self.fabric.port_mac(PORTS * dst_core + dst_port);
        let peer = self.cfg.peer[dst_port];
        let mut handed = false;
        for i in 0..n {
            let b = self.rx_scratch[i];
            let Some(mut page) = self.rx_accept(p, b) else {
                continue;
            };
            let len = b.len;
            match forward_frame(self.cfg.mode, page.frame_mut::<P::Nic>(len), out_mac, peer) {
                Verdict::Forward => {
                    let h = Handoff::one(page, len as u16, dst_port as u8);
                    match self.fabric.handoff[dst_core].push(h) {
                        Ok(()) => handed = true,
                        Err(h) => {
                            self.counters[p].drop(netstack::DropReason::TxRingFull);
                            self.pages.recycle(h.page);
                        }
                    }
                }
                Verdict::Drop(why) => {
                    self.counters[p].drop(why);
                    self.pages.recycle(page);
                }
            }
        }
        if handed {
            self.wake_if_sleeping(dst_core);
        }
        n
    }

    /// Transmit what other cores handed to this core (`xcore=on`). Returns frames taken.
    pub(crate) fn drain_handoff(&mut self) -> usize {
        let fabric = self.fabric;
        let ring = &fabric.handoff[self.pair];
        if ring.is_empty() {
            return 0;
        }
        let n = ring.pop_each(64, |h| {
            let port = usize::from(h.port).min(PORTS - 1);
            if !h.rest.is_empty() {
                // `xcore` hands over one-page frames only; never send a frame cut short.
                self.counters[port].drop(netstack::DropReason::TooBig);
                for page in h.into_pages() {
                    self.pages.recycle(page);
                }
                return;
            }
            self.stage_tx(port, h.page, usize::from(h.len).min(frame_room::<P::Nic>()));
        });
        self.flush_all();
        n
    }
}
