//! `quit`: the phases every forwarding core goes through together, so that no page is handed
//! to a core or pool that is already gone, and the page accounting at the end is exact.

use core::sync::atomic::{AtomicU8, Ordering};

use super::MAX_CORES;

/// One phase of `quit`, in order. Every core finishes a phase before any core starts the next.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum QuitPhase {
    /// Stop receiving; let in-flight TX complete (bounded by [`TX_DRAIN_NS`]).
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
