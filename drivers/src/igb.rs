//! Intel 82576 (igb, PCI 8086:10C9; QEMU's `-device igb`) bring-up on the DD-bit driver
//! ([`crate::ddnic`]) with its advanced descriptors ([`Advanced`]): one queue pair (queue 0),
//! poll mode. The rings, the fused path (refill from the page_pool inside the burst, one `RDT`
//! write per [`crate::ddnic::RX_PUBLISH_BATCH`] re-posts, one `TDT` write per TX burst, TX
//! completion by `DD` bits in batches, no register read per frame) are [`DdNic`]'s, shared with
//! the 82574L; so are the steps the two chips share ([`crate::e1000e`]: reset, MAC from
//! receive address 0 or the EEPROM, link wait, the receive filter bits, the multicast table,
//! the register block and its error counters, [`MmioRegs`]). What is the 82576's own is here:
//! `SRRCTL` (buffer size and descriptor type), the queue enables, `RLPML`, flow control.
//!
//! References: *Intel 82576EB Gigabit Ethernet Controller Datasheet* (rev. 2.x): §4.5 the
//! initialization sequence (§4.5.9 receive, §4.5.10 transmit), §7.1.5 advanced receive
//! descriptors, §7.2.2.3 the advanced transmit data descriptor, §8 the registers (each below
//! by name and offset). Queue 0's ring registers are used at their 8254x-compatible aliases
//! (`RDBAL0` 0x0C000 at 0x02800, `SRRCTL0` 0x0C00C at 0x0280C, `RXDCTL0` 0x0C028 at 0x02828,
//! `TDBAL0` 0x0E000 at 0x03800, `TXDCTL0` 0x0E028 at 0x03828: the datasheet's aliases, the
//! offsets Linux's igb programs for queues 0–3), so the ring code is the 82574L's. Tested on
//! QEMU's model (hw/net/igb_core.c), not silicon.
//!
//! Choices (each handled or stated):
//!
//! * Advanced descriptors, one buffer each: `SRRCTL.DESCTYPE` = 001b, `BSIZEPACKET` 4 KiB
//!   (a page; `RCTL.BSIZE` is then ignored). QEMU 8.x always wrote advanced descriptors, its
//!   later models honour `DESCTYPE` (000b: legacy): the driver sets it, so both agree.
//! * A frame longer than a page (MTU 9000) arrives in several descriptors (`EOP` on the last):
//!   the fused burst collects and sends it zero copy up to [`crate::nic::MAX_FRAME_PAGES`]
//!   pages, as for the 82574L; more are dropped and counted `too_big`. With `RCTL.LPE` the
//!   NIC drops frames longer than `RLPML` (set to the MTU's frame plus FCS and one VLAN tag).
//! * `RCTL.SECRC`: the CRC is stripped. `RXCSUM` 0: no checksum offload, so the extended errors
//!   carry frame errors only (any drops the frame, counted `rx_errors`).
//! * VLAN stripping off: `CTRL.VME` cleared (io keeps tags); `RCTL.VFE` clear (no VLAN filter).
//! * Flow control off (`CTRL.RFCE`, `CTRL.TFCE` cleared): an appliance under overload drops and
//!   counts (`MPC`, `RNBC`) rather than pausing its upstream and stalling every flow on the
//!   link. `SRRCTL.DROP_EN` is set: with no free descriptor the queue drops instead of filling
//!   the packet buffer (QEMU ignores it: there the frame waits in its backend queue).
//! * One queue: `MRQC` 0 (no RSS, no VMDq); the queues are enabled (`RXDCTL.ENABLE`,
//!   `TXDCTL.ENABLE`) before the units and `RXDCTL.ENABLE` read back within
//!   [`QUEUE_TIMEOUT_US`] before a buffer is posted (§4.5.9).
//! * Interrupts masked (`IMC`, `EIMC`); the driver busy-polls.
//! * Receive filter: promiscuous (unicast and multicast) in io/l2 mode; unicast, broadcast and
//!   the multicast table ([`crate::e1000e::set_multicast`], the same `MTA`) in router mode.
//! * Bad input: a link that never comes up is [`E1000eError::LinkTimeout`] (through
//!   [`IgbError::Family`]); a device that never sets `DD` leaves the rings as they were (the
//!   burst reads DD from memory and returns with nothing, never waits); a queue that does not
//!   enable is [`IgbError::QueueTimeout`]. None panics or hangs.
//!
//! Several queue pairs with RSS (issue 41, item 3): [`finish_queues`] and [`QueueRegs`]
//! (`igb/mq.rs`).

use crate::ddnic::{Advanced, DdNic, DdRegs, DdUnits, CTRL, CTRL_RST, RXDCTL, XDCTL_ENABLE};
use crate::e1000e::{
    link_up_clearing, rctl_filter, reset_and_mac, wait_until, E1000eConfig, E1000eError, RFCTL,
    RXCSUM, TCTL_COLD, TCTL_CT, TCTL_PSP,
};
use virtio_drivers::Hal;

pub use crate::e1000e::{MmioRegs, RxFilter, BAR0_BYTES, VENDOR_INTEL};

/// The 82576's PCI device ID (copper, QEMU's model).
pub const DEVICE_82576: u16 = 0x10C9;

/// igb-family functions Gannet finds but does not bind (PCI device ID, name; vendor 8086),
/// listed at boot by name: the IDs of Linux's igb and igbvf drivers (e1000_hw.h). Only the
/// 82576 copper function (QEMU's `igb`) is driven; the others differ in PHY, NVM and
/// register details not tested here.
pub const IGB_FAMILY_UNBOUND: &[(u16, &str)] = &[
    (0x10A7, "82575EB copper"),
    (0x10A9, "82575EB fiber/serdes"),
    (0x10D6, "82575GB quad copper"),
    (0x10E6, "82576 fiber"),
    (0x10E7, "82576 serdes"),
    (0x10E8, "82576 quad copper"),
    (0x1526, "82576 quad copper ET2"),
    (0x150A, "82576 NS"),
    (0x1518, "82576 NS serdes"),
    (0x150D, "82576 serdes quad"),
    (0x10CA, "82576 virtual function (igbvf)"),
    (0x150E, "82580 copper"),
    (0x150F, "82580 fiber"),
    (0x1510, "82580 serdes"),
    (0x1511, "82580 SGMII"),
    (0x1516, "82580 dual copper"),
    (0x1527, "82580 quad fiber"),
    (0x1521, "I350 copper"),
    (0x1522, "I350 fiber"),
    (0x1523, "I350 serdes"),
    (0x1524, "I350 SGMII"),
    (0x1520, "I350 virtual function (igbvf)"),
    (0x1F40, "I354 backplane 1G"),
    (0x1F41, "I354 SGMII"),
    (0x1F45, "I354 backplane 2.5G"),
    (0x1533, "I210 copper"),
    (0x1534, "I210 copper OEM1"),
    (0x1535, "I210 copper IT"),
    (0x1536, "I210 fiber"),
    (0x1537, "I210 serdes"),
    (0x1538, "I210 SGMII"),
    (0x157B, "I210 copper (flashless)"),
    (0x157C, "I210 serdes (flashless)"),
    (0x1539, "I211 copper"),
    (0x0438, "DH89xxCC SGMII"),
    (0x043A, "DH89xxCC serdes"),
    (0x043C, "DH89xxCC backplane"),
    (0x0440, "DH89xxCC SFP"),
];

/// Write PHY register `reg` through `MDIC` and wait (bounded) for `READY`.
///
/// # Errors
/// [`IgbError::PhyTimeout`]: no `READY` within [`MDIC_TIMEOUT_US`], or `MDIC.E`.
fn phy_write<R: DdRegs>(
    regs: &R,
    wait: &dyn Fn(u64, &dyn Fn() -> bool) -> bool,
    reg: u8,
    data: u16,
) -> Result<(), IgbError> {
    regs.write(
        MDIC,
        u32::from(data) | u32::from(reg) << 16 | MDIC_WRITE_PHY1,
    );
    if !wait(MDIC_TIMEOUT_US, &|| regs.read(MDIC) & MDIC_READY != 0)
        || regs.read(MDIC) & MDIC_ERROR != 0
    {
        regs.write(CTRL, CTRL_RST);
        return Err(IgbError::PhyTimeout { reg });
    }
    Ok(())
}

/// The name of igb-family device `device` that is not bound ([`IGB_FAMILY_UNBOUND`]), if it
/// is one.
pub fn unbound_family_name(device: u16) -> Option<&'static str> {
    IGB_FAMILY_UNBOUND
        .iter()
        .find(|&&(id, _)| id == device)
        .map(|&(_, name)| name)
}

/// MDI Control (§8.2.4, 0x00020): a PHY register access. `DATA` 15:0, `REGADD` 20:16, `PHYADD`
/// 25:21 (the 82576's internal PHY is address 1), `OP` 27:26 (01b write, 10b read), `READY`
/// 28 once done, `E` 30 on error.
pub const MDIC: usize = 0x0020;
/// `MDIC.READY`.
pub const MDIC_READY: u32 = 1 << 28;
/// `MDIC.E`: the PHY did not answer.
pub const MDIC_ERROR: u32 = 1 << 30;
/// `MDIC.OP` = write, `PHYADD` = 1.
pub const MDIC_WRITE_PHY1: u32 = 0b01 << 26 | 1 << 21;
/// How long one PHY access may take: 10 ms.
pub const MDIC_TIMEOUT_US: u64 = 10_000;
/// PHY register 0, Control (IEEE 802.3 clause 22, `BMCR`).
pub const PHY_BMCR: u8 = 0;
/// `BMCR`: autonegotiation enabled, restarted, 1000 Mb/s full duplex (the speed and duplex
/// bits count only without autonegotiation).
pub const BMCR_AUTONEG_RESTART: u16 = 0x1000 | 0x0200 | 0x0040 | 0x0100;
/// PHY register 4, Autonegotiation Advertisement (`ANAR`).
pub const PHY_ANAR: u8 = 4;
/// `ANAR`: 802.3 selector, 10/100 half and full duplex, and no `PAUSE` (bit 10) nor asymmetric
/// pause (bit 11): the partner resolves to no flow control (1000BASE-T's advertisement,
/// register 9, keeps its reset value).
pub const ANAR_NO_PAUSE: u16 = 0x0001 | 0x0020 | 0x0040 | 0x0080 | 0x0100;

/// `CTRL.RFCE`: receive flow control (honour PAUSE frames) (§8.2.1).
pub const CTRL_RFCE: u32 = 1 << 27;
/// `CTRL.TFCE`: transmit flow control (send PAUSE frames).
pub const CTRL_TFCE: u32 = 1 << 28;
/// `CTRL.VME`: VLAN mode (strip and insert tags).
pub const CTRL_VME: u32 = 1 << 30;
/// Extended Interrupt Mask Clear (§8.8, 0x01528).
pub const EIMC: usize = 0x1528;
/// Receive Long Packet Maximum Length (§8.10, 0x05004): with `RCTL.LPE`, longer frames (CRC
/// included) are dropped.
pub const RLPML: usize = 0x5004;
/// Multiple Receive Queues Command (§8.10, 0x05818): 0, one queue, no RSS, no VMDq.
pub const MRQC: usize = 0x5818;
/// `SRRCTL.DESCTYPE` = 001b (bits 27:25): advanced descriptors, one buffer.
pub const SRRCTL_DESCTYPE_ADV_ONEBUF: u32 = 0b001 << 25;
/// `SRRCTL.DROP_EN` (bit 31): drop when the queue has no free descriptor.
pub const SRRCTL_DROP_EN: u32 = 1 << 31;
/// How long `RXDCTL.ENABLE` may take to read back: 10 ms.
pub const QUEUE_TIMEOUT_US: u64 = 10_000;
/// Bytes `RLPML` adds to the largest frame (without FCS): the FCS and one VLAN tag.
pub const RLPML_EXTRA: usize = 4 + 4;

/// What the bring-up sets: the 82574L's fields (receive filter, largest frame).
pub type IgbConfig = E1000eConfig;

/// Why the igb bring-up failed; the NIC is left reset (no ring, no DMA).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum IgbError {
    /// A step shared with the 82574L (reset, EEPROM, MAC, link, rings).
    Family(E1000eError),
    /// Queue `queue`'s `RXDCTL.ENABLE` did not read back within [`QUEUE_TIMEOUT_US`].
    QueueTimeout {
        /// The queue (0..16).
        queue: u8,
    },
    /// More queue pairs asked for than the 82576 has ([`MAX_RSS_QUEUES`]), or none.
    Queues {
        /// How many were asked for.
        asked: usize,
    },
    /// Redirection-table entry `index` names queue `queue`, which is not one of the `queues`
    /// brought up (no core would own its frames).
    RetaEntry {
        /// The entry (0..128).
        index: u8,
        /// The queue it names.
        queue: u8,
        /// Queue pairs brought up.
        queues: u8,
    },
    /// A write of PHY register `reg` through `MDIC` did not complete within
    /// [`MDIC_TIMEOUT_US`], or the PHY reported an error (`MDIC.E`).
    PhyTimeout {
        /// The PHY register.
        reg: u8,
    },
}

impl From<E1000eError> for IgbError {
    fn from(e: E1000eError) -> Self {
        IgbError::Family(e)
    }
}

impl core::fmt::Display for IgbError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            IgbError::Family(e) => e.describe("igb", f),
            IgbError::QueueTimeout { queue } => write!(
                f,
                "igb: RXDCTL{queue}.ENABLE did not read back within {} ms",
                QUEUE_TIMEOUT_US / 1000
            ),
            IgbError::Queues { asked } => write!(
                f,
                "igb: {asked} queue pairs asked for; the 82576 has 1..={MAX_RSS_QUEUES}"
            ),
            IgbError::RetaEntry {
                index,
                queue,
                queues,
            } => write!(
                f,
                "igb: redirection table entry {index} names queue {queue}, but only queues 0..{queues} are brought up"
            ),
            IgbError::PhyTimeout { reg } => write!(
                f,
                "igb: PHY register {reg} write through MDIC not done within {} ms (or MDIC.E)",
                MDIC_TIMEOUT_US / 1000
            ),
        }
    }
}

/// An 82576 port: the DD-bit driver with advanced descriptors on its register block, frames
/// at offset 0.
pub type Igb<H, R> = DdNic<H, R, 0, Advanced>;

/// Reset the 82576 behind `regs`, find its MAC, bring the link up, set the filters and give
/// queue 0 its rings. `now_us` is a monotonic clock in µs (the bounded waits). [`start`] then
/// [`finish`]: a machine with several ports starts them all before it waits for any link, so
/// their autonegotiations run together.
///
/// # Errors
/// [`IgbError`], naming what did not answer; the NIC is left reset.
pub fn bring_up<H: Hal, R: DdRegs>(
    regs: R,
    cfg: &IgbConfig,
    now_us: impl Fn() -> u64,
) -> Result<Igb<H, R>, IgbError> {
    finish(start(regs, cfg, &now_us)?, cfg, &now_us)
}

/// An 82576 reset, its MAC in receive address 0 and its autonegotiation restarted, no ring yet
/// (no DMA): what [`finish`] completes. Dropped unfinished, it is left reset.
pub struct Starting<R: DdRegs> {
    /// The register block (`None` once [`finish`] took it).
    regs: Option<R>,
}

impl<R: DdRegs> Drop for Starting<R> {
    fn drop(&mut self) {
        if let Some(regs) = &self.regs {
            regs.write(CTRL, CTRL_RST);
        }
    }
}

/// The first half of [`bring_up`]: reset, MAC, interrupts masked, no checksum offload, one
/// queue (`MRQC` 0), `RLPML`, and the PHY's autonegotiation restarted advertising no pause
/// (the reset leaves it idle: under QEMU `STATUS.LU` stays clear until it completes, 500 ms
/// after a restart).
///
/// # Errors
/// [`IgbError`]: reset, EEPROM, MAC, PHY.
pub fn start<R: DdRegs>(
    regs: R,
    cfg: &IgbConfig,
    now_us: &impl Fn() -> u64,
) -> Result<Starting<R>, IgbError> {
    let wait = |us: u64, done: &dyn Fn() -> bool| wait_until(now_us, us, done);
    reset_and_mac(&regs, cfg, &wait)?;
    regs.write(EIMC, u32::MAX);
    regs.write(RXCSUM, 0);
    regs.write(RFCTL, 0);
    regs.write(MRQC, 0);
    regs.write(RLPML, (cfg.max_frame + RLPML_EXTRA) as u32);
    phy_write(&regs, &wait, PHY_ANAR, ANAR_NO_PAUSE)?;
    phy_write(&regs, &wait, PHY_BMCR, BMCR_AUTONEG_RESTART)?;
    Ok(Starting { regs: Some(regs) })
}

/// The second half of [`bring_up`]: wait (bounded) for the link, flow control and VLAN mode
/// off, the receive and transmit units on with queue 0's rings, `RXDCTL.ENABLE` read back.
///
/// # Errors
/// [`IgbError`]: link, rings, queue enable.
pub fn finish<H: Hal, R: DdRegs>(
    mut s: Starting<R>,
    cfg: &IgbConfig,
    now_us: &impl Fn() -> u64,
) -> Result<Igb<H, R>, IgbError> {
    let regs = link_and_flow_control(&mut s, now_us)?;
    attach_queue(regs, cfg, 0, now_us)
}

/// [`finish`]'s first step, shared with [`finish_queues`]: the registers out of `s`, the link
/// waited for (bounded), flow control and VLAN mode off.
///
/// # Errors
/// [`IgbError::Family`]: the link did not come up (the NIC is left reset).
fn link_and_flow_control<R: DdRegs>(
    s: &mut Starting<R>,
    now_us: &impl Fn() -> u64,
) -> Result<R, IgbError> {
    let wait = |us: u64, done: &dyn Fn() -> bool| wait_until(now_us, us, done);
    let no_fc = CTRL_RFCE | CTRL_TFCE | CTRL_VME;
    let Some(regs) = s.regs.take() else {
        unreachable!("only `finish` and `finish_queues` take the registers, and they consume `s`")
    };
    link_up_clearing(&regs, now_us, &wait, no_fc)?;
    // Autonegotiation's resolution may have set the flow-control enables (QEMU's model sets
    // both once it completes): the policy is off.
    regs.write(CTRL, regs.read(CTRL) & !no_fc);
    Ok(regs)
}

/// Give queue `queue` (whose ring registers `regs` addresses: the block itself for queue 0,
/// [`QueueRegs`] for any) its rings, enable it and the units, and wait (bounded) for
/// `RXDCTL.ENABLE` to read back.
///
/// # Errors
/// [`IgbError::Family`] (no ring memory), [`IgbError::QueueTimeout`]; the queue's drop stops
/// it before its rings are freed.
fn attach_queue<H: Hal, R: DdRegs>(
    regs: R,
    cfg: &IgbConfig,
    queue: u8,
    now_us: &impl Fn() -> u64,
) -> Result<Igb<H, R>, IgbError> {
    let units = DdUnits {
        rctl: rctl_filter(cfg),
        tctl: TCTL_PSP | TCTL_CT | TCTL_COLD,
        srrctl: Some(SRRCTL_DESCTYPE_ADV_ONEBUF | SRRCTL_DROP_EN),
        queue_enable: true,
    };
    let nic = DdNic::attach(regs, units).map_err(E1000eError::Rings)?;
    if !wait_until(now_us, QUEUE_TIMEOUT_US, &|| {
        nic.regs().read(RXDCTL) & XDCTL_ENABLE != 0
    }) {
        // Dropping `nic` resets the NIC (`CTRL.RST`; a queue above 0 is disabled) before its
        // rings are freed.
        return Err(IgbError::QueueTimeout { queue });
    }
    Ok(nic)
}

mod mq;
pub use mq::{
    finish_queues, program_rss, IgbQueue, QueueRegs, Rss, ShareRegs, MAX_RSS_QUEUES,
    MRQC_ENABLE_RSS, MRQC_RSS_FIELDS, RETA, RSSRK, RXCSUM_PCSD,
};

#[cfg(test)]
mod tests;
