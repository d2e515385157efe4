//! IPv6 checks and ICMPv6 errors, frames built and read back with smoltcp's wire types.

use super::super::icmp6::{build_error, may_answer, ICMP6_ERROR_MAX};
use super::*;
use core::net::Ipv6Addr;
use smoltcp::wire::{Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv6Packet, Ipv6Repr};
use std::vec;
use std::vec::Vec;

fn a(s: &str) -> u128 {
    s.parse::<Ipv6Addr>().unwrap().to_bits()
}

/// An IPv6 datagram from `src` to `dst` with hop limit `hl`, `next` header and `payload`.
fn dgram(src: &str, dst: &str, hl: u8, next: u8, payload: &[u8]) -> Vec<u8> {
    let repr = Ipv6Repr {
        src_addr: src.parse().unwrap(),
        dst_addr: dst.parse().unwrap(),
        next_header: IpProtocol::from(next),
        payload_len: payload.len(),
        hop_limit: hl,
    };
    let mut b = vec![0u8; 40 + payload.len()];
    repr.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
    b[40..].copy_from_slice(payload);
    b
}

fn udp(src: &str, dst: &str, hl: u8) -> Vec<u8> {
    dgram(src, dst, hl, 17, &[0; 16])
}

/// A Hop-by-Hop header holding `opts` (padded by the caller to 6 + 8k bytes), then UDP.
fn with_hbh(dst: &str, opts: &[u8]) -> Vec<u8> {
    assert_eq!((opts.len() + 2) % 8, 0);
    let mut p = vec![17, ((opts.len() + 2) / 8 - 1) as u8];
    p.extend_from_slice(opts);
    p.extend_from_slice(&[0; 8]);
    dgram("2001:db8::1", dst, 64, 0, &p)
}

fn hdr(b: &[u8]) -> Ipv6Hdr {
    validate(b, b.len()).unwrap()
}

#[test]
fn the_fixed_header_is_checked_in_linuxs_order() {
    let ok = udp("2001:db8::1", "2001:db8:1::1", 64);
    let h = hdr(&ok);
    assert_eq!((h.payload_len, h.next_header, h.hop_limit), (16, 17, 64));
    assert_eq!(h.len(), 56);
    assert_eq!(validate(&ok[..39], 39), Err(Drop6::Truncated));
    let mut v4 = ok.clone();
    v4[0] = 0x45;
    assert_eq!(validate(&v4, v4.len()), Err(Drop6::BadVersion));
    for (s, d, want) in [
        ("::1", "2001:db8::2", Drop6::Loopback),
        ("2001:db8::1", "::1", Drop6::Loopback),
        ("2001:db8::1", "ff00::1", Drop6::BadMulticastScope),
        ("2001:db8::1", "ff01::1", Drop6::BadMulticastScope),
        ("ff02::1", "2001:db8::2", Drop6::MulticastSrc),
    ] {
        let b = udp(s, d, 64);
        assert_eq!(validate(&b, b.len()), Err(want), "{s} -> {d}");
    }
    // Payload length past the frame; shorter is fine (Ethernet padding, trimmed by the caller).
    assert_eq!(validate(&ok, ok.len() - 1), Err(Drop6::BadPayloadLen));
    let mut padded = ok.clone();
    padded.extend_from_slice(&[0; 6]);
    assert_eq!(validate(&padded, padded.len()).unwrap().len(), 56);
    // Payload length 0: fine without Hop-by-Hop (no next header), a jumbogram with it.
    let empty = dgram("2001:db8::1", "2001:db8::2", 64, 59, &[]);
    assert!(hdr(&empty).is_empty());
    let mut jumbo = empty.clone();
    jumbo[6] = 0;
    jumbo.extend_from_slice(&[0; 8]);
    assert_eq!(validate(&jumbo, jumbo.len()), Err(Drop6::BadPayloadLen));
}

#[test]
fn address_classes() {
    assert_eq!(classify(0), AddrClass6::Unspecified);
    assert_eq!(classify(1), AddrClass6::Loopback);
    assert_eq!(classify(a("fe80::1")), AddrClass6::LinkLocal);
    assert_eq!(classify(a("febf::1")), AddrClass6::LinkLocal);
    assert_eq!(classify(a("fec0::1")), AddrClass6::Unicast);
    assert_eq!(
        classify(a("ff02::1:ff00:1")),
        AddrClass6::Multicast { scope: 2 }
    );
    assert_eq!(classify(a("ff0e::1")), AddrClass6::Multicast { scope: 14 });
    assert_eq!(classify(a("fd00::1")), AddrClass6::Unicast);
    assert_eq!(classify(a("::ffff:10.0.0.1")), AddrClass6::Unicast);
}

#[test]
fn hop_by_hop_options_are_walked_as_linux_does() {
    // PadN(4) alone: nothing asked.
    let b = with_hbh("2001:db8::2", &[1, 2, 0, 0, 0, 0]);
    assert_eq!(
        hop_by_hop(&b, &hdr(&b)),
        Ok(HopByHop {
            router_alert: false,
            len: 8
        })
    );
    // Router Alert (MLD) then Pad1 Pad1 (RFC 2711).
    let b = with_hbh("2001:db8::2", &[5, 2, 0, 0, 0, 0]);
    assert!(hop_by_hop(&b, &hdr(&b)).unwrap().router_alert);
    // Unknown options by their action bits (RFC 8200 §4.2), type at offset 42.
    for (ty, dst, want) in [
        (0x1e, "2001:db8::2", Ok(())),
        (0x5e, "2001:db8::2", Err(Ok(Drop6::OptionDiscard))),
        (
            0x9e,
            "2001:db8::2",
            Err(Err(Icmp6Error::ParamProblem {
                code: 2,
                pointer: 42,
            })),
        ),
        (
            0x9e,
            "ff0e::2",
            Err(Err(Icmp6Error::ParamProblem {
                code: 2,
                pointer: 42,
            })),
        ),
        (
            0xde,
            "2001:db8::2",
            Err(Err(Icmp6Error::ParamProblem {
                code: 2,
                pointer: 42,
            })),
        ),
        (0xde, "ff0e::2", Err(Ok(Drop6::OptionDiscard))),
    ] {
        let b = with_hbh(dst, &[ty, 4, 0, 0, 0, 0]);
        assert_eq!(
            hop_by_hop(&b, &hdr(&b)).map(|_| ()),
            want,
            "{ty:#x} to {dst}"
        );
    }
    // A Jumbo Payload option in a datagram with a payload length: code 0 at the option.
    let b = with_hbh("2001:db8::2", &[0xc2, 4, 0, 1, 0, 0]);
    assert_eq!(
        hop_by_hop(&b, &hdr(&b)),
        Err(Err(Icmp6Error::ParamProblem {
            code: 0,
            pointer: 42
        }))
    );
}

#[test]
fn malformed_hop_by_hop_headers_are_dropped() {
    let bad = |b: &[u8]| hop_by_hop(b, &hdr(b));
    // 8 Pad1s in a row (the header's 6 option bytes plus a second 8-byte unit).
    let b = with_hbh("2001:db8::2", &[0; 14]);
    assert_eq!(bad(&b), Err(Ok(Drop6::BadHopByHop)));
    // 1 KiB of PadN.
    let mut opts = Vec::new();
    while opts.len() + 2 + 257 <= 1022 {
        opts.extend_from_slice(&[1, 255]);
        opts.extend_from_slice(&[0; 255]);
    }
    opts.resize(1022, 0);
    let b = with_hbh("2001:db8::2", &opts);
    assert_eq!(bad(&b), Err(Ok(Drop6::BadHopByHop)));
    // PadN with non-zero bytes.
    let b = with_hbh("2001:db8::2", &[1, 4, 0, 7, 0, 0]);
    assert_eq!(bad(&b), Err(Ok(Drop6::BadHopByHop)));
    // An option running past the header.
    let b = with_hbh("2001:db8::2", &[0x1e, 9, 0, 0, 0, 0]);
    assert_eq!(bad(&b), Err(Ok(Drop6::BadHopByHop)));
    // Nine options (skip-type, 2 bytes each, padded to a multiple of 8).
    let mut opts: Vec<u8> = (0..9).flat_map(|_| [0x1e, 0]).collect();
    opts.extend_from_slice(&[1, 2, 0, 0]);
    let b = with_hbh("2001:db8::2", &opts);
    assert_eq!(bad(&b), Err(Ok(Drop6::BadHopByHop)));
    opts.drain(..2);
    opts.extend_from_slice(&[0, 0]);
    let b = with_hbh("2001:db8::2", &opts);
    assert!(bad(&b).is_ok(), "eight options are allowed");
    // The header longer than the datagram, and past the head the caller passed.
    let mut b = with_hbh("2001:db8::2", &[1, 2, 0, 0, 0, 0]);
    b[41] = 3;
    assert_eq!(bad(&b), Err(Ok(Drop6::BadHopByHop)));
    let b = with_hbh("2001:db8::2", &[1, 2, 0, 0, 0, 0]);
    assert_eq!(hop_by_hop(&b[..44], &hdr(&b)), Err(Ok(Drop6::BeyondHead)));
}

#[test]
fn forwarding_checks_come_in_linuxs_order() {
    let out = |port, mtu| Some(Egress6 { port, mtu });
    let h = hdr(&udp("2001:db8::1", "2001:db8:1::1", 64));
    assert_eq!(forward_check(&h, 56, 0, out(1, 1500)), Forward6::Forward);
    assert_eq!(
        forward_check(&h, 56, 0, None),
        Forward6::Error(Icmp6Error::NoRoute)
    );
    assert_eq!(
        forward_check(&h, 1281, 0, out(1, 1280)),
        Forward6::Error(Icmp6Error::PacketTooBig { mtu: 1280 })
    );
    assert_eq!(forward_check(&h, 1280, 0, out(1, 1280)), Forward6::Forward);
    // Hop limit 1: Time Exceeded, but only with a route, and before the MTU.
    let h1 = hdr(&udp("2001:db8::1", "2001:db8:1::1", 1));
    assert_eq!(
        forward_check(&h1, 56, 0, None),
        Forward6::Error(Icmp6Error::NoRoute)
    );
    assert_eq!(
        forward_check(&h1, 9000, 0, out(1, 1280)),
        Forward6::Error(Icmp6Error::HopLimit)
    );
    let h0 = hdr(&udp("2001:db8::1", "2001:db8:1::1", 0));
    assert_eq!(
        forward_check(&h0, 56, 0, out(1, 1500)),
        Forward6::Error(Icmp6Error::HopLimit)
    );
    // A link-local source: beyond scope off its link, forwarded back onto it.
    let ll = hdr(&udp("fe80::1", "2001:db8:1::1", 64));
    assert_eq!(
        forward_check(&ll, 56, 0, out(1, 1500)),
        Forward6::Error(Icmp6Error::BeyondScope)
    );
    assert_eq!(forward_check(&ll, 56, 0, out(0, 1500)), Forward6::Forward);
    let unspec = hdr(&udp("::", "2001:db8:1::1", 64));
    assert_eq!(
        forward_check(&unspec, 56, 0, out(1, 1500)),
        Forward6::Drop(Drop6::UnspecifiedSrc)
    );
    // Destinations never forwarded.
    for (d, want) in [
        ("::", Drop6::UnspecifiedDst),
        ("ff02::1", Drop6::Multicast),
        ("ff0e::1", Drop6::Multicast),
        ("fe80::2", Drop6::LinkLocalDst),
    ] {
        assert_eq!(
            dst_check(&hdr(&udp("2001:db8::1", d, 64))),
            Err(want),
            "{d}"
        );
    }
    assert_eq!(dst_check(&h), Ok(()));
    let mut b = udp("2001:db8::1", "2001:db8:1::1", 64);
    decrement_hop_limit(&mut b);
    assert_eq!(hdr(&b).hop_limit, 63);
    // The flow label and traffic class are left as they came.
    assert_eq!(b[..4], [0x60, 0, 0, 0]);
}

#[test]
fn errors_are_built_as_smoltcp_reads_them() {
    let router = a("2001:db8::ffff");
    let inv = udp("2001:db8::1", "2001:db8:1::1", 1);
    let h = hdr(&inv);
    let mut out = [0u8; 1500];
    for e in [
        Icmp6Error::NoRoute,
        Icmp6Error::BeyondScope,
        Icmp6Error::AddressUnreachable,
        Icmp6Error::HopLimit,
        Icmp6Error::PacketTooBig { mtu: 1280 },
        Icmp6Error::ParamProblem {
            code: 2,
            pointer: 42,
        },
    ] {
        let n = build_error(&mut out, router, &inv, &h, e).unwrap();
        assert_eq!(n, 40 + 8 + inv.len());
        let ip = Ipv6Packet::new_checked(&out[..n]).unwrap();
        let r = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!(
            (r.src_addr.to_bits(), r.dst_addr.to_bits()),
            (router, h.src)
        );
        assert_eq!((r.next_header, r.hop_limit), (IpProtocol::Icmpv6, 64));
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum(&r.src_addr, &r.dst_addr), "{e:?}");
        let (ty, code) = e.type_code();
        assert_eq!((u8::from(icmp.msg_type()), icmp.msg_code()), (ty, code));
        let parsed = Icmpv6Repr::parse(&r.src_addr, &r.dst_addr, &icmp, &Default::default());
        assert!(parsed.is_ok(), "{e:?}: {parsed:?}");
        match e {
            Icmp6Error::PacketTooBig { mtu } => assert_eq!(icmp.pkt_too_big_mtu(), mtu),
            Icmp6Error::ParamProblem { pointer, .. } => {
                assert_eq!(icmp.param_problem_ptr(), pointer)
            }
            _ => {}
        }
        assert_eq!(&icmp.payload()[..inv.len()], &inv[..]);
    }
    // A large invoking datagram is quoted up to 1,280 bytes in all.
    let big = dgram("2001:db8::1", "2001:db8:1::1", 64, 17, &[7; 2000]);
    let n = build_error(
        &mut out,
        router,
        &big,
        &hdr(&big),
        Icmp6Error::PacketTooBig { mtu: 1280 },
    );
    assert_eq!(n, Some(ICMP6_ERROR_MAX));
    assert_eq!(
        build_error(
            &mut out[..100],
            router,
            &big,
            &hdr(&big),
            Icmp6Error::NoRoute
        ),
        None
    );
}

#[test]
fn errors_are_never_about_errors_multicast_or_anonymous_sources() {
    let udp1 = udp("2001:db8::1", "2001:db8:1::1", 1);
    let ok = |b: &[u8], l2, e| may_answer(b, &hdr(b), l2, e);
    assert!(ok(&udp1, false, Icmp6Error::HopLimit));
    // e.4/e.5: an L2 multicast or broadcast frame; e.3: a multicast destination.
    assert!(!ok(&udp1, true, Icmp6Error::HopLimit));
    assert!(ok(&udp1, true, Icmp6Error::PacketTooBig { mtu: 1280 }));
    let m = udp("2001:db8::1", "ff0e::1", 1);
    assert!(!ok(&m, false, Icmp6Error::NoRoute));
    assert!(ok(
        &m,
        false,
        Icmp6Error::ParamProblem {
            code: 2,
            pointer: 42
        }
    ));
    assert!(!ok(
        &m,
        false,
        Icmp6Error::ParamProblem {
            code: 0,
            pointer: 4
        }
    ));
    // e.6: the source names no single node.
    assert!(!ok(
        &udp("::", "2001:db8:1::1", 1),
        false,
        Icmp6Error::HopLimit
    ));
    // e.1/e.2: about an ICMPv6 error or a Redirect never; about an echo request yes.
    for (ty, answered) in [
        (1u8, false),
        (3, false),
        (127, false),
        (137, false),
        (128, true),
        (135, true),
    ] {
        let b = dgram(
            "2001:db8::1",
            "2001:db8:1::1",
            1,
            58,
            &[ty, 0, 0, 0, 0, 0, 0, 0],
        );
        assert_eq!(ok(&b, false, Icmp6Error::HopLimit), answered, "type {ty}");
    }
    // Behind a Hop-by-Hop header and a first fragment it is still found.
    let mut p = vec![44, 0, 1, 2, 0, 0, 0, 0];
    p.extend_from_slice(&[58, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    let b = dgram("2001:db8::1", "2001:db8:1::1", 1, 0, &p);
    assert!(!ok(&b, false, Icmp6Error::HopLimit));
    // A later fragment: its upper layer is elsewhere, so it is answered.
    p[8 + 3] = 8;
    let b = dgram("2001:db8::1", "2001:db8:1::1", 1, 0, &p);
    assert!(ok(&b, false, Icmp6Error::HopLimit));
}

#[test]
fn drop_reasons_are_indexed_in_declaration_order() {
    for (i, d) in Drop6::ALL.iter().enumerate() {
        assert_eq!(*d as usize, i, "{d:?}");
    }
}
