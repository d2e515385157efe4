//! [`RecycleRing`]: the bounded, lock-free, multi-producer single-consumer ring through which
//! other CPUs return pages to a [`PagePool`](crate::page_pool::PagePool) (Linux's `ptr_ring` in
//! `page_pool`, without its producer spin lock).
//!
//! # Protocol
//!
//! A fixed array of [`PP_RING_SIZE`] slots, each a PFN plus a sequence number (Dmitry Vyukov's
//! bounded queue). Positions grow without bound; position `p` lives in slot `p % PP_RING_SIZE`.
//!
//! * Slot state: `seq == p` means "free for position `p`"; `seq == p + 1` means "holds the page
//!   pushed at position `p`". The consumer, after taking the page at `p`, sets
//!   `seq = p + PP_RING_SIZE` (free for the next lap).
//! * Producers (any CPU, any number): claim position `tail` with one compare-and-swap when its
//!   slot is free, write the PFN, then publish with a `Release` store of `seq`. A full ring
//!   (the slot still holds the page from the previous lap) is reported to the caller, which then
//!   unmaps and frees the page itself ([`RecycleRing::recycle_remote`]). The bulk push claims
//!   `k` positions with one compare-and-swap.
//! * The consumer (the owning pool's CPU only; enforced by [`RecycleRing`] being attached to one
//!   pool, and [`RecycleRing::pop_batch`] being crate-private and called with `&mut PagePool`)
//!   takes pages in position order while `seq == head + 1` (`Acquire`), and publishes the new
//!   `head` once per batch (`Release`). A position claimed but not yet published stops the
//!   drain; the page is picked up on the next one.
//!
//! The `Release`/`Acquire` pairs carry page ownership: everything the remote CPU did to the page
//! before pushing it is visible to the owner after popping it, and the consumer's read of a slot
//! happens before any producer reuses it.
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
//! The atomics come from a small shim: `core::sync::atomic` normally, `loom::sync::atomic` when
//! the crate's tests are built with `--cfg loom` (the ring then has 2 slots, so "full" is
//! reachable in a small model). The model races remote recycling (single and bulk pushes,
//! ring-full release) against the owner's allocation, ring drain, allocator refill and destroy,
//! and checks that no page is lost, none is owned twice and none is freed while mapped:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/tmp/target-loom \
//!     cargo test -p mm --release --lib -- loom_
//! ```
//!
//! Only the `loom_` tests are meant to run under `--cfg loom` (the other tests would use loom
//! atomics outside a model, which panics).

use crate::dma::DmaMapper;
use crate::pcp::PerCpuPages;
use crate::zone::Zone;
use crate::{Pfn, NO_POOL};

/// The atomics shim: real atomics, or loom's when the tests are built with `--cfg loom`.
mod sync {
    #[cfg(all(test, loom))]
    pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

    #[cfg(not(all(test, loom)))]
    pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

    pub(crate) use core::sync::atomic::Ordering;
}

use sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering::*};

/// Slots in a [`RecycleRing`] (a power of two). 256 covers a full virtio TX ring's completions
/// in one poll; the loom model uses 2 so that "full" is reachable.
#[cfg(not(all(test, loom)))]
pub const PP_RING_SIZE: usize = 256;
/// Slots in a [`RecycleRing`] (2 in the loom model).
#[cfg(all(test, loom))]
pub const PP_RING_SIZE: usize = 2;

const MASK: usize = PP_RING_SIZE - 1;
const _: () = assert!(PP_RING_SIZE.is_power_of_two());

/// One slot: the sequence number says whose turn it is (module docs), `pfn` is the payload.
struct Slot {
    seq: AtomicUsize,
    pfn: AtomicU64,
}

/// Keeps the producers' `tail`, the consumer's `head` and the cold counters on separate cache
/// lines, so a remote push does not steal the line the owner reads on every drain.
#[repr(align(64))]
struct CachePadded<T>(T);

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
/// with [`PagePool::attach_ring`](crate::page_pool::PagePool::attach_ring), and every CPU that
/// returns pages with [`RecycleRing::recycle_remote`].
pub struct RecycleRing {
    /// Next position producers claim.
    tail: CachePadded<AtomicUsize>,
    /// Next position the consumer takes (written only by the consumer).
    head: CachePadded<AtomicUsize>,
    cold: CachePadded<Cold>,
    slots: [Slot; PP_RING_SIZE],
}

struct Cold {
    /// Id of the pool the ring is attached to, or `NO_POOL`.
    owner: AtomicU32,
    /// Remote returns that found the ring full.
    full: AtomicU64,
    /// Of those, pages unmapped and freed (all of them; counted after the free).
    released: AtomicU64,
}

impl Slot {
    #[cfg(not(all(test, loom)))]
    const fn new(i: usize) -> Slot {
        Slot {
            seq: AtomicUsize::new(i),
            pfn: AtomicU64::new(0),
        }
    }
    #[cfg(all(test, loom))]
    fn new(i: usize) -> Slot {
        Slot {
            seq: AtomicUsize::new(i),
            pfn: AtomicU64::new(0),
        }
    }
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
        let mut slots = [const { Slot::new(0) }; PP_RING_SIZE];
        let mut i = 0;
        while i < PP_RING_SIZE {
            slots[i] = Slot::new(i);
            i += 1;
        }
        RecycleRing {
            tail: CachePadded(AtomicUsize::new(0)),
            head: CachePadded(AtomicUsize::new(0)),
            cold: CachePadded(Cold {
                owner: AtomicU32::new(NO_POOL),
                full: AtomicU64::new(0),
                released: AtomicU64::new(0),
            }),
            slots,
        }
    }

    /// An empty, unattached ring (loom build: not `const`).
    #[cfg(all(test, loom))]
    pub fn new() -> RecycleRing {
        RecycleRing {
            tail: CachePadded(AtomicUsize::new(0)),
            head: CachePadded(AtomicUsize::new(0)),
            cold: CachePadded(Cold {
                owner: AtomicU32::new(NO_POOL),
                full: AtomicU64::new(0),
                released: AtomicU64::new(0),
            }),
            slots: core::array::from_fn(Slot::new),
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
        let head = self.head.0.load(Acquire);
        let tail = self.tail.0.load(Acquire);
        tail.wrapping_sub(head).min(PP_RING_SIZE)
    }

    /// `true` if the ring holds no page (snapshot, see [`RecycleRing::len`]).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        let mut pos = self.tail.0.load(Relaxed);
        loop {
            let slot = &self.slots[pos & MASK];
            let seq = slot.seq.load(Acquire);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self
                    .tail
                    .0
                    .compare_exchange_weak(pos, pos.wrapping_add(1), Relaxed, Relaxed)
                {
                    Ok(_) => {
                        slot.pfn.store(pfn.0, Relaxed);
                        slot.seq.store(pos.wrapping_add(1), Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                // The slot still holds the page from the previous lap: full.
                return Err(pfn);
            } else {
                // Another producer took `pos`; catch up.
                pos = self.tail.0.load(Relaxed);
            }
        }
    }

    /// Push as many of `pfns` as fit, claiming them with one compare-and-swap; returns how many
    /// were pushed (a prefix of `pfns`). The caller still owns the rest.
    pub fn push_bulk(&self, pfns: &[Pfn]) -> usize {
        if pfns.is_empty() {
            return 0;
        }
        loop {
            // Head first: `tail >= head` then holds for the values read. `Acquire` on head makes
            // the consumer's reads of the slots it freed happen before our writes to them.
            let head = self.head.0.load(Acquire);
            let pos = self.tail.0.load(Relaxed);
            let used = pos.wrapping_sub(head);
            let room = PP_RING_SIZE.saturating_sub(used);
            let k = room.min(pfns.len());
            if k == 0 {
                return 0;
            }
            if self
                .tail
                .0
                .compare_exchange_weak(pos, pos.wrapping_add(k), Relaxed, Relaxed)
                .is_err()
            {
                continue;
            }
            for (i, pfn) in pfns[..k].iter().enumerate() {
                debug_assert_ne!(pfn.0, 0, "PFN 0 is never a pool page");
                let p = pos.wrapping_add(i);
                let slot = &self.slots[p & MASK];
                debug_assert_eq!(slot.seq.load(Relaxed), p, "bulk push into a busy slot");
                slot.pfn.store(pfn.0, Relaxed);
                slot.seq.store(p.wrapping_add(1), Release);
            }
            return k;
        }
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
        let mut pos = self.head.0.load(Relaxed);
        let mut n = 0;
        while n < out.len() {
            let slot = &self.slots[pos & MASK];
            if slot.seq.load(Acquire) != pos.wrapping_add(1) {
                break;
            }
            out[n] = Pfn(slot.pfn.load(Relaxed));
            slot.seq.store(pos.wrapping_add(PP_RING_SIZE), Release);
            pos = pos.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            self.head.0.store(pos, Release);
        }
        n
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
        let head = self.head.0.load(Acquire);
        let tail = self.tail.0.load(Acquire);
        (head..tail)
            .map(|p| Pfn(self.slots[p & MASK].pfn.load(Relaxed)))
            .collect()
    }

    /// Give the ring up (the pool was destroyed with nothing in flight).
    pub(crate) fn detach(&self) {
        self.cold.0.owner.store(NO_POOL, Release);
    }
}

#[cfg(test)]
mod tests;
