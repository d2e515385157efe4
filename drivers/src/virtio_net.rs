//! Poll-mode virtio-net driver: page_pool pages as RX descriptors, zero-copy TX, one kick per
//! queue per poll iteration.
//!
//! Built on `virtio-drivers` 0.13's public [`Transport`] and [`VirtQueue`] (its `VirtIONetRaw`
//! notifies per buffer, which the fast path must not do). Section numbers refer to the VIRTIO
//! 1.2 specification (OASIS, 2022).
//!
//! Buffers: every RX descriptor is one whole order-0 page ([`PAGE_SIZE`] bytes) handed in by the
//! caller as a [`Pfn`]; the device writes the 12-byte `virtio_net_hdr` (§5.1.6) at offset 0 and
//! the frame right after it. TX posts the very same page, header zeroed in place, as one
//! device-readable descriptor. The driver remembers which page sits behind each descriptor
//! chain (the token, §2.7.13) so completions hand the page back to the caller.
//!
//! Identity mapping: the kernel runs in one identity-mapped address space, so a page's physical
//! address is also its virtual address; the HAL's `share` must return the buffer address as is.

use mm::{Pfn, PAGE_SIZE};
use virtio_drivers::queue::VirtQueue;
use virtio_drivers::transport::Transport;
use virtio_drivers::Hal;

/// Descriptors per virtqueue. QEMU's virtio-net default ring size (`rx_queue_size` /
/// `tx_queue_size` = 256); larger rings need `-device virtio-net-pci,rx_queue_size=…`.
pub const QUEUE_SIZE: usize = 256;

/// Virtqueue index of the first receive queue (§5.1.2).
const RX_QUEUE: u16 = 0;
/// Virtqueue index of the first transmit queue (§5.1.2).
const TX_QUEUE: u16 = 1;

/// Size of `struct virtio_net_hdr` when `VIRTIO_F_VERSION_1` is negotiated (§5.1.6: the
/// `num_buffers` field is always present for modern devices): 12 bytes.
pub const NET_HDR_LEN: usize = 12;

/// Offset of `num_buffers` (le16) in `virtio_net_hdr` (§5.1.6).
const NUM_BUFFERS_OFFSET: usize = 10;

/// Largest frame (Ethernet header to end of payload, no FCS) one RX page can hold: 4084 bytes.
pub const MAX_FRAME_LEN: usize = PAGE_SIZE - NET_HDR_LEN;

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
    }
}

/// What the driver asks for. Not INDIRECT_DESC (one descriptor per buffer already; indirect
/// tables would need a heap allocation per packet in `virtio-drivers`), not checksum or GSO
/// offloads (frames are forwarded as received, fully checksummed).
pub const DRIVER_FEATURES: NetFeatures = NetFeatures::MAC
    .union(NetFeatures::MRG_RXBUF)
    .union(NetFeatures::RING_EVENT_IDX)
    .union(NetFeatures::VERSION_1);

/// Why the device could not be brought up.
#[derive(Debug)]
pub enum NetInitError {
    /// The device does not offer VIRTIO_F_VERSION_1 (legacy-only devices are not supported).
    NotModern,
    /// The device's queue `queue` is smaller than [`QUEUE_SIZE`] (`max` descriptors).
    QueueTooSmall {
        /// Virtqueue index.
        queue: u16,
        /// Largest size the device accepts.
        max: u32,
    },
    /// Setting up virtqueue `queue` failed in `virtio-drivers`.
    Queue {
        /// Virtqueue index.
        queue: u16,
        /// The crate's error.
        err: virtio_drivers::Error,
    },
    /// Reading the MAC from config space failed.
    Config(virtio_drivers::Error),
}

impl core::fmt::Display for NetInitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotModern => write!(f, "device does not offer VIRTIO_F_VERSION_1"),
            Self::QueueTooSmall { queue, max } => write!(
                f,
                "virtqueue {queue} holds at most {max} descriptors, driver needs {QUEUE_SIZE}"
            ),
            Self::Queue { queue, err } => write!(f, "virtqueue {queue} setup failed: {err}"),
            Self::Config(e) => write!(f, "config space read failed: {e}"),
        }
    }
}

/// What a completed RX descriptor carried.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RxStatus {
    /// A whole frame of `len` bytes at offset [`NET_HDR_LEN`] of the page.
    Ok,
    /// The first buffer of a frame that spans several buffers (larger than [`MAX_FRAME_LEN`]):
    /// drop it and count one `too_big`.
    TooBig,
    /// A continuation buffer of a `TooBig` frame: drop it, count nothing more.
    Continuation,
    /// The device reported fewer bytes than a `virtio_net_hdr`, or a bad `num_buffers`: drop,
    /// count `bad_desc`.
    Malformed,
}

/// One completed RX buffer.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RxBuf {
    /// The page (now owned by the caller again).
    pub pfn: Pfn,
    /// Frame length in bytes, excluding the virtio header (valid when `status` is `Ok`).
    pub len: usize,
    /// See [`RxStatus`].
    pub status: RxStatus,
}

/// One frame to transmit: `len` frame bytes at offset [`NET_HDR_LEN`] of page `pfn`.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct TxBuf {
    /// The page holding the frame; owned by the device until it comes back from
    /// [`VirtioNet::tx_complete`].
    pub pfn: Pfn,
    /// Frame length in bytes (1..=[`MAX_FRAME_LEN`]).
    pub len: usize,
}

/// Per-device counters kept by the driver.
#[derive(Copy, Clone, Debug, Default)]
pub struct DriverStats {
    /// Notifications written for the RX queue.
    pub kicks_rx: u64,
    /// Notifications written for the TX queue.
    pub kicks_tx: u64,
    /// Used-ring entries whose id was not a descriptor the driver had posted (device bug);
    /// the entry is skipped.
    pub bad_token: u64,
}

/// A poll-mode virtio-net device with one RX and one TX queue.
///
/// Not `Sync` by design: one core owns a device's queues and runs its poll loop.
pub struct VirtioNet<H: Hal, T: Transport> {
    transport: T,
    rx: VirtQueue<H, QUEUE_SIZE>,
    tx: VirtQueue<H, QUEUE_SIZE>,
    /// Page behind each RX token (head descriptor index).
    rx_pages: [Option<Pfn>; QUEUE_SIZE],
    /// Page and posted byte length behind each TX token.
    tx_pages: [Option<(Pfn, u32)>; QUEUE_SIZE],
    rx_posted: usize,
    tx_posted: usize,
    rx_added: bool,
    tx_added: bool,
    /// Continuation buffers still to come for a multi-buffer (too big) frame.
    rx_skip: u16,
    mac: [u8; 6],
    features: NetFeatures,
    offered: NetFeatures,
    stats: DriverStats,
}

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

impl<H: Hal, T: Transport> VirtioNet<H, T> {
    /// Initialise the device (§3.1.1): reset, negotiate [`DRIVER_FEATURES`], set up virtqueues
    /// 0 (RX) and 1 (TX) of [`QUEUE_SIZE`] descriptors, read the MAC, set DRIVER_OK.
    ///
    /// No buffers are posted yet: call [`VirtioNet::rx_refill`].
    pub fn new(mut transport: T) -> Result<Self, NetInitError> {
        let offered = NetFeatures::from_bits_retain(transport.read_device_features());
        if !offered.contains(NetFeatures::VERSION_1) {
            return Err(NetInitError::NotModern);
        }
        let features = transport.begin_init(DRIVER_FEATURES);
        for q in [RX_QUEUE, TX_QUEUE] {
            let max = transport.max_queue_size(q);
            if max < QUEUE_SIZE as u32 {
                return Err(NetInitError::QueueTooSmall { queue: q, max });
            }
        }
        let event_idx = features.contains(NetFeatures::RING_EVENT_IDX);
        let rx = VirtQueue::new(&mut transport, RX_QUEUE, false, event_idx)
            .map_err(|err| NetInitError::Queue { queue: RX_QUEUE, err })?;
        let tx = VirtQueue::new(&mut transport, TX_QUEUE, false, event_idx)
            .map_err(|err| NetInitError::Queue { queue: TX_QUEUE, err })?;
        // §5.1.4: `mac` is the first field of virtio_net_config, valid when VIRTIO_NET_F_MAC.
        let mac = if features.contains(NetFeatures::MAC) {
            transport.read_config_space::<[u8; 6]>(0).map_err(NetInitError::Config)?
        } else {
            [0; 6]
        };
        transport.finish_init();
        Ok(Self {
            transport,
            rx,
            tx,
            rx_pages: [None; QUEUE_SIZE],
            tx_pages: [None; QUEUE_SIZE],
            rx_posted: 0,
            tx_posted: 0,
            rx_added: false,
            tx_added: false,
            rx_skip: 0,
            mac,
            features,
            offered,
            stats: DriverStats::default(),
        })
    }

    /// The device's MAC address (zeros if it offers none).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Features negotiated with the device.
    pub fn features(&self) -> NetFeatures {
        self.features
    }

    /// Features the device offered.
    pub fn offered_features(&self) -> NetFeatures {
        self.offered
    }

    /// Driver counters (kicks, bad tokens).
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// RX descriptors that can take a page right now.
    pub fn rx_free_slots(&self) -> usize {
        self.rx.available_desc()
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
        self.tx.available_desc()
    }

    /// Post `pages` as device-writable RX buffers (one page each). Returns how many were posted;
    /// the rest (ring full) stay the caller's. No kick: see [`VirtioNet::kick`].
    ///
    /// # Safety
    /// Each page must be an order-0 RAM page the caller owns and will not touch until it comes
    /// back from [`VirtioNet::rx_burst`] or [`VirtioNet::reclaim`].
    pub unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize {
        let mut n = 0;
        for &pfn in pages {
            if self.rx.available_desc() == 0 {
                break;
            }
            // SAFETY: caller contract: the page is ours and untouched until completion.
            let buf = unsafe { page_bytes(pfn) };
            // SAFETY: the buffer stays valid and untouched until `pop_used` returns it (we keep
            // the page in `rx_pages` and never alias it meanwhile).
            match unsafe { self.rx.add(&[], &mut [buf]) } {
                Ok(token) => {
                    debug_assert!(self.rx_pages[usize::from(token)].is_none());
                    self.rx_pages[usize::from(token)] = Some(pfn);
                    self.rx_posted += 1;
                    n += 1;
                }
                Err(_) => break,
            }
        }
        self.rx_added |= n > 0;
        n
    }

    /// Pop up to `out.len()` completed RX buffers (§2.7.14 used ring). Returns how many were
    /// written to `out`; every returned page is the caller's again, whatever its status.
    pub fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(token) = self.rx.peek_used() else { break };
            let Some(pfn) = self.rx_pages.get(usize::from(token)).copied().flatten() else {
                // A token we never posted: the device is broken. Stop polling this ring rather
                // than pop with the wrong buffer.
                self.stats.bad_token += 1;
                break;
            };
            // SAFETY: `pfn` is the page posted under `token`, exactly as passed to `add`.
            let buf = unsafe { page_bytes(pfn) };
            // SAFETY: same buffer set as the `add` that returned `token`.
            let used = match unsafe { self.rx.pop_used(token, &[], &mut [buf]) } {
                Ok(len) => len as usize,
                Err(_) => break,
            };
            self.rx_pages[usize::from(token)] = None;
            self.rx_posted -= 1;
            out[n] = self.classify_rx(pfn, used);
            n += 1;
        }
        n
    }

    fn classify_rx(&mut self, pfn: Pfn, used: usize) -> RxBuf {
        if self.rx_skip > 0 {
            self.rx_skip -= 1;
            return RxBuf { pfn, len: 0, status: RxStatus::Continuation };
        }
        if used < NET_HDR_LEN || used > PAGE_SIZE {
            return RxBuf { pfn, len: 0, status: RxStatus::Malformed };
        }
        // SAFETY: the device is done with the page (popped above) and we own it.
        let hdr = unsafe { page_bytes(pfn) };
        let num_buffers = u16::from_le_bytes([hdr[NUM_BUFFERS_OFFSET], hdr[NUM_BUFFERS_OFFSET + 1]]);
        let len = used - NET_HDR_LEN;
        match num_buffers {
            // §5.1.6.4: without MRG_RXBUF the device sets num_buffers to 1 (0 is tolerated).
            0 | 1 => RxBuf { pfn, len, status: RxStatus::Ok },
            k if usize::from(k) <= QUEUE_SIZE => {
                self.rx_skip = k - 1;
                RxBuf { pfn, len, status: RxStatus::TooBig }
            }
            _ => RxBuf { pfn, len, status: RxStatus::Malformed },
        }
    }

    /// Queue frames for transmission, zero copy: each page's first [`NET_HDR_LEN`] bytes are
    /// zeroed (no checksum offload, no GSO: §5.1.6.2) and the page is posted as one
    /// device-readable descriptor. Returns how many of `bufs` (a prefix) were queued; the rest
    /// did not fit in the ring and stay the caller's (count them as `tx_ring_full`).
    ///
    /// # Safety
    /// Each page must be owned by the caller, hold a frame of `len` bytes at offset
    /// [`NET_HDR_LEN`], and not be touched until it comes back from [`VirtioNet::tx_complete`]
    /// or [`VirtioNet::reclaim`].
    pub unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize {
        let mut n = 0;
        for b in bufs {
            if self.tx.available_desc() == 0 || b.len == 0 || b.len > MAX_FRAME_LEN {
                break;
            }
            // SAFETY: caller contract.
            let page = unsafe { page_bytes(b.pfn) };
            page[..NET_HDR_LEN].fill(0);
            let total = NET_HDR_LEN + b.len;
            // SAFETY: the page stays valid and untouched until `pop_used` returns it.
            match unsafe { self.tx.add(&[&page[..total]], &mut []) } {
                Ok(token) => {
                    self.tx_pages[usize::from(token)] = Some((b.pfn, total as u32));
                    self.tx_posted += 1;
                    n += 1;
                }
                Err(_) => break,
            }
        }
        self.tx_added |= n > 0;
        n
    }

    /// Pop completed TX buffers (their pages are the caller's again) into `out`; returns how
    /// many.
    pub fn tx_complete(&mut self, out: &mut [Pfn]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(token) = self.tx.peek_used() else { break };
            let Some((pfn, total)) = self.tx_pages.get(usize::from(token)).copied().flatten()
            else {
                self.stats.bad_token += 1;
                break;
            };
            // SAFETY: the page was posted under `token` with exactly `total` bytes.
            let page = unsafe { page_bytes(pfn) };
            // SAFETY: same buffer set as the `add` that returned `token`.
            if unsafe { self.tx.pop_used(token, &[&page[..total as usize]], &mut []) }.is_err() {
                break;
            }
            self.tx_pages[usize::from(token)] = None;
            self.tx_posted -= 1;
            out[n] = pfn;
            n += 1;
        }
        n
    }

    /// Notify the device about buffers added since the last call, at most once per queue, and
    /// only when the device asked for it (§2.7.10 / §2.7.7 with EVENT_IDX, else the used
    /// ring's NO_NOTIFY flag). Call once per poll iteration. Returns the kicks written.
    pub fn kick(&mut self) -> u32 {
        let mut kicks = 0;
        if self.rx_added {
            self.rx_added = false;
            if self.rx.should_notify() {
                self.transport.notify(RX_QUEUE);
                self.stats.kicks_rx += 1;
                kicks += 1;
            }
        }
        if self.tx_added {
            self.tx_added = false;
            if self.tx.should_notify() {
                self.transport.notify(TX_QUEUE);
                self.stats.kicks_tx += 1;
                kicks += 1;
            }
        }
        kicks
    }

    /// Reset the device (§2.4: status 0; it stops using every buffer) and hand back every page
    /// still posted on either ring through `f`. After this the device does nothing until a new
    /// driver initialises it.
    pub fn reclaim(&mut self, mut f: impl FnMut(Pfn)) {
        self.transport.set_status(virtio_drivers::transport::DeviceStatus::empty());
        for slot in self.rx_pages.iter_mut() {
            if let Some(pfn) = slot.take() {
                f(pfn);
            }
        }
        for slot in self.tx_pages.iter_mut() {
            if let Some((pfn, _)) = slot.take() {
                f(pfn);
            }
        }
        self.rx_posted = 0;
        self.tx_posted = 0;
    }
}
