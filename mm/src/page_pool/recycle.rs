//! [`RecycleRing`]: the ring through which other CPUs return pages to a
//! [`PagePool`](super::PagePool) (Linux's `ptr_ring` in `page_pool`, without its producer spin
//! lock).
//!
//! It is a [`MpscRing`] of page numbers (the lock-free protocol and its SAFETY argument live
//! there) plus what only a pool needs: the id of the pool it is attached to, and what happens
//! when it is full — [`RecycleRing::recycle_remote`] then unmaps the page and frees it to the
//! allocator itself, so a remote return never fails and never frees a mapped page.
//!
//! * Producers: any CPU, through the shared `&'static` ring.
//! * Consumer: the owning pool's CPU only — the pool drains the ring on its slow path and in
//!   [`PagePool::drain_ring`](super::PagePool::drain_ring) / `destroy`.
//!
//! # Counting
//!
//! The ring path adds no shared counter to a successful push: the owner counts pages when it
//! takes them out (`recycle_ring`). Only the rare ring-full path bumps two shared counters
//! (`ring_full`, `released`), after the page is back in the allocator, so an owner that reads
//! them sees the page as gone for good.
//!
//! # Model checking (loom)
//!
//! With `--cfg loom` the ring has [`PP_RING_SIZE`] = 2 slots, so "full" is reachable in a small
//! model. The model here races remote recycling (single and bulk pushes, ring-full release)
//! against the owner's allocation, ring drain, allocator refill and destroy, and checks that no
//! page is lost, none is owned twice and none is freed while mapped. Command (with the
//! generic ring's models) in [`crate::ptr_ring`].

use crate::dma::DmaMapper;
use crate::pcp::PerCpuPages;
use crate::ptr_ring::MpscRing;
use crate::sync::{AtomicU32, AtomicU64, CachePadded, Ordering::*};
use crate::zone::Zone;
use crate::{Pfn, NO_POOL};

/// Slots in a [`RecycleRing`] (a power of two). 256 covers a full virtio TX ring's completions
/// in one poll; the loom model uses 2 so that "full" is reachable.
#[cfg(not(all(test, loom)))]
pub const PP_RING_SIZE: usize = 256;
/// Slots in a [`RecycleRing`] (2 in the loom model).
#[cfg(all(test, loom))]
pub const PP_RING_SIZE: usize = 2;

/// What happened to a page returned with [`RecycleRing::recycle_remote`].
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum RemoteRecycle {
    /// Pushed into the ring, still mapped; the owner takes it on its next slow path.
    Ring,
    /// The ring was full: unmapped and freed to the allocator by the calling CPU.
    Released,
}

/// A pool's remote-return ring: see the module docs. Shared by reference (`&'static`, e.g. a
/// `static` array of rings, one per pool) between the owning CPU, which attaches it to its pool
/// with [`PagePool::attach_ring`](super::PagePool::attach_ring), and every CPU that returns
/// pages with [`RecycleRing::recycle_remote`].
///
/// (The kernel also uses unattached `RecycleRing`s as cross-core queues of pages, through
/// [`RecycleRing::push`] and [`RecycleRing::pop_batch`]; a queue that is not a pool's return
/// path is better a plain [`MpscRing`] of its own record type.)
pub struct RecycleRing {
    ring: MpscRing<Pfn, PP_RING_SIZE>,
    /// Kept off the ring's `head`/`tail` lines: touched only on attach and on the full path.
    cold: CachePadded<Cold>,
}

struct Cold {
    /// Id of the pool the ring is attached to, or `NO_POOL`.
    owner: AtomicU32,
    /// Remote returns that found the ring full.
    full: AtomicU64,
    /// Of those, pages unmapped and freed (all of them; counted after the free).
    released: AtomicU64,
}

impl Default for RecycleRing {
    fn default() -> Self {
        RecycleRing::new()
    }
}

impl RecycleRing {
    /// An empty, unattached ring. `const`, so rings can be statics.
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> RecycleRing {
        RecycleRing {
            ring: MpscRing::new(),
            cold: CachePadded(Cold {
                owner: AtomicU32::new(NO_POOL),
                full: AtomicU64::new(0),
                released: AtomicU64::new(0),
            }),
        }
    }

    /// An empty, unattached ring (loom build: not `const`).
    #[cfg(all(test, loom))]
    pub fn new() -> RecycleRing {
        RecycleRing {
            ring: MpscRing::new(),
            cold: CachePadded(Cold {
                owner: AtomicU32::new(NO_POOL),
                full: AtomicU64::new(0),
                released: AtomicU64::new(0),
            }),
        }
    }

    /// Id of the pool this ring is attached to, `None` when unattached.
    #[inline]
    pub fn owner(&self) -> Option<u32> {
        match self.cold.0.owner.load(Acquire) {
            NO_POOL => None,
            id => Some(id),
        }
    }

    /// Pages in the ring now (a snapshot: producers and the consumer may be moving).
    #[inline]
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// `true` if the ring holds no page (snapshot, see [`RecycleRing::len`]).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Remote returns that found the ring full (pages then released by the returning CPU).
    #[inline]
    pub fn full_count(&self) -> u64 {
        self.cold.0.full.load(Relaxed)
    }

    /// Pages released (unmapped and freed) by returning CPUs because the ring was full.
    #[inline]
    pub fn released_count(&self) -> u64 {
        self.cold.0.released.load(Acquire)
    }

    /// Push one page. `Err(pfn)` if the ring is full (the caller still owns the page).
    #[inline]
    pub fn push(&self, pfn: Pfn) -> Result<(), Pfn> {
        debug_assert_ne!(pfn.0, 0, "PFN 0 is never a pool page");
        self.ring.push(pfn)
    }

    /// Push as many of `pfns` as fit, claiming them with one compare-and-swap; returns how many
    /// were pushed (a prefix of `pfns`). The caller still owns the rest.
    #[inline]
    pub fn push_bulk(&self, pfns: &[Pfn]) -> usize {
        debug_assert!(pfns.iter().all(|p| p.0 != 0), "PFN 0 is never a pool page");
        self.ring.push_bulk(pfns)
    }

    /// Return a page of the attached pool from any CPU (`page_pool_put_page` from a remote CPU):
    /// push it into the ring, still mapped; if the ring is full, unmap it with `dma`, clear its
    /// pool ownership and free it — to `pcp` (the CALLING CPU's own list) if given, else to the
    /// zone under its lock (any context). Never frees a mapped page.
    ///
    /// # Panics
    ///
    /// If `pfn` is outside `zone`. Debug builds also panic if the page does not belong to the
    /// pool the ring is attached to.
    pub fn recycle_remote(
        &self,
        pfn: Pfn,
        zone: &Zone,
        pcp: Option<&mut PerCpuPages>,
        dma: &mut impl DmaMapper,
    ) -> RemoteRecycle {
        debug_assert!(
            self.owner().is_some() && zone.page(pfn).pool() == self.owner(),
            "remote recycle of PFN {:#x} into the ring of another pool",
            pfn.0
        );
        match self.push(pfn) {
            Ok(()) => RemoteRecycle::Ring,
            Err(pfn) => {
                self.release_full(core::slice::from_ref(&pfn), zone, pcp, dma);
                RemoteRecycle::Released
            }
        }
    }

    /// [`RecycleRing::recycle_remote`] for a batch (a TX completion burst): one claim for all the
    /// pages that fit; the rest are unmapped and freed. Returns how many went into the ring.
    pub fn recycle_remote_bulk(
        &self,
        pfns: &[Pfn],
        zone: &Zone,
        pcp: Option<&mut PerCpuPages>,
        dma: &mut impl DmaMapper,
    ) -> usize {
        debug_assert!(
            pfns.iter()
                .all(|&p| self.owner().is_some() && zone.page(p).pool() == self.owner()),
            "remote recycle into the ring of another pool"
        );
        let k = self.push_bulk(pfns);
        if k < pfns.len() {
            self.release_full(&pfns[k..], zone, pcp, dma);
        }
        k
    }

    /// The ring-full path: unmap, clear ownership, free, then count.
    #[cold]
    fn release_full(
        &self,
        pfns: &[Pfn],
        zone: &Zone,
        mut pcp: Option<&mut PerCpuPages>,
        dma: &mut impl DmaMapper,
    ) {
        for &pfn in pfns {
            let p = zone.page(pfn);
            dma.unmap(pfn, p.dma_addr());
            p.set_dma_addr(0);
            p.set_pool(None);
            match pcp.as_deref_mut() {
                Some(pcp) => pcp.free_page(zone, pfn),
                None => zone.free_pages_order(pfn, 0),
            }
        }
        let n = pfns.len() as u64;
        self.cold.0.full.fetch_add(n, Relaxed);
        // Release: an owner that sees the count sees the pages already back in the allocator.
        self.cold.0.released.fetch_add(n, Release);
    }

    /// Consumer side: move up to `out.len()` pages, in push order, into `out[..n]`; returns `n`.
    /// Single consumer: only the ring's owner calls this (the owning pool, or — for a ring used
    /// as a cross-core hand-off queue — the core it hands pages to).
    #[inline]
    pub fn pop_batch(&self, out: &mut [Pfn]) -> usize {
        self.ring.pop_batch(out)
    }

    /// Claim the ring for pool `id`; `Err(current owner)` if already attached. Resets the
    /// counters (an unattached ring holds no page: it was drained when detached).
    pub(crate) fn attach(&self, id: u32) -> Result<(), u32> {
        self.cold
            .0
            .owner
            .compare_exchange(NO_POOL, id, AcqRel, Acquire)?;
        self.cold.0.full.store(0, Relaxed);
        self.cold.0.released.store(0, Release);
        Ok(())
    }

    /// The pages in the ring, oldest first (tests; not while producers or the consumer run).
    #[cfg(test)]
    pub(crate) fn peek(&self) -> std::vec::Vec<Pfn> {
        self.ring.peek()
    }

    /// Give the ring up (the pool was destroyed with nothing in flight).
    pub(crate) fn detach(&self) {
        self.cold.0.owner.store(NO_POOL, Release);
    }
}

#[cfg(test)]
mod tests;
