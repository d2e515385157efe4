//! ICMPv6 error messages (RFC 4443): when one may be sent (§2.4 e) and how it is built (§2.4 c:
//! as much of the invoking datagram as fits in the minimum MTU; §2.3: the checksum over the
//! pseudo-header of RFC 8200 §8.1). The rate limit is the IPv4 one's token bucket
//! ([`super::icmp::TokenBucket`]), applied by the caller.

use super::ipv4::ones_sum;
use super::ipv6::{classify, AddrClass6, Icmp6Error, Ipv6Hdr};
use crate::wire::{
    IPPROTO_HOPOPTS, IPPROTO_ICMPV6, IPV6_DST, IPV6_HDR_LEN, IPV6_HOP_LIMIT, IPV6_MIN_MTU,
    IPV6_NEXT_HEADER, IPV6_PAYLOAD_LEN, IPV6_SRC, IPV6_VER_TC_FLOW,
};

/// ICMPv6 header length (type, code, checksum, the 4-byte parameter); the quote follows.
pub const ICMP6_HDR_LEN: usize = 8;
/// Hop limit of the errors sent (Linux's `net.ipv6.conf.all.hop_limit` default).
pub const ICMP6_HOP_LIMIT: u8 = 64;
/// ICMPv6 types below this are errors (RFC 4443 §2.1).
pub const ICMP6_INFO_MIN: u8 = 128;
/// ICMPv6 type Redirect (RFC 4861 §4.5).
pub const ICMP6_REDIRECT: u8 = 137;
/// Largest error datagram: the IPv6 minimum MTU (RFC 4443 §2.4 c).
pub const ICMP6_ERROR_MAX: usize = IPV6_MIN_MTU;

/// Next-header values of the extension headers walked to find the upper layer (RFC 8200 §4:
/// Routing 43, Fragment 44, Destination Options 60, and Hop-by-Hop).
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DEST_OPTS: u8 = 60;

/// The upper-layer protocol of `ip` (the head of datagram `h`) and its offset, walking the
/// extension headers; `None` when a header lies past the head, or in a fragment other than
/// the first (its upper-layer header is elsewhere).
fn upper_layer(ip: &[u8], h: &Ipv6Hdr) -> Option<(u8, usize)> {
    let (mut next, mut off) = (h.next_header, IPV6_HDR_LEN);
    for _ in 0..8 {
        match next {
            IPPROTO_HOPOPTS | ROUTING | DEST_OPTS => {
                let hdr = ip.get(off..off + 2)?;
                next = hdr[0];
                off += (usize::from(hdr[1]) + 1) * 8;
            }
            FRAGMENT => {
                let hdr = ip.get(off..off + 8)?;
                if u16::from_be_bytes([hdr[2], hdr[3]]) & 0xfff8 != 0 {
                    return None;
                }
                next = hdr[0];
                off += 8;
            }
            p => return Some((p, off)),
        }
    }
    None
}

/// Whether RFC 4443 §2.4 (e) lets the router send `e` about datagram `h` (its head `ip`),
/// received in a link-layer multicast or broadcast frame when `l2_multicast`: never when the
/// source does not name one node (`::`, multicast: e.6), never about an ICMPv6 error or a
/// Redirect (e.1, e.2; also when that cannot be told because the ICMPv6 type is past the
/// head), and about a multicast destination or an L2 multicast frame only for Packet Too Big
/// and Parameter Problem code 2 (e.3–e.5).
pub fn may_answer(ip: &[u8], h: &Ipv6Hdr, l2_multicast: bool, e: Icmp6Error) -> bool {
    if matches!(
        classify(h.src),
        AddrClass6::Unspecified | AddrClass6::Multicast { .. } | AddrClass6::Loopback
    ) {
        return false;
    }
    let mcast = l2_multicast || matches!(classify(h.dst), AddrClass6::Multicast { .. });
    if mcast && !e.allowed_for_multicast() {
        return false;
    }
    match upper_layer(ip, h) {
        Some((IPPROTO_ICMPV6, off)) => {
            matches!(ip.get(off), Some(&t) if t >= ICMP6_INFO_MIN && t != ICMP6_REDIRECT)
        }
        _ => true,
    }
}

/// Writes into `out` the IPv6 datagram of error `e` from `src` (the router's address on the
/// port the datagram came in by) to the source of `h`, quoting the head `ip` up to the
/// datagram's length and [`ICMP6_ERROR_MAX`] in all. Returns its length, or `None` when `out`
/// is shorter than it.
pub fn build_error(
    out: &mut [u8],
    src: u128,
    ip: &[u8],
    h: &Ipv6Hdr,
    e: Icmp6Error,
) -> Option<usize> {
    let quote = ip
        .len()
        .min(h.len())
        .min(ICMP6_ERROR_MAX - IPV6_HDR_LEN - ICMP6_HDR_LEN);
    let total = IPV6_HDR_LEN + ICMP6_HDR_LEN + quote;
    let out = out.get_mut(..total)?;
    let payload = ICMP6_HDR_LEN + quote;
    out[IPV6_VER_TC_FLOW].copy_from_slice(&[0x60, 0, 0, 0]);
    out[IPV6_PAYLOAD_LEN].copy_from_slice(&(payload as u16).to_be_bytes());
    out[IPV6_NEXT_HEADER] = IPPROTO_ICMPV6;
    out[IPV6_HOP_LIMIT] = ICMP6_HOP_LIMIT;
    out[IPV6_SRC].copy_from_slice(&src.to_be_bytes());
    out[IPV6_DST].copy_from_slice(&h.src.to_be_bytes());
    let (ty, code) = e.type_code();
    let param = match e {
        Icmp6Error::PacketTooBig { mtu } => mtu,
        Icmp6Error::ParamProblem { pointer, .. } => pointer,
        _ => 0,
    };
    let m = &mut out[IPV6_HDR_LEN..];
    m[..ICMP6_HDR_LEN].copy_from_slice(&[ty, code, 0, 0, 0, 0, 0, 0]);
    m[4..8].copy_from_slice(&param.to_be_bytes());
    m[ICMP6_HDR_LEN..].copy_from_slice(&ip[..quote]);
    let sum = checksum6(src, h.src, &out[IPV6_HDR_LEN..]);
    out[IPV6_HDR_LEN + 2..IPV6_HDR_LEN + 4].copy_from_slice(&sum.to_be_bytes());
    Some(total)
}

/// The ICMPv6 checksum of `msg` (its checksum field zero) from `src` to `dst`: the complement
/// of the one's-complement sum over the pseudo-header (RFC 8200 §8.1: addresses, upper-layer
/// length, next header 58) and the message.
pub fn checksum6(src: u128, dst: u128, msg: &[u8]) -> u16 {
    upper_checksum6(src, dst, IPPROTO_ICMPV6, msg)
}

/// The checksum of upper-layer message `msg` (its checksum field zero) of protocol `next`
/// (17 UDP, 58 ICMPv6) from `src` to `dst`, over RFC 8200 §8.1's pseudo-header and the message.
pub fn upper_checksum6(src: u128, dst: u128, next: u8, msg: &[u8]) -> u16 {
    let mut pseudo = [0u8; 40];
    pseudo[..16].copy_from_slice(&src.to_be_bytes());
    pseudo[16..32].copy_from_slice(&dst.to_be_bytes());
    pseudo[32..36].copy_from_slice(&(msg.len() as u32).to_be_bytes());
    pseudo[39] = next;
    let mut s = u32::from(ones_sum(&pseudo)) + u32::from(ones_sum(msg));
    s = (s & 0xffff) + (s >> 16);
    !(s as u16)
}
