//! The page guard's hooks with a model direct map: every free page is unmapped exactly once
//! and every allocated page mapped exactly once; freed pages reach the free lists only after a
//! flush.

use super::*;
use crate::page_pool::{IdentityDma, PagePool, PagePoolParams};
use crate::tlb::{CpuMask, Shootdown, TlbArch};
use crate::zone::tests::{check_free_lists, guard_batch_pfns, zone};
use crate::{PerCpuPages, Zone, MAX_ORDER};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::vec::Vec;

/// A direct map of frames (present = not in `unmapped`), the frames unmapped but not flushed
/// yet, a log of flushes, "interrupt context", and the real shootdown protocol on one CPU (a
/// local-only mask: flush here, then free).
struct ModelGuard {
    unmapped: Mutex<HashSet<u64>>,
    unflushed: Mutex<HashSet<u64>>,
    flushes: Mutex<Vec<usize>>,
    zone_flushes: Mutex<Vec<usize>>,
    batch: usize,
    in_irq: AtomicBool,
    sd: Shootdown<1>,
}

/// One CPU that flushes nothing (the model's direct map has no TLB).
struct Local;

impl TlbArch for Local {
    fn flush_page(&self, _: u64) {}
    fn flush_all(&self) {}
    fn send_ipi(&self, cpu: usize) {
        panic!("a local-only batch sent an IPI to {cpu}");
    }
    fn is_halted(&self, _: usize) -> bool {
        false
    }
    fn cycles(&self) -> u64 {
        0
    }
}

impl ModelGuard {
    /// The batch's pages are flushed: no longer stale anywhere.
    fn flushed(&self, pfns: impl Iterator<Item = u64>) {
        let mut u = self.unflushed.lock().unwrap();
        for p in pfns {
            assert!(u.remove(&p), "PFN {p:#x} flushed but not unmapped before");
        }
    }
}

impl PageGuard for ModelGuard {
    fn map(&self, pfn: Pfn) {
        assert!(
            self.unmapped.lock().unwrap().remove(&pfn.0),
            "PFN {:#x} mapped but it was not unmapped (mapped twice)",
            pfn.0
        );
    }
    fn unmap(&self, pfn: Pfn) -> u64 {
        assert!(
            self.unmapped.lock().unwrap().insert(pfn.0),
            "PFN {:#x} unmapped twice",
            pfn.0
        );
        self.unflushed.lock().unwrap().insert(pfn.0);
        pfn.addr()
    }
    fn batch_pages(&self) -> usize {
        self.batch
    }
    fn mask(&self) -> CpuMask {
        CpuMask::only(0)
    }
    fn flush(&self, batch: &mut GuardBatch, free: &mut dyn FnMut(Pfn)) {
        assert!(
            !self.in_irq.load(Ordering::Relaxed),
            "flush in interrupt context"
        );
        assert_eq!(batch.mask(), CpuMask::only(0));
        self.flushes.lock().unwrap().push(batch.frames().len());
        self.flushed(batch.frames().iter().map(|p| p.0));
        self.sd.flush(0, batch, &Local, free, |_, _| {});
    }
    fn flush_zone(
        &self,
        batch: &mut ZoneGuardBatch,
        free: &mut dyn FnMut(Pfn),
        release: &mut dyn FnMut(u64, usize),
    ) {
        assert!(
            !self.in_irq.load(Ordering::Relaxed),
            "flush in interrupt context"
        );
        assert_eq!(batch.mask(), CpuMask::only(0));
        self.zone_flushes.lock().unwrap().push(batch.pages());
        let mut pfns: Vec<u64> = batch.frames().iter().map(|p| p.0).collect();
        for &(a, n) in batch.va_ranges() {
            pfns.extend((0..n as u64).map(|k| Pfn::from_addr(a).0 + k));
        }
        assert_eq!(pfns.len(), batch.pages(), "one page added per frame freed");
        self.flushed(pfns.into_iter());
        self.sd.flush(0, batch, &Local, free, release);
    }
    fn may_flush(&self) -> bool {
        !self.in_irq.load(Ordering::Relaxed)
    }
}

/// A zone of PFNs `[1, 1 + len)`, all free, with a model guard installed.
fn guarded_zone(batch: usize, len: usize) -> (&'static Zone, &'static ModelGuard) {
    let z = zone(1, len);
    let g: &'static ModelGuard = std::boxed::Box::leak(std::boxed::Box::new(ModelGuard {
        unmapped: Mutex::new(HashSet::new()),
        unflushed: Mutex::new(HashSet::new()),
        flushes: Mutex::new(Vec::new()),
        zone_flushes: Mutex::new(Vec::new()),
        batch,
        in_irq: AtomicBool::new(false),
        sd: Shootdown::new(33),
    }));
    let n = z.set_guard(g);
    assert_eq!(n, len as u64, "every free page unmapped at install");
    // Install flushed locally (the kernel's boot-CPU flush).
    g.unflushed.lock().unwrap().clear();
    (z, g)
}

fn guarded(batch: usize) -> (&'static Zone, &'static ModelGuard) {
    guarded_zone(batch, 4096)
}

/// The invariant: the unmapped frames are exactly the free ones (buddy lists, pcp lists, the
/// pcp guard batches and the zone's guard batch, disjoint), and no frame on a free list or a
/// pcp list is still unflushed (beyond what the zone counted as freed unflushed).
fn check(z: &Zone, g: &ModelGuard, pcps: &[&PerCpuPages]) {
    let mut free: Vec<u64> = check_free_lists(z);
    let buddy = free.len();
    for pcp in pcps {
        free.extend(pcp.pages().map(|p| p.0));
    }
    let listed = free.clone();
    for pcp in pcps {
        free.extend(pcp.guard_frames().iter().map(|p| p.0));
    }
    free.extend(guard_batch_pfns(z));
    let set: HashSet<u64> = free.iter().copied().collect();
    assert_eq!(set.len(), free.len(), "a free page in two places");
    let unmapped = g.unmapped.lock().unwrap();
    assert_eq!(
        set.len(),
        unmapped.len(),
        "free pages {} (buddy {buddy}) vs unmapped {}",
        set.len(),
        unmapped.len()
    );
    assert!(
        set == *unmapped,
        "the unmapped pages are not the free pages"
    );
    let unflushed = g.unflushed.lock().unwrap();
    let stale = listed.iter().filter(|p| unflushed.contains(p)).count() as u64;
    assert!(
        stale <= z.guard_unflushed(),
        "{stale} pages on free lists before their flush ({} counted unflushed)",
        z.guard_unflushed()
    );
}

#[test]
fn install_unmaps_every_free_page_of_the_buddy_lists() {
    let z = zone(1, 4096);
    // Some pages allocated before the guard: they stay mapped.
    let early: Vec<Pfn> = (0..5).map(|o| z.alloc_pages(o).unwrap()).collect();
    let g: &'static ModelGuard = std::boxed::Box::leak(std::boxed::Box::new(ModelGuard {
        unmapped: Mutex::new(HashSet::new()),
        unflushed: Mutex::new(HashSet::new()),
        flushes: Mutex::new(Vec::new()),
        zone_flushes: Mutex::new(Vec::new()),
        batch: 8,
        in_irq: AtomicBool::new(false),
        sd: Shootdown::new(33),
    }));
    assert_eq!(z.set_guard(g), 4096 - 31);
    assert_eq!(z.set_guard(g), 0, "a second install does nothing");
    // The kernel's boot-CPU flush.
    g.unflushed.lock().unwrap().clear();
    check(z, g, &[]);
    // Pages allocated before the guard are freed through it: unmapped, waiting in the zone's
    // batch (its 16 ranges and 64 frames are far from full) until a flush.
    for (o, p) in early.into_iter().enumerate() {
        z.free_pages_order(p, o);
        check(z, g, &[]);
    }
    assert_eq!(z.guard_pending(), 31);
    assert!(g.zone_flushes.lock().unwrap().is_empty());
    // An allocation the buddy lists cannot serve flushes the batch and tries again.
    let all: Vec<Pfn> = (0..4096 - 31).map(|_| z.alloc_pages(0).unwrap()).collect();
    assert_eq!(z.free_pages(), 0);
    let last = z
        .alloc_pages(4)
        .expect("the order-4 block back after the flush");
    assert_eq!(*g.zone_flushes.lock().unwrap(), [31]);
    assert_eq!(z.guard_pending(), 0);
    z.free_pages_order(last, 4);
    for p in all {
        z.free_pages_order(p, 0);
    }
    z.flush_guard_pending();
    check(z, g, &[]);
    assert_eq!(z.free_pages(), 4096);
    assert_eq!(g.unmapped.lock().unwrap().len(), 4096);
}

#[test]
fn freed_pages_leave_the_direct_map_and_reach_the_list_only_after_the_flush() {
    let (z, g) = guarded(8);
    let mut pcp = PerCpuPages::with_params(512, 31);
    let pages: Vec<Pfn> = (0..20).map(|_| pcp.alloc_page(z).unwrap()).collect();
    let on_list = pcp.count();
    // The refill moved 31 pages onto the list still unmapped; the 20 popped are mapped.
    assert_eq!(g.unmapped.lock().unwrap().len(), 4096 - 20);
    for &p in &pages[..7] {
        pcp.free_page(z, p);
    }
    assert_eq!(
        g.unmapped.lock().unwrap().len(),
        4096 - 13,
        "freed pages are unmapped"
    );
    assert_eq!(pcp.guard_pending(), 7);
    assert_eq!(pcp.count(), on_list, "not on the list before their flush");
    assert!(g.flushes.lock().unwrap().is_empty());
    pcp.free_page(z, pages[7]);
    assert_eq!(
        *g.flushes.lock().unwrap(),
        [8],
        "one flush for the batch of 8"
    );
    assert_eq!(pcp.guard_pending(), 0);
    assert_eq!(pcp.count(), on_list + 8);
    check(z, g, &[&pcp]);
    // Allocation maps again: the hottest pages are the ones just freed.
    let again = pcp.alloc_page(z).unwrap();
    assert!(pages[..8].contains(&again));
    assert!(!g.unmapped.lock().unwrap().contains(&again.0));
    // Drain flushes what waits, then everything goes to the zone.
    for &p in &pages[8..12] {
        pcp.free_page(z, p);
    }
    assert_eq!(pcp.guard_pending(), 4);
    pcp.drain_local_pages(z);
    assert_eq!(pcp.guard_pending(), 0);
    assert_eq!(pcp.count(), 0);
    assert_eq!(*g.flushes.lock().unwrap(), [8, 4]);
    check(z, g, &[&pcp]);
}

#[test]
fn zone_allocations_map_their_pages() {
    let (z, g) = guarded(1);
    let mut pcp = PerCpuPages::with_params(512, 31);
    let p = pcp.alloc_page(z).unwrap();
    pcp.free_page(z, p);
    assert_eq!(
        *g.flushes.lock().unwrap(),
        [1],
        "batch of 1: one flush per page"
    );
    pcp.drain_local_pages(z);
    assert!(
        g.unmapped.lock().unwrap().contains(&p.0),
        "free in the buddy lists, unmapped"
    );
    // Whatever block the zone hands out next is mapped as a whole, any order.
    let mut blocks = Vec::new();
    for order in (0..=MAX_ORDER).rev() {
        while let Some(b) = z.alloc_pages(order) {
            blocks.push((b, order));
        }
    }
    assert!(blocks
        .iter()
        .any(|&(b, o)| (b.0..b.0 + (1 << o)).contains(&p.0)));
    assert!(
        g.unmapped.lock().unwrap().is_empty(),
        "every allocated page mapped again"
    );
    let n = blocks.len();
    for (b, o) in blocks {
        z.free_pages_order(b, o);
    }
    // Flushed every 16 blocks (ranges) or 64 frames; the rest by the explicit flush.
    assert!(g.zone_flushes.lock().unwrap().len() >= n / 64);
    z.flush_guard_pending();
    assert_eq!(g.unmapped.lock().unwrap().len(), 4096);
    check(z, g, &[&pcp]);
}

#[test]
fn interrupt_context_frees_wait_for_a_thread_context_flush() {
    let (z, g) = guarded(8);
    let pages: Vec<Pfn> = (0..100).map(|_| z.alloc_pages(0).unwrap()).collect();
    let block = z.alloc_pages(2).unwrap();
    g.in_irq.store(true, Ordering::Relaxed);
    for &p in &pages[..70] {
        z.free_pages_order(p, 0);
    }
    z.free_pages_order(block, 2);
    // 64 wait (the batch's frames), the block in a range, 6 went unflushed: no room.
    assert_eq!(z.guard_pending(), 64 + 4);
    assert_eq!(z.guard_unflushed(), 6);
    assert!(
        g.zone_flushes.lock().unwrap().is_empty(),
        "no flush in interrupt context"
    );
    check(z, g, &[]);
    z.flush_guard_pending();
    assert_eq!(z.guard_pending(), 68, "no flush in interrupt context");
    g.in_irq.store(false, Ordering::Relaxed);
    z.flush_guard_pending();
    assert_eq!(z.guard_pending(), 0);
    assert_eq!(*g.zone_flushes.lock().unwrap(), [68]);
    for &p in &pages[70..] {
        z.free_pages_order(p, 0);
    }
    assert_eq!(*g.zone_flushes.lock().unwrap(), [68], "30 pages wait");
    assert_eq!(z.guard_pending(), 30);
    check(z, g, &[]);
    z.flush_guard_pending();
    assert_eq!(z.free_pages(), 4096);
    check(z, g, &[]);
}

#[test]
fn a_page_pool_refill_maps_its_pages_and_its_destroy_unmaps_them() {
    let (z, g) = guarded(16);
    let mut pcp = PerCpuPages::with_params(512, 31);
    let mut pool = PagePool::new(PagePoolParams { id: 3, refill: 64 }).unwrap();
    let mut dma = IdentityDma;
    let out: Vec<Pfn> = (0..40)
        .map(|_| pool.alloc(&mut pcp, z, &mut dma).unwrap())
        .collect();
    // The slow path filled the pool's cache with one bulk call: 64 pages mapped, 40 out.
    assert_eq!(pool.cached(), 24);
    assert_eq!(g.unmapped.lock().unwrap().len(), 4096 - 64);
    check(z, g, &[&pcp]);
    for p in out {
        pool.release_page(p, &mut pcp, z, &mut dma);
    }
    pool.destroy(&mut pcp, z, &mut dma).unwrap();
    pcp.drain_local_pages(z);
    assert_eq!(g.unmapped.lock().unwrap().len(), 4096);
    check(z, g, &[&pcp]);
}

mod prop {
    use super::*;
    use proptest::prelude::*;
    use std::vec;

    /// Zone size of the property test: 4 blocks of order 10.
    const PAGES: usize = 4 * 1024;

    #[derive(Clone, Debug)]
    enum Op {
        PcpAlloc(u8),
        PcpFree(usize),
        Bulk(u8),
        BulkList(u8),
        FreeBulk(usize, u8),
        ZoneAlloc(u8),
        ZoneFree(usize),
        Rmqueue(u8),
        FreePcppagesBulk(usize, u8),
        PoolAlloc(u8),
        PoolRelease(usize),
        PoolDestroy,
        Drain,
        FlushGuard,
        FlushZone,
        Irq(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u8..40).prop_map(Op::PcpAlloc),
            3 => any::<usize>().prop_map(Op::PcpFree),
            2 => (2u8..100).prop_map(Op::Bulk),
            2 => (1u8..100).prop_map(Op::BulkList),
            2 => (any::<usize>(), 1u8..64).prop_map(|(i, n)| Op::FreeBulk(i, n)),
            3 => (0u8..=MAX_ORDER as u8).prop_map(Op::ZoneAlloc),
            3 => any::<usize>().prop_map(Op::ZoneFree),
            1 => (1u8..80).prop_map(Op::Rmqueue),
            1 => (any::<usize>(), 1u8..80).prop_map(|(i, n)| Op::FreePcppagesBulk(i, n)),
            2 => (1u8..50).prop_map(Op::PoolAlloc),
            2 => any::<usize>().prop_map(Op::PoolRelease),
            1 => Just(Op::PoolDestroy),
            1 => Just(Op::Drain),
            1 => Just(Op::FlushGuard),
            1 => Just(Op::FlushZone),
            1 => any::<bool>().prop_map(Op::Irq),
        ]
    }

    /// What the test holds: blocks from the zone (order, refcount 1), order-0 pages from the
    /// pcp and bulk API (refcount 1), order-0 pages from `rmqueue_bulk` (refcount 0), pool
    /// pages.
    #[derive(Default)]
    struct Held {
        blocks: Vec<(Pfn, usize)>,
        pages: Vec<Pfn>,
        raw: Vec<Pfn>,
        pool: Vec<Pfn>,
    }

    impl Held {
        fn count(&self) -> usize {
            self.blocks.iter().map(|&(_, o)| 1usize << o).sum::<usize>()
                + self.pages.len()
                + self.raw.len()
                + self.pool.len()
        }
    }

    fn take_run(v: &mut Vec<Pfn>, i: usize, n: u8) -> Vec<Pfn> {
        if v.is_empty() {
            return Vec::new();
        }
        let s = i % v.len();
        let e = (s + n as usize).min(v.len());
        v.drain(s..e).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Random alloc/free of orders 0..=10 through every path (pcp single and bulk, array
        /// and list, the zone's `alloc_pages`/`free_pages_order`/`rmqueue_bulk`/
        /// `free_pcppages_bulk`, a page_pool's slow path and destroy), drains and flushes, in
        /// and out of "interrupt context": the model guard asserts every unmap and map is the
        /// page's first since the last opposite one, and after each step the unmapped pages
        /// are exactly the free ones, with none on a free list before its flush.
        #[test]
        fn every_free_page_unmapped_every_allocated_page_mapped(
            ops in proptest::collection::vec(op(), 1..150),
            batch in prop_oneof![Just(1usize), Just(8), Just(GUARD_BATCH)],
        ) {
            let (z, g) = guarded_zone(batch, PAGES);
            let mut pcp = PerCpuPages::with_params(256, 31);
            let mut pool = PagePool::new(PagePoolParams { id: 5, refill: 32 }).unwrap();
            let mut dma = IdentityDma;
            let mut held = Held::default();
            let mut irq = false;
            for op in ops {
                match op {
                    Op::Irq(on) => {
                        irq = on;
                        g.in_irq.store(on, Ordering::Relaxed);
                    }
                    Op::ZoneAlloc(o) => {
                        if let Some(p) = z.alloc_pages(o as usize) {
                            held.blocks.push((p, o as usize));
                        }
                    }
                    Op::ZoneFree(i) if !held.blocks.is_empty() => {
                        let (p, o) = held.blocks.swap_remove(i % held.blocks.len());
                        z.free_pages_order(p, o);
                    }
                    // The rest is thread context only (pcp rule; the bulk zone calls too).
                    _ if irq => {}
                    Op::PcpAlloc(n) => {
                        for _ in 0..n {
                            match pcp.alloc_page(z) {
                                Some(p) => held.pages.push(p),
                                None => break,
                            }
                        }
                    }
                    Op::PcpFree(i) if !held.pages.is_empty() => {
                        let p = held.pages.swap_remove(i % held.pages.len());
                        pcp.free_page(z, p);
                    }
                    Op::Bulk(n) => {
                        let mut slots = vec![None; n as usize];
                        if let Ok(k) = pcp.alloc_pages_bulk(z, &mut slots) {
                            prop_assert_eq!(slots.iter().flatten().count(), k);
                            held.pages.extend(slots.into_iter().flatten());
                        }
                    }
                    Op::BulkList(n) => {
                        let mut out = vec![Pfn(0); n as usize];
                        if let Ok(k) = pcp.alloc_pages_bulk_list(z, n as usize, &mut out) {
                            held.pages.extend_from_slice(&out[..k]);
                        }
                    }
                    Op::FreeBulk(i, n) => {
                        let run = take_run(&mut held.pages, i, n);
                        pcp.free_pages_bulk(z, &run);
                    }
                    Op::Rmqueue(n) => {
                        let mut out = vec![Pfn(0); n as usize];
                        let k = z.rmqueue_bulk(n as usize, &mut out);
                        held.raw.extend_from_slice(&out[..k]);
                    }
                    Op::FreePcppagesBulk(i, n) => {
                        let run = take_run(&mut held.raw, i, n);
                        z.free_pcppages_bulk(&run);
                    }
                    Op::PoolAlloc(n) => {
                        for _ in 0..n {
                            match pool.alloc(&mut pcp, z, &mut dma) {
                                Some(p) => held.pool.push(p),
                                None => break,
                            }
                        }
                    }
                    Op::PoolRelease(i) if !held.pool.is_empty() => {
                        let p = held.pool.swap_remove(i % held.pool.len());
                        pool.release_page(p, &mut pcp, z, &mut dma);
                    }
                    Op::PoolDestroy => {
                        for p in held.pool.drain(..) {
                            pool.release_page(p, &mut pcp, z, &mut dma);
                        }
                        prop_assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
                        pool = PagePool::new(PagePoolParams { id: 5, refill: 32 }).unwrap();
                    }
                    Op::Drain => pcp.drain_local_pages(z),
                    Op::FlushGuard => pcp.flush_guard(z),
                    Op::FlushZone => z.flush_guard_pending(),
                    _ => {}
                }
                check(z, g, &[&pcp]);
                // Every page is held, cached by the pool, or free (and so unmapped).
                let free = g.unmapped.lock().unwrap().len();
                prop_assert_eq!(free + held.count() + pool.cached(), PAGES);
            }
            // Give everything back in thread context: every page unmapped, all free.
            g.in_irq.store(false, Ordering::Relaxed);
            for (p, o) in held.blocks.drain(..) {
                z.free_pages_order(p, o);
            }
            pcp.free_pages_bulk(z, &held.pages);
            z.free_pcppages_bulk(&held.raw);
            for p in held.pool.drain(..) {
                pool.release_page(p, &mut pcp, z, &mut dma);
            }
            prop_assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
            pcp.drain_local_pages(z);
            check(z, g, &[&pcp]);
            prop_assert_eq!(z.guard_pending(), 0);
            prop_assert_eq!(z.free_pages(), PAGES as u64);
            prop_assert_eq!(g.unmapped.lock().unwrap().len(), PAGES);
        }
    }
}
