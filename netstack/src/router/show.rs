//! The text forms in which routes and neighbours are listed (the console's `routes` and
//! `neigh`; the README's *Console* section documents them):
//!
//! - A static route reads as a routes-file line, `PREFIX/LEN,GATEWAY`
//!   (`192.168.0.0/16,10.0.1.2`), which [`super::parse_route`] reads back to the same prefix and
//!   gateway: a listed route can be pasted into a routes file, a `PUT /routes` body or a
//!   console `route add`. Its port is the one whose connected network holds the gateway.
//! - The routes each port's address installs have forms of their own, with no comma, so that
//!   none of them parses as a route: `10.0.1.0/24 connected port 1` (the port's network),
//!   `10.0.1.1/32 local` (its address: delivered to the router) and `10.0.1.255/32 broadcast`
//!   (its directed broadcast address: not forwarded).
//! - A neighbour reads `IP port P mac M STATE queued N`, with `mac -` while it is `INCOMPLETE`
//!   and STATE as `ip neigh` names it (`INCOMPLETE`, `REACHABLE`, `STALE`).

use super::fib::{Ipv4Net, NextHop};
use super::neigh::{NeighInfo, NeighState};
use core::fmt;
use core::net::Ipv4Addr;

/// One FIB entry as listed: its prefix and where it leads ([`super::Fib::routes`] yields the
/// pair; `Route::from` takes it).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Route {
    /// The destination prefix (no host bits).
    pub prefix: Ipv4Net,
    /// Where it leads.
    pub next_hop: NextHop,
}

impl From<(Ipv4Net, NextHop)> for Route {
    fn from((prefix, next_hop): (Ipv4Net, NextHop)) -> Route {
        Route { prefix, next_hop }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.prefix;
        match self.next_hop {
            NextHop::Via { gateway, .. } => write!(f, "{p},{gateway}"),
            NextHop::Connected { port } => write!(f, "{p} connected port {port}"),
            NextHop::Local => write!(f, "{p} local"),
            NextHop::Broadcast => write!(f, "{p} broadcast"),
        }
    }
}

impl NeighState {
    /// The state's name as `ip neigh` prints it (`NONE` for a free slot, never listed).
    pub const fn as_str(self) -> &'static str {
        match self {
            NeighState::Free => "NONE",
            NeighState::Incomplete => "INCOMPLETE",
            NeighState::Reachable => "REACHABLE",
            NeighState::Stale => "STALE",
        }
    }
}

impl fmt::Display for NeighState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for NeighInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} port {} mac ",
            Ipv4Addr::from_bits(self.ip),
            self.port
        )?;
        if self.state == NeighState::Incomplete {
            f.write_str("-")?;
        } else {
            write!(f, "{}", self.mac)?;
        }
        write!(f, " {} queued {}", self.state, self.queued)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fib::{Fib, RuleSlot, TBL8_GROUP_LEN};
    use super::super::tests::ports;
    use super::super::{parse_ipv4_cidr, parse_route, ParseError, Router};
    use super::*;
    use crate::MacAddr;
    use proptest::prelude::*;
    use std::string::{String, ToString};
    use std::vec;
    use std::vec::Vec;

    /// A sparse FIB's storage (rules only: listing needs no tbl24, and 64 MiB per case would
    /// make the property slow).
    struct Store {
        tbl8: Vec<u32>,
        rules: Vec<RuleSlot>,
    }

    impl Store {
        fn new(groups: usize, rules: usize) -> Store {
            Store {
                tbl8: vec![0; groups * TBL8_GROUP_LEN],
                rules: vec![RuleSlot::EMPTY; rules],
            }
        }

        fn fib(&mut self) -> Fib<'_> {
            Fib::new_sparse(&mut self.tbl8, &mut self.rules).unwrap()
        }
    }

    /// Every route of a router with these static routes, printed, sorted.
    fn listed(store: &mut Store, statics: &[&str]) -> Vec<String> {
        let mut r: Router<'_, u32, 8, 4> =
            Router::new(store.fib(), &ports(), Default::default()).unwrap();
        for s in statics {
            let (p, g) = parse_route(s).unwrap();
            r.add_route(p, g).unwrap();
        }
        let mut v: Vec<String> = r
            .fib()
            .routes()
            .map(|e| Route::from(e).to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn every_kind_of_route_has_its_form() {
        let mut s = Store::new(16, 64);
        assert_eq!(
            listed(&mut s, &["192.168.0.0/16,10.0.1.2", "0.0.0.0/0,10.0.0.2"]),
            [
                "0.0.0.0/0,10.0.0.2",
                "10.0.0.0/24 connected port 0",
                "10.0.0.1/32 local",
                "10.0.0.255/32 broadcast",
                "10.0.1.0/24 connected port 1",
                "10.0.1.1/32 local",
                "10.0.1.255/32 broadcast",
                "192.168.0.0/16,10.0.1.2",
            ]
        );
    }

    #[test]
    fn only_static_routes_parse_as_routes() {
        let net = parse_ipv4_cidr("10.0.1.0/24").unwrap();
        let host = parse_ipv4_cidr("10.0.1.1/32").unwrap();
        for (r, e) in [
            (
                Route::from((net, NextHop::Connected { port: 1 })),
                ParseError::MissingGateway,
            ),
            (
                Route::from((host, NextHop::Local)),
                ParseError::MissingGateway,
            ),
            (
                Route::from((host, NextHop::Broadcast)),
                ParseError::MissingGateway,
            ),
        ] {
            assert_eq!(parse_route(&r.to_string()), Err(e), "{r}");
        }
    }

    #[test]
    fn neighbours() {
        let mut n = NeighInfo {
            ip: 0x0a00_0102,
            port: 1,
            mac: MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            state: NeighState::Reachable,
            queued: 0,
        };
        assert_eq!(
            n.to_string(),
            "10.0.1.2 port 1 mac 52:54:00:12:34:56 REACHABLE queued 0"
        );
        n.state = NeighState::Stale;
        assert_eq!(
            n.to_string(),
            "10.0.1.2 port 1 mac 52:54:00:12:34:56 STALE queued 0"
        );
        n.state = NeighState::Incomplete;
        n.mac = MacAddr::default();
        n.queued = 3;
        assert_eq!(n.to_string(), "10.0.1.2 port 1 mac - INCOMPLETE queued 3");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(super::super::tests::cases(64)))]

        /// Printed static routes parse back to the routes installed: the prefix, and the
        /// gateway the FIB holds for it.
        #[test]
        fn static_routes_read_back(
            routes in proptest::collection::vec((any::<u32>(), 1u8..=32, 2u8..=254, any::<bool>()), 1..12)
        ) {
            let mut s = Store::new(64, 256);
            let mut r: Router<'_, u32, 8, 4> =
                Router::new(s.fib(), &ports(), Default::default()).unwrap();
            let mut added = Vec::new();
            for (addr, len, host, port) in routes {
                let prefix = Ipv4Net::new(Ipv4Addr::from_bits(addr), len).unwrap().network();
                let gw = Ipv4Addr::new(10, 0, u8::from(port), host);
                // Prefixes over a connected network or one of its /32s are refused: skipped.
                if r.add_route(prefix, gw).is_ok() {
                    added.retain(|&(p, _)| p != prefix);
                    added.push((prefix, gw));
                }
            }
            let mut back = Vec::new();
            for e in r.fib().routes() {
                let text = Route::from(e).to_string();
                if let NextHop::Via { port, gateway } = e.1 {
                    let (p, g) = parse_route(&text).unwrap();
                    prop_assert_eq!((p, g), (e.0, gateway), "{}", text);
                    prop_assert!(ports()[usize::from(port)].addr.contains(g), "{}", text);
                    back.push((p, g));
                } else {
                    prop_assert!(parse_route(&text).is_err(), "{}", text);
                }
            }
            added.sort_by_key(|&(p, _)| (p.addr, p.len));
            back.sort_by_key(|&(p, _)| (p.addr, p.len));
            prop_assert_eq!(back, added);
        }
    }
}
