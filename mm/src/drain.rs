//! `drain_all_pages`: ask every CPU to flush its per-CPU page lists back to the buddy lists.
//!
//! # The rules
//!
//! * **Who may touch a pcp.** Only its owning CPU, from thread context (its poll loop). So a
//!   drain of CPU *n*'s lists is always *done by CPU n*: another CPU only posts a request.
//!   Nothing ever drains a pcp from an interrupt handler or an IPI (Linux moved `drain_all_pages`
//!   from IPIs to per-CPU work items because an IPI can land in the middle of list manipulation;
//!   docs/SEED-NOTES.md "Per-CPU page lists without disabling interrupts").
//! * **When drain runs.** Each CPU calls [`DrainAll::poll`] once per iteration of its own loop
//!   (one relaxed load of a flag in that CPU's own cache line when nothing is asked). When its
//!   flag is set, `poll` runs the CPU's drain (normally
//!   [`PerCpuPages::drain_local_pages`](crate::PerCpuPages::drain_local_pages) for each zone) and
//!   then clears the flag, which is the acknowledgement. Draining is rare (memory is short, a
//!   high-order allocation failed, shutdown leak check), so the requester may wait.
//! * **One drainer at a time.** [`DrainAll::drain_all_pages`] takes a try-lock; a second
//!   requester gets [`DrainError::Busy`] at once and must *not* spin on it (it would stop polling
//!   its own flag and deadlock the first): it keeps running its loop — which serves the first
//!   drain — and retries later if it still needs to.
//! * **The requester waits** until every online CPU has acknowledged, or until its `timed_out`
//!   callback says stop; then it gets [`DrainError::Timeout`] naming the first CPU that did not
//!   answer and how many did not. A late CPU still drains when it next polls (a stale request is
//!   harmless: draining is always allowed).
//! * **CPUs coming and going.** A CPU calls [`DrainAll::cpu_online`] before its loop starts
//!   (its lists are empty then) and, when it stops, drains its own lists and calls
//!   [`DrainAll::cpu_offline`]. Requests go only to online CPUs, and a CPU that goes offline
//!   while a request waits counts as answered (it drained before leaving). A request can land on
//!   a CPU just after it went offline (the loom model found this interleaving); it is never
//!   waited for, and `cpu_online` clears it.
//!
//! # Memory ordering
//!
//! The acknowledgement is a `Release` store of `false` after the drain, read with `Acquire` by
//! the requester, so everything the drain did (buddy lists, zone counters) is visible to the
//! requester when it sees the acknowledgement. `cpu_offline` publishes the final drain the same
//! way.
//!
//! # Loom model
//!
//! The handshake is checked with [loom](https://docs.rs/loom) (a requester and two CPUs, one of
//! which goes offline; and two competing requesters):
//!
//! ```text
//! LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/tmp/target-loom \
//!     cargo test -p mm --release --lib drain::
//! ```
//!
//! (about 15 s; unbounded preemptions take far longer). With the preemption bound at 3 the model
//! fails if `poll` acknowledges before it drains (checked by hand: 2 preemptions are not enough
//! to reach that interleaving).
//!
//! In that build (`cfg(all(test, loom))`) the atomics here are loom's and [`DrainAll::new`] is
//! not `const`; every other build, the kernel's included, uses `core` atomics. Only this module's
//! tests are meant to run under `--cfg loom` (hence the `drain::` filter: plain `drain` also
//! matches page_pool tests, which use real atomics).

#[cfg(not(all(test, loom)))]
use core::sync::atomic::{AtomicBool, Ordering};
#[cfg(all(test, loom))]
use loom::sync::atomic::{AtomicBool, Ordering};

use core::fmt;

/// Why [`DrainAll::drain_all_pages`] did not complete.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum DrainError {
    /// Another drain is in progress (one drainer at a time). Keep polling, retry later.
    Busy,
    /// `missing` online CPUs did not acknowledge before the timeout; `cpu` is the first of them.
    Timeout {
        /// Lowest-numbered CPU that did not answer.
        cpu: usize,
        /// How many online CPUs did not answer.
        missing: usize,
    },
}

impl fmt::Display for DrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DrainError::Busy => f.write_str("drain_all_pages: another drain is in progress"),
            DrainError::Timeout { cpu, missing } => write!(
                f,
                "drain_all_pages: CPU {cpu} did not answer ({missing} CPU(s) missing)"
            ),
        }
    }
}

/// One CPU's slot, alone in its cache line so polling it costs no sharing.
#[repr(align(64))]
struct CpuSlot {
    online: AtomicBool,
    pending: AtomicBool,
}

impl CpuSlot {
    #[cfg(not(all(test, loom)))]
    const fn new() -> CpuSlot {
        CpuSlot {
            online: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        }
    }
    #[cfg(all(test, loom))]
    fn new() -> CpuSlot {
        CpuSlot {
            online: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        }
    }
}

/// The drain request/acknowledge protocol for up to `N` CPUs (see the module docs). One per
/// system, shared by all CPUs (`static DRAIN: DrainAll<MAX_CPUS> = DrainAll::new();`).
pub struct DrainAll<const N: usize> {
    cpus: [CpuSlot; N],
    /// The one-drainer-at-a-time try-lock.
    drainer: AtomicBool,
}

/// Releases the drainer try-lock.
struct DrainerGuard<'a>(&'a AtomicBool);

impl Drop for DrainerGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<const N: usize> Default for DrainAll<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> DrainAll<N> {
    /// No CPU online, nothing pending.
    #[cfg(not(all(test, loom)))]
    pub const fn new() -> Self {
        DrainAll {
            cpus: [const { CpuSlot::new() }; N],
            drainer: AtomicBool::new(false),
        }
    }

    /// No CPU online, nothing pending.
    #[cfg(all(test, loom))]
    pub fn new() -> Self {
        DrainAll {
            cpus: core::array::from_fn(|_| CpuSlot::new()),
            drainer: AtomicBool::new(false),
        }
    }

    /// CPU `cpu` is about to start its loop (its pcp lists are empty). From now on drain requests
    /// are sent to it and waited for.
    ///
    /// # Panics
    ///
    /// If `cpu >= N`.
    pub fn cpu_online(&self, cpu: usize) {
        let s = &self.cpus[cpu];
        // A request that raced with this CPU going offline may still be set; its lists were
        // drained when it left and are empty now, so there is nothing to answer.
        s.pending.store(false, Ordering::Relaxed);
        s.online.store(true, Ordering::Release);
    }

    /// CPU `cpu` has drained its own lists and leaves its loop: no request waits for it any
    /// more. Call it from that CPU, after its last drain.
    ///
    /// # Panics
    ///
    /// If `cpu >= N`.
    pub fn cpu_offline(&self, cpu: usize) {
        let s = &self.cpus[cpu];
        s.online.store(false, Ordering::Release);
        s.pending.store(false, Ordering::Release);
    }

    /// `true` if `cpu` is online.
    pub fn is_online(&self, cpu: usize) -> bool {
        self.cpus
            .get(cpu)
            .is_some_and(|s| s.online.load(Ordering::Acquire))
    }

    /// `true` if a drain request for `cpu` has not been acknowledged yet.
    pub fn is_pending(&self, cpu: usize) -> bool {
        self.cpus
            .get(cpu)
            .is_some_and(|s| s.pending.load(Ordering::Acquire))
    }

    /// Called by CPU `cpu` from its own loop (thread context, never an interrupt handler): if a
    /// drain was requested, run `drain` — which must return every page on this CPU's pcp lists to
    /// the buddy lists — then acknowledge. Returns `true` if it drained.
    ///
    /// # Panics
    ///
    /// If `cpu >= N`.
    #[inline]
    pub fn poll(&self, cpu: usize, drain: impl FnOnce()) -> bool {
        let s = &self.cpus[cpu];
        if !s.pending.load(Ordering::Acquire) {
            return false;
        }
        drain();
        s.pending.store(false, Ordering::Release);
        true
    }

    /// `drain_all_pages`: drain the caller's own lists (`drain_local`, when the caller is CPU
    /// `me`; pass `None` and a no-op from a context that owns no pcp), ask every other online CPU
    /// to drain its lists, and wait for all acknowledgements. Thread context only.
    ///
    /// `timed_out` is called between checks of the acknowledgements (the kernel compares the TSC
    /// with a deadline; tests count calls); once it returns `true` the wait stops.
    ///
    /// # Errors
    ///
    /// [`DrainError::Busy`] if another drain is in progress (returned at once; do not spin on it,
    /// see the module docs). [`DrainError::Timeout`] naming the first CPU that did not answer.
    pub fn drain_all_pages(
        &self,
        me: Option<usize>,
        drain_local: impl FnOnce(),
        mut timed_out: impl FnMut() -> bool,
    ) -> Result<(), DrainError> {
        if self
            .drainer
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(DrainError::Busy);
        }
        let _guard = DrainerGuard(&self.drainer);
        for (i, s) in self.cpus.iter().enumerate() {
            if Some(i) != me && s.online.load(Ordering::Acquire) {
                s.pending.store(true, Ordering::Release);
            }
        }
        drain_local();
        loop {
            let mut first = None;
            let mut missing = 0;
            for (i, s) in self.cpus.iter().enumerate() {
                if Some(i) != me
                    && s.pending.load(Ordering::Acquire)
                    && s.online.load(Ordering::Acquire)
                {
                    first.get_or_insert(i);
                    missing += 1;
                }
            }
            let Some(cpu) = first else {
                return Ok(());
            };
            if timed_out() {
                return Err(DrainError::Timeout { cpu, missing });
            }
            #[cfg(all(test, loom))]
            loom::thread::yield_now();
            #[cfg(not(all(test, loom)))]
            core::hint::spin_loop();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::zone::tests::zone;
    use crate::{PerCpuPages, Pfn};
    use std::sync::atomic::AtomicUsize;
    use std::vec::Vec;

    #[test]
    fn drain_with_no_other_cpu_drains_local_only() {
        let d: DrainAll<4> = DrainAll::new();
        let z = zone(1024, 1024);
        let mut pcp = PerCpuPages::with_params(64, 8);
        let p = pcp.alloc_page(z).unwrap();
        pcp.free_page(z, p);
        d.cpu_online(0);
        assert_eq!(
            d.drain_all_pages(Some(0), || pcp.drain_local_pages(z), || panic!("waited")),
            Ok(())
        );
        assert_eq!(pcp.count(), 0);
        assert_eq!(z.free_pages(), 1024);
        assert!(!d.is_pending(0), "the requester never asks itself");
    }

    #[test]
    fn drain_timeout_names_the_silent_cpu_then_late_poll_acks() {
        let d: DrainAll<4> = DrainAll::new();
        for c in 0..4 {
            d.cpu_online(c);
        }
        d.cpu_offline(3);
        // CPU 1 answers immediately (simulated by polling inside timed_out); CPU 2 never does.
        let mut calls = 0;
        let r = d.drain_all_pages(
            Some(0),
            || {},
            || {
                calls += 1;
                d.poll(1, || {});
                calls > 5
            },
        );
        assert_eq!(r, Err(DrainError::Timeout { cpu: 2, missing: 1 }));
        assert!(!d.is_pending(1) && d.is_pending(2) && !d.is_pending(3));
        assert_eq!(
            std::format!("{}", r.unwrap_err()),
            "drain_all_pages: CPU 2 did not answer (1 CPU(s) missing)"
        );
        // The late CPU still drains at its next poll; a second poll does nothing.
        let mut drained = 0;
        assert!(d.poll(2, || drained += 1));
        assert!(!d.poll(2, || drained += 1));
        assert_eq!(drained, 1);
    }

    #[test]
    fn drain_second_requester_is_busy() {
        let d: DrainAll<2> = DrainAll::new();
        d.cpu_online(0);
        d.cpu_online(1);
        let mut inner = None;
        let r = d.drain_all_pages(
            Some(0),
            || inner = Some(d.drain_all_pages(Some(1), || {}, || true)),
            || {
                d.poll(1, || {});
                false
            },
        );
        assert_eq!(r, Ok(()));
        assert_eq!(inner, Some(Err(DrainError::Busy)));
        // Lock released: the next drain goes through.
        assert_eq!(
            d.drain_all_pages(
                None,
                || {},
                || {
                    d.poll(0, || {});
                    d.poll(1, || {});
                    false
                }
            ),
            Ok(())
        );
    }

    /// Two real threads as CPUs, each with its own pcp on one shared zone, running a loop of
    /// alloc/free and polling; the main thread asks for a drain and checks that every page
    /// is back in the buddy lists once the CPUs stop allocating.
    #[test]
    fn drain_all_with_two_cpu_threads() {
        static D: DrainAll<2> = DrainAll::new();
        let z = zone(4096, 4096);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let phase = std::sync::Arc::new(AtomicUsize::new(0));
        // CPUs that have seen phase 1 and freed what they held.
        let freed = std::sync::Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for cpu in 0..2 {
            let stop = stop.clone();
            let phase = phase.clone();
            let freed = freed.clone();
            D.cpu_online(cpu);
            handles.push(std::thread::spawn(move || {
                let mut pcp = PerCpuPages::with_params(256, 31);
                let mut held: Vec<Pfn> = Vec::new();
                let mut i = 0usize;
                let mut acked = false;
                while !stop.load(Ordering::Relaxed) {
                    // Phase 0: churn. Phase 1: free everything, keep polling.
                    if phase.load(Ordering::Acquire) == 0 {
                        if i % 3 != 2 {
                            if let Some(p) = pcp.alloc_page(z) {
                                held.push(p);
                            }
                        } else if let Some(p) = held.pop() {
                            pcp.free_page(z, p);
                        }
                    } else {
                        for p in held.drain(..) {
                            pcp.free_page(z, p);
                        }
                        if !acked {
                            acked = true;
                            freed.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                    D.poll(cpu, || pcp.drain_local_pages(z));
                    i += 1;
                }
                assert!(held.is_empty());
                pcp.drain_local_pages(z);
                D.cpu_offline(cpu);
            }));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        // A drain during churn completes (both CPUs answer).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        assert_eq!(
            D.drain_all_pages(None, || {}, || std::time::Instant::now() > deadline),
            Ok(())
        );
        phase.store(1, Ordering::Release);
        // Drain only once both CPUs hold nothing: a CPU that read phase 0 just before the
        // store may poll (answering a drain) while still holding pages (this raced under load).
        while freed.load(Ordering::Acquire) < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "CPUs never freed their pages"
            );
            std::thread::yield_now();
        }
        assert_eq!(
            D.drain_all_pages(None, || {}, || std::time::Instant::now() > deadline),
            Ok(())
        );
        // Every page is back: the CPUs hold nothing and their lists were drained.
        assert_eq!(z.free_pages(), 4096);
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(z.free_pages(), 4096);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// Model of one CPU's pcp: a page count only its owner may touch (loom's `UnsafeCell`
    /// reports any access from another thread that is not ordered with the owner's).
    struct Cpu {
        pcp: UnsafeCell<usize>,
        /// Pages put on this pcp so far (published for the requester's snapshot).
        freed: AtomicUsize,
    }

    struct World {
        drain: DrainAll<2>,
        cpus: [Cpu; 2],
        /// The zone's free pages, under the zone lock, counted per CPU that drained them there
        /// (so one CPU's drain cannot hide another's missing one).
        zone: Mutex<[usize; 2]>,
    }

    fn drain_local(w: &World, cpu: usize) {
        let n = w.cpus[cpu]
            .pcp
            .with_mut(|c| unsafe { core::mem::take(&mut *c) });
        w.zone.lock().unwrap()[cpu] += n;
    }

    /// A requester and two CPUs. Each CPU frees two pages to its pcp, polling after each;
    /// CPU 1 then drains and goes offline, CPU 0 just stops polling. When the requester gets
    /// `Ok`, every page that was on a pcp when it asked must be in the zone, and no pcp may have
    /// been touched by anyone but its owner (loom's `UnsafeCell` checks that); a timeout names
    /// the first CPU that had not answered.
    #[test]
    fn loom_drain_all_requester_and_two_cpus() {
        loom::model(|| {
            let w = Arc::new(World {
                drain: DrainAll::new(),
                cpus: [0, 1].map(|_| Cpu {
                    pcp: UnsafeCell::new(0),
                    freed: AtomicUsize::new(0),
                }),
                zone: Mutex::new([0; 2]),
            });
            w.drain.cpu_online(0);
            w.drain.cpu_online(1);
            let cpus: [_; 2] = core::array::from_fn(|cpu| {
                let w = w.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        w.cpus[cpu].pcp.with_mut(|c| unsafe { *c += 1 });
                        w.cpus[cpu].freed.fetch_add(1, Ordering::Release);
                        w.drain.poll(cpu, || drain_local(&w, cpu));
                    }
                    if cpu == 1 {
                        drain_local(&w, cpu);
                        w.drain.cpu_offline(cpu);
                    }
                })
            });
            let before: [usize; 2] =
                core::array::from_fn(|c| w.cpus[c].freed.load(Ordering::Acquire));
            let mut checks = 0;
            let r = w.drain.drain_all_pages(
                None,
                || {},
                || {
                    checks += 1;
                    checks > 2
                },
            );
            match r {
                Ok(()) => assert!(
                    (0..2).all(|c| w.zone.lock().unwrap()[c] >= before[c]),
                    "a pcp page was not drained"
                ),
                Err(DrainError::Timeout { cpu, missing }) => {
                    // Either CPU may simply not have run yet; the report must be consistent.
                    assert!(cpu < 2 && (1..=2).contains(&missing));
                    assert!(missing == 1 || cpu == 0, "first of two missing is CPU 0");
                }
                Err(DrainError::Busy) => panic!("only one requester"),
            }
            for c in cpus {
                c.join().unwrap();
            }
            // After a timeout the request stays posted: CPU 0's next poll still drains.
            if w.drain.is_pending(0) {
                assert!(w.drain.poll(0, || drain_local(&w, 0)));
            }
            // A request may land on CPU 1 just after it went offline (the requester read
            // `online` before CPU 1 cleared it); it is never waited for, and coming back online
            // clears it.
            w.drain.cpu_online(1);
            assert!(
                !w.drain.is_pending(1),
                "a CPU comes online with nothing pending"
            );
        });
    }

    /// Two requesters and one CPU: never two drainers at once; each requester either completes
    /// or is told `Busy`.
    #[test]
    fn loom_drain_one_drainer_at_a_time() {
        loom::model(|| {
            let d = Arc::new(DrainAll::<3>::new());
            let inside = Arc::new(AtomicUsize::new(0));
            d.cpu_online(2);
            let reqs: [_; 2] = core::array::from_fn(|me| {
                let d = d.clone();
                let inside = inside.clone();
                thread::spawn(move || {
                    d.drain_all_pages(
                        Some(me),
                        || {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two drainers");
                            inside.fetch_sub(1, Ordering::SeqCst);
                        },
                        || true,
                    )
                })
            });
            d.poll(2, || {});
            for r in reqs {
                let r = r.join().unwrap();
                assert!(matches!(
                    r,
                    Ok(()) | Err(DrainError::Busy) | Err(DrainError::Timeout { cpu: 2, .. })
                ));
            }
        });
    }
}
