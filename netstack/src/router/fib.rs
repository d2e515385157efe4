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
//! filled to at most 7/8. Host tests pass leaked or borrowed `Vec`s. tbl24 entries are
//! `AtomicU32` read and written with `Relaxed` (a plain `mov` on x86, so the lookup costs what a
//! `u32` load costs): that lets the same type index a table that is mapped read-only.
//!
//! # Two ways to build
//!
//! * **Dense** ([`Fib::new`]): a writable 2^24-entry tbl24; [`Fib::add`] and [`Fib::delete`]
//!   update it incrementally (rte_lpm).
//! * **Sparse, chunk by chunk** ([`Fib::new_sparse`]): add and delete touch only the rule table;
//!   [`Fib::seal`] sorts the rules by (prefix, length) and checks that the tbl8 groups suffice;
//!   [`Fib::fill_chunk`] then produces tbl24 one [`TBL24_CHUNK_LEN`]-entry chunk (4 KiB, one /14
//!   of address space) at a time, in order, allocating tbl8 groups on the way, and tells the
//!   caller whether the chunk is uniform (every entry the same value). The kernel maps a
//!   uniform chunk to one shared read-only page per value and a mixed one to its own page, so
//!   tbl24 costs memory where routes differ, not 64 MiB; [`Fib::attach_tbl24`] gives the FIB
//!   the resulting flat 2^24-entry view. Lookups are the same code in both. A sealed FIB is
//!   read-only ([`FibError::ReadOnly`]): route changes build a new one.
//!
//! Past ~800 lines because about 500 of them are its tests (inline, beside the private entry
//! encoding they check); the structure itself, dense and sparse build, is one concern.

use core::net::Ipv4Addr;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// Entries in `tbl24`.
pub const TBL24_LEN: usize = 1 << 24;
/// Entries in one `tbl8` group.
pub const TBL8_GROUP_LEN: usize = 256;
/// Entries in one tbl24 chunk: one 4 KiB page of `u32`s, the tbl24 entries (/24s) of one /14.
pub const TBL24_CHUNK_LEN: usize = 1024;
/// Chunks in tbl24 (16,384: 64 MiB / 4 KiB).
pub const TBL24_CHUNKS: usize = TBL24_LEN / TBL24_CHUNK_LEN;
/// Prefix length of the address range one tbl24 chunk covers.
const CHUNK_DEPTH: u8 = 14;
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
    /// The FIB is sealed (sparse build done): it is read-only, build a new one to change routes.
    ReadOnly,
    /// A sparse-build step out of order: [`Fib::seal`] before [`Fib::fill_chunk`], chunks
    /// 0, 1, … [`TBL24_CHUNKS`] − 1 in order, all of them before [`Fib::attach_tbl24`].
    BuildOrder,
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
            FibError::ReadOnly => "the FIB is sealed (read-only)",
            FibError::BuildOrder => "sparse FIB build steps out of order",
        })
    }
}

/// How a FIB is built (see the module documentation).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
enum Mode {
    /// Writable dense tbl24, incremental add/delete.
    Dense,
    /// Sparse build, collecting rules (no tbl24 yet; add/delete touch the rule table only).
    Rules,
    /// Sparse build, sorting the rules ([`Fib::seal_step`]): read-only, no lookups.
    Sealing(SealCursor),
    /// Rules sorted by (prefix, length), read-only; tbl24 produced by `fill_chunk`.
    Sealed,
}

/// Where a resumable [`Fib::seal_step`] stands.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
enum SealCursor {
    /// Moving used slots to the front: next slot to read, next to write.
    Compact { read: usize, write: usize },
    /// Building the max-heap over the used rules: nodes below this one are heaps.
    Heapify(usize),
    /// Moving the heap's maximum to the end: the heap is `rules[..end]`.
    Extract(usize),
    /// Reading the sorted rules from `next` on: the depths seen, and the /24s holding rules
    /// longer than /24 (tbl8 groups needed; `last` the latest such /24).
    Finish {
        next: usize,
        depths: u64,
        groups: usize,
        last: Option<u32>,
    },
}

/// The sealed rule table's order: by prefix, then length.
fn rule_key(r: &RuleSlot) -> (u32, u8) {
    (r.prefix, r.depth)
}

/// Restore the max-heap property (by [`rule_key`]) below node `i` of `heap`.
fn sift_down(heap: &mut [RuleSlot], mut i: usize) {
    let n = heap.len();
    loop {
        let l = 2 * i + 1;
        if l >= n {
            return;
        }
        let c = if l + 1 < n && rule_key(&heap[l + 1]) > rule_key(&heap[l]) {
            l + 1
        } else {
            l
        };
        if rule_key(&heap[c]) <= rule_key(&heap[i]) {
            return;
        }
        heap.swap(i, c);
        i = c;
    }
}

/// What [`Fib::fill_chunk`] found in one tbl24 chunk.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Tbl24Chunk {
    /// All [`TBL24_CHUNK_LEN`] entries are this value (the output buffer may be left as it
    /// was): the chunk can map a shared page filled with it.
    Uniform(u32),
    /// The output buffer holds the chunk's entries, not all equal.
    Mixed,
}

/// Counts of a sparse build, for the boot log.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct SparseStats {
    /// Chunks filled so far.
    pub chunks: usize,
    /// Of those, uniform ones.
    pub uniform: usize,
}

/// The FIB. See the module documentation.
pub struct Fib<'a> {
    tbl24: &'a [AtomicU32],
    tbl8: &'a mut [u32],
    tbl8_free: u32,
    tbl8_used: usize,
    rules: &'a mut [RuleSlot],
    rules_used: usize,
    nexthops: [NextHop; MAX_NEXTHOPS],
    nh_refs: [u32; MAX_NEXTHOPS],
    mode: Mode,
    /// Sealed: bit `d` set if some rule has length `d`.
    depths: u64,
    /// Sealed: the next chunk `fill_chunk` expects and the first sorted rule not yet consumed.
    next_chunk: usize,
    rule_cursor: usize,
    sparse: SparseStats,
}

impl<'a> Fib<'a> {
    /// Build an empty dense FIB on caller storage, clearing it (the memory need not be zeroed).
    pub fn new(
        tbl24: &'a mut [AtomicU32],
        tbl8: &'a mut [u32],
        rules: &'a mut [RuleSlot],
    ) -> Result<Fib<'a>, FibError> {
        if tbl24.len() != TBL24_LEN {
            return Err(FibError::BadStorage);
        }
        for e in tbl24.iter_mut() {
            *e.get_mut() = 0;
        }
        tbl8.fill(0);
        rules.fill(RuleSlot::EMPTY);
        Self::with_mode(tbl24, tbl8, rules, Mode::Dense)
    }

    /// Start a sparse build on caller storage (cleared here): routes go to the rule table
    /// only, until [`Fib::seal`]; then [`Fib::fill_chunk`] produces tbl24 and
    /// [`Fib::attach_tbl24`] installs it. Lookups before that panic (no tbl24).
    pub fn new_sparse(tbl8: &'a mut [u32], rules: &'a mut [RuleSlot]) -> Result<Fib<'a>, FibError> {
        tbl8.fill(0);
        rules.fill(RuleSlot::EMPTY);
        Self::with_mode(&[], tbl8, rules, Mode::Rules)
    }

    /// [`Fib::new_sparse`] on storage the caller prepared a bounded step at a time: `tbl8` all
    /// zero (fresh zeroed pages) and every rule slot [`RuleSlot::EMPTY`]
    /// (`fib_build::clear_rules`). Only chains the free tbl8 groups (one write
    /// per group). Debug builds check the preparation.
    ///
    /// # Errors
    /// As [`Fib::new_sparse`].
    pub fn new_sparse_prepared(
        tbl8: &'a mut [u32],
        rules: &'a mut [RuleSlot],
    ) -> Result<Fib<'a>, FibError> {
        debug_assert!(tbl8.iter().all(|&e| e == 0), "tbl8 not zeroed");
        debug_assert!(
            rules.iter().all(|r| *r == RuleSlot::EMPTY),
            "rules not cleared"
        );
        Self::with_mode(&[], tbl8, rules, Mode::Rules)
    }

    fn with_mode(
        tbl24: &'a [AtomicU32],
        tbl8: &'a mut [u32],
        rules: &'a mut [RuleSlot],
        mode: Mode,
    ) -> Result<Fib<'a>, FibError> {
        let groups = tbl8.len() / TBL8_GROUP_LEN;
        if !tbl8.len().is_multiple_of(TBL8_GROUP_LEN)
            || groups >= NO_GROUP as usize
            || !rules.len().is_power_of_two()
        {
            return Err(FibError::BadStorage);
        }
        // Free groups are chained through their first entry (IN_USE clear).
        for g in 0..groups {
            tbl8[g * TBL8_GROUP_LEN] = if g + 1 < groups {
                (g + 1) as u32
            } else {
                NO_GROUP
            };
        }
        Ok(Fib {
            tbl24,
            tbl8,
            tbl8_free: if groups > 0 { 0 } else { NO_GROUP },
            tbl8_used: 0,
            rules,
            rules_used: 0,
            nexthops: [NextHop::Local; MAX_NEXTHOPS],
            nh_refs: [0; MAX_NEXTHOPS],
            mode,
            depths: 0,
            next_chunk: 0,
            rule_cursor: 0,
            sparse: SparseStats::default(),
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
        let mut e = self.tbl24[(dst >> 8) as usize].load(Relaxed);
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
    /// In a sparse build before [`Fib::seal`], only the rule table changes; a sealed FIB
    /// refuses ([`FibError::ReadOnly`]).
    pub fn add(&mut self, prefix: Ipv4Net, nh: NextHop) -> Result<(), FibError> {
        if matches!(self.mode, Mode::Sealed | Mode::Sealing(_)) {
            return Err(FibError::ReadOnly);
        }
        let (ip, depth) = check_prefix(prefix)?;
        let existing = self.rule_find(ip, depth);
        if existing.is_none() && (self.rules_used + 1) * 8 > self.rules.len() * 7 {
            return Err(FibError::RulesFull);
        }
        let nh_idx = self.nh_get(nh)?;
        // A rule longer than /24 needs a tbl8 group under its /24: allocate it before changing
        // anything, so that a failure leaves the FIB as it was.
        if depth > 24 && self.mode == Mode::Dense {
            let i = (ip >> 8) as usize;
            let e = self.tbl24[i].load(Relaxed);
            if e & EXT == 0 {
                let Some(g) = self.tbl8_alloc() else {
                    self.nh_put(nh_idx);
                    return Err(FibError::Tbl8Full);
                };
                let base = g as usize * TBL8_GROUP_LEN;
                self.tbl8[base..base + TBL8_GROUP_LEN].fill(IN_USE | e);
                self.tbl24[i].store(EXT | g, Relaxed);
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
        if self.mode == Mode::Dense {
            self.write_range(ip, depth, leaf(nh_idx, depth), true);
        }
        Ok(())
    }

    /// Delete the route `prefix`; addresses under it fall back to the longest shorter route.
    /// Like [`Fib::add`], only the rule table changes in a sparse build before [`Fib::seal`].
    pub fn delete(&mut self, prefix: Ipv4Net) -> Result<(), FibError> {
        if matches!(self.mode, Mode::Sealed | Mode::Sealing(_)) {
            return Err(FibError::ReadOnly);
        }
        let (ip, depth) = check_prefix(prefix)?;
        let slot = self.rule_find(ip, depth).ok_or(FibError::NotFound)?;
        let nh_idx = self.rules[slot].nh;
        self.rule_remove(slot);
        self.nh_put(nh_idx);
        if self.mode != Mode::Dense {
            return Ok(());
        }
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
            for e in &self.tbl24[start..start + count] {
                let v = e.load(Relaxed);
                if v & EXT != 0 {
                    ext_seen = true;
                } else if owned(v, depth, adding) {
                    e.store(value, Relaxed);
                }
            }
            if !ext_seen {
                return;
            }
            for i in start..start + count {
                let e = self.tbl24[i].load(Relaxed);
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
            let e = self.tbl24[i].load(Relaxed);
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
        let e = self.tbl24[i].load(Relaxed);
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
        self.tbl24[i].store(first & !IN_USE, Relaxed);
        self.tbl8[base..base + TBL8_GROUP_LEN].fill(0);
        self.tbl8[base] = self.tbl8_free;
        self.tbl8_free = g;
        self.tbl8_used -= 1;
    }

    /// Sparse build: end the rule phase in one call ([`Fib::seal_step`] until done). Sorts
    /// the rule table by (prefix, length) (lookups of [`Fib::get`] become binary searches)
    /// and checks that tbl8 has a group for every /24 holding a rule longer than /24. After
    /// this the FIB is read-only.
    ///
    /// # Errors
    /// As [`Fib::seal_step`].
    pub fn seal(&mut self) -> Result<(), FibError> {
        while !self.seal_step(usize::MAX)? {}
        Ok(())
    }

    /// Sparse build: one bounded step of ending the rule phase, for a caller that must keep
    /// doing other work (the boot CPU keeps forwarding while a reload builds). Does at most
    /// `budget` units of work (a unit: one rule-table slot moved, one heap sift-down of
    /// O(log rules) compares, or one sorted rule read for its depth and tbl8 group) and returns
    /// `Ok(true)` once the FIB is sealed. The rule table is
    /// compacted (used slots first), then heap-sorted in place by (prefix, length) (Williams'
    /// heapsort, CACM 7(6), 1964: in place and resumable at any sift-down, unlike the standard
    /// library's sorts). From the first call the FIB refuses route changes
    /// ([`FibError::ReadOnly`]).
    ///
    /// # Errors
    /// [`FibError::BuildOrder`] if this is not a sparse build collecting or sealing rules,
    /// [`FibError::Tbl8Full`] if the groups do not suffice (the FIB then stays sealed, with
    /// only the order of the rule table changed).
    pub fn seal_step(&mut self, budget: usize) -> Result<bool, FibError> {
        let mut left = budget.max(1);
        loop {
            match self.mode {
                Mode::Rules => self.mode = Mode::Sealing(SealCursor::Compact { read: 0, write: 0 }),
                Mode::Sealing(SealCursor::Compact {
                    mut read,
                    mut write,
                }) => {
                    while read < self.rules.len() && left > 0 {
                        if self.rules[read].depth != EMPTY_DEPTH {
                            self.rules.swap(read, write);
                            write += 1;
                        }
                        read += 1;
                        left -= 1;
                    }
                    self.mode = Mode::Sealing(if read == self.rules.len() {
                        SealCursor::Heapify(self.rules_used / 2)
                    } else {
                        SealCursor::Compact { read, write }
                    });
                }
                Mode::Sealing(SealCursor::Heapify(mut i)) => {
                    let n = self.rules_used;
                    while i > 0 && left > 0 {
                        i -= 1;
                        sift_down(&mut self.rules[..n], i);
                        left -= 1;
                    }
                    self.mode = Mode::Sealing(if i == 0 {
                        SealCursor::Extract(n)
                    } else {
                        SealCursor::Heapify(i)
                    });
                }
                Mode::Sealing(SealCursor::Extract(mut end)) => {
                    while end > 1 && left > 0 {
                        end -= 1;
                        self.rules.swap(0, end);
                        sift_down(&mut self.rules[..end], 0);
                        left -= 1;
                    }
                    self.mode = Mode::Sealing(if end > 1 {
                        SealCursor::Extract(end)
                    } else {
                        SealCursor::Finish {
                            next: 0,
                            depths: 0,
                            groups: 0,
                            last: None,
                        }
                    });
                }
                Mode::Sealing(SealCursor::Finish {
                    mut next,
                    mut depths,
                    mut groups,
                    mut last,
                }) => {
                    while next < self.rules_used && left > 0 {
                        let r = self.rules[next];
                        depths |= 1 << r.depth;
                        if r.depth > 24 && last != Some(r.prefix >> 8) {
                            groups += 1;
                            last = Some(r.prefix >> 8);
                        }
                        next += 1;
                        left -= 1;
                    }
                    if next == self.rules_used {
                        return self.seal_finish(depths, groups).map(|()| true);
                    }
                    self.mode = Mode::Sealing(SealCursor::Finish {
                        next,
                        depths,
                        groups,
                        last,
                    });
                }
                Mode::Dense | Mode::Sealed => return Err(FibError::BuildOrder),
            }
            if left == 0 {
                return Ok(false);
            }
        }
    }

    /// The last step of sealing, once the sorted rules were read: their `depths` (bit `d` for
    /// a rule of length `d`) and the tbl8 `groups` they need.
    fn seal_finish(&mut self, depths: u64, groups: usize) -> Result<(), FibError> {
        self.mode = Mode::Sealed;
        debug_assert!(self.rules[..self.rules_used]
            .windows(2)
            .all(|w| rule_key(&w[0]) < rule_key(&w[1])));
        self.depths = depths;
        if groups > self.tbl8.len() / TBL8_GROUP_LEN - self.tbl8_used {
            return Err(FibError::Tbl8Full);
        }
        Ok(())
    }

    /// Sparse build, after [`Fib::seal`]: compute tbl24 chunk `chunk` (entries
    /// `chunk * TBL24_CHUNK_LEN ..`, the /24s of the /14 `chunk << 18`) into `out`
    /// ([`TBL24_CHUNK_LEN`] entries), allocating the tbl8 groups of its /24s that hold rules
    /// longer than /24. Call for chunks 0, 1, … [`TBL24_CHUNKS`] − 1 in order (the rules are
    /// consumed in sorted order: the whole table costs O(rules + entries written)).
    ///
    /// A chunk that no rule longer than /14 falls into is [`Tbl24Chunk::Uniform`] without
    /// `out` being written; otherwise the chunk is painted into `out` (rules in sorted order,
    /// so a shorter prefix is always painted before the longer ones inside it) and reported
    /// uniform if it came out so.
    ///
    /// # Errors
    /// [`FibError::BuildOrder`] out of order or unsealed, [`FibError::BadStorage`] if `out` is
    /// not [`TBL24_CHUNK_LEN`] entries, [`FibError::Tbl8Full`] (cannot happen after a
    /// successful seal).
    pub fn fill_chunk(&mut self, chunk: usize, out: &mut [u32]) -> Result<Tbl24Chunk, FibError> {
        if self.mode != Mode::Sealed || chunk != self.next_chunk || !self.tbl24.is_empty() {
            return Err(FibError::BuildOrder);
        }
        if out.len() != TBL24_CHUNK_LEN {
            return Err(FibError::BadStorage);
        }
        let lo = (chunk as u32) << (32 - CHUNK_DEPTH);
        let hi = lo | !mask(CHUNK_DEPTH);
        let base24 = lo >> 8;
        // The longest rule of length ≤ /14 containing the chunk: its background.
        let background = (0..=CHUNK_DEPTH)
            .rev()
            .filter(|d| self.depths & (1 << d) != 0)
            .find_map(|d| {
                self.rule_find(lo & mask(d), d)
                    .map(|s| leaf(self.rules[s].nh, d))
            })
            .unwrap_or(0);
        let n = self.rules_used;
        let mut i = self.rule_cursor;
        while i < n && self.rules[i].prefix < lo {
            i += 1;
        }
        let start = i;
        while i < n && self.rules[i].prefix <= hi {
            i += 1;
        }
        self.rule_cursor = i;
        self.next_chunk += 1;
        self.sparse.chunks += 1;
        let inside = |r: &RuleSlot| r.depth > CHUNK_DEPTH;
        if !self.rules[start..i].iter().any(inside) {
            self.sparse.uniform += 1;
            return Ok(Tbl24Chunk::Uniform(background));
        }
        out.fill(background);
        for k in start..i {
            let r = self.rules[k];
            if !inside(&r) {
                continue;
            }
            let value = leaf(r.nh, r.depth);
            let idx = ((r.prefix >> 8) - base24) as usize;
            if r.depth <= 24 {
                for e in &mut out[idx..idx + (1usize << (24 - r.depth))] {
                    debug_assert!(*e & EXT == 0, "a /{} painted over a tbl8 group", r.depth);
                    *e = value;
                }
            } else {
                if out[idx] & EXT == 0 {
                    let g = self.tbl8_alloc().ok_or(FibError::Tbl8Full)?;
                    let gb = g as usize * TBL8_GROUP_LEN;
                    self.tbl8[gb..gb + TBL8_GROUP_LEN].fill(IN_USE | out[idx]);
                    out[idx] = EXT | g;
                }
                let gb = (out[idx] & VALUE_MASK) as usize * TBL8_GROUP_LEN;
                let s = gb + (r.prefix & 0xff) as usize;
                self.tbl8[s..s + (1usize << (32 - r.depth))].fill(IN_USE | value);
            }
        }
        let first = out[0];
        if first & EXT == 0 && out.iter().all(|&e| e == first) {
            self.sparse.uniform += 1;
            return Ok(Tbl24Chunk::Uniform(first));
        }
        Ok(Tbl24Chunk::Mixed)
    }

    /// Sparse build: install the finished tbl24 (every chunk filled by [`Fib::fill_chunk`], in
    /// order, and laid out contiguously: a flat view of [`TBL24_LEN`] entries, e.g. the
    /// kernel's vmap range of shared and own pages). Lookups work from here on.
    ///
    /// # Errors
    /// [`FibError::BuildOrder`] if not every chunk was filled, [`FibError::BadStorage`] if
    /// `tbl24` is not [`TBL24_LEN`] entries.
    pub fn attach_tbl24(&mut self, tbl24: &'a [AtomicU32]) -> Result<(), FibError> {
        if self.mode != Mode::Sealed || self.next_chunk != TBL24_CHUNKS || !self.tbl24.is_empty() {
            return Err(FibError::BuildOrder);
        }
        if tbl24.len() != TBL24_LEN {
            return Err(FibError::BadStorage);
        }
        self.tbl24 = tbl24;
        Ok(())
    }

    /// Chunks filled and uniform ones so far (sparse build).
    pub fn sparse_stats(&self) -> SparseStats {
        self.sparse
    }

    /// Whether the FIB is sealed (a sparse build past [`Fib::seal`]: read-only).
    pub fn is_sealed(&self) -> bool {
        self.mode == Mode::Sealed
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
        if let Mode::Sealing(_) = self.mode {
            // Neither hashed nor sorted yet.
            return None;
        }
        if self.mode == Mode::Sealed {
            return self.rules[..self.rules_used]
                .binary_search_by_key(&(ip, depth), |r| (r.prefix, r.depth))
                .ok();
        }
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
        tbl24: Vec<AtomicU32>,
        tbl8: Vec<u32>,
        rules: Vec<RuleSlot>,
    }

    /// A dense tbl24 on the heap.
    pub(crate) fn dense_tbl24() -> Vec<AtomicU32> {
        core::iter::repeat_with(|| AtomicU32::new(0))
            .take(TBL24_LEN)
            .collect()
    }

    impl Store {
        pub(crate) fn new(groups: usize, rules: usize) -> Store {
            Store {
                tbl24: dense_tbl24(),
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

    /// A host tbl24 for sparse builds (64 MiB, leaked once per thread and overwritten by
    /// every build: it stands for the kernel's vmap range).
    fn host_tbl24() -> &'static [AtomicU32] {
        std::thread_local! {
            static T: &'static [AtomicU32] = dense_tbl24().leak();
        }
        T.with(|t| *t)
    }

    /// Seal `f` and fill every chunk into `tbl24` (a uniform chunk written out in full, as its
    /// shared page would read), then attach it. Returns the kind of every chunk.
    fn finish_sparse(f: &mut Fib<'static>, tbl24: &'static [AtomicU32]) -> Vec<Tbl24Chunk> {
        f.seal().unwrap();
        let mut out = vec![0u32; TBL24_CHUNK_LEN];
        let mut kinds = Vec::with_capacity(TBL24_CHUNKS);
        for c in 0..TBL24_CHUNKS {
            let k = f.fill_chunk(c, &mut out).unwrap();
            let dst = &tbl24[c * TBL24_CHUNK_LEN..(c + 1) * TBL24_CHUNK_LEN];
            match k {
                Tbl24Chunk::Uniform(v) => dst.iter().for_each(|e| e.store(v, Relaxed)),
                Tbl24Chunk::Mixed => {
                    for (e, &v) in dst.iter().zip(&out) {
                        e.store(v, Relaxed);
                    }
                }
            }
            kinds.push(k);
        }
        f.attach_tbl24(tbl24).unwrap();
        kinds
    }

    fn leaked_sparse(groups: usize, rules: usize) -> Fib<'static> {
        Fib::new_sparse(
            vec![0; groups * TBL8_GROUP_LEN].leak(),
            vec![RuleSlot::EMPTY; rules].leak(),
        )
        .unwrap()
    }

    #[test]
    fn sparse_chunks_and_lookups() {
        let mut f = leaked_sparse(8, 64);
        f.add(net(0, 0), via(1)).unwrap();
        f.add(net(0x0a00_0000, 8), via(2)).unwrap();
        f.add(net(0x0a01_0200, 24), via(3)).unwrap();
        f.add(net(0x0a01_0280, 25), via(4)).unwrap();
        f.add(net(0x0a01_0281, 32), via(5)).unwrap();
        // Two /15s with one next hop fill the /14 192.168.0.0/14: uniform again.
        f.add(net(0xc0a8_0000, 15), via(6)).unwrap();
        f.add(net(0xc0aa_0000, 15), via(6)).unwrap();
        // Added and deleted before sealing: leaves nothing.
        f.add(net(0x0b00_0001, 32), via(7)).unwrap();
        f.delete(net(0x0b00_0001, 32)).unwrap();
        assert_eq!(
            f.fill_chunk(0, &mut [0; TBL24_CHUNK_LEN]),
            Err(FibError::BuildOrder)
        );
        let kinds = finish_sparse(&mut f, host_tbl24());
        let mixed: Vec<usize> = (0..TBL24_CHUNKS)
            .filter(|&c| kinds[c] == Tbl24Chunk::Mixed)
            .collect();
        assert_eq!(mixed, vec![0x0a01_0200 >> 18]);
        assert_eq!(kinds[0xc0a8_0000 >> 18], Tbl24Chunk::Uniform(leaf(5, 15)));
        assert_eq!(f.sparse_stats().uniform, TBL24_CHUNKS - 1);
        assert_eq!(f.tbl8_usage().0, 1);
        let l = |f: &Fib, a: [u8; 4]| f.lookup(Ipv4Addr::from(a));
        assert_eq!(l(&f, [1, 2, 3, 4]), Some(via(1)));
        assert_eq!(l(&f, [10, 9, 9, 9]), Some(via(2)));
        assert_eq!(l(&f, [10, 1, 2, 127]), Some(via(3)));
        assert_eq!(l(&f, [10, 1, 2, 128]), Some(via(4)));
        assert_eq!(l(&f, [10, 1, 2, 129]), Some(via(5)));
        assert_eq!(l(&f, [11, 0, 0, 1]), Some(via(1)));
        assert_eq!(l(&f, [192, 171, 255, 255]), Some(via(6)));
        assert_eq!(l(&f, [192, 172, 0, 0]), Some(via(1)));
        // Sealed: read-only, exact-match get by binary search, listing intact.
        assert_eq!(f.add(net(0x0c00_0000, 8), via(1)), Err(FibError::ReadOnly));
        assert_eq!(f.delete(net(0, 0)), Err(FibError::ReadOnly));
        assert_eq!(f.get(net(0x0a01_0280, 25)), Some(via(4)));
        assert_eq!(f.get(net(0x0a01_0280, 26)), None);
        assert_eq!(f.routes().count(), 7);
        assert!(f.is_sealed());
    }

    #[test]
    fn sparse_seal_checks_tbl8() {
        let mut f = leaked_sparse(1, 64);
        f.add(net(0x0a00_0001, 32), via(1)).unwrap();
        f.add(net(0x0a00_0002, 32), via(1)).unwrap();
        f.add(net(0x0b00_0001, 32), via(1)).unwrap();
        assert_eq!(f.seal(), Err(FibError::Tbl8Full));
        assert_eq!(f.seal(), Err(FibError::BuildOrder));
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

        /// Sealing in bounded steps (any budget, with route changes refused once it started)
        /// gives the rule table one sealed in one call gives: the used rules, sorted by
        /// (prefix, length), the empty slots after them; both agree on tbl8's sufficiency.
        #[test]
        fn seal_in_steps_equals_seal(
            ops in prop::collection::vec(op(), 1..200),
            budget in 1usize..64,
        ) {
            let (mut one, mut steps) = (leaked_sparse(4, 256), leaked_sparse(4, 256));
            for o in &ops {
                match *o {
                    Op::Add(a, l, n) => {
                        let r = one.add(net(a, l), via(n));
                        prop_assert_eq!(steps.add(net(a, l), via(n)), r);
                    }
                    Op::Del(a, l) => {
                        let r = one.delete(net(a, l));
                        prop_assert_eq!(steps.delete(net(a, l)), r);
                    }
                    Op::DelLive(k) => {
                        let live = one.routes().nth(k % one.len().max(1));
                        if let Some((n, _)) = live {
                            prop_assert_eq!(one.delete(n), Ok(()));
                            prop_assert_eq!(steps.delete(n), Ok(()));
                        }
                    }
                }
            }
            let mut want: Vec<_> = one.routes().map(|(n, h)| (n.addr.to_bits(), n.len, h)).collect();
            want.sort_by_key(|r| (r.0, r.1));
            let sealed = one.seal();
            let mut calls = 0;
            let stepped = loop {
                calls += 1;
                match steps.seal_step(budget) {
                    Ok(true) => break Ok(()),
                    Ok(false) => {
                        prop_assert_eq!(steps.add(net(0, 0), via(1)), Err(FibError::ReadOnly));
                        prop_assert_eq!(steps.get(net(0, 0)), None);
                    }
                    Err(e) => break Err(e),
                }
                prop_assert!(calls < 100_000, "seal_step never finished");
            };
            prop_assert_eq!(stepped, sealed);
            // Compaction alone reads all 256 slots, one unit each.
            prop_assert!(calls * budget >= 256, "a step did more than its budget");
            let got: Vec<_> = steps.routes().map(|(n, h)| (n.addr.to_bits(), n.len, h)).collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(&one.rules[..], &steps.rules[..]);
            prop_assert_eq!(steps.seal_step(budget), Err(FibError::BuildOrder));
        }

        /// The sparse build (rules, seal, chunk by chunk) gives the table the dense incremental
        /// one has, for the same adds and deletes: every chunk is uniform in one exactly when it
        /// is in the other, with the same value; every other entry is equal, or a tbl8 group in
        /// both with equal contents; lookups agree with both and with the linear model.
        #[test]
        fn sparse_matches_dense(
            ops in prop::collection::vec(op(), 1..120),
            probes in prop::collection::vec(addr(), 64),
        ) {
            std::thread_local! {
                static DENSE: core::cell::RefCell<Fib<'static>> =
                    core::cell::RefCell::new(leaked_fib(256, 512));
            }
            DENSE.with(|cell| {
                if !cell.borrow().is_empty() {
                    *cell.borrow_mut() = leaked_fib(256, 512);
                }
            });
            DENSE.with(|cell| -> Result<(), TestCaseError> {
            let d = &mut *cell.borrow_mut();
            let mut sp = leaked_sparse(256, 512);
            let mut m = Model::default();
            let mut edges = Vec::new();
            for o in &ops {
                match *o {
                    Op::Add(a, l, n) => {
                        let r = d.add(net(a, l), via(n));
                        prop_assert_eq!(r, Ok(()));
                        prop_assert_eq!(sp.add(net(a, l), via(n)), Ok(()));
                        m.add(a, l, via(n));
                        let last = a | !mask(l);
                        edges.extend([a, last, a.wrapping_sub(1), last.wrapping_add(1)]);
                    }
                    Op::Del(a, l) => {
                        let r = d.delete(net(a, l));
                        prop_assert_eq!(sp.delete(net(a, l)), r);
                        prop_assert_eq!(r.is_ok(), m.delete(a, l));
                    }
                    Op::DelLive(k) => {
                        if !m.0.is_empty() {
                            let (a, l, _) = m.0[k % m.0.len()];
                            prop_assert_eq!(d.delete(net(a, l)), Ok(()));
                            prop_assert_eq!(sp.delete(net(a, l)), Ok(()));
                            prop_assert!(m.delete(a, l));
                        }
                    }
                }
            }
            let kinds = finish_sparse(&mut sp, host_tbl24());
            let mut dense_uniform = 0;
            for (c, kind) in kinds.iter().enumerate() {
                let range = c * TBL24_CHUNK_LEN..(c + 1) * TBL24_CHUNK_LEN;
                let first = d.tbl24[range.start].load(Relaxed);
                let uniform = first & EXT == 0
                    && d.tbl24[range.clone()].iter().all(|e| e.load(Relaxed) == first);
                if uniform {
                    dense_uniform += 1;
                    prop_assert_eq!(*kind, Tbl24Chunk::Uniform(first), "chunk {}", c);
                    continue;
                }
                prop_assert_eq!(*kind, Tbl24Chunk::Mixed, "chunk {}", c);
                for i in range {
                    let (de, se) = (d.tbl24[i].load(Relaxed), sp.tbl24[i].load(Relaxed));
                    if de & EXT == 0 {
                        prop_assert_eq!(de, se, "tbl24[{:#x}]", i);
                    } else {
                        prop_assert!(se & EXT != 0, "tbl24[{:#x}]: no group", i);
                        let g = |f: &Fib, e: u32| {
                            let b = (e & VALUE_MASK) as usize * TBL8_GROUP_LEN;
                            f.tbl8[b..b + TBL8_GROUP_LEN].to_vec()
                        };
                        prop_assert_eq!(g(d, de), g(&sp, se), "group of tbl24[{:#x}]", i);
                    }
                }
            }
            prop_assert_eq!(sp.sparse_stats().uniform, dense_uniform);
            prop_assert_eq!(sp.tbl8_usage().0, d.tbl8_usage().0);
            prop_assert_eq!(sp.len(), d.len());
            for &a in probes.iter().chain(edges.iter()) {
                let want = m.lookup(a);
                prop_assert_eq!(sp.lookup(Ipv4Addr::from_bits(a)), want, "dst {:#x}", a);
                prop_assert_eq!(d.lookup(Ipv4Addr::from_bits(a)), want, "dst {:#x}", a);
            }
            for (a, l, nh) in m.0.clone() {
                prop_assert_eq!(sp.get(net(a, l)), Some(nh));
                d.delete(net(a, l)).unwrap();
            }
            Ok(())
            })?;
        }
    }
}
