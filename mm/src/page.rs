//! Per-frame metadata (`struct page` in Linux): one [`Page`] per frame of a zone's `mem_map`.
//!
//! Every field is an atomic accessed with `Relaxed` ordering, so `&'static [Page]` is `Sync`
//! without `unsafe`. Atomics are not the synchronisation: ownership is. The buddy fields (flags
//! `PG_buddy`/`PG_reserved`, `order` of a free block, the free-list links) of a free page are
//! touched only under the zone lock, whose acquire/release orders them. The other fields
//! (refcount, pool id, `dma_addr`) are touched only by the page's current owner.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Pool id meaning "not owned by any page_pool" (`Page::pool()` returns `None`).
pub const NO_POOL: u32 = u32::MAX;

/// Index value meaning "no page" in the intrusive free-list links.
pub(crate) const NIL: u32 = u32::MAX;

/// Flag: the page is the head of a free block in the buddy free lists (`PG_buddy`).
pub(crate) const PG_BUDDY: u8 = 1 << 0;
/// Flag: the page was never handed to the allocator (hole, firmware, kernel image, PFN 0).
pub(crate) const PG_RESERVED: u8 = 1 << 1;

/// Metadata of one physical frame (32 bytes).
///
/// States: *reserved* (initial; never given to the allocator), *free* (head of a buddy block:
/// `PG_buddy` set, `order` = block order; tail pages of a free block carry no flag), *on a pcp
/// list* (refcount 0, no flag), *allocated* (refcount >= 1; `order` = order it was allocated
/// with). A page owned by a page_pool stays at refcount 1 and records the pool id and its DMA
/// address.
#[derive(Debug)]
pub struct Page {
    flags: AtomicU8,
    order: AtomicU8,
    refcount: AtomicU32,
    pool: AtomicU32,
    /// Free-list links: indices into the zone's `mem_map` (`NIL` = none).
    next: AtomicU32,
    prev: AtomicU32,
    dma_addr: AtomicU64,
}

impl Default for Page {
    fn default() -> Self {
        Page::new()
    }
}

impl Page {
    /// A reserved page: refcount 0, no pool, `dma_addr` 0. `const` so a `mem_map` can be a static.
    pub const fn new() -> Page {
        Page::with_flags(PG_RESERVED)
    }

    /// A page about to be handed to the buddy allocator: no flag, refcount 0, no pool,
    /// `dma_addr` 0 (what [`crate::Zone::add_free_range`] leaves before it lists the page, and
    /// what a free block's tail pages carry). For a `mem_map` written in one pass at boot, the
    /// range then handed over with [`crate::Zone::add_fresh_range`].
    pub const fn new_free() -> Page {
        Page::with_flags(0)
    }

    /// Write every field in place as [`Page::new`] (`reserved`) or [`Page::new_free`] leaves
    /// it: deferred `mem_map` initialisation ([`crate::Zone::defer_fresh_ranges`]) writes a
    /// slot this way the first time, whatever the RAM under it held.
    pub(crate) fn reinit(&self, reserved: bool) {
        self.flags
            .store(if reserved { PG_RESERVED } else { 0 }, Relaxed);
        self.order.store(0, Relaxed);
        self.refcount.store(0, Relaxed);
        self.pool.store(NO_POOL, Relaxed);
        self.next.store(NIL, Relaxed);
        self.prev.store(NIL, Relaxed);
        self.dma_addr.store(0, Relaxed);
    }

    /// A slot as unwritten RAM might leave it (host tests of deferred `mem_map`
    /// initialisation): a free-block head of order 3 with live-looking links and counts.
    #[cfg(test)]
    pub(crate) fn garbage() -> Page {
        let p = Page::with_flags(PG_BUDDY);
        p.order.store(3, Relaxed);
        p.refcount.store(7, Relaxed);
        p.pool.store(5, Relaxed);
        p.next.store(1, Relaxed);
        p.prev.store(2, Relaxed);
        p.dma_addr.store(0xdead_0000, Relaxed);
        p
    }

    /// A page with `flags`, refcount 0, no pool, on no list, `dma_addr` 0.
    const fn with_flags(flags: u8) -> Page {
        Page {
            flags: AtomicU8::new(flags),
            order: AtomicU8::new(0),
            refcount: AtomicU32::new(0),
            pool: AtomicU32::new(NO_POOL),
            next: AtomicU32::new(NIL),
            prev: AtomicU32::new(NIL),
            dma_addr: AtomicU64::new(0),
        }
    }

    /// Reference count: 0 when free or on a pcp list, >= 1 when allocated.
    #[inline]
    pub fn refcount(&self) -> u32 {
        self.refcount.load(Relaxed)
    }

    /// Take one more reference (`get_page`). Only valid on an allocated page (refcount >= 1).
    #[inline]
    pub fn get(&self) {
        let old = self.refcount.fetch_add(1, Relaxed);
        debug_assert!(old >= 1, "get() on a free page");
    }

    /// Drop one reference and return `true` if it was the last (`put_page_testzero`); the caller
    /// then owns the page and must free it. Panics in debug builds if the refcount is already 0.
    #[inline]
    pub fn put_testzero(&self) -> bool {
        let old = self.refcount.fetch_sub(1, Relaxed);
        debug_assert!(old >= 1, "put on a page with refcount 0");
        old == 1
    }

    /// The page_pool that owns this page, or `None` ([`NO_POOL`]).
    #[inline]
    pub fn pool(&self) -> Option<u32> {
        match self.pool.load(Relaxed) {
            NO_POOL => None,
            id => Some(id),
        }
    }

    /// Record (or clear with `None`) the owning page_pool. `Some(NO_POOL)` is the same as `None`.
    #[inline]
    pub fn set_pool(&self, pool: Option<u32>) {
        self.pool.store(pool.unwrap_or(NO_POOL), Relaxed);
    }

    /// DMA (bus) address of the page while it is mapped, in bytes; 0 when not mapped.
    #[inline]
    pub fn dma_addr(&self) -> u64 {
        self.dma_addr.load(Relaxed)
    }

    /// Record the DMA (bus) address of the page, in bytes.
    #[inline]
    pub fn set_dma_addr(&self, addr: u64) {
        self.dma_addr.store(addr, Relaxed);
    }

    /// Order the page was allocated with (for an allocated head page) or of its free block (for a
    /// free head page). Meaningless for tail pages.
    #[inline]
    pub fn order(&self) -> usize {
        self.order.load(Relaxed) as usize
    }

    /// `true` if the page is the head of a free block in the buddy lists (`PageBuddy`).
    #[inline]
    pub fn is_buddy(&self) -> bool {
        self.flags.load(Relaxed) & PG_BUDDY != 0
    }

    /// `true` if the page was never handed to the allocator (`PageReserved`).
    #[inline]
    pub fn is_reserved(&self) -> bool {
        self.flags.load(Relaxed) & PG_RESERVED != 0
    }

    // ---- crate-internal accessors (buddy fields: zone lock held, or owner) ----

    #[inline]
    pub(crate) fn flags(&self) -> u8 {
        self.flags.load(Relaxed)
    }
    #[inline]
    pub(crate) fn set_flags(&self, f: u8) {
        self.flags.store(f, Relaxed);
    }
    #[inline]
    pub(crate) fn set_order(&self, order: usize) {
        self.order.store(order as u8, Relaxed);
    }
    #[inline]
    pub(crate) fn set_refcount(&self, r: u32) {
        self.refcount.store(r, Relaxed);
    }
    #[inline]
    pub(crate) fn next(&self) -> u32 {
        self.next.load(Relaxed)
    }
    #[inline]
    pub(crate) fn prev(&self) -> u32 {
        self.prev.load(Relaxed)
    }
    #[inline]
    pub(crate) fn set_next(&self, i: u32) {
        self.next.store(i, Relaxed);
    }
    #[inline]
    pub(crate) fn set_prev(&self, i: u32) {
        self.prev.store(i, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_page_is_reserved_and_unowned() {
        let p = Page::new();
        assert!(p.is_reserved());
        assert!(!p.is_buddy());
        assert_eq!(p.refcount(), 0);
        assert_eq!(p.pool(), None);
        p.set_pool(Some(7));
        assert_eq!(p.pool(), Some(7));
        p.set_pool(None);
        assert_eq!(p.pool(), None);
        p.set_dma_addr(0x5000);
        assert_eq!(p.dma_addr(), 0x5000);
    }

    #[test]
    fn page_is_32_bytes() {
        // 32 bytes of metadata per 4 KiB frame: 0.78% of RAM for mem_map.
        assert_eq!(core::mem::size_of::<Page>(), 32);
    }

    #[test]
    fn refcount_get_put() {
        let p = Page::new();
        p.set_refcount(1);
        p.get();
        assert_eq!(p.refcount(), 2);
        assert!(!p.put_testzero());
        assert!(p.put_testzero());
        assert_eq!(p.refcount(), 0);
    }
}
