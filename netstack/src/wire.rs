//! Header layouts on the wire: field offsets and ranges of Ethernet II, IPv4, UDP, ICMP and ARP
//! headers, and the protocol numbers the fast path matches, each with its source.
//!
//! The one set of these constants in the workspace (the router, the l2 forwarder, the
//! benchmark's frames, and `harness`/`tests`, which depend on `netstack`, all use it). Modelled on
//! smoltcp's `wire::*::field` ranges, but flat with a protocol prefix (`ETH_`, `IPV4_`, `UDP_`,
//! `ICMP_`, `ARP_`) so that they do not collide with the router's own modules (`router::ipv4`,
//! `router::arp`) and read the same at every use site.
//!
//! Offsets are relative to the start of their own header: a field of the IPv4 header in an
//! Ethernet frame is at `ETH_HDR_LEN + IPV4_TTL`, the UDP header (no IPv4 options) at
//! `ETH_HDR_LEN + IPV4_MIN_HDR`. A field one byte wide is a `usize`, a wider one a
//! `Range<usize>`: `frame[ETH_DST].copy_from_slice(..)`, `be16(frame, ETHERTYPE.start)`.
//! Constants cost nothing: the indexing compiles as it did with the literals.

use core::ops::Range;

// --- Ethernet II (IEEE 802.3 §3.1.1 MAC frame format, §3.2.6 Length/Type; RFC 894) ----------

/// Destination MAC address.
pub const ETH_DST: Range<usize> = 0..6;
/// Source MAC address.
pub const ETH_SRC: Range<usize> = 6..12;
/// EtherType (a Length/Type value ≥ 0x0600 is a type; IEEE 802.3 §3.2.6).
pub const ETHERTYPE: Range<usize> = 12..14;
/// Ethernet header length (destination, source, EtherType): 14 bytes. The payload (the IPv4
/// header, the ARP packet) starts here.
pub const ETH_HDR_LEN: usize = 14;
/// Minimum Ethernet frame without FCS (IEEE 802.3 §4.4.2 `minFrameSize` 64 less the 4-byte FCS;
/// Linux's `ETH_ZLEN`); ARP frames we build are padded to it.
pub const ETH_ZLEN: usize = 60;

/// EtherType of IPv4 (RFC 894).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP (RFC 826).
pub const ETHERTYPE_ARP: u16 = 0x0806;

// --- IPv4 (RFC 791 §3.1 Internet Header Format) --------------------------------------------

/// Version (high nibble) and IHL, the header length in 32-bit words (low nibble).
pub const IPV4_VER_IHL: usize = 0;
/// Type of Service (RFC 791; DSCP and ECN since RFC 2474 and RFC 3168).
pub const IPV4_TOS: usize = 1;
/// Total Length: header and data, in bytes.
pub const IPV4_TOTAL_LEN: Range<usize> = 2..4;
/// Identification.
pub const IPV4_IDENT: Range<usize> = 4..6;
/// Flags (3 bits: reserved, DF, MF) and Fragment Offset (13 bits, in 8-byte units).
pub const IPV4_FLAGS_FRAG: Range<usize> = 6..8;
/// Time to Live.
pub const IPV4_TTL: usize = 8;
/// Protocol (IANA protocol numbers: [`IPPROTO_ICMP`], [`IPPROTO_UDP`]).
pub const IPV4_PROTOCOL: usize = 9;
/// Header Checksum (RFC 1071 over the header only).
pub const IPV4_CHECKSUM: Range<usize> = 10..12;
/// Source Address.
pub const IPV4_SRC: Range<usize> = 12..16;
/// Destination Address.
pub const IPV4_DST: Range<usize> = 16..20;
/// Minimum IPv4 header length (IHL = 5); options, if any, start here.
pub const IPV4_MIN_HDR: usize = 20;
/// Length of the longest IPv4 options area (IHL 15: 60 − [`IPV4_MIN_HDR`]).
pub const IPV4_MAX_OPTIONS: usize = 40;

/// IP protocol number of ICMP (RFC 792; IANA).
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of TCP (RFC 9293 §3.1; IANA).
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP (RFC 768; IANA).
pub const IPPROTO_UDP: u8 = 17;

// --- UDP (RFC 768 Format) ------------------------------------------------------------------

/// Source Port.
pub const UDP_SRC: Range<usize> = 0..2;
/// Destination Port.
pub const UDP_DST: Range<usize> = 2..4;
/// Length: header and data, in bytes.
pub const UDP_LEN: Range<usize> = 4..6;
/// Checksum (0: none, allowed over IPv4).
pub const UDP_CHECKSUM: Range<usize> = 6..8;
/// UDP header length.
pub const UDP_HDR_LEN: usize = 8;

// --- IPv6 (RFC 8200 §3) ---------------------------------------------------------------------

/// EtherType of IPv6 (RFC 2464 §3).
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Version (top 4 bits), traffic class and flow label (RFC 8200 §3; §6: the flow label is
/// left as it came when forwarding).
pub const IPV6_VER_TC_FLOW: Range<usize> = 0..4;
/// Payload length: the bytes after this fixed header, extension headers included.
pub const IPV6_PAYLOAD_LEN: Range<usize> = 4..6;
/// Next header (an IP protocol number, or an extension header's).
pub const IPV6_NEXT_HEADER: usize = 6;
/// Hop limit.
pub const IPV6_HOP_LIMIT: usize = 7;
/// Source address.
pub const IPV6_SRC: Range<usize> = 8..24;
/// Destination address.
pub const IPV6_DST: Range<usize> = 24..40;
/// Fixed header length.
pub const IPV6_HDR_LEN: usize = 40;
/// Smallest MTU of an IPv6 link (RFC 8200 §5).
pub const IPV6_MIN_MTU: usize = 1280;
/// Next-header value of the Hop-by-Hop Options header (RFC 8200 §4.3).
pub const IPPROTO_HOPOPTS: u8 = 0;
/// Next-header value of ICMPv6 (RFC 4443).
pub const IPPROTO_ICMPV6: u8 = 58;

// --- ICMP (RFC 792) ------------------------------------------------------------------------

/// Type.
pub const ICMP_TYPE: usize = 0;
/// Code.
pub const ICMP_CODE: usize = 1;
/// Checksum (RFC 1071 over the whole ICMP message).
pub const ICMP_CHECKSUM: Range<usize> = 2..4;
/// The header's second word: unused (0) in Destination Unreachable and Time Exceeded, the
/// pointer in its top byte for Parameter Problem, identifier and sequence number in echo.
pub const ICMP_REST: Range<usize> = 4..8;
/// Pointer of a Parameter Problem message (the top byte of [`ICMP_REST`]).
pub const ICMP_PP_PTR: usize = 4;
/// Identifier of an Echo or Echo Reply message (the first half of [`ICMP_REST`]).
pub const ICMP_ECHO_IDENT: Range<usize> = 4..6;
/// Sequence Number of an Echo or Echo Reply message (the second half of [`ICMP_REST`]).
pub const ICMP_ECHO_SEQ: Range<usize> = 6..8;
/// ICMP header length (type, code, checksum, [`ICMP_REST`]); an error's quote of the offending
/// datagram starts here.
pub const ICMP_HDR_LEN: usize = 8;

// --- ARP for Ethernet/IPv4 (RFC 826 Packet format) -----------------------------------------

/// Hardware address space (`ar$hrd`): [`ARP_HTYPE_ETHERNET`].
pub const ARP_HTYPE: Range<usize> = 0..2;
/// Protocol address space (`ar$pro`): an EtherType, [`ETHERTYPE_IPV4`].
pub const ARP_PTYPE: Range<usize> = 2..4;
/// Hardware address length (`ar$hln`): 6.
pub const ARP_HLEN: usize = 4;
/// Protocol address length (`ar$pln`): 4.
pub const ARP_PLEN: usize = 5;
/// Opcode (`ar$op`): 1 request, 2 reply.
pub const ARP_OPER: Range<usize> = 6..8;
/// Sender hardware address (`ar$sha`).
pub const ARP_SHA: Range<usize> = 8..14;
/// Sender protocol address (`ar$spa`).
pub const ARP_SPA: Range<usize> = 14..18;
/// Target hardware address (`ar$tha`).
pub const ARP_THA: Range<usize> = 18..24;
/// Target protocol address (`ar$tpa`).
pub const ARP_TPA: Range<usize> = 24..28;
/// ARP payload length for Ethernet/IPv4.
pub const ARP_LEN: usize = 28;
/// Hardware type of Ethernet (RFC 826 `ares_hrd$Ethernet`).
pub const ARP_HTYPE_ETHERNET: u16 = 1;
/// Opcode: request (RFC 826 `ares_op$REQUEST`).
pub const ARP_REQUEST: u16 = 1;
/// Opcode: reply (RFC 826 `ares_op$REPLY`).
pub const ARP_REPLY: u16 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges tile their headers and agree with the lengths.
    #[test]
    fn layouts_are_contiguous() {
        assert_eq!(
            (ETH_DST.end, ETH_SRC.end, ETHERTYPE.end),
            (6, 12, ETH_HDR_LEN)
        );
        assert_eq!(ETH_SRC.start, ETH_DST.end);
        assert_eq!(ETHERTYPE.start, ETH_SRC.end);
        assert_eq!(IPV4_TOTAL_LEN.start, IPV4_TOS + 1);
        assert_eq!(IPV4_IDENT.start, IPV4_TOTAL_LEN.end);
        assert_eq!(IPV4_FLAGS_FRAG.start, IPV4_IDENT.end);
        assert_eq!(IPV4_TTL, IPV4_FLAGS_FRAG.end);
        assert_eq!(IPV4_CHECKSUM.start, IPV4_PROTOCOL + 1);
        assert_eq!(IPV4_SRC.start, IPV4_CHECKSUM.end);
        assert_eq!(IPV4_DST.start, IPV4_SRC.end);
        assert_eq!(IPV4_DST.end, IPV4_MIN_HDR);
        assert_eq!(IPV4_MIN_HDR + IPV4_MAX_OPTIONS, 15 * 4);
        assert_eq!(UDP_CHECKSUM.end, UDP_HDR_LEN);
        assert_eq!(ICMP_REST.end, ICMP_HDR_LEN);
        assert_eq!(
            (ICMP_ECHO_IDENT.start, ICMP_ECHO_SEQ.end),
            (ICMP_REST.start, ICMP_REST.end)
        );
        assert_eq!(ICMP_ECHO_SEQ.start, ICMP_ECHO_IDENT.end);
        assert_eq!(ARP_OPER.start, ARP_PLEN + 1);
        assert_eq!(ARP_SHA.start, ARP_OPER.end);
        assert_eq!(ARP_TPA.end, ARP_LEN);
    }

    /// The same offsets as smoltcp's wire types (an independent implementation).
    #[test]
    fn offsets_agree_with_smoltcp() {
        use smoltcp::wire::{EthernetFrame, Ipv4Packet, UdpPacket};
        let mut f = [0u8; ETH_HDR_LEN + IPV4_MIN_HDR + UDP_HDR_LEN];
        f[ETHERTYPE].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        f[ETH_SRC.start] = 0xaa;
        let ip = ETH_HDR_LEN;
        f[ip + IPV4_VER_IHL] = 0x45;
        f[ip + IPV4_TTL] = 7;
        f[ip + IPV4_PROTOCOL] = IPPROTO_UDP;
        f[ip + IPV4_SRC.start] = 10;
        f[ip + IPV4_DST.end - 1] = 9;
        f[ip + IPV4_TOTAL_LEN.end - 1] = 28;
        let udp = ip + IPV4_MIN_HDR;
        f[udp + UDP_DST.end - 1] = 53;
        f[udp + UDP_LEN.end - 1] = 8;
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), smoltcp::wire::EthernetProtocol::Arp);
        assert_eq!(e.src_addr().0[0], 0xaa);
        let p = Ipv4Packet::new_checked(e.payload()).unwrap();
        assert_eq!((p.hop_limit(), p.total_len()), (7, 28));
        assert_eq!(p.next_header(), smoltcp::wire::IpProtocol::Udp);
        assert_eq!(p.src_addr().octets()[0], 10);
        assert_eq!(p.dst_addr().octets()[3], 9);
        let u = UdpPacket::new_checked(p.payload()).unwrap();
        assert_eq!((u.dst_port(), u.len()), (53, 8));
    }
}
