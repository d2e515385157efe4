use super::*;
use crate::zone::tests::{check_free_lists, zone};
use std::collections::{HashMap, HashSet};
use std::vec::Vec;

/// Offset between physical and bus addresses in the test mapper, so a test catches code that
/// uses the physical address where the DMA address is meant.
const BUS_OFFSET: u64 = 1 << 40;

/// A DMA mapper that records live mappings, fails on chosen map calls, and panics on a bad
/// unmap.
#[derive(Default)]
struct TestDma {
    calls: usize,
    fail_at: Option<usize>,
    fail_all: bool,
    mapped: HashMap<u64, u64>,
    unmaps: usize,
}

impl DmaMapper for TestDma {
    fn map(&mut self, pfn: Pfn) -> Result<u64, DmaError> {
        let i = self.calls;
        self.calls += 1;
        if self.fail_all || self.fail_at == Some(i) {
            return Err(DmaError);
        }
        let dma = pfn.addr() + BUS_OFFSET;
        assert!(
            self.mapped.insert(pfn.0, dma).is_none(),
            "PFN {:#x} mapped twice",
            pfn.0
        );
        Ok(dma)
    }
    fn unmap(&mut self, pfn: Pfn, dma: u64) {
        assert_eq!(
            self.mapped.remove(&pfn.0),
            Some(dma),
            "bad unmap of PFN {:#x}",
            pfn.0
        );
        self.unmaps += 1;
    }
}

/// No page lost (free + pcp + cached + in flight == managed) and no page freed while mapped.
fn check(z: &Zone, pcp: &PerCpuPages, pool: &PagePool, dma: &TestDma, out: &HashSet<u64>) {
    assert_eq!(
        z.free_pages() + pcp.count() as u64 + pool.cached() as u64 + pool.in_flight(),
        z.managed_pages(),
        "page lost"
    );
    assert_eq!(pool.in_flight(), out.len() as u64);
    let mut free: HashSet<u64> = check_free_lists(z).into_iter().collect();
    free.extend(pcp.pages().map(|p| p.0));
    for pfn in &free {
        assert!(
            !dma.mapped.contains_key(pfn),
            "PFN {pfn:#x} freed while mapped"
        );
    }
    // Every cached or in-flight page is mapped, owned by the pool, refcount 1.
    let held: Vec<u64> = pool.cache[..pool.count]
        .iter()
        .map(|p| p.0)
        .chain(out.iter().copied())
        .collect();
    assert_eq!(held.len(), dma.mapped.len(), "mappings leaked or missing");
    for pfn in held {
        let p = z.page(Pfn(pfn));
        assert!(!free.contains(&pfn), "held page is free");
        assert_eq!(p.pool(), Some(pool.id()));
        assert_eq!(p.refcount(), 1);
        assert_eq!(Some(&p.dma_addr()), dma.mapped.get(&pfn));
    }
}

fn setup() -> (&'static Zone, PerCpuPages, PagePool) {
    let z = zone(1024, 4096);
    let pcp = PerCpuPages::with_params(256, 31);
    let pool = PagePool::new(PagePoolParams {
        id: 7,
        refill: PP_ALLOC_CACHE_REFILL,
    })
    .unwrap();
    (z, pcp, pool)
}

#[test]
fn bad_params_are_errors() {
    assert_eq!(
        PagePool::new(PagePoolParams { id: 1, refill: 0 }).err(),
        Some(PoolError::BadRefill(0))
    );
    assert_eq!(
        PagePool::new(PagePoolParams {
            id: 1,
            refill: PP_ALLOC_CACHE_SIZE + 1
        })
        .err(),
        Some(PoolError::BadRefill(PP_ALLOC_CACHE_SIZE + 1))
    );
    assert_eq!(
        PagePool::new(PagePoolParams::new(crate::NO_POOL)).err(),
        Some(PoolError::BadId)
    );
    let p = PagePool::new(PagePoolParams {
        id: 1,
        refill: PP_ALLOC_CACHE_SIZE,
    })
    .unwrap();
    assert_eq!(p.id(), 1);
    assert_eq!(
        std::format!("{}", PoolError::InFlight(3)),
        "page_pool destroy: 3 pages still in flight"
    );
}

#[test]
fn fast_and_slow_path_counts() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma::default();
    let mut out = HashSet::new();
    let p = pool.alloc(&mut pcp, z, &mut dma).unwrap();
    out.insert(p.0);
    assert_eq!(pool.stats().alloc_slow, 1);
    assert_eq!(pool.stats().alloc_fast, 0);
    assert_eq!(pool.stats().refill_pages, 64);
    assert_eq!(pool.cached(), 63);
    assert_eq!(pool.in_flight(), 1);
    assert_eq!(dma.calls, 64, "each page mapped once");
    assert_eq!(z.page(p).dma_addr(), p.addr() + BUS_OFFSET);
    check(z, &pcp, &pool, &dma, &out);
    for _ in 0..63 {
        out.insert(pool.alloc(&mut pcp, z, &mut dma).unwrap().0);
    }
    assert_eq!(out.len(), 64);
    assert_eq!(pool.stats().alloc_fast, 63);
    assert_eq!(pool.stats().alloc_slow, 1);
    assert_eq!(dma.calls, 64, "fast path maps nothing");
    assert_eq!(pool.cached(), 0);
    check(z, &pcp, &pool, &dma, &out);
    out.insert(pool.alloc(&mut pcp, z, &mut dma).unwrap().0);
    assert_eq!(pool.stats().alloc_slow, 2);
    assert_eq!(pool.cached(), 63);
    check(z, &pcp, &pool, &dma, &out);
}

#[test]
fn identity_dma_maps_to_the_physical_address() {
    let (z, mut pcp, mut pool) = setup();
    let p = pool.alloc(&mut pcp, z, &mut IdentityDma).unwrap();
    assert_eq!(z.page(p).dma_addr(), p.addr());
    assert_eq!(z.page(p).pool(), Some(7));
}

#[test]
fn dma_map_failure_at_every_position_of_a_refill() {
    for fail in 0..PP_ALLOC_CACHE_REFILL {
        let (z, mut pcp, mut pool) = setup();
        let mut dma = TestDma {
            fail_at: Some(fail),
            ..TestDma::default()
        };
        let mut out = HashSet::new();
        let p = pool
            .alloc(&mut pcp, z, &mut dma)
            .expect("other pages still cached");
        out.insert(p.0);
        assert_eq!(pool.stats().refill_failed, 1, "position {fail}");
        assert_eq!(pool.cached(), 62, "position {fail}");
        assert_eq!(dma.mapped.len(), 63);
        check(z, &pcp, &pool, &dma, &out);
        // Drain the cache and refill again (no failure this time): everything still adds up.
        while pool.cached() > 0 {
            out.insert(pool.alloc(&mut pcp, z, &mut dma).unwrap().0);
        }
        out.insert(pool.alloc(&mut pcp, z, &mut dma).unwrap().0);
        assert_eq!(out.len(), 64);
        check(z, &pcp, &pool, &dma, &out);
        for pfn in out.drain() {
            pool.release_page(Pfn(pfn), &mut pcp, z, &mut dma);
        }
        assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
        check(z, &pcp, &pool, &dma, &out);
        assert!(dma.mapped.is_empty());
    }
}

#[test]
fn every_mapping_fails() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma {
        fail_all: true,
        ..TestDma::default()
    };
    assert_eq!(pool.alloc(&mut pcp, z, &mut dma), None);
    assert_eq!(pool.stats().alloc_empty, 1);
    assert_eq!(pool.stats().refill_failed, 64);
    assert_eq!(pool.cached(), 0);
    check(z, &pcp, &pool, &dma, &HashSet::new());
}

#[test]
fn allocator_empty_returns_none() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma::default();
    while z.alloc_pages(0).is_some() {}
    assert_eq!(pool.alloc(&mut pcp, z, &mut dma), None);
    assert_eq!(pool.stats().alloc_empty, 1);
    assert_eq!(dma.calls, 0);
}

#[test]
fn short_memory_refill_is_partial_but_not_empty() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma::default();
    // Leave 10 pages in the zone: below low + 64, so the bulk call falls back to one page.
    let mut hog = Vec::new();
    while z.free_pages() > 10 {
        hog.push(z.alloc_pages(0).unwrap());
    }
    let p = pool.alloc(&mut pcp, z, &mut dma).unwrap();
    assert_eq!(pool.stats().refill_pages, 1);
    assert_eq!(pool.cached(), 0);
    assert_eq!(z.free_pages(), 9);
    for h in hog {
        z.free_pages_order(h, 0);
    }
    check(z, &pcp, &pool, &dma, &[p.0].into_iter().collect());
}

#[test]
fn recycle_into_a_full_cache_unmaps_then_frees() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma::default();
    let mut out = Vec::new();
    for _ in 0..130 {
        out.push(pool.alloc(&mut pcp, z, &mut dma).unwrap());
    }
    // 3 refills of 64 = 192 pages, 130 out, 62 cached.
    assert_eq!(pool.stats().alloc_slow, 3);
    assert_eq!(pool.cached(), 62);
    let set = |v: &[Pfn]| v.iter().map(|p| p.0).collect::<HashSet<u64>>();
    check(z, &pcp, &pool, &dma, &set(&out));
    for _ in 0..66 {
        let p = out.pop().unwrap();
        pool.recycle_direct(p, &mut pcp, z, &mut dma);
    }
    assert_eq!(pool.cached(), PP_ALLOC_CACHE_SIZE);
    assert_eq!(pool.stats().recycle_cached, 66);
    assert_eq!(dma.unmaps, 0, "recycled pages stay mapped");
    let pcp_before = pcp.count();
    let p = out.pop().unwrap();
    pool.recycle_direct(p, &mut pcp, z, &mut dma);
    assert_eq!(pool.stats().recycle_cache_full, 1);
    assert_eq!(pool.stats().released, 1);
    assert_eq!(dma.unmaps, 1);
    assert!(!dma.mapped.contains_key(&p.0));
    assert_eq!(pcp.count(), pcp_before + 1);
    let pg = z.page(p);
    assert_eq!((pg.pool(), pg.dma_addr(), pg.refcount()), (None, 0, 0));
    assert_eq!(pool.in_flight(), 63);
    check(z, &pcp, &pool, &dma, &set(&out));
    // The cache is LIFO: the last recycled page comes back first, still mapped.
    let again = pool.alloc(&mut pcp, z, &mut dma).unwrap();
    assert_eq!(z.page(again).pool(), Some(7));
    assert_eq!(pool.stats().alloc_fast, 130 - 3 + 1);
}

#[test]
fn release_page_leaves_the_pool() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma::default();
    let p = pool.alloc(&mut pcp, z, &mut dma).unwrap();
    let before = pcp.count();
    pool.release_page(p, &mut pcp, z, &mut dma);
    assert_eq!(pool.in_flight(), 0);
    assert_eq!(pool.stats().released, 1);
    assert_eq!(pcp.count(), before + 1);
    assert_eq!(z.page(p).pool(), None);
    assert!(!dma.mapped.contains_key(&p.0));
    check(z, &pcp, &pool, &dma, &HashSet::new());
}

#[test]
fn destroy_with_pages_outstanding() {
    let (z, mut pcp, mut pool) = setup();
    let mut dma = TestDma::default();
    let mut out: Vec<Pfn> = (0..5)
        .map(|_| pool.alloc(&mut pcp, z, &mut dma).unwrap())
        .collect();
    assert_eq!(pool.cached(), 59);
    assert_eq!(
        pool.destroy(&mut pcp, z, &mut dma),
        Err(PoolError::InFlight(5))
    );
    assert_eq!(
        pool.cached(),
        0,
        "cached pages returned even when pages are out"
    );
    assert_eq!(dma.mapped.len(), 5);
    assert_eq!(pool.stats().released, 59);
    check(z, &pcp, &pool, &dma, &out.iter().map(|p| p.0).collect());
    // Drain: two come back by recycle, three by release.
    for _ in 0..2 {
        pool.recycle_direct(out.pop().unwrap(), &mut pcp, z, &mut dma);
    }
    assert_eq!(
        pool.destroy(&mut pcp, z, &mut dma),
        Err(PoolError::InFlight(3))
    );
    for p in out.drain(..) {
        pool.release_page(p, &mut pcp, z, &mut dma);
    }
    assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
    assert!(dma.mapped.is_empty());
    assert_eq!(z.free_pages() + pcp.count() as u64, z.managed_pages());
    pcp.drain_local_pages(z);
    assert_eq!(z.free_pages(), z.managed_pages());
}

// ------------------------------------------------------------------ remote returns (ring)

fn leaked_ring() -> &'static RecycleRing {
    std::boxed::Box::leak(std::boxed::Box::new(RecycleRing::new()))
}

/// [`check`] for a pool with a ring and a second CPU's pcp: every page is in exactly one place
/// (zone, either pcp, cache, ring, held by the test), the counts add up, exactly the pool's
/// pages (cache, ring, held) are mapped, and no free page is mapped.
fn check_ring(z: &Zone, pcps: &[&PerCpuPages], pool: &PagePool, dma: &TestDma, out: &HashSet<u64>) {
    let ring: Vec<u64> = pool
        .ring()
        .map_or(Vec::new(), |r| r.peek())
        .iter()
        .map(|p| p.0)
        .collect();
    let pcp_total: u64 = pcps.iter().map(|p| p.count() as u64).sum();
    assert_eq!(
        z.free_pages() + pcp_total + pool.cached() as u64 + pool.in_flight(),
        z.managed_pages(),
        "page lost"
    );
    assert_eq!(
        pool.in_flight(),
        (out.len() + ring.len()) as u64,
        "in_flight"
    );
    assert_eq!(pool.in_ring(), ring.len());
    let mut seen: HashSet<u64> = HashSet::new();
    let mut place = |pfn: u64, what: &str| {
        assert!(
            seen.insert(pfn),
            "PFN {pfn:#x} in two places (second: {what})"
        );
    };
    let free = check_free_lists(z);
    for &p in &free {
        place(p, "zone");
    }
    for pcp in pcps {
        for p in pcp.pages() {
            place(p.0, "pcp");
        }
    }
    for p in &pool.cache[..pool.count] {
        place(p.0, "cache");
    }
    for &p in &ring {
        place(p, "ring");
    }
    for &p in out {
        place(p, "held");
    }
    let held: HashSet<u64> = pool.cache[..pool.count]
        .iter()
        .map(|p| p.0)
        .chain(ring.iter().copied())
        .chain(out.iter().copied())
        .collect();
    assert_eq!(
        held,
        dma.mapped.keys().copied().collect::<HashSet<u64>>(),
        "mapped set != pool pages (freed while mapped, or mapping leaked)"
    );
    for pfn in held {
        let p = z.page(Pfn(pfn));
        assert_eq!(p.pool(), Some(pool.id()));
        assert_eq!(p.refcount(), 1);
        assert_eq!(Some(&p.dma_addr()), dma.mapped.get(&pfn));
    }
}

#[test]
fn remote_returns_go_through_the_ring_and_are_drained_on_refill() {
    let (z, mut pcp, mut pool) = setup();
    let mut rpcp = PerCpuPages::with_params(256, 31);
    let ring = leaked_ring();
    pool.attach_ring(ring).unwrap();
    assert_eq!(pool.attach_ring(ring), Err(PoolError::HasRing));
    let mut other = PagePool::new(PagePoolParams::new(8)).unwrap();
    assert_eq!(other.attach_ring(ring), Err(PoolError::RingInUse(7)));
    let mut dma = TestDma::default();
    let mut out: Vec<Pfn> = (0..64)
        .map(|_| pool.alloc(&mut pcp, z, &mut dma).unwrap())
        .collect();
    assert_eq!(pool.cached(), 0);
    // The remote CPU returns 40 pages: 1 + a burst of 39.
    let back: Vec<Pfn> = out.drain(24..).collect();
    assert_eq!(
        ring.recycle_remote(back[0], z, Some(&mut rpcp), &mut dma),
        RemoteRecycle::Ring
    );
    assert_eq!(
        ring.recycle_remote_bulk(&back[1..], z, Some(&mut rpcp), &mut dma),
        39
    );
    let set = |v: &[Pfn]| v.iter().map(|p| p.0).collect::<HashSet<u64>>();
    assert_eq!(pool.in_flight(), 64, "ring pages count until drained");
    check_ring(z, &[&pcp, &rpcp], &pool, &dma, &set(&out));
    assert_eq!(dma.unmaps, 0, "ring pages stay mapped");
    // Next alloc: cache empty -> drain the ring (up to `refill` = 64 pages), no allocator call.
    let refill_before = pool.stats().refill_pages;
    let p = pool.alloc(&mut pcp, z, &mut dma).unwrap();
    out.push(p);
    assert_eq!(pool.stats().refill_pages, refill_before);
    assert_eq!(pool.stats().recycle_ring, 40);
    assert_eq!(pool.cached(), 39);
    assert!(ring.is_empty());
    check_ring(z, &[&pcp, &rpcp], &pool, &dma, &set(&out));
    // Teardown with the remote CPU still holding nothing: everything comes back.
    for p in out.drain(..) {
        pool.recycle_direct(p, &mut pcp, z, &mut dma);
    }
    assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
    assert_eq!(ring.owner(), None, "detached on a clean destroy");
    assert!(dma.mapped.is_empty());
}

#[test]
fn ring_full_remote_cpu_unmaps_and_frees() {
    let (z, mut pcp, mut pool) = setup();
    let mut rpcp = PerCpuPages::with_params(512, 31);
    let ring = leaked_ring();
    pool.attach_ring(ring).unwrap();
    let mut dma = TestDma::default();
    let n = PP_RING_SIZE + 10;
    let mut out: Vec<Pfn> = (0..n)
        .map(|_| pool.alloc(&mut pcp, z, &mut dma).unwrap())
        .collect();
    let set = |v: &[Pfn]| v.iter().map(|p| p.0).collect::<HashSet<u64>>();
    let back: Vec<Pfn> = core::mem::take(&mut out);
    // Half one by one through the zone path, half in bursts through the remote pcp.
    let mut released = 0;
    for (i, chunk) in back.chunks(16).enumerate() {
        if i % 2 == 0 {
            for &p in chunk {
                if ring.recycle_remote(p, z, None, &mut dma) == RemoteRecycle::Released {
                    released += 1;
                }
            }
        } else {
            released += chunk.len() - ring.recycle_remote_bulk(chunk, z, Some(&mut rpcp), &mut dma);
        }
    }
    assert_eq!(released, 10);
    assert_eq!(ring.len(), PP_RING_SIZE);
    let s = pool.stats();
    assert_eq!((s.recycle_ring_full, s.released), (10, 10));
    assert_eq!(pool.in_flight(), PP_RING_SIZE as u64);
    assert_eq!(dma.unmaps, 10, "released pages were unmapped");
    check_ring(z, &[&pcp, &rpcp], &pool, &dma, &HashSet::new());
    // The owner takes everything back out (cache, then the ring in refill-size gulps, then
    // the allocator), then returns it all on its own core: cache full -> ring -> ring full ->
    // unmapped and freed.
    let total = PP_ALLOC_CACHE_SIZE + PP_RING_SIZE + 50;
    while out.len() < total {
        out.push(pool.alloc(&mut pcp, z, &mut dma).unwrap());
    }
    assert_eq!(pool.stats().recycle_ring, PP_RING_SIZE as u64);
    assert!(ring.is_empty());
    check_ring(z, &[&pcp, &rpcp], &pool, &dma, &set(&out));
    let cached_now = pool.cached();
    let before = pool.stats();
    let mut back = 0;
    while let Some(p) = out.pop() {
        pool.recycle_direct(p, &mut pcp, z, &mut dma);
        back += 1;
        if back % 37 == 0 {
            check_ring(z, &[&pcp, &rpcp], &pool, &dma, &set(&out));
        }
    }
    let s = pool.stats();
    let to_cache = PP_ALLOC_CACHE_SIZE - cached_now;
    assert_eq!(s.recycle_cached - before.recycle_cached, to_cache as u64);
    assert_eq!(
        s.recycle_cache_full - before.recycle_cache_full,
        (total - to_cache) as u64
    );
    assert_eq!(ring.len(), PP_RING_SIZE);
    assert_eq!(
        s.recycle_ring_full - before.recycle_ring_full,
        (total - to_cache - PP_RING_SIZE) as u64
    );
    check_ring(z, &[&pcp, &rpcp], &pool, &dma, &HashSet::new());
    assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
    assert!(dma.mapped.is_empty());
    let s = pool.stats();
    assert_eq!(s.released + s.refill_failed, s.refill_pages);
}

#[test]
fn destroy_returns_ring_pages_and_waits_for_the_rest() {
    let (z, mut pcp, mut pool) = setup();
    let ring = leaked_ring();
    pool.attach_ring(ring).unwrap();
    let mut dma = TestDma::default();
    let mut out: Vec<Pfn> = (0..10)
        .map(|_| pool.alloc(&mut pcp, z, &mut dma).unwrap())
        .collect();
    for _ in 0..4 {
        ring.recycle_remote(out.pop().unwrap(), z, None, &mut dma);
    }
    assert_eq!(pool.in_flight(), 10);
    assert_eq!(
        pool.destroy(&mut pcp, z, &mut dma),
        Err(PoolError::InFlight(6))
    );
    assert_eq!(
        (pool.cached(), pool.in_ring()),
        (0, 0),
        "cache and ring emptied"
    );
    assert_eq!(dma.mapped.len(), 6);
    assert_eq!(ring.owner(), Some(7), "still attached while pages are out");
    // Bounded wait that never makes progress: times out, reporting the count every step.
    let mut seen = Vec::new();
    assert_eq!(
        pool.destroy_wait(&mut pcp, z, &mut dma, 3, |_, _, _, w| seen.push(w)),
        Err(PoolError::InFlight(6))
    );
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[2],
        DestroyWait {
            iteration: 2,
            in_flight: 6
        }
    );
    // A step that returns one page per call (half remotely): done after 6 steps.
    let steps = pool
        .destroy_wait(&mut pcp, z, &mut dma, 100, |pool, pcp, dma, w| {
            let p = out.pop().unwrap();
            assert_eq!(w.in_flight, out.len() as u64 + 1);
            if out.len() & 1 == 0 {
                ring.recycle_remote(p, z, None, dma);
            } else {
                pool.release_page(p, pcp, z, dma);
            }
        })
        .unwrap();
    assert_eq!(steps, 6);
    assert!(dma.mapped.is_empty());
    assert_eq!(ring.owner(), None);
    pcp.drain_local_pages(z);
    assert_eq!(z.free_pages(), z.managed_pages());
}

#[test]
fn single_refill_mode_takes_pages_one_by_one() {
    let (z, mut pcp, mut pool) = setup();
    assert_eq!(pool.refill_mode(), RefillMode::Bulk);
    pool.set_refill_mode(RefillMode::Single);
    let mut dma = TestDma {
        fail_at: Some(5),
        ..TestDma::default()
    };
    let p = pool.alloc(&mut pcp, z, &mut dma).unwrap();
    let s = pool.stats();
    assert_eq!((s.refill_pages, s.refill_failed), (64, 1));
    assert_eq!(pool.cached(), 62);
    check(z, &pcp, &pool, &dma, &[p.0].into_iter().collect());
    // Allocator nearly dry: single mode takes what is there (no watermark check).
    let mut hog = Vec::new();
    while z.free_pages() > 0 {
        hog.push(z.alloc_pages(0).unwrap());
    }
    let mut out = std::vec![p];
    while pool.cached() > 0 {
        out.push(pool.alloc(&mut pcp, z, &mut dma).unwrap());
    }
    let left = pcp.count();
    if left > 0 {
        out.push(pool.alloc(&mut pcp, z, &mut dma).unwrap());
        assert_eq!(pool.cached(), left.min(64) - 1);
    }
    while pool.cached() > 0 {
        out.push(pool.alloc(&mut pcp, z, &mut dma).unwrap());
    }
    assert_eq!(pool.alloc(&mut pcp, z, &mut dma), None);
    assert_eq!(pool.stats().alloc_empty, 1);
    for p in out {
        pool.release_page(p, &mut pcp, z, &mut dma);
    }
    for h in hog {
        z.free_pages_order(h, 0);
    }
    assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Alloc(u8),
        RecycleDirect(usize),
        RecycleRemote(usize, bool),
        RecycleRemoteBulk(usize, u8, bool),
        Release(usize),
        DrainRing,
        Destroy,
        FailMapAt(u8),
        Mode(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u8..80).prop_map(Op::Alloc),
            3 => any::<usize>().prop_map(Op::RecycleDirect),
            3 => (any::<usize>(), any::<bool>()).prop_map(|(i, z)| Op::RecycleRemote(i, z)),
            2 => (any::<usize>(), 1u8..40, any::<bool>())
                .prop_map(|(i, n, z)| Op::RecycleRemoteBulk(i, n, z)),
            2 => any::<usize>().prop_map(Op::Release),
            1 => Just(Op::DrainRing),
            1 => Just(Op::Destroy),
            1 => (0u8..70).prop_map(Op::FailMapAt),
            1 => any::<bool>().prop_map(Op::Mode),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// Random sequences of alloc / same-core recycle / remote recycle (single and bulk,
        /// zone path and remote pcp) / release / ring drain / destroy, with DMA failures and
        /// mode switches, on a zone small enough to run dry: after every step each page is in
        /// exactly one place, the counts add up, and only pool pages are mapped.
        #[test]
        fn no_page_lost_double_owned_or_freed_mapped(ops in proptest::collection::vec(op(), 1..120)) {
            let z = zone(512, 512);
            let mut pcp = PerCpuPages::with_params(64, 15);
            let mut rpcp = PerCpuPages::with_params(64, 15);
            let mut pool = PagePool::new(PagePoolParams { id: 7, refill: 32 }).unwrap();
            let ring = leaked_ring();
            pool.attach_ring(ring).unwrap();
            let mut dma = TestDma::default();
            let mut out: Vec<Pfn> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(n) => {
                        for _ in 0..n {
                            match pool.alloc(&mut pcp, z, &mut dma) {
                                Some(p) => out.push(p),
                                None => break,
                            }
                        }
                    }
                    Op::RecycleDirect(i) if !out.is_empty() => {
                        let p = out.swap_remove(i % out.len());
                        pool.recycle_direct(p, &mut pcp, z, &mut dma);
                    }
                    Op::RecycleRemote(i, zone_path) if !out.is_empty() => {
                        let p = out.swap_remove(i % out.len());
                        let pcp = if zone_path { None } else { Some(&mut rpcp) };
                        ring.recycle_remote(p, z, pcp, &mut dma);
                    }
                    Op::RecycleRemoteBulk(i, n, zone_path) if !out.is_empty() => {
                        let start = i % out.len();
                        let end = (start + n as usize).min(out.len());
                        let burst: Vec<Pfn> = out.drain(start..end).collect();
                        let pcp = if zone_path { None } else { Some(&mut rpcp) };
                        ring.recycle_remote_bulk(&burst, z, pcp, &mut dma);
                    }
                    Op::Release(i) if !out.is_empty() => {
                        let p = out.swap_remove(i % out.len());
                        pool.release_page(p, &mut pcp, z, &mut dma);
                    }
                    Op::DrainRing => {
                        pool.drain_ring();
                    }
                    Op::Destroy => match pool.destroy(&mut pcp, z, &mut dma) {
                        Ok(()) => {
                            prop_assert!(out.is_empty());
                            prop_assert_eq!(ring.owner(), None);
                            pool.attach_ring(ring).unwrap();
                        }
                        Err(PoolError::InFlight(n)) => {
                            prop_assert_eq!(n, out.len() as u64);
                            prop_assert_eq!((pool.cached(), pool.in_ring()), (0, 0));
                        }
                        Err(e) => panic!("{e:?}"),
                    },
                    Op::FailMapAt(k) => dma.fail_at = Some(dma.calls + k as usize),
                    Op::Mode(single) => pool.set_refill_mode(if single {
                        RefillMode::Single
                    } else {
                        RefillMode::Bulk
                    }),
                    _ => {}
                }
                let set: HashSet<u64> = out.iter().map(|p| p.0).collect();
                prop_assert_eq!(set.len(), out.len(), "a page handed out twice");
                check_ring(z, &[&pcp, &rpcp], &pool, &dma, &set);
            }
            for p in out.drain(..) {
                pool.release_page(p, &mut pcp, z, &mut dma);
            }
            prop_assert_eq!(pool.destroy(&mut pcp, z, &mut dma), Ok(()));
            prop_assert!(dma.mapped.is_empty());
            let s = pool.stats();
            prop_assert_eq!(s.released + s.refill_failed, s.refill_pages);
        }
    }
}

/// `NAMES` and `values` follow the fields, in order (what `STATS`' `pools[]` keys are).
#[test]
fn stats_names_and_values_follow_the_fields() {
    let v: [u64; 11] = core::array::from_fn(|i| i as u64 + 1);
    let s = PagePoolStats::from_values(v);
    assert_eq!(s.values(), v);
    assert_eq!((s.alloc_fast, s.released, s.refill_cycles), (1, 10, 11));
    let names: HashSet<_> = PagePoolStats::NAMES.iter().collect();
    assert_eq!(names.len(), PagePoolStats::NAMES.len());
    // The field names as `Debug` writes them, in order.
    let dbg = std::format!("{s:?}");
    let mut at = 0;
    for (n, v) in PagePoolStats::NAMES.iter().zip(v) {
        let field = std::format!("{n}: {v}");
        at += dbg[at..]
            .find(&field)
            .unwrap_or_else(|| panic!("{field} in {dbg}"));
    }
}
