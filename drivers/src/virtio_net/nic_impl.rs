//! [`Nic`] for [`VirtioNet`]: the driver-neutral contract ([`crate::nic`]) implemented by the
//! driver's own methods (see [`VirtioNet`] for the VIRTIO sections each follows), for every
//! transport: QEMU's PCI or MMIO device in the kernel, the simulated device on in-memory split
//! rings (`crate::sim`) in host tests and in the guest's deterministic benchmark.

use super::{VirtioNet, NET_HDR_LEN};
use crate::nic::{
    forward_staged, same_type, BurstStats, DriverStats, ForwardOps, Nic, RxBuf, RxBufferPagesError,
    TxBuf, TxDone, TxOwner,
};
use mm::Pfn;
use virtio_drivers::transport::Transport;
use virtio_drivers::Hal;

impl<H: Hal + 'static, T: Transport + 'static> Nic for VirtioNet<H, T> {
    const FRAME_OFFSET: usize = NET_HDR_LEN;
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
    fn set_rx_frame_limit(&mut self, len: usize) {
        VirtioNet::set_rx_frame_limit(self, len)
    }
    fn rx_frame_limit(&self) -> usize {
        VirtioNet::rx_frame_limit(self)
    }
    #[inline(always)]
    fn rx_ready(&self) -> bool {
        VirtioNet::rx_has_used(self)
    }
    #[inline(always)]
    fn rx_pending(&self) -> usize {
        VirtioNet::rx_pending(self)
    }
    #[inline]
    fn rx_completed(&self) -> usize {
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
    unsafe fn tx_post(&mut self, pfn: Pfn, offset: usize, len: usize, owner: TxOwner) -> bool {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::tx_post(self, pfn, offset, len, owner) }
    }
    #[inline]
    fn tx_publish(&mut self) {
        VirtioNet::tx_publish(self)
    }
    #[inline]
    fn tx_complete(&mut self, out: &mut [TxDone]) -> usize {
        VirtioNet::tx_complete(self, out)
    }
    unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: TxOwner) -> bool {
        // SAFETY: the caller keeps the trait's contract, which is the driver's.
        unsafe { VirtioNet::tx_chain(self, parts, owner) }
    }
    #[inline(always)]
    unsafe fn forward_burst_pending<X: Nic, O: ForwardOps>(
        &mut self,
        tx: &mut X,
        pending: usize,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        // A TX port of this very type runs the driver's own fused loop (the test folds away);
        // any other NIC the neutral one.
        match same_type::<Self, X>(tx) {
            // SAFETY: the caller keeps the trait's contract, which is the driver's.
            Some(tx) => unsafe {
                VirtioNet::forward_burst_pending(self, tx, pending, max, owner, ops)
            },
            // SAFETY: as above, the contract `forward_staged` shares.
            None => unsafe { forward_staged(self, tx, pending, max, owner, ops) },
        }
    }
    #[inline(always)]
    fn tx_reclaim(&mut self, f: impl FnMut(Pfn, TxOwner)) -> usize {
        VirtioNet::tx_reclaim(self, f)
    }
    #[inline(always)]
    fn tx_reclaim_into(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        other: impl FnMut(Pfn, TxOwner),
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
