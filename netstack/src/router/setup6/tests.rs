use super::*;
use crate::router::fib6::{Node6, Poptrie, DIRECT_LEN};
use std::string::ToString;
use std::vec;

fn a(s: &str) -> u128 {
    s.parse::<core::net::Ipv6Addr>().unwrap().to_bits()
}

fn net(s: &str) -> Ipv6Net {
    crate::router::parse6::parse_ipv6_cidr(s).unwrap()
}

#[test]
fn port_addresses() {
    assert_eq!(parse_port_addr("2001:db8::1/64"), Ok(net("2001:db8::1/64")));
    assert!(parse_port_addr("2001:db8::1/128")
        .unwrap_err()
        .contains("/128"));
    for bad in [
        "fe80::1/64",
        "ff02::1/64",
        "::/64",
        "::1/64",
        "2001:db8::1",
        "10.0.0.1/24",
    ] {
        assert!(parse_port_addr(bad).is_err(), "{bad}");
    }
}

#[test]
fn ports_checked_together() {
    let (p0, p1) = (Some(net("2001:db8::1/64")), Some(net("2001:db8:1::1/64")));
    assert_eq!(check_ports6(&[None, None], &[Some(576), None]), Ok(()));
    assert_eq!(check_ports6(&[p0, p1], &[None, Some(1280)]), Ok(()));
    let e = check_ports6(&[p0, p1], &[None, Some(1279)]).unwrap_err();
    assert_eq!(e, Ports6Error::MtuBelowMinimum(1, 1279));
    assert_eq!(e.key(), "mtu1");
    assert!(e.to_string().contains("1280"));
    let e = check_ports6(&[p0, None], &[None, None]).unwrap_err();
    assert_eq!((e, e.key()), (Ports6Error::OnePortOnly(0), "ip6_1"));
    let e = check_ports6(&[p0, p0], &[None, None]).unwrap_err();
    assert_eq!((e, e.key()), (Ports6Error::DuplicateAddress, "ip6_1"));
    let e = check_ports6(&[p0, Some(net("2001:db8::2/64"))], &[None, None]).unwrap_err();
    assert_eq!((e, e.key()), (Ports6Error::OverlappingPrefix, "ip6_1"));
}

#[test]
fn routes_checked_against_the_ports() {
    let ip6 = [Some(net("2001:db8::1/64")), Some(net("2001:db8:1::1/64"))];
    let r = |s: &str| check_route6(&ip6, &parse_route6(s).unwrap());
    assert_eq!(
        r("2001:db8:100::/48,2001:db8:1::2"),
        Ok(NextHop6::Via {
            port: 1,
            gateway: a("2001:db8:1::2")
        })
    );
    assert_eq!(
        r("::/0,fe80::1%0"),
        Ok(NextHop6::Via {
            port: 0,
            gateway: a("fe80::1")
        })
    );
    assert_eq!(r("::/0,fe80::1%2"), Err(Route6Error::NoSuchPort(2)));
    assert_eq!(
        check_route6(&[ip6[0], None], &parse_route6("::/0,fe80::1%1").unwrap()),
        Err(Route6Error::NoSuchPort(1))
    );
    assert_eq!(
        r("::/0,2001:db8:2::1"),
        Err(Route6Error::GatewayUnreachable)
    );
    assert_eq!(r("::/0,2001:db8::1"), Err(Route6Error::GatewayIsOwn));
    assert_eq!(
        r("2001:db8::/64,2001:db8:1::2"),
        Err(Route6Error::Connected)
    );
    // A link-local gateway without its port is refused by the parser, by name.
    assert_eq!(
        parse_route6("::/0,fe80::1"),
        Err(Parse6Error::LinkLocalNeedsPort)
    );
}

#[test]
fn mixed_routes_file() {
    let text = "10.1.0.0/16,10.0.1.2\n# comment: with a colon\n2001:db8:100::/48,2001:db8:1::2 # x\n\n2001:db8:200::/48,fe80::9%0\n";
    assert!(!is_ipv6_line("10.1.0.0/16,10.0.1.2 # a:b"));
    assert!(is_ipv6_line("::/0,fe80::1%0"));
    let got: vec::Vec<_> = routes6_of_file(text)
        .map(|(l, t, r)| (l, t, r.is_ok()))
        .collect();
    assert_eq!(
        got,
        [
            (3, "2001:db8:100::/48,2001:db8:1::2", true),
            (5, "2001:db8:200::/48,fe80::9%0", true)
        ]
    );
    let ip6 = [net("2001:db8::1/64"), net("2001:db8:1::1/64")];
    let cmd = [parse_route6("2001:db8:300::/48,2001:db8::7").unwrap()];
    let room = count6(2, 1, Some(text));
    assert_eq!(
        room, 5,
        "2 connected, 1 route=, 2 IPv6 lines (a comment's colon is not one)"
    );
    let mut routes = vec![
        Route6 {
            prefix: 0,
            len: 0,
            nh: 0
        };
        room
    ];
    let mut nhs = vec![NextHop6::Connected { port: 0 }; room];
    let n = collect6(&ip6, &cmd, Some(text), &mut routes, &mut nhs).unwrap();
    assert_eq!(n, 5);
    let mut direct = vec![0u32; DIRECT_LEN];
    let mut nodes = vec![Node6::default(); 64];
    let mut leaves = vec![0u32; 1024];
    let fib = Poptrie::build(&mut routes[..n], &mut direct, &mut nodes, &mut leaves).unwrap();
    let nh = |d: &str| fib.lookup_index(a(d)).map(|i| nhs[i as usize]);
    assert_eq!(nh("2001:db8::5"), Some(NextHop6::Connected { port: 0 }));
    assert_eq!(nh("2001:db8:1::5"), Some(NextHop6::Connected { port: 1 }));
    assert_eq!(
        nh("2001:db8:100:7::1"),
        Some(NextHop6::Via {
            port: 1,
            gateway: a("2001:db8:1::2")
        })
    );
    assert_eq!(
        nh("2001:db8:200::1"),
        Some(NextHop6::Via {
            port: 0,
            gateway: a("fe80::9")
        })
    );
    assert_eq!(
        nh("2001:db8:300::1"),
        Some(NextHop6::Via {
            port: 0,
            gateway: a("2001:db8::7")
        })
    );
    assert_eq!(nh("2001:db9::1"), None);
    // A bad line is named by its number.
    let e = collect6(&ip6, &[], Some("\n::/0,fe80::1\n"), &mut routes, &mut nhs).unwrap_err();
    assert_eq!(
        e.to_string(),
        "routes file line 2: `::/0,fe80::1`: a link-local gateway names its port (fe80::1%PORT)"
    );
    let e = collect6(&ip6, &[], Some("::/0,fe80::1%3"), &mut routes, &mut nhs).unwrap_err();
    assert_eq!(
        e.to_string(),
        "routes file line 1: ::/0,fe80::1: zone %3 names no port with an ip6_3="
    );
    let e = collect6(
        &ip6,
        &[],
        Some("::/0,fe80::1%0"),
        &mut routes[..2],
        &mut nhs,
    )
    .unwrap_err();
    assert_eq!(e, Collect6Error::Full(3, 2));
}
