//! [`EitherNic`]: a port that is one of two driver types, so one core can own ports of different
//! drivers (a virtio-net port and a DD-bit NIC's, say) with the dataplane unchanged: `Core` holds
//! `[P::Nic; PORTS]`, and a platform whose ports differ names `EitherNic<A, B>` as its `Nic`.
//!
//! Every method is a `match` on the variant, and the fused burst matches the *pair* (this port's
//! driver and the TX port's), so each of the four pairs runs its own monomorphised loop: a pair
//! of one driver runs that driver's fused loop, a mixed pair [`super::forward_staged`] (each
//! driver's own [`Nic::forward_burst_pending`] picks). No `dyn`, no boxed closure.
//!
//! The two drivers must keep the frame at the same offset ([`Nic::FRAME_OFFSET`], checked at
//! compile time): the dataplane's page arithmetic is per platform, not per port. A NIC that
//! writes frames at any buffer address can meet another's header room (the DD-bit NIC's
//! `OFFSET`, `crate::ddnic::DdNic`: 12 beside virtio-net).

use super::{
    BurstStats, DriverStats, ForwardOps, Nic, RxBuf, RxBufferPagesError, TxBuf, TxDone, TxOwner,
};
use mm::Pfn;

/// A port of driver `A` or driver `B` (see the module docs).
pub enum EitherNic<A: Nic, B: Nic> {
    /// A port of driver `A`.
    A(A),
    /// A port of driver `B`.
    B(B),
}

/// `$e` on whichever driver `$self` holds, as `$n`.
macro_rules! either {
    ($self:expr, $n:ident => $e:expr) => {
        match $self {
            EitherNic::A($n) => $e,
            EitherNic::B($n) => $e,
        }
    };
}

impl<A: Nic, B: Nic> EitherNic<A, B> {
    /// Both drivers keep the frame at one offset (evaluated where the pair is used as a `Nic`).
    const SAME_OFFSET: () = assert!(
        A::FRAME_OFFSET == B::FRAME_OFFSET,
        "the two drivers of an EitherNic must keep the frame at one offset"
    );
}

impl<A: Nic, B: Nic> Nic for EitherNic<A, B> {
    const FRAME_OFFSET: usize = {
        let () = Self::SAME_OFFSET;
        A::FRAME_OFFSET
    };
    /// The smaller of the two drivers' one-page frame limits.
    const MAX_FRAME_LEN: usize = if A::MAX_FRAME_LEN < B::MAX_FRAME_LEN {
        A::MAX_FRAME_LEN
    } else {
        B::MAX_FRAME_LEN
    };

    fn mac(&self) -> [u8; 6] {
        either!(self, n => n.mac())
    }
    fn mtu(&self) -> Option<u16> {
        either!(self, n => n.mtu())
    }
    #[inline]
    fn rx_free_slots(&self) -> usize {
        either!(self, n => n.rx_free_slots())
    }
    fn rx_buffer_pages(&self) -> usize {
        either!(self, n => n.rx_buffer_pages())
    }
    fn set_rx_buffer_pages(&mut self, pages: usize) -> Result<(), RxBufferPagesError> {
        either!(self, n => n.set_rx_buffer_pages(pages))
    }
    fn set_rx_frame_limit(&mut self, len: usize) {
        either!(self, n => n.set_rx_frame_limit(len))
    }
    fn rx_frame_limit(&self) -> usize {
        either!(self, n => n.rx_frame_limit())
    }
    #[inline(always)]
    fn rx_ready(&self) -> bool {
        either!(self, n => n.rx_ready())
    }
    fn rx_completed(&self) -> usize {
        either!(self, n => n.rx_completed())
    }
    #[inline(always)]
    fn rx_pending(&self) -> usize {
        either!(self, n => n.rx_pending())
    }
    fn rx_posted(&self) -> usize {
        either!(self, n => n.rx_posted())
    }
    fn tx_posted(&self) -> usize {
        either!(self, n => n.tx_posted())
    }
    fn tx_free_slots(&self) -> usize {
        either!(self, n => n.tx_free_slots())
    }
    unsafe fn rx_refill(&mut self, pages: &[Pfn]) -> usize {
        // SAFETY: the caller keeps the trait's contract, which each driver shares.
        either!(self, n => unsafe { n.rx_refill(pages) })
    }
    fn rx_burst(&mut self, out: &mut [RxBuf]) -> usize {
        either!(self, n => n.rx_burst(out))
    }
    unsafe fn rx_burst_refill(
        &mut self,
        out: &mut [RxBuf],
        alloc: impl FnMut() -> Option<Pfn>,
    ) -> usize {
        // SAFETY: as `rx_refill`.
        either!(self, n => unsafe { n.rx_burst_refill(out, alloc) })
    }
    fn rx_publish(&mut self) {
        either!(self, n => n.rx_publish())
    }
    unsafe fn tx_burst(&mut self, bufs: &[TxBuf]) -> usize {
        // SAFETY: as `rx_refill`.
        either!(self, n => unsafe { n.tx_burst(bufs) })
    }
    unsafe fn tx_post(&mut self, pfn: Pfn, offset: usize, len: usize, owner: TxOwner) -> bool {
        // SAFETY: as `rx_refill`.
        either!(self, n => unsafe { n.tx_post(pfn, offset, len, owner) })
    }
    fn tx_publish(&mut self) {
        either!(self, n => n.tx_publish())
    }
    fn tx_complete(&mut self, out: &mut [TxDone]) -> usize {
        either!(self, n => n.tx_complete(out))
    }
    unsafe fn tx_chain(&mut self, parts: &[(Pfn, usize)], owner: TxOwner) -> bool {
        // SAFETY: as `rx_refill`.
        either!(self, n => unsafe { n.tx_chain(parts, owner) })
    }
    #[inline(always)]
    unsafe fn forward_burst_pending<T: Nic, O: ForwardOps>(
        &mut self,
        tx: &mut T,
        pending: usize,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        // A TX port of this very type: match the pair, so each of the four runs its own loop.
        match super::same_type::<Self, T>(tx) {
            Some(tx) => match (self, tx) {
                // SAFETY: the caller keeps the trait's contract, which each driver shares.
                (EitherNic::A(r), EitherNic::A(t)) => unsafe {
                    r.forward_burst_pending(t, pending, max, owner, ops)
                },
                // SAFETY: as above.
                (EitherNic::A(r), EitherNic::B(t)) => unsafe {
                    r.forward_burst_pending(t, pending, max, owner, ops)
                },
                // SAFETY: as above.
                (EitherNic::B(r), EitherNic::A(t)) => unsafe {
                    r.forward_burst_pending(t, pending, max, owner, ops)
                },
                // SAFETY: as above.
                (EitherNic::B(r), EitherNic::B(t)) => unsafe {
                    r.forward_burst_pending(t, pending, max, owner, ops)
                },
            },
            None => match self {
                // SAFETY: as above.
                EitherNic::A(r) => unsafe { r.forward_burst_pending(tx, pending, max, owner, ops) },
                // SAFETY: as above.
                EitherNic::B(r) => unsafe { r.forward_burst_pending(tx, pending, max, owner, ops) },
            },
        }
    }
    fn tx_reclaim(&mut self, f: impl FnMut(Pfn, TxOwner)) -> usize {
        either!(self, n => n.tx_reclaim(f))
    }
    fn tx_reclaim_into(
        &mut self,
        owner: TxOwner,
        room: &mut [Pfn],
        other: impl FnMut(Pfn, TxOwner),
    ) -> (usize, usize) {
        either!(self, n => n.tx_reclaim_into(owner, room, other))
    }
    fn kick(&mut self) -> u32 {
        either!(self, n => n.kick())
    }
    fn park_interrupts(&mut self) {
        either!(self, n => n.park_interrupts())
    }
    fn rx_arm_interrupt(&mut self) -> bool {
        either!(self, n => n.rx_arm_interrupt())
    }
    fn reset_device(&mut self) -> bool {
        either!(self, n => n.reset_device())
    }
    unsafe fn take_pages(&mut self, f: &mut dyn FnMut(Pfn)) {
        // SAFETY: as `rx_refill`.
        either!(self, n => unsafe { n.take_pages(f) })
    }
    fn stats(&self) -> DriverStats {
        either!(self, n => n.stats())
    }
    fn link_up(&self) -> Option<bool> {
        either!(self, n => n.link_up())
    }
}
