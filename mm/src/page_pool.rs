//! `page_pool`: a per-RX-queue cache of DMA-mapped order-0 pages (Linux `net/core/page_pool.c`).
//!
//! # Paths
//!
//! * Fast path ([`PagePool::alloc`]): pop from the alloc cache (an array of
//!   [`PP_ALLOC_CACHE_SIZE`] PFNs owned by the queue's core). No lock, no atomics on the pool.
//! * Slow path: the cache is empty, so refill it with ONE bulk allocation of `refill` pages
//!   ([`PerCpuPages::alloc_pages_bulk`]), map each page for DMA once (the mapping is kept for the
//!   page's whole life in the pool), cache them and return the last one cached (which avoids
//!   special-casing the first — docs/SEED-NOTES.md, 2021 review). A page whose mapping fails is freed to
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
//! # Remote returns ([`RecycleRing`])
//!
//! A page coming back on ANOTHER core goes into the pool's [`RecycleRing`] (a bounded, lock-free,
//! multi-producer single-consumer [`MpscRing`](crate::ptr_ring::MpscRing) of page numbers, in
//! `page_pool/recycle.rs`), attached with
//! [`PagePool::attach_ring`]. The remote core calls [`RecycleRing::recycle_remote`] (or the bulk
//! form) through the shared `&'static` ring; when the ring is full it unmaps the page and frees
//! it to its own pcp list or to the zone — never freed while mapped. The owner drains the ring
//! on its next slow path, before going to the allocator (and on [`PagePool::drain_ring`]). A
//! same-core return that finds the cache full also tries the ring before freeing.
//!
//! Pages sitting in the ring still count as in flight until the owner takes them out; pages the
//! remote core released stop counting as soon as they are back in the allocator.
//!
//! # Refill mode
//!
//! [`RefillMode::Bulk`] (default): one [`PerCpuPages::alloc_pages_bulk_list`] call per refill.
//! [`RefillMode::Single`]: `refill` calls to [`PerCpuPages::alloc_page`] — kept to measure what
//! the bulk API buys ([`PagePool::set_refill_mode`]).
//!
//! # Teardown
//!
//! [`PagePool::destroy`] returns every cached page and every page in the ring to the allocator
//! (unmapped), then reports what is still in flight; [`PagePool::destroy_wait`] repeats that,
//! calling a kernel-supplied step (its poll loop) in between, for a bounded number of
//! iterations.

use core::fmt;

// The DMA mapper lives in `crate::dma` (a leaf); re-exported so `mm::page_pool::DmaMapper` and
// the other two keep working.
pub use crate::dma::{DmaError, DmaMapper, IdentityDma};
use crate::pcp::PerCpuPages;
use crate::zone::Zone;
use crate::Pfn;

mod recycle;
pub use recycle::{RecycleRing, RemoteRecycle, PP_RING_SIZE};

/// Alloc cache capacity, pages (Linux `PP_ALLOC_CACHE_SIZE`).
pub const PP_ALLOC_CACHE_SIZE: usize = 128;
/// Default pages per slow-path refill (Linux `PP_ALLOC_CACHE_REFILL`; half the cache so a full
/// refill plus recycles do not immediately overflow it).
pub const PP_ALLOC_CACHE_REFILL: usize = 64;

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

/// How the slow path takes pages from the allocator.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub enum RefillMode {
    /// One bulk call ([`PerCpuPages::alloc_pages_bulk_list`]) per refill (default).
    #[default]
    Bulk,
    /// `refill` single-page calls ([`PerCpuPages::alloc_page`]): the baseline the bulk API is
    /// measured against.
    Single,
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
    /// [`PagePool::attach_ring`]: the ring is attached to pool `.0` already.
    RingInUse(u32),
    /// [`PagePool::attach_ring`]: this pool has a ring already.
    HasRing,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::BadRefill(n) => {
                write!(f, "page_pool refill {n} outside 1..={PP_ALLOC_CACHE_SIZE}")
            }
            PoolError::BadId => f.write_str("page_pool id u32::MAX is reserved (NO_POOL)"),
            PoolError::InFlight(n) => write!(f, "page_pool destroy: {n} pages still in flight"),
            PoolError::RingInUse(id) => {
                write!(f, "page_pool recycle ring already attached to pool {id}")
            }
            PoolError::HasRing => f.write_str("page_pool already has a recycle ring"),
        }
    }
}

/// Pool counters (events, not pages in a state), like Linux `page_pool_stats`.
///
/// The one definition of these counters: the `STATS` line's `pools[]` entries and the `pool`
/// console line carry them as `netstack::stats::PoolStats::counters`, written inline under
/// these field names ([`PagePoolStats::NAMES`]). The definitions flow from `mm` up: `mm`
/// depends on nothing of Gannet's (no serde either), `netstack`'s schema depends on `mm`.
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct PagePoolStats {
    /// Allocations served from the alloc cache.
    pub alloc_fast: u64,
    /// Allocations that found the cache empty (served from the ring, the allocator, or not).
    pub alloc_slow: u64,
    /// Slow-path allocations that returned `None` (allocator empty, or every mapping failed).
    pub alloc_empty: u64,
    /// Pages allocated by refills (including those whose mapping then failed).
    pub refill_pages: u64,
    /// Pages whose DMA mapping failed during refill (freed to the allocator).
    pub refill_failed: u64,
    /// Recycled pages that went back into the alloc cache.
    pub recycle_cached: u64,
    /// Recycled pages that found the cache full (then tried the ring, else unmapped and freed).
    pub recycle_cache_full: u64,
    /// Pages that came back through the recycle ring (counted when the owner takes them out).
    pub recycle_ring: u64,
    /// Returns that found the ring full (unmapped and freed): remote ones plus same-core ones
    /// that found both the cache and the ring full.
    pub recycle_ring_full: u64,
    /// Pages unmapped and returned to the allocator for good (release, cache/ring full, destroy),
    /// including those the remote CPUs released.
    pub released: u64,
    /// Time spent in slow-path allocations, in the units of the clock given to
    /// [`PagePool::set_clock`] (the kernel's TSC: cycles, guest instructions under icount); 0
    /// without a clock. Measured inside the slow path only, so the fast path pays nothing.
    pub refill_cycles: u64,
}

impl PagePoolStats {
    /// Every counter's name, the field's, in declaration order (the keys of `STATS`'
    /// `pools[]` entries).
    pub const NAMES: [&'static str; 11] = [
        "alloc_fast",
        "alloc_slow",
        "alloc_empty",
        "refill_pages",
        "refill_failed",
        "recycle_cached",
        "recycle_cache_full",
        "recycle_ring",
        "recycle_ring_full",
        "released",
        "refill_cycles",
    ];

    /// Every counter's value, in [`Self::NAMES`] order.
    pub fn values(&self) -> [u64; 11] {
        // Destructured without `..`: a new counter must be named here (and in NAMES) too.
        let PagePoolStats {
            alloc_fast,
            alloc_slow,
            alloc_empty,
            refill_pages,
            refill_failed,
            recycle_cached,
            recycle_cache_full,
            recycle_ring,
            recycle_ring_full,
            released,
            refill_cycles,
        } = *self;
        [
            alloc_fast,
            alloc_slow,
            alloc_empty,
            refill_pages,
            refill_failed,
            recycle_cached,
            recycle_cache_full,
            recycle_ring,
            recycle_ring_full,
            released,
            refill_cycles,
        ]
    }

    /// The counters of `v`, in [`Self::NAMES`] order.
    pub fn from_values(v: [u64; 11]) -> PagePoolStats {
        let [alloc_fast, alloc_slow, alloc_empty, refill_pages, refill_failed, recycle_cached, recycle_cache_full, recycle_ring, recycle_ring_full, released, refill_cycles] =
            v;
        PagePoolStats {
            alloc_fast,
            alloc_slow,
            alloc_empty,
            refill_pages,
            refill_failed,
            recycle_cached,
            recycle_cache_full,
            recycle_ring,
            recycle_ring_full,
            released,
            refill_cycles,
        }
    }
}

/// What [`PagePool::destroy_wait`] tells its step closure each time it waits.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DestroyWait {
    /// Waits so far (0 on the first).
    pub iteration: u64,
    /// Pages still out (handed out and not returned; a page in the ring counts until drained).
    pub in_flight: u64,
}

/// A page_pool: see the module docs.
pub struct PagePool {
    cache: [Pfn; PP_ALLOC_CACHE_SIZE],
    count: usize,
    id: u32,
    refill: usize,
    mode: RefillMode,
    /// Pages this pool took from the allocator and has not given back itself: in the cache,
    /// in flight, or in the recycle ring. Changes only on slow paths (refill, release, a full
    /// cache and ring, destroy), so the fast paths keep no in-flight count:
    /// `in_flight = owned - count - ring.released_count()`.
    owned: u64,
    /// Cached pages freed by `destroy` (so `alloc_fast` can be derived, see `stats`).
    destroyed: u64,
    ring: Option<&'static RecycleRing>,
    stats: PagePoolStats,
    /// Times the slow path ([`PagePool::set_clock`]).
    clock: Option<fn() -> u64>,
}

impl PagePool {
    /// A pool with an empty cache, [`RefillMode::Bulk`] and no ring.
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
            mode: RefillMode::Bulk,
            owned: 0,
            destroyed: 0,
            ring: None,
            clock: None,
            stats: PagePoolStats::default(),
        })
    }

    /// The pool id recorded in its pages.
    #[inline]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Choose how the slow path takes pages from the allocator (takes effect on the next refill).
    #[inline]
    pub fn set_refill_mode(&mut self, mode: RefillMode) {
        self.mode = mode;
    }

    /// The current refill mode.
    #[inline]
    pub fn refill_mode(&self) -> RefillMode {
        self.mode
    }

    /// Pages per slow-path refill.
    #[inline]
    pub fn refill(&self) -> usize {
        self.refill
    }

    /// Attach the remote-return ring (once per pool; a ring serves one pool at a time). Other
    /// CPUs then return this pool's pages with [`RecycleRing::recycle_remote`].
    ///
    /// # Errors
    ///
    /// [`PoolError::HasRing`] if this pool has a ring; [`PoolError::RingInUse`] if the ring is
    /// attached to a pool (possibly another) already.
    pub fn attach_ring(&mut self, ring: &'static RecycleRing) -> Result<(), PoolError> {
        if self.ring.is_some() {
            return Err(PoolError::HasRing);
        }
        ring.attach(self.id).map_err(PoolError::RingInUse)?;
        self.ring = Some(ring);
        Ok(())
    }

    /// The attached ring, for handing to the CPUs that return pages remotely.
    #[inline]
    pub fn ring(&self) -> Option<&'static RecycleRing> {
        self.ring
    }

    /// Allocate one DMA-mapped page (refcount 1, `pool() == Some(id)`, `dma_addr()` set).
    ///
    /// Fast path: pop from the alloc cache. Slow path: first take up to `refill` pages out of the
    /// recycle ring; if it is empty, refill from `pcp` (one bulk allocation of `refill` pages, or
    /// `refill` single allocations in [`RefillMode::Single`]), mapping each page once with
    /// `dma`; pages whose mapping fails are freed and counted in `refill_failed`; the rest are
    /// cached and the last one cached is returned.
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
        if crate::fault::pool_dry() {
            // The fault image's starvation window: as if the allocator were empty.
            self.stats.alloc_empty += 1;
            return None;
        }
        if self.count > 0 {
            self.count -= 1;
            // `count < PP_ALLOC_CACHE_SIZE` (a power of two) now: the mask only drops the
            // bounds check. No counter here: `alloc_fast` and `in_flight` are derived.
            return Some(self.cache[self.count & (PP_ALLOC_CACHE_SIZE - 1)]);
        }
        match self.clock {
            None => self.alloc_slow(pcp, zone, dma),
            Some(now) => {
                let t0 = now();
                let got = self.alloc_slow(pcp, zone, dma);
                self.stats.refill_cycles += now().wrapping_sub(t0);
                got
            }
        }
    }

    /// [`PagePool::alloc`]'s fast path alone: a page from the alloc cache, or `None` when it
    /// is empty (then call [`PagePool::alloc`], which refills).
    #[inline(always)]
    pub fn alloc_cached(&mut self) -> Option<Pfn> {
        if self.count == 0 || crate::fault::pool_dry() {
            return None;
        }
        self.count -= 1;
        Some(self.cache[self.count & (PP_ALLOC_CACHE_SIZE - 1)])
    }

    /// Time every slow-path allocation with `now` (a cycle counter) into
    /// [`PagePoolStats::refill_cycles`], so `refill_cycles / refill_pages` is the allocator's
    /// cost per page (bulk against single refill).
    pub fn set_clock(&mut self, now: fn() -> u64) {
        self.clock = Some(now);
    }

    #[inline(never)]
    fn alloc_slow(
        &mut self,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) -> Option<Pfn> {
        self.stats.alloc_slow += 1;
        debug_assert_eq!(self.count, 0);
        if self.take_from_ring(self.refill) == 0 {
            self.refill_from(pcp, zone, dma);
        }
        if self.count == 0 {
            self.stats.alloc_empty += 1;
            return None;
        }
        self.count -= 1;
        Some(self.cache[self.count])
    }

    /// Move up to `max` pages (bounded by the cache room) from the ring into the cache.
    #[inline]
    fn take_from_ring(&mut self, max: usize) -> usize {
        let Some(ring) = self.ring else { return 0 };
        let end = (self.count + max).min(PP_ALLOC_CACHE_SIZE);
        let n = ring.pop_batch(&mut self.cache[self.count..end]);
        self.count += n;
        self.stats.recycle_ring += n as u64;
        n
    }

    /// Refill the (empty) cache from the allocator and map the pages.
    fn refill_from(&mut self, pcp: &mut PerCpuPages, zone: &Zone, dma: &mut impl DmaMapper) {
        let want = self.refill;
        let got = match self.mode {
            RefillMode::Bulk => pcp
                .alloc_pages_bulk_list(zone, want, &mut self.cache[..want])
                .unwrap_or(0),
            RefillMode::Single => {
                let mut got = 0;
                while got < want {
                    match pcp.alloc_page(zone) {
                        Some(pfn) => self.cache[got] = pfn,
                        None => break,
                    }
                    got += 1;
                }
                got
            }
        };
        self.stats.refill_pages += got as u64;
        // Map in place, compacting over the pages whose mapping failed.
        for i in 0..got {
            let pfn = self.cache[i];
            match dma.map(pfn) {
                Ok(addr) => {
                    let p = zone.page(pfn);
                    p.set_dma_addr(addr);
                    p.set_pool(Some(self.id));
                    self.cache[self.count] = pfn;
                    self.count += 1;
                    self.owned += 1;
                }
                Err(DmaError) => {
                    self.stats.refill_failed += 1;
                    pcp.free_page(zone, pfn);
                }
            }
        }
    }

    /// Same-core recycle of a page this pool handed out: back into the alloc cache, still mapped;
    /// if the cache is full, into the recycle ring (if attached); if that is full too, unmap it
    /// and free it to `pcp` (never freed while mapped).
    ///
    /// # Panics
    ///
    /// If `pfn` is outside `zone`. Debug builds also panic if the page does not belong to this
    /// pool or no page is in flight.
    #[inline]
    pub fn recycle_direct(
        &mut self,
        pfn: Pfn,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) {
        debug_assert_eq!(
            zone.page(pfn).pool(),
            Some(self.id),
            "recycle of a page from another pool"
        );
        debug_assert!(self.in_flight() > 0, "recycle with nothing in flight");
        if self.count < PP_ALLOC_CACHE_SIZE {
            self.cache[self.count] = pfn;
            self.count += 1;
            self.stats.recycle_cached += 1;
        } else {
            self.recycle_cache_full(pfn, pcp, zone, dma);
        }
    }

    /// Same-core bulk recycle (Linux `page_pool_put_page_bulk`, DPDK `rte_mempool_put_bulk`),
    /// first half: the free part of the alloc cache, to write returned pages into; then
    /// [`PagePool::recycled`] with how many were written at its start (one count update for
    /// the batch). Each page written must be one this pool handed out and that is back with
    /// the caller (the contract of [`PagePool::recycle_direct`]).
    #[inline(always)]
    pub fn recycle_room(&mut self) -> &mut [Pfn] {
        &mut self.cache[self.count.min(PP_ALLOC_CACHE_SIZE)..]
    }

    /// `n` pages were written at the start of [`PagePool::recycle_room`]: cache them.
    #[inline(always)]
    pub fn recycled(&mut self, n: usize) {
        let n = n.min(PP_ALLOC_CACHE_SIZE - self.count);
        self.count += n;
        self.stats.recycle_cached += n as u64;
    }

    /// Free slots in the alloc cache (what [`PagePool::recycle_room`] offers).
    #[inline]
    pub fn cache_room(&self) -> usize {
        PP_ALLOC_CACHE_SIZE - self.count
    }

    #[cold]
    fn recycle_cache_full(
        &mut self,
        pfn: Pfn,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut impl DmaMapper,
    ) {
        self.stats.recycle_cache_full += 1;
        if let Some(ring) = self.ring {
            if ring.push(pfn).is_ok() {
                // Still in flight until the owner (this core) takes it out of the ring.
                return;
            }
            self.stats.recycle_ring_full += 1;
        }
        self.owned -= 1;
        self.return_page(pfn, pcp, zone, dma);
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
        debug_assert!(self.in_flight() > 0, "release with nothing in flight");
        self.owned -= 1;
        self.return_page(pfn, pcp, zone, dma);
    }

    /// Take pages out of the recycle ring into the alloc cache, as far as the cache has room
    /// (the slow path does this anyway; a poll loop may call it when idle). Returns how many.
    pub fn drain_ring(&mut self) -> usize {
        self.take_from_ring(PP_ALLOC_CACHE_SIZE)
    }

    /// Pages handed out by [`PagePool::alloc`] and not yet back: not recycled, released, or
    /// taken out of the ring by the owner (a page in the ring still counts), nor released by a
    /// remote CPU that found the ring full.
    #[inline]
    pub fn in_flight(&self) -> u64 {
        let out = self.owned - self.count as u64;
        match self.ring {
            Some(ring) => out - ring.released_count(),
            None => out,
        }
    }

    /// Pages in the alloc cache (mapped, owned by the pool).
    #[inline]
    pub fn cached(&self) -> usize {
        self.count
    }

    /// Pages in the recycle ring now (0 without a ring; a snapshot).
    #[inline]
    pub fn in_ring(&self) -> usize {
        self.ring.map_or(0, RecycleRing::len)
    }

    /// Event counters, including the remote CPUs' ring-full releases.
    #[inline]
    pub fn stats(&self) -> PagePoolStats {
        let mut s = self.stats;
        // Every page that entered the cache (mapped refills, ring drains, same-core recycles)
        // left it by an allocation unless it is still there or `destroy` freed it; slow-path
        // allocations that got a page are the rest.
        let entered = (s.refill_pages - s.refill_failed) + s.recycle_ring + s.recycle_cached;
        let allocated = entered - self.count as u64 - self.destroyed;
        s.alloc_fast = allocated - (s.alloc_slow - s.alloc_empty);
        if let Some(ring) = self.ring {
            s.recycle_ring_full += ring.full_count();
            s.released += ring.released_count();
        }
        s
    }

    /// `page_pool_destroy`: unmap and free every cached page and every page in the recycle ring
    /// to `pcp`. Then, if pages are still in flight, return [`PoolError::InFlight`] with how
    /// many: the kernel drains its queues (recycling or releasing those pages) and calls
    /// `destroy` again until `Ok` (or uses [`PagePool::destroy_wait`]). The pool stays usable
    /// in between. On `Ok` the ring is detached (free for another pool).
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
        loop {
            let n = self.count;
            for &pfn in &self.cache[..n] {
                let p = zone.page(pfn);
                dma.unmap(pfn, p.dma_addr());
                p.set_dma_addr(0);
                p.set_pool(None);
            }
            pcp.free_pages_bulk(zone, &self.cache[..n]);
            self.stats.released += n as u64;
            self.owned -= n as u64;
            self.destroyed += n as u64;
            self.count = 0;
            if self.take_from_ring(PP_ALLOC_CACHE_SIZE) == 0 {
                break;
            }
        }
        match self.in_flight() {
            0 => {
                if let Some(ring) = self.ring.take() {
                    // Fold the remote counts in before the ring forgets them.
                    self.stats.recycle_ring_full += ring.full_count();
                    self.stats.released += ring.released_count();
                    self.owned -= ring.released_count();
                    ring.detach();
                }
                Ok(())
            }
            n => Err(PoolError::InFlight(n)),
        }
    }

    /// [`PagePool::destroy`] with a bounded wait: while pages are in flight, call
    /// `step(pool, pcp, dma, DestroyWait { iteration, in_flight })` — the kernel's poll-loop step
    /// that reaps TX completions and RX buffers and recycles or releases them, and logs the
    /// status when it likes — then try again, at most `max_waits` times.
    ///
    /// Returns `Ok(waits)`: how many steps it took.
    ///
    /// # Errors
    ///
    /// [`PoolError::InFlight`]`(n)` if `n` pages were still out after `max_waits` steps.
    pub fn destroy_wait<D: DmaMapper>(
        &mut self,
        pcp: &mut PerCpuPages,
        zone: &Zone,
        dma: &mut D,
        max_waits: u64,
        mut step: impl FnMut(&mut PagePool, &mut PerCpuPages, &mut D, DestroyWait),
    ) -> Result<u64, PoolError> {
        let mut iteration = 0;
        loop {
            match self.destroy(pcp, zone, dma) {
                Ok(()) => return Ok(iteration),
                Err(PoolError::InFlight(n)) if iteration < max_waits => {
                    step(
                        self,
                        pcp,
                        dma,
                        DestroyWait {
                            iteration,
                            in_flight: n,
                        },
                    );
                    iteration += 1;
                }
                Err(e) => return Err(e),
            }
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
