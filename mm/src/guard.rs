//! The page guard (`guard=on`): every free page leaves the kernel's direct (identity) map
//! until it is allocated again, so a use-after-free faults instead of corrupting the next
//! owner's data. Invariant while the guard is installed: a page in the buddy lists, on a pcp
//! list or waiting in a guard batch is unmapped; an allocated page is mapped. Each page is
//! unmapped exactly once per free and mapped exactly once per allocation.
//!
//! This crate never touches page tables: the kernel implements [`PageGuard`] (PTE present bit,
//! the batched TLB shootdown of [`crate::tlb`]) and installs it with
//! [`Zone::set_guard`](crate::Zone::set_guard). The zone and the pcp lists then call it:
//!
//! * **install** ([`Zone::set_guard`](crate::Zone::set_guard), boot CPU, before any other CPU
//!   runs): [`PageGuard::unmap`] for every page in the buddy free lists; the kernel then
//!   flushes its own TLB (only it has run).
//! * **free through a pcp** ([`PerCpuPages::free_page`](crate::PerCpuPages::free_page) and the
//!   bulk frees): [`PageGuard::unmap`], then the page waits in the pcp's [`GuardBatch`] — not
//!   on the list — until [`PageGuard::batch_pages`] pages are gathered; then one
//!   [`PageGuard::flush`] (the all-CPU batched shootdown: every CPU may cache direct-map
//!   entries) and only after it the pages go on the list (flush before free). Linux 4.3's "TLB
//!   flush multiple pages with a single IPI" batches reclaim's unmaps the same way
//!   (docs/SEED-NOTES.md). Pages the pcp list returns to the buddy lists are unmapped already.
//! * **free straight to the zone**, any order ([`Zone::free_pages_order`](crate::Zone::free_pages_order),
//!   [`Zone::free_pcppages_bulk`](crate::Zone::free_pcppages_bulk), and
//!   [`Zone::add_free_range`](crate::Zone::add_free_range) after install): [`PageGuard::unmap`]
//!   for each page, then the block waits in the zone's [`ZoneGuardBatch`] (order-0 frames, up
//!   to [`ZONE_GUARD_FRAMES`]; larger blocks as ranges). In thread context
//!   ([`PageGuard::may_flush`]) the batch is shot down ([`PageGuard::flush_zone`]) when it is
//!   full; what waits is also flushed by
//!   [`Zone::flush_guard_pending`](crate::Zone::flush_guard_pending), which
//!   [`PerCpuPages::drain_local_pages`](crate::PerCpuPages::drain_local_pages) and a
//!   [`Zone::alloc_pages`](crate::Zone::alloc_pages) the buddy lists cannot serve call. In interrupt
//!   context nothing waits for a shootdown: the block is deferred to the next thread-context
//!   flush, or, when the batch is full, goes to the buddy lists unmapped but unflushed
//!   (counted by [`Zone::guard_unflushed`](crate::Zone::guard_unflushed): a CPU that still
//!   caches the old translation reaches the same frame, so only the detection is weaker).
//! * **alloc** (a pcp pop, [`Zone::alloc_pages`](crate::Zone::alloc_pages) of any order,
//!   [`Zone::rmqueue_bulk`](crate::Zone::rmqueue_bulk), the bulk API's pops and fallback):
//!   [`PageGuard::map`] for each page handed out (no flush: a new mapping cannot be stale). A
//!   pcp refill ([`Zone::rmqueue_bulk`](crate::Zone::rmqueue_bulk)'s raw form) moves pages
//!   still unmapped onto the list; its pops map them.
//!
//! Pages waiting in a [`GuardBatch`] are counted by
//! [`PerCpuPages::guard_pending`](crate::PerCpuPages::guard_pending), those in the zone's batch
//! by [`Zone::guard_pending`](crate::Zone::guard_pending).

use crate::tlb::FlushBatch;
use crate::Pfn;

/// Frame capacity of a pcp's guard batch: 1,024 pages, so one flush request per target CPU
/// covers 1,024 unmapped pages (~1 request per 1,000 pages; the 2015 series' point).
pub const GUARD_BATCH: usize = 1024;

/// One pcp's pages waiting for their direct-map flush.
pub type GuardBatch = FlushBatch<GUARD_BATCH>;

/// Order-0 frames the zone's guard batch holds (blocks of higher order go in its
/// [`BATCH_RANGES`](crate::tlb::BATCH_RANGES) ranges): pages freed straight to the zone (DMA
/// rings, retired FIB chunks, the vmalloc'd pages) cost one shootdown per 64 frames or 16
/// blocks.
pub const ZONE_GUARD_FRAMES: usize = 64;

/// The zone's batch of pages freed straight to it, waiting for their direct-map flush: order-0
/// frames as frames, blocks of `2^order` pages as ranges `(physical address, pages)`.
pub type ZoneGuardBatch = FlushBatch<ZONE_GUARD_FRAMES>;

/// The kernel's side of the page guard. Called only from the thread context of the CPU that
/// owns the pcp list (frees, flushes) or from any context (map, on allocation).
pub trait PageGuard: Sync {
    /// Map frame `pfn` in the direct map again (it is being allocated).
    fn map(&self, pfn: Pfn);
    /// Clear frame `pfn`'s direct-map PTE; returns its direct-map virtual address (bytes), for
    /// the flush batch. The translation may still be cached: the frame must not be reused
    /// before [`PageGuard::flush`]. The direct map is linear: consecutive frames have
    /// consecutive addresses.
    fn unmap(&self, pfn: Pfn) -> u64;
    /// Pages gathered per flush: [`GUARD_BATCH`] (`tlb=batch`) or 1 (`tlb=immediate`, one
    /// shootdown per page: the baseline).
    fn batch_pages(&self) -> usize;
    /// The CPUs that may cache direct-map translations (every online CPU).
    fn mask(&self) -> crate::tlb::CpuMask;
    /// Shoot down `batch` on its mask (thread context: waits for every acknowledgement), then
    /// call `free` for each of its frames.
    fn flush(&self, batch: &mut GuardBatch, free: &mut dyn FnMut(Pfn));
    /// Shoot down the zone's `batch` on its mask (thread context: waits), then call `free` for
    /// each of its order-0 frames and `release(paddr, pages)` for each of its blocks.
    fn flush_zone(
        &self,
        batch: &mut ZoneGuardBatch,
        free: &mut dyn FnMut(Pfn),
        release: &mut dyn FnMut(u64, usize),
    );
    /// `true` when the caller may wait for a shootdown (thread context); `false` in an
    /// interrupt handler, where [`PageGuard::flush_zone`] must not run.
    fn may_flush(&self) -> bool;
}

#[cfg(test)]
mod tests;
