//! Parsers for IPv6 route configuration, the IPv6 counterparts of [`super::parse`]:
//!
//! - `ADDR/LEN` — an IPv6 prefix, `core::net::Ipv6Addr` text form (RFC 5952 or any RFC 4291
//!   §2.2 form), LEN 0..=128 ([`parse_ipv6_cidr`]).
//! - `PREFIX/LEN,GATEWAY` or `PREFIX/LEN,GATEWAY%PORT` — a static route
//!   ([`parse_route6`]). A link-local gateway (`fe80::/10`) means nothing without its link, so
//!   it names the port as a zone index (RFC 4007 §11: `fe80::1%1`); a global gateway takes no
//!   zone (its port is found from the connected prefixes).
//!
//! Refused by name (issue 40's intake rules for IPv6): prefixes inside `::/128`, `::1/128`,
//! `fe80::/10` (link-local: never forwarded, RFC 4291 §2.5.6) and `ff00::/8` (no multicast
//! forwarding); prefixes that only cover such space (`::/0`, `fe00::/7`) stay legal.

use super::ipv6::{classify, AddrClass6};
use core::net::Ipv6Addr;

/// An IPv6 prefix (or an interface address with its prefix length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Net {
    /// The address, host order.
    pub addr: u128,
    /// Prefix length, 0..=128.
    pub len: u8,
}

impl Ipv6Net {
    /// The network mask of this prefix's length.
    pub fn mask(&self) -> u128 {
        match self.len {
            0 => 0,
            l => u128::MAX << (128 - u32::from(l.min(128))),
        }
    }

    /// Whether `a` lies inside this prefix.
    pub fn contains(&self, a: u128) -> bool {
        a & self.mask() == self.addr & self.mask()
    }

    /// Whether this prefix lies inside `other` (is as long or longer and shares its bits).
    pub fn within(&self, other: &Ipv6Net) -> bool {
        self.len >= other.len && other.contains(self.addr)
    }
}

impl core::fmt::Display for Ipv6Net {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{}", Ipv6Addr::from_bits(self.addr), self.len)
    }
}

/// A parsed IPv6 static route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route6Spec {
    /// The destination prefix (no host bits).
    pub prefix: Ipv6Net,
    /// The gateway.
    pub gateway: u128,
    /// The port named by a link-local gateway's zone index.
    pub port: Option<u8>,
}

/// Why an IPv6 value did not parse.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Parse6Error {
    /// No `/LEN`.
    MissingPrefixLen,
    /// Not an IPv6 address.
    BadAddress,
    /// LEN not a number in 0..=128.
    BadPrefixLen,
    /// A route prefix with bits set past its length.
    HostBitsSet,
    /// A route without `,GATEWAY`.
    MissingGateway,
    /// A gateway that cannot be one: `::`, `::1` or multicast.
    BadGateway,
    /// A link-local gateway without `%PORT`.
    LinkLocalNeedsPort,
    /// A zone index that is not a port number (0..=255), or one on a global gateway.
    BadZone,
    /// A prefix inside `::/128`, `::1/128`, `fe80::/10` or `ff00::/8`.
    Reserved,
}

impl core::fmt::Display for Parse6Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Parse6Error {
    /// What is wrong, as text (a key's error names it).
    pub fn as_str(self) -> &'static str {
        match self {
            Parse6Error::MissingPrefixLen => "expected ADDR/LEN",
            Parse6Error::BadAddress => "not an IPv6 address",
            Parse6Error::BadPrefixLen => "prefix length must be 0..=128",
            Parse6Error::HostBitsSet => "prefix has host bits set",
            Parse6Error::MissingGateway => "expected PREFIX/LEN,GATEWAY",
            Parse6Error::BadGateway => "gateway must be a unicast address",
            Parse6Error::LinkLocalNeedsPort => {
                "a link-local gateway names its port (fe80::1%PORT)"
            }
            Parse6Error::BadZone => "a zone (%PORT) is a port number, for link-local gateways only",
            Parse6Error::Reserved => {
                "prefix inside ::/128, ::1/128, fe80::/10 (link-local) or ff00::/8 (multicast forwarding not supported)"
            }
        }
    }
}

/// Space no route may lie inside (see the module's documentation).
const RESERVED: [Ipv6Net; 4] = [
    Ipv6Net { addr: 0, len: 128 },
    Ipv6Net { addr: 1, len: 128 },
    Ipv6Net {
        addr: 0xfe80 << 112,
        len: 10,
    },
    Ipv6Net {
        addr: 0xff << 120,
        len: 8,
    },
];

fn parse_addr(s: &str) -> Result<u128, Parse6Error> {
    s.parse::<Ipv6Addr>()
        .map(Ipv6Addr::to_bits)
        .map_err(|_| Parse6Error::BadAddress)
}

/// Parses `ADDR/LEN` (an interface address with its prefix length; host bits kept).
///
/// # Errors
/// [`Parse6Error::MissingPrefixLen`], [`Parse6Error::BadAddress`], [`Parse6Error::BadPrefixLen`].
pub fn parse_ipv6_cidr(s: &str) -> Result<Ipv6Net, Parse6Error> {
    let (a, l) = s.split_once('/').ok_or(Parse6Error::MissingPrefixLen)?;
    let addr = parse_addr(a)?;
    if l.is_empty()
        || l.len() > 3
        || !l.bytes().all(|b| b.is_ascii_digit())
        || (l.len() > 1 && l.starts_with('0'))
    {
        return Err(Parse6Error::BadPrefixLen);
    }
    let len: u8 = l.parse().map_err(|_| Parse6Error::BadPrefixLen)?;
    if len > 128 {
        return Err(Parse6Error::BadPrefixLen);
    }
    Ok(Ipv6Net { addr, len })
}

/// Parses `PREFIX/LEN,GATEWAY[%PORT]` (a static IPv6 route).
///
/// # Errors
/// Those of [`parse_ipv6_cidr`]; [`Parse6Error::HostBitsSet`], [`Parse6Error::Reserved`],
/// [`Parse6Error::MissingGateway`], [`Parse6Error::BadGateway`],
/// [`Parse6Error::LinkLocalNeedsPort`], [`Parse6Error::BadZone`].
pub fn parse_route6(s: &str) -> Result<Route6Spec, Parse6Error> {
    let (p, g) = s.split_once(',').ok_or(Parse6Error::MissingGateway)?;
    let prefix = parse_ipv6_cidr(p)?;
    if prefix.addr & !prefix.mask() != 0 {
        return Err(Parse6Error::HostBitsSet);
    }
    if RESERVED.iter().any(|r| prefix.within(r)) {
        return Err(Parse6Error::Reserved);
    }
    let (g, zone) = match g.split_once('%') {
        Some((g, z)) => (g, Some(z)),
        None => (g, None),
    };
    let gateway = parse_addr(g)?;
    let port = match (classify(gateway), zone) {
        (AddrClass6::Unspecified | AddrClass6::Loopback | AddrClass6::Multicast { .. }, _) => {
            return Err(Parse6Error::BadGateway)
        }
        (AddrClass6::LinkLocal, None) => return Err(Parse6Error::LinkLocalNeedsPort),
        (AddrClass6::LinkLocal, Some(z)) => {
            if z.is_empty() || !z.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Parse6Error::BadZone);
            }
            Some(z.parse::<u8>().map_err(|_| Parse6Error::BadZone)?)
        }
        (AddrClass6::Unicast, Some(_)) => return Err(Parse6Error::BadZone),
        (AddrClass6::Unicast, None) => None,
    };
    Ok(Route6Spec {
        prefix,
        gateway,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    fn a(s: &str) -> u128 {
        s.parse::<Ipv6Addr>().unwrap().to_bits()
    }

    #[test]
    fn prefixes() {
        let n = parse_ipv6_cidr("2001:db8::1/64").unwrap();
        assert_eq!((n.addr, n.len), (a("2001:db8::1"), 64));
        assert!(n.contains(a("2001:db8::ffff")));
        assert!(!n.contains(a("2001:db8:0:1::1")));
        assert_eq!(parse_ipv6_cidr("::/0").unwrap().len, 0);
        assert_eq!(parse_ipv6_cidr("::1/128").unwrap().len, 128);
        for (bad, e) in [
            ("2001:db8::1", Parse6Error::MissingPrefixLen),
            ("2001:db8:::1/64", Parse6Error::BadAddress),
            ("10.0.0.1/24", Parse6Error::BadAddress),
            ("2001:db8::/129", Parse6Error::BadPrefixLen),
            ("2001:db8::/064", Parse6Error::BadPrefixLen),
            ("2001:db8::/", Parse6Error::BadPrefixLen),
            ("2001:db8::/+4", Parse6Error::BadPrefixLen),
        ] {
            assert_eq!(parse_ipv6_cidr(bad), Err(e), "{bad}");
        }
        assert_eq!(n.to_string(), "2001:db8::1/64");
    }

    #[test]
    fn routes() {
        let r = parse_route6("2001:db8::/32,2001:db8:ffff::1").unwrap();
        assert_eq!((r.prefix.addr, r.prefix.len), (a("2001:db8::"), 32));
        assert_eq!((r.gateway, r.port), (a("2001:db8:ffff::1"), None));
        let r = parse_route6("::/0,fe80::1%1").unwrap();
        assert_eq!((r.gateway, r.port), (a("fe80::1"), Some(1)));
        // Covering reserved space is legal.
        assert!(parse_route6("fe00::/7,2001:db8::1").is_ok());
        assert!(parse_route6("8000::/1,2001:db8::1").is_ok());
        for (bad, e) in [
            ("2001:db8::/32", Parse6Error::MissingGateway),
            ("2001:db8::1/32,2001:db8::2", Parse6Error::HostBitsSet),
            ("::/128,2001:db8::1", Parse6Error::Reserved),
            ("::1/128,2001:db8::1", Parse6Error::Reserved),
            ("ff00::/8,2001:db8::1", Parse6Error::Reserved),
            ("ff0e::/16,2001:db8::1", Parse6Error::Reserved),
            ("fe80::/64,2001:db8::1", Parse6Error::Reserved),
            ("2001:db8::/32,::", Parse6Error::BadGateway),
            ("2001:db8::/32,::1", Parse6Error::BadGateway),
            ("2001:db8::/32,ff02::1", Parse6Error::BadGateway),
            ("2001:db8::/32,fe80::1", Parse6Error::LinkLocalNeedsPort),
            ("2001:db8::/32,fe80::1%", Parse6Error::BadZone),
            ("2001:db8::/32,fe80::1%eth0", Parse6Error::BadZone),
            ("2001:db8::/32,fe80::1%256", Parse6Error::BadZone),
            ("2001:db8::/32,2001:db8::1%1", Parse6Error::BadZone),
            ("2001:db8::/32,2001:db8::g", Parse6Error::BadAddress),
        ] {
            assert_eq!(parse_route6(bad), Err(e), "{bad}");
        }
    }
}
