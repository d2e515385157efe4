//! Per-CPU page lists (pcp) for order-0 pages, and the bulk order-0 API (Linux
//! `struct per_cpu_pages`, `rmqueue_pcplist()`, `free_unref_page()`, `__alloc_pages_bulk()`).
//!
//! # Who may touch a pcp
//!
//! A [`PerCpuPages`] belongs to exactly one CPU and is used only by that CPU, from thread context
//! (its poll loop). Interrupt handlers never touch it: they allocate and free through the
//! zone-locked path ([`Zone::alloc_pages`], [`Zone::free_pages_order`]). Because of that rule
//! the fast path takes no lock and disables no interrupts (Linux 4.11 made the same trade:
//! preempt-disable at ~11 cycles instead of irq save/restore at ~38; order-0 alloc+free went
//! from 213 to 184 cycles). Methods take `&mut self`; keep one `PerCpuPages` per CPU in the
//! per-CPU area and never share it. The zone lock is taken only to refill or flush a whole batch.
//!
//! The rule is enforced in debug builds: once the kernel installs [`set_context_hooks`] (how to
//! tell interrupt context and the current CPU) and names each list's CPU with
//! [`PerCpuPages::set_owner`], every pcp entry point `debug_assert!`s that it runs in thread
//! context on the owning CPU. Release builds compile the check away.
//!
//! # The list
//!
//! A LIFO of PFNs in a fixed ring of [`PCP_MAX_PAGES`] entries: allocation and free use the hot
//! end (the most recently freed page is cache-warm), and overflow flushes `batch` pages from the
//! cold end, chosen before the zone lock is taken (docs/SEED-NOTES.md "Freeing a batch"). Pages on the
//! list have refcount 0 and count as *allocated* from the zone's point of view
//! ([`Zone::free_pages`] excludes them).
//!
//! # Sizing (`batch`, `high`)
//!
//! [`PerCpuPages::new`] follows Linux `zone_batchsize()` and `zone_highsize()`
//! (`mm/page_alloc.c`, 5.14+): `batch` is ~0.1% of the zone or 1 MiB, whichever is smaller,
//! divided by 4 and rounded to `2^n - 1` (to avoid cache-colour aliasing between CPUs), at least
//! 1; `high` is the zone's low watermark split across the CPUs, at least `4 * batch`. Both are
//! then clamped to the ring (see [`PCP_MAX_PAGES`]).
//!
//! # Bulk allocation and partial results
//!
//! [`PerCpuPages::alloc_pages_bulk`] (array form) and [`PerCpuPages::alloc_pages_bulk_list`]
//! (list form) follow Linux 5.13 `__alloc_pages_bulk()`: the zone watermark is checked ONCE for
//! the whole request (`free > low + n`); one empty slot goes to the single-page path; a request
//! for nothing is a caller bug ([`BulkError::ZeroRequest`]). A bulk call **may place fewer pages
//! than asked** — that is a normal result, not an error: callers that need more call again.
//! Fewer pages come back when:
//!
//! * the zone is below `low + n`: the call then serves only the pages already on this pcp list
//!   (they are already out of the buddy lists, so taking them costs the zone's reserve nothing)
//!   instead of draining whole batches from the buddy lists — Linux would fall back to one page
//!   and reclaim; Gannet has no reclaim, so it keeps the reserve for interrupt context;
//! * the buddy lists run out part way.
//!
//! It never returns 0 while the zone or this pcp list has a page: if the bulk path placed none it
//! falls back to one page from [`Zone::alloc_pages`] (the path that may use the reserve).
//! Pages sitting on *other* CPUs' pcp lists are out of reach until those CPUs drain.

use core::fmt;
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::guard::{GuardBatch, GUARD_BATCH};
use crate::page::Page;
use crate::zone::Zone;
use crate::{Pfn, PAGE_SIZE};

/// Capacity of a pcp list, in pages (8 MiB of 4 KiB pages; the ring itself is 16 KiB).
///
/// `high` is clamped to `PCP_MAX_PAGES - 1` (a free pushes one page past `high` before the
/// flush). Linux's default `high` is the low watermark split across CPUs (`zone_highsize()`):
/// 1286 pages for a 1 GiB zone on one CPU, 3096 pages for 4 GiB. 2048 covers the 1-2 GiB
/// appliances we target on one CPU and any size on several, while keeping the per-CPU
/// structure small; bigger lists only delay the buddy merges that fight fragmentation.
/// A power of two, so ring indices are a mask.
pub const PCP_MAX_PAGES: usize = 2048;
const MASK: usize = PCP_MAX_PAGES - 1;

/// `PerCpuPages::owner` value meaning "no owner named": the CPU check is skipped.
const NO_OWNER: u32 = u32::MAX;

/// Hook: are we in interrupt context? (A `fn() -> bool`, stored as a pointer; null = unset.)
static IN_INTERRUPT: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());
/// Hook: the current CPU's id, or `u32::MAX` if unknown. (A `fn() -> u32`; null = unset.)
static CURRENT_CPU: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Install how to tell interrupt context and the current CPU, for the debug-build check of the
/// pcp rule (module docs): each pcp entry point asserts `!in_interrupt()` and, when the list has
/// an owner ([`PerCpuPages::set_owner`]) and `current_cpu()` is not `u32::MAX`, that
/// `current_cpu()` is the owner. Call once at boot; later calls replace the hooks.
pub fn set_context_hooks(in_interrupt: fn() -> bool, current_cpu: fn() -> u32) {
    IN_INTERRUPT.store(in_interrupt as *mut (), Ordering::Release);
    CURRENT_CPU.store(current_cpu as *mut (), Ordering::Release);
}

/// The debug-build check of the pcp rule (see [`set_context_hooks`]).
#[cfg(debug_assertions)]
#[inline(never)]
fn check_context(owner: u32) {
    let irq = IN_INTERRUPT.load(Ordering::Acquire);
    if !irq.is_null() {
        // SAFETY: only `set_context_hooks` stores here, and only a `fn() -> bool`.
        let in_interrupt: fn() -> bool = unsafe { core::mem::transmute(irq) };
        assert!(
            !in_interrupt(),
            "pcp used from interrupt context: use Zone::alloc_pages/free_pages_order there"
        );
    }
    let cpu = CURRENT_CPU.load(Ordering::Acquire);
    if owner != NO_OWNER && !cpu.is_null() {
        // SAFETY: only `set_context_hooks` stores here, and only a `fn() -> u32`.
        let current_cpu: fn() -> u32 = unsafe { core::mem::transmute(cpu) };
        let me = current_cpu();
        assert!(
            me == u32::MAX || me == owner,
            "pcp of CPU {owner} used from CPU {me}: only the owning CPU may touch its pcp"
        );
    }
}

/// Error of the bulk allocation API.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum BulkError {
    /// The request was for no pages: the array had no empty slot, or `nr`/the output slice was 0.
    /// A caller bug (Linux warns and returns 0).
    ZeroRequest,
}

impl fmt::Display for BulkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BulkError::ZeroRequest => f.write_str("bulk page allocation requested zero pages"),
        }
    }
}

/// A per-CPU list of free order-0 pages in front of a [`Zone`]. See the module docs for the
/// ownership rule (owning CPU, thread context only).
pub struct PerCpuPages {
    /// Pages on the list.
    count: usize,
    /// Flush threshold: after a free, more than `high` pages triggers a flush of `batch`.
    high: usize,
    /// Pages moved per refill/flush.
    batch: usize,
    /// Ring index of the coldest page; the hottest is at `tail + count - 1`.
    tail: usize,
    /// Owning CPU for the debug-build context check ([`NO_OWNER`] = not named).
    owner: u32,
    list: [Pfn; PCP_MAX_PAGES],
    /// With the page guard ([`crate::guard`]): freed pages waiting for their direct-map flush
    /// before they go on `list`.
    guard_batch: GuardBatch,
}

/// Linux `zone_batchsize()` (MMU case), from the zone's managed pages.
fn zone_batchsize(managed: u64) -> usize {
    let mut batch = core::cmp::min(managed >> 10, (1u64 << 20) / PAGE_SIZE as u64) as usize;
    batch /= 4;
    if batch < 1 {
        batch = 1;
    }
    let b = batch + batch / 2;
    let pow2 = 1usize << (usize::BITS - 1 - b.leading_zeros());
    core::cmp::max(1, pow2 - 1)
}

/// Linux `zone_highsize()` with `percpu_pagelist_high_fraction` = 0: low watermark split
/// across CPUs, at least `4 * batch`.
fn zone_highsize(low_wmark: u64, batch: usize, ncpus: usize) -> usize {
    let high = (low_wmark / core::cmp::max(ncpus, 1) as u64) as usize;
    core::cmp::max(high, batch << 2)
}

impl PerCpuPages {
    /// An empty pcp list sized for `zone` shared by `ncpus` CPUs (`ncpus == 0` counts as 1):
    /// `batch` from `zone_batchsize()`, `high` from `zone_highsize()` (module docs), both in
    /// pages and clamped as in [`PerCpuPages::with_params`]. Size the zone
    /// ([`Zone::add_free_range`]) first: the values derive from its managed pages.
    ///
    /// The structure is ~16 KiB; keep it in the per-CPU area rather than on a small stack.
    pub fn new(zone: &Zone, ncpus: usize) -> PerCpuPages {
        let batch = zone_batchsize(zone.managed_pages());
        let high = zone_highsize(zone.watermarks().low, batch, ncpus);
        PerCpuPages::with_params(high, batch)
    }

    /// An empty pcp list with explicit `high` and `batch` (pages). Clamped, never panics:
    /// `batch` to `1..=PCP_MAX_PAGES - 1`, then `high` to `batch..=PCP_MAX_PAGES - 1`.
    /// `const`, so a per-CPU area can be a static.
    pub const fn with_params(high: usize, batch: usize) -> PerCpuPages {
        let batch = if batch < 1 {
            1
        } else if batch > PCP_MAX_PAGES - 1 {
            PCP_MAX_PAGES - 1
        } else {
            batch
        };
        let high = if high < batch {
            batch
        } else if high > PCP_MAX_PAGES - 1 {
            PCP_MAX_PAGES - 1
        } else {
            high
        };
        PerCpuPages {
            count: 0,
            high,
            batch,
            tail: 0,
            owner: NO_OWNER,
            list: [Pfn(0); PCP_MAX_PAGES],
            guard_batch: GuardBatch::new(),
        }
    }

    /// Name the CPU that owns this list, for the debug-build check (see [`set_context_hooks`]).
    pub fn set_owner(&mut self, cpu: u32) {
        self.owner = cpu;
    }

    /// The CPU named by [`PerCpuPages::set_owner`], if any.
    pub fn owner(&self) -> Option<u32> {
        (self.owner != NO_OWNER).then_some(self.owner)
    }

    /// Debug builds: assert the pcp rule (thread context, owning CPU). Nothing in release.
    #[inline(always)]
    fn check(&self) {
        #[cfg(debug_assertions)]
        check_context(self.owner);
    }

    /// Pages currently on the list.
    #[inline]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Flush threshold in pages: a free that leaves more than `high` pages flushes `batch`.
    #[inline]
    pub fn high(&self) -> usize {
        self.high
    }

    /// Pages moved between the list and the buddy lists per refill or flush.
    #[inline]
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Allocate one order-0 page: pop the hottest page; if the list is empty, first refill
    /// `batch` pages with [`Zone::rmqueue_bulk`] (one lock hold). The page gets refcount 1.
    /// Returns `None` only if the list and the zone are both empty. No watermark check.
    #[inline]
    pub fn alloc_page(&mut self, zone: &Zone) -> Option<Pfn> {
        self.check();
        if self.count == 0 && self.refill(zone, self.batch) == 0 {
            return None;
        }
        let pfn = self.pop_unchecked();
        prep_new_page(zone, pfn);
        Some(pfn)
    }

    /// Free one order-0 page that the caller owns (refcount 0, or 1 = the caller's last
    /// reference): push it on the list (refcount 0, pool and DMA address cleared); if the list
    /// then holds more than `high` pages, flush the `batch` coldest to the buddy lists in one lock
    /// hold.
    ///
    /// # Panics
    ///
    /// If `pfn` is outside `zone`. Debug builds also panic if the page is free, reserved,
    /// still referenced by someone else (refcount > 1) or not order 0.
    #[inline]
    pub fn free_page(&mut self, zone: &Zone, pfn: Pfn) {
        self.check();
        let p = zone.page(pfn);
        debug_assert!(
            p.refcount() <= 1,
            "free_page: PFN {:#x} still referenced",
            pfn.0
        );
        self.free_owned(zone, p, pfn);
    }

    /// Bulk order-0 allocation, array form (Linux 5.13 `alloc_pages_bulk_array`): fill only the
    /// `None` slots of `pages`, in slot order, with pages of refcount 1. Slots already `Some`
    /// are left alone.
    ///
    /// Returns `Ok(n)`: the number of pages THIS call placed (Linux returns the number of
    /// populated entries including those already there; we return only the new ones so the
    /// caller can account them). `n` may be smaller than the number of empty slots — see the
    /// module docs on partial results; then the earliest empty slots are the filled ones.
    /// `Ok(0)` only when this pcp list and the zone are both empty.
    ///
    /// One empty slot goes straight to [`PerCpuPages::alloc_page`]. Otherwise the watermark is
    /// checked once for the whole request; when the list runs dry it is refilled with
    /// `max(batch, pages still wanted)` pages in one lock hold.
    ///
    /// # Errors
    ///
    /// [`BulkError::ZeroRequest`] if no slot is empty (caller bug).
    pub fn alloc_pages_bulk(
        &mut self,
        zone: &Zone,
        pages: &mut [Option<Pfn>],
    ) -> Result<usize, BulkError> {
        self.check();
        let nr = pages.iter().filter(|p| p.is_none()).count();
        if nr == 0 {
            return Err(BulkError::ZeroRequest);
        }
        if nr == 1 {
            let slot = pages
                .iter_mut()
                .find(|p| p.is_none())
                .expect("one empty slot");
            *slot = self.alloc_page(zone);
            return Ok(slot.is_some() as usize);
        }
        let may_refill = self.bulk_may_refill(zone, nr);
        let mut placed = 0;
        for slot in pages.iter_mut() {
            if slot.is_some() {
                continue;
            }
            match self.bulk_take(zone, may_refill, nr - placed) {
                Some(pfn) => *slot = Some(pfn),
                None => break,
            }
            placed += 1;
        }
        if placed == 0 {
            if let Some(pfn) = fallback(zone) {
                *pages.iter_mut().find(|p| p.is_none()).expect("empty slot") = Some(pfn);
                placed = 1;
            }
        }
        Ok(placed)
    }

    /// Bulk order-0 allocation, list form (Linux 5.13 `alloc_pages_bulk_list`): write up to
    /// `min(nr, out.len())` pages of refcount 1 to `out[0..n]` and return `Ok(n)`. To append to a
    /// buffer that already holds `len` pages, pass `&mut buf[len..]` and add `n` to `len`.
    /// Same semantics as [`PerCpuPages::alloc_pages_bulk`]: one page goes to the single-page
    /// path, watermark checked once, `n` may be smaller than asked, `Ok(0)` only when this pcp
    /// list and the zone are both empty.
    ///
    /// # Errors
    ///
    /// [`BulkError::ZeroRequest`] if `nr == 0` or `out` is empty (caller bug).
    pub fn alloc_pages_bulk_list(
        &mut self,
        zone: &Zone,
        nr: usize,
        out: &mut [Pfn],
    ) -> Result<usize, BulkError> {
        self.check();
        let mut nr = nr.min(out.len());
        if nr == 0 {
            return Err(BulkError::ZeroRequest);
        }
        // The fault image: an allocator that gives less than asked, or nothing (callers must
        // cope with any `n`); the release image compiles this to nothing.
        if crate::fault::hit(crate::fault::Fault::BulkZero) {
            return Ok(0);
        }
        if nr > 1 && crate::fault::hit(crate::fault::Fault::BulkShort) {
            nr /= 2;
        }
        if nr == 1 {
            return Ok(match self.alloc_page(zone) {
                Some(pfn) => {
                    out[0] = pfn;
                    1
                }
                None => 0,
            });
        }
        let may_refill = self.bulk_may_refill(zone, nr);
        let mut placed = 0;
        for slot in &mut out[..nr] {
            match self.bulk_take(zone, may_refill, nr - placed) {
                Some(pfn) => *slot = pfn,
                None => break,
            }
            placed += 1;
        }
        if placed == 0 {
            if let Some(pfn) = fallback(zone) {
                out[0] = pfn;
                placed = 1;
            }
        }
        Ok(placed)
    }

    /// Drop one reference on each page of `pfns` and free, to this list, those whose count
    /// reaches 0 — one pass, flushing `batch` pages to the zone whenever the list passes `high`
    /// (Linux `release_pages()` / `free_pages_bulk`). Order-0 pages only.
    ///
    /// # Panics
    ///
    /// If a PFN is outside `zone`. Debug builds also panic on a page whose refcount is already 0.
    pub fn free_pages_bulk(&mut self, zone: &Zone, pfns: &[Pfn]) {
        self.check();
        for &pfn in pfns {
            let p = zone.page(pfn);
            if p.put_testzero() {
                self.free_owned(zone, p, pfn);
            }
        }
    }

    /// Return every page on this list to the buddy lists, in one lock hold
    /// (`drain_local_pages`). Called by the owning CPU, e.g. when another CPU asks for a drain.
    /// With the page guard it first flushes this list's guard batch, and afterwards the zone's
    /// ([`Zone::flush_guard_pending`]), so every free page is in the buddy lists.
    pub fn drain_local_pages(&mut self, zone: &Zone) {
        self.check();
        self.flush_guard(zone);
        self.flush_cold(zone, self.count);
        zone.flush_guard_pending();
    }

    /// Pages freed to this list that wait for their page-guard flush (0 without the guard):
    /// free, but neither on the list nor in the zone yet.
    #[inline]
    pub fn guard_pending(&self) -> usize {
        self.guard_batch.frames().len()
    }

    /// With the page guard: flush the pages waiting in the guard batch (one shootdown) and put
    /// them on the list. Nothing without the guard or with an empty batch.
    pub fn flush_guard(&mut self, zone: &Zone) {
        let Some(g) = zone.guard() else { return };
        if self.guard_batch.frames().is_empty() {
            return;
        }
        // Split the borrows: the batch is flushed while its frames go onto the list.
        let PerCpuPages {
            guard_batch,
            list,
            count,
            tail,
            high,
            batch,
            ..
        } = self;
        let mut ring = Ring {
            list,
            count,
            tail,
            high: *high,
            batch: *batch,
        };
        g.flush(guard_batch, &mut |pfn| ring.push(zone, pfn));
    }

    // ---------------------------------------------------------------- internals

    /// Take a page for a bulk request (`__rmqueue_pcplist` inlined into the bulk loop, as the
    /// seeds found necessary). `want` = pages the request still needs.
    #[inline(always)]
    fn bulk_take(&mut self, zone: &Zone, may_refill: bool, want: usize) -> Option<Pfn> {
        if self.count == 0 {
            if !may_refill {
                return None;
            }
            let n = core::cmp::max(self.batch, want).min(PCP_MAX_PAGES);
            if self.refill(zone, n) == 0 {
                return None;
            }
        }
        let pfn = self.pop_unchecked();
        prep_new_page(zone, pfn);
        Some(pfn)
    }

    /// The once-per-request watermark check: may this request pull pages out of the buddy
    /// lists? (`zone_watermark_fast(zone, 0, low + nr)`.)
    #[inline]
    fn bulk_may_refill(&self, zone: &Zone, nr: usize) -> bool {
        zone.free_pages() > zone.watermarks().low + nr as u64
    }

    /// Refill an empty list with up to `n` pages in one lock hold; returns pages added.
    #[inline]
    fn refill(&mut self, zone: &Zone, n: usize) -> usize {
        debug_assert_eq!(self.count, 0);
        self.tail = 0;
        let got = zone.rmqueue_bulk_raw(n, &mut self.list[..n.min(PCP_MAX_PAGES)]);
        self.count = got;
        got
    }

    /// Pop the hottest page; the list must not be empty.
    #[inline(always)]
    fn pop_unchecked(&mut self) -> Pfn {
        debug_assert!(self.count > 0);
        self.count -= 1;
        self.list[(self.tail + self.count) & MASK]
    }

    /// Push an owned page, flushing `batch` cold pages if the list passes `high`.
    #[inline(always)]
    fn free_owned(&mut self, zone: &Zone, p: &Page, pfn: Pfn) {
        debug_assert!(
            !p.is_buddy() && !p.is_reserved(),
            "free_page: PFN {:#x} is free or reserved",
            pfn.0
        );
        debug_assert_eq!(p.order(), 0, "free_page: PFN {:#x} is not order 0", pfn.0);
        p.set_refcount(0);
        p.set_pool(None);
        p.set_dma_addr(0);
        if let Some(g) = zone.guard() {
            let va = g.unmap(pfn);
            self.guard_batch.add_page(va, g.mask());
            let full = self.guard_batch.add_free(pfn).is_err();
            debug_assert!(!full, "guard batch overfilled");
            if self.guard_batch.frames().len() >= g.batch_pages().clamp(1, GUARD_BATCH) {
                self.flush_guard(zone);
            }
            return;
        }
        self.push(zone, pfn);
    }

    /// Put a free page on the list, flushing `batch` cold pages if the list passes `high`.
    #[inline(always)]
    fn push(&mut self, zone: &Zone, pfn: Pfn) {
        self.ring().push(zone, pfn);
    }

    /// Return the `n` coldest pages to the zone in one lock hold (`free_pcppages_bulk`).
    fn flush_cold(&mut self, zone: &Zone, n: usize) {
        self.ring().flush_cold(zone, n);
    }

    /// The list as a [`Ring`] (borrowed fields).
    #[inline(always)]
    fn ring(&mut self) -> Ring<'_> {
        Ring {
            list: &mut self.list,
            count: &mut self.count,
            tail: &mut self.tail,
            high: self.high,
            batch: self.batch,
        }
    }

    /// The frames waiting in the guard batch (tests).
    #[cfg(test)]
    pub(crate) fn guard_frames(&self) -> &[Pfn] {
        self.guard_batch.frames()
    }

    /// The PFNs on the list, coldest first (tests and debugging).
    #[cfg(test)]
    pub(crate) fn pages(&self) -> impl Iterator<Item = Pfn> + '_ {
        (0..self.count).map(move |i| self.list[(self.tail + i) & MASK])
    }
}

/// The list's ring fields, borrowed apart from the rest of a [`PerCpuPages`] (so the guard
/// batch can be flushed while its frames are pushed).
struct Ring<'a> {
    list: &'a mut [Pfn; PCP_MAX_PAGES],
    count: &'a mut usize,
    tail: &'a mut usize,
    high: usize,
    batch: usize,
}

impl Ring<'_> {
    #[inline(always)]
    fn push(&mut self, zone: &Zone, pfn: Pfn) {
        self.list[(*self.tail + *self.count) & MASK] = pfn;
        *self.count += 1;
        if *self.count > self.high {
            self.flush_cold(zone, self.batch);
        }
    }

    fn flush_cold(&mut self, zone: &Zone, n: usize) {
        let n = n.min(*self.count);
        if n == 0 {
            return;
        }
        let start = *self.tail;
        let first = n.min(PCP_MAX_PAGES - start);
        zone.free_pcppages_bulk2(&self.list[start..start + first], &self.list[..n - first]);
        *self.tail = (*self.tail + n) & MASK;
        *self.count -= n;
    }
}

/// Fallback when the bulk path placed nothing: one page from the zone-locked path.
#[inline(never)]
fn fallback(zone: &Zone) -> Option<Pfn> {
    zone.alloc_pages(0)
}

/// Prepare a page leaving the allocator (`prep_new_page` + `set_page_refcounted`); with the
/// page guard, map it again.
#[inline(always)]
fn prep_new_page(zone: &Zone, pfn: Pfn) {
    if let Some(g) = zone.guard() {
        g.map(pfn);
    }
    zone.page(pfn).set_refcount(1);
}

#[cfg(test)]
mod tests;
