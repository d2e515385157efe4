//! The burst-in gate (`burstin=on`, bench only): the poll loop leaves the RX rings alone
//! until a port's used ring holds [`BURSTIN_USED`] entries (or [`BURSTIN_WAIT_MS`] passed
//! since the last drain), then runs ordinary poll iterations ([`Core::poll_once`], burst
//! `burst=`) until no RX ring holds a used entry. Only those drain iterations are poll
//! iterations, so only they count in `busy_cycles` and `busy_iters`: on QEMU's real device
//! the figure per packet is then taken at about 32 frames per busy iteration, as the
//! simulated-device benchmark's K = 32 (issue 12, item 1).
//!
//! The gate reads each RX ring's used index only ([`Nic::rx_completed`]): while it waits, no used
//! entry is taken and no buffer is posted by it.

use super::percore::{Core, Platform, RX_FREE_THRESH};
use drivers::nic::Nic;
use drivers::nic::RING_SIZE;
use netstack::config::PORTS;

/// Used entries a port's RX ring must hold before the gate opens: 224 of the 256 descriptors
/// ([`RING_SIZE`] − [`RX_FREE_THRESH`]). The driver publishes re-posted RX buffers in batches
/// of 32, so the device always holds at least 224 buffers it may fill: a higher threshold
/// could wait for buffers the device does not have yet (until the timeout).
pub const BURSTIN_USED: usize = RING_SIZE - RX_FREE_THRESH;

/// How long the gate waits for [`BURSTIN_USED`] entries after a drain before it drains what
/// is there: 10 ms (the bound; the poll loop's console period too).
pub const BURSTIN_WAIT_MS: u64 = 10;

/// The gate's state: waiting, or draining since the gate opened.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct BurstIn {
    /// The wait bound in cycles ([`BURSTIN_WAIT_MS`] in the caller's clock).
    wait: u64,
    /// When the last drain ended (or the last timeout passed with nothing waiting), cycles.
    since: u64,
    /// Draining: poll iterations run until no RX ring holds a used entry.
    draining: bool,
    /// Drains so far.
    pub drains: u64,
    /// Drains the timeout opened (fewer than [`BURSTIN_USED`] entries on every port).
    pub timeouts: u64,
}

impl BurstIn {
    /// A closed gate at cycle `now` that waits at most `wait` cycles per drain.
    pub fn new(wait: u64, now: u64) -> BurstIn {
        BurstIn {
            wait,
            since: now,
            draining: false,
            drains: 0,
            timeouts: 0,
        }
    }

    /// Whether the poll loop runs a poll iteration now (cycle `now`): while draining, as long
    /// as a port's RX ring holds a used entry; while waiting, once a port's holds
    /// [`BURSTIN_USED`], or the wait bound passed since the last drain and any entry is there
    /// (with none there the wait starts again). Reads the used indices only.
    pub fn open<P: Platform>(&mut self, core: &Core<P>, now: u64) -> bool {
        let used = core.rx_used();
        let most = used.iter().copied().max().unwrap_or(0);
        if self.draining {
            if most > 0 {
                return true;
            }
            self.draining = false;
            self.since = now;
            return false;
        }
        let late = now.wrapping_sub(self.since) >= self.wait;
        if most >= BURSTIN_USED || (late && most > 0) {
            self.draining = true;
            self.drains += 1;
            self.timeouts += u64::from(most < BURSTIN_USED);
            return true;
        }
        if late {
            self.since = now;
        }
        false
    }

    /// Whether a drain is under way.
    pub fn draining(&self) -> bool {
        self.draining
    }
}

impl<P: Platform> Core<P> {
    /// Used entries waiting on each local port's RX ring ([`Nic::rx_completed`]: one load of
    /// `used->idx` each); zeros once `quit` tore the devices down.
    pub fn rx_used(&self) -> [usize; PORTS] {
        match self.nics() {
            Some(n) => core::array::from_fn(|p| n[p].rx_completed()),
            None => [0; PORTS],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::testing::{port_mac, Rig};
    use netstack::simframes::udp4_frame;
    use netstack::MacAddr;
    use std::net::Ipv4Addr;
    use std::vec::Vec;

    /// The gate's wait bound in the tests' cycles (passed explicitly as `now`).
    const WAIT: u64 = 1_000;

    /// A 60-byte UDP frame into local port `p`.
    fn frame(p: usize) -> Vec<u8> {
        let mut f = std::vec![0u8; 60];
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 1, 2));
        udp4_frame(
            &mut f,
            60,
            port_mac(p),
            MacAddr([2, 0, 0, 0, 0, 9]),
            src,
            dst,
            64,
        );
        f
    }

    /// Run poll iterations while the gate is open at `now`, the devices taking what was
    /// sent after each; returns (iterations, frames forwarded by them).
    fn drain(rig: &mut Rig, gate: &mut BurstIn, now: u64) -> (u64, u64) {
        let c = &mut rig.cores[0];
        let fwd = |c: &crate::dataplane::testing::SimCore| {
            c.core.counters()[0].tx + c.core.counters()[1].tx
        };
        let before = (c.core.profile_mut().busy_iters, fwd(c));
        let mut iters = 0;
        while gate.open(&c.core, now) {
            assert!(c.core.poll_once() > 0, "a drain iteration finds work");
            iters += 1;
            for d in c.dev.iter_mut() {
                d.complete_tx(|_| {});
            }
            assert!(iters <= 64, "the drain ends");
        }
        let busy = c.core.profile_mut().busy_iters - before.0;
        assert_eq!(busy, iters, "every drain iteration is busy, and only those");
        (iters, fwd(c) - before.1)
    }

    #[test]
    fn waits_for_224_used_entries_then_drains_in_bursts_of_32() {
        let mut rig = Rig::new("mode=l2 burstin=on", 1, 4096);
        let (f0, f1) = (frame(0), frame(1));
        let mut gate = BurstIn::new(WAIT, 0);
        for round in 0..4u64 {
            let t = round * 10;
            let c = &mut rig.cores[0];
            assert_eq!(c.dev[0].deliver_rx(&f0, BURSTIN_USED - 1), BURSTIN_USED - 1);
            assert_eq!(c.dev[1].deliver_rx(&f1, 100), 100);
            let avail = [c.dev[0].rx_available(), c.dev[1].rx_available()];
            let prof = c.core.profile_mut();
            let busy = (prof.busy_iters, prof.busy_cycles);
            for _ in 0..3 {
                assert!(!gate.open(&c.core, t), "round {round}: 223 and 100 waiting");
            }
            // The wait took nothing and posted nothing, and ran no poll iteration.
            assert_eq!(c.core.rx_used(), [BURSTIN_USED - 1, 100]);
            assert_eq!([c.dev[0].rx_available(), c.dev[1].rx_available()], avail);
            let prof = c.core.profile_mut();
            assert_eq!((prof.busy_iters, prof.busy_cycles), busy);
            assert_eq!(c.dev[0].deliver_rx(&f0, 1), 1);
            // 224 on port 0 (7 bursts of 32), 100 on port 1 in the first 4 of them.
            assert_eq!(drain(&mut rig, &mut gate, t), (7, 324), "round {round}");
            let c = &mut rig.cores[0];
            assert_eq!(c.core.rx_used(), [0, 0]);
            assert!(!gate.draining());
        }
        assert_eq!((gate.drains, gate.timeouts), (4, 0));
        let c = &rig.cores[0].core;
        assert_eq!((c.counters()[1].tx, c.counters()[0].tx), (4 * 224, 4 * 100));
        assert_eq!(
            c.counters()[0].drops_total() + c.counters()[1].drops_total(),
            0
        );
        rig.quit_and_check();
    }

    #[test]
    fn drains_what_is_there_once_the_wait_bound_passed() {
        let mut rig = Rig::new("mode=io burstin=on", 1, 4096);
        let f0 = frame(0);
        let mut gate = BurstIn::new(WAIT, 0);
        // Nothing waiting: the bound passing restarts the wait, no poll iteration.
        assert!(!gate.open(&rig.cores[0].core, WAIT));
        assert_eq!(rig.cores[0].dev[0].deliver_rx(&f0, 40), 40);
        assert!(!gate.open(&rig.cores[0].core, 2 * WAIT - 1));
        assert_eq!(drain(&mut rig, &mut gate, 2 * WAIT), (2, 40));
        assert_eq!((gate.drains, gate.timeouts), (1, 1));
        // The drain's end starts the next wait.
        assert_eq!(rig.cores[0].dev[0].deliver_rx(&f0, 5), 5);
        assert!(!gate.open(&rig.cores[0].core, 3 * WAIT - 1));
        assert_eq!(drain(&mut rig, &mut gate, 3 * WAIT), (1, 5));
        assert_eq!((gate.drains, gate.timeouts), (2, 2));
        assert_eq!(rig.cores[0].core.counters()[1].tx, 45);
        rig.quit_and_check();
    }
}
