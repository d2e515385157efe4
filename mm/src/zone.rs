//! The buddy allocator for one zone (Linux `struct zone`, `mm/page_alloc.c`).
//!
//! Past ~800 lines because the free lists, the deferred `mem_map` initialisation and the
//! free-page accounts share one lock and one set of invariants (a slot is written before it is
//! listed, every page counted once); its inline tests are the last ~440 lines.
//!
//! A zone spans PFNs `[start_pfn, start_pfn + mem_map.len())`, possibly with holes (pages never
//! handed to [`Zone::add_free_range`] stay reserved and are never merged with). Free memory is
//! kept as naturally aligned blocks of `2^order` pages, `order` in `0..=MAX_ORDER`; alignment is
//! on the *absolute* PFN, so a block's buddy is `pfn ^ (1 << order)` whatever the zone start.
//!
//! Free lists are intrusive and doubly linked through `u32` indices stored in [`Page`], so taking
//! a buddy out of its list while merging is O(1); a bitmap of non-empty orders makes finding the
//! smallest usable order O(1).
//!
//! # Deferred `mem_map` initialisation
//!
//! Writing one [`Page`] per frame of a large span is most of a boot's memory set-up (about 5.5
//! guest instructions per page; 355k instructions for 256 MiB, growing with RAM). As Linux's
//! `CONFIG_DEFERRED_STRUCT_PAGE_INIT` (`deferred_init_memmap`, `deferred_grow_zone`), the boot
//! may write `mem_map` only up to a [`MAX_ORDER`]-block boundary and hand the RAM above it with
//! [`Zone::defer_fresh_ranges`]: those pages count as managed and free at once (so the
//! watermarks, the pcp sizes and every free-page account are what a full init gives), and their
//! slots are written and listed a chunk at a time by [`Zone::deferred_init_step`] (the boot CPU
//! after `ready`) or, when the buddy lists run dry first, by the allocation itself. The boundary
//! is block-aligned, so no block below it has a buddy above it: a slot is never read before it
//! is written.
//!
//! # Locking
//!
//! All free-list state lives behind one spin lock (`zone->lock`). On the bare-metal target the
//! lock is taken with local interrupts disabled (`spin_lock_irqsave`), so the zone-locked entry
//! points ([`Zone::alloc_pages`], [`Zone::free_pages_order`], ...) may be called from any
//! context, including interrupt handlers. Batch entry points ([`Zone::rmqueue_bulk`],
//! [`Zone::free_pcppages_bulk`]) take the lock once per batch, not once per page.
//!
//! # Watermarks
//!
//! `min`/`low`/`high` (pages) are derived from the managed pages the way Linux does at boot
//! (`calculate_min_free_kbytes()` then `__setup_per_zone_wmarks()`): `min_free_kbytes =
//! sqrt(16 * managed_kbytes)` clamped to `[128, 262144]` KiB, `min` = that in pages, and
//! `low = min + d`, `high = min + 2d` with `d = max(min / 4, managed * 10 / 10000)`
//! (`watermark_scale_factor` = 10). With no reclaim in Gannet, watermarks only steer the bulk
//! path (see [`crate::pcp`]): below `low` a bulk request no longer drains whole batches out of the
//! buddy lists, which keeps a reserve for interrupt-context allocations. The single-page paths
//! fail only when the zone is empty.

use core::mem::ManuallyDrop;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use spin::mutex::{SpinMutex, SpinMutexGuard};

use crate::guard::{PageGuard, ZoneGuardBatch};
use crate::irq;
use crate::page::{Page, NIL, PG_BUDDY, PG_RESERVED};
use crate::{Pfn, MAX_ORDER};

/// Zone watermarks, in pages of free memory (buddy lists only, not pcp lists).
#[derive(Copy, Clone, PartialEq, Eq, Debug, Default)]
pub struct Watermarks {
    /// `WMARK_MIN`: the reserve kept for allocations that must not fail (interrupt context).
    pub min: u64,
    /// `WMARK_LOW`: below this, bulk allocation degrades (see [`crate::pcp`]).
    pub low: u64,
    /// `WMARK_HIGH`: comfortable level.
    pub high: u64,
}

impl Watermarks {
    /// Watermarks Linux would compute for a single zone of `managed` pages (4 KiB each):
    /// `calculate_min_free_kbytes()` + `__setup_per_zone_wmarks()`, `watermark_scale_factor` 10.
    pub fn for_managed_pages(managed: u64) -> Watermarks {
        let kbytes = managed * (crate::PAGE_SIZE as u64 / 1024);
        let min_free_kbytes = int_sqrt(kbytes * 16).clamp(128, 262_144);
        let min = min_free_kbytes >> (crate::PAGE_SHIFT - 10);
        let d = core::cmp::max(min / 4, managed * 10 / 10_000);
        Watermarks {
            min,
            low: min + d,
            high: min + 2 * d,
        }
    }
}

/// Integer square root (floor), like the kernel's `int_sqrt()`.
fn int_sqrt(x: u64) -> u64 {
    if x < 2 {
        return x;
    }
    // Newton's method from an over-estimate; converges monotonically down.
    let mut r = 1u64 << (64 - x.leading_zeros()).div_ceil(2);
    loop {
        let next = (r + x / r) / 2;
        if next >= r {
            return r;
        }
        r = next;
    }
}

/// Free-list state, guarded by the zone lock.
struct FreeArea {
    /// Head index (into `mem_map`) of the free list of each order, `NIL` if empty.
    head: [u32; MAX_ORDER + 1],
    /// Number of free blocks per order.
    nr_free: [u64; MAX_ORDER + 1],
    /// Bit `o` set iff `head[o] != NIL`.
    nonempty: u32,
    /// With the page guard: pages freed straight to the zone, unmapped, waiting for their
    /// shootdown ([`crate::guard`]); neither free nor allocated.
    guard_batch: ZoneGuardBatch,
}

/// Zone lock guard: releases the spin lock, then restores the interrupt state.
struct ZoneGuard<'a> {
    guard: ManuallyDrop<SpinMutexGuard<'a, FreeArea>>,
    irq: irq::IrqState,
}

impl Deref for ZoneGuard<'_> {
    type Target = FreeArea;
    #[inline]
    fn deref(&self) -> &FreeArea {
        &self.guard
    }
}

impl DerefMut for ZoneGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut FreeArea {
        &mut self.guard
    }
}

impl Drop for ZoneGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: dropped exactly once, here; not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        irq::restore(self.irq);
    }
}

/// Most free RAM ranges [`Zone::defer_fresh_ranges`] takes (a firmware memory map above a
/// boundary has a handful).
pub const MAX_DEFERRED_RANGES: usize = 16;

/// Pages the allocation paths initialise per step when the buddy lists are empty and pages
/// are still deferred (Linux `deferred_grow_zone` grows by sections): one [`MAX_ORDER`]
/// block, 4 MiB, about 6k guest instructions.
pub const DEFERRED_GROW_PAGES: u64 = 1 << MAX_ORDER;

/// What [`Zone::defer_fresh_ranges`] left to do: the `mem_map` slots from `next` to the span's
/// end are unwritten, and `ranges[..n]` (PFNs, sorted, disjoint, at or past the boundary) are
/// the free RAM among them.
struct Deferred {
    next: u64,
    ranges: [(u64, u64); MAX_DEFERRED_RANGES],
    n: usize,
}

/// A zone: buddy free lists for a span of frames, with counters and watermarks.
///
/// `Zone` is `Sync`: share it as `&'static Zone` (or `&Zone` in tests) between CPUs.
pub struct Zone {
    start_pfn: u64,
    mem_map: &'static [Page],
    lock: SpinMutex<FreeArea>,
    /// Pages in the buddy free lists; written only under the lock, read without it.
    free: AtomicU64,
    /// Deferred `mem_map` initialisation (module docs): what is left, and the free pages in
    /// it not listed yet (counted free and managed; written under both locks).
    deferred: SpinMutex<Deferred>,
    deferred_pages: AtomicU64,
    /// Pages ever added by `add_free_range`.
    managed: AtomicU64,
    wmark_min: AtomicU64,
    wmark_low: AtomicU64,
    wmark_high: AtomicU64,
    /// Set by `set_watermarks`: stop deriving watermarks from managed pages.
    wmark_fixed: AtomicBool,
    /// The page guard, once installed ([`Zone::set_guard`]).
    guard: spin::Once<&'static dyn PageGuard>,
    /// Pages in the zone's guard batch (written under the lock, read without it).
    guard_pending: AtomicU64,
    /// Pages freed in interrupt context while the zone's guard batch was full: unmapped but
    /// put on the free lists without their shootdown ([`crate::guard`]).
    guard_unflushed: AtomicU64,
}

impl Zone {
    /// A zone over PFNs `[start_pfn, start_pfn + mem_map.len())` with no free memory yet.
    ///
    /// `mem_map` holds one [`Page`] per PFN of the span, all reserved ([`Page::new`]); hand RAM
    /// to the allocator with [`Zone::add_free_range`].
    ///
    /// # Panics
    ///
    /// If `mem_map.len() >= u32::MAX` (free-list links are `u32` indices; that is 16 TiB) or the
    /// span overflows the PFN space.
    pub fn new(start_pfn: Pfn, mem_map: &'static [Page]) -> Zone {
        assert!(
            (mem_map.len() as u64) < NIL as u64,
            "Zone::new: mem_map of {} pages exceeds the u32 index space",
            mem_map.len()
        );
        assert!(
            start_pfn.0.checked_add(mem_map.len() as u64).is_some(),
            "Zone::new: span overflows"
        );
        let w = Watermarks::for_managed_pages(0);
        Zone {
            start_pfn: start_pfn.0,
            mem_map,
            lock: SpinMutex::new(FreeArea {
                head: [NIL; MAX_ORDER + 1],
                nr_free: [0; MAX_ORDER + 1],
                nonempty: 0,
                guard_batch: ZoneGuardBatch::new(),
            }),
            free: AtomicU64::new(0),
            deferred: SpinMutex::new(Deferred {
                next: u64::MAX,
                ranges: [(0, 0); MAX_DEFERRED_RANGES],
                n: 0,
            }),
            deferred_pages: AtomicU64::new(0),
            managed: AtomicU64::new(0),
            wmark_min: AtomicU64::new(w.min),
            wmark_low: AtomicU64::new(w.low),
            wmark_high: AtomicU64::new(w.high),
            wmark_fixed: AtomicBool::new(false),
            guard: spin::Once::new(),
            guard_pending: AtomicU64::new(0),
            guard_unflushed: AtomicU64::new(0),
        }
    }

    /// Install the page guard ([`crate::guard`]): every page now in the buddy free lists is
    /// unmapped ([`PageGuard::unmap`], under the zone lock); from now on every freed page is
    /// unmapped until allocated again, and every allocation maps its pages. Returns the pages
    /// unmapped. The caller flushes the old translations before the pages can be reused (at
    /// boot only the boot CPU has run: a local flush). Once; a second call does nothing and
    /// returns 0. Install it at boot, before any pcp list is used and before other CPUs
    /// allocate.
    pub fn set_guard(&self, guard: &'static dyn PageGuard) -> u64 {
        // The guard unmaps what the lists hold: every deferred page is listed first.
        self.deferred_init_all();
        let fa = self.lock();
        let mut unmapped = 0;
        self.guard.call_once(|| {
            for o in 0..=MAX_ORDER {
                let mut idx = fa.head[o];
                while idx != NIL {
                    let pfn = self.start_pfn + idx as u64;
                    for k in 0..1u64 << o {
                        guard.unmap(Pfn(pfn + k));
                    }
                    unmapped += 1u64 << o;
                    idx = self.page_at(idx).next();
                }
            }
            guard
        });
        drop(fa);
        unmapped
    }

    /// The installed page guard, if any.
    #[inline]
    pub fn guard(&self) -> Option<&'static dyn PageGuard> {
        self.guard.get().copied()
    }

    /// Pages freed straight to the zone that wait in its guard batch for their shootdown (0
    /// without the guard): free, but not in the buddy lists yet.
    #[inline]
    pub fn guard_pending(&self) -> u64 {
        self.guard_pending.load(Relaxed)
    }

    /// Pages freed in interrupt context that went to the free lists unmapped but without their
    /// shootdown because the zone's guard batch was full (0 without the guard).
    #[inline]
    pub fn guard_unflushed(&self) -> u64 {
        self.guard_unflushed.load(Relaxed)
    }

    /// With the page guard: shoot down what waits in the zone's guard batch and put it on the
    /// free lists. Thread context only (it waits for every CPU's acknowledgement); does nothing
    /// without the guard, with an empty batch, or when [`PageGuard::may_flush`] says no.
    pub fn flush_guard_pending(&self) {
        let Some(g) = self.guard() else { return };
        if self.guard_pending.load(Relaxed) == 0 || !g.may_flush() {
            return;
        }
        let b = core::mem::take(&mut self.lock().guard_batch);
        self.guard_flush_batch(g, b);
    }

    /// Map `n` pages from `pfn` through the guard (they are being handed out).
    #[inline]
    fn guard_map(&self, pfn: u64, n: u64) {
        if let Some(g) = self.guard() {
            for i in 0..n {
                g.map(Pfn(pfn + i));
            }
        }
    }

    /// First PFN of the span.
    pub fn start_pfn(&self) -> Pfn {
        Pfn(self.start_pfn)
    }

    /// One past the last PFN of the span.
    pub fn end_pfn(&self) -> Pfn {
        Pfn(self.start_pfn + self.mem_map.len() as u64)
    }

    /// Hand RAM PFNs `[start, end)` to the buddy allocator, as maximal naturally aligned blocks
    /// (merging with free neighbours added earlier). Returns the number of pages added.
    ///
    /// The range is clipped to the zone's span, and PFN 0 is always skipped (never handed out:
    /// virtio treats physical address 0 as failure). Recomputes the watermarks unless they were
    /// fixed with [`Zone::set_watermarks`]. Meant for boot, but safe at any time.
    ///
    /// # Panics
    ///
    /// If a page in the (clipped) range was already added (is not reserved): adding RAM twice
    /// would corrupt the free lists.
    pub fn add_free_range(&self, start: Pfn, end: Pfn) -> u64 {
        let s = start.0.max(self.start_pfn).max(1);
        let e = end.0.min(self.end_pfn().0);
        if s >= e {
            return 0;
        }
        let pages = &self.mem_map[(s - self.start_pfn) as usize..(e - self.start_pfn) as usize];
        // One pass (it is most of a boot's `zone` phase: 64k pages at 256 MiB): a page found
        // added already stops it before that page is touched; the pages before it, reserved a
        // moment ago and on no list, are simply lost to the panic.
        for (i, p) in pages.iter().enumerate() {
            assert!(
                p.flags() == PG_RESERVED,
                "add_free_range: PFN {:#x} was already added",
                s + i as u64
            );
            p.set_flags(0);
            p.set_refcount(0);
            p.set_pool(None);
        }
        self.list_range(s, e)
    }

    /// [`Zone::add_free_range`] for pages already in the [`Page::new_free`] state, as a
    /// `mem_map` written in one pass at boot leaves them: lists `[start, end)` without the
    /// per-page pass (about 10 instructions per page, most of a boot's `zone` phase). Returns
    /// the number of pages added. Clipping, PFN 0 and the watermarks as in `add_free_range`.
    ///
    /// The caller hands over disjoint ranges only (each page once): a page's state is checked
    /// here only at the head of each block listed.
    ///
    /// # Panics
    ///
    /// If a block's head page carries a flag (reserved, or already on a free list): the range
    /// was not written with `Page::new_free`, or was added already.
    pub fn add_fresh_range(&self, start: Pfn, end: Pfn) -> u64 {
        let s = start.0.max(self.start_pfn).max(1);
        let e = end.0.min(self.end_pfn().0);
        if s >= e {
            return 0;
        }
        let mut pfn = s;
        while pfn < e {
            let p = &self.mem_map[(pfn - self.start_pfn) as usize];
            assert!(
                p.flags() == 0 && p.refcount() == 0,
                "add_fresh_range: PFN {pfn:#x} is not a fresh page (flags {:#x})",
                p.flags()
            );
            pfn += 1 << Self::block_order(pfn, e);
        }
        self.list_range(s, e)
    }

    /// List `[s, e)` (inside the span, PFN 0 excluded, every page unlisted with no flag and
    /// refcount 0) as maximal aligned blocks, through the guard if there is one; count the pages as
    /// managed and free. Returns `e - s`.
    fn list_range(&self, s: u64, e: u64) -> u64 {
        let n = e - s;
        if let Some(g) = self.guard() {
            let mut pfn = s;
            while pfn < e {
                let order = Self::block_order(pfn, e);
                self.guard_free(g, pfn, order);
                pfn += 1 << order;
            }
        } else {
            let mut fa = self.lock();
            let mut pfn = s;
            while pfn < e {
                let order = Self::block_order(pfn, e);
                self.free_one(&mut fa, pfn, order);
                pfn += 1 << order;
            }
            self.free.store(self.free.load(Relaxed) + n, Relaxed);
        }
        let managed = self.managed.fetch_add(n, Relaxed) + n;
        if !self.wmark_fixed.load(Relaxed) {
            self.store_watermarks(Watermarks::for_managed_pages(managed));
        }
        n
    }

    /// `true` if `pfn` lies in the zone's span (whether RAM, hole, free or allocated).
    #[inline]
    pub fn contains(&self, pfn: Pfn) -> bool {
        pfn.0.wrapping_sub(self.start_pfn) < self.mem_map.len() as u64
    }

    /// Metadata of frame `pfn`.
    ///
    /// # Panics
    ///
    /// If `pfn` is outside the zone's span (a PFN from another zone or a corrupted PFN).
    #[inline]
    pub fn page(&self, pfn: Pfn) -> &Page {
        match self
            .mem_map
            .get(pfn.0.wrapping_sub(self.start_pfn) as usize)
        {
            Some(p) if pfn.0 >= self.start_pfn => p,
            _ => panic!("Zone::page: PFN {:#x} outside the zone", pfn.0),
        }
    }

    /// Pages currently in the buddy free lists (not counting pages cached on pcp lists), and
    /// the deferred free pages not listed yet (module docs: they are free, listed on demand).
    /// While a step moves pages from the second count to the first, a reader without the lock
    /// may see the sum off by that step's pages.
    #[inline]
    pub fn free_pages(&self) -> u64 {
        self.free.load(Relaxed) + self.deferred_pages.load(Relaxed)
    }

    /// Free pages still waiting for deferred `mem_map` initialisation (module docs); 0 once
    /// [`Zone::deferred_init_step`] has covered the span, or when nothing was deferred.
    #[inline]
    pub fn deferred_pages(&self) -> u64 {
        self.deferred_pages.load(Relaxed)
    }

    /// Hand the free RAM `ranges` (PFN ranges, sorted, disjoint) at or past `from` to the zone
    /// with their `mem_map` slots, and every slot from `from` to the span's end, **not written
    /// yet** (deferred `mem_map` initialisation, module docs): the pages count as managed and
    /// free now (watermarks follow) and are written and listed by
    /// [`Zone::deferred_init_step`] or on demand. Parts of `ranges` below `from` are ignored
    /// (hand them over with [`Zone::add_fresh_range`]). Returns the pages deferred.
    ///
    /// # Panics
    ///
    /// If `from` is not a multiple of `2^MAX_ORDER` pages (a block below it could then have a
    /// buddy above it) nor the span's end (nothing deferred), lies outside the span, if more than [`MAX_DEFERRED_RANGES`] ranges
    /// reach past it, or on a second call.
    pub fn defer_fresh_ranges(&self, from: Pfn, ranges: &[(Pfn, Pfn)]) -> u64 {
        let end = self.end_pfn().0;
        assert!(
            (from.0.is_multiple_of(1 << MAX_ORDER) || from.0 == end)
                && from.0 >= self.start_pfn
                && from.0 <= end,
            "defer_fresh_ranges: boundary PFN {:#x} not block-aligned inside the span",
            from.0
        );
        let irq = irq::save_disable();
        let mut d = self.deferred.lock();
        assert!(d.next == u64::MAX, "defer_fresh_ranges: called twice");
        let mut pages = 0;
        for &(s, e) in ranges {
            let (s, e) = (s.0.max(from.0).max(1), e.0.min(end));
            if s >= e {
                continue;
            }
            assert!(
                d.n < MAX_DEFERRED_RANGES,
                "defer_fresh_ranges: more than {MAX_DEFERRED_RANGES} ranges"
            );
            let n = d.n;
            d.ranges[n] = (s, e);
            d.n += 1;
            pages += e - s;
        }
        d.next = from.0;
        self.deferred_pages.store(pages, Relaxed);
        drop(d);
        irq::restore(irq);
        let managed = self.managed.fetch_add(pages, Relaxed) + pages;
        if !self.wmark_fixed.load(Relaxed) {
            self.store_watermarks(Watermarks::for_managed_pages(managed));
        }
        pages
    }

    /// One step of deferred `mem_map` initialisation: write the next `max_pages` slots (rounded
    /// up to whole [`MAX_ORDER`] blocks; reserved, or free for the deferred ranges' pages) and
    /// list their free pages. Returns the pages listed, or `None` when nothing is left. Any
    /// context (another CPU's step is waited for, interrupts off, as the zone lock); the zone
    /// lock is taken only for the listing, once per step.
    pub fn deferred_init_step(&self, max_pages: u64) -> Option<u64> {
        let end = self.end_pfn().0;
        let irq = irq::save_disable();
        // Interrupts are off while the lock is held (as the zone lock's `spin_lock_irqsave`), so
        // no holder is ever interrupted on its own CPU: waiting here cannot deadlock.
        let mut d = self.deferred.lock();
        if d.next >= end {
            drop(d);
            irq::restore(irq);
            return None;
        }
        let from = d.next;
        let stop = (from + max_pages.max(1))
            .next_multiple_of(1 << MAX_ORDER)
            .min(end);
        let fill = |a: u64, b: u64, reserved: bool| {
            for pfn in a..b {
                self.mem_map[(pfn - self.start_pfn) as usize].reinit(reserved);
            }
        };
        let mut pfn = from;
        for &(s, e) in &d.ranges[..d.n] {
            let (s, e) = (s.max(from), e.min(stop));
            if s < e {
                fill(pfn, s, true);
                fill(s, e, false);
                pfn = e;
            }
        }
        fill(pfn, stop, true);
        let mut listed = 0;
        {
            let mut fa = self.lock();
            for &(s, e) in &d.ranges[..d.n] {
                let (s, e) = (s.max(from), e.min(stop));
                let mut pfn = s;
                while pfn < e {
                    let order = Self::block_order(pfn, e);
                    self.free_one(&mut fa, pfn, order);
                    pfn += 1 << order;
                }
                listed += e.saturating_sub(s);
            }
            self.free.store(self.free.load(Relaxed) + listed, Relaxed);
            self.deferred_pages
                .store(self.deferred_pages.load(Relaxed) - listed, Relaxed);
        }
        d.next = stop;
        drop(d);
        irq::restore(irq);
        Some(listed)
    }

    /// Finish deferred `mem_map` initialisation now (before the page guard, which walks the
    /// whole span). Returns the pages listed.
    pub fn deferred_init_all(&self) -> u64 {
        let mut n = 0;
        while let Some(k) = self.deferred_init_step(u64::MAX / 2) {
            n += k;
        }
        n
    }

    /// An allocation found the buddy lists short: if pages are still deferred, initialise
    /// the next chunk ([`DEFERRED_GROW_PAGES`], as Linux's `deferred_grow_zone`) and say
    /// whether to look again. Cold: never taken once the span is covered.
    #[cold]
    #[inline(never)]
    fn deferred_grow(&self) -> bool {
        self.deferred_pages.load(Relaxed) > 0
            && self.deferred_init_step(DEFERRED_GROW_PAGES).is_some()
    }

    /// Pages ever added by [`Zone::add_free_range`] (`zone_managed_pages()`).
    #[inline]
    pub fn managed_pages(&self) -> u64 {
        self.managed.load(Relaxed)
    }

    /// Allocate one naturally aligned block of `2^order` pages from the buddy lists, under the
    /// zone lock. Usable from any context, including interrupt handlers. The head page gets
    /// refcount 1 and records `order`; no pool, `dma_addr` 0.
    ///
    /// Returns `None` if no block of that order or larger is free, or if `order > MAX_ORDER`.
    /// Does not look at watermarks (this is the path that may use the reserve). With the page
    /// guard, a request the buddy lists cannot serve first shoots down the zone's guard batch
    /// ([`Zone::flush_guard_pending`], thread context) and tries again.
    pub fn alloc_pages(&self, order: usize) -> Option<Pfn> {
        if order > MAX_ORDER {
            return None;
        }
        let pfn = match self.take_block(order) {
            Some(pfn) => pfn,
            None if self.guard_pending() > 0 => {
                self.flush_guard_pending();
                self.take_block(order)?
            }
            None => return None,
        };
        self.guard_map(pfn, 1 << order);
        let p = self.page_at_pfn(pfn);
        p.set_order(order);
        p.set_refcount(1);
        Some(Pfn(pfn))
    }

    /// Free a block of `2^order` pages starting at `pfn` to the buddy lists, merging with free
    /// buddies (`__free_one_page`). The caller owns the block (refcount 0 or 1, as returned by
    /// [`Zone::alloc_pages`] with the same `order`); its refcount is set to 0 and its pool and
    /// DMA address cleared. Usable from any context.
    ///
    /// # Panics
    ///
    /// If `pfn` is outside the zone or `order > MAX_ORDER`. In debug builds also if the page is
    /// already free, reserved, misaligned for `order`, or still referenced (refcount > 1).
    pub fn free_pages_order(&self, pfn: Pfn, order: usize) {
        assert!(
            order <= MAX_ORDER,
            "free_pages_order: order {order} > MAX_ORDER"
        );
        let p = self.page(pfn);
        self.prep_free(p, pfn);
        debug_assert_eq!(pfn.0 & ((1 << order) - 1), 0, "misaligned block");
        if let Some(g) = self.guard() {
            self.guard_free(g, pfn.0, order);
            return;
        }
        let mut fa = self.lock();
        self.free_one(&mut fa, pfn.0, order);
        self.free
            .store(self.free.load(Relaxed) + (1 << order), Relaxed);
    }

    /// Take up to `count` order-0 pages from the buddy lists in ONE lock hold and write them to
    /// `out[0..n]`; returns `n` (`n <= min(count, out.len())`, smaller only if the zone ran out).
    ///
    /// The pages come out with refcount 0: they are in transit to a pcp list (Linux
    /// `rmqueue_bulk`); whoever hands one out sets refcount 1 (see [`crate::PerCpuPages`]).
    pub fn rmqueue_bulk(&self, count: usize, out: &mut [Pfn]) -> usize {
        let n = self.rmqueue_bulk_raw(count, out);
        for p in &out[..n] {
            self.guard_map(p.0, 1);
        }
        n
    }

    /// [`Zone::rmqueue_bulk`] without mapping the pages through the guard: for a pcp refill,
    /// whose pops map them.
    pub(crate) fn rmqueue_bulk_raw(&self, count: usize, out: &mut [Pfn]) -> usize {
        let n = count.min(out.len());
        if n == 0 {
            return 0;
        }
        let mut taken = 0;
        loop {
            let mut fa = self.lock();
            let before = taken;
            for slot in &mut out[taken..n] {
                match self.rmqueue(&mut fa, 0) {
                    Some(pfn) => *slot = Pfn(pfn),
                    None => break,
                }
                taken += 1;
            }
            self.free
                .store(self.free.load(Relaxed) - (taken - before) as u64, Relaxed);
            drop(fa);
            if taken == n || !self.deferred_grow() {
                return taken;
            }
        }
    }

    /// Return order-0 pages to the buddy lists in ONE lock hold (Linux `free_pcppages_bulk`).
    /// The caller chose the pages before calling (so the lock covers only the merges) and owns
    /// them; their refcounts are set to 0. With the page guard each page is unmapped and goes
    /// through the zone's guard batch first, as with [`Zone::free_pages_order`].
    ///
    /// # Panics
    ///
    /// If a PFN is outside the zone (before the lock is taken). Debug builds also check that no
    /// page is already free.
    pub fn free_pcppages_bulk(&self, pfns: &[Pfn]) {
        if let Some(g) = self.guard() {
            for &pfn in pfns {
                let p = self.page(pfn);
                self.prep_free(p, pfn);
                self.guard_free(g, pfn.0, 0);
            }
            return;
        }
        self.free_pcppages_bulk2(pfns, &[]);
    }

    /// [`Zone::free_pcppages_bulk`] for a batch split in two slices (a wrapped ring), still one
    /// lock hold, without the guard's unmap: for a pcp list, whose pages are unmapped already.
    pub(crate) fn free_pcppages_bulk2(&self, a: &[Pfn], b: &[Pfn]) {
        if a.is_empty() && b.is_empty() {
            return;
        }
        for &pfn in a.iter().chain(b) {
            let p = self.page(pfn);
            self.prep_free(p, pfn);
        }
        let mut fa = self.lock();
        for &pfn in a.iter().chain(b) {
            self.free_one(&mut fa, pfn.0, 0);
        }
        let n = (a.len() + b.len()) as u64;
        self.free.store(self.free.load(Relaxed) + n, Relaxed);
    }

    /// Free blocks per order, `[order 0, ..., order MAX_ORDER]`, like one line of
    /// `/proc/buddyinfo`.
    pub fn buddyinfo(&self) -> [u64; MAX_ORDER + 1] {
        self.lock().nr_free
    }

    /// Unusable free space index for an allocation of `order` (Linux `unusable_free_index()`,
    /// `/sys/kernel/debug/extfrag/unusable_index`), in thousandths: the share of free pages that
    /// sit in blocks smaller than `2^order`. 0 when nothing is free or `order == 0`; 1000 when no
    /// block of `order` or larger exists. Returns 1000 for `order > MAX_ORDER`.
    pub fn unusable_index(&self, order: usize) -> u32 {
        if order > MAX_ORDER {
            return 1000;
        }
        let info = self.buddyinfo();
        let free: u64 = info.iter().enumerate().map(|(o, &n)| n << o).sum();
        if free == 0 {
            return 0;
        }
        let suitable: u64 = info[order..].iter().enumerate().map(|(d, &n)| n << d).sum();
        (((free - (suitable << order)) * 1000) / free) as u32
    }

    /// Current watermarks (pages). Derived from [`Zone::managed_pages`] (see module docs) unless
    /// overridden with [`Zone::set_watermarks`].
    pub fn watermarks(&self) -> Watermarks {
        Watermarks {
            min: self.wmark_min.load(Relaxed),
            low: self.wmark_low.load(Relaxed),
            high: self.wmark_high.load(Relaxed),
        }
    }

    /// Fix the watermarks (pages), like tuning `vm.min_free_kbytes`; later
    /// [`Zone::add_free_range`] calls no longer recompute them.
    pub fn set_watermarks(&self, w: Watermarks) {
        self.wmark_fixed.store(true, Relaxed);
        self.store_watermarks(w);
    }

    /// The first PFN and order of the free block that has been free the longest among those of
    /// the highest order, without taking it: the last of its list (frees and splits add at the
    /// head, allocations take from the head). Diagnostics; the test-only console command
    /// `uaf buddy` writes into it to show that pages free since boot are unmapped. `None` if
    /// nothing is free.
    pub fn peek_free_block(&self) -> Option<(Pfn, usize)> {
        let fa = self.lock();
        let o = fa.nonempty.checked_ilog2()? as usize;
        let mut idx = fa.head[o];
        while self.page_at(idx).next() != NIL {
            idx = self.page_at(idx).next();
        }
        Some((Pfn(self.start_pfn + idx as u64), o))
    }

    // ---------------------------------------------------------------- internals

    /// One block of `order` out of the buddy lists, under the lock.
    #[inline(always)]
    fn take_block(&self, order: usize) -> Option<u64> {
        loop {
            let mut fa = self.lock();
            if let Some(pfn) = self.rmqueue(&mut fa, order) {
                self.free
                    .store(self.free.load(Relaxed) - (1 << order), Relaxed);
                return Some(pfn);
            }
            drop(fa);
            if !self.deferred_grow() {
                return None;
            }
        }
    }

    /// The order of the largest naturally aligned block at `pfn` that ends at or before `end`.
    #[inline]
    fn block_order(pfn: u64, end: u64) -> usize {
        let align = pfn.trailing_zeros() as usize;
        let fit = (63 - (end - pfn).leading_zeros()) as usize;
        align.min(fit).min(MAX_ORDER)
    }

    /// With the guard: free the owned block `[pfn, pfn + 2^order)` (metadata already reset)
    /// through the zone's guard batch: unmap its pages, queue it, and in thread context shoot
    /// the batch down when it is full (module docs of [`crate::guard`]).
    fn guard_free(&self, g: &'static dyn PageGuard, pfn: u64, order: usize) {
        let n = 1usize << order;
        let va = g.unmap(Pfn(pfn));
        for k in 1..n as u64 {
            g.unmap(Pfn(pfn + k));
        }
        let mask = g.mask();
        let may_flush = g.may_flush();
        let fits = |b: &ZoneGuardBatch| {
            if order == 0 {
                b.frames().len() < crate::guard::ZONE_GUARD_FRAMES
            } else {
                b.va_ranges().len() < crate::tlb::BATCH_RANGES
            }
        };
        let mut fa = self.lock();
        while !fits(&fa.guard_batch) {
            if !may_flush {
                // Interrupt context and no room: on the free lists unmapped, unflushed.
                self.free_one(&mut fa, pfn, order);
                self.free.store(self.free.load(Relaxed) + n as u64, Relaxed);
                self.guard_unflushed.fetch_add(n as u64, Relaxed);
                return;
            }
            let full = core::mem::take(&mut fa.guard_batch);
            drop(fa);
            self.guard_flush_batch(g, full);
            fa = self.lock();
        }
        fa.guard_batch.add_pages(va, n, mask);
        let added = if order == 0 {
            fa.guard_batch.add_free(Pfn(pfn))
        } else {
            fa.guard_batch.add_va_range(Pfn(pfn).addr(), n)
        };
        debug_assert!(added.is_ok(), "zone guard batch overfilled");
        self.guard_pending.fetch_add(n as u64, Relaxed);
        let flush = may_flush && fa.guard_batch.is_full();
        let batch = flush.then(|| core::mem::take(&mut fa.guard_batch));
        drop(fa);
        if let Some(b) = batch {
            self.guard_flush_batch(g, b);
        }
    }

    /// Shoot down a batch taken out of the zone (no lock held: the wait may be long and other
    /// CPUs may need the lock to answer), then put its frames and blocks on the free lists.
    #[inline(never)]
    fn guard_flush_batch(&self, g: &'static dyn PageGuard, mut b: ZoneGuardBatch) {
        if b.is_empty() {
            return;
        }
        g.flush_zone(
            &mut b,
            &mut |pfn| self.guard_release(pfn.0, 0),
            &mut |paddr, pages| {
                self.guard_release(Pfn::from_addr(paddr).0, pages.trailing_zeros() as usize)
            },
        );
    }

    /// A block whose shootdown completed goes on the free lists.
    fn guard_release(&self, pfn: u64, order: usize) {
        let mut fa = self.lock();
        self.free_one(&mut fa, pfn, order);
        self.free
            .store(self.free.load(Relaxed) + (1 << order), Relaxed);
        self.guard_pending.fetch_sub(1 << order, Relaxed);
    }

    fn store_watermarks(&self, w: Watermarks) {
        self.wmark_min.store(w.min, Relaxed);
        self.wmark_low.store(w.low, Relaxed);
        self.wmark_high.store(w.high, Relaxed);
    }

    #[inline]
    fn lock(&self) -> ZoneGuard<'_> {
        let irq = irq::save_disable();
        ZoneGuard {
            guard: ManuallyDrop::new(self.lock.lock()),
            irq,
        }
    }

    #[inline(always)]
    fn page_at(&self, idx: u32) -> &Page {
        &self.mem_map[idx as usize]
    }

    #[inline(always)]
    fn page_at_pfn(&self, pfn: u64) -> &Page {
        &self.mem_map[(pfn - self.start_pfn) as usize]
    }

    /// Checks and metadata reset before a page goes back to the buddy lists.
    #[inline(always)]
    fn prep_free(&self, p: &Page, pfn: Pfn) {
        debug_assert!(
            p.flags() & (PG_BUDDY | PG_RESERVED) == 0,
            "freeing PFN {:#x}: already free or reserved",
            pfn.0
        );
        debug_assert!(
            p.refcount() <= 1,
            "freeing PFN {:#x}: still referenced",
            pfn.0
        );
        let _ = pfn;
        p.set_refcount(0);
        p.set_pool(None);
        p.set_dma_addr(0);
    }

    #[inline(always)]
    fn list_add(&self, fa: &mut FreeArea, idx: u32, order: usize) {
        let p = self.page_at(idx);
        let head = fa.head[order];
        p.set_prev(NIL);
        p.set_next(head);
        if head != NIL {
            self.page_at(head).set_prev(idx);
        }
        fa.head[order] = idx;
        fa.nonempty |= 1 << order;
        fa.nr_free[order] += 1;
        p.set_order(order);
        p.set_flags(PG_BUDDY);
    }

    #[inline(always)]
    fn list_del(&self, fa: &mut FreeArea, idx: u32, order: usize) {
        let p = self.page_at(idx);
        let (prev, next) = (p.prev(), p.next());
        if prev != NIL {
            self.page_at(prev).set_next(next);
        } else {
            fa.head[order] = next;
            if next == NIL {
                fa.nonempty &= !(1 << order);
            }
        }
        if next != NIL {
            self.page_at(next).set_prev(prev);
        }
        fa.nr_free[order] -= 1;
        p.set_flags(0);
        p.set_next(NIL);
        p.set_prev(NIL);
    }

    /// `__rmqueue_smallest`: take a block of `order` (absolute PFN), splitting a larger one.
    #[inline(always)]
    fn rmqueue(&self, fa: &mut FreeArea, order: usize) -> Option<u64> {
        let avail = fa.nonempty >> order;
        if avail == 0 {
            return None;
        }
        let mut cur = order + avail.trailing_zeros() as usize;
        let idx = fa.head[cur];
        self.list_del(fa, idx, cur);
        while cur > order {
            cur -= 1;
            self.list_add(fa, idx + (1 << cur), cur);
        }
        self.page_at(idx).set_order(order);
        Some(self.start_pfn + idx as u64)
    }

    /// `__free_one_page`: insert a block (absolute PFN) into the free lists, merging buddies.
    #[inline]
    fn free_one(&self, fa: &mut FreeArea, mut pfn: u64, mut order: usize) {
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            let bidx = buddy.wrapping_sub(self.start_pfn);
            let Some(bp) = self.mem_map.get(bidx as usize) else {
                break;
            };
            if buddy < self.start_pfn || bp.flags() != PG_BUDDY || bp.order() != order {
                break;
            }
            self.list_del(fa, bidx as u32, order);
            pfn &= !(1 << order);
            order += 1;
        }
        self.list_add(fa, (pfn - self.start_pfn) as u32, order);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::boxed::Box;
    use std::vec::Vec;

    /// A zone over `[start, start + len)` with a leaked mem_map and nothing free yet.
    pub(crate) fn empty_zone(start: u64, len: usize) -> &'static Zone {
        let map: Vec<Page> = (0..len).map(|_| Page::new()).collect();
        let map: &'static [Page] = Box::leak(map.into_boxed_slice());
        Box::leak(Box::new(Zone::new(Pfn(start), map)))
    }

    /// A zone over `[start, start + len)` with all of it free (PFN 0 excepted).
    pub(crate) fn zone(start: u64, len: usize) -> &'static Zone {
        let z = empty_zone(start, len);
        z.add_free_range(Pfn(start), Pfn(start + len as u64));
        z
    }

    /// Every page in the zone's guard batch (frames and blocks).
    pub(crate) fn guard_batch_pfns(z: &Zone) -> Vec<u64> {
        let fa = z.lock();
        let b = &fa.guard_batch;
        let mut v: Vec<u64> = b.frames().iter().map(|p| p.0).collect();
        for &(a, n) in b.va_ranges() {
            v.extend((0..n as u64).map(|k| Pfn::from_addr(a).0 + k));
        }
        assert_eq!(v.len() as u64, z.guard_pending());
        v
    }

    /// Walk every free list and check links, flags, counters; returns all free PFNs.
    pub(crate) fn check_free_lists(z: &Zone) -> Vec<u64> {
        let fa = z.lock();
        let mut pfns = Vec::new();
        for o in 0..=MAX_ORDER {
            let mut idx = fa.head[o];
            let mut prev = NIL;
            let mut n = 0;
            while idx != NIL {
                let p = z.page_at(idx);
                assert_eq!(p.prev(), prev);
                assert_eq!(p.flags(), PG_BUDDY);
                assert_eq!(p.order(), o);
                let pfn = z.start_pfn + idx as u64;
                assert_eq!(pfn & ((1 << o) - 1), 0, "misaligned free block");
                for k in 0..(1u64 << o) {
                    pfns.push(pfn + k);
                }
                prev = idx;
                idx = p.next();
                n += 1;
            }
            assert_eq!(n, fa.nr_free[o]);
            assert_eq!(fa.nonempty & (1 << o) != 0, n != 0);
        }
        assert_eq!(pfns.len() as u64, z.free_pages());
        pfns
    }

    #[test]
    fn int_sqrt_matches_float() {
        for x in [
            0u64,
            1,
            2,
            3,
            4,
            15,
            16,
            17,
            1 << 20,
            4_194_304,
            123_456_789,
            u64::MAX,
        ] {
            let r = int_sqrt(x);
            assert!(r.checked_mul(r).is_some_and(|v| v <= x), "{x}");
            assert!((r + 1).checked_mul(r + 1).is_none_or(|v| v > x), "{x}");
        }
    }

    #[test]
    fn watermarks_follow_linux_formula() {
        // 1 GiB: min_free_kbytes = sqrt(1 GiB in KiB * 16) = 4096 KiB = 1024 pages;
        // d = max(256, 262144 * 10 / 10000 = 262) = 262.
        let w = Watermarks::for_managed_pages(262_144);
        assert_eq!(
            w,
            Watermarks {
                min: 1024,
                low: 1286,
                high: 1548
            }
        );
        // Tiny zone: clamped to 128 KiB = 32 pages, d = 8.
        assert_eq!(
            Watermarks::for_managed_pages(100),
            Watermarks {
                min: 32,
                low: 40,
                high: 48
            }
        );
    }

    #[test]
    fn add_free_range_makes_maximal_aligned_blocks_and_skips_pfn0() {
        let z = empty_zone(0, 4096);
        assert_eq!(z.free_pages(), 0);
        // [0, 4096) minus PFN 0: 1 + 2 + 4 + ... + 512 then 3 blocks of 1024.
        assert_eq!(z.add_free_range(Pfn(0), Pfn(4096)), 4095);
        assert_eq!(z.managed_pages(), 4095);
        assert_eq!(z.buddyinfo(), [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3]);
        assert!(z.page(Pfn(0)).is_reserved());
        let free = check_free_lists(z);
        assert!(!free.contains(&0));
        assert_eq!(z.watermarks(), Watermarks::for_managed_pages(4095));
    }

    #[test]
    fn unaligned_zone_start_and_holes() {
        // Span [100, 1124); RAM [100, 600) and [700, 1124): a hole in between.
        let z = empty_zone(100, 1024);
        assert_eq!(z.add_free_range(Pfn(0), Pfn(600)), 500); // clipped to the span
        assert_eq!(z.add_free_range(Pfn(700), Pfn(5000)), 424);
        assert_eq!(z.free_pages(), 924);
        let free = check_free_lists(z);
        assert!(free.iter().all(|&p| !(600..700).contains(&p)));
        assert!(z.page(Pfn(650)).is_reserved());
        // Allocate everything: never a hole page.
        let mut got = Vec::new();
        while let Some(p) = z.alloc_pages(0) {
            assert!(!(600..700).contains(&p.0) && p.0 >= 100 && p.0 < 1124);
            got.push(p);
        }
        assert_eq!(got.len(), 924);
        for p in got {
            z.free_pages_order(p, 0);
        }
        assert_eq!(z.free_pages(), 924);
        check_free_lists(z);
    }

    /// A zone over `[start, start + len)` whose mem_map was written in one pass: `fresh`
    /// ranges in the `Page::new_free` state, the rest reserved; nothing listed yet.
    fn one_pass_zone(start: u64, len: usize, fresh: &[(u64, u64)]) -> &'static Zone {
        let map: Vec<Page> = (start..start + len as u64)
            .map(|pfn| {
                if fresh.iter().any(|&(s, e)| (s..e).contains(&pfn)) {
                    Page::new_free()
                } else {
                    Page::new()
                }
            })
            .collect();
        let map: &'static [Page] = Box::leak(map.into_boxed_slice());
        Box::leak(Box::new(Zone::new(Pfn(start), map)))
    }

    /// A zone over `[start, start + len)` as a boot with deferred `mem_map` initialisation
    /// leaves it: slots below `boundary` written in one pass (`ranges` free, the rest
    /// reserved) and their free pages listed; slots from `boundary` on left as garbage and
    /// `ranges` above it deferred.
    fn deferred_zone(
        start: u64,
        len: usize,
        ranges: &[(u64, u64)],
        boundary: u64,
    ) -> &'static Zone {
        let map: Vec<Page> = (start..start + len as u64)
            .map(|pfn| {
                if pfn >= boundary {
                    Page::garbage()
                } else if ranges.iter().any(|&(s, e)| (s..e).contains(&pfn)) {
                    Page::new_free()
                } else {
                    Page::new()
                }
            })
            .collect();
        let map: &'static [Page] = Box::leak(map.into_boxed_slice());
        let z: &'static Zone = Box::leak(Box::new(Zone::new(Pfn(start), map)));
        for &(s, e) in ranges {
            if s < boundary {
                z.add_fresh_range(Pfn(s), Pfn(e.min(boundary)));
            }
        }
        let pfns: Vec<(Pfn, Pfn)> = ranges.iter().map(|&(s, e)| (Pfn(s), Pfn(e))).collect();
        z.defer_fresh_ranges(Pfn(boundary), &pfns);
        z
    }

    /// The span's free pages, handed over the ordinary way (every slot written first).
    fn full_zone(start: u64, len: usize, ranges: &[(u64, u64)]) -> &'static Zone {
        let z = one_pass_zone(start, len, ranges);
        for &(s, e) in ranges {
            z.add_fresh_range(Pfn(s), Pfn(e));
        }
        z
    }

    // Span [100, 9100); RAM [100, 600), [700, 5000) (across the boundary 2048) and
    // [6000, 9000): unaligned ends, a hole below and above the boundary, a reserved tail.
    const DEFER_RANGES: [(u64, u64); 3] = [(100, 600), (700, 5000), (6000, 9000)];

    #[test]
    fn deferred_init_counts_every_page_at_once_and_lists_the_same_blocks() {
        let full = full_zone(100, 9000, &DEFER_RANGES);
        let z = deferred_zone(100, 9000, &DEFER_RANGES, 2048);
        // Free, managed and the watermarks are what a full init gives, before any step.
        assert_eq!(z.free_pages(), full.free_pages());
        assert_eq!(z.managed_pages(), full.managed_pages());
        assert_eq!(z.watermarks(), full.watermarks());
        assert_eq!(z.deferred_pages(), (5000 - 2048) + (9000 - 6000));
        // Listed so far: only the pages below the boundary.
        assert_eq!(
            z.buddyinfo()
                .iter()
                .enumerate()
                .map(|(o, n)| n << o)
                .sum::<u64>(),
            500 + 2048 - 700
        );
        // One block per step: [2048, 3072) first.
        assert_eq!(z.deferred_init_step(1), Some(1024));
        assert_eq!(z.deferred_init_all(), (5000 - 3072) + (9000 - 6000));
        assert_eq!(z.deferred_init_step(1), None);
        assert_eq!(z.deferred_pages(), 0);
        assert_eq!(z.free_pages(), full.free_pages());
        assert_eq!(z.buddyinfo(), full.buddyinfo());
        check_free_lists(z);
        // Every slot past the boundary was written: reserved in the holes, free (no flag) in RAM.
        for pfn in 2048..9100u64 {
            let p = z.page(Pfn(pfn));
            let ram = DEFER_RANGES.iter().any(|&(s, e)| (s..e).contains(&pfn));
            assert_eq!(p.is_reserved(), !ram, "PFN {pfn}");
            assert_eq!(p.refcount(), 0, "PFN {pfn}");
            assert_eq!(p.pool(), None, "PFN {pfn}");
        }
    }

    #[test]
    fn allocation_grows_a_deferred_zone_on_demand() {
        let full = full_zone(100, 9000, &DEFER_RANGES);
        let z = deferred_zone(100, 9000, &DEFER_RANGES, 1024);
        let total = z.free_pages();
        // Bulk and single allocations take every free page, deferred ones included, and only
        // RAM pages.
        let mut got = Vec::new();
        let mut buf = [Pfn(0); 700];
        loop {
            let n = z.rmqueue_bulk(700, &mut buf);
            got.extend_from_slice(&buf[..n]);
            match z.alloc_pages(0) {
                Some(p) => got.push(p),
                None => break,
            }
        }
        assert_eq!(got.len() as u64, total);
        assert_eq!(z.deferred_pages(), 0);
        assert_eq!(z.free_pages(), 0);
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len() as u64, total);
        assert!(got
            .iter()
            .all(|p| DEFER_RANGES.iter().any(|&(s, e)| (s..e).contains(&p.0))));
        z.free_pcppages_bulk(&got);
        assert_eq!(z.free_pages(), total);
        assert_eq!(z.buddyinfo(), full.buddyinfo());
        check_free_lists(z);
        // An order-10 block past the boundary, found by growing.
        let z = deferred_zone(100, 9000, &DEFER_RANGES, 1024);
        let b = z.alloc_pages(MAX_ORDER).expect("a 4 MiB block is deferred");
        assert_eq!(b.0 % 1024, 0);
        assert!(b.0 >= 1024);
    }

    #[test]
    #[should_panic(expected = "not block-aligned")]
    fn defer_fresh_ranges_needs_a_block_aligned_boundary() {
        deferred_zone(100, 9000, &DEFER_RANGES, 2000);
    }

    #[test]
    fn add_fresh_range_lists_the_same_blocks_as_add_free_range() {
        // Span [100, 5196); RAM [100, 600) and [700, 5000): unaligned ends, a hole, a tail.
        let ranges = [(100, 600), (700, 5000)];
        let fresh = one_pass_zone(100, 5096, &ranges);
        let two_pass = empty_zone(100, 5096);
        for &(s, e) in &ranges {
            assert_eq!(fresh.add_fresh_range(Pfn(s), Pfn(e)), e - s);
            assert_eq!(two_pass.add_free_range(Pfn(s), Pfn(e)), e - s);
        }
        assert_eq!(fresh.buddyinfo(), two_pass.buddyinfo());
        assert_eq!(fresh.free_pages(), 4800);
        assert_eq!(fresh.managed_pages(), 4800);
        assert_eq!(fresh.watermarks(), two_pass.watermarks());
        assert_eq!(check_free_lists(fresh), check_free_lists(two_pass));
        assert!(fresh.page(Pfn(650)).is_reserved() && fresh.page(Pfn(5100)).is_reserved());
        // Every page can be allocated and freed back to the same lists.
        let before = fresh.buddyinfo();
        let mut got = Vec::new();
        while let Some(p) = fresh.alloc_pages(0) {
            assert!((100..600).contains(&p.0) || (700..5000).contains(&p.0));
            got.push(p);
        }
        assert_eq!(got.len(), 4800);
        for p in got {
            fresh.free_pages_order(p, 0);
        }
        assert_eq!(fresh.buddyinfo(), before);
    }

    #[test]
    #[should_panic(expected = "not a fresh page")]
    fn add_fresh_range_twice_panics() {
        let z = one_pass_zone(0, 64, &[(8, 32)]);
        z.add_fresh_range(Pfn(8), Pfn(32));
        z.add_fresh_range(Pfn(16), Pfn(32));
    }

    #[test]
    #[should_panic(expected = "not a fresh page")]
    fn add_fresh_range_of_reserved_pages_panics() {
        let z = one_pass_zone(0, 64, &[(8, 16)]);
        z.add_fresh_range(Pfn(16), Pfn(32));
    }

    #[test]
    #[should_panic(expected = "already added")]
    fn add_twice_panics() {
        let z = empty_zone(0, 64);
        z.add_free_range(Pfn(8), Pfn(16));
        z.add_free_range(Pfn(12), Pfn(20));
    }

    #[test]
    #[should_panic(expected = "outside the zone")]
    fn page_outside_span_panics() {
        let z = empty_zone(10, 64);
        let _ = z.page(Pfn(9));
    }

    #[test]
    fn split_and_merge_back_to_top_order() {
        let z = zone(1024, 4096); // 4 blocks of order 10, PFN 0 not in span
        let before = z.buddyinfo();
        assert_eq!(before, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4]);
        // Mixed orders, freed in a scrambled order.
        let mut blocks = Vec::new();
        for order in [0usize, 3, 0, 1, 5, 2, 0, 10, 4, 0, 7] {
            let p = z.alloc_pages(order).expect("alloc");
            assert_eq!(p.0 & ((1 << order) - 1), 0, "naturally aligned");
            assert_eq!(z.page(p).refcount(), 1);
            assert_eq!(z.page(p).order(), order);
            blocks.push((p, order));
        }
        let used: u64 = blocks.iter().map(|&(_, o)| 1u64 << o).sum();
        assert_eq!(z.free_pages(), 4096 - used);
        check_free_lists(z);
        let n = blocks.len();
        for i in 0..n {
            let (p, o) = blocks[(i * 7) % n];
            z.free_pages_order(p, o);
            assert_eq!(z.page(p).refcount(), 0);
        }
        assert_eq!(z.free_pages(), 4096);
        assert_eq!(z.buddyinfo(), before);
        check_free_lists(z);
        assert_eq!(z.unusable_index(10), 0);
    }

    #[test]
    fn exhaustion_then_full_restore() {
        let z = zone(0, 2048);
        let managed = z.managed_pages();
        assert_eq!(managed, 2047);
        let before = z.buddyinfo();
        let mut got = Vec::new();
        while let Some(p) = z.alloc_pages(0) {
            assert_ne!(p.0, 0, "PFN 0 handed out");
            got.push(p);
        }
        assert_eq!(got.len() as u64, managed);
        assert_eq!(z.free_pages(), 0);
        assert_eq!(z.alloc_pages(0), None);
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "a page was handed out twice");
        for p in got.into_iter().rev() {
            z.free_pages_order(p, 0);
        }
        assert_eq!(z.free_pages(), managed);
        assert_eq!(z.buddyinfo(), before);
    }

    #[test]
    fn high_order_fails_when_fragmented() {
        let z = zone(1024, 1024);
        let pages: Vec<Pfn> = (0..1024).map(|_| z.alloc_pages(0).unwrap()).collect();
        // Free every other page: 512 free pages, none mergeable.
        for p in pages.iter().step_by(2) {
            z.free_pages_order(*p, 0);
        }
        assert_eq!(z.free_pages(), 512);
        assert_eq!(z.buddyinfo()[0], 512);
        assert_eq!(z.alloc_pages(1), None);
        assert_eq!(z.unusable_index(1), 1000);
        assert_eq!(z.unusable_index(0), 0);
        assert_eq!(z.alloc_pages(MAX_ORDER + 1), None);
    }

    #[test]
    fn rmqueue_bulk_and_free_pcppages_bulk() {
        let z = zone(1024, 1024);
        let mut out = [Pfn(0); 100];
        assert_eq!(z.rmqueue_bulk(64, &mut out), 64);
        assert_eq!(z.free_pages(), 1024 - 64);
        assert!(out[..64]
            .iter()
            .all(|p| z.page(*p).refcount() == 0 && !z.page(*p).is_buddy()));
        // count larger than the slice: bounded by the slice
        let mut small = [Pfn(0); 3];
        assert_eq!(z.rmqueue_bulk(10, &mut small), 3);
        z.free_pcppages_bulk(&out[..64]);
        z.free_pcppages_bulk(&small);
        assert_eq!(z.free_pages(), 1024);
        assert_eq!(z.buddyinfo()[MAX_ORDER], 1);
        // Running out part way.
        let mut big = [Pfn(0); 2000];
        assert_eq!(z.rmqueue_bulk(2000, &mut big), 1024);
        assert_eq!(z.free_pages(), 0);
        z.free_pcppages_bulk(&big[..1024]);
        assert_eq!(z.buddyinfo()[MAX_ORDER], 1);
    }
}
