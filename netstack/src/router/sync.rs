//! Neighbour learning across cores: with one [`Router`](super::Router) per core, an ARP reply
//! lands on whichever core the NIC steers it to, not necessarily the one that asked. What a
//! core learns ([`NeighUpdate`]) goes to every other core through that core's [`NeighRing`],
//! drained at the top of its poll loop into its own table ([`Router::learn`](super::Router::learn)).
//!
//! [`NeighRing`] is Dmitry Vyukov's bounded queue (like `mm`'s page recycle ring), with
//! atomics for the payload so it needs no `unsafe`: producers (any core) claim a position with
//! one compare-and-swap and publish with a `Release` store of the slot's sequence number; the
//! single consumer (the owning core) takes slots in order while published (`Acquire`). A full
//! ring is reported to the producer (the update is dropped and counted by the caller: the
//! core that misses it falls back to its own ARP request).

use crate::MacAddr;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// What a core's neighbour table learned from ARP: `ip` is at `mac` behind `port`.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct NeighUpdate {
    /// The neighbour's IPv4 address (host order bits).
    pub ip: u32,
    /// The router port it is behind.
    pub port: u8,
    /// Its MAC.
    pub mac: MacAddr,
}

struct Slot {
    /// `p`: free for position `p`; `p + 1`: holds the update pushed at `p`.
    seq: AtomicUsize,
    ip: AtomicU32,
    /// Port in bits 48..56, MAC in bits 0..48.
    port_mac: AtomicU64,
}

/// A bounded, lock-free, multi-producer single-consumer ring of [`NeighUpdate`]s with `S`
/// slots (a power of two). Any core may [`push`](NeighRing::push); only the owning core may
/// [`pop`](NeighRing::pop) (a second concurrent consumer would be a logic error: updates could
/// be taken twice or skipped, never torn memory).
pub struct NeighRing<const S: usize> {
    tail: AtomicUsize,
    head: AtomicUsize,
    slots: [Slot; S],
}

impl<const S: usize> Default for NeighRing<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const S: usize> NeighRing<S> {
    const CHECK: () = assert!(S.is_power_of_two(), "NeighRing size must be a power of two");

    /// An empty ring. `const`, so rings can be statics.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        let mut slots = [const {
            Slot {
                seq: AtomicUsize::new(0),
                ip: AtomicU32::new(0),
                port_mac: AtomicU64::new(0),
            }
        }; S];
        let mut i = 0;
        while i < S {
            slots[i].seq = AtomicUsize::new(i);
            i += 1;
        }
        NeighRing {
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
            slots,
        }
    }

    /// Push one update (any core). `Err(u)` if the ring is full.
    pub fn push(&self, u: NeighUpdate) -> Result<(), NeighUpdate> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & (S - 1)];
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let mut b = [0u8; 8];
                        b[..6].copy_from_slice(&u.mac.0);
                        b[6] = u.port;
                        slot.ip.store(u.ip, Ordering::Relaxed);
                        slot.port_mac
                            .store(u64::from_le_bytes(b), Ordering::Relaxed);
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                // The slot still holds the previous lap's update: full.
                return Err(u);
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Take the oldest published update (the owning core only). `None` when empty (or when
    /// the next position is claimed but not yet published: it comes on a later call).
    #[inline]
    pub fn pop(&self) -> Option<NeighUpdate> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[pos & (S - 1)];
        if slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        let ip = slot.ip.load(Ordering::Relaxed);
        let b = slot.port_mac.load(Ordering::Relaxed).to_le_bytes();
        slot.seq.store(pos.wrapping_add(S), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(NeighUpdate {
            ip,
            port: b[6],
            mac: MacAddr([b[0], b[1], b[2], b[3], b[4], b[5]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::vec::Vec;

    fn upd(i: u32) -> NeighUpdate {
        NeighUpdate {
            ip: i,
            port: (i % 3) as u8,
            mac: MacAddr([2, 0, 0, 0, (i >> 8) as u8, i as u8]),
        }
    }

    #[test]
    fn fifo_and_full() {
        let r = NeighRing::<4>::new();
        assert_eq!(r.pop(), None);
        for i in 0..4 {
            r.push(upd(i)).unwrap();
        }
        assert_eq!(r.push(upd(9)), Err(upd(9)));
        for lap in 0..3 {
            for i in 0..4 {
                assert_eq!(r.pop(), Some(upd(lap * 4 + i)));
                r.push(upd(lap * 4 + i + 4)).unwrap();
            }
        }
        for i in 12..16 {
            assert_eq!(r.pop(), Some(upd(i)));
        }
        assert_eq!(r.pop(), None);
    }

    #[test]
    fn many_producers_one_consumer_lose_nothing() {
        const PER: u32 = 20_000;
        let r = Arc::new(NeighRing::<16>::new());
        let producers: Vec<_> = (0..3u32)
            .map(|t| {
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let u = upd(t * PER + i);
                        while r.push(u).is_err() {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = std::vec![false; (3 * PER) as usize];
        let mut next = [0u32; 3];
        let mut got = 0;
        while got < 3 * PER {
            match r.pop() {
                Some(u) => {
                    assert_eq!(u, upd(u.ip), "torn update");
                    let t = (u.ip / PER) as usize;
                    // Per producer, order is kept.
                    assert_eq!(u.ip % PER, next[t]);
                    next[t] += 1;
                    assert!(!seen[u.ip as usize]);
                    seen[u.ip as usize] = true;
                    got += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(r.pop(), None);
    }
}
