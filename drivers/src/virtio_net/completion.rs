//! TX completion, one loop per caller and buffer mode sharing the page table walk: into
//! [`TxDone`]s (the staged path), through a closure ([`VirtioNet::tx_reclaim`]), straight into
//! a page_pool's alloc cache ([`VirtioNet::tx_reclaim_into`], with the chain-aware variants
//! while frames of several pages are in flight); and taking every page back at teardown.

use super::{
    tx_used_id_faulty, Hal, NotOwner, Pfn, Transport, TxDone, TxOwner, TxSlot, TxTag, VirtioNet,
    MAX_FRAME_BUFFERS, NO_PAGE, QUEUE_SIZE,
};
use crate::virtqueue::{Cursor, SplitQueue};

/// TX completions of another owner in one [`VirtioNet::tx_reclaim_into`]: (index into its
/// `room`, owner tag).
pub(in crate::virtio_net) type ForeignTx = heapless::Vec<(u16, TxOwner), QUEUE_SIZE>;

/// Note a completion of another owner (rare: the router's own frames, another core's pages).
#[cold]
#[inline(never)]
pub(in crate::virtio_net) fn note_foreign(foreign: &mut ForeignTx, at: usize, owner: TxOwner) {
    // At most QUEUE_SIZE completions per call: always room.
    let _ = foreign.push((at as u16, owner));
}

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// [`VirtioNet::take_rx_page`] for the TX table: the page and its owner tag.
    #[inline(always)]
    pub(in crate::virtio_net) fn take_tx_page(&mut self, id: u32) -> Option<TxSlot> {
        let Some(slot) = self.tx_pages.get_mut(id as usize) else {
            self.bad_token();
            return None;
        };
        let pfn = core::mem::replace(&mut slot.pfn, NO_PAGE);
        if pfn == NO_PAGE {
            self.bad_token();
            return None;
        }
        Some(TxSlot { pfn, tag: slot.tag })
    }

    /// Pop completed TX buffers (their pages are the caller's again) into `out`; returns how
    /// many pages were written.
    ///
    /// A frame sent as a chain of pages comes back as one entry per page, all with its owner
    /// tag; while chains are in flight, one completion is taken per [`MAX_FRAME_BUFFERS`]
    /// entries of `out` (the most pages a completion can bring), so `out` never overflows. The
    /// staged path's completion is the fused path's loop (`VirtioNet::tx_reclaim_max`).
    pub fn tx_complete(&mut self, out: &mut [TxDone]) -> usize {
        let per = if self.tx_chains == 0 {
            1
        } else {
            MAX_FRAME_BUFFERS
        };
        let mut n = 0;
        self.tx_reclaim_max(out.len() / per, |pfn, owner| {
            if let Some(o) = out.get_mut(n) {
                *o = TxDone { pfn, owner };
                n += 1;
            }
        });
        n
    }

    /// Reset the device ([`VirtioNet::reset_device`]) and hand back every page still posted on
    /// either ring through `f`. Only for the handle that owns the device; other pairs' handles
    /// use [`VirtioNet::take_pages`] once the owner has reset it.
    ///
    /// # Errors
    /// [`NotOwner`] (nothing is taken) on a handle that does not own the device.
    pub fn reclaim(&mut self, f: impl FnMut(Pfn)) -> Result<(), NotOwner> {
        if !self.reset_device() {
            return Err(NotOwner);
        }
        // SAFETY: just reset.
        unsafe { self.take_pages(f) };
        Ok(())
    }

    /// Hand back every page still posted on either ring through `f`.
    ///
    /// # Safety
    /// The device must have been reset ([`VirtioNet::reset_device`] on the owning handle,
    /// possibly on another core, with the reset ordered before this call): otherwise it may
    /// still write into the pages.
    pub unsafe fn take_pages(&mut self, mut f: impl FnMut(Pfn)) {
        let (k, rind) = (self.rx_buf_pages, self.rx.indirect());
        for (id, slot) in self.rx_pages.iter_mut().enumerate() {
            let pfn = core::mem::replace(slot, NO_PAGE);
            if pfn == NO_PAGE {
                continue;
            }
            f(pfn);
            if let (true, Some(ind)) = (k > 1, rind) {
                // A big RX buffer's other pages are in its table only.
                for j in 1..k {
                    f(Pfn::from_addr(ind.addr(id as u16, j)));
                }
            }
        }
        let (txr, ind) = (self.tx.rings(), self.tx.indirect());
        for (id, slot) in self.tx_pages.iter_mut().enumerate() {
            let pfn = core::mem::replace(&mut slot.pfn, NO_PAGE);
            if pfn == NO_PAGE {
                continue;
            }
            f(pfn);
            if !slot.tag.is_chain() {
                continue;
            }
            if let (Some(m), Some(ind)) = (txr.desc_indirect(id as u16), ind) {
                // An indirect frame's other pages are in its table only (§2.7.5.3).
                for j in 1..m.min(MAX_FRAME_BUFFERS) {
                    f(Pfn::from_addr(ind.addr(id as u16, j)));
                }
            }
        }
        let chain = core::mem::take(&mut self.rx_chain);
        for &pfn in &chain.pages[..chain.n] {
            f(pfn);
        }
        self.rx_skip = 0;
        self.rx_posted = 0;
        self.tx_posted = 0;
        self.tx_chains = 0;
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
    pub(in crate::virtio_net) fn tx_chain_rest(
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
    pub(in crate::virtio_net) fn tx_ready(&self, c: &Cursor, room: usize) -> usize {
        self.tx
            .used_ready(c)
            .min(room)
            .min(QUEUE_SIZE - SplitQueue::<H, QUEUE_SIZE>::cursor_free(c))
    }

    /// Hand every completed TX page back to `f` with the owner tag it was sent with (one
    /// `used->idx` read for the batch; completion order is not assumed). Returns how many.
    #[inline(always)]
    pub fn tx_reclaim(&mut self, f: impl FnMut(Pfn, TxOwner)) -> usize {
        self.tx_reclaim_max(usize::MAX, f)
    }

    /// [`VirtioNet::tx_reclaim`] taking at most `max` completions (the rest wait for the next
    /// call); returns how many were taken. The one loop of the closure-driven completion, for
    /// the staged path ([`VirtioNet::tx_complete`]) and the fused one alike.
    #[inline(always)]
    pub(in crate::virtio_net) fn tx_reclaim_max(
        &mut self,
        max: usize,
        mut f: impl FnMut(Pfn, TxOwner),
    ) -> usize {
        let mut c = self.tx.cursor();
        let ready = self.tx.used_ready(&c).min(max);
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
    pub(in crate::virtio_net) fn tx_reclaim_stray(
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
    pub(in crate::virtio_net) fn tx_reclaim_into_multi(
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
    pub(in crate::virtio_net) fn tx_reclaim_into_chains(
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
    pub(in crate::virtio_net) fn tx_chain_elsewhere(
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
