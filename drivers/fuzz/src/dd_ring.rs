//! A hostile DD-bit NIC (the simulated e1000e and 82576, `drivers::sim::dd`) against the DD
//! driver's ring handling (issue 36, item 6; issue 41, item 6): the harness behind the `dd_ring`
//! target.
//!
//! The input's first byte picks the descriptor layout (bit 0: 0 the 82574L's legacy
//! descriptors, ports brought up by `drivers::e1000e::bring_up`; 1 the 82576's advanced ones,
//! `drivers::ddnic::Advanced`, ports brought up by `drivers::igb::bring_up`, on which the
//! simulated NIC writes advanced descriptors back) and the ports' frame limit (bits 2:1: the
//! driver's default of four pages, 1,518, 9,018 or the 64-byte floor;
//! `Nic::set_rx_frame_limit`). With bits 0 and 3 set, the multi-queue 82576 with RSS (issue 41,
//! item 6): each port brought up with 2, 3, 4 or 8 queue pairs (bits 5:4) by
//! `drivers::igb::start` and `finish_queues`, the kernel's set-up, each queue pair a driver of
//! its own over `drivers::igb::QueueRegs`; every step of the program then starts with a byte
//! naming the queue pair it is about (bits 4:0, modulo the queues) and, with bit 7, a rewrite
//! of one `RETA` entry to any value (a queue no one owns, or past the 16: the device keeps the
//! low 4 bits), with bit 6 `MRQC` turned off or back on (bit 5); the deliveries carry
//! Ethernet/IPv4 or IPv6/TCP or UDP headers from the input (VLAN tag, fragment, cut short with
//! the frame), so the device hashes and steers them, and drops (and counts) those whose queue
//! is disabled or out of descriptors; the raw write-backs, chains and TX `DD` go to that queue
//! pair's rings, with any RSS type and hash; the forwarding burst runs queue pair `k` of one
//! port into queue pair `k` of the other. Two ports come up on simulated register files (one pair per
//! layout: the 82576's `SRRCTL` outlives a reset); their RX rings get pages from a fixed pool.
//! The rest of the input is a program for the device and the driver in turn: well-behaved
//! deliveries and TX completions, and raw descriptor write-backs on any slot (posted, posted long
//! ago or never posted) with any status (DD, EOP or neither, DD cleared again), any length (0,
//! tiny, past the buffer, past the frame limit) and any error bits, on the RX ring (advanced:
//! any extended status and errors, `RXE` and the rest, any VLAN tag, and any RSS type, packet
//! type and RSS hash in the first quadword, where the driver posted the buffer's address);
//! chains of up to eight full buffers without EOP (endless, or past the driver's four pages a
//! frame); DD set or cleared on any TX descriptor (set early, never set); frames of two to five
//! pages (several descriptors each: the driver collects up to four and sends them as as many TX
//! descriptors); and the driver calls (`forward_burst` on a pair of its own type, so its own
//! loop, with forward / forward-a-prefix / consume verdicts for one-page frames and, through
//! `forward_multi`, for frames of several; `tx_reclaim_into` with any room; `tx_reclaim`;
//! `rx_burst`, which also takes a frame the fused burst half collected; `rx_refill`;
//! `tx_burst`).
//!
//! Checked, for every mode: no panic (debug assertions on); every page the driver hands to the
//! harness is a pool page the harness does not hold already; every frame slice lies inside its
//! page and within the frame limit, 1 byte at least (a frame of several pages: its head inside
//! the first, its pages the driver's, its lengths adding up to at most the limit); a buffer
//! `rx_burst` calls `Ok` is as long; the driver's `rx_errors` is at most the raw write-backs
//! with `DD` and an error bit (it counts no error the device did not write); after both NICs
//! are reset (multi-queue: queues 1.. disabled, then the port reset through queue 0) and their
//! pages taken back, every pool page is the harness's again, exactly once (posted + handed back
//! + recycled = the pool).
//!
//! An advanced write-back overwrites the buffer address the driver posted (the first quadword
//! becomes RSS hash and packet type, as on the 82576); the driver keeps its pages apart and
//! never reads that quadword back. The simulated device, though, finds its buffers by it: the
//! harness puts the posted address back before a well-behaved delivery when the driver has not
//! re-posted the slot since (a slot never posted keeps the RSS values), so the device writes
//! into pool pages only, as with legacy descriptors.

use drivers::ddnic::{Advanced, DdNic, DdRegs, DescFormat, Legacy, TxDesc, RDBAH, RDBAL, STA_DD};
use drivers::ddnic::{RXSTA_EOP, TDBAH, TDBAL};
use drivers::e1000e::{E1000eConfig, RxFilter};
use drivers::igb::{QueueRegs, Rss, MRQC, MRQC_ENABLE_RSS, MRQC_RSS_FIELDS, RETA};
use drivers::nic::{
    ForwardOps, GiveBack, MultiFrame, Nic, RxBuf, RxStatus, RxVerdict, TxBuf, TxOwner,
    MAX_FRAME_PAGES, RING_SIZE,
};
use drivers::sim::dd::rss::MRQC_TCP_IPV6_QEMU;
use drivers::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
use drivers::sim::HostHal;
use mm::Pfn;
use std::alloc::{alloc_zeroed, Layout};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// A port (or one queue pair of a port) of layout `F` on a simulated register file, through
/// `R` (the register file itself, or [`QueueRegs`] over it).
type Port<F, R = SimDdRegs<'static>> = DdNic<HostHal, R, 0, F>;
/// The multi-queue 82576's queue counts the input's first byte picks from (bits 5:4).
const MQ_QUEUES: [usize; 4] = [2, 3, 4, 8];
/// RX pages each queue pair gets at the start in multi-queue mode (the pool is shared by all).
const MQ_FILL: usize = 48;

const PAGE: usize = 4096;
/// Pool pages: both RX rings and a TX ring full, and some spares.
const POOL: usize = 3 * RING_SIZE + 64;
const OWNER: TxOwner = TxOwner::new(5);
/// The frame limits the input's first byte picks from (bits 2:1): `None` keeps the driver's
/// default ([`MAX_FRAME_PAGES`] pages).
const LIMITS: [Option<usize>; 4] = [None, Some(1518), Some(9018), Some(64)];

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

/// The register files of a mode's two ports (leaked once: the driver wants `'static` handles;
/// reset by each bring-up): `files` 0 legacy, 1 the 82576 with one queue, 2 with several. One
/// pair per mode: a reset leaves `SRRCTL` as the 82576 bring-up set it, which would turn a
/// later legacy port's descriptors advanced.
fn shared(files: usize) -> &'static [SimDdShared; 2] {
    static S: OnceLock<[&'static [SimDdShared; 2]; 3]> = OnceLock::new();
    S.get_or_init(|| {
        [0, 1, 2].map(|_| -> &'static [SimDdShared; 2] {
            Box::leak(Box::new([
                SimDdShared::new([2, 0, 0, 0, 0, 1]),
                SimDdShared::new([2, 0, 0, 0, 0, 2]),
            ]))
        })
    })[files]
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
    /// The ports' frame limit (bytes): no longer frame may be shown.
    limit: usize,
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
        assert!(
            (1..=self.limit).contains(&frame.len()),
            "a frame of {} bytes shown, limit {}",
            frame.len(),
            self.limit
        );
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
        assert!(
            f.len <= self.limit,
            "a frame of {} bytes shown, limit {}",
            f.len,
            self.limit
        );
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
    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }
}

/// What the harness needs of a descriptor layout beyond the driver's [`DescFormat`]: the
/// bring-up that selects it, and the device's RX write-back in it.
trait Hostile: DescFormat + Sized {
    /// Which pair of register files of [`shared`] the layout's ports use.
    const FILES: usize;
    /// A port brought up on `regs` as the kernel brings this chip up.
    fn bring_up(
        regs: SimDdRegs<'static>,
        cfg: &E1000eConfig,
        now_us: &dyn Fn() -> u64,
    ) -> Port<Self>;
    /// An RX write-back's second quadword: `DD`, `EOP` if `eop`, no error, `len` bytes.
    fn rx_hi(eop: bool, len: u16) -> u64;
    /// A raw RX write-back over a descriptor holding `[lo, hi]`, its fields read from `input`:
    /// the descriptor's new quadwords.
    fn raw_write_back(d: [u64; 2], input: &mut Input<'_>) -> [u64; 2];
}

impl Hostile for Legacy {
    const FILES: usize = 0;
    fn bring_up(
        regs: SimDdRegs<'static>,
        cfg: &E1000eConfig,
        now_us: &dyn Fn() -> u64,
    ) -> Port<Self> {
        drivers::e1000e::bring_up::<HostHal, _>(regs, cfg, now_us).expect("e1000e bring-up")
    }
    fn rx_hi(eop: bool, len: u16) -> u64 {
        // Length 15:0, status 39:32 (8254x SDM §3.2.3).
        u64::from(len) | u64::from(STA_DD | if eop { RXSTA_EOP } else { 0 }) << 32
    }
    fn raw_write_back([lo, hi]: [u64; 2], input: &mut Input<'_>) -> [u64; 2] {
        // Status, errors and length; the checksum and VLAN tag stay as they are.
        let (status, errors, length) = (input.u8(), input.u8(), input.u16());
        let kept = hi & 0xFFFF_0000_FFFF_0000;
        [
            lo,
            kept | u64::from(length) | u64::from(status) << 32 | u64::from(errors) << 40,
        ]
    }
}

impl Hostile for Advanced {
    const FILES: usize = 1;
    fn bring_up(
        regs: SimDdRegs<'static>,
        cfg: &E1000eConfig,
        now_us: &dyn Fn() -> u64,
    ) -> Port<Self> {
        drivers::igb::bring_up::<HostHal, _>(regs, cfg, now_us).expect("igb bring-up")
    }
    fn rx_hi(eop: bool, len: u16) -> u64 {
        // Extended status 19:0 (`DD` 0, `EOP` 1), length 47:32 (82576 datasheet §7.1.5.2).
        u64::from(STA_DD | if eop { RXSTA_EOP } else { 0 }) | u64::from(len) << 32
    }
    fn raw_write_back(_: [u64; 2], input: &mut Input<'_>) -> [u64; 2] {
        // Second quadword: extended status 7:0 (`DD`, `EOP`, …) and 19:8, extended errors
        // 31:20 (`HBO` 23, `L4E` 29, `IPE` 30, `RXE` 31, the rest reserved), length 47:32,
        // VLAN tag 63:48 (status, errors and length read first, in the legacy layout's order).
        let (status, errors, length) = (input.u8(), input.u8(), input.u16());
        let (mid, vlan) = (input.u16(), input.u16());
        let hi = u64::from(status)
            | u64::from(mid) << 8
            | u64::from(errors) << 24
            | u64::from(length) << 32
            | u64::from(vlan) << 48;
        // First quadword: RSS type 3:0, packet type 16:4, header length 30:21, `SPH` 31, RSS
        // hash 63:32, over the buffer address the driver posted.
        let (info, hash) = (input.u32(), input.u32());
        [u64::from(info) | u64::from(hash) << 32, hi]
    }
}

/// Descriptor `i` of queue `k`'s ring whose base registers are `bal`/`bah` (queue 0's offsets)
/// on `s`.
fn desc<D>(s: &SimDdShared, k: usize, bal: usize, bah: usize, i: u8) -> *mut D {
    let base = u64::from(s.get_queue(k, bal)) | u64::from(s.get_queue(k, bah)) << 32;
    (base as usize + 16 * usize::from(i)) as *mut D
}

/// RX slots whose first quadword a raw write-back replaced (advanced only): the buffer address
/// that was there and the value written (see the module docs).
type Clobbered = BTreeMap<u8, (u64, u64)>;

/// A raw RX write-back on slot `i` of `s`'s ring, fields from `input`, replaced first
/// quadwords noted in `clobbered`; whether it wrote `DD` with an error (the driver may count
/// it once, when it reads the descriptor).
fn write_back<F: Hostile>(
    s: &SimDdShared,
    k: usize,
    i: u8,
    input: &mut Input<'_>,
    clobbered: &mut Clobbered,
) -> bool {
    let d = desc::<[u64; 2]>(s, k, RDBAL, RDBAH, i);
    // SAFETY: a descriptor of the ring (the index is a u8, the ring 256 long), host memory the
    // harness plays the device on.
    let old = unsafe { d.read_volatile() };
    let new = F::raw_write_back(old, input);
    if new[0] != old[0] {
        let addr = match clobbered.get(&i) {
            Some(&(addr, written)) if written == old[0] => addr,
            _ => old[0],
        };
        clobbered.insert(i, (addr, new[0]));
    }
    // SAFETY: as above.
    unsafe { d.write_volatile(new) };
    new[1] & F::RX_DD != 0 && F::rx_error(new[1])
}

/// Before a delivery on `s`: the buffer addresses back in the slots a raw write-back replaced
/// that the driver has not posted again since (their first quadword is still the value
/// written); a slot that held none (never posted, or written back by the device) keeps the
/// value until the driver posts a buffer there.
fn restore(s: &SimDdShared, k: usize, clobbered: &mut Clobbered) {
    clobbered.retain(|&i, &mut (addr, written)| {
        let d = desc::<u64>(s, k, RDBAL, RDBAH, i);
        // SAFETY: as in `write_back`.
        if unsafe { d.read_volatile() } != written {
            return false;
        }
        if addr == 0 {
            return true;
        }
        // SAFETY: as in `write_back`.
        unsafe { d.write_volatile(addr) };
        false
    });
}

/// Run one program (see the module docs).
pub fn run(data: &[u8]) {
    let (&head, program) = data.split_first().unwrap_or((&0, &[]));
    let limit = LIMITS[usize::from(head >> 1 & 3)];
    if head & 1 == 0 {
        let nics = bring_up_single::<Legacy>(limit);
        run_on(program, nics, None, shared(Legacy::FILES));
    } else if head & 8 == 0 {
        let nics = bring_up_single::<Advanced>(limit);
        run_on(program, nics, None, shared(Advanced::FILES));
    } else {
        let queues = MQ_QUEUES[usize::from(head >> 4 & 3)];
        let nics = bring_up_mq(limit, queues);
        run_on(program, nics, Some(queues), shared(2));
    }
}

/// The bring-ups' configuration: promiscuous, a 9,014-byte MTU.
const CFG: E1000eConfig = E1000eConfig {
    filter: RxFilter::Promiscuous,
    max_frame: 9014,
    multicast: [None; drivers::e1000e::MAX_MULTICAST],
    link_local_group: false,
};

/// A clock that moves 100 µs per reading.
fn clock() -> impl Fn() -> u64 {
    let t = std::cell::Cell::new(0u64);
    move || {
        t.set(t.get() + 100);
        t.get()
    }
}

/// Two ports of layout `F`, one queue pair each, with frame limit `limit` (`None`: the
/// default).
fn bring_up_single<F: Hostile>(limit: Option<usize>) -> [Vec<Port<F>>; 2] {
    let sh = shared(F::FILES);
    let clock = clock();
    [0, 1].map(|j| {
        sh[j].set_link(true);
        let mut nic = F::bring_up(SimDdRegs(&sh[j]), &CFG, &clock);
        if let Some(l) = limit {
            nic.set_rx_frame_limit(l);
        }
        vec![nic]
    })
}

/// Two 82576 ports with `queues` queue pairs each, brought up as the kernel does
/// (`drivers::igb::start` and `finish_queues`: RSS keyed with a fixed key, the table
/// round-robin; the program may then rewrite the table and `MRQC` behind the driver's back).
fn bring_up_mq(
    limit: Option<usize>,
    queues: usize,
) -> [Vec<Port<Advanced, QueueRegs<SimDdRegs<'static>>>>; 2] {
    let sh = shared(2);
    let clock = clock();
    let rss = Rss {
        queues,
        key: core::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x6d),
        reta: core::array::from_fn(|i| (i % queues) as u8),
    };
    [0, 1].map(|j| {
        sh[j].set_link(true);
        let st = drivers::igb::start(SimDdRegs(&sh[j]), &CFG, &clock).expect("igb start");
        let qs =
            drivers::igb::finish_queues::<HostHal, _>(st, &CFG, &rss, &clock).expect("igb queues");
        qs.into_iter()
            .map(|mut nic| {
                if let Some(l) = limit {
                    nic.set_rx_frame_limit(l);
                }
                nic
            })
            .collect()
    })
}

/// A frame of `len` bytes (1 at least) filled with `fill`; in multi-queue mode its start is an
/// Ethernet/IP/TCP or UDP header from `input` (cut short when `len` is), so RSS hashes it.
fn frame(len: usize, fill: u8, mq: bool, input: &mut Input<'_>) -> Vec<u8> {
    let mut f = vec![fill; len.max(1)];
    if !mq {
        return f;
    }
    let shape = input.u8();
    let (a, b, ports) = (input.u32(), input.u32(), input.u32());
    let proto = if shape & 1 == 0 { 6 } else { 17 };
    let mut h = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if shape & 4 != 0 {
        h.extend_from_slice(&[0x81, 0x00, 0, shape]);
    }
    if shape & 2 == 0 {
        // IPv4, a fragment when bit 3 says.
        h.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 64, 0, 1]);
        h.extend_from_slice(&[if shape & 8 != 0 { 0x20 } else { 0x40 }, 0, 64, proto, 0, 0]);
        h.extend_from_slice(&a.to_be_bytes());
        h.extend_from_slice(&b.to_be_bytes());
    } else {
        h.extend_from_slice(&[0x86, 0xDD, 0x60, 0, 0, 0, 0, 32, proto, 64]);
        for w in [a, b, a ^ b, !a, b, a, !b, a ^ !b] {
            h.extend_from_slice(&w.to_be_bytes());
        }
    }
    h.extend_from_slice(&ports.to_be_bytes());
    h.extend_from_slice(&[0; 16]);
    let n = h.len().min(f.len());
    f[..n].copy_from_slice(&h[..n]);
    f
}

/// Run `data` against two ports of layout `F`, each `nics[p]` its queue pairs (one, or
/// `queues`), on the register files `sh`.
fn run_on<F: Hostile, R: DdRegs + 'static>(
    data: &[u8],
    mut nics: [Vec<Port<F, R>>; 2],
    queues: Option<usize>,
    sh: &'static [SimDdShared; 2],
) {
    let mq = queues.is_some();
    let nq = queues.unwrap_or(1);
    let mut pages = Pages::new();
    let limit = nics[0][0].rx_frame_limit();
    // SAFETY: the rings and buffers are HostHal and pool memory, alive for the run; the only
    // players.
    let mut dev = [0, 1].map(|j| unsafe { SimDdDevice::new(&sh[j]) });
    let mut clobbered = [0, 1].map(|_| vec![Clobbered::new(); nq]);
    // Raw write-backs with `DD` and an error bit, per port and queue: an upper bound on
    // `rx_errors` (the device writes no other error; a descriptor is read once, and posting
    // clears it).
    let mut errors_written = [vec![0u64; nq], vec![0u64; nq]];
    let fill_each = if mq { MQ_FILL } else { RING_SIZE - 1 };
    for nic in nics.iter_mut().flatten() {
        let fill: Vec<Pfn> = (0..fill_each).filter_map(|_| pages.give()).collect();
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
        // Multi-queue: the queue pair the step is about, and now and then the device's RSS
        // settings rewritten behind the driver's back (a table entry naming any queue, owned or
        // not; RSS off or on).
        let k = if mq {
            let sel = input.u8();
            let regs = SimDdRegs(&sh[p]);
            if sel & 0x80 != 0 {
                let (entry, queue) = (usize::from(input.u8() & 0x7F), input.u8());
                let r = RETA + 4 * (entry / 4);
                let shift = 8 * (entry % 4);
                let v = regs.read(r) & !(0xFF << shift) | u32::from(queue) << shift;
                regs.write(r, v);
            }
            if sel & 0x40 != 0 {
                let on = MRQC_ENABLE_RSS | MRQC_RSS_FIELDS | MRQC_TCP_IPV6_QEMU;
                regs.write(MRQC, if sel & 0x20 != 0 { on } else { 0 });
            }
            usize::from(sel & 0x1F) % nq
        } else {
            0
        };
        match op & 0x7F {
            0..=15 => {
                let len = usize::from(input.u16()) % (PAGE + 1);
                let frame = frame(len, op, mq, &mut input);
                for (j, c) in clobbered[p].iter_mut().enumerate() {
                    restore(&sh[p], j, c);
                }
                dev[p].deliver_rx(&frame, usize::from(input.u8() % 8));
            }
            16..=31 => {
                // A raw RX write-back on any slot: any status, length and errors (and RSS).
                let i = input.u8();
                if write_back::<F>(&sh[p], k, i, &mut input, &mut clobbered[p][k]) {
                    errors_written[p][k] += 1;
                }
            }
            32..=39 => {
                // DD set or cleared on any TX descriptor.
                let d = desc::<TxDesc>(&sh[p], k, TDBAL, TDBAH, input.u8());
                let set = input.u8() & 1 != 0;
                // SAFETY: as in `write_back`.
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
                dev[p].complete_tx_on(k, |f| assert!(f.len() <= 4 * PAGE));
            }
            56..=79 => {
                verdict ^= input.u8();
                let max = usize::from(input.u8() % 64) + 1;
                let [a, b] = &mut nics;
                let (rx, tx) = if p == 0 {
                    (&mut a[k], &mut b[k])
                } else {
                    (&mut b[k], &mut a[k])
                };
                let pages_r = &mut pages;
                let v = verdict;
                let ops = move || {
                    let pages = { pages_r };
                    Ops {
                        pages,
                        verdict: v,
                        limit,
                    }
                };
                // SAFETY: pool pages from `Ops`; forwarded ones stay `tx`'s.
                unsafe { rx.forward_burst(tx, max, OWNER, ops) };
            }
            80..=87 => {
                let mut room = vec![Pfn(0); usize::from(input.u8())];
                let foreign = TxOwner::new(u16::from(input.u8() & 1) + 5);
                let mut other = Vec::new();
                let (into, _) =
                    nics[p][k].tx_reclaim_into(foreign, &mut room, |pf, _| other.push(pf));
                for &pf in room[..into].iter().chain(&other) {
                    pages.back(pf, "tx_reclaim_into");
                }
            }
            88..=95 => {
                let mut back = Vec::new();
                nics[p][k].tx_reclaim(|pf, _| back.push(pf));
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
                let n = nics[p][k].rx_burst(&mut out[..usize::from(input.u8() % 17)]);
                for b in &out[..n] {
                    assert!(
                        b.status != RxStatus::Ok || (1..=limit.min(PAGE)).contains(&b.len),
                        "rx_burst: Ok with {} bytes, limit {limit}",
                        b.len
                    );
                    pages.back(b.pfn, "rx_burst");
                }
            }
            104..=111 => {
                let want = usize::from(input.u8());
                let fill: Vec<Pfn> = (0..want).filter_map(|_| pages.give()).collect();
                // SAFETY: pool pages the harness gives up.
                let n = unsafe { nics[p][k].rx_refill(&fill) };
                for &pf in &fill[n..] {
                    pages.back(pf, "not refilled");
                }
            }
            112..=119 => {
                // A frame of two to five pages, in as many descriptors each.
                let len = PAGE + 1 + usize::from(input.u16()) % (4 * PAGE);
                let frame = frame(len, op, mq, &mut input);
                for (j, c) in clobbered[p].iter_mut().enumerate() {
                    restore(&sh[p], j, c);
                }
                dev[p].deliver_rx(&frame, usize::from(input.u8() % 4));
            }
            120..=123 => {
                // A chain written back on one to eight slots from any one: `DD`, no `EOP` (on
                // the last too unless bit 7 says), each `len` bytes (0: a full buffer).
                let (i, shape) = (input.u8(), input.u8());
                let len = match input.u16() {
                    0 => PAGE as u16,
                    l => l,
                };
                let n = usize::from(shape & 7) + 1;
                for j in 0..n {
                    let eop = j + 1 == n && shape & 0x80 != 0;
                    let d = desc::<u64>(&sh[p], k, RDBAL, RDBAH, i.wrapping_add(j as u8));
                    // SAFETY: as in `write_back` (the second quadword of the descriptor).
                    unsafe { d.add(1).write_volatile(F::rx_hi(eop, len)) };
                }
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
                    if unsafe { nics[q][k].tx_burst(&[b]) } == 0 {
                        pages.back(pf, "tx_burst refused");
                    }
                }
            }
        }
    }
    for (port, written) in nics.iter_mut().zip(&errors_written) {
        for (nic, &written) in port.iter_mut().zip(written) {
            let counted = nic.stats().rx_errors;
            assert!(
                counted <= written,
                "{counted} rx_errors counted, {written} written"
            );
        }
        // Queues 1.. disabled (`false`: not a reset), then queue 0 resets the port.
        for (j, nic) in port.iter_mut().enumerate().rev() {
            assert_eq!(nic.reset_device(), j == 0);
        }
        for nic in port.iter_mut() {
            let mut back = Vec::new();
            // SAFETY: every queue disabled and the port reset just above.
            unsafe { nic.take_pages(&mut |pf| back.push(pf)) };
            for pf in back {
                pages.back(pf, "take_pages");
            }
        }
    }
    assert_eq!(
        pages.mine_set.len(),
        POOL,
        "every pool page back exactly once"
    );
}
