use super::*;
use crate::Pfn;
use std::vec::Vec;

/// A hand-off record (the kind of non-`Pfn` payload the rings carry besides page numbers):
/// page, length, port, with padding inside.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
struct Rec {
    pfn: Pfn,
    len: u16,
    port: u8,
}

fn rec(i: u64) -> Rec {
    Rec {
        pfn: Pfn(i),
        len: (i * 7) as u16,
        port: (i % 5) as u8,
    }
}

#[cfg(not(loom))]
mod plain {
    use super::*;
    use std::boxed::Box;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn ring<T: Copy, const N: usize>() -> &'static MpscRing<T, N> {
        Box::leak(Box::new(MpscRing::new()))
    }

    #[test]
    fn push_pop_in_order_and_full() {
        const N: usize = 256;
        let r = ring::<Pfn, N>();
        assert!(r.is_empty());
        assert_eq!(MpscRing::<Pfn, N>::CAPACITY, N);
        for i in 1..=N as u64 {
            assert_eq!(r.push(Pfn(i)), Ok(()));
        }
        assert_eq!(r.len(), N);
        assert_eq!(r.push(Pfn(999)), Err(Pfn(999)), "full");
        assert_eq!(r.push_bulk(&[Pfn(998)]), 0, "full");
        let mut out = [Pfn(0); 10];
        assert_eq!(r.pop_batch(&mut out), 10);
        assert_eq!(out[0], Pfn(1));
        assert_eq!(out[9], Pfn(10));
        assert_eq!(r.len(), N - 10);
        // Room for exactly 10 again.
        let more: Vec<Pfn> = (1000..1020).map(Pfn).collect();
        assert_eq!(r.push_bulk(&more), 10);
        assert_eq!(r.push(Pfn(5000)), Err(Pfn(5000)));
        let mut all = std::vec![Pfn(0); N + 5];
        assert_eq!(r.pop_batch(&mut all), N);
        let expect: Vec<Pfn> = (11..=N as u64)
            .map(Pfn)
            .chain((1000..1010).map(Pfn))
            .collect();
        assert_eq!(&all[..N], &expect[..]);
        assert_eq!(r.pop_batch(&mut all), 0);
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn empty_slices_do_nothing() {
        let r = ring::<Pfn, 4>();
        assert_eq!(r.push_bulk(&[]), 0);
        r.push(Pfn(1)).unwrap();
        assert_eq!(r.pop_batch(&mut []), 0);
        assert_eq!(r.len(), 1);
        assert_eq!(r.pop(), Some(Pfn(1)));
    }

    /// Many laps round a small ring, single and bulk pushes, single and batch pops: FIFO.
    #[test]
    fn wraps_many_laps() {
        let r = ring::<Pfn, 8>();
        let mut next = 1u64;
        let mut expect = 1u64;
        let mut out = [Pfn(0); 7];
        for lap in 0..5000 {
            let k = 1 + lap % 13;
            let batch: Vec<Pfn> = (next..next + k as u64).map(Pfn).collect();
            let pushed = if lap % 2 == 0 {
                r.push_bulk(&batch)
            } else {
                batch.iter().take_while(|&&p| r.push(p).is_ok()).count()
            };
            next += pushed as u64;
            let n = if lap % 3 == 0 {
                usize::from(r.pop().map(|p| out[0] = p).is_some())
            } else {
                r.pop_batch(&mut out)
            };
            for p in &out[..n] {
                assert_eq!(p.0, expect);
                expect += 1;
            }
        }
        let mut rest = [Pfn(0); 8];
        let n = r.pop_batch(&mut rest);
        for p in &rest[..n] {
            assert_eq!(p.0, expect);
            expect += 1;
        }
        assert_eq!(expect, next);
        assert!(r.is_empty());
    }

    /// A record payload (not a page number): FIFO, full hands the record back, laps.
    #[test]
    fn records_fifo_and_full() {
        let r = ring::<Rec, 4>();
        for i in 0..4 {
            r.push(rec(i)).unwrap();
        }
        assert_eq!(
            r.push(rec(9)),
            Err(rec(9)),
            "full: the caller keeps the record"
        );
        for lap in 0..3 {
            for i in 0..4 {
                assert_eq!(r.pop(), Some(rec(lap * 4 + i)));
                r.push(rec(lap * 4 + i + 4)).unwrap();
            }
        }
        let mut out = [rec(0); 8];
        assert_eq!(r.pop_batch(&mut out), 4);
        assert_eq!(&out[..4], &[rec(12), rec(13), rec(14), rec(15)]);
        assert_eq!(r.pop(), None);
        // A zero-sized payload works too (a ring of "events").
        let e = ring::<(), 2>();
        assert_eq!(
            (e.push(()), e.push(()), e.push(())),
            (Ok(()), Ok(()), Err(()))
        );
        assert_eq!((e.pop(), e.pop(), e.pop()), (Some(()), Some(()), None));
    }

    #[test]
    fn peek_keeps_order_and_contents() {
        let r = ring::<Rec, 8>();
        // Start mid-lap so the values wrap round the array end.
        for i in 0..6 {
            r.push(rec(i)).unwrap();
        }
        for _ in 0..6 {
            r.pop().unwrap();
        }
        for i in 10..15 {
            r.push(rec(i)).unwrap();
        }
        let want: Vec<Rec> = (10..15).map(rec).collect();
        assert_eq!(r.peek(), want);
        assert_eq!(r.peek(), want);
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn a_const_static_ring() {
        static R: MpscRing<Rec, 16> = MpscRing::new();
        R.push(rec(3)).unwrap();
        assert_eq!(R.pop(), Some(rec(3)));
        let d: MpscRing<u32, 2> = MpscRing::default();
        assert!(d.is_empty());
    }

    /// Three producers (single and bulk pushes) race one consumer: every value arrives exactly
    /// once, per-producer order is kept, full is reported, nothing is invented.
    #[test]
    fn threads_race_one_consumer() {
        const PER: u64 = 20_000;
        let r: &'static MpscRing<Pfn, 256> = ring();
        let rejected = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let producers: Vec<_> = (0..3u64)
            .map(|t| {
                let rejected = rejected.clone();
                std::thread::spawn(move || {
                    let base = (t + 1) << 32;
                    let mut i = 0;
                    while i < PER {
                        if t == 2 {
                            let k = (PER - i).min(8);
                            let b: Vec<Pfn> = (i..i + k).map(|j| Pfn(base + j)).collect();
                            let n = r.push_bulk(&b) as u64;
                            if n == 0 {
                                rejected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                std::thread::yield_now();
                            }
                            i += n;
                        } else if r.push(Pfn(base + i)).is_ok() {
                            i += 1;
                        } else {
                            rejected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = HashSet::new();
        let mut last = [None::<u64>; 3];
        let mut out = [Pfn(0); 32];
        while seen.len() < (3 * PER) as usize {
            let n = r.pop_batch(&mut out);
            for p in &out[..n] {
                let t = (p.0 >> 32) as usize - 1;
                let j = p.0 & 0xffff_ffff;
                assert!(
                    last[t].is_none_or(|l| j == l + 1),
                    "order within a producer"
                );
                last[t] = Some(j);
                assert!(seen.insert(p.0), "value delivered twice");
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(r.is_empty());
    }

    /// Records through a small ring under contention: none torn (each field agrees with the
    /// others), none lost or doubled.
    #[test]
    fn threads_records_not_torn() {
        const PER: u64 = 20_000;
        let r: &'static MpscRing<Rec, 8> = ring();
        let producers: Vec<_> = (0..2u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let v = rec(t * PER + i);
                        while r.push(v).is_err() {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = std::vec![false; (2 * PER) as usize];
        let mut got = 0;
        let mut out = [rec(0); 4];
        while got < 2 * PER {
            let n = r.pop_batch(&mut out);
            for v in &out[..n] {
                assert_eq!(*v, rec(v.pfn.0), "torn record");
                assert!(!std::mem::replace(&mut seen[v.pfn.0 as usize], true));
                got += 1;
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(r.pop(), None);
    }

    /// Two consumers (a misuse: the ring is built for one) still get each value exactly once.
    #[test]
    fn two_consumers_split_without_duplicates() {
        const TOTAL: u64 = 40_000;
        let r: &'static MpscRing<u64, 16> = ring();
        let producer = std::thread::spawn(move || {
            for i in 0..TOTAL {
                while r.push(i).is_err() {
                    std::thread::yield_now();
                }
            }
        });
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|c| {
                let done = done.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    let mut out = [0u64; 3];
                    while done.load(std::sync::atomic::Ordering::Relaxed) < TOTAL {
                        let n = if c == 0 {
                            r.pop_batch(&mut out)
                        } else {
                            usize::from(r.pop().map(|v| out[0] = v).is_some())
                        };
                        mine.extend_from_slice(&out[..n]);
                        done.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                    mine
                })
            })
            .collect();
        producer.join().unwrap();
        let mut all: Vec<u64> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        assert_eq!(all.len() as u64, TOTAL);
        all.sort_unstable();
        assert!(all.iter().copied().eq(0..TOTAL), "lost or doubled");
    }
}

/// Loom models (run with `--cfg loom`, see the module docs).
///
/// loom's exploration does not reach every order of a load before another thread's store on
/// its own (the page-level model in `page_pool::recycle` notes the same): the `yield_now`
/// calls make it also run the other threads first, and each model counts the outcomes that
/// need a particular order and asserts that they were explored.
#[cfg(loom)]
mod loom_models {
    use super::*;
    use std::boxed::Box;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Two producers race for the slots of a 2-slot ring while the consumer drains: each value
    /// comes out once or is reported full to its producer; a bulk push keeps its order.
    #[test]
    fn loom_two_producers_one_consumer() {
        static ALL_FIT: AtomicUsize = AtomicUsize::new(0);
        static SOME_FULL: AtomicUsize = AtomicUsize::new(0);
        loom::model(|| {
            let ring: &'static MpscRing<Pfn, 2> = Box::leak(Box::new(MpscRing::new()));
            let a = loom::thread::spawn(move || ring.push(Pfn(1)).is_ok() as usize);
            let b = loom::thread::spawn(move || {
                loom::thread::yield_now();
                ring.push_bulk(&[Pfn(2), Pfn(3)])
            });
            let mut got = Vec::new();
            let mut out = [Pfn(0); 2];
            loom::thread::yield_now();
            let n = ring.pop_batch(&mut out);
            got.extend_from_slice(&out[..n]);
            let pushed = a.join().unwrap() + b.join().unwrap();
            loop {
                let n = ring.pop_batch(&mut out);
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&out[..n]);
            }
            assert_eq!(got.len(), pushed);
            got.sort();
            got.dedup();
            assert_eq!(got.len(), pushed, "a value came out twice");
            if got.contains(&Pfn(3)) {
                assert!(got.contains(&Pfn(2)), "bulk order");
            }
            match pushed {
                3 => ALL_FIT.fetch_add(1, Relaxed),
                _ => SOME_FULL.fetch_add(1, Relaxed),
            };
        });
        std::println!(
            "loom: {} executions where all 3 fit (early drain), {} with a full ring",
            ALL_FIT.load(Relaxed),
            SOME_FULL.load(Relaxed)
        );
        assert!(ALL_FIT.load(Relaxed) > 0 && SOME_FULL.load(Relaxed) > 0);
    }

    /// Records reuse the slots of a 2-slot ring across laps while the consumer reads them: loom's
    /// `UnsafeCell` reports any write that is not ordered after the previous lap's read, and the
    /// records come out whole and in order.
    #[test]
    fn loom_records_reuse_slots_across_laps() {
        static REUSED: AtomicUsize = AtomicUsize::new(0);
        loom::model(|| {
            let ring: &'static MpscRing<Rec, 2> = Box::leak(Box::new(MpscRing::new()));
            let producer = loom::thread::spawn(move || {
                let mut sent = 0;
                for i in 1..=3 {
                    if ring.push(rec(i)).is_ok() {
                        sent += 1;
                    }
                    loom::thread::yield_now();
                }
                sent
            });
            let mut got = Vec::new();
            for _ in 0..2 {
                loom::thread::yield_now();
                if let Some(v) = ring.pop() {
                    got.push(v);
                }
            }
            let sent = producer.join().unwrap();
            while let Some(v) = ring.pop() {
                got.push(v);
            }
            assert_eq!(got.len(), sent);
            for w in got.windows(2) {
                assert!(w[0].pfn < w[1].pfn, "order");
            }
            for v in &got {
                assert_eq!(*v, rec(v.pfn.0), "torn record");
            }
            if sent == 3 {
                // The third record went into the slot the first one was read from.
                REUSED.fetch_add(1, Relaxed);
            }
        });
        std::println!("loom: {} executions reused a slot", REUSED.load(Relaxed));
        assert!(REUSED.load(Relaxed) > 0);
    }

    /// Two consumers (a misuse the type allows) race for what one producer pushed: each value
    /// is taken exactly once, and no slot access races (loom's `UnsafeCell`), also when the
    /// freed slots are refilled.
    #[test]
    fn loom_two_consumers_never_race() {
        static SPLIT: AtomicUsize = AtomicUsize::new(0);
        loom::model(|| {
            let ring: &'static MpscRing<u64, 2> = Box::leak(Box::new(MpscRing::new()));
            let producer = loom::thread::spawn(move || ring.push_bulk(&[1, 2]));
            let other = loom::thread::spawn(move || {
                loom::thread::yield_now();
                let mut out = [0u64; 2];
                let n = ring.pop_batch(&mut out);
                out[..n].to_vec()
            });
            loom::thread::yield_now();
            let mut got: Vec<u64> = ring.pop().into_iter().collect();
            let mine = got.len();
            let pushed = producer.join().unwrap();
            let theirs = other.join().unwrap();
            if mine > 0 && !theirs.is_empty() {
                SPLIT.fetch_add(1, Relaxed);
            }
            got.extend(theirs);
            // Then refill the slots the consumers freed, as a producer would.
            let free = 2 - ring.len();
            assert_eq!(ring.push_bulk(&[3, 4]), free);
            while let Some(v) = ring.pop() {
                if v <= 2 {
                    got.push(v);
                }
            }
            got.sort_unstable();
            assert_eq!(
                got,
                (1..=pushed as u64).collect::<Vec<_>>(),
                "lost or doubled"
            );
        });
        std::println!(
            "loom: {} executions where both consumers took a value",
            SPLIT.load(Relaxed)
        );
        assert!(SPLIT.load(Relaxed) > 0);
    }
}
