//! A hostile DD-bit NIC (the simulated e1000e, `drivers::sim::dd`) against the DD driver's ring
//! handling (issue 36, item 6): the harness behind the `dd_ring` target.
//!
//! Two ports come up through the 82574L bring-up (`drivers::e1000e::bring_up`) on simulated
//! register files; their RX rings get pages from a fixed pool. The fuzz input is a program for
//! the device and the driver in turn: well-behaved deliveries and TX completions, and raw
//! descriptor write-backs on any slot (posted or never posted) with any status (DD, EOP or
//! neither: a chain without EOP that never ends, DD cleared again), any length (0, past the
//! buffer) and any error bits, on the RX ring; DD set or cleared on any TX descriptor (set
//! early, never set); frames of two to five pages (several descriptors each: the driver
//! collects up to four and sends them as as many TX descriptors); and the driver calls
//! (`forward_burst` on a pair of its own type, so its own loop, with forward /
//! forward-a-prefix / consume verdicts for one-page frames and, through `forward_multi`, for
//! frames of several; `tx_reclaim_into` with any room; `tx_reclaim`; `rx_burst`, which also
//! takes a frame the fused burst half collected; `rx_refill`; `tx_burst`).
//!
//! Checked: no panic (debug assertions on); every page the driver hands to the harness is a
//! pool page the harness does not hold already; every frame slice lies inside its page (a
//! frame of several pages: its head inside the first, its pages the driver's, its lengths
//! adding up); after
//! both NICs are reset and their pages taken back, every pool page is the harness's again,
//! exactly once.

use drivers::ddnic::{RxDesc, TxDesc, RDBAH, RDBAL, STA_DD, TDBAH, TDBAL};
use drivers::e1000e::{bring_up, E1000e, E1000eConfig, RxFilter};
use drivers::nic::{
    ForwardOps, GiveBack, MultiFrame, Nic, RxBuf, RxStatus, RxVerdict, TxBuf, TxOwner,
    MAX_FRAME_PAGES, RING_SIZE,
};
use drivers::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
use drivers::sim::HostHal;
use mm::Pfn;
use std::alloc::{alloc_zeroed, Layout};
use std::collections::BTreeSet;
use std::sync::OnceLock;

type Port = E1000e<HostHal, SimDdRegs<'static>>;

const PAGE: usize = 4096;
/// Pool pages: both RX rings and a TX ring full, and some spares.
const POOL: usize = 3 * RING_SIZE + 64;
const OWNER: TxOwner = TxOwner::new(5);

/// The pool (one allocation for the whole run; page contents carry over, harmlessly).
fn pool() -> &'static [Pfn] {
    /// The pages' addresses (kept so LeakSanitizer sees them referenced) and frames.
    static P: OnceLock<(Vec<usize>, Vec<Pfn>)> = OnceLock::new();
    &P.get_or_init(|| {
        let addrs: Vec<usize> = (0..POOL)
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
    .1
}

/// The register files (leaked once: the driver wants `'static` handles; reset per run).
fn shared() -> &'static [SimDdShared; 2] {
    static S: OnceLock<&'static [SimDdShared; 2]> = OnceLock::new();
    S.get_or_init(|| {
        Box::leak(Box::new([
            SimDdShared::new([2, 0, 0, 0, 0, 1]),
            SimDdShared::new([2, 0, 0, 0, 0, 2]),
        ]))
    })
}

/// The harness's pages, with the accounting checks.
struct Pages {
    all: BTreeSet<Pfn>,
    mine: Vec<Pfn>,
    mine_set: BTreeSet<Pfn>,
}

impl Pages {
    fn new() -> Self {
        let p = pool();
        Pages {
            all: p.iter().copied().collect(),
            mine: p.to_vec(),
            mine_set: p.iter().copied().collect(),
        }
    }
    fn back(&mut self, p: Pfn, what: &str) {
        assert!(self.all.contains(&p), "{what}: {p:?} is not a pool page");
        assert!(self.mine_set.insert(p), "{what}: {p:?} handed back twice");
        self.mine.push(p);
    }
    fn give(&mut self) -> Option<Pfn> {
        let p = self.mine.pop()?;
        assert!(self.mine_set.remove(&p));
        Some(p)
    }
}

struct Ops<'a> {
    pages: &'a mut Pages,
    verdict: u8,
}

impl ForwardOps for Ops<'_> {
    fn rx_page(&mut self) -> Option<Pfn> {
        self.pages.give()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        None
    }
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        assert!(self.pages.all.contains(&pfn) && !self.pages.mine_set.contains(&pfn));
        assert_eq!(frame.as_ptr() as u64, pfn.addr(), "the frame at offset 0");
        assert!(frame.len() <= PAGE, "frame past its page");
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
    fn forward_multi(&mut self, f: MultiFrame<'_>) -> RxVerdict {
        let n = f.pages.len();
        assert!((2..=MAX_FRAME_PAGES).contains(&n), "{n} pages");
        assert_eq!(f.lens.len(), n);
        for &p in f.pages {
            assert!(self.pages.all.contains(&p) && !self.pages.mine_set.contains(&p));
        }
        assert_eq!(
            f.head.as_ptr() as u64,
            f.pages[0].addr(),
            "the frame at offset 0"
        );
        assert_eq!((f.offset, f.head.len()), (0, usize::from(f.lens[0])));
        assert!(f.lens.iter().all(|&l| l > 0 && usize::from(l) <= PAGE));
        assert_eq!(f.len, f.lens.iter().map(|&l| usize::from(l)).sum::<usize>());
        self.verdict = self.verdict.rotate_left(1);
        match self.verdict % 4 {
            0 => {
                for &p in f.pages {
                    self.pages.back(p, "consumed multi");
                }
                RxVerdict::Consumed
            }
            // A cut anywhere in the frame (past the first page too).
            1 => RxVerdict::ForwardFirst(usize::from(self.verdict) * 64),
            _ => RxVerdict::Forward,
        }
    }
}

/// Reads the input a byte at a time; zeros once it runs out.
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
}

/// Descriptor `i` of the ring whose base registers are `bal`/`bah` on `s`.
fn desc<D>(s: &SimDdShared, bal: usize, bah: usize, i: u8) -> *mut D {
    let base = u64::from(s.get(bal)) | u64::from(s.get(bah)) << 32;
    (base as usize + 16 * usize::from(i)) as *mut D
}

/// Run one program (see the module docs).
pub fn run(data: &[u8]) {
    let sh = shared();
    let mut pages = Pages::new();
    let cfg = E1000eConfig {
        filter: RxFilter::Promiscuous,
        max_frame: 9014,
    };
    let t = std::cell::Cell::new(0u64);
    let clock = || {
        t.set(t.get() + 100);
        t.get()
    };
    let mut nics: [Port; 2] = [0, 1].map(|j| {
        sh[j].set_link(true);
        bring_up::<HostHal, _>(SimDdRegs(&sh[j]), &cfg, &clock).expect("bring-up")
    });
    // SAFETY: the rings and buffers are HostHal and pool memory, alive for the run; the only
    // players.
    let mut dev = [0, 1].map(|j| unsafe { SimDdDevice::new(&sh[j]) });
    for nic in nics.iter_mut() {
        let fill: Vec<Pfn> = (0..RING_SIZE - 1).filter_map(|_| pages.give()).collect();
        // SAFETY: pool pages the harness gives up.
        let n = unsafe { nic.rx_refill(&fill) };
        for &p in &fill[n..] {
            pages.back(p, "not posted");
        }
    }
    let mut input = Input(data);
    let mut verdict = 0x5a;
    for _ in 0..512 {
        if input.0.is_empty() {
            break;
        }
        let op = input.u8();
        let p = usize::from(op >> 7);
        let q = 1 - p;
        match op & 0x7F {
            0..=15 => {
                let len = usize::from(input.u16()) % (PAGE + 1);
                let frame = vec![op; len.max(1)];
                dev[p].deliver_rx(&frame, usize::from(input.u8() % 8));
            }
            16..=31 => {
                // A raw RX write-back on any slot: any status, length and errors.
                let d = desc::<RxDesc>(&sh[p], RDBAL, RDBAH, input.u8());
                let (status, errors, length) = (input.u8(), input.u8(), input.u16());
                // SAFETY: a descriptor of the ring (the index is a u8, the ring 256 long),
                // host memory the harness plays the device on.
                unsafe {
                    let mut v = d.read_volatile();
                    v.status = status;
                    v.errors = errors;
                    v.length = length;
                    d.write_volatile(v);
                }
            }
            32..=39 => {
                // DD set or cleared on any TX descriptor.
                let d = desc::<TxDesc>(&sh[p], TDBAL, TDBAH, input.u8());
                let set = input.u8() & 1 != 0;
                // SAFETY: as above.
                unsafe {
                    let mut v = d.read_volatile();
                    v.status = if set {
                        v.status | STA_DD
                    } else {
                        v.status & !STA_DD
                    };
                    d.write_volatile(v);
                }
            }
            40..=55 => {
                dev[p].complete_tx(|f| assert!(f.len() <= 4 * PAGE));
            }
            56..=79 => {
                verdict ^= input.u8();
                let max = usize::from(input.u8() % 64) + 1;
                let [a, b] = &mut nics;
                let (rx, tx) = if p == 0 { (a, b) } else { (b, a) };
                let pages_r = &mut pages;
                let v = verdict;
                let ops = move || {
                    let pages = { pages_r };
                    Ops { pages, verdict: v }
                };
                // SAFETY: pool pages from `Ops`; forwarded ones stay `tx`'s.
                unsafe { rx.forward_burst(tx, max, OWNER, ops) };
            }
            80..=87 => {
                let mut room = vec![Pfn(0); usize::from(input.u8())];
                let foreign = TxOwner::new(u16::from(input.u8() & 1) + 5);
                let mut other = Vec::new();
                let (into, _) = nics[p].tx_reclaim_into(foreign, &mut room, |pf, _| other.push(pf));
                for &pf in room[..into].iter().chain(&other) {
                    pages.back(pf, "tx_reclaim_into");
                }
            }
            88..=95 => {
                let mut back = Vec::new();
                nics[p].tx_reclaim(|pf, _| back.push(pf));
                for pf in back {
                    pages.back(pf, "tx_reclaim");
                }
            }
            96..=103 => {
                let mut out = [RxBuf {
                    pfn: Pfn(0),
                    len: 0,
                    status: RxStatus::Unused,
                }; 16];
                let n = nics[p].rx_burst(&mut out[..usize::from(input.u8() % 17)]);
                for b in &out[..n] {
                    assert!(b.status != RxStatus::Ok || b.len <= PAGE);
                    pages.back(b.pfn, "rx_burst");
                }
            }
            104..=111 => {
                let want = usize::from(input.u8());
                let fill: Vec<Pfn> = (0..want).filter_map(|_| pages.give()).collect();
                // SAFETY: pool pages the harness gives up.
                let n = unsafe { nics[p].rx_refill(&fill) };
                for &pf in &fill[n..] {
                    pages.back(pf, "not refilled");
                }
            }
            112..=119 => {
                // A frame of two to five pages, in as many descriptors each.
                let len = PAGE + 1 + usize::from(input.u16()) % (4 * PAGE);
                let frame = vec![op; len];
                dev[p].deliver_rx(&frame, usize::from(input.u8() % 4));
            }
            _ => {
                // A frame of the harness's straight onto port q's TX ring.
                if let Some(pf) = pages.give() {
                    let len = usize::from(input.u16()) % PAGE + 1;
                    let b = TxBuf {
                        pfn: pf,
                        len,
                        owner: OWNER,
                    };
                    // SAFETY: a pool page the harness gives up, `len` bytes in it.
                    if unsafe { nics[q].tx_burst(&[b]) } == 0 {
                        pages.back(pf, "tx_burst refused");
                    }
                }
            }
        }
    }
    for nic in nics.iter_mut() {
        assert!(nic.reset_device());
        let mut back = Vec::new();
        // SAFETY: reset just above.
        unsafe { nic.take_pages(&mut |pf| back.push(pf)) };
        for pf in back {
            pages.back(pf, "take_pages");
        }
    }
    assert_eq!(
        pages.mine_set.len(),
        POOL,
        "every pool page back exactly once"
    );
}
