//! `quit`: the phases every forwarding core goes through together, so that no page is handed
//! to a core or pool that is already gone, and the page accounting at the end is exact.

use core::sync::atomic::{AtomicU8, Ordering};

use super::page::PageBuf;
use super::percore::{Core, Platform};
use super::MAX_CORES;
use drivers::nic::Nic;
use drivers::virtio_net::QUEUE_SIZE;
use mm::Pfn;
use netstack::config::MAX_BURST;
use netstack::config::PORTS;

/// One phase of `quit`, in order. Every core finishes a phase before any core starts the next.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum QuitPhase {
    /// Stop receiving; let in-flight TX complete (bounded by [`super::TX_DRAIN_MS`]).
    Stop = 1,
    /// Reset the devices this core owns: they stop using every buffer.
    Reset = 2,
    /// Take every page back from this core's rings, staging and queues; return each to its
    /// pool (other cores' pages through their pools' recycle rings).
    TakeBack = 3,
    /// Return the pages other cores handed over (hand-off rings) just before they stopped.
    HandOff = 4,
    /// Destroy the pools (draining their recycle rings), drop the devices, drain the pcp list.
    Destroy = 5,
}

impl QuitPhase {
    /// Every phase, in order.
    pub const ALL: [QuitPhase; 5] = [
        QuitPhase::Stop,
        QuitPhase::Reset,
        QuitPhase::TakeBack,
        QuitPhase::HandOff,
        QuitPhase::Destroy,
    ];

    /// The phase with number `n` (1..=5); `None` for 0 (forwarding) or out of range.
    pub fn from_u8(n: u8) -> Option<QuitPhase> {
        QuitPhase::ALL.get(usize::from(n).wrapping_sub(1)).copied()
    }

    /// The last phase.
    pub const LAST: QuitPhase = QuitPhase::Destroy;
}

/// The quit handshake between the boot CPU (which drives it) and the other forwarding cores.
pub struct QuitSync {
    /// The phase every core should be in (0 = forwarding).
    phase: AtomicU8,
    /// Per core: the last phase it finished (0 = none).
    done: [AtomicU8; MAX_CORES],
}

impl Default for QuitSync {
    fn default() -> Self {
        Self::new()
    }
}

impl QuitSync {
    /// Forwarding, nothing done.
    pub const fn new() -> QuitSync {
        QuitSync {
            phase: AtomicU8::new(0),
            done: [const { AtomicU8::new(0) }; MAX_CORES],
        }
    }

    /// Whether `quit` has begun (checked at the top of every poll iteration).
    #[inline]
    pub fn requested(&self) -> bool {
        self.phase.load(Ordering::Relaxed) != 0
    }

    /// The phase now asked for, if any.
    pub fn current(&self) -> Option<QuitPhase> {
        QuitPhase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// Boot CPU: ask every core to run `p`.
    pub fn begin(&self, p: QuitPhase) {
        self.phase.store(p as u8, Ordering::Release);
    }

    /// Core `k` finished `p`.
    pub fn finish(&self, k: usize, p: QuitPhase) {
        self.done[k].store(p as u8, Ordering::Release);
    }

    /// Whether core `k` has finished `p`.
    pub fn finished(&self, k: usize, p: QuitPhase) -> bool {
        self.done[k].load(Ordering::Acquire) >= p as u8
    }
}

/// How long phase 1 waits for in-flight TX to complete before the devices are reset: 100 ms.
pub const TX_DRAIN_NS: u64 = 100_000_000;

/// Why `quit` failed on the boot CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuitError {
    /// Core `core` did not finish `phase` in time.
    Timeout {
        /// The core.
        core: usize,
        /// The phase it was in.
        phase: QuitPhase,
    },
    /// Core `core` finished without publishing its final counters.
    NoFinalCounters {
        /// The core.
        core: usize,
    },
}

impl core::fmt::Display for QuitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QuitError::Timeout { core, phase } => {
                write!(f, "cpu {core} did not finish phase {phase:?} in time")
            }
            QuitError::NoFinalCounters { core } => {
                write!(f, "cpu {core} finished without its final counters")
            }
        }
    }
}

/// What `quit` found on the boot CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuitReport {
    /// Pages the pools still counted in flight after teardown, over all cores (a bug if > 0).
    pub leaked: u64,
    /// Free pages (zone + this core's pcp list) after teardown.
    pub free_pages_now: u64,
}

impl<P: Platform> Core<P> {
    /// Run one phase on this core. Returns pages lost (phase [`QuitPhase::Destroy`] only).
    pub fn quit_phase(&mut self, phase: QuitPhase) -> u64 {
        match phase {
            QuitPhase::Stop => {
                let deadline = P::uptime_ns() + TX_DRAIN_NS;
                while self.nics.iter().any(|n| n.tx_posted() > 0) && P::uptime_ns() < deadline {
                    self.tx_reap(true);
                }
                0
            }
            QuitPhase::Reset => {
                for nic in self.nics.iter_mut() {
                    nic.reset_device();
                }
                0
            }
            QuitPhase::TakeBack => {
                self.take_back();
                0
            }
            QuitPhase::HandOff => {
                let fabric = self.fabric;
                let ring = &fabric.handoff[self.pair];
                while ring.pop_each(64, |h| self.pages.recycle(h.page)) > 0 {}
                // Core 0: frames handed over for the management plane and not yet taken.
                if self.pair == 0 {
                    while fabric.mgmt.pop_each(64, |h| self.pages.recycle(h.page)) > 0 {}
                }
                0
            }
            QuitPhase::Destroy => self.destroy(),
        }
    }

    /// Phase 3 (every device was reset in phase 2): every page of this core's rings, staging,
    /// router queue and spare goes back to its pool.
    fn take_back(&mut self) {
        let mut back: heapless::Vec<Pfn, { 2 * PORTS * QUEUE_SIZE }> = heapless::Vec::new();
        for nic in self.nics.iter_mut() {
            // SAFETY: phase 2 reset every device (its owner did, on this or the boot CPU) and
            // every core finished phase 2 before any started phase 3.
            unsafe {
                nic.take_pages(&mut |pfn| {
                    let _ = back.push(pfn);
                })
            };
        }
        for pfn in back {
            // SAFETY: taken off a reset device's ring: ours.
            self.pages.recycle(unsafe { PageBuf::from_raw(pfn) });
        }
        let mut staged = heapless::Vec::<PageBuf, { 2 * MAX_BURST }>::new();
        self.tx.take_all(|p| {
            if let Err(p) = staged.push(p) {
                // Cannot happen (the stage holds at most 2 * MAX_BURST); never leak.
                core::mem::forget(p);
            }
        });
        for p in staged {
            self.pages.recycle(p);
        }
        if let Some(rs) = self.route.as_mut() {
            let spare = rs.spare.take();
            let mut queued = heapless::Vec::<Pfn, 1024>::new();
            while let Some(pfn) = rs.router.flush() {
                if queued.push(pfn).is_err() {
                    break;
                }
            }
            for pfn in queued {
                // SAFETY: the router's queue handed the page back (flush).
                self.pages.recycle(unsafe { PageBuf::from_raw(pfn) });
            }
            if let Some(sp) = spare {
                self.pages.recycle(sp);
            }
        }
    }

    /// Phase 5: destroy the pools (their rings drained first), drop the devices, drain the pcp
    /// list. Returns pages still in flight (lost: a bug).
    fn destroy(&mut self) -> u64 {
        let mut leaked = 0;
        let pg = &mut self.pages;
        for (i, pool) in pg.pools.iter_mut().enumerate() {
            if let Err(e) = pool.destroy(&mut pg.pcp, pg.zone, &mut pg.dma) {
                log::error!(
                    "page_pool {}: destroy: {e:?}; {} pages lost",
                    PORTS * self.pair + i,
                    pool.in_flight()
                );
                leaked += pool.in_flight();
            }
        }
        self.drop_nics();
        let pg = &mut self.pages;
        pg.pcp.drain_local_pages(pg.zone);
        leaked
    }

    /// A core other than the boot CPU, once [`QuitSync::requested`]: go through every phase in
    /// step with the boot CPU, then publish the final counters (before reporting the last
    /// phase done: the boot CPU prints them as soon as it sees that). The caller halts.
    pub fn follow_quit(&mut self) {
        for phase in QuitPhase::ALL {
            while self.fabric.quit.current().is_none_or(|c| c < phase) {
                core::hint::spin_loop();
            }
            self.follow_phase(phase);
        }
    }

    /// A core other than the boot CPU: run `phase` and report it done (after the last phase,
    /// with the final counters published first).
    pub fn follow_phase(&mut self, phase: QuitPhase) {
        self.quit_leaked += self.quit_phase(phase);
        if phase == QuitPhase::LAST {
            self.publish(true, self.quit_leaked);
        }
        self.fabric.quit.finish(self.pair, phase);
    }

    /// The boot CPU's `quit`: drive every phase on every core (each waits at most `timeout_ns`
    /// for the others; `wake_others` wakes halted cores), then sum what leaked. The caller
    /// compares [`QuitReport::free_pages_now`] with the boot count.
    ///
    /// # Errors
    /// [`QuitError`] when a core does not follow in time or ends without final counters.
    pub fn lead_quit(
        &mut self,
        timeout_ns: u64,
        mut wake_others: impl FnMut(),
        mut step: impl FnMut(usize, QuitPhase),
    ) -> Result<QuitReport, QuitError> {
        let fabric = self.fabric;
        let q = &fabric.quit;
        let mut leaked = 0;
        for phase in QuitPhase::ALL {
            q.begin(phase);
            wake_others();
            leaked += self.quit_phase(phase);
            q.finish(self.pair, phase);
            let deadline = P::uptime_ns() + timeout_ns;
            for k in 1..fabric.cores() {
                while !q.finished(k, phase) {
                    if P::uptime_ns() > deadline {
                        return Err(QuitError::Timeout { core: k, phase });
                    }
                    step(k, phase);
                    core::hint::spin_loop();
                }
            }
        }
        for (k, s) in fabric.others() {
            match s {
                Some(s) if s.done => leaked += s.leaked,
                _ => return Err(QuitError::NoFinalCounters { core: k }),
            }
        }
        Ok(QuitReport {
            leaked,
            free_pages_now: self.pages.free_pages(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_numbered_in_order() {
        for (i, p) in QuitPhase::ALL.iter().enumerate() {
            assert_eq!(*p as u8, i as u8 + 1);
            assert_eq!(QuitPhase::from_u8(i as u8 + 1), Some(*p));
        }
        assert_eq!(QuitPhase::from_u8(0), None);
        assert_eq!(QuitPhase::from_u8(6), None);
        assert!(QuitPhase::Stop < QuitPhase::Destroy);
    }

    #[test]
    fn handshake() {
        let q = QuitSync::new();
        assert!(!q.requested());
        q.begin(QuitPhase::Reset);
        assert!(q.requested());
        assert_eq!(q.current(), Some(QuitPhase::Reset));
        assert!(!q.finished(1, QuitPhase::Reset));
        q.finish(1, QuitPhase::Reset);
        assert!(q.finished(1, QuitPhase::Stop));
        assert!(q.finished(1, QuitPhase::Reset));
        assert!(!q.finished(1, QuitPhase::TakeBack));
    }
}
