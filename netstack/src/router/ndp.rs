//! Neighbour Discovery messages (RFC 4861) on raw bytes: the Neighbor Solicitation and
//! Advertisement a router needs to resolve next hops and to answer for its own addresses,
//! validated as RFC 4861 §7.1 requires, and built for sending; the solicited-node multicast
//! address (RFC 4291 §2.7.1) and its Ethernet MAC (RFC 2464 §7).
//!
//! Router Solicitations, Router Advertisements and Redirects received are recognised so that
//! they are counted and ignored (a router does not take its configuration from them).

use super::icmp6::checksum6;
use super::ipv6::{classify, AddrClass6, Ipv6Hdr};
use crate::wire::{
    IPPROTO_ICMPV6, IPV6_DST, IPV6_HDR_LEN, IPV6_HOP_LIMIT, IPV6_NEXT_HEADER, IPV6_PAYLOAD_LEN,
    IPV6_SRC, IPV6_VER_TC_FLOW,
};
use crate::MacAddr;

/// ICMPv6 type Router Solicitation.
pub const ND_ROUTER_SOLICIT: u8 = 133;
/// ICMPv6 type Router Advertisement.
pub const ND_ROUTER_ADVERT: u8 = 134;
/// ICMPv6 type Neighbor Solicitation.
pub const ND_NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type Neighbor Advertisement.
pub const ND_NEIGHBOR_ADVERT: u8 = 136;
/// ICMPv6 type Redirect.
pub const ND_REDIRECT: u8 = 137;

/// The all-nodes multicast address `ff02::1` (RFC 4291 §2.7.1): unsolicited advertisements
/// and a defended address's answer go to it.
pub const ALL_NODES: u128 = 0xff02 << 112 | 1;

/// Whether `frame` (Ethernet) is a Neighbor Advertisement: IPv6 whose next header is ICMPv6
/// (no extension header), type 136 (RFC 4861 §4.4). Nothing is validated: the caller's
/// parser does.
pub fn is_advertisement(frame: &[u8]) -> bool {
    use crate::wire::{ETHERTYPE_IPV6, ETH_HDR_LEN, IPPROTO_ICMPV6, IPV6_HDR_LEN};
    frame.get(12..14) == Some(&ETHERTYPE_IPV6.to_be_bytes()[..])
        && frame.get(ETH_HDR_LEN + 6) == Some(&IPPROTO_ICMPV6)
        && frame.get(ETH_HDR_LEN + IPV6_HDR_LEN) == Some(&ND_NEIGHBOR_ADVERT)
}
/// The hop limit every ND message is sent with and must arrive with (RFC 4861 §7.1: proof it
/// was not forwarded).
pub const ND_HOP_LIMIT: u8 = 255;
/// Option type Source Link-Layer Address.
pub const OPT_SLLA: u8 = 1;
/// Option type Target Link-Layer Address.
pub const OPT_TLLA: u8 = 2;
/// Length of an NS or NA without options (ICMPv6 header, reserved/flags word, target).
pub const ND_MIN_LEN: usize = 24;
/// NA flag Router (RFC 4861 §4.4).
pub const NA_ROUTER: u8 = 0x80;
/// NA flag Solicited.
pub const NA_SOLICITED: u8 = 0x40;
/// NA flag Override.
pub const NA_OVERRIDE: u8 = 0x20;

/// Why an ND message was refused (each counted; none is answered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdError {
    /// Hop limit not 255 (RFC 4861 §7.1.1/§7.1.2).
    HopLimit,
    /// ICMPv6 checksum wrong.
    Checksum,
    /// Code not 0.
    Code,
    /// Shorter than 24 bytes, or the datagram holds less than its payload length says.
    Length,
    /// The target is a multicast address.
    MulticastTarget,
    /// An option of length 0, or one running past the message.
    BadOption,
    /// An NS from `::` (duplicate address detection) not to a solicited-node address, or
    /// carrying a Source Link-Layer Address option.
    BadDad,
    /// An NA to a multicast destination with the Solicited flag set.
    SolicitedToMulticast,
    /// Not an NS, NA, RS, RA or Redirect.
    NotNd,
}

/// A validated ND message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdMessage {
    /// Neighbor Solicitation.
    Solicit {
        /// The address asked for.
        target: u128,
        /// The sender's link-layer address, from its option (none in DAD).
        source_mac: Option<MacAddr>,
        /// Sent from `::`: duplicate address detection (RFC 4862 §5.4.3).
        dad: bool,
    },
    /// Neighbor Advertisement.
    Advert {
        /// The address advertised.
        target: u128,
        /// Its link-layer address, from the Target Link-Layer Address option.
        target_mac: Option<MacAddr>,
        /// Router, Solicited and Override flags ([`NA_ROUTER`] …).
        flags: u8,
    },
    /// A Router Solicitation, Router Advertisement or Redirect: counted and ignored.
    Ignored(u8),
}

/// Validates the ICMPv6 message `msg` (the datagram's payload: `h.payload_len` bytes, no
/// extension headers) of datagram `h` as RFC 4861 §7.1 requires of NS and NA (hop limit, checksum,
/// code, length, multicast target, option lengths, the DAD and Solicited rules), and reads it.
///
/// # Errors
/// The first rule broken ([`NdError`]).
pub fn parse(h: &Ipv6Hdr, msg: &[u8]) -> Result<NdMessage, NdError> {
    let ty = *msg.first().ok_or(NdError::Length)?;
    if !(ND_ROUTER_SOLICIT..=ND_REDIRECT).contains(&ty) {
        return Err(NdError::NotNd);
    }
    if h.hop_limit != ND_HOP_LIMIT {
        return Err(NdError::HopLimit);
    }
    if msg.len() < 4 || msg.len() != usize::from(h.payload_len) {
        return Err(NdError::Length);
    }
    if checksum6(h.src, h.dst, msg) != 0 {
        return Err(NdError::Checksum);
    }
    if msg[1] != 0 {
        return Err(NdError::Code);
    }
    if !(ty == ND_NEIGHBOR_SOLICIT || ty == ND_NEIGHBOR_ADVERT) {
        return Ok(NdMessage::Ignored(ty));
    }
    if msg.len() < ND_MIN_LEN {
        return Err(NdError::Length);
    }
    let mut t = [0u8; 16];
    t.copy_from_slice(&msg[8..24]);
    let target = u128::from_be_bytes(t);
    if matches!(classify(target), AddrClass6::Multicast { .. }) {
        return Err(NdError::MulticastTarget);
    }
    let want = if ty == ND_NEIGHBOR_SOLICIT {
        OPT_SLLA
    } else {
        OPT_TLLA
    };
    let mac = link_layer_option(&msg[ND_MIN_LEN..], want)?;
    let dst_mcast = matches!(classify(h.dst), AddrClass6::Multicast { .. });
    if ty == ND_NEIGHBOR_SOLICIT {
        let dad = h.src == 0;
        if dad && (h.dst != solicited_node(target) || mac.is_some()) {
            return Err(NdError::BadDad);
        }
        Ok(NdMessage::Solicit {
            target,
            source_mac: mac,
            dad,
        })
    } else {
        let flags = msg[4] & (NA_ROUTER | NA_SOLICITED | NA_OVERRIDE);
        if dst_mcast && flags & NA_SOLICITED != 0 {
            return Err(NdError::SolicitedToMulticast);
        }
        Ok(NdMessage::Advert {
            target,
            target_mac: mac,
            flags,
        })
    }
}

/// Walks the options (RFC 4861 §4.6: type, length in 8-byte units, never 0) and returns the
/// link-layer address of the first option of type `want` that is 8 bytes (Ethernet: RFC 2464
/// §6); others are skipped, as §7.1 asks of unknown options.
fn link_layer_option(mut opts: &[u8], want: u8) -> Result<Option<MacAddr>, NdError> {
    let mut found = None;
    while !opts.is_empty() {
        let len = usize::from(*opts.get(1).ok_or(NdError::BadOption)?) * 8;
        if len == 0 || len > opts.len() {
            return Err(NdError::BadOption);
        }
        if opts[0] == want && len == 8 && found.is_none() {
            let mut m = [0u8; 6];
            m.copy_from_slice(&opts[2..8]);
            found = Some(MacAddr(m));
        }
        opts = &opts[len..];
    }
    Ok(found)
}

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1: `ff02::1:ff00:0/104` and
/// the low 24 bits of `a`).
pub fn solicited_node(a: u128) -> u128 {
    (0xff02u128 << 112) | (0x1_ff00_0000) | (a & 0xff_ffff)
}

/// The Ethernet destination of IPv6 multicast address `a` (RFC 2464 §7: `33:33` and its low
/// 32 bits).
pub fn multicast_mac(a: u128) -> MacAddr {
    let b = (a as u32).to_be_bytes();
    MacAddr([0x33, 0x33, b[0], b[1], b[2], b[3]])
}

/// The IPv6 header of an ND message of `len` bytes from `src` to `dst` (ICMPv6, hop limit
/// 255) at the start of `out`; the message's bytes after it, or `None` when `out` is shorter.
fn nd_header(out: &mut [u8], len: usize, src: u128, dst: u128) -> Option<&mut [u8]> {
    let out = out.get_mut(..IPV6_HDR_LEN + len)?;
    out[IPV6_VER_TC_FLOW].copy_from_slice(&[0x60, 0, 0, 0]);
    out[IPV6_PAYLOAD_LEN].copy_from_slice(&(len as u16).to_be_bytes());
    out[IPV6_NEXT_HEADER] = IPPROTO_ICMPV6;
    out[IPV6_HOP_LIMIT] = ND_HOP_LIMIT;
    out[IPV6_SRC].copy_from_slice(&src.to_be_bytes());
    out[IPV6_DST].copy_from_slice(&dst.to_be_bytes());
    Some(&mut out[IPV6_HDR_LEN..])
}

/// Writes into `out` an ND message datagram (IPv6 header + NS or NA + one link-layer option)
/// from `src` to `dst`: an NS for `target` with `src_mac` as Source Link-Layer Address, or, with
/// `advert` = `Some(flags)`, an NA for `target` with `src_mac` as Target Link-Layer Address.
/// Returns its length (72 bytes), or `None` when `out` is shorter.
pub fn build(
    out: &mut [u8],
    src: u128,
    dst: u128,
    target: u128,
    src_mac: MacAddr,
    advert: Option<u8>,
) -> Option<usize> {
    const LEN: usize = ND_MIN_LEN + 8;
    let m = nd_header(out, LEN, src, dst)?;
    let (ty, flags, opt) = match advert {
        Some(f) => (ND_NEIGHBOR_ADVERT, f, OPT_TLLA),
        None => (ND_NEIGHBOR_SOLICIT, 0, OPT_SLLA),
    };
    m[..8].copy_from_slice(&[ty, 0, 0, 0, flags, 0, 0, 0]);
    m[8..24].copy_from_slice(&target.to_be_bytes());
    m[24] = opt;
    m[25] = 1;
    m[26..32].copy_from_slice(&src_mac.0);
    let sum = checksum6(src, dst, m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    Some(IPV6_HDR_LEN + LEN)
}

/// What a Router Advertisement says of a port (RFC 4861 §4.2, §4.6): its link's prefix, MTU
/// and how long hosts may use the router as their default.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RaInfo {
    /// The link's prefix (the port's connected prefix), advertised on-link, and for
    /// stateless autoconfiguration when it is a /64 (RFC 4862 §5.5.3, RFC 7421).
    pub prefix: u128,
    /// Its length.
    pub len: u8,
    /// The link MTU (bytes).
    pub mtu: u16,
    /// Router Lifetime (s): 3 × the maximum interval (RFC 4861 §6.2.1 `AdvDefaultLifetime`).
    pub lifetime_s: u16,
}

/// The Valid and Preferred Lifetimes of the advertised prefix (s): RFC 4861 §6.2.1's
/// defaults, 30 days and 7 days.
pub const RA_PREFIX_LIFETIMES_S: (u32, u32) = (2_592_000, 604_800);

/// Bytes of the Router Advertisement [`build_ra`] writes after the IPv6 header: the message
/// (16), Source Link-Layer Address (8), MTU (8) and Prefix Information (32) options.
pub const RA_LEN: usize = 16 + 8 + 8 + 32;

/// Writes into `out` a Router Advertisement datagram (RFC 4861 §4.2) from `src` (the port's
/// link-local address, §6.1.2) to all-nodes, hop limit 255: Cur Hop Limit 64, no M or O flag,
/// `info`'s lifetime, no reachable or retransmit time (unspecified), then `mac` as Source
/// Link-Layer Address, `info`'s MTU and its prefix (L, and A for a /64). Returns its length,
/// or `None` when `out` is shorter.
pub fn build_ra(out: &mut [u8], src: u128, mac: MacAddr, info: &RaInfo) -> Option<usize> {
    let m = nd_header(out, RA_LEN, src, ALL_NODES)?;
    m.fill(0);
    m[0] = ND_ROUTER_ADVERT;
    m[4] = 64;
    m[6..8].copy_from_slice(&info.lifetime_s.to_be_bytes());
    m[16..18].copy_from_slice(&[OPT_SLLA, 1]);
    m[18..24].copy_from_slice(&mac.0);
    m[24..26].copy_from_slice(&[OPT_MTU, 1]);
    m[28..32].copy_from_slice(&u32::from(info.mtu).to_be_bytes());
    let (valid, preferred) = RA_PREFIX_LIFETIMES_S;
    let autonomous = if info.len == 64 { PIO_AUTONOMOUS } else { 0 };
    m[32..36].copy_from_slice(&[OPT_PREFIX, 4, info.len, PIO_ON_LINK | autonomous]);
    m[36..40].copy_from_slice(&valid.to_be_bytes());
    m[40..44].copy_from_slice(&preferred.to_be_bytes());
    m[48..64].copy_from_slice(&info.prefix.to_be_bytes());
    let sum = checksum6(src, ALL_NODES, m);
    m[2..4].copy_from_slice(&sum.to_be_bytes());
    Some(IPV6_HDR_LEN + RA_LEN)
}

/// ND option type Prefix Information (RFC 4861 §4.6.2).
pub const OPT_PREFIX: u8 = 3;
/// ND option type MTU (RFC 4861 §4.6.4).
pub const OPT_MTU: u8 = 5;
/// Prefix Information flag L: the prefix is on-link.
pub const PIO_ON_LINK: u8 = 0x80;
/// Prefix Information flag A: hosts may form addresses in it (RFC 4862).
pub const PIO_AUTONOMOUS: u8 = 0x40;

#[cfg(test)]
mod tests;
