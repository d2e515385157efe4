#![no_main]
//! Arbitrary text as a routes file built the way a live reload builds it
//! (`netstack::fib_build`, one bounded step at a time, with the tables sized by its own
//! count): no panic; no phase does more than its limit in a step; every step makes progress;
//! the stepped build ends with the same sealed rules, or the same first error, as the routes
//! added in one go and sealed at once.

use libfuzzer_sys::fuzz_target;
use netstack::config::parse_routes_file;
use netstack::fib_build::{self, fib_sizes, limits, FileError, Units};
use netstack::router::{
    parse_ipv4_cidr, Existing, Fib, Ipv4Net, NextHop, PortConfig, Router, RuleSlot, TBL8_GROUP_LEN,
};
use netstack::MacAddr;

fn ports() -> [PortConfig; 2] {
    [("10.0.0.1/24", 1), ("10.0.1.1/24", 2)].map(|(a, m)| PortConfig {
        mac: MacAddr([2, 0, 0, 0, 0, m]),
        addr: parse_ipv4_cidr(a).unwrap(),
    })
}

fn router<'a>(tbl8: &'a mut [u32], rules: &'a mut [RuleSlot]) -> Router<'a, u32, 8, 4> {
    let fib = Fib::new_sparse(tbl8, rules).unwrap();
    Router::new(fib, &ports(), Default::default()).unwrap()
}

/// The sealed FIB's routes, sorted, or the build's error as text.
type Outcome = Result<Vec<(Ipv4Net, NextHop)>, String>;

fn sealed(mut fib: Fib<'_>, stepped: bool) -> Outcome {
    let mut b = Units::default();
    if stepped {
        loop {
            match fib_build::seal(&mut fib, &mut b) {
                Ok(true) => break,
                Ok(false) => b.next_step(),
                Err(e) => return Err(e.to_string()),
            }
            assert!(b.most.0 <= b.most.1, "seal: {:?}", b.most);
        }
    } else if let Err(e) = fib.seal() {
        return Err(e.to_string());
    }
    let mut routes: Vec<_> = fib.routes().collect();
    routes.sort_by_key(|(n, _)| (n.addr.to_bits(), n.len));
    Ok(routes)
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Stepped, as the kernel's job.
    let mut b = Units::default();
    let (mut lines, mut counted) = (text.lines(), (0, 0));
    let mut steps = 0;
    while !fib_build::count_routes(&mut lines, &mut counted, &mut b) {
        b.next_step();
        steps += 1;
    }
    assert!(steps <= text.lines().count() / limits::SIZE_LINES);
    let (nrules, groups) = fib_sizes(counted.0, counted.1);
    let mut rules = vec![RuleSlot::EMPTY; nrules];
    let mut tbl8 = vec![0u32; groups * TBL8_GROUP_LEN];
    let mut next = 0;
    while !fib_build::clear_rules(&mut rules, &mut next, &mut b) {
        b.next_step();
    }
    let fib = Fib::new_sparse_prepared(&mut tbl8, &mut rules).unwrap();
    let mut r: Router<'_, u32, 8, 4> = Router::new(fib, &ports(), Default::default()).unwrap();
    let (mut file, mut added) = (parse_routes_file(text), 0);
    let stepped: Outcome = loop {
        let before = added;
        match fib_build::add_routes(&mut r, &mut file, &mut added, &mut b) {
            Ok(true) => break sealed(r.into_fib(), true),
            Ok(false) => assert!(added > before, "a step without progress"),
            Err(FileError::Parse(line, _, why)) => break Err(format!("line {line}: {why}")),
            Err(FileError::Route(line, net, gw, e)) => {
                break Err(format!("line {line}: {net},{gw}: {e}"))
            }
        }
        assert!(b.most.0 <= b.most.1, "add: {:?}", b.most);
        b.next_step();
    };
    assert!(b.most.0 <= b.most.1, "{:?}", b.most);
    // In one go, on tables of the same size.
    let (mut tbl8, mut rules) = (
        vec![0u32; groups * TBL8_GROUP_LEN],
        vec![RuleSlot::EMPTY; nrules],
    );
    let mut r = router(&mut tbl8, &mut rules);
    let mut once: Option<Outcome> = None;
    for item in parse_routes_file(text) {
        match item {
            Ok((line, (net, gw))) => {
                if let Err(e) = r.add_static(net, gw, Existing::Refuse) {
                    once = Some(Err(format!("line {line}: {net},{gw}: {e}")));
                    break;
                }
            }
            Err((line, _, why)) => {
                once = Some(Err(format!("line {line}: {why}")));
                break;
            }
        }
    }
    let once = once.unwrap_or_else(|| sealed(r.into_fib(), false));
    assert_eq!(stepped, once);
});
