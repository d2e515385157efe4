//! The frame and buffer description every NIC driver speaks: a received buffer ([`RxBuf`],
//! [`RxStatus`]), a frame to send ([`TxBuf`]) and a sent page back ([`TxDone`]), the driver's
//! counters ([`DriverStats`]), and the limits the dataplane sizes its arrays by ([`RING_SIZE`],
//! [`MAX_FRAME_PAGES`]).
//!
//! Where a frame sits in its page is the driver's to say: a frame's bytes start
//! [`super::Nic::FRAME_OFFSET`] bytes into its first page (the bytes before it are the NIC's own
//! header: 12 for virtio-net's `virtio_net_hdr`, 0 for a NIC that writes the frame at the
//! buffer's start) and at 0 in every page after the first. Lengths here are frame bytes, that
//! header never included.

use mm::{Pfn, PAGE_SIZE};

/// Descriptors per ring of every Gannet NIC driver: 256 (QEMU's virtio-net default
/// `rx_queue_size`/`tx_queue_size`; an Intel NIC's `RDLEN`/`TDLEN` of 4 KiB of 16-byte
/// descriptors). The dataplane sizes its per-ring scratch arrays by it.
pub const RING_SIZE: usize = 256;

/// Most pages (RX buffers or pages of one RX buffer) one received frame may span and still be
/// forwarded: 4, frames of up to 4 × 4,096 bytes less the driver's frame offset. A 9,000-byte MTU
/// (9,014-byte frames) needs 3; one more leaves room for a device MTU a little above. Frames of
/// more pages are dropped and counted `too_big`.
pub const MAX_FRAME_PAGES: usize = 4;

/// Pages an RX buffer needs so that a frame of an `mtu`-byte IP datagram (plus the 14-byte
/// Ethernet header and `offset` header bytes before the frame, the driver's
/// [`super::Nic::FRAME_OFFSET`]) arrives in one buffer: with virtio-net's 12 bytes 1 up to an MTU
/// of 4,070, 3 for 9,000; capped at [`MAX_FRAME_PAGES`].
pub const fn buffer_pages_for_mtu(mtu: u16, offset: usize) -> usize {
    let bytes = mtu as usize + 14 + offset;
    let pages = bytes.div_ceil(PAGE_SIZE);
    if pages > MAX_FRAME_PAGES {
        MAX_FRAME_PAGES
    } else {
        pages
    }
}

/// What a completed RX buffer carried.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RxStatus {
    /// A whole frame of `len` bytes at the driver's frame offset in the page.
    Ok,
    /// The first buffer of a frame that spans several buffers (larger than one page less the
    /// frame offset) on a path that does not collect them: drop it and count one `too_big`.
    TooBig,
    /// A continuation buffer of a `TooBig` frame: drop it, count nothing more.
    Continuation,
    /// The device reported fewer bytes than its own header, a bad buffer count, or an error
    /// status: drop, count `bad_desc`.
    Malformed,
    /// No frame: a page of an RX buffer of several pages that the device did not write into,
    /// or a fresh one the burst took for it, given back because the slot could not be re-posted
    /// whole. Recycle it, count nothing.
    Unused,
}

/// One completed RX buffer.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct RxBuf {
    /// The page (now owned by the caller again).
    pub pfn: Pfn,
    /// Frame length in bytes, excluding the NIC's header (valid when `status` is `Ok`).
    pub len: usize,
    /// See [`RxStatus`].
    pub status: RxStatus,
}

/// Who a transmitted page goes back to: the tag a frame is sent with and its TX completion hands
/// back with every page of it, so a completion needs no lookup in the page's metadata (DPDK keeps
/// the mbuf's pool pointer in its TX software ring alike). The dataplane uses the id of the
/// page_pool the page came from. A small typed value: a driver that needs bits of its own beside
/// it (virtio-net marks the head of a descriptor chain) keeps them in its own slot type, never in
/// this one.
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq, Hash)]
#[repr(transparent)]
pub struct TxOwner(u32);

impl TxOwner {
    /// The owner tag `id` (the dataplane: a page_pool id).
    #[inline(always)]
    pub const fn new(id: u16) -> Self {
        Self(id as u32)
    }

    /// The owner tag of an id already held as a word (`word` below 2^16, debug-asserted): the
    /// dataplane's page_pool ids, so making the tag costs nothing on the hot path.
    #[inline(always)]
    pub const fn from_word(word: u32) -> Self {
        debug_assert!(word <= u16::MAX as u32, "owner ids are below 2^16");
        Self(word)
    }

    /// The id given to [`TxOwner::new`].
    #[inline(always)]
    pub const fn id(self) -> u16 {
        self.0 as u16
    }

    /// The id widened to a word (below 2^16), as a driver packs it beside bits of its own:
    /// held widened so the hot path's compares and stores need no zero-extension.
    #[inline(always)]
    pub const fn word(self) -> u32 {
        self.0
    }
}

impl core::fmt::Display for TxOwner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "owner {}", self.0)
    }
}

/// One frame to transmit: `len` frame bytes at the driver's frame offset in page `pfn` (frames
/// of several pages are sent by the fused burst and `tx_chain` only).
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct TxBuf {
    /// The page holding the frame; owned by the device until it comes back from the driver's
    /// TX completion (`tx_complete`, `tx_reclaim`).
    pub pfn: Pfn,
    /// Frame length in bytes (1..=one page less the frame offset).
    pub len: usize,
    /// Opaque to the driver, handed back with the page by the TX completion.
    pub owner: TxOwner,
}

/// A transmitted page, back from the TX ring: the page and the `owner` it was sent with.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub struct TxDone {
    /// The page (the caller's again).
    pub pfn: Pfn,
    /// [`TxBuf::owner`] as given to the driver.
    pub owner: TxOwner,
}

/// Per-device counters kept by the driver.
#[derive(Copy, Clone, Debug, Default)]
pub struct DriverStats {
    /// Notifications (doorbell or tail-register writes) for the RX queue.
    pub kicks_rx: u64,
    /// Notifications (doorbell or tail-register writes) for the TX queue.
    pub kicks_tx: u64,
    /// Completions that named a buffer the driver had not posted (device bug); the entry is
    /// skipped.
    pub bad_token: u64,
    /// Received descriptors the device flagged with an error (DD-bit NICs: the descriptor's
    /// `errors` byte); each frame is dropped (the dataplane counts it `bad_desc`).
    pub rx_errors: u64,
    /// Device register reads (MMIO) so far, set-up and counters included; `None` for a
    /// driver that does not count them (virtio-net).
    pub mmio_reads: Option<u64>,
    /// Link state as the device last reported it, read off the hot path; `None`: not known.
    pub link_up: Option<bool>,
    /// The link's speed (Mb/s) when it is up, as the device last reported it; `None`: down or
    /// not known.
    pub link_speed_mbps: Option<u32>,
    /// Link state changes seen between those reads.
    pub link_changes: u64,
    /// The device's own error counters, summed since bring-up (Intel NICs: `MPC` missed
    /// frames, `CRCERRS`, `RNBC` receive-no-buffers); `None` for a device without them.
    pub hw: Option<HwErrorCounters>,
}

/// A NIC's own receive error counters (Intel 82574L datasheet §10.2.7, statistics registers;
/// clear on read on silicon, summed by the driver).
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct HwErrorCounters {
    /// `MPC`: frames missed for lack of room in the receive FIFO.
    pub missed: u64,
    /// `CRCERRS`: frames received with a bad CRC.
    pub crc_errors: u64,
    /// `RNBC`: times a frame arrived with no receive descriptor free.
    pub no_buffer: u64,
}

/// Why `set_rx_buffer_pages` left the RX buffers at one page each.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RxBufferPagesError {
    /// More pages than a buffer may have (at most [`MAX_FRAME_PAGES`]), or 0.
    BadCount(usize),
    /// The device cannot take a buffer of several pages (virtio-net: `VIRTIO_F_INDIRECT_DESC`
    /// was not negotiated; a buffer of several pages needs an indirect table, VIRTIO 1.2
    /// §2.7.5.3, or it would take several ring descriptors).
    NoIndirect,
    /// No memory for the RX ring's indirect tables (16 KiB).
    NoTableMemory,
    /// The RX ring already holds buffers (set the size before the first refill).
    RingNotEmpty,
    /// The driver has one-page RX buffers only.
    Unsupported,
}

impl core::fmt::Display for RxBufferPagesError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadCount(n) => {
                write!(f, "{n} pages per RX buffer (1..={MAX_FRAME_PAGES})")
            }
            Self::NoIndirect => write!(f, "VIRTIO_F_INDIRECT_DESC not negotiated"),
            Self::NoTableMemory => write!(f, "no memory for the RX indirect tables"),
            Self::RingNotEmpty => write!(f, "the RX ring already holds buffers"),
            Self::Unsupported => write!(f, "the driver has one-page RX buffers only"),
        }
    }
}
