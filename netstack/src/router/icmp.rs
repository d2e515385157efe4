//! ICMP error messages (RFC 792) and their rate limit (RFC 1812 §4.3.2.8).

use super::ipv4::{checksum, Ipv4Hdr};
use crate::wire::{
    ETHERTYPE, ETHERTYPE_IPV4, ETH_DST, ETH_HDR_LEN, ETH_SRC, ICMP_CHECKSUM, ICMP_CODE,
    ICMP_HDR_LEN, ICMP_REST, ICMP_TYPE, IPPROTO_ICMP, IPV4_CHECKSUM, IPV4_DST, IPV4_FLAGS_FRAG,
    IPV4_IDENT, IPV4_MIN_HDR, IPV4_PROTOCOL, IPV4_SRC, IPV4_TOS, IPV4_TOTAL_LEN, IPV4_TTL,
    IPV4_VER_IHL,
};
use crate::MacAddr;

/// ICMP type Echo Reply.
pub const ICMP_ECHO_REPLY: u8 = 0;
/// ICMP type Echo Request.
pub const ICMP_ECHO_REQUEST: u8 = 8;
/// ICMP type Destination Unreachable.
pub const ICMP_DEST_UNREACH: u8 = 3;
/// Code: net unreachable.
pub const ICMP_NET_UNREACH: u8 = 0;
/// Code: fragmentation needed and DF set (RFC 792; RFC 1191 §4 puts the next-hop MTU in the
/// low 16 bits of the header's second word).
pub const ICMP_FRAG_NEEDED: u8 = 4;
/// Code: source route failed.
pub const ICMP_SR_FAILED: u8 = 5;
/// ICMP type Time Exceeded.
pub const ICMP_TIME_EXCEEDED: u8 = 11;
/// Code: time to live exceeded in transit.
pub const ICMP_TTL_EXCEEDED: u8 = 0;
/// ICMP type Parameter Problem.
pub const ICMP_PARAMETER_PROBLEM: u8 = 12;
/// Code: the pointer indicates the error.
pub const ICMP_PP_POINTER: u8 = 0;

/// TTL of the errors we send (Linux's `ip_default_ttl`).
pub const ICMP_TTL: u8 = 64;
/// Type of service of the errors we send: precedence 6, internetwork control
/// (RFC 1812 §4.3.2.5; Linux uses the same).
pub const ICMP_TOS: u8 = 0xc0;

/// Largest ICMP error datagram (IP header included): RFC 1812 §4.3.2.3 asks for as much of
/// the offending datagram as fits without the error exceeding 576 bytes.
pub const ICMP_ERROR_MAX_DATAGRAM: usize = 576;
/// Most bytes of the offending datagram an error quotes: 576 − IP header 20 − ICMP header 8.
pub const ICMP_QUOTE_MAX: usize = ICMP_ERROR_MAX_DATAGRAM - IPV4_MIN_HDR - ICMP_HDR_LEN;
/// Largest error frame [`build_error`] writes: Ethernet 14 + [`ICMP_ERROR_MAX_DATAGRAM`].
pub const ICMP_ERROR_MAX_FRAME: usize = ETH_HDR_LEN + ICMP_ERROR_MAX_DATAGRAM;

/// Whether an ICMP error may be sent about this datagram (RFC 1812 §4.3.2.7): not about an
/// ICMP error, not about a non-first fragment. (Datagrams to broadcast or multicast
/// destinations and from martian sources never get this far.)
pub fn may_send_error_about(h: &Ipv4Hdr, ip: &[u8]) -> bool {
    if h.frag_offset != 0 {
        return false;
    }
    if h.protocol == IPPROTO_ICMP {
        // Types that are errors: unreachable 3, source quench 4, redirect 5, time exceeded
        // 11, parameter problem 12. An ICMP message too short to have a type is not one.
        if let Some(&t) = ip.get(h.header_len) {
            if h.total_len > h.header_len && matches!(t, 3 | 4 | 5 | 11 | 12) {
                return false;
            }
        }
    }
    true
}

/// Build an ICMP error about the datagram `ip` (the bytes after the Ethernet header of the
/// received frame, validated as `h`) into `out`: an Ethernet frame from `src_mac` to
/// `dst_mac`, an IPv4 header from `src_ip` to the datagram's source, and the ICMP message
/// quoting the datagram as received (IP header first) up to [`ICMP_QUOTE_MAX`] bytes, so the
/// error is at most 576 bytes (RFC 1812 §4.3.2.3; RFC 792's minimum is the header and 8 data
/// bytes). `rest` is the second word of the ICMP header (0 for Time Exceeded and Destination
/// Unreachable, the next-hop MTU in the low 16 bits for fragmentation needed; the pointer in
/// the top byte for Parameter Problem). `ip` may be only the first bytes of the datagram (the
/// head of a frame received in several buffers): the quote stops at its end. Returns the frame
/// length, or `None` if `out` is shorter than that.
#[allow(clippy::too_many_arguments)]
pub fn build_error(
    out: &mut [u8],
    dst_mac: MacAddr,
    src_mac: MacAddr,
    src_ip: u32,
    ident: u16,
    icmp_type: u8,
    code: u8,
    rest: u32,
    h: &Ipv4Hdr,
    ip: &[u8],
) -> Option<usize> {
    let quoted = h.total_len.min(ICMP_QUOTE_MAX).min(ip.len());
    let ip_len = IPV4_MIN_HDR + ICMP_HDR_LEN + quoted;
    let len = ETH_HDR_LEN + ip_len;
    let out = out.get_mut(..len)?;
    out[ETH_DST].copy_from_slice(&dst_mac.0);
    out[ETH_SRC].copy_from_slice(&src_mac.0);
    out[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let (iph, icmp) = out[ETH_HDR_LEN..].split_at_mut(IPV4_MIN_HDR);
    iph[IPV4_VER_IHL] = 0x45;
    iph[IPV4_TOS] = ICMP_TOS;
    iph[IPV4_TOTAL_LEN].copy_from_slice(&(ip_len as u16).to_be_bytes());
    iph[IPV4_IDENT].copy_from_slice(&ident.to_be_bytes());
    iph[IPV4_FLAGS_FRAG].copy_from_slice(&[0, 0]);
    iph[IPV4_TTL] = ICMP_TTL;
    iph[IPV4_PROTOCOL] = IPPROTO_ICMP;
    iph[IPV4_CHECKSUM].copy_from_slice(&[0, 0]);
    iph[IPV4_SRC].copy_from_slice(&src_ip.to_be_bytes());
    iph[IPV4_DST].copy_from_slice(&h.src.to_be_bytes());
    let c = checksum(iph);
    iph[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
    icmp[ICMP_TYPE] = icmp_type;
    icmp[ICMP_CODE] = code;
    icmp[ICMP_CHECKSUM].fill(0);
    icmp[ICMP_REST].copy_from_slice(&rest.to_be_bytes());
    icmp[ICMP_HDR_LEN..ICMP_HDR_LEN + quoted].copy_from_slice(&ip[..quoted]);
    let c = checksum(icmp);
    icmp[ICMP_CHECKSUM].copy_from_slice(&c.to_be_bytes());
    Some(len)
}

/// A token bucket: up to `burst` messages at once, refilled at `rate_per_sec` (Linux's
/// `icmp_msgs_per_sec` 1000 and `icmp_msgs_burst` 50 are the defaults of the router). A rate
/// of 0 sends nothing.
#[derive(Copy, Clone, Debug)]
pub struct TokenBucket {
    interval_ns: u64,
    burst: u32,
    tokens: u32,
    last_ns: u64,
}

impl TokenBucket {
    /// A full bucket.
    pub const fn new(rate_per_sec: u32, burst: u32) -> TokenBucket {
        TokenBucket {
            interval_ns: if rate_per_sec == 0 {
                0
            } else {
                1_000_000_000 / rate_per_sec as u64
            },
            burst,
            tokens: if rate_per_sec == 0 { 0 } else { burst },
            last_ns: 0,
        }
    }

    /// Take a token at time `now_ns` if one is available.
    pub fn take(&mut self, now_ns: u64) -> bool {
        if self.interval_ns == 0 {
            return false;
        }
        let elapsed = now_ns.saturating_sub(self.last_ns);
        let add = elapsed / self.interval_ns;
        if add > 0 {
            let t = u64::from(self.tokens) + add;
            if t >= u64::from(self.burst) {
                self.tokens = self.burst;
                self.last_ns = now_ns;
            } else {
                self.tokens = t as u32;
                self.last_ns += add * self.interval_ns;
            }
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_burst_then_rate() {
        let mut b = TokenBucket::new(1000, 5);
        let sent = (0..10).filter(|_| b.take(0)).count();
        assert_eq!(sent, 5);
        assert!(!b.take(999_999));
        assert!(b.take(1_000_000));
        assert!(!b.take(1_000_001));
        // After a long pause, only a burst.
        assert_eq!((0..10).filter(|_| b.take(10_000_000_000)).count(), 5);
        // Over one second at most burst + rate.
        let mut b = TokenBucket::new(1000, 50);
        let sent = (0..2_000_000u64).filter(|i| b.take(i * 500)).count();
        assert!((1000..=1051).contains(&sent), "{sent}");
        let mut b = TokenBucket::new(0, 50);
        assert!(!b.take(0) && !b.take(u64::MAX));
    }
}
