//! The classifier against the linear first-match scan: chains, random rule sets (proptest), the
//! ClassBench-like sets.

use super::*;
use crate::acl::{classbench, classify};

#[test]
fn chains_and_pruning() {
    // Many rules behind one key (the same tuple and prefixes), interleaved with rules of other
    // tuples: the chain is walked in rule order and the walk stops past the best match.
    let mut text = String::new();
    for p in 0..200u16 {
        text += &std::format!("allow src 10.0.0.0/8 dst 20.0.0.0/8 proto tcp dport {p}\n");
        if p % 50 == 0 {
            text += &std::format!("deny dst 20.0.0.0/{} proto tcp dport {p}\n", 8 + p / 50);
        }
    }
    text += "deny\n";
    let (rules, default) = parsed(&text);
    let mut s = Store::for_text(&text);
    let acl = s.build(&text).unwrap();
    assert_eq!(acl.tuple_count(), 6);
    for dport in 0..260 {
        for src in [[10, 1, 2, 3], [11, 1, 2, 3]] {
            let t = ft(src, [20, 0, 0, 1], IPPROTO_TCP, 1, dport);
            assert_eq!(acl.classify(&t), linear(&rules, default, &t), "{t:?}");
        }
    }
}

#[test]
fn full_groups_spill_into_the_next_and_wrap_around() {
    // One tuple (/32, /32) of 20 rules: 5 groups of 8 slots. All 20 keys have the last group
    // as their home: 8 fill it, 8 wrap around and fill the first, 4 go to the second.
    let at = |i: u32| (Ipv4Addr::from(0x0a00_0000 + i), Ipv4Addr::new(192, 0, 2, 1));
    let home = |i: u32| {
        let (s, d) = at(i);
        classify::Acl::home_group(s.to_bits(), d.to_bits(), 5)
    };
    let keys: Vec<u32> = (0..).filter(|&i| home(i) == 4).take(20).collect();
    let mut text = String::new();
    for (n, &i) in keys.iter().enumerate() {
        let (s, d) = at(i);
        let action = if n % 2 == 0 { "allow" } else { "deny" };
        text += &std::format!("{action} src {s}/32 dst {d}/32 proto udp dport {n}\n");
    }
    let (rules, default) = parsed(&text);
    let mut st = Store::for_text(&text);
    let acl = st.build(&text).unwrap();
    assert_eq!((acl.tuple_count(), acl.sizes_used().groups), (1, 5));
    // The last four sit in group 1: three groups probed (4, 0, 1).
    assert_eq!(acl.longest_probe(), 3);
    for i in 0..=keys[19] + 10 {
        let (s, d) = at(i);
        for dport in 0..21 {
            let t = FiveTuple {
                src: s,
                dst: d,
                proto: IPPROTO_UDP,
                sport: 1,
                dport,
            };
            assert_eq!(acl.classify(&t), linear(&rules, default, &t), "{t:?}");
        }
    }
}

#[test]
fn one_tuple_of_ten_thousand_keys() {
    // 10,000 distinct keys in one tuple: groups overflow into the next ones.
    let mut text = String::new();
    for i in 0..MAX_RULES as u32 {
        let s = Ipv4Addr::from(0x0a00_0000 + i * 7);
        text += &std::format!(
            "allow src {s}/32 dst 10.0.0.0/8 proto tcp dport {}\n",
            i % 3
        );
    }
    let (rules, default) = parsed(&text);
    let mut st = Store::for_text(&text);
    let acl = st.build(&text).unwrap();
    assert_eq!(acl.sizes_used().groups, MAX_RULES / 4);
    let longest = acl.longest_probe();
    assert!((2..=8).contains(&longest), "{longest}");
    for i in 0..MAX_RULES as u32 * 7 + 20 {
        let t = FiveTuple {
            src: Ipv4Addr::from(0x0a00_0000 + i),
            dst: Ipv4Addr::new(10, 1, 2, 3),
            proto: IPPROTO_TCP,
            sport: 9,
            dport: (i / 7 % 3) as u16,
        };
        let m = acl.classify(&t);
        let hit = i % 7 == 0 && i / 7 < MAX_RULES as u32;
        assert_eq!(m.rule, hit.then_some(i / 7), "{t:?}");
        if i % 97 == 0 {
            assert_eq!(m, linear(&rules, default, &t), "{t:?}");
        }
    }
}

// --- The classifier against the linear scan, on random rule sets ---------------------------

/// Addresses that collide: mostly in 10.0-3.0-3.0-3, some anywhere.
fn addr() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => (0u32..4, 0u32..4, 0u32..4).prop_map(|(b, c, d)| (10 << 24) | (b << 16) | (c << 8) | d),
        1 => any::<u32>(),
    ]
}

/// Prefixes: lengths 0, 8..=32, the round ones more often (so tuples hold several rules).
fn prefix() -> impl Strategy<Value = Ipv4Net> {
    let len = prop_oneof![
        Just(0u8),
        Just(8u8),
        Just(16u8),
        Just(24u8),
        Just(32u8),
        8u8..=32
    ];
    (len, addr()).prop_map(|(len, a)| {
        Ipv4Net {
            addr: Ipv4Addr::from_bits(a),
            len,
        }
        .network()
    })
}

fn port() -> impl Strategy<Value = u16> {
    prop_oneof![
        prop::sample::select(vec![0u16, 1, 53, 80, 443, 1023, 1024, 65534, 65535]),
        any::<u16>(),
    ]
}

fn ports() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        Just(PortRange::ANY),
        port().prop_map(|p| PortRange { lo: p, hi: p }),
        (port(), port()).prop_map(|(a, b)| PortRange {
            lo: a.min(b),
            hi: a.max(b)
        }),
    ]
}

fn proto() -> impl Strategy<Value = Proto> {
    prop_oneof![
        Just(Proto::Any),
        Just(Proto::Is(IPPROTO_TCP)),
        Just(Proto::Is(IPPROTO_UDP)),
        Just(Proto::Is(IPPROTO_ICMP)),
        any::<u8>().prop_map(Proto::Is),
    ]
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        prop_oneof![Just(Action::Allow), Just(Action::Deny)],
        prefix(),
        prefix(),
        proto(),
        ports(),
        ports(),
    )
        .prop_map(|(action, src, dst, proto, sport, dport)| {
            let (sport, dport) = if proto.has_ports() {
                (sport, dport)
            } else {
                (PortRange::ANY, PortRange::ANY)
            };
            Rule {
                action,
                src,
                dst,
                proto,
                sport,
                dport,
            }
        })
}

fn five_tuple() -> impl Strategy<Value = FiveTuple> {
    let proto = prop_oneof![
        prop::sample::select(vec![IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP]),
        any::<u8>()
    ];
    (addr(), addr(), proto, port(), port()).prop_map(|(s, d, proto, sport, dport)| {
        let ports = proto == IPPROTO_TCP || proto == IPPROTO_UDP;
        FiveTuple {
            src: Ipv4Addr::from_bits(s),
            dst: Ipv4Addr::from_bits(d),
            proto,
            sport: if ports { sport } else { 0 },
            dport: if ports { dport } else { 0 },
        }
    })
}

/// A packet inside rule `r`, from random bits: host bits, a protocol it takes, ports in range.
fn inside(r: &Rule, bits: u64, more: u64) -> FiveTuple {
    let host = |n: Ipv4Net, b: u32| Ipv4Addr::from_bits(n.addr.to_bits() | (b & !n.mask()));
    let proto = match r.proto {
        Proto::Is(p) => p,
        Proto::Any => [IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, 47][(more % 4) as usize],
    };
    let pick = |p: PortRange, b: u64| p.lo + (b % (u64::from(p.hi - p.lo) + 1)) as u16;
    let ports = proto == IPPROTO_TCP || proto == IPPROTO_UDP;
    FiveTuple {
        src: host(r.src, bits as u32),
        dst: host(r.dst, (bits >> 32) as u32),
        proto,
        sport: if ports { pick(r.sport, more >> 8) } else { 0 },
        dport: if ports { pick(r.dport, more >> 36) } else { 0 },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(512)))]

    /// Random rule sets (written out and parsed back) and random packets, plus packets aimed
    /// inside each rule and at rules picked at random: the classifier answers what the linear
    /// first-match scan answers.
    #[test]
    fn the_classifier_agrees_with_a_linear_scan(
        rules in prop::collection::vec(rule(), 0..48),
        default in prop_oneof![Just(None), Just(Some(Action::Allow)), Just(Some(Action::Deny))],
        default_at in any::<prop::sample::Index>(),
        random in prop::collection::vec(five_tuple(), 0..48),
        aimed in prop::collection::vec((any::<prop::sample::Index>(), any::<u64>(), any::<u64>()), 0..48),
    ) {
        let mut lines: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        if let Some(d) = default {
            lines.insert(default_at.index(lines.len() + 1), std::format!("default {d}"));
        }
        let text = lines.join("\n");
        let mut s = Store::for_text(&text);
        let acl = s.build(&text).unwrap();
        let default = default.unwrap_or(Action::Deny);
        prop_assert_eq!(acl.len(), rules.len());
        prop_assert_eq!(acl.default_action(), default);
        for (i, r) in rules.iter().enumerate() {
            prop_assert_eq!(acl.rule(i), Some(*r));
            // Inside every rule, a few ways.
            for k in 0..3u64 {
                let t = inside(r, k.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64, k * 7919);
                prop_assert!(r.matches(&t));
                let m = acl.classify(&t);
                prop_assert_eq!(m, linear(&rules, default, &t), "{:?}", t);
                prop_assert!(m.rule.is_some_and(|m| m as usize <= i));
            }
        }
        for t in &random {
            prop_assert_eq!(acl.classify(t), linear(&rules, default, t), "{:?}", t);
        }
        if !rules.is_empty() {
            for (ix, bits, more) in &aimed {
                let t = inside(&rules[ix.index(rules.len())], *bits, *more);
                prop_assert_eq!(acl.classify(&t), linear(&rules, default, &t), "{:?}", t);
            }
        }
    }
}

/// Tuple indices of `rules` as the classifier numbers them: (source length, destination length)
/// pairs in order of first use.
fn tuple_indices(rules: &[Rule]) -> Vec<usize> {
    let mut pairs: Vec<(u8, u8)> = Vec::new();
    rules
        .iter()
        .map(|r| {
            let p = (r.src.len, r.dst.len);
            pairs.iter().position(|&q| q == p).unwrap_or_else(|| {
                pairs.push(p);
                pairs.len() - 1
            })
        })
        .collect()
}

/// The tuple pruning's lists for (`src`, `dst`), as a scan of `rules` finds them: the tuples of
/// the rules whose source prefix holds `src`, of those whose destination prefix holds `dst`,
/// and their intersection.
fn pruned_by_scan(rules: &[Rule], src: u32, dst: u32) -> [Vec<usize>; 3] {
    let tuple = tuple_indices(rules);
    let holds = |n: &Ipv4Net, a: u32| a & n.mask() == n.addr.to_bits();
    let list = |f: &dyn Fn(&Rule) -> bool| {
        let mut v: Vec<usize> = (0..rules.len())
            .filter(|&i| f(&rules[i]))
            .map(|i| tuple[i])
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let a = list(&|r| holds(&r.src, src));
    let b = list(&|r| holds(&r.dst, dst));
    let both = a.iter().copied().filter(|t| b.contains(t)).collect();
    [a, b, both]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// The pruning's per-address tuple lists are exactly those of a scan of the rules, at the
    /// edges of every prefix (first and last address, and the ones just outside) and at random
    /// addresses: no tuple a matching rule lies in is pruned, and nothing more is kept.
    #[test]
    fn the_pruning_keeps_exactly_the_tuples_of_the_prefixes_holding_an_address(
        rules in prop::collection::vec(rule(), 0..48),
        random in prop::collection::vec((any::<u32>(), addr()), 0..16),
    ) {
        let text: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        let text = text.join("\n");
        let mut s = Store::for_text(&text);
        let acl = s.build(&text).unwrap();
        let mut addrs: Vec<u32> = random.iter().flat_map(|&(a, b)| [a, b]).collect();
        addrs.extend([0, u32::MAX]);
        for r in &rules {
            for n in [r.src, r.dst] {
                let (first, last) = (n.addr.to_bits(), n.addr.to_bits() | !n.mask());
                addrs.extend([first, last, first.wrapping_sub(1), last.wrapping_add(1)]);
            }
        }
        for (i, &a) in addrs.iter().enumerate() {
            let b = addrs[(i * 7 + 3) % addrs.len()];
            for (src, dst) in [(a, b), (b, a)] {
                prop_assert_eq!(acl.pruned(src, dst), pruned_by_scan(&rules, src, dst), "{:#x} {:#x}", src, dst);
            }
        }
    }
}

/// Prefixes at the edges of the direct index's blocks and of the address space: 8 rules give
/// 16 blocks of 2^28 addresses, and a /32 at a block's last address is an interval of its own.
#[test]
fn the_pruning_finds_prefixes_at_block_edges() {
    let text = "allow src 63.255.255.255/32\nallow src 64.0.0.0/32\n\
                allow src 127.255.255.255/32 dst 0.0.0.0/32\nallow dst 255.255.255.255/32\n\
                allow src 0.0.0.0/32\nallow src 0.0.0.0/1 dst 128.0.0.0/1\n\
                allow src 128.0.0.0/1\nallow src 255.255.255.254/31 dst 16.0.0.0/4\n";
    let (rules, default) = parsed(text);
    let mut s = Store::for_text(text);
    let acl = s.build(text).unwrap();
    let mut addrs = vec![0u32, 1, u32::MAX, u32::MAX - 1, u32::MAX - 2];
    for k in 1..16u32 {
        let edge = k << 28;
        addrs.extend([edge - 2, edge - 1, edge, edge + 1]);
    }
    for &a in &addrs {
        for &b in &addrs {
            assert_eq!(
                acl.pruned(a, b),
                pruned_by_scan(&rules, a, b),
                "{a:#x} {b:#x}"
            );
            let t = FiveTuple {
                src: a.into(),
                dst: b.into(),
                proto: IPPROTO_UDP,
                sport: 1,
                dport: 2,
            };
            assert_eq!(acl.classify(&t), linear(&rules, default, &t));
        }
    }
}

// --- The ClassBench-like set -----------------------------------------------------------------

/// The seed the benchmark uses.
const SEED: u64 = 0x00ac_1000;

fn classbench_text(n: usize, seed: u64) -> String {
    let mut text = String::new();
    classbench::generate(n, seed, &mut text).unwrap();
    text
}

#[test]
fn classbench_sets_are_deterministic_and_nested() {
    let a = classbench_text(1000, SEED);
    assert_eq!(a, classbench_text(1000, SEED));
    assert_ne!(a, classbench_text(1000, SEED + 1));
    assert_eq!(a.lines().count(), 1002);
    // The first 100 rules of 1,000 are the set of 100 (after the first line, which names n).
    let b = classbench_text(100, SEED);
    fn tail(t: &str) -> Vec<&str> {
        t.lines().skip(1).take(101).collect()
    }
    assert_eq!(tail(&a), tail(&b));
}

#[test]
fn ten_thousand_classbench_rules_agree_with_a_linear_scan() {
    let text = classbench_text(MAX_RULES, SEED);
    let (rules, default) = parsed(&text);
    assert_eq!((rules.len(), default), (MAX_RULES, Action::Deny));
    // The mix the generator promises: prefix lengths 8..=32 on both sides, at least 16 length
    // pairs, exact ports, ranges and wildcards, TCP, UDP and any.
    let pairs: HashSet<(u8, u8)> = rules.iter().map(|r| (r.src.len, r.dst.len)).collect();
    assert!(pairs.len() >= 16, "{} pairs", pairs.len());
    assert!(rules
        .iter()
        .all(|r| (8..=32).contains(&r.src.len) && (8..=32).contains(&r.dst.len)));
    let count = |f: &dyn Fn(&Rule) -> bool| rules.iter().filter(|r| f(r)).count();
    let exact = |p: PortRange| p.lo == p.hi;
    let range = |p: PortRange| p.lo < p.hi && !p.is_any();
    assert!(count(&|r| exact(r.dport)) > 1000);
    assert!(count(&|r| range(r.dport)) > 1000);
    assert!(count(&|r| r.proto.has_ports() && r.dport.is_any()) > 1000);
    assert!(count(&|r| range(r.sport)) > 100);
    assert!(count(&|r| r.proto == Proto::Is(IPPROTO_TCP)) > 5000);
    assert!(count(&|r| r.proto == Proto::Is(IPPROTO_UDP)) > 2000);
    assert!(count(&|r| r.proto == Proto::Any) > 500);
    assert!(count(&|r| r.action == Action::Deny) > 2000);

    let sizes = Acl::sizes(&text).unwrap();
    assert_eq!(sizes.tuples, pairs.len());
    let mut s = Store::new(sizes);
    let acl = s.build(&text).unwrap();
    assert_eq!(acl.tuple_count(), pairs.len());
    std::println!(
        "10,000 ClassBench-like rules: {} tuples, {} bytes of storage",
        acl.tuple_count(),
        sizes.bytes()
    );

    // 1,024 distinct aimed tuples, each matching its rule or an earlier one.
    let aimed: Vec<FiveTuple> = classbench::tuples(&acl, 1024, SEED).collect();
    assert_eq!(aimed.len(), 1024);
    assert_eq!(aimed.iter().collect::<HashSet<_>>().len(), 1024);
    let mut matched = HashSet::new();
    for (k, t) in aimed.iter().enumerate() {
        let m = acl.classify(t);
        assert_eq!(m, linear(&rules, default, t), "{t:?}");
        let target = k * MAX_RULES / 1024;
        assert!(rules[target].matches(t));
        assert!(m.rule.is_some_and(|i| i as usize <= target));
        matched.insert(m.rule);
    }
    // The pruning: a few tuples of 42 left per aimed packet (3.0 on average for this seed),
    // the lists a scan of the rules gives.
    let mut left = 0;
    for t in &aimed {
        let (src, dst) = (t.src.to_bits(), t.dst.to_bits());
        let p = acl.pruned(src, dst);
        left += p[2].len();
        assert_eq!(p, pruned_by_scan(&rules, src, dst));
    }
    assert!(left < 4 * aimed.len(), "{left} tuples left");
    // Spread over the rules: most aimed tuples hit distinct rules.
    assert!(matched.len() > 512, "{} distinct rules", matched.len());
    // Random packets (mostly the default) and packets near the rules' addresses.
    let mut rng = classbench::Rng::new(7);
    for t in &aimed {
        let mut near = *t;
        near.src = Ipv4Addr::from_bits(t.src.to_bits() ^ (1 << rng.below(32)));
        near.dport = rng.below(65536) as u16;
        let random = FiveTuple {
            src: Ipv4Addr::from_bits(rng.next_u64() as u32),
            dst: Ipv4Addr::from_bits(rng.next_u64() as u32),
            ..near
        };
        for t in [near, random] {
            assert_eq!(acl.classify(&t), linear(&rules, default, &t), "{t:?}");
        }
    }
}

#[test]
fn classbench_tuples_are_distinct_for_the_benchmark_sets() {
    for n in [10, 1000] {
        let text = classbench_text(n, SEED);
        let mut s = Store::for_text(&text);
        let acl = s.build(&text).unwrap();
        let (rules, default) = parsed(&text);
        let ts: Vec<FiveTuple> = classbench::tuples(&acl, 1024, SEED).collect();
        assert_eq!(ts.iter().collect::<HashSet<_>>().len(), 1024, "{n} rules");
        for t in &ts {
            assert_eq!(acl.classify(t), linear(&rules, default, t));
        }
    }
    // An ACL without rules still gets tuples (random ones), all denied by default.
    let mut s = Store::for_text("");
    let acl = s.build("").unwrap();
    assert!(classbench::tuples(&acl, 16, SEED).all(|t| acl.classify(&t).rule.is_none()));
}
