//! Neighbour learning across cores: with one [`Router`](super::Router) per core, an ARP reply
//! lands on whichever core the NIC steers it to, not necessarily the one that asked. What a
//! core learns ([`NeighUpdate`]) goes to every other core through that core's [`NeighRing`],
//! drained at the top of its poll loop into its own table ([`Router::learn`](super::Router::learn)).
//!
//! [`NeighRing`] is `mm`'s generic bounded ring ([`mm::ptr_ring::MpscRing`], Dmitry Vyukov's
//! bounded queue, the same code as the page_pool recycle ring and the cross-core hand-offs)
//! carrying [`NeighUpdate`]s; its `unsafe` and its loom model live in `mm`, so this crate
//! keeps `#![deny(unsafe_code)]`. Producers (any core) claim a position with one
//! compare-and-swap and publish with a `Release` store of the slot's sequence number; the
//! consumer (the owning core) takes slots in order while published (`Acquire`). A full ring is
//! reported to the producer (the update is dropped and counted by the caller: the core that
//! misses it falls back to its own ARP request).

use crate::MacAddr;
use mm::ptr_ring::MpscRing;

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

/// What a core's IPv6 neighbour table learned from a solicited Neighbor Advertisement (RFC 4861
/// §7.2.5): `ip` is at `mac` behind `port` (`Router6::take_learned`, `Router6::learn`).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct NeighUpdate6 {
    /// The neighbour's IPv6 address (bits).
    pub ip: u128,
    /// The router port it is behind.
    pub port: u8,
    /// Its MAC.
    pub mac: MacAddr,
}

/// [`NeighRing`] for IPv6 neighbours: the same ring of [`NeighUpdate6`]s.
pub type NeighRing6<const S: usize> = MpscRing<NeighUpdate6, S>;

/// A bounded, lock-free, multi-producer single-consumer ring of [`NeighUpdate`]s with `S`
/// slots (a power of two, at least 2): `mm`'s generic [`MpscRing`]. Any core may
/// [`push`](MpscRing::push) (`Err(update)` when full); only the owning core should
/// [`pop`](MpscRing::pop) (a second consumer could take updates out of order, never tear one).
/// `const`-constructible, so rings can be statics.
pub type NeighRing<const S: usize> = MpscRing<NeighUpdate, S>;

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

    /// Statics of it, as the kernel has them (one ring per core).
    #[test]
    fn const_statics() {
        static RINGS: [NeighRing<8>; 2] = [const { NeighRing::new() }; 2];
        RINGS[1].push(upd(7)).unwrap();
        assert_eq!((RINGS[0].pop(), RINGS[1].pop()), (None, Some(upd(7))));
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
