//! IPv4 fragmentation (RFC 791 §3.2 "Fragmentation and Reassembly", RFC 1812 §4.2.2.7 and
//! §5.2.6), sans I/O: the caller hands in a frame the router has already rewritten for
//! forwarding ([`Action::Fragment`](super::Action::Fragment)) as scatter segments and gets the
//! fragments, one full Ethernet frame at a time, written into buffers of its own.
//!
//! Each fragment:
//! - starts with the original Ethernet header (the rewritten MACs and EtherType);
//! - carries the original IPv4 header, options included, in the first fragment; later
//!   fragments carry only the options whose copy flag is set (RFC 791 §3.1: the high bit of the
//!   option type; Security, Loose and Strict Source Route do, Record Route and Timestamp do not),
//!   padded with End of Option List to a multiple of 4 bytes;
//! - has its fragment offset (8-byte units) added to the original's, so an already fragmented
//!   datagram is fragmented again correctly; MF on every fragment but the last, and on the last
//!   too when the original had MF (it was not the original datagram's end);
//! - holds as many payload bytes as fit in the MTU, a multiple of 8 bytes except in the last
//!   fragment; total length and header checksum are its own.
//!
//! Identification, TOS, TTL (already decremented), protocol and addresses are copied. A
//! datagram that already fits in the MTU comes out as one fragment, unchanged.

use super::ipv4::{self, IPV4_DF, IPV4_FRAG_OFFSET, IPV4_MF};
use crate::wire::{
    ETHERTYPE, ETHERTYPE_IPV4, ETH_HDR_LEN, IPV4_FLAGS_FRAG, IPV4_MAX_OPTIONS, IPV4_MIN_HDR,
    IPV4_TOTAL_LEN, IPV4_VER_IHL,
};

/// Why a frame cannot be fragmented.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum FragError {
    /// The datagram is longer than the MTU and has DF set: it must not be fragmented (the
    /// router answers it with Destination Unreachable code 4 instead, RFC 1191 §4).
    DontFragment,
    /// The MTU leaves no room for the header and 8 payload bytes (RFC 791: a fragment's data is
    /// a multiple of 8 bytes); every MTU of at least 68 bytes fits any header.
    MtuTooSmall,
    /// Not an IPv4 frame: EtherType not IPv4, version not 4, IHL below 5, total length below
    /// the header, bad header checksum, a malformed option (length below 2 or past the
    /// header), or a fragment offset that would pass 65535 bytes.
    BadHeader,
    /// The first segment does not hold the Ethernet and whole IPv4 header.
    HeadTooShort,
    /// The segments hold fewer bytes than 14 + the total length.
    Truncated,
    /// The buffer given to [`Fragmenter::next_into`] is shorter than the next fragment
    /// (`need` bytes, [`Fragmenter::next_len`]); nothing was written.
    BufferTooSmall {
        /// Bytes the next fragment needs.
        need: usize,
    },
}

impl core::fmt::Display for FragError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FragError::DontFragment => f.write_str("datagram longer than the MTU with DF set"),
            FragError::MtuTooSmall => f.write_str("MTU below the IPv4 header + 8 bytes"),
            FragError::BadHeader => f.write_str("not a valid IPv4 header"),
            FragError::HeadTooShort => f.write_str("headers not in the first segment"),
            FragError::Truncated => f.write_str("frame shorter than its IPv4 total length"),
            FragError::BufferTooSmall { need } => {
                write!(f, "fragment buffer too small ({need} bytes needed)")
            }
        }
    }
}

/// The fragments of one frame, produced one at a time ([`Fragmenter::next_into`]).
#[derive(Clone, Debug)]
pub struct Fragmenter<'a> {
    /// The frame, in pieces; their concatenation starts with the Ethernet header.
    segs: &'a [&'a [u8]],
    /// Ethernet header and the original IPv4 header (options included) of the first fragment.
    first_hdr: [u8; ETH_HDR_LEN + IPV4_MIN_HDR + IPV4_MAX_OPTIONS],
    /// Its IPv4 header length in bytes.
    first_hl: usize,
    /// Ethernet header and IPv4 header (copied options only) of the later fragments.
    rest_hdr: [u8; ETH_HDR_LEN + IPV4_MIN_HDR + IPV4_MAX_OPTIONS],
    /// Its IPv4 header length in bytes.
    rest_hl: usize,
    /// Payload bytes of the datagram (total length − header).
    payload_len: usize,
    /// Payload bytes per fragment (multiples of 8): the first, and the later ones.
    first_data: usize,
    rest_data: usize,
    /// The original flags and offset word (offset in 8-byte units, MF).
    orig_frag: u16,
    /// Payload bytes written out so far.
    done: usize,
    /// Fragments written out so far, and in all.
    emitted: usize,
    count: usize,
    /// Read cursor: segment and byte in it (of the next payload byte to copy).
    seg: usize,
    seg_off: usize,
}

impl<'a> Fragmenter<'a> {
    /// Prepare the fragments of the frame `segments` (segment 0 starts with the Ethernet
    /// header and holds it and the whole IPv4 header; the concatenation is the frame, Ethernet
    /// padding after the datagram ignored) for an egress IP MTU of `mtu` bytes (the largest
    /// fragment total length). A datagram that fits comes out as one fragment, unchanged. See
    /// [`FragError`] for what is refused.
    pub fn new(segments: &'a [&'a [u8]], mtu: u16) -> Result<Fragmenter<'a>, FragError> {
        let head = segments.first().copied().unwrap_or(&[]);
        if head.len() < ETH_HDR_LEN + IPV4_MIN_HDR {
            let total: usize = segments.iter().map(|s| s.len()).sum();
            return Err(match total < ETH_HDR_LEN + IPV4_MIN_HDR {
                true => FragError::Truncated,
                false => FragError::HeadTooShort,
            });
        }
        if head[ETHERTYPE] != ETHERTYPE_IPV4.to_be_bytes() {
            return Err(FragError::BadHeader);
        }
        let ip = &head[ETH_HDR_LEN..];
        let hl = usize::from(ip[IPV4_VER_IHL] & 0x0f) * 4;
        if ip[IPV4_VER_IHL] >> 4 != 4 || hl < IPV4_MIN_HDR {
            return Err(FragError::BadHeader);
        }
        if hl > ip.len() {
            return Err(FragError::HeadTooShort);
        }
        let total_len = usize::from(ipv4::be16(ip, IPV4_TOTAL_LEN.start));
        if total_len < hl || ipv4::ones_sum(&ip[..hl]) != 0xffff {
            return Err(FragError::BadHeader);
        }
        let frame_len: usize = segments.iter().map(|s| s.len()).sum();
        if frame_len < ETH_HDR_LEN + total_len {
            return Err(FragError::Truncated);
        }
        let orig_frag = ipv4::be16(ip, IPV4_FLAGS_FRAG.start);
        let payload_len = total_len - hl;
        if usize::from(orig_frag & IPV4_FRAG_OFFSET) * 8 + payload_len > usize::from(u16::MAX) {
            return Err(FragError::BadHeader);
        }
        let mut first_hdr = [0u8; ETH_HDR_LEN + IPV4_MIN_HDR + IPV4_MAX_OPTIONS];
        first_hdr[..ETH_HDR_LEN + hl].copy_from_slice(&head[..ETH_HDR_LEN + hl]);
        let mut rest_hdr = [0u8; ETH_HDR_LEN + IPV4_MIN_HDR + IPV4_MAX_OPTIONS];
        rest_hdr[..ETH_HDR_LEN + IPV4_MIN_HDR].copy_from_slice(&head[..ETH_HDR_LEN + IPV4_MIN_HDR]);
        let opts = copied_options(
            &ip[IPV4_MIN_HDR..hl],
            &mut rest_hdr[ETH_HDR_LEN + IPV4_MIN_HDR..],
        )
        .ok_or(FragError::BadHeader)?;
        let rest_hl = IPV4_MIN_HDR + opts;
        let mtu = usize::from(mtu);
        let (first_data, rest_data, count) = if total_len <= mtu {
            (payload_len, payload_len, 1)
        } else if orig_frag & IPV4_DF != 0 {
            return Err(FragError::DontFragment);
        } else if mtu < hl + 8 {
            return Err(FragError::MtuTooSmall);
        } else {
            // rest_hl ≤ hl, so the later fragments have room for 8 bytes too.
            let first = (mtu - hl) & !7;
            let rest = (mtu - rest_hl) & !7;
            (first, rest, 1 + (payload_len - first).div_ceil(rest))
        };
        Ok(Fragmenter {
            segs: segments,
            first_hdr,
            first_hl: hl,
            rest_hdr,
            rest_hl,
            payload_len,
            first_data,
            rest_data,
            orig_frag,
            done: 0,
            emitted: 0,
            count,
            seg: 0,
            seg_off: ETH_HDR_LEN + hl,
        })
    }

    /// Fragments in all (1 when the datagram fits the MTU).
    pub fn count(&self) -> usize {
        self.count
    }

    /// Fragments not yet written.
    pub fn remaining(&self) -> usize {
        self.count - self.emitted
    }

    /// The next fragment's length in bytes (Ethernet header included), `None` when all are
    /// written.
    pub fn next_len(&self) -> Option<usize> {
        let (hl, data) = self.next_shape()?;
        Some(ETH_HDR_LEN + hl + data)
    }

    /// Header and payload length of the next fragment.
    fn next_shape(&self) -> Option<(usize, usize)> {
        if self.emitted == self.count {
            return None;
        }
        let (hl, max) = match self.emitted {
            0 => (self.first_hl, self.first_data),
            _ => (self.rest_hl, self.rest_data),
        };
        Some((hl, max.min(self.payload_len - self.done)))
    }

    /// Write the next fragment, a whole Ethernet frame, into the start of `out` and return its
    /// length in bytes; `Ok(None)` when every fragment is written.
    /// [`FragError::BufferTooSmall`] (nothing written, the fragment is still next) when `out`
    /// is shorter than [`Fragmenter::next_len`].
    pub fn next_into(&mut self, out: &mut [u8]) -> Result<Option<usize>, FragError> {
        let Some((hl, data)) = self.next_shape() else {
            return Ok(None);
        };
        let len = ETH_HDR_LEN + hl + data;
        let Some(out) = out.get_mut(..len) else {
            return Err(FragError::BufferTooSmall { need: len });
        };
        let hdr = match self.emitted {
            0 => &self.first_hdr,
            _ => &self.rest_hdr,
        };
        out[..ETH_HDR_LEN + hl].copy_from_slice(&hdr[..ETH_HDR_LEN + hl]);
        let last = self.emitted + 1 == self.count;
        let mf = match last {
            true => self.orig_frag & IPV4_MF,
            false => IPV4_MF,
        };
        // `done` is a multiple of 8 (every fragment but the last carries a multiple of 8), and
        // offset × 8 + payload ≤ 65535 was checked: the sum fits in 13 bits.
        let offset = (self.orig_frag & IPV4_FRAG_OFFSET) + (self.done / 8) as u16;
        let flags = (self.orig_frag & !(IPV4_MF | IPV4_FRAG_OFFSET)) | mf | offset;
        let ip = &mut out[ETH_HDR_LEN..];
        ip[IPV4_VER_IHL] = 0x40 | (hl / 4) as u8;
        ip[IPV4_TOTAL_LEN].copy_from_slice(&((hl + data) as u16).to_be_bytes());
        ip[IPV4_FLAGS_FRAG].copy_from_slice(&flags.to_be_bytes());
        ipv4::fill_checksum(&mut ip[..hl]);
        self.copy_payload(&mut ip[hl..]);
        self.done += data;
        self.emitted += 1;
        Ok(Some(len))
    }

    /// Copy the next `dst.len()` payload bytes from the segments (checked in
    /// [`Fragmenter::new`] to hold the whole datagram) and advance the cursor.
    fn copy_payload(&mut self, mut dst: &mut [u8]) {
        while !dst.is_empty() {
            let Some(seg) = self.segs.get(self.seg) else {
                return;
            };
            let avail = seg.get(self.seg_off..).unwrap_or(&[]);
            if avail.is_empty() {
                self.seg += 1;
                self.seg_off = 0;
                continue;
            }
            let n = avail.len().min(dst.len());
            let (now, later) = dst.split_at_mut(n);
            now.copy_from_slice(&avail[..n]);
            dst = later;
            self.seg_off += n;
        }
    }
}

/// Copy the options of `opts` (the bytes after a header's fixed 20) whose copy flag is set
/// (RFC 791 §3.1: bit 0 of the option type) into `out`, padded with End of Option List (0) to
/// a multiple of 4 bytes; returns the bytes written, or `None` for a malformed option (a
/// length below 2 or past the options).
fn copied_options(opts: &[u8], out: &mut [u8]) -> Option<usize> {
    let mut i = 0;
    let mut n = 0;
    while i < opts.len() {
        let t = opts[i];
        let len = match t {
            0 => break,
            1 => 1,
            _ => {
                let l = usize::from(*opts.get(i + 1)?);
                if l < 2 || i + l > opts.len() {
                    return None;
                }
                l
            }
        };
        if t & 0x80 != 0 {
            out[n..n + len].copy_from_slice(&opts[i..i + len]);
            n += len;
        }
        i += len;
    }
    let padded = n.next_multiple_of(4);
    out[n..padded].fill(0);
    Some(padded)
}

#[cfg(test)]
mod tests;
