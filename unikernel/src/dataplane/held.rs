//! [`Held`], a frame a network function owns (kept by its `Keep` verdict, or built in a page
//! from `Ctx::alloc`) until it hands it on, and [`Stash`], frames it holds across poll
//! iterations under small handles (waiting for a neighbour to resolve, for a timer), as Linux's
//! neighbour layer keeps `sk_buff`s on `neighbour::arp_queue` and DPDK's graph keeps mbuf
//! pointers: the handle is an index, never a page number, so taking a frame back needs no
//! `unsafe` and cannot name a page the NF does not hold. A stash is fixed size (`N` slots of
//! one [`Held`], ~90 bytes each, with an O(1) free list): nothing on the hold path allocates.
//!
//! Below the network-function API (`dataplane::nf` re-exports both) so that the core's router
//! state (`percore::RouteState`) can hold them.

use crate::dataplane::page::PageBuf;
use drivers::nic::MAX_FRAME_PAGES;
use netstack::wire::ETH_HDR_LEN;

/// A frame the NF owns: kept by [`Verdict::Keep`](crate::dataplane::nf::Verdict::Keep) (or made by
/// [`Ctx::alloc`](crate::dataplane::nf::Ctx::alloc)), until it is handed on through a
/// [`Ctx`](crate::dataplane::nf::Ctx) ([`send`](crate::dataplane::nf::Ctx::send), [`drop`](crate::dataplane::nf::Ctx::drop),
/// [`to_mgmt`](crate::dataplane::nf::Ctx::to_mgmt)). Not `Clone`; dropping one instead of handing it on
/// leaks its pages (debug builds panic, naming the page).
///
/// A frame received in several pages (jumbo MTU, up to `MAX_FRAME_PAGES` = 4) stays in them:
/// its headers in the first ([`Held::head`]), every page but the last full, the whole frame as
/// [`Held::segments`]; sent, it leaves as the same pages (one descriptor chain).
#[must_use = "a held frame must be sent or dropped through the Ctx; dropping it leaks its page"]
pub struct Held {
    pub(crate) page: PageBuf,
    /// The later pages of a frame of several pages, in order (empty: one page).
    pub(crate) rest: heapless::Vec<PageBuf, { MAX_FRAME_PAGES - 1 }>,
    /// Frame bytes.
    pub(crate) len: u16,
    /// Where the frame starts in the page (the NIC's header room).
    pub(crate) offset: u16,
    /// The local port it came in on (or was allocated for).
    pub(crate) port: u8,
    /// What `process` attached to it ([`Packet::set_mark`](crate::dataplane::nf::Packet::set_mark); 0 for a frame from
    /// [`Ctx::alloc`](crate::dataplane::nf::Ctx::alloc)).
    pub(crate) mark: u16,
}

impl Held {
    /// The frame's length in bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the frame has no bytes (a fresh page from [`Ctx::alloc`](crate::dataplane::nf::Ctx::alloc)).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The local port it came in on (or was allocated for).
    pub fn port(&self) -> usize {
        usize::from(self.port)
    }

    /// The mark [`Packet::set_mark`](crate::dataplane::nf::Packet::set_mark) attached to it when it was kept (0 unless set).
    pub fn mark(&self) -> u16 {
        self.mark
    }

    /// Pages the frame lies in (1, or up to `MAX_FRAME_PAGES` for a jumbo frame).
    pub fn pages(&self) -> usize {
        1 + self.rest.len()
    }

    /// The frame's bytes in its first page: the whole frame when it is one page
    /// ([`Held::pages`] 1), else its first bytes (headers included; [`Held::segments`] has
    /// the rest).
    pub fn head(&self) -> &[u8] {
        let start = usize::from(self.offset);
        &self.page.page()[start..start + self.head_len()]
    }

    /// Write the destination and source MAC addresses, as [`Packet::write_macs`](crate::dataplane::nf::Packet::write_macs) does (a
    /// frame shorter than an Ethernet header is left as it is).
    pub fn write_macs(&mut self, words: (u64, u32)) {
        put_macs(self.head_mut(), words);
    }

    /// [`Held::head`], writable: rewrite headers in place.
    pub fn head_mut(&mut self) -> &mut [u8] {
        let (start, len) = (usize::from(self.offset), self.head_len());
        &mut self.page.page_mut_at(start)[..len]
    }

    /// The frame's bytes, in order, one slice per page (their lengths sum to [`Held::len`]).
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut left = self.len() - self.head_len();
        core::iter::once(self.head()).chain(self.rest.iter().map(move |p| {
            let n = left.min(mm::PAGE_SIZE);
            left -= n;
            &p.page()[..n]
        }))
    }

    /// The frame's bytes: [`Held::head`], which is all of them for a frame of one page.
    pub fn bytes(&self) -> &[u8] {
        self.head()
    }

    /// [`Held::bytes`], writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.head_mut()
    }

    /// Bytes of the frame in its first page.
    fn head_len(&self) -> usize {
        self.len().min(self.room())
    }

    /// Most bytes the frame can hold (its page less the NIC's header room).
    pub fn room(&self) -> usize {
        mm::PAGE_SIZE - usize::from(self.offset)
    }

    /// Set the frame's length to `len` bytes (capped at [`Held::room`]) and return them,
    /// writable: to build a frame in a page from [`Ctx::alloc`](crate::dataplane::nf::Ctx::alloc). A frame
    /// of several pages keeps its length (it returns [`Held::head_mut`]).
    pub fn set_len(&mut self, len: usize) -> &mut [u8] {
        if self.rest.is_empty() {
            self.len = len.min(self.room()) as u16;
        }
        self.head_mut()
    }
}

/// The destination and source MACs of `frame` from `words` ([`netstack::MacRewrite::words`]):
/// one 8-byte and one 4-byte store through the Ethernet header as a fixed-size chunk, whose
/// length test in the fused loop is the one made against the NF's minimum before `process` (so
/// it folds away), and the two stores need none.
#[inline(always)]
pub(crate) fn put_macs(frame: &mut [u8], words: (u64, u32)) {
    if let Some(h) = frame.first_chunk_mut::<ETH_HDR_LEN>() {
        let (a, b) = h.split_at_mut(8);
        a.copy_from_slice(&words.0.to_le_bytes());
        b[..4].copy_from_slice(&words.1.to_le_bytes());
    }
}

/// The handle of a frame in a [`Stash`]: its slot, `0..N`.
pub type StashHandle = u16;

/// Up to `N` (≤ 65,535) held frames, by [`StashHandle`]. Dropping a stash that still holds a
/// frame leaks its pages (debug builds panic, naming the page): give them back with
/// [`Stash::release_all`](crate::dataplane::nf::Stash::release_all) first.
pub struct Stash<const N: usize> {
    slots: [Option<Held>; N],
    /// Free slots, the next one to use last.
    free: heapless::Vec<StashHandle, N>,
}

impl<const N: usize> Default for Stash<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Stash<N> {
    /// An empty stash.
    pub fn new() -> Self {
        const { assert!(N > 0 && N < StashHandle::MAX as usize) };
        let mut free = heapless::Vec::new();
        for i in (0..N).rev() {
            // Capacity N: every push fits.
            let _ = free.push(i as StashHandle);
        }
        Stash {
            slots: [const { None }; N],
            free,
        }
    }

    /// The handle the next [`Stash::insert`] will give, or `None` when the stash is full: to
    /// hand a table that may queue the frame its handle before the frame is put away.
    pub fn next_handle(&self) -> Option<StashHandle> {
        self.free.last().copied()
    }

    /// Hold `h`; its handle, or `h` back when all `N` slots are taken.
    pub fn insert(&mut self, h: Held) -> Result<StashHandle, Held> {
        let Some(i) = self.free.pop() else {
            return Err(h);
        };
        self.slots[usize::from(i)] = Some(h);
        Ok(i)
    }

    /// The frame under `handle`, taken out; `None` for a handle that holds nothing (never
    /// given, or taken already).
    pub fn take(&mut self, handle: StashHandle) -> Option<Held> {
        let h = self.slots.get_mut(usize::from(handle))?.take()?;
        // A slot just emptied was not on the free list: the push fits.
        let _ = self.free.push(handle);
        Some(h)
    }

    /// Frames held.
    pub fn len(&self) -> usize {
        N - self.free.len()
    }

    /// Whether it holds no frame.
    pub fn is_empty(&self) -> bool {
        self.free.len() == N
    }

    /// Every frame it holds, taken out (for the kernel's teardown, which has no `Ctx`).
    pub(crate) fn take_each(&mut self, mut f: impl FnMut(Held)) {
        for i in 0..N {
            if let Some(h) = self.take(i as StashHandle) {
                f(h);
            }
        }
    }
}
