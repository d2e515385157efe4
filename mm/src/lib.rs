//! Gannet memory management: buddy zones, per-CPU page lists (pcp), the bulk order-0 API, page
//! metadata, the network `page_pool`, the bounded lock-free ring ([`ptr_ring::MpscRing`])
//! that carries pages and records between CPUs, and the batched TLB shootdown ([`tlb`]).
//!
//! Terms and semantics follow Linux mm (`mm/page_alloc.c`, `net/core/page_pool.c`) so that the
//! reasoning collected in `docs/SEED-NOTES.md` applies word for word. The crate deals only
//! in page frame numbers ([`Pfn`]) and per-frame metadata ([`Page`]): it never dereferences the
//! memory it manages, which is what makes it testable on the host.
//!
//! # Layers
//!
//! * [`Zone`] ([`zone`]): the buddy allocator for one span of physical frames. Free lists per order
//!   `0..=MAX_ORDER` under one spin lock. Usable from any context, including interrupt handlers
//!   (on the bare-metal target the lock is taken with interrupts disabled, like
//!   `spin_lock_irqsave`).
//! * [`PerCpuPages`] ([`pcp`]): one per CPU, a lock-free cache of order-0 pages in front of the
//!   zone, plus the bulk order-0 API. Touched only by its owning CPU from thread context.
//! * [`page_pool::PagePool`]: one per RX queue, a cache of DMA-mapped pages in front of the pcp.
//!   Other CPUs return its pages through its [`page_pool::RecycleRing`].
//!
//! # Module map
//!
//! Imports point one way (down this list, or to the crate root's [`Pfn`] and constants); no
//! module imports one above it.
//!
//! * [`page_pool`]: `PagePool`, and (`page_pool/recycle.rs`) `RecycleRing`, the remote-return
//!   ring. Uses `pcp`, `zone`, `ptr_ring`, `dma`, `sync`.
//! * [`drain`]: the `drain_all_pages` handshake across CPUs (`DrainAll`). Uses nothing.
//! * [`tlb`]: the batched TLB shootdown protocol (`Shootdown`, `FlushBatch`, `CpuMask`, the
//!   `TlbArch` trait the kernel implements). Uses `sync` and the crate root's `Pfn`.
//! * [`pcp`]: `PerCpuPages`, the bulk order-0 API. Uses `zone`, `page`.
//! * [`zone`]: `Zone`, the buddy allocator. Uses `page`, `irq`.
//! * [`page`]: `Page`, per-frame metadata. Uses nothing.
//! * [`ptr_ring`]: `MpscRing<T, N>`, the generic bounded MPSC ring of any `T: Copy` (page
//!   numbers, hand-off records, neighbour updates). Uses `sync`.
//! * [`dma`]: `DmaMapper`, `IdentityDma`, `DmaError`. Uses `fault`.
//! * [`fault`]: fault injection for the fault image (feature `fault-inject`; without it every
//!   check is a constant `false`). Uses nothing; any module (and crate) may call it.
//! * `irq` (private): interrupts off around the zone lock on bare metal. Uses nothing.
//! * `sync` (private): `core`'s atomics, fence and cell, or loom's in `--cfg loom` tests;
//!   `CachePadded`. Uses nothing.
//!
//! `ptr_ring` knows nothing about pages or pools; `page_pool` builds on it, never the reverse.
//! `page_pool` re-exports `dma`'s three items (`mm::page_pool::DmaMapper` etc.).
//!
//! # Rules (who may touch what)
//!
//! * A [`PerCpuPages`] is owned by exactly one CPU and used only from that CPU's thread context
//!   (its poll loop), never from an interrupt handler and never from another CPU. Its methods take
//!   `&mut self` and no lock; the borrow checker plus "one per CPU, in the per-CPU area" enforce
//!   the rule. Interrupt handlers use [`Zone::alloc_pages`] / [`Zone::free_pages_order`].
//! * Draining another CPU's pcp list is done by asking that CPU to call
//!   [`PerCpuPages::drain_local_pages`] from its own poll loop (Linux moved `drain_all_pages`
//!   from IPIs to per-CPU work for the same reason: an IPI can land in the middle of list
//!   manipulation).
//! * Only the owner of an allocated page touches its non-buddy metadata (refcount, pool,
//!   `dma_addr`). Buddy metadata (flags, order, list links) of free pages is touched only under
//!   the zone lock.
//! * PFN 0 is never handed out: virtio treats physical address 0 as "no buffer".
//! * An [`MpscRing`](ptr_ring::MpscRing) has any number of producers (any CPU, any context: a
//!   push never blocks, it retries a compare-and-swap) and one consumer, the CPU that owns the
//!   ring (a per-core or per-pool `static`). A full ring is reported to the producer, which
//!   keeps the value. A second consumer is a logic error (values out of order), never a data
//!   race.
//! * A [`RecycleRing`](page_pool::RecycleRing) is attached to one pool at a time; any CPU
//!   returns that pool's pages into it ([`recycle_remote`](page_pool::RecycleRing::recycle_remote),
//!   which unmaps and frees the page itself when the ring is full); only the pool's own CPU
//!   takes them out, through its `PagePool`.
//! * A [`FlushBatch`](tlb::FlushBatch) is owned by one initiating CPU (`&mut`); the one
//!   [`Shootdown`](tlb::Shootdown) `static` is shared. Flush before free: frames and virtual
//!   ranges leave a batch only through [`Shootdown::complete`](tlb::Shootdown::complete), after
//!   every CPU in its mask acknowledged the flush. Dispatch and wait run in thread context only;
//!   [`Shootdown::service`](tlb::Shootdown::service) runs in a CPU's poll loop and in its TLB IPI
//!   handler.
//!
//! # Example
//!
//! ```
//! use mm::page_pool::{IdentityDma, PagePool, PagePoolParams};
//! use mm::{Page, PerCpuPages, Pfn, Zone};
//!
//! // The kernel builds `mem_map` in memory it reserved at boot; here a leaked Vec stands in.
//! let map: &'static [Page] = Box::leak((0..8192).map(|_| Page::new()).collect());
//! let zone = Zone::new(Pfn(0), map);
//! zone.add_free_range(Pfn(0), Pfn(8192)); // from the boot memory map; PFN 0 is skipped
//! let mut pcp = PerCpuPages::new(&zone, 1); // one per CPU, in the per-CPU area
//!
//! let page = pcp.alloc_page(&zone).unwrap();
//! assert_eq!(zone.page(page).refcount(), 1);
//! pcp.free_page(&zone, page);
//!
//! let mut slots = [None; 16];
//! let placed = pcp.alloc_pages_bulk(&zone, &mut slots).unwrap(); // may be < 16: call again
//! assert!(placed > 0);
//! let pfns: Vec<Pfn> = slots.iter().flatten().copied().collect();
//! pcp.free_pages_bulk(&zone, &pfns);
//!
//! let mut pool = PagePool::new(PagePoolParams::new(0)).unwrap();
//! let buf = pool.alloc(&mut pcp, &zone, &mut IdentityDma).unwrap();
//! assert_eq!(zone.page(buf).dma_addr(), buf.addr());
//! pool.recycle_direct(buf, &mut pcp, &zone, &mut IdentityDma);
//! pool.destroy(&mut pcp, &zone, &mut IdentityDma).unwrap();
//! ```

#![no_std]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod dma;
pub mod drain;
pub mod fault;
pub mod guard;
mod irq;
pub mod page;
pub mod page_pool;
pub mod pcp;
pub mod ptr_ring;
mod sync;
pub mod tlb;
pub mod zone;

pub use drain::{DrainAll, DrainError};
pub use page::{Page, NO_POOL};
pub use pcp::{BulkError, PerCpuPages, PCP_MAX_PAGES};
pub use zone::{Watermarks, Zone, DEFERRED_GROW_PAGES, MAX_DEFERRED_RANGES};

/// log2 of the page size in bytes.
pub const PAGE_SHIFT: u32 = 12;
/// Page size in bytes (4 KiB).
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;
/// Highest buddy order: free lists exist for orders `0..=MAX_ORDER`, so the largest block is
/// `2^MAX_ORDER` pages (4 MiB), like Linux `MAX_PAGE_ORDER` (formerly `MAX_ORDER - 1`).
pub const MAX_ORDER: usize = 10;

/// A physical frame number: physical address `>> PAGE_SHIFT`.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Pfn(pub u64);

impl Pfn {
    /// Physical address (bytes) of the first byte of this frame.
    #[inline]
    pub const fn addr(self) -> u64 {
        self.0 << PAGE_SHIFT
    }

    /// The frame containing physical address `addr` (bytes); the low 12 bits are dropped.
    #[inline]
    pub const fn from_addr(addr: u64) -> Pfn {
        Pfn(addr >> PAGE_SHIFT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfn_addr_roundtrip() {
        assert_eq!(Pfn(3).addr(), 0x3000);
        assert_eq!(Pfn::from_addr(0x3fff), Pfn(3));
        assert_eq!(Pfn::from_addr(Pfn(0x12345).addr()), Pfn(0x12345));
        assert_eq!(PAGE_SIZE, 4096);
    }
}
