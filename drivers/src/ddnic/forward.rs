//! The DD-bit driver's own fused burst, for a port pair of its own type (an e1000e pair):
//! one pass per descriptor (DD, the verdict, the TX descriptor, the RX slot re-posted from the
//! page_pool) with no array between the rings, descriptors written as two 64-bit stores, `RDT`
//! every [`RX_PUBLISH_BATCH`] re-posts and `TDT` once per burst. A pair of two driver types
//! keeps the neutral loop ([`crate::nic::forward_staged`]): docs/DESIGN.md, "The NIC contract".

use super::{DdNic, DdRegs, RxDesc, TxDesc, RXSTA_EOP, RX_PUBLISH_BATCH, STA_DD};
use super::{TDT, TXCMD_EOP, TXCMD_IFCS, TXCMD_RS};
use crate::nic::RING_SIZE;
use crate::nic::{BurstStats, ForwardOps, GiveBack, RxStatus, RxVerdict, TxDone, TxOwner};
use core::sync::atomic::{fence, Ordering};
use mm::{Pfn, PAGE_SIZE};
use virtio_drivers::Hal;

/// The `cmd` byte of a one-descriptor frame: `EOP | IFCS | RS`, in bits 31:24 of the
/// descriptor's second quadword's low word (8254x SDM §3.3.3: length 15:0, CSO 23:16, CMD
/// 31:24).
const TX_CMD_WORD: u64 = ((TXCMD_EOP | TXCMD_IFCS | TXCMD_RS) as u64) << 24;

const _: () = assert!(
    core::mem::size_of::<RxDesc>() == 16 && core::mem::size_of::<TxDesc>() == 16,
    "two quadwords per descriptor"
);

impl<H: Hal, R: DdRegs, const OFFSET: usize> DdNic<H, R, OFFSET> {
    /// The fused burst onto `tx`, a port of this very type (see the module docs): up to
    /// `max` buffers (`pending` is an upper bound: each descriptor's DD bit is read here).
    ///
    /// # Safety
    /// As [`crate::nic::Nic::forward_burst`].
    #[inline(always)]
    pub(super) unsafe fn forward_own<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        pending: usize,
        max: usize,
        owner: TxOwner,
        ops: impl FnOnce() -> O,
    ) -> BurstStats {
        let mut st = BurstStats::default();
        let n = pending.min(max).min(self.rx_posted);
        if n == 0 {
            return st;
        }
        let mut ops = ops();
        let tx_before = tx.tx_posted;
        for _ in 0..n {
            let i = self.rx_clean;
            let dp = self.rx.at(i).cast::<u64>();
            // SAFETY: a descriptor of our ring; the NIC writes it concurrently, hence
            // volatile. The second quadword holds length 15:0, status 39:32, errors 47:40.
            let hi = unsafe { dp.add(1).read_volatile() };
            let status = (hi >> 32) as u8;
            if status & STA_DD == 0 {
                break;
            }
            fence(Ordering::Acquire);
            let pfn = self.rx_pages[i];
            self.rx_clean = (i + 1) & (RING_SIZE - 1);
            self.rx_posted -= 1;
            st.buffers += 1;
            // The emptied slot's replacement, at the tail (the slot itself when the ring is
            // in step): address, then status cleared, as two stores.
            let fresh = match ops.rx_page_cached() {
                Some(p) => Some(p),
                None => ops.rx_page(),
            };
            if let Some(p) = fresh.filter(|&p| p != Pfn(0)) {
                let t = self.rx_tail;
                let q = self.rx.at(t).cast::<u64>();
                // SAFETY: the tail descriptor is the driver's until `RDT` passes it.
                unsafe {
                    q.write_volatile(p.addr() + OFFSET as u64);
                    q.add(1).write_volatile(0);
                }
                self.rx_pages[t] = p;
                self.rx_tail = (t + 1) & (RING_SIZE - 1);
                self.rx_posted += 1;
                self.rx_unpublished += 1;
                if self.rx_unpublished >= RX_PUBLISH_BATCH {
                    self.rx_write_tail();
                }
            }
            let len = (hi & 0xFFFF) as usize;
            let errors = (hi >> 40) as u8;
            let eop = status & RXSTA_EOP != 0;
            if self.rx_skip || errors != 0 || !eop || len == 0 || len > Self::RX_BUF_LEN {
                self.rx_other(pfn, len, errors, eop, &mut ops);
                continue;
            }
            st.rx_frames += 1;
            st.rx_bytes += len as u64;
            // SAFETY: DD set: the page is ours again, `len` bytes written at OFFSET; it is
            // identity-mapped RAM nothing else reaches until the verdict.
            let frame = unsafe {
                core::slice::from_raw_parts_mut((pfn.addr() as usize + OFFSET) as *mut u8, len)
            };
            let send = match ops.forward(pfn, frame) {
                RxVerdict::Forward => len,
                RxVerdict::ForwardFirst(k) => k.min(len),
                RxVerdict::Consumed => continue,
            };
            if send == 0 || send + OFFSET > PAGE_SIZE || tx.tx_posted >= RING_SIZE - 1 {
                ops.give_back(pfn, GiveBack::TxFull);
                continue;
            }
            let t = tx.tx_tail;
            let q = tx.tx.at(t).cast::<u64>();
            // SAFETY: the tail descriptor is the driver's until `TDT` passes it; status (DD)
            // cleared with the command word.
            unsafe {
                q.write_volatile(pfn.addr() + OFFSET as u64);
                q.add(1).write_volatile(send as u64 | TX_CMD_WORD);
            }
            tx.tx_pages[t] = TxDone { pfn, owner };
            tx.tx_tail = (t + 1) & (RING_SIZE - 1);
            tx.tx_posted += 1;
            st.tx_frames += 1;
            st.tx_bytes += send as u64;
        }
        if tx.tx_posted != tx_before {
            // One `TDT` write for the burst (the `Nic::tx_publish` of this type).
            fence(Ordering::Release);
            tx.regs.write(TDT, tx.tx_tail as u32);
            tx.stats.kicks_tx += 1;
        }
        st
    }

    /// A buffer that is not a whole good frame (a continuation, an error, a frame larger than
    /// one buffer): counted and handed back as [`DdNic`]'s `rx_pop` classifies it.
    #[cold]
    #[inline(never)]
    fn rx_other<O: ForwardOps>(
        &mut self,
        pfn: Pfn,
        len: usize,
        errors: u8,
        eop: bool,
        ops: &mut O,
    ) {
        if errors != 0 {
            self.stats.rx_errors += 1;
        }
        let st = if self.rx_skip {
            RxStatus::Continuation
        } else if errors != 0 || len == 0 || len > Self::RX_BUF_LEN {
            RxStatus::Malformed
        } else {
            RxStatus::TooBig
        };
        self.rx_skip = !eop;
        ops.give_back(pfn, GiveBack::Rx(st));
    }
}
