//! page_pool host micro-benchmark (rdtsc, no harness): TSC cycles per page for
//!
//! * `recycle_fast`: alloc from the cache + `recycle_direct` (Linux page_pool: 19 cycles);
//! * `recycle_ring`: return through the [`RecycleRing`] (one `recycle_remote` push per page, or
//!   one `recycle_remote_bulk` per 64) + the owner's drain on the slow path + the alloc
//!   (Linux ptr_ring return: 54 cycles). Both sides run on one thread here, so the cache-line
//!   transfer between two cores that a real remote return pays is NOT included;
//! * `empty_refill`: the pool is always empty — every page is released to the allocator after
//!   its alloc (`alloc` + `release_page`), so every 64th alloc refills from the pcp allocator,
//!   with [`RefillMode::Bulk`] (one `alloc_pages_bulk_list`) vs [`RefillMode::Single`]
//!   (64 × `alloc_page`) (Linux: 238 cycles).
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-pool cargo bench -p mm --bench pool` (add `-- --quick`
//! for a short run). Each figure is the minimum over `ROUNDS` rounds of `ITERS` pages (the
//! minimum is the least disturbed round on a shared, noisy machine); the median is printed too.
//! The last line is `POOL_BENCH {json}` for `cargo xtask bench pool`.

use std::hint::black_box;

use mm::page_pool::{
    IdentityDma, PagePool, PagePoolParams, RecycleRing, RefillMode, PP_ALLOC_CACHE_REFILL,
};
use mm::{Page, PerCpuPages, Pfn, Zone};

const ZONE_PAGES: usize = 1 << 16; // 256 MiB of frames

#[inline(always)]
fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no memory effects; lfence keeps earlier work from drifting past it.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        let t = core::arch::x86_64::_rdtsc();
        core::arch::x86_64::_mm_lfence();
        t
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::time::Instant::now().elapsed().as_nanos() as u64
    }
}

struct Env {
    zone: &'static Zone,
    pcp: Box<PerCpuPages>,
}

fn env() -> Env {
    let map: &'static [Page] = Box::leak((0..ZONE_PAGES).map(|_| Page::new()).collect());
    let zone: &'static Zone = Box::leak(Box::new(Zone::new(Pfn(0), map)));
    zone.add_free_range(Pfn(0), Pfn(ZONE_PAGES as u64));
    let pcp = Box::new(PerCpuPages::new(zone, 1));
    Env { zone, pcp }
}

struct Figure {
    min: f64,
    median: f64,
    max: f64,
}

/// Run `round` (which handles `iters` pages and returns the TSC cycles it took) `rounds` times.
fn measure(rounds: usize, iters: u64, mut round: impl FnMut(u64) -> u64) -> Figure {
    round(iters); // warm-up
    let mut v: Vec<f64> = (0..rounds)
        .map(|_| round(iters) as f64 / iters as f64)
        .collect();
    v.sort_by(f64::total_cmp);
    Figure {
        min: v[0],
        median: v[v.len() / 2],
        max: v[v.len() - 1],
    }
}

fn recycle_fast(e: &mut Env, rounds: usize, iters: u64) -> Figure {
    let mut pool = PagePool::new(PagePoolParams::new(1)).unwrap();
    let mut dma = IdentityDma;
    let z = e.zone;
    let pcp = &mut *e.pcp;
    let f = measure(rounds, iters, |n| {
        let t0 = rdtsc();
        for _ in 0..n {
            let p = pool.alloc(pcp, z, &mut dma).unwrap();
            pool.recycle_direct(black_box(p), pcp, z, &mut dma);
        }
        rdtsc() - t0
    });
    pool.destroy(pcp, z, &mut dma).unwrap();
    f
}

/// 64 pages circulate: all pushed into the ring, then all allocated again (the first alloc of
/// each lap finds the cache empty and drains the 64 from the ring).
fn recycle_ring(e: &mut Env, rounds: usize, iters: u64, bulk: bool) -> Figure {
    const LAP: usize = PP_ALLOC_CACHE_REFILL;
    let ring: &'static RecycleRing = Box::leak(Box::new(RecycleRing::new()));
    let mut pool = PagePool::new(PagePoolParams::new(2)).unwrap();
    pool.attach_ring(ring).unwrap();
    let mut dma = IdentityDma;
    let z = e.zone;
    let pcp = &mut *e.pcp;
    let mut out: Vec<Pfn> = (0..LAP)
        .map(|_| pool.alloc(pcp, z, &mut dma).unwrap())
        .collect();
    assert_eq!(pool.cached(), 0);
    let mut remote_dma = IdentityDma;
    let f = measure(rounds, iters, |n| {
        let laps = n / LAP as u64;
        let t0 = rdtsc();
        for _ in 0..laps {
            if bulk {
                ring.recycle_remote_bulk(&out, z, None, &mut remote_dma);
            } else {
                for &p in &out {
                    ring.recycle_remote(p, z, None, &mut remote_dma);
                }
            }
            for slot in out.iter_mut() {
                *slot = pool.alloc(pcp, z, &mut dma).unwrap();
            }
            black_box(&out);
        }
        rdtsc() - t0
    });
    assert_eq!(pool.stats().recycle_ring_full, 0);
    assert_eq!(pool.stats().refill_pages, LAP as u64);
    for p in out {
        pool.recycle_direct(p, pcp, z, &mut dma);
    }
    pool.destroy(pcp, z, &mut dma).unwrap();
    f
}

fn empty_refill(e: &mut Env, rounds: usize, iters: u64, mode: RefillMode) -> Figure {
    let mut pool = PagePool::new(PagePoolParams::new(3)).unwrap();
    pool.set_refill_mode(mode);
    let mut dma = IdentityDma;
    let z = e.zone;
    let pcp = &mut *e.pcp;
    let f = measure(rounds, iters, |n| {
        let t0 = rdtsc();
        for _ in 0..n {
            let p = pool.alloc(pcp, z, &mut dma).unwrap();
            pool.release_page(black_box(p), pcp, z, &mut dma);
        }
        rdtsc() - t0
    });
    assert!(pool.stats().alloc_slow > 0);
    pool.destroy(pcp, z, &mut dma).unwrap();
    f
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, iters) = if quick {
        (5, 64 * 1024)
    } else {
        (31, 64 * 4096)
    };
    let mut e = env();
    let fast = recycle_fast(&mut e, rounds, iters);
    let ring = recycle_ring(&mut e, rounds, iters, false);
    let ring_bulk = recycle_ring(&mut e, rounds, iters, true);
    let bulk = empty_refill(&mut e, rounds, iters, RefillMode::Bulk);
    let single = empty_refill(&mut e, rounds, iters, RefillMode::Single);
    e.pcp.drain_local_pages(e.zone);
    assert_eq!(
        e.zone.free_pages(),
        e.zone.managed_pages(),
        "bench leaked pages"
    );

    println!("page_pool host bench: TSC cycles per page, min (median) of {rounds} rounds of {iters} pages");
    let row = |name: &str, f: &Figure, target: &str| {
        println!("  {name:<34} {:>7.1} ({:>7.1})   {target}", f.min, f.median);
    };
    row("recycle fast (cache)", &fast, "target <= 10, Linux 19");
    row(
        "recycle ring (push per page)",
        &ring,
        "target <= 30, Linux 54",
    );
    row("recycle ring (bulk push of 64)", &ring_bulk, "");
    row("empty-pool refill, bulk", &bulk, "target <= 40, Linux 238");
    row("empty-pool refill, single", &single, "");
    println!(
        "  bulk / single empty-pool refill: {:.2}",
        bulk.min / single.min
    );
    // `spread`: min, median and max over the rounds, per figure (the summary in BENCHMARKS.md
    // shows all three: rdtsc on a shared host).
    let spread = [
        ("recycle_fast", &fast),
        ("recycle_ring", &ring),
        ("recycle_ring_bulk", &ring_bulk),
        ("empty_refill", &bulk),
        ("empty_refill_single", &single),
    ]
    .iter()
    .map(|(k, f)| format!("\"{k}\":[{:.1},{:.1},{:.1}]", f.min, f.median, f.max))
    .collect::<Vec<_>>()
    .join(",");
    println!(
        "POOL_BENCH {{\"recycle_fast_cycles\":{:.1},\"recycle_ring_cycles\":{:.1},\"recycle_ring_bulk_cycles\":{:.1},\"empty_refill_cycles\":{:.1},\"empty_refill_single_cycles\":{:.1},\"rounds\":{rounds},\"pages_per_round\":{iters},\"spread\":{{{spread}}}}}",
        fast.min, ring.min, ring_bulk.min, bulk.min, single.min
    );
}
