//! The neutral fused burst: [`forward_staged`], one RX burst of any [`Nic`] forwarded onto the
//! TX ring of any other, written once above the drivers from the contract's own calls
//! ([`Nic::rx_burst_refill`], [`Nic::tx_post`], [`Nic::tx_publish`]), the shape of ixy.rs's
//! `rx_batch` + `tx_batch` and DPDK's `rte_eth_rx_burst` + `rte_eth_tx_burst` with the verdict
//! in between.
//!
//! It runs a port pair of two driver types (virtio-net RX onto a DD-bit NIC's TX, ...) and the
//! ports of a driver without a fused loop of its own. A driver's own loop
//! ([`Nic::forward_burst_pending`] for a pair of its own type) is the fast path; this one costs
//! a pass over a small array of [`RxBuf`]s between the two rings and handles frames of one
//! buffer only (a frame the RX driver spread over several buffers is handed back as its
//! [`RxStatus`] says: `too_big`).

use super::{BurstStats, ForwardOps, GiveBack, Nic, RxBuf, RxStatus, RxVerdict, TxOwner};
use mm::{Pfn, PAGE_SIZE};

/// RX buffers one step of [`forward_staged`] pops before it forwards them (the array between
/// the rings, on the stack): 32, DPDK's default burst.
pub const STAGED_STEP: usize = 32;

/// Receive up to `max` buffers on `rx` (`pending` of them known to be waiting, as
/// [`Nic::rx_pending`] read them; clamped to the RX ring), re-post each emptied RX slot with a
/// page from the [`ForwardOps`] made by `ops` (made only when a buffer is waiting), show each
/// whole frame to [`ForwardOps::forward`] and post what it forwards on `tx`'s TX ring, zero
/// copy, in place: the frame stays at `R::FRAME_OFFSET` in its page and `tx` writes its own
/// header, if any, in the bytes before it. One TX publish per step; the RX re-posts are
/// published as the RX driver's `rx_burst_refill` does (the caller's [`Nic::rx_publish`]
/// flushes the rest).
///
/// A port pair whose RX NIC keeps fewer header bytes before the frame than its TX NIC needs
/// (`R::FRAME_OFFSET < T::FRAME_OFFSET`: a NIC that writes frames at offset 0 onto
/// virtio-net's 12-byte header) moves each frame up inside its own page first (a
/// `copy_within` of the frame; a frame that would no longer fit the page is handed back as
/// [`GiveBack::TxFull`]); the test is on two constants and folds away for every other pair.
/// An RX driver that posts its buffers with headroom (XDP's 256 bytes) avoids the move.
///
/// # Safety
/// As [`Nic::forward_burst`]: every page [`ForwardOps::rx_page`] returns is an order-0 RAM page
/// the caller owns and gives to `rx`'s device until it comes back; a page forwarded belongs
/// to `tx`'s TX ring until a TX completion or [`Nic::take_pages`] returns it.
#[inline]
pub unsafe fn forward_staged<R: Nic, T: Nic, O: ForwardOps>(
    rx: &mut R,
    tx: &mut T,
    pending: usize,
    max: usize,
    owner: TxOwner,
    ops: impl FnOnce() -> O,
) -> BurstStats {
    let mut left = pending.min(max).min(super::RING_SIZE);
    let mut st = BurstStats::default();
    if left == 0 {
        return st;
    }
    let mut ops = ops();
    let mut bufs = [RxBuf {
        pfn: Pfn(0),
        len: 0,
        status: RxStatus::Unused,
    }; STAGED_STEP];
    while left > 0 {
        let want = left.min(STAGED_STEP);
        // SAFETY: the caller's contract: the pages `fresh` returns are the caller's to give.
        let n = unsafe { rx.rx_burst_refill(&mut bufs[..want], || fresh(&mut ops)) };
        if n == 0 {
            break;
        }
        left -= n;
        st.buffers += n;
        let mut posted = false;
        for b in &bufs[..n] {
            if b.status != RxStatus::Ok {
                ops.give_back(b.pfn, GiveBack::Rx(b.status));
                continue;
            }
            st.rx_frames += 1;
            st.rx_bytes += b.len as u64;
            let len = b.len.min(R::MAX_FRAME_LEN);
            // SAFETY: `rx` handed the page back (it is ours) with `len` frame bytes at its
            // frame offset; the page is identity-mapped RAM of PAGE_SIZE bytes and nothing
            // else reaches it while the slice lives (until the verdict).
            let frame = unsafe {
                core::slice::from_raw_parts_mut(
                    (b.pfn.addr() as usize as *mut u8).add(R::FRAME_OFFSET),
                    len,
                )
            };
            let send = match ops.forward(b.pfn, frame) {
                RxVerdict::Forward => len,
                RxVerdict::ForwardFirst(k) => k.min(len),
                RxVerdict::Consumed => continue,
            };
            let at = if R::FRAME_OFFSET >= T::FRAME_OFFSET {
                R::FRAME_OFFSET
            } else {
                match move_up::<R, T>(b.pfn, send) {
                    Some(at) => at,
                    None => {
                        ops.give_back(b.pfn, GiveBack::TxFull);
                        continue;
                    }
                }
            };
            // SAFETY: the page is ours (`Forward`) and holds the frame at `at`, at least
            // `T::FRAME_OFFSET`: `tx` may write its header before it.
            if send > 0 && unsafe { tx.tx_post(b.pfn, at, send, owner) } {
                posted = true;
                st.tx_frames += 1;
                st.tx_bytes += send as u64;
            } else {
                ops.give_back(b.pfn, GiveBack::TxFull);
            }
        }
        if posted {
            tx.tx_publish();
        }
        if n < want {
            break;
        }
    }
    st
}

/// Move a frame of `len` bytes at `R::FRAME_OFFSET` in page `pfn` up to `T::FRAME_OFFSET`,
/// so `T` can write its header before it; the frame's new offset, or `None` if it would no
/// longer fit the page.
#[cold]
#[inline(never)]
fn move_up<R: Nic, T: Nic>(pfn: Pfn, len: usize) -> Option<usize> {
    if T::FRAME_OFFSET + len > PAGE_SIZE {
        return None;
    }
    // SAFETY: the page is ours (the verdict said `Forward`, the slice of the frame is gone),
    // identity-mapped RAM of PAGE_SIZE bytes, and nothing else reaches it meanwhile.
    let page =
        unsafe { core::slice::from_raw_parts_mut(pfn.addr() as usize as *mut u8, PAGE_SIZE) };
    page.copy_within(R::FRAME_OFFSET..R::FRAME_OFFSET + len, T::FRAME_OFFSET);
    Some(T::FRAME_OFFSET)
}

/// A fresh page for an RX slot: the pool's alloc cache, else its slow path.
#[inline(always)]
fn fresh(ops: &mut impl ForwardOps) -> Option<Pfn> {
    match ops.rx_page_cached() {
        Some(p) => Some(p),
        None => ops.rx_page(),
    }
}
