//! Poll-mode virtio-net driver: page_pool pages as RX descriptors, zero-copy TX, one kick per
//! queue per poll iteration.
//!
//! Past ~800 lines because set-up, the staged RX/TX paths and completion all work on the device's
//! private ring state; the split by axis (set-up, RX, TX, completion) is open work (issue 32, item
//! 3).
//!
//! Built on `virtio-drivers` 0.13's public [`Transport`] (PCI capability parsing, feature
//! negotiation, queue registration) and our own [`SplitQueue`] (the crate's `VirtIONetRaw`
//! notifies per buffer and its `VirtQueue` stalls after 65,536 buffers with EVENT_IDX; see
//! [`crate::virtqueue`]). Section numbers refer to the VIRTIO
//! 1.2 specification (OASIS, 2022).
//!
//! Buffers: every RX descriptor is one whole order-0 page ([`PAGE_SIZE`] bytes) handed in by the
//! caller as a [`Pfn`]; the device writes the 12-byte `virtio_net_hdr` (§5.1.6) at offset 0 and
//! the frame right after it. TX posts the very same page, header zeroed in place, as one
//! device-readable descriptor. The driver remembers which page sits behind each descriptor
//! chain (the token, §2.7.13) so completions hand the page back to the caller. With a jumbo
//! MTU ([`VirtioNet::set_rx_buffer_pages`]) every RX descriptor is instead an indirect table
//! of several pages (§2.7.5.3), one frame per used element; a frame of several pages leaves as
//! one indirect TX descriptor of the same pages.
//!
//! Multi-queue (§5.1.6.5.5): [`VirtioNet::new_mq`] negotiates `VIRTIO_NET_F_MQ` and
//! `VIRTIO_NET_F_CTRL_VQ`, sets up N receive/transmit queue pairs (receiveq_i = 2i,
//! transmitq_i = 2i + 1, the control queue at 2 × `max_virtqueue_pairs`, §5.1.2), tells the device
//! with `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` to use N pairs, and returns one [`VirtioNet`] handle per
//! queue pair. Each handle owns its two rings outright, so a core can own one with no lock on the
//! hot path; the handle of pair 0 also owns the transport (device reset, config space).
//!
//! Identity mapping: the kernel runs in one identity-mapped address space, so a page's physical
//! address is also its virtual address; the HAL's `share` must return the buffer address as is.

use crate::virtqueue::{QueueError, SplitQueue};
// The contract's types, re-exported so the driver's users (the kernel's set-up, the fuzz
// targets) keep their paths; the dataplane names them through `crate::nic` only.
pub use crate::nic::{
    BurstStats, DriverStats, ForwardOps, GiveBack, MultiFrame, RxBuf, RxBufferPagesError, RxStatus,
    RxVerdict, TxBuf, TxDone, TxOwner,
};
use mm::{Pfn, PAGE_SIZE};
use virtio_drivers::transport::Transport;
use virtio_drivers::Hal;

/// Descriptors per virtqueue. QEMU's virtio-net default ring size (`rx_queue_size` /
/// `tx_queue_size` = 256); larger rings need `-device virtio-net-pci,rx_queue_size=…`.
pub const QUEUE_SIZE: usize = crate::nic::RING_SIZE;

/// Virtqueue index of the first receive queue (§5.1.2).
const RX_QUEUE: u16 = 0;
/// Virtqueue index of the first transmit queue (§5.1.2).
const TX_QUEUE: u16 = 1;

/// Most queue pairs [`VirtioNet::new_mq`] sets up (one per forwarding core; the kernel's
/// `queues=` key takes 1..=4).
pub const MAX_QUEUE_PAIRS: usize = 4;

/// Descriptors in the control virtqueue: QEMU's control queue has 64; the driver sends one
/// command at a time (2 descriptors).
const CTRL_QUEUE_SIZE: usize = 64;

/// Offset of `max_virtqueue_pairs` (le16) in `struct virtio_net_config` (§5.1.4: after
/// `mac[6]` and `status`).
const CONFIG_MAX_VQ_PAIRS: usize = 8;

/// §5.1.6.5: `VIRTIO_NET_OK`, the control command's ack on success.
pub const VIRTIO_NET_OK: u8 = 0;
/// §5.1.6.5.5: `VIRTIO_NET_CTRL_MQ`, the multi-queue command class.
const VIRTIO_NET_CTRL_MQ: u8 = 4;
/// §5.1.6.5.5: `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`.
const VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET: u8 = 0;
/// §5.1.6.5.5: `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_MIN` (1) .. `_MAX` (0x8000).
const VQ_PAIRS_MAX: u16 = 0x8000;

/// Receive queue of pair `i` (§5.1.2: receiveq1 is virtqueue 0, receiveqN is 2(N-1)).
pub const fn rx_queue_index(pair: u16) -> u16 {
    2 * pair
}

/// Transmit queue of pair `i` (§5.1.2: transmitqN is 2(N-1) + 1).
pub const fn tx_queue_index(pair: u16) -> u16 {
    2 * pair + 1
}

/// The control queue of a device with `max_virtqueue_pairs` pairs (§5.1.2: 2N with MQ, else 2).
pub const fn ctrl_queue_index(max_pairs: u16) -> u16 {
    2 * max_pairs
}

/// Size of `struct virtio_net_hdr` when `VIRTIO_F_VERSION_1` is negotiated (§5.1.6: the
/// `num_buffers` field is always present for modern devices): 12 bytes.
pub const NET_HDR_LEN: usize = 12;

/// Offset of `num_buffers` (le16) in `virtio_net_hdr` (§5.1.6).
const NUM_BUFFERS_OFFSET: usize = 10;

/// Largest frame (Ethernet header to end of payload, no FCS) one RX page can hold: 4084 bytes.
pub const MAX_FRAME_LEN: usize = PAGE_SIZE - NET_HDR_LEN;

/// Most RX buffers (pages) one received frame may span and still be forwarded
/// ([`VirtioNet::forward_burst`], `VIRTIO_NET_F_MRG_RXBUF`, §5.1.6.4): 4 pages, frames of up
/// to [`MAX_MULTI_FRAME_LEN`] bytes. A 9,000-byte MTU (9,014-byte frames) needs 3; one more
/// leaves room for a device MTU a little above. Frames of more buffers are dropped and
/// counted `too_big`.
pub const MAX_FRAME_BUFFERS: usize = crate::nic::MAX_FRAME_PAGES;
const _: () = assert!(MAX_FRAME_BUFFERS == crate::virtqueue::INDIRECT_MAX);

/// Largest frame (no FCS) the fused burst forwards: [`MAX_FRAME_BUFFERS`] pages less the
/// virtio-net header, 16,372 bytes.
pub const MAX_MULTI_FRAME_LEN: usize = MAX_FRAME_BUFFERS * PAGE_SIZE - NET_HDR_LEN;

/// What the TX table keeps behind a token (the head descriptor's index): the page, its owner
/// and whether it heads a descriptor chain (a frame of several pages,
/// [`VirtioNet::forward_burst`]), packed in one word ([`TxTag`]) so a completion compares one
/// word per page.
#[derive(Copy, Clone)]
pub(crate) struct TxSlot {
    /// The frame's first page; [`NO_PAGE`] for a free token.
    pub(crate) pfn: Pfn,
    pub(crate) tag: TxTag,
}

impl TxSlot {
    /// A free token.
    pub(crate) const FREE: Self = Self {
        pfn: NO_PAGE,
        tag: TxTag::one(TxOwner::new(0)),
    };
}

/// A TX slot's owner and chain mark in one word: the owner's id in the low 16 bits, bit 31 set
/// for the head of a descriptor chain (completion then walks the chain, §2.7.5; §2.7.5.3 for
/// an indirect one). The mark is the driver's own: the [`TxOwner`] handed back never has it.
#[derive(Copy, Clone, Eq, PartialEq)]
#[repr(transparent)]
pub(crate) struct TxTag(u32);

impl TxTag {
    const CHAIN: u32 = 1 << 31;

    /// A frame of one descriptor sent for `owner`.
    #[inline(always)]
    pub(crate) const fn one(owner: TxOwner) -> Self {
        Self(owner.id() as u32)
    }

    /// The head of a descriptor chain sent for `owner`.
    #[inline(always)]
    pub(crate) const fn chain(owner: TxOwner) -> Self {
        Self(owner.id() as u32 | Self::CHAIN)
    }

    /// Whether the slot heads a descriptor chain.
    #[inline(always)]
    pub(crate) const fn is_chain(self) -> bool {
        self.0 & Self::CHAIN != 0
    }

    /// The owner the frame was sent for.
    #[inline(always)]
    pub(crate) const fn owner(self) -> TxOwner {
        TxOwner::new(self.0 as u16)
    }
}

/// Offset of `mtu` (le16) in `struct virtio_net_config` (§5.1.4: after
/// `max_virtqueue_pairs`), valid with `VIRTIO_NET_F_MTU`.
const CONFIG_MTU: usize = 10;

/// The multi-buffer frame the fused burst is collecting (§5.1.6.4): its pages so far and the
/// frame bytes in each (the first's without the virtio-net header).
///
/// The frame is whole when `n == want`. A frame whose continuations another path took
/// ([`VirtioNet::rx_burst`] does not collect: it drops them) can never be whole: `want` is
/// set to 0 (orphaned) and the collected pages go back at the next look, never forwarded.
#[derive(Copy, Clone, Default)]
pub(crate) struct RxChain {
    pub(crate) pages: [Pfn; MAX_FRAME_BUFFERS],
    pub(crate) lens: [u16; MAX_FRAME_BUFFERS],
    /// Pages collected; 0 when no frame is being collected.
    pub(crate) n: usize,
    /// The frame's buffers (its header's `num_buffers`, at most [`MAX_FRAME_BUFFERS`]); 0
    /// once orphaned.
    pub(crate) want: usize,
}

impl RxChain {
    /// Append one page of `len` frame bytes. Returns `false`, and keeps nothing, when the
    /// frame already has the buffers it wants (or is orphaned): the caller gives the page back.
    pub(crate) fn push(&mut self, pfn: Pfn, len: u16) -> bool {
        if self.n >= self.want {
            return false;
        }
        match (self.pages.get_mut(self.n), self.lens.get_mut(self.n)) {
            (Some(p), Some(l)) => {
                *p = pfn;
                *l = len;
                self.n += 1;
                true
            }
            _ => false,
        }
    }

    /// Pages are held for a frame still short of some continuations (and not orphaned).
    pub(crate) fn collecting(&self) -> bool {
        self.n > 0 && self.n < self.want
    }

    /// Pages are held and they are the whole frame.
    pub(crate) fn whole(&self) -> bool {
        self.n > 0 && self.n == self.want
    }
}

/// What [`VirtioNet::big_slot_refill`] made of a big RX buffer's slot: the frame's pages and
/// what the slot gave back.
pub(crate) struct BigSlot {
    /// Pages the frame reached (1..=the buffer's pages).
    pub(crate) touched: usize,
    /// The used length to classify the first page by: the frame's bytes in it (the used
    /// length, at most a page), or the whole used length when it overran the buffer
    /// (malformed).
    pub(crate) first_len: usize,
    /// The slot's pages, the frame's first (`..touched`).
    pub(crate) pages: [Pfn; MAX_FRAME_BUFFERS],
    /// With `nspare`: the pages given back by a released slot (the fresh ones taken, its pages
    /// past the frame).
    spare: [Pfn; 2 * MAX_FRAME_BUFFERS],
    nspare: usize,
}

impl BigSlot {
    /// Pages no longer on the ring and not the frame's (a released slot's): back to the pool.
    pub(crate) fn unused(&self) -> &[Pfn] {
        &self.spare[..self.nspare]
    }
}

bitflags::bitflags! {
    /// Feature bits this driver knows (§5.1.3 device-specific, §6 reserved).
    #[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
    pub struct NetFeatures: u64 {
        /// §5.1.3 VIRTIO_NET_F_MTU: device reports a maximum MTU.
        const MTU = 1 << 3;
        /// §5.1.3 VIRTIO_NET_F_MAC: device has a MAC address in config space.
        const MAC = 1 << 5;
        /// §5.1.3 VIRTIO_NET_F_MRG_RXBUF: a received frame may span several buffers; with it the
        /// driver sees (and counts) frames too big for one page instead of the device dropping
        /// them silently.
        const MRG_RXBUF = 1 << 15;
        /// §5.1.3 VIRTIO_NET_F_STATUS: link status in config space.
        const STATUS = 1 << 16;
        /// §5.1.3 VIRTIO_NET_F_CTRL_VQ: control virtqueue.
        const CTRL_VQ = 1 << 17;
        /// §5.1.3 VIRTIO_NET_F_MQ: multiple queue pairs.
        const MQ = 1 << 22;
        /// §6 VIRTIO_F_INDIRECT_DESC.
        const RING_INDIRECT_DESC = 1 << 28;
        /// §6 VIRTIO_F_EVENT_IDX: notification suppression by index (§2.7.7, §2.7.10).
        const RING_EVENT_IDX = 1 << 29;
        /// §6 VIRTIO_F_VERSION_1: modern device.
        const VERSION_1 = 1 << 32;
        /// §6 VIRTIO_F_ACCESS_PLATFORM: the device reaches memory through a platform IOMMU
        /// (QEMU `iommu_platform=on`); buffer addresses must be IOMMU (bus) addresses, not
        /// physical ones. Not supported: such a device is refused.
        const ACCESS_PLATFORM = 1 << 33;
    }
}

/// `NetFeatures` as the boot log prints them: the names of the set bits this driver knows,
/// joined by `|` (`MAC|MRG_RXBUF|RING_EVENT_IDX|VERSION_1`), without the `Debug` wrapper and
/// spaces (each byte of boot log is a host write under QEMU's 16550: docs/benchmarks-journal.md, "Boot time,
/// fifth pass"). Bits without a name here are not printed; `{:#x}` of `bits()` shows them.
#[derive(Copy, Clone, Debug)]
pub struct FeatureNames(pub NetFeatures);

impl core::fmt::Display for FeatureNames {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, (name, _)) in self.0.iter_names().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// What the driver asks for. `VIRTIO_F_INDIRECT_DESC` (§2.7.5.3) for frames of several
/// pages on TX: each takes one ring descriptor and one avail slot, its pages in a
/// preallocated table of that descriptor ([`crate::virtqueue::Indirect`]), so the TX ring
/// stays in in-order mode. Not checksum or GSO offloads (frames are forwarded as received,
/// fully checksummed).
pub const DRIVER_FEATURES: NetFeatures = NetFeatures::MAC
    .union(NetFeatures::MTU)
    .union(NetFeatures::MRG_RXBUF)
    .union(NetFeatures::RING_INDIRECT_DESC)
    .union(NetFeatures::RING_EVENT_IDX)
    .union(NetFeatures::VERSION_1);

/// Why the device could not be brought up.
#[derive(Debug)]
pub enum NetInitError {
    /// The device does not offer VIRTIO_F_VERSION_1 (legacy-only devices are not supported).
    NotModern,
    /// The device offers VIRTIO_F_ACCESS_PLATFORM (§6.1: it accesses memory through an IOMMU,
    /// QEMU `iommu_platform=on`). This driver hands the device physical addresses and has no
    /// IOMMU mappings, so the device could never reach its buffers (§6.1: a device MAY fail
    /// FEATURES_OK when the feature is not accepted): refused before any set-up.
    AccessPlatform,
    /// The device's queue `queue` is smaller than [`QUEUE_SIZE`] (`max` descriptors).
    QueueTooSmall {
        /// Virtqueue index.
        queue: u16,
        /// Largest size the device accepts.
        max: u32,
    },
    /// Setting up virtqueue `queue` failed.
    Queue {
        /// Virtqueue index.
        queue: u16,
        /// What failed.
        err: QueueError,
    },
    /// Reading the MAC from config space failed.
    Config(virtio_drivers::Error),
    /// Multi-queue was asked for but the device does not offer both `VIRTIO_NET_F_MQ` and
    /// `VIRTIO_NET_F_CTRL_VQ` (QEMU: `-netdev tap,…,queues=N` with N > 1 and
    /// `-device virtio-net-pci,mq=on`).
    NoMultiQueue {
        /// Feature bits the device offered.
        offered: u64,
    },
    /// More queue pairs were asked for than the device (`max_virtqueue_pairs`, §5.1.4) or this
    /// driver ([`MAX_QUEUE_PAIRS`]) supports, or zero.
    BadPairCount {
        /// Pairs asked for.
        asked: u16,
        /// The most that can be had: min(device's `max_virtqueue_pairs`, [`MAX_QUEUE_PAIRS`]).
        max: u16,
    },
    /// The control virtqueue could not take the command (no free descriptors or no DMA page).
    CtrlQueueFull,
    /// `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` was not answered before the caller's timeout.
    CtrlTimeout {
        /// Pairs the command asked for.
        pairs: u16,
    },
    /// The device answered `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET` with an ack other than
    /// [`VIRTIO_NET_OK`] (`VIRTIO_NET_ERR` = 1).
    CtrlNak {
        /// Pairs the command asked for.
        pairs: u16,
        /// The ack byte the device wrote.
        ack: u8,
    },
}

impl core::fmt::Display for NetInitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotModern => write!(f, "device does not offer VIRTIO_F_VERSION_1"),
            Self::AccessPlatform => write!(
                f,
                "device offers VIRTIO_F_ACCESS_PLATFORM (DMA through an IOMMU, QEMU \
                 iommu_platform=on), which this driver does not support"
            ),
            Self::QueueTooSmall { queue, max } => write!(
                f,
                "virtqueue {queue} holds at most {max} descriptors, driver needs {QUEUE_SIZE}"
            ),
            Self::Queue { queue, err } => write!(f, "virtqueue {queue} setup failed: {err:?}"),
            Self::Config(e) => write!(f, "config space read failed: {e}"),
            Self::NoMultiQueue { offered } => write!(
                f,
                "multi-queue needs VIRTIO_NET_F_MQ and VIRTIO_NET_F_CTRL_VQ; device offers {offered:#x}"
            ),
            Self::BadPairCount { asked, max } => {
                write!(f, "{asked} queue pairs asked for; 1..={max} available")
            }
            Self::CtrlQueueFull => write!(f, "control virtqueue: no room for the command"),
            Self::CtrlTimeout { pairs } => write!(
                f,
                "control virtqueue: VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET({pairs}) not acknowledged in time"
            ),
            Self::CtrlNak { pairs, ack } => write!(
                f,
                "control virtqueue: VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET({pairs}) refused (ack {ack})"
            ),
        }
    }
}

/// TX reclaims without a chain before a TX ring that posted one may enter in-order mode
/// again. Leaving the mode rebuilds the free stack (one store per free descriptor, up to
/// [`QUEUE_SIZE`]); without this hold, jumbo traffic that empties the ring between bursts
/// left and re-entered it every burst (guest router, 9,018-byte frames, K=32: +26
/// instructions per frame). The dataplane reclaims a ring once about 128 pages are posted on it,
/// so 8 reclaims are about a thousand single-page frames.
pub const TX_IN_ORDER_HOLD: u8 = 8;

/// A poll-mode virtio-net device with one RX and one TX queue, or (multi-queue) one queue pair
/// of a device.
///
/// Not `Sync` by design: one core owns a queue pair and runs its poll loop. The handle of pair 0
/// (the only one from [`VirtioNet::new`]) owns the transport; the other pairs' handles from
/// [`VirtioNet::new_mq`] only own their rings and kick through cached doorbells.
pub struct VirtioNet<H: Hal, T: Transport> {
    // Field order matters: the transport drops first (resetting the device), then the rings.
    /// `Some` on the handle that owns the device (pair 0).
    transport: Option<T>,
    /// The control virtqueue (owner handle of a multi-queue device). Idle after init, kept so
    /// its rings outlive the device's view of them.
    _ctrl: Option<SplitQueue<H, CTRL_QUEUE_SIZE>>,
    /// This handle's queue pair (0 for a single-queue device).
    pair: u16,
    /// Queue pairs the device was told to use ([`VirtioNet::new_mq`]; 1 otherwise).
    active_pairs: u16,
    /// The device's `max_virtqueue_pairs` (1 without MQ).
    max_pairs: u16,
    rx: SplitQueue<H, QUEUE_SIZE>,
    tx: SplitQueue<H, QUEUE_SIZE>,
    /// Page behind each RX token (head descriptor index); [`NO_PAGE`] for none.
    rx_pages: [Pfn; QUEUE_SIZE],
    /// Page and its owner tag behind each TX token; `pfn == NO_PAGE` for none.
    tx_pages: [TxSlot; QUEUE_SIZE],
    rx_posted: usize,
    tx_posted: usize,
    /// RX buffers re-posted in place ([`VirtioNet::rx_burst_refill`]) and not yet published.
    rx_unpublished: usize,
    /// Continuation buffers still to come for a multi-buffer frame: collected in `rx_chain`
    /// when it holds the frame's first page(s) (the fused burst), else dropped.
    rx_skip: u16,
    /// The multi-buffer frame being collected by the fused burst.
    rx_chain: RxChain,
    /// Descriptor chains (frames of several pages) on the TX ring, not yet completed.
    tx_chains: usize,
    /// TX reclaims still to pass without a chain before the TX ring may enter in-order mode
    /// again ([`TX_IN_ORDER_HOLD`] after each chain).
    tx_in_order_hold: u8,
    /// Multi-page frames were seen lately: the fused burst runs its chain-aware loop
    /// (`forward_run_chains`) until a burst of one-page frames only.
    rx_chain_mode: bool,
    /// Pages per RX buffer ([`VirtioNet::set_rx_buffer_pages`]): 1, each descriptor one page;
    /// more, each descriptor an indirect table of that many device-writable pages, page 0 in
    /// `rx_pages`, the others in the table only.
    rx_buf_pages: usize,
    mac: [u8; 6],
    /// The device's `mtu` (§5.1.4), when `VIRTIO_NET_F_MTU` was negotiated.
    mtu: Option<u16>,
    features: NetFeatures,
    offered: NetFeatures,
    stats: DriverStats,
    /// Cached doorbell addresses (RX, TX): one MMIO write per kick instead of the transport's
    /// select + read + write. `None` until [`VirtioNet::set_doorbells`].
    doorbells: Option<[*mut u16; 2]>,
}

/// The device's MAC (§5.1.4: `mac` is the first field of `virtio_net_config`, valid when
/// `VIRTIO_NET_F_MAC` was negotiated), or all zeros without it.
fn read_mac<T: Transport>(transport: &T, features: NetFeatures) -> Result<[u8; 6], NetInitError> {
    if !features.contains(NetFeatures::MAC) {
        return Ok([0; 6]);
    }
    transport
        .read_config_space::<[u8; 6]>(0)
        .map_err(NetInitError::Config)
}

/// The device's MTU (§5.1.4 `mtu`, bytes of IP datagram, no Ethernet header), valid when
/// `VIRTIO_NET_F_MTU` was negotiated (§5.1.3: QEMU `host_mtu=N`), else `None`.
fn read_mtu<T: Transport>(
    transport: &T,
    features: NetFeatures,
) -> Result<Option<u16>, NetInitError> {
    if !features.contains(NetFeatures::MTU) {
        return Ok(None);
    }
    transport
        .read_config_space::<u16>(CONFIG_MTU)
        .map(|m| Some(u16::from_le(m)))
        .map_err(NetInitError::Config)
}

/// [`VirtioNet::reclaim`] on a queue-pair handle that does not own the device.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct NotOwner;

/// Pages an RX buffer needs so that a frame of an `mtu`-byte IP datagram (plus the 14-byte
/// Ethernet header and the 12-byte virtio-net header) arrives in one buffer: 1 up to an MTU
/// of 4,070, 3 for 9,000; capped at [`MAX_FRAME_BUFFERS`].
pub const fn rx_buffer_pages_for_mtu(mtu: u16) -> usize {
    crate::nic::buffer_pages_for_mtu(mtu, NET_HDR_LEN)
}

/// Marks an empty slot of the driver's page tables: frame 0 (physical address 0, the real-mode
/// interrupt vector table on a PC) is never a packet page, and the driver refuses to post it.
pub const NO_PAGE: Pfn = Pfn(0);

/// Fault injection ([`mm::fault`]; the fault image only, the identity otherwise): the RX used
/// element `(id, len)` as a broken device might have written it, with an id out of range
/// ([`Fault::RxBadId`](mm::fault::Fault::RxBadId): `id + QUEUE_SIZE`) or a length one byte
/// over the page posted ([`Fault::RxBadLen`](mm::fault::Fault::RxBadLen)).
#[inline(always)]
pub(crate) fn rx_used_faulty(elem: (u32, u32)) -> (u32, u32) {
    rx_used_faulty_in(elem, PAGE_SIZE)
}

/// [`rx_used_faulty`] for a buffer of `buf` bytes (a big RX buffer's pages): a bad length is
/// one byte over the buffer.
#[inline(always)]
pub(crate) fn rx_used_faulty_in((id, len): (u32, u32), buf: usize) -> (u32, u32) {
    use mm::fault::{hit, Fault};
    if hit(Fault::RxBadId) {
        (id.wrapping_add(QUEUE_SIZE as u32), len)
    } else if hit(Fault::RxBadLen) {
        (id, buf as u32 + 1)
    } else {
        (id, len)
    }
}

/// Fault injection: a TX used element's id out of range
/// ([`Fault::TxBadId`](mm::fault::Fault::TxBadId): `id + QUEUE_SIZE`); the identity in the
/// release image.
#[inline(always)]
pub(crate) fn tx_used_id_faulty(id: u32) -> u32 {
    if mm::fault::hit(mm::fault::Fault::TxBadId) {
        id.wrapping_add(QUEUE_SIZE as u32)
    } else {
        id
    }
}

/// Re-posted RX buffers published at once ([`VirtioNet::rx_burst_refill`]): DPDK's default
/// `rx_free_thresh`, 32, so the device always holds at least 224 of the 256 buffers.
const RX_PUBLISH_BATCH: usize = 32;

/// Indices into `doorbells` and arguments of `notify`.
const RX: usize = 0;
const TX: usize = 1;

/// A byte view of a whole page.
///
/// # Safety
/// `pfn` must be a RAM page owned by the caller for the lifetime of the slice, and the kernel's
/// identity mapping must cover it (true for all RAM the allocator hands out).
unsafe fn page_bytes<'a>(pfn: Pfn) -> &'a mut [u8] {
    // SAFETY: per the function contract the page is mapped at its physical address and nobody
    // else accesses it while the slice lives.
    unsafe { core::slice::from_raw_parts_mut(pfn.addr() as usize as *mut u8, PAGE_SIZE) }
}

/// The feature bits a device must offer ([`NetFeatures::VERSION_1`]) and must not
/// ([`NetFeatures::ACCESS_PLATFORM`]) before the driver touches it.
fn check_offered(offered: NetFeatures) -> Result<(), NetInitError> {
    if !offered.contains(NetFeatures::VERSION_1) {
        return Err(NetInitError::NotModern);
    }
    if offered.contains(NetFeatures::ACCESS_PLATFORM) {
        return Err(NetInitError::AccessPlatform);
    }
    Ok(())
}

mod forward;
mod nic_impl;

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Initialise the device (§3.1.1): reset, negotiate [`DRIVER_FEATURES`], set up virtqueues
    /// 0 (RX) and 1 (TX) of [`QUEUE_SIZE`] descriptors, read the MAC, set DRIVER_OK.
    ///
    /// No buffers are posted yet: call [`VirtioNet::rx_refill`].
    pub fn new(mut transport: T) -> Result<Self, NetInitError> {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        check_offered(offered)?;
        let features = transport.begin_init(DRIVER_FEATURES);
        for q in [RX_QUEUE, TX_QUEUE] {
            let max = transport.max_queue_size(q);
            if max < QUEUE_SIZE as u32 {
                return Err(NetInitError::QueueTooSmall { queue: q, max });
            }
        }
        let event_idx = features.contains(NetFeatures::RING_EVENT_IDX);
        let rx = SplitQueue::new(&mut transport, RX_QUEUE, event_idx).map_err(|err| {
            NetInitError::Queue {
                queue: RX_QUEUE,
                err,
            }
        })?;
        let tx = SplitQueue::new(&mut transport, TX_QUEUE, event_idx).map_err(|err| {
            NetInitError::Queue {
                queue: TX_QUEUE,
                err,
            }
        })?;
        let mac = (
            read_mac(&transport, features)?,
            read_mtu(&transport, features)?,
        );
        transport.finish_init();
        Ok(Self::handle(
            (Some(transport), None),
            (0, 1, 1),
            (rx, tx),
            (mac, features, offered),
        ))
    }

    /// A handle with empty page tables and counters: `owner` is the transport and control queue
    /// (`Some` on the device's owner only), `pairs` is (this pair, active pairs, device maximum).
    fn handle(
        owner: (Option<T>, Option<SplitQueue<H, CTRL_QUEUE_SIZE>>),
        (pair, active_pairs, max_pairs): (u16, u16, u16),
        (rx, mut tx): (SplitQueue<H, QUEUE_SIZE>, SplitQueue<H, QUEUE_SIZE>),
        ((mac, mtu), features, offered): (([u8; 6], Option<u16>), NetFeatures, NetFeatures),
    ) -> Self {
        // TX posts and reclaims in avail order while the device completes in order (QEMU's
        // does); the RX ring re-posts each id in place and keeps its free stack.
        tx.enable_in_order();
        // Frames of several pages go out as one indirect descriptor each (§2.7.5.3) when the
        // device offers `VIRTIO_F_INDIRECT_DESC` (QEMU's does), else as descriptor chains.
        if features.contains(NetFeatures::RING_INDIRECT_DESC) {
            tx.enable_indirect();
        }
        Self {
            transport: owner.0,
            _ctrl: owner.1,
            pair,
            active_pairs,
            max_pairs,
            rx,
            tx,
            rx_pages: [NO_PAGE; QUEUE_SIZE],
            tx_pages: [TxSlot::FREE; QUEUE_SIZE],
            rx_posted: 0,
            rx_unpublished: 0,
            tx_posted: 0,
            rx_skip: 0,
            rx_chain: RxChain::default(),
            tx_chains: 0,
            tx_in_order_hold: 0,
            rx_chain_mode: false,
            rx_buf_pages: 1,
            mac,
            mtu,
            features,
            offered,
            stats: DriverStats::default(),
            doorbells: None,
        }
    }

    /// How many queue pairs the device behind `transport` can run: its `max_virtqueue_pairs`
    /// (§5.1.4) if it offers `VIRTIO_F_VERSION_1`, `VIRTIO_NET_F_MQ` and `VIRTIO_NET_F_CTRL_VQ`,
    /// else 1. Reads only (§3.1.1 step 4 allows reading the device-specific configuration
    /// before the features are accepted); the device is not initialised.
    pub fn probe_queue_pairs(transport: &mut T) -> u16 {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        let mq = NetFeatures::MQ | NetFeatures::CTRL_VQ | NetFeatures::VERSION_1;
        if !offered.contains(mq) {
            return 1;
        }
        transport
            .read_config_space::<u16>(CONFIG_MAX_VQ_PAIRS)
            .map_or(1, |n| n.max(1))
    }

    /// Initialise a multi-queue device (§3.1.1, §5.1.5) with `pairs` queue pairs and return one
    /// handle per pair, pair `i` at index `i` (pair 0 owns the transport):
    ///
    /// 1. negotiate [`DRIVER_FEATURES`] plus `VIRTIO_NET_F_MQ` and `VIRTIO_NET_F_CTRL_VQ`;
    /// 2. set up receiveq_i = 2i and transmitq_i = 2i + 1 for `i < pairs` ([`QUEUE_SIZE`]
    ///    descriptors each) and the control queue at 2 × `max_virtqueue_pairs` (§5.1.2);
    /// 3. set DRIVER_OK, then send `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET(pairs)` (§5.1.6.5.5: the
    ///    device uses only pair 0 until told otherwise) and wait for its ack, calling
    ///    `timed_out` between polls of the used ring.
    ///
    /// Buffers are posted by the caller afterwards ([`VirtioNet::rx_refill`] on each handle).
    /// Handles of pairs > 0 can only notify through doorbells: call
    /// [`VirtioNet::set_doorbells`] on each before use.
    ///
    /// # Errors
    /// [`NetInitError::NotModern`], [`NetInitError::AccessPlatform`], [`NetInitError::NoMultiQueue`] if the device lacks MQ or
    /// CTRL_VQ, [`NetInitError::BadPairCount`] if `pairs` is 0 or above
    /// min(`max_virtqueue_pairs`, [`MAX_QUEUE_PAIRS`]), queue set-up errors, and for the command
    /// [`NetInitError::CtrlQueueFull`], [`NetInitError::CtrlTimeout`] or
    /// [`NetInitError::CtrlNak`]. On a command error the device is reset before returning.
    pub fn new_mq(
        mut transport: T,
        pairs: u16,
        mut timed_out: impl FnMut() -> bool,
    ) -> Result<heapless::Vec<Self, MAX_QUEUE_PAIRS>, NetInitError> {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        check_offered(offered)?;
        let mq = NetFeatures::MQ | NetFeatures::CTRL_VQ;
        if !offered.contains(mq) {
            return Err(NetInitError::NoMultiQueue {
                offered: offered.bits(),
            });
        }
        let max_pairs = Self::probe_queue_pairs(&mut transport);
        let limit = max_pairs.min(MAX_QUEUE_PAIRS as u16).min(VQ_PAIRS_MAX);
        if pairs == 0 || pairs > limit {
            return Err(NetInitError::BadPairCount {
                asked: pairs,
                max: limit,
            });
        }
        let features = transport.begin_init(DRIVER_FEATURES | mq);
        if !features.contains(mq) {
            return Err(NetInitError::NoMultiQueue {
                offered: offered.bits(),
            });
        }
        let event_idx = features.contains(NetFeatures::RING_EVENT_IDX);
        let ctrl_idx = ctrl_queue_index(max_pairs);
        let queue = |t: &mut T, q: u16| {
            SplitQueue::<H, QUEUE_SIZE>::new(t, q, event_idx)
                .map_err(|err| NetInitError::Queue { queue: q, err })
        };
        let mut rings: heapless::Vec<_, MAX_QUEUE_PAIRS> = heapless::Vec::new();
        for i in 0..pairs {
            let rx = queue(&mut transport, rx_queue_index(i))?;
            let tx = queue(&mut transport, tx_queue_index(i))?;
            let _ = rings.push((rx, tx));
        }
        // §5.1.2: the control queue is the last one; its events are never used (polled).
        let mut ctrl = SplitQueue::<H, CTRL_QUEUE_SIZE>::new(&mut transport, ctrl_idx, false)
            .map_err(|err| NetInitError::Queue {
                queue: ctrl_idx,
                err,
            })?;
        let mac = (
            read_mac(&transport, features)?,
            read_mtu(&transport, features)?,
        );
        transport.finish_init();
        if let Err(e) =
            Self::vq_pairs_set(&mut transport, &mut ctrl, ctrl_idx, pairs, &mut timed_out)
        {
            // The device may still hold the command buffer: reset it before anything is freed.
            transport.set_status(virtio_drivers::transport::DeviceStatus::empty());
            return Err(e);
        }
        let mut out = heapless::Vec::new();
        let mut transport = Some(transport);
        let mut ctrl = Some(ctrl);
        for (i, (rx, tx)) in rings.into_iter().enumerate() {
            let _ = out.push(Self::handle(
                (transport.take(), ctrl.take()),
                (i as u16, pairs, max_pairs),
                (rx, tx),
                (mac, features, offered),
            ));
        }
        Ok(out)
    }

    /// Send `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET(pairs)` on the control queue and wait for the ack
    /// (§5.1.6.5: `struct virtio_net_ctrl { u8 class; u8 command; u8 data[]; u8 ack; }`, the
    /// first three device-readable, `ack` device-writable; §5.1.6.5.5: data is
    /// `struct virtio_net_ctrl_mq { le16 virtqueue_pairs; }`).
    fn vq_pairs_set(
        transport: &mut T,
        ctrl: &mut SplitQueue<H, CTRL_QUEUE_SIZE>,
        ctrl_idx: u16,
        pairs: u16,
        timed_out: &mut impl FnMut() -> bool,
    ) -> Result<(), NetInitError> {
        use virtio_drivers::BufferDirection;
        let (paddr, vaddr) = H::dma_alloc(1, BufferDirection::Both);
        if paddr == 0 {
            return Err(NetInitError::CtrlQueueFull);
        }
        let buf = vaddr.as_ptr();
        let [lo, hi] = pairs.to_le_bytes();
        // Command at offset 0 (4 bytes), ack at offset 64 (its own cache line).
        const ACK_OFFSET: usize = 64;
        const ACK_UNSET: u8 = 0xFF;
        // SAFETY: a fresh, zeroed DMA page of PAGE_SIZE bytes that only this function uses; the
        // device sees it only once it is on the ring below.
        unsafe {
            for (i, b) in [VIRTIO_NET_CTRL_MQ, VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET, lo, hi]
                .into_iter()
                .enumerate()
            {
                buf.add(i).write_volatile(b);
            }
            buf.add(ACK_OFFSET).write_volatile(ACK_UNSET);
        }
        let result =
            match ctrl.push_chain(&[(paddr, 4, false), (paddr + ACK_OFFSET as u64, 1, true)]) {
                None => Err(NetInitError::CtrlQueueFull),
                Some(head) => {
                    ctrl.publish();
                    // The control queue is rarely used: always notify (§2.7.13.4).
                    transport.notify(ctrl_idx);
                    loop {
                        if let Some((id, _len)) = ctrl.pop_used() {
                            if id == u32::from(head) {
                                ctrl.release_chain(head);
                                // SAFETY: the device is done with the buffer (it is in the used
                                // ring); the page is ours.
                                let ack = unsafe { buf.add(ACK_OFFSET).read_volatile() };
                                break if ack == VIRTIO_NET_OK {
                                    Ok(())
                                } else {
                                    Err(NetInitError::CtrlNak { pairs, ack })
                                };
                            }
                            continue;
                        }
                        if timed_out() {
                            // Leave the page allocated: the device may still write the ack; the
                            // caller resets the device. A page lost on a failed boot.
                            return Err(NetInitError::CtrlTimeout { pairs });
                        }
                        core::hint::spin_loop();
                    }
                }
            };
        // SAFETY: the allocation made above; the device no longer uses it (answered, or the
        // command never reached the ring).
        unsafe { H::dma_dealloc(paddr, vaddr, 1) };
        result
    }

    /// This handle's queue pair (0 for a single-queue device).
    pub fn queue_pair(&self) -> u16 {
        self.pair
    }

    /// Queue pairs the device was told to use (1 for a single-queue device).
    pub fn active_queue_pairs(&self) -> u16 {
        self.active_pairs
    }

    /// The device's `max_virtqueue_pairs` (1 for a single-queue device).
    pub fn max_queue_pairs(&self) -> u16 {
        self.max_pairs
    }

    /// Virtqueue indices `(rx, tx)` of this handle's pair (§5.1.2).
    pub fn queue_indices(&self) -> (u16, u16) {
        (rx_queue_index(self.pair), tx_queue_index(self.pair))
    }

    /// Whether this handle owns the device (transport, reset).
    pub fn owns_device(&self) -> bool {
        self.transport.is_some()
    }

    /// The device's MAC address (zeros if it offers none).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The MTU the device reports (§5.1.4 `mtu`: the largest IP datagram, in bytes, it
    /// carries), when it offered `VIRTIO_NET_F_MTU` (QEMU `host_mtu=N`); `None` otherwise.
    pub fn mtu(&self) -> Option<u16> {
        self.mtu
    }

    /// Features negotiated with the device.
    pub fn features(&self) -> NetFeatures {
        self.features
    }

    /// Features the device offered.
    pub fn offered_features(&self) -> NetFeatures {
        self.offered
    }

    /// After a TX reclaim: let the TX ring enter in-order mode again once no chain is in
    /// flight and [`TX_IN_ORDER_HOLD`] reclaims have passed since the last chain.
    #[inline(always)]
    fn tx_try_in_order(&mut self) {
        if self.tx_chains == 0 {
            if self.tx_in_order_hold > 0 {
                self.tx_in_order_hold -= 1;
            } else {
                self.tx.try_in_order();
            }
        }
    }

    /// Before posting a chain: leave in-order mode (a chain takes several descriptors for one
    /// avail slot) and hold it off for [`TX_IN_ORDER_HOLD`] reclaims.
    #[inline]
    pub(crate) fn tx_leave_in_order(&mut self) {
        self.tx_in_order_hold = TX_IN_ORDER_HOLD;
        self.tx.leave_in_order();
    }

    /// Whether the TX ring is in in-order mode now ([`SplitQueue::enable_in_order`]: posts
    /// and completions skip the free stack while the device completes in avail order).
    pub fn tx_in_order(&self) -> bool {
        self.tx.is_in_order()
    }

    /// Driver counters (kicks, bad tokens).
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// Whether the RX used ring holds a completed buffer not yet taken (one volatile load: a
    /// poll loop's cheap test before it sets up a burst).
    #[inline(always)]
    pub fn rx_has_used(&self) -> bool {
        self.rx.has_used()
    }

    /// Completed RX buffers waiting in the used ring, not yet taken (at most the ring size):
    /// the fused burst's own count ([`SplitQueue::used_ready`] at the ring's cursor, one load
    /// of `used->idx`). Reading it takes nothing and posts nothing (the `burstin=` gate).
    #[inline]
    pub fn rx_used(&self) -> usize {
        self.rx.used_ready(&self.rx.cursor())
    }

    /// RX buffers completed and not yet taken, as read from `used->idx` once (unclamped:
    /// [`VirtioNet::forward_burst_pending`] clamps it; 0 means nothing waits). Units: used
    /// elements (§2.7.8).
    #[inline(always)]
    pub fn rx_pending(&self) -> usize {
        self.rx.used_pending()
    }

    /// RX descriptors that can take a buffer right now (each takes
    /// [`VirtioNet::rx_buffer_pages`] pages).
    #[inline]
    pub fn rx_free_slots(&self) -> usize {
        self.rx.free_descs()
    }

    /// Pages per RX buffer: 1, or what [`VirtioNet::set_rx_buffer_pages`] set.
    #[inline]
    pub fn rx_buffer_pages(&self) -> usize {
        self.rx_buf_pages
    }

    /// Make every RX buffer `pages` pages (1..=[`MAX_FRAME_BUFFERS`]) instead of one, so that a
    /// frame of up to `pages` × 4,096 − 12 bytes arrives as **one** used element
    /// (`num_buffers` 1) instead of a chain of mergeable buffers (§5.1.6.4): each RX
    /// descriptor points, for as long as the queue lives, at its own indirect table of
    /// `pages` device-writable pages (§2.7.5.3; Linux's `add_recvbuf_big` posts the same
    /// shape, as a direct chain). A frame consumes only the pages its used length reaches;
    /// the fused burst re-posts those in the table (one store each) and the rest stay posted.
    /// Call before the first [`VirtioNet::rx_refill`]; [`VirtioNet::rx_refill`] then takes
    /// pages in groups of `pages`. `1` goes back to one page per buffer.
    ///
    /// # Errors
    /// [`RxBufferPagesError`]: a count out of range, no `VIRTIO_F_INDIRECT_DESC`, no memory for
    /// the tables, or buffers already posted. The buffers stay one page each then (frames of
    /// several pages still arrive as mergeable chains).
    pub fn set_rx_buffer_pages(&mut self, pages: usize) -> Result<(), RxBufferPagesError> {
        if pages == 0 || pages > MAX_FRAME_BUFFERS {
            return Err(RxBufferPagesError::BadCount(pages));
        }
        if self.rx_posted != 0 || self.rx.free_descs() != QUEUE_SIZE || self.rx_chain.n != 0 {
            return Err(RxBufferPagesError::RingNotEmpty);
        }
        if pages > 1 {
            if !self.features.contains(NetFeatures::RING_INDIRECT_DESC) {
                return Err(RxBufferPagesError::NoIndirect);
            }
            if !self.rx.enable_indirect() {
                return Err(RxBufferPagesError::NoTableMemory);
            }
        }
        self.rx_buf_pages = pages;
        Ok(())
    }

    /// Pages currently posted to the RX ring.
    pub fn rx_posted(&self) -> usize {
        self.rx_posted
    }

    /// Pages currently owned by the TX ring (posted, not yet completed).
    pub fn tx_posted(&self) -> usize {
        self.tx_posted
    }

    /// TX descriptors free right now.
    pub fn tx_free_slots(&self) -> usize {
        self.tx.free_descs()
    }

    /// Post `pages` as device-writable RX buffers (one page each) and publish them. Returns how
    /// many were posted; the rest (ring full) stay the caller's. No kick: see
    /// [`VirtioNet::kick`].
    ///
    /// # Safety
    /// Each page must be an order-0 RAM page the caller owns and will not touch until it comes
    /// back from [`VirtioNet::rx_burst`] or [`VirtioNet::reclaim`].
    pub unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize {
        if self.rx_buf_pages > 1 {
            // SAFETY: the caller's contract, passed on.
            return unsafe { self.rx_refill_big(pages) };
        }
        let mut n = 0;
        for &pfn in pages {
            if pfn == NO_PAGE {
                break;
            }
            let Some(token) = self.rx.push(pfn.addr(), PAGE_SIZE as u32, true) else {
                break;
            };
            debug_assert!(self.rx_pages[usize::from(token)] == NO_PAGE);
            self.rx_pages[usize::from(token)] = pfn;
            n += 1;
        }
        if n > 0 || self.rx_unpublished > 0 {
            self.rx.publish();
            self.rx_posted += n;
            self.rx_unpublished = 0;
        }
        n
    }

    /// [`VirtioNet::rx_refill`] with big RX buffers: `pages` taken in groups of
    /// [`VirtioNet::rx_buffer_pages`], each group one descriptor and its indirect table. Returns
    /// the pages posted (whole groups; a short group at the end stays the caller's).
    ///
    /// # Safety
    /// As [`VirtioNet::rx_refill`].
    #[cold]
    #[inline(never)]
    unsafe fn rx_refill_big(&mut self, pages: &[Pfn]) -> usize {
        let k = self.rx_buf_pages;
        let Some(ind) = self.rx.indirect() else {
            return 0;
        };
        let mut n = 0;
        for group in pages.chunks_exact(k) {
            if group.contains(&NO_PAGE) {
                break;
            }
            let Some(token) = self.rx.push_indirect(k, |id| {
                for (j, p) in group.iter().enumerate() {
                    ind.write_writable(id, j, p.addr(), PAGE_SIZE as u32, j + 1 == k);
                }
            }) else {
                break;
            };
            debug_assert!(self.rx_pages[usize::from(token)] == NO_PAGE);
            self.rx_pages[usize::from(token)] = group[0];
            n += k;
        }
        if n > 0 || self.rx_unpublished > 0 {
            self.rx.publish();
            self.rx_posted += n;
            self.rx_unpublished = 0;
        }
        n
    }

    /// Pop up to `out.len()` completed RX buffers (§2.7.14 used ring). Returns how many were
    /// written to `out`; every returned page is the caller's again, whatever its status.
    pub fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize {
        // SAFETY: no page is handed to the device: every emptied slot goes to the free list.
        unsafe { self.rx_burst_refill(out, || None) }
    }

    /// [`VirtioNet::rx_burst`] that refills each slot as it empties it: every completed
    /// descriptor is re-posted at once with a page from `alloc` (ixy.rs `rx_batch`), published
    /// in batches of 32 ([`VirtioNet::rx_publish`] flushes the rest). A slot
    /// `alloc` cannot fill (`None`) goes back to the free list for a later
    /// [`VirtioNet::rx_refill`]. A used entry whose id was not posted is counted (`bad_token`)
    /// and skipped.
    ///
    /// # Safety
    /// Every page `alloc` returns must be an order-0 RAM page the caller owns and gives to the
    /// device until it comes back from an RX burst or [`VirtioNet::take_pages`].
    #[inline]
    pub unsafe fn rx_burst_refill(
        &mut self,
        out: &mut [RxBuf],
        mut alloc: impl FnMut() -> Option<Pfn>,
    ) -> usize {
        if self.rx_buf_pages > 1 {
            // SAFETY: the caller's contract, passed on.
            return unsafe { self.rx_burst_refill_big(out, &mut alloc) };
        }
        let mut n = 0;
        let mut reposted = 0;
        while n < out.len() {
            let Some((id, used)) = self.rx.pop_used().map(rx_used_faulty) else {
                break;
            };
            let Some(pfn) = self.take_rx_page(id) else {
                continue;
            };
            match alloc().filter(|&p| p != NO_PAGE) {
                Some(new) => {
                    self.rx
                        .repost(id as u16, new.addr(), PAGE_SIZE as u32, true);
                    self.rx_pages[id as usize] = new;
                    reposted += 1;
                }
                None => {
                    self.rx.release(id as u16);
                    self.rx_posted -= 1;
                }
            }
            out[n] = self.classify_rx(pfn, used as usize);
            n += 1;
        }
        if reposted > 0 {
            self.rx_unpublished += reposted;
            // Publish in batches, as a separate refill pass would (the device keeps at least
            // QUEUE_SIZE - RX_PUBLISH_BATCH buffers); `rx_publish` flushes the rest.
            if self.rx_unpublished >= RX_PUBLISH_BATCH {
                self.rx_publish();
            }
        }
        n
    }

    /// [`VirtioNet::rx_burst_refill`] with big RX buffers: per used element, its frame's
    /// pages (those its used length reaches) as buffers of `out` (the first classified as a
    /// one-page buffer would be: `Ok` when the frame fits the first page; else it is
    /// [`RxStatus::TooBig`] and the others [`RxStatus::Continuation`]: this path does not
    /// collect frames of several pages). The slot is re-posted with fresh pages from `alloc`
    /// where the frame was; if `alloc` runs out, the slot is released and its other pages
    /// (and the fresh ones taken) are returned as [`RxStatus::Unused`]. An element is taken
    /// while `out` has room for a slot's pages (`k`, [`VirtioNet::rx_buffer_pages`]); it is
    /// refilled only while `out` has room for the worst case of a release after a partial
    /// refill (2 × `k` − 1), else released at once (its `k` pages out, none taken from
    /// `alloc`). An `out` shorter than `k` takes nothing.
    ///
    /// # Safety
    /// As [`VirtioNet::rx_burst_refill`].
    #[cold]
    #[inline(never)]
    unsafe fn rx_burst_refill_big(
        &mut self,
        out: &mut [RxBuf],
        alloc: &mut impl FnMut() -> Option<Pfn>,
    ) -> usize {
        let k = self.rx_buf_pages;
        let mut n = 0;
        while out.len() - n >= k {
            // Room for the worst case of a partial refill: else the slot is released whole.
            let may_refill = out.len() - n >= 2 * k - 1;
            let Some((id, used)) = self
                .rx
                .pop_used()
                .map(|e| rx_used_faulty_in(e, k * PAGE_SIZE))
            else {
                break;
            };
            let Some(pfn0) = self.take_rx_page(id) else {
                continue;
            };
            let slot = self.big_slot_refill(id as u16, pfn0, used as usize, || {
                if may_refill {
                    alloc()
                } else {
                    None
                }
            });
            // The frame's pages first: the first as one page is classified, the rest as its
            // continuations; then what the slot gave back.
            let first = self.classify_rx(pfn0, slot.first_len);
            out[n] = if slot.touched > 1 && first.status == RxStatus::Ok {
                RxBuf {
                    status: RxStatus::TooBig,
                    ..first
                }
            } else {
                first
            };
            n += 1;
            for &p in &slot.pages[1..slot.touched] {
                out[n] = RxBuf {
                    pfn: p,
                    len: 0,
                    status: RxStatus::Continuation,
                };
                n += 1;
            }
            for &p in slot.unused() {
                out[n] = RxBuf {
                    pfn: p,
                    len: 0,
                    status: RxStatus::Unused,
                };
                n += 1;
            }
        }
        n
    }

    /// A big RX buffer's slot `id` just popped with `used` bytes (its first page `pfn0`, taken
    /// out of `rx_pages`): the pages the frame reached (`touched`: as far as the used length
    /// goes; every page for a length past the buffer, whose contents cannot be trusted) are
    /// the frame's; the slot is re-posted with pages from `fresh` in their table entries (one
    /// store each, the descriptor unchanged), or, when `fresh` runs dry first, released (back
    /// to the free list for a later `rx_refill`), its other pages and the fresh ones taken
    /// returned as [`BigSlot::unused`]. Shared by [`VirtioNet::rx_burst_refill`] and the fused
    /// burst's slow path.
    pub(crate) fn big_slot_refill(
        &mut self,
        id: u16,
        pfn0: Pfn,
        used: usize,
        mut fresh: impl FnMut() -> Option<Pfn>,
    ) -> BigSlot {
        let k = self.rx_buf_pages.min(MAX_FRAME_BUFFERS);
        let within = used <= k * PAGE_SIZE;
        let mut slot = BigSlot {
            touched: if within {
                used.div_ceil(PAGE_SIZE).max(1)
            } else {
                k
            },
            first_len: if within { used.min(PAGE_SIZE) } else { used },
            pages: [NO_PAGE; MAX_FRAME_BUFFERS],
            spare: [NO_PAGE; 2 * MAX_FRAME_BUFFERS],
            nspare: 0,
        };
        slot.pages[0] = pfn0;
        let Some(ind) = self.rx.indirect() else {
            // Not reached (big buffers have tables): the slot is gone, its first page out.
            self.rx.release(id);
            return slot;
        };
        for j in 1..k {
            slot.pages[j] = Pfn::from_addr(ind.addr(id, j));
        }
        let mut got = 0;
        while got < slot.touched {
            match fresh().filter(|&p| p != NO_PAGE) {
                Some(p) => {
                    slot.spare[got] = p;
                    got += 1;
                }
                None => break,
            }
        }
        if got == slot.touched {
            for (j, p) in slot.spare[..got].iter().enumerate() {
                ind.set_addr(id, j, p.addr());
            }
            self.rx_pages[usize::from(id)] = slot.spare[0];
            self.rx.repost_indirect(id);
            self.rx_unpublished += 1;
            if self.rx_unpublished >= RX_PUBLISH_BATCH {
                self.rx_publish();
            }
        } else {
            // No page for the whole slot: it goes back to the free list, and every page it
            // still held, with the fresh ones, to the caller.
            self.rx.release(id);
            self.rx_posted -= k;
            for &p in &slot.pages[slot.touched..k] {
                slot.spare[got] = p;
                got += 1;
            }
            slot.nspare = got;
        }
        slot
    }

    /// The page behind RX token `id` (a used entry's id), taken out of the table; `None` (and
    /// counted `bad_token`) when the device returned an id the driver has not posted.
    #[inline(always)]
    fn take_rx_page(&mut self, id: u32) -> Option<Pfn> {
        let Some(slot) = self.rx_pages.get_mut(id as usize) else {
            self.bad_token();
            return None;
        };
        let pfn = core::mem::replace(slot, NO_PAGE);
        if pfn == NO_PAGE {
            self.bad_token();
            return None;
        }
        Some(pfn)
    }

    /// [`VirtioNet::take_rx_page`] for the TX table: the page and its owner tag.
    #[inline(always)]
    fn take_tx_page(&mut self, id: u32) -> Option<TxSlot> {
        let Some(slot) = self.tx_pages.get_mut(id as usize) else {
            self.bad_token();
            return None;
        };
        let pfn = core::mem::replace(&mut slot.pfn, NO_PAGE);
        if pfn == NO_PAGE {
            self.bad_token();
            return None;
        }
        Some(TxSlot { pfn, tag: slot.tag })
    }

    #[cold]
    fn bad_token(&mut self) {
        self.stats.bad_token += 1;
    }

    /// Make every re-posted RX buffer visible to the device now (before the core sleeps).
    #[inline]
    pub fn rx_publish(&mut self) {
        if self.rx_unpublished > 0 {
            self.rx.publish();
            self.rx_unpublished = 0;
        }
    }

    /// The buffer's `num_buffers` (§5.1.6), or 1 when `VIRTIO_NET_F_MRG_RXBUF` was not
    /// negotiated: §5.1.6.4.1 has the device write 1 then, but QEMU 7.2's virtio-net leaves
    /// bytes 10..12 as they were (a page that last held frame bytes in the middle of a big RX
    /// buffer then reads as the head of a frame of many buffers). Linux's `virtio_net` reads
    /// the field only with mergeable buffers too.
    ///
    /// # Safety
    /// The page is the driver's (the device is done with it).
    #[inline]
    unsafe fn num_buffers(&self, pfn: Pfn) -> u16 {
        if !self.features.contains(NetFeatures::MRG_RXBUF) {
            return 1;
        }
        // SAFETY: per the contract; offset 10..12 is inside the page.
        let hdr = unsafe { page_bytes(pfn) };
        u16::from_le_bytes([hdr[NUM_BUFFERS_OFFSET], hdr[NUM_BUFFERS_OFFSET + 1]])
    }

    fn classify_rx(&mut self, pfn: Pfn, used: usize) -> RxBuf {
        if self.rx_chain.n < self.rx_chain.want {
            // A frame half collected by the fused burst loses this buffer (a continuation it
            // needed, or the next frame's head): it can never be whole. Its pages go back
            // the next time the fused burst looks (`rx_chain_give_back`), never forwarded.
            self.rx_chain.want = 0;
        }
        if self.rx_skip > 0 {
            self.rx_skip -= 1;
            return RxBuf {
                pfn,
                len: 0,
                status: RxStatus::Continuation,
            };
        }
        if !(NET_HDR_LEN..=PAGE_SIZE).contains(&used) {
            return RxBuf {
                pfn,
                len: 0,
                status: RxStatus::Malformed,
            };
        }
        // SAFETY: the device is done with the page (popped above) and we own it.
        let num_buffers = unsafe { self.num_buffers(pfn) };
        let len = used - NET_HDR_LEN;
        match num_buffers {
            // §5.1.6.4.1: without MRG_RXBUF the device sets num_buffers to 1 (0 is tolerated;
            // so is any value then: `num_buffers`).
            0 | 1 => RxBuf {
                pfn,
                len,
                status: RxStatus::Ok,
            },
            k if usize::from(k) <= QUEUE_SIZE => {
                self.rx_skip = k - 1;
                RxBuf {
                    pfn,
                    len,
                    status: RxStatus::TooBig,
                }
            }
            _ => RxBuf {
                pfn,
                len,
                status: RxStatus::Malformed,
            },
        }
    }

    /// Queue frames for transmission, zero copy, and publish them: each page's first
    /// [`NET_HDR_LEN`] bytes are zeroed (no checksum offload, no GSO: §5.1.6.2) and the page is
    /// posted as one device-readable descriptor. Returns how many of `bufs` (a prefix) were
    /// queued; the rest did not fit in the ring (or had a bad length) and stay the caller's
    /// (count them as `tx_ring_full`).
    ///
    /// # Safety
    /// Each page must be owned by the caller, hold a frame of `len` bytes at offset
    /// [`NET_HDR_LEN`], and not be touched until it comes back from [`VirtioNet::tx_complete`]
    /// or [`VirtioNet::take_pages`].
    pub unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize {
        let mut n = 0;
        for b in bufs {
            // SAFETY: caller contract, the frame at `NET_HDR_LEN` as `tx_post` wants it.
            if !unsafe { self.tx_post(b.pfn, NET_HDR_LEN, b.len, b.owner) } {
                break;
            }
            n += 1;
        }
        if n > 0 {
            self.tx_publish();
        }
        n
    }

    /// Queue one frame of `len` bytes that starts `offset` bytes into page `pfn` (at least
    /// [`NET_HDR_LEN`]: a frame received on a NIC that keeps more header bytes than virtio-net,
    /// or as many) without publishing it ([`VirtioNet::tx_publish`]): the 12 bytes before the
    /// frame become its zeroed `virtio_net_hdr` (§5.1.6.2) and the descriptor starts there.
    /// `false` (the page stays the caller's) when the ring is full or the frame does not fit:
    /// `len` 0, past the page, or `offset` below the header's 12 bytes.
    ///
    /// # Safety
    /// The page is owned by the caller, holds the frame there, and is the device's until it
    /// comes back from a TX completion or [`VirtioNet::take_pages`].
    #[inline]
    pub unsafe fn tx_post(&mut self, pfn: Pfn, offset: usize, len: usize, owner: TxOwner) -> bool {
        if len == 0 || offset < NET_HDR_LEN || offset + len > PAGE_SIZE || pfn == NO_PAGE {
            return false;
        }
        // The fault image: the ring has no room for this frame.
        if mm::fault::hit(mm::fault::Fault::TxRingFull) {
            return false;
        }
        let hdr = offset - NET_HDR_LEN;
        // SAFETY: caller contract: the page is ours until the device completes it.
        unsafe { page_bytes(pfn)[hdr..offset].fill(0) };
        let Some(token) = self
            .tx
            .push(pfn.addr() + hdr as u64, (NET_HDR_LEN + len) as u32, false)
        else {
            return false;
        };
        self.tx_pages[usize::from(token)] = TxSlot {
            pfn,
            tag: TxTag::one(owner),
        };
        self.tx_posted += 1;
        true
    }

    /// Make every frame queued by [`VirtioNet::tx_post`] visible to the device (one release
    /// store of `avail->idx`, §2.7.13.3). No kick: see [`VirtioNet::kick`].
    #[inline]
    pub fn tx_publish(&mut self) {
        self.tx.publish();
    }

    /// Pop completed TX buffers (their pages are the caller's again) into `out`; returns how
    /// many.
    ///
    /// A frame sent as a chain of pages comes back as one entry per page, all with its owner
    /// tag; while chains are in flight, a completion is taken only when `out` has room for
    /// [`MAX_FRAME_BUFFERS`] more entries.
    pub fn tx_complete(&mut self, out: &mut [TxDone]) -> usize {
        let mut n = 0;
        while n < out.len() && (self.tx_chains == 0 || out.len() - n >= MAX_FRAME_BUFFERS) {
            let Some(id) = self.tx.pop_used().map(|(id, _len)| tx_used_id_faulty(id)) else {
                break;
            };
            let Some(slot) = self.take_tx_page(id) else {
                continue;
            };
            self.tx.release(id as u16);
            self.tx_posted -= 1;
            let done = TxDone {
                pfn: slot.pfn,
                owner: slot.tag.owner(),
            };
            if slot.tag.is_chain() {
                let (first, rest) = out[n..].split_at_mut(1);
                first[0] = done;
                let mut k = 0;
                let c = self.tx.cursor();
                let (c, _) = self.tx_chain_rest(c, id as u16, done.owner, &mut |pfn, owner| {
                    if let Some(o) = rest.get_mut(k) {
                        *o = TxDone { pfn, owner };
                        k += 1;
                    }
                });
                self.tx.set_cursor(c);
                n += 1 + k;
                continue;
            }
            out[n] = done;
            n += 1;
        }
        self.tx_try_in_order();
        n
    }

    /// Use cached doorbell addresses for kicks (§4.1.4.4: writing the virtqueue index to the
    /// queue's notification address notifies it).
    ///
    /// # Safety
    /// `rx` and `tx` must be the mapped notification addresses of this handle's virtqueues
    /// ([`VirtioNet::queue_indices`]) of this very device, valid for as long as the device lives.
    pub unsafe fn set_doorbells(&mut self, rx: u64, tx: u64) {
        self.doorbells = Some([rx as *mut u16, tx as *mut u16]);
    }

    #[cold]
    #[inline(never)]
    fn notify(&mut self, which: usize) {
        let (rxq, txq) = self.queue_indices();
        let queue = if which == RX { rxq } else { txq };
        match (self.doorbells, self.transport.as_mut()) {
            // SAFETY: per `set_doorbells`' contract, a live doorbell of this device.
            (Some(db), _) => unsafe { db[which].write_volatile(queue) },
            (None, Some(t)) => t.notify(queue),
            // A pair handle without doorbells cannot notify (documented on `new_mq`).
            (None, None) => {}
        }
    }

    /// Notify the device about buffers published since the last call, at most once per queue,
    /// and only when the device asked for it (§2.7.10 with EVENT_IDX, else the used ring's
    /// NO_NOTIFY flag). Call once per poll iteration. Returns the kicks written.
    #[inline(always)]
    pub fn kick(&mut self) -> u32 {
        let mut kicks = 0;
        if self.rx.needs_kick() {
            self.notify(RX);
            self.stats.kicks_rx += 1;
            kicks += 1;
        }
        if self.tx.needs_kick() {
            self.notify(TX);
            self.stats.kicks_tx += 1;
            kicks += 1;
        }
        kicks
    }

    /// After the core wakes (or decides not to sleep): park `used_event` just behind the used
    /// index again, so the device does not interrupt while we poll. Once parked it stays behind
    /// until the index wraps (65,536 buffers later), so once per wake-up is enough.
    pub fn park_interrupts(&mut self) {
        self.rx.suppress_interrupts();
        self.tx.suppress_interrupts();
    }

    /// Before the core sleeps: ask for an RX interrupt on the next received frame. Returns
    /// `true` if frames are already waiting (do not sleep). The next [`VirtioNet::kick`]
    /// suppresses interrupts again.
    pub fn rx_arm_interrupt(&mut self) -> bool {
        self.rx.arm_interrupt()
    }

    /// Reset the device (§2.4: status 0; it stops using every buffer of every queue) if this
    /// handle owns it. Returns whether it did. After this the device does nothing until a new
    /// driver initialises it.
    pub fn reset_device(&mut self) -> bool {
        match self.transport.as_mut() {
            Some(t) => {
                t.set_status(virtio_drivers::transport::DeviceStatus::empty());
                true
            }
            None => false,
        }
    }

    /// Reset the device ([`VirtioNet::reset_device`]) and hand back every page still posted on
    /// either ring through `f`. Only for the handle that owns the device; other pairs' handles
    /// use [`VirtioNet::take_pages`] once the owner has reset it.
    ///
    /// # Errors
    /// [`NotOwner`] (nothing is taken) on a handle that does not own the device.
    pub fn reclaim(&mut self, f: impl FnMut(Pfn)) -> Result<(), NotOwner> {
        if !self.reset_device() {
            return Err(NotOwner);
        }
        // SAFETY: just reset.
        unsafe { self.take_pages(f) };
        Ok(())
    }

    /// Hand back every page still posted on either ring through `f`.
    ///
    /// # Safety
    /// The device must have been reset ([`VirtioNet::reset_device`] on the owning handle,
    /// possibly on another core, with the reset ordered before this call): otherwise it may
    /// still write into the pages.
    pub unsafe fn take_pages(&mut self, mut f: impl FnMut(Pfn)) {
        let (k, rind) = (self.rx_buf_pages, self.rx.indirect());
        for (id, slot) in self.rx_pages.iter_mut().enumerate() {
            let pfn = core::mem::replace(slot, NO_PAGE);
            if pfn == NO_PAGE {
                continue;
            }
            f(pfn);
            if let (true, Some(ind)) = (k > 1, rind) {
                // A big RX buffer's other pages are in its table only.
                for j in 1..k {
                    f(Pfn::from_addr(ind.addr(id as u16, j)));
                }
            }
        }
        let (txr, ind) = (self.tx.rings(), self.tx.indirect());
        for (id, slot) in self.tx_pages.iter_mut().enumerate() {
            let pfn = core::mem::replace(&mut slot.pfn, NO_PAGE);
            if pfn == NO_PAGE {
                continue;
            }
            f(pfn);
            if !slot.tag.is_chain() {
                continue;
            }
            if let (Some(m), Some(ind)) = (txr.desc_indirect(id as u16), ind) {
                // An indirect frame's other pages are in its table only (§2.7.5.3).
                for j in 1..m.min(MAX_FRAME_BUFFERS) {
                    f(Pfn::from_addr(ind.addr(id as u16, j)));
                }
            }
        }
        let chain = core::mem::take(&mut self.rx_chain);
        for &pfn in &chain.pages[..chain.n] {
            f(pfn);
        }
        self.rx_skip = 0;
        self.rx_posted = 0;
        self.tx_posted = 0;
        self.tx_chains = 0;
    }
}
