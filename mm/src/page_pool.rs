//! `page_pool`: a per-RX-queue cache of DMA-mapped order-0 pages (Linux `net/core/page_pool.c`).
//!
//! # Paths
//!
//! * Fast path ([`PagePool::alloc`]): pop from the alloc cache (an array of
//!   [`PP_ALLOC_CACHE_SIZE`] PFNs owned by the queue's core). No lock, no atomics on the pool.
//! * Slow path: the cache is empty, so refill it with ONE bulk allocation of `refill` pages
//!   ([`PerCpuPages::alloc_pages_bulk`]), map each page for DMA once (the mapping is kept for the
//!   page's whole life in the pool), cache them and return the last one cached (which avoids
//!   special-casing the first — SEED-NOTES, 2021 review). A page whose mapping fails is freed to
//!   the allocator at once and does not stop the others from being cached.
//! * Recycle ([`PagePool::recycle_direct`]): a page coming back on the owning core goes straight
//!   into the cache; if the cache is full it is unmapped first, then freed (never freed while
//!   mapped).
//! * Release ([`PagePool::release_page`]): a page leaves the pool for good (unmapped, ownership
//!   cleared, freed).
//!
//! # Ownership and counts
//!
//! A pool page keeps refcount 1 while it is in the cache or in flight, records the pool id
//! ([`Page::pool`](crate::Page::pool)) and its DMA address ([`Page::dma_addr`](crate::Page::dma_addr)).
//! `in_flight` counts pages handed out by `alloc` and not yet recycled or released; the pool is
//! used only by its owning core (`&mut self`), with that core's [`PerCpuPages`].
//! Invariant (single core): `zone.free_pages() + pcp.count() + cached() + in_flight()` equals the
//! zone's managed pages minus pages held by others.
//!
//! # Not yet here
//!
//! The cross-core return path (Linux's `ptr_ring`: a bounded MPSC ring that remote cores push
//! to and the owner drains on refill, freeing after unmap when the ring is full) is not
//! implemented: Gannet runs one core per queue pair today, so every return is same-core.

use core::fmt;

use crate::pcp::PerCpuPages;
use crate::zone::Zone;
use crate::Pfn;

/// Alloc cache capacity, pages (Linux `PP_ALLOC_CACHE_SIZE`).
pub const PP_ALLOC_CACHE_SIZE: usize = 128;
/// Default pages per slow-path refill (Linux `PP_ALLOC_CACHE_REFILL`; half the cache so a full
/// refill plus recycles do not immediately overflow it).
pub const PP_ALLOC_CACHE_REFILL: usize = 64;

/// A DMA mapping failure (the IOMMU or bounce-buffer space ran out).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DmaError;

impl fmt::Display for DmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DMA mapping failed")
    }
}

/// DMA mapping hook, called once per page when it enters the pool and once when it leaves.
pub trait DmaMapper {
    /// Map the page at `pfn` for device access and return its bus address (bytes).
    fn map(&mut self, pfn: Pfn) -> Result<u64, DmaError>;
    /// Undo [`DmaMapper::map`]; `dma` is the address `map` returned.
    fn unmap(&mut self, pfn: Pfn, dma: u64);
}

/// The kernel's mapper: identity-mapped, no IOMMU, so the bus address is the physical address.
#[derive(Copy, Clone, Debug, Default)]
pub struct IdentityDma;

impl DmaMapper for IdentityDma {
    #[inline]
    fn map(&mut self, pfn: Pfn) -> Result<u64, DmaError> {
        Ok(pfn.addr())
    }
    #[inline]
    fn unmap(&mut self, _pfn: Pfn, _dma: u64) {}
}

/// Pool construction parameters.
#[derive(Copy, Clone, Debug)]
pub struct PagePoolParams {
    /// Pool id recorded in each page it owns; must not be [`crate::NO_POOL`].
    pub id: u32,
    /// Pages per slow-path refill, `1..=PP_ALLOC_CACHE_SIZE` (default [`PP_ALLOC_CACHE_REFILL`]).
    pub refill: usize,
}

impl PagePoolParams {
    /// Parameters with the default refill size.
    pub const fn new(id: u32) -> PagePoolParams {
        PagePoolParams {
            id,
            refill: PP_ALLOC_CACHE_REFILL,
        }
    }
}

/// Pool errors.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum PoolError {
    /// `refill` was outside `1..=PP_ALLOC_CACHE_SIZE` (the value given).
    BadRefill(usize),
    /// The id was [`crate::NO_POOL`], which means "no pool" in page metadata.
    BadId,
    /// `destroy` found pages still in flight (how many); drain the queues and call again.
    InFlight(u64),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::BadRefill(n) => {
                write!(f, "page_pool refill {n} outside 1..={PP_ALLOC_CACHE_SIZE}")
            }
            PoolError::BadId => f.write_str("page_pool id u32::MAX is reserved (NO_POOL)"),
            PoolError::InFlight(n) => write!(f, "page_pool destroy: {n} pages still in flight"),
        }
    }
}

/// Pool counters (events, not pages in a state), like Linux `page_pool_stats`.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct PagePoolStats {
    /// Allocations served from the alloc cache.
    pub alloc_fast: u64,
    /// Allocations that went to the slow path (refill).
    pub alloc_slow: u64,
    /// Slow-path allocations that returned `None` (allocator empty, or every mapping failed).
    pub alloc_empty: u64,
    /// Pages allocated by refills (including those whose mapping then failed).
    pub refill_pages: u64,
    /// Pages whose DMA mapping failed during refill (freed to the allocator).
    pub refill_failed: u64,
    /// Recycled pages that went back into the alloc cache.
    pub recycle_cached: u64,
    /// Recycled pages that found the cache full (unmapped and freed).
    pub recycle_cache_full: u64,
    /// Pages unmapped and returned to the allocator for good (release, cache full, destroy).
    pub released: u64,
}

/// A page_pool: see the module docs.
pub struct PagePool {
    cache: [Pfn; PP_ALLOC_CACHE_SIZE],
    count: usize,
    id: u32,
    refill: usize,
    in_flight: u64,
    stats: PagePoolStats,
}

impl PagePool {
    /// A pool with an empty cache.
    ///
    /// # Errors
    ///
    /// [`PoolError::BadRefill`] if `params.refill` is 0 or more than [`PP_ALLOC_CACHE_SIZE`];
    /// [`PoolError::BadId`] if `params.id` is [`crate::NO_POOL`].
    pub fn new(params: PagePoolParams) -> Result<PagePool, PoolError> {
        if params.refill == 0 || params.refill > PP_ALLOC_CACHE_SIZE {
            return Err(PoolError::BadRefill(params.refill));
        }
        if params.id == crate::NO_POOL {
            return Err(PoolError::BadId);
        }
        Ok(PagePool {
            cache: [Pfn(0); PP_ALLOC_CACHE_SIZE],
            count: 0,
            id: params.id,
            refill: params.refill,
            in_flight: 0,
            stats: PagePoolStats::default(),
        })
    }

    /// The pool id recorded in its pages.
    #[inline]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Allocate one DMA-mapped page (refcount 1, `pool() == Some(id)`, `dma_addr()` set).
    ///
    /// Fast path: pop from the alloc cache. Slow path: one bulk allocation of `refill` pages from
    /// `pcp`, each mapped once with `dma`; pages whose mapping fails are freed and counted in
    /// `refill_failed`; the rest are cached and the last one cached is returned.
    ///
    /// Returns `None` when the allocator had no page, or when every page of the refill batch
    /// failed to map (counted in `alloc_empty`). The caller retries later.
    #[inline]
    pub fn alloc(
        &mut self,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) -> Option<Pfn> {
        if self.count > 0 {
            self.count -= 1;
            self.stats.alloc_fast += 1;
            self.in_flight += 1;
            return Some(self.cache[self.count]);
        }
        self.alloc_slow(pcp, zone, dma)
    }

    fn alloc_slow(
        &mut self,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) -> Option<Pfn> {
        self.stats.alloc_slow += 1;
        debug_assert_eq!(self.count, 0);
        let mut batch = [None; PP_ALLOC_CACHE_SIZE];
        let got = pcp
            .alloc_pages_bulk(zone, &mut batch[..self.refill])
            .unwrap_or(0);
        self.stats.refill_pages += got as u64;
        for pfn in batch[..got].iter().flatten().copied() {
            match dma.map(pfn) {
                Ok(addr) => {
                    let p = zone.page(pfn);
                    p.set_dma_addr(addr);
                    p.set_pool(Some(self.id));
                    self.cache[self.count] = pfn;
                    self.count += 1;
                }
                Err(DmaError) => {
                    self.stats.refill_failed += 1;
                    pcp.free_page(zone, pfn);
                }
            }
        }
        if self.count == 0 {
            self.stats.alloc_empty += 1;
            return None;
        }
        self.count -= 1;
        self.in_flight += 1;
        Some(self.cache[self.count])
    }

    /// Same-core recycle of a page this pool handed out: back into the alloc cache, still mapped;
    /// if the cache is full, unmap it and free it to `pcp` (never freed while mapped).
    ///
    /// # Panics
    ///
    /// If `pfn` is outside `zone`. Debug builds also panic if the page does not belong to this
    /// pool or no page is in flight.
    pub fn recycle_direct(
        &mut self,
        pfn: Pfn,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) {
        let p = zone.page(pfn);
        debug_assert_eq!(
            p.pool(),
            Some(self.id),
            "recycle of a page from another pool"
        );
        debug_assert!(self.in_flight > 0, "recycle with nothing in flight");
        self.in_flight -= 1;
        if self.count < PP_ALLOC_CACHE_SIZE {
            self.cache[self.count] = pfn;
            self.count += 1;
            self.stats.recycle_cached += 1;
        } else {
            self.stats.recycle_cache_full += 1;
            self.return_page(pfn, pcp, zone, dma);
        }
    }

    /// The page leaves the pool for good (handed to the stack, dropped, ...): unmap, clear pool
    /// ownership, free it to `pcp`, `in_flight -= 1`.
    ///
    /// # Panics
    ///
    /// If `pfn` is outside `zone`. Debug builds also panic if the page does not belong to this
    /// pool or no page is in flight.
    pub fn release_page(
        &mut self,
        pfn: Pfn,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) {
        debug_assert_eq!(
            zone.page(pfn).pool(),
            Some(self.id),
            "release of a foreign page"
        );
        debug_assert!(self.in_flight > 0, "release with nothing in flight");
        self.in_flight -= 1;
        self.return_page(pfn, pcp, zone, dma);
    }

    /// Pages handed out by [`PagePool::alloc`] and not yet recycled or released.
    #[inline]
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Pages in the alloc cache (mapped, owned by the pool).
    #[inline]
    pub fn cached(&self) -> usize {
        self.count
    }

    /// Event counters.
    #[inline]
    pub fn stats(&self) -> &PagePoolStats {
        &self.stats
    }

    /// `page_pool_destroy`: unmap and free every cached page to `pcp` (one bulk free). Then, if
    /// pages are still in flight, return [`PoolError::InFlight`] with how many: the kernel drains
    /// its queues (recycling or releasing those pages) and calls `destroy` again until `Ok`.
    /// The pool stays usable in between.
    ///
    /// # Errors
    ///
    /// [`PoolError::InFlight`]`(n)` if `n > 0` pages are still out.
    pub fn destroy(
        &mut self,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) -> Result<(), PoolError> {
        let n = self.count;
        for &pfn in &self.cache[..n] {
            let p = zone.page(pfn);
            dma.unmap(pfn, p.dma_addr());
            p.set_dma_addr(0);
            p.set_pool(None);
        }
        pcp.free_pages_bulk(zone, &self.cache[..n]);
        self.stats.released += n as u64;
        self.count = 0;
        match self.in_flight {
            0 => Ok(()),
            n => Err(PoolError::InFlight(n)),
        }
    }

    /// Unmap, clear ownership, free.
    fn return_page(
        &mut self,
        pfn: Pfn,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) {
        let p = zone.page(pfn);
        dma.unmap(pfn, p.dma_addr());
        p.set_dma_addr(0);
        p.set_pool(None);
        self.stats.released += 1;
        pcp.free_page(zone, pfn);
    }
}

#[cfg(test)]
mod tests;
