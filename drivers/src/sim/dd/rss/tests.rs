//! Host tests of the simulated 82576's RSS ([`super`]): the hash of frames built byte by byte
//! against Microsoft's verification vectors (*Verifying the RSS Hash Calculation*: IPv4 and
//! IPv6, with and without ports), which `MRQC` bits pick which type, fragments and short
//! headers. The frame builders and the vectors are shared with the multi-queue host tests
//! (`igb/mq/rss_tests.rs`).

use super::*;

extern crate std;
use std::vec::Vec;

pub(crate) use netstack::rss::vectors::{V4, V6};
pub(crate) use netstack::rss::MICROSOFT_KEY;

/// The L4 header (TCP 20 bytes, UDP 8; checksums 0) and `payload` bytes after it.
fn l4_header(proto: u8, sport: u16, dport: u16, payload: usize) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    if proto == 6 {
        // Sequence, acknowledgement, data offset 5, ACK, window, checksum, urgent pointer.
        h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        h.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 0]);
    }
    h.extend((0..payload).map(|i| i as u8));
    h
}

/// An Ethernet frame (MACs 02:…:01 to 02:…:02) of IPv4 from `src` to `dst` carrying TCP
/// (`proto` 6) or UDP (17) between the ports, `payload` bytes of data; `frag` sets `MF`.
pub(crate) fn ipv4_frame(
    proto: u8,
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: usize,
    frag: bool,
) -> Vec<u8> {
    let l4 = l4_header(proto, sport, dport, payload);
    let mut f = Vec::new();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let total = (20 + l4.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 1, if frag { 0x20 } else { 0x40 }, 0, 64, proto, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&l4);
    f
}

/// An Ethernet frame of IPv6 from `src` to `dst` carrying TCP (`proto` 6) or UDP (17).
pub(crate) fn ipv6_frame(
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    payload: usize,
) -> Vec<u8> {
    let l4 = l4_header(proto, sport, dport, payload);
    let mut f = Vec::new();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xDD]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[proto, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&l4);
    f
}

/// Every field selection Gannet programs (`drivers::igb::MRQC_RSS_FIELDS`) plus QEMU's
/// TCP-over-IPv6 bit.
const ALL: u32 = crate::igb::MRQC_RSS_FIELDS | MRQC_TCP_IPV6_QEMU;

#[test]
fn ipv4_frames_hash_as_microsofts_vectors_with_and_without_ports() {
    for (dst, dport, src, sport, with_ports, addrs) in V4 {
        let tcp = ipv4_frame(6, src, dst, sport, dport, 6, false);
        let got = classify(&tcp, ALL, &MICROSOFT_KEY);
        assert_eq!(
            got,
            RssInfo {
                rss_type: RSS_TYPE_TCP_IPV4,
                hash: with_ports,
                pkt_type: PKT_IPV4 | PKT_TCP
            }
        );
        let udp = ipv4_frame(17, src, dst, sport, dport, 6, false);
        let got = classify(&udp, ALL, &MICROSOFT_KEY);
        assert_eq!((got.rss_type, got.hash), (RSS_TYPE_UDP_IPV4, with_ports));
        assert_eq!(got.pkt_type, PKT_IPV4 | PKT_UDP);
        // Ports not selected, or a fragment: the addresses only.
        let got = classify(&udp, MRQC_IPV4 | MRQC_TCP_IPV4, &MICROSOFT_KEY);
        assert_eq!((got.rss_type, got.hash), (RSS_TYPE_IPV4, addrs));
        let frag = ipv4_frame(6, src, dst, sport, dport, 6, true);
        let got = classify(&frag, ALL, &MICROSOFT_KEY);
        assert_eq!(
            (got.rss_type, got.hash, got.pkt_type),
            (RSS_TYPE_IPV4, addrs, PKT_IPV4)
        );
    }
}

#[test]
fn ipv6_frames_hash_as_microsofts_vectors_and_tcp_needs_qemus_bit_18() {
    for (dst, dport, src, sport, with_ports, addrs) in V6 {
        let udp = ipv6_frame(17, src, dst, sport, dport, 4);
        let got = classify(&udp, ALL, &MICROSOFT_KEY);
        assert_eq!((got.rss_type, got.hash), (RSS_TYPE_UDP_IPV6, with_ports));
        assert_eq!(got.pkt_type, PKT_IPV6 | PKT_UDP);
        let tcp = ipv6_frame(6, src, dst, sport, dport, 4);
        let got = classify(&tcp, ALL, &MICROSOFT_KEY);
        assert_eq!((got.rss_type, got.hash), (RSS_TYPE_TCP_IPV6, with_ports));
        // Gannet's selection: bit 21 (the datasheet's TcpIPv6), which QEMU does not read.
        let got = classify(&tcp, crate::igb::MRQC_RSS_FIELDS, &MICROSOFT_KEY);
        assert_eq!((got.rss_type, got.hash), (RSS_TYPE_IPV6, addrs));
        let got = classify(&tcp, MRQC_IPV6_EX | MRQC_IPV6, &MICROSOFT_KEY);
        assert_eq!((got.rss_type, got.hash), (RSS_TYPE_IPV6_EX, addrs));
    }
}

#[test]
fn other_frames_short_headers_and_unselected_types_get_no_hash() {
    let (dst, dport, src, sport, _, _) = V4[0];
    let ok = ipv4_frame(6, src, dst, sport, dport, 0, false);
    assert_eq!(classify(&ok, 0, &MICROSOFT_KEY).rss_type, RSS_TYPE_NONE);
    assert_eq!(
        classify(&ok, 0, &MICROSOFT_KEY),
        RssInfo {
            rss_type: 0,
            hash: 0,
            pkt_type: PKT_IPV4 | PKT_TCP
        }
    );
    // A TCP header cut short: IPv4 only.
    let got = classify(&ok[..14 + 20 + 19], ALL, &MICROSOFT_KEY);
    assert_eq!((got.rss_type, got.pkt_type), (RSS_TYPE_IPV4, PKT_IPV4));
    // An IPv4 header cut short, a bad IHL, ARP, a runt: nothing.
    for f in [&ok[..14 + 19], &ok[..13], &[][..]] {
        assert_eq!(classify(f, ALL, &MICROSOFT_KEY), RssInfo::default());
    }
    let mut bad = ok.clone();
    bad[14] = 0x44;
    assert_eq!(classify(&bad, ALL, &MICROSOFT_KEY), RssInfo::default());
    let mut arp = ok.clone();
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(classify(&arp, ALL, &MICROSOFT_KEY), RssInfo::default());
    // Behind two VLAN tags: the same hash.
    let mut tagged = ok[..12].to_vec();
    tagged.extend_from_slice(&[0x88, 0xA8, 0, 5, 0x81, 0x00, 0, 7]);
    tagged.extend_from_slice(&ok[12..]);
    assert_eq!(
        classify(&tagged, ALL, &MICROSOFT_KEY),
        classify(&ok, ALL, &MICROSOFT_KEY)
    );
}

#[test]
fn the_first_quadword_holds_type_packet_type_and_hash_where_linux_reads_them() {
    let i = RssInfo {
        rss_type: RSS_TYPE_UDP_IPV4,
        hash: 0xdead_beef,
        pkt_type: PKT_IPV4 | PKT_UDP,
    };
    let q = i.first_quadword();
    assert_eq!(q & 0xF, 7, "RSS type, bits 3:0");
    assert_eq!(q >> 4 & 0x1FFF, 0x21, "packet type, bits 16:4");
    assert_eq!(q >> 32, 0xdead_beef, "hash, bits 63:32");
}
