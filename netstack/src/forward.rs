//! The per-frame forwarding decision and in-place rewrite (run to completion, no allocation).

use crate::config::Mode;
use crate::counters::DropReason;
pub use crate::wire::ETH_HDR_LEN;
use crate::wire::{ETH_DST, ETH_SRC};
use crate::MacAddr;

/// What to do with a frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum Verdict {
    /// Transmit it (already rewritten) on the other port.
    Forward,
    /// Drop it and count it under the reason.
    Drop(DropReason),
}

/// Decide and rewrite one frame in place for transmission out of a port whose MAC is
/// `out_mac` towards `out_peer`.
///
/// - [`Mode::Io`]: the frame is left untouched.
/// - [`Mode::L2`] (testpmd `mac` mode): destination MAC := `out_peer`, source MAC :=
///   `out_mac`; the rest (EtherType, 802.1Q tags, payload) is untouched.
///
/// Frames shorter than an Ethernet header are dropped as [`DropReason::Runt`] in every mode.
#[inline]
pub fn forward_frame(mode: Mode, frame: &mut [u8], out_mac: MacAddr, out_peer: MacAddr) -> Verdict {
    if frame.len() < ETH_HDR_LEN {
        return Verdict::Drop(DropReason::Runt);
    }
    if mode == Mode::L2 {
        frame[ETH_DST].copy_from_slice(&out_peer.0);
        frame[ETH_SRC].copy_from_slice(&out_mac.0);
    }
    Verdict::Forward
}

/// The `l2` rewrite of [`forward_frame`] prepared once per burst: the frame's first 12 bytes
/// (destination then source MAC, IEEE 802.3 §3.2) as one 8-byte and one 4-byte store instead of
/// two 6-byte copies. `io` mode leaves frames alone.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct MacRewrite {
    /// `None` in `io` mode.
    words: Option<(u64, u32)>,
}

impl MacRewrite {
    /// The rewrite `forward_frame(mode, _, out_mac, out_peer)` does.
    pub fn new(mode: Mode, out_mac: MacAddr, out_peer: MacAddr) -> MacRewrite {
        let mut b = [0u8; 12];
        b[ETH_DST].copy_from_slice(&out_peer.0);
        b[ETH_SRC].copy_from_slice(&out_mac.0);
        let lo = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let hi = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        MacRewrite {
            words: (mode == Mode::L2).then_some((lo, hi)),
        }
    }

    /// [`forward_frame`] with the prepared addresses: [`Verdict::Drop`] (`runt`) for a frame
    /// shorter than an Ethernet header, else the addresses written and [`Verdict::Forward`].
    #[inline(always)]
    pub fn apply(&self, frame: &mut [u8]) -> Verdict {
        match self.words {
            Some(words) => Self::apply_words::<true>(words, frame),
            None => Self::apply_words::<false>((0, 0), frame),
        }
    }

    /// The prepared addresses as one 8-byte and one 4-byte word (`None` in `io` mode), for a
    /// caller that picks its loop per mode ([`MacRewrite::apply_words`]).
    #[inline(always)]
    pub fn words(&self) -> Option<(u64, u32)> {
        self.words
    }

    /// [`MacRewrite::apply`] with the mode a constant: `L2` writes `words` (from
    /// [`MacRewrite::words`]); without it `words` is ignored (`io`). No per-frame mode test.
    #[inline(always)]
    pub fn apply_words<const L2: bool>(words: (u64, u32), frame: &mut [u8]) -> Verdict {
        let Some(head) = frame.first_chunk_mut::<ETH_HDR_LEN>() else {
            return Verdict::Drop(DropReason::Runt);
        };
        if L2 {
            let (a, rest) = head.split_at_mut(8);
            a.copy_from_slice(&words.0.to_le_bytes());
            rest[..4].copy_from_slice(&words.1.to_le_bytes());
        }
        Verdict::Forward
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ETHERTYPE, ETHERTYPE_IPV4};
    use smoltcp::wire::{EthernetAddress, EthernetFrame, EthernetProtocol};

    const OUT: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
    const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0x0b, 2]);

    fn sample() -> [u8; 64] {
        let mut f = [0u8; 64];
        f[ETH_DST].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[ETH_SRC].copy_from_slice(&[2, 0, 0, 0, 0x0a, 2]);
        f[ETHERTYPE].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        for (i, b) in f[ETH_HDR_LEN..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    #[test]
    fn l2_rewrites_only_addresses() {
        let orig = sample();
        let mut f = orig;
        assert_eq!(forward_frame(Mode::L2, &mut f, OUT, PEER), Verdict::Forward);
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress(PEER.0));
        assert_eq!(eth.src_addr(), EthernetAddress(OUT.0));
        assert_eq!(eth.ethertype(), EthernetProtocol::Ipv4);
        assert_eq!(&f[ETHERTYPE.start..], &orig[ETHERTYPE.start..]);
    }

    #[test]
    fn mac_rewrite_is_forward_frame() {
        for mode in [Mode::L2, Mode::Io] {
            for len in [0, 13, 14, 60] {
                let mut a = sample();
                let mut b = a;
                let r = MacRewrite::new(mode, OUT, PEER);
                assert_eq!(
                    r.apply(&mut a[..len]),
                    forward_frame(mode, &mut b[..len], OUT, PEER),
                    "{mode:?} {len}"
                );
                assert_eq!(a, b, "{mode:?} {len}");
            }
        }
        let mut f = sample();
        MacRewrite::new(Mode::L2, OUT, PEER).apply(&mut f);
        assert_eq!(&f[ETH_DST], &PEER.0);
        assert_eq!(&f[ETH_SRC], &OUT.0);
    }

    #[test]
    fn io_is_untouched() {
        let orig = sample();
        let mut f = orig;
        assert_eq!(forward_frame(Mode::Io, &mut f, OUT, PEER), Verdict::Forward);
        assert_eq!(f, orig);
    }

    #[test]
    fn runts_are_dropped() {
        let mut f = [0u8; ETH_HDR_LEN - 1];
        assert_eq!(
            forward_frame(Mode::L2, &mut f, OUT, PEER),
            Verdict::Drop(DropReason::Runt)
        );
        assert_eq!(f, [0u8; ETH_HDR_LEN - 1]);
        let mut f = [0u8; ETH_HDR_LEN];
        assert_eq!(forward_frame(Mode::Io, &mut f, OUT, PEER), Verdict::Forward);
    }
}
