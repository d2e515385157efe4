//! Poll-mode virtio-net driver: page_pool pages as RX descriptors, zero-copy TX, one kick per
//! queue per poll iteration.
//!
//! One file per axis, all on this module's private ring state ([`VirtioNet`]): `setup`
//! (features, MAC/MTU, queue pairs, doorbells, kicks, reset), `rx` (posting RX buffers, the
//! staged RX burst, the per-buffer classification), `tx` (posting frames: one descriptor, a
//! chain or an indirect table), `completion` (every TX completion loop, teardown), `forward`
//! (the fused RX→TX loops: one-page, chain-aware in `forward/chains`, big buffers in
//! `forward/big`) and `nic_impl` (the driver-neutral [`crate::nic::Nic`]).
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
/// `queues=` key takes 1..=16, igb's 82576 having 16, and refuses more than 4 on virtio-net
/// ports at set-up).
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
        Self(owner.word())
    }

    /// The head of a descriptor chain sent for `owner`.
    #[inline(always)]
    pub(crate) const fn chain(owner: TxOwner) -> Self {
        Self(owner.word() | Self::CHAIN)
    }

    /// Whether the slot heads a descriptor chain.
    #[inline(always)]
    pub(crate) const fn is_chain(self) -> bool {
        self.0 & Self::CHAIN != 0
    }

    /// The owner the frame was sent for.
    #[inline(always)]
    pub(crate) const fn owner(self) -> TxOwner {
        TxOwner::new((self.0 & !Self::CHAIN) as u16)
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
    /// The longest frame delivered (bytes, header excluded; [`crate::nic::Nic::set_rx_frame_limit`]):
    /// longer ones are handed back `TooBig`. Default [`MAX_MULTI_FRAME_LEN`].
    rx_limit: usize,
    /// The longest one-page frame delivered: `rx_limit`, at most a page less the header (the
    /// fused burst's whole-frame test, read once per burst).
    rx_fits: usize,
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

mod completion;
mod forward;
mod nic_impl;
mod rx;
mod setup;
mod tx;

pub use setup::{FeatureNames, NetFeatures, NetInitError, DRIVER_FEATURES};

impl<H: Hal, T: Transport> VirtioNet<H, T> {
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

    #[cold]
    fn bad_token(&mut self) {
        self.stats.bad_token += 1;
    }
}
