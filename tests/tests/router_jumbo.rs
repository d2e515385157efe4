//! Router mode with jumbo frames and unequal MTUs (issue 14): a 9,014-byte frame (three RX
//! pages) is routed whole, zero copy, between two 9,000-byte ports; towards a 1,500-byte port
//! it is fragmented (DF clear, RFC 791 §3.2) or answered with Destination Unreachable,
//! Fragmentation Needed and the next-hop MTU (DF set, RFC 1191 §4); a one-page datagram
//! larger than the egress MTU is fragmented too. Every fragment's checksum is valid and the
//! fragments reassemble to the original payload.

use std::time::Duration;

use etherparse::{Icmpv4Type, Ipv4Header, SlicedPacket, TransportSlice};
use gannet_tests::*;
use netstack::wire::ETH_HDR_LEN;

const ROUTER: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";

/// A generator datagram of `len` bytes (frame, no FCS) from 10.0.0.2 to 10.0.1.2, TTL 64,
/// DF as given, checksum valid.
fn datagram(len: usize, seq: u64, df: bool) -> Vec<u8> {
    let mut f = gen::build_frame(0, seq, 0, len).expect("frame");
    let (mut ip, _) = Ipv4Header::from_slice(&f[ETH_HDR_LEN..]).expect("IPv4");
    ip.destination = [10, 0, 1, 2];
    ip.time_to_live = 64;
    ip.dont_fragment = df;
    ip.identification = seq as u16;
    ip.header_checksum = ip.calc_header_checksum();
    let mut hdr = Vec::new();
    ip.write(&mut hdr).expect("IPv4 header");
    f[ETH_HDR_LEN..ETH_HDR_LEN + hdr.len()].copy_from_slice(&hdr);
    f
}

/// A small datagram first, so the router resolves 10.0.1.2.
fn resolve(rig: &Rig, p0: &gen::RawPort, p1: &gen::RawPort) {
    p0.send(&datagram(100, 1, false)).unwrap();
    recv_answering_arp(p1, 1, FRAME_TIMEOUT)
        .unwrap_or_else(|| panic!("the small datagram was not routed\n{}", rig.tail()));
}

fn checked_ipv4(frame: &[u8]) -> Ipv4Header {
    let (ip, _) = Ipv4Header::from_slice(&frame[ETH_HDR_LEN..]).expect("an IPv4 frame");
    assert_eq!(
        ip.header_checksum,
        ip.calc_header_checksum(),
        "bad header checksum"
    );
    ip
}

#[test]
fn jumbo_frame_routed_whole_between_9000_byte_ports() {
    let rig = Rig::start_mtu(ROUTER, gen_count(1, 64, false), 9000);
    let (p0, p1) = (rig.port(0), rig.port(1));
    resolve(&rig, &p0, &p1);
    for (seq, df) in [(2u64, false), (3, true)] {
        let sent = datagram(9014, seq, df);
        p0.send(&sent).unwrap();
        let got = recv_answering_arp(&p1, 1, FRAME_TIMEOUT)
            .unwrap_or_else(|| panic!("the jumbo datagram was not routed\n{}", rig.tail()));
        assert_eq!(got.len(), 9014);
        let ip = checked_ipv4(&got);
        assert_eq!(ip.time_to_live, 63);
        let l3 = ETH_HDR_LEN + 20;
        assert_eq!(&got[l3..], &sent[l3..], "payload changed");
    }
    let mut rig = rig;
    let s = rig.quit();
    assert_no_leak(&s);
}

/// A jumbo datagram that meets an unresolved next hop waits for ARP with all its pages and
/// leaves whole (a chain sent from outside the fused burst) once the next hop answers.
#[test]
fn jumbo_frame_waiting_for_arp_leaves_whole() {
    let rig = Rig::start_mtu(ROUTER, gen_count(1, 64, false), 9000);
    let (p0, p1) = (rig.port(0), rig.port(1));
    let sent = datagram(9014, 5, false);
    p0.send(&sent).unwrap();
    let got = recv_answering_arp(&p1, 1, FRAME_TIMEOUT)
        .unwrap_or_else(|| panic!("the queued jumbo datagram was not routed\n{}", rig.tail()));
    assert_eq!(got.len(), 9014);
    assert_eq!(checked_ipv4(&got).time_to_live, 63);
    assert_eq!(&got[ETH_HDR_LEN + 20..], &sent[ETH_HDR_LEN + 20..]);
    let mut rig = rig;
    let s = rig.quit();
    assert_eq!(router(&s).queued, 1, "{s}");
    assert_no_leak(&s);
}

#[test]
fn jumbo_toward_a_1500_byte_port_is_fragmented_or_answered_frag_needed() {
    let mut rig = Rig::start_mtu(
        &format!("{ROUTER} mtu1=1500"),
        gen_count(1, 64, false),
        9000,
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    resolve(&rig, &p0, &p1);
    // Fragments, one page (3,000 bytes) and three pages (9,014 bytes), DF clear.
    for (seq, len) in [(2u64, 3000usize), (3, 9014)] {
        let sent = datagram(len, seq, false);
        p0.send(&sent).unwrap();
        let payload = &sent[ETH_HDR_LEN + 20..];
        let mut whole = vec![None; payload.len()];
        let mut frags = 0;
        let mut last_seen = false;
        while !last_seen {
            let f = recv_answering_arp(&p1, 1, FRAME_TIMEOUT)
                .unwrap_or_else(|| panic!("{len}: fragment {frags} missing\n{}", rig.tail()));
            frags += 1;
            let ip = checked_ipv4(&f);
            assert!(f.len() <= 1514, "{len}: a {}-byte fragment", f.len());
            assert_eq!(ip.identification, seq as u16);
            assert_eq!(ip.time_to_live, 63);
            let off = usize::from(ip.fragment_offset.value()) * 8;
            let data = &f[ETH_HDR_LEN + ip.header_len()..ETH_HDR_LEN + usize::from(ip.total_len)];
            for (i, &b) in data.iter().enumerate() {
                whole[off + i] = Some(b);
            }
            last_seen = !ip.more_fragments;
        }
        assert_eq!(frags, payload.len().div_ceil(1480), "{len}: fragments");
        let got: Vec<u8> = whole.iter().map(|b| b.expect("a hole")).collect();
        assert_eq!(
            got, payload,
            "{len}: the fragments do not reassemble to the datagram"
        );
    }
    // DF set: Fragmentation Needed with the next-hop MTU, back to the sender.
    p0.send(&datagram(9014, 4, true)).unwrap();
    let back = recv_answering_arp(&p0, 0, FRAME_TIMEOUT)
        .unwrap_or_else(|| panic!("no ICMP Fragmentation Needed\n{}", rig.tail()));
    let pkt = SlicedPacket::from_ethernet(&back).expect("parses");
    match pkt.transport {
        Some(TransportSlice::Icmpv4(icmp)) => match icmp.icmp_type() {
            Icmpv4Type::DestinationUnreachable(d) => {
                let d = format!("{d:?}");
                assert!(
                    d.contains("FragmentationNeeded") && d.contains("1500"),
                    "{d}"
                );
            }
            t => panic!("ICMP {t:?}, not Destination Unreachable"),
        },
        t => panic!("not ICMP: {t:?}"),
    }
    assert!(
        p1.recv_timeout(Duration::from_millis(300)).is_none(),
        "DF datagram sent"
    );
    let s = rig.quit();
    assert_no_leak(&s);
}
