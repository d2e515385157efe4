//! The fused poll-mode path (issue 12): one RX burst forwarded straight onto another port's TX
//! ring ([`VirtioNet::forward_burst`]) and TX completions handed back page by page
//! ([`VirtioNet::tx_reclaim`]), with no intermediate arrays of buffers.
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
//! A buffer that is not one whole frame (a multi-buffer frame's first buffer, its
//! continuations, a malformed length or `num_buffers`) leaves the fast path: it is classified
//! as [`VirtioNet::rx_burst`] would and handed back ([`ForwardOps::give_back`]).

use crate::virtqueue::{Cursor, SplitQueue};

use super::{
    Hal, Pfn, RxStatus, Transport, TxDone, VirtioNet, NET_HDR_LEN, NO_PAGE, NUM_BUFFERS_OFFSET,
    PAGE_SIZE, QUEUE_SIZE, RX_PUBLISH_BATCH,
};

/// What [`ForwardOps::forward`] decided for one frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RxVerdict {
    /// Transmit it, as rewritten in place, on the burst's TX port (zero copy).
    Forward,
    /// [`RxVerdict::Forward`] of its first `n` bytes only (a router cuts Ethernet padding;
    /// `n` is capped at the frame's length).
    ForwardFirst(usize),
    /// The dataplane took the page (dropped and recycled it, queued it, staged it for another
    /// port): the burst forgets it.
    Consumed,
}

/// Why [`VirtioNet::forward_burst`] hands a page back through [`ForwardOps::give_back`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum GiveBack {
    /// The TX ring had no free descriptor for a frame [`ForwardOps::forward`] wanted sent:
    /// count `tx_ring_full` on the TX port.
    TxFull,
    /// The buffer carried no whole frame: [`RxStatus::TooBig`], [`RxStatus::Continuation`] or
    /// [`RxStatus::Malformed`] (never [`RxStatus::Ok`]).
    Rx(RxStatus),
}

/// The dataplane's side of [`VirtioNet::forward_burst`]. The burst calls these inside its
/// loop, once per buffer: implementations should be `#[inline]` (`give_back` is the rare path
/// and may be `#[cold]`).
pub trait ForwardOps {
    /// A fresh page for the RX slot just emptied, or `None` (the slot then goes back to the
    /// free list, for a later [`VirtioNet::rx_refill`]). The page becomes the device's. The
    /// slow path: called when [`ForwardOps::rx_page_cached`] had none.
    fn rx_page(&mut self) -> Option<Pfn>;
    /// [`ForwardOps::rx_page`] from the pool's alloc cache only (no refill), the fast path.
    fn rx_page_cached(&mut self) -> Option<Pfn>;
    /// One received frame: `pfn` is its page, `frame` its bytes (`len` bytes after the
    /// virtio-net header; possibly shorter than an Ethernet header). Rewrite it in place and
    /// return [`RxVerdict::Forward`] (or [`RxVerdict::ForwardFirst`]), or take the page and return [`RxVerdict::Consumed`].
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict;
    /// A received page the burst does not transmit, and why. The page is the dataplane's.
    fn give_back(&mut self, pfn: Pfn, why: GiveBack);
}

/// What one [`VirtioNet::forward_burst`] did, summed over the burst (the dataplane adds these
/// to its counters once per burst).
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct BurstStats {
    /// RX buffers completed (used elements with a valid id), whatever became of them.
    pub buffers: usize,
    /// Whole frames received (the buffers [`ForwardOps::forward`] saw).
    pub rx_frames: usize,
    /// Their bytes (virtio-net header excluded).
    pub rx_bytes: u64,
    /// Frames posted on the TX ring.
    pub tx_frames: usize,
    /// Their bytes (virtio-net header excluded).
    pub tx_bytes: u64,
}

/// A burst's rare exits ([`VirtioNet::forward_burst`]).
#[derive(Default)]
struct Rare {
    /// Used elements whose id the driver had not posted.
    skipped: usize,
    /// Buffers that were not one whole frame (handed back).
    rejected: usize,
    /// Frames received but not sent (consumed, or the TX ring full), and their bytes.
    not_sent: usize,
    not_sent_bytes: u64,
    /// Bytes received but cut before sending (`RxVerdict::ForwardFirst`).
    trimmed: u64,
    /// RX slots left empty (no page).
    emptied: usize,
}

impl Rare {
    #[inline(always)]
    fn not_sent(&mut self, len: usize) {
        self.not_sent += 1;
        self.not_sent_bytes += len as u64;
    }
}

/// TX completions of another owner in one [`VirtioNet::tx_reclaim_into`]: (index into its
/// `room`, owner tag).
type ForeignTx = heapless::Vec<(u16, u32), QUEUE_SIZE>;

/// Note a completion of another owner (rare: the router's own frames, another core's pages).
#[cold]
#[inline(never)]
fn note_foreign(foreign: &mut ForeignTx, at: usize, owner: u32) {
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

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Receive up to `max` buffers on this handle's RX queue and transmit the frames the
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
        owner: u32,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        let mut rc = self.rx.cursor();
        let ready = self.rx.used_ready(&rc).min(max);
        if ready == 0 {
            return BurstStats::default();
        }
        let mut ops = ops();
        let mut tc = tx.tx.cursor();
        // Only the byte count is kept per frame; the frame counts follow from the rare exits,
        // counted in `rare` (in memory: the cold helpers take it by reference, so it holds
        // no register in the loop).
        let mut rare = Rare::default();
        let mut rx_bytes = 0u64;
        // The loop carries four counters (`i` used elements, `r` RX re-posts, `t` TX posts,
        // the byte sum); the cursors stay fixed until after it, so their fields need no
        // register (one loop with moving cursors spilled a dozen values per frame).
        let tx_room = SplitQueue::<H, QUEUE_SIZE>::cursor_free(&tc);
        let (mut r, mut t) = (0, 0);
        for i in 0..ready {
            let (id, used) = self.rx.pop_nth(&rc, i);
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
                    self.rx.repost_nth(&rc, r, id as u16, new.addr());
                    self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = new;
                    r += 1;
                }
                None => r += self.rx_refill_slow(&mut rc, r, id, &mut ops, &mut rare),
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
            let whole = self.rx_skip == 0
                && u16::from_le_bytes(num_buffers) <= 1
                && (NET_HDR_LEN..=PAGE_SIZE).contains(&used);
            if !whole && self.rx_not_whole(pfn, used, &mut ops, &mut rare) {
                continue;
            }
            let len = used - NET_HDR_LEN;
            rx_bytes += len as u64;
            // SAFETY: as above: a page of PAGE_SIZE bytes that only this burst reaches now;
            // `NET_HDR_LEN + len <= PAGE_SIZE` (checked); the slice dies before the page is
            // posted or handed on.
            let frame = unsafe { core::slice::from_raw_parts_mut(page.add(NET_HDR_LEN), len) };
            let send = match ops.forward(pfn, frame) {
                RxVerdict::Forward => len,
                RxVerdict::ForwardFirst(n) => {
                    let n = n.min(len);
                    rare.trimmed += (len - n) as u64;
                    n
                }
                RxVerdict::Consumed => {
                    rare.not_sent(len);
                    continue;
                }
            };
            if t == tx_room {
                tx_full(pfn, send, &mut ops, &mut rare);
                continue;
            }
            // SAFETY: the page is still ours (`Forward`); §5.1.6.2: a header of zeros asks for
            // no checksum offload and no segmentation. Two plain stores (8 + 4 bytes).
            unsafe {
                page.cast::<u64>().write_unaligned(0);
                page.add(8).cast::<u32>().write_unaligned(0);
            }
            let token = tx
                .tx
                .push_nth(&tc, t, pfn.addr(), (NET_HDR_LEN + send) as u32);
            tx.tx_pages[usize::from(token) & (QUEUE_SIZE - 1)] = TxDone { pfn, owner };
            t += 1;
        }
        SplitQueue::<H, QUEUE_SIZE>::popped(&mut rc, ready);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut rc, r, 0);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut tc, t, t);
        let Rare {
            skipped,
            rejected,
            not_sent,
            not_sent_bytes,
            trimmed,
            emptied,
        } = rare;
        self.rx.set_cursor(rc);
        tx.tx.set_cursor(tc);
        let buffers = ready - skipped;
        let rx_frames = buffers - rejected;
        let tx_frames = rx_frames - not_sent;
        self.rx_posted -= emptied;
        self.rx_unpublished += buffers - emptied;
        if self.rx_unpublished >= RX_PUBLISH_BATCH {
            self.rx_publish();
        }
        if tx_frames > 0 {
            tx.tx.publish();
            tx.tx_posted += tx_frames;
        }
        BurstStats {
            buffers,
            rx_frames,
            rx_bytes,
            tx_frames,
            tx_bytes: rx_bytes - not_sent_bytes - trimmed,
        }
    }

    /// The pool's alloc cache was empty for the RX slot `id` just emptied: the slow path
    /// ([`ForwardOps::rx_page`], which may refill from the allocator) re-posts it as the
    /// burst's `r`-th re-post (returns 1), or the slot goes back to the free list (returns 0).
    #[cold]
    #[inline(never)]
    fn rx_refill_slow(
        &mut self,
        rc: &mut Cursor,
        r: usize,
        id: u32,
        ops: &mut impl ForwardOps,
        rare: &mut Rare,
    ) -> usize {
        match ops.rx_page().filter(|&p| p != NO_PAGE) {
            Some(new) => {
                self.rx.repost_nth(rc, r, id as u16, new.addr());
                self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = new;
                1
            }
            None => {
                self.rx_pages[id as usize & (QUEUE_SIZE - 1)] = NO_PAGE;
                self.rx.release_in(rc, id as u16);
                rare.emptied += 1;
                0
            }
        }
    }

    /// A buffer that failed the fast path's whole-frame test: classified as
    /// [`VirtioNet::rx_burst`] would; `true` if it carries no whole frame (handed back).
    #[cold]
    #[inline(never)]
    fn rx_not_whole(
        &mut self,
        pfn: Pfn,
        used: usize,
        ops: &mut impl ForwardOps,
        rare: &mut Rare,
    ) -> bool {
        let b = self.classify_rx(pfn, used);
        if b.status == RxStatus::Ok {
            return false;
        }
        rare.rejected += 1;
        ops.give_back(pfn, GiveBack::Rx(b.status));
        true
    }

    /// Hand every completed TX page back to `f` with the owner tag it was sent with (one
    /// `used->idx` read for the batch; completion order is not assumed). Returns how many.
    #[inline(always)]
    pub fn tx_reclaim(&mut self, mut f: impl FnMut(Pfn, u32)) -> usize {
        let mut c = self.tx.cursor();
        let ready = self.tx.used_ready(&c);
        let mut skipped = 0;
        for _ in 0..ready {
            let id = self.tx.pop_ready_id(&mut c);
            let Some(done) = self.take_tx_page(id) else {
                skipped += 1;
                continue;
            };
            self.tx.release_in(&mut c, id as u16);
            f(done.pfn, done.owner);
        }
        self.tx.set_cursor(c);
        let n = ready - skipped;
        self.tx_posted -= n;
        n
    }

    /// TX completion straight into a page_pool's alloc cache: completed pages tagged `owner`
    /// are written to the start of `room` (the cache's free part, from
    /// `PagePool::recycle_room`), any other page goes to `other` with its tag. Takes at
    /// most `room.len()` completions (the rest wait for the next call). Returns `(pages
    /// written to room, pages reclaimed)`.
    #[inline(always)]
    pub fn tx_reclaim_into(
        &mut self,
        owner: u32,
        room: &mut [Pfn],
        mut other: impl FnMut(Pfn, u32),
    ) -> (usize, usize) {
        let mut c = self.tx.cursor();
        // Completions beyond what was posted are a broken device's: never more than that.
        let ready = self
            .tx
            .used_ready(&c)
            .min(room.len())
            .min(QUEUE_SIZE - SplitQueue::<H, QUEUE_SIZE>::cursor_free(&c));
        // `k` pages reclaimed (and descriptors released), each written to `room[k]`; those of
        // another owner are noted (cold) and taken out of `room` after the loop.
        let mut k = 0;
        let mut foreign: ForeignTx = heapless::Vec::new();
        for i in 0..ready {
            let id = self.tx.pop_nth_id(&c, i);
            let Some(done) = self.take_tx_page(id) else {
                continue;
            };
            // A valid id not yet completed: it was taken off the free stack, so there is a
            // slot for it (`nfree + k < QUEUE_SIZE`).
            self.tx.release_nth(&c, k, id as u16);
            debug_assert!(k < room.len());
            // SAFETY: `k <= i < ready <= room.len()` (`k` grows at most once per iteration).
            unsafe { *room.get_unchecked_mut(k) = done.pfn };
            if done.owner != owner {
                note_foreign(&mut foreign, k, done.owner);
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
        let total = k;
        self.tx_posted -= total;
        (n, total)
    }
}
