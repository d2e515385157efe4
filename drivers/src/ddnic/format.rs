//! The two descriptor layouts the DD-bit driver runs ([`DescFormat`]): Intel's legacy 16-byte
//! descriptors (82574L, `crate::e1000e`; 8254x SDM §3.2.3 receive, §3.3.3 transmit) and the
//! 82576's advanced ones (`crate::igb`; *Intel 82576EB GbE Controller Datasheet* §7.1.5
//! advanced receive descriptors, §7.2.2.3 advanced transmit data descriptor).
//!
//! Both are 16 bytes, buffer address in the first quadword, and the driver posts an RX buffer
//! the same way in both (address, then a second quadword of 0: legacy clears the status byte,
//! advanced writes a header address of 0, whose bit 0 is where the NIC writes `DD` back). TX
//! write-back is the same too: `DD` in bit 0 of byte 12 (legacy `STA`, advanced `STA` of the
//! data descriptor, §7.2.2.3). What differs is the RX write-back's second quadword and the TX
//! command word, which each format decodes and builds here, `#[inline(always)]`, so the
//! fused burst compiles to the same code per format as if written for it alone.

use super::{RXSTA_EOP, STA_DD};

/// A descriptor layout: the RX write-back's second quadword (`hi`, little-endian bytes 8..16
/// of the descriptor) decoded, and the TX command quadword built.
pub trait DescFormat: 'static {
    /// Byte offset in an RX descriptor of the byte whose bit 0 is `DD` once written back.
    const RX_DD_BYTE: usize;
    /// `DD` in `hi`.
    const RX_DD: u64;
    /// The layout's name for the boot log (`legacy`, `advanced`).
    const NAME: &'static str;
    /// Bytes the NIC wrote into this buffer.
    fn rx_len(hi: u64) -> usize;
    /// End of packet: the frame's last buffer.
    fn rx_eop(hi: u64) -> bool;
    /// Any receive error (CRC, symbol, sequence, RX data error, or a checksum error if
    /// checksum offload were on: the driver turns it off).
    fn rx_error(hi: u64) -> bool;
    /// `EOP` set and no error (the fused burst's whole-frame test; `DD` is checked first).
    fn rx_whole_status(hi: u64) -> bool;
    /// The TX descriptor's second quadword for a buffer of `len` bytes with the legacy
    /// command bits `cmd` (`TXCMD_EOP`, `TXCMD_IFCS`, `TXCMD_RS`) of a frame of `paylen` bytes,
    /// `DD` clear.
    fn tx_word(len: u64, cmd: u8, paylen: u64) -> u64;
}

/// Legacy descriptors (8254x SDM §3.2.3, §3.3.3): RX `hi` is length 15:0, checksum 31:16,
/// status 39:32 (`DD` 32, `EOP` 33), errors 47:40, VLAN tag 63:48; TX `hi` is length 15:0,
/// `CSO` 23:16, `CMD` 31:24, `STA` 35:32.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct Legacy;

/// Status byte and errors byte of a legacy RX `hi` (bits 47:32) that decide a whole frame: all
/// errors clear and `EOP` set. The other status bits (checksum, VLAN) do not matter.
const LEGACY_WHOLE_MASK: u16 = 0xFF00 | RXSTA_EOP as u16;

impl DescFormat for Legacy {
    const RX_DD_BYTE: usize = 12;
    const RX_DD: u64 = (STA_DD as u64) << 32;
    const NAME: &'static str = "legacy";
    #[inline(always)]
    fn rx_len(hi: u64) -> usize {
        (hi & 0xFFFF) as usize
    }
    #[inline(always)]
    fn rx_eop(hi: u64) -> bool {
        (hi >> 32) as u8 & RXSTA_EOP != 0
    }
    #[inline(always)]
    fn rx_error(hi: u64) -> bool {
        (hi >> 40) as u8 != 0
    }
    #[inline(always)]
    fn rx_whole_status(hi: u64) -> bool {
        ((hi >> 32) as u16 & LEGACY_WHOLE_MASK) == u16::from(RXSTA_EOP)
    }
    #[inline(always)]
    fn tx_word(len: u64, cmd: u8, _paylen: u64) -> u64 {
        len | u64::from(cmd) << 24
    }
}

/// Advanced descriptors (82576 datasheet §7.1.5.2, §7.2.2.3). RX write-back `hi`: extended
/// status 19:0 (`DD` 0, `EOP` 1), extended errors 31:20 (`HBO` 23, `L4E` 29, `IPE` 30, `RXE`
/// 31; QEMU's model also the 82574L's CRC/symbol/sequence bits 24–26, 28), packet length
/// 47:32, VLAN tag 63:48 (the first quadword, RSS hash and packet type, is not read). The RX
/// read format's second quadword is the header buffer address: 0, no header split
/// (`SRRCTL.DESCTYPE` = advanced one buffer). TX data descriptor `hi`: `DTALEN` 15:0, `DTYP`
/// 23:20 = 0011b, `DCMD` 31:24 (`EOP` 24, `IFCS` 25, `RS` 27, `DEXT` 29), `STA` 35:32
/// (write-back, `DD` 32), `POPTS` 45:40 (no offload: 0), `PAYLEN` 63:46.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct Advanced;

/// Advanced RX `hi`: `EOP`.
const ADV_RX_EOP: u64 = 1 << 1;
/// Advanced RX `hi`: the extended errors, bits 31:20.
const ADV_RX_ERRORS: u64 = 0xFFF0_0000;
/// Advanced TX `hi`: `DTYP` = data (0011b) and `DCMD.DEXT`.
const ADV_TX_DATA: u64 = 0b0011 << 20 | 1 << 29;
/// Advanced TX `hi`: where `PAYLEN` starts.
const ADV_TX_PAYLEN_SHIFT: u32 = 46;

impl DescFormat for Advanced {
    const RX_DD_BYTE: usize = 8;
    const RX_DD: u64 = STA_DD as u64;
    const NAME: &'static str = "advanced";
    #[inline(always)]
    fn rx_len(hi: u64) -> usize {
        ((hi >> 32) & 0xFFFF) as usize
    }
    #[inline(always)]
    fn rx_eop(hi: u64) -> bool {
        hi & ADV_RX_EOP != 0
    }
    #[inline(always)]
    fn rx_error(hi: u64) -> bool {
        hi & ADV_RX_ERRORS != 0
    }
    #[inline(always)]
    fn rx_whole_status(hi: u64) -> bool {
        (hi as u32 & (ADV_RX_ERRORS as u32 | ADV_RX_EOP as u32)) == ADV_RX_EOP as u32
    }
    #[inline(always)]
    fn tx_word(len: u64, cmd: u8, paylen: u64) -> u64 {
        len | u64::from(cmd) << 24 | ADV_TX_DATA | paylen << ADV_TX_PAYLEN_SHIFT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddnic::{TXCMD_EOP, TXCMD_IFCS, TXCMD_RS};

    #[test]
    fn legacy_decodes_the_8254x_write_back() {
        // length 60, status DD|EOP, errors 0.
        let hi = 60 | 0x03 << 32;
        assert_eq!(Legacy::rx_len(hi), 60);
        assert!(hi & Legacy::RX_DD != 0 && Legacy::rx_eop(hi) && !Legacy::rx_error(hi));
        assert!(Legacy::rx_whole_status(hi));
        // CRC error (errors bit 0).
        let bad = hi | 1 << 40;
        assert!(Legacy::rx_error(bad) && !Legacy::rx_whole_status(bad));
        let cmd = TXCMD_EOP | TXCMD_IFCS | TXCMD_RS;
        assert_eq!(Legacy::tx_word(60, cmd, 60), 60 | 0x0B << 24);
    }

    #[test]
    fn advanced_decodes_the_82576_write_back() {
        // status_error DD|EOP, length 1514 in bits 47:32, VLAN 0.
        let hi = 0x3 | 1514 << 32;
        assert_eq!(Advanced::rx_len(hi), 1514);
        assert!(hi & Advanced::RX_DD != 0 && Advanced::rx_eop(hi));
        assert!(!Advanced::rx_error(hi) && Advanced::rx_whole_status(hi));
        // Not the last buffer: not whole, no error.
        assert!(!Advanced::rx_whole_status(0x1 | 4096 << 32));
        // RXE (bit 31).
        assert!(Advanced::rx_error(hi | 1 << 31) && !Advanced::rx_whole_status(hi | 1 << 31));
        let cmd = TXCMD_EOP | TXCMD_IFCS | TXCMD_RS;
        // DTALEN 60, DTYP 0011b, DCMD EOP|IFCS|RS|DEXT = 0x2B, PAYLEN 60.
        assert_eq!(
            Advanced::tx_word(60, cmd, 60),
            60 | 0x3 << 20 | 0x2B << 24 | 60 << 46
        );
    }
}
