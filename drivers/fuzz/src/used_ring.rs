//! A hostile virtio-net device against the driver's used-ring handling (issue 15): the
//! harness behind the `used_ring` (one-page RX buffers, frames of several pages as mergeable
//! chains) and `used_ring_big` (RX buffers of three pages, `VirtioNet::set_rx_buffer_pages`:
//! one used element per frame) targets.
//!
//! Two [`VirtioNet`]s (A and B) come up on [`drivers::sim`] devices; their RX rings get pages
//! from a fixed pool. The fuzz input is a program for the device side and the driver side in
//! turn: well-behaved deliveries (one page each, or mergeable over several buffers) and TX
//! completions, raw used elements with any id and length ([`DeviceQueue::write_used_raw`]),
//! `used->idx` jumps ([`DeviceQueue::set_used_idx`]), `num_buffers` scribbled into posted RX
//! buffers, and driver calls (`forward_burst` with `forward` and `forward_multi` verdicts,
//! `tx_reclaim_into`, `tx_reclaim`, `rx_burst`, `rx_burst_refill`, `tx_complete`,
//! `rx_refill`, `tx_burst`, `kick`).
//!
//! Checked: no panic (debug assertions on), and page accounting: every page the driver hands
//! to the harness is one of the pool's and not already the harness's (no page handed back
//! twice, no page made up), every frame slice lies inside its page, and after both devices are
//! reset and `reclaim`ed every pool page is the harness's again, exactly once (none lost on a
//! ring, none duplicated). The page sets are `BTreeSet`s: a randomly keyed hash would make the
//! coverage, and so a fixed-seed run (CI's), differ from run to run.

use drivers::sim::{
    DeviceQueue, HostHal, SimDevice, SimShared, SimTransport, SIM_RX_QUEUE, SIM_TX_QUEUE,
};
use drivers::virtio_net::{
    ForwardOps, GiveBack, MultiFrame, RxBuf, RxStatus, RxVerdict, TxBuf, TxDone, TxOwner,
    VirtioNet, NET_HDR_LEN, QUEUE_SIZE,
};
use mm::Pfn;
use std::alloc::{alloc_zeroed, Layout};
use std::collections::BTreeSet;
use std::sync::OnceLock;

type Nic<'a> = VirtioNet<HostHal, SimTransport<'a>>;

const PAGE: usize = 4096;
/// Most pages per RX buffer a target runs with (`used_ring_big`).
pub const BIG: usize = 3;
/// Pool pages for RX buffers of `k` pages: both RX rings full, a TX ring of frames of up to
/// `k` pages (or one-page frames) and some spares.
const fn pool_len(k: usize) -> usize {
    2 * k * QUEUE_SIZE + k * QUEUE_SIZE + 64
}
/// The largest pool.
const POOL_MAX: usize = pool_len(BIG);
const OWNER: TxOwner = TxOwner::new(7);

/// The pool of the run with RX buffers of `k` pages (a prefix of one allocation made once
/// for the whole run; page contents carry over, harmlessly).
fn pool(k: usize) -> &'static [Pfn] {
    /// The pages' addresses (kept as such so LeakSanitizer sees them referenced) and frames.
    static P: OnceLock<(Vec<usize>, Vec<Pfn>)> = OnceLock::new();
    &P.get_or_init(|| {
        let addrs: Vec<usize> = (0..POOL_MAX)
            .map(|_| {
                let l = Layout::from_size_align(PAGE, PAGE).unwrap();
                // SAFETY: non-zero size; never freed (lives for the process).
                let p = unsafe { alloc_zeroed(l) };
                assert!(!p.is_null());
                p as usize
            })
            .collect();
        let pfns = addrs.iter().map(|&a| Pfn::from_addr(a as u64)).collect();
        (addrs, pfns)
    })
    .1[..pool_len(k)]
}

/// The harness's pages, with the accounting checks.
struct Pages {
    all: BTreeSet<Pfn>,
    /// The harness's own pages, in hand-out order.
    mine: Vec<Pfn>,
    mine_set: BTreeSet<Pfn>,
}

impl Pages {
    fn new(k: usize) -> Self {
        let p = pool(k);
        Pages {
            all: p.iter().copied().collect(),
            mine: p.to_vec(),
            mine_set: p.iter().copied().collect(),
        }
    }
    /// The driver hands `p` back.
    fn back(&mut self, p: Pfn, what: &str) {
        assert!(self.all.contains(&p), "{what}: {p:?} is not a pool page");
        assert!(self.mine_set.insert(p), "{what}: {p:?} handed back twice");
        self.mine.push(p);
    }
    /// A page for the driver.
    fn give(&mut self) -> Option<Pfn> {
        let p = self.mine.pop()?;
        assert!(self.mine_set.remove(&p));
        Some(p)
    }
    /// `p` is in the driver's hands (a frame it shows the harness).
    fn check_not_mine(&self, p: Pfn, what: &str) {
        assert!(self.all.contains(&p), "{what}: {p:?} is not a pool page");
        assert!(
            !self.mine_set.contains(&p),
            "{what}: {p:?} is the harness's"
        );
    }
}

struct Ops<'a> {
    pages: &'a mut Pages,
    verdict: u8,
    cached: bool,
}

impl ForwardOps for Ops<'_> {
    fn rx_page(&mut self) -> Option<Pfn> {
        self.pages.give()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        if self.cached {
            self.pages.give()
        } else {
            None
        }
    }
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        self.pages.check_not_mine(pfn, "forward");
        let start = frame.as_ptr() as u64;
        assert!(start == pfn.addr() + NET_HDR_LEN as u64);
        assert!(NET_HDR_LEN + frame.len() <= PAGE, "frame past its page");
        if let Some(b) = frame.first_mut() {
            *b = b.wrapping_add(1);
        }
        self.verdict = self.verdict.rotate_left(1);
        match self.verdict % 4 {
            0 => {
                self.pages.back(pfn, "consumed");
                RxVerdict::Consumed
            }
            1 => RxVerdict::ForwardFirst(usize::from(self.verdict)),
            _ => RxVerdict::Forward,
        }
    }
    fn give_back(&mut self, pfn: Pfn, _why: GiveBack) {
        self.pages.back(pfn, "give_back");
    }
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        assert!((2..=4).contains(&frame.pages.len()));
        assert_eq!(frame.pages.len(), frame.lens.len());
        let mut sum = 0;
        for (i, &p) in frame.pages.iter().enumerate() {
            self.pages.check_not_mine(p, "forward_multi");
            let start = if i == 0 { NET_HDR_LEN } else { 0 };
            assert!(
                start + usize::from(frame.lens[i]) <= PAGE,
                "frame past its page"
            );
            sum += usize::from(frame.lens[i]);
        }
        assert_eq!(sum, frame.len);
        assert_eq!(frame.head.len(), usize::from(frame.lens[0]));
        assert_eq!(
            frame.head.as_ptr() as u64,
            frame.pages[0].addr() + NET_HDR_LEN as u64
        );
        self.verdict = self.verdict.rotate_left(1);
        match self.verdict % 4 {
            0 => {
                for &p in frame.pages {
                    self.pages.back(p, "consumed multi");
                }
                RxVerdict::Consumed
            }
            1 => RxVerdict::ForwardFirst(usize::from(self.verdict) * 61),
            _ => RxVerdict::Forward,
        }
    }
}

/// Reads the input a byte (or word) at a time; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// An id: mostly in range, sometimes anything.
    fn id(&mut self) -> u32 {
        match self.u8() {
            0..=199 => u32::from(self.u8()),
            200..=239 => u32::from(self.u16()) % (QUEUE_SIZE as u32 + 8),
            _ => self.u32(),
        }
    }
    /// A used length: around a frame, sometimes anything.
    fn len(&mut self) -> u32 {
        match self.u8() {
            0..=127 => NET_HDR_LEN as u32 + u32::from(self.u8()),
            128..=191 => u32::from(self.u16()) % (PAGE as u32 + 64),
            _ => self.u32(),
        }
    }
}

/// The device side of queue `q` of `shared`.
fn dq(shared: &SimShared, q: u16) -> Option<DeviceQueue<'_>> {
    // SAFETY: HostHal and pool memory are identity-mapped and live for the whole input (the
    // nics are dropped, resetting the devices, before `shared`); only this harness plays the
    // device, between driver calls.
    unsafe { DeviceQueue::new(shared, q) }
}

/// A posted buffer's page as the device sees it, if it is a pool page (a descriptor the driver
/// never wrote has address 0).
fn desc_page(pages: &Pages, q: &DeviceQueue<'_>, id: u16) -> Option<*mut u8> {
    // The first buffer of the chain (inside its indirect table for a big RX buffer).
    let mut first = None;
    q.for_each_desc(id, |d| {
        first.get_or_insert(d.addr);
    });
    let p = Pfn::from_addr(first? & !(PAGE as u64 - 1));
    pages.all.contains(&p).then_some(p.addr() as *mut u8)
}

/// Play `data` against two devices whose RX buffers are `k` pages each (1, or [`BIG`]).
pub fn run(data: &[u8], k: usize) {
    let mut input = Input(data);
    let shared = [
        SimShared::new([2, 0, 0, 0, 0, 1]),
        SimShared::new([2, 0, 0, 0, 0, 2]),
    ];
    let mut pages = Pages::new(k);
    let mut nics: Vec<Nic<'_>> = shared
        .iter()
        .map(|s| Nic::new(SimTransport::new(s)).expect("sim device comes up"))
        .collect();
    // SAFETY: as `dq`.
    let mut devs: Vec<SimDevice<'_>> = shared
        .iter()
        .map(|s| unsafe { SimDevice::new(s) })
        .collect();
    for nic in nics.iter_mut() {
        if k > 1 {
            nic.set_rx_buffer_pages(k)
                .expect("the sim device offers indirect descriptors");
        }
        let fill: Vec<Pfn> = (0..k * QUEUE_SIZE).filter_map(|_| pages.give()).collect();
        // SAFETY: pool pages, the driver's until they come back.
        let n = unsafe { nic.rx_refill(&fill) };
        assert_eq!(n, k * QUEUE_SIZE);
    }
    let mut rx_out = vec![
        RxBuf {
            pfn: Pfn(0),
            len: 0,
            status: RxStatus::Ok
        };
        QUEUE_SIZE
    ];
    let mut tx_out = vec![
        TxDone {
            pfn: Pfn(0),
            owner: TxOwner::new(0)
        };
        QUEUE_SIZE
    ];
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let mut verdict = 0x5au8;
    let mut steps = 0;
    while !input.0.is_empty() && steps < 4096 {
        steps += 1;
        let op = input.u8();
        let x = usize::from(op >> 7);
        let (a, b) = nics.split_at_mut(1);
        let (nic, other) = if x == 0 {
            (&mut a[0], &mut b[0])
        } else {
            (&mut b[0], &mut a[0])
        };
        match op & 0x7f {
            // Device: a well-behaved delivery of `n` frames of length `l`.
            0..=9 => {
                let n = usize::from(input.u8() % 64);
                let l = usize::from(input.u16()) % (PAGE - NET_HDR_LEN + 1);
                let frame = vec![0x45u8; l];
                devs[x].deliver_rx(&frame, n);
            }
            // Device: a well-behaved delivery of frames of up to four pages, spread over as
            // many buffers as they need (`VIRTIO_NET_F_MRG_RXBUF`, §5.1.6.4).
            10..=11 => {
                let n = usize::from(input.u8() % 16);
                let l = usize::from(input.u16()) % (4 * PAGE - NET_HDR_LEN + 1);
                let frame = vec![0x45u8; l];
                devs[x].deliver_rx_mrg(&frame, n);
            }
            // Device: well-behaved TX completion.
            12..=19 => {
                devs[x]
                    .complete_tx(|f| assert!(f.len() <= drivers::virtio_net::MAX_MULTI_FRAME_LEN));
            }
            // Device: take the next available RX chain, write a header with any num_buffers
            // and give it back with any length.
            20..=35 => {
                let nb = input.u16();
                let len = input.len();
                if let Some(mut q) = dq(&shared[x], SIM_RX_QUEUE) {
                    if let Some(head) = q.take() {
                        let mut hdr = [0u8; NET_HDR_LEN];
                        hdr[10..12].copy_from_slice(&nb.to_le_bytes());
                        q.write_chain(head, &[&hdr, &[0x45; 64]]);
                        q.give_back(head, len);
                        q.publish(false);
                    }
                }
            }
            // Device: a raw used element on RX or TX at the device's used index, then publish.
            36..=59 => {
                let queue = if input.u8() & 1 == 0 {
                    SIM_RX_QUEUE
                } else {
                    SIM_TX_QUEUE
                };
                let id = input.id();
                let len = input.len();
                let k = 1 + u16::from(input.u8() % 4);
                if let Some(mut q) = dq(&shared[x], queue) {
                    let at = q.used_idx();
                    for j in 0..k {
                        q.write_used_raw(at.wrapping_add(j), id.wrapping_add(u32::from(j)), len);
                    }
                    q.set_used_idx(at.wrapping_add(k));
                }
            }
            // Device: a used->idx jump (small or any).
            60..=67 => {
                let queue = if input.u8() & 1 == 0 {
                    SIM_RX_QUEUE
                } else {
                    SIM_TX_QUEUE
                };
                let d = if input.u8() & 1 == 0 {
                    u16::from(input.u8())
                } else {
                    input.u16()
                };
                if let Some(mut q) = dq(&shared[x], queue) {
                    let at = q.used_idx();
                    q.set_used_idx(at.wrapping_add(d));
                }
            }
            // Device: scribble num_buffers (and the rest of the header) into the buffer behind
            // RX descriptor `id`.
            68..=75 => {
                let id = input.u16() % QUEUE_SIZE as u16;
                let nb = input.u16();
                if let Some(q) = dq(&shared[x], SIM_RX_QUEUE) {
                    if let Some(p) = desc_page(&pages, &q, id) {
                        // SAFETY: a live pool page; nobody holds a reference into it now.
                        unsafe {
                            p.add(10)
                                .cast::<[u8; 2]>()
                                .write_unaligned(nb.to_le_bytes())
                        };
                    }
                }
            }
            // Driver: the fused burst from x's RX to the other port's TX.
            76..=91 => {
                let max = usize::from(input.u8()) % (QUEUE_SIZE + 8);
                let cached = input.u8() & 1 == 0;
                verdict = verdict.wrapping_add(input.u8());
                let owner = if input.u8() & 3 == 0 {
                    TxOwner::new(OWNER.id() + 1)
                } else {
                    OWNER
                };
                let pages = &mut pages;
                // SAFETY: pool pages, the device's until they come back.
                let s = unsafe {
                    nic.forward_burst(other, max, owner, || Ops {
                        pages,
                        verdict,
                        cached,
                    })
                };
                assert!(s.buffers <= QUEUE_SIZE && s.rx_frames <= s.buffers);
                assert!(s.tx_frames <= s.rx_frames && s.tx_bytes <= s.rx_bytes);
            }
            // Driver: TX reclaim into a page_pool's room.
            92..=99 => {
                let n = usize::from(input.u8()) % (QUEUE_SIZE + 1);
                // (A page of OWNER goes to `other` too when `room` has no space left for it,
                // with frames of several pages in flight.)
                let (w, total) = nic.tx_reclaim_into(OWNER, &mut room[..n], |p, _tag| {
                    pages.back(p, "tx_reclaim_into other");
                });
                // `w` pages, `total` completions (a frame of several pages is one).
                assert!(w <= n && total <= n, "w {w} total {total} n {n}");
                for &p in &room[..w] {
                    pages.back(p, "tx_reclaim_into room");
                }
            }
            100..=103 => {
                nic.tx_reclaim(|p, _| pages.back(p, "tx_reclaim"));
            }
            104..=107 => {
                let n = usize::from(input.u8()) % (QUEUE_SIZE + 1);
                let got = nic.rx_burst(&mut rx_out[..n]);
                for b in &rx_out[..got] {
                    assert!(b.status != RxStatus::Ok || NET_HDR_LEN + b.len <= PAGE);
                    pages.back(b.pfn, "rx_burst");
                }
            }
            108..=109 => {
                let n = usize::from(input.u8()) % (QUEUE_SIZE + 1);
                // Pages given to the driver by `alloc` are the device's until they come back.
                let got = {
                    let pages_ref = &mut pages;
                    // SAFETY: pool pages.
                    unsafe { nic.rx_burst_refill(&mut rx_out[..n], || pages_ref.give()) }
                };
                for b in &rx_out[..got] {
                    pages.back(b.pfn, "rx_burst_refill");
                }
            }
            110..=113 => {
                let n = usize::from(input.u8()) % (QUEUE_SIZE + 1);
                let got = nic.tx_complete(&mut tx_out[..n]);
                for d in &tx_out[..got] {
                    pages.back(d.pfn, "tx_complete");
                }
            }
            114..=117 => {
                let n = usize::from(input.u8()) % 64;
                let fill: Vec<Pfn> = (0..n).filter_map(|_| pages.give()).collect();
                // SAFETY: pool pages, the driver's until they come back.
                let k = unsafe { nic.rx_refill(&fill) };
                for &p in fill[k..].iter().rev() {
                    pages.back(p, "rx_refill (not posted)");
                }
            }
            118..=121 => {
                let n = usize::from(input.u8()) % 32;
                let len = 1 + usize::from(input.u16()) % 1514;
                let bufs: Vec<TxBuf> = (0..n)
                    .filter_map(|_| pages.give())
                    .map(|pfn| TxBuf {
                        pfn,
                        len,
                        owner: OWNER,
                    })
                    .collect();
                // SAFETY: pool pages, the driver's until they come back.
                let k = unsafe { nic.tx_burst(&bufs) };
                for b in bufs[k..].iter().rev() {
                    pages.back(b.pfn, "tx_burst (not posted)");
                }
            }
            _ => {
                nic.rx_publish();
                nic.kick();
            }
        }
    }
    for nic in nics.iter_mut() {
        nic.reclaim(|p| pages.back(p, "reclaim"))
            .expect("owner handle");
    }
    assert_eq!(pages.mine_set.len(), pool_len(k), "pages lost");
    drop(devs);
    drop(nics);
}
