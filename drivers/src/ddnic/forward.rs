//! The DD-bit driver's own fused burst, for a port pair of its own type (an e1000e pair):
//! one pass per descriptor (DD, the verdict, the TX descriptor, the RX slot re-posted from the
//! page_pool) with no array between the rings, descriptors written as two 64-bit stores, `RDT`
//! once per burst when at least [`RX_PUBLISH_BATCH`] re-posts wait and `TDT` once per burst. A
//! pair of two driver types keeps the neutral loop ([`crate::nic::forward_staged`]):
//! docs/DESIGN.md, "The NIC contract".
//!
//! The loop carries the ring positions (next RX descriptor to clean, RX and TX tails) and the
//! byte sum in locals and writes them back once after the burst: through `&mut self` the
//! compiler reloaded and stored every position each frame, as the dataplane's callbacks write
//! memory it cannot tell apart from the driver's. Frame counts follow from the rare exits
//! (`Rare`), as in the virtio-net driver's loop.
//!
//! A frame of several descriptors (a jumbo frame in 4 KiB buffers: every descriptor but the
//! last full, `EOP` on the last; 8254x SDM §3.2.3) leaves the fast path: its buffers are
//! collected in order (`DdNic::rx_chain`, across bursts if need be), up to
//! [`MAX_FRAME_PAGES`], shown whole to [`ForwardOps::forward_multi`] (headers in the first
//! page) and sent, zero copy, as as many TX descriptors of the same pages (`EOP` on the last,
//! `RS` on each: each page comes back by its own DD bit). A frame of more buffers is dropped
//! as `TooBig`, one with an error or a short buffer before its last as `Malformed`. Only with
//! the frame at offset 0: with an `OFFSET` the buffers are not whole pages, and such frames
//! are dropped as `TooBig` (the mixed virtio-net + e1000e pair).

use super::{DdNic, DdRegs, DescFormat, RxChain, RxDesc, TxDesc, RX_PUBLISH_BATCH};
use super::{TDT, TXCMD_EOP, TXCMD_IFCS, TXCMD_RS};
use crate::nic::RING_SIZE;
use crate::nic::{
    give_back_over_limit, whole_frame_bound, BurstStats, ForwardOps, GiveBack, MultiFrame,
    RxStatus, RxVerdict, TxDone, TxOwner, MAX_FRAME_PAGES,
};
use core::sync::atomic::{fence, Ordering};
use mm::Pfn;
use virtio_drivers::Hal;

/// The `cmd` byte of a one-descriptor frame: `EOP | IFCS | RS` (bits 31:24 of the
/// descriptor's second quadword in both layouts, [`DescFormat::tx_word`]).
const TX_CMD: u8 = TXCMD_EOP | TXCMD_IFCS | TXCMD_RS;

const _: () = assert!(
    core::mem::size_of::<RxDesc>() == 16 && core::mem::size_of::<TxDesc>() == 16,
    "two quadwords per descriptor"
);

/// A burst's rare exits: what the cold paths change, so the loop carries no count of its own
/// but the byte sum.
#[derive(Default)]
pub(super) struct Rare {
    /// Buffers that were not a whole frame (handed back).
    pub(super) rejected: usize,
    /// Bytes received but not sent: frames consumed or refused by a full TX ring, and the
    /// bytes a `RxVerdict::ForwardFirst` cut.
    pub(super) unsent_bytes: u64,
    /// TX descriptors beyond the first of the frames of several descriptors sent.
    pub(super) tx_extra: usize,
}

/// The TX side of a burst as its cold paths see it: the tail (unmasked) and where it must
/// stop, the owner tag.
struct TxAt {
    tt: usize,
    full: usize,
    owner: TxOwner,
}

/// What [`DdNic::rx_not_whole`] made of a buffer that failed the whole-frame test.
#[derive(Copy, Clone, Eq, PartialEq)]
enum NotWhole {
    /// Handed back: go on with the next buffer.
    Skip,
    /// A buffer of a frame whose `EOP` is still to come (collected, or handed back with its
    /// frame dropped): it does not count against the burst's budget of frames.
    Part,
    /// A whole frame handled there (one shorter than [`ForwardOps::MIN_FRAME`], shown to
    /// [`ForwardOps::forward`]; or the last buffer of a frame of several, sent or handed
    /// back): its bytes count as received.
    Frame(usize),
}

impl<H: Hal, R: DdRegs, const OFFSET: usize, F: DescFormat> DdNic<H, R, OFFSET, F> {
    /// The shortest frame the whole-frame test passes: [`ForwardOps::MIN_FRAME`], at least 1
    /// (a frame of 0 bytes is malformed).
    const fn min_whole<O: ForwardOps>() -> usize {
        if O::MIN_FRAME > 1 {
            O::MIN_FRAME
        } else {
            1
        }
    }

    /// The whole-frame test's bound on `len - min_whole`: every one-buffer length from
    /// [`Self::min_whole`] to `rx_fits` (the buffer, or the port's frame limit if less) passes;
    /// 0 while continuations are expected (then no buffer passes and the cold path takes
    /// each).
    #[inline(always)]
    fn whole_room<O: ForwardOps>(&self) -> usize {
        if self.rx_mid_frame() {
            0
        } else {
            whole_frame_bound(self.rx_fits, Self::min_whole::<O>())
        }
    }

    /// The fused burst onto `tx`, a port of this very type (see the module docs): up to
    /// `max` frames (`pending` is an upper bound on buffers: each descriptor's DD bit is read
    /// here; a frame of several buffers counts once, as DPDK's `rte_eth_rx_burst` counts
    /// packets).
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
        // Buffers to look at: one per frame of the budget, more for frames of several
        // buffers (each buffer before a frame's last adds one), never past those posted.
        let limit = pending.min(self.rx_posted);
        let mut n = max.min(limit);
        if n == 0 {
            return BurstStats::default();
        }
        let mut ops = ops();
        let mut rare = Rare::default();
        const MASK: usize = RING_SIZE - 1;
        // Ring positions, unmasked (masked at each use): the next RX descriptor to clean is
        // `c0 + k`, the RX tail `rt`, the TX tail `tt`; `tt` may reach `tt_full`.
        let c0 = self.rx_clean;
        let rt0 = self.rx_tail;
        let tt0 = tx.tx_tail;
        let tt_full = tt0 + (RING_SIZE - 1 - tx.tx_posted);
        let (mut rt, mut tt) = (rt0, tt0);
        let mut rx_bytes = 0u64;
        // The port's frame limit (`rx_fits`: the MTU, at most the buffer) joins the
        // whole-frame test, read from `self` here and on the cold path: a longer frame takes
        // the cold path, which hands it back `TooBig`.
        let mut room = self.whole_room::<O>();
        let mut k = 0;
        while k < n {
            let i = (c0 + k) & MASK;
            let dp = self.rx.at(i).cast::<u64>();
            // SAFETY: a descriptor of our ring; the NIC writes it concurrently, hence
            // volatile. The second quadword holds length, status and errors (`F`'s layout).
            let hi = unsafe { dp.add(1).read_volatile() };
            if hi & F::RX_DD == 0 {
                break;
            }
            fence(Ordering::Acquire);
            k += 1;
            let pfn = self.rx_pages[i];
            // The emptied slot's replacement, at the tail: address, then status cleared, as
            // two stores.
            match ops.rx_page_cached() {
                Some(p) => {
                    let q = self.rx.at(rt).cast::<u64>();
                    // SAFETY: the tail descriptor is the driver's until `RDT` passes it.
                    unsafe {
                        q.write_volatile(p.addr() + OFFSET as u64);
                        q.add(1).write_volatile(0);
                    }
                    self.rx_pages[rt & MASK] = p;
                    rt += 1;
                }
                None => rt += self.rx_repost_slow(rt, &mut ops),
            }
            let len = F::rx_len(hi);
            // One branch for the tests (`&`, not `&&`): no error and `EOP` (one buffer), a
            // length from `O::MIN_FRAME` (and 1) to the buffer, no continuation expected
            // (`room` 0).
            let whole = F::rx_whole_status(hi) & (len.wrapping_sub(Self::min_whole::<O>()) < room);
            if !whole {
                let mut at = TxAt {
                    tt,
                    full: tt_full,
                    owner,
                };
                let nw = self.rx_not_whole(tx, pfn, hi, &mut at, &mut ops, &mut rare);
                tt = at.tt;
                room = self.whole_room::<O>();
                match nw {
                    NotWhole::Frame(len) => rx_bytes += len as u64,
                    NotWhole::Part => n = (n + 1).min(limit),
                    NotWhole::Skip => {}
                }
                continue;
            }
            // SAFETY: the whole-frame test bounds `len` from below (`room` at most
            // `RX_BUF_LEN - min_whole + 1`, so no wrap), so `forward` may rely on it.
            unsafe { core::hint::assert_unchecked(len >= O::MIN_FRAME) };
            rx_bytes += len as u64;
            // SAFETY: DD set: the page is ours again, `len` (at most `RX_BUF_LEN`, the page
            // less `OFFSET`) bytes written at OFFSET; identity-mapped RAM nothing else reaches
            // until the verdict.
            let frame = unsafe {
                core::slice::from_raw_parts_mut((pfn.addr() as usize + OFFSET) as *mut u8, len)
            };
            let send = match ops.forward(pfn, frame) {
                RxVerdict::Forward => len,
                v => match verdict_rare(pfn, v, len, &mut ops, &mut rare) {
                    Some(s) => s,
                    None => continue,
                },
            };
            if tt == tt_full {
                tx_full(pfn, send, &mut ops, &mut rare);
                continue;
            }
            let q = tx.tx.at(tt).cast::<u64>();
            // SAFETY: the tail descriptor is the driver's until `TDT` passes it; status (DD)
            // cleared with the command word.
            unsafe {
                q.write_volatile(pfn.addr() + OFFSET as u64);
                q.add(1)
                    .write_volatile(F::tx_word(send as u64, TX_CMD, send as u64));
            }
            tx.tx_pages[tt & MASK] = TxDone { pfn, owner };
            tt += 1;
        }
        let (reposts, sent) = (rt - rt0, tt - tt0);
        self.rx_clean = (c0 + k) & MASK;
        self.rx_tail = rt & MASK;
        self.rx_posted = self.rx_posted + reposts - k;
        self.rx_unpublished += reposts;
        if self.rx_unpublished >= RX_PUBLISH_BATCH {
            self.rx_write_tail();
        }
        if sent > 0 {
            // One `TDT` write for the burst (the `Nic::tx_publish` of this type).
            tx.tx_tail = tt & MASK;
            tx.tx_posted += sent;
            fence(Ordering::Release);
            tx.regs.write(TDT, tx.tx_tail as u32);
            tx.stats.kicks_tx += 1;
        }
        BurstStats {
            buffers: k,
            rx_frames: k - rare.rejected,
            rx_bytes,
            tx_frames: sent - rare.tx_extra,
            tx_bytes: rx_bytes - rare.unsent_bytes,
        }
    }

    /// The emptied RX slot's replacement when the pool's alloc cache had none
    /// ([`ForwardOps::rx_page`]), posted at the tail `rt`; returns descriptors posted (0: the
    /// slot waits for a refill).
    #[cold]
    #[inline(never)]
    fn rx_repost_slow<O: ForwardOps>(&mut self, rt: usize, ops: &mut O) -> usize {
        let Some(p) = ops.rx_page().filter(|&p| p != Pfn(0)) else {
            return 0;
        };
        let d = RxDesc {
            addr: p.addr() + OFFSET as u64,
            ..RxDesc::default()
        };
        // SAFETY: the tail descriptor is the driver's until `RDT` passes it.
        unsafe { self.rx.at(rt).write_volatile(d) };
        self.rx_pages[rt & (RING_SIZE - 1)] = p;
        1
    }

    /// Whether the next buffer continues a frame (dropped, or being collected): then no
    /// buffer is whole.
    #[inline(always)]
    fn rx_mid_frame(&self) -> bool {
        self.rx_skip || self.rx_chain.n > 0
    }

    /// A buffer that failed the whole-frame test (descriptor quadword `hi`): a buffer of a frame
    /// of several (collected, and the frame sent at its last: [`DdNic::rx_chain_next`]), a
    /// continuation of a dropped frame, an error, a frame too big (counted and handed back as
    /// [`DdNic`]'s `rx_pop` classifies it), or a whole frame shorter than
    /// [`ForwardOps::MIN_FRAME`] (shown to [`ForwardOps::forward`], which must consume it).
    #[cold]
    #[inline(never)]
    fn rx_not_whole<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        pfn: Pfn,
        hi: u64,
        at: &mut TxAt,
        ops: &mut O,
        rare: &mut Rare,
    ) -> NotWhole {
        let len = F::rx_len(hi);
        let error = F::rx_error(hi);
        let eop = F::rx_eop(hi);
        if error {
            self.stats.rx_errors += 1;
        }
        if self.rx_chain.n > 0 {
            return self.rx_chain_next(tx, pfn, len, error, eop, at, ops, rare);
        }
        let st = if self.rx_skip {
            RxStatus::Continuation
        } else if error || len == 0 || len > Self::RX_BUF_LEN {
            RxStatus::Malformed
        } else if eop && len > self.rx_limit {
            RxStatus::TooBig
        } else if !eop {
            if OFFSET == 0 && len == Self::RX_BUF_LEN {
                // The first buffer of a frame of several: collected.
                self.rx_chain.pages[0] = pfn;
                self.rx_chain.lens[0] = len as u16;
                self.rx_chain.n = 1;
                rare.rejected += 1;
                return NotWhole::Part;
            }
            RxStatus::TooBig
        } else {
            RxStatus::Ok
        };
        self.rx_skip = !eop;
        if st != RxStatus::Ok {
            rare.rejected += 1;
            ops.give_back(pfn, GiveBack::Rx(st));
            return if eop { NotWhole::Skip } else { NotWhole::Part };
        }
        // A whole frame shorter than `O::MIN_FRAME`: `forward` consumes it.
        rare.unsent_bytes += len as u64;
        // SAFETY: as the fast path's frame: DD set, `len` bytes at OFFSET in our page.
        let frame = unsafe {
            core::slice::from_raw_parts_mut((pfn.addr() as usize + OFFSET) as *mut u8, len)
        };
        if ops.forward(pfn, frame) != RxVerdict::Consumed {
            ops.give_back(pfn, GiveBack::Rx(RxStatus::Malformed));
        }
        NotWhole::Frame(len)
    }

    /// The next buffer (`pfn`, `len` bytes, `error`, `eop`) of the frame being collected
    /// (`self.rx_chain`): kept, and at `EOP` the frame forwarded ([`DdNic::forward_chain`]);
    /// or, with an error, a short buffer before the last, or more than [`MAX_FRAME_PAGES`]
    /// buffers, the frame dropped: its first page counted (`Malformed`, `TooBig`), every page
    /// handed back, the rest of the frame skipped.
    #[allow(clippy::too_many_arguments)]
    fn rx_chain_next<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        pfn: Pfn,
        len: usize,
        error: bool,
        eop: bool,
        at: &mut TxAt,
        ops: &mut O,
        rare: &mut Rare,
    ) -> NotWhole {
        let n = self.rx_chain.n;
        let bad = error || len == 0 || len > Self::RX_BUF_LEN || (!eop && len != Self::RX_BUF_LEN);
        if bad || n == MAX_FRAME_PAGES {
            let chain = core::mem::take(&mut self.rx_chain);
            let first = if bad {
                RxStatus::Malformed
            } else {
                RxStatus::TooBig
            };
            ops.give_back(chain.pages[0], GiveBack::Rx(first));
            for &p in chain.pages[1..n].iter().chain([&pfn]) {
                ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
            }
            rare.rejected += 1;
            self.rx_skip = !eop;
            return if eop { NotWhole::Skip } else { NotWhole::Part };
        }
        self.rx_chain.pages[n] = pfn;
        self.rx_chain.lens[n] = len as u16;
        self.rx_chain.n = n + 1;
        if !eop {
            rare.rejected += 1;
            return NotWhole::Part;
        }
        NotWhole::Frame(self.forward_chain(tx, at, ops, rare))
    }

    /// Send the frame of several buffers just collected (`self.rx_chain`, whole) as the
    /// dataplane decides ([`ForwardOps::forward_multi`]): its pages as as many descriptors on
    /// `tx`'s TX ring at `at` (cut at a [`RxVerdict::ForwardFirst`]: pages past the cut handed
    /// back), or handed back (`TxFull` when the ring has too few free descriptors). Returns the
    /// frame's length.
    fn forward_chain<O: ForwardOps>(
        &mut self,
        tx: &mut Self,
        at: &mut TxAt,
        ops: &mut O,
        rare: &mut Rare,
    ) -> usize {
        let RxChain { pages, mut lens, n } = core::mem::take(&mut self.rx_chain);
        let len: usize = lens[..n].iter().map(|&l| usize::from(l)).sum();
        // SAFETY: DD was set on every buffer of the frame: its pages are ours; the first holds
        // `lens[0]` (at most `RX_BUF_LEN`, the page less `OFFSET`) bytes at OFFSET.
        let head = unsafe {
            core::slice::from_raw_parts_mut(
                (pages[0].addr() as usize + OFFSET) as *mut u8,
                usize::from(lens[0]),
            )
        };
        let verdict = if len > self.rx_limit {
            give_back_over_limit(ops, &pages[..n])
        } else {
            ops.forward_multi(MultiFrame {
                pages: &pages[..n],
                lens: &lens[..n],
                head,
                len,
                offset: OFFSET,
            })
        };
        let send = match verdict {
            RxVerdict::Forward => len,
            RxVerdict::ForwardFirst(k) => k.min(len),
            RxVerdict::Consumed => {
                rare.unsent_bytes += len as u64;
                return len;
            }
        };
        rare.unsent_bytes += (len - send) as u64;
        // The pages holding the first `send` bytes (a prefix), the last one cut.
        let mut m = 0;
        let mut left = send;
        while m < n && left > 0 {
            let take = usize::from(lens[m]).min(left);
            lens[m] = take as u16;
            left -= take;
            m += 1;
        }
        for &p in &pages[m.max(1)..n] {
            ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
        }
        if m == 0 || at.full - at.tt < m {
            rare.unsent_bytes += send as u64;
            ops.give_back(pages[0], GiveBack::TxFull);
            for &p in &pages[1..m.max(1)] {
                ops.give_back(p, GiveBack::Rx(RxStatus::Continuation));
            }
            return len;
        }
        for j in 0..m {
            let last = j + 1 == m;
            let cmd = TXCMD_IFCS | TXCMD_RS | if last { TXCMD_EOP } else { 0 };
            let off = if j == 0 { OFFSET as u64 } else { 0 };
            let q = tx.tx.at(at.tt).cast::<u64>();
            // SAFETY: the tail descriptor is the driver's until `TDT` passes it; status (DD)
            // cleared with the command word.
            unsafe {
                q.write_volatile(pages[j].addr() + off);
                q.add(1)
                    .write_volatile(F::tx_word(u64::from(lens[j]), cmd, send as u64));
            }
            tx.tx_pages[at.tt & (RING_SIZE - 1)] = TxDone {
                pfn: pages[j],
                owner: at.owner,
            };
            at.tt += 1;
        }
        rare.tx_extra += m - 1;
        len
    }
}

/// A one-page frame's verdict other than [`RxVerdict::Forward`]: the bytes to send, or `None`
/// when the dataplane took the page (`Consumed`) or the cut left nothing to send (the page
/// handed back as `TxFull`); bytes not sent are counted in `rare`.
#[cold]
#[inline(never)]
fn verdict_rare<O: ForwardOps>(
    pfn: Pfn,
    verdict: RxVerdict,
    len: usize,
    ops: &mut O,
    rare: &mut Rare,
) -> Option<usize> {
    match verdict {
        RxVerdict::Forward => Some(len),
        RxVerdict::ForwardFirst(n) => {
            let n = n.min(len);
            rare.unsent_bytes += (len - n) as u64;
            if n == 0 {
                ops.give_back(pfn, GiveBack::TxFull);
                return None;
            }
            Some(n)
        }
        RxVerdict::Consumed => {
            rare.unsent_bytes += len as u64;
            None
        }
    }
}

/// The TX ring had no descriptor for a frame to forward: hand its page back.
#[cold]
#[inline(never)]
fn tx_full<O: ForwardOps>(pfn: Pfn, send: usize, ops: &mut O, rare: &mut Rare) {
    rare.unsent_bytes += send as u64;
    ops.give_back(pfn, GiveBack::TxFull);
}
