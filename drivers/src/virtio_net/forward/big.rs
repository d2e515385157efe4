//! The fused burst with big RX buffers ([`VirtioNet::set_rx_buffer_pages`]): every RX
//! descriptor is an indirect table of `k` device-writable pages (VIRTIO 1.2 §2.7.5.3), so a
//! frame of up to `k` × 4,096 − 12 bytes arrives as **one** used element (`num_buffers` 1,
//! §5.1.6.4) instead of a chain of mergeable buffers: no continuation elements to pop, check
//! and re-post, and no chain collection across elements.
//!
//! Per used element the loop ([`VirtioNet::forward_run_big`]) reads the used length, which
//! says how many pages the device wrote (`⌈len / 4096⌉`: every page but the last is filled,
//! the header in the first), re-posts the slot with a fresh page in each of those table
//! entries (one store each, and one avail entry: the ring descriptor keeps pointing at its
//! table), and the pages the frame did not reach stay posted. A one-page frame goes to
//! [`ForwardOps::forward`] and out as one TX descriptor, exactly as on the one-page loop; a
//! frame of several pages to [`ForwardOps::forward_multi`] and out as one indirect TX
//! descriptor (the TX tables of `tx_reclaim_into_multi`). Anything the loop does not take
//! (a bad id or length, `num_buffers` above 1, no fresh page for the slot, no TX descriptor,
//! a frame of several pages for a TX ring without tables) goes, one element at a time, to
//! [`VirtioNet::forward_big_slow`], which handles every case through the queues' ordinary
//! calls.

use super::{
    chain_verdict, fresh_page, one_page_send, tx_full, zero_net_hdr, BurstStats, ForwardOps,
    GiveBack, MultiFrame, Rare, RxVerdict,
};
use crate::virtio_net::{
    rx_used_faulty_in, Hal, NetFeatures, Pfn, RxChain, RxStatus, Transport, TxBuf, TxOwner, TxSlot,
    TxTag, VirtioNet, MAX_FRAME_BUFFERS, NET_HDR_LEN, NO_PAGE, NUM_BUFFERS_OFFSET, PAGE_SIZE,
    QUEUE_SIZE, RX_PUBLISH_BATCH,
};
use crate::virtqueue::{Indirect, SplitQueue, INDIRECT_MAX};
use mm::PAGE_SHIFT;

/// What one [`VirtioNet::forward_run_big`] did.
struct BigRun {
    /// Its counts.
    stats: BurstStats,
    /// Used elements taken (each a frame, or a frame's worth of nothing).
    taken: usize,
    /// It stopped at an element it does not take: the next one goes to
    /// [`VirtioNet::forward_big_slow`].
    slow: bool,
    /// That element as the loop read it (`(id, len)`; in the fault image with its fault
    /// applied once) when its id or length sent it there: the slow path takes it as is, not
    /// read (and faulted) again, so an injected fault is handled exactly once.
    next: Option<(u32, u32)>,
}

/// The bytes of each of a big buffer's first `touched` pages that a frame of `used` bytes
/// (virtio-net header included, `used <= touched * PAGE_SIZE`) fills, the first without the
/// header: every page but the last is full (the device fills the buffer in order). Entries
/// past `touched` are a page's worth and never read.
#[inline(always)]
fn big_lens(used: usize, touched: usize) -> [u16; MAX_FRAME_BUFFERS] {
    let mut lens = [PAGE_SIZE as u16; MAX_FRAME_BUFFERS];
    lens[0] = (PAGE_SIZE - NET_HDR_LEN) as u16;
    lens[touched - 1] = (used - (touched - 1) * PAGE_SIZE) as u16;
    if touched == 1 {
        lens[0] = (used - NET_HDR_LEN) as u16;
    }
    lens
}

/// One frame of [`VirtioNet::forward_run_big`]: its used element (`id`, `used` bytes with
/// the header), its first page, the RX avail position its slot is re-posted at (`ra`), and
/// the TX avail position and descriptor it is posted at (`ta`, `tid`), with `owner`.
#[derive(Copy, Clone)]
struct BigFrame {
    id: u16,
    used: usize,
    pfn0: Pfn,
    ra: usize,
    ta: usize,
    tid: u16,
    owner: TxOwner,
}

/// What [`VirtioNet::forward_run_big`]'s frames put on the TX ring (counted where each is
/// posted, so the loop carries no per-frame test for them).
#[derive(Default)]
struct BigPosted {
    /// Pages.
    pages: usize,
    /// Frames posted as an indirect table (several pages): `VirtioNet::tx_chains`.
    tables: usize,
}

/// A slot the loop could not refill whole: the fresh pages already stored in its table
/// entries `0..pages.len()` go back to the pool and the frame's own `pages` go back in, as if
/// the loop had not touched the slot.
#[cold]
#[inline(never)]
fn big_undo(
    rind: Indirect<QUEUE_SIZE, INDIRECT_MAX>,
    id: u16,
    pages: &[Pfn],
    ops: &mut impl ForwardOps,
) {
    for (j, &p) in pages.iter().enumerate() {
        let fresh = Pfn::from_addr(rind.addr(id, j));
        rind.set_addr(id, j, p.addr());
        ops.give_back(fresh, GiveBack::Unused);
    }
}

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// [`VirtioNet::forward_burst`] with big RX buffers: up to `ready` used elements (one per
    /// frame), through [`VirtioNet::forward_run_big`] and, for each element it leaves,
    /// [`VirtioNet::forward_big_slow`].
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn forward_burst_big<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        ready: usize,
        owner: TxOwner,
        ops: &mut O,
    ) -> BurstStats {
        let mut st = BurstStats::default();
        let mut left = ready;
        while left > 0 {
            // `num_buffers` means something only with mergeable buffers (`VirtioNet::num_buffers`:
            // QEMU before 7.2.18 and 10.0 leaves it unwritten without them): a copy of the loop
            // each way.
            let mrg = self.features.contains(NetFeatures::MRG_RXBUF);
            // SAFETY: the caller's contract, passed on (`left` used elements are there).
            let run = unsafe {
                match (tx.tx.is_in_order(), mrg) {
                    (true, true) => self.forward_run_big::<O, true, true>(tx, left, owner, ops),
                    (false, true) => self.forward_run_big::<O, false, true>(tx, left, owner, ops),
                    (true, false) => self.forward_run_big::<O, true, false>(tx, left, owner, ops),
                    (false, false) => self.forward_run_big::<O, false, false>(tx, left, owner, ops),
                }
            };
            st.add(&run.stats);
            left -= run.taken;
            if !run.slow || left == 0 {
                break;
            }
            // SAFETY: as above.
            let one = unsafe { self.forward_big_slow(tx, owner, ops, run.next) };
            st.add(&one);
            left -= 1;
        }
        st
    }

    /// The loop of [`VirtioNet::forward_burst_big`] over `ready` used elements known to be
    /// there; see the module's documentation. Carries ring positions as the one-page loop
    /// does (`u` used, `ra` RX re-post, `ta` TX post); every element it takes is re-posted,
    /// so re-posts equal elements taken.
    ///
    /// `IN_ORDER`: the TX ring is in in-order mode; `MRG`: `VIRTIO_NET_F_MRG_RXBUF` was
    /// negotiated, so `num_buffers` is read (the caller checked both; one copy of the loop
    /// each, so none tests them per frame).
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[inline(never)]
    unsafe fn forward_run_big<O: ForwardOps, const IN_ORDER: bool, const MRG: bool>(
        &mut self,
        tx: &mut Self,
        ready: usize,
        owner: TxOwner,
        ops: &mut O,
    ) -> BigRun {
        let k = self.rx_buf_pages;
        // RX tables are always there (big buffers have them); a TX ring without (another
        // device, without `VIRTIO_F_INDIRECT_DESC`) sends every frame through the slow path
        // (descriptor chains).
        let (Some(rind), Some(tind)) = (self.rx.indirect(), tx.tx.indirect()) else {
            return BigRun {
                stats: BurstStats::default(),
                taken: 0,
                slow: true,
                next: None,
            };
        };
        debug_assert!(IN_ORDER == tx.tx.is_in_order());
        let mut rc = self.rx.cursor();
        let mut tc = tx.tx.cursor();
        let tx_free = SplitQueue::<H, QUEUE_SIZE>::cursor_free(&tc);
        let rxr = self.rx.rings();
        let mut rare = Rare::default();
        let u0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_used(&rc));
        let ra0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&rc).0);
        let ta0 = usize::from(SplitQueue::<H, QUEUE_SIZE>::cursor_parts(&tc).0);
        // Each frame takes at most one TX descriptor: the run stops where the ring's free
        // ones run out (the slow path drops the next frame, `TxFull`). A continuation still
        // expected (`rx_skip`, after a frame larger than the buffer) is the slow path's too.
        let room = if self.rx_skip == 0 {
            ready.min(tx_free)
        } else {
            0
        };
        let end = u0 + room;
        // The used-length test's bound: a frame of at least `O::MIN_FRAME` bytes within the
        // buffer's `k` pages and the port's frame limit (`rx_limit`, the MTU)
        // (`used - NET_HDR_LEN - O::MIN_FRAME <= lim`; no wrap below). A longer frame goes to
        // the slow path, which hands it back too big (`classify_rx`, `forward_chain`).
        let lim = (k * PAGE_SIZE)
            .min(self.rx_limit + NET_HDR_LEN)
            .saturating_sub(NET_HDR_LEN + O::MIN_FRAME);
        let (mut u, mut ta) = (u0, ta0);
        let mut posted = BigPosted::default();
        // The frames' used lengths, headers included (they come off once, after the loop).
        let mut rx_used = 0u64;
        let mut slow = room < ready;
        let mut next = None;
        debug_assert!(MRG == self.features.contains(NetFeatures::MRG_RXBUF));
        while u < end {
            let (id, used) = rx_used_faulty_in(rxr.pop_at(u), k * PAGE_SIZE);
            let used = used as usize;
            let pfn0 = match self.rx_pages.get(id as usize) {
                Some(&p)
                    if p != NO_PAGE && used.wrapping_sub(NET_HDR_LEN + O::MIN_FRAME) <= lim =>
                {
                    p
                }
                _ => {
                    // (Only the fault image rolls faults on a read: elsewhere the slow path
                    // reads the element again, and the loop carries nothing for it.)
                    slow = true;
                    if mm::fault::ENABLED {
                        next = Some((id, used as u32));
                    }
                    break;
                }
            };
            // SAFETY: the device is done with the slot (its used element is in the ring) and
            // the driver owns its pages; offset 10..12 is inside the first.
            let nb = u16::from_le_bytes(unsafe {
                (pfn0.addr() as usize as *mut u8)
                    .add(NUM_BUFFERS_OFFSET)
                    .cast::<[u8; 2]>()
                    .read_unaligned()
            });
            // The pages the frame reaches (1..=k: `used <= k * PAGE_SIZE` above).
            let touched = (used + PAGE_SIZE - 1) >> PAGE_SHIFT;
            if MRG && nb > 1 {
                // (Read again by the slow path: no fault was injected in it here, or the
                // tests above would have sent it there; a new roll is a fresh read's.)
                slow = true;
                break;
            }
            let f = BigFrame {
                id: id as u16,
                used,
                pfn0,
                ra: ra0 + (u - u0),
                ta,
                tid: tx.tx.nth_free_at(&tc, ta - ta0, ta, IN_ORDER),
                owner,
            };
            // One copy of the frame's work per page count, its loops unrolled (a loop over a
            // count known only at run time re-read the arrays and tested per page). Three
            // pages first: a 9,000-byte MTU's full-size frames, the bulk of jumbo traffic.
            let p = &mut posted;
            let out = match touched {
                3 => self.big_frame::<O, 3>(tx, f, rind, tind, ops, &mut rare, p),
                1 => self.big_frame_one(tx, f, rind, ops, &mut rare, p),
                2 => self.big_frame::<O, 2>(tx, f, rind, tind, ops, &mut rare, p),
                _ => self.big_frame::<O, 4>(tx, f, rind, tind, ops, &mut rare, p),
            };
            let Some(sent) = out else {
                slow = true;
                break;
            };
            u += 1;
            rx_used += used as u64;
            ta += usize::from(sent);
        }
        let (taken, a) = (u - u0, ta - ta0);
        let rx_bytes = rx_used - (NET_HDR_LEN * taken) as u64;
        SplitQueue::<H, QUEUE_SIZE>::popped(&mut rc, taken);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut rc, taken, 0);
        SplitQueue::<H, QUEUE_SIZE>::staged(&mut tc, a, a);
        self.rx.set_cursor(rc);
        tx.tx.set_cursor(tc);
        self.rx_unpublished += taken;
        if self.rx_unpublished >= RX_PUBLISH_BATCH {
            self.rx_publish();
        }
        if a > 0 {
            tx.tx.publish();
            tx.tx_posted += posted.pages;
            tx.tx_chains += posted.tables;
        }
        BigRun {
            stats: BurstStats {
                buffers: taken,
                rx_frames: taken,
                rx_bytes,
                tx_frames: a,
                tx_bytes: rx_bytes - rare.unsent_bytes,
            },
            taken,
            slow,
            next,
        }
    }

    /// [`VirtioNet::big_frame`] for a frame that reached only the first page (a small frame on
    /// a jumbo port): the one-page loop's work, with the fresh page stored in the slot's table
    /// entry 0 instead of the descriptor.
    #[inline(always)]
    fn big_frame_one<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        f: BigFrame,
        rind: Indirect<QUEUE_SIZE, INDIRECT_MAX>,
        ops: &mut O,
        rare: &mut Rare,
        posted: &mut BigPosted,
    ) -> Option<bool> {
        // No page for the slot: nothing stored yet, the slow path takes the element.
        let fresh = fresh_page(ops)?;
        rind.set_addr(f.id, 0, fresh.addr());
        self.rx_pages[usize::from(f.id) & (QUEUE_SIZE - 1)] = fresh;
        self.rx.rings().avail_at(f.ra, f.id);
        let page0 = f.pfn0.addr() as usize as *mut u8;
        let len = f.used - NET_HDR_LEN;
        // SAFETY: the page is ours now; `used <= PAGE_SIZE` (one page reached).
        let frame = unsafe { core::slice::from_raw_parts_mut(page0.add(NET_HDR_LEN), len) };
        let Some(send) = one_page_send(ops.forward(f.pfn0, frame), len, rare) else {
            return Some(false);
        };
        if mm::fault::hit(mm::fault::Fault::TxRingFull) {
            // (The fault image finds the ring full now and then.)
            tx_full(f.pfn0, send, ops, rare);
            return Some(false);
        }
        // SAFETY: the page is still ours (`Forward`).
        unsafe { zero_net_hdr(page0) };
        // (The same four lines as `big_frame`'s post of a frame cut to one page: a helper
        // shared by both cost 2 guest instructions per 3-page frame, register allocation.)
        tx.tx
            .rings()
            .post_at(f.ta, f.tid, f.pfn0.addr(), (NET_HDR_LEN + send) as u32);
        tx.tx_pages[usize::from(f.tid) & (QUEUE_SIZE - 1)] = TxSlot {
            pfn: f.pfn0,
            tag: TxTag::one(f.owner),
        };
        posted.pages += 1;
        Some(true)
    }

    /// The work of [`VirtioNet::forward_run_big`] for one frame of `N` pages, `N` ≥ 2 (the
    /// pages its used length reaches; one page is [`VirtioNet::big_frame_one`]'s): `N` fresh
    /// pages into the slot's table and the slot re-posted, the verdict
    /// ([`ForwardOps::forward_multi`]), and the frame posted on `tx` at `f.ta` (one indirect
    /// descriptor; a frame cut to its first page as a plain one), counted in `posted`.
    /// Returns whether it was posted, or `None`, with nothing done, when no fresh page refills
    /// the slot whole (the slow path takes the element).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn big_frame<O: ForwardOps, const N: usize>(
        &mut self,
        tx: &mut Self,
        f: BigFrame,
        rind: Indirect<QUEUE_SIZE, INDIRECT_MAX>,
        tind: Indirect<QUEUE_SIZE, INDIRECT_MAX>,
        ops: &mut O,
        rare: &mut Rare,
        posted: &mut BigPosted,
    ) -> Option<bool> {
        const { assert!(N >= 2 && N <= MAX_FRAME_BUFFERS) };
        // (`MaybeUninit` would save the stores past `N`; they are never read: `chain_verdict`
        // and the TX table look at `..N` only.)
        let mut pages = [f.pfn0; MAX_FRAME_BUFFERS];
        #[allow(clippy::needless_range_loop)] // (an iterator chain was not inlined: a call)
        for j in 1..N {
            pages[j] = Pfn::from_addr(rind.addr(f.id, j));
        }
        // A fresh page into the table for every page the frame took; a slot no page
        // refills whole gets its own pages back (`big_undo`) and goes to the slow path.
        let mut fresh0 = NO_PAGE;
        for j in 0..N {
            match fresh_page(ops) {
                Some(p) => {
                    rind.set_addr(f.id, j, p.addr());
                    if j == 0 {
                        fresh0 = p;
                    }
                }
                None => {
                    big_undo(rind, f.id, &pages[..j], ops);
                    return None;
                }
            }
        }
        self.rx_pages[usize::from(f.id) & (QUEUE_SIZE - 1)] = fresh0;
        // The slot again, its descriptor unchanged (it points at its table).
        self.rx.rings().avail_at(f.ra, f.id);
        let page0 = f.pfn0.addr() as usize as *mut u8;
        let len = f.used - NET_HDR_LEN;
        let mut lens = big_lens(f.used, N);
        // SAFETY: the first page is ours now; it holds `NET_HDR_LEN + lens[0]` bytes.
        let head = unsafe {
            core::slice::from_raw_parts_mut(page0.add(NET_HDR_LEN), usize::from(lens[0]))
        };
        // (`len <= rx_limit`: the loop's used-length test.)
        let m = match ops.forward_multi(MultiFrame {
            pages: &pages[..N],
            lens: &lens[..N],
            head,
            len,
            offset: NET_HDR_LEN,
        }) {
            RxVerdict::Forward => N,
            v => chain_verdict(v, len, N, &pages, &mut lens, ops, rare),
        };
        if m == 0 {
            return Some(false);
        }
        if mm::fault::hit(mm::fault::Fault::TxRingFull) {
            // (The fault image finds the ring full now and then.)
            let mut sent = 0;
            for &l in &lens[..m] {
                sent += usize::from(l);
            }
            tx_full(f.pfn0, sent, ops, rare);
            for &p in &pages[1..m] {
                ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
            }
            return Some(false);
        }
        // SAFETY: the first page is still ours (`Forward`).
        unsafe { zero_net_hdr(page0) };
        let slot = usize::from(f.tid) & (QUEUE_SIZE - 1);
        let txr = tx.tx.rings();
        if m == 1 {
            // Cut to its first page: a plain descriptor.
            txr.post_at(
                f.ta,
                f.tid,
                f.pfn0.addr(),
                u32::from(lens[0]) + NET_HDR_LEN as u32,
            );
            tx.tx_pages[slot] = TxSlot {
                pfn: f.pfn0,
                tag: TxTag::one(f.owner),
            };
            posted.pages += 1;
        } else {
            // Page `j` as entry `j` of the frame's TX table (§2.7.5.3.2), the first with the
            // header, the last without a link. The whole frame (`m == N`, the common case) in
            // a loop of constant count, unrolled; a cut one in a loop of its own.
            let w = |j: usize, last: bool| {
                let l = u32::from(lens[j]) + if j == 0 { NET_HDR_LEN as u32 } else { 0 };
                tind.write(f.tid, j, pages[j].addr(), l, last);
            };
            if m == N {
                for j in 0..N {
                    w(j, j + 1 == N);
                }
            } else {
                for j in 0..m.min(N) {
                    w(j, j + 1 == m);
                }
            }
            txr.post_indirect_at(f.ta, f.tid, tind.phys(f.tid), m);
            tx.tx_pages[slot] = TxSlot {
                pfn: f.pfn0,
                tag: TxTag::chain(f.owner),
            };
            posted.pages += m;
            posted.tables += 1;
        }
        Some(true)
    }

    /// One used element [`VirtioNet::forward_run_big`] did not take, through the queues'
    /// ordinary calls: a bad id (counted `bad_token`, skipped); otherwise the slot's pages the
    /// used length reaches are the frame's, and the slot is re-posted with fresh pages there
    /// (or, with too few fresh pages, released: its other pages and the fresh ones go back
    /// as [`GiveBack::Unused`]). Then the frame: a continuation of a frame larger than the
    /// buffer (`num_buffers` > 1 earlier) or a malformed element is handed back as
    /// [`VirtioNet::rx_burst`] would classify it; a frame shorter than
    /// [`ForwardOps::MIN_FRAME`] is shown to `forward` (which consumes it); a one-page frame
    /// is forwarded and posted with [`VirtioNet::tx_burst`]; a frame of several pages through
    /// [`VirtioNet::forward_chain`] (an indirect descriptor or a chain). A frame with no TX
    /// room is handed back ([`GiveBack::TxFull`]).
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[cold]
    #[inline(never)]
    unsafe fn forward_big_slow<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        owner: TxOwner,
        ops: &mut O,
        next: Option<(u32, u32)>,
    ) -> BurstStats {
        let mut st = BurstStats::default();
        let k = self.rx_buf_pages;
        // The element as the loop read it, if it did (read again, its fault would be rolled
        // again: the fault image's counts would not match).
        let popped = self
            .rx
            .pop_used()
            .map(|e| next.unwrap_or_else(|| rx_used_faulty_in(e, k * PAGE_SIZE)));
        let Some((id, used)) = popped else {
            return st;
        };
        let Some(pfn0) = self.take_rx_page(id) else {
            return st;
        };
        st.buffers = 1;
        let used = used as usize;
        let slot = self.big_slot_refill(id as u16, pfn0, used, || fresh_page(ops));
        for &p in slot.unused() {
            ops.give_back(p, GiveBack::Unused);
        }
        let (touched, pages) = (slot.touched, slot.pages);
        // The frame: a continuation, malformed, or too big for the buffer is handed back.
        let b = self.classify_rx(pfn0, slot.first_len);
        if b.status != RxStatus::Ok {
            ops.give_back(pfn0, GiveBack::Rx(b.status));
            for &p in &pages[1..touched] {
                ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
            }
            return st;
        }
        let len = used - NET_HDR_LEN;
        st.rx_frames = 1;
        if touched > 1 {
            // `forward_chain` counts the frame (and its bytes) itself.
            st.rx_frames = 0;
            self.rx_chain = RxChain {
                pages,
                lens: big_lens(used, touched),
                n: touched,
                want: touched,
            };
            self.forward_chain(tx, owner, ops, &mut st);
            return st;
        }
        st.rx_bytes = len as u64;
        // SAFETY: the page is ours (popped, taken out of the table); `used <= PAGE_SIZE`.
        let frame = unsafe {
            core::slice::from_raw_parts_mut((pfn0.addr() as usize as *mut u8).add(NET_HDR_LEN), len)
        };
        let send = match ops.forward(pfn0, frame) {
            RxVerdict::Forward => len,
            RxVerdict::ForwardFirst(n) => n.min(len),
            RxVerdict::Consumed => return st,
        };
        if len < O::MIN_FRAME || send == 0 {
            // `forward` broke `MIN_FRAME`'s contract (or cut the frame to nothing): never
            // sent, the page goes back.
            ops.give_back(pfn0, GiveBack::Rx(RxStatus::Malformed));
            return st;
        }
        let b = TxBuf {
            pfn: pfn0,
            len: send,
            owner,
        };
        // SAFETY: the page is ours (`Forward`) and holds `send` frame bytes after the header;
        // `tx_burst` gives it to the device or leaves it ours.
        if unsafe { tx.tx_burst(&[b]) } == 1 {
            st.tx_frames = 1;
            st.tx_bytes = send as u64;
        } else {
            ops.give_back(pfn0, GiveBack::TxFull);
        }
        st
    }
}
