//! The simulated 82576's receive-side scaling, as QEMU's model does it (hw/net/igb_core.c,
//! `igb_rss_get_hash_type`, `igb_rss_calc_hash`, `igb_receive_assign`; hw/net/net_rx_pkt.c for
//! the hash input): which fields of a frame `MRQC` selects, their Toeplitz hash keyed by
//! `RSSRK`, the RSS type and packet type the advanced write-back carries.
//!
//! The hash types, first match wins (QEMU's order; `MRQC` bits as QEMU reads them,
//! hw/net/e1000x_regs.h `E1000_MRQC_EN_*` and hw/net/igb_regs.h `E1000_MRQC_RSS_FIELD_*`):
//!
//! | frame | `MRQC` bit | RSS type | hashed |
//! |---|---|---|---|
//! | IPv4, TCP | 16 | 1 | addresses, ports |
//! | IPv4, UDP | 22 | 7 | addresses, ports |
//! | IPv4 | 17 | 2 | addresses |
//! | IPv6, TCP | 18 (QEMU's `TcpIPv6Ex`; the datasheet's `TcpIPv6` bit 21 is not read) | 3 | addresses, ports |
//! | IPv6, UDP | 23 | 8 | addresses, ports |
//! | IPv6 | 19 | 4 | addresses |
//! | IPv6 | 20 | 5 | addresses |
//! | anything else | | 0 | nothing: hash 0, queue 0 |
//!
//! The RSS type values are the 82576 datasheet's (§7.1.5.2, Linux's `E1000_RXDADV_RSSTYPE_*`
//! in e1000_82575.h; QEMU's `E1000_MRQ_RSS_TYPE_*`). The hash input is the fields in network
//! byte order: source address, destination address, source port, destination port (Microsoft,
//! *Verifying the RSS Hash Calculation*). What the frame parser takes (QEMU's `eth_get_protocols`
//! in net/eth.c): up to two VLAN tags (`0x8100`, `0x88A8`) after the MAC addresses; IPv4 with a
//! whole header (`IHL` ≥ 5) is L3, and L4 too when it is not a fragment (`MF` clear, offset 0)
//! and the whole TCP (20 bytes) or UDP (8 bytes) header follows; IPv6 with its 40-byte header,
//! L4 when the next header is TCP or UDP and the whole header follows. Simplified against QEMU:
//! an IPv6 frame with extension headers is hashed over its addresses only (QEMU walks them to
//! the L4 header, and hashes a home-address option's address for the `Ex` types), and the IPv4
//! header's own length and checksum are not checked.

/// `MRQC` bit: hash TCP over IPv4 (addresses and ports; datasheet §8.10, QEMU's
/// `E1000_MRQC_EN_TCPIPV4`).
pub const MRQC_TCP_IPV4: u32 = 1 << 16;
/// `MRQC` bit: hash IPv4 (addresses).
pub const MRQC_IPV4: u32 = 1 << 17;
/// `MRQC` bit: hash TCP over IPv6 (addresses and ports) as QEMU reads it (`TcpIPv6Ex`).
pub const MRQC_TCP_IPV6_QEMU: u32 = 1 << 18;
/// `MRQC` bit: hash IPv6 with extension headers (addresses).
pub const MRQC_IPV6_EX: u32 = 1 << 19;
/// `MRQC` bit: hash IPv6 (addresses).
pub const MRQC_IPV6: u32 = 1 << 20;
/// `MRQC` bit: hash UDP over IPv4 (addresses and ports).
pub const MRQC_UDP_IPV4: u32 = 1 << 22;
/// `MRQC` bit: hash UDP over IPv6 (addresses and ports).
pub const MRQC_UDP_IPV6: u32 = 1 << 23;

/// RSS type (advanced RX write-back, bits 3:0 of the first quadword; datasheet §7.1.5.2): no
/// hash computed.
pub const RSS_TYPE_NONE: u8 = 0;
/// RSS type: TCP over IPv4.
pub const RSS_TYPE_TCP_IPV4: u8 = 1;
/// RSS type: IPv4.
pub const RSS_TYPE_IPV4: u8 = 2;
/// RSS type: TCP over IPv6.
pub const RSS_TYPE_TCP_IPV6: u8 = 3;
/// RSS type: IPv6 with extension headers.
pub const RSS_TYPE_IPV6_EX: u8 = 4;
/// RSS type: IPv6.
pub const RSS_TYPE_IPV6: u8 = 5;
/// RSS type: UDP over IPv4.
pub const RSS_TYPE_UDP_IPV4: u8 = 7;
/// RSS type: UDP over IPv6.
pub const RSS_TYPE_UDP_IPV6: u8 = 8;

/// Packet type bits of the advanced RX write-back (bits 16:4 of the first quadword; datasheet
/// §7.1.5.2, Linux's `E1000_RXDADV_PKTTYPE_*`, QEMU's `E1000_ADVRXD_PKT_*`): IPv4.
pub const PKT_IPV4: u16 = 0x010;
/// Packet type: IPv6.
pub const PKT_IPV6: u16 = 0x040;
/// Packet type: TCP.
pub const PKT_TCP: u16 = 0x100;
/// Packet type: UDP.
pub const PKT_UDP: u16 = 0x200;

/// What RSS makes of one frame: the RSS type, the hash (0 with [`RSS_TYPE_NONE`]) and the packet
/// type bits, as the EOP descriptor's write-back carries them.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct RssInfo {
    /// RSS type ([`RSS_TYPE_NONE`], [`RSS_TYPE_TCP_IPV4`], …).
    pub rss_type: u8,
    /// The Toeplitz hash of the fields the type names.
    pub hash: u32,
    /// Packet type bits ([`PKT_IPV4`] | [`PKT_TCP`], …; already in place, bits 16:4).
    pub pkt_type: u16,
}

impl RssInfo {
    /// The advanced write-back's first quadword: RSS type 3:0, packet type 16:4, header length
    /// and `SPH` 0, RSS hash 63:32 (datasheet §7.1.5.2; Linux's `union e1000_adv_rx_desc`,
    /// `wb.lower.lo_dword.hs_rss.pkt_info` and `wb.lower.hi_dword.rss`).
    pub fn first_quadword(&self) -> u64 {
        u64::from(self.rss_type) | u64::from(self.pkt_type) | u64::from(self.hash) << 32
    }
}

/// The Toeplitz hash of `input` under `key` (Microsoft, *RSS hashing functions*): for each input
/// bit set, most significant first, XOR in the 32 key bits that start at that bit's position
/// (key bits past the key's end are 0).
pub fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let bit = |i: usize| {
        key.get(i / 8)
            .map_or(0u32, |&b| u32::from(b >> (7 - i % 8) & 1))
    };
    let mut hash = 0u32;
    for (n, &b) in input.iter().enumerate() {
        for k in 0..8 {
            if b & 0x80 >> k != 0 {
                let at = 8 * n + k;
                hash ^= (0..32).fold(0u32, |w, j| w << 1 | bit(at + j));
            }
        }
    }
    hash
}

/// L3 and L4 of a frame, as far as RSS looks.
enum Parsed<'a> {
    /// Neither IPv4 nor IPv6.
    Other,
    /// IPv4 (`src ++ dst`, 8 bytes) with its L4 protocol (6, 17) and ports when hashable.
    V4(&'a [u8], Option<(u8, &'a [u8])>),
    /// IPv6 (`src ++ dst`, 32 bytes) with its L4 protocol and ports when hashable.
    V6(&'a [u8], Option<(u8, &'a [u8])>),
}

/// TCP or UDP with its whole header at `l4` of `f`: the protocol and the 4 port bytes.
fn l4(f: &[u8], proto: u8, l4: usize) -> Option<(u8, &[u8])> {
    let need = match proto {
        6 => 20,
        17 => 8,
        _ => return None,
    };
    (f.len() >= l4 + need).then(|| (proto, &f[l4..l4 + 4]))
}

/// What RSS sees of frame `f` (see the module docs).
fn parse(f: &[u8]) -> Parsed<'_> {
    let mut at = 12;
    let ty = |at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let mut et = ty(at);
    for _ in 0..2 {
        if matches!(et, Some(0x8100 | 0x88A8)) {
            at += 4;
            et = ty(at);
        }
    }
    let l3 = at + 2;
    match et {
        Some(0x0800) if f.len() >= l3 + 20 && f[l3] >> 4 == 4 => {
            let ihl = usize::from(f[l3] & 0x0F) * 4;
            if ihl < 20 || f.len() < l3 + ihl {
                return Parsed::Other;
            }
            let frag = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3FFF != 0;
            let ports = if frag {
                None
            } else {
                l4(f, f[l3 + 9], l3 + ihl)
            };
            Parsed::V4(&f[l3 + 12..l3 + 20], ports)
        }
        Some(0x86DD) if f.len() >= l3 + 40 && f[l3] >> 4 == 6 => {
            Parsed::V6(&f[l3 + 8..l3 + 40], l4(f, f[l3 + 6], l3 + 40))
        }
        _ => Parsed::Other,
    }
}

/// The RSS type, hash and packet type of frame `f` under `mrqc`'s field selections and `key`
/// (QEMU's `igb_rss_parse_packet`; the caller has checked that RSS is on).
pub fn classify(f: &[u8], mrqc: u32, key: &[u8; 40]) -> RssInfo {
    let mut input = [0u8; 36];
    let (pkt_l3, addrs, ports, types) = match parse(f) {
        Parsed::Other => return RssInfo::default(),
        Parsed::V4(a, p) => (
            PKT_IPV4,
            a,
            p,
            [
                (Some(6), MRQC_TCP_IPV4, RSS_TYPE_TCP_IPV4),
                (Some(17), MRQC_UDP_IPV4, RSS_TYPE_UDP_IPV4),
                (None, MRQC_IPV4, RSS_TYPE_IPV4),
                (None, 0, RSS_TYPE_NONE),
            ],
        ),
        Parsed::V6(a, p) => (
            PKT_IPV6,
            a,
            p,
            [
                (Some(6), MRQC_TCP_IPV6_QEMU, RSS_TYPE_TCP_IPV6),
                (Some(17), MRQC_UDP_IPV6, RSS_TYPE_UDP_IPV6),
                (None, MRQC_IPV6_EX, RSS_TYPE_IPV6_EX),
                (None, MRQC_IPV6, RSS_TYPE_IPV6),
            ],
        ),
    };
    let pkt_l4 = match ports {
        Some((6, _)) => PKT_TCP,
        Some((17, _)) => PKT_UDP,
        _ => 0,
    };
    let pkt_type = pkt_l3 | pkt_l4;
    for (proto, bit, rss_type) in types {
        if bit == 0 || mrqc & bit == 0 {
            continue;
        }
        let n = addrs.len();
        input[..n].copy_from_slice(addrs);
        let len = match (proto, ports) {
            (None, _) => n,
            (Some(want), Some((got, p))) if want == got => {
                input[n..n + 4].copy_from_slice(p);
                n + 4
            }
            _ => continue,
        };
        return RssInfo {
            rss_type,
            hash: toeplitz(key, &input[..len]),
            pkt_type,
        };
    }
    RssInfo {
        pkt_type,
        ..RssInfo::default()
    }
}

#[cfg(test)]
pub(crate) mod tests;
