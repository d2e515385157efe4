//! The fused poll-mode path (issue 12): one RX burst forwarded straight onto another port's TX
//! ring ([`VirtioNet::forward_burst`]) and TX completions handed back page by page
//! ([`VirtioNet::tx_reclaim`]), with no intermediate arrays of buffers.
//!
//! This file holds the entry points, the one-page loop (`forward_run::<FAST>`: one copy with the
//! TX ring in in-order mode and room for the burst, one general) and the helpers every loop
//! shares; the chain-aware loop (`forward_run_chains::<IND>`) is in `chains`, the big-buffer
//! loop (`forward_run_big::<IN_ORDER, MRG>`) in `big`. Variants are const-generic copies of one
//! body, picked once per burst. TX completion is in `super::completion`.
//!
//! Per received buffer the burst reads the used element (§2.7.8), re-posts the emptied RX
//! descriptor in place with a fresh page (one store to the descriptor's `addr`, one to the
//! avail ring: §2.7.13.2; ixy.rs `rx_batch` does the same), lets the dataplane rewrite the
//! frame ([`ForwardOps::forward`]), zeroes the virtio-net header (§5.1.6.2: no offloads) and
//! posts the page on the TX ring. `used->idx` is read once per burst, each ring's
//! `avail->idx` written once per burst (§2.7.13.3), counters come back summed
//! ([`BurstStats`]). Completion order is never assumed: every used element's `id` is looked up
//! in the driver's page table (a device that returns an id it was not given is counted as
//! `bad_token` and skipped).
//!
//! A buffer that is not one whole frame leaves the fast path (`#[cold]`). A frame the device
//! spread over several buffers (`VIRTIO_NET_F_MRG_RXBUF`, §5.1.6.4: `num_buffers` in the first
//! buffer's header, the header only in the first buffer) is collected page by page, up to
//! [`MAX_FRAME_BUFFERS`] pages; once whole, the burst stops, shows it to the dataplane
//! ([`ForwardOps::forward_multi`], headers in the first page) and sends it as one descriptor
//! chain of the same pages (§2.7.5, zero copy), then goes on with the remaining used elements,
//! so frames leave in the order they came. A malformed buffer or a frame of more pages is
//! handed back ([`ForwardOps::give_back`]). With big RX buffers (a jumbo MTU,
//! [`VirtioNet::set_rx_buffer_pages`]) every frame is one used element of an RX buffer of
//! several pages and the burst runs `forward_burst_big` instead (module `big`).

use crate::nic::{give_back_over_limit, whole_frame_bound};
use crate::virtqueue::{Cursor, Rings, SplitQueue};

mod big;
mod chains;

use super::{
    rx_used_faulty, BurstStats, ForwardOps, GiveBack, Hal, MultiFrame, Pfn, RxChain, RxStatus,
    RxVerdict, Transport, TxOwner, TxSlot, TxTag, VirtioNet, MAX_FRAME_BUFFERS, NET_HDR_LEN,
    NO_PAGE, NUM_BUFFERS_OFFSET, PAGE_SIZE, QUEUE_SIZE, RX_PUBLISH_BATCH,
};

/// A burst's rare exits ([`VirtioNet::forward_burst`]). The common counts (RX re-posts, TX
/// posts, bytes received) are the loop's own locals; this holds only what the cold paths
/// change, so the burst zeroes and reads back five words.
#[derive(Default)]
struct Rare {
    /// Used elements whose id the driver had not posted.
    skipped: usize,
    /// Buffers that were not one whole frame (handed back).
    rejected: usize,
    /// Bytes received but not sent: frames consumed or dropped with the TX ring full, and
    /// the bytes a `RxVerdict::ForwardFirst` cut.
    unsent_bytes: u64,
    /// RX slots left empty (no page).
    emptied: usize,
    /// When a multi-buffer frame became whole: the used elements taken, up to and including
    /// its last (0: the run took all it was given).
    stop: usize,
}

impl Rare {
    #[inline(always)]
    fn not_sent(&mut self, len: usize) {
        self.unsent_bytes += len as u64;
    }
}

/// What [`VirtioNet::rx_not_whole`] made of a buffer that failed the whole-frame test.
#[derive(Copy, Clone, Eq, PartialEq)]
enum NotWhole {
    /// It is a whole frame after all (the slow classification said [`RxStatus::Ok`]).
    Whole,
    /// Taken (handed back, or kept for a multi-buffer frame): go on with the next buffer.
    Skip,
    /// It completed a multi-buffer frame: stop the run so the frame is sent before the
    /// buffers that follow it.
    Stop,
    /// A whole frame shorter than [`ForwardOps::MIN_FRAME`], already shown to
    /// [`ForwardOps::forward`] (which consumed it) and counted as not sent: the run counts
    /// its bytes as received and goes on.
    Short,
}

/// A chain cut to its first `send` bytes (`RxVerdict::ForwardFirst`, `send` below the
/// frame's length): the bytes of the page the cut falls in become the rest; returns how many
/// pages are sent (at least 1: the first holds the header).
#[cold]
#[inline(never)]
fn chain_cut(lens: &mut [u16; MAX_FRAME_BUFFERS], send: usize) -> usize {
    let mut left = send;
    for (j, l) in lens.iter_mut().enumerate() {
        if usize::from(*l) >= left {
            *l = left as u16;
            return j + 1;
        }
        left -= usize::from(*l);
    }
    MAX_FRAME_BUFFERS
}

/// A chain-loop frame's verdict other than a whole [`RxVerdict::Forward`]: returns how many
/// of its `k` pages are sent (0: the dataplane took them all). A cut (`ForwardFirst` below
/// the frame's `len`) shortens `lens` ([`chain_cut`]) and hands the pages past it back;
/// bytes not sent are counted in `rare`.
#[cold]
#[inline(never)]
fn chain_verdict(
    verdict: RxVerdict,
    len: usize,
    k: usize,
    pages: &[Pfn; MAX_FRAME_BUFFERS],
    lens: &mut [u16; MAX_FRAME_BUFFERS],
    ops: &mut impl ForwardOps,
    rare: &mut Rare,
) -> usize {
    match verdict {
        RxVerdict::Forward => k,
        RxVerdict::ForwardFirst(n) if n >= len => k,
        RxVerdict::ForwardFirst(n) => {
            let m = chain_cut(lens, n).min(k);
            rare.not_sent(len - n);
            for &p in &pages[m..k] {
                // Past the cut: not sent.
                ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
            }
            m
        }
        RxVerdict::Consumed => {
            rare.not_sent(len);
            0
        }
    }
}

/// A fresh page for an RX slot the chain loop re-posts: the alloc cache, else the pool's
/// slow path ([`ForwardOps::rx_page`]).
#[inline(always)]
fn fresh_page(ops: &mut impl ForwardOps) -> Option<Pfn> {
    match ops.rx_page_cached() {
        Some(p) => Some(p),
        None => fresh_page_slow(ops),
    }
}

/// [`fresh_page`] with the alloc cache empty.
#[cold]
#[inline(never)]
fn fresh_page_slow(ops: &mut impl ForwardOps) -> Option<Pfn> {
    ops.rx_page().filter(|&p| p != NO_PAGE)
}

/// The TX ring had no descriptor for a frame to forward: hand its page back.
#[cold]
#[inline(never)]
fn tx_full(pfn: Pfn, len: usize, ops: &mut impl ForwardOps, rare: &mut Rare) {
    rare.not_sent(len);
    ops.give_back(pfn, GiveBack::TxFull);
}

/// A one-page frame's verdict: the bytes of its `len` to send, or `None` when the dataplane
/// took the page (`Consumed`); bytes not sent are counted in `rare`.
#[inline(always)]
fn one_page_send(verdict: RxVerdict, len: usize, rare: &mut Rare) -> Option<usize> {
    match verdict {
        RxVerdict::Forward => Some(len),
        RxVerdict::ForwardFirst(n) => {
            let n = n.min(len);
            rare.not_sent(len - n);
            Some(n)
        }
        RxVerdict::Consumed => {
            rare.not_sent(len);
            None
        }
    }
}

/// Zero the 12-byte `virtio_net_hdr` at the start of a page about to be sent (§5.1.6.2: no
/// checksum offload, no segmentation): two plain stores (8 + 4 bytes).
///
/// # Safety
/// `page` is the start of a page the driver owns and the device does not read yet.
#[inline(always)]
unsafe fn zero_net_hdr(page: *mut u8) {
    // SAFETY: per the contract: 12 bytes at the start of the page are ours to write.
    unsafe {
        page.cast::<u64>().write_unaligned(0);
        page.add(8).cast::<u32>().write_unaligned(0);
    }
}

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Receive up to `max` frames on this handle's RX queue (buffers, until a frame of several
    /// buffers turns on the chain-aware loop, which counts such a frame once) and transmit the frames the
    /// [`ForwardOps`] made by `ops` (only when a buffer is waiting) forward on `tx`'s TX queue, zero copy, each tagged with `owner` (handed back by
    /// [`VirtioNet::tx_reclaim`]; the dataplane uses the page_pool id the pages came from).
    /// Each emptied RX slot is re-posted at once with a page from [`ForwardOps::rx_page`];
    /// re-posted buffers are published in batches of 32 (as [`VirtioNet::rx_burst_refill`];
    /// [`VirtioNet::rx_publish`] flushes the rest), the TX posts once at the end. No kick: see
    /// [`VirtioNet::kick`]. `tx` may be this very handle's peer port or another device.
    ///
    /// # Safety
    /// Every page [`ForwardOps::rx_page`] returns must be an order-0 RAM page the caller owns
    /// and gives to the device until it comes back (an RX burst, [`VirtioNet::take_pages`]);
    /// a page given back by [`ForwardOps::forward`] as `Forward` belongs to `tx`'s TX ring
    /// until [`VirtioNet::tx_reclaim`], [`VirtioNet::tx_complete`] or `take_pages` returns it.
    #[inline(always)]
    pub unsafe fn forward_burst<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        let pending = self.rx_pending();
        // SAFETY: the caller's contract, passed on.
        unsafe { self.forward_burst_pending(tx, pending, max, owner, ops) }
    }

    /// [`VirtioNet::forward_burst`] with `pending`, the RX ring's [`VirtioNet::rx_pending`],
    /// read by the caller with nothing popped since (a poll iteration reads `used->idx` once:
    /// to skip an empty port and to size the burst). Clamped to the ring's size and to `max`; a
    /// count the device has since overtaken only leaves the newer buffers for the next burst.
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[inline(always)]
    pub unsafe fn forward_burst_pending<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        pending: usize,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        let ready = SplitQueue::<H, QUEUE_SIZE>::ready_of(pending).min(max);
        if ready == 0 {
            return BurstStats::default();
        }
        let mut ops = ops();
        // The common case, decided once per burst: one-page RX buffers, the TX ring in
        // in-order mode with room for every buffer of the burst. Its loop then tests neither
        // per frame (the run's TX posts never exceed its used elements); anything else takes
        // the general loop, out of line, which also runs big RX buffers (a jumbo MTU's: no
        // call site of their own here, where it cost the one-page path ~20 instructions per
        // poll iteration in register allocation).
        let fast = self.rx_buf_pages == 1 && tx.tx.is_in_order() && tx.tx.free_descs() >= ready;
        let (mut st, stop) = if fast {
            // SAFETY: the caller's contract, passed on; the TX ring is in in-order mode with
            // at least `ready` free descriptors (checked just above).
            unsafe { self.forward_run::<O, true>(tx, ready, owner, &mut ops, true) }
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.forward_run_general(tx, ready, owner, &mut ops) }
        };
        if stop > 0 {
            // (Returned, not added through `&mut st`: that kept the burst's counts in memory
            // and copied them through the stack on the common path too.)
            // SAFETY: as above.
            let rest = unsafe { self.forward_rest(tx, ready - stop, stop, owner, &mut ops) };
            st.add(&rest);
        }
        st
    }

    /// [`VirtioNet::forward_run`] at a burst's start when the TX ring is not in in-order
    /// mode or has fewer free descriptors than the burst has buffers: the loop that tests
    /// both per frame, out of line (the poll iteration keeps one copy of the fast loop per
    /// port). With big RX buffers, the whole burst ([`VirtioNet::forward_burst_big`]).
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[inline(never)]
    unsafe fn forward_run_general<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        ready: usize,
        owner: TxOwner,
        ops: &mut O,
    ) -> (BurstStats, usize) {
        if self.rx_buf_pages > 1 {
            // Big RX buffers (a port with a jumbo MTU): one used element per frame.
            // SAFETY: the caller's contract, passed on.
            return (unsafe { self.forward_burst_big(tx, ready, owner, ops) }, 0);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { self.forward_run::<O, false>(tx, ready, owner, ops, true) }
    }

    /// [`VirtioNet::forward_burst`]'s loop over `ready` used elements known to be there.
    /// Returns its counts and, when an element completed a multi-buffer frame
    /// (`self.rx_chain`, now whole), how many elements it took (the run stops there); else 0.
    ///
    /// `FAST`: the caller checked that the TX ring is in in-order mode and has at least
    /// `ready` free descriptors, so the loop tests neither per frame.
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`], and with `FAST` the TX ring is in in-order mode with
    /// at least `ready` free descriptors.
    #[inline(always)]
    unsafe fn forward_run<O: ForwardOps, const FAST: bool>(
        &mut self,
        tx: &mut Self,
        ready: usize,
        owner: TxOwner,
        ops: &mut O,
        burst_start: bool,
    ) -> (BurstStats, usize) {
        let mut rc = self.rx.cursor();
        let tc = tx.tx.cursor();
        // Only the byte count is kept per frame; the frame counts follow from the rare exits,
        // counted in `rare` (in memory: the cold helpers take it by reference, so it holds
        // no register in the loop).
        let mut rare = Rare::default();
        // The sum of the received frames' used lengths (header included: one add per frame;
        // the headers come off once, after the loop, from the frame count).
        let mut rx_used = 0u64;
        // The loop carries four values (three ring positions, below, and the byte sum); the
        // cursors stay fixed until after it, so their fields need no register (one loop with
        // moving cursors spilled a dozen values per frame).
        let tx_room = SplitQueue::<H, QUEUE_SIZE>::cursor_free(&tc);
        let (rxr, txr) = (self.rx.rings(), tx.tx.rings());
        // The whole-frame test's length bound, 0 while a continuation is expected (then no
        // buffer passes: the cold path takes it). Not a flag: LLVM knows a flag is set on the
        // fast path and stored the constant back every frame; the bound it cannot fold.
        // The bound also keeps frames shorter than `O::MIN_FRAME` off the fast path (the test
        // is on `used - NET_HDR_LEN - O::MIN_FRAME`), so `forward` needs no length test of
        // its own there (an l2 runt test, 2 instructions per frame).
        // The port's frame limit (`rx_fits`: the MTU, at most the page) joins the same test,
        // read from `self` at the burst's start and on the cold path (no register held through
        // the loop): a longer frame takes the cold path, which hands it back `TooBig`.
        let hdr_room = |nic: &Self| {
            if nic.rx_skip == 0 {
                whole_frame_bound(nic.rx_fits, O::MIN_FRAME)
            } else {
                0
            }
        };
        let mut room = hdr_room(self);
        debug_assert!(!FAST || (tx.tx.is_in_order() && tx_room >= ready));
        let tx_in_order = FAST || tx.tx.is_in_order();
        // The loop carries ring positions, not counts: `u` the used element
        // (`last_used + i`), `ra` the RX re-post's avail slot (`avail_idx + r`), `ta` the TX
        // post's (`avail_idx + t`), so no cursor field is reloaded per frame to add to.
        let u0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_used(&rc));
        let ra0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&rc).0);
        let ta0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&tc).0);
        let ta_full = ta0 + tx_room;
        let (mut ra, mut ta) = (ra0, ta0);
        for u in u0..u0 + ready {
            let (id, used) = rx_used_faulty(rxr.pop_at(u));
            // The page behind the id (`take_rx_page`, with the slot's one store below: the
            // new page, or NO_PAGE when none refills it).
            let pfn = match self.rx_pages.get(id as usize) {
                Some(&p) if p != NO_PAGE => p,
                _ => {
                    self.bad_token();
                    rare.skipped += 1;
                    continue;
                }
            };
            match ops.rx_page_cached() {
                Some(new) => {
                    debug_assert!(new != NO_PAGE);
                    rxr.repost_at(ra, id as u16, new.addr());
                    self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = new;
                    ra += 1;
                }
                None => ra += self.rx_refill_slow_at(&mut rc, ra, id, ops, &mut rare),
            }
            let used = used as usize;
            let page = pfn.addr() as usize as *mut u8;
            // SAFETY: the device is done with the page (its used element was popped) and the
            // driver owns it; the identity mapping covers it; offset 10..12 is inside it.
            let num_buffers = unsafe {
                page.add(NUM_BUFFERS_OFFSET)
                    .cast::<[u8; 2]>()
                    .read_unaligned()
            };
            // One branch for the three tests (`&`, not `&&`): one buffer, a length that fits
            // the page, and no continuation expected (`room` 0: kept in a local, only the
            // cold path below changes `rx_skip`).
            let whole = (u16::from_le_bytes(num_buffers) <= 1)
                & (used.wrapping_sub(NET_HDR_LEN + O::MIN_FRAME) < room);
            if !whole {
                if burst_start && u == u0 && self.rx_chain_mode {
                    // Multi-page frames flow: the whole burst in the chain-aware loop (the
                    // test costs the common path nothing here). Nothing is staged but the
                    // first slot's re-post: its page goes back, the received one into the
                    // table again (the cursor `rc` is dropped unchanged).
                    let new =
                        core::mem::replace(&mut self.rx_pages[id as usize & (QUEUE_SIZE - 1)], pfn);
                    if new != NO_PAGE {
                        ops.give_back(new, GiveBack::Unused);
                    }
                    // SAFETY: the caller's contract, passed on.
                    return (
                        unsafe {
                            self.forward_burst_chains(tx, ready, self.chain_elems(0), owner, ops)
                        },
                        0,
                    );
                }
                let nw = self.rx_not_whole(pfn, used, u - u0, ops, &mut rare);
                room = hdr_room(self);
                match nw {
                    NotWhole::Whole => {}
                    NotWhole::Skip => continue,
                    NotWhole::Stop => break,
                    NotWhole::Short => {
                        rx_used += used as u64;
                        continue;
                    }
                }
            }
            let len = used - NET_HDR_LEN;
            debug_assert!(len >= O::MIN_FRAME);
            // SAFETY: both ways here bound the length: the fast test (`used - NET_HDR_LEN -
            // O::MIN_FRAME < room`, `room` at most `PAGE_SIZE - NET_HDR_LEN - O::MIN_FRAME +
            // 1`, so no wrap) and `rx_not_whole`, which answers `Whole` only for
            // `len >= O::MIN_FRAME` (`Short` below it). So `forward` may rely on it with no
            // test of its own.
            unsafe { core::hint::assert_unchecked(len >= O::MIN_FRAME) };
            rx_used += used as u64;
            // SAFETY: as above: a page of PAGE_SIZE bytes that only this burst reaches now;
            // `NET_HDR_LEN + len <= PAGE_SIZE` (checked); the slice dies before the page is
            // posted or handed on.
            let frame = unsafe { core::slice::from_raw_parts_mut(page.add(NET_HDR_LEN), len) };
            let Some(send) = one_page_send(ops.forward(pfn, frame), len, &mut rare) else {
                continue;
            };
            // (The fault image also finds the ring full now and then.)
            // (`FAST`: `t <= i < ready <= tx_room`.)
            if (!FAST && ta == ta_full) || mm::fault::hit(mm::fault::Fault::TxRingFull) {
                tx_full(pfn, send, ops, &mut rare);
                continue;
            }
            // SAFETY: the page is still ours (`Forward`).
            unsafe { zero_net_hdr(page) };
            let token = tx.tx.nth_free_at(&tc, ta - ta0, ta, tx_in_order);
            txr.post_at(ta, token, pfn.addr(), (NET_HDR_LEN + send) as u32);
            tx.tx_pages[usize::from(token) & (QUEUE_SIZE - 1)] = TxSlot {
                pfn,
                tag: TxTag::one(owner),
            };
            ta += 1;
        }
        // (`ra0` from the cursor again, not held through the loop: one register more for it.)
        let ra0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&rc).0);
        let (r, t) = (ra - ra0, ta - ta0);
        let done = if rare.stop > 0 { rare.stop } else { ready };
        let Rare {
            skipped,
            rejected,
            unsent_bytes,
            emptied,
            stop,
        } = rare;
        // `r` re-posts (every valid id but the emptied slots), `t` TX posts (every whole
        // frame but those consumed or refused): both counted by the loop, so the cursors go
        // back without clamps or derived counts.
        self.rx.set_burst_cursor(&rc, done, r);
        tx.tx.set_posted(&tc, t);
        let buffers = done - skipped;
        self.rx_posted -= emptied;
        self.rx_unpublished += r;
        if self.rx_unpublished >= RX_PUBLISH_BATCH {
            self.rx_publish();
        }
        if t > 0 {
            tx.tx.publish();
            tx.tx_posted += t;
        }
        // Every frame counted in `rx_frames` (shown to `forward`, or `Short`) added its used
        // length to `rx_used`, and only those did.
        let rx_frames = buffers - rejected;
        let rx_bytes = rx_used - (NET_HDR_LEN * rx_frames) as u64;
        let st = BurstStats {
            buffers,
            rx_frames,
            rx_bytes,
            tx_frames: t,
            tx_bytes: rx_bytes - unsent_bytes,
        };
        (st, stop)
    }

    /// The pool's alloc cache was empty for the RX slot `id` just emptied (one-page loop): the
    /// slow path ([`ForwardOps::rx_page`], which may refill from the allocator) re-posts it at
    /// avail position `ra` (`avail_idx` + the burst's re-posts so far; returns 1), or the slot
    /// goes back to the free list (returns 0).
    #[cold]
    #[inline(never)]
    fn rx_refill_slow_at(
        &mut self,
        rc: &mut Cursor,
        ra: usize,
        id: u32,
        ops: &mut impl ForwardOps,
        rare: &mut Rare,
    ) -> usize {
        match ops.rx_page().filter(|&p| p != NO_PAGE) {
            Some(new) => {
                self.rx.rings().repost_at(ra, id as u16, new.addr());
                self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = new;
                1
            }
            None => {
                self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = NO_PAGE;
                self.rx.release_in_stack(rc, id as u16);
                rare.emptied += 1;
                0
            }
        }
    }

    /// A buffer (the run's `i`-th used element) that failed the fast path's whole-frame test:
    /// a whole frame after all ([`NotWhole::Whole`]); a page of a multi-buffer frame, kept in
    /// `self.rx_chain` ([`NotWhole::Stop`] when it was the last); or no frame, handed back (classified as
    /// [`VirtioNet::rx_burst`] would).
    #[cold]
    #[inline(never)]
    fn rx_not_whole<O: ForwardOps>(
        &mut self,
        pfn: Pfn,
        used: usize,
        i: usize,
        ops: &mut O,
        rare: &mut Rare,
    ) -> NotWhole {
        if self.rx_skip > 0 && self.rx_chain.collecting() {
            // A continuation of the frame being collected (§5.1.6.4: frame bytes from offset
            // 0, no header).
            self.rx_skip -= 1;
            rare.rejected += 1;
            if used == 0 || used > PAGE_SIZE || !self.rx_chain.push(pfn, used as u16) {
                // The device broke the frame: drop what was collected, and the rest of it.
                ops.give_back(pfn, GiveBack::Rx(RxStatus::Malformed));
                self.rx_chain_give_back(ops);
                return NotWhole::Skip;
            }
            if self.rx_skip > 0 {
                return NotWhole::Skip;
            }
            rare.stop = i + 1;
            return NotWhole::Stop;
        }
        if self.rx_chain.n > 0 {
            // A frame held from before that can no longer complete (its continuations went
            // another way, e.g. through `rx_burst`, which does not collect): its pages go
            // back, not lost, before this buffer is classified.
            self.rx_chain_give_back(ops);
        }
        let b = self.classify_rx(pfn, used);
        if b.status == RxStatus::Ok {
            let len = used - NET_HDR_LEN;
            if len >= O::MIN_FRAME {
                return NotWhole::Whole;
            }
            // Shorter than the dataplane ever sends (`ForwardOps::MIN_FRAME`): shown to it
            // here, off the fast path, which it drops.
            // SAFETY: the device is done with the page (popped) and the driver owns it; the
            // identity mapping covers it; `NET_HDR_LEN + len = used <= PAGE_SIZE` (Ok).
            let frame = unsafe {
                core::slice::from_raw_parts_mut(
                    (pfn.addr() as usize as *mut u8).add(NET_HDR_LEN),
                    len,
                )
            };
            if ops.forward(pfn, frame) != RxVerdict::Consumed {
                // `forward` broke `MIN_FRAME`'s contract: the page goes back, not on the ring.
                ops.give_back(pfn, GiveBack::Rx(RxStatus::Malformed));
            }
            rare.not_sent(len);
            return NotWhole::Short;
        }
        rare.rejected += 1;
        if b.status == RxStatus::TooBig
            && (1..MAX_FRAME_BUFFERS).contains(&usize::from(self.rx_skip))
        {
            // The first buffer of a frame of `rx_skip + 1` buffers: its header and first bytes.
            // The next bursts run the chain-aware loop.
            self.rx_chain_mode = true;
            self.rx_chain.want = usize::from(self.rx_skip) + 1;
            if !self.rx_chain.push(pfn, (used - NET_HDR_LEN) as u16) {
                // Not reached (the chain is empty and wants at least two): never lost.
                ops.give_back(pfn, GiveBack::Rx(RxStatus::Malformed));
            }
            return NotWhole::Skip;
        }
        ops.give_back(pfn, GiveBack::Rx(b.status));
        NotWhole::Skip
    }
}
