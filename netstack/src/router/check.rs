//! Static routes checked where they arrive: [`check_route`] knows the router's ports and is
//! called by every way a route comes in (`route=` when the command line is parsed, each line
//! of a `PUT /routes` body as it streams in, a console `route add` when typed) and again by
//! [`Router::add_route`](super::Router::add_route) when the FIB is built (the boot routes file
//! is read there). Parsing ([`super::parse`]) knows no ports; this does.
//!
//! Refused, each by its own [`RouteError`]:
//! - a gateway outside every port's network, or one of our addresses;
//! - a gateway that is a connected network's network or broadcast address (the router would
//!   ARP for it and whoever answers would get the prefix; Linux refuses it too, `Nexthop has
//!   invalid gateway`). On a /31 both addresses are hosts (RFC 3021); a /32 port has no
//!   connected network (the router refuses such ports);
//! - a prefix inside 0.0.0.0/8 (the default route 0.0.0.0/0 is not inside it), 127.0.0.0/8 or
//!   240.0.0.0/4 (RFC 1812 §5.3.7: the data path drops those destinations as `martian_dst`),
//!   255.255.255.255/32 (§5.3.5.1, counted `broadcast`) or inside 224.0.0.0/4 (multicast
//!   forwarding is not supported). A prefix that only covers such space (0.0.0.0/1,
//!   192.0.0.0/2) is legal: the data path still drops those destinations;
//! - a prefix that is a connected network, a port's address or a directed broadcast /32 (it
//!   would replace that route; a more specific prefix inside a connected network is legal);
//! - the same prefix twice in one layer ([`RouteError::Duplicate`]): the `route=` keys, one
//!   routes file or `PUT /routes` body, the pending console changes. A higher layer overrides
//!   a lower one (`route=` < routes file or body < console changes).
//!
//! IPv4 only: the router forwards no IPv6.

use super::fib::Ipv4Net;
use super::MAX_PORTS;
use core::net::Ipv4Addr;

/// Why a static route is refused (see the module documentation).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RouteError {
    /// The gateway is inside no port's network.
    GatewayNotConnected,
    /// The gateway is one of our addresses.
    GatewayIsLocal,
    /// The gateway is the network address of connected network `net` (a /30 or shorter).
    GatewayIsNetwork(Ipv4Net),
    /// The gateway is the directed broadcast address of connected network `net` (a /30 or
    /// shorter).
    GatewayIsBroadcast(Ipv4Net),
    /// The prefix is inside 0.0.0.0/8, "this network" (RFC 1812 §5.3.7); 0.0.0.0/0 is not.
    ThisNetwork,
    /// The prefix is inside 127.0.0.0/8, loopback (RFC 1812 §5.3.7).
    Loopback,
    /// The prefix is inside 240.0.0.0/4, reserved (class E, RFC 1812 §5.3.7), and is not the
    /// limited broadcast.
    Reserved,
    /// The prefix is 255.255.255.255/32, the limited broadcast (RFC 1812 §5.3.5.1).
    LimitedBroadcast,
    /// The prefix is inside 224.0.0.0/4: multicast forwarding is not supported.
    Multicast,
    /// The prefix is a connected network, a port's address /32 or a directed broadcast /32.
    OverConnected,
    /// `prefix` was given already in the same layer; `first` numbers the earlier one
    /// (1-based: its `route=` key, line or pending change) when the checker knows it.
    Duplicate {
        /// The repeated prefix.
        prefix: Ipv4Net,
        /// The earlier entry's number, if known.
        first: Option<usize>,
    },
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::GatewayNotConnected => f.write_str("gateway not on a port's network"),
            RouteError::GatewayIsLocal => f.write_str("gateway is one of our addresses"),
            RouteError::GatewayIsNetwork(net) => {
                write!(f, "gateway is the network address of connected network {net}")
            }
            RouteError::GatewayIsBroadcast(net) => {
                write!(f, "gateway is the broadcast address of connected network {net}")
            }
            RouteError::ThisNetwork => f.write_str(
                "prefix inside 0.0.0.0/8, \"this network\" (RFC 1812 5.3.7; 0.0.0.0/0 is the default route)",
            ),
            RouteError::Loopback => f.write_str("prefix inside 127.0.0.0/8, loopback (RFC 1812 5.3.7)"),
            RouteError::Reserved => {
                f.write_str("prefix inside 240.0.0.0/4, reserved (RFC 1812 5.3.7)")
            }
            RouteError::LimitedBroadcast => f.write_str(
                "255.255.255.255/32 is the limited broadcast, never forwarded (RFC 1812 5.3.5.1)",
            ),
            RouteError::Multicast => {
                f.write_str("prefix inside 224.0.0.0/4: multicast forwarding not supported")
            }
            RouteError::OverConnected => f.write_str(
                "the prefix is a connected network, a port address or a broadcast address (routes may only be more specific)",
            ),
            RouteError::Duplicate { prefix, first } => {
                write!(f, "duplicate prefix {prefix}")?;
                if let Some(n) = first {
                    write!(f, " (first at {n})")?;
                }
                f.write_str(": one route per prefix in a routes file, body, the route= keys or the pending changes")
            }
        }
    }
}

/// Whether `prefix` lies inside `space` (as long or longer, and within it).
fn inside(prefix: Ipv4Net, space: Ipv4Net) -> bool {
    prefix.len >= space.len && space.contains(prefix.addr)
}

/// `a.b.c.d/len` as a constant.
const fn net(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net {
        addr: Ipv4Addr::new(a, b, c, d),
        len,
    }
}

/// Check the static route `prefix → gateway` against the router's ports (`ports[i]`: port
/// `i`'s address and prefix length, as `ipN=` gives them). `prefix` has no host bits set (as
/// [`parse_route`](super::parse_route) returns it) and `gateway` is unicast (idem). Returns
/// the port the route leaves by: the first whose network holds the gateway.
///
/// # Errors
/// The first [`RouteError`] that applies, in the order of the module documentation (the
/// gateway, then the prefix); never [`RouteError::Duplicate`] (a layer's checker finds those).
pub fn check_route(
    ports: &[Ipv4Net],
    prefix: Ipv4Net,
    gateway: Ipv4Addr,
) -> Result<usize, RouteError> {
    if ports.iter().any(|p| p.addr == gateway) {
        return Err(RouteError::GatewayIsLocal);
    }
    let port = ports
        .iter()
        .position(|p| p.len < 32 && p.contains(gateway))
        .ok_or(RouteError::GatewayNotConnected)?;
    for p in ports.iter().filter(|p| p.len <= 30) {
        if gateway == p.network().addr {
            return Err(RouteError::GatewayIsNetwork(p.network()));
        }
        if gateway == p.broadcast() {
            return Err(RouteError::GatewayIsBroadcast(p.network()));
        }
    }
    if prefix == net(255, 255, 255, 255, 32) {
        return Err(RouteError::LimitedBroadcast);
    }
    for (space, e) in [
        (net(0, 0, 0, 0, 8), RouteError::ThisNetwork),
        (net(127, 0, 0, 0, 8), RouteError::Loopback),
        (net(224, 0, 0, 0, 4), RouteError::Multicast),
        (net(240, 0, 0, 0, 4), RouteError::Reserved),
    ] {
        if inside(prefix, space) {
            return Err(e);
        }
    }
    let over = ports.iter().any(|p| {
        prefix == p.network()
            || prefix == net_32(p.addr)
            || (p.len <= 30 && prefix == net_32(p.broadcast()))
    });
    if over {
        return Err(RouteError::OverConnected);
    }
    Ok(port)
}

/// `ip/32`.
fn net_32(ip: Ipv4Addr) -> Ipv4Net {
    Ipv4Net { addr: ip, len: 32 }
}

/// A console route change, queued until `routes commit`.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RouteChange {
    /// `route add PREFIX/LEN,GATEWAY`.
    Add(Ipv4Net, Ipv4Addr),
    /// `route del PREFIX/LEN`.
    Del(Ipv4Net),
}

impl core::fmt::Display for RouteChange {
    /// The console command that queued it: `route add PREFIX/LEN,GATEWAY` or `route del
    /// PREFIX/LEN`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteChange::Add(net, gw) => write!(f, "route add {net},{gw}"),
            RouteChange::Del(net) => write!(f, "route del {net}"),
        }
    }
}

impl RouteChange {
    /// The prefix it changes.
    pub fn prefix(self) -> Ipv4Net {
        match self {
            RouteChange::Add(p, _) | RouteChange::Del(p) => p,
        }
    }
}

/// The router's ports as [`check_route`] takes them, kept by value (at most [`MAX_PORTS`]).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RouteCheck {
    ports: [Ipv4Net; MAX_PORTS],
    n: usize,
}

impl RouteCheck {
    /// Over `ports` (port `i` is `ports[i]`; those past [`MAX_PORTS`] are ignored: the router
    /// has no more).
    pub fn new(ports: impl IntoIterator<Item = Ipv4Net>) -> RouteCheck {
        let mut c = RouteCheck {
            ports: [net(0, 0, 0, 0, 32); MAX_PORTS],
            n: 0,
        };
        for (slot, p) in c.ports.iter_mut().zip(ports) {
            *slot = p;
            c.n += 1;
        }
        c
    }

    /// The ports.
    pub fn ports(&self) -> &[Ipv4Net] {
        &self.ports[..self.n]
    }

    /// [`check_route`] over these ports.
    ///
    /// # Errors
    /// As [`check_route`].
    pub fn check(&self, prefix: Ipv4Net, gateway: Ipv4Addr) -> Result<usize, RouteError> {
        check_route(self.ports(), prefix, gateway)
    }

    /// Check one layer given as a list (the `route=` keys, in order): every route, and no
    /// prefix twice.
    ///
    /// # Errors
    /// `(n, why)` for the first refused route, `n` its 1-based place; a repeat is
    /// [`RouteError::Duplicate`] naming the first.
    pub fn check_list(&self, routes: &[(Ipv4Net, Ipv4Addr)]) -> Result<(), (usize, RouteError)> {
        for (i, &(prefix, gw)) in routes.iter().enumerate() {
            self.check(prefix, gw).map_err(|e| (i + 1, e))?;
            if let Some(j) = routes[..i].iter().position(|r| r.0 == prefix) {
                let first = Some(j + 1);
                return Err((i + 1, RouteError::Duplicate { prefix, first }));
            }
        }
        Ok(())
    }

    /// Check a console change before it joins `pending` (the changes not yet committed, in
    /// order): an addition by [`check_route`], a deletion not of a connected, local or
    /// broadcast route; and neither may repeat the latest pending change of its prefix (an
    /// addition after an addition, a deletion after a deletion). An addition after a deletion
    /// and the other way round stay legal, as do changes over committed ones.
    ///
    /// # Errors
    /// The [`RouteError`]; a repeat is [`RouteError::Duplicate`] naming the pending change
    /// it repeats (1-based in `pending`).
    pub fn check_change(
        &self,
        pending: &[RouteChange],
        change: RouteChange,
    ) -> Result<(), RouteError> {
        match change {
            RouteChange::Add(prefix, gw) => {
                self.check(prefix, gw)?;
            }
            RouteChange::Del(prefix) => {
                let over = self.ports().iter().any(|p| {
                    prefix == p.network()
                        || prefix == net_32(p.addr)
                        || (p.len <= 30 && prefix == net_32(p.broadcast()))
                });
                if over {
                    return Err(RouteError::OverConnected);
                }
            }
        }
        let prefix = change.prefix();
        let last = pending.iter().rposition(|c| c.prefix() == prefix);
        match last {
            Some(j) if core::mem::discriminant(&pending[j]) == core::mem::discriminant(&change) => {
                Err(RouteError::Duplicate {
                    prefix,
                    first: Some(j + 1),
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::parse_route;
    use std::string::ToString;

    /// A console change prints as the command that queued it, and an added route's text after
    /// `route add ` reads back as the same route.
    #[test]
    fn a_change_prints_as_its_console_command() {
        let (net, gw) = parse_route("172.16.0.0/12,10.0.1.2").unwrap();
        assert_eq!(
            RouteChange::Add(net, gw).to_string(),
            "route add 172.16.0.0/12,10.0.1.2"
        );
        assert_eq!(RouteChange::Del(net).to_string(), "route del 172.16.0.0/12");
        let text = RouteChange::Add(net, gw).to_string();
        assert_eq!(parse_route(&text["route add ".len()..]), Ok((net, gw)));
    }

    /// Port 0 10.0.0.1/24, port 1 10.0.1.1/24, port 2 192.0.2.0/31 (RFC 3021), port 3
    /// 198.51.100.7/32.
    fn ports() -> RouteCheck {
        RouteCheck::new(
            [
                "10.0.0.1/24",
                "10.0.1.1/24",
                "192.0.2.0/31",
                "198.51.100.7/32",
            ]
            .map(|s| crate::router::parse_ipv4_cidr(s).unwrap()),
        )
    }

    fn check(route: &str) -> Result<usize, RouteError> {
        let (p, g) = parse_route(route).unwrap();
        ports().check(p, g)
    }

    fn n(s: &str) -> Ipv4Net {
        crate::router::parse_ipv4_cidr(s).unwrap()
    }

    #[test]
    fn legal_routes_name_their_port() {
        assert_eq!(check("192.168.0.0/16,10.0.1.2"), Ok(1));
        assert_eq!(check("0.0.0.0/0,10.0.0.254"), Ok(0));
        // Covering reserved space is legal: only routes inside it are refused.
        assert_eq!(check("0.0.0.0/1,10.0.1.2"), Ok(1));
        assert_eq!(check("192.0.0.0/2,10.0.1.2"), Ok(1));
        assert_eq!(check("0.0.0.0/7,10.0.1.2"), Ok(1));
        assert_eq!(check("126.0.0.0/7,10.0.1.2"), Ok(1));
        assert_eq!(check("224.0.0.0/3,10.0.1.2"), Ok(1));
        // More specific than a connected network, and its network address /32.
        assert_eq!(check("10.0.0.128/25,10.0.1.2"), Ok(1));
        assert_eq!(check("10.0.0.0/32,10.0.1.2"), Ok(1));
        // /31 (RFC 3021): both addresses are hosts, the other one a gateway.
        assert_eq!(check("172.16.0.0/12,192.0.2.1"), Ok(2));
        assert_eq!(check("223.255.255.0/24,10.0.1.2"), Ok(1));
    }

    #[test]
    fn every_refused_class_by_name() {
        for (route, want) in [
            (
                "192.168.0.0/16,10.0.1.255",
                RouteError::GatewayIsBroadcast(n("10.0.1.0/24")),
            ),
            (
                "192.168.0.0/16,10.0.1.0",
                RouteError::GatewayIsNetwork(n("10.0.1.0/24")),
            ),
            (
                "192.168.0.0/16,10.0.0.255",
                RouteError::GatewayIsBroadcast(n("10.0.0.0/24")),
            ),
            ("192.168.0.0/16,10.0.2.1", RouteError::GatewayNotConnected),
            ("192.168.0.0/16,10.0.1.1", RouteError::GatewayIsLocal),
            ("192.168.0.0/16,192.0.2.0", RouteError::GatewayIsLocal),
            ("0.0.0.0/8,10.0.1.2", RouteError::ThisNetwork),
            ("0.1.0.0/16,10.0.1.2", RouteError::ThisNetwork),
            ("0.0.0.0/32,10.0.1.2", RouteError::ThisNetwork),
            ("127.0.0.0/8,10.0.1.2", RouteError::Loopback),
            ("127.0.0.1/32,10.0.1.2", RouteError::Loopback),
            ("240.0.0.0/4,10.0.1.2", RouteError::Reserved),
            ("250.1.0.0/16,10.0.1.2", RouteError::Reserved),
            ("255.255.255.254/32,10.0.1.2", RouteError::Reserved),
            ("255.255.255.255/32,10.0.1.2", RouteError::LimitedBroadcast),
            ("224.0.0.0/4,10.0.1.2", RouteError::Multicast),
            ("239.1.2.0/24,10.0.1.2", RouteError::Multicast),
            ("224.0.0.1/32,10.0.1.2", RouteError::Multicast),
            ("10.0.0.0/24,10.0.1.2", RouteError::OverConnected),
            ("10.0.0.1/32,10.0.1.2", RouteError::OverConnected),
            ("10.0.0.255/32,10.0.1.2", RouteError::OverConnected),
            ("192.0.2.0/31,10.0.1.2", RouteError::OverConnected),
            ("198.51.100.7/32,10.0.1.2", RouteError::OverConnected),
        ] {
            assert_eq!(check(route), Err(want), "{route}");
        }
        assert_eq!(
            RouteError::GatewayIsBroadcast(n("10.0.1.0/24")).to_string(),
            "gateway is the broadcast address of connected network 10.0.1.0/24"
        );
        assert_eq!(
            RouteError::Multicast.to_string(),
            "prefix inside 224.0.0.0/4: multicast forwarding not supported"
        );
    }

    /// A /31's two addresses are hosts (RFC 3021); a /32 port has no network, no broadcast
    /// and holds no gateway but itself.
    #[test]
    fn slash_31_and_slash_32_ports() {
        // 192.0.2.0/31: .1 the peer (not a "broadcast"), .0 ours.
        assert_eq!(check("203.0.113.0/24,192.0.2.1"), Ok(2));
        assert_eq!(
            check("203.0.113.0/24,192.0.2.0"),
            Err(RouteError::GatewayIsLocal)
        );
        // 198.51.100.7/32: its neighbours are on no connected network; itself is local.
        assert_eq!(
            check("203.0.113.0/24,198.51.100.6"),
            Err(RouteError::GatewayNotConnected)
        );
        assert_eq!(
            check("203.0.113.0/24,198.51.100.8"),
            Err(RouteError::GatewayNotConnected)
        );
        assert_eq!(
            check("203.0.113.0/24,198.51.100.7"),
            Err(RouteError::GatewayIsLocal)
        );
        // A /30: network and broadcast refused, the two hosts legal.
        let c = RouteCheck::new([n("10.9.9.1/30")]);
        let gw = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let p = n("172.16.0.0/12");
        assert_eq!(c.check(p, gw("10.9.9.2")), Ok(0));
        assert_eq!(
            c.check(p, gw("10.9.9.0")),
            Err(RouteError::GatewayIsNetwork(n("10.9.9.0/30")))
        );
        assert_eq!(
            c.check(p, gw("10.9.9.3")),
            Err(RouteError::GatewayIsBroadcast(n("10.9.9.0/30")))
        );
    }

    #[test]
    fn duplicates_in_a_list_name_both_places() {
        let r = |s: &str| parse_route(s).unwrap();
        let c = ports();
        assert_eq!(
            c.check_list(&[r("1.0.0.0/8,10.0.1.2"), r("2.0.0.0/8,10.0.1.2")]),
            Ok(())
        );
        let list = [
            r("1.0.0.0/8,10.0.1.2"),
            r("2.0.0.0/8,10.0.1.2"),
            r("1.0.0.0/8,10.0.0.2"),
        ];
        let e = c.check_list(&list).unwrap_err();
        assert_eq!(
            e,
            (
                3,
                RouteError::Duplicate {
                    prefix: n("1.0.0.0/8"),
                    first: Some(1)
                }
            )
        );
        assert_eq!(
            e.1.to_string(),
            "duplicate prefix 1.0.0.0/8 (first at 1): one route per prefix in a routes file, body, the route= keys or the pending changes"
        );
        // The same prefix with another length is another route.
        assert_eq!(
            c.check_list(&[r("1.0.0.0/8,10.0.1.2"), r("1.0.0.0/9,10.0.1.2")]),
            Ok(())
        );
        // A bad route before any repeat is named by its place.
        assert_eq!(
            c.check_list(&[r("1.0.0.0/8,10.0.1.2"), r("1.0.0.0/8,10.0.1.255")]),
            Err((2, RouteError::GatewayIsBroadcast(n("10.0.1.0/24"))))
        );
    }

    #[test]
    fn console_changes_against_the_pending_ones() {
        let c = ports();
        let gw = Ipv4Addr::new(10, 0, 1, 2);
        let add = |s: &str| RouteChange::Add(n(s), gw);
        let del = |s: &str| RouteChange::Del(n(s));
        let pending = [
            add("1.0.0.0/8"),
            del("2.0.0.0/8"),
            add("3.0.0.0/8"),
            del("3.0.0.0/8"),
        ];
        let dup = |prefix: &str, first| RouteError::Duplicate {
            prefix: n(prefix),
            first: Some(first),
        };
        assert_eq!(
            c.check_change(&pending, add("1.0.0.0/8")),
            Err(dup("1.0.0.0/8", 1))
        );
        assert_eq!(
            c.check_change(&pending, del("2.0.0.0/8")),
            Err(dup("2.0.0.0/8", 2))
        );
        assert_eq!(
            c.check_change(&pending, del("3.0.0.0/8")),
            Err(dup("3.0.0.0/8", 4))
        );
        // After the other kind of change, or none: legal.
        assert_eq!(c.check_change(&pending, del("1.0.0.0/8")), Ok(()));
        assert_eq!(c.check_change(&pending, add("2.0.0.0/8")), Ok(()));
        assert_eq!(c.check_change(&pending, add("3.0.0.0/8")), Ok(()));
        assert_eq!(c.check_change(&[], add("1.0.0.0/8")), Ok(()));
        // An addition is checked as any route; a deletion may not remove a port's routes.
        assert_eq!(
            c.check_change(
                &[],
                RouteChange::Add(n("1.0.0.0/8"), Ipv4Addr::new(10, 0, 1, 255))
            ),
            Err(RouteError::GatewayIsBroadcast(n("10.0.1.0/24")))
        );
        assert_eq!(
            c.check_change(&[], del("10.0.1.0/24")),
            Err(RouteError::OverConnected)
        );
        assert_eq!(
            c.check_change(&[], del("10.0.1.1/32")),
            Err(RouteError::OverConnected)
        );
        assert_eq!(c.check_change(&[], del("10.0.1.128/25")), Ok(()));
    }
}
