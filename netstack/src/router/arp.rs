//! ARP for IPv4 over Ethernet (RFC 826): parsing, replies built in place, requests.

use super::ipv4::{be16, be32};
use crate::wire::{
    ARP_HLEN, ARP_HTYPE, ARP_HTYPE_ETHERNET, ARP_OPER, ARP_PLEN, ARP_PTYPE, ARP_SHA, ARP_SPA,
    ARP_THA, ARP_TPA, ETHERTYPE, ETH_DST, ETH_HDR_LEN, ETH_SRC,
};
pub use crate::wire::{ARP_LEN, ARP_REPLY, ARP_REQUEST, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_ZLEN};
use crate::MacAddr;

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
        || be16(p, ARP_HTYPE.start) != ARP_HTYPE_ETHERNET
        || be16(p, ARP_PTYPE.start) != ETHERTYPE_IPV4
        || p[ARP_HLEN] != 6
        || p[ARP_PLEN] != 4
    {
        return None;
    }
    let op = be16(p, ARP_OPER.start);
    if op != ARP_REQUEST && op != ARP_REPLY {
        return None;
    }
    let mac = |o: usize| MacAddr([p[o], p[o + 1], p[o + 2], p[o + 3], p[o + 4], p[o + 5]]);
    Some(Arp {
        op,
        sha: mac(ARP_SHA.start),
        spa: be32(p, ARP_SPA.start),
        tha: mac(ARP_THA.start),
        tpa: be32(p, ARP_TPA.start),
    })
}

/// Write an Ethernet + ARP frame into `out` (at least 14 + 28 = 42 bytes), padded with zeros up to
/// [`ETH_ZLEN`] as far as `out` allows. Returns the length.
pub fn write(out: &mut [u8], eth_dst: MacAddr, eth_src: MacAddr, a: &Arp) -> usize {
    out[ETH_DST].copy_from_slice(&eth_dst.0);
    out[ETH_SRC].copy_from_slice(&eth_src.0);
    out[ETHERTYPE].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let p = &mut out[ETH_HDR_LEN..ETH_HDR_LEN + ARP_LEN];
    p[ARP_HTYPE].copy_from_slice(&ARP_HTYPE_ETHERNET.to_be_bytes());
    p[ARP_PTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    p[ARP_HLEN] = 6;
    p[ARP_PLEN] = 4;
    p[ARP_OPER].copy_from_slice(&a.op.to_be_bytes());
    p[ARP_SHA].copy_from_slice(&a.sha.0);
    p[ARP_SPA].copy_from_slice(&a.spa.to_be_bytes());
    p[ARP_THA].copy_from_slice(&a.tha.0);
    p[ARP_TPA].copy_from_slice(&a.tpa.to_be_bytes());
    let len = out.len().min(ETH_ZLEN);
    out[ETH_HDR_LEN + ARP_LEN..len].fill(0);
    len
}
