//! The classifier: tuple-space search over caller storage (the algorithm and its source are in
//! the [module documentation](super#the-classifier)).
//!
//! Layout, all in the caller's [`Storage`]:
//!
//! * `rules`: one [`Entry`] per rule, in rule order: the rule in compact form plus `next`, the
//!   index of the next rule (in rule order) with the same tuple and the same masked addresses.
//! * `tuples`: one [`Tuple`] per distinct (source length, destination length) pair, in order of
//!   their lowest rule index (the order in which the file first uses them): the two masks, that
//!   lowest index, and the tuple's hash table, a region of `groups`.
//! * `groups`: every tuple's hash table, one after the other. A tuple of `c` rules gets
//!   `⌈c / 4⌉` [`Group`]s of 8 slots (so at most half the slots are full), each slot empty or
//!   holding a masked (source, destination) key and the first rule of its chain. Open
//!   addressing, probing group after group from the key's home group until the key or a group
//!   with an empty slot; the home group is a multiply-shift hash of the key mapped onto the
//!   region by Lemire's multiply-and-shift range reduction ("Fast random integer generation in
//!   an interval", ACM TOMACS 2019), so a region needs no power-of-two size.
//! * `prune`: the tuple pruning's tables, the source side's then the destination side's
//!   (`super::prune`): per side, intervals of address space, a direct index over them, and per
//!   distinct prefix the bitset of the tuples its rules and its ancestors' use.
//!
//! Why groups with tags: a lookup probes many tuples and finds nothing in most of them (before
//! the pruning, every tuple; after it, still some where one side's prefix is another rule's).
//! With one key per probe (linear probing, load 1/2) whether the home slot is empty or
//! holds another key is a coin toss per tuple, a branch mispredicted about every other tuple:
//! 745 ns per lookup over 42 tuples. Comparing the 8 tags of a group at once leaves two
//! branches that almost always go the same way ("no tag matches", "the group has an empty
//! slot"): 3 to 4 times faster for about 5% more memory (`netstack/benches/acl.rs`).
//!
//! Building fills the tables once ([`Acl::build`]); a lookup only reads them, so one [`Acl`]
//! (a few references and the default) is shared by every core.

use super::prune::{Layout, Side};
use super::rules::{parse_rules, AclError, PortRange, Proto, Rule, RuleLine};
use super::{Action, FiveTuple, Match, Sizes};
use crate::router::Ipv4Net;
use core::net::Ipv4Addr;

/// Most tuples: one per (source length, destination length) pair, 33 × 33.
pub const MAX_TUPLES: usize = 33 * 33;

/// No rule (end of a chain, empty slot); also "no match yet" in a lookup.
const NONE: u32 = u32::MAX;
/// [`Entry::flags`]: the rule matches every protocol.
const ANY_PROTO: u8 = 1;
/// [`Entry::flags`]: the rule denies.
const DENY: u8 = 2;

/// One rule in caller storage (24 bytes; start from [`Entry::EMPTY`], [`Acl::build`] overwrites
/// it).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Entry {
    src: u32,
    dst: u32,
    sport_lo: u16,
    sport_hi: u16,
    dport_lo: u16,
    dport_hi: u16,
    /// The next rule of this rule's hash entry (a higher index), or [`NONE`].
    next: u32,
    src_len: u8,
    dst_len: u8,
    proto: u8,
    flags: u8,
}

impl Entry {
    /// An unused entry.
    pub const EMPTY: Entry = Entry {
        src: 0,
        dst: 0,
        sport_lo: 0,
        sport_hi: 0,
        dport_lo: 0,
        dport_hi: 0,
        next: NONE,
        src_len: 0,
        dst_len: 0,
        proto: 0,
        flags: 0,
    };

    fn new(r: &Rule) -> Entry {
        let (proto, any) = match r.proto {
            Proto::Any => (0, ANY_PROTO),
            Proto::Is(p) => (p, 0),
        };
        let deny = if r.action == Action::Deny { DENY } else { 0 };
        Entry {
            src: r.src.addr.to_bits() & r.src.mask(),
            dst: r.dst.addr.to_bits() & r.dst.mask(),
            sport_lo: r.sport.lo,
            sport_hi: r.sport.hi,
            dport_lo: r.dport.lo,
            dport_hi: r.dport.hi,
            next: NONE,
            src_len: r.src.len,
            dst_len: r.dst.len,
            proto,
            flags: any | deny,
        }
    }

    fn action(&self) -> Action {
        if self.flags & DENY != 0 {
            Action::Deny
        } else {
            Action::Allow
        }
    }

    fn rule(&self) -> Rule {
        Rule {
            action: self.action(),
            src: Ipv4Net {
                addr: Ipv4Addr::from_bits(self.src),
                len: self.src_len,
            },
            dst: Ipv4Net {
                addr: Ipv4Addr::from_bits(self.dst),
                len: self.dst_len,
            },
            proto: if self.flags & ANY_PROTO != 0 {
                Proto::Any
            } else {
                Proto::Is(self.proto)
            },
            sport: PortRange {
                lo: self.sport_lo,
                hi: self.sport_hi,
            },
            dport: PortRange {
                lo: self.dport_lo,
                hi: self.dport_hi,
            },
        }
    }

    /// Whether `t` matches the fields the hash key does not cover: protocol and ports.
    #[inline(always)]
    fn matches_rest(&self, t: &FiveTuple) -> bool {
        (self.proto == t.proto || self.flags & ANY_PROTO != 0)
            && self.dport_lo <= t.dport
            && t.dport <= self.dport_hi
            && self.sport_lo <= t.sport
            && t.sport <= self.sport_hi
    }
}

/// One tuple in caller storage (20 bytes; start from [`Tuple::EMPTY`]).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Tuple {
    src_mask: u32,
    dst_mask: u32,
    /// The lowest index of the tuple's rules.
    min_rule: u32,
    /// Its hash table: `groups[offset..offset + size]`.
    offset: u32,
    size: u32,
}

impl Tuple {
    /// An unused tuple.
    pub const EMPTY: Tuple = Tuple {
        src_mask: 0,
        dst_mask: 0,
        min_rule: NONE,
        offset: 0,
        size: 0,
    };
}

/// One key of a hash table: a masked (source, destination) pair and the first rule of its
/// chain.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
struct Slot {
    src: u32,
    dst: u32,
    head: u32,
}

/// Slots in a [`Group`].
pub const GROUP_SLOTS: usize = 8;

/// One group of [`GROUP_SLOTS`] hash-table slots in caller storage (104 bytes; start from
/// [`Group::EMPTY`]), with a one-byte tag per slot: 0 for an empty slot, else `0x80` and 7
/// bits of the key's hash, so that a lookup compares the eight tags at once in a `u64`
/// (SWAR) and reads a key only where the tag matches (the control bytes of Abseil's
/// SwissTable, without SIMD).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Group {
    /// Slot `i`'s tag in byte `i` (bits `8i..8i+8`).
    tags: u64,
    slots: [Slot; GROUP_SLOTS],
}

impl Group {
    /// An empty group.
    pub const EMPTY: Group = Group {
        tags: 0,
        slots: [Slot {
            src: 0,
            dst: 0,
            head: NONE,
        }; GROUP_SLOTS],
    };
}

/// The caller's memory for an [`Acl`]: four slices at least as long as [`Acl::sizes`] (or
/// [`Sizes::for_rules`]) says; longer ones are fine, the surplus is not used. Their contents
/// need not be initialised to anything in particular: [`Acl::build`] writes what it uses.
#[derive(Debug)]
pub struct Storage<'a> {
    /// [`Sizes::rules`] entries or more.
    pub rules: &'a mut [Entry],
    /// [`Sizes::tuples`] tuples or more.
    pub tuples: &'a mut [Tuple],
    /// [`Sizes::groups`] groups or more.
    pub groups: &'a mut [Group],
    /// [`Sizes::prune`] words or more: the tuple pruning's tables (the source's, then the
    /// destination's).
    pub prune: &'a mut [u64],
}

/// Rules per group of a tuple's hash table: at most half of the slots are full.
const RULES_PER_GROUP: usize = GROUP_SLOTS / 2;

/// Groups in the hash table of a tuple of `rules` rules.
const fn groups_for(rules: usize) -> usize {
    rules.div_ceil(RULES_PER_GROUP)
}

/// Multiply-shift hash of a masked (source, destination) key to 32 bits (the finaliser step of
/// SplitMix64; the high half of the product depends on every bit of the key). The high bits
/// choose the group, the low 7 the tag.
#[inline(always)]
const fn hash(src: u32, dst: u32) -> u32 {
    let x = ((src as u64) << 32) | dst as u64;
    let x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x >> 32) as u32
}

/// Home group of hash `h` in a region of `size` groups: `h × size / 2^32` (Lemire).
#[inline(always)]
const fn home(h: u32, size: u32) -> usize {
    ((h as u64 * size as u64) >> 32) as usize
}

/// The tag of a full slot whose key hashes to `h`.
#[inline(always)]
const fn tag(h: u32) -> u64 {
    0x80 | (h & 0x7f) as u64
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bit 7 of byte `i` set where tag `i` of `tags` may be `t` (exact for every byte up to the
/// first match; a byte above one can be a false positive, which the key comparison rejects).
#[inline(always)]
const fn matches(tags: u64, t: u64) -> u64 {
    let x = tags ^ (t * LO);
    x.wrapping_sub(LO) & !x & HI
}

/// Bit 7 of byte `i` set where slot `i` is empty.
#[inline(always)]
const fn empties(tags: u64) -> u64 {
    !tags & HI
}

/// Slot of the lowest byte flagged in `m` (a [`matches`] or [`empties`] mask, not 0).
#[inline(always)]
const fn first(m: u64) -> usize {
    (m.trailing_zeros() / 8) as usize
}

/// `u64` words of the tuple pruning's tables ([`Sizes::prune`]) for `rules` rules in `tuples`
/// tuples: both sides' [`Layout`].
pub(super) const fn prune_words(rules: usize, tuples: usize) -> usize {
    2 * Layout::new(rules, tuples).side_words()
}

/// Index of the (source length, destination length) pair in a 33 × 33 table.
const fn pair(src_len: u8, dst_len: u8) -> usize {
    src_len as usize * 33 + dst_len as usize
}

/// A built ACL: read-only tables in caller storage and the default action.
///
/// `Copy` and `Sync`: one value, or copies of it, serves every core. `Debug` prints its sizes
/// and default, not its rules ([`Acl::rule`] gives them).
#[derive(Copy, Clone)]
pub struct Acl<'a> {
    entries: &'a [Entry],
    tuples: &'a [Tuple],
    groups: &'a [Group],
    /// The tuple pruning's longest-prefix matches on the source and destination addresses.
    src: Side<'a>,
    dst: Side<'a>,
    /// Words per tuple bitset of `src` and `dst`.
    words: usize,
    /// `Sizes::prune` of the build.
    prune_words: usize,
    default: Action,
}

impl core::fmt::Debug for Acl<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Acl")
            .field("rules", &self.entries.len())
            .field("tuples", &self.tuples.len())
            .field("groups", &self.groups.len())
            .field("prune", &self.prune_words)
            .field("default", &self.default)
            .finish()
    }
}

impl<'a> Acl<'a> {
    /// Check rules file `text` and say how much storage it needs: its rule count, its distinct
    /// (source length, destination length) pairs, and for each pair one group per 4 rules
    /// (rounded up).
    ///
    /// # Errors
    /// The first line that is not a rule ([`AclError::Line`]).
    pub fn sizes(text: &str) -> Result<Sizes, AclError<'_>> {
        // Rules per (source length, destination length) pair (at most MAX_RULES: fits u16).
        let mut per_pair = [0u16; MAX_TUPLES];
        let mut rules = 0;
        for line in parse_rules(text) {
            if let (_, RuleLine::Rule(r)) = line? {
                rules += 1;
                per_pair[pair(r.src.len, r.dst.len)] += 1;
            }
        }
        let used = per_pair.iter().filter(|&&c| c > 0);
        let tuples = used.clone().count();
        Ok(Sizes {
            rules,
            tuples,
            groups: used.map(|&c| groups_for(usize::from(c))).sum(),
            prune: prune_words(rules, tuples),
        })
    }

    /// Build the ACL of rules file `text` (syntax in the [module documentation](super)) in
    /// `storage`, which it borrows for as long as the ACL lives. The text is parsed twice
    /// ([`Acl::sizes`] first, to check the storage before writing), and is not kept.
    ///
    /// Cost: a hash-table insert per rule (at most half of each table full), then for each
    /// address side a sort of the rules' prefixes and a pass over them and over the direct
    /// index (at most 2^16 buckets); 10,000 rules took about 8 ms on the benchmark's host
    /// (`netstack/benches/acl.rs`).
    ///
    /// # Errors
    /// [`AclError::Line`] for the first line that is not a rule; [`AclError::Storage`] (with
    /// what the file needs) if a slice of `storage` is too short.
    pub fn build<'t>(text: &'t str, storage: Storage<'a>) -> Result<Acl<'a>, AclError<'t>> {
        let need = Self::sizes(text)?;
        let Storage {
            rules,
            tuples,
            groups,
            prune,
        } = storage;
        if rules.len() < need.rules
            || tuples.len() < need.tuples
            || groups.len() < need.groups
            || prune.len() < need.prune
        {
            return Err(AclError::Storage { need });
        }
        let (rules, tuples, groups, prune) = (
            &mut rules[..need.rules],
            &mut tuples[..need.tuples],
            &mut groups[..need.groups],
            &mut prune[..need.prune],
        );
        // Tuple index of each (source length, destination length) pair, u16::MAX if none yet.
        let mut tuple_of = [u16::MAX; MAX_TUPLES];
        let (mut n, mut nt) = (0usize, 0usize);
        let mut default = Action::Deny;
        for line in parse_rules(text) {
            let r = match line? {
                (_, RuleLine::Default(a)) => {
                    default = a;
                    continue;
                }
                (_, RuleLine::Rule(r)) => r,
            };
            let p = pair(r.src.len, r.dst.len);
            if tuple_of[p] == u16::MAX {
                // First rule of its tuple: tuples come in order of their lowest rule index.
                tuple_of[p] = nt as u16;
                tuples[nt] = Tuple {
                    src_mask: r.src.mask(),
                    dst_mask: r.dst.mask(),
                    min_rule: n as u32,
                    offset: 0,
                    size: 0,
                };
                nt += 1;
            }
            // Its rule count for now; its group count below.
            tuples[usize::from(tuple_of[p])].size += 1;
            rules[n] = Entry::new(&r);
            n += 1;
        }
        let mut offset = 0;
        for t in tuples.iter_mut() {
            t.size = groups_for(t.size as usize) as u32;
            t.offset = offset;
            offset += t.size;
        }
        groups.fill(Group::EMPTY);
        // Last rule first, each pushed at the head of its key's chain: chains in rule order.
        for i in (0..n).rev() {
            let e = rules[i];
            let t = tuples[usize::from(tuple_of[pair(e.src_len, e.dst_len)])];
            let region = &mut groups[t.offset as usize..(t.offset + t.size) as usize];
            let h = hash(e.src, e.dst);
            let mut g = home(h, t.size);
            'probe: loop {
                let grp = &mut region[g];
                let mut m = matches(grp.tags, tag(h));
                while m != 0 {
                    let s = &mut grp.slots[first(m)];
                    if s.src == e.src && s.dst == e.dst {
                        rules[i].next = s.head;
                        s.head = i as u32;
                        break 'probe;
                    }
                    m &= m - 1;
                }
                let free = empties(grp.tags);
                if free != 0 {
                    let k = first(free);
                    grp.tags |= tag(h) << (8 * k);
                    grp.slots[k] = Slot {
                        src: e.src,
                        dst: e.dst,
                        head: i as u32,
                    };
                    break;
                }
                g = if g + 1 == region.len() { 0 } else { g + 1 };
            }
        }
        // The tuple pruning's tables: each rule's prefix on either side, with its tuple.
        let layout = Layout::new(n, nt);
        let (src_words, dst_words) = prune.split_at_mut(layout.side_words());
        let rules: &'a [Entry] = rules;
        let tuple_of = &tuple_of;
        let tuple = move |e: &Entry| u32::from(tuple_of[pair(e.src_len, e.dst_len)]);
        let src = Side::build(
            src_words,
            layout,
            rules.iter().map(|e| (e.src, e.src_len, tuple(e))),
        );
        let dst = Side::build(
            dst_words,
            layout,
            rules.iter().map(|e| (e.dst, e.dst_len, tuple(e))),
        );
        Ok(Acl {
            entries: rules,
            tuples,
            groups,
            src,
            dst,
            words: layout.words,
            prune_words: need.prune,
            default,
        })
    }

    /// Classify packet `t`: the first rule (lowest index) that matches it and its action, or no
    /// rule and the default action.
    #[inline]
    pub fn classify(&self, t: &FiveTuple) -> Match {
        let (src, dst) = (t.src.to_bits(), t.dst.to_bits());
        let w = self.words;
        // The tuples either address's prefixes allow (tuple pruning, `super::prune`).
        let a = self.src.bits(self.src.row(src, w), w);
        let b = self.dst.bits(self.dst.row(dst, w), w);
        let mut best = NONE;
        'words: for (i, (&a, &b)) in a.iter().zip(b).enumerate() {
            let mut left = a & b;
            while left != 0 {
                let tu = &self.tuples[i * 64 + left.trailing_zeros() as usize];
                left &= left - 1;
                // Tuples are in order of their lowest rule: none from here on can beat `best`.
                if tu.min_rule >= best {
                    break 'words;
                }
                self.probe(tu, src, dst, t, &mut best);
            }
        }
        match self.entries.get(best as usize) {
            Some(e) => Match {
                rule: Some(best),
                action: e.action(),
            },
            None => Match {
                rule: None,
                action: self.default,
            },
        }
    }

    /// Look `t` up in tuple `tu`'s hash table and walk the chain found, lowering `best` to the
    /// first rule there that matches `t`, if it is lower.
    #[inline(always)]
    fn probe(&self, tu: &Tuple, src: u32, dst: u32, t: &FiveTuple, best: &mut u32) {
        let (ks, kd) = (src & tu.src_mask, dst & tu.dst_mask);
        let region = &self.groups[tu.offset as usize..(tu.offset + tu.size) as usize];
        let h = hash(ks, kd);
        let mut g = home(h, tu.size);
        // Mostly one group, no tag matching and an empty slot: two well-predicted branches.
        let mut r = 'probe: loop {
            let grp = &region[g];
            let mut m = matches(grp.tags, tag(h));
            while m != 0 {
                let s = &grp.slots[first(m)];
                if s.src == ks && s.dst == kd {
                    break 'probe s.head;
                }
                m &= m - 1;
            }
            if empties(grp.tags) != 0 {
                break NONE;
            }
            g = if g + 1 == region.len() { 0 } else { g + 1 };
        };
        // The chain is in rule order: stop at the first match or once past `best`.
        while r < *best {
            let e = &self.entries[r as usize];
            if e.matches_rest(t) {
                *best = r;
                break;
            }
            r = e.next;
        }
    }

    /// For tests: the home group of key (`src`, `dst`) in a table of `groups` groups, and the
    /// most groups a lookup of a key present in the ACL probes.
    #[cfg(test)]
    pub(super) fn home_group(src: u32, dst: u32, groups: u32) -> usize {
        home(hash(src, dst), groups)
    }

    /// For tests: the tuples the pruning leaves for addresses (`src`, `dst`), the source's and
    /// the destination's lists, and their intersection, each as ascending tuple indices.
    #[cfg(test)]
    pub(super) fn pruned(&self, src: u32, dst: u32) -> [std::vec::Vec<usize>; 3] {
        let w = self.words;
        let a = self.src.bits(self.src.row(src, w), w);
        let b = self.dst.bits(self.dst.row(dst, w), w);
        let list = |f: &dyn Fn(usize) -> u64| {
            (0..w * 64)
                .filter(|&t| f(t / 64) >> (t % 64) & 1 != 0)
                .collect()
        };
        [list(&|i| a[i]), list(&|i| b[i]), list(&|i| a[i] & b[i])]
    }

    #[cfg(test)]
    pub(super) fn longest_probe(&self) -> usize {
        let mut longest = 0;
        for tu in self.tuples {
            let region = &self.groups[tu.offset as usize..(tu.offset + tu.size) as usize];
            for (at, grp) in region.iter().enumerate() {
                for k in 0..GROUP_SLOTS {
                    if grp.tags >> (8 * k) & 0x80 != 0 {
                        let s = grp.slots[k];
                        let h = home(hash(s.src, s.dst), tu.size);
                        let probes = (at + region.len() - h) % region.len() + 1;
                        longest = longest.max(probes);
                    }
                }
            }
        }
        longest
    }

    /// Rule `index` (file order from 0) as parsed, or `None` past the last.
    pub fn rule(&self, index: usize) -> Option<Rule> {
        self.entries.get(index).map(Entry::rule)
    }

    /// The number of rules (a per-rule counter array has this length).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no rule (every packet gets the default).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The action when no rule matches (`default` line; [`Action::Deny`] without one).
    pub fn default_action(&self) -> Action {
        self.default
    }

    /// The number of tuples: hash tables, of which a lookup probes those the pruning leaves.
    pub fn tuple_count(&self) -> usize {
        self.tuples.len()
    }

    /// The storage this ACL uses (what [`Acl::sizes`] said of its text).
    pub fn sizes_used(&self) -> Sizes {
        Sizes {
            rules: self.entries.len(),
            tuples: self.tuples.len(),
            groups: self.groups.len(),
            prune: self.prune_words,
        }
    }
}
