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
