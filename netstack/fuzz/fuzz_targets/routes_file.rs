#![no_main]
//! Arbitrary text as a routes file (`--routes FILE`, the boot module): the parser never panics
//! and reports a bad line as a value naming it; every route it yields is installed as the boot
//! does (`Router::add_static` with `Existing::Refuse`: accepted, or refused with an error value,
//! a repeated prefix as a duplicate), can be found again,
//! and deleting them all leaves the FIB as it was (no tbl8 group or rule slot lost). The same
//! text as an appliance bundle (`config::bundle`): parsed or refused with a value, never a
//! panic, each file a slice of the text.

use libfuzzer_sys::fuzz_target;
use netstack::config::{bundle, parse_routes_file};
use netstack::router::{
    parse_ipv4_cidr, Existing, Fib, NextHop, PortConfig, RouteCheck, RouteError, Router,
    RouterConfig, RouterError, RuleSlot, TBL24_LEN, TBL8_GROUP_LEN,
};
use netstack::{MacAddr, Mode};
use std::sync::{Mutex, OnceLock};

type R = Router<'static, u32, 8, 4>;

fn router() -> &'static Mutex<R> {
    static S: OnceLock<Mutex<R>> = OnceLock::new();
    S.get_or_init(|| {
        let fib = Fib::new(
            core::iter::repeat_with(core::sync::atomic::AtomicU32::default)
                .take(TBL24_LEN)
                .collect::<Vec<_>>()
                .leak(),
            // Small on purpose: running out of tbl8 groups and rule slots is reachable.
            vec![0u32; 8 * TBL8_GROUP_LEN].leak(),
            vec![RuleSlot::EMPTY; 32].leak(),
        )
        .unwrap();
        let ports = [
            PortConfig {
                mac: MacAddr([2, 0, 0, 0, 0, 1]),
                addr: parse_ipv4_cidr("10.0.0.1/24").unwrap(),
            },
            PortConfig {
                mac: MacAddr([2, 0, 0, 0, 1, 1]),
                addr: parse_ipv4_cidr("10.0.1.1/24").unwrap(),
            },
        ];
        Mutex::new(R::new(fib, &ports, RouterConfig::default()).unwrap())
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for mode in [Mode::Router, Mode::L2] {
        match bundle::parse(text, mode) {
            Ok(b) => {
                for name in b.names() {
                    let f = b.file(name).expect("a listed file");
                    assert!(
                        text.contains(f),
                        "file `{name}` is not a slice of the module"
                    );
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let lines = text.lines().count();
    let mut r = router().lock().unwrap_or_else(|e| e.into_inner());
    let before = r.fib().len();
    let mut last = 0;
    let mut added = Vec::new();
    for item in parse_routes_file(text) {
        match item {
            Ok((line, (net, gw))) => {
                assert!(line > last && line <= lines);
                last = line;
                let had = r.fib().get(net);
                match r.add_static(net, gw, Existing::Refuse) {
                    Ok(new) => {
                        assert!(new, "Existing::Refuse adds or refuses");
                        match r.fib().get(net) {
                            Some(NextHop::Via { gateway, .. }) => assert_eq!(gateway, gw),
                            other => panic!("{net} -> {gw} installed as {other:?}"),
                        }
                        // The prefix's own address now routes by it or by something more
                        // specific.
                        assert!(r.fib().lookup(net.addr).is_some());
                        if had.is_none() {
                            added.push(net);
                        }
                    }
                    Err(e) => {
                        let _ = e.to_string();
                        // A repeated prefix is refused as a duplicate, unless the route is
                        // refused on its own first (its gateway, its prefix: the arrival
                        // checks, which Linux's `fib_create_info` also runs before it looks for
                        // an existing route).
                        if matches!(had, Some(NextHop::Via { .. })) {
                            let duplicate = RouterError::Route(RouteError::Duplicate {
                                prefix: net,
                                first: None,
                            });
                            if e != duplicate {
                                assert!(
                                    RouteCheck::new(r.ports().iter().map(|p| p.addr))
                                        .check(net, gw)
                                        .is_err(),
                                    "{net} -> {gw}: {e:?}, not a duplicate, yet a valid route"
                                );
                            }
                        }
                        assert_eq!(r.fib().get(net), had, "a refused route changed the FIB");
                    }
                }
            }
            Err((line, bad, why)) => {
                assert!(line > last && line <= lines);
                last = line;
                assert!(!bad.is_empty() && text.contains(bad));
                let _ = why.to_string();
            }
        }
    }
    for net in added.iter().rev() {
        r.delete_route(*net).expect("an installed route deletes");
    }
    assert_eq!(r.fib().len(), before, "routes left behind");
    // Room is back: the table takes as many new routes as at the start.
    for i in 0..4u8 {
        let net = parse_ipv4_cidr(&format!("172.16.{i}.0/28")).unwrap();
        r.add_route(net, [10, 0, 1, 2].into())
            .expect("room after deletes");
    }
    for i in 0..4u8 {
        let net = parse_ipv4_cidr(&format!("172.16.{i}.0/28")).unwrap();
        r.delete_route(net).unwrap();
    }
});
