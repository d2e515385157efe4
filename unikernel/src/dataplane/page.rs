//! [`PageBuf`]: a packet page owned by exactly one party at a time, and the only place where a
//! page number becomes bytes.
//!
//! A page is always held by one of: an RX or TX ring (inside the driver, as a raw [`Pfn`]), a
//! page_pool (alloc cache or recycle ring), the core that is processing it (a `PageBuf`), a
//! cross-core hand-off ring, or the router's neighbour queue. Moving a page between them moves
//! the token: [`PageBuf::into_raw`] gives it to a ring or queue that stores raw frame numbers,
//! [`PageBuf::from_raw`] takes it back. Neither is `Copy`/`Clone`, so the borrow checker keeps
//! one owner.
//!
//! Dropping a token instead of handing it on is a bug (the page would leak): debug builds panic
//! naming the page; release builds (the kernel image) compile the check away, and the page
//! accounting at `quit` still catches the loss (`free pages now == free pages at boot`). The
//! model follows ixy.rs's `Packet` (owns its buffer) without returning on drop: returning needs
//! the pool and the pcp list, which a `Drop` impl cannot reach without global state.
//!
//! A frame of several pages (jumbo frames, issue 14) is a list of tokens.
//!
//! Where the frame sits in its first page is the NIC's to say ([`Nic::FRAME_OFFSET`]: the
//! header bytes its driver keeps before the frame, 12 for virtio-net, 0 for a NIC without): the
//! frame accessors take the NIC type, so the offset is a constant of the monomorphised code
//! (issue 32: nothing here assumes 12 bytes).

use drivers::nic::{Nic, TxOwner};
use mm::{Pfn, PAGE_SIZE};

/// Bytes of a page that can hold frame bytes when the page is a frame's first on NIC type
/// `N`: a page less the header area before the frame ([`Nic::FRAME_OFFSET`]).
#[inline(always)]
pub const fn frame_room<N: Nic>() -> usize {
    PAGE_SIZE - N::FRAME_OFFSET
}

/// Bytes `range` of page `pfn` (clamped to the page), read only: how the dataplane reads the
/// later pages of a frame of several pages, which it holds in raw form beside the first page's
/// token (a [`drivers::nic::MultiFrame`]'s pages, the router's stash). The one place besides
/// [`PageBuf`] where a page number becomes bytes.
///
/// # Safety
/// `pfn` is an identity-mapped RAM page the caller holds (given back by a ring, kept in a
/// stash) and nobody writes it while the slice lives.
#[inline]
pub unsafe fn page_bytes<'a>(pfn: Pfn, range: core::ops::Range<usize>) -> &'a [u8] {
    let end = range.end.min(PAGE_SIZE);
    let start = range.start.min(end);
    // SAFETY: per the contract the page is RAM the caller holds, read only while the slice
    // lives; `start..end` lies within it.
    unsafe { core::slice::from_raw_parts((pfn.addr() as usize + start) as *const u8, end - start) }
}

/// A page in the raw form rings and queues store: its frame number and the id of the
/// page_pool that owns it (`mm::NO_POOL` for none). `Copy`: holding one is not owning the page.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RawPage {
    /// The page.
    pub pfn: Pfn,
    /// Its owning page_pool's id.
    pub pool: u32,
}

impl RawPage {
    /// The owner tag the page is sent with on a TX ring: its pool's id, handed back by the TX
    /// completion so the page goes home without a lookup in its metadata. Pool ids are below
    /// 2 × [`super::MAX_PORTS`], so a [`TxOwner`] holds every one.
    #[inline(always)]
    pub fn tx_owner(&self) -> TxOwner {
        TxOwner::from_word(self.pool)
    }

    /// The raw form of a page a TX completion handed back with `owner` (the
    /// [`RawPage::tx_owner`] it was sent with).
    #[inline(always)]
    pub fn sent(pfn: Pfn, owner: TxOwner) -> RawPage {
        RawPage {
            pfn,
            pool: owner.word(),
        }
    }
}

/// One order-0 packet page, owned by whoever holds the token. `#[must_use]`: hand it on
/// (stage it for TX, push it to a ring, recycle it), never drop it.
#[must_use = "a page must be handed on (TX, ring, pool) or recycled; dropping it leaks it"]
#[derive(Debug, PartialEq, Eq)]
pub struct PageBuf {
    raw: RawPage,
}

impl PageBuf {
    /// Take ownership of `raw` back from a ring, pool or queue that stored it.
    ///
    /// # Safety
    /// `raw.pfn` is an identity-mapped RAM page that nobody else holds now: it was given away
    /// with [`PageBuf::into_raw`] (or by the allocator) and the holder has let go of it (a
    /// device returned it in a used ring entry, a ring popped it, a pool allocated it); and
    /// `raw.pool` is the id of the pool that owns it.
    #[inline]
    pub unsafe fn from_raw(raw: RawPage) -> PageBuf {
        PageBuf { raw }
    }

    /// Give the page to a ring, pool or queue that stores the raw form.
    #[inline]
    pub fn into_raw(self) -> RawPage {
        let raw = self.raw;
        core::mem::forget(self);
        raw
    }

    /// The page's frame number.
    #[inline]
    pub fn pfn(&self) -> Pfn {
        self.raw.pfn
    }

    /// The id of the page_pool that owns the page.
    #[inline]
    pub fn pool(&self) -> u32 {
        self.raw.pool
    }

    /// The whole page (header area + frame room), `PAGE_SIZE` bytes.
    #[inline]
    fn page_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: the token is the page's only owner (see `from_raw`'s contract), the page is
        // identity-mapped RAM of PAGE_SIZE bytes, and the borrow of `self` bounds the slice's
        // life: nobody else can reach the page while it lives.
        unsafe { &mut *(self.raw.pfn.addr() as usize as *mut [u8; PAGE_SIZE]) }
    }

    /// The whole page read-only (header area included), `PAGE_SIZE` bytes: the frame's
    /// bytes start at the NIC's [`Nic::FRAME_OFFSET`] in a frame's first page, at 0 in its
    /// other pages.
    #[inline]
    pub fn page(&self) -> &[u8; PAGE_SIZE] {
        // SAFETY: as `page_mut`, shared: the token is the only owner and `&self` bounds the
        // borrow, so nobody writes the page meanwhile.
        unsafe { &*(self.raw.pfn.addr() as usize as *const [u8; PAGE_SIZE]) }
    }

    /// The first `len` bytes of the page (clamped to `PAGE_SIZE`), to write the frame bytes a
    /// page after a frame's first holds (from offset 0: no header area).
    #[inline]
    pub fn continuation_mut(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(PAGE_SIZE);
        &mut self.page_mut()[..len]
    }

    /// The frame as NIC type `N` lays it out: `len` bytes after its header area
    /// ([`Nic::FRAME_OFFSET`]; `len` clamped to [`frame_room`]).
    #[inline]
    pub fn frame_mut<N: Nic>(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(frame_room::<N>());
        &mut self.page_mut()[N::FRAME_OFFSET..N::FRAME_OFFSET + len]
    }

    /// The page from byte `start` on (clamped to the page), writable: a frame held with its
    /// offset recorded beside the token (`nf::Held`).
    #[inline]
    pub(crate) fn page_mut_at(&mut self, start: usize) -> &mut [u8] {
        let start = start.min(PAGE_SIZE);
        &mut self.page_mut()[start..]
    }

    /// The whole frame room of NIC type `N` ([`frame_room`] bytes after its header area), to
    /// build a frame in.
    #[inline]
    pub fn room_mut<N: Nic>(&mut self) -> &mut [u8] {
        &mut self.page_mut()[N::FRAME_OFFSET..]
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if cfg!(debug_assertions) && !std_panicking() {
            panic!(
                "page {:#x} dropped without being handed on (TX, a ring, a pool): it would leak",
                self.raw.pfn.addr()
            );
        }
    }
}

/// Whether a panic is already unwinding (host tests): a second panic in `drop` would abort.
#[inline]
fn std_panicking() -> bool {
    #[cfg(not(target_os = "none"))]
    {
        extern crate std;
        std::thread::panicking()
    }
    #[cfg(target_os = "none")]
    {
        false
    }
}
