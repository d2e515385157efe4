//! Poptrie against a reference longest-prefix match (every length probed in a hash map).

use super::synth::synthetic;
use super::*;
use core::net::Ipv6Addr;
use proptest::prelude::*;
use std::collections::HashMap;
use std::string::ToString;
use std::vec;
use std::vec::Vec;

/// Storage for one build.
struct Store {
    direct: Vec<u32>,
    nodes: Vec<Node6>,
    leaves: Vec<u32>,
}

impl Store {
    fn for_routes(routes: &mut [Route6]) -> Store {
        let s = Poptrie::size(routes).unwrap();
        Store {
            direct: vec![0; DIRECT_LEN],
            nodes: vec![Node6::default(); s.nodes],
            leaves: vec![0; s.leaves],
        }
    }

    fn build(&mut self, routes: &mut [Route6]) -> Poptrie<'_> {
        Poptrie::build(routes, &mut self.direct, &mut self.nodes, &mut self.leaves).unwrap()
    }
}

/// The reference: the longest of the 129 prefixes of `dst` that is a route.
struct Reference(HashMap<(u128, u8), u32>);

impl Reference {
    fn new(routes: &[Route6]) -> Reference {
        Reference(routes.iter().map(|r| ((r.prefix, r.len), r.nh)).collect())
    }

    fn lookup(&self, dst: u128) -> Option<u32> {
        (0..=128u8)
            .rev()
            .find_map(|l| self.0.get(&(dst & mask(l), l)).copied())
    }
}

fn r(s: &str, nh: u32) -> Route6 {
    let (a, l) = s.split_once('/').unwrap();
    Route6 {
        prefix: a.parse::<Ipv6Addr>().unwrap().to_bits(),
        len: l.parse().unwrap(),
        nh,
    }
}

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// Routes nested at every depth: the default, a /15, /32, /48, /64, /127 and /128.
fn nested() -> Vec<Route6> {
    vec![
        r("::/0", 1),
        r("2001:db8::/32", 2),
        r("2001:db8:1::/48", 3),
        r("2001:db8:1:2::/64", 4),
        r("2001:db8:1:2::1/128", 5),
        r("2001:db8:1:2::2/127", 6),
        r("2000::/15", 7),
    ]
}

#[test]
fn the_longest_prefix_wins_at_every_depth() {
    let mut routes = nested();
    routes.push(r("2001:db8:1:2::/63", 8));
    let mut s = Store::for_routes(&mut routes);
    let f = s.build(&mut routes);
    let cases = [
        ("3000::1", Some(1)),
        ("2000::1", Some(7)),
        ("2001:db9::1", Some(7)),
        ("2001:db8:ffff::1", Some(2)),
        ("2001:db8:1:ffff::1", Some(3)),
        ("2001:db8:1:3::1", Some(8)),
        ("2001:db8:1:2::3", Some(6)),
        ("2001:db8:1:2::2", Some(6)),
        ("2001:db8:1:2::1", Some(5)),
        ("2001:db8:1:2::", Some(4)),
        ("2001:db8:1:2:8000::", Some(4)),
    ];
    for (d, want) in cases {
        assert_eq!(f.lookup(a(d)), want, "{d}");
    }
}

#[test]
fn no_route_is_none_and_an_empty_fib_needs_no_node() {
    let mut routes = vec![r("2001:db8::/32", 0)];
    let mut s = Store::for_routes(&mut routes);
    let f = s.build(&mut routes);
    assert_eq!(f.lookup(a("2001:db8::1")), Some(0));
    assert_eq!(f.lookup(a("2001:db9::1")), None);
    assert_eq!(f.lookup(a("::1")), None);
    let mut none: Vec<Route6> = Vec::new();
    assert_eq!(Poptrie::size(&mut none).unwrap(), Size6::default());
}

#[test]
fn leaf_compression_keeps_one_leaf_per_run() {
    // One /64 under an otherwise empty /16: every level down to it has one child node and two
    // runs of leaves at most (no route before it, none after).
    let mut routes = vec![r("2001:db8:1:2::/64", 9)];
    let s = Poptrie::size(&mut routes).unwrap();
    // Depths 16, 22, ..., 58 lead to the /64 (bits 58..64 at the node of depth 58).
    assert_eq!(s.nodes, 8, "{s:?}");
    assert!(s.leaves <= 2 * 8, "{s:?}");
}

#[test]
fn bad_routes_and_short_storage_are_named() {
    let host_bits = r("2001:db8::1/32", 0);
    assert_eq!(
        Poptrie::size(&mut [host_bits]),
        Err(Fib6Error::HostBits(host_bits))
    );
    let long = Route6 {
        prefix: 0,
        len: 129,
        nh: 0,
    };
    assert_eq!(Poptrie::size(&mut [long]), Err(Fib6Error::BadLength(long)));
    let nh = r("2001:db8::/32", NO_ROUTE);
    assert_eq!(Poptrie::size(&mut [nh]), Err(Fib6Error::BadNextHop(nh)));
    let mut dup = [r("2001:db8::/32", 1), r("::/0", 0), r("2001:db8::/32", 2)];
    assert!(matches!(
        Poptrie::size(&mut dup),
        Err(Fib6Error::Duplicate(Route6 { len: 32, .. }))
    ));
    assert_eq!(
        Fib6Error::HostBits(host_bits).to_string(),
        "2001:db8::1/32: bits set past the prefix length"
    );

    let mut routes = vec![r("2001:db8:1::/48", 1)];
    let need = Poptrie::size(&mut routes).unwrap();
    let (mut d, mut n, mut l) = (
        vec![0; DIRECT_LEN],
        vec![Node6::default(); need.nodes - 1],
        vec![0; need.leaves],
    );
    assert_eq!(
        Poptrie::build(&mut routes, &mut d, &mut n, &mut l).err(),
        Some(Fib6Error::Nodes(need.nodes, need.nodes - 1))
    );
    let mut short = vec![0; 10];
    let mut n = vec![Node6::default(); need.nodes];
    assert_eq!(
        Poptrie::build(&mut routes, &mut short, &mut n, &mut l).err(),
        Some(Fib6Error::DirectLen(10))
    );
}

/// Addresses that exercise a route set: each prefix's first and last address, one inside it,
/// and the addresses just outside it.
fn probes(routes: &[Route6], extra: &[u128]) -> Vec<u128> {
    let mut v: Vec<u128> = extra.to_vec();
    for r in routes {
        let last = r.prefix | !mask(r.len);
        v.extend([
            r.prefix,
            last,
            r.prefix | (!mask(r.len) & 0x5555_5555_5555_5555_5555_5555_5555_5555),
            r.prefix.wrapping_sub(1),
            last.wrapping_add(1),
        ]);
    }
    v
}

/// Builds `routes` and compares every address of `at` with the reference.
fn check(routes: &mut [Route6], at: &[u128]) {
    let reference = Reference::new(routes);
    let mut s = Store::for_routes(routes);
    let f = s.build(routes);
    for &d in at {
        assert_eq!(
            f.lookup_index(d),
            reference.lookup(d),
            "{}",
            Ipv6Addr::from_bits(d)
        );
    }
}

/// A route under `base` (so that routes nest and share levels), of any length.
fn route_under(base: u128) -> impl Strategy<Value = Route6> {
    (0u8..=128, any::<u128>(), 0u32..16, 0u8..=3).prop_map(move |(len, bits, nh, spread)| {
        // `spread` picks how much of the address is random: clustering under base keeps
        // routes in the same nodes, full randomness covers the direct table.
        let keep = [0u32, 16, 32, 48][spread as usize];
        let p = (base & mask(keep as u8)) | (bits & !mask(keep as u8));
        Route6 {
            prefix: p & mask(len),
            len,
            nh,
        }
    })
}

fn dedup(mut v: Vec<Route6>) -> Vec<Route6> {
    v.sort_unstable_by_key(|r| (r.prefix, r.len));
    v.dedup_by_key(|r| (r.prefix, r.len));
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::router::tests::cases(64)))]

    #[test]
    fn lookups_equal_the_reference(
        routes in proptest::collection::vec(route_under(0x2001_0db8_0001_0002 << 64), 0..120),
        extra in proptest::collection::vec(any::<u128>(), 0..32),
    ) {
        let mut routes = dedup(routes);
        let at = probes(&routes, &extra);
        check(&mut routes, &at);
    }
}

/// Builds `routes` one unit a step and checks the result is the one-shot build's, byte for
/// byte; returns the steps taken and the most routes a node read.
fn stepped_equals_one_shot(routes: &mut [Route6]) -> (usize, usize) {
    let mut one = Store::for_routes(routes);
    let _ = one.build(routes);
    let mut two = Store::for_routes(routes);
    let mut b = Build6::new(routes).unwrap();
    let mut out = Out6::Write {
        direct: &mut two.direct,
        nodes: &mut two.nodes,
        leaves: &mut two.leaves,
    };
    let mut steps = 1;
    while !b.step(&mut out, 1) {
        steps += 1;
    }
    assert!(two.direct == one.direct && two.nodes == one.nodes && two.leaves == one.leaves);
    (steps, b.max_node_reads())
}

#[test]
fn a_build_in_one_unit_steps_equals_the_one_shot_build() {
    let mut routes = nested();
    let (steps, reads) = stepped_equals_one_shot(&mut routes);
    // 64 units fill the direct table, 64 paint ::/0, 2 paint 2000::/15, then the two short
    // routes and one /16's chain of nodes down to the /128.
    assert!(
        (160..=180).contains(&steps),
        "{steps} steps (169 when written)"
    );
    assert!(reads <= 8, "{reads}");
    let mut big = vec![r("::/0", 0); 20_000];
    let n = synthetic(11, 16, &mut big);
    big.truncate(n);
    let (steps, reads) = stepped_equals_one_shot(&mut big);
    let size = Poptrie::size(&mut big).unwrap();
    assert!(
        steps > size.nodes,
        "one node a unit: {steps} steps, {size:?}"
    );
    assert!(reads <= 126 + 64 + 128, "a node read {reads} routes");
}

/// A synthetic table of `n` routes equals the reference at the edges of every `step`th route;
/// returns its size.
fn synthetic_table(n: usize, step: usize) -> Size6 {
    let mut routes = vec![r("::/0", 0); n];
    let kept = synthetic(7, 64, &mut routes);
    routes.truncate(kept);
    assert!(kept * 1000 > n * 998, "{kept} unique of {n}");
    let lens: Vec<u8> = routes.iter().map(|r| r.len).collect();
    let share = |l: u8| lens.iter().filter(|&&x| x == l).count() * 100 / kept;
    assert!((50..=58).contains(&share(48)), "/48: {}%", share(48));
    assert!((10..=16).contains(&share(32)), "/32: {}%", share(32));
    let size = Poptrie::size(&mut routes).unwrap();
    // Reference lookups are 129 hash probes each: the edges of a sample of the routes.
    let sample: Vec<Route6> = routes.iter().step_by(step).copied().collect();
    check(&mut routes, &probes(&sample, &[]));
    size
}

#[test]
fn a_synthetic_table_of_20k_routes_equals_the_reference() {
    let size = synthetic_table(20_000, 41);
    // About 75 bytes a route beside the 256 KiB direct table (measured: 100k routes, 7.5 MB).
    assert!(size.bytes() < (256 << 10) + 20_000 * 100, "{size:?}");
}

/// `cargo test -p netstack --lib fib6 -- --ignored --nocapture`: the storage of 6, 1,000 and
/// 100,000 synthetic routes (BENCHMARKS.md's IPv6 FIB rows; counts, so the same on any host).
#[test]
#[ignore = "about 7 s in a debug build; the 20k case runs in CI"]
fn synthetic_tables_of_6_1k_and_100k_routes() {
    for n in [6, 1_000, 100_000] {
        let mut routes = vec![r("::/0", 0); n];
        let kept = synthetic(7, 64, &mut routes);
        routes.truncate(kept);
        let s = Poptrie::size(&mut routes).unwrap();
        std::eprintln!(
            "fib6: {kept} routes: {} nodes, {} leaves, {} bytes ({} KiB)",
            s.nodes,
            s.leaves,
            s.bytes(),
            s.bytes() / 1024
        );
    }
    let size = synthetic_table(100_000, 199);
    assert!(size.bytes() < 24 << 20, "{size:?}");
}

#[test]
fn the_same_seed_gives_the_same_routes() {
    let mut a = vec![r("::/0", 0); 1000];
    let mut b = a.clone();
    assert_eq!(synthetic(3, 8, &mut a), synthetic(3, 8, &mut b));
    assert_eq!(a, b);
    assert!(
        a.iter().all(|r| r.prefix >> 125 == 1 && r.nh < 8),
        "inside 2000::/3"
    );
}
