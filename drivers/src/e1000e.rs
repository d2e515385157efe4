//! Intel 82574L (e1000e, PCI 8086:10D3) bring-up on the DD-bit driver ([`crate::ddnic`]): the
//! rings, the fused path and TX completion are [`DdNic`]'s (legacy descriptors, one queue pair,
//! poll mode); this module resets the NIC, finds its MAC, brings the link up within a bound,
//! sets the receive filter for the forwarding mode and the receive and transmit units, and
//! reads the NIC's own counters off the hot path ([`MmioRegs`]).
//!
//! References: *Intel 82574 GbE Controller Family Datasheet* (rev. 3.4): §4.6 the software
//! initialization sequence, §6 the NVM (EEPROM) map (Ethernet address in words 0x00–0x02), §7.1
//! receive and §7.2 transmit (legacy descriptors), §10.2 the register descriptions (each
//! register below by name and offset, as the datasheet lists them). Tested on QEMU's model of it (`-device e1000e`, hw/net/e1000e_core.c), not silicon.
//!
//! Choices and QEMU's model (each handled or stated):
//!
//! * Legacy descriptors (`RFCTL.EXSTEN` clear, `RCTL.DTYP` 00): the 16-byte layout the DD
//!   driver already has; packet split is never enabled (QEMU aborts on a `PSRCTL.BSIZE0`/`1`
//!   of 0 with `RCTL.DTYP` = split: we write neither).
//! * One 4,096-byte buffer per page (`RCTL.BSEX` with `BSIZE` 11b), the frame at the page's
//!   start ([`crate::nic::Nic::FRAME_OFFSET`] 0). A frame longer than a page (MTU 9000)
//!   arrives in several descriptors: the fused burst collects them and sends the frame, zero
//!   copy, as as many TX descriptors, up to [`crate::nic::MAX_FRAME_PAGES`] buffers (more are
//!   dropped and counted `too_big`; `crate::ddnic`'s `forward` module). The staged path
//!   (`rx_burst`) does not collect: there such a frame is dropped as `too_big`.
//! * `RCTL.SECRC`: the NIC strips the FCS (without it QEMU appends four zero bytes and counts
//!   them in the length).
//! * `RXCSUM` 0: no receive checksum offload, so the `errors` byte carries frame errors only
//!   (CRC, symbol, sequence, RX data error) and any error drops the frame (counted
//!   [`crate::nic::DriverStats::rx_errors`]).
//! * The ring holds `RING_SIZE - 1` buffers at most (`RDT` never reaches `RDH` from behind:
//!   that would read as an empty ring) and the tail is masked into the ring: QEMU stops RX
//!   silently when `RDT` ≥ `RDLEN`/16.
//! * A frame that does not fit the free descriptors waits in QEMU's backend queue (silicon drops
//!   it and counts `RNBC`/`MPC`): under QEMU nothing is lost while the driver lags.
//! * A `TDT` write makes QEMU send everything up to it at once, so QEMU never shows a full TX
//!   ring; the simulated NIC completes TX only when asked ([`crate::sim::dd`]), which does.
//! * Link: QEMU's link is up at reset; after `set_link off/on` or a PHY autonegotiation restart
//!   it comes back 500 ms of virtual time later. The bring-up waits [`LINK_TIMEOUT_MS`] for
//!   `STATUS.LU` and fails by name ([`E1000eError::LinkTimeout`]).
//! * Interrupts: all masked (`IMC`), the driver busy-polls (`ITR` is not used: QEMU clamps it
//!   to at least 500 × 256 ns = 128 µs anyway).
//! * Statistics registers are clear-on-read on silicon (§10.2, statistics); QEMU's `CRCERRS`..`MPC` and
//!   `RNBC` are not, and its model never counts CRC errors. The driver sums what it reads, so
//!   under QEMU a counter that QEMU did raise would be summed again on each read: the figures
//!   are exact on silicon, indicative under QEMU (where they stay 0 in our tests).

use crate::ddnic::{DdInitError, DdNic, DdRegs, DdUnits, CTRL, CTRL_RST, RAH0, RAL0};
use crate::nic::{DriverStats, HwErrorCounters};
use core::cell::Cell;
use core::ptr::NonNull;
use virtio_drivers::Hal;

/// Intel's PCI vendor ID.
pub const VENDOR_INTEL: u16 = 0x8086;
/// The 82574L's PCI device ID.
pub const DEVICE_82574L: u16 = 0x10D3;
/// Bytes of the 82574L's register BAR (BAR 0, memory: 128 KiB).
pub const BAR0_BYTES: usize = 128 * 1024;

/// Device Status (§10.2, 0x00008).
pub const STATUS: usize = 0x0008;
/// `STATUS.LU`: link up.
pub const STATUS_LU: u32 = 1 << 1;
/// `STATUS.SPEED` (bits 7:6, 82574L §10.2.2.2, 82576 §8.2.2): the link speed resolved.
pub const STATUS_SPEED_SHIFT: u32 = 6;

/// The link speed `STATUS.SPEED` names (Mb/s): 00 10, 01 100, 10 and 11 1000 (both
/// datasheets: "11b = 1000 Mb/s" is reserved-as-1000 on the 82574L).
pub fn status_speed_mbps(status: u32) -> u32 {
    match (status >> STATUS_SPEED_SHIFT) & 0b11 {
        0b00 => 10,
        0b01 => 100,
        _ => 1000,
    }
}
/// EEPROM Read (§10.2, 0x00014): write `START` with a word address in bits 15:2, poll
/// `DONE` (bit 1), the word in bits 31:16.
pub const EERD: usize = 0x0014;
/// `EERD.START`.
pub const EERD_START: u32 = 1 << 0;
/// `EERD.DONE`.
pub const EERD_DONE: u32 = 1 << 1;
/// `CTRL.SLU`: set link up (§10.2).
pub const CTRL_SLU: u32 = 1 << 6;
/// `CTRL.ASDE`: auto-speed detection.
pub const CTRL_ASDE: u32 = 1 << 5;
/// `CTRL.PHY_RST`.
pub const CTRL_PHY_RST: u32 = 1 << 31;
/// Interrupt Cause Read (§10.2, 0x000C0; read clears).
pub const ICR: usize = 0x00C0;
/// Interrupt Mask Clear (§10.2, 0x000D8).
pub const IMC: usize = 0x00D8;
/// `RCTL.UPE`: unicast promiscuous (§10.2).
pub const RCTL_UPE: u32 = 1 << 3;
/// `RCTL.MPE`: multicast promiscuous.
pub const RCTL_MPE: u32 = 1 << 4;
/// `RCTL.LPE`: long packets (frames over 1,522 bytes) accepted.
pub const RCTL_LPE: u32 = 1 << 5;
/// `RCTL.BAM`: broadcast accepted.
pub const RCTL_BAM: u32 = 1 << 15;
/// `RCTL.BSIZE` = 11b: with `BSEX`, 4,096-byte buffers.
pub const RCTL_BSIZE_4096: u32 = 0b11 << 16;
/// `RCTL.BSEX`: buffer size × 16.
pub const RCTL_BSEX: u32 = 1 << 25;
/// `RCTL.SECRC`: strip the Ethernet CRC.
pub const RCTL_SECRC: u32 = 1 << 26;
/// `TCTL.PSP`: pad short packets (§10.2).
pub const TCTL_PSP: u32 = 1 << 3;
/// `TCTL.CT` = 0x0F (collision threshold, the datasheet's value).
pub const TCTL_CT: u32 = 0x0F << 4;
/// `TCTL.COLD` = 0x3F (collision distance, full duplex).
pub const TCTL_COLD: u32 = 0x3F << 12;
/// Transmit IPG (§10.2, 0x00410).
pub const TIPG: usize = 0x0410;
/// `TIPG` for copper: IPGT 8, IPGR1 8, IPGR2 6 (the datasheet's default).
pub const TIPG_COPPER: u32 = 8 | 8 << 10 | 6 << 20;
/// Transmit Arbitration Count of queue 0 (§10.2, 0x03840); bit 10 enables the queue
/// (QEMU sends from a queue only with it set).
pub const TARC0: usize = 0x3840;
/// `TARC.ENABLE`.
pub const TARC_ENABLE: u32 = 1 << 10;
/// Receive Checksum Control (§10.2, 0x05000).
pub const RXCSUM: usize = 0x5000;
/// Receive Filter Control (§10.2, 0x05008): `EXSTEN` (bit 15) clear keeps legacy
/// descriptors.
pub const RFCTL: usize = 0x5008;
/// Multicast Table Array (§10.2, 0x05200..0x053FC): 128 words, a 4,096-bit hash filter.
pub const MTA: usize = 0x5200;
/// `RAH.AV`: the receive address is valid.
pub const RAH_AV: u32 = 1 << 31;
/// CRC Error Count (§10.2, 0x04000).
pub const CRCERRS: usize = 0x4000;
/// Missed Packets Count (§10.2, 0x04010).
pub const MPC: usize = 0x4010;
/// Receive No Buffers Count (§10.2, 0x040A0).
pub const RNBC: usize = 0x40A0;

/// How long the NIC may take to clear `CTRL.RST`: 10 ms (the datasheet asks for 1 ms).
pub const RESET_TIMEOUT_US: u64 = 10_000;
/// How long one EEPROM word read may take: 10 ms.
pub const EEPROM_TIMEOUT_US: u64 = 10_000;
/// How long the bring-up waits for `STATUS.LU`: 2 s (QEMU's autonegotiation takes 500 ms of
/// virtual time; silicon's 1000BASE-T autonegotiation about as long).
pub const LINK_TIMEOUT_MS: u64 = 2000;

/// Which frames the NIC accepts.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RxFilter {
    /// Every frame (unicast and multicast promiscuous, broadcast): `io` and `l2` forward what
    /// arrives, whatever its destination.
    Promiscuous,
    /// Frames to the port's MAC, broadcast (ARP), and the multicast groups given to
    /// [`set_multicast`]: router mode.
    Router,
}

/// What the bring-up sets.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct E1000eConfig {
    /// The receive filter.
    pub filter: RxFilter,
    /// Largest frame to accept (bytes, without FCS): above 1,518 `RCTL.LPE` is set.
    pub max_frame: usize,
    /// The multicast groups accepted in [`RxFilter::Router`] mode ([`set_multicast`]): an
    /// IPv6 router's all-nodes and solicited-node groups (RFC 4861 §7.2.1: the Neighbor
    /// Solicitations for its addresses go to them); none for IPv4.
    pub multicast: [Option<[u8; 6]>; MAX_MULTICAST],
    /// Also the solicited-node group of the link-local address made from the MAC the
    /// bring-up finds (RFC 4291 Appendix A: its last 24 bits are the MAC's, so the group's MAC
    /// is `33:33:ff` and the MAC's last three bytes, RFC 2464 §7): an IPv6 router's.
    pub link_local_group: bool,
}

/// The groups the filter takes for `cfg` on a port whose MAC is `mac`.
pub(crate) fn filter_groups(
    cfg: &E1000eConfig,
    mac: [u8; 6],
) -> heapless::Vec<[u8; 6], MAX_MULTICAST> {
    let mut groups: heapless::Vec<[u8; 6], MAX_MULTICAST> =
        cfg.multicast.iter().flatten().copied().collect();
    if cfg.link_local_group {
        // Not past MAX_MULTICAST: the caller's groups leave it room (a full list keeps its own).
        let _ = groups.push([0x33, 0x33, 0xff, mac[3], mac[4], mac[5]]);
    }
    groups
}

/// Most multicast groups a port's filter is given ([`E1000eConfig::multicast`]): all-nodes,
/// and the solicited-node groups of a global, a Subnet-Router anycast and a link-local
/// address, with room.
pub const MAX_MULTICAST: usize = 6;

/// Why the bring-up failed; the NIC is left reset (no ring, no DMA).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum E1000eError {
    /// `CTRL.RST` did not clear within [`RESET_TIMEOUT_US`].
    ResetTimeout,
    /// `RAL0`/`RAH0` held no valid address and EEPROM word `word` did not read within
    /// [`EEPROM_TIMEOUT_US`] (`EERD.DONE` never set).
    EepromTimeout {
        /// The word address.
        word: u8,
    },
    /// The MAC found (receive address 0, else the EEPROM) is zero, multicast or all ones.
    BadMac([u8; 6]),
    /// `STATUS.LU` stayed clear for [`LINK_TIMEOUT_MS`] after `CTRL.SLU`.
    LinkTimeout {
        /// Milliseconds waited.
        ms: u64,
    },
    /// No DMA memory for a descriptor ring.
    Rings(DdInitError),
}

impl core::fmt::Display for E1000eError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.describe("e1000e", f)
    }
}

impl E1000eError {
    /// The message, naming the driver `chip` (`e1000e`, `igb`: the steps and registers named
    /// are the same on both, [`crate::igb`] runs them too).
    pub fn describe(&self, chip: &str, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::ResetTimeout => write!(
                f,
                "{chip}: CTRL.RST did not clear within {} ms",
                RESET_TIMEOUT_US / 1000
            ),
            Self::EepromTimeout { word } => write!(
                f,
                "{chip}: no MAC in RAL0/RAH0 and EEPROM word {word} unreadable (EERD.DONE not set within {} ms)",
                EEPROM_TIMEOUT_US / 1000
            ),
            Self::BadMac(m) => write!(
                f,
                "{chip}: unusable MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            Self::LinkTimeout { ms } => write!(
                f,
                "{chip}: link down: STATUS.LU still clear {ms} ms after CTRL.SLU (cable, peer, or QEMU set_link off)"
            ),
            Self::Rings(e) => write!(f, "{chip}: descriptor rings: {e:?}"),
        }
    }
}

/// An 82574L port: the DD-bit driver on its register block, frames at offset 0.
pub type E1000e<H, R> = DdNic<H, R, 0>;

/// Reset the 82574L behind `regs`, find its MAC, bring the link up, set the filters and give it
/// its rings. `now_us` is a monotonic clock in µs (the bounded waits).
///
/// # Errors
/// [`E1000eError`], naming what did not answer; the NIC is left reset.
pub fn bring_up<H: Hal, R: DdRegs>(
    regs: R,
    cfg: &E1000eConfig,
    now_us: impl Fn() -> u64,
) -> Result<E1000e<H, R>, E1000eError> {
    bring_up_at::<H, R, 0>(regs, cfg, now_us)
}

/// [`bring_up`] for a port whose frames sit `OFFSET` bytes into their pages (the RX descriptors
/// hold each page's address plus `OFFSET`): 12 beside virtio-net in one core's pair
/// ([`crate::nic::EitherNic`] needs one frame offset for both drivers).
///
/// # Errors
/// As [`bring_up`].
pub fn bring_up_at<H: Hal, R: DdRegs, const OFFSET: usize>(
    regs: R,
    cfg: &E1000eConfig,
    now_us: impl Fn() -> u64,
) -> Result<DdNic<H, R, OFFSET>, E1000eError> {
    let wait = |us: u64, done: &dyn Fn() -> bool| wait_until(&now_us, us, done);
    reset_and_mac(&regs, cfg, &wait)?;
    // No checksum offload; legacy descriptors; then the link.
    regs.write(RXCSUM, 0);
    regs.write(RFCTL, 0);
    regs.write(TIPG, TIPG_COPPER);
    let tarc = regs.read(TARC0);
    regs.write(TARC0, tarc | TARC_ENABLE);
    link_up(&regs, &now_us, &wait)?;
    let rctl = RCTL_BSEX | RCTL_BSIZE_4096 | rctl_filter(cfg);
    let units = DdUnits {
        rctl,
        tctl: TCTL_PSP | TCTL_CT | TCTL_COLD,
        srrctl: None,
        queue_enable: false,
    };
    // `attach` resets the NIC again if it fails (its drop), as `regs` moves into it.
    DdNic::attach(regs, units).map_err(E1000eError::Rings)
}

/// Wait up to `us` µs of `now_us` for `done`; whether it came true (read once more at the
/// deadline).
pub(crate) fn wait_until(now_us: &impl Fn() -> u64, us: u64, done: &dyn Fn() -> bool) -> bool {
    let t0 = now_us();
    loop {
        if done() {
            return true;
        }
        if now_us().wrapping_sub(t0) > us {
            return done();
        }
        core::hint::spin_loop();
    }
}

/// The family's first steps (82574L §4.6, 82576 §4.5: the same registers): interrupts masked
/// around a `CTRL.RST` (bounded by [`RESET_TIMEOUT_US`]), the MAC found ([`read_mac`]) and
/// checked, written to receive address 0 (`AV`), and the multicast table set to `cfg`'s
/// groups ([`filter_groups`]: none for IPv4). Returns the MAC.
///
/// # Errors
/// [`E1000eError::ResetTimeout`], [`E1000eError::EepromTimeout`], [`E1000eError::BadMac`].
pub(crate) fn reset_and_mac<R: DdRegs>(
    regs: &R,
    cfg: &E1000eConfig,
    wait: &dyn Fn(u64, &dyn Fn() -> bool) -> bool,
) -> Result<[u8; 6], E1000eError> {
    regs.write(IMC, u32::MAX);
    let ctrl = regs.read(CTRL);
    regs.write(CTRL, ctrl | CTRL_RST);
    if !wait(RESET_TIMEOUT_US, &|| regs.read(CTRL) & CTRL_RST == 0) {
        return Err(E1000eError::ResetTimeout);
    }
    regs.write(IMC, u32::MAX);
    let _ = regs.read(ICR);
    let mac = read_mac(regs, wait)?;
    if mac == [0; 6] || mac == [0xFF; 6] || mac[0] & 1 != 0 {
        return Err(E1000eError::BadMac(mac));
    }
    regs.write(RAL0, u32::from_le_bytes([mac[0], mac[1], mac[2], mac[3]]));
    regs.write(
        RAH0,
        u32::from(u16::from_le_bytes([mac[4], mac[5]])) | RAH_AV,
    );
    set_multicast(regs, &filter_groups(cfg, mac));
    Ok(mac)
}

/// `CTRL.SLU | ASDE` (the reset bits cleared) and a bounded wait ([`LINK_TIMEOUT_MS`]) for `STATUS.LU`; on timeout the NIC
/// is reset.
///
/// # Errors
/// [`E1000eError::LinkTimeout`], with the milliseconds waited.
pub(crate) fn link_up<R: DdRegs>(
    regs: &R,
    now_us: &impl Fn() -> u64,
    wait: &dyn Fn(u64, &dyn Fn() -> bool) -> bool,
) -> Result<(), E1000eError> {
    link_up_clearing(regs, now_us, wait, 0)
}

/// [`link_up`], also clearing the `CTRL` bits `clear` (the igb's flow control and VLAN mode).
pub(crate) fn link_up_clearing<R: DdRegs>(
    regs: &R,
    now_us: &impl Fn() -> u64,
    wait: &dyn Fn(u64, &dyn Fn() -> bool) -> bool,
    clear: u32,
) -> Result<(), E1000eError> {
    let ctrl = regs.read(CTRL) & !(CTRL_RST | CTRL_PHY_RST | clear);
    regs.write(CTRL, ctrl | CTRL_SLU | CTRL_ASDE);
    let t0 = now_us();
    if !wait(LINK_TIMEOUT_MS * 1000, &|| {
        regs.read(STATUS) & STATUS_LU != 0
    }) {
        let ms = now_us().wrapping_sub(t0) / 1000;
        regs.write(CTRL, CTRL_RST);
        return Err(E1000eError::LinkTimeout { ms });
    }
    Ok(())
}

/// The `RCTL` filter bits of `cfg` (both NICs): broadcast accepted, the CRC stripped
/// (`SECRC`: without it QEMU appends four zero bytes and counts them), unicast and multicast
/// promiscuous in [`RxFilter::Promiscuous`], long packets above 1,518 bytes.
pub(crate) fn rctl_filter(cfg: &E1000eConfig) -> u32 {
    let mut rctl = RCTL_BAM | RCTL_SECRC;
    if cfg.filter == RxFilter::Promiscuous {
        rctl |= RCTL_UPE | RCTL_MPE;
    }
    if cfg.max_frame > 1518 {
        rctl |= RCTL_LPE;
    }
    rctl
}

/// The MAC from receive address 0 when valid (`RAH0.AV`, loaded from the EEPROM at power-up),
/// else from EEPROM words 0–2 (§6, little-endian byte pairs) through `EERD`.
fn read_mac<R: DdRegs>(
    regs: &R,
    wait: &dyn Fn(u64, &dyn Fn() -> bool) -> bool,
) -> Result<[u8; 6], E1000eError> {
    let (lo, hi) = (regs.read(RAL0), regs.read(RAH0));
    if hi & RAH_AV != 0 && (lo != 0 || hi & 0xFFFF != 0) {
        let (l, h) = (lo.to_le_bytes(), hi.to_le_bytes());
        return Ok([l[0], l[1], l[2], l[3], h[0], h[1]]);
    }
    let mut mac = [0u8; 6];
    for word in 0..3u8 {
        regs.write(EERD, u32::from(word) << 2 | EERD_START);
        if !wait(EEPROM_TIMEOUT_US, &|| regs.read(EERD) & EERD_DONE != 0) {
            return Err(E1000eError::EepromTimeout { word });
        }
        let w = (regs.read(EERD) >> 16) as u16;
        mac[2 * usize::from(word)..][..2].copy_from_slice(&w.to_le_bytes());
    }
    Ok(mac)
}

/// The `MTA` bit of multicast address `mac` with `RCTL.MO` = 00 (§10.2): bits 47:36 of
/// the address, a 12-bit index (word = index >> 5, bit = index & 31).
pub fn mta_index(mac: &[u8; 6]) -> u16 {
    (u16::from(mac[4]) >> 4 | u16::from(mac[5]) << 4) & 0xFFF
}

/// Accept exactly the multicast `groups` (besides the unicast MAC and broadcast) in
/// [`RxFilter::Router`] mode: rewrite the 128 `MTA` words (set-up time: 128 register writes).
/// The multicast filter the router uses (no group for IPv4 forwarding; with IPv6 the
/// all-nodes and solicited-node groups, [`E1000eConfig::multicast`]). A hash filter: other
/// groups whose 12 bits match pass too, and the router drops them.
pub fn set_multicast<R: DdRegs>(regs: &R, groups: &[[u8; 6]]) {
    let mut table = [0u32; 128];
    for g in groups {
        let i = mta_index(g);
        table[usize::from(i >> 5)] |= 1 << (i & 31);
    }
    for (k, w) in table.iter().enumerate() {
        regs.write(MTA + 4 * k, *w);
    }
}

/// An 82574L's or 82576's ([`crate::igb`]) register block through its BAR 0 (MMIO,
/// uncached; 128 KiB on both, the counters at the same offsets): volatile 32-bit accesses,
/// reads counted (none on the forwarding path: DD bits are read from descriptor memory, the
/// tails only written) and the NIC's error counters summed when [`DdRegs::hw_stats`] reads
/// them.
pub struct MmioRegs {
    base: NonNull<u8>,
    reads: Cell<u64>,
    hw: Cell<HwErrorCounters>,
    /// The link as last read, and the changes seen.
    link: Cell<(Option<bool>, u64)>,
    /// `STATUS` as read just before this handle reset the NIC ([`DdRegs::reset_device`]:
    /// `quit`'s phase 2, the drop); `None` until then. See [`MmioRegs::status`].
    status_at_reset: Cell<Option<u32>>,
}

// SAFETY: the block is plain MMIO valid on every CPU (identity-mapped, uncached); a handle is
// moved once from the boot CPU to the core that owns the port and used by that core alone (the
// `Cell`s are never shared).
unsafe impl Send for MmioRegs {}

impl MmioRegs {
    /// The register block mapped at `base`.
    ///
    /// # Safety
    /// `base` is the virtual address of an 82574L's or 82576's BAR 0, mapped uncached for
    /// [`BAR0_BYTES`], for as long as the value lives; nothing else drives that NIC.
    pub unsafe fn new(base: NonNull<u8>) -> Self {
        MmioRegs {
            base,
            reads: Cell::new(0),
            hw: Cell::new(HwErrorCounters::default()),
            link: Cell::new((None, 0)),
            status_at_reset: Cell::new(None),
        }
    }

    /// Register reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.get()
    }

    fn at(&self, reg: usize) -> *mut u32 {
        debug_assert!(reg < BAR0_BYTES && reg.is_multiple_of(4));
        // SAFETY: `reg` is a register offset inside the BAR (`new`'s contract).
        unsafe { self.base.as_ptr().add(reg).cast::<u32>() }
    }
}

impl DdRegs for MmioRegs {
    fn read(&self, reg: usize) -> u32 {
        self.reads.set(self.reads.get() + 1);
        // SAFETY: an aligned register of the mapped BAR (`new`'s contract).
        unsafe { self.at(reg).read_volatile() }
    }
    fn write(&self, reg: usize, val: u32) {
        // SAFETY: as `read`.
        unsafe { self.at(reg).write_volatile(val) }
    }
    fn hw_stats(&self, s: &mut DriverStats) {
        let status = self.status();
        let up = status & STATUS_LU != 0;
        let changes = self.note_link(up);
        s.link_up = Some(up);
        s.link_speed_mbps = up.then(|| status_speed_mbps(status));
        s.link_changes = changes;
        let mut hw = self.hw.get();
        hw.missed += u64::from(self.read(MPC));
        hw.crc_errors += u64::from(self.read(CRCERRS));
        hw.no_buffer += u64::from(self.read(RNBC));
        self.hw.set(hw);
        s.hw = Some(hw);
        s.mmio_reads = Some(self.reads.get());
    }
    fn link_up(&self) -> Option<bool> {
        let up = self.status() & STATUS_LU != 0;
        self.note_link(up);
        Some(up)
    }
    fn reset_device(&self) -> bool {
        // `STATUS` kept from before the first reset: the final STATS (taken after `quit`'s
        // phase 2) reports the link as it was while forwarding, not the reset NIC's (QEMU's
        // 82576 clears `STATUS.LU` on `CTRL.RST`), and counts no link change for our reset.
        if self.status_at_reset.get().is_none() {
            self.status_at_reset.set(Some(self.read(STATUS)));
        }
        self.write(CTRL, CTRL_RST);
        true
    }
}

impl MmioRegs {
    /// Another handle on the same register block, its read count and counters from zero: one
    /// per queue pair of a multi-queue port ([`crate::igb::QueueRegs`]), each moved to the
    /// core that owns that queue pair, which writes only its own queue's ring registers.
    pub fn share(&self) -> MmioRegs {
        MmioRegs {
            base: self.base,
            reads: Cell::new(0),
            hw: Cell::new(HwErrorCounters::default()),
            link: Cell::new((None, 0)),
            status_at_reset: Cell::new(None),
        }
    }

    /// `STATUS`: read from the NIC, or, once this handle has reset it, as it was just before
    /// (the reset is ours, not a change on the wire; nothing forwards afterwards).
    fn status(&self) -> u32 {
        match self.status_at_reset.get() {
            Some(status) => status,
            None => self.read(STATUS),
        }
    }

    /// Record the link seen `up` now; returns the changes counted so far (one per flip seen).
    fn note_link(&self, up: bool) -> u64 {
        let (was, mut changes) = self.link.get();
        if was.is_some_and(|w| w != up) {
            changes += 1;
        }
        self.link.set((Some(up), changes));
        changes
    }
}

#[cfg(test)]
mod tests;
