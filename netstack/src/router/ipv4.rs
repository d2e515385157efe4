//! IPv4 header helpers for the router fast path: field access on raw bytes, header validation
//! in the order of RFC 1812 §5.2.2, martian address classes (RFC 1812 §5.3.7, §4.2.2.11), the
//! RFC 1071 checksum and the RFC 1624 incremental update.
//!
//! Past ~800 lines because of its inline tests (the last ~370 lines: each check against
//! smoltcp's wire types).
//!
//! The fast path reads the header as bytes (network order) instead of through
//! `smoltcp::wire::Ipv4Packet`: it needs every check to be a named drop, and it must not panic
//! on any input. The tests build and verify frames with smoltcp's wire types, an independent
//! implementation.

use super::RouterDrop;
use crate::wire::{
    IPV4_CHECKSUM, IPV4_DST, IPV4_FLAGS_FRAG, IPV4_PROTOCOL, IPV4_SRC, IPV4_TOTAL_LEN, IPV4_TTL,
    IPV4_VER_IHL,
};
pub use crate::wire::{IPV4_MAX_OPTIONS, IPV4_MIN_HDR};

/// Read a big-endian u16 at `off`. Callers check bounds.
#[inline(always)]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Read a big-endian u32 at `off`. Callers check bounds.
#[inline(always)]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// One's-complement sum of `data` as 16-bit big-endian words (RFC 1071), folded to 16 bits, not
/// complemented. An odd trailing byte is padded with zero.
///
/// Adds 32-bit words into a 64-bit accumulator and folds the carries at the end (RFC 1071 §2,
/// "deferred carries"; a 32-bit word `hi·2¹⁶ + lo` is `hi + lo` modulo 0xFFFF): five adds for a
/// 20-byte header instead of ten. The result equals the 16-bit word-by-word sum for every input
/// (property-tested below against a naive implementation).
#[inline]
pub fn ones_sum(data: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    match *words.remainder() {
        [a, b, c] => sum += u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
        [a, b] => sum += u64::from(u16::from_be_bytes([a, b])),
        [a] => sum += u64::from(a) << 8,
        _ => {}
    }
    // Fold 64 → 32 → 16 bits with end-around carry; each step keeps the value modulo 0xFFFF
    // and never turns a non-zero sum into 0.
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The Internet checksum of `data` (RFC 1071): the complement of [`ones_sum`].
pub fn checksum(data: &[u8]) -> u16 {
    !ones_sum(data)
}

/// RFC 1624 eqn. 3: the new header checksum after one 16-bit word of the covered data changed
/// from `old` to `new`: `HC' = ~(~HC + ~m + m')`, in one's-complement arithmetic. Unlike eqn. 2
/// it never produces 0xFFFF (-0) where a full recomputation gives 0x0000 (+0), so the result
/// equals a full recomputation for every header (property-tested below).
#[inline(always)]
pub fn csum_update16(hc: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Decrement the TTL of the IPv4 header at the start of `ip` and update its checksum
/// incrementally. TTL is the high byte of the 16-bit word at offset 8 (TTL, protocol).
/// The caller has checked `ip.len() >= 20` and TTL > 1.
///
/// RFC 1624 eqn. 3 ([`csum_update16`]) for this one change: the word drops by 0x0100, so
/// `~m + m'` is 0xfeff and `HC' = HC + 0x0100` with an end-around carry, written as 0 where
/// the sum reaches 0xffff (Linux's `ip_decrease_ttl`). Done on the checksum as stored, read in
/// little-endian order (0x0100 in network order is 0x0001 there; the one's-complement sum
/// commutes with byte swapping): an add, a compare and an add. Equal to [`csum_update16`] for
/// every checksum (tested exhaustively below).
#[inline(always)]
pub fn decrement_ttl(ip: &mut [u8]) {
    let c = IPV4_CHECKSUM.start;
    let hc = u32::from(u16::from_le_bytes([ip[c], ip[c + 1]])) + 1;
    let hc = (hc + u32::from(hc >= 0xffff)) as u16;
    ip[IPV4_TTL] -= 1;
    ip[IPV4_CHECKSUM].copy_from_slice(&hc.to_le_bytes());
}

/// IP option Record Route (RFC 791).
pub const IPOPT_RR: u8 = 7;
/// IP option Internet Timestamp (RFC 791).
pub const IPOPT_TS: u8 = 68;
/// Timestamp option flags: timestamps only.
pub const IPOPT_TS_TSONLY: u8 = 0;
/// Timestamp option flags: each timestamp preceded by the registering router's address.
pub const IPOPT_TS_TSANDADDR: u8 = 1;
/// Timestamp option flags: addresses prespecified, only those routers stamp.
pub const IPOPT_TS_PRESPEC: u8 = 3;

/// What [`forward_options`] needs to know about the router.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct OptionContext {
    /// Address of the port the datagram came in on (host order): recorded with a Timestamp
    /// option's timestamp (flag 1), as the registering entity.
    pub in_addr: u32,
    /// Address of the port the datagram leaves through: recorded by Record Route ("as known in
    /// the environment into which this datagram is being forwarded", RFC 791).
    pub out_addr: u32,
    /// The timestamp to insert (RFC 791: milliseconds since midnight UT, or any time with the
    /// high-order bit set).
    pub timestamp: u32,
}

/// Process the options of a datagram being forwarded, in place (RFC 1812 §5.3.13): Record Route
/// gets [`OptionContext::out_addr`] if it has room (RFC 1812 §5.3.13.5); Timestamp gets a
/// timestamp, with [`OptionContext::in_addr`] before it for flag 1, and for flag 3 only when
/// the next prespecified address is one of ours (`is_ours`), or, when full, its overflow count
/// incremented (RFC 1812 §5.3.13.6, RFC 791); every other option passes unchanged
/// (§5.3.13.1). `hdr` is the whole IPv4 header (IHL × 4 bytes, validated). Returns whether
/// anything changed (the caller then recomputes the header checksum), or `Err(offset)` of the
/// offending byte within the header for a malformed option (RFC 791: the datagram is in error
/// and discarded; the offset is the Parameter Problem pointer). The checks and the offsets
/// follow RFC 791 and Linux's `ip_options_compile`: an option length below 2 or running past
/// the header (its type byte), a Record Route shorter than 3 (length byte), pointer below 4 or
/// with partial room (pointer byte), a Timestamp shorter than 4 (length), pointer below 5 or
/// partial room (pointer), or an overflow count that would pass 15 (flags byte).
pub fn forward_options(
    hdr: &mut [u8],
    ctx: &OptionContext,
    is_ours: impl Fn(u32) -> bool,
) -> Result<bool, usize> {
    record_options(hdr, ctx, is_ours, true)
}

/// [`forward_options`], with the overflow count of a full Timestamp option left alone when
/// `count_overflow` is false (the second, outgoing update of an echo reply's options: Linux's
/// `__ip_options_echo` only fills slots that are free).
fn record_options(
    hdr: &mut [u8],
    ctx: &OptionContext,
    is_ours: impl Fn(u32) -> bool,
    count_overflow: bool,
) -> Result<bool, usize> {
    let mut changed = false;
    let mut i = IPV4_MIN_HDR;
    while i < hdr.len() {
        match hdr[i] {
            0 => break,
            1 => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(&len) = hdr.get(i + 1) else {
            return Err(i);
        };
        let len = usize::from(len);
        if len < 2 || i + len > hdr.len() {
            return Err(i);
        }
        let ptr = usize::from(*hdr.get(i + 2).unwrap_or(&0));
        match hdr[i] {
            IPOPT_RR => {
                if len < 3 {
                    return Err(i + 1);
                }
                if ptr < 4 {
                    return Err(i + 2);
                }
                if ptr <= len {
                    if ptr + 3 > len {
                        return Err(i + 2);
                    }
                    hdr[i + ptr - 1..i + ptr + 3].copy_from_slice(&ctx.out_addr.to_be_bytes());
                    hdr[i + 2] += 4;
                    changed = true;
                }
            }
            IPOPT_TS => {
                if len < 4 {
                    return Err(i + 1);
                }
                if ptr < 5 {
                    return Err(i + 2);
                }
                let flags = hdr[i + 3] & 0x0f;
                if ptr <= len {
                    if ptr + 3 > len {
                        return Err(i + 2);
                    }
                    let at = i + ptr - 1;
                    let ts = ctx.timestamp.to_be_bytes();
                    match flags {
                        IPOPT_TS_TSONLY => {
                            hdr[at..at + 4].copy_from_slice(&ts);
                            hdr[i + 2] += 4;
                            changed = true;
                        }
                        IPOPT_TS_TSANDADDR | IPOPT_TS_PRESPEC => {
                            if ptr + 7 > len {
                                return Err(i + 2);
                            }
                            if flags == IPOPT_TS_TSANDADDR {
                                hdr[at..at + 4].copy_from_slice(&ctx.in_addr.to_be_bytes());
                            } else if !is_ours(be32(hdr, at)) {
                                i += len;
                                continue;
                            }
                            hdr[at + 4..at + 8].copy_from_slice(&ts);
                            hdr[i + 2] += 8;
                            changed = true;
                        }
                        // Flags RFC 791 does not define: passed unchanged.
                        _ => {}
                    }
                } else if count_overflow && flags != IPOPT_TS_PRESPEC {
                    // Full: count the router that could not register (RFC 791).
                    let overflow = hdr[i + 3] >> 4;
                    if overflow == 15 {
                        return Err(i + 3);
                    }
                    hdr[i + 3] = ((overflow + 1) << 4) | flags;
                    changed = true;
                }
            }
            _ => {}
        }
        i += len;
    }
    Ok(changed)
}

/// IP option Loose Source and Record Route (RFC 791).
pub const IPOPT_LSRR: u8 = 131;
/// IP option Strict Source and Record Route (RFC 791).
pub const IPOPT_SSRR: u8 = 137;

/// A source route option (RFC 791 Loose or Strict Source and Record Route) in a header.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct SourceRoute {
    /// Offset of the option's type byte in the IPv4 header.
    pub at: usize,
    /// Strict (SSRR): every hop must be directly connected.
    pub strict: bool,
}

/// The first source route option of the IPv4 header `hdr` (IHL × 4 bytes), if any.
pub fn find_source_route(hdr: &[u8]) -> Option<SourceRoute> {
    let mut i = IPV4_MIN_HDR;
    while i < hdr.len() {
        match hdr[i] {
            0 => return None,
            1 => i += 1,
            t @ (IPOPT_LSRR | IPOPT_SSRR) => {
                return Some(SourceRoute {
                    at: i,
                    strict: t == IPOPT_SSRR,
                })
            }
            _ => i += usize::from(*hdr.get(i + 1).unwrap_or(&0)).max(2),
        }
    }
    None
}

/// Whether the IPv4 header `hdr` (IHL × 4 bytes) carries a source route option.
pub fn has_source_route(hdr: &[u8]) -> bool {
    find_source_route(hdr).is_some()
}

/// The next address of source route `sr` in `hdr` when the datagram reached the address it was
/// sent to: `Ok(Some(next))`, `Ok(None)` if the route is exhausted (pointer beyond the length:
/// this is the final destination), or `Err(offset)` of the offending byte (Parameter Problem
/// pointer, as Linux): a length below 3 or past the header (length byte), a pointer below 4 or
/// with room for part of an address (pointer byte).
pub fn source_route_next(hdr: &[u8], sr: &SourceRoute) -> Result<Option<u32>, usize> {
    let i = sr.at;
    let len = usize::from(*hdr.get(i + 1).ok_or(i)?);
    if len < 3 || i + len > hdr.len() {
        return Err(i + 1);
    }
    let ptr = usize::from(hdr[i + 2]);
    if ptr < 4 {
        return Err(i + 2);
    }
    if ptr > len {
        return Ok(None);
    }
    if ptr + 3 > len {
        return Err(i + 2);
    }
    Ok(Some(be32(hdr, i + ptr - 1)))
}

/// Takes the hop [`source_route_next`] returned: records `out_addr` (the address of the port the
/// datagram leaves through, RFC 791) in its place and advances the pointer. The caller has set
/// the destination to the next address and recomputes the checksum.
pub fn source_route_advance(hdr: &mut [u8], sr: &SourceRoute, out_addr: u32) {
    let i = sr.at;
    let ptr = usize::from(hdr[i + 2]);
    hdr[i + ptr - 1..i + ptr + 3].copy_from_slice(&out_addr.to_be_bytes());
    hdr[i + 2] += 4;
}

/// The options of an echo reply to a request whose header is `hdr` (IHL × 4 bytes, options
/// already updated on arrival with [`forward_options`]): its Record Route and Timestamp
/// options (in that order, as Linux's `__ip_options_echo`; other options are not returned),
/// each updated once more for the reply's departure, then EOL padding to a multiple of 4
/// (RFC 1812 §4.3.3.6: "updated to include the current router … without truncation", so the
/// recorded route covers the round trip). Writes them into `out` and returns their length, or
/// `None` if an option has room for the arrival but only part of the departure entry (Linux
/// sends no reply then). Options are assumed valid (the arrival update checked them).
pub fn echo_reply_options(
    hdr: &[u8],
    ctx: &OptionContext,
    is_ours: impl Fn(u32) -> bool,
    out: &mut [u8; IPV4_MAX_OPTIONS],
) -> Option<usize> {
    let mut n = 0;
    for want in [IPOPT_RR, IPOPT_TS] {
        let mut i = IPV4_MIN_HDR;
        while i + 1 < hdr.len() {
            match hdr[i] {
                0 => break,
                1 => i += 1,
                t => {
                    let len = usize::from(hdr[i + 1]).max(2);
                    if t == want && i + len <= hdr.len() && n + len <= IPV4_MAX_OPTIONS {
                        out[n..n + len].copy_from_slice(&hdr[i..i + len]);
                        n += len;
                        break;
                    }
                    i += len;
                }
            }
        }
    }
    while n % 4 != 0 {
        out[n] = 0;
        n += 1;
    }
    // Run the update over the copied options as if they were a header's.
    let mut h = [0u8; IPV4_MIN_HDR + IPV4_MAX_OPTIONS];
    h[IPV4_MIN_HDR..IPV4_MIN_HDR + n].copy_from_slice(&out[..n]);
    record_options(&mut h[..IPV4_MIN_HDR + n], ctx, is_ours, false).ok()?;
    out[..n].copy_from_slice(&h[IPV4_MIN_HDR..IPV4_MIN_HDR + n]);
    Some(n)
}

/// Recompute the header checksum of the IPv4 header `hdr` (IHL × 4 bytes) from scratch.
pub fn fill_checksum(hdr: &mut [u8]) {
    hdr[IPV4_CHECKSUM.start] = 0;
    hdr[IPV4_CHECKSUM.start + 1] = 0;
    let c = checksum(hdr);
    hdr[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
}

/// Don't Fragment, in the flags and fragment offset word (RFC 791 §3.1, bit 1 of the flags).
pub const IPV4_DF: u16 = 0x4000;
/// More Fragments, in the flags and fragment offset word (RFC 791 §3.1, bit 2 of the flags).
pub const IPV4_MF: u16 = 0x2000;
/// The fragment offset (in 8-byte units) in the flags and fragment offset word (RFC 791 §3.1).
pub const IPV4_FRAG_OFFSET: u16 = 0x1fff;

/// The parts of a valid IPv4 header the router uses.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct Ipv4Hdr {
    /// Header length in bytes (IHL × 4, 20..=60).
    pub header_len: usize,
    /// Total length (header + payload) in bytes; ≤ the bytes after the Ethernet header.
    pub total_len: usize,
    /// Time to live as received.
    pub ttl: u8,
    /// Protocol number.
    pub protocol: u8,
    /// Fragment offset in 8-byte units (0 for unfragmented datagrams and first fragments).
    pub frag_offset: u16,
    /// Don't Fragment ([`IPV4_DF`], RFC 791 §3.1).
    pub df: bool,
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
}

/// Validate the IPv4 header at the start of `ip` (everything after the Ethernet header) as
/// RFC 1812 §5.2.2 asks: enough bytes for a minimal header, version 4, IHL ≥ 5, total length
/// covering the header and not exceeding the bytes received (trailing Ethernet padding is
/// allowed), and a correct header checksum. Options and fragment fields are not interpreted.
#[inline]
pub fn validate(ip: &[u8]) -> Result<Ipv4Hdr, RouterDrop> {
    validate_len(ip, ip.len())
}

/// [`validate`] for a datagram of which only the first bytes are at hand: `ip` is the first
/// `ip.len()` bytes of the `ip_len` bytes after the Ethernet header (a frame received in
/// several buffers; its head holds the headers). The total length is checked against
/// `ip_len`; a header (IHL × 4 bytes) that does not fit in `ip` is
/// [`RouterDrop::BeyondHead`]. `ip_len` below `ip.len()` counts as `ip.len()`.
#[inline]
pub fn validate_len(ip: &[u8], ip_len: usize) -> Result<Ipv4Hdr, RouterDrop> {
    let ip_len = ip_len.max(ip.len());
    // The fixed 20 bytes as an array: the field reads below need no bounds checks.
    let Some(fixed) = ip.first_chunk::<IPV4_MIN_HDR>() else {
        return Err(match ip_len < IPV4_MIN_HDR {
            true => RouterDrop::Truncated,
            false => RouterDrop::BeyondHead,
        });
    };
    let vihl = fixed[IPV4_VER_IHL];
    if vihl >> 4 != 4 {
        return Err(RouterDrop::BadVersion);
    }
    let header_len = usize::from(vihl & 0x0f) * 4;
    if header_len < IPV4_MIN_HDR {
        return Err(RouterDrop::BadIhl);
    }
    let total_len = usize::from(be16(fixed, IPV4_TOTAL_LEN.start));
    if total_len < header_len || total_len > ip_len {
        return Err(RouterDrop::BadTotalLen);
    }
    if header_len > ip.len() {
        return Err(RouterDrop::BeyondHead);
    }
    // header_len ≤ ip.len(), so the slice is in bounds.
    let sum = if header_len == IPV4_MIN_HDR {
        ones_sum(fixed)
    } else {
        ones_sum(&ip[..header_len])
    };
    if sum != 0xffff {
        return Err(RouterDrop::BadChecksum);
    }
    Ok(Ipv4Hdr {
        header_len,
        total_len,
        ttl: fixed[IPV4_TTL],
        protocol: fixed[IPV4_PROTOCOL],
        frag_offset: be16(fixed, IPV4_FLAGS_FRAG.start) & IPV4_FRAG_OFFSET,
        df: be16(fixed, IPV4_FLAGS_FRAG.start) & IPV4_DF != 0,
        src: be32(fixed, IPV4_SRC.start),
        dst: be32(fixed, IPV4_DST.start),
    })
}

/// RFC 1812 §5.3.7 / §4.2.2.11: a source address a router must not forward from: 0/8 ("this
/// network"), 127/8 (loopback), 224/4 (multicast) and 240/4 (class E, which includes the
/// limited broadcast 255.255.255.255).
#[inline(always)]
pub fn is_martian_src(src: u32) -> bool {
    let a = src >> 24;
    a == 0 || a == 127 || a >= 224
}

/// What the router does with a destination address before the FIB is consulted.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum DstClass {
    /// An ordinary unicast destination: look it up.
    Unicast,
    /// 0/8, 127/8 or 240/4 other than the limited broadcast: never forwarded (RFC 1812 §5.3.7).
    Martian,
    /// 224/4: no multicast routing here.
    Multicast,
    /// 255.255.255.255: never forwarded (RFC 1812 §5.3.5.1).
    LimitedBroadcast,
}

/// Classify a destination address (host order).
#[inline(always)]
pub fn classify_dst(dst: u32) -> DstClass {
    let a = dst >> 24;
    if a == 0 || a == 127 {
        DstClass::Martian
    } else if a < 224 {
        DstClass::Unicast
    } else if a < 240 {
        DstClass::Multicast
    } else if dst == u32::MAX {
        DstClass::LimitedBroadcast
    } else {
        DstClass::Martian
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use smoltcp::wire::{IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr};

    fn smoltcp_header(
        src: u32,
        dst: u32,
        ttl: u8,
        proto: u8,
        payload_len: usize,
    ) -> [u8; IPV4_MIN_HDR] {
        let repr = Ipv4Repr {
            src_addr: Ipv4Address::from_bits(src),
            dst_addr: Ipv4Address::from_bits(dst),
            next_header: IpProtocol::from(proto),
            payload_len,
            hop_limit: ttl,
        };
        let mut b = [0u8; IPV4_MIN_HDR];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        repr.emit(&mut p, &smoltcp::phy::ChecksumCapabilities::default());
        b
    }

    #[test]
    fn known_checksum() {
        // RFC 1071 §3 example bytes: 00 01 f2 03 f4 f5 f6 f7 -> sum 0xddf2.
        assert_eq!(
            ones_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(ones_sum(&[0xff]), 0xff00);
    }

    /// The one-fold-is-not-enough case of eqn. 3: ~HC + ~m + m' = 0x1FFFF. Data 0xFFFF, 0x0000
    /// has checksum 0x0000; changing the 0x0000 word to 0x0001 gives 0xFFFE. (A TTL decrement
    /// never gets there; random words rarely do.)
    #[test]
    fn update16_needs_two_folds() {
        assert_eq!(checksum(&[0xff, 0xff, 0, 0]), 0x0000);
        assert_eq!(csum_update16(0x0000, 0x0000, 0x0001), 0xfffe);
        assert_eq!(checksum(&[0xff, 0xff, 0, 1]), 0xfffe);
    }

    #[test]
    fn validate_rejects_in_order() {
        let good = smoltcp_header(0x0a000002, 0x0a000102, 64, 17, 0);
        assert!(validate(&good).is_ok());
        assert_eq!(validate(&good[..19]), Err(RouterDrop::Truncated));
        let mut b = good;
        b[IPV4_VER_IHL] = 0x65;
        assert_eq!(validate(&b), Err(RouterDrop::BadVersion));
        let mut b = good;
        b[IPV4_VER_IHL] = 0x44;
        assert_eq!(validate(&b), Err(RouterDrop::BadIhl));
        let mut b = good;
        b[IPV4_VER_IHL] = 0x46; // 24-byte header in a 20-byte total length
        assert_eq!(validate(&b), Err(RouterDrop::BadTotalLen));
        let mut b = good;
        b[IPV4_TOTAL_LEN.end - 1] = 21; // longer than the buffer
        assert_eq!(validate(&b), Err(RouterDrop::BadTotalLen));
        let mut b = good;
        b[IPV4_CHECKSUM.end - 1] ^= 1;
        assert_eq!(validate(&b), Err(RouterDrop::BadChecksum));
    }

    #[test]
    fn address_classes() {
        for (a, m) in [
            (0x0000_0000, true),
            (0x00ff_ffff, true),
            (0x0100_0000, false),
            (0x7f00_0001, true),
            (0x7eff_ffff, false),
            (0x8000_0000, false),
            (0xdfff_ffff, false),
            (0xe000_0001, true),
            (0xf000_0000, true),
            (0xffff_ffff, true),
        ] {
            assert_eq!(is_martian_src(a), m, "{a:#x}");
        }
        assert_eq!(classify_dst(0), DstClass::Martian);
        assert_eq!(classify_dst(0x7f000001), DstClass::Martian);
        assert_eq!(classify_dst(0x0a000001), DstClass::Unicast);
        assert_eq!(classify_dst(0xdfffffff), DstClass::Unicast);
        assert_eq!(classify_dst(0xe0000001), DstClass::Multicast);
        assert_eq!(classify_dst(0xefffffff), DstClass::Multicast);
        assert_eq!(classify_dst(0xf0000000), DstClass::Martian);
        assert_eq!(classify_dst(0xffffffff), DstClass::LimitedBroadcast);
    }

    /// RFC 1071's definition, one 16-bit word at a time with an end-around carry per add.
    fn naive_ones_sum(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for c in data.chunks(2) {
            let w = u32::from(c[0]) << 8 | u32::from(c.get(1).copied().unwrap_or(0));
            sum += w;
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::router::tests::cases(4096)))]

        /// The 32-bit-word sum with deferred carries equals the 16-bit definition, for every
        /// length (odd ones included) and for all-0xFF data (the 0xFFFF/0 edge).
        #[test]
        fn ones_sum_equals_naive(data in proptest::collection::vec(any::<u8>(), 0..200), ff in 0usize..70) {
            prop_assert_eq!(ones_sum(&data), naive_ones_sum(&data));
            let all = std::vec![0xffu8; ff];
            prop_assert_eq!(ones_sum(&all), naive_ones_sum(&all));
        }

        /// RFC 1624 eqn. 3 equals a full recomputation, for random headers (with options) and
        /// every TTL that gets decremented.
        #[test]
        fn incremental_equals_full(
            words in proptest::collection::vec(any::<u8>(), 60),
            ihl in 5u8..=15,
            ttl in 2u8..=255,
        ) {
            let hl = usize::from(ihl) * 4;
            let mut h = [0u8; 60];
            h[..hl].copy_from_slice(&words[..hl]);
            h[IPV4_VER_IHL] = 0x40 | ihl;
            h[IPV4_TTL] = ttl;
            h[IPV4_CHECKSUM].fill(0);
            let c = checksum(&h[..hl]);
            h[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(ones_sum(&h[..hl]), 0xffff);

            let mut inc = h;
            decrement_ttl(&mut inc[..hl]);
            let mut full = inc;
            full[IPV4_CHECKSUM].fill(0);
            let c2 = checksum(&full[..hl]);
            prop_assert_eq!(inc[IPV4_TTL], ttl - 1);
            prop_assert_eq!(be16(&inc, IPV4_CHECKSUM.start), c2);
            // smoltcp agrees when the header is a plain one.
            if ihl == 5 {
                let p = Ipv4Packet::new_unchecked(&inc[..IPV4_MIN_HDR]);
                prop_assert!(p.verify_checksum());
            }
        }

        /// The general update (any word, any change) equals recomputation.
        #[test]
        fn update16_is_what_the_ttl_decrement_does(
            ttl in 2u8..=255,
            proto in any::<u8>(),
            hc in any::<u16>(),
        ) {
            let mut h = [0u8; IPV4_MIN_HDR];
            h[IPV4_TTL] = ttl;
            h[IPV4_PROTOCOL] = proto;
            h[IPV4_CHECKSUM].copy_from_slice(&hc.to_be_bytes());
            decrement_ttl(&mut h);
            let old = u16::from_be_bytes([ttl, proto]);
            prop_assert_eq!(be16(&h, IPV4_CHECKSUM.start), csum_update16(hc, old, old - 0x100));
            prop_assert_eq!(h[IPV4_TTL], ttl - 1);
        }

        /// The general update (any word, any change) equals recomputation.
        #[test]
        fn update16_any_word(
            words in proptest::collection::vec(any::<u16>(), 10),
            idx in 0usize..10,
            new in any::<u16>(),
        ) {
            prop_assume!(idx != 5);
            let mut w = words.clone();
            w[5] = 0;
            let bytes = |w: &[u16]| {
                let mut b = [0u8; 20];
                for (i, x) in w.iter().enumerate() {
                    b[2 * i..2 * i + 2].copy_from_slice(&x.to_be_bytes());
                }
                b
            };
            w[5] = checksum(&bytes(&w));
            let hc = w[5];
            let old = w[idx];
            w[idx] = new;
            let updated = csum_update16(hc, old, new);
            w[5] = 0;
            // A header whose checksummed words are all zero is the one case where a full
            // recomputation (0xffff) and eqn. 3 (0x0000, i.e. -0 vs +0) may differ; an IPv4
            // header never has it (version 4 is in the first word).
            prop_assume!(w.iter().any(|&x| x != 0));
            prop_assert_eq!(updated, checksum(&bytes(&w)));
        }
    }

    /// [`decrement_ttl`]'s checksum equals RFC 1624 eqn. 3 for every stored checksum (eqn. 3
    /// depends on the TTL word only through `~m + m'`, 0xfeff for every TTL > 1).
    #[test]
    fn ttl_decrement_is_eqn_3_for_every_checksum() {
        for hc in 0..=u16::MAX {
            let mut h = [0u8; IPV4_MIN_HDR];
            h[IPV4_TTL] = 64;
            h[IPV4_PROTOCOL] = 17;
            h[IPV4_CHECKSUM].copy_from_slice(&hc.to_be_bytes());
            decrement_ttl(&mut h);
            assert_eq!(
                be16(&h, IPV4_CHECKSUM.start),
                csum_update16(hc, 0x4011, 0x3f11),
                "checksum {hc:#06x}"
            );
        }
    }

    fn opts_header(opts: &[u8]) -> std::vec::Vec<u8> {
        let mut h = smoltcp_header(0x0a000002, 0x0a000102, 64, 17, 0).to_vec();
        h.extend_from_slice(opts);
        h[IPV4_VER_IHL] = 0x40 | (h.len() / 4) as u8;
        fill_checksum(&mut h);
        h
    }

    const CTX: OptionContext = OptionContext {
        in_addr: 0x0a000001,
        out_addr: 0x0a000101,
        timestamp: 0x8000_1234,
    };

    fn ours(a: u32) -> bool {
        a == 0x0a000001 || a == 0x0a000101
    }

    #[test]
    fn record_route_records_the_outgoing_address() {
        let mut h = opts_header(&[1, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(true));
        assert_eq!(&h[21..32], &[7, 11, 8, 10, 0, 1, 1, 0, 0, 0, 0]);
        // Second hop fills the last slot, a third finds it full and changes nothing.
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(true));
        assert_eq!(&h[21..32], &[7, 11, 12, 10, 0, 1, 1, 10, 0, 1, 1]);
        let full = h.clone();
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(false));
        assert_eq!(h, full);
    }

    #[test]
    fn timestamp_forms() {
        // Flag 0: one timestamp.
        let mut h = opts_header(&[68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(true));
        assert_eq!(&h[20..32], &[68, 12, 9, 0, 0x80, 0, 0x12, 0x34, 0, 0, 0, 0]);
        // Flag 1: the incoming port's address, then the timestamp.
        let mut h = opts_header(&[68, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(true));
        assert_eq!(
            &h[20..32],
            &[68, 12, 13, 1, 10, 0, 0, 1, 0x80, 0, 0x12, 0x34]
        );
        // Flag 3: stamps only when the next prespecified address is ours.
        let mut h = opts_header(&[68, 12, 5, 3, 192, 0, 2, 9, 0, 0, 0, 0]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(false));
        let mut h = opts_header(&[68, 12, 5, 3, 10, 0, 1, 1, 0, 0, 0, 0]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(true));
        assert_eq!(
            &h[20..32],
            &[68, 12, 13, 3, 10, 0, 1, 1, 0x80, 0, 0x12, 0x34]
        );
        // Full: the overflow count goes up, up to 15.
        let mut h = opts_header(&[68, 8, 9, 0x10, 1, 2, 3, 4]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(true));
        assert_eq!(&h[20..28], &[68, 8, 9, 0x20, 1, 2, 3, 4]);
        let mut h = opts_header(&[68, 8, 9, 0xf0, 1, 2, 3, 4]);
        assert_eq!(forward_options(&mut h, &CTX, ours), Err(23));
    }

    #[test]
    fn echo_reply_options_keep_rr_and_ts_updated_again() {
        let ctx = OptionContext {
            in_addr: 0x0a000001,
            out_addr: 0x0a000001,
            timestamp: 0x8000_0001,
        };
        // NOP + RR with two slots, already updated on arrival (pointer 8): the reply keeps
        // only the RR, fills the second slot, pads with EOL.
        let mut h = opts_header(&[1, 7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(forward_options(&mut h, &ctx, ours), Ok(true));
        let mut out = [0u8; IPV4_MAX_OPTIONS];
        assert_eq!(echo_reply_options(&h, &ctx, ours, &mut out), Some(12));
        assert_eq!(
            &out[..12],
            &[7, 11, 12, 10, 0, 0, 1, 10, 0, 0, 1, 0],
            "RR, both entries the router's, EOL"
        );
        // TS before RR in the request: RR first in the reply; a full TS is not counted again.
        let mut h = opts_header(&[68, 8, 9, 0x10, 1, 2, 3, 4, 7, 3, 4, 0]);
        let mut out = [0u8; IPV4_MAX_OPTIONS];
        assert_eq!(echo_reply_options(&h, &ctx, ours, &mut out), Some(12));
        assert_eq!(&out[..12], &[7, 3, 4, 68, 8, 9, 0x10, 1, 2, 3, 4, 0]);
        // Room for one more RR entry but only partly: no reply.
        h = opts_header(&[7, 9, 8, 10, 0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(echo_reply_options(&h, &ctx, ours, &mut out), None);
    }

    #[test]
    fn source_route_hops() {
        let mut h = opts_header(&[1, 131, 11, 4, 10, 0, 1, 2, 192, 0, 2, 9]);
        let sr = find_source_route(&h).unwrap();
        assert_eq!(
            sr,
            SourceRoute {
                at: 21,
                strict: false
            }
        );
        assert_eq!(source_route_next(&h, &sr), Ok(Some(0x0a000102)));
        source_route_advance(&mut h, &sr, 0x0a000101);
        assert_eq!(&h[21..32], &[131, 11, 8, 10, 0, 1, 1, 192, 0, 2, 9]);
        assert_eq!(source_route_next(&h, &sr), Ok(Some(0xc0000209)));
        source_route_advance(&mut h, &sr, 0x0a000101);
        assert_eq!(source_route_next(&h, &sr), Ok(None), "exhausted");
        let h = opts_header(&[137, 7, 3, 1, 2, 3, 4, 0]);
        let sr = find_source_route(&h).unwrap();
        assert!(sr.strict);
        assert_eq!(source_route_next(&h, &sr), Err(22));
        let h = opts_header(&[137, 9, 8, 1, 2, 3, 4, 5, 6, 0, 0, 0]);
        assert_eq!(
            source_route_next(&h, &find_source_route(&h).unwrap()),
            Err(22)
        );
        assert!(find_source_route(&opts_header(&[7, 3, 4, 0])).is_none());
    }

    #[test]
    fn malformed_options_are_errors_and_others_pass() {
        for (opts, at) in [
            (&[7u8, 7, 3, 0, 0, 0, 0, 0][..], 22), // RR pointer < 4
            (&[7, 8, 6, 0, 0, 0, 0, 0][..], 22),   // RR partial room
            (&[68, 8, 4, 0, 0, 0, 0, 0][..], 22),  // TS pointer < 5
            (&[68, 8, 5, 1, 0, 0, 0, 0][..], 22),  // TS flag 1, no room for the pair
            (&[1, 0x5e, 9, 0][..], 21),            // runs past the header
            (&[0x5e, 1, 0, 0][..], 20),            // length below 2
            (&[7, 2, 0, 0][..], 21),               // RR shorter than 3
        ] {
            let mut h = opts_header(opts);
            assert_eq!(forward_options(&mut h, &CTX, ours), Err(at), "{opts:?}");
        }
        let mut h = opts_header(&[0x5e, 4, 0xab, 0xcd, 0, 0, 0, 0]);
        let before = h.clone();
        assert_eq!(forward_options(&mut h, &CTX, ours), Ok(false));
        assert_eq!(h, before, "unknown option and EOL untouched");
    }

    #[test]
    fn smoltcp_header_is_valid() {
        let h = smoltcp_header(0x0a000002, 0x0a000102, 2, 6, 0);
        let v = validate(&h).unwrap();
        assert_eq!(
            (v.ttl, v.protocol, v.src, v.dst),
            (2, 6, 0x0a000002, 0x0a000102)
        );
        let mut d = h;
        decrement_ttl(&mut d);
        assert!(Ipv4Packet::new_checked(&d[..]).unwrap().verify_checksum());
        assert_eq!(d[IPV4_TTL], 1);
    }
}
