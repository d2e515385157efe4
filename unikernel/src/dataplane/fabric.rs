//! [`Fabric`]: everything the forwarding cores share. One `&'static Fabric` per kernel (a
//! static); host tests make their own. Every field is lock-free or a short spin lock taken off
//! the hot path (published snapshots).

use super::handoff::HandoffRing;
use super::quit::QuitSync;
use super::snap::PairSnap;
use super::{MAX_CORES, MAX_PORTS};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use mm::page_pool::RecycleRing;
use netstack::router::{NeighRing, NeighRing6};
use netstack::MacAddr;

/// Slots of each core's neighbour-update ring (updates are rare: one per ARP exchange).
pub const NEIGH_RING_SLOTS: usize = 64;

/// State shared by the forwarding cores.
pub struct Fabric {
    /// Each page_pool's recycle ring (pool `id` = global port `id`): where other cores return
    /// its pages.
    pub pool_rings: [RecycleRing; MAX_PORTS],
    /// Per core: frames other cores send out of its ports (`xcore=on`).
    pub handoff: [HandoffRing; MAX_CORES],
    /// Router mode on several cores: frames for the management plane, for core 0.
    pub mgmt: HandoffRing,
    /// Per core: what other cores' routers learned from ARP.
    pub neigh: [NeighRing<NEIGH_RING_SLOTS>; MAX_CORES],
    /// Per core: what other cores' IPv6 routers learned from solicited advertisements.
    pub neigh6: [NeighRing6<NEIGH_RING_SLOTS>; MAX_CORES],
    /// Every port's MAC (low 48 bits), for the l2 rewrite of frames leaving through another
    /// core.
    port_macs: [AtomicU64; MAX_PORTS],
    /// The quit handshake.
    pub quit: QuitSync,
    /// What each core other than the boot CPU publishes (every 10 ms and when it stops; the
    /// boot CPU formats its own counters live).
    pub snaps: [spin::Mutex<Option<PairSnap>>; MAX_CORES],
    /// Per core: print your neighbour table (console `neigh`).
    pub neigh_dump: [AtomicBool; MAX_CORES],
    /// Per core: it is about to halt or halted (`idle=halt`); whoever hands it work wakes it.
    sleeping: [AtomicBool; MAX_CORES],
    /// Forwarding cores (port pairs or queue pairs), set once before they start.
    cores: AtomicUsize,
    /// virtio-net queue pairs per port (1 without multi-queue).
    queues: AtomicUsize,
}

impl Default for Fabric {
    fn default() -> Self {
        Self::new()
    }
}

impl Fabric {
    /// Nothing shared yet; one core, one queue pair.
    pub const fn new() -> Fabric {
        Fabric {
            pool_rings: [const { RecycleRing::new() }; MAX_PORTS],
            handoff: [const { HandoffRing::new() }; MAX_CORES],
            mgmt: HandoffRing::new(),
            neigh: [const { NeighRing::new() }; MAX_CORES],
            neigh6: [const { NeighRing6::new() }; MAX_CORES],
            port_macs: [const { AtomicU64::new(0) }; MAX_PORTS],
            quit: QuitSync::new(),
            snaps: [const { spin::Mutex::new(None) }; MAX_CORES],
            neigh_dump: [const { AtomicBool::new(false) }; MAX_CORES],
            sleeping: [const { AtomicBool::new(false) }; MAX_CORES],
            cores: AtomicUsize::new(1),
            queues: AtomicUsize::new(1),
        }
    }

    /// Boot CPU, before the other cores start: `cores` forwarding cores, `queues` queue pairs
    /// per port.
    pub fn set_topology(&self, cores: usize, queues: usize) {
        self.cores
            .store(cores.clamp(1, MAX_CORES), Ordering::Release);
        self.queues.store(queues.max(1), Ordering::Release);
    }

    /// Forwarding cores.
    #[inline]
    pub fn cores(&self) -> usize {
        self.cores.load(Ordering::Relaxed)
    }

    /// Queue pairs per port.
    #[inline]
    pub fn queues(&self) -> usize {
        self.queues.load(Ordering::Relaxed)
    }

    /// Record global port `id`'s MAC.
    pub fn set_port_mac(&self, id: usize, mac: MacAddr) {
        let mut b = [0u8; 8];
        b[..6].copy_from_slice(&mac.0);
        self.port_macs[id].store(u64::from_le_bytes(b), Ordering::Release);
    }

    /// Global port `id`'s MAC.
    pub fn port_mac(&self, id: usize) -> MacAddr {
        let b = self.port_macs[id].load(Ordering::Acquire).to_le_bytes();
        MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// Core `k` is about to halt (`true`) or awake again (`false`).
    ///
    /// With [`Fabric::is_sleeping`] this is the store-buffering (Dekker) pattern: the core
    /// stores `true` then looks at its rings ([`Fabric::has_work_for`]); a producer pushes then
    /// loads the flag. Sequentially consistent fences on both sides make at least one of them
    /// see the other, so work is never left behind a halted core without a wake-up.
    pub fn set_sleeping(&self, k: usize, on: bool) {
        self.sleeping[k].store(on, Ordering::SeqCst);
        if on {
            core::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// Whether core `k` may be halted (call after pushing work to it).
    #[inline]
    pub fn is_sleeping(&self, k: usize) -> bool {
        core::sync::atomic::fence(Ordering::SeqCst);
        self.sleeping[k].load(Ordering::Relaxed)
    }

    /// Whether anything waits for core `k` in its rings (hand-offs, neighbour updates, and on
    /// core 0 management frames).
    pub fn has_work_for(&self, k: usize) -> bool {
        !self.handoff[k].is_empty()
            || !self.neigh[k].is_empty()
            || !self.neigh6[k].is_empty()
            || (k == 0 && !self.mgmt.is_empty())
    }

    /// Every core's last published snapshot but core 0's (which the caller has live).
    pub fn others(&self) -> impl Iterator<Item = (usize, Option<PairSnap>)> + '_ {
        self.snaps
            .iter()
            .enumerate()
            .take(self.cores())
            .skip(1)
            .map(|(k, s)| (k, *s.lock()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mac_roundtrip() {
        let f = Fabric::new();
        let m = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        f.set_port_mac(3, m);
        assert_eq!(f.port_mac(3), m);
        assert_eq!(f.port_mac(2), MacAddr([0; 6]));
    }
}
