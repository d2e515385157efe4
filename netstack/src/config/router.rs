//! `mode=router`'s settings and keys: its static routes of either family (`route=`) and its
//! ports' IPv6 addresses (`ip6_0=`, `ip6_1=`); its IPv4 interface addresses are the kernel's
//! `ip0=`/`ip1=` (the management plane's too). Checked together once the line is parsed
//! ([`KEY_SET`]'s check): both `ipN=` given, the IPv6 ports as a whole, and every route
//! against the ports, each prefix once.

use super::keys::{Key, KeyError, KeySet, Owned, Owner};
use super::{Config, ConfigError, Mode, MAX_CMDLINE_ROUTES, PORTS};
use crate::router::parse6::{parse_route6, Ipv6Net, Route6Spec};
use crate::router::setup6::{check_ports6, check_route6, parse_port_addr};
use crate::router::{parse_route, Ipv4Net, RouteCheck};
use core::net::Ipv4Addr;

/// The router's settings from the command line.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct RouterSettings {
    /// `route=PREFIX/LEN,GATEWAY` (repeatable, up to [`MAX_CMDLINE_ROUTES`]): static routes;
    /// `0.0.0.0/0,GW` is the default route. Checked against `ip0=`/`ip1=`
    /// ([`crate::router::check_route`]), each prefix once, when the line is parsed.
    pub routes: heapless::Vec<(Ipv4Net, Ipv4Addr), MAX_CMDLINE_ROUTES>,
    /// `route=PREFIX/LEN,GATEWAY[%PORT]` with an IPv6 prefix (up to [`MAX_CMDLINE_ROUTES`]):
    /// static IPv6 routes, a link-local gateway naming its port (`::/0,fe80::1%1`). Checked
    /// against `ip6_0=`/`ip6_1=` when the line is parsed.
    pub routes6: heapless::Vec<Route6Spec, MAX_CMDLINE_ROUTES>,
    /// `ip6_0=ADDR/LEN`, `ip6_1=…` (both or neither): the ports' global IPv6 addresses and
    /// connected prefixes (not /128); each port also has the link-local address of its MAC.
    /// With them the router forwards IPv6 too (every such port's MTU ≥ 1,280).
    pub ip6: [Option<Ipv6Net>; PORTS],
    /// `ra6=on|off` (default `off`, RFC 8504 §6.2: a router sends advertisements when told):
    /// Router Advertisements on the IPv6 ports (`netstack::router::v6::ra`); needs `ip6_0=`.
    pub ra6: bool,
}

/// `route=` (either family: an IPv6 one holds a `:`), `ip6_0=`, `ip6_1=`, `ra6=`.
const KEYS: &[Key<RouterSettings>] = &[
    Key::repeated("route", |r, v| {
        if v.contains(':') {
            let route = parse_route6(v).map_err(|e| KeyError::Expected(e.as_str()))?;
            return r.routes6.push(route).map_err(|_| KeyError::TooMany);
        }
        let route = parse_route(v)
            .map_err(|_| KeyError::Expected("PREFIX/LEN,GATEWAY like 192.168.0.0/16,10.0.1.2"))?;
        r.routes.push(route).map_err(|_| KeyError::TooMany)
    }),
    Key::new("ip6_0", |r, v| {
        r.ip6[0] = Some(parse_port_addr(v).map_err(KeyError::Expected)?);
        Ok(())
    }),
    Key::new("ip6_1", |r, v| {
        r.ip6[1] = Some(parse_port_addr(v).map_err(KeyError::Expected)?);
        Ok(())
    }),
    Key::new("ra6", |r, v| {
        r.ra6 = match v {
            "on" => true,
            "off" => false,
            _ => return Err(KeyError::Expected("on or off")),
        };
        Ok(())
    }),
];

/// The router's keys ([`RouterSettings`], [`Config::router`]).
pub const KEY_SET: KeySet = KeySet::new(
    Owner::Nf(&[Mode::Router]),
    &Owned {
        keys: KEYS,
        settings: |c| &mut c.router,
        check,
    },
);

/// Both interface addresses given; the IPv6 ports and routes fit; every IPv4 route fits the
/// ports, each prefix once: checked here, once the ports are known, not first at the FIB build.
fn check(c: &Config) -> Result<(), ConfigError<'static>> {
    for (i, key) in ["ip0", "ip1"].into_iter().enumerate() {
        if c.ip[i].is_none() {
            return Err(ConfigError::Missing {
                key,
                because: "with mode=router",
            });
        }
    }
    let r = &c.router;
    check_ports6(&r.ip6, &c.mtu).map_err(ConfigError::Ports6)?;
    if r.ra6 && r.ip6[0].is_none() {
        return Err(ConfigError::Missing {
            key: "ip6_0",
            because: "for ra6=on (Router Advertisements need the ports' IPv6 prefixes)",
        });
    }
    for route in &r.routes6 {
        check_route6(&r.ip6, route).map_err(|why| ConfigError::BadRoute6 { route: *route, why })?;
    }
    let ports = RouteCheck::new(c.ip.iter().flatten().copied());
    if let Err((n, why)) = ports.check_list(&r.routes) {
        let (prefix, gateway) = r.routes[n - 1];
        return Err(ConfigError::BadRoute {
            prefix,
            gateway,
            why,
        });
    }
    Ok(())
}
