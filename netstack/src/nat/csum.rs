//! Incremental checksum updates (RFC 1624): after a 16- or 32-bit field covered by an
//! Internet checksum changes, the checksum is adjusted from the old and new values alone, not
//! recomputed over the data. RFC 1624 eqn. 3, `HC' = ~(~HC + ~m + m')`, is the router's
//! [`csum_update16`] (it never yields −0 where a full recomputation yields +0; tested there).
//! A change of an address touches the IPv4 header checksum and, through the pseudo-header
//! (RFC 9293 §3.1, RFC 768), the TCP and UDP checksums; a port touches only the latter; an
//! ICMP identifier only the ICMP checksum (no pseudo-header, RFC 792).

pub use crate::router::ipv4::csum_update16;

/// The checksum `c` after a 32-bit field (two aligned 16-bit words) changed from `old` to
/// `new`.
#[inline]
pub fn update32(c: u16, old: u32, new: u32) -> u16 {
    let c = csum_update16(c, (old >> 16) as u16, (new >> 16) as u16);
    csum_update16(c, old as u16, new as u16)
}

/// Read the big-endian 16-bit word at `at`.
#[inline]
pub fn get16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

/// Write `v` big-endian at `at`.
#[inline]
pub fn put16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Read the big-endian 32-bit word at `at`.
#[inline]
pub fn get32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]])
}

/// Write `v` big-endian at `at`.
#[inline]
pub fn put32(f: &mut [u8], at: usize, v: u32) {
    f[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Adjust the 16-bit checksum stored at `at` for a 32-bit change `old` → `new`.
#[inline]
pub fn fix32(f: &mut [u8], at: usize, old: u32, new: u32) {
    let c = update32(get16(f, at), old, new);
    put16(f, at, c);
}

/// Adjust the 16-bit checksum stored at `at` for a 16-bit change `old` → `new`.
#[inline]
pub fn fix16(f: &mut [u8], at: usize, old: u16, new: u16) {
    let c = csum_update16(get16(f, at), old, new);
    put16(f, at, c);
}

/// Adjust a UDP checksum stored at `at` for a change in an address (`old32` → `new32`) and
/// a port (`old16` → `new16`): left as it is when 0 (no checksum, RFC 768), and 0xFFFF
/// written where the arithmetic gives 0 (RFC 768: a computed 0 is sent as all ones).
#[inline]
pub fn fix_udp(f: &mut [u8], at: usize, old32: u32, new32: u32, old16: u16, new16: u16) {
    let c = get16(f, at);
    if c == 0 {
        return;
    }
    let c = csum_update16(update32(c, old32, new32), old16, new16);
    put16(f, at, if c == 0 { 0xffff } else { c });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::ipv4::checksum;

    /// RFC 1624 §4's example: a header sum of 0xCD7A (checksum 0x3285), a word 0x5555
    /// changed to 0x3285, gives checksum 0x0000 by eqn. 3 (0xFFFF by the faulty eqn. 2).
    #[test]
    fn rfc1624_section4_example() {
        assert_eq!(csum_update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    /// A 32-bit update agrees with a recomputation over the data.
    #[test]
    fn update32_equals_recompute() {
        let mut d = [
            0x45u8, 0, 0, 28, 0x12, 0x34, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 198, 51, 100, 7,
        ];
        let c = checksum(&d);
        d[10..12].copy_from_slice(&c.to_be_bytes());
        for new in [0xc000_0201u32, 0, 0xffff_ffff, 0x0a00_0002, 0x1234_5678] {
            let mut e = d;
            let old = get32(&e, 12);
            put32(&mut e, 12, new);
            fix32(&mut e, 10, old, new);
            assert_eq!(checksum(&e), 0, "{new:#x}");
        }
    }
}
