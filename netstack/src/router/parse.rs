//! Parsers for the router's configuration values (the kernel's `Config` calls them).
//!
//! Key syntax (documented for the README):
//!
//! - `ipN=A.B.C.D/LEN` — the address of port N and its connected network, e.g.
//!   `ip0=10.0.0.1/24`. Host bits are kept (they are the address); LEN is 0..=32. Parsed by
//!   [`parse_ipv4_cidr`].
//! - `route=A.B.C.D/LEN,GATEWAY` — a static route, e.g. `route=192.168.0.0/16,10.0.1.2`;
//!   `0.0.0.0/0` is the default route. The prefix must have no host bits set; what depends on
//!   the ports (the gateway a host of a connected network, no prefix over a connected one, no
//!   reserved space, each prefix once) is checked where the route arrives
//!   ([`super::check`]). Repeatable. Parsed by [`parse_route`].
//!
//! Addresses are dotted decimal as `core::net::Ipv4Addr` reads them (no leading zeros, no
//! shorthand).

use super::fib::Ipv4Net;
use core::net::Ipv4Addr;

/// Longest line of a routes file (bytes, its line end not counted), comments included: the
/// longest route is 34 bytes. A longer line is bad ([`ParseError::LineTooLong`], shown cut to
/// its first 40 bytes, `config::parse_routes_file`); `PUT /routes` refuses one as soon as its
/// bytes pass the cap.
pub const ROUTES_LINE_MAX: usize = 512;

/// Why a value did not parse.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum ParseError {
    /// A routes-file line longer than [`ROUTES_LINE_MAX`] bytes.
    LineTooLong,
    /// No `/LEN`.
    MissingPrefixLen,
    /// Not a dotted-decimal IPv4 address.
    BadAddress,
    /// LEN is not a number in 0..=32.
    BadPrefixLen,
    /// A route prefix with bits set past its length (e.g. `10.0.0.1/24`).
    HostBitsSet,
    /// A route without `,GATEWAY`.
    MissingGateway,
    /// A gateway that cannot be one: 0/8, 127/8, multicast, class E or broadcast.
    BadGateway,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let max = ROUTES_LINE_MAX;
        f.write_str(match self {
            ParseError::LineTooLong => return write!(f, "line longer than {max} bytes"),
            ParseError::MissingPrefixLen => "expected A.B.C.D/LEN",
            ParseError::BadAddress => "not an IPv4 address (dotted decimal)",
            ParseError::BadPrefixLen => "prefix length must be 0..=32",
            ParseError::HostBitsSet => "prefix has host bits set",
            ParseError::MissingGateway => "expected PREFIX/LEN,GATEWAY",
            ParseError::BadGateway => "gateway must be a unicast address",
        })
    }
}

fn parse_addr(s: &str) -> Result<Ipv4Addr, ParseError> {
    s.parse().map_err(|_| ParseError::BadAddress)
}

/// Parse `A.B.C.D/LEN` (an interface address with its prefix length).
pub fn parse_ipv4_cidr(s: &str) -> Result<Ipv4Net, ParseError> {
    let (a, l) = s.split_once('/').ok_or(ParseError::MissingPrefixLen)?;
    let addr = parse_addr(a)?;
    if l.is_empty() || l.len() > 2 || !l.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::BadPrefixLen);
    }
    let len: u8 = l.parse().map_err(|_| ParseError::BadPrefixLen)?;
    Ipv4Net::new(addr, len).ok_or(ParseError::BadPrefixLen)
}

/// Parse `PREFIX/LEN,GATEWAY` (a static route).
pub fn parse_route(s: &str) -> Result<(Ipv4Net, Ipv4Addr), ParseError> {
    let (p, g) = s.split_once(',').ok_or(ParseError::MissingGateway)?;
    let prefix = parse_ipv4_cidr(p)?;
    if prefix.network() != prefix {
        return Err(ParseError::HostBitsSet);
    }
    let gw = parse_addr(g)?;
    if super::ipv4::classify_dst(gw.to_bits()) != super::ipv4::DstClass::Unicast {
        return Err(ParseError::BadGateway);
    }
    Ok((prefix, gw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr() {
        let n = parse_ipv4_cidr("10.0.0.1/24").unwrap();
        assert_eq!((n.addr, n.len), (Ipv4Addr::new(10, 0, 0, 1), 24));
        assert_eq!(n.network().addr, Ipv4Addr::new(10, 0, 0, 0));
        assert_eq!(n.broadcast(), Ipv4Addr::new(10, 0, 0, 255));
        assert_eq!(parse_ipv4_cidr("0.0.0.0/0").unwrap().len, 0);
        assert_eq!(parse_ipv4_cidr("1.2.3.4/32").unwrap().len, 32);
        for (bad, e) in [
            ("10.0.0.1", ParseError::MissingPrefixLen),
            ("10.0.0/24", ParseError::BadAddress),
            ("10.0.0.256/24", ParseError::BadAddress),
            ("010.0.0.1/24", ParseError::BadAddress),
            ("10.0.0.1/33", ParseError::BadPrefixLen),
            ("10.0.0.1/", ParseError::BadPrefixLen),
            ("10.0.0.1/+8", ParseError::BadPrefixLen),
            ("10.0.0.1/024", ParseError::BadPrefixLen),
            ("10.0.0.1/2 4", ParseError::BadPrefixLen),
        ] {
            assert_eq!(parse_ipv4_cidr(bad), Err(e), "{bad}");
        }
    }

    #[test]
    fn route() {
        let (p, g) = parse_route("192.168.0.0/16,10.0.1.2").unwrap();
        assert_eq!((p.addr, p.len), (Ipv4Addr::new(192, 168, 0, 0), 16));
        assert_eq!(g, Ipv4Addr::new(10, 0, 1, 2));
        assert!(parse_route("0.0.0.0/0,10.0.1.2").is_ok());
        for (bad, e) in [
            ("192.168.0.0/16", ParseError::MissingGateway),
            ("192.168.0.1/16,10.0.1.2", ParseError::HostBitsSet),
            ("192.168.0.0/16,10.0.1", ParseError::BadAddress),
            ("192.168.0.0/16,", ParseError::BadAddress),
            ("192.168.0.0,10.0.1.2", ParseError::MissingPrefixLen),
            ("192.168.0.0/16,224.0.0.1", ParseError::BadGateway),
            ("192.168.0.0/16,0.0.0.0", ParseError::BadGateway),
        ] {
            assert_eq!(parse_route(bad), Err(e), "{bad}");
        }
    }
}
