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
