//! The driver-neutral NIC contract the dataplane is written against (issue 32): one RX and one
//! TX queue of a port (or one queue pair of a multi-queue port), poll mode, zero copy,
//! page_pool pages as buffers.
//!
//! * [`Nic`]: the trait a driver implements: set-up facts (MAC, MTU, [`Nic::FRAME_OFFSET`],
//!   pages per RX buffer), the staged path (`rx_burst`, `tx_burst`, `tx_complete`), the fused
//!   burst ([`Nic::forward_burst`]), TX completion into a pool, and teardown.
//! * [`frame`]: the buffer description ([`RxBuf`], [`TxBuf`], [`TxDone`], [`DriverStats`]) and
//!   the limits the dataplane sizes arrays by ([`RING_SIZE`], [`MAX_FRAME_PAGES`]).
//! * [`staged`]: [`forward_staged`], the neutral fused burst (a pair of two driver types, a
//!   driver without a loop of its own).
//! * [`either`]: [`EitherNic`], a port of one of two driver types, so a core's ports may
//!   differ (the fused burst monomorphised per pair).
//! * [`verdict`]: the per-frame verdict callback ([`ForwardOps`], [`RxVerdict`], [`GiveBack`],
//!   [`MultiFrame`], [`BurstStats`]).
//!
//! This module names no driver: drivers (`crate::virtio_net`, `crate::ddnic`) import it and
//! implement [`Nic`]; the dataplane imports only it. Where the contract lives and why, and why
//! each driver keeps its own fused loop: docs/DESIGN.md, "The NIC contract".

pub mod either;
pub mod frame;
pub mod staged;
pub mod verdict;

pub use either::EitherNic;
pub use frame::{
    buffer_pages_for_mtu, DriverStats, HwErrorCounters, RxBuf, RxBufferPagesError, RxStatus, TxBuf,
    TxDone, TxOwner, MAX_FRAME_PAGES, RING_SIZE,
};
pub use staged::forward_staged;
pub use verdict::{give_back_over_limit, BurstStats, ForwardOps, GiveBack, MultiFrame, RxVerdict};

use core::any::TypeId;

/// The least frame limit [`Nic::set_rx_frame_limit`] takes (bytes): 64, above Ethernet's
/// 60-byte minimum frame without FCS (IEEE 802.3 §3.2.8) and below the 82 of the smallest
/// IP MTU (68, RFC 791) + 14. A fused burst's whole-frame test subtracts
/// [`ForwardOps::MIN_FRAME`] from the limit once per burst with no underflow test when
/// `MIN_FRAME` is at most this.
pub const RX_FRAME_LIMIT_FLOOR: usize = 64;

/// The whole-frame test's bound on `len - min` for a one-buffer frame (its shortest accepted
/// length `min`, its longest `fits`, at least [`RX_FRAME_LIMIT_FLOOR`]): every length from
/// `min` to `fits` passes `len.wrapping_sub(min) < bound` (0 for none when `min > fits`).
/// One add when `min` is a constant up to the floor (the underflow test folds away).
#[inline(always)]
pub const fn whole_frame_bound(fits: usize, min: usize) -> usize {
    if min <= RX_FRAME_LIMIT_FLOOR {
        fits + 1 - min
    } else if fits >= min {
        fits - min + 1
    } else {
        0
    }
}
use mm::Pfn;

/// `b` as an `A` when `A` and `B` are one type, else `None`: how a driver's fused burst picks
/// its own loop for a TX port of its own type and [`forward_staged`] for any other. The test
/// compares two constants of the monomorphised code (`TypeId`s), so it folds away: a pair of
/// one type compiles to the driver's loop alone, with no branch and no `dyn`.
#[inline(always)]
pub fn same_type<A: 'static, B: 'static>(b: &mut B) -> Option<&mut A> {
    if TypeId::of::<A>() == TypeId::of::<B>() {
        // SAFETY: `A` and `B` are the same type (equal `TypeId`s), so the pointer is a valid,
        // unique `&mut A` for the borrow of `b`.
        Some(unsafe { &mut *(b as *mut B).cast::<A>() })
    } else {
        None
    }
}

/// One port's queues, as the poll loop uses them. All methods are called by the owning core
/// only (`&mut self`): the implementation needs no locks. Buffers are order-0 pages the caller
/// owns ([`Pfn`]); a frame's bytes start [`Nic::FRAME_OFFSET`] bytes into its first page.
/// `'static`: a handle owns its rings (no borrowed lifetime), so a fused burst can tell at
/// compile time whether its TX port is of its own type ([`same_type`]).
pub trait Nic: 'static {
    /// Header bytes the NIC keeps before the frame in a buffer's first page (received and sent
    /// frames alike): 12 for virtio-net (`struct virtio_net_hdr`, VIRTIO 1.2 §5.1.6), 0 for a NIC
    /// that writes the frame at the buffer's start (an Intel NIC's legacy descriptors). A
    /// constant, so the dataplane's page arithmetic monomorphises to the same code as a literal.
    const FRAME_OFFSET: usize;
    /// Largest frame (bytes, no FCS) one RX page holds: a page less [`Nic::FRAME_OFFSET`].
    const MAX_FRAME_LEN: usize = mm::PAGE_SIZE - Self::FRAME_OFFSET;
    /// The port's MAC address.
    fn mac(&self) -> [u8; 6];
    /// The MTU the device reports (bytes of IP datagram; virtio-net: `VIRTIO_NET_F_MTU`), if
    /// any.
    fn mtu(&self) -> Option<u16>;
    /// RX descriptors that can take a buffer right now (each takes
    /// [`Nic::rx_buffer_pages`] pages).
    fn rx_free_slots(&self) -> usize;
    /// Pages per RX buffer (1, or what [`Nic::set_rx_buffer_pages`] set).
    fn rx_buffer_pages(&self) -> usize;
    /// Make every RX buffer `pages` pages, so a frame of up to `pages` × 4,096 −
    /// [`Nic::FRAME_OFFSET`] bytes arrives as one buffer; before the first refill.
    ///
    /// # Errors
    /// [`RxBufferPagesError`]: the buffers stay one page each.
    fn set_rx_buffer_pages(&mut self, pages: usize) -> Result<(), RxBufferPagesError>;
    /// The longest frame (bytes after [`Nic::FRAME_OFFSET`], no FCS) this RX queue delivers
    /// (at least [`RX_FRAME_LIMIT_FLOOR`]: a smaller `len` is raised to it):
    /// every longer one, of one buffer or several, is handed back as too big (the dataplane
    /// counts `too_big` on this port) before a [`ForwardOps`] or [`Nic::rx_burst`]'s caller
    /// sees it. The dataplane sets the port's MTU + 14 (+ 4 where 802.1Q tags pass through),
    /// so the MTU holds for every NIC and mode (issue 40; a device may deliver longer frames
    /// than its MTU: QEMU's virtio-net does). Default: what the buffers hold. Costs the
    /// one-page fast path nothing: the bound joins its whole-frame length test.
    fn set_rx_frame_limit(&mut self, len: usize);
    /// The limit [`Nic::set_rx_frame_limit`] set (bytes), or what the buffers hold.
    fn rx_frame_limit(&self) -> usize;
    /// Whether a received buffer is waiting (no fence; a burst reads it properly): virtio-net
    /// compares its used index, a DD-bit NIC reads the next descriptor's DD bit.
    fn rx_ready(&self) -> bool;
    /// Completed RX buffers waiting (virtio-net: the used ring's entries; a DD-bit NIC: the
    /// descriptors with DD set from the next to clean on).
    fn rx_completed(&self) -> usize;
    /// Frames pending: completed RX buffers waiting, read once in the driver's cheapest way (no
    /// fence; 0: none; the driver may count past its ring, the burst clamps): hand it to
    /// [`Nic::forward_burst_pending`] so the burst does not read it again. virtio-net reads its
    /// used index; a NIC without one (DD bits written back per descriptor) counts descriptors
    /// done up to a burst.
    fn rx_pending(&self) -> usize;
    /// Pages posted to the RX ring.
    fn rx_posted(&self) -> usize;
    /// Pages owned by the TX ring (posted, not yet completed).
    fn tx_posted(&self) -> usize;
    /// TX descriptors free right now (frames that can still be posted).
    fn tx_free_slots(&self) -> usize;
    /// Post `pages` as RX buffers; returns how many (a prefix) were posted.
    ///
    /// # Safety
    /// Each page is an order-0 RAM page the caller owns and gives to the device until it comes
    /// back from [`Nic::rx_burst`] or [`Nic::take_pages`].
    unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize;
    /// Pop up to `out.len()` completed RX buffers; every returned page is the caller's again.
    fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize;
    /// [`Nic::rx_burst`] that re-posts each emptied slot at once with a page from `alloc`
    /// (one publish per burst); slots `alloc` cannot fill wait for [`Nic::rx_refill`].
    ///
    /// # Safety
    /// As [`Nic::rx_refill`], for every page `alloc` returns.
    unsafe fn rx_burst_refill(
        &mut self,
        out: &mut [RxBuf],
        alloc: impl FnMut() -> Option<Pfn>,
    ) -> usize;
    /// Make every RX buffer re-posted by [`Nic::rx_burst_refill`] visible to the device now.
    fn rx_publish(&mut self);
    /// Queue frames for transmission; returns how many (a prefix) were queued.
    ///
    /// # Safety
    /// Each page is owned by the caller, holds a frame of `len` bytes at
    /// [`Nic::FRAME_OFFSET`], and is the device's until it comes back from [`Nic::tx_complete`] or
    /// [`Nic::take_pages`].
    unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize;
    /// Queue one frame of `len` bytes that starts `offset` bytes into page `pfn` (`offset` at
    /// least [`Nic::FRAME_OFFSET`]: a frame received on another NIC stays where that NIC put
    /// it, and this one writes its own header, if any, in the bytes before it), not yet visible
    /// to the device ([`Nic::tx_publish`]). `false` (the page stays the caller's) when the ring
    /// is full or the frame does not fit the page.
    ///
    /// # Safety
    /// As [`Nic::tx_burst`], for this one frame.
    unsafe fn tx_post(&mut self, pfn: Pfn, offset: usize, len: usize, owner: TxOwner) -> bool;
    /// Make every frame queued by [`Nic::tx_post`] visible to the device (no kick).
    fn tx_publish(&mut self);
    /// Pop completed TX pages (with the owner tag each was sent with) into `out`; returns how
    /// many.
    fn tx_complete(&mut self, out: &mut [TxDone]) -> usize;
    /// Send one frame of several pages now: `parts` are (page, frame bytes in it), the first
    /// page's bytes at [`Nic::FRAME_OFFSET`], the others' from 0; `false` if the ring had no
    /// room (the pages stay the caller's).
    ///
    /// # Safety
    /// Every page is the caller's and becomes the device's until a TX completion returns it
    /// (the first page with `owner`, the others as the driver documents) or [`Nic::take_pages`].
    unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: TxOwner) -> bool;
    /// The fused fast path: receive up to `max` frames here, show each to the [`ForwardOps`]
    /// made by `ops` (only when a buffer is waiting), re-post each emptied RX slot with a page
    /// from it, and transmit what it forwards on `tx`'s TX queue, zero copy, tagged `owner`
    /// (handed back by the TX completion). No kick: see [`Nic::kick`].
    ///
    /// # Safety
    /// Every page [`ForwardOps::rx_page`] returns must be an order-0 RAM page the caller owns
    /// and gives to the device until it comes back (an RX burst, [`Nic::take_pages`]); a page
    /// forwarded belongs to `tx`'s TX ring until a TX completion or `take_pages` returns it.
    #[inline(always)]
    unsafe fn forward_burst<T: Nic, O: ForwardOps>(
        &mut self,
        tx: &mut T,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        let pending = self.rx_pending();
        // SAFETY: the caller keeps the contract, which `forward_burst_pending` shares.
        unsafe { self.forward_burst_pending(tx, pending, max, owner, ops) }
    }
    /// [`Nic::forward_burst`] with the RX ring's [`Nic::rx_pending`] read by the caller, with
    /// nothing popped since (clamped to the ring and to `max`).
    ///
    /// # Safety
    /// As [`Nic::forward_burst`].
    unsafe fn forward_burst_pending<T: Nic, O: ForwardOps>(
        &mut self,
        tx: &mut T,
        pending: usize,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats;
    /// Hand every completed TX page back to `f` with its owner tag; returns how many.
    fn tx_reclaim(&mut self, f: impl FnMut(Pfn, TxOwner)) -> usize;
    /// TX completion into a pool's alloc cache: pages tagged `owner` fill `room` from its
    /// start, every other page goes to `other` with its tag; returns (pages put in `room`,
    /// pages completed). Stops when `room` is full.
    fn tx_reclaim_into(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        other: impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize);
    /// Notify the device of what was published, if it asked; returns notifications written.
    fn kick(&mut self) -> u32;
    /// Stop device interrupts while polling.
    fn park_interrupts(&mut self);
    /// Ask for an RX interrupt before sleeping; `true` if frames are already waiting.
    fn rx_arm_interrupt(&mut self) -> bool;
    /// Reset the device if this handle owns it; returns whether it did.
    fn reset_device(&mut self) -> bool;
    /// Hand back every page still posted on either ring.
    ///
    /// # Safety
    /// The device has been reset (by the handle that owns it), ordered before this call.
    unsafe fn take_pages(&mut self, f: &mut dyn FnMut(Pfn));
    /// Driver counters.
    fn stats(&self) -> DriverStats;
    /// The link as the device reports it now: `Some(up)`, or `None` when the driver does not
    /// track it (virtio-net here). Off the forwarding path (the kernel asks every 500 ms): a
    /// register read at most.
    fn link_up(&self) -> Option<bool> {
        None
    }
}
