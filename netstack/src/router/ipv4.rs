//! IPv4 header helpers for the router fast path: field access on raw bytes, header validation
//! in the order of RFC 1812 §5.2.2, martian address classes (RFC 1812 §5.3.7, §4.2.2.11), the
//! RFC 1071 checksum and the RFC 1624 incremental update.
//!
//! The fast path reads the header as bytes (network order) instead of through
//! `smoltcp::wire::Ipv4Packet`: it needs every check to be a named drop, and it must not panic
//! on any input. The tests build and verify frames with smoltcp's wire types, an independent
//! implementation.

use super::RouterDrop;

/// Minimum IPv4 header length (IHL = 5).
pub const IPV4_MIN_HDR: usize = 20;

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
#[inline(always)]
pub fn decrement_ttl(ip: &mut [u8]) {
    let old = be16(ip, 8);
    let new = old - 0x0100;
    let hc = csum_update16(be16(ip, 10), old, new);
    ip[8] = (new >> 8) as u8;
    ip[10..12].copy_from_slice(&hc.to_be_bytes());
}

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
    // The fixed 20 bytes as an array: the field reads below need no bounds checks.
    let Some(fixed) = ip.first_chunk::<IPV4_MIN_HDR>() else {
        return Err(RouterDrop::Truncated);
    };
    let vihl = fixed[0];
    if vihl >> 4 != 4 {
        return Err(RouterDrop::BadVersion);
    }
    let header_len = usize::from(vihl & 0x0f) * 4;
    if header_len < IPV4_MIN_HDR {
        return Err(RouterDrop::BadIhl);
    }
    let total_len = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
    if total_len < header_len || total_len > ip.len() {
        return Err(RouterDrop::BadTotalLen);
    }
    // total_len ≤ ip.len() and header_len ≤ total_len, so the slice is in bounds.
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
        ttl: fixed[8],
        protocol: fixed[9],
        frag_offset: u16::from_be_bytes([fixed[6], fixed[7]]) & 0x1fff,
        src: u32::from_be_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]),
        dst: u32::from_be_bytes([fixed[16], fixed[17], fixed[18], fixed[19]]),
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

    fn smoltcp_header(src: u32, dst: u32, ttl: u8, proto: u8, payload_len: usize) -> [u8; 20] {
        let repr = Ipv4Repr {
            src_addr: Ipv4Address::from_bits(src),
            dst_addr: Ipv4Address::from_bits(dst),
            next_header: IpProtocol::from(proto),
            payload_len,
            hop_limit: ttl,
        };
        let mut b = [0u8; 20];
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
        b[0] = 0x65;
        assert_eq!(validate(&b), Err(RouterDrop::BadVersion));
        let mut b = good;
        b[0] = 0x44;
        assert_eq!(validate(&b), Err(RouterDrop::BadIhl));
        let mut b = good;
        b[0] = 0x46; // 24-byte header in a 20-byte total length
        assert_eq!(validate(&b), Err(RouterDrop::BadTotalLen));
        let mut b = good;
        b[3] = 21; // longer than the buffer
        assert_eq!(validate(&b), Err(RouterDrop::BadTotalLen));
        let mut b = good;
        b[11] ^= 1;
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
            h[0] = 0x40 | ihl;
            h[8] = ttl;
            h[10] = 0;
            h[11] = 0;
            let c = checksum(&h[..hl]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(ones_sum(&h[..hl]), 0xffff);

            let mut inc = h;
            decrement_ttl(&mut inc[..hl]);
            let mut full = inc;
            full[10] = 0;
            full[11] = 0;
            let c2 = checksum(&full[..hl]);
            prop_assert_eq!(inc[8], ttl - 1);
            prop_assert_eq!(be16(&inc, 10), c2);
            // smoltcp agrees when the header is a plain one.
            if ihl == 5 {
                let p = Ipv4Packet::new_unchecked(&inc[..20]);
                prop_assert!(p.verify_checksum());
            }
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
        assert_eq!(d[8], 1);
    }
}
