//! Forwarding information base: longest-prefix match with DIR-24-8.
//!
//! The structure is the one of Gupta, Lin and McKeown, "Routing lookups in hardware at memory
//! access speeds" (IEEE INFOCOM 1998), as implemented by DPDK's `rte_lpm` (lib/lpm/rte_lpm.c):
//!
//! - `tbl24`: 2^24 entries indexed by the top 24 bits of the destination. An entry is either a
//!   next hop (with the depth of the rule that set it) or, when some rule longer than /24 covers
//!   part of that /24, the index of a `tbl8` group.
//! - `tbl8`: groups of 256 entries indexed by the low 8 bits.
//!
//! A lookup is one memory access, two for destinations under a prefix longer than /24.
//!
//! Entries are `u32`, laid out like rte_lpm's: a valid flag, an "extended" flag (tbl24 only),
//! a 6-bit depth and a 24-bit value (next-hop index or group index). Storing the depth in each
//! entry is what makes add and delete local: adding a /d overwrites only entries set by rules
//! of depth ≤ d; deleting it rewrites only entries of depth d, with the longest shorter rule
//! that covers the prefix (found in the rule table, as rte_lpm's `find_previous_rule`).
//! A tbl8 group whose 256 entries become equal again is folded back into its tbl24 entry and
//! freed (rte_lpm's `tbl8_recycle_check`).
//!
//! Storage is provided by the caller so that the kernel can carve it from its allocator:
//! `tbl24` must hold exactly [`TBL24_LEN`] entries (64 MiB), `tbl8` a multiple of
//! [`TBL8_GROUP_LEN`] entries, and the rule table (an open-addressing hash of every route, used
//! for add/delete and listing, never on the lookup path) a power of two of [`RuleSlot`]s,
//! filled to at most 7/8. Host tests pass leaked or borrowed `Vec`s.

use core::net::Ipv4Addr;

/// Entries in `tbl24`.
pub const TBL24_LEN: usize = 1 << 24;
/// Entries in one `tbl8` group.
pub const TBL8_GROUP_LEN: usize = 256;
/// Next hops the FIB can hold (distinct (kind, port, gateway) values, shared by routes).
pub const MAX_NEXTHOPS: usize = 256;

const EXT: u32 = 1 << 31; // tbl24: value is a tbl8 group index
const IN_USE: u32 = 1 << 31; // tbl8: the group is allocated
const VALID: u32 = 1 << 30;
const DEPTH_SHIFT: u32 = 24;
const DEPTH_MASK: u32 = 0x3f << DEPTH_SHIFT;
const VALUE_MASK: u32 = 0x00ff_ffff;
const NO_GROUP: u32 = VALUE_MASK;

#[inline(always)]
const fn leaf(nh: u32, depth: u8) -> u32 {
    VALID | ((depth as u32) << DEPTH_SHIFT) | nh
}

#[inline(always)]
const fn depth_of(e: u32) -> u8 {
    ((e & DEPTH_MASK) >> DEPTH_SHIFT) as u8
}

#[inline(always)]
const fn mask(depth: u8) -> u32 {
    if depth == 0 {
        0
    } else {
        u32::MAX << (32 - depth as u32)
    }
}

/// An IPv4 prefix: address and length. For an interface address the host bits are kept
/// (`10.0.0.1/24`); for a route they must be zero.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub struct Ipv4Net {
    /// The address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0..=32.
    pub len: u8,
}

impl Ipv4Net {
    /// `addr/len`; `None` if `len > 32`.
    pub const fn new(addr: Ipv4Addr, len: u8) -> Option<Ipv4Net> {
        if len > 32 {
            None
        } else {
            Some(Ipv4Net { addr, len })
        }
    }

    /// The network mask as a host-order `u32`.
    pub const fn mask(self) -> u32 {
        mask(self.len)
    }

    /// The network address (host bits cleared).
    pub const fn network(self) -> Ipv4Net {
        Ipv4Net {
            addr: Ipv4Addr::from_bits(self.addr.to_bits() & mask(self.len)),
            len: self.len,
        }
    }

    /// The directed broadcast address of the network (all host bits set).
    pub const fn broadcast(self) -> Ipv4Addr {
        Ipv4Addr::from_bits(self.addr.to_bits() | !mask(self.len))
    }

    /// Whether `ip` is inside this prefix.
    pub const fn contains(self, ip: Ipv4Addr) -> bool {
        (ip.to_bits() ^ self.addr.to_bits()) & mask(self.len) == 0
    }
}

impl core::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Where a route leads.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum NextHop {
    /// Addressed to this router (an interface address): delivered to the host (management).
    Local,
    /// The directed broadcast address of a connected network: not forwarded (RFC 2644).
    Broadcast,
    /// A connected network: the destination itself is resolved on `port`.
    Connected {
        /// Output port.
        port: u8,
    },
    /// Through a gateway on a connected network of `port`.
    Via {
        /// Output port.
        port: u8,
        /// The gateway, resolved with ARP on `port`.
        gateway: Ipv4Addr,
    },
}

/// One slot of the rule table (caller-provided storage; start from [`RuleSlot::EMPTY`]).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RuleSlot {
    prefix: u32,
    depth: u8,
    nh: u32,
}

impl RuleSlot {
    /// An unused slot.
    pub const EMPTY: RuleSlot = RuleSlot {
        prefix: 0,
        depth: EMPTY_DEPTH,
        nh: 0,
    };
}

const EMPTY_DEPTH: u8 = 0xff;

/// Why a FIB operation failed.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum FibError {
    /// `tbl24` is not [`TBL24_LEN`] entries, `tbl8` not a multiple of [`TBL8_GROUP_LEN`] (or
    /// more than 2^24 − 1 groups), or the rule table not a non-zero power of two.
    BadStorage,
    /// Prefix length above 32.
    BadPrefixLen,
    /// The prefix has bits set past its length.
    HostBitsSet,
    /// The rule table is 7/8 full.
    RulesFull,
    /// No free tbl8 group.
    Tbl8Full,
    /// [`MAX_NEXTHOPS`] distinct next hops are in use.
    NextHopsFull,
    /// No such route (delete).
    NotFound,
}

impl core::fmt::Display for FibError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FibError::BadStorage => "bad FIB storage size",
            FibError::BadPrefixLen => "prefix length above 32",
            FibError::HostBitsSet => "prefix has host bits set",
            FibError::RulesFull => "route table full",
            FibError::Tbl8Full => "no free tbl8 group (too many routes longer than /24)",
            FibError::NextHopsFull => "too many distinct next hops",
            FibError::NotFound => "no such route",
        })
    }
}

/// The FIB. See the module documentation.
pub struct Fib<'a> {
    tbl24: &'a mut [u32],
    tbl8: &'a mut [u32],
    tbl8_free: u32,
    tbl8_used: usize,
    rules: &'a mut [RuleSlot],
    rules_used: usize,
    nexthops: [NextHop; MAX_NEXTHOPS],
    nh_refs: [u32; MAX_NEXTHOPS],
}

impl<'a> Fib<'a> {
    /// Build an empty FIB on caller storage, clearing it (the memory need not be zeroed).
    pub fn new(
        tbl24: &'a mut [u32],
        tbl8: &'a mut [u32],
        rules: &'a mut [RuleSlot],
    ) -> Result<Fib<'a>, FibError> {
        let groups = tbl8.len() / TBL8_GROUP_LEN;
        if tbl24.len() != TBL24_LEN
            || !tbl8.len().is_multiple_of(TBL8_GROUP_LEN)
            || groups >= NO_GROUP as usize
            || !rules.len().is_power_of_two()
        {
            return Err(FibError::BadStorage);
        }
        tbl24.fill(0);
        tbl8.fill(0);
        // Free groups are chained through their first entry (IN_USE clear).
        for g in 0..groups {
            tbl8[g * TBL8_GROUP_LEN] = if g + 1 < groups {
                (g + 1) as u32
            } else {
                NO_GROUP
            };
        }
        rules.fill(RuleSlot::EMPTY);
        Ok(Fib {
            tbl24,
            tbl8,
            tbl8_free: if groups > 0 { 0 } else { NO_GROUP },
            tbl8_used: 0,
            rules,
            rules_used: 0,
            nexthops: [NextHop::Local; MAX_NEXTHOPS],
            nh_refs: [0; MAX_NEXTHOPS],
        })
    }

    /// Longest-prefix match: the next hop of the longest route containing `dst`.
    #[inline(always)]
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<NextHop> {
        self.lookup_index(dst.to_bits())
            .map(|i| self.nexthops[i as usize])
    }

    /// Longest-prefix match returning the next-hop index (see [`Fib::next_hop`]).
    #[inline(always)]
    pub fn lookup_index(&self, dst: u32) -> Option<u32> {
        let mut e = self.tbl24[(dst >> 8) as usize];
        if e & EXT != 0 {
            let g = (e & VALUE_MASK) as usize;
            e = self.tbl8[g * TBL8_GROUP_LEN + (dst & 0xff) as usize];
        }
        (e & VALID != 0).then_some(e & VALUE_MASK)
    }

    /// The next hop stored under an index returned by [`Fib::lookup_index`].
    #[inline(always)]
    pub fn next_hop(&self, index: u32) -> NextHop {
        self.nexthops[index as usize]
    }

    /// Routes installed.
    pub fn len(&self) -> usize {
        self.rules_used
    }

    /// Whether no route is installed.
    pub fn is_empty(&self) -> bool {
        self.rules_used == 0
    }

    /// tbl8 groups in use and in total.
    pub fn tbl8_usage(&self) -> (usize, usize) {
        (self.tbl8_used, self.tbl8.len() / TBL8_GROUP_LEN)
    }

    /// Every route, in rule-table order (unsorted).
    pub fn routes(&self) -> impl Iterator<Item = (Ipv4Net, NextHop)> + '_ {
        self.rules
            .iter()
            .filter(|r| r.depth != EMPTY_DEPTH)
            .map(|r| {
                (
                    Ipv4Net {
                        addr: Ipv4Addr::from_bits(r.prefix),
                        len: r.depth,
                    },
                    self.nexthops[r.nh as usize],
                )
            })
    }

    /// The exact route `prefix`, if installed.
    pub fn get(&self, prefix: Ipv4Net) -> Option<NextHop> {
        if prefix.len > 32 {
            return None;
        }
        self.rule_find(prefix.addr.to_bits() & mask(prefix.len), prefix.len)
            .map(|i| self.nexthops[self.rules[i].nh as usize])
    }

    /// Add `prefix → nh`, replacing the next hop of an existing route with the same prefix.
    pub fn add(&mut self, prefix: Ipv4Net, nh: NextHop) -> Result<(), FibError> {
        let (ip, depth) = check_prefix(prefix)?;
        let existing = self.rule_find(ip, depth);
        if existing.is_none() && (self.rules_used + 1) * 8 > self.rules.len() * 7 {
            return Err(FibError::RulesFull);
        }
        let nh_idx = self.nh_get(nh)?;
        // A rule longer than /24 needs a tbl8 group under its /24: allocate it before changing
        // anything, so that a failure leaves the FIB as it was.
        if depth > 24 {
            let i = (ip >> 8) as usize;
            if self.tbl24[i] & EXT == 0 {
                let Some(g) = self.tbl8_alloc() else {
                    self.nh_put(nh_idx);
                    return Err(FibError::Tbl8Full);
                };
                let fill = IN_USE | self.tbl24[i];
                let base = g as usize * TBL8_GROUP_LEN;
                self.tbl8[base..base + TBL8_GROUP_LEN].fill(fill);
                self.tbl24[i] = EXT | g;
            }
        }
        match existing {
            Some(slot) => {
                let old = self.rules[slot].nh;
                self.rules[slot].nh = nh_idx;
                self.nh_put(old);
            }
            None => self.rule_insert(ip, depth, nh_idx),
        }
        self.write_range(ip, depth, leaf(nh_idx, depth), true);
        Ok(())
    }

    /// Delete the route `prefix`; addresses under it fall back to the longest shorter route.
    pub fn delete(&mut self, prefix: Ipv4Net) -> Result<(), FibError> {
        let (ip, depth) = check_prefix(prefix)?;
        let slot = self.rule_find(ip, depth).ok_or(FibError::NotFound)?;
        let nh_idx = self.rules[slot].nh;
        self.rule_remove(slot);
        self.nh_put(nh_idx);
        let replacement = (0..depth)
            .rev()
            .find_map(|d| {
                self.rule_find(ip & mask(d), d)
                    .map(|s| leaf(self.rules[s].nh, d))
            })
            .unwrap_or(0);
        self.write_range(ip, depth, replacement, false);
        Ok(())
    }

    /// Write `value` into every entry under `ip/depth` that the rule of that depth owns:
    /// when adding, entries empty or set by a rule of depth ≤ `depth`; when deleting, entries
    /// set by a rule of exactly `depth`. Descends into tbl8 groups, then folds back groups
    /// that became uniform.
    fn write_range(&mut self, ip: u32, depth: u8, value: u32, adding: bool) {
        #[inline(always)]
        fn owned(e: u32, depth: u8, adding: bool) -> bool {
            if adding {
                e & VALID == 0 || depth_of(e) <= depth
            } else {
                e & VALID != 0 && depth_of(e) == depth
            }
        }
        if depth <= 24 {
            let start = (ip >> 8) as usize;
            let count = 1usize << (24 - depth);
            let mut ext_seen = false;
            for e in &mut self.tbl24[start..start + count] {
                if *e & EXT != 0 {
                    ext_seen = true;
                } else if owned(*e, depth, adding) {
                    *e = value;
                }
            }
            if !ext_seen {
                return;
            }
            for i in start..start + count {
                let e = self.tbl24[i];
                if e & EXT != 0 {
                    let base = (e & VALUE_MASK) as usize * TBL8_GROUP_LEN;
                    for t in &mut self.tbl8[base..base + TBL8_GROUP_LEN] {
                        if owned(*t & !IN_USE, depth, adding) {
                            *t = IN_USE | value;
                        }
                    }
                    self.tbl8_fold(i);
                }
            }
        } else {
            let i = (ip >> 8) as usize;
            let e = self.tbl24[i];
            debug_assert!(
                e & EXT != 0,
                "a rule longer than /24 without its tbl8 group"
            );
            if e & EXT == 0 {
                return;
            }
            let base = (e & VALUE_MASK) as usize * TBL8_GROUP_LEN;
            let start = base + (ip & 0xff) as usize;
            let count = 1usize << (32 - depth);
            for t in &mut self.tbl8[start..start + count] {
                if owned(*t & !IN_USE, depth, adding) {
                    *t = IN_USE | value;
                }
            }
            self.tbl8_fold(i);
        }
    }

    /// If the group under tbl24 entry `i` holds 256 equal entries set by rules of depth ≤ 24
    /// (or none), put that entry back into tbl24 and free the group.
    fn tbl8_fold(&mut self, i: usize) {
        let e = self.tbl24[i];
        if e & EXT == 0 {
            return;
        }
        let g = e & VALUE_MASK;
        let base = g as usize * TBL8_GROUP_LEN;
        let group = &self.tbl8[base..base + TBL8_GROUP_LEN];
        let first = group[0];
        if (first & VALID != 0 && depth_of(first) > 24) || group.iter().any(|&t| t != first) {
            return;
        }
        self.tbl24[i] = first & !IN_USE;
        self.tbl8[base..base + TBL8_GROUP_LEN].fill(0);
        self.tbl8[base] = self.tbl8_free;
        self.tbl8_free = g;
        self.tbl8_used -= 1;
    }

    fn tbl8_alloc(&mut self) -> Option<u32> {
        let g = self.tbl8_free;
        if g == NO_GROUP {
            return None;
        }
        self.tbl8_free = self.tbl8[g as usize * TBL8_GROUP_LEN];
        self.tbl8_used += 1;
        Some(g)
    }

    fn nh_get(&mut self, nh: NextHop) -> Result<u32, FibError> {
        let mut free = None;
        for i in 0..MAX_NEXTHOPS {
            if self.nh_refs[i] > 0 && self.nexthops[i] == nh {
                self.nh_refs[i] += 1;
                return Ok(i as u32);
            }
            if free.is_none() && self.nh_refs[i] == 0 {
                free = Some(i);
            }
        }
        let i = free.ok_or(FibError::NextHopsFull)?;
        self.nexthops[i] = nh;
        self.nh_refs[i] = 1;
        Ok(i as u32)
    }

    fn nh_put(&mut self, i: u32) {
        self.nh_refs[i as usize] -= 1;
    }

    fn rule_hash(&self, ip: u32, depth: u8) -> usize {
        let k = (u64::from(ip) << 8 | u64::from(depth)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (k >> 32) as usize & (self.rules.len() - 1)
    }

    fn rule_find(&self, ip: u32, depth: u8) -> Option<usize> {
        let m = self.rules.len() - 1;
        let mut i = self.rule_hash(ip, depth);
        loop {
            let r = self.rules[i];
            if r.depth == EMPTY_DEPTH {
                return None;
            }
            if r.depth == depth && r.prefix == ip {
                return Some(i);
            }
            i = (i + 1) & m;
        }
    }

    fn rule_insert(&mut self, ip: u32, depth: u8, nh: u32) {
        let m = self.rules.len() - 1;
        let mut i = self.rule_hash(ip, depth);
        while self.rules[i].depth != EMPTY_DEPTH {
            i = (i + 1) & m;
        }
        self.rules[i] = RuleSlot {
            prefix: ip,
            depth,
            nh,
        };
        self.rules_used += 1;
    }

    /// Linear-probing deletion by backward shift (no tombstones).
    fn rule_remove(&mut self, mut hole: usize) {
        let m = self.rules.len() - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & m;
            let r = self.rules[j];
            if r.depth == EMPTY_DEPTH {
                break;
            }
            let home = self.rule_hash(r.prefix, r.depth);
            // Move r into the hole if its home is not cyclically in (hole, j].
            let in_range = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !in_range {
                self.rules[hole] = r;
                hole = j;
            }
        }
        self.rules[hole] = RuleSlot::EMPTY;
        self.rules_used -= 1;
    }
}

fn check_prefix(p: Ipv4Net) -> Result<(u32, u8), FibError> {
    if p.len > 32 {
        return Err(FibError::BadPrefixLen);
    }
    let ip = p.addr.to_bits();
    if ip & !mask(p.len) != 0 {
        return Err(FibError::HostBitsSet);
    }
    Ok((ip, p.len))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    /// Storage for a test FIB (tbl24 is 64 MiB; the pages are only touched by `Fib::new`).
    pub(crate) struct Store {
        tbl24: Vec<u32>,
        tbl8: Vec<u32>,
        rules: Vec<RuleSlot>,
    }

    impl Store {
        pub(crate) fn new(groups: usize, rules: usize) -> Store {
            Store {
                tbl24: vec![0; TBL24_LEN],
                tbl8: vec![0; groups * TBL8_GROUP_LEN],
                rules: vec![RuleSlot::EMPTY; rules],
            }
        }
        pub(crate) fn fib(&mut self) -> Fib<'_> {
            Fib::new(&mut self.tbl24, &mut self.tbl8, &mut self.rules).unwrap()
        }
    }

    /// Leaked storage, for a `Fib<'static>` (what the kernel has).
    pub(crate) fn leaked_fib(groups: usize, rules: usize) -> Fib<'static> {
        let s = Store::new(groups, rules);
        Fib::new(s.tbl24.leak(), s.tbl8.leak(), s.rules.leak()).unwrap()
    }

    fn net(a: u32, len: u8) -> Ipv4Net {
        Ipv4Net::new(Ipv4Addr::from_bits(a & mask(len)), len).unwrap()
    }

    fn via(n: u32) -> NextHop {
        NextHop::Via {
            port: (n % 4) as u8,
            gateway: Ipv4Addr::from_bits(0x0a00_0000 + n),
        }
    }

    /// The model: a list of routes, longest match by linear scan.
    #[derive(Default)]
    struct Model(Vec<(u32, u8, NextHop)>);

    impl Model {
        fn add(&mut self, ip: u32, len: u8, nh: NextHop) {
            match self.0.iter_mut().find(|r| r.0 == ip && r.1 == len) {
                Some(r) => r.2 = nh,
                None => self.0.push((ip, len, nh)),
            }
        }
        fn delete(&mut self, ip: u32, len: u8) -> bool {
            let n = self.0.len();
            self.0.retain(|r| !(r.0 == ip && r.1 == len));
            n != self.0.len()
        }
        fn lookup(&self, dst: u32) -> Option<NextHop> {
            self.0
                .iter()
                .filter(|r| (dst ^ r.0) & mask(r.1) == 0)
                .max_by_key(|r| r.1)
                .map(|r| r.2)
        }
    }

    #[test]
    fn basic_lpm() {
        let mut s = Store::new(16, 64);
        let mut f = s.fib();
        assert_eq!(f.lookup(Ipv4Addr::new(10, 0, 0, 1)), None);
        f.add(net(0, 0), via(1)).unwrap();
        f.add(net(0x0a00_0000, 8), via(2)).unwrap();
        f.add(net(0x0a00_0100, 24), via(3)).unwrap();
        f.add(net(0x0a00_0180, 25), via(4)).unwrap();
        f.add(net(0x0a00_0181, 32), via(5)).unwrap();
        let l = |f: &Fib, a: [u8; 4]| f.lookup(Ipv4Addr::from(a));
        assert_eq!(l(&f, [1, 2, 3, 4]), Some(via(1)));
        assert_eq!(l(&f, [10, 9, 9, 9]), Some(via(2)));
        assert_eq!(l(&f, [10, 0, 1, 0]), Some(via(3)));
        assert_eq!(l(&f, [10, 0, 1, 127]), Some(via(3)));
        assert_eq!(l(&f, [10, 0, 1, 128]), Some(via(4)));
        assert_eq!(l(&f, [10, 0, 1, 129]), Some(via(5)));
        assert_eq!(l(&f, [10, 0, 1, 130]), Some(via(4)));
        assert_eq!(l(&f, [10, 0, 2, 0]), Some(via(2)));
        assert_eq!(f.tbl8_usage().0, 1);
        // Deleting the /25 and /32 folds the group back.
        f.delete(net(0x0a00_0181, 32)).unwrap();
        assert_eq!(l(&f, [10, 0, 1, 129]), Some(via(4)));
        f.delete(net(0x0a00_0180, 25)).unwrap();
        assert_eq!(l(&f, [10, 0, 1, 129]), Some(via(3)));
        assert_eq!(f.tbl8_usage().0, 0);
        assert_eq!(f.delete(net(0x0a00_0180, 25)), Err(FibError::NotFound));
        f.delete(net(0, 0)).unwrap();
        assert_eq!(l(&f, [1, 2, 3, 4]), None);
        assert_eq!(f.len(), 2);
        assert_eq!(
            f.add(
                Ipv4Net::new(Ipv4Addr::new(10, 0, 0, 1), 24).unwrap(),
                via(1)
            ),
            Err(FibError::HostBitsSet)
        );
    }

    #[test]
    fn limits_leave_fib_unchanged() {
        let mut s = Store::new(1, 8);
        let mut f = s.fib();
        f.add(net(0x0a00_0001, 32), via(1)).unwrap();
        assert_eq!(f.add(net(0x0b00_0001, 32), via(2)), Err(FibError::Tbl8Full));
        assert_eq!(f.lookup(Ipv4Addr::new(11, 0, 0, 1)), None);
        for i in 0..6 {
            f.add(net(0x0c00_0000 + (i << 8), 24), via(3)).unwrap();
        }
        assert_eq!(
            f.add(net(0x0d00_0000, 24), via(3)),
            Err(FibError::RulesFull)
        );
        assert_eq!(f.len(), 7);
        // Replacing an existing route needs no new slot.
        f.add(net(0x0c00_0000, 24), via(4)).unwrap();
        assert_eq!(f.lookup(Ipv4Addr::new(12, 0, 0, 9)), Some(via(4)));
        let mut s = Store::new(1, 1024);
        let mut f = s.fib();
        for i in 0..MAX_NEXTHOPS as u32 {
            f.add(net(i << 8, 24), via(i)).unwrap();
        }
        assert_eq!(
            f.add(net(0x0100_0000, 24), via(9999)),
            Err(FibError::NextHopsFull)
        );
        // Replacing the only user of a next hop frees it.
        f.add(net(0, 24), via(1)).unwrap();
        f.add(net(0x0100_0000, 24), via(9999)).unwrap();
    }

    #[test]
    fn static_lifetime_storage() {
        let mut f = leaked_fib(4, 16);
        f.add(net(0, 0), NextHop::Connected { port: 1 }).unwrap();
        assert_eq!(
            f.lookup(Ipv4Addr::new(8, 8, 8, 8)),
            Some(NextHop::Connected { port: 1 })
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(u32, u8, u32),
        Del(u32, u8),
        /// Delete the k-th live route of the model.
        DelLive(usize),
    }

    fn prefix_len() -> impl Strategy<Value = u8> {
        // Weight the DIR-24-8 boundaries: /0, /8, /23, /24, /25, /31, /32. Prefixes shorter
        // than /8 rewrite 2^17..2^24 tbl24 entries each (slow in a debug build), so they are
        // rarer than the rest.
        prop_oneof![
            16 => 8u8..=32,
            1 => Just(0u8),
            1 => 1u8..8,
            4 => Just(24u8),
            4 => Just(25u8),
            4 => Just(32u8),
            4 => prop::sample::select(vec![8u8, 16, 23, 31]),
        ]
    }

    fn addr() -> impl Strategy<Value = u32> {
        // A few clusters, so that routes overlap often.
        prop_oneof![
            any::<u32>(),
            (0u32..4, any::<u16>()).prop_map(|(c, lo)| 0x0a00_0000 | (c << 16) | u32::from(lo)),
            (0u32..2, any::<u8>()).prop_map(|(c, lo)| 0xc0a8_0000 | (c << 8) | u32::from(lo)),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (addr(), prefix_len(), 0u32..8).prop_map(|(a, l, n)| Op::Add(a & mask(l), l, n)),
            1 => (addr(), prefix_len()).prop_map(|(a, l)| Op::Del(a & mask(l), l)),
            2 => any::<usize>().prop_map(Op::DelLive),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::router::tests::cases(16)))]

        /// DIR-24-8 agrees with a linear-scan LPM after random adds and deletes, on random
        /// addresses and on the first, last, first − 1 and last + 1 address of every prefix
        /// ever added. After deleting everything, the FIB is empty and every tbl8 group free.
        #[test]
        fn matches_linear_model(
            ops in prop::collection::vec(op(), 1..120),
            probes in prop::collection::vec(addr(), 64),
        ) {
            // One FIB for every case: each case ends by deleting every route and checking that
            // nothing is left, so the next case starts from a FIB emptied by deletes (a stronger
            // start than a fresh one, and it avoids clearing 64 MiB per case in a debug build).
            // A case that failed half-way leaves routes behind: start again from a new FIB.
            std::thread_local! {
                static FIB: core::cell::RefCell<Fib<'static>> =
                    core::cell::RefCell::new(leaked_fib(64, 512));
            }
            FIB.with(|cell| {
                if !cell.borrow().is_empty() {
                    *cell.borrow_mut() = leaked_fib(64, 512);
                }
            });
            FIB.with(|cell| -> Result<(), TestCaseError> {
            let f = &mut *cell.borrow_mut();
            let mut m = Model::default();
            let mut edges = Vec::new();
            for o in &ops {
                match *o {
                    Op::Add(a, l, n) => {
                        match f.add(net(a, l), via(n)) {
                            Ok(()) => m.add(a, l, via(n)),
                            Err(FibError::Tbl8Full) => {}
                            Err(e) => prop_assert!(false, "add {a:#x}/{l}: {e}"),
                        }
                        let last = a | !mask(l);
                        edges.extend([a, last, a.wrapping_sub(1), last.wrapping_add(1)]);
                    }
                    Op::Del(a, l) => {
                        let r = f.delete(net(a, l));
                        prop_assert_eq!(r.is_ok(), m.delete(a, l));
                    }
                    Op::DelLive(k) => {
                        if !m.0.is_empty() {
                            let (a, l, _) = m.0[k % m.0.len()];
                            prop_assert_eq!(f.delete(net(a, l)), Ok(()));
                            prop_assert!(m.delete(a, l));
                        }
                    }
                }
                prop_assert_eq!(f.len(), m.0.len());
            }
            for &d in probes.iter().chain(edges.iter()) {
                prop_assert_eq!(f.lookup(Ipv4Addr::from_bits(d)), m.lookup(d), "dst {:#x}", d);
            }
            let mut listed: Vec<_> = f.routes().map(|(n, h)| (n.addr.to_bits(), n.len, h)).collect();
            let mut want = m.0.clone();
            listed.sort_by_key(|r| (r.0, r.1));
            want.sort_by_key(|r| (r.0, r.1));
            prop_assert_eq!(listed, want);
            for (a, l, _) in m.0.clone() {
                f.delete(net(a, l)).unwrap();
            }
            prop_assert!(f.is_empty());
            prop_assert_eq!(f.tbl8_usage().0, 0);
            for &d in probes.iter().chain(edges.iter()) {
                prop_assert_eq!(f.lookup(Ipv4Addr::from_bits(d)), None);
            }
            Ok(())
            })?;
        }
    }
}
