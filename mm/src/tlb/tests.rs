use super::*;

#[cfg(not(loom))]
mod plain {
    use super::*;
    use core::cell::{Cell, RefCell};
    use std::boxed::Box;
    use std::vec::Vec;

    #[derive(Copy, Clone, PartialEq, Eq, Debug)]
    enum Ev {
        Page { cpu: usize, va: u64 },
        All { cpu: usize },
        Ipi { from: usize, to: usize },
    }

    /// One arch for every CPU of a single-threaded test: `cpu` is the CPU being stepped.
    #[derive(Default)]
    struct Arch {
        cpu: Cell<usize>,
        log: RefCell<Vec<Ev>>,
        halted: Cell<u64>,
        now: Cell<u64>,
    }

    impl Arch {
        fn at(&self, cpu: usize) -> &Self {
            self.cpu.set(cpu);
            self
        }
        fn pages(&self, cpu: usize) -> usize {
            self.log
                .borrow()
                .iter()
                .filter(|e| matches!(e, Ev::Page { cpu: c, .. } if *c == cpu))
                .count()
        }
        fn alls(&self, cpu: usize) -> usize {
            self.log
                .borrow()
                .iter()
                .filter(|e| **e == Ev::All { cpu })
                .count()
        }
        fn ipis(&self) -> Vec<(usize, usize)> {
            self.log
                .borrow()
                .iter()
                .filter_map(|e| match *e {
                    Ev::Ipi { from, to } => Some((from, to)),
                    _ => None,
                })
                .collect()
        }
    }

    impl TlbArch for Arch {
        fn flush_page(&self, va: u64) {
            self.log.borrow_mut().push(Ev::Page {
                cpu: self.cpu.get(),
                va,
            });
        }
        fn flush_all(&self) {
            self.log.borrow_mut().push(Ev::All {
                cpu: self.cpu.get(),
            });
        }
        fn send_ipi(&self, to: usize) {
            self.log.borrow_mut().push(Ev::Ipi {
                from: self.cpu.get(),
                to,
            });
        }
        fn is_halted(&self, cpu: usize) -> bool {
            self.halted.get() & (1 << cpu) != 0
        }
        fn cycles(&self) -> u64 {
            self.now.get()
        }
    }

    fn sd<const N: usize>() -> Box<Shootdown<N>> {
        Box::new(Shootdown::new(DEFAULT_FLUSH_CEILING))
    }

    const VA: u64 = 0xffff_c000_0000_0000;

    fn batch_of(pages: usize, mask: CpuMask) -> FlushBatch<256> {
        let mut b = FlushBatch::new();
        for i in 0..pages {
            b.add_page(VA + (i * PAGE_SIZE) as u64, mask);
            b.add_free(Pfn(100 + i as u64)).unwrap();
        }
        b.add_va_range(VA, pages).unwrap();
        b
    }

    #[test]
    fn cpumask_basics() {
        let mut m = CpuMask::EMPTY;
        assert!(m.is_empty());
        m.set(3);
        m.set(63);
        m.set(0);
        assert!(m.contains(3) && m.contains(63) && !m.contains(4));
        assert_eq!(m.iter().collect::<Vec<_>>(), [0, 3, 63]);
        m.remove(3);
        m.remove(5);
        assert_eq!(m.count(), 2);
        assert_eq!(CpuMask::only(5), CpuMask(32));
        assert_eq!(CpuMask::first(64), CpuMask(u64::MAX));
        assert_eq!(CpuMask::first(3), CpuMask(7));
        assert_eq!(CpuMask::first(0), CpuMask::EMPTY);
    }

    #[test]
    fn below_ceiling_invlpg_each_page_on_each_target() {
        let s = sd::<3>();
        let a = Arch::default();
        let mut b = batch_of(DEFAULT_FLUSH_CEILING, CpuMask::first(3));
        let mut d = s.dispatch(0, &mut b, a.at(0));
        assert!(a.ipis().is_empty(), "busy targets get no IPI at dispatch");
        assert_eq!(a.pages(0), 33, "local flush at dispatch");
        assert!(s.has_pending(1) && s.has_pending(2));
        assert!(!s.poll(0, &mut d, a.at(0)));
        assert_eq!(s.service(1, a.at(1)), 1);
        assert!(!s.poll(0, &mut d, a.at(0)));
        assert_eq!(s.service(2, a.at(2)), 1);
        assert_eq!(s.service(2, a.at(2)), 0, "taken once");
        assert!(s.poll(0, &mut d, a.at(0)));
        for cpu in 0..3 {
            assert_eq!(a.pages(cpu), 33, "cpu {cpu}");
            assert_eq!(a.alls(cpu), 0, "cpu {cpu}");
        }
        // The pages are the batch's, in order.
        let got: Vec<u64> = a
            .log
            .borrow()
            .iter()
            .filter_map(|e| match *e {
                Ev::Page { cpu: 2, va } => Some(va),
                _ => None,
            })
            .collect();
        let want: Vec<u64> = (0..33).map(|i| VA + (i * PAGE_SIZE) as u64).collect();
        assert_eq!(got, want);
        assert_eq!(s.stats(0).pending_pages, 33);
        let (mut freed, mut released) = (Vec::new(), Vec::new());
        s.complete(
            0,
            d,
            &mut b,
            |p| freed.push(p),
            |va, n| released.push((va, n)),
        );
        assert_eq!(freed, (100..133).map(Pfn).collect::<Vec<_>>());
        assert_eq!(released, [(VA, 33)]);
        assert!(b.is_empty() && !b.is_in_flight());
        let st = s.stats(0);
        assert_eq!(
            (
                st.batches,
                st.pages_unmapped,
                st.poll_requests,
                st.ipis_sent
            ),
            (1, 33, 2, 0)
        );
        assert_eq!(
            (st.invlpg_pages, st.full_flushes, st.pending_pages),
            (33, 0, 0)
        );
        assert_eq!(s.stats(1).flushes_received, 1);
        assert_eq!(s.stats(1).invlpg_pages, 33);
    }

    #[test]
    fn above_ceiling_one_full_flush() {
        for pages in [DEFAULT_FLUSH_CEILING + 1, FLUSH_CEILING_MAX, 1000] {
            let s = sd::<2>();
            let a = Arch::default();
            let mut b = FlushBatch::<8>::new();
            b.add_pages(VA, pages, CpuMask::first(2));
            assert_eq!(b.pages(), pages);
            let mut d = s.dispatch(0, &mut b, a.at(0));
            s.service(1, a.at(1));
            assert!(s.poll(0, &mut d, a.at(0)));
            for cpu in 0..2 {
                assert_eq!(
                    (a.pages(cpu), a.alls(cpu)),
                    (0, 1),
                    "{pages} pages, cpu {cpu}"
                );
                assert_eq!(s.stats(cpu).full_flushes, 1);
            }
            s.complete(0, d, &mut b, |_| {}, |_, _| {});
        }
    }

    #[test]
    fn ceiling_is_configurable() {
        let s = sd::<2>();
        assert_eq!(s.ceiling(), 33);
        s.set_ceiling(2);
        let a = Arch::default();
        for (pages, want) in [(2, (2, 0)), (3, (0, 1))] {
            let mut b = FlushBatch::<8>::new();
            b.add_pages(VA, pages, CpuMask::only(1));
            let mut d = s.dispatch(0, &mut b, a.at(0));
            s.service(1, a.at(1));
            assert!(s.poll(0, &mut d, a.at(0)));
            s.complete(0, d, &mut b, |_| {}, |_, _| {});
            assert_eq!((a.pages(1), a.alls(1)), want, "{pages} pages");
            a.log.borrow_mut().clear();
        }
    }

    #[test]
    #[should_panic(expected = "tlb ceiling > FLUSH_CEILING_MAX")]
    fn ceiling_above_max_panics() {
        sd::<2>().set_ceiling(FLUSH_CEILING_MAX + 1);
    }

    #[test]
    fn self_only_mask_is_done_at_once_without_ipi() {
        let s = sd::<4>();
        let a = Arch::default();
        a.halted.set(0b1110); // even halted CPUs are not bothered
        let mut b = batch_of(3, CpuMask::only(2));
        let d = s.dispatch(2, &mut b, a.at(2));
        assert!(d.is_done());
        assert_eq!(d.generation(), 0);
        assert!(a.ipis().is_empty());
        assert_eq!(a.pages(2), 3);
        assert!((0..4).all(|c| !s.has_pending(c)));
        let mut n = 0;
        s.complete(2, d, &mut b, |_| n += 1, |_, _| {});
        assert_eq!(n, 3);
        let st = s.stats(2);
        assert_eq!(
            (st.batches, st.poll_requests, st.ipis_sent, st.wait_cycles),
            (1, 0, 0, 0)
        );
        // Frames only, no page: nothing to flush anywhere, complete at once.
        b.add_free(Pfn(7)).unwrap();
        let d = s.dispatch(2, &mut b, a.at(2));
        assert!(d.is_done());
        s.complete(2, d, &mut b, |p| assert_eq!(p, Pfn(7)), |_, _| {});
        assert_eq!(a.log.borrow().len(), 3);
    }

    #[test]
    fn halted_target_gets_ipi_at_dispatch_busy_one_does_not() {
        let s = sd::<3>();
        let a = Arch::default();
        a.halted.set(0b100);
        let mut b = batch_of(1, CpuMask::first(3));
        let mut d = s.dispatch(0, &mut b, a.at(0));
        assert_eq!(a.ipis(), [(0, 2)]);
        // Past the deadline only the busy target (1) gets one; 2 already had its IPI.
        a.now.set(DEFAULT_IPI_DEADLINE_CYCLES);
        assert!(!s.poll(0, &mut d, a.at(0)));
        assert_eq!(a.ipis(), [(0, 2), (0, 1)]);
        s.service(1, a.at(1));
        s.service(2, a.at(2));
        assert!(s.poll(0, &mut d, a.at(0)));
        assert_eq!(s.stats(0).ipis_sent, 2);
        s.complete(0, d, &mut b, |_| {}, |_, _| {});
    }

    #[test]
    fn busy_target_ipi_only_past_deadline_and_once() {
        let s = sd::<2>();
        s.set_ipi_deadline_cycles(1000);
        let a = Arch::default();
        a.now.set(5_000);
        let mut b = batch_of(2, CpuMask::first(2));
        let mut d = s.dispatch(0, &mut b, a.at(0));
        for t in [5_000, 5_500, 5_999] {
            a.now.set(t);
            assert!(!s.poll(0, &mut d, a.at(0)));
            assert!(a.ipis().is_empty(), "no IPI before the deadline (t = {t})");
        }
        a.now.set(6_000);
        assert!(!s.poll(0, &mut d, a.at(0)));
        assert_eq!(a.ipis(), [(0, 1)]);
        for t in [7_000, 100_000] {
            a.now.set(t);
            assert!(!s.poll(0, &mut d, a.at(0)));
        }
        assert_eq!(a.ipis(), [(0, 1)], "one IPI, not one per poll");
        // The IPI handler services.
        assert_eq!(s.service(1, a.at(1)), 1);
        a.now.set(100_100);
        assert!(s.poll(0, &mut d, a.at(0)));
        assert_eq!(s.stats(0).wait_cycles, 95_100);
        s.complete(0, d, &mut b, |_| {}, |_, _| {});
    }

    #[test]
    fn target_that_answers_in_time_gets_no_ipi() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(2, CpuMask::only(1));
        let mut d = s.dispatch(0, &mut b, a.at(0));
        assert_eq!(a.pages(0), 0, "initiator not in the mask: no local flush");
        s.service(1, a.at(1));
        a.now.set(u64::MAX / 2);
        assert!(s.poll(0, &mut d, a.at(0)));
        assert!(a.ipis().is_empty());
        s.complete(0, d, &mut b, |_| {}, |_, _| {});
    }

    #[test]
    fn two_initiators_targeting_each_other_both_complete_by_polling() {
        let s = sd::<2>();
        s.set_ipi_deadline_cycles(u64::MAX);
        let a = Arch::default();
        let mut b0 = batch_of(2, CpuMask::first(2));
        let mut b1 = batch_of(40, CpuMask::first(2));
        let mut d0 = s.dispatch(0, &mut b0, a.at(0));
        let mut d1 = s.dispatch(1, &mut b1, a.at(1));
        // Each only polls its own batch; the polls service the other's request.
        let mut done = [false; 2];
        for _ in 0..3 {
            done[0] |= s.poll(0, &mut d0, a.at(0));
            done[1] |= s.poll(1, &mut d1, a.at(1));
        }
        assert_eq!(done, [true, true]);
        // CPU 0: its own 2 pages + CPU 1's full flush; CPU 1: its full flush + CPU 0's 2 pages.
        assert_eq!((a.pages(0), a.alls(0)), (2, 1));
        assert_eq!((a.pages(1), a.alls(1)), (2, 1));
        s.complete(0, d0, &mut b0, |_| {}, |_, _| {});
        s.complete(1, d1, &mut b1, |_| {}, |_, _| {});
    }

    #[test]
    fn generations_advance_and_slot_is_reused() {
        let s = sd::<2>();
        let a = Arch::default();
        for g in 1..=5u64 {
            let mut b = batch_of(g as usize, CpuMask::first(2));
            let mut d = s.dispatch(0, &mut b, a.at(0));
            assert_eq!(d.generation(), g);
            assert_eq!(d.waiting(), CpuMask::only(1));
            s.service(1, a.at(1));
            assert!(s.poll(0, &mut d, a.at(0)));
            s.complete(0, d, &mut b, |_| {}, |_, _| {});
        }
        assert_eq!(a.pages(1), 1 + 2 + 3 + 4 + 5);
    }

    #[test]
    fn skip_remote_flush_acks_without_flushing() {
        let s = sd::<2>();
        s.skip_remote_flush
            .store(true, core::sync::atomic::Ordering::Relaxed);
        let a = Arch::default();
        let mut b = batch_of(4, CpuMask::first(2));
        let mut d = s.dispatch(0, &mut b, a.at(0));
        s.service(1, a.at(1));
        assert!(s.poll(0, &mut d, a.at(0)));
        assert_eq!((a.pages(1), a.alls(1)), (0, 0));
        assert_eq!(a.pages(0), 4, "the initiator's own flush is not skipped");
        s.complete(0, d, &mut b, |_| {}, |_, _| {});
    }

    #[test]
    fn batch_capacity_is_reported() {
        let mut b = FlushBatch::<2>::new();
        assert_eq!(b.add_free(Pfn(1)), Ok(()));
        assert!(!b.is_full());
        assert_eq!(b.add_free(Pfn(2)), Ok(()));
        assert!(b.is_full());
        assert_eq!(b.add_free(Pfn(3)), Err(BatchFull));
        assert_eq!(b.frames(), [Pfn(1), Pfn(2)]);
        let mut r = FlushBatch::<2>::new();
        for i in 0..BATCH_RANGES {
            assert_eq!(r.add_va_range(i as u64, 1), Ok(()));
        }
        assert!(r.is_full());
        assert_eq!(r.add_va_range(0, 1), Err(BatchFull));
        assert_eq!(r.va_ranges().len(), BATCH_RANGES);
    }

    #[test]
    #[should_panic(expected = "previous batch is in flight")]
    fn second_remote_dispatch_while_in_flight_panics() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(1, CpuMask::first(2));
        let mut c = batch_of(1, CpuMask::first(2));
        let _d = s.dispatch(0, &mut b, a.at(0));
        let _e = s.dispatch(0, &mut c, a.at(0));
    }

    #[test]
    #[should_panic(expected = "complete before every target acknowledged")]
    fn complete_before_ack_panics() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(1, CpuMask::first(2));
        let d = s.dispatch(0, &mut b, a.at(0));
        s.complete(0, d, &mut b, |_| {}, |_, _| {});
    }

    #[test]
    fn complete_in_pieces_frees_every_frame_once_after_the_flush() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(10, CpuMask::first(2));
        let mut d = s.dispatch(0, &mut b, a.at(0));
        assert!(!s.poll(0, &mut d, a.at(0)));
        s.service(1, a.at(1));
        assert!(s.poll(0, &mut d, a.at(0)));
        assert_eq!(s.stats(0).pending_pages, 10);
        let mut freed = Vec::new();
        assert_eq!(s.complete_some(0, &d, &mut b, 4, |f| freed.push(f.0)), 6);
        assert_eq!(s.complete_some(0, &d, &mut b, 4, |f| freed.push(f.0)), 2);
        assert_eq!(s.stats(0).pending_pages, 2);
        assert_eq!(s.complete_some(0, &d, &mut b, 4, |f| freed.push(f.0)), 0);
        let mut ranges = Vec::new();
        s.complete(
            0,
            d,
            &mut b,
            |f| freed.push(f.0),
            |va, n| ranges.push((va, n)),
        );
        freed.sort_unstable();
        assert_eq!(freed, (100..110).collect::<Vec<_>>());
        assert_eq!(ranges, [(VA, 10)]);
        assert_eq!(s.stats(0).pending_pages, 0);
        assert!(b.is_empty() && !b.is_in_flight());
    }

    #[test]
    #[should_panic(expected = "complete before every target acknowledged")]
    fn complete_some_before_ack_panics() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(1, CpuMask::first(2));
        let d = s.dispatch(0, &mut b, a.at(0));
        s.complete_some(0, &d, &mut b, 1, |_| {});
    }

    #[test]
    #[should_panic(expected = "adding to a batch in flight")]
    fn adding_to_batch_in_flight_panics() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(1, CpuMask::first(2));
        let _d = s.dispatch(0, &mut b, a.at(0));
        b.add_page(VA, CpuMask::only(0));
    }

    #[test]
    #[should_panic(expected = "mask names a CPU >= N")]
    fn mask_beyond_n_panics() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(1, CpuMask::only(2));
        let _d = s.dispatch(0, &mut b, a.at(0));
    }

    #[test]
    fn pending_before_halt_sees_posted_request() {
        let s = sd::<2>();
        let a = Arch::default();
        let mut b = batch_of(1, CpuMask::only(1));
        assert!(!s.pending_before_halt(1));
        let _d = s.dispatch(0, &mut b, a.at(0));
        assert!(s.pending_before_halt(1));
    }

    /// Real threads: four CPUs, each flushing batches to all others (CPU 0 with
    /// [`Shootdown::flush`], the others with a yielding dispatch/poll/complete loop) while their
    /// polls service the others. Each CPU counts the pages it invalidated; at
    /// the end every CPU has flushed every other CPU's pages plus its own.
    #[test]
    fn four_threads_flush_each_other() {
        use std::sync::atomic::AtomicU64 as A64;
        const CPUS: usize = 4;
        const ROUNDS: u64 = 500;
        static S: Shootdown<CPUS> = Shootdown::new(DEFAULT_FLUSH_CEILING);
        static PAGES: [A64; CPUS] = [const { A64::new(0) }; CPUS];
        static DONE: A64 = A64::new(0);
        struct T(usize, std::time::Instant);
        impl TlbArch for T {
            fn flush_page(&self, _: u64) {
                PAGES[self.0].fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            }
            fn flush_all(&self) {
                unreachable!()
            }
            fn send_ipi(&self, _: usize) {}
            fn is_halted(&self, _: usize) -> bool {
                false
            }
            fn cycles(&self) -> u64 {
                self.1.elapsed().as_nanos() as u64
            }
        }
        let hs: Vec<_> = (0..CPUS)
            .map(|cpu| {
                std::thread::spawn(move || {
                    let arch = T(cpu, std::time::Instant::now());
                    let mut b = FlushBatch::<4>::new();
                    let mut freed = 0u64;
                    for r in 0..ROUNDS {
                        b.add_pages(VA, 1 + (r % 3) as usize, CpuMask::first(CPUS));
                        b.add_free(Pfn(r)).unwrap();
                        if cpu == 0 {
                            S.flush(cpu, &mut b, &arch, |_| freed += 1, |_, _| {});
                        } else {
                            // Yield while waiting: four threads share two host cores here.
                            let mut d = S.dispatch(cpu, &mut b, &arch);
                            while !S.poll(cpu, &mut d, &arch) {
                                std::thread::yield_now();
                            }
                            S.complete(cpu, d, &mut b, |_| freed += 1, |_, _| {});
                        }
                    }
                    DONE.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
                    // Keep answering until every CPU is done.
                    while DONE.load(core::sync::atomic::Ordering::SeqCst) < CPUS as u64 {
                        S.service(cpu, &arch);
                        std::thread::yield_now();
                    }
                    freed
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), ROUNDS);
        }
        let per_cpu: u64 = (0..ROUNDS).map(|r| 1 + r % 3).sum();
        for (cpu, pages) in PAGES.iter().enumerate() {
            assert_eq!(
                pages.load(core::sync::atomic::Ordering::Relaxed),
                per_cpu * CPUS as u64,
                "cpu {cpu}"
            );
            let st = S.stats(cpu);
            assert_eq!(st.flushes_received, ROUNDS * (CPUS as u64 - 1));
            assert_eq!(st.pending_pages, 0);
        }
    }
}

/// Loom models (run with `--cfg loom`, command in the module docs). Each CPU is a thread with
/// a model TLB of loom `UnsafeCell`s that only its own thread writes (its flushes); an
/// initiator reads a target's cell after `poll` returned `true`, so loom reports a race if the
/// acknowledgement does not order the target's flush before the initiator's check, and the
/// value says whether the flush happened. The request slot's payload is a loom `UnsafeCell`
/// too: a slot rewritten while a target reads it is reported.
#[cfg(loom)]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicBool as LBool;
    use loom::sync::Arc;
    use loom::thread;

    const VA0: u64 = 0x1000;
    const VA1: u64 = 0x2000;

    /// Model TLBs: `tlb[cpu][page]` is `true` while `cpu` caches page `page` (VA0, VA1).
    struct World {
        sd: Shootdown<2>,
        tlb: [[UnsafeCell<bool>; 2]; 2],
        halted: [LBool; 2],
        ipi: [LBool; 2],
    }

    fn world() -> Arc<World> {
        let sd = Shootdown::new(DEFAULT_FLUSH_CEILING);
        sd.set_ipi_deadline_cycles(u64::MAX);
        Arc::new(World {
            sd,
            tlb: core::array::from_fn(|_| core::array::from_fn(|_| UnsafeCell::new(true))),
            halted: core::array::from_fn(|_| LBool::new(false)),
            ipi: core::array::from_fn(|_| LBool::new(false)),
        })
    }

    struct Cpu<'a>(usize, &'a World);

    impl TlbArch for Cpu<'_> {
        fn flush_page(&self, va: u64) {
            let page = (va / 0x1000 - 1) as usize;
            // SAFETY: a CPU's model TLB is written only by its own thread (this one); loom
            // checks every other access is ordered with it.
            self.1.tlb[self.0][page].with_mut(|t| unsafe { *t = false });
        }
        fn flush_all(&self) {
            for c in &self.1.tlb[self.0] {
                // SAFETY: as in `flush_page`.
                c.with_mut(|t| unsafe { *t = false });
            }
        }
        fn send_ipi(&self, cpu: usize) {
            self.1.ipi[cpu].store(true, SeqCst);
        }
        fn is_halted(&self, cpu: usize) -> bool {
            self.1.halted[cpu].load(SeqCst)
        }
        fn cycles(&self) -> u64 {
            0
        }
    }

    fn cached(w: &World, cpu: usize, page: usize) -> bool {
        // SAFETY: a read; loom reports it if it is not ordered after the owner's writes.
        w.tlb[cpu][page].with(|t| unsafe { *t })
    }

    /// CPU `me` flushes `va` on both CPUs, waiting by polling (which services the other).
    fn flush_both(w: &World, me: usize, va: u64) -> usize {
        let arch = Cpu(me, w);
        let mut b = FlushBatch::<1>::new();
        b.add_page(va, CpuMask::first(2));
        b.add_free(Pfn(va >> 12)).unwrap();
        let mut freed = 0;
        let mut d = w.sd.dispatch(me, &mut b, &arch);
        while !w.sd.poll(me, &mut d, &arch) {
            thread::yield_now();
        }
        w.sd.complete(me, d, &mut b, |_| freed += 1, |_, _| {});
        freed
    }

    /// The rest of `me`'s poll loop: service until `me` has taken `n` requests in all (those
    /// taken inside its own `poll` included).
    fn serve(w: &World, me: usize, n: u64) {
        let arch = Cpu(me, w);
        loop {
            w.sd.service(me, &arch);
            if w.sd.stats(me).flushes_received >= n {
                return;
            }
            thread::yield_now();
        }
    }

    /// One initiator (CPU 0) dispatches and polls, the target (CPU 1) services in its loop:
    /// when `poll` returns `true` the target's entry is gone (and the read is ordered).
    #[test]
    fn loom_initiator_and_polling_target() {
        loom::model(|| {
            let w = world();
            let w1 = w.clone();
            let t = thread::spawn(move || serve(&w1, 1, 1));
            assert_eq!(flush_both(&w, 0, VA0), 1);
            assert!(!cached(&w, 1, 0), "target still caches the page after poll");
            assert!(!cached(&w, 0, 0), "local flush");
            assert!(cached(&w, 1, 1), "only the batch's page");
            t.join().unwrap();
        });
    }

    /// Two batches in a row from CPU 0 reuse its slot while CPU 1 services both: the second
    /// write of the payload never races the first read (loom `UnsafeCell`), and each flush
    /// lands before its poll returns.
    #[test]
    fn loom_slot_reused_across_generations() {
        loom::model(|| {
            let w = world();
            let w1 = w.clone();
            let t = thread::spawn(move || serve(&w1, 1, 2));
            flush_both(&w, 0, VA0);
            assert!(!cached(&w, 1, 0));
            flush_both(&w, 0, VA1);
            assert!(!cached(&w, 1, 1));
            t.join().unwrap();
        });
    }

    /// Two initiators target each other and only poll: both complete (no deadlock), and each
    /// sees the other's flush of its page.
    #[test]
    fn loom_two_initiators_target_each_other() {
        loom::model(|| {
            let w = world();
            let w1 = w.clone();
            let t = thread::spawn(move || {
                flush_both(&w1, 1, VA1);
                assert!(!cached(&w1, 0, 1), "CPU 0 still caches CPU 1's page");
                // Keep looping: CPU 0 may still wait for this CPU.
                serve(&w1, 1, 1);
            });
            flush_both(&w, 0, VA0);
            assert!(!cached(&w, 1, 0), "CPU 1 still caches CPU 0's page");
            serve(&w, 0, 1);
            t.join().unwrap();
        });
    }

    /// The idle protocol: the target marks itself halted (`SeqCst`), calls
    /// `pending_before_halt`, and "halts" (waits for an IPI) only if nothing is pending. With the
    /// deadline IPI off, a lost wake-up would leave both threads spinning (loom fails the model):
    /// either the target sees the request or the initiator sees "halted" and sends the IPI.
    #[test]
    fn loom_halted_target_is_never_missed() {
        loom::model(|| {
            let w = world();
            let w1 = w.clone();
            let t = thread::spawn(move || {
                w1.halted[1].store(true, SeqCst);
                if !w1.sd.pending_before_halt(1) {
                    while !w1.ipi[1].load(SeqCst) {
                        thread::yield_now();
                    }
                }
                w1.halted[1].store(false, SeqCst);
                // The IPI handler (or the loop after waking) services.
                serve(&w1, 1, 1);
            });
            flush_both(&w, 0, VA0);
            assert!(!cached(&w, 1, 0));
            t.join().unwrap();
        });
    }
}
