//! ND messages against smoltcp's `NdiscRepr` (an independent implementation).

use super::super::ipv6::validate;
use super::*;
use core::net::Ipv6Addr;
use smoltcp::wire::{
    EthernetAddress, Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv6Packet, Ipv6Repr,
    NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
};
use std::vec;
use std::vec::Vec;

const MAC: MacAddr = MacAddr([2, 0, 0, 0, 0xa, 2]);

fn ip(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// An ND datagram smoltcp emits, with `hop_limit`.
fn smol(src: &str, dst: &str, hop_limit: u8, nd: NdiscRepr<'_>) -> Vec<u8> {
    let icmp = Icmpv6Repr::Ndisc(nd);
    let (s, d) = (ip(src), ip(dst));
    let repr = Ipv6Repr {
        src_addr: s,
        dst_addr: d,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit,
    };
    let mut b = vec![0u8; 40 + icmp.buffer_len()];
    repr.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
    icmp.emit(
        &s,
        &d,
        &mut Icmpv6Packet::new_unchecked(&mut b[40..]),
        &smoltcp::phy::ChecksumCapabilities::default(),
    );
    b
}

fn ours(b: &[u8]) -> Result<NdMessage, NdError> {
    let h = validate(b, b.len()).unwrap();
    parse(&h, &b[40..])
}

fn lladdr(m: MacAddr) -> Option<RawHardwareAddress> {
    Some(RawHardwareAddress::from(EthernetAddress(m.0)))
}

#[test]
fn solicitations_and_adverts_from_smoltcp_are_read() {
    let target = ip("2001:db8::1");
    let ns = NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: lladdr(MAC),
    };
    let b = smol("2001:db8::2", "ff02::1:ff00:1", 255, ns);
    assert_eq!(
        ours(&b),
        Ok(NdMessage::Solicit {
            target: target.to_bits(),
            source_mac: Some(MAC),
            dad: false
        })
    );
    let na = NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
        target_addr: target,
        lladdr: lladdr(MAC),
    };
    let b = smol("2001:db8::1", "2001:db8::2", 255, na);
    assert_eq!(
        ours(&b),
        Ok(NdMessage::Advert {
            target: target.to_bits(),
            target_mac: Some(MAC),
            flags: NA_SOLICITED | NA_OVERRIDE
        })
    );
    // DAD: from ::, to the target's solicited-node group, no SLLA.
    let dad = NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: None,
    };
    let b = smol("::", "ff02::1:ff00:1", 255, dad);
    assert!(matches!(
        ours(&b),
        Ok(NdMessage::Solicit {
            dad: true,
            source_mac: None,
            ..
        })
    ));
    let rs = NdiscRepr::RouterSolicit {
        lladdr: lladdr(MAC),
    };
    let b = smol("fe80::2", "ff02::2", 255, rs);
    assert_eq!(ours(&b), Ok(NdMessage::Ignored(ND_ROUTER_SOLICIT)));
}

#[test]
fn rfc_4861_section_7_1_refusals() {
    let target = ip("2001:db8::1");
    let ns = |ll| NdiscRepr::NeighborSolicit {
        target_addr: target,
        lladdr: ll,
    };
    // Forwarded (hop limit 254).
    assert_eq!(
        ours(&smol("2001:db8::2", "ff02::1:ff00:1", 254, ns(lladdr(MAC)))),
        Err(NdError::HopLimit)
    );
    // Checksum and code.
    let mut b = smol("2001:db8::2", "ff02::1:ff00:1", 255, ns(lladdr(MAC)));
    b[50] ^= 1;
    assert_eq!(ours(&b), Err(NdError::Checksum));
    // Code 1, the checksum made right again.
    let mut b = smol("2001:db8::2", "ff02::1:ff00:1", 255, ns(lladdr(MAC)));
    b[41] = 1;
    b[42..44].fill(0);
    let sum = checksum6(
        ip("2001:db8::2").to_bits(),
        ip("ff02::1:ff00:1").to_bits(),
        &b[40..],
    );
    b[42..44].copy_from_slice(&sum.to_be_bytes());
    assert_eq!(ours(&b), Err(NdError::Code));
    // A multicast target.
    let m = NdiscRepr::NeighborSolicit {
        target_addr: ip("ff02::1"),
        lladdr: None,
    };
    assert_eq!(
        ours(&smol("2001:db8::2", "ff02::1:ff00:1", 255, m)),
        Err(NdError::MulticastTarget)
    );
    // DAD with an SLLA, or to a unicast address.
    assert_eq!(
        ours(&smol("::", "ff02::1:ff00:1", 255, ns(lladdr(MAC)))),
        Err(NdError::BadDad)
    );
    assert_eq!(
        ours(&smol("::", "2001:db8::1", 255, ns(None))),
        Err(NdError::BadDad)
    );
    // A solicited NA to all-nodes.
    let na = NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::SOLICITED,
        target_addr: target,
        lladdr: lladdr(MAC),
    };
    assert_eq!(
        ours(&smol("2001:db8::1", "ff02::1", 255, na)),
        Err(NdError::SolicitedToMulticast)
    );
}

/// An NS from ours with its option's length byte set to `len` (checksum recomputed).
fn ns_with_option_len(len: u8) -> Vec<u8> {
    let (s, d) = (
        ip("2001:db8::2").to_bits(),
        solicited_node(ip("2001:db8::1").to_bits()),
    );
    let mut b = vec![0u8; 72];
    build(&mut b, s, d, ip("2001:db8::1").to_bits(), MAC, None).unwrap();
    b[40 + 25] = len;
    b[42..44].fill(0);
    let sum = checksum6(s, d, &b[40..]);
    b[42..44].copy_from_slice(&sum.to_be_bytes());
    b
}

#[test]
fn option_lengths_are_checked() {
    assert_eq!(ours(&ns_with_option_len(0)), Err(NdError::BadOption));
    assert_eq!(ours(&ns_with_option_len(2)), Err(NdError::BadOption));
    assert!(matches!(
        ours(&ns_with_option_len(1)),
        Ok(NdMessage::Solicit {
            source_mac: Some(MAC),
            ..
        })
    ));
    // Truncated below 24 bytes.
    let b = ns_with_option_len(1);
    let h = validate(&b, b.len()).unwrap();
    assert_eq!(parse(&h, &b[40..60]), Err(NdError::Length));
}

#[test]
fn ours_are_read_by_smoltcp() {
    let (s, t) = (ip("2001:db8::ffff"), ip("2001:db8::1"));
    for advert in [None, Some(NA_ROUTER | NA_SOLICITED | NA_OVERRIDE)] {
        let d = if advert.is_some() {
            ip("2001:db8::1")
        } else {
            Ipv6Addr::from_bits(solicited_node(t.to_bits()))
        };
        let mut b = [0u8; 100];
        let n = build(&mut b, s.to_bits(), d.to_bits(), t.to_bits(), MAC, advert).unwrap();
        assert_eq!(n, 72);
        let p = Ipv6Packet::new_checked(&b[..n]).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.hop_limit, 255);
        let icmp = Icmpv6Packet::new_checked(p.payload()).unwrap();
        assert!(icmp.verify_checksum(&s, &d));
        let parsed = Icmpv6Repr::parse(&s, &d, &icmp, &Default::default()).unwrap();
        let want = match advert {
            None => Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: t,
                lladdr: lladdr(MAC),
            }),
            Some(_) => Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::ROUTER
                    | NdiscNeighborFlags::SOLICITED
                    | NdiscNeighborFlags::OVERRIDE,
                target_addr: t,
                lladdr: lladdr(MAC),
            }),
        };
        assert_eq!(parsed, want);
        assert!(ours(&b[..n]).is_ok());
    }
    assert_eq!(
        build(
            &mut [0u8; 71],
            s.to_bits(),
            s.to_bits(),
            t.to_bits(),
            MAC,
            None
        ),
        None
    );
}

#[test]
fn solicited_node_groups_and_their_macs() {
    let a = ip("2001:db8::12:3456:789a").to_bits();
    assert_eq!(
        Ipv6Addr::from_bits(solicited_node(a)),
        ip("ff02::1:ff56:789a")
    );
    assert_eq!(
        multicast_mac(solicited_node(a)),
        MacAddr([0x33, 0x33, 0xff, 0x56, 0x78, 0x9a])
    );
    assert_eq!(
        multicast_mac(ip("ff02::1").to_bits()),
        MacAddr([0x33, 0x33, 0, 0, 0, 1])
    );
}
