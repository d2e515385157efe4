//! The fused poll-mode path (issue 12): one RX burst forwarded straight onto another port's TX
//! ring ([`VirtioNet::forward_burst`]) and TX completions handed back page by page
//! ([`VirtioNet::tx_reclaim`]), with no intermediate arrays of buffers.
//!
//! Past ~800 lines because the fused loops of every buffer mode share private slot-table state
//! with the driver; their split into one file per axis with const-generic variants is open work
//! (issue 32, item 3).
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

use crate::virtqueue::{Cursor, Rings, SplitQueue};

mod big;

use super::{
    rx_used_faulty, tx_used_id_faulty, BurstStats, ForwardOps, GiveBack, Hal, MultiFrame, Pfn,
    RxChain, RxStatus, RxVerdict, Transport, TxOwner, TxSlot, TxTag, VirtioNet, MAX_FRAME_BUFFERS,
    NET_HDR_LEN, NO_PAGE, NUM_BUFFERS_OFFSET, PAGE_SIZE, QUEUE_SIZE, RX_PUBLISH_BATCH,
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

/// What one [`VirtioNet::forward_run_chains`] did.
struct ChainRun {
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

/// TX completions of another owner in one [`VirtioNet::tx_reclaim_into`]: (index into its
/// `room`, owner tag).
type ForeignTx = heapless::Vec<(u16, TxOwner), QUEUE_SIZE>;

/// Note a completion of another owner (rare: the router's own frames, another core's pages).
#[cold]
#[inline(never)]
fn note_foreign(foreign: &mut ForeignTx, at: usize, owner: TxOwner) {
    // At most QUEUE_SIZE completions per call: always room.
    let _ = foreign.push((at as u16, owner));
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
    unsafe fn forward_burst_chains<O: ForwardOps>(
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
    unsafe fn forward_run_chains<O: ForwardOps, const IND: bool>(
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
            let verdict = if k == 1 {
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
    fn chain_undo(
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
    fn chain_elems(&self, popped: usize) -> usize {
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
    unsafe fn forward_rest<O: ForwardOps>(
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
        let hdr_room = |skip: u16| {
            if skip == 0 {
                PAGE_SIZE - NET_HDR_LEN - O::MIN_FRAME + 1
            } else {
                0
            }
        };
        let mut room = hdr_room(self.rx_skip);
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
                room = hdr_room(self.rx_skip);
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
        if b.status == RxStatus::TooBig && usize::from(self.rx_skip) < MAX_FRAME_BUFFERS {
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

    /// Empty `self.rx_chain`, handing the pages of the frame it held (one that can no longer
    /// complete) back as [`RxStatus::Continuation`].
    fn rx_chain_give_back(&mut self, ops: &mut impl ForwardOps) {
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
    fn forward_chain<O: ForwardOps>(
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
        let send = match ops.forward_multi(MultiFrame {
            pages,
            lens,
            head,
            len,
            offset: NET_HDR_LEN,
        }) {
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

    /// Send one frame of several pages on this handle's TX queue outside a fused burst (e.g.
    /// a multi-page frame the router's neighbour queue released): `parts` are the pages in
    /// frame order with the frame bytes in each (the first page's after its
    /// [`NET_HDR_LEN`]-byte header area, zeroed here; the others from offset 0), at most
    /// [`MAX_FRAME_BUFFERS`]; every page tagged `owner` (handed back with it on completion).
    /// Published at once; no kick. Returns `false` (nothing taken: the pages stay the
    /// caller's) when the ring has too few free descriptors or `parts` is empty or too long.
    ///
    /// # Safety
    /// Every page is an order-0 RAM page the caller owns, holding its bytes as said, and is
    /// the device's until a TX completion or [`VirtioNet::take_pages`] returns it.
    #[inline]
    pub unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: TxOwner) -> bool {
        if parts.is_empty() || parts.len() > MAX_FRAME_BUFFERS {
            return false;
        }
        let mut descs = [(0u64, 0u32, false); MAX_FRAME_BUFFERS];
        for (i, &(pfn, len)) in parts.iter().enumerate() {
            let hdr = if i == 0 { NET_HDR_LEN } else { 0 };
            if pfn == NO_PAGE || len == 0 || hdr + len > PAGE_SIZE {
                return false;
            }
            descs[i] = (pfn.addr(), (hdr + len) as u32, false);
        }
        let n = parts.len();
        if n > 1 && self.tx.indirect().is_some() {
            if self.tx.free_descs() == 0 {
                return false;
            }
            // SAFETY: the caller's contract, passed on; one free descriptor (checked).
            unsafe { self.tx_indirect(&descs[..n], parts[0].0, owner) };
            return true;
        }
        self.tx_leave_in_order();
        let page = parts[0].0.addr() as usize as *mut u8;
        // SAFETY: the caller's page (contract); §5.1.6.2: a header of zeros asks for no
        // offload.
        unsafe { core::ptr::write_bytes(page, 0, NET_HDR_LEN) };
        let mut ids = [0u16; MAX_FRAME_BUFFERS];
        if self.tx.push_chain_ids(&descs[..n], &mut ids).is_none() {
            return false;
        }
        for i in 0..n {
            let id = usize::from(ids[i]) & (QUEUE_SIZE - 1);
            let tag = if i == 0 && n > 1 {
                TxTag::chain(owner)
            } else {
                TxTag::one(owner)
            };
            self.tx_pages[id] = TxSlot {
                pfn: parts[i].0,
                tag,
            };
        }
        self.tx.publish();
        self.tx_posted += n;
        if n > 1 {
            self.tx_chains += 1;
        }
        true
    }

    /// [`VirtioNet::tx_chain`] on a ring with indirect tables (§2.7.5.3): the frame's `descs`
    /// (2..=[`MAX_FRAME_BUFFERS`] device-readable buffers, the first, page `first`, starting
    /// with the virtio-net header, zeroed here) in the table of the next free descriptor,
    /// posted as one indirect descriptor in the next avail slot (the ring keeps in-order
    /// mode), tagged [`TxTag::chain`], published.
    ///
    /// # Safety
    /// As [`VirtioNet::tx_chain`], and the ring has a free descriptor.
    unsafe fn tx_indirect(&mut self, descs: &[(u64, u32, bool)], first: Pfn, owner: TxOwner) {
        let Some(ind) = self.tx.indirect() else {
            return;
        };
        // SAFETY: the caller's page (contract); §5.1.6.2: a header of zeros asks for no
        // offload.
        unsafe { core::ptr::write_bytes(first.addr() as usize as *mut u8, 0, NET_HDR_LEN) };
        let mut c = self.tx.cursor();
        let a = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&c).0);
        let id = self.tx.nth_free_at(&c, 0, a, self.tx.is_in_order());
        let n = descs.len().min(MAX_FRAME_BUFFERS);
        for (j, &(addr, len, _)) in descs[..n].iter().enumerate() {
            ind.write(id, j, addr, len, j + 1 == n);
        }
        self.tx.rings().post_indirect_at(a, id, ind.phys(id), n);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut c, 1, 1);
        self.tx.set_cursor(c);
        self.tx_pages[usize::from(id) & (QUEUE_SIZE - 1)] = TxSlot {
            pfn: first,
            tag: TxTag::chain(owner),
        };
        self.tx.publish();
        self.tx_posted += n;
        self.tx_chains += 1;
    }

    /// The rest of a TX frame of several pages whose head (descriptor `head`) the device
    /// completed: for an indirect frame (§2.7.5.3) the other pages from the head's table
    /// (they hold no ring descriptor); for a descriptor chain its other descriptors released
    /// into the cursor `c` (taken and given back by value, so a caller's loop keeps its
    /// cursor in registers). Their pages go to `f` with the chain's owner tag. Returns the
    /// cursor and how many pages. Out of line and cold: the jumbo frames' completion path is
    /// `tx_reclaim_into_chains`; this serves `tx_reclaim` and `tx_complete`, whose one-page
    /// loops keep their registers (the indirect arm inlined there cost the 64-byte path).
    #[cold]
    #[inline(never)]
    pub(super) fn tx_chain_rest(
        &mut self,
        mut c: Cursor,
        head: u16,
        owner: TxOwner,
        f: &mut impl FnMut(Pfn, TxOwner),
    ) -> (Cursor, usize) {
        let mut n = 0;
        let txr = self.tx.rings();
        if let (Some(m), Some(ind)) = (txr.desc_indirect(head), self.tx.indirect()) {
            for j in 1..m.min(MAX_FRAME_BUFFERS) {
                f(Pfn::from_addr(ind.addr(head, j)), owner);
                n += 1;
            }
        } else {
            // The driver linked at most MAX_FRAME_BUFFERS - 1 descriptors after the head;
            // the table's flags say where the chain ends (the device never writes them,
            // §2.7.5).
            let mut id = head;
            for _ in 1..MAX_FRAME_BUFFERS {
                let Some(nx) = txr.desc_next(id) else {
                    break;
                };
                id = nx;
                let slot = &mut self.tx_pages[usize::from(id) & (QUEUE_SIZE - 1)];
                let pfn = core::mem::replace(&mut slot.pfn, NO_PAGE);
                self.tx.release_in_stack(&mut c, id);
                if pfn != NO_PAGE {
                    f(pfn, owner);
                    n += 1;
                }
            }
        }
        self.tx_chains = self.tx_chains.saturating_sub(1);
        self.tx_posted -= n;
        (c, n)
    }

    /// TX completions the device has made that one reclaim pass may take: at most `room`,
    /// and never more than descriptors in flight (a broken device's extra are not trusted).
    #[inline(always)]
    fn tx_ready(&self, c: &Cursor, room: usize) -> usize {
        self.tx
            .used_ready(c)
            .min(room)
            .min(QUEUE_SIZE - SplitQueue::<H, QUEUE_SIZE>::cursor_free(c))
    }

    /// Hand every completed TX page back to `f` with the owner tag it was sent with (one
    /// `used->idx` read for the batch; completion order is not assumed). Returns how many.
    #[inline(always)]
    pub fn tx_reclaim(&mut self, mut f: impl FnMut(Pfn, TxOwner)) -> usize {
        let mut c = self.tx.cursor();
        let ready = self.tx.used_ready(&c);
        let mut skipped = 0;
        for _ in 0..ready {
            let id = tx_used_id_faulty(self.tx.pop_ready_id(&mut c));
            let Some(done) = self.take_tx_page(id) else {
                skipped += 1;
                continue;
            };
            self.tx.release_in(&mut c, id as u16);
            let owner = done.tag.owner();
            if done.tag.is_chain() {
                c = self.tx_chain_rest(c, id as u16, owner, &mut f).0;
                f(done.pfn, owner);
                continue;
            }
            f(done.pfn, owner);
        }
        self.tx.set_cursor(c);
        let n = ready - skipped;
        self.tx_posted -= n;
        self.tx_try_in_order();
        n
    }

    /// TX completion straight into a page_pool's alloc cache: completed pages tagged `owner`
    /// are written to the start of `room` (the cache's free part, from
    /// `PagePool::recycle_room`), any other page goes to `other` with its tag (so does a page
    /// of `owner` that `room` has no space left for, with frames of several pages in flight). Takes at
    /// most `room.len()` completions (the rest wait for the next call), and never writes more
    /// than `room.len()` pages. Returns `(pages written to room, completions taken)`: a frame
    /// of several pages is one completion, so the pages (those in `room` and those given to
    /// `other`) may outnumber the completions, up to [`MAX_FRAME_BUFFERS`] times.
    #[inline(always)]
    pub fn tx_reclaim_into(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        mut other: impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize) {
        if self.tx_chains > 0 {
            return self.tx_reclaim_into_multi(owner, room, other);
        }
        let mut c = self.tx.cursor();
        let txr = self.tx.rings();
        let ready = self.tx_ready(&c, room.len());
        // `k` pages reclaimed (and descriptors released), each written to `room[k]`; those of
        // another owner are noted (cold) and taken out of `room` after the loop.
        let mut k = 0;
        let mut foreign: ForeignTx = heapless::Vec::new();
        let mut i = 0;
        // The id the in-order loop stopped at, read once (a second read could differ: the
        // fault image injects bad ids per read).
        let mut carried = None;
        if self.tx.is_in_order() {
            // In-order mode: the i-th completion should be the oldest descriptor in flight
            // plus i; such a release needs no free-stack store. The first other id (or an
            // empty slot) ends this loop and rebuilds the free stack, with the `k` released
            // here counted free; the loop below then takes that element as usual.
            while i < ready {
                let id = tx_used_id_faulty(txr.pop_nth_id(&c, i));
                if id as usize != self.tx.oldest_in_flight_at(&c, k) {
                    carried = Some(id);
                    break;
                }
                let slot = &mut self.tx_pages[id as usize & (QUEUE_SIZE - 1)];
                let pfn = core::mem::replace(&mut slot.pfn, NO_PAGE);
                if pfn == NO_PAGE {
                    carried = Some(id);
                    break;
                }
                debug_assert!(k < room.len());
                // SAFETY: `k == i < ready <= room.len()`.
                unsafe { *room.get_unchecked_mut(k) = pfn };
                if slot.tag != TxTag::one(owner) {
                    note_foreign(&mut foreign, k, slot.tag.owner());
                }
                k += 1;
                i += 1;
            }
        }
        if let Some(id) = carried {
            k = self.tx_reclaim_stray(&c, k, id, owner, room, &mut foreign);
            i += 1;
        }
        for i in i..ready {
            let id = tx_used_id_faulty(txr.pop_nth_id(&c, i));
            let Some(done) = self.take_tx_page(id) else {
                continue;
            };
            // A valid id not yet completed: it was taken off the free stack, so there is a
            // slot for it (`nfree + k < QUEUE_SIZE`).
            self.tx.release_nth(&c, k, id as u16);
            debug_assert!(k < room.len());
            // SAFETY: `k <= i < ready <= room.len()` (`k` grows at most once per iteration).
            unsafe { *room.get_unchecked_mut(k) = done.pfn };
            if done.tag != TxTag::one(owner) {
                note_foreign(&mut foreign, k, done.tag.owner());
            }
            k += 1;
        }
        let mut n = k;
        // Highest index first: the page moved into a freed slot is then never a foreign one.
        for &(at, tag) in foreign.iter().rev() {
            let at = usize::from(at);
            let pfn = room[at];
            n -= 1;
            room[at] = room[n];
            other(pfn, tag);
        }
        SplitQueue::<H, QUEUE_SIZE>::popped(&mut c, ready);
        SplitQueue::<H, QUEUE_SIZE>::released(&mut c, k);
        self.tx.set_cursor(c);
        self.tx_try_in_order();
        let total = k;
        self.tx_posted -= total;
        (n, total)
    }

    /// The in-order loop of [`VirtioNet::tx_reclaim_into`] met `id` where the oldest
    /// descriptor in flight was due (or a slot with no page): rebuild the free stack with the
    /// `k` released so far counted free, then take `id` as the free-stack loop would (read
    /// once: the fault image injects bad ids per read). Returns `k` after it.
    #[cold]
    #[inline(never)]
    fn tx_reclaim_stray(
        &mut self,
        c: &Cursor,
        k: usize,
        id: u32,
        owner: TxOwner,
        room: &mut [Pfn],
        foreign: &mut ForeignTx,
    ) -> usize {
        let (avail_idx, nfree) = SplitQueue::<H, QUEUE_SIZE>::cursor_parts(c);
        self.tx.materialize_free(avail_idx, nfree + k);
        let Some(done) = self.take_tx_page(id) else {
            return k;
        };
        self.tx.release_nth(c, k, id as u16);
        room[k] = done.pfn;
        if done.tag != TxTag::one(owner) {
            note_foreign(foreign, k, done.tag.owner());
        }
        k + 1
    }

    /// [`VirtioNet::tx_reclaim_into`] while frames of several pages are on the TX ring. With
    /// indirect tables (§2.7.5.3) and the ring in in-order mode, every frame holds one ring
    /// descriptor: this loop takes the completions in order, as the one-page loop does (no
    /// free-stack store), a frame tagged [`TxTag::chain`] with its other pages read
    /// back from its table (the device never writes it, §2.7.5.3.1), each frame's pages
    /// written to `room` while [`MAX_FRAME_BUFFERS`] more fit (`room` past the pages it
    /// reports may be written: the pool's free cache slots). It stops at the first completion it does not
    /// take whole: a frame `room` has no space left for waits for the next call (when `room`
    /// took something); anything else (an id out of order, another owner's page, a
    /// descriptor chain, a frame that fits in no `room`) goes with the rest of the used
    /// elements to [`VirtioNet::tx_reclaim_into_chains`], which handles every case. Without
    /// tables or off in-order mode, that loop from the start. Returns `(pages written to
    /// room, completions taken)`.
    #[cold]
    #[inline(never)]
    fn tx_reclaim_into_multi(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        other: impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize) {
        let (Some(ind), true) = (self.tx.indirect(), self.tx.is_in_order()) else {
            return self.tx_reclaim_into_chains(owner, room, other);
        };
        let mut c = self.tx.cursor();
        let txr = self.tx.rings();
        let ready = self.tx_ready(&c, room.len());
        let cap = room.len();
        // `i` completions taken (descriptors released, in order), `n` pages into `room`,
        // `multi` of the frames of several pages.
        let (mut i, mut n, mut multi) = (0, 0, 0);
        // Whether the loop stopped at a frame `room` has no space left for.
        let mut full = false;
        while i < ready {
            let id = tx_used_id_faulty(txr.pop_nth_id(&c, i));
            if id as usize != self.tx.oldest_in_flight_at(&c, i) {
                break;
            }
            let slot = &mut self.tx_pages[id as usize & (QUEUE_SIZE - 1)];
            let done = *slot;
            let m = if done.tag == TxTag::one(owner) {
                1
            } else if done.tag == TxTag::chain(owner) {
                match txr.desc_indirect(id as u16) {
                    Some(m) if (2..=MAX_FRAME_BUFFERS).contains(&m) => m,
                    _ => break,
                }
            } else {
                break;
            };
            if done.pfn == NO_PAGE {
                break;
            }
            if n + MAX_FRAME_BUFFERS > cap {
                full = n > 0;
                break;
            }
            slot.pfn = NO_PAGE;
            // The head's page, then table entries 1..MAX_FRAME_BUFFERS whatever `m`: fixed
            // stores, no loop; the entries past the frame's `m` pages land in `room` past the
            // `n` it reports (the pool's free cache slots: never read as pages).
            // SAFETY: `n + MAX_FRAME_BUFFERS <= cap = room.len()` (checked just above).
            unsafe {
                let dst = room.as_mut_ptr().add(n);
                dst.write(done.pfn);
                for j in 1..MAX_FRAME_BUFFERS {
                    dst.add(j).write(Pfn::from_addr(ind.addr(id as u16, j)));
                }
            }
            n += m;
            i += 1;
            multi += usize::from(m > 1);
        }
        SplitQueue::<H, QUEUE_SIZE>::popped(&mut c, i);
        SplitQueue::<H, QUEUE_SIZE>::released(&mut c, i);
        self.tx.set_cursor(c);
        self.tx_chains = self.tx_chains.saturating_sub(multi);
        self.tx_posted -= n;
        if i < ready && !full {
            let (n2, taken) = self.tx_reclaim_into_chains(owner, &mut room[n..], other);
            return (n + n2, i + taken);
        }
        self.tx_try_in_order();
        (n, i)
    }

    /// [`VirtioNet::tx_reclaim_into`] while descriptor chains are on the TX ring (frames of
    /// several pages): at most `room.len()` completions; pages tagged `owner` fill `room` in
    /// order, the others (and those `room` has no space for) go to `other` (at most
    /// [`MAX_FRAME_BUFFERS`] × [`QUEUE_SIZE`] pages in all: no more are in flight). A chain is walked through the
    /// descriptor table's `next` fields as the driver wrote them (§2.7.5: the device never
    /// writes the table). Kept apart so the common loop stays as it was (a chain check there
    /// cost ~2 instructions per page). Returns `(pages written to room, completions taken)`
    /// (a chain is one completion).
    #[cold]
    #[inline(never)]
    fn tx_reclaim_into_chains(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        mut other: impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize) {
        let mut c = self.tx.cursor();
        let txr = self.tx.rings();
        let ind = self.tx.indirect();
        // With indirect frames the ring may be in in-order mode: each completion is checked
        // against the oldest descriptor in flight, and the first that differs rebuilds the
        // free stack (as `tx_reclaim_into`'s in-order loop does).
        let mut in_order = self.tx.is_in_order();
        let ready = self.tx_ready(&c, room.len());
        let cap = room.len();
        // A frame whose head is the `n`-th page fits wholly in `room` while `n < fits`.
        let fits = cap.saturating_sub(MAX_FRAME_BUFFERS - 1);
        // `n` pages into `room`, `k` descriptors released, `heads` completions (`chains` of
        // them chains), `elsewhere` pages handed to `other`.
        let (mut n, mut k, mut heads, mut chains, mut elsewhere) = (0, 0, 0, 0, 0);
        for i in 0..ready {
            let id = tx_used_id_faulty(txr.pop_nth_id(&c, i));
            let Some(done) = self.take_tx_page(id) else {
                continue;
            };
            let mut id = id as u16;
            if in_order && usize::from(id) != self.tx.oldest_in_flight_at(&c, k) {
                let (avail_idx, nfree) = SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&c);
                self.tx.materialize_free(avail_idx, nfree + k);
                in_order = false;
            }
            if !in_order {
                // A valid id not yet completed was taken off the free stack: there is a slot.
                self.tx.release_nth(&c, k, id);
            }
            k += 1;
            heads += 1;
            let chain = done.tag.is_chain();
            chains += usize::from(chain);
            let tag = done.tag.owner();
            if tag != owner || n >= fits {
                let (to_room, to_other) = self.tx_chain_elsewhere(
                    &c,
                    &mut k,
                    id,
                    done.pfn,
                    chain,
                    tag == owner,
                    &mut room[n..],
                    tag,
                    &mut other,
                );
                n += to_room;
                elsewhere += to_other;
                continue;
            }
            // SAFETY: every page of the frame fits in `room`: `n < fits`, so
            // `n + MAX_FRAME_BUFFERS <= cap` (checked above).
            unsafe { *room.get_unchecked_mut(n) = done.pfn };
            n += 1;
            if chain {
                if let (Some(m), Some(ind)) = (txr.desc_indirect(id), ind) {
                    // An indirect frame: its other pages from the head's table (§2.7.5.3).
                    for j in 1..m.min(MAX_FRAME_BUFFERS) {
                        // SAFETY: at most MAX_FRAME_BUFFERS pages per frame, and
                        // `n + MAX_FRAME_BUFFERS <= cap` held at its head.
                        unsafe { *room.get_unchecked_mut(n) = Pfn::from_addr(ind.addr(id, j)) };
                        n += 1;
                    }
                    continue;
                }
                // The driver linked at most MAX_FRAME_BUFFERS - 1 descriptors after the head.
                for _ in 1..MAX_FRAME_BUFFERS {
                    let Some(nx) = txr.desc_next(id) else {
                        break;
                    };
                    id = nx & (QUEUE_SIZE as u16 - 1);
                    let pfn = core::mem::replace(&mut self.tx_pages[usize::from(id)].pfn, NO_PAGE);
                    self.tx.release_nth(&c, k, id);
                    k += 1;
                    // SAFETY: at most MAX_FRAME_BUFFERS pages per frame, and
                    // `n + MAX_FRAME_BUFFERS <= cap` held at its head.
                    unsafe { *room.get_unchecked_mut(n) = pfn };
                    n += usize::from(pfn != NO_PAGE);
                }
            }
        }
        SplitQueue::<H, QUEUE_SIZE>::popped(&mut c, ready);
        SplitQueue::<H, QUEUE_SIZE>::released(&mut c, k);
        self.tx.set_cursor(c);
        self.tx_chains = self.tx_chains.saturating_sub(chains);
        self.tx_posted -= n + elsewhere;
        self.tx_try_in_order();
        (n, heads)
    }

    /// One completion of [`VirtioNet::tx_reclaim_into_chains`] that does not go wholly into
    /// `room` (another owner's, or `room` nearly full): its head's page `head_pfn`, then, for
    /// a `chain`, the rest of its descriptors released (as the `*k`-th releases on) and their
    /// pages; each page into `room` while `mine` and it has space, else to `other` with
    /// `tag`. Returns `(pages into room, pages to other)`.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn tx_chain_elsewhere(
        &mut self,
        c: &Cursor,
        k: &mut usize,
        head: u16,
        head_pfn: Pfn,
        chain: bool,
        mine: bool,
        room: &mut [Pfn],
        tag: TxOwner,
        other: &mut impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize) {
        let (mut n, mut o) = (0, 0);
        let mut put = |pfn: Pfn| {
            if mine && n < room.len() {
                room[n] = pfn;
                n += 1;
            } else {
                other(pfn, tag);
                o += 1;
            }
        };
        put(head_pfn);
        let mut id = head;
        let txr = self.tx.rings();
        if let (true, Some(m), Some(ind)) = (chain, txr.desc_indirect(head), self.tx.indirect()) {
            // An indirect frame: its other pages from the head's table (§2.7.5.3).
            for j in 1..m.min(MAX_FRAME_BUFFERS) {
                put(Pfn::from_addr(ind.addr(head, j)));
            }
            return (n, o);
        }
        for _ in 1..if chain { MAX_FRAME_BUFFERS } else { 1 } {
            let Some(nx) = txr.desc_next(id) else {
                break;
            };
            id = nx & (QUEUE_SIZE as u16 - 1);
            let pfn = core::mem::replace(&mut self.tx_pages[usize::from(id)].pfn, NO_PAGE);
            self.tx.release_nth(c, *k, id);
            *k += 1;
            if pfn != NO_PAGE {
                put(pfn);
            }
        }
        (n, o)
    }
}
