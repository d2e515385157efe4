//! The ACL's tests: the rules file (every error, by line), the classifier against a linear
//! first-match scan (examples, a property over random rule sets, a 10,000-rule ClassBench-like
//! set), the storage it needs: [`rules`] the syntax, [`classify`] the classifier, here what both
//! share and the documented example.

mod classify;
mod rules;

use super::*;
use crate::router::{Ipv4Net, ParseError};
use crate::wire::{IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP};
use core::net::Ipv4Addr;
use proptest::prelude::*;
use std::collections::HashSet;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

/// Test cases for a property: `PROPTEST_CASES` if set, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Heap storage for an ACL (of exactly what [`Acl::sizes`] says, or more).
struct Store {
    rules: Vec<Entry>,
    tuples: Vec<Tuple>,
    groups: Vec<Group>,
    prune: Vec<u64>,
}

impl Store {
    fn new(s: Sizes) -> Store {
        Store {
            rules: vec![Entry::EMPTY; s.rules],
            tuples: vec![Tuple::EMPTY; s.tuples],
            groups: vec![Group::EMPTY; s.groups],
            prune: vec![0; s.prune],
        }
    }

    fn for_text(text: &str) -> Store {
        Store::new(Acl::sizes(text).unwrap())
    }

    fn build<'a, 't>(&'a mut self, text: &'t str) -> Result<Acl<'a>, AclError<'t>> {
        Acl::build(
            text,
            Storage {
                rules: &mut self.rules,
                tuples: &mut self.tuples,
                groups: &mut self.groups,
                prune: &mut self.prune,
            },
        )
    }
}

/// The reference: the first rule of `rules` that matches, by [`Rule::matches`].
fn linear(rules: &[Rule], default: Action, t: &FiveTuple) -> Match {
    match rules.iter().position(|r| r.matches(t)) {
        Some(i) => Match {
            rule: Some(i as u32),
            action: rules[i].action,
        },
        None => Match {
            rule: None,
            action: default,
        },
    }
}

/// Every rule of `text` and its default, through the parser.
fn parsed(text: &str) -> (Vec<Rule>, Action) {
    let mut rules = Vec::new();
    let mut default = Action::Deny;
    for l in parse_rules(text) {
        match l.unwrap().1 {
            RuleLine::Rule(r) => rules.push(r),
            RuleLine::Default(a) => default = a,
        }
    }
    (rules, default)
}

fn net(s: &str) -> Ipv4Net {
    crate::router::parse_ipv4_cidr(s).unwrap()
}

fn ft(src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16) -> FiveTuple {
    FiveTuple {
        src: Ipv4Addr::from(src),
        dst: Ipv4Addr::from(dst),
        proto,
        sport,
        dport,
    }
}

/// The module documentation's example.
const EXAMPLE: &str = "\
# Web servers behind us; everything else is refused.
default deny
deny  src 192.0.2.0/24                          # a bad neighbourhood, whatever it sends
allow proto tcp dst 198.51.100.0/24 dport 80    # HTTP
allow proto tcp dst 198.51.100.0/24 dport 443
allow proto udp src 10.0.0.0/8 sport 1024-65535 dport 53
allow proto icmp
";

#[test]
fn the_documented_example_parses_and_classifies() {
    let (rules, default) = parsed(EXAMPLE);
    assert_eq!(default, Action::Deny);
    assert_eq!(rules.len(), 5);
    assert_eq!(
        rules[3],
        Rule {
            action: Action::Allow,
            src: net("10.0.0.0/8"),
            dst: net("0.0.0.0/0"),
            proto: Proto::Is(IPPROTO_UDP),
            sport: PortRange {
                lo: 1024,
                hi: 65535
            },
            dport: PortRange { lo: 53, hi: 53 },
        }
    );
    let mut s = Store::for_text(EXAMPLE);
    let acl = s.build(EXAMPLE).unwrap();
    assert_eq!((acl.len(), acl.tuple_count()), (5, 4));
    assert_eq!(
        std::format!("{acl:?}"),
        "Acl { rules: 5, tuples: 4, groups: 4, prune: 50, default: Deny }"
    );
    let m = |t| acl.classify(&t);
    let web = [198, 51, 100, 7];
    let hit = |rule, action| Match {
        rule: Some(rule),
        action,
    };
    let miss = Match {
        rule: None,
        action: Action::Deny,
    };
    assert_eq!(m(ft([1, 2, 3, 4], web, 6, 5000, 80)), hit(1, Action::Allow));
    assert_eq!(
        m(ft([1, 2, 3, 4], web, 6, 5000, 443)),
        hit(2, Action::Allow)
    );
    assert_eq!(m(ft([1, 2, 3, 4], web, 6, 5000, 22)), miss);
    assert_eq!(m(ft([1, 2, 3, 4], web, 17, 5000, 80)), miss);
    // The first rule wins over a later one that matches too.
    assert_eq!(
        m(ft([192, 0, 2, 9], web, 6, 5000, 80)),
        hit(0, Action::Deny)
    );
    assert_eq!(
        m(ft([10, 9, 8, 7], web, 17, 1024, 53)),
        hit(3, Action::Allow)
    );
    assert_eq!(m(ft([10, 9, 8, 7], web, 17, 1023, 53)), miss);
    assert_eq!(m(ft([8, 8, 8, 8], web, 1, 0, 0)), hit(4, Action::Allow));
    assert_eq!(m(ft([192, 0, 2, 1], web, 1, 0, 0)), hit(0, Action::Deny));
}

#[test]
fn storage_sizes_and_errors() {
    use core::mem::size_of;
    assert_eq!(
        (size_of::<Entry>(), size_of::<Tuple>(), size_of::<Group>()),
        (24, 20, 104)
    );
    let max = Sizes::for_rules(MAX_RULES);
    assert_eq!(
        max,
        Sizes {
            rules: 10_000,
            tuples: 1089,
            groups: 3316,
            // Per side: 20,001 intervals, 2^14 buckets, 10,001 bitsets of 18 words.
            prune: 2 * (20_001 + 16_384 + 10_001 * 18),
        }
    );
    assert_eq!(max.bytes(), 606_644 + 3_462_448);
    assert_eq!(Sizes::for_rules(3).tuples, 3);
    // No rules: each side's one interval (every address, no tuple) and its one bucket.
    assert_eq!(Sizes::for_rules(0).bytes(), 32);
    let need = Acl::sizes(EXAMPLE).unwrap();
    assert_eq!(
        need,
        Sizes {
            rules: 5,
            tuples: 4,
            groups: 4,
            // Per side: 11 intervals, 8 buckets, 6 one-word bitsets.
            prune: 2 * (11 + 8 + 6),
        }
    );
    // Each slice one short is refused, naming what is needed.
    for short in 0..4 {
        let mut s = Sizes { ..need };
        match short {
            0 => s.rules -= 1,
            1 => s.tuples -= 1,
            2 => s.groups -= 1,
            _ => s.prune -= 1,
        }
        let mut store = Store::new(s);
        let e = store.build(EXAMPLE).unwrap_err();
        assert_eq!(e, AclError::Storage { need });
        assert_eq!(
            e.to_string(),
            "ACL storage too small: need 5 rule entries, 4 tuples, 4 groups, 50 pruning words"
        );
    }
    // Longer slices are fine; storage reused from another ACL gives the same classifier.
    let mut big = Store::new(Sizes::for_rules(100));
    let other = "deny src 10.0.0.0/8 dst 10.0.0.0/8\nallow proto udp dport 9\n".repeat(50);
    let a = big.build(&other).unwrap();
    assert_eq!(a.len(), 100);
    let a = big.build(EXAMPLE).unwrap();
    assert_eq!(a.sizes_used(), need);
    let (rules, default) = parsed(EXAMPLE);
    for (i, r) in rules.iter().enumerate() {
        assert_eq!(a.rule(i), Some(*r));
    }
    assert_eq!(a.rule(rules.len()), None);
    let t = ft([10, 1, 1, 1], [10, 2, 2, 2], 17, 1, 9);
    assert_eq!(a.classify(&t), linear(&rules, default, &t));
}
