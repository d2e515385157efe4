//! The router's IPv6 configuration as the kernel takes it: the ports' addresses (`ip6_0=`,
//! `ip6_1=`) checked together, the IPv6 lines of a routes file (a file may mix both families:
//! a line holding a `:` is IPv6, [`is_ipv6_line`]), each static route checked against the
//! ports ([`check_route6`]), and the route list and next-hop table a [`super::fib6::Poptrie`]
//! is built from ([`collect6`]). Host-tested here; the kernel's boot build
//! (unikernel/src/setup/fib6.rs) only carves the memory.

use super::fib6::Route6;
use super::ipv6::{classify, AddrClass6};
use super::parse6::{parse_route6, Ipv6Net, Parse6Error, Route6Spec};
use super::v6::{NextHop6, Router6};
use crate::wire::IPV6_MIN_MTU;

/// Why a static IPv6 route does not fit the ports.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Route6Error {
    /// A link-local gateway's zone names a port without an IPv6 address (or none at all).
    NoSuchPort(u8),
    /// A global gateway inside no port's prefix.
    GatewayUnreachable,
    /// The gateway is one of the router's own addresses.
    GatewayIsOwn,
    /// A prefix equal to a port's connected prefix.
    Connected,
}

impl core::fmt::Display for Route6Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Route6Error::NoSuchPort(p) => write!(f, "zone %{p} names no port with an ip6_{p}="),
            Route6Error::GatewayUnreachable => {
                f.write_str("gateway inside no port's ip6_N= prefix")
            }
            Route6Error::GatewayIsOwn => f.write_str("gateway is one of the router's addresses"),
            Route6Error::Connected => f.write_str("prefix is a port's connected prefix"),
        }
    }
}

/// Why the ports' IPv6 configuration is refused, naming the key at fault.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Ports6Error {
    /// `ip6_N=` given for one port only (the router's IPv6 half runs on both).
    OnePortOnly(usize),
    /// Port `N`'s `mtuN=` is below 1,280 (RFC 8200 §5).
    MtuBelowMinimum(usize, u16),
    /// `ip6_1=` is `ip6_0=`'s address.
    DuplicateAddress,
    /// `ip6_1=` is in `ip6_0=`'s prefix (or the other way round): two ports on one link.
    OverlappingPrefix,
}

impl Ports6Error {
    /// The key the error names.
    pub fn key(&self) -> &'static str {
        match self {
            Ports6Error::OnePortOnly(0) => "ip6_1",
            Ports6Error::OnePortOnly(_) => "ip6_0",
            Ports6Error::MtuBelowMinimum(0, _) => "mtu0",
            Ports6Error::MtuBelowMinimum(_, _) => "mtu1",
            Ports6Error::DuplicateAddress | Ports6Error::OverlappingPrefix => "ip6_1",
        }
    }
}

impl core::fmt::Display for Ports6Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Ports6Error::OnePortOnly(p) => write!(
                f,
                "key `{}` is required with ip6_{p}= (IPv6 runs on both ports)",
                self.key()
            ),
            Ports6Error::MtuBelowMinimum(p, m) => write!(
                f,
                "mtu{p}={m} is below IPv6's minimum link MTU of {IPV6_MIN_MTU} (RFC 8200 §5) with ip6_{p}="
            ),
            Ports6Error::DuplicateAddress => f.write_str("ip6_1= is ip6_0='s address"),
            Ports6Error::OverlappingPrefix => {
                f.write_str("ip6_1= and ip6_0= overlap (two ports on one prefix)")
            }
        }
    }
}

/// What `ip6_N=` takes: a global unicast address with a prefix length below 128.
///
/// # Errors
/// What the value is expected to be, for the key's error.
pub fn parse_port_addr(v: &str) -> Result<Ipv6Net, &'static str> {
    const EXPECTED: &str = "an interface address like 2001:db8::1/64 (global unicast)";
    let n = super::parse6::parse_ipv6_cidr(v).map_err(|_| EXPECTED)?;
    if classify(n.addr) != AddrClass6::Unicast {
        return Err(EXPECTED);
    }
    if n.len == 128 {
        return Err("a prefix length below 128 (a /128 leaves the port no connected prefix), like 2001:db8::1/64");
    }
    Ok(n)
}

/// Checks the ports' IPv6 addresses (`ip6`) with their IP MTUs (`mtu`, `None`: the device's,
/// checked when the port is up).
///
/// # Errors
/// [`Ports6Error`] naming the key.
pub fn check_ports6(ip6: &[Option<Ipv6Net>; 2], mtu: &[Option<u16>; 2]) -> Result<(), Ports6Error> {
    match ip6 {
        [None, None] => return Ok(()),
        [Some(_), None] => return Err(Ports6Error::OnePortOnly(0)),
        [None, Some(_)] => return Err(Ports6Error::OnePortOnly(1)),
        [Some(a), Some(b)] => {
            if a.addr == b.addr {
                return Err(Ports6Error::DuplicateAddress);
            }
            if a.contains(b.addr) || b.contains(a.addr) {
                return Err(Ports6Error::OverlappingPrefix);
            }
        }
    }
    for (p, m) in mtu.iter().enumerate() {
        if let Some(m) = *m {
            if usize::from(m) < IPV6_MIN_MTU {
                return Err(Ports6Error::MtuBelowMinimum(p, m));
            }
        }
    }
    Ok(())
}

/// The next hop of route `r` over the ports' addresses `ip6` (port `i` is `ip6[i]`).
///
/// # Errors
/// [`Route6Error`]: a zone naming no IPv6 port, a global gateway on no port's prefix or equal
/// to one of our addresses, the prefix of a connected route.
pub fn check_route6(ip6: &[Option<Ipv6Net>], r: &Route6Spec) -> Result<NextHop6, Route6Error> {
    let own = |a: u128| ip6.iter().flatten().any(|n| n.addr == a);
    if ip6
        .iter()
        .flatten()
        .any(|n| n.len == r.prefix.len && n.contains(r.prefix.addr))
    {
        return Err(Route6Error::Connected);
    }
    let port = match r.port {
        Some(p) => {
            if ip6.get(usize::from(p)).copied().flatten().is_none() {
                return Err(Route6Error::NoSuchPort(p));
            }
            p
        }
        None => {
            if own(r.gateway) {
                return Err(Route6Error::GatewayIsOwn);
            }
            let p = ip6
                .iter()
                .position(|n| n.is_some_and(|n| n.contains(r.gateway)))
                .ok_or(Route6Error::GatewayUnreachable)?;
            p as u8
        }
    };
    Ok(NextHop6::Via {
        port,
        gateway: r.gateway,
    })
}

/// Whether a routes-file line (comment and blanks included) is an IPv6 route: it holds a `:`
/// before any `#` (an IPv4 line never does).
pub fn is_ipv6_line(line: &str) -> bool {
    line.split('#').next().unwrap_or("").contains(':')
}

/// The IPv6 routes of a routes file: `(line number from 1, the line's route text, parsed)`,
/// IPv4, blank and comment lines skipped.
pub fn routes6_of_file(
    text: &str,
) -> impl Iterator<Item = (usize, &str, Result<Route6Spec, Parse6Error>)> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let l = line.split('#').next().unwrap_or("").trim();
        (l.contains(':')).then(|| (i + 1, l, parse_route6(l)))
    })
}

/// Where a route of [`collect6`] came from, for its error.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Origin6 {
    /// The `n`-th (from 1) `route=` of the command line.
    Cmdline(usize),
    /// A routes-file line (from 1).
    File(usize),
}

/// Why [`collect6`] refused a route.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Collect6Error<'t> {
    /// A line that does not parse: its text and why.
    Parse(Origin6, &'t str, Parse6Error),
    /// A route the ports refuse.
    Route(Origin6, Route6Spec, Route6Error),
    /// More routes than the storage holds (routes, room).
    Full(usize, usize),
}

impl core::fmt::Display for Collect6Error<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let at = |f: &mut core::fmt::Formatter<'_>, o: &Origin6| match o {
            Origin6::Cmdline(n) => write!(f, "route= #{n}"),
            Origin6::File(n) => write!(f, "routes file line {n}"),
        };
        match self {
            Collect6Error::Parse(o, text, why) => {
                at(f, o)?;
                write!(f, ": `{text}`: {why}")
            }
            Collect6Error::Route(o, r, why) => {
                at(f, o)?;
                write!(
                    f,
                    ": {},{}: {why}",
                    r.prefix,
                    core::net::Ipv6Addr::from_bits(r.gateway)
                )
            }
            Collect6Error::Full(n, room) => write!(f, "{n} IPv6 routes, room for {room}"),
        }
    }
}

/// IPv6 routes a FIB over `ports` with `cmdline` routes and `file`'s IPv6 lines holds: one
/// connected route a port, and one a static route (an upper bound: bad lines are refused by
/// [`collect6`]).
pub fn count6(ports: usize, cmdline: usize, file: Option<&str>) -> usize {
    ports + cmdline + file.map_or(0, |t| t.lines().filter(|l| is_ipv6_line(l)).count())
}

/// The routes and next hops of the IPv6 FIB over the ports' addresses `ip6` (both given):
/// each port's connected prefix (next hop `i` for port `i`), then the command line's routes,
/// then the routes file's IPv6 lines, each static route with a next hop of its own. Written
/// into `routes` and `nexthops` (each at least [`count6`] long). Returns how many of each.
/// A prefix given twice is refused by the build ([`super::fib6::Fib6Error::Duplicate`]).
///
/// # Errors
/// The first route refused ([`Collect6Error`]).
pub fn collect6<'t>(
    ip6: &[Ipv6Net],
    cmdline: &[Route6Spec],
    file: Option<&'t str>,
    routes: &mut [Route6],
    nexthops: &mut [NextHop6],
) -> Result<usize, Collect6Error<'t>> {
    let ports: heapless::Vec<super::v6::Port6, { super::v6::MAX_PORTS6 }> = ip6
        .iter()
        .map(|&addr| super::v6::Port6 {
            mac: crate::MacAddr::default(),
            addr,
            mtu: IPV6_MIN_MTU as u16,
        })
        .collect();
    let room = routes.len().min(nexthops.len());
    let mut n = 0;
    for (r, nh) in Router6::<u32>::connected(&ports) {
        if n == room {
            return Err(Collect6Error::Full(n + 1, room));
        }
        routes[n] = r;
        nexthops[n] = nh;
        n += 1;
    }
    let opt: heapless::Vec<Option<Ipv6Net>, { super::v6::MAX_PORTS6 }> =
        ip6.iter().map(|&a| Some(a)).collect();
    let cmd = cmdline
        .iter()
        .enumerate()
        .map(|(i, r)| (Origin6::Cmdline(i + 1), "", Ok(*r)));
    let lines = file
        .into_iter()
        .flat_map(routes6_of_file)
        .map(|(l, t, r)| (Origin6::File(l), t, r));
    for (origin, text, r) in cmd.chain(lines) {
        let r = r.map_err(|e| Collect6Error::Parse(origin, text, e))?;
        let nh = check_route6(&opt, &r).map_err(|e| Collect6Error::Route(origin, r, e))?;
        if n == room {
            return Err(Collect6Error::Full(n + 1, room));
        }
        routes[n] = Route6 {
            prefix: r.prefix.addr,
            len: r.prefix.len,
            nh: n as u32,
        };
        nexthops[n] = nh;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
