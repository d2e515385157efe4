//! The per-frame verdict contract between a NIC driver's fused burst and the dataplane:
//! [`ForwardOps`] (the dataplane's callbacks, called once per frame inside the driver's loop, as
//! Linux runs an XDP program per frame), its verdict [`RxVerdict`], the reasons a page is handed
//! back ([`GiveBack`]), a frame of several pages ([`MultiFrame`]) and a burst's summed counts
//! ([`BurstStats`]). Nothing here names a driver: a driver's frame offset (the header bytes before
//! the frame, [`super::Nic::FRAME_OFFSET`]) is the only layout fact the dataplane needs.

use super::frame::RxStatus;
use mm::Pfn;

/// What [`ForwardOps::forward`] decided for one frame.
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum RxVerdict {
    /// Transmit it, as rewritten in place, on the burst's TX port (zero copy).
    Forward,
    /// [`RxVerdict::Forward`] of its first `n` bytes only (a router cuts Ethernet padding;
    /// `n` is capped at the frame's length).
    ForwardFirst(usize),
    /// The dataplane took the page (dropped and recycled it, queued it, staged it for another
    /// port): the burst forgets it.
    Consumed,
}

/// Why the fused burst ([`super::Nic::forward_burst`]) hands a page back through [`ForwardOps::give_back`].
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum GiveBack {
    /// The TX ring had no free descriptor for a frame [`ForwardOps::forward`] wanted sent:
    /// count `tx_ring_full` on the TX port.
    TxFull,
    /// The buffer carried no whole frame: [`RxStatus::TooBig`] (more than
    /// [`MAX_FRAME_PAGES`](super::frame::MAX_FRAME_PAGES) pages, or a non-fused RX path), [`RxStatus::Continuation`] or
    /// [`RxStatus::Malformed`] (never [`RxStatus::Ok`]).
    Rx(RxStatus),
    /// A page of a frame of several pages that [`ForwardOps::forward_multi`]'s default gave
    /// back: the burst counted the frame as received (`BurstStats::rx_frames`); count one
    /// `too_big` drop for the `first` page, nothing for the others.
    Multi {
        /// The frame's first page.
        first: bool,
    },
    /// A fresh page from [`ForwardOps::rx_page_cached`] or [`ForwardOps::rx_page`] the burst
    /// did not post after all (it left for its chain-aware loop): back to its pool, counted
    /// as nothing.
    Unused,
}

/// The dataplane's side of the fused burst ([`super::Nic::forward_burst`]). The burst calls these inside its
/// loop, once per buffer: implementations should be `#[inline]` (`give_back` is the rare path
/// and may be `#[cold]`).
pub trait ForwardOps {
    /// Frames shorter than this (frame bytes) are never sent:
    /// [`ForwardOps::forward`] returns [`RxVerdict::Consumed`] for every one of them (an
    /// Ethernet forwarder: 14, a runt). The burst's one-page loop folds the bound into its
    /// whole-frame length test, so the frames it shows `forward` on its fast path are known to
    /// be this long; a shorter one is shown to `forward` on a cold path (and given back as
    /// [`RxStatus::Malformed`] should `forward` want it sent after all). Default 0: no bound.
    const MIN_FRAME: usize = 0;
    /// A fresh page for the RX slot just emptied, or `None` (the slot then goes back to the
    /// free list, for a later `rx_refill`). The page becomes the device's. The
    /// slow path: called when [`ForwardOps::rx_page_cached`] had none.
    fn rx_page(&mut self) -> Option<Pfn>;
    /// [`ForwardOps::rx_page`] from the pool's alloc cache only (no refill), the fast path.
    fn rx_page_cached(&mut self) -> Option<Pfn>;
    /// One received frame: `pfn` is its page, `frame` its bytes (`len` bytes at the driver's
    /// frame offset; possibly shorter than an Ethernet header). Rewrite it in place and
    /// return [`RxVerdict::Forward`] (or [`RxVerdict::ForwardFirst`]), or take the page and return [`RxVerdict::Consumed`].
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict;
    /// A received page the burst does not transmit, and why. The page is the dataplane's.
    fn give_back(&mut self, pfn: Pfn, why: GiveBack);
    /// One received frame of several pages ([`MultiFrame`]). Rewrite its headers in place
    /// (they lie in [`MultiFrame::head`]) and return [`RxVerdict::Forward`] (or
    /// [`RxVerdict::ForwardFirst`]) to send it as a descriptor chain of the same pages, or take
    /// every page and return [`RxVerdict::Consumed`] (the frame counts as received, not
    /// sent). The default gives every page back ([`GiveBack::Multi`]: one frame dropped as
    /// too big), what a dataplane without multi-page frames does.
    #[cold]
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        for (i, &pfn) in frame.pages.iter().enumerate() {
            self.give_back(pfn, GiveBack::Multi { first: i == 0 });
        }
        RxVerdict::Consumed
    }
}

/// A received frame longer than its port's RX frame limit
/// ([`super::Nic::set_rx_frame_limit`], the MTU) that a burst already counted as received:
/// every page goes back as [`ForwardOps::forward_multi`]'s default gives them ([`GiveBack::Multi`],
/// one `too_big` drop), never shown to the dataplane; returns [`RxVerdict::Consumed`]. For
/// frames of several buffers (and one-buffer frames in a chain-aware loop), whose length is
/// known only once collected; the one-page fast path folds the limit into its length test.
#[cold]
#[inline(never)]
pub fn give_back_over_limit<O: ForwardOps>(ops: &mut O, pages: &[Pfn]) -> RxVerdict {
    for (i, &pfn) in pages.iter().enumerate() {
        ops.give_back(pfn, GiveBack::Multi { first: i == 0 });
    }
    RxVerdict::Consumed
}

/// A received frame of several pages (the device spread it over several RX buffers,
/// virtio-net's `VIRTIO_NET_F_MRG_RXBUF`, VIRTIO 1.2 §5.1.6.4, or one RX buffer of several
/// pages), shown to [`ForwardOps::forward_multi`]: its pages in order (`pages[0]` holds the
/// frame from `offset`, after the NIC's header; the others hold frame bytes from offset 0), the
/// bytes of each, and the frame's first bytes as a mutable slice of the first page.
pub struct MultiFrame<'a> {
    /// The frame's pages, 2..=[`MAX_FRAME_PAGES`](super::frame::MAX_FRAME_PAGES) of them, in frame order.
    pub pages: &'a [Pfn],
    /// Frame bytes in each page (bytes, the NIC's header not included), as `pages`.
    pub lens: &'a [u16],
    /// The frame's first `lens[0]` bytes, in `pages[0]` at `offset`: every header a forwarder
    /// reads (Ethernet, IPv4 with options, the first bytes of L4) is here, since every buffer
    /// but the last is filled and holds at least a page less the NIC's header.
    pub head: &'a mut [u8],
    /// The whole frame's length in bytes (the sum of `lens`).
    pub len: usize,
    /// Where the frame starts in `pages[0]` (bytes): the receiving driver's
    /// [`super::Nic::FRAME_OFFSET`].
    pub offset: usize,
}

impl MultiFrame<'_> {
    /// Byte range of the frame's bytes inside page `i` (offsets in the page): from
    /// [`MultiFrame::offset`] in the first page, from 0 in the others. `None` past the last page.
    pub fn segment(&self, i: usize) -> Option<(Pfn, core::ops::Range<usize>)> {
        let pfn = *self.pages.get(i)?;
        let len = usize::from(*self.lens.get(i)?);
        let start = if i == 0 { self.offset } else { 0 };
        Some((pfn, start..start + len))
    }
}

/// What one the fused burst ([`super::Nic::forward_burst`]) did, summed over the burst (the dataplane adds these
/// to its counters once per burst).
#[derive(Copy, Clone, Debug, Default, Eq, PartialEq)]
pub struct BurstStats {
    /// RX buffers completed (used elements or descriptors with a valid id), whatever became of them.
    pub buffers: usize,
    /// Whole frames received (the buffers [`ForwardOps::forward`] saw).
    pub rx_frames: usize,
    /// Their bytes (the NIC's header excluded).
    pub rx_bytes: u64,
    /// Frames posted on the TX ring.
    pub tx_frames: usize,
    /// Their bytes (the NIC's header excluded).
    pub tx_bytes: u64,
}

impl BurstStats {
    /// Add `o`'s counts to these.
    #[inline(always)]
    pub fn add(&mut self, o: &BurstStats) {
        self.buffers += o.buffers;
        self.rx_frames += o.rx_frames;
        self.rx_bytes += o.rx_bytes;
        self.tx_frames += o.tx_frames;
        self.tx_bytes += o.tx_bytes;
    }
}
