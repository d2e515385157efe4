//! A stateless IPv4 access-control list: rules read from a text file, classified by tuple-space
//! search into caller-provided storage. No heap, no clock, no `unsafe`; the network function
//! that runs it (not in this crate) owns the per-rule counters.
//!
//! * [`rules`]: the file's syntax, one [`Rule`] per line, errors naming the line ([`AclError`]).
//! * [`classify`]: the classifier, [`Acl`]: built once from the text ([`Acl::build`]), then
//!   read-only ([`Acl::classify`], one [`FiveTuple`] in, one [`Match`] out).
//! * [`classbench`]: a deterministic ClassBench-like rule-set generator and 5-tuples aimed at
//!   its rules, for tests and benchmarks.
//!
//! # The rules file
//!
//! ```text
//! # Web servers behind us; everything else is refused.
//! default deny
//! deny  src 192.0.2.0/24                          # a bad neighbourhood, whatever it sends
//! allow proto tcp dst 198.51.100.0/24 dport 80    # HTTP
//! allow proto tcp dst 198.51.100.0/24 dport 443
//! allow proto udp src 10.0.0.0/8 sport 1024-65535 dport 53
//! allow proto icmp
//! ```
//!
//! * One rule per line; `#` starts a comment (to the end of the line); blank lines are ignored.
//!   Words are separated by spaces or tabs and are lowercase.
//! * A rule is an action, `allow` or `deny`, then any of these fields, in any order, each at most
//!   once; a field left out matches everything:
//!   * `src PREFIX/LEN`, `dst PREFIX/LEN`: the source or destination address lies in the prefix
//!     (dotted decimal, LEN 0..=32, no bits set past LEN: `10.0.0.0/8`, not `10.0.0.1/8`);
//!     `any` is `0.0.0.0/0`.
//!   * `proto tcp|udp|icmp|any|N`: the IPv4 Protocol field (N 0..=255; `tcp` is 6, `udp` 17,
//!     `icmp` 1).
//!   * `sport N|N-M|any`, `dport N|N-M|any`: the TCP or UDP source or destination port is N, or
//!     in N..=M (0..=65535, N ≤ M). A port other than `any` needs `proto tcp` or `proto udp`
//!     (as iptables' `--sport` needs `-p tcp`): other protocols have no ports.
//! * `default allow|deny`, at most one such line, anywhere: the action for a packet no rule
//!   matches. **Without it the default is `deny`**: an empty or truncated file fails closed.
//! * The **first** rule that matches decides (rule order is file order, rules numbered from 0
//!   with comments, blank lines and the `default` line not counted). At most [`MAX_RULES`].
//! * A line that is not a rule stops the build with [`AclError::Line`]: the line number (1-based)
//!   and what is wrong ([`RuleError`]); nothing panics on any input.
//!
//! Room for IPv6: a prefix is read by one function, [`rules::parse_prefix`], which tells the
//! families apart by the `:` in an IPv6 address and today answers [`RuleError::Ipv6`] for one
//! (`src ::/0`, `dst 2001:db8::/32`). IPv6 support keeps the syntax and adds an IPv6 prefix
//! type there, refuses a rule whose `src` and `dst` are of different families, and gives IPv6
//! rules their own tuple space (prefix lengths 0..=128, 128-bit masked keys, 128-bit interval
//! starts in the pruning's tables) with the same first-match pruning across both; `any` would
//! stay family-free.
//!
//! # The classifier
//!
//! Tuple-space search (V. Srinivasan, S. Suri, G. Varghese, "Packet classification using tuple
//! space search", ACM SIGCOMM 1999): rules are grouped by their *tuple*, the pair (source prefix
//! length, destination prefix length). All rules of a tuple look up the packet's addresses
//! masked the same way, so each tuple is one exact-match hash table keyed by the masked (source,
//! destination) pair; an entry holds the rules of the tuple with those prefixes, in rule order,
//! and the protocol and the port ranges are checked on them one by one. A lookup probes one
//! hash table per tuple, not one test per rule.
//!
//! First match is kept by tracking the lowest matching rule index across tuples. Tuples are
//! ordered by the lowest index of their rules, so once that index is not below the best match
//! found, no later tuple can hold a better one and the search stops; inside an entry the walk
//! stops at the first matching rule or at one past the best.
//!
//! Tuple pruning (the paper's §4) keeps a lookup from probing every tuple: a longest-prefix
//! match on the source address alone, over the rules' source prefixes, yields the tuples of
//! the rules whose source prefix holds the address (a bitset, precomputed per prefix), the same
//! on the destination, and only the tuples in both are probed, lowest rule first, with the same
//! early exit. Each longest-prefix match is a direct index on the address's top bits and a
//! binary search of the few intervals of address space under it (`prune.rs`). On the 10,000
//! ClassBench-like rules (42 tuples) an aimed packet leaves 3.0 tuples on average (scanning
//! tuples in order with the early exit alone probed 41.6); in the guest benchmark the 10,000-rule
//! row costs 1.35× (K=4) to 1.39× (K=32) the 10-rule row, against 4.8× to 5.1× without the
//! pruning (`cargo xtask bench sim --modes io,acl --k 4,32 --rules 10,1000,10000`). The paper's
//! other variants (markers, rectangle search) are not used.
//!
//! Worst cases: a lookup costs two longest-prefix matches (a bucket, then a binary search of
//! the intervals in it: at most ⌈log2(2R + 1)⌉ comparisons for R rules, when all the prefixes
//! of a side fall under one bucket), one probe per tuple both sides leave (all of them when
//! every tuple has prefixes holding both addresses: nested prefixes, `any`), plus the walk of
//! each chain it finds, and rules that differ only in protocol and ports share one chain:
//! 10,000 rules with the same `src` and `dst` are a linear scan. Port ranges are not in the
//! key; splitting them into prefixes (as the paper does for its port field) would shorten such
//! chains.
//!
//! # Memory
//!
//! All of it is the caller's ([`Storage`]; sizes from [`Acl::sizes`] or, for a bound, from
//! [`Sizes::for_rules`]): per rule one [`Entry`] (24 bytes) and a quarter of a hash-table
//! [`Group`] (8 slots in 104 bytes, at most half full), 50 bytes; per tuple one [`Tuple`] (20
//! bytes) and the rounding of its table to whole groups (up to 78 bytes); at most 33 × 33 =
//! 1,089 tuples. The pruning's tables ([`Sizes::prune`]), sized from the rule count `R` and the
//! tuple count `T` alone, take per side `2R + 1` intervals, a direct index of at most `2R + 1`
//! buckets and `R + 1` bitsets of `⌈T / 64⌉` words, 8 bytes each: about 24 + 8⌈T / 64⌉ bytes
//! per rule and side. The 10,000 ClassBench-like rules of the tests (42 tuples) take 1,244,888
//! bytes (742,176 of them the pruning's); [`MAX_RULES`] = 10,000 rules take at most 4,069,092
//! bytes (3.9 MiB, rules in all 1,089 tuples: 18-word bitsets).
//! The built [`Acl`] borrows that storage read-only, so one value serves every core.
//!
//! # Use
//!
//! ```
//! use netstack::acl::{Acl, Action, Entry, FiveTuple, Group, Storage, Tuple};
//!
//! let text = "default deny\nallow proto tcp dport 22\n";
//! // Size the storage from the text (or reserve `Sizes::for_rules(MAX_RULES)` once), carve it
//! // (here the heap; in the kernel pages, as the FIB's tables are), build.
//! let need = Acl::sizes(text).unwrap();
//! let mut rules = vec![Entry::EMPTY; need.rules];
//! let mut tuples = vec![Tuple::EMPTY; need.tuples];
//! let mut groups = vec![Group::EMPTY; need.groups];
//! let mut prune = vec![0u64; need.prune];
//! let storage = Storage {
//!     rules: &mut rules,
//!     tuples: &mut tuples,
//!     groups: &mut groups,
//!     prune: &mut prune,
//! };
//! let acl = Acl::build(text, storage).unwrap();
//! // Per packet: classify, count by rule index (the counters are the caller's).
//! let mut hits = vec![0u64; acl.len()];
//! let t = FiveTuple {
//!     src: [192, 0, 2, 1].into(),
//!     dst: [198, 51, 100, 1].into(),
//!     proto: 6,
//!     sport: 40000,
//!     dport: 22,
//! };
//! let m = acl.classify(&t);
//! if let Some(i) = m.rule {
//!     hits[i as usize] += 1;
//! }
//! assert_eq!((m.rule, m.action), (Some(0), Action::Allow));
//! assert_eq!(acl.classify(&FiveTuple { dport: 23, ..t }).action, Action::Deny);
//! ```
//!
//! The rules file is meant to reach the appliance as a boot-bundle file (`rules`,
//! [`crate::config::bundle`]) owned by the network function that runs the ACL; that wiring is
//! not part of this module.

pub mod classbench;
pub mod classify;
mod prune;
pub mod rules;

#[cfg(test)]
mod tests;

use core::net::Ipv4Addr;

pub use classify::{Acl, Entry, Group, Storage, Tuple, GROUP_SLOTS, MAX_TUPLES};
pub use rules::{parse_rules, AclError, PortRange, Proto, Rule, RuleError, RuleLine, Rules};

/// Most rules an ACL holds; a rules file with more is refused at the first line past it
/// ([`RuleError::TooManyRules`]).
pub const MAX_RULES: usize = 10_000;

/// What a rule, or the default, does with a packet.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum Action {
    /// Let it through.
    Allow,
    /// Drop it.
    Deny,
}

impl Action {
    /// The word of the rules file: `allow` or `deny`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

impl core::fmt::Display for Action {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is classified: the fields of an IPv4 packet the rules look at.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// The IPv4 Protocol field ([`crate::wire::IPPROTO_TCP`], …).
    pub proto: u8,
    /// TCP or UDP source port (host order); 0 for other protocols. Which ports a non-first
    /// fragment (no transport header) carries is the caller's choice: 0 is the natural one.
    pub sport: u16,
    /// TCP or UDP destination port (host order); 0 for other protocols.
    pub dport: u16,
}

/// The outcome of [`Acl::classify`].
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub struct Match {
    /// The index of the first rule that matched (file order from 0, as [`Acl::rule`] takes
    /// it; a per-rule counter array is indexed by it), or `None` when the default applied.
    pub rule: Option<u32>,
    /// That rule's action, or the default's.
    pub action: Action,
}

/// How much caller storage an ACL needs: lengths of the four slices of a [`Storage`].
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, Hash)]
pub struct Sizes {
    /// [`Entry`]s: one per rule.
    pub rules: usize,
    /// [`Tuple`]s: one per distinct (source length, destination length) pair of the rules.
    pub tuples: usize,
    /// Hash-table [`Group`]s: for each tuple, one per 4 of its rules, rounded up.
    pub groups: usize,
    /// `u64` words of the tuple pruning's tables, from the rule count `R` and the tuple count
    /// `T` alone: per address side, `2R + 1` intervals, a direct index of `2^b` buckets
    /// (`b = ⌊log2(2R + 1)⌋`, at most 16) and `R + 1` bitsets of `⌈T / 64⌉` words.
    pub prune: usize,
}

impl Sizes {
    /// Enough for any file of `rules` rules (at most [`MAX_RULES`]), whatever its prefix
    /// lengths: `rules` entries, `T = min(rules, MAX_TUPLES)` tuples, `⌊(rules + 3T) / 4⌋`
    /// groups (each tuple's `⌈c / 4⌉` summed, at worst), the pruning's words for `T` tuples.
    pub const fn for_rules(rules: usize) -> Sizes {
        let tuples = if rules < MAX_TUPLES {
            rules
        } else {
            MAX_TUPLES
        };
        Sizes {
            rules,
            tuples,
            groups: (rules + 3 * tuples) / 4,
            prune: classify::prune_words(rules, tuples),
        }
    }

    /// Bytes of storage these sizes take: 24 per entry, 20 per tuple, 104 per group (so
    /// 50 bytes per rule, plus up to 98 per tuple: its own and its table's rounding), 8 per
    /// pruning word (4,069,092 bytes for [`MAX_RULES`] rules in [`MAX_TUPLES`] tuples, the
    /// worst case).
    pub const fn bytes(self) -> usize {
        self.rules * core::mem::size_of::<Entry>()
            + self.tuples * core::mem::size_of::<Tuple>()
            + self.groups * core::mem::size_of::<Group>()
            + self.prune * core::mem::size_of::<u64>()
    }
}
