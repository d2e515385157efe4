//! The page guard (`guard=on`): order-0 pages freed through a pcp list leave the kernel's
//! direct (identity) map until they are allocated again, so a use-after-free of a packet
//! buffer faults instead of corrupting the next owner's data.
//!
//! This crate never touches page tables: the kernel implements [`PageGuard`] (PTE present bit,
//! the batched TLB shootdown of [`crate::tlb`]) and installs it with [`Zone::set_guard`](crate::Zone::set_guard). The
//! zone and the pcp lists then call it:
//!
//! * **free** ([`PerCpuPages::free_page`](crate::PerCpuPages::free_page) and the bulk frees):
//!   [`PageGuard::unmap`], then the page waits in the pcp's [`GuardBatch`] — not on the list —
//!   until [`PageGuard::batch_pages`] pages are gathered; then one [`PageGuard::flush`] (the
//!   all-CPU batched shootdown: every CPU may cache direct-map entries) and only after it the
//!   pages go on the list (flush before free). Linux 4.3's "TLB flush multiple pages with a
//!   single IPI" batches reclaim's unmaps the same way (docs/SEED-NOTES.md).
//! * **alloc** (a pcp pop, [`Zone::alloc_pages`](crate::Zone::alloc_pages), [`Zone::rmqueue_bulk`](crate::Zone::rmqueue_bulk)): [`PageGuard::map`]
//!   (no flush: a new mapping cannot be stale).
//!
//! Pages freed straight to the zone ([`Zone::free_pages_order`](crate::Zone::free_pages_order), used for DMA rings, stacks and
//! from interrupt context) are not unmapped: the guard covers the packet-buffer path. Pages
//! waiting in a [`GuardBatch`] are counted by
//! [`PerCpuPages::guard_pending`](crate::PerCpuPages::guard_pending) and flushed by
//! [`PerCpuPages::drain_local_pages`](crate::PerCpuPages::drain_local_pages).

use crate::tlb::FlushBatch;
use crate::Pfn;

/// Frame capacity of a pcp's guard batch: 1,024 pages, so one flush request per target CPU
/// covers 1,024 unmapped pages (~1 request per 1,000 pages; the 2015 series' point).
pub const GUARD_BATCH: usize = 1024;

/// One pcp's pages waiting for their direct-map flush.
pub type GuardBatch = FlushBatch<GUARD_BATCH>;

/// The kernel's side of the page guard. Called only from the thread context of the CPU that
/// owns the pcp list (frees, flushes) or from any context (map, on allocation).
pub trait PageGuard: Sync {
    /// Map frame `pfn` in the direct map again (it is being allocated).
    fn map(&self, pfn: Pfn);
    /// Clear frame `pfn`'s direct-map PTE; returns its direct-map virtual address (bytes), for
    /// the flush batch. The translation may still be cached: the frame must not be reused
    /// before [`PageGuard::flush`].
    fn unmap(&self, pfn: Pfn) -> u64;
    /// Pages gathered per flush: [`GUARD_BATCH`] (`tlb=batch`) or 1 (`tlb=immediate`, one
    /// shootdown per page: the baseline).
    fn batch_pages(&self) -> usize;
    /// The CPUs that may cache direct-map translations (every online CPU).
    fn mask(&self) -> crate::tlb::CpuMask;
    /// Shoot down `batch` on its mask (thread context: waits for every acknowledgement), then
    /// call `free` for each of its frames.
    fn flush(&self, batch: &mut GuardBatch, free: &mut dyn FnMut(Pfn));
}

#[cfg(test)]
mod tests;
