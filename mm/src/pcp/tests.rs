use super::*;
use crate::zone::tests::{check_free_lists, empty_zone, zone};
use crate::zone::Watermarks;
use std::collections::HashSet;
use std::vec::Vec;

/// Every page the allocator does not hold is in exactly one of: zone free lists, a pcp list,
/// `owned`. Checks disjointness and the page count.
fn check_conservation(z: &Zone, pcps: &[&PerCpuPages], owned: &HashSet<u64>) {
    let mut seen: HashSet<u64> = HashSet::new();
    for pfn in check_free_lists(z) {
        assert!(seen.insert(pfn), "PFN {pfn:#x} twice in the free lists");
    }
    for pcp in pcps {
        assert!(pcp.count() <= pcp.high(), "pcp over high");
        for pfn in pcp.pages() {
            assert!(
                seen.insert(pfn.0),
                "PFN {:#x} on a pcp list and elsewhere",
                pfn.0
            );
            assert_eq!(z.page(pfn).refcount(), 0);
        }
    }
    for &pfn in owned {
        assert!(seen.insert(pfn), "owned PFN {pfn:#x} is also free");
        assert_eq!(z.page(Pfn(pfn)).refcount(), 1);
    }
    assert_eq!(seen.len() as u64, z.managed_pages(), "pages lost");
    let pcp_total: usize = pcps.iter().map(|p| p.count()).sum();
    assert_eq!(
        z.free_pages() + pcp_total as u64 + owned.len() as u64,
        z.managed_pages()
    );
}

#[test]
fn batchsize_and_highsize_match_linux() {
    // 1 GiB zone: min(256, 256) / 4 = 64 -> rounddown_pow2(96) - 1 = 63.
    assert_eq!(zone_batchsize(262_144), 63);
    // 16 MiB zone: 4096 >> 10 = 4, / 4 = 1 -> rounddown_pow2(1) - 1 = 0 -> at least 1.
    assert_eq!(zone_batchsize(4096), 1);
    // 64 MiB: 16 / 4 = 4 -> rounddown_pow2(6) - 1 = 3.
    assert_eq!(zone_batchsize(16_384), 3);
    // high = low watermark / ncpus, at least 4 * batch.
    assert_eq!(zone_highsize(1286, 63, 1), 1286);
    assert_eq!(zone_highsize(1286, 63, 2), 643);
    assert_eq!(zone_highsize(1286, 63, 64), 252);
    assert_eq!(zone_highsize(1286, 63, 0), 1286);
}

#[test]
fn new_sizes_from_zone() {
    let z = zone(1 << 18, 1 << 18); // 1 GiB, PFN 0 not in the span
    assert_eq!(z.watermarks().low, 1286);
    let one = PerCpuPages::new(z, 1);
    assert_eq!((one.batch(), one.high()), (63, 1286));
    let two = PerCpuPages::new(z, 2);
    assert_eq!((two.batch(), two.high()), (63, 643));
    assert_eq!(one.count(), 0);
}

#[test]
fn with_params_clamps() {
    let p = PerCpuPages::with_params(1_000_000, 0);
    assert_eq!((p.high(), p.batch()), (PCP_MAX_PAGES - 1, 1));
    let p = PerCpuPages::with_params(2, 8);
    assert_eq!((p.high(), p.batch()), (8, 8));
    let p = PerCpuPages::with_params(10, 1_000_000);
    assert_eq!(
        (p.high(), p.batch()),
        (PCP_MAX_PAGES - 1, PCP_MAX_PAGES - 1)
    );
}

#[test]
fn refill_and_overflow_counts() {
    let z = zone(1024, 4096);
    let mut pcp = PerCpuPages::with_params(8, 4);
    let mut got = Vec::new();
    let p = pcp.alloc_page(z).unwrap();
    got.push(p);
    assert_eq!(pcp.count(), 3, "refilled batch 4, handed out 1");
    assert_eq!(z.free_pages(), 4096 - 4);
    assert_eq!(z.page(p).refcount(), 1);
    for _ in 0..11 {
        got.push(pcp.alloc_page(z).unwrap());
    }
    assert_eq!(pcp.count(), 0, "3 refills of 4, all handed out");
    assert_eq!(z.free_pages(), 4096 - 12);
    let owned: HashSet<u64> = got.iter().map(|p| p.0).collect();
    assert_eq!(owned.len(), 12);
    check_conservation(z, &[&pcp], &owned);

    for (i, &p) in got.iter().enumerate().take(8) {
        pcp.free_page(z, p);
        assert_eq!(pcp.count(), i + 1);
    }
    assert_eq!(z.free_pages(), 4096 - 12, "8 pages fit under high");
    pcp.free_page(z, got[8]);
    assert_eq!(pcp.count(), 5, "9 > high 8: flushed batch 4");
    assert_eq!(z.free_pages(), 4096 - 8);
    // The 4 coldest (first freed) went back; the hot ones stayed.
    let on_list: Vec<Pfn> = pcp.pages().collect();
    assert_eq!(on_list, got[4..9].to_vec());
    for &p in &got[9..] {
        pcp.free_page(z, p);
    }
    assert_eq!(pcp.count(), 8);
    // LIFO: the last freed page is the next handed out.
    assert_eq!(pcp.alloc_page(z), Some(got[11]));
    pcp.free_page(z, got[11]);
    check_conservation(z, &[&pcp], &HashSet::new());
    pcp.drain_local_pages(z);
    assert_eq!(pcp.count(), 0);
    assert_eq!(z.free_pages(), 4096);
    assert_eq!(z.buddyinfo()[MAX_ORDER_IDX], 4);
}

const MAX_ORDER_IDX: usize = crate::MAX_ORDER;

#[test]
fn ring_wraps_around() {
    // Push/flush many times so tail wraps the 2048-entry ring, then drain across the wrap.
    let z = zone(4096, 8192);
    let mut pcp = PerCpuPages::with_params(2000, 700);
    let mut owned = Vec::new();
    for _ in 0..3000 {
        owned.push(z.alloc_pages(0).unwrap());
    }
    for &p in &owned {
        pcp.free_page(z, p);
    }
    // 3000 frees: 2001 -> flush 700 -> 1301; +700 -> 2001 -> 1301; +299 -> 1600.
    assert_eq!(pcp.count(), 1600);
    assert_eq!(z.free_pages(), 8192 - 3000 + 1400);
    assert!(pcp.tail > 0);
    for _ in 0..1900 {
        pcp.alloc_page(z).unwrap();
    }
    for _ in 0..2500 {
        let p = z.alloc_pages(0).unwrap();
        pcp.free_page(z, p);
    }
    let n = pcp.count();
    assert!(
        pcp.tail + n > PCP_MAX_PAGES,
        "test must exercise a wrapped drain"
    );
    let before = z.free_pages();
    pcp.drain_local_pages(z);
    assert_eq!(z.free_pages(), before + n as u64);
    check_free_lists(z);
}

#[test]
fn bulk_array_fills_only_empty_slots() {
    let z = zone(1024, 4096);
    let mut pcp = PerCpuPages::with_params(64, 8);
    let a = pcp.alloc_page(z).unwrap();
    let b = pcp.alloc_page(z).unwrap();
    let mut arr = [None; 16];
    arr[2] = Some(a);
    arr[5] = Some(b);
    let free_before = z.free_pages() + pcp.count() as u64;
    assert_eq!(pcp.alloc_pages_bulk(z, &mut arr), Ok(14));
    assert_eq!(arr[2], Some(a));
    assert_eq!(arr[5], Some(b));
    let all: HashSet<u64> = arr.iter().map(|p| p.unwrap().0).collect();
    assert_eq!(all.len(), 16, "duplicate page");
    for p in arr.iter().flatten() {
        assert_eq!(z.page(*p).refcount(), 1);
    }
    assert_eq!(z.free_pages() + pcp.count() as u64, free_before - 14);
    check_conservation(z, &[&pcp], &all);
}

#[test]
fn bulk_refills_once_for_the_whole_request() {
    let z = zone(1024, 4096);
    let mut pcp = PerCpuPages::with_params(512, 4);
    let mut out = [Pfn(0); 50];
    assert_eq!(pcp.alloc_pages_bulk_list(z, 50, &mut out), Ok(50));
    assert_eq!(pcp.count(), 0, "refilled max(batch, 50) = 50, all used");
    assert_eq!(z.free_pages(), 4096 - 50);
    // nr larger than the slice: bounded by the slice.
    let mut small = [Pfn(0); 3];
    assert_eq!(pcp.alloc_pages_bulk_list(z, 10, &mut small), Ok(3));
    let owned: HashSet<u64> = out.iter().chain(&small).map(|p| p.0).collect();
    assert_eq!(owned.len(), 53);
    check_conservation(z, &[&pcp], &owned);
}

#[test]
fn zero_request_is_an_error() {
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    let p = pcp.alloc_page(z).unwrap();
    assert_eq!(
        pcp.alloc_pages_bulk(z, &mut [Some(p), Some(p)]),
        Err(BulkError::ZeroRequest)
    );
    assert_eq!(
        pcp.alloc_pages_bulk(z, &mut []),
        Err(BulkError::ZeroRequest)
    );
    assert_eq!(
        pcp.alloc_pages_bulk_list(z, 0, &mut [Pfn(0); 4]),
        Err(BulkError::ZeroRequest)
    );
    assert_eq!(
        pcp.alloc_pages_bulk_list(z, 4, &mut []),
        Err(BulkError::ZeroRequest)
    );
    assert_eq!(pcp.count(), 7, "nothing taken");
    assert_eq!(
        std::format!("{}", BulkError::ZeroRequest),
        "bulk page allocation requested zero pages"
    );
}

#[test]
fn single_slot_takes_the_single_page_path() {
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    let mut arr = [Some(Pfn(5000)), None, Some(Pfn(5001))];
    assert_eq!(pcp.alloc_pages_bulk(z, &mut arr), Ok(1));
    // alloc_page refilled exactly `batch` (a bulk refill would take max(batch, want)).
    assert_eq!(pcp.count(), 7);
    assert_eq!(z.free_pages(), 1024 - 8);
    let p = arr[1].unwrap();
    assert_eq!(z.page(p).refcount(), 1);
    assert_eq!((arr[0], arr[2]), (Some(Pfn(5000)), Some(Pfn(5001))));
    let mut one = [Pfn(0); 1];
    assert_eq!(pcp.alloc_pages_bulk_list(z, 1, &mut one), Ok(1));
    assert_eq!(pcp.count(), 6);
}

#[test]
fn partial_result_when_memory_is_short() {
    let z = zone(1024, 1024);
    z.set_watermarks(Watermarks {
        min: 50,
        low: 100,
        high: 150,
    });
    let mut pcp = PerCpuPages::with_params(64, 8);
    let mut owned = HashSet::new();
    // Bring the buddy lists down to 100 pages (at the low watermark) with 7 on the pcp list.
    owned.insert(pcp.alloc_page(z).unwrap().0);
    while z.free_pages() > 100 {
        owned.insert(z.alloc_pages(0).unwrap().0);
    }
    assert_eq!(pcp.count(), 7);
    // Below low + 16: only the pcp pages are served, the buddy lists are not touched.
    let mut arr = [None; 16];
    assert_eq!(pcp.alloc_pages_bulk(z, &mut arr), Ok(7));
    assert!(arr[..7].iter().all(Option::is_some) && arr[7..].iter().all(Option::is_none));
    assert_eq!(z.free_pages(), 100);
    assert_eq!(pcp.count(), 0);
    owned.extend(arr.iter().flatten().map(|p| p.0));
    // Pcp empty: falls back to one page from the zone, never 0 while memory exists.
    let mut arr = [None; 16];
    assert_eq!(pcp.alloc_pages_bulk(z, &mut arr), Ok(1));
    assert_eq!(z.free_pages(), 99);
    owned.insert(arr[0].unwrap().0);
    let mut out = [Pfn(0); 8];
    assert_eq!(pcp.alloc_pages_bulk_list(z, 8, &mut out), Ok(1));
    owned.insert(out[0].0);
    check_conservation(z, &[&pcp], &owned);
    // Zone empty and pcp empty: Ok(0).
    while let Some(p) = z.alloc_pages(0) {
        owned.insert(p.0);
    }
    assert_eq!(pcp.alloc_pages_bulk(z, &mut [None; 4]), Ok(0));
    assert_eq!(pcp.alloc_pages_bulk(z, &mut [None]), Ok(0));
    assert_eq!(pcp.alloc_page(z), None);
    check_conservation(z, &[&pcp], &owned);
}

#[test]
fn bulk_above_watermark_takes_from_buddy() {
    let z = zone(1024, 1024);
    z.set_watermarks(Watermarks {
        min: 50,
        low: 100,
        high: 150,
    });
    let mut pcp = PerCpuPages::with_params(64, 8);
    // 1024 > 100 + 32: full batch.
    let mut arr = [None; 32];
    assert_eq!(pcp.alloc_pages_bulk(z, &mut arr), Ok(32));
    assert_eq!(z.free_pages(), 1024 - 32);
}

#[test]
fn free_pages_bulk_drops_one_reference() {
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    let mut pages = [Pfn(0); 6];
    assert_eq!(pcp.alloc_pages_bulk_list(z, 6, &mut pages), Ok(6));
    let count0 = pcp.count();
    z.page(pages[1]).get();
    z.page(pages[4]).get();
    pcp.free_pages_bulk(z, &pages);
    assert_eq!(pcp.count(), count0 + 4, "only pages reaching 0 are freed");
    assert_eq!(z.page(pages[1]).refcount(), 1);
    assert_eq!(z.page(pages[4]).refcount(), 1);
    assert_eq!(z.page(pages[0]).refcount(), 0);
    let owned: HashSet<u64> = [pages[1].0, pages[4].0].into_iter().collect();
    check_conservation(z, &[&pcp], &owned);
    pcp.free_pages_bulk(z, &[pages[1], pages[4]]);
    assert_eq!(pcp.count(), count0 + 6);
    check_conservation(z, &[&pcp], &HashSet::new());
}

#[test]
fn free_page_clears_pool_and_dma() {
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    let p = pcp.alloc_page(z).unwrap();
    z.page(p).set_pool(Some(3));
    z.page(p).set_dma_addr(p.addr());
    pcp.free_page(z, p);
    assert_eq!(z.page(p).pool(), None);
    assert_eq!(z.page(p).dma_addr(), 0);
    assert_eq!(z.page(p).refcount(), 0);
}

#[test]
fn pfn0_never_handed_out_by_pcp() {
    let z = empty_zone(0, 64);
    z.add_free_range(Pfn(0), Pfn(64));
    z.set_watermarks(Watermarks::default());
    let mut pcp = PerCpuPages::with_params(64, 16);
    // 63 free pages > low 0 + 62 requested: one full bulk.
    let mut arr = [None; 62];
    assert_eq!(pcp.alloc_pages_bulk(z, &mut arr), Ok(62));
    let last = pcp.alloc_page(z).unwrap();
    assert_eq!(pcp.alloc_page(z), None);
    assert!(arr.iter().flatten().chain([&last]).all(|p| p.0 != 0));
}

std::thread_local! {
    static TEST_IN_IRQ: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    static TEST_CPU: core::cell::Cell<u32> = const { core::cell::Cell::new(u32::MAX) };
}

/// Hooks that read thread-locals, so installing them does not disturb tests on other threads.
fn install_test_hooks() {
    set_context_hooks(
        || TEST_IN_IRQ.with(|c| c.get()),
        || TEST_CPU.with(|c| c.get()),
    );
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "pcp used from interrupt context")]
fn pcp_from_interrupt_context_is_caught() {
    install_test_hooks();
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    TEST_IN_IRQ.with(|c| c.set(true));
    let _ = pcp.alloc_page(z);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "pcp of CPU 1 used from CPU 0")]
fn pcp_from_another_cpu_is_caught() {
    install_test_hooks();
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    pcp.set_owner(1);
    assert_eq!(pcp.owner(), Some(1));
    TEST_CPU.with(|c| c.set(1));
    let p = pcp.alloc_page(z).unwrap();
    TEST_CPU.with(|c| c.set(0));
    pcp.free_page(z, p);
}

#[test]
fn pcp_owner_check_passes_on_the_owner() {
    install_test_hooks();
    let z = zone(1024, 1024);
    let mut pcp = PerCpuPages::with_params(64, 8);
    assert_eq!(pcp.owner(), None);
    pcp.set_owner(3);
    TEST_CPU.with(|c| c.set(3));
    let p = pcp.alloc_page(z).unwrap();
    pcp.free_page(z, p);
    pcp.drain_local_pages(z);
    assert_eq!(z.free_pages(), 1024);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(usize),
        Free(usize, usize),
        BulkArray(usize, usize, u32),
        BulkList(usize, usize),
        BulkFree(usize, usize, usize),
        Drain(usize),
        ZoneAlloc(usize),
        ZoneFree(usize),
        GetRef(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..2usize).prop_map(Op::Alloc),
            4 => (0..2usize, any::<usize>()).prop_map(|(c, i)| Op::Free(c, i)),
            3 => (0..2usize, 1..40usize, any::<u32>()).prop_map(|(c, n, m)| Op::BulkArray(c, n, m)),
            3 => (0..2usize, 1..70usize).prop_map(|(c, n)| Op::BulkList(c, n)),
            3 => (0..2usize, any::<usize>(), 1..40usize).prop_map(|(c, i, n)| Op::BulkFree(c, i, n)),
            1 => (0..2usize).prop_map(Op::Drain),
            1 => (0..4usize).prop_map(Op::ZoneAlloc),
            1 => any::<usize>().prop_map(Op::ZoneFree),
            1 => any::<usize>().prop_map(Op::GetRef),
        ]
    }

    /// Model: order-0 pages we own (refcount in the model), higher-order blocks we own.
    struct Model {
        pages: std::collections::HashMap<u64, u32>,
        order0: Vec<u64>,
        blocks: Vec<(u64, usize)>,
    }

    impl Model {
        fn take(&mut self, pfn: Pfn) {
            assert_ne!(pfn.0, 0, "PFN 0 handed out");
            assert!(
                self.pages.insert(pfn.0, 1).is_none(),
                "PFN {:#x} owned twice",
                pfn.0
            );
            self.order0.push(pfn.0);
        }
        fn block_pages(&self) -> u64 {
            self.blocks.iter().map(|&(_, o)| 1u64 << o).sum()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn two_cpus_never_lose_or_duplicate_pages(
            ops in proptest::collection::vec(op(), 1..120),
            high in 4..48usize,
            batch in 1..16usize,
            low in prop_oneof![Just(0u64), 10..300u64],
        ) {
            // Span [0, 700) with a hole at [300, 340): PFN 0 and the hole are never free.
            let z = empty_zone(0, 700);
            z.add_free_range(Pfn(0), Pfn(300));
            z.add_free_range(Pfn(340), Pfn(700));
            z.set_watermarks(Watermarks { min: low / 2, low, high: low * 2 });
            let managed = z.managed_pages();
            let initial = z.buddyinfo();
            let mut cpus = [PerCpuPages::with_params(high, batch), PerCpuPages::with_params(high / 2 + 1, batch + 3)];
            let mut m = Model { pages: Default::default(), order0: Vec::new(), blocks: Vec::new() };

            for op in ops {
                match op {
                    Op::Alloc(c) => {
                        let avail = z.free_pages() + cpus[c].count() as u64;
                        match cpus[c].alloc_page(z) {
                            Some(p) => m.take(p),
                            None => prop_assert_eq!(avail, 0),
                        }
                    }
                    Op::Free(c, i) => {
                        if !m.order0.is_empty() {
                            let pfn = m.order0.swap_remove(i % m.order0.len());
                            let rc = m.pages.remove(&pfn).unwrap();
                            for _ in 1..rc { z.page(Pfn(pfn)).put_testzero(); }
                            cpus[c].free_page(z, Pfn(pfn));
                        }
                    }
                    Op::BulkArray(c, n, mask) => {
                        let mut arr: Vec<Option<Pfn>> = std::vec![None; n];
                        // Pre-fill some slots with sentinel pages we do not own.
                        for (k, slot) in arr.iter_mut().enumerate() {
                            if k < 32 && mask & (1 << k) != 0 { *slot = Some(Pfn(100_000 + k as u64)); }
                        }
                        let empty = arr.iter().filter(|s| s.is_none()).count();
                        let avail = z.free_pages() + cpus[c].count() as u64;
                        let before = arr.clone();
                        match cpus[c].alloc_pages_bulk(z, &mut arr) {
                            Err(BulkError::ZeroRequest) => prop_assert_eq!(empty, 0),
                            Ok(placed) => {
                                prop_assert!(placed <= empty);
                                prop_assert_eq!(placed == 0, avail == 0, "0 while memory exists");
                                let mut newly = 0;
                                for (b, a) in before.iter().zip(&arr) {
                                    match (b, a) {
                                        (Some(x), _) => prop_assert_eq!(Some(*x), *a, "filled slot touched"),
                                        (None, Some(p)) => { m.take(*p); newly += 1; }
                                        (None, None) => {}
                                    }
                                }
                                prop_assert_eq!(newly, placed);
                            }
                        }
                    }
                    Op::BulkList(c, n) => {
                        let mut out = std::vec![Pfn(0); n];
                        let avail = z.free_pages() + cpus[c].count() as u64;
                        let placed = cpus[c].alloc_pages_bulk_list(z, n, &mut out).unwrap();
                        prop_assert!(placed <= n);
                        prop_assert_eq!(placed == 0, avail == 0, "0 while memory exists");
                        for &p in &out[..placed] { m.take(p); }
                    }
                    Op::BulkFree(c, i, n) => {
                        let k = n.min(m.order0.len());
                        let mut batch = Vec::new();
                        for j in 0..k {
                            let idx = (i + j) % m.order0.len();
                            batch.push(m.order0[idx]);
                        }
                        batch.sort();
                        batch.dedup();
                        for &pfn in &batch {
                            let rc = m.pages.get_mut(&pfn).unwrap();
                            *rc -= 1;
                            if *rc == 0 {
                                m.pages.remove(&pfn);
                                m.order0.retain(|&x| x != pfn);
                            }
                        }
                        let pfns: Vec<Pfn> = batch.iter().map(|&p| Pfn(p)).collect();
                        cpus[c].free_pages_bulk(z, &pfns);
                    }
                    Op::Drain(c) => {
                        let before = z.free_pages() + cpus[c].count() as u64;
                        cpus[c].drain_local_pages(z);
                        prop_assert_eq!(cpus[c].count(), 0);
                        prop_assert_eq!(z.free_pages(), before);
                    }
                    Op::ZoneAlloc(order) => {
                        if let Some(p) = z.alloc_pages(order) {
                            prop_assert_ne!(p.0, 0);
                            m.blocks.push((p.0, order));
                        }
                    }
                    Op::ZoneFree(i) => {
                        if !m.blocks.is_empty() {
                            let (pfn, order) = m.blocks.swap_remove(i % m.blocks.len());
                            z.free_pages_order(Pfn(pfn), order);
                        }
                    }
                    Op::GetRef(i) => {
                        if !m.order0.is_empty() {
                            let pfn = m.order0[i % m.order0.len()];
                            z.page(Pfn(pfn)).get();
                            *m.pages.get_mut(&pfn).unwrap() += 1;
                        }
                    }
                }
                // Invariants after every step.
                let mut seen: HashSet<u64> = HashSet::new();
                for pfn in check_free_lists(z) { prop_assert!(seen.insert(pfn)); }
                for cpu in &cpus {
                    prop_assert!(cpu.count() <= cpu.high());
                    for p in cpu.pages() { prop_assert!(seen.insert(p.0), "pcp page also elsewhere"); }
                }
                for (&pfn, &rc) in &m.pages {
                    prop_assert!(seen.insert(pfn), "owned page also free");
                    prop_assert_eq!(z.page(Pfn(pfn)).refcount(), rc);
                }
                for &(pfn, o) in &m.blocks {
                    for k in 0..(1u64 << o) { prop_assert!(seen.insert(pfn + k), "block page also elsewhere"); }
                }
                prop_assert_eq!(seen.len() as u64, managed, "pages lost");
                prop_assert_eq!(
                    z.free_pages() + (cpus[0].count() + cpus[1].count()) as u64
                        + m.pages.len() as u64 + m.block_pages(),
                    managed
                );
                prop_assert!(!seen.contains(&0) || managed == 0);
                prop_assert!((300..340).all(|p| !seen.contains(&p)));
            }
            // Give everything back: the zone must return to its initial shape.
            for (&pfn, &rc) in &m.pages {
                for _ in 1..rc { z.page(Pfn(pfn)).put_testzero(); }
                cpus[0].free_page(z, Pfn(pfn));
            }
            for &(pfn, o) in &m.blocks { z.free_pages_order(Pfn(pfn), o); }
            cpus[0].drain_local_pages(z);
            cpus[1].drain_local_pages(z);
            prop_assert_eq!(z.free_pages(), managed);
            prop_assert_eq!(z.buddyinfo(), initial);
        }
    }
}
