//! ARP for IPv4 over Ethernet (RFC 826): parsing, replies built in place, requests.

use super::ipv4::{be16, be32};
use crate::MacAddr;

/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// ARP payload length for Ethernet/IPv4.
pub const ARP_LEN: usize = 28;
/// Minimum Ethernet frame without FCS (IEEE 802.3 `ETH_ZLEN`); ARP frames we build are padded
/// to it.
pub const ETH_ZLEN: usize = 60;
/// Opcode: request.
pub const ARP_REQUEST: u16 = 1;
/// Opcode: reply.
pub const ARP_REPLY: u16 = 2;

/// An ARP packet for Ethernet/IPv4.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Arp {
    /// Opcode (1 request, 2 reply).
    pub op: u16,
    /// Sender hardware address.
    pub sha: MacAddr,
    /// Sender protocol address (host order).
    pub spa: u32,
    /// Target hardware address.
    pub tha: MacAddr,
    /// Target protocol address (host order).
    pub tpa: u32,
}

/// Parse the ARP payload `p` (after the Ethernet header). `None` unless it is Ethernet (1) /
/// IPv4 (0x0800) with lengths 6/4 and opcode request or reply.
pub fn parse(p: &[u8]) -> Option<Arp> {
    if p.len() < ARP_LEN
        || be16(p, 0) != 1
        || be16(p, 2) != ETHERTYPE_IPV4
        || p[4] != 6
        || p[5] != 4
    {
        return None;
    }
    let op = be16(p, 6);
    if op != ARP_REQUEST && op != ARP_REPLY {
        return None;
    }
    let mac = |o: usize| MacAddr([p[o], p[o + 1], p[o + 2], p[o + 3], p[o + 4], p[o + 5]]);
    Some(Arp {
        op,
        sha: mac(8),
        spa: be32(p, 14),
        tha: mac(18),
        tpa: be32(p, 24),
    })
}

/// Write an Ethernet + ARP frame into `out` (at least 42 bytes), padded with zeros up to
/// [`ETH_ZLEN`] as far as `out` allows. Returns the length.
pub fn write(out: &mut [u8], eth_dst: MacAddr, eth_src: MacAddr, a: &Arp) -> usize {
    out[0..6].copy_from_slice(&eth_dst.0);
    out[6..12].copy_from_slice(&eth_src.0);
    out[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let p = &mut out[14..14 + ARP_LEN];
    p[0..2].copy_from_slice(&1u16.to_be_bytes());
    p[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    p[4] = 6;
    p[5] = 4;
    p[6..8].copy_from_slice(&a.op.to_be_bytes());
    p[8..14].copy_from_slice(&a.sha.0);
    p[14..18].copy_from_slice(&a.spa.to_be_bytes());
    p[18..24].copy_from_slice(&a.tha.0);
    p[24..28].copy_from_slice(&a.tpa.to_be_bytes());
    let len = out.len().min(ETH_ZLEN);
    out[14 + ARP_LEN..len].fill(0);
    len
}
