//! Who owns what across cores, and the outside ports a core hands out.
//!
//! VPP nat44-ei's scheme (`src/plugins/nat/nat44-ei/nat44_ei.c`:
//! `nat44_ei_get_in2out_worker_index` hashes the inside source address,
//! `nat44_ei_get_out2in_worker_index` divides the outside port by the ports per worker):
//! * an inside address belongs to one core ([`owner_of_inside`], a hash of the address), so
//!   every flow of that host, whatever its destination, meets its endpoint-independent
//!   mapping on one core;
//! * that core hands out outside ports only from its own block of the dynamic range
//!   ([`PortPlan`]), so a reply names its owning core by its destination port
//!   ([`PortPlan::owner_of`]) and is handed to it;
//! * the outside address of an inside address is a hash of the inside address over the
//!   pool ([`paired_address`]): the same on every core and for every flow (RFC 4787 REQ-2,
//!   paired pooling), with no state.
//!
//! Ports in use are one bit each, per outside address and protocol (TCP, UDP, ICMP
//! identifiers), over the core's block: `pool × 3 × ⌈block / 64⌉` words of caller storage
//! (24 KiB for 4 addresses and a 16,128-port block). A count per set makes exhaustion a test,
//! not a scan; an allocation scans words from where the last one ended.

use crate::rng::mix;
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};

/// Most outside addresses in a pool.
pub const MAX_POOL: usize = 16;

/// The protocols with ports of their own (index of a port set).
fn proto_index(proto: u8) -> Option<usize> {
    match proto {
        IPPROTO_TCP => Some(0),
        IPPROTO_UDP => Some(1),
        IPPROTO_ICMP => Some(2),
        _ => None,
    }
}

/// The core that owns the inside address `addr` (of `cores`), with the key every core shares.
pub fn owner_of_inside(addr: u32, cores: u16, key: u64) -> u16 {
    if cores <= 1 {
        return 0;
    }
    ((u64::from(cores) * (mix(u64::from(addr) ^ key) >> 32)) >> 32) as u16
}

/// The pool index of the outside address paired with inside address `addr`.
pub fn paired_address(addr: u32, pool_len: usize, key: u64) -> usize {
    ((pool_len as u64 * (mix(u64::from(addr) ^ key.rotate_left(17) ^ 0x5bd1_e995) >> 32)) >> 32)
        as usize
}

/// The dynamic port range `lo..=hi` cut into one block per core (the last takes the
/// remainder).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct PortPlan {
    /// First port of the range (≥ 1).
    pub lo: u16,
    /// Last port of the range.
    pub hi: u16,
    /// Cores sharing it.
    pub cores: u16,
}

impl PortPlan {
    /// Ports per core (the last core may have more).
    pub fn per_core(&self) -> u32 {
        (u32::from(self.hi) - u32::from(self.lo) + 1) / u32::from(self.cores)
    }

    /// The block of `core`: first port and port count.
    pub fn block(&self, core: u16) -> (u16, u32) {
        let per = self.per_core();
        let first = u32::from(self.lo) + u32::from(core) * per;
        let n = if core + 1 == self.cores {
            u32::from(self.hi) + 1 - first
        } else {
            per
        };
        (first as u16, n)
    }

    /// The core whose block holds `port`; `None` outside the dynamic range.
    pub fn owner_of(&self, port: u16) -> Option<u16> {
        if port < self.lo || port > self.hi {
            return None;
        }
        let k = (u32::from(port) - u32::from(self.lo)) / self.per_core();
        Some((k as u16).min(self.cores - 1))
    }
}

/// The ports in use of one core's block, per outside address and protocol.
pub struct PortAlloc<'a> {
    words: &'a mut [u64],
    per_set: usize,
    first: u16,
    n: u32,
    used: [u32; MAX_POOL * 3],
    cursor: [u32; MAX_POOL * 3],
}

impl<'a> PortAlloc<'a> {
    /// Words of storage for `pool` addresses and a block of `n` ports.
    pub const fn words_for(pool: usize, n: u32) -> usize {
        pool * 3 * (n as usize).div_ceil(64)
    }

    /// An allocator over `words` (at least [`PortAlloc::words_for`]; cleared here) for the
    /// block of `n` ports from `first`. `None` when `words` is too short.
    pub fn new(words: &'a mut [u64], pool: usize, first: u16, n: u32) -> Option<PortAlloc<'a>> {
        let per_set = (n as usize).div_ceil(64);
        let words = words.get_mut(..pool * 3 * per_set)?;
        words.fill(0);
        let a = PortAlloc {
            words,
            per_set,
            first,
            n,
            used: [0; MAX_POOL * 3],
            cursor: [0; MAX_POOL * 3],
        };
        // Bits past the block's end are never handed out.
        if !n.is_multiple_of(64) {
            let tail = !0u64 << (n % 64);
            for s in 0..pool * 3 {
                a.words[s * per_set + per_set - 1] = tail;
            }
        }
        Some(a)
    }

    /// A free port of the block for (`addr` index, `proto`), now in use; `None` when all
    /// are in use (or `proto` has no ports).
    pub fn alloc(&mut self, addr: usize, proto: u8) -> Option<u16> {
        let s = addr * 3 + proto_index(proto)?;
        if self.used[s] >= self.n {
            return None;
        }
        let base = s * self.per_set;
        let start = self.cursor[s] as usize;
        for k in 0..self.per_set {
            let w = (start + k) % self.per_set;
            let word = self.words[base + w];
            if word != !0 {
                let bit = (!word).trailing_zeros() as usize;
                self.words[base + w] |= 1 << bit;
                self.used[s] += 1;
                self.cursor[s] = w as u32;
                return Some(self.first + (w * 64 + bit) as u16);
            }
        }
        None
    }

    /// Give `port` back (a port outside the block, or not in use, is ignored).
    pub fn free(&mut self, addr: usize, proto: u8, port: u16) {
        let Some(p) = proto_index(proto) else { return };
        let s = addr * 3 + p;
        if port < self.first || u32::from(port - self.first) >= self.n {
            return;
        }
        let i = usize::from(port - self.first);
        let w = &mut self.words[s * self.per_set + i / 64];
        if *w & (1 << (i % 64)) != 0 {
            *w &= !(1 << (i % 64));
            self.used[s] -= 1;
        }
    }

    /// Ports in use for (`addr` index, `proto`).
    pub fn used(&self, addr: usize, proto: u8) -> u32 {
        proto_index(proto).map_or(0, |p| self.used[addr * 3 + p])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn blocks_tile_the_range_and_name_their_owner() {
        let plan = PortPlan {
            lo: 1024,
            hi: 65535,
            cores: 4,
        };
        assert_eq!(plan.per_core(), 16128);
        assert_eq!(plan.block(0), (1024, 16128));
        assert_eq!(plan.block(3), (1024 + 3 * 16128, 16128));
        for core in 0..4 {
            let (first, n) = plan.block(core);
            assert_eq!(plan.owner_of(first), Some(core));
            assert_eq!(plan.owner_of((u32::from(first) + n - 1) as u16), Some(core));
        }
        assert_eq!((plan.owner_of(1023), plan.owner_of(0)), (None, None));
        let odd = PortPlan {
            lo: 10,
            hi: 20,
            cores: 3,
        };
        assert_eq!((odd.block(0), odd.block(2)), ((10, 3), (16, 5)));
        assert_eq!(odd.owner_of(20), Some(2));
    }

    #[test]
    fn allocation_exhausts_and_recycles() {
        let mut w = vec![0u64; PortAlloc::words_for(2, 100)];
        let mut a = PortAlloc::new(&mut w, 2, 5000, 100).unwrap();
        let mut got = std::vec::Vec::new();
        while let Some(p) = a.alloc(1, IPPROTO_UDP) {
            got.push(p);
        }
        got.sort();
        assert_eq!(got, (5000..5100).collect::<std::vec::Vec<_>>());
        assert_eq!(
            (
                a.used(1, IPPROTO_UDP),
                a.used(1, IPPROTO_TCP),
                a.used(0, IPPROTO_UDP)
            ),
            (100, 0, 0)
        );
        a.free(1, IPPROTO_UDP, 5077);
        assert_eq!(a.alloc(1, IPPROTO_UDP), Some(5077));
        assert_eq!(a.alloc(1, IPPROTO_UDP), None);
        assert_eq!(a.alloc(0, 47), None);
    }

    #[test]
    fn owners_and_pairing_spread_and_are_stable() {
        let mut per_core = [0u32; 4];
        let mut per_addr = [0u32; 3];
        for a in 0..4000u32 {
            let addr = 0x0a00_0000 + a;
            per_core[usize::from(owner_of_inside(addr, 4, 9))] += 1;
            per_addr[paired_address(addr, 3, 9)] += 1;
            assert_eq!(owner_of_inside(addr, 4, 9), owner_of_inside(addr, 4, 9));
            assert_eq!(owner_of_inside(addr, 1, 9), 0);
        }
        assert!(
            per_core.iter().all(|&n| (800..1200).contains(&n)),
            "{per_core:?}"
        );
        assert!(
            per_addr.iter().all(|&n| (1100..1570).contains(&n)),
            "{per_addr:?}"
        );
    }
}
