//! The NIC interface the dataplane is written against: one RX and one TX queue of a port (or
//! one queue pair of a multi-queue port), poll mode, zero copy, page-sized buffers.
//!
//! [`VirtioNet`] implements it for every transport: QEMU's PCI device in the kernel, and the
//! simulated device on in-memory split rings (`drivers::sim`) in host tests and in the guest's
//! deterministic benchmark. The methods are the driver's own (see [`VirtioNet`] for the VIRTIO
//! sections each follows); the trait only lets the per-core forwarding logic be generic, so the
//! same code runs on the metal and on the host.

use crate::virtio_net::{
    BurstStats, DriverStats, ForwardOps, RxBuf, RxBufferPagesError, TxBuf, TxDone, VirtioNet,
};
use mm::Pfn;
use virtio_drivers::transport::Transport;
use virtio_drivers::Hal;

/// One port's queues, as the poll loop uses them. All methods are called by the owning core
/// only (`&mut self`): the implementation needs no locks.
pub trait Nic {
    /// The port's MAC address.
    fn mac(&self) -> [u8; 6];
    /// The MTU the device reports (`VIRTIO_NET_F_MTU`, bytes of IP datagram), if any.
    fn mtu(&self) -> Option<u16>;
    /// RX descriptors that can take a buffer right now (each takes
    /// [`Nic::rx_buffer_pages`] pages).
    fn rx_free_slots(&self) -> usize;
    /// Pages per RX buffer (1, or what [`Nic::set_rx_buffer_pages`] set).
    fn rx_buffer_pages(&self) -> usize;
    /// Make every RX buffer `pages` pages, so a frame of up to `pages` × 4,096 − 12 bytes
    /// arrives as one buffer (see [`VirtioNet::set_rx_buffer_pages`]); before the first refill.
    ///
    /// # Errors
    /// As [`VirtioNet::set_rx_buffer_pages`]: the buffers stay one page each.
    fn set_rx_buffer_pages(&mut self, pages: usize) -> Result<(), RxBufferPagesError>;
    /// Whether a received buffer is waiting (no fence; a burst reads it properly).
    fn rx_has_used(&self) -> bool;
    /// Completed RX buffers waiting in the used ring (see [`VirtioNet::rx_used`]).
    fn rx_used(&self) -> usize;
    /// RX buffers waiting, read once from the used index (no fence, unclamped; 0: none): hand
    /// it to [`Nic::forward_burst_pending`] so the burst does not read the index again.
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
    /// Each page is owned by the caller, holds a frame of `len` bytes after the virtio-net
    /// header, and is the device's until it comes back from [`Nic::tx_complete`] or
    /// [`Nic::take_pages`].
    unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize;
    /// Pop completed TX pages (with the owner tag each was sent with) into `out`; returns how
    /// many.
    fn tx_complete(&mut self, out: &mut [TxDone]) -> usize;
    /// Send one frame of several pages now (see [`VirtioNet::tx_chain`]); `false` if the ring
    /// had no room (the pages stay the caller's).
    ///
    /// # Safety
    /// As [`VirtioNet::tx_chain`].
    unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: u32) -> bool;
    /// The fused fast path: receive up to `max` buffers here and transmit what `ops` forwards
    /// on `tx`'s TX queue, tagged `owner` (see [`VirtioNet::forward_burst`]).
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    #[inline(always)]
    unsafe fn forward_burst<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        max: usize,
        owner: u32,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        let pending = self.rx_pending();
        // SAFETY: the caller keeps the contract, which `forward_burst_pending` shares.
        unsafe { self.forward_burst_pending(tx, pending, max, owner, ops) }
    }
    /// [`Nic::forward_burst`] with the RX ring's [`Nic::rx_pending`] read by the caller
    /// (see [`VirtioNet::forward_burst_pending`]).
    ///
    /// # Safety
    /// As [`VirtioNet::forward_burst`].
    unsafe fn forward_burst_pending<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        pending: usize,
        max: usize,
        owner: u32,
        ops: impl FnOnce() -> O,
    ) -> BurstStats;
    /// Hand every completed TX page back to `f` with its owner tag; returns how many.
    fn tx_reclaim(&mut self, f: impl FnMut(Pfn, u32)) -> usize;
    /// TX completion into a pool's alloc cache (see [`VirtioNet::tx_reclaim_into`]).
    fn tx_reclaim_into(
        &mut self,
        owner: u32,
        room: &mut [Pfn],
        other: impl FnMut(Pfn, u32),
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
}

impl<H: Hal, T: Transport> Nic for VirtioNet<H, T> {
    #[inline]
    fn mac(&self) -> [u8; 6] {
        VirtioNet::mac(self)
    }
    fn mtu(&self) -> Option<u16> {
        VirtioNet::mtu(self)
    }
    #[inline]
    fn rx_free_slots(&self) -> usize {
        VirtioNet::rx_free_slots(self)
    }
    #[inline]
    fn rx_buffer_pages(&self) -> usize {
        VirtioNet::rx_buffer_pages(self)
    }
    fn set_rx_buffer_pages(&mut self, pages: usize) -> Result<(), RxBufferPagesError> {
        VirtioNet::set_rx_buffer_pages(self, pages)
    }
    #[inline(always)]
    fn rx_has_used(&self) -> bool {
        VirtioNet::rx_has_used(self)
    }
    #[inline(always)]
    fn rx_pending(&self) -> usize {
        VirtioNet::rx_pending(self)
    }
    #[inline]
    fn rx_used(&self) -> usize {
        VirtioNet::rx_used(self)
    }
    #[inline]
    fn rx_posted(&self) -> usize {
        VirtioNet::rx_posted(self)
    }
    #[inline]
    fn tx_posted(&self) -> usize {
        VirtioNet::tx_posted(self)
    }
    #[inline]
    fn tx_free_slots(&self) -> usize {
        VirtioNet::tx_free_slots(self)
    }
    #[inline]
    unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::rx_refill(self, pages) }
    }
    #[inline]
    fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize {
        VirtioNet::rx_burst(self, out)
    }
    #[inline]
    unsafe fn rx_burst_refill(
        &mut self,
        out: &mut [RxBuf],
        alloc: impl FnMut() -> Option<Pfn>,
    ) -> usize {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::rx_burst_refill(self, out, alloc) }
    }
    #[inline]
    fn rx_publish(&mut self) {
        VirtioNet::rx_publish(self)
    }
    #[inline]
    unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::tx_burst(self, bufs) }
    }
    #[inline]
    fn tx_complete(&mut self, out: &mut [TxDone]) -> usize {
        VirtioNet::tx_complete(self, out)
    }
    unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: u32) -> bool {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::tx_chain(self, parts, owner) }
    }
    #[inline(always)]
    unsafe fn forward_burst_pending<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        pending: usize,
        max: usize,
        owner: u32,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::forward_burst_pending(self, tx, pending, max, owner, ops) }
    }
    #[inline(always)]
    fn tx_reclaim(&mut self, f: impl FnMut(Pfn, u32)) -> usize {
        VirtioNet::tx_reclaim(self, f)
    }
    #[inline(always)]
    fn tx_reclaim_into(
        &mut self,
        owner: u32,
        room: &mut [Pfn],
        other: impl FnMut(Pfn, u32),
    ) -> (usize, usize) {
        VirtioNet::tx_reclaim_into(self, owner, room, other)
    }
    #[inline]
    fn kick(&mut self) -> u32 {
        VirtioNet::kick(self)
    }
    #[inline]
    fn park_interrupts(&mut self) {
        VirtioNet::park_interrupts(self)
    }
    #[inline]
    fn rx_arm_interrupt(&mut self) -> bool {
        VirtioNet::rx_arm_interrupt(self)
    }
    fn reset_device(&mut self) -> bool {
        VirtioNet::reset_device(self)
    }
    unsafe fn take_pages(&mut self, f: &mut dyn FnMut(Pfn)) {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::take_pages(self, f) }
    }
    fn stats(&self) -> DriverStats {
        VirtioNet::stats(self)
    }
}
