//! A poll-mode driver for a NIC that completes descriptors by writing a Descriptor Done (DD)
//! bit back, with tail registers for the driver's side of each ring: the shape of Intel's
//! 8254x/e1000e with legacy descriptors (Intel, *PCI/PCI-X Family of Gigabit Ethernet
//! Controllers Software Developer's Manual* (8254x SDM): §3.2 receive, §3.3 transmit, §13
//! registers). Today it runs on the simulated device of [`crate::sim::dd`] (host tests, the
//! proof that the packet contract, [`crate::nic`], names no virtio); an e1000e driver for real
//! hardware will have the same rings and a register block behind a BAR ([`DdRegs`]).
//!
//! Rings: one RX and one TX ring of [`RING_SIZE`] 16-byte descriptors each, in one DMA page
//! each (`RDBAL`/`RDBAH`/`RDLEN`, `TDBAL`/`TDBAH`/`TDLEN`). The hardware owns the descriptors
//! from its head (`RDH`/`TDH`, which only it moves) up to the tail the driver writes
//! (`RDT`/`TDT`); a ring holds at most `RING_SIZE - 1` buffers (head == tail is empty).
//!
//! * RX (§3.2.3): the driver writes a page's address into the descriptor at the tail, clears
//!   its status and moves `RDT` on. The NIC writes the frame **at the buffer's start** (no
//!   header before it: [`Nic::FRAME_OFFSET`] is 0), the length, and the status `DD | EOP`
//!   (a frame larger than the buffer spans several descriptors, `EOP` on its last; errors in
//!   `errors`). The driver finds completions by reading `DD` from its next-to-clean on: it
//!   reads no head register and no used index.
//! * TX (§3.3.3): the driver writes address, length and `CMD = EOP | IFCS | RS` at the tail and
//!   moves `TDT` on; the NIC sends the frame and writes `DD` into the descriptor's status
//!   (`RS`: report status). Completion walks `DD` from next-to-clean, in ring order.
//!
//! Each tail write is the NIC's notification (counted as `kicks_rx`/`kicks_tx`): RX re-posts
//! are published once at least [`RX_PUBLISH_BATCH`] buffers wait (every such many in
//! `rx_burst_refill`, at the end of the burst in the fused one) and at [`Nic::rx_publish`], TX
//! posts once per burst. The fused burst of a pair of this type is the driver's own (`forward`: one pass
//! per descriptor); a pair with another driver's port runs the neutral one
//! ([`crate::nic::forward_staged`]; docs/DESIGN.md, "The NIC contract").
//!
//! Identity mapping: a page's physical address is its virtual address (the kernel's one
//! address space; host memory in tests).

use crate::nic::{
    forward_staged, BurstStats, DriverStats, ForwardOps, Nic, RxBuf, RxBufferPagesError, RxStatus,
    TxBuf, TxDone, TxOwner, MAX_FRAME_PAGES, RING_SIZE,
};
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};
use mm::{Pfn, PAGE_SIZE};
use virtio_drivers::{BufferDirection, Hal};

mod format;
mod forward;
mod nic_impl;

pub use format::{Advanced, DescFormat, Legacy};

/// Device Control (§13.4.1).
pub const CTRL: usize = 0x0000;
/// `CTRL.RST`: device reset (§13.4.1; self-clearing).
pub const CTRL_RST: u32 = 1 << 26;
/// Receive Control (§13.4.22).
pub const RCTL: usize = 0x0100;
/// `RCTL.EN`: receiver enable.
pub const RCTL_EN: u32 = 1 << 1;
/// Transmit Control (§13.4.33).
pub const TCTL: usize = 0x0400;
/// `TCTL.EN`: transmitter enable.
pub const TCTL_EN: u32 = 1 << 1;
/// Receive Descriptor Base Address Low (§13.4.27).
pub const RDBAL: usize = 0x2800;
/// Receive Descriptor Base Address High.
pub const RDBAH: usize = 0x2804;
/// Receive Descriptor Length, bytes (a multiple of 128).
pub const RDLEN: usize = 0x2808;
/// Receive Descriptor Head (the NIC's).
pub const RDH: usize = 0x2810;
/// Receive Descriptor Tail (the driver's).
pub const RDT: usize = 0x2818;
/// Transmit Descriptor Base Address Low (§13.4.38).
pub const TDBAL: usize = 0x3800;
/// Transmit Descriptor Base Address High.
pub const TDBAH: usize = 0x3804;
/// Transmit Descriptor Length, bytes.
pub const TDLEN: usize = 0x3808;
/// Transmit Descriptor Head (the NIC's).
pub const TDH: usize = 0x3810;
/// Transmit Descriptor Tail (the driver's).
pub const TDT: usize = 0x3818;
/// Receive Address Low of entry 0: the MAC's first four bytes, little-endian (§13.4.62).
pub const RAL0: usize = 0x5400;
/// Split and Replication Receive Control of queue 0 (82576 datasheet, `SRRCTL`): bits 6:0,
/// `BSIZEPACKET`, the RX buffer size in KiB units (1..=127); 0 leaves the legacy 2 KiB of
/// `RCTL.BSIZE`, which the simulated NIC reads as a whole page.
pub const SRRCTL: usize = 0x280C;
/// Receive Descriptor Control of queue 0 (82576 datasheet §8.10, `RXDCTL0` at 0x0C028 and
/// its alias 0x02828, which Linux's igb uses for queues 0–3): `ENABLE` (bit 25) turns the
/// queue on; `WTHRESH` (20:16) is the write-back threshold. The 82574L has no such enable
/// (its register at this offset is left alone).
pub const RXDCTL: usize = 0x2828;
/// `RXDCTL.ENABLE` / `TXDCTL.ENABLE`: the queue is enabled.
pub const XDCTL_ENABLE: u32 = 1 << 25;
/// `RXDCTL.WTHRESH` = 1: each descriptor written back as soon as it is done (QEMU's reset
/// value for queue 0).
pub const RXDCTL_WTHRESH_1: u32 = 1 << 16;
/// Transmit Descriptor Control of queue 0 (82576 datasheet §8.12, `TXDCTL0` at 0x0E028,
/// alias 0x03828).
pub const TXDCTL: usize = 0x3828;
/// Receive Address High of entry 0: the MAC's last two bytes, and `AV` (bit 31).
pub const RAH0: usize = 0x5404;

/// Descriptor status: Descriptor Done (RX §3.2.3.1, TX §3.3.3.2).
pub const STA_DD: u8 = 1 << 0;
/// RX descriptor status: End Of Packet (the frame's last descriptor).
pub const RXSTA_EOP: u8 = 1 << 1;
/// TX descriptor command: End Of Packet.
pub const TXCMD_EOP: u8 = 1 << 0;
/// TX descriptor command: Insert FCS.
pub const TXCMD_IFCS: u8 = 1 << 1;
/// TX descriptor command: Report Status (write `DD` back when sent).
pub const TXCMD_RS: u8 = 1 << 3;

/// TX descriptors [`Nic::tx_reclaim_into`] takes back per DD read (ixy's cleaning batch).
pub const TX_CLEAN_BATCH: usize = 32;

/// RX buffers re-posted before the driver writes `RDT` (Linux e1000's
/// `E1000_RX_BUFFER_WRITE` is 16; 32 as the virtio driver's publish batch).
pub const RX_PUBLISH_BATCH: usize = 32;

/// A legacy receive descriptor (§3.2.3), 16 bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct RxDesc {
    /// Buffer address (physical).
    pub addr: u64,
    /// Bytes the NIC wrote into this buffer.
    pub length: u16,
    /// Packet checksum (unused).
    pub csum: u16,
    /// `DD`, `EOP`, ….
    pub status: u8,
    /// Receive errors (any set: a bad frame).
    pub errors: u8,
    /// VLAN tag (unused).
    pub special: u16,
}

/// A legacy transmit descriptor (§3.3.3), 16 bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct TxDesc {
    /// Buffer address (physical).
    pub addr: u64,
    /// Bytes to send from this buffer.
    pub length: u16,
    /// Checksum offset (unused).
    pub cso: u8,
    /// `EOP`, `IFCS`, `RS`.
    pub cmd: u8,
    /// `DD` once sent.
    pub status: u8,
    /// Checksum start (unused).
    pub css: u8,
    /// VLAN tag (unused).
    pub special: u16,
}

const _: () = assert!(core::mem::size_of::<RxDesc>() == 16 && core::mem::size_of::<TxDesc>() == 16);
const _: () = assert!(RING_SIZE * 16 == PAGE_SIZE, "each ring is one DMA page");

/// The NIC's register block. Reads and writes are the device's (MMIO on hardware: volatile,
/// with side effects; [`crate::sim::dd::SimDdRegs`] in tests).
pub trait DdRegs {
    /// Read the 32-bit register at byte offset `reg`.
    fn read(&self, reg: usize) -> u32;
    /// Write the 32-bit register at byte offset `reg`.
    fn write(&self, reg: usize, val: u32);
    /// Add what the register block knows beyond the rings to `s` (register reads so far, the
    /// link, the NIC's error counters): called off the hot path ([`Nic::stats`]), where it may
    /// read registers. Nothing by default.
    fn hw_stats(&self, s: &mut DriverStats) {
        let _ = s;
    }
    /// The link's state now (`STATUS.LU`), off the hot path ([`Nic::link_up`]); `None` (the
    /// default) when the register block does not report one.
    fn link_up(&self) -> Option<bool> {
        None
    }
    /// Stop the NIC's DMA on the rings behind this register block before they are freed (the
    /// driver's drop, [`Nic::reset_device`]); returns whether that reset the whole device.
    /// Default: `CTRL.RST` (true). A register block for one queue pair of a multi-queue NIC
    /// ([`crate::igb::QueueRegs`]) disables its queue instead, its port's queue 0 owning the
    /// device reset.
    fn reset_device(&self) -> bool {
        self.write(CTRL, CTRL_RST);
        true
    }
}

/// A descriptor ring in one DMA page.
struct Ring<H: Hal, D> {
    base: NonNull<D>,
    paddr: u64,
    _hal: PhantomData<H>,
}

// SAFETY: a ring owns its DMA page outright (nothing else holds the pointer); moving it to
// another CPU moves that ownership, as a handle moves once from the boot CPU to its core.
unsafe impl<H: Hal, D> Send for Ring<H, D> {}

impl<H: Hal, D> Ring<H, D> {
    /// A zeroed page of descriptors, or `None` when DMA memory ran out.
    fn new() -> Option<Self> {
        let (paddr, vaddr) = H::dma_alloc(1, BufferDirection::Both);
        if paddr == 0 {
            return None;
        }
        Some(Ring {
            base: vaddr.cast(),
            paddr,
            _hal: PhantomData,
        })
    }

    /// Descriptor `i` (masked to the ring).
    #[inline(always)]
    fn at(&self, i: usize) -> *mut D {
        // SAFETY: the page holds RING_SIZE descriptors; the index is masked into it.
        unsafe { self.base.as_ptr().add(i & (RING_SIZE - 1)) }
    }
}

impl<H: Hal, D> Drop for Ring<H, D> {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` with one page; the NIC was reset (the driver's drop)
        // before its rings go.
        unsafe { H::dma_dealloc(self.paddr, self.base.cast(), 1) };
    }
}

/// How [`DdNic::attach`] enables the receive and transmit units.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct DdUnits {
    /// The `RCTL` word (`RCTL.EN` is added): buffer size, filters, `SECRC`, …
    pub rctl: u32,
    /// The `TCTL` word (`TCTL.EN` is added).
    pub tctl: u32,
    /// Write `SRRCTL` with `BSIZEPACKET` (the buffer size, KiB) and these further bits
    /// (82576: `DESCTYPE`, `DROP_EN`); `None`: no `SRRCTL` (an 82574L has none and takes its
    /// buffer size from `RCTL.BSIZE`/`BSEX`).
    pub srrctl: Option<u32>,
    /// Write `RXDCTL.ENABLE` and `TXDCTL.ENABLE` (with `WTHRESH` 1) before the units are
    /// enabled: the 82576's queues are off until then (§4.5.9, §4.5.10); the caller waits for
    /// `RXDCTL.ENABLE` to read back before posting buffers.
    pub queue_enable: bool,
}

/// Why [`DdNic::new`] failed.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum DdInitError {
    /// No DMA memory for a descriptor ring.
    NoRingMemory,
}

/// The buffers of a received frame of several descriptors, collected in order (every one but
/// the last full: [`DdNic::RX_BUF_LEN`] bytes).
#[derive(Copy, Clone, Debug)]
struct RxChain {
    /// The pages, `pages[..n]`.
    pages: [Pfn; MAX_FRAME_PAGES],
    /// Frame bytes in each (as `pages`).
    lens: [u16; MAX_FRAME_PAGES],
    /// Buffers collected (0: none).
    n: usize,
}

impl Default for RxChain {
    fn default() -> Self {
        RxChain {
            pages: [Pfn(0); MAX_FRAME_PAGES],
            lens: [0; MAX_FRAME_PAGES],
            n: 0,
        }
    }
}

/// A DD-bit NIC with one RX and one TX ring, owned by one core (not `Sync`).
///
/// `OFFSET` is where the NIC writes a received frame in its page: 0 (the default, the
/// hardware's own layout), or the header room of another driver it shares a core
/// with in an [`crate::nic::EitherNic`] (12 beside virtio-net): the RX descriptor then holds the page's address plus `OFFSET`
/// and the buffer size (`SRRCTL`) is what is left of the page, rounded down to whole KiB, so a
/// frame of more than one buffer is dropped (`TooBig`) rather than split at a size the
/// dataplane's page arithmetic does not expect.
///
/// `F` is the descriptor layout: [`Legacy`] (the default: 82574L, the simulated NIC) or
/// [`Advanced`] (82576, `crate::igb`); the rings, the fused burst and completion are the same.
pub struct DdNic<H: Hal, R: DdRegs, const OFFSET: usize = 0, F: DescFormat = Legacy> {
    regs: R,
    rx: Ring<H, RxDesc>,
    tx: Ring<H, TxDesc>,
    /// Page behind each RX descriptor.
    rx_pages: [Pfn; RING_SIZE],
    /// Page and owner tag behind each TX descriptor.
    tx_pages: [TxDone; RING_SIZE],
    /// RX: next descriptor to read `DD` from (the oldest posted).
    rx_clean: usize,
    /// RX: the tail, where the next buffer is posted (`RDT` once published).
    rx_tail: usize,
    /// RX descriptors posted (the NIC's or done, not yet cleaned).
    rx_posted: usize,
    /// RX re-posts not yet published to `RDT`.
    rx_unpublished: usize,
    /// RX: continuation descriptors of a frame that is dropped follow (up to its `EOP`).
    rx_skip: bool,
    /// RX: the buffers of a frame of several descriptors the fused burst has collected so
    /// far (its `EOP` not yet seen; `OFFSET` 0 only).
    rx_chain: RxChain,
    /// TX: next descriptor to read `DD` from.
    tx_clean: usize,
    /// TX: the tail (`TDT` once published).
    tx_tail: usize,
    /// TX descriptors posted, not yet cleaned.
    tx_posted: usize,
    /// The longest frame delivered (bytes; [`Nic::set_rx_frame_limit`]): longer ones are
    /// handed back `TooBig`. Default: [`MAX_FRAME_PAGES`] buffers' worth.
    rx_limit: usize,
    /// The longest one-buffer frame delivered: `rx_limit`, at most [`Self::RX_BUF_LEN`] (the
    /// fused burst's whole-frame test).
    rx_fits: usize,
    mac: [u8; 6],
    stats: DriverStats,
    _format: PhantomData<F>,
}

impl<H: Hal, R: DdRegs, const OFFSET: usize, F: DescFormat> DdNic<H, R, OFFSET, F> {
    /// Bytes the NIC may write per RX buffer: the page, or with an `OFFSET`, what is left of it
    /// in whole KiB (`SRRCTL.BSIZEPACKET`'s unit).
    pub const RX_BUF_LEN: usize = if OFFSET == 0 {
        PAGE_SIZE
    } else {
        (PAGE_SIZE - OFFSET) / 1024 * 1024
    };

    /// Reset the NIC, give it an RX and a TX ring (empty: head = tail = 0) and enable both;
    /// the MAC is read from `RAL0`/`RAH0`.
    ///
    /// # Errors
    /// [`DdInitError::NoRingMemory`]: no DMA page for a ring (the NIC is left reset).
    pub fn new(regs: R) -> Result<Self, DdInitError> {
        regs.write(CTRL, CTRL_RST);
        Self::attach(
            regs,
            DdUnits {
                rctl: RCTL_EN,
                tctl: TCTL_EN,
                srrctl: Some(0),
                queue_enable: false,
            },
        )
    }

    /// Give a NIC the caller has reset and set up (MAC in `RAL0`/`RAH0`, link, filters: the
    /// e1000e bring-up, [`crate::e1000e`]) an RX and a TX ring (empty: head = tail = 0) and
    /// enable both units with `units`' control words; the MAC is read from `RAL0`/`RAH0`.
    ///
    /// # Errors
    /// [`DdInitError::NoRingMemory`]: no DMA page for a ring (the units stay disabled).
    pub fn attach(regs: R, units: DdUnits) -> Result<Self, DdInitError> {
        let rx = Ring::<H, RxDesc>::new().ok_or(DdInitError::NoRingMemory)?;
        let tx = Ring::<H, TxDesc>::new().ok_or(DdInitError::NoRingMemory)?;
        let len = (RING_SIZE * 16) as u32;
        regs.write(RDBAL, rx.paddr as u32);
        regs.write(RDBAH, (rx.paddr >> 32) as u32);
        regs.write(RDLEN, len);
        regs.write(RDH, 0);
        regs.write(RDT, 0);
        regs.write(TDBAL, tx.paddr as u32);
        regs.write(TDBAH, (tx.paddr >> 32) as u32);
        regs.write(TDLEN, len);
        regs.write(TDH, 0);
        regs.write(TDT, 0);
        let (lo, hi) = (regs.read(RAL0).to_le_bytes(), regs.read(RAH0).to_le_bytes());
        let mac = [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]];
        const { assert!(OFFSET < 1024, "the header room is below a KiB") };
        if let Some(bits) = units.srrctl {
            regs.write(SRRCTL, (Self::RX_BUF_LEN / 1024) as u32 | bits);
        }
        if units.queue_enable {
            regs.write(RXDCTL, XDCTL_ENABLE | RXDCTL_WTHRESH_1);
            regs.write(TXDCTL, XDCTL_ENABLE);
        }
        regs.write(RCTL, units.rctl | RCTL_EN);
        regs.write(TCTL, units.tctl | TCTL_EN);
        Ok(DdNic {
            regs,
            rx,
            tx,
            rx_pages: [Pfn(0); RING_SIZE],
            tx_pages: [TxDone {
                pfn: Pfn(0),
                owner: TxOwner::new(0),
            }; RING_SIZE],
            rx_clean: 0,
            rx_limit: MAX_FRAME_PAGES * Self::RX_BUF_LEN,
            rx_fits: Self::RX_BUF_LEN,
            rx_tail: 0,
            rx_posted: 0,
            rx_unpublished: 0,
            rx_skip: false,
            rx_chain: RxChain::default(),
            tx_clean: 0,
            tx_tail: 0,
            tx_posted: 0,
            mac,
            stats: DriverStats::default(),
            _format: PhantomData,
        })
    }

    /// The byte of the RX descriptor at `i` that holds `DD` (bit 0, [`STA_DD`]), read as the
    /// NIC left it.
    #[inline(always)]
    fn rx_status(&self, i: usize) -> u8 {
        // SAFETY: a descriptor of our ring (16 bytes; `RX_DD_BYTE` < 16); the NIC writes it
        // concurrently, hence volatile.
        unsafe {
            self.rx
                .at(i)
                .cast::<u8>()
                .add(F::RX_DD_BYTE)
                .read_volatile()
        }
    }

    /// The TX descriptor at `i`'s status.
    #[inline(always)]
    fn tx_status(&self, i: usize) -> u8 {
        // SAFETY: as `rx_status`.
        unsafe { core::ptr::addr_of!((*self.tx.at(i)).status).read_volatile() }
    }

    /// Write an RX descriptor for `pfn` at the tail (status cleared), not yet published.
    #[inline(always)]
    fn rx_post_one(&mut self, pfn: Pfn) {
        let i = self.rx_tail;
        let d = RxDesc {
            addr: pfn.addr() + OFFSET as u64,
            ..RxDesc::default()
        };
        // SAFETY: the tail descriptor is the driver's (not yet given by `RDT`).
        unsafe { self.rx.at(i).write_volatile(d) };
        self.rx_pages[i] = pfn;
        self.rx_tail = (i + 1) & (RING_SIZE - 1);
        self.rx_posted += 1;
        self.rx_unpublished += 1;
    }

    /// Publish the RX tail: every descriptor before it is the NIC's.
    #[inline]
    fn rx_write_tail(&mut self) {
        if self.rx_unpublished > 0 {
            fence(Ordering::Release);
            self.regs.write(RDT, self.rx_tail as u32);
            self.rx_unpublished = 0;
            self.stats.kicks_rx += 1;
        }
    }

    /// Pop one completed RX descriptor: its page and what it carried, or `None`. Buffers the
    /// fused burst collected for a frame not yet whole come first: this path does not collect,
    /// so that frame is dropped (its first page `TooBig`, the others and the rest of the frame
    /// continuations).
    #[inline(always)]
    fn rx_pop(&mut self) -> Option<RxBuf> {
        if self.rx_chain.n > 0 {
            return Some(self.rx_chain_pop());
        }
        if self.rx_posted == 0 {
            return None;
        }
        let i = self.rx_clean;
        let status = self.rx_status(i);
        if status & STA_DD == 0 {
            return None;
        }
        fence(Ordering::Acquire);
        // SAFETY: DD is set: the NIC is done with the descriptor.
        let hi = unsafe { self.rx.at(i).cast::<u64>().add(1).read_volatile() };
        let pfn = self.rx_pages[i];
        self.rx_pages[i] = Pfn(0);
        self.rx_clean = (i + 1) & (RING_SIZE - 1);
        self.rx_posted -= 1;
        let len = F::rx_len(hi);
        let eop = F::rx_eop(hi);
        let error = F::rx_error(hi);
        if error {
            self.stats.rx_errors += 1;
        }
        let st = if self.rx_skip {
            RxStatus::Continuation
        } else if error || len == 0 || len > Self::RX_BUF_LEN {
            RxStatus::Malformed
        } else if !eop || len > self.rx_limit {
            RxStatus::TooBig
        } else {
            RxStatus::Ok
        };
        // A frame of several descriptors: the ones after its first, up to its EOP, are
        // continuations.
        self.rx_skip = !eop;
        Some(RxBuf {
            pfn,
            len,
            status: st,
        })
    }

    /// [`DdNic::rx_pop`] of a page of the frame being collected (the last first): see there.
    #[cold]
    #[inline(never)]
    fn rx_chain_pop(&mut self) -> RxBuf {
        self.rx_chain.n -= 1;
        let k = self.rx_chain.n;
        // Its `EOP` is still to come: the buffers up to it are continuations.
        self.rx_skip = true;
        RxBuf {
            pfn: self.rx_chain.pages[k],
            len: 0,
            status: if k == 0 {
                RxStatus::TooBig
            } else {
                RxStatus::Continuation
            },
        }
    }

    /// TX descriptors that can take a frame now (one slot stays empty: head == tail is empty).
    #[inline]
    fn tx_room(&self) -> usize {
        RING_SIZE - 1 - self.tx_posted
    }

    /// Pop one sent TX page, or `None`.
    #[inline(always)]
    fn tx_pop(&mut self) -> Option<TxDone> {
        if self.tx_posted == 0 || self.tx_status(self.tx_clean) & STA_DD == 0 {
            return None;
        }
        fence(Ordering::Acquire);
        let i = self.tx_clean;
        let done = self.tx_pages[i];
        self.tx_pages[i].pfn = Pfn(0);
        self.tx_clean = (i + 1) & (RING_SIZE - 1);
        self.tx_posted -= 1;
        Some(done)
    }

    /// Write one TX descriptor at the tail (`cmd` as given; `paylen`, the frame's length, for
    /// [`Advanced`]'s `PAYLEN`), not yet published.
    #[inline(always)]
    fn tx_desc(&mut self, addr: u64, len: usize, cmd: u8, paylen: usize, done: TxDone) {
        let i = self.tx_tail;
        let q = self.tx.at(i).cast::<u64>();
        // SAFETY: the tail descriptor is the driver's until `TDT` passes it; status (DD)
        // cleared with the command word.
        unsafe {
            q.write_volatile(addr);
            q.add(1)
                .write_volatile(F::tx_word(len as u64, cmd, paylen as u64));
        }
        self.tx_pages[i] = done;
        self.tx_tail = (i + 1) & (RING_SIZE - 1);
        self.tx_posted += 1;
    }
}

impl<H: Hal, R: DdRegs, const OFFSET: usize, F: DescFormat> Drop for DdNic<H, R, OFFSET, F> {
    fn drop(&mut self) {
        // The NIC stops using the rings before they are freed.
        self.regs.reset_device();
    }
}

impl<H: Hal, R: DdRegs, const OFFSET: usize, F: DescFormat> DdNic<H, R, OFFSET, F> {
    /// The register block (set-up and counters off the hot path: the multicast filter,
    /// [`crate::e1000e::set_multicast`]).
    pub fn regs(&self) -> &R {
        &self.regs
    }
}
