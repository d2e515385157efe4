//! The fused burst while frames of several buffers flow (`VIRTIO_NET_F_MRG_RXBUF`, §5.1.6.4):
//! a chain-aware loop (`forward_run_chains`, one copy per TX mode: indirect tables or
//! descriptor chains) that collects a frame's buffers page by page and sends it as one
//! descriptor chain of the same pages, and the general path for what it leaves.

use super::{
    chain_verdict, fresh_page, give_back_over_limit, zero_net_hdr, BurstStats, ForwardOps,
    GiveBack, Hal, MultiFrame, Pfn, Rare, Rings, RxChain, RxStatus, RxVerdict, SplitQueue,
    Transport, TxOwner, TxSlot, TxTag, VirtioNet, MAX_FRAME_BUFFERS, NET_HDR_LEN, NO_PAGE,
    NUM_BUFFERS_OFFSET, PAGE_SIZE, QUEUE_SIZE, RX_PUBLISH_BATCH,
};

/// What one [`VirtioNet::forward_run_chains`] did.
pub(in crate::virtio_net) struct ChainRun {
    /// Its counts.
    stats: BurstStats,
    /// Used elements taken.
    taken: usize,
    /// Whether it saw a frame of several pages.
    multi: bool,
    /// It stopped at a frame the burst's budget cut (after at least one frame): the burst
    /// ends there and the frame waits in the used ring for the next one.
    budget: bool,
}

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// The rest of a burst while multi-page frames flow (from [`VirtioNet::forward_burst`]
    /// at a burst's start in chain mode, or `forward_rest` after the general run stopped at
    /// one): the general run first if a frame is half collected, then
    /// [`VirtioNet::forward_run_chains`]; what it leaves (a malformed buffer, a frame not yet
    /// whole in the used ring, the TX ring full) goes to the general run, and a frame the
    /// burst's budget cut waits in the used ring for the next burst. `ready` is the burst's
    /// budget in frames (a frame of several buffers counts once, as DPDK's
    /// `rte_eth_rx_burst` counts packets), over the used elements in the ring now (read
    /// again here). A burst of one-page frames only ends the mode.
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) unsafe fn forward_burst_chains<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        ready: usize,
        elems: usize,
        owner: TxOwner,
        ops: &mut O,
    ) -> BurstStats {
        let mut st = BurstStats::default();
        // `ready` counts frames here, not used elements (as `rte_eth_rx_burst`'s `nb_pkts`
        // counts packets, a mergeable chain once): a frame of `k` buffers counts once against
        // the burst. The frames may take `elems` used elements (`VirtioNet::chain_elems`).
        let mut left = elems;
        let mut multi = false;
        while left > 0 && st.rx_frames < ready {
            let frames_left = ready - st.rx_frames;
            if self.rx_chain.n == 0 && self.rx_skip == 0 {
                // SAFETY: the caller's contract, passed on (`left` used elements are there).
                let run = unsafe {
                    if tx.tx.indirect().is_some() {
                        self.forward_run_chains::<O, true>(tx, left, frames_left, owner, ops)
                    } else {
                        self.forward_run_chains::<O, false>(tx, left, frames_left, owner, ops)
                    }
                };
                st.add(&run.stats);
                multi |= run.multi;
                left -= run.taken;
                if left == 0 || run.budget || st.rx_frames >= ready {
                    break;
                }
            }
            // A frame half collected, or something the chain loop does not handle: one
            // general run for the rest (it also collects a frame not yet whole in the used
            // ring), and the frame it completed, if any. It counts used elements, so it gets
            // no more of them than the burst has frames left: never more frames than that.
            let take = left.min(ready - st.rx_frames);
            // SAFETY: the caller's contract, passed on.
            let (run, stop) = unsafe { self.forward_run::<O, false>(tx, take, owner, ops, false) };
            st.add(&run);
            left -= if stop > 0 { stop } else { take };
            if self.rx_chain.n > 0 && self.rx_skip == 0 {
                self.forward_chain(tx, owner, ops, &mut st);
            }
            multi |= run.buffers > run.rx_frames || stop > 0;
        }
        if !multi {
            self.rx_chain_mode = false;
        }
        st
    }

    /// The chain-aware loop of the fused burst: one frame per step, of `num_buffers` used
    /// elements (1..=[`MAX_FRAME_BUFFERS`], §5.1.6.4, all in the used ring). Per frame, in one
    /// pass over its elements: each read and checked, and its RX slot re-posted in place at
    /// once (a fresh page from the alloc cache, else [`ForwardOps::rx_page`]); an element
    /// found unsound part way (a bad id or length), or a slot no page refills, undoes the
    /// frame's re-posts (`chain_undo`) and ends the run, so the frame reaches the general run
    /// as it came. Then the dataplane is asked ([`ForwardOps::forward`] or
    /// [`ForwardOps::forward_multi`]) and the frame's pages written as its TX chain, linked
    /// forward (the next free descriptor is known before it is taken,
    /// [`SplitQueue::nth_free_any`]; the last without a link, §2.7.5), with one available
    /// entry for the chain's head (§2.7.13). A verdict other than a whole `Forward` (a cut, a
    /// frame the dataplane took) is settled out of line (`chain_verdict`). The loop carries
    /// ring positions (used, RX avail, TX avail, descriptors taken), the bytes received and
    /// the frames seen; every other count follows from them after the loop. It takes at most
    /// `max_frames` frames (the burst's budget counts frames: a frame of `k` buffers once)
    /// out of the `ready` used elements known to be there. It stops before the frame past
    /// that budget, one not whole in the used ring, or one the TX ring has no descriptors for:
    /// after at least one frame that ends the burst and the frame waits in the used ring
    /// ([`ChainRun::budget`]); as the run's first frame it is left to the general run.
    ///
    /// `IND`: the TX ring has indirect tables (the caller checked; one copy of the loop each,
    /// so the one with tables carries no test or count of the other).
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    pub(in crate::virtio_net) unsafe fn forward_run_chains<O: ForwardOps, const IND: bool>(
        &mut self,
        tx: &mut Self,
        ready: usize,
        max_frames: usize,
        owner: TxOwner,
        ops: &mut O,
    ) -> ChainRun {
        // With indirect tables (§2.7.5.3) a frame takes one descriptor and one avail slot, as
        // a one-page frame: the TX ring keeps its mode. Without, chains take several
        // descriptors per avail slot: the ring leaves in-order mode (it comes back once no
        // chain is in flight and every descriptor is free).
        let ind = if IND { tx.tx.indirect() } else { None };
        if IND && ind.is_none() {
            // SAFETY: the caller's contract, passed on.
            return unsafe {
                self.forward_run_chains::<O, false>(tx, ready, max_frames, owner, ops)
            };
        }
        if ind.is_none() {
            tx.tx_leave_in_order();
        }
        let tx_in_order = tx.tx.is_in_order();
        let mut rc = self.rx.cursor();
        let mut tc = tx.tx.cursor();
        let tx_free = SplitQueue::<H, QUEUE_SIZE>::cursor_free(&tc);
        let (rxr, txr) = (self.rx.rings(), tx.tx.rings());
        let mut rare = Rare::default();
        // Positions, as the one-page loop carries them: `u` the used element, `ra` the RX
        // re-post's avail slot, `ta` the TX post's; `d` TX descriptors taken.
        let u0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_used(&rc));
        let ra0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&rc).0);
        let ta0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&tc).0);
        let end = u0 + ready;
        // `pg` TX pages posted (`d` with chains; more with indirect tables).
        let (mut u, mut ra, mut ta, mut d, mut pg) = (u0, ra0, ta0, 0, 0);
        let (mut rx_bytes, mut frames, mut chains, mut budget) = (0u64, 0, 0, false);
        // With tables: frames posted as one page (the rest of the `ta - ta0` posted are
        // chains; `d` is `ta - ta0` too, neither is carried).
        let mut singles = 0;
        'frames: while u < end {
            let (id0, used0) = rxr.pop_at(u);
            let Some(&pfn0) = self.rx_pages.get(id0 as usize) else {
                break;
            };
            let used0 = used0 as usize;
            if pfn0 == NO_PAGE || used0.wrapping_sub(NET_HDR_LEN) > PAGE_SIZE - NET_HDR_LEN {
                break;
            }
            let page0 = pfn0.addr() as usize as *mut u8;
            // SAFETY: the device is done with the page (its used element is in the ring) and
            // the driver owns it; offset 10..12 is inside it.
            let k = usize::from(u16::from_le_bytes(unsafe {
                page0
                    .add(NUM_BUFFERS_OFFSET)
                    .cast::<[u8; 2]>()
                    .read_unaligned()
            }))
            .max(1);
            if k > MAX_FRAME_BUFFERS {
                break;
            }
            let (taken, descs) = if IND { (ta - ta0, 1) } else { (d, k) };
            if u + k > end || taken + descs > tx_free || frames == max_frames {
                // The burst's frames are done, the rest of the frame is not in the used ring
                // yet, or the TX ring has no room for its chain: after at least one frame the
                // burst ends and the frame waits in the used ring; as the first, it is left
                // to the general run.
                budget = u > u0;
                break;
            }
            // The frame's pages and lengths (the dataplane's view, and the TX chain's).
            let mut pages = [pfn0; MAX_FRAME_BUFFERS];
            let mut lens = [0u16; MAX_FRAME_BUFFERS];
            let mut len = used0 - NET_HDR_LEN;
            lens[0] = len as u16;
            // Each RX slot re-posted in place as its element is checked, with a fresh page
            // (alloc cache, else the pool's slow path). A frame found unsound part way, or
            // no page for a slot, has its re-posts undone and is left to the general run.
            let Some(new) = fresh_page(ops) else {
                break;
            };
            rxr.repost_at(ra, id0 as u16, new.addr());
            self.rx_pages[id0 as usize & (QUEUE_SIZE - 1)] = new;
            for j in 1..k {
                let (id, used) = rxr.pop_at(u + j);
                // A continuation holds 1..=PAGE_SIZE frame bytes from offset 0 (no header).
                let (p, new) = match self.rx_pages.get(id as usize) {
                    Some(&p) if p != NO_PAGE && (used as usize).wrapping_sub(1) < PAGE_SIZE => {
                        (p, fresh_page(ops))
                    }
                    _ => (NO_PAGE, None),
                };
                let Some(new) = new else {
                    self.chain_undo(rxr, u, &pages[..j], ops);
                    break 'frames;
                };
                rxr.repost_at(ra + j, id as u16, new.addr());
                self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = new;
                (pages[j], lens[j]) = (p, used as u16);
                len += used as usize;
            }
            ra += k;
            rx_bytes += len as u64;
            frames += 1;
            // SAFETY: the first page is ours now; it holds `NET_HDR_LEN + lens[0]` bytes.
            let head = unsafe {
                core::slice::from_raw_parts_mut(page0.add(NET_HDR_LEN), usize::from(lens[0]))
            };
            let verdict = if len > self.rx_limit {
                give_back_over_limit(ops, &pages[..k])
            } else if k == 1 {
                ops.forward(pfn0, head)
            } else {
                ops.forward_multi(MultiFrame {
                    pages: &pages[..k],
                    lens: &lens[..k],
                    head,
                    len,
                    offset: NET_HDR_LEN,
                })
            };
            let m = match verdict {
                RxVerdict::Forward => k,
                v => chain_verdict(v, len, k, &pages, &mut lens, ops, &mut rare),
            };
            u += k;
            if m == 0 {
                continue;
            }
            // SAFETY: the first page is still ours (`Forward`).
            unsafe { zero_net_hdr(page0) };
            pg += m;
            if let Some(ind) = ind {
                // One descriptor per frame (`d == ta - ta0`), taken as the one-page loop
                // takes it: in in-order mode the avail slot's own.
                let id = tx.tx.nth_free_at(&tc, ta - ta0, ta, tx_in_order);
                let slot = usize::from(id) & (QUEUE_SIZE - 1);
                if m == 1 {
                    let len0 = u32::from(lens[0]) + NET_HDR_LEN as u32;
                    txr.post_at(ta, id, pfn0.addr(), len0);
                    tx.tx_pages[slot] = TxSlot {
                        pfn: pfn0,
                        tag: TxTag::one(owner),
                    };
                    singles += 1;
                } else {
                    // Page `j` as descriptor `j` of the frame's table, linked to `j + 1`, the
                    // last without a link (§2.7.5.3.2); the ring descriptor points at the
                    // table.
                    // One arm per length (2..=MAX_FRAME_BUFFERS pages): straight-line stores
                    // with the flags as constants (a loop tested `j + 1 == m` per entry).
                    const _: () = assert!(MAX_FRAME_BUFFERS == 4, "one arm per length");
                    // (A cut leaves `lens[0]` whole when it sends two pages or more: the first
                    // descriptor is the first used element's, header included.)
                    let w = |j: usize, last: bool| {
                        let len = if j == 0 {
                            used0 as u32
                        } else {
                            u32::from(lens[j])
                        };
                        ind.write(id, j, pages[j].addr(), len, last);
                    };
                    match m {
                        2 => {
                            w(0, false);
                            w(1, true);
                        }
                        3 => {
                            w(0, false);
                            w(1, false);
                            w(2, true);
                        }
                        _ => {
                            w(0, false);
                            w(1, false);
                            w(2, false);
                            w(3, true);
                        }
                    }
                    txr.post_indirect_at(ta, id, ind.phys(id), m);
                    tx.tx_pages[slot] = TxSlot {
                        pfn: pfn0,
                        tag: TxTag::chain(owner),
                    };
                }
                ta += 1;
                continue;
            }
            lens[0] += NET_HDR_LEN as u16;
            // The TX chain: page `j` as descriptor `x`, continuing in the burst's next free
            // one, the last without a link (§2.7.5). Not in-order: this run left the mode.
            let head_id = tx.tx.nth_free_any(&tc, d);
            let mut x = head_id;
            for j in 0..m - 1 {
                let nx = tx.tx.nth_free_any(&tc, d + j + 1);
                txr.write_desc(x, pages[j].addr(), u32::from(lens[j]), Some(nx));
                tx.tx_pages[usize::from(x) & (QUEUE_SIZE - 1)] = TxSlot {
                    pfn: pages[j],
                    tag: TxTag::one(owner),
                };
                x = nx;
            }
            txr.write_desc(x, pages[m - 1].addr(), u32::from(lens[m - 1]), None);
            tx.tx_pages[usize::from(x) & (QUEUE_SIZE - 1)] = TxSlot {
                pfn: pages[m - 1],
                tag: TxTag::one(owner),
            };
            if m > 1 {
                tx.tx_pages[usize::from(head_id) & (QUEUE_SIZE - 1)].tag = TxTag::chain(owner);
                chains += 1;
            }
            txr.avail_nth(&tc, ta - ta0, head_id);
            ta += 1;
            d += m;
        }
        let (taken, r, a) = (u - u0, ra - ra0, ta - ta0);
        let d = if IND { a } else { d };
        SplitQueue::<H, QUEUE_SIZE>::popped(&mut rc, taken);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut rc, r, 0);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut tc, a, d);
        self.rx.set_cursor(rc);
        tx.tx.set_cursor(tc);
        self.rx_posted -= rare.emptied;
        self.rx_unpublished += r;
        if self.rx_unpublished >= RX_PUBLISH_BATCH {
            self.rx_publish();
        }
        if a > 0 {
            tx.tx.publish();
            tx.tx_posted += pg;
            tx.tx_chains += if IND { a - singles } else { chains };
        }
        ChainRun {
            stats: BurstStats {
                buffers: taken,
                rx_frames: frames,
                rx_bytes,
                tx_frames: a,
                tx_bytes: rx_bytes - rare.unsent_bytes,
            },
            taken,
            multi: taken > frames,
            budget,
        }
    }

    /// The chain loop met an unsound element (or had no page) at the `pages.len()`-th page of
    /// the frame whose first used element is at position `u`: give back the fresh pages its
    /// slots got and put the received ones (`pages`) back in the table, last first (so a slot
    /// seen twice ends with its first page), as if the loop had not touched the frame (the
    /// staged re-posts past the run's count are never published; the general run re-posts
    /// the slots again). The slots' ids are read from the used ring again (not kept per
    /// page: the device writes an element once, before `used->idx` covers it, §2.7.8).
    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) fn chain_undo(
        &mut self,
        rxr: Rings<QUEUE_SIZE>,
        u: usize,
        pages: &[Pfn],
        ops: &mut impl ForwardOps,
    ) {
        for (j, &p) in pages.iter().enumerate().rev() {
            let id = rxr.pop_at(u + j).0 as usize & (QUEUE_SIZE - 1);
            let new = core::mem::replace(&mut self.rx_pages[id], p);
            ops.give_back(new, GiveBack::Unused);
        }
    }

    /// The used elements [`VirtioNet::forward_burst_chains`] may take: those in the used ring
    /// now (`used->idx` read again: the cold path; at least what the burst's caller saw), and
    /// no more than a ring's worth over the whole burst, of which `popped` were taken before
    /// (a device may have moved `used->idx` on behind them meanwhile: a hostile one by any
    /// amount, the `used_ring` fuzz target's `burst_past_ring`).
    #[inline(always)]
    pub(in crate::virtio_net) fn chain_elems(&self, popped: usize) -> usize {
        self.rx
            .used_ready(&self.rx.cursor())
            .min(QUEUE_SIZE.saturating_sub(popped))
    }

    /// A run stopped at a multi-buffer frame that became whole: send it, then go on with the
    /// `left` used elements after it (stopping and sending again at every such frame), so
    /// frames leave in the order they came. `popped`: the used elements the burst took before
    /// (so that the whole burst takes at most [`QUEUE_SIZE`]). Returns what it did.
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) unsafe fn forward_rest<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        mut left: usize,
        mut popped: usize,
        owner: TxOwner,
        ops: &mut O,
    ) -> BurstStats {
        let mut st = BurstStats::default();
        loop {
            if self.rx_chain.n > 0 && self.rx_skip == 0 {
                self.forward_chain(tx, owner, ops, &mut st);
            }
            if left == 0 {
                return st;
            }
            if self.rx_chain_mode {
                // Multi-page frames flow: the rest of the burst in the chain-aware loop (the
                // common path pays nothing for the check: it is here, after a stop).
                let elems = self.chain_elems(popped);
                // SAFETY: the caller's contract, passed on.
                let rest = unsafe { self.forward_burst_chains(tx, left, elems, owner, ops) };
                st.add(&rest);
                return st;
            }
            // SAFETY: the caller's contract, passed on.
            let (run, stop) = unsafe { self.forward_run::<O, false>(tx, left, owner, ops, false) };
            st.add(&run);
            let took = if stop > 0 { stop } else { left };
            left -= took;
            popped += took;
        }
    }

    /// Empty `self.rx_chain`, handing the pages of the frame it held (one that can no longer
    /// complete) back as [`RxStatus::Continuation`].
    pub(in crate::virtio_net) fn rx_chain_give_back(&mut self, ops: &mut impl ForwardOps) {
        let chain = core::mem::take(&mut self.rx_chain);
        for &p in &chain.pages[..chain.n] {
            ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
        }
    }

    /// Send the multi-buffer frame just collected (`self.rx_chain`, whole) as the dataplane
    /// decides ([`ForwardOps::forward_multi`]): a descriptor chain of its pages on `tx`'s TX
    /// ring (§2.7.5; the head tagged [`TxTag::chain`]), or given back. Adds to `st`.
    #[cold]
    #[inline(never)]
    pub(in crate::virtio_net) fn forward_chain<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        owner: TxOwner,
        ops: &mut O,
        st: &mut BurstStats,
    ) {
        if !self.rx_chain.whole() {
            // Orphaned (a continuation went through `rx_burst`): not a frame, never sent.
            self.rx_chain_give_back(ops);
            return;
        }
        let n = core::mem::replace(&mut self.rx_chain.n, 0).min(MAX_FRAME_BUFFERS);
        let RxChain { pages, lens, .. } = self.rx_chain;
        let (pages, lens) = (&pages[..n], &lens[..n]);
        let mut len = 0;
        for &l in lens {
            len += usize::from(l);
        }
        st.rx_frames += 1;
        st.rx_bytes += len as u64;
        let page = pages[0].addr() as usize as *mut u8;
        // SAFETY: the pages came back from the device (their used elements were popped) and
        // are the driver's; the first holds `NET_HDR_LEN + lens[0] <= PAGE_SIZE` bytes.
        let head =
            unsafe { core::slice::from_raw_parts_mut(page.add(NET_HDR_LEN), usize::from(lens[0])) };
        let verdict = if len > self.rx_limit {
            give_back_over_limit(ops, pages)
        } else {
            ops.forward_multi(MultiFrame {
                pages,
                lens,
                head,
                len,
                offset: NET_HDR_LEN,
            })
        };
        let send = match verdict {
            RxVerdict::Forward => len,
            RxVerdict::ForwardFirst(k) => k.min(len),
            RxVerdict::Consumed => return,
        };
        // The pages and their bytes, cut at `send`; pages past the cut are not sent.
        let mut parts = [(NO_PAGE, 0usize); MAX_FRAME_BUFFERS];
        let mut left = send;
        let mut used = 0;
        for i in 0..n {
            let take = usize::from(lens[i]).min(left);
            if take == 0 && i > 0 {
                ops.give_back(pages[i], GiveBack::Rx(RxStatus::Continuation));
                continue;
            }
            left -= take;
            parts[used] = (pages[i], take);
            used += 1;
        }
        // SAFETY: the pages are ours (`Forward`) and hold the bytes `parts` says;
        // `tx_chain` gives them to the device or leaves them ours.
        if !unsafe { tx.tx_chain(&parts[..used], owner) } {
            ops.give_back(pages[0], GiveBack::TxFull);
            for &(pfn, _) in &parts[1..used] {
                ops.give_back(pfn, GiveBack::Rx(RxStatus::Continuation));
            }
            return;
        }
        st.tx_frames += 1;
        st.tx_bytes += send as u64;
    }
}
