//! A sparse FIB built and rebuilt (a reload) the way the kernel's stepped job builds it, phase
//! by phase through this module's functions, one [`Units`] step at a time: no phase does more
//! than its [`limits`] in a step, for a 7-route and a 100,000-route table.

use super::*;
use crate::config::parse_routes_file;
use crate::router::{
    parse_ipv4_cidr, NextHop, PortConfig, Tbl24Chunk, TBL24_CHUNKS, TBL24_CHUNK_LEN, TBL24_LEN,
    TBL8_GROUP_LEN,
};
use crate::MacAddr;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::string::String;
use std::vec;
use std::vec::Vec;

fn ports() -> [PortConfig; PORTS] {
    [("10.0.0.1/24", 1), ("10.0.1.1/24", 2)].map(|(a, m)| PortConfig {
        mac: MacAddr([2, 0, 0, 0, 0, m]),
        addr: parse_ipv4_cidr(a).unwrap(),
    })
}

/// The 100,000-route mix of tests/src/lib.rs `write_routes_100k` (0.5% /28, a few /8 and /12,
/// the rest /16–/24, outside 0/8, 10/8, 127/8 and 224/3), first 203.0.113.0/24 and
/// 198.51.100.16/28, with a comment and a blank line.
fn routes_100k() -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let common = [24u32, 24, 24, 24, 24, 23, 22, 21, 20, 16, 16, 19, 18, 17];
    let mut seen = std::collections::HashSet::new();
    let mut text = String::from("# 100k\n\n203.0.113.0/24,10.0.1.2\n198.51.100.16/28,10.0.1.2\n");
    seen.insert((0xcb00_7100u32, 24u32));
    seen.insert((0xc633_6410, 28));
    while seen.len() < 100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let l = match x % 200 {
            0 => 28,
            1 => 8,
            2 | 3 => 12,
            k => common[k as usize % common.len()],
        };
        let a = ((x >> 32) as u32) & (u32::MAX << (32 - l));
        let top = a >> 24;
        if [0, 10, 127].contains(&top) || top >= 224 || !seen.insert((a, l)) {
            continue;
        }
        let gw = ["10.0.0.2", "10.0.1.2"][seen.len() % 2];
        text.push_str(&std::format!("{}/{l},{gw}\n", Ipv4Addr::from(a)));
    }
    text
}

/// What one build did: steps taken, most units of one phase in one step (and that phase's
/// limit), the FIB's routes.
struct Built {
    steps: usize,
    most: (usize, usize),
    routes: usize,
}

/// Build the FIB of `text` plus `extra` (added over the file, as the console's changes) the
/// kernel's way, one step per loop turn, and check its lookups of `probes`.
fn build(text: &'static str, extra: &[(&str, &str)], probes: &[(&str, Option<u8>)]) -> Built {
    let mut b = Units::default();
    let mut steps = 0;
    let mut step = |b: &mut Units| {
        steps += 1;
        b.next_step();
    };
    // Size.
    let (mut lines, mut counted) = (text.lines(), (0, 0));
    while !count_routes(&mut lines, &mut counted, &mut b) {
        step(&mut b);
    }
    let (nrules, groups) = fib_sizes(counted.0 + extra.len(), counted.1);
    // Tables: zeroed pages (TABLE_PAGES of them per step in the kernel), then the rule slots.
    let tbl8: &'static mut [u32] = vec![0; groups * TBL8_GROUP_LEN].leak();
    // (The kernel's fresh pages are zero, which is not an empty slot; `new_sparse_prepared`
    // checks in debug builds that every slot was cleared.)
    let rules: &'static mut [RuleSlot] = vec![RuleSlot::EMPTY; nrules].leak();
    let mut next = 0;
    while !clear_rules(rules, &mut next, &mut b) {
        step(&mut b);
    }
    let fib = Fib::new_sparse_prepared(tbl8, rules).unwrap();
    let mut router: Router<'static, u32, 8, 4> =
        Router::new(fib, &ports(), Default::default()).unwrap();
    // File.
    let (mut file, mut added) = (parse_routes_file(text), 0);
    while !add_routes(&mut router, &mut file, &mut added, &mut b).unwrap() {
        step(&mut b);
    }
    assert_eq!(added, counted.0);
    // Deltas: one go, at most MAX_CMDLINE_ROUTES + MAX_DELTAS (64 + 64) in the kernel.
    for (net, gw) in extra {
        router
            .add_route(parse_ipv4_cidr(net).unwrap(), gw.parse().unwrap())
            .unwrap();
    }
    let mut fib = router.into_fib();
    // Seal.
    while !seal(&mut fib, &mut b).unwrap() {
        step(&mut b);
    }
    // Tbl24: the kernel fills a scratch page and maps it; here a host copy.
    let tbl24: &'static [AtomicU32] = (0..TBL24_LEN)
        .map(|_| AtomicU32::new(0))
        .collect::<Vec<_>>()
        .leak();
    let mut out = vec![0u32; TBL24_CHUNK_LEN];
    b.phase(limits::TBL24_CHUNKS);
    for c in 0..TBL24_CHUNKS {
        let dst = &tbl24[c * TBL24_CHUNK_LEN..(c + 1) * TBL24_CHUNK_LEN];
        match fib.fill_chunk(c, &mut out).unwrap() {
            Tbl24Chunk::Uniform(v) => dst.iter().for_each(|e| e.store(v, Relaxed)),
            Tbl24Chunk::Mixed => dst.iter().zip(&out).for_each(|(e, &v)| e.store(v, Relaxed)),
        }
        if b.spend(1) {
            step(&mut b);
            b.phase(limits::TBL24_CHUNKS);
        }
    }
    fib.attach_tbl24(tbl24).unwrap();
    for (dst, port) in probes {
        let got = match fib.lookup(dst.parse().unwrap()) {
            Some(NextHop::Via { port, .. } | NextHop::Connected { port }) => Some(port),
            _ => None,
        };
        assert_eq!(got, *port, "{dst}");
    }
    Built {
        steps: steps + 1,
        most: b.most,
        routes: fib.len(),
    }
}

#[test]
fn seven_routes_build_and_reload_in_bounded_steps() {
    let text = "0.0.0.0/0,10.0.0.2\n192.168.0.0/16,10.0.1.2\n172.16.0.0/12,10.0.1.2\n\
                203.0.113.0/24,10.0.1.2\n198.51.100.16/28,10.0.1.2\n\
                100.64.0.0/10,10.0.0.2\n192.0.2.128/25,10.0.1.2\n";
    let probes = [
        ("203.0.113.7", Some(1)),
        ("198.51.100.17", Some(1)),
        ("198.51.100.15", Some(0)),
        ("8.8.8.8", Some(0)),
        ("10.0.1.9", Some(1)),
    ];
    let boot = build(text, &[], &probes);
    assert_eq!(boot.routes, 7 + 3 * PORTS);
    assert!(boot.most.0 <= boot.most.1, "{:?}", boot.most);
    // A reload with a console change: the default route moves to port 1.
    let probes = [("8.8.8.8", Some(1)), ("203.0.113.7", Some(1))];
    let reload = build(text, &[("0.0.0.0/0", "10.0.1.3")], &probes);
    assert_eq!(reload.routes, boot.routes);
    assert!(reload.most.0 <= reload.most.1, "{:?}", reload.most);
    // 16,384 tbl24 chunks at 8 a step: the fewest steps any table takes.
    assert!(
        boot.steps >= TBL24_CHUNKS / limits::TBL24_CHUNKS,
        "{}",
        boot.steps
    );
}

#[test]
fn hundred_thousand_routes_build_and_reload_in_bounded_steps() {
    let text: &'static str = routes_100k().leak();
    let probes = [
        ("203.0.113.77", Some(1)),
        ("198.51.100.20", Some(1)),
        ("10.0.0.9", Some(0)),
        ("127.0.0.1", None),
    ];
    let boot = build(text, &[], &probes);
    assert_eq!(boot.routes, 100_000 + 3 * PORTS);
    assert!(boot.most.0 <= boot.most.1, "{:?}", boot.most);
    let reload = build(
        text,
        &[("203.0.113.0/24", "10.0.0.2")],
        &[("203.0.113.77", Some(0))],
    );
    assert_eq!(reload.routes, boot.routes);
    assert!(reload.most.0 <= reload.most.1, "{:?}", reload.most);
    // Every phase is cut into steps: 100,002 lines counted, 131,072 rule slots cleared,
    // 100,000 routes added, 16,384 chunks filled, each at its limit a step (and the sort).
    let least = 100_002 / limits::SIZE_LINES
        + 131_072 / limits::RULE_SLOTS
        + 100_000 / limits::FILE_ROUTES
        + TBL24_CHUNKS / limits::TBL24_CHUNKS;
    assert!(boot.steps > least, "{} steps", boot.steps);
}

#[test]
fn clear_rules_stops_at_its_limit_and_resumes() {
    let rules: &mut [RuleSlot] = &mut vec![RuleSlot::EMPTY; 10_000];
    let mut b = Units::default();
    let mut next = 0;
    assert!(!clear_rules(rules, &mut next, &mut b));
    assert_eq!(next, limits::RULE_SLOTS);
    b.next_step();
    assert!(!clear_rules(rules, &mut next, &mut b));
    b.next_step();
    assert!(clear_rules(rules, &mut next, &mut b));
    assert_eq!(
        (next, b.most),
        (10_000, (limits::RULE_SLOTS, limits::RULE_SLOTS))
    );
}

#[test]
fn add_routes_names_the_bad_line() {
    let tbl8: &'static mut [u32] = vec![0; 8 * TBL8_GROUP_LEN].leak();
    let rules: &'static mut [RuleSlot] = vec![RuleSlot::EMPTY; 64].leak();
    let fib = Fib::new_sparse_prepared(tbl8, rules).unwrap();
    let mut router: Router<'static, u32, 8, 4> =
        Router::new(fib, &ports(), Default::default()).unwrap();
    let mut b = Units::default();
    let (mut added, text) = (0, "192.168.0.0/16,10.0.1.2\n192.168.0.0/16,10.0.0.2\n");
    let e = add_routes(
        &mut router,
        &mut parse_routes_file(text),
        &mut added,
        &mut b,
    );
    assert!(
        matches!(e, Err(FileError::Route(2, _, _, RouterError::Route(_)))),
        "{e:?}"
    );
    let e = add_routes(
        &mut router,
        &mut parse_routes_file("1.2.3.0/33,10.0.1.2"),
        &mut added,
        &mut b,
    );
    assert!(
        matches!(e, Err(FileError::Parse(1, "1.2.3.0/33,10.0.1.2", _))),
        "{e:?}"
    );
    assert_eq!(added, 1);
}

#[test]
fn sizing_counts_routes_and_long_prefixes() {
    assert_eq!(sizing_len(" # c"), None);
    assert_eq!(sizing_len("10.0.0.0/28,1.2.3.4 # x"), Some(28));
    assert_eq!(sizing_len("junk"), Some(0));
    assert_eq!(fib_sizes(100_000, 500), (131_072, 504));
    assert_eq!(fib_sizes(0, 0), (MIN_RULES, 4));
    assert_eq!(fib_sizes(10, 5_000).1, TBL8_GROUPS_MAX);
}
