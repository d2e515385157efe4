//! The IPv6 router end to end on frames built and read with smoltcp's wire types.
//!
//! Past ~800 lines because they test one sans-IO object (`Router6`) through its one entry
//! point per event, sharing the frame builders and the table fixture above: Neighbor
//! Discovery, errors in Linux's order, forwarding, and the hostile-neighbour cases.

use super::*;
use crate::router::fib6::{Node6, Size6, DIRECT_LEN};
use core::net::Ipv6Addr;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpProtocol, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscPrefixInfoFlags, NdiscRepr,
    RawHardwareAddress,
};
use std::vec;
use std::vec::Vec;

const P0_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const P1_MAC: MacAddr = MacAddr([2, 0, 0, 0, 1, 1]);
const A_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xa, 2]);
const B_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xb, 2]);

fn ip(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn ports() -> [Port6; 2] {
    [
        Port6 {
            mac: P0_MAC,
            addr: crate::router::parse6::parse_ipv6_cidr("2001:db8:0:0::1/64").unwrap(),
            mtu: 1500,
        },
        Port6 {
            mac: P1_MAC,
            addr: crate::router::parse6::parse_ipv6_cidr("2001:db8:0:1::1/64").unwrap(),
            mtu: 1280,
        },
    ]
}

/// FIB storage: the connected prefixes and 2001:db8:100::/48 via 2001:db8:0:1::2 (B).
struct Fib {
    direct: Vec<u32>,
    nodes: Vec<Node6>,
    leaves: Vec<u32>,
    nexthops: Vec<NextHop6>,
    routes: Vec<Route6>,
}

impl Fib {
    fn new() -> Fib {
        Fib::for_ports(&ports())
    }

    /// The table over ports `p` (their connected prefixes) and the /48 via B.
    fn for_ports(p: &[Port6]) -> Fib {
        let (mut routes, mut nexthops): (Vec<Route6>, Vec<NextHop6>) =
            Router6::<u32>::connected(p).unzip();
        routes.push(Route6 {
            prefix: ip("2001:db8:100::").to_bits(),
            len: 48,
            nh: nexthops.len() as u32,
        });
        nexthops.push(NextHop6::Via {
            port: 1,
            gateway: ip("2001:db8:0:1::2").to_bits(),
        });
        let Size6 { nodes, leaves } = Poptrie::size(&mut routes).unwrap();
        Fib {
            direct: vec![0; DIRECT_LEN],
            nodes: vec![Node6::default(); nodes],
            leaves: vec![0; leaves],
            nexthops,
            routes,
        }
    }
}

fn eth(dst: MacAddr, src: MacAddr, ip6: Vec<u8>) -> Vec<u8> {
    let r = EthernetRepr {
        src_addr: EthernetAddress(src.0),
        dst_addr: EthernetAddress(dst.0),
        ethertype: EthernetProtocol::Ipv6,
    };
    let mut f = vec![0u8; 14 + ip6.len()];
    r.emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    f[14..].copy_from_slice(&ip6);
    f
}

fn ip6(src: Ipv6Addr, dst: Ipv6Addr, hl: u8, next: IpProtocol, payload: &[u8]) -> Vec<u8> {
    let r = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: next,
        payload_len: payload.len(),
        hop_limit: hl,
    };
    let mut b = vec![0u8; 40 + payload.len()];
    r.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
    b[40..].copy_from_slice(payload);
    b
}

fn icmp(src: Ipv6Addr, dst: Ipv6Addr, hl: u8, repr: Icmpv6Repr<'_>) -> Vec<u8> {
    let mut p = vec![0u8; repr.buffer_len()];
    repr.emit(
        &src,
        &dst,
        &mut Icmpv6Packet::new_unchecked(&mut p[..]),
        &smoltcp::phy::ChecksumCapabilities::default(),
    );
    ip6(src, dst, hl, IpProtocol::Icmpv6, &p)
}

fn udp(src: &str, dst: &str, hl: u8, len: usize) -> Vec<u8> {
    eth(
        P0_MAC,
        A_MAC,
        ip6(ip(src), ip(dst), hl, IpProtocol::Udp, &vec![0x55; len]),
    )
}

/// The ICMPv6 message in `f` (an Ethernet frame), checked: checksum, addresses.
fn read_icmp(f: &[u8]) -> (Ipv6Repr, Vec<u8>) {
    let e = EthernetFrame::new_checked(f).unwrap();
    assert_eq!(e.ethertype(), EthernetProtocol::Ipv6);
    let p = Ipv6Packet::new_checked(e.payload()).unwrap();
    let r = Ipv6Repr::parse(&p).unwrap();
    assert_eq!(r.next_header, IpProtocol::Icmpv6);
    let m = Icmpv6Packet::new_checked(p.payload()).unwrap();
    assert!(m.verify_checksum(&r.src_addr, &r.dst_addr), "checksum");
    (r, p.payload().to_vec())
}

type R<'a> = Router6<'a, u32, 8, 4>;

/// `$r`, the router of these tests over [`Fib::new`]'s table, and `$out`, a buffer for its
/// answers (the table's storage lives in the caller's scope, hidden by hygiene).
macro_rules! router {
    ($r:ident, $out:ident) => {
        let mut f = Fib::new();
        let trie =
            Poptrie::build(&mut f.routes, &mut f.direct, &mut f.nodes, &mut f.leaves).unwrap();
        let mut $r: R<'_> = Router6::new(
            &ports(),
            &trie,
            &f.nexthops,
            NeighConfig::default(),
            TokenBucket::new(1000, 50),
        )
        .unwrap();
        #[allow(unused_mut)]
        let mut $out = vec![0u8; 1600];
    };
}

fn outcomes_hold(r: &R<'_>) {
    let c = r.counters();
    assert_eq!(c.outcomes() + r.queued_frames() as u64, c.rx, "{c:?}");
}

#[test]
fn a_connected_host_is_resolved_by_neighbor_discovery_then_forwarded() {
    router!(r, out);
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::5", 64, 100);
    assert_eq!(r.process(0, &mut fr, 7, 0, &mut out), Action6::Queued);
    let Some(Event6::Solicit { port: 1, len }) = r.poll(0, &mut out) else {
        panic!("no solicitation")
    };
    // An NS for the host, to its solicited-node group, from port 1's address, with SLLA.
    let e = EthernetFrame::new_checked(&out[..len]).unwrap();
    assert_eq!(e.dst_addr(), EthernetAddress([0x33, 0x33, 0xff, 0, 0, 5]));
    let (h, m) = read_icmp(&out[..len]);
    assert_eq!(
        (h.src_addr, h.dst_addr, h.hop_limit),
        (ip("2001:db8:0:1::1"), ip("ff02::1:ff00:5"), 255)
    );
    let parsed = Icmpv6Repr::parse(
        &h.src_addr,
        &h.dst_addr,
        &Icmpv6Packet::new_checked(&m[..]).unwrap(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(
        parsed,
        Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: ip("2001:db8:0:1::5"),
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(P1_MAC.0)))
        })
    );
    // The host answers: solicited, unicast, with its MAC.
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
        target_addr: ip("2001:db8:0:1::5"),
        lladdr: Some(RawHardwareAddress::from(EthernetAddress(B_MAC.0))),
    });
    let mut naf = eth(
        P1_MAC,
        B_MAC,
        icmp(ip("2001:db8:0:1::5"), ip("2001:db8:0:1::1"), 255, na),
    );
    assert_eq!(r.process(1, &mut naf, 8, 10, &mut out), Action6::Consumed);
    assert_eq!(
        r.poll(10, &mut out),
        Some(Event6::Transmit {
            handle: 7,
            port: 1,
            len: 14 + 140,
            dst: B_MAC,
            src: P1_MAC
        })
    );
    assert_eq!(Ipv6Packet::new_checked(&fr[14..]).unwrap().hop_limit(), 63);
    // Now at once, the flow label left as it came.
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::5", 64, 100);
    fr[15] = 0x0a;
    fr[16] = 0xbc;
    assert_eq!(
        r.process(0, &mut fr, 9, 20, &mut out),
        Action6::Forward { port: 1, len: 154 }
    );
    assert_eq!(&fr[..12], &[B_MAC.0, P1_MAC.0].concat()[..]);
    assert_eq!((fr[15], fr[16], fr[14 + 7]), (0x0a, 0xbc, 63));
    let c = r.counters();
    assert_eq!((c.forwarded, c.nd_consumed, c.ns_sent), (2, 1, 1));
    outcomes_hold(&r);
}

/// Neighbor Discovery that fails (RFC 4861 §7.2.2: three solicitations, no answer) drops the
/// queued frame as `neigh_timeout` and hands its bytes back for a Destination Unreachable,
/// code 3 (RFC 4443 §3.1), sent by the port it came in on to the previous hop (the frame kept
/// its MACs while queued), quoting it whole (hop limit 63: decremented).
#[test]
fn failed_neighbor_discovery_answers_address_unreachable() {
    router!(r, out);
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::9", 64, 100);
    assert_eq!(r.process(0, &mut fr, 7, 0, &mut out), Action6::Queued);
    assert_eq!(&fr[..12], &[P0_MAC.0, A_MAC.0].concat()[..], "MACs kept");
    let (mut solicits, mut now, mut dropped) = (0, 0u64, None);
    while dropped.is_none() && now < 10_000_000_000 {
        while let Some(ev) = r.poll(now, &mut out) {
            match ev {
                Event6::Solicit { port: 1, .. } => solicits += 1,
                Event6::Dropped {
                    handle: 7,
                    reason: Drop6::NeighTimeout,
                    unreachable,
                } => dropped = Some(unreachable),
                e => panic!("{e:?}"),
            }
        }
        now += 100_000_000;
    }
    assert_eq!(solicits, 3, "MAX_MULTICAST_SOLICIT");
    let len = dropped
        .expect("dropped")
        .expect("Neighbor Discovery failed");
    assert_eq!(len, 14 + 140);
    let (port, n) = r
        .address_unreachable(0, &fr[..len], now, &mut out)
        .expect("an error goes out");
    assert_eq!(port, 0);
    let e = EthernetFrame::new_checked(&out[..n]).unwrap();
    assert_eq!(
        (e.dst_addr(), e.src_addr()),
        (EthernetAddress(A_MAC.0), EthernetAddress(P0_MAC.0))
    );
    let (h, m) = read_icmp(&out[..n]);
    assert_eq!(
        (h.src_addr, h.dst_addr),
        (ip("2001:db8::1"), ip("2001:db8::2"))
    );
    let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
    assert_eq!(
        (p.msg_type(), p.msg_code()),
        (smoltcp::wire::Icmpv6Message::DstUnreachable, 3)
    );
    // The invoking packet after the 8-byte header, whole: 140 bytes, hop limit 63.
    assert_eq!(&m[8..], &fr[14..len]);
    assert_eq!(m[8 + 7], 63);
    let c = *r.counters();
    assert_eq!(
        (c.drops_for(Drop6::NeighTimeout), c.icmp_sent, c.ns_sent),
        (1, 1, 3)
    );
    outcomes_hold(&r);
    // Never about an ICMPv6 error (RFC 4443 §2.4 (e.1)): suppressed, counted.
    let du = Icmpv6Repr::DstUnreachable {
        reason: smoltcp::wire::Icmpv6DstUnreachable::NoRoute,
        header: Ipv6Repr {
            src_addr: ip("2001:db8:0:1::9"),
            dst_addr: ip("2001:db8::2"),
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
        },
        data: &[0; 8],
    };
    let err = eth(
        P0_MAC,
        A_MAC,
        icmp(ip("2001:db8::2"), ip("2001:db8:0:1::9"), 63, du),
    );
    assert_eq!(r.address_unreachable(0, &err, now, &mut out), None);
    assert_eq!(r.counters().icmp_suppressed, c.icmp_suppressed + 1);
    // A port the router does not have: nothing.
    assert_eq!(r.address_unreachable(5, &fr[..len], now, &mut out), None);
}

#[test]
fn solicitations_for_our_addresses_are_answered_and_dad_defended() {
    router!(r, out);
    let ll0 = Ipv6Addr::from_bits(r.link_local(0));
    assert_eq!(
        ll0,
        ip("fe80::ff:fe00:1"),
        "modified EUI-64 of 02:00:00:00:00:01"
    );
    for target in [ip("2001:db8::1"), ll0] {
        let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: target,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(A_MAC.0))),
        });
        let group = Ipv6Addr::from_bits(ndp::solicited_node(target.to_bits()));
        let mut fr = eth(
            ndp::multicast_mac(group.to_bits()),
            A_MAC,
            icmp(ip("2001:db8::2"), group, 255, ns),
        );
        let Action6::Send {
            port: 0,
            len,
            cause: None,
        } = r.process(0, &mut fr, 1, 0, &mut out)
        else {
            panic!("not answered: {target}")
        };
        let e = EthernetFrame::new_checked(&out[..len]).unwrap();
        assert_eq!(e.dst_addr(), EthernetAddress(A_MAC.0));
        let (h, m) = read_icmp(&out[..len]);
        assert_eq!(
            (h.src_addr, h.dst_addr, h.hop_limit),
            (target, ip("2001:db8::2"), 255)
        );
        let p = Icmpv6Repr::parse(
            &h.src_addr,
            &h.dst_addr,
            &Icmpv6Packet::new_checked(&m[..]).unwrap(),
            &Default::default(),
        )
        .unwrap();
        assert_eq!(
            p,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::ROUTER
                    | NdiscNeighborFlags::SOLICITED
                    | NdiscNeighborFlags::OVERRIDE,
                target_addr: target,
                lladdr: Some(RawHardwareAddress::from(EthernetAddress(P0_MAC.0)))
            })
        );
    }
    // The soliciting host is learned Stale (as an ARP request for us is).
    assert_eq!(
        r.neigh.state(ip("2001:db8::2").to_bits(), 0),
        super::super::neigh::NeighState::Stale
    );
    // DAD for our address: defended to all-nodes, not solicited.
    let dad = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: ip("2001:db8::1"),
        lladdr: None,
    });
    let g = ip("ff02::1:ff00:1");
    let mut fr = eth(
        ndp::multicast_mac(g.to_bits()),
        A_MAC,
        icmp(ip("::"), g, 255, dad),
    );
    let Action6::Send {
        len, cause: None, ..
    } = r.process(0, &mut fr, 1, 0, &mut out)
    else {
        panic!("DAD not defended")
    };
    let (h, m) = read_icmp(&out[..len]);
    assert_eq!(h.dst_addr, ip("ff02::1"));
    assert_eq!(
        m[4] & (NA_SOLICITED | NA_ROUTER | NA_OVERRIDE),
        NA_ROUTER | NA_OVERRIDE
    );
    // A solicitation for someone else's address is not ours to answer.
    let other = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: ip("2001:db8::9"),
        lladdr: None,
    });
    let g = ip("ff02::1:ff00:9");
    let mut fr = eth(
        ndp::multicast_mac(g.to_bits()),
        A_MAC,
        icmp(ip("2001:db8::2"), g, 255, other),
    );
    assert_eq!(
        r.process(0, &mut fr, 1, 0, &mut out),
        Action6::Drop(Drop6::NotForUs)
    );
    assert_eq!(r.counters().nd_answered, 3);
    outcomes_hold(&r);
}

#[test]
fn an_advert_naming_our_own_mac_or_address_is_never_learned() {
    router!(r, out);
    // Ask for B (a frame via the gateway), then B "answers" with port 1's MAC.
    let mut fr = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    assert_eq!(r.process(0, &mut fr, 3, 0, &mut out), Action6::Queued);
    assert!(matches!(
        r.poll(0, &mut out),
        Some(Event6::Solicit { port: 1, .. })
    ));
    let gw = ip("2001:db8:0:1::2");
    for (target, mac) in [(gw, P1_MAC), (ip("2001:db8:0:1::1"), B_MAC)] {
        let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
            target_addr: target,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac.0))),
        });
        let mut naf = eth(P1_MAC, B_MAC, icmp(gw, ip("2001:db8:0:1::1"), 255, na));
        assert_eq!(r.process(1, &mut naf, 4, 1, &mut out), Action6::Consumed);
        assert_eq!(
            r.poll(1, &mut out),
            None,
            "nothing released by {target}/{mac:?}"
        );
    }
    assert_eq!(r.queued_frames(), 1);
    outcomes_hold(&r);
}

#[test]
fn errors_echo_and_drops_in_linuxs_order() {
    router!(r, out);
    let err = |r: &mut R<'_>, fr: &mut Vec<u8>, out: &mut Vec<u8>| -> (Drop6, u8, u8, u32) {
        let a = r.process(0, fr, 1, 0, out);
        let Action6::Send {
            port: 0,
            len,
            cause: Some(c),
        } = a
        else {
            panic!("no error: {a:?}")
        };
        let (h, m) = read_icmp(&out[..len]);
        assert_eq!(h.dst_addr, ip("2001:db8::2"));
        assert_eq!(h.src_addr, ip("2001:db8::1"));
        assert!(len <= 14 + 1280);
        (c, m[0], m[1], u32::from_be_bytes([m[4], m[5], m[6], m[7]]))
    };
    let mut fr = udp("2001:db8::2", "2001:db8:999::1", 64, 10);
    assert_eq!(err(&mut r, &mut fr, &mut out), (Drop6::NoRoute, 1, 0, 0));
    let mut fr = udp("2001:db8::2", "2001:db8:999::1", 1, 10);
    assert_eq!(
        err(&mut r, &mut fr, &mut out).0,
        Drop6::NoRoute,
        "no route before the hop limit"
    );
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::5", 1, 2000);
    assert_eq!(
        err(&mut r, &mut fr, &mut out),
        (Drop6::HopLimit, 3, 0, 0),
        "hop limit before the MTU"
    );
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::5", 64, 1281 - 40);
    assert_eq!(err(&mut r, &mut fr, &mut out), (Drop6::TooBig, 2, 0, 1280));
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::5", 64, 1280 - 40);
    assert_eq!(
        r.process(0, &mut fr, 1, 0, &mut out),
        Action6::Queued,
        "1,280 bytes fit"
    );
    let mut fr = udp("fe80::2", "2001:db8:0:1::5", 64, 10);
    let Action6::Send {
        len,
        cause: Some(Drop6::BeyondScope),
        ..
    } = r.process(0, &mut fr, 1, 0, &mut out)
    else {
        panic!()
    };
    let (h, m) = read_icmp(&out[..len]);
    assert_eq!(
        (h.src_addr, m[0], m[1]),
        (Ipv6Addr::from_bits(r.link_local(0)), 1, 2)
    );
    // Never forwarded, never answered.
    for (s, d, want) in [
        ("2001:db8::2", "fe80::9", Drop6::LinkLocalDst),
        ("2001:db8::2", "::", Drop6::UnspecifiedDst),
        ("::", "2001:db8:0:1::5", Drop6::UnspecifiedSrc),
        ("ff02::1", "2001:db8:0:1::5", Drop6::MulticastSrc),
    ] {
        let mut fr = udp(s, d, 64, 10);
        assert_eq!(
            r.process(0, &mut fr, 1, 0, &mut out),
            Action6::Drop(want),
            "{s} -> {d}"
        );
    }
    // A frame for another MAC.
    let mut fr = eth(
        B_MAC,
        A_MAC,
        ip6(
            ip("2001:db8::2"),
            ip("2001:db8:0:1::5"),
            64,
            IpProtocol::Udp,
            &[0; 8],
        ),
    );
    assert_eq!(
        r.process(0, &mut fr, 1, 0, &mut out),
        Action6::Drop(Drop6::NotForUs)
    );
    // Echo to port 1's address, received on port 0: answered in place from that address.
    let echo = Icmpv6Repr::EchoRequest {
        ident: 9,
        seq_no: 3,
        data: b"ping",
    };
    let mut fr = eth(
        P0_MAC,
        A_MAC,
        icmp(ip("2001:db8::2"), ip("2001:db8:0:1::1"), 64, echo),
    );
    let Action6::Reply { port: 0, len } = r.process(0, &mut fr, 1, 0, &mut out) else {
        panic!()
    };
    let (h, m) = read_icmp(&fr[..len]);
    assert_eq!(
        (h.src_addr, h.dst_addr),
        (ip("2001:db8:0:1::1"), ip("2001:db8::2"))
    );
    let p = Icmpv6Repr::parse(
        &h.src_addr,
        &h.dst_addr,
        &Icmpv6Packet::new_checked(&m[..]).unwrap(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(
        p,
        Icmpv6Repr::EchoReply {
            ident: 9,
            seq_no: 3,
            data: b"ping"
        }
    );
    assert_eq!(
        EthernetFrame::new_checked(&fr[..]).unwrap().dst_addr(),
        EthernetAddress(A_MAC.0)
    );
    // An echo request of 1 byte, or with a wrong checksum, is not answered.
    let echo = Icmpv6Repr::EchoRequest {
        ident: 9,
        seq_no: 3,
        data: b"ping",
    };
    let mut fr = eth(
        P0_MAC,
        A_MAC,
        icmp(ip("2001:db8::2"), ip("2001:db8::1"), 64, echo),
    );
    fr[14 + 40 + 8] ^= 1;
    assert_eq!(
        r.process(0, &mut fr, 1, 0, &mut out),
        Action6::Drop(Drop6::BadIcmp)
    );
    let mut fr = eth(
        P0_MAC,
        A_MAC,
        ip6(
            ip("2001:db8::2"),
            ip("2001:db8::1"),
            64,
            IpProtocol::Icmpv6,
            &[128],
        ),
    );
    assert_eq!(
        r.process(0, &mut fr, 1, 0, &mut out),
        Action6::Drop(Drop6::BadIcmp)
    );
    // UDP to our address goes to the host; an error about an ICMPv6 error is never sent.
    let mut fr = udp("2001:db8::2", "2001:db8::1", 64, 10);
    assert_eq!(r.process(0, &mut fr, 1, 0, &mut out), Action6::ToHost);
    let du = Icmpv6Repr::DstUnreachable {
        reason: smoltcp::wire::Icmpv6DstUnreachable::NoRoute,
        header: Ipv6Repr {
            src_addr: ip("2001:db8::1"),
            dst_addr: ip("2001:db8::2"),
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
        },
        data: &[0; 8],
    };
    let mut fr = eth(
        P0_MAC,
        A_MAC,
        icmp(ip("2001:db8::2"), ip("2001:db8:999::1"), 64, du),
    );
    assert_eq!(
        r.process(0, &mut fr, 1, 0, &mut out),
        Action6::Drop(Drop6::NoRoute)
    );
    assert_eq!(r.counters().icmp_suppressed, 1);
    outcomes_hold(&r);
}

#[test]
fn bad_configuration_is_named() {
    let mut f = Fib::new();
    let trie = Poptrie::build(&mut f.routes, &mut f.direct, &mut f.nodes, &mut f.leaves).unwrap();
    let mk = |p: &[Port6]| {
        Router6::<u32, 8, 4>::new(
            p,
            &trie,
            &f.nexthops,
            NeighConfig::default(),
            TokenBucket::new(1000, 50),
        )
        .err()
    };
    let mut p = ports();
    p[1].mtu = 1279;
    assert_eq!(mk(&p), Some(Router6Error::MtuBelowMinimum(1)));
    let mut p = ports();
    p[0].addr.len = 128;
    assert_eq!(mk(&p), Some(Router6Error::BadAddress(0)));
    let mut p = ports();
    p[0].addr.addr = ip("fe80::1").to_bits();
    assert_eq!(mk(&p), Some(Router6Error::BadAddress(0)));
    assert_eq!(mk(&[]), Some(Router6Error::BadPortCount));
}

/// Forward one frame to the gateway B (2001:db8:0:1::2, next hop of 2001:db8:100::/48) at
/// `now`, resolving it by NS/NA: B is Reachable afterwards.
fn resolve_gateway(r: &mut R<'_>, out: &mut [u8], now: u64) {
    let gw = ip("2001:db8:0:1::2");
    let mut fr = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    assert_eq!(r.process(0, &mut fr, 1, now, out), Action6::Queued);
    assert!(matches!(
        r.poll(now, out),
        Some(Event6::Solicit { port: 1, .. })
    ));
    assert_eq!(r.advert(gw, B_MAC, now), Action6::Consumed);
    assert!(matches!(
        r.poll(now, out),
        Some(Event6::Transmit {
            handle: 1,
            port: 1,
            ..
        })
    ));
    assert_eq!(
        r.neigh.state(gw.to_bits(), 1),
        super::super::neigh::NeighState::Reachable
    );
}

impl R<'_> {
    /// `host` answers a solicitation on port 1: a solicited Neighbor Advertisement with its
    /// MAC `mac`, processed at `now`.
    fn advert(&mut self, host: Ipv6Addr, mac: MacAddr, now: u64) -> Action6 {
        let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
            target_addr: host,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac.0))),
        });
        let mut f = eth(P1_MAC, mac, icmp(host, ip("2001:db8:0:1::1"), 255, na));
        let mut out = vec![0u8; 1600];
        self.process(1, &mut f, 0, now, &mut out)
    }
}

/// A frame through the gateway B, forwarded at once (B resolved): 64 bytes out of port 1.
fn through_gateway_at_once(r: &mut R<'_>, out: &mut [u8], handle: u32, now: u64) {
    let mut f = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    assert_eq!(
        r.process(0, &mut f, handle, now, out),
        Action6::Forward { port: 1, len: 64 },
        "at {now} ns"
    );
}

/// An NDP flood (issue 37 item 8): 5,000 Neighbor Solicitations for the router's address on
/// port 1, from as many spoofed sources each with its own link-layer address, at 10,000 per
/// second. Each is answered and its source learned at most Stale, in the slots of the other
/// spoofed ones: the gateway forwarding uses stays Reachable and frames through it go out at
/// once all along; afterwards a new real neighbour still resolves. Every frame in one counter.
#[test]
fn an_ndp_flood_never_evicts_a_neighbour_in_use() {
    use super::super::neigh::NeighState;
    router!(r, out);
    resolve_gateway(&mut r, &mut out, 0);
    let gw = ip("2001:db8:0:1::2").to_bits();
    let target = ip("2001:db8:0:1::1");
    let group = Ipv6Addr::from_bits(ndp::solicited_node(target.to_bits()));
    let base = ip("2001:db8:0:1::1:0").to_bits();
    let mut now = 1_000_000;
    for k in 0..5_000u32 {
        now += 100_000;
        let mac = MacAddr([2, 9, 9, (k >> 16) as u8, (k >> 8) as u8, k as u8]);
        let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: target,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac.0))),
        });
        let src = Ipv6Addr::from_bits(base + u128::from(k));
        let mut fr = eth(
            ndp::multicast_mac(group.to_bits()),
            mac,
            icmp(src, group, 255, ns),
        );
        assert!(
            matches!(
                r.process(1, &mut fr, 10 + k, now, &mut out),
                Action6::Send {
                    port: 1,
                    cause: None,
                    ..
                }
            ),
            "NS {k} not answered"
        );
        if k % 250 == 0 {
            through_gateway_at_once(&mut r, &mut out, 100_000 + k, now);
        }
        assert_eq!(r.poll(now, &mut out), None, "the flood made work");
    }
    assert_eq!(r.neigh.state(gw, 1), NeighState::Reachable);
    assert!(r
        .neigh
        .entries()
        .all(|e| e.ip == gw || e.state == NeighState::Stale));
    assert_eq!(r.neigh.entries().count(), 8, "the table is full of spoofs");
    // A new neighbour forwarding needs takes a spoofed one's slot and resolves.
    let host = ip("2001:db8:0:1::5");
    let mut fr = udp("2001:db8::2", "2001:db8:0:1::5", 64, 10);
    assert_eq!(r.process(0, &mut fr, 7, now, &mut out), Action6::Queued);
    assert!(matches!(
        r.poll(now, &mut out),
        Some(Event6::Solicit { port: 1, .. })
    ));
    assert_eq!(r.advert(host, A_MAC, now), Action6::Consumed);
    assert!(matches!(
        r.poll(now, &mut out),
        Some(Event6::Transmit { handle: 7, .. })
    ));
    let c = *r.counters();
    assert_eq!(c.nd_answered, 5_000);
    // The gateway's first frame, 20 during the flood, the new host's.
    assert_eq!(c.forwarded, 1 + 20 + 1);
    assert_eq!(c.ns_sent, 2);
    outcomes_hold(&r);
}

/// A scan of a connected /64 (issue 37 item 8): 2,000 frames from port 0 to as many silent
/// addresses on port 1's link, at 400 per second. At most a quarter of the neighbour table is
/// ever unresolved (`MAX_INCOMPLETE`), each frame is queued and then dropped, counted, when
/// its entry is taken by a newer one or times out; solicitations go out at most one per new
/// address; the resolved gateway forwards at once all along and a real neighbour that
/// answers gets through mid-scan.
#[test]
fn a_scan_of_a_connected_64_churns_only_unresolved_entries() {
    use super::super::neigh::NeighState;
    router!(r, out);
    resolve_gateway(&mut r, &mut out, 0);
    let gw = ip("2001:db8:0:1::2").to_bits();
    let base = ip("2001:db8:0:1::a:0").to_bits();
    let max_incomplete = NeighTable::<u32, 8, 4, u128>::MAX_INCOMPLETE;
    assert_eq!(max_incomplete, 2);
    let (mut solicits, mut dropped) = (0u64, 0u64);
    let mut now = 1_000_000;
    for k in 0..2_000u32 {
        now += 2_500_000;
        let dst = Ipv6Addr::from_bits(base + u128::from(k) * 0x1_0001);
        let mut fr = eth(
            P0_MAC,
            A_MAC,
            ip6(ip("2001:db8::2"), dst, 64, IpProtocol::Udp, &[0x55; 10]),
        );
        assert_eq!(
            r.process(0, &mut fr, 10 + k, now, &mut out),
            Action6::Queued,
            "scan frame {k}"
        );
        while let Some(ev) = r.poll(now, &mut out) {
            match ev {
                Event6::Solicit { port: 1, .. } => solicits += 1,
                Event6::Dropped {
                    reason: Drop6::NeighTimeout,
                    ..
                } => dropped += 1,
                e => panic!("scan frame {k}: {e:?}"),
            }
        }
        let incomplete = r
            .neigh
            .entries()
            .filter(|e| e.state == NeighState::Incomplete)
            .count();
        assert!(incomplete <= max_incomplete, "{incomplete} unresolved");
        if k % 100 == 0 {
            through_gateway_at_once(&mut r, &mut out, 100_000 + k, now);
        }
        if k == 1_000 {
            // A real host answers mid-scan: its frame is released.
            let host = ip("2001:db8:0:1::5");
            let mut f = udp("2001:db8::2", "2001:db8:0:1::5", 64, 10);
            assert_eq!(r.process(0, &mut f, 5, now, &mut out), Action6::Queued);
            // Its entry takes the oldest unresolved one's slot: that frame comes back.
            let mut asked = false;
            while let Some(ev) = r.poll(now, &mut out) {
                match ev {
                    Event6::Solicit { port: 1, .. } => asked = true,
                    Event6::Dropped {
                        reason: Drop6::NeighTimeout,
                        ..
                    } => dropped += 1,
                    e => panic!("mid-scan: {e:?}"),
                }
            }
            assert!(asked, "no solicitation for the real host");
            assert_eq!(r.advert(host, A_MAC, now), Action6::Consumed);
            assert!(matches!(
                r.poll(now, &mut out),
                Some(Event6::Transmit { handle: 5, .. })
            ));
        }
    }
    assert_eq!(r.neigh.state(gw, 1), NeighState::Reachable);
    // Every scan frame but those still queued was dropped and counted; one solicitation per
    // scanned address (each entry is taken by a newer one long before its 1 s retransmit).
    let c = *r.counters();
    assert_eq!(dropped + r.queued_frames() as u64, 2_000, "{c:?}");
    assert_eq!(r.queued_frames(), max_incomplete);
    assert_eq!(c.drops_for(Drop6::NeighTimeout), dropped);
    assert_eq!(solicits, 2_000);
    assert_eq!(c.ns_sent, 2 + 2_000);
    assert_eq!(c.forwarded, 1 + 20 + 1);
    outcomes_hold(&r);
}

/// The fast path takes only frames the slow path forwards, and forwards them byte for byte as
/// it does: through a cached Reachable next hop on the other port; every other frame is left
/// unchanged for the slow path. A neighbour that changes empties the cache.
#[test]
fn the_fast_path_forwards_as_the_slow_path_does_or_not_at_all() {
    router!(r, out);
    resolve_gateway(&mut r, &mut out, 0);
    let mut f = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    let n = f.len();
    assert_eq!(r.forward_fast(0, &mut f, n, 1), None, "nothing cached yet");
    through_gateway_at_once(&mut r, &mut out, 2, 1);
    let mut padded = udp("2001:db8::2", "2001:db8:100::9", 64, 10);
    padded.extend_from_slice(&[0; 6]);
    let mut hbh = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    hbh[14 + 6] = 0;
    let mut long = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    long[14 + 5] += 1;
    let cases: [(&str, usize, Vec<u8>, bool); 13] = [
        (
            "through the gateway",
            0,
            udp("2001:db8::2", "2001:db8:100::7", 64, 10),
            true,
        ),
        (
            "hop limit 2",
            0,
            udp("2001:db8::2", "2001:db8:100::7", 2, 10),
            true,
        ),
        ("link padding", 0, padded, true),
        (
            "hop limit 1",
            0,
            udp("2001:db8::2", "2001:db8:100::7", 1, 10),
            false,
        ),
        (
            "to us",
            0,
            udp("2001:db8::2", "2001:db8:0:1::1", 64, 10),
            false,
        ),
        (
            "link-local dst",
            0,
            udp("2001:db8::2", "fe80::7", 64, 10),
            false,
        ),
        (
            "link-local src",
            0,
            udp("fe80::2", "2001:db8:100::7", 64, 10),
            false,
        ),
        (
            "unspecified src",
            0,
            udp("::", "2001:db8:100::7", 64, 10),
            false,
        ),
        (
            "unresolved host",
            1,
            udp("2001:db8:0:1::9", "2001:db8::9", 64, 10),
            false,
        ),
        ("hop-by-hop", 0, hbh, false),
        ("payload past the frame", 0, long, false),
        (
            "over port 1's MTU",
            0,
            udp("2001:db8::2", "2001:db8:100::7", 64, 1300),
            false,
        ),
        (
            "hairpin",
            1,
            udp("2001:db8:0:1::9", "2001:db8:100::7", 64, 10),
            false,
        ),
    ];
    for (i, (what, port, frame, taken)) in cases.into_iter().enumerate() {
        let mut frame = frame;
        if port == 1 {
            frame[..6].copy_from_slice(&P1_MAC.0);
        }
        let (mut fast, mut slow) = (frame.clone(), frame.clone());
        let n = fast.len();
        let got = r.forward_fast(port, &mut fast, n, 2);
        let want = r.process(port, &mut slow, 10 + i as u32, 2, &mut out);
        match got {
            Some((p, len)) => {
                assert!(taken, "{what}: taken");
                assert_eq!(want, Action6::Forward { port: p, len }, "{what}");
                assert_eq!(fast[..len], slow[..len], "{what}");
                assert_eq!(fast[..6], B_MAC.0, "{what}");
            }
            None => {
                assert!(!taken, "{what}: refused ({want:?})");
                assert_eq!(fast, frame, "{what}: unchanged");
            }
        }
        outcomes_hold(&r);
    }
    // B moves to a new MAC: the cache is emptied, the slow path learns the MAC, the fast path
    // follows it.
    const B2_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xb, 3]);
    r.advert(ip("2001:db8:0:1::2"), B2_MAC, 3);
    let mut f = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    assert_eq!(r.forward_fast(0, &mut f, n, 4), None, "cache emptied");
    through_gateway_at_once(&mut r, &mut out, 30, 4);
    assert_eq!(r.forward_fast(0, &mut f, n, 5), Some((1, n)));
    assert_eq!(f[..6], B2_MAC.0);
    outcomes_hold(&r);
}

/// Two cores' routers (issue 37): core A solicits the gateway for a queued frame, the
/// solicited advertisement lands on core B, which has no entry for it and creates none, but
/// takes what it learned; A applies it and releases its frame, without a second solicitation.
/// An unsolicited advertisement teaches nothing to hand on.
#[test]
fn an_advert_landing_on_another_core_resolves_the_soliciting_one() {
    router!(a, out);
    router!(b, out_b);
    let gw = ip("2001:db8:0:1::2");
    let mut fr = udp("2001:db8::2", "2001:db8:100::7", 64, 10);
    assert_eq!(a.process(0, &mut fr, 1, 0, &mut out), Action6::Queued);
    assert!(matches!(
        a.poll(0, &mut out),
        Some(Event6::Solicit { port: 1, .. })
    ));
    assert_eq!(b.advert(gw, B_MAC, 5), Action6::Consumed);
    let u = b.take_learned().expect("a solicited advertisement to us");
    assert_eq!(
        u,
        NeighUpdate6 {
            ip: gw.to_bits(),
            port: 1,
            mac: B_MAC
        }
    );
    assert_eq!(b.take_learned(), None, "taken once");
    assert_eq!(b.poll(5, &mut out_b), None, "B created no entry");
    assert!(a.learn(u, 6));
    assert_eq!(
        a.poll(6, &mut out),
        Some(Event6::Transmit {
            handle: 1,
            port: 1,
            len: 64,
            dst: B_MAC,
            src: P1_MAC
        })
    );
    assert!(!b.learn(u, 7), "no entry on B: nothing changed");
    // An unsolicited advertisement (override only) is overheard: nothing to hand on.
    let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::OVERRIDE,
        target_addr: gw,
        lladdr: Some(RawHardwareAddress::from(EthernetAddress(A_MAC.0))),
    });
    let mut f = eth(P1_MAC, A_MAC, icmp(gw, ip("2001:db8:0:1::1"), 255, na));
    assert_eq!(b.process(1, &mut f, 0, 8, &mut out_b), Action6::Consumed);
    assert_eq!(b.take_learned(), None);
    outcomes_hold(&a);
    outcomes_hold(&b);
}

/// An echo request from A to `dst`, as it reaches port 0.
fn echo_to(dst: &str) -> Vec<u8> {
    let echo = Icmpv6Repr::EchoRequest {
        ident: 7,
        seq_no: 1,
        data: b"anycast",
    };
    eth(P0_MAC, A_MAC, icmp(ip("2001:db8::2"), ip(dst), 64, echo))
}

/// RFC 4291 §2.6.1, RFC 4443 §4.2, RFC 4861 §7.2.4: a port's Subnet-Router anycast address
/// (its prefix, interface identifier zero) is ours. An echo request to it, or to the other
/// port's, is answered from the receiving port's unicast address; a solicitation for it, sent
/// to its solicited-node group, is answered with the Override flag clear.
#[test]
fn the_subnet_router_anycast_address_is_ours() {
    router!(r, out);
    for dst in ["2001:db8::", "2001:db8:0:1::"] {
        let mut fr = echo_to(dst);
        let a = r.process(0, &mut fr, 1, 0, &mut out);
        let Action6::Reply { port: 0, len } = a else {
            panic!("{dst}: {a:?}")
        };
        let (h, m) = read_icmp(&fr[..len]);
        assert_eq!(
            (h.src_addr, h.dst_addr),
            (ip("2001:db8::1"), ip("2001:db8::2"))
        );
        assert_eq!(m[0], 129, "echo reply");
    }
    let anycast = ip("2001:db8::");
    let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
        target_addr: anycast,
        lladdr: Some(RawHardwareAddress::from(EthernetAddress(A_MAC.0))),
    });
    let group = Ipv6Addr::from_bits(ndp::solicited_node(anycast.to_bits()));
    assert_eq!(group, ip("ff02::1:ff00:0"));
    let mut fr = eth(
        ndp::multicast_mac(group.to_bits()),
        A_MAC,
        icmp(ip("2001:db8::2"), group, 255, ns),
    );
    let a = r.process(0, &mut fr, 1, 0, &mut out);
    let Action6::Send {
        port: 0,
        len,
        cause: None,
    } = a
    else {
        panic!("not answered: {a:?}")
    };
    let (h, m) = read_icmp(&out[..len]);
    assert_eq!(h.src_addr, anycast);
    assert_eq!(
        m[4] & (NA_SOLICITED | NA_ROUTER | NA_OVERRIDE),
        NA_SOLICITED | NA_ROUTER,
        "no Override for an anycast target"
    );
    // The fast path leaves it to the slow one.
    assert!(r
        .forward_fast(0, &mut echo_to("2001:db8::"), 100, 0)
        .is_none());
    outcomes_hold(&r);
}

/// RFC 6164 §5: on a /127 link the Subnet-Router anycast address is disabled: the prefix's
/// zero address is the other end's, and an echo request to it is forwarded there (queued
/// while Neighbor Discovery resolves it), not answered.
#[test]
fn on_a_127_link_the_zero_address_is_the_other_ends() {
    let mut p = ports();
    p[1].addr = crate::router::parse6::parse_ipv6_cidr("2001:db8:ffff::1/127").unwrap();
    let mut f = Fib::for_ports(&p);
    let trie = Poptrie::build(&mut f.routes, &mut f.direct, &mut f.nodes, &mut f.leaves).unwrap();
    let mut r: R<'_> = Router6::new(
        &p,
        &trie,
        &f.nexthops,
        NeighConfig::default(),
        TokenBucket::new(1000, 50),
    )
    .unwrap();
    let mut out = vec![0u8; 1600];
    let mut fr = echo_to("2001:db8:ffff::");
    let a = r.process(0, &mut fr, 1, 0, &mut out);
    assert_eq!(
        a,
        Action6::Queued,
        "forwarded to the other end, once resolved"
    );
    // Port 0's /64 keeps its anycast address.
    let mut fr = echo_to("2001:db8::");
    assert!(matches!(
        r.process(0, &mut fr, 2, 0, &mut out),
        Action6::Reply { .. }
    ));
}

/// RFC 4861 §6.2 with `ra6=on`: an advertisement per port at the first poll (from the port's
/// link-local address to all-nodes: hop limit 255, the prefix on-link and autonomous as a /64,
/// the port's MTU, router lifetime 1,800 s), the initial ones 16 s apart, then 198–600 s; a
/// Router Solicitation brings the next one forward to 3 s after the last; off, none.
#[test]
fn router_advertisements_when_on() {
    router!(r, out);
    assert!(r.poll(0, &mut out).is_none(), "off by default");
    let mut r = r.with_ra(true);
    let advertised = |r: &mut R<'_>, now: u64, out: &mut Vec<u8>| -> Vec<u8> {
        let mut ports = Vec::new();
        while let Some(e) = r.poll(now, out) {
            let Event6::Advertise { port, len } = e else {
                panic!("{e:?}")
            };
            let (h, m) = read_icmp(&out[..len]);
            let p = usize::from(port);
            assert_eq!(h.src_addr, Ipv6Addr::from_bits(r.link_local(p)));
            assert_eq!((h.dst_addr, h.hop_limit), (ip("ff02::1"), 255));
            let ra = Icmpv6Repr::parse(
                &h.src_addr,
                &h.dst_addr,
                &Icmpv6Packet::new_checked(&m[..]).unwrap(),
                &Default::default(),
            )
            .unwrap();
            let Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
                hop_limit: 64,
                flags,
                router_lifetime,
                reachable_time,
                retrans_time,
                lladdr: Some(mac),
                mtu: Some(mtu),
                prefix_info: Some(pi),
                ..
            }) = ra
            else {
                panic!("{ra:?}")
            };
            assert!(flags.is_empty());
            assert_eq!(router_lifetime, smoltcp::time::Duration::from_secs(1800));
            assert_eq!(
                (reachable_time, retrans_time),
                (Default::default(), Default::default())
            );
            assert_eq!(mac, RawHardwareAddress::from(EthernetAddress(ports_mac(p))));
            assert_eq!(mtu, [1500, 1280][p]);
            assert_eq!(pi.prefix_len, 64);
            assert_eq!(pi.prefix, [ip("2001:db8::"), ip("2001:db8:0:1::")][p]);
            assert_eq!(
                pi.flags,
                NdiscPrefixInfoFlags::ON_LINK | NdiscPrefixInfoFlags::ADDRCONF
            );
            ports.push(port);
        }
        ports
    };
    const S: u64 = 1_000_000_000;
    assert_eq!(advertised(&mut r, 0, &mut out), [0, 1]);
    assert!(advertised(&mut r, S, &mut out).is_empty());
    assert_eq!(advertised(&mut r, 16 * S, &mut out), [0, 1]);
    assert_eq!(advertised(&mut r, 32 * S, &mut out), [0, 1]);
    // The initial ones done: the next ones 198..600 s on.
    assert!(advertised(&mut r, 32 * S + 197 * S, &mut out).is_empty());
    assert_eq!(advertised(&mut r, 32 * S + 600 * S, &mut out), [0, 1]);
    // A solicitation 1 s after that: the next advertisement 3 s after the last, on its port.
    let t = 633 * S;
    let rs = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit {
        lladdr: Some(RawHardwareAddress::from(EthernetAddress(A_MAC.0))),
    });
    let mut fr = eth(
        ndp::multicast_mac(ip("ff02::2").to_bits()),
        A_MAC,
        icmp(ip("fe80::2"), ip("ff02::2"), 255, rs),
    );
    assert_eq!(r.process(0, &mut fr, 1, t, &mut out), Action6::Consumed);
    assert!(advertised(&mut r, t + S, &mut out).is_empty());
    assert_eq!(advertised(&mut r, t + 2 * S, &mut out), [0]);
    assert_eq!(r.counters().ra_sent, 9);
    outcomes_hold(&r);
}

/// The MAC of port `p` of [`ports`].
fn ports_mac(p: usize) -> [u8; 6] {
    [P0_MAC.0, P1_MAC.0][p]
}
