//! An Ethernet II frame to the flow conntrack and the NAT track: offsets, the [`Tuple`], and
//! what the transport header says (TCP flags, ICMP query or error with the embedded header).
//! Every malformed or unsupported frame is a [`ParseError`] naming why, checked before any
//! byte past the frame's end (or past the IPv4 Total Length) is read.
//!
//! Refused: IPv4 options are accepted, but fragments are not (the first fragment's ports
//! would make a flow whose later fragments cannot be matched: Linux reassembles before
//! conntrack, `nf_defrag_ipv4`; here a fragment is a counted drop), nor transport headers
//! cut short, nor port 0 (RFC 6335 §6: reserved, never a flow's), nor ICMP types other than
//! echo and the three errors RFC 5508 translates (Destination Unreachable, Time Exceeded,
//! Parameter Problem), nor an ICMP error quoting an ICMP error (RFC 1122 §3.2.2: never sent
//! in answer to an error, so one is forged).

use super::Tuple;
use crate::wire::*;

/// Why a frame has no flow.
#[derive(Copy, Clone, Debug, Eq, PartialEq, Hash)]
pub enum ParseError {
    /// Not IPv4 (ARP, IPv6, …): not this module's business; the caller passes it on.
    NotIpv4,
    /// Shorter than its headers say (IPv4 header, Total Length, the transport header, an
    /// ICMP error's quote).
    Truncated,
    /// IPv4 version not 4, IHL below 5, Total Length below IHL.
    BadHeader,
    /// A fragment (MF set or a non-zero offset), outer or quoted.
    Fragment,
    /// Not TCP, UDP or ICMP.
    UnsupportedProto,
    /// Port 0 on either side.
    ZeroPort,
    /// An ICMP type other than echo, echo reply and the three translated errors.
    IcmpUnsupported,
    /// An ICMP error quoting an ICMP error.
    IcmpErrorInError,
}

/// The transport header's part of a flow.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum L4 {
    /// TCP with its flags byte (header byte 13).
    Tcp {
        /// CWR ECE URG ACK PSH RST SYN FIN.
        flags: u8,
    },
    /// UDP.
    Udp,
    /// ICMP echo (`request`) or echo reply; the identifier is the tuple's ports.
    IcmpQuery {
        /// Echo (type 8) rather than echo reply (type 0).
        request: bool,
    },
    /// An ICMP error (type 3, 11 or 12) quoting the start of a datagram.
    IcmpError(Quote),
}

/// The datagram an ICMP error quotes (its IPv4 header and at least 8 bytes after it).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Quote {
    /// Offset of the quoted IPv4 header in the frame.
    pub ip: usize,
    /// Offset of the quoted transport header in the frame.
    pub l4: usize,
    /// Bytes of the quoted transport header present (≥ 8), up to the outer datagram's end.
    pub l4_len: usize,
    /// The quoted datagram's tuple, as it was sent.
    pub tuple: Tuple,
}

/// A frame's flow.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Flow {
    /// Offset of the IPv4 header.
    pub ip: usize,
    /// Offset of the transport header.
    pub l4: usize,
    /// End of the datagram (IPv4 Total Length from `ip`; padding after it is not ours).
    pub end: usize,
    /// The tuple as carried (for an ICMP error the outer addresses and its type/code in
    /// neither port: both 0).
    pub tuple: Tuple,
    /// The transport header's part.
    pub l4kind: L4,
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

fn be32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]])
}

/// The IPv4 header at `ip` within `f[..limit]`: (header length, datagram end clipped to
/// `limit` when `quoted`, protocol). A quoted header's Total Length may exceed the quote.
fn ipv4_at(
    f: &[u8],
    ip: usize,
    limit: usize,
    total_limit: usize,
    quoted: bool,
) -> Result<(usize, usize, u8), ParseError> {
    if limit < ip + IPV4_MIN_HDR {
        return Err(ParseError::Truncated);
    }
    let vi = f[ip + IPV4_VER_IHL];
    let hl = usize::from(vi & 0xf) * 4;
    if vi >> 4 != 4 || hl < IPV4_MIN_HDR {
        return Err(ParseError::BadHeader);
    }
    let total = usize::from(be16(f, ip + IPV4_TOTAL_LEN.start));
    if total < hl {
        return Err(ParseError::BadHeader);
    }
    if limit < ip + hl {
        return Err(ParseError::Truncated);
    }
    let end = if quoted {
        (ip + total).min(limit)
    } else if ip + total > total_limit {
        return Err(ParseError::Truncated);
    } else {
        ip + total
    };
    if be16(f, ip + IPV4_FLAGS_FRAG.start) & 0x3fff != 0 {
        return Err(ParseError::Fragment);
    }
    Ok((hl, end, f[ip + IPV4_PROTOCOL]))
}

/// Ports (or the echo identifier) of the transport header at `l4` with `len` bytes present.
fn ports(
    f: &[u8],
    proto: u8,
    l4: usize,
    len: usize,
    full_tcp: bool,
) -> Result<(u16, u16), ParseError> {
    let need = match proto {
        IPPROTO_TCP if full_tcp => 20,
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_ICMP => 8,
        _ => return Err(ParseError::UnsupportedProto),
    };
    if len < need {
        return Err(ParseError::Truncated);
    }
    if proto == IPPROTO_ICMP {
        let id = be16(f, l4 + ICMP_ECHO_IDENT.start);
        return Ok((id, id));
    }
    let (s, d) = (be16(f, l4), be16(f, l4 + 2));
    if s == 0 || d == 0 {
        return Err(ParseError::ZeroPort);
    }
    Ok((s, d))
}

/// The flow of the Ethernet II frame `f`.
#[inline(always)]
pub fn parse(f: &[u8]) -> Result<Flow, ParseError> {
    parse_len(f, f.len())
}

/// The flow of an Ethernet II frame of `frame_len` bytes whose first `f.len()` are `f` (a
/// frame of several pages: `f` is its first page). The IPv4 Total Length is checked against
/// `frame_len`; every header read (the transport header, an ICMP error's quote) must lie in
/// `f`, else [`ParseError::Truncated`]. [`Flow::end`] is the datagram's end in the frame.
#[inline(always)]
pub fn parse_len(f: &[u8], frame_len: usize) -> Result<Flow, ParseError> {
    if f.len() < ETH_HDR_LEN || be16(f, ETHERTYPE.start) != ETHERTYPE_IPV4 {
        return Err(ParseError::NotIpv4);
    }
    let ip = ETH_HDR_LEN;
    let (hl, end, proto) = ipv4_at(f, ip, f.len(), frame_len, false)?;
    let l4 = ip + hl;
    // What of the datagram `f` holds: the headers are read there only.
    let len = end.min(f.len()) - l4;
    let mut tuple = Tuple {
        src: be32(f, ip + IPV4_SRC.start),
        dst: be32(f, ip + IPV4_DST.start),
        sport: 0,
        dport: 0,
        proto,
    };
    let l4kind = match proto {
        IPPROTO_TCP => {
            (tuple.sport, tuple.dport) = ports(f, proto, l4, len, true)?;
            L4::Tcp { flags: f[l4 + 13] }
        }
        IPPROTO_UDP => {
            (tuple.sport, tuple.dport) = ports(f, proto, l4, len, false)?;
            L4::Udp
        }
        IPPROTO_ICMP => {
            if len < ICMP_HDR_LEN {
                return Err(ParseError::Truncated);
            }
            match f[l4 + ICMP_TYPE] {
                0 | 8 => {
                    (tuple.sport, tuple.dport) = ports(f, proto, l4, len, false)?;
                    L4::IcmpQuery {
                        request: f[l4 + ICMP_TYPE] == 8,
                    }
                }
                3 | 11 | 12 => L4::IcmpError(quote(f, l4 + ICMP_HDR_LEN, l4 + len)?),
                _ => return Err(ParseError::IcmpUnsupported),
            }
        }
        _ => return Err(ParseError::UnsupportedProto),
    };
    Ok(Flow {
        ip,
        l4,
        end,
        tuple,
        l4kind,
    })
}

/// The datagram quoted at `ip`, the outer datagram ending at `end`.
fn quote(f: &[u8], ip: usize, end: usize) -> Result<Quote, ParseError> {
    let (hl, qend, proto) = ipv4_at(f, ip, end, end, true)?;
    let l4 = ip + hl;
    let l4_len = qend.saturating_sub(l4);
    if proto == IPPROTO_ICMP && l4_len >= ICMP_HDR_LEN && !matches!(f[l4 + ICMP_TYPE], 0 | 8) {
        return Err(if matches!(f[l4 + ICMP_TYPE], 3 | 4 | 5 | 11 | 12) {
            ParseError::IcmpErrorInError
        } else {
            ParseError::IcmpUnsupported
        });
    }
    let (sport, dport) = ports(f, proto, l4, l4_len, false)?;
    Ok(Quote {
        ip,
        l4,
        l4_len,
        tuple: Tuple {
            src: be32(f, ip + IPV4_SRC.start),
            dst: be32(f, ip + IPV4_DST.start),
            sport,
            dport,
            proto,
        },
    })
}
