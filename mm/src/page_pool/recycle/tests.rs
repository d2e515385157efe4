use super::*;
use std::vec::Vec;

#[cfg(not(loom))]
mod plain {
    use super::*;
    use crate::zone::tests::zone;
    use std::boxed::Box;

    fn ring() -> &'static RecycleRing {
        Box::leak(Box::new(RecycleRing::new()))
    }

    /// The wrapper passes pushes and pops through to its [`MpscRing`] (whose own tests cover
    /// the protocol): FIFO, full at [`PP_RING_SIZE`], `len`, `peek`.
    #[test]
    fn push_pop_in_order_and_full() {
        let r = ring();
        assert!(r.is_empty());
        for i in 1..=PP_RING_SIZE as u64 {
            assert_eq!(r.push(Pfn(i)), Ok(()));
        }
        assert_eq!(r.len(), PP_RING_SIZE);
        assert_eq!(r.push(Pfn(999)), Err(Pfn(999)), "full");
        assert_eq!(r.push_bulk(&[Pfn(998)]), 0, "full");
        let mut out = [Pfn(0); 10];
        assert_eq!(r.pop_batch(&mut out), 10);
        assert_eq!(out, core::array::from_fn(|i| Pfn(i as u64 + 1)));
        let more: Vec<Pfn> = (1000..1020).map(Pfn).collect();
        assert_eq!(r.push_bulk(&more), 10);
        let expect: Vec<Pfn> = (11..=PP_RING_SIZE as u64)
            .map(Pfn)
            .chain((1000..1010).map(Pfn))
            .collect();
        assert_eq!(r.peek(), expect);
        let mut all = std::vec![Pfn(0); PP_RING_SIZE + 5];
        assert_eq!(r.pop_batch(&mut all), PP_RING_SIZE);
        assert_eq!(&all[..PP_RING_SIZE], &expect[..]);
        assert!(r.is_empty());
        assert_eq!(
            (r.full_count(), r.released_count()),
            (0, 0),
            "push full is not counted"
        );
    }

    #[test]
    fn attach_is_exclusive() {
        let r = ring();
        assert_eq!(r.owner(), None);
        assert_eq!(r.attach(3), Ok(()));
        assert_eq!(r.attach(4), Err(3));
        assert_eq!(r.owner(), Some(3));
        r.detach();
        assert_eq!(r.attach(4), Ok(()));
    }

    #[test]
    fn recycle_remote_releases_when_full() {
        use crate::dma::IdentityDma;
        let z = zone(1024, 1024);
        let r = ring();
        r.attach(9).unwrap();
        let pages: Vec<Pfn> = (0..PP_RING_SIZE + 3)
            .map(|_| {
                let p = z.alloc_pages(0).unwrap();
                z.page(p).set_pool(Some(9));
                z.page(p).set_dma_addr(p.addr());
                p
            })
            .collect();
        let free0 = z.free_pages();
        let mut dma = IdentityDma;
        for &p in &pages[..PP_RING_SIZE] {
            assert_eq!(r.recycle_remote(p, z, None, &mut dma), RemoteRecycle::Ring);
        }
        assert_eq!(
            r.recycle_remote(pages[PP_RING_SIZE], z, None, &mut dma),
            RemoteRecycle::Released
        );
        assert_eq!(z.free_pages(), free0 + 1, "zone path");
        let mut pcp = PerCpuPages::with_params(64, 8);
        assert_eq!(
            r.recycle_remote_bulk(&pages[PP_RING_SIZE + 1..], z, Some(&mut pcp), &mut dma),
            0
        );
        assert_eq!(pcp.count(), 2, "the caller's own pcp");
        assert_eq!((r.full_count(), r.released_count()), (3, 3));
        let pg = z.page(pages[PP_RING_SIZE + 2]);
        assert_eq!((pg.pool(), pg.dma_addr(), pg.refcount()), (None, 0, 0));
    }
}

/// Loom models (run with `--cfg loom`, see the module docs).
#[cfg(loom)]
mod loom_models {
    use super::*;
    use crate::dma::{DmaError, DmaMapper};
    use crate::page_pool::{PagePool, PagePoolParams};
    use crate::zone::tests::zone;
    use std::boxed::Box;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Mapper shared by the owner and the remote CPU: records live mappings; a bad unmap or a
    /// double map panics. (A std Mutex, held only across code with no loom operation, so loom
    /// never switches threads inside it.)
    #[derive(Clone)]
    struct SharedDma(std::sync::Arc<Mutex<HashMap<u64, u64>>>);

    impl DmaMapper for SharedDma {
        fn map(&mut self, pfn: Pfn) -> Result<u64, DmaError> {
            assert!(
                self.0.lock().unwrap().insert(pfn.0, pfn.addr()).is_none(),
                "mapped twice"
            );
            Ok(pfn.addr())
        }
        fn unmap(&mut self, pfn: Pfn, dma: u64) {
            assert_eq!(
                self.0.lock().unwrap().remove(&pfn.0),
                Some(dma),
                "bad unmap"
            );
        }
    }

    /// Stack for the model's threads: loom's coroutines get 32 KiB by default, and a failing
    /// check deep in the pool code overflows that while panicking — loom then hangs instead of
    /// reporting the failure. (`loom::model` cannot enlarge its own thread, so the owner's side
    /// runs in a spawned thread too.)
    const STACK: usize = 1 << 20;

    /// Remote CPU returns 3 pages (one single push, then a bulk of 2) into a 2-slot ring while
    /// the owner allocates (draining the ring or refilling from the allocator) and recycles;
    /// then the owner destroys the pool. No page lost, none owned twice, none freed mapped.
    #[test]
    fn loom_remote_recycle_races_owner_refill() {
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
        // Interleavings seen where the remote CPU released pages (ring full) / released none
        // (the owner drained between its two returns) / where the owner took pages out of the
        // ring before the remote CPU finished: all must be explored.
        static RELEASED: AtomicUsize = AtomicUsize::new(0);
        static NONE_RELEASED: AtomicUsize = AtomicUsize::new(0);
        static DRAINED_EARLY: AtomicUsize = AtomicUsize::new(0);
        static EXECUTIONS: AtomicUsize = AtomicUsize::new(0);
        loom::model(|| {
            let owner = loom::thread::Builder::new().stack_size(STACK).spawn(|| {
                EXECUTIONS.fetch_add(1, Relaxed);
                let z = zone(64, 64);
                let managed = z.managed_pages();
                let ring: &'static RecycleRing = Box::leak(Box::new(RecycleRing::new()));
                let mut pcp = PerCpuPages::with_params(8, 4);
                let mut pool = PagePool::new(PagePoolParams { id: 1, refill: 3 }).unwrap();
                pool.attach_ring(ring).unwrap();
                let dma = SharedDma(Default::default());
                let mut odma = dma.clone();
                let out: Vec<Pfn> = (0..3)
                    .map(|_| pool.alloc(&mut pcp, z, &mut odma).unwrap())
                    .collect();
                assert_eq!(pool.cached(), 0);
                let remote = {
                    let mut rdma = dma.clone();
                    loom::thread::Builder::new()
                        .stack_size(STACK)
                        .spawn(move || {
                            let mut rpcp = PerCpuPages::with_params(8, 4);
                            let mut released = 0;
                            if ring.recycle_remote(out[0], z, None, &mut rdma)
                                == RemoteRecycle::Released
                            {
                                released += 1;
                            }
                            // Let the owner drain between the two returns too (see below):
                            // without it loom never runs the bulk return after a drain, and
                            // never sees all 3 fit.
                            loom::thread::yield_now();
                            released += 2 - ring.recycle_remote_bulk(
                                &out[1..],
                                z,
                                Some(&mut rpcp),
                                &mut rdma,
                            );
                            rpcp.drain_local_pages(z);
                            released
                        })
                        .unwrap()
                };
                // Owner: allocate twice (ring drain or allocator refill), recycle both. loom's DPOR
                // tracks only the last load of an atomic, which can hide the "push before the
                // owner's drain" orders; yielding makes loom also run the remote CPU first.
                let mut mine = Vec::new();
                for _ in 0..2 {
                    loom::thread::yield_now();
                    let p = pool.alloc(&mut pcp, z, &mut odma).unwrap();
                    assert_eq!(z.page(p).pool(), Some(1));
                    assert!(!mine.contains(&p), "owned twice");
                    mine.push(p);
                }
                for p in mine {
                    pool.recycle_direct(p, &mut pcp, z, &mut odma);
                }
                let drained_early = pool.stats().recycle_ring > 0;
                let released = remote.join().unwrap();
                RELEASED.fetch_add((released > 0) as usize, Relaxed);
                NONE_RELEASED.fetch_add((released == 0) as usize, Relaxed);
                DRAINED_EARLY.fetch_add(drained_early as usize, Relaxed);
                assert_eq!(pool.stats().recycle_ring_full, released as u64);
                // Pages still in the ring count as in flight until the owner takes them out.
                assert_eq!(pool.in_flight(), pool.in_ring() as u64);
                assert_eq!(pool.destroy(&mut pcp, z, &mut odma), Ok(()));
                pcp.drain_local_pages(z);
                assert!(dma.0.lock().unwrap().is_empty(), "mapping leaked");
                assert_eq!(z.free_pages(), managed, "page lost");
                assert_eq!(ring.owner(), None);
            });
            owner.unwrap().join().unwrap();
        });
        std::println!(
            "loom: {} executions, {} with ring-full releases, {} with none, {} with an early drain",
            EXECUTIONS.load(Relaxed),
            RELEASED.load(Relaxed),
            NONE_RELEASED.load(Relaxed),
            DRAINED_EARLY.load(Relaxed)
        );
        assert!(
            RELEASED.load(Relaxed) > 0
                && NONE_RELEASED.load(Relaxed) > 0
                && DRAINED_EARLY.load(Relaxed) > 0
        );
    }
}
