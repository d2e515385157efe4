//! Host tests: the real driver ([`VirtioNet`]) on the simulated device, rings and buffers from
//! the global allocator ([`HostHal`]).
//!
//! Past ~800 lines because each case drives the one real driver against the one simulated
//! device with the same page accounting helpers (rings, big buffers, chains, faults, the RX
//! frame limit); split by file they would each re-declare the players and the ops.

use super::*;
use crate::nic::TxOwner;
use crate::virtio_net::{
    BurstStats, FeatureNames, ForwardOps, GiveBack, MultiFrame, NetInitError, RxBuf, RxStatus,
    RxVerdict, TxBuf, TxDone, VirtioNet, MAX_FRAME_LEN, MAX_MULTI_FRAME_LEN,
};
use core::ptr::NonNull;
use mm::Pfn;
use virtio_drivers::{BufferDirection, Hal, PAGE_SIZE};

extern crate std;
use std::string::ToString;
use std::vec;
use std::vec::Vec;

type Nic<'a> = VirtioNet<HostHal, SimTransport<'a>>;

const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// `2 * QUEUE_SIZE` fresh pages, the first half posted on `nic`'s RX ring and the second half
/// returned as spares; the `Pages` frees them all on drop.
fn filled_rx(nic: &mut Nic<'_>) -> (Pages, Vec<Pfn>) {
    let pages = Pages::new(2 * QUEUE_SIZE);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { nic.rx_refill(&pages.0[..QUEUE_SIZE]) };
    let spare = pages.0[QUEUE_SIZE..].to_vec();
    (pages, spare)
}

/// Pages for RX buffers, freed on drop.
struct Pages(Vec<Pfn>);

impl Pages {
    fn new(n: usize) -> Pages {
        Pages(
            (0..n)
                .map(|_| Pfn::from_addr(HostHal::dma_alloc(1, BufferDirection::Both).0))
                .collect(),
        )
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        for p in &self.0 {
            let v = NonNull::new(p.addr() as *mut u8).unwrap();
            // SAFETY: allocated above with one page; the device was reset or never saw it.
            unsafe { HostHal::dma_dealloc(p.addr(), v, 1) };
        }
    }
}

/// Bytes `[off, off + len)` of page `p`.
fn page(p: Pfn, off: usize, len: usize) -> &'static mut [u8] {
    assert!(off + len <= PAGE_SIZE);
    // SAFETY: a live HostHal page (the tests keep `Pages` alive while they look), accessed only
    // while neither driver nor device uses it.
    unsafe { core::slice::from_raw_parts_mut((p.addr() as usize + off) as *mut u8, len) }
}

/// A 60-byte frame whose bytes start at `seed`.
fn frame(seed: u8) -> Vec<u8> {
    (0..60u8).map(|i| seed.wrapping_add(i)).collect()
}

fn up(shared: &SimShared) -> (Nic<'_>, SimDevice<'_>) {
    let nic = Nic::new(SimTransport::new(shared)).expect("driver initialises the sim device");
    // SAFETY: HostHal memory is identity-mapped; every nic outlives its device in these tests
    // and resets it (drop) before its rings are freed.
    let dev = unsafe { SimDevice::new(shared) };
    (nic, dev)
}

fn rx_bufs() -> Vec<RxBuf> {
    vec![
        RxBuf {
            pfn: Pfn(0),
            len: 0,
            status: RxStatus::Ok,
        };
        QUEUE_SIZE
    ]
}

#[test]
fn the_driver_brings_the_sim_device_up() {
    let shared = SimShared::new(MAC);
    let (nic, _dev) = up(&shared);
    assert_eq!(nic.mac(), MAC);
    assert_eq!(nic.features(), DRIVER_FEATURES);
    assert_eq!(shared.driver_features(), SIM_FEATURES);
    assert!(shared.status().contains(DeviceStatus::DRIVER_OK));
    for q in [SIM_RX_QUEUE, SIM_TX_QUEUE] {
        let r = shared.rings(q).expect("queue set up");
        assert_eq!(r.size as usize, QUEUE_SIZE);
        assert!(r.desc != 0 && r.driver == r.desc + 16 * QUEUE_SIZE as u64 && r.device != 0);
    }
    assert_eq!(shared.rings(2), None);
    drop(nic);
    assert!(
        shared.status().is_empty(),
        "dropping the driver resets the device"
    );
    assert_eq!(shared.rings(SIM_RX_QUEUE), None);
}

#[test]
fn a_device_without_version_1_is_refused() {
    let shared = SimShared::with_features(MAC, SIM_FEATURES & !NetFeatures::VERSION_1.bits());
    assert!(matches!(
        Nic::new(SimTransport::new(&shared)),
        Err(NetInitError::NotModern)
    ));
}

#[test]
fn a_device_behind_an_iommu_is_refused_untouched() {
    let shared = SimShared::with_features(MAC, SIM_FEATURES | NetFeatures::ACCESS_PLATFORM.bits());
    assert!(matches!(
        Nic::new(SimTransport::new(&shared)),
        Err(NetInitError::AccessPlatform)
    ));
    // Refused before feature negotiation: nothing was accepted, no queue set up.
    assert_eq!(shared.driver_features(), 0);
    assert!(shared.status().is_empty());
    assert_eq!(shared.rings(SIM_RX_QUEUE), None);
}

#[test]
fn frames_go_through_rx_and_tx_and_pages_come_back() {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(QUEUE_SIZE);
    // SAFETY: fresh pages, ours until they come back from the rings.
    assert_eq!(unsafe { nic.rx_refill(&pages.0) }, QUEUE_SIZE);
    assert_eq!(dev.rx_available(), QUEUE_SIZE);
    assert_eq!(dev.deliver_rx(&frame(1), 2), 2);
    assert_eq!(dev.deliver_rx(&frame(100)[..42], 1), 1);
    assert_eq!(dev.delivered(), 3);
    assert_eq!(dev.rx_available(), QUEUE_SIZE - 3);

    let mut out = rx_bufs();
    assert_eq!(nic.rx_burst(&mut out), 3);
    assert_eq!(nic.rx_burst(&mut out[3..]), 0);
    let want = [frame(1), frame(1), frame(100)[..42].to_vec()];
    for (b, w) in out.iter().zip(&want) {
        assert_eq!(b.status, RxStatus::Ok);
        assert_eq!(b.len, w.len());
        assert_eq!(page(b.pfn, NET_HDR_LEN, b.len), &w[..]);
        // virtio_net_hdr: no offloads, num_buffers = 1.
        assert_eq!(
            page(b.pfn, 0, NET_HDR_LEN),
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
        );
    }
    assert_eq!(nic.rx_posted(), QUEUE_SIZE - 3);

    // Out of the TX queue, zero copy: the device sees the same bytes.
    let tx: Vec<TxBuf> = out[..3]
        .iter()
        .map(|b| TxBuf {
            pfn: b.pfn,
            len: b.len,
            owner: TxOwner::new(7),
        })
        .collect();
    // SAFETY: the pages came back from RX and hold the frames at NET_HDR_LEN.
    assert_eq!(unsafe { nic.tx_burst(&tx) }, 3);
    let mut seen = Vec::new();
    assert_eq!(dev.complete_tx(|f| seen.push(f.to_vec())), 3);
    assert_eq!(seen, want);
    assert_eq!(dev.complete_tx(|_| panic!("nothing more")), 0);
    let mut back = [TxDone {
        pfn: Pfn(0),
        owner: TxOwner::new(0),
    }; QUEUE_SIZE];
    assert_eq!(nic.tx_complete(&mut back), 3);
    assert!(
        back[..3].iter().all(|d| d.owner == TxOwner::new(7)),
        "the owner tag comes back"
    );
    let mut got: Vec<Pfn> = back[..3].iter().map(|d| d.pfn).collect();
    let mut sent: Vec<Pfn> = tx.iter().map(|t| t.pfn).collect();
    got.sort_by_key(|p| p.0);
    sent.sort_by_key(|p| p.0);
    assert_eq!(got, sent, "tx_complete hands back the very pages sent");
    assert_eq!(nic.tx_posted(), 0);

    // Reset: the device stops, every posted page comes back.
    let mut reclaimed = 0;
    nic.reclaim(|_| reclaimed += 1).unwrap();
    assert_eq!(reclaimed, QUEUE_SIZE - 3);
    assert_eq!(
        dev.deliver_rx(&frame(0), 1),
        0,
        "a reset device delivers nothing"
    );
}

#[test]
fn a_frame_too_big_for_the_buffer_is_not_delivered() {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(1);
    // SAFETY: a fresh page, ours until it comes back.
    unsafe { nic.rx_refill(&pages.0) };
    let big = vec![0xab; MAX_FRAME_LEN + 1];
    assert_eq!(dev.deliver_rx(&big, 1), 0);
    assert_eq!(dev.rx_available(), 1, "the buffer stays available");
    assert_eq!(
        dev.deliver_rx(&big[..MAX_FRAME_LEN], 1),
        1,
        "a full page fits"
    );
    let mut out = rx_bufs();
    assert_eq!(nic.rx_burst(&mut out), 1);
    assert_eq!(out[0].len, MAX_FRAME_LEN);
}

#[test]
fn the_device_asks_for_kicks_only_when_told_to() {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(64);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { nic.rx_refill(&pages.0[..32]) };
    // avail_event starts at 0 (zeroed ring): the first batch is kicked.
    assert_eq!(nic.kick(), 1);
    assert_eq!(shared.kicks(SIM_RX_QUEUE), 1);
    // A busy-polling device parks avail_event behind: no kicks.
    dev.deliver_rx(&frame(0), 1);
    // SAFETY: as above.
    unsafe { nic.rx_refill(&pages.0[32..40]) };
    assert_eq!(nic.kick(), 0);
    // Asking for kicks: the next publish after a pass that drained the ring is kicked.
    dev.set_want_kicks(true);
    dev.deliver_rx(&frame(0), usize::MAX);
    // SAFETY: as above.
    unsafe { nic.rx_refill(&pages.0[40..48]) };
    assert_eq!(nic.kick(), 1);
    assert_eq!(shared.kicks(SIM_RX_QUEUE), 1 + 1);
    assert_eq!(shared.kicks(SIM_TX_QUEUE), 0);
    let mut out = rx_bufs();
    let n = nic.rx_burst(&mut out);
    assert_eq!(n, 40);
    drop(nic);
}

/// Forward `total` frames in bursts of `k` through one device's RX and TX queues, as the
/// forwarder does (refill the RX ring with the pages TX completed): the 16-bit ring indices wrap.
fn forward_many(total: usize, k: usize) {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(QUEUE_SIZE);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { nic.rx_refill(&pages.0) };
    let mut out = rx_bufs();
    let mut back = vec![
        TxDone {
            pfn: Pfn(0),
            owner: TxOwner::new(0)
        };
        QUEUE_SIZE
    ];
    let (mut sent, mut seen, mut i) = (0usize, 0usize, 0usize);
    while sent < total {
        let f = frame(i as u8);
        assert_eq!(dev.deliver_rx(&f, k), k, "iteration {i}");
        let n = nic.rx_burst(&mut out[..k]);
        assert_eq!(n, k);
        let tx: Vec<TxBuf> = out[..n]
            .iter()
            .map(|b| TxBuf {
                pfn: b.pfn,
                len: b.len,
                owner: TxOwner::new(7),
            })
            .collect();
        // SAFETY: pages back from RX, frames at NET_HDR_LEN.
        assert_eq!(unsafe { nic.tx_burst(&tx) }, n);
        seen += dev.complete_tx(|got| assert_eq!(got, &f[..]));
        let m = nic.tx_complete(&mut back);
        assert_eq!(m, n);
        let pages: Vec<Pfn> = back[..m].iter().map(|d| d.pfn).collect();
        // SAFETY: completed TX pages are ours again.
        assert_eq!(unsafe { nic.rx_refill(&pages) }, m);
        sent += n;
        i += 1;
    }
    assert_eq!(seen, sent);
    assert_eq!(dev.delivered() as usize, sent);
    assert_eq!(dev.completed() as usize, sent);
    assert!(sent > 65_536, "indices wrapped");
    assert_eq!(nic.stats().bad_token, 0);
    assert_eq!(nic.rx_posted(), QUEUE_SIZE);
    assert_eq!(nic.tx_posted(), 0);
}

#[test]
fn rings_wrap_past_65536_in_bursts_of_one() {
    forward_many(70_000, 1);
}

#[test]
fn rings_wrap_past_65536_in_bursts_of_32() {
    forward_many(70_016, 32);
}

/// `rx_burst_refill`: each emptied RX slot is re-posted at once with a spare page (the pages TX
/// completed become the spares), published in batches; the device never runs dry, every frame
/// arrives intact, the 16-bit indices wrap and no page is lost.
fn forward_many_in_place(total: usize, k: usize) {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let (_pages, mut spare) = filled_rx(&mut nic);
    let mut out = rx_bufs();
    let mut back = vec![
        TxDone {
            pfn: Pfn(0),
            owner: TxOwner::new(0)
        };
        QUEUE_SIZE
    ];
    let (mut sent, mut seen, mut i) = (0usize, 0usize, 0usize);
    while sent < total {
        let f = frame(i as u8);
        assert_eq!(
            dev.deliver_rx(&f, k),
            k,
            "iteration {i}: the device ran out of buffers"
        );
        // SAFETY: the spares are ours and go to the ring.
        let n = unsafe { nic.rx_burst_refill(&mut out[..k], || spare.pop()) };
        assert_eq!(n, k);
        assert_eq!(nic.rx_posted(), QUEUE_SIZE, "every slot re-posted at once");
        let tx: Vec<TxBuf> = out[..n]
            .iter()
            .map(|b| TxBuf {
                pfn: b.pfn,
                len: b.len,
                owner: TxOwner::new(1),
            })
            .collect();
        // SAFETY: pages back from RX, frames at NET_HDR_LEN.
        assert_eq!(unsafe { nic.tx_burst(&tx) }, n);
        seen += dev.complete_tx(|got| assert_eq!(got, &f[..]));
        let m = nic.tx_complete(&mut back);
        assert_eq!(m, n);
        spare.extend(back[..m].iter().map(|d| d.pfn));
        sent += n;
        i += 1;
    }
    nic.rx_publish();
    assert_eq!(seen, sent);
    assert!(sent > 65_536, "indices wrapped");
    assert_eq!(nic.stats().bad_token, 0);
    assert_eq!(
        spare.len(),
        QUEUE_SIZE,
        "every page is a spare or on the ring"
    );
}

#[test]
fn rx_refill_in_place_wraps_in_bursts_of_one() {
    forward_many_in_place(70_000, 1);
}

#[test]
fn rx_refill_in_place_wraps_in_bursts_of_32() {
    forward_many_in_place(70_016, 32);
}

#[test]
fn rx_refill_in_place_without_a_spare_frees_the_slot() {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(QUEUE_SIZE);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { nic.rx_refill(&pages.0) };
    assert_eq!(dev.deliver_rx(&frame(1), 3), 3);
    let mut out = rx_bufs();
    // SAFETY: no page is handed over.
    let n = unsafe { nic.rx_burst_refill(&mut out[..8], || None) };
    assert_eq!(n, 3);
    assert_eq!(nic.rx_posted(), QUEUE_SIZE - 3);
    assert_eq!(nic.rx_free_slots(), 3, "the slots wait for rx_refill");
}

/// The dataplane side of a fused burst in these tests: pages from a spare list, frames
/// rewritten (first byte + 1) and forwarded unless shorter than `min_len` (then kept as
/// "consumed"), everything handed back recorded.
struct TestOps<'a> {
    spare: &'a mut Vec<Pfn>,
    min_len: usize,
    consumed: &'a mut Vec<Pfn>,
    back: &'a mut Vec<(Pfn, GiveBack)>,
}

impl ForwardOps for TestOps<'_> {
    fn rx_page(&mut self) -> Option<Pfn> {
        self.spare.pop()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        None
    }
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        if frame.len() < self.min_len {
            self.consumed.push(pfn);
            return RxVerdict::Consumed;
        }
        frame[0] = frame[0].wrapping_add(1);
        RxVerdict::Forward
    }
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        // A fresh page the burst did not post goes back to the pool (it is no frame).
        if why == GiveBack::Unused {
            self.spare.push(pfn);
            return;
        }
        self.back.push((pfn, why));
    }
}

/// What a fused burst handed to the test's ops besides the ring.
#[derive(Default)]
struct Outside {
    consumed: Vec<Pfn>,
    back: Vec<(Pfn, GiveBack)>,
}

/// One fused burst from `a` to `b` (owner tag 9) with [`TestOps`].
fn burst<'s>(
    a: &mut Nic<'s>,
    b: &mut Nic<'s>,
    spare: &mut Vec<Pfn>,
    out: &mut Outside,
) -> BurstStats {
    let Outside { consumed, back } = out;
    let ops = move || {
        let (spare, consumed, back) = ({ spare }, { consumed }, { back });
        TestOps {
            spare,
            min_len: 14,
            consumed,
            back,
        }
    };
    burst_with(a, b, ops)
}

/// One fused burst from `a` to `b` (owner tag 9) with the ops `ops` makes.
fn burst_with<'s, O: ForwardOps>(
    a: &mut Nic<'s>,
    b: &mut Nic<'s>,
    ops: impl FnOnce() -> O,
) -> BurstStats {
    // SAFETY: the ops' pages are the test's spares and go to A's RX ring; forwarded pages
    // become B's until reclaimed.
    unsafe { a.forward_burst(b, QUEUE_SIZE, TxOwner::new(9), ops) }
}

/// Port A's RX forwarded onto port B's TX in fused bursts of `k`, past the 16-bit index wrap:
/// every frame arrives rewritten, TX completions come back into a pool-like room, no id is
/// ever bad, and every page is on a ring or a spare at the end.
fn fused_forward_many(total: usize, k: usize) {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut sent, mut seen, mut i) = (0usize, 0usize, 0usize);
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let mut out = Outside::default();
    while sent < total {
        let f = frame(i as u8);
        assert_eq!(da.deliver_rx(&f, k), k, "iteration {i}");
        let st = burst(&mut a, &mut b, &mut spare, &mut out);
        let bytes = (k * f.len()) as u64;
        assert_eq!(
            st,
            BurstStats {
                buffers: k,
                rx_frames: k,
                rx_bytes: bytes,
                tx_frames: k,
                tx_bytes: bytes,
            }
        );
        assert_eq!(a.rx_posted(), QUEUE_SIZE, "every slot re-posted at once");
        let mut want = f.clone();
        want[0] = want[0].wrapping_add(1);
        seen += db.complete_tx(|got| assert_eq!(got, &want[..]));
        let (n, back) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |_, _| panic!("one owner"));
        assert_eq!((n, back), (k, k));
        spare.extend_from_slice(&room[..n]);
        sent += k;
        i += 1;
    }
    a.rx_publish();
    assert_eq!(seen, sent);
    assert!(sent > 65_536, "indices wrapped");
    assert!(out.consumed.is_empty() && out.back.is_empty());
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    assert_eq!(b.tx_posted(), 0);
    assert_eq!(
        spare.len(),
        QUEUE_SIZE,
        "every page is a spare or on A's ring"
    );
}

#[test]
fn fused_bursts_of_one_wrap_the_rings() {
    fused_forward_many(70_000, 1);
}

#[test]
fn fused_bursts_of_32_wrap_the_rings() {
    fused_forward_many(70_016, 32);
}

/// [`TestOps`] with a length bound ([`ForwardOps::MIN_FRAME`] 14, as the l2 dataplane's):
/// `honest`, it consumes every shorter frame (as `TestOps` with `min_len` 14); not, it asks
/// to send every frame, breaking the bound's contract.
struct BoundOps<'a> {
    ops: TestOps<'a>,
    honest: bool,
}

impl ForwardOps for BoundOps<'_> {
    const MIN_FRAME: usize = 14;
    fn rx_page(&mut self) -> Option<Pfn> {
        self.ops.rx_page()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        self.ops.rx_page_cached()
    }
    fn forward(&mut self, pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        if self.honest {
            return self.ops.forward(pfn, frame);
        }
        frame[0] = frame[0].wrapping_add(1);
        RxVerdict::Forward
    }
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        self.ops.give_back(pfn, why);
    }
}

/// A frame below [`ForwardOps::MIN_FRAME`] leaves the fast path: it is shown to `forward` on
/// the cold path (consumed: received, not sent), the frames around it and one of exactly the
/// bound go out in order; an ops that wants the short one sent after all gets its page back
/// as `Malformed`, and it never reaches the TX ring.
#[test]
fn fused_burst_shows_frames_below_min_frame_to_forward_off_the_fast_path() {
    for honest in [true, false] {
        let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
        let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
        let pages = Pages::new(QUEUE_SIZE + 3);
        // SAFETY: fresh pages, ours until they come back.
        unsafe { a.rx_refill(&pages.0[..QUEUE_SIZE]) };
        let mut spare: Vec<Pfn> = pages.0[QUEUE_SIZE..].to_vec();
        let mut out = Outside::default();
        assert_eq!(da.deliver_rx(&frame(1), 1), 1);
        assert_eq!(da.deliver_rx(&frame(2)[..13], 1), 1);
        assert_eq!(da.deliver_rx(&frame(3)[..14], 1), 1);
        let Outside { consumed, back } = &mut out;
        let sp = &mut spare;
        let st = burst_with(&mut a, &mut b, move || BoundOps {
            ops: TestOps {
                spare: sp,
                min_len: 14,
                consumed,
                back,
            },
            honest,
        });
        assert_eq!(
            st,
            BurstStats {
                buffers: 3,
                rx_frames: 3,
                rx_bytes: 60 + 13 + 14,
                tx_frames: 2,
                tx_bytes: 60 + 14,
            },
            "honest: {honest}"
        );
        if honest {
            assert_eq!(out.consumed, [pages.0[1]]);
            assert!(out.back.is_empty());
        } else {
            assert!(out.consumed.is_empty());
            assert_eq!(out.back, [(pages.0[1], GiveBack::Rx(RxStatus::Malformed))]);
        }
        let mut sent = Vec::new();
        assert_eq!(db.complete_tx(|got| sent.push(got.to_vec())), 2);
        let (mut f1, mut f3) = (frame(1), frame(3)[..14].to_vec());
        f1[0] += 1;
        f3[0] += 1;
        assert_eq!(sent, [f1, f3]);
        assert!(spare.is_empty(), "3 slots re-posted from the 3 spares");
        assert_eq!(a.stats().bad_token, 0);
    }
}

/// What a fused burst does not send is handed back with its reason: a runt the dataplane
/// consumes, a frame of two buffers (`TooBig`, then `Continuation`), frames beyond a full TX
/// ring (`TxFull`); an RX slot no page refills goes back to the free list.
#[test]
fn fused_burst_hands_back_what_it_does_not_send() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, _db)) = (up(&sa), up(&sb));
    let pages = Pages::new(QUEUE_SIZE + 4);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { a.rx_refill(&pages.0[..QUEUE_SIZE]) };
    let mut spare: Vec<Pfn> = pages.0[QUEUE_SIZE..].to_vec();
    let mut out = Outside::default();
    // The device fills buffers in the order they were posted: pages 0, 1, 2, 3.
    assert_eq!(da.deliver_rx(&frame(1), 2), 2);
    assert_eq!(da.deliver_rx(&frame(2)[..10], 1), 1);
    assert_eq!(da.deliver_rx(&frame(3), 1), 1);
    // The first buffer says its frame spans two buffers: the second's 72 bytes (its copy of
    // a header too) are the frame's last bytes; the test's ops keep the default
    // `forward_multi`, which gives both pages back.
    page(pages.0[0], 10, 2).copy_from_slice(&2u16.to_le_bytes());
    let st = burst(&mut a, &mut b, &mut spare, &mut out);
    assert_eq!(
        (st.buffers, st.rx_frames),
        (4, 3),
        "the 2-page frame, the runt, frame 3"
    );
    assert_eq!((st.rx_bytes, st.tx_frames, st.tx_bytes), (132 + 70, 1, 60));
    assert_eq!(out.consumed, [pages.0[2]]);
    assert_eq!(
        out.back,
        [
            (pages.0[0], GiveBack::Multi { first: true }),
            (pages.0[1], GiveBack::Multi { first: false }),
        ]
    );
    assert!(spare.is_empty(), "4 slots re-posted from the 4 spares");
    // No spare: the next buffer's slot goes back to the free list (for `rx_refill`).
    assert_eq!(da.deliver_rx(&frame(4), 1), 1);
    let st = burst(&mut a, &mut b, &mut spare, &mut out);
    assert_eq!(st.tx_frames, 1);
    assert_eq!(a.rx_free_slots(), 1);
    assert_eq!(a.rx_posted(), QUEUE_SIZE - 1);
    // B's TX ring holds 2 frames; fill it without completing anything, then overflow it.
    let more = Pages::new(QUEUE_SIZE);
    spare.extend_from_slice(&more.0);
    let mut queued = 2;
    while queued < QUEUE_SIZE {
        let k = (QUEUE_SIZE - queued).min(32);
        assert_eq!(da.deliver_rx(&frame(5), k), k, "queued {queued}");
        let st = burst(&mut a, &mut b, &mut spare, &mut out);
        assert_eq!(st.tx_frames, k);
        queued += k;
    }
    assert_eq!(b.tx_free_slots(), 0);
    assert_eq!(da.deliver_rx(&frame(6), 3), 3);
    let st = burst(&mut a, &mut b, &mut spare, &mut out);
    assert_eq!((st.rx_frames, st.tx_frames, st.tx_bytes), (3, 0, 0));
    assert_eq!(out.back.len(), 2 + 3);
    assert!(out.back[2..]
        .iter()
        .all(|(_, why)| *why == GiveBack::TxFull));
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    // Every page is somewhere: on A's ring, on B's ring, handed back, consumed or spare.
    let handed = out.back.len() + out.consumed.len();
    assert_eq!(
        a.rx_posted() + b.tx_posted() + handed + spare.len(),
        QUEUE_SIZE + 4 + QUEUE_SIZE
    );
}

/// `tx_reclaim_into` puts the pages of its owner at the start of the room and hands the
/// others to `other` with their tags.
#[test]
fn tx_reclaim_into_separates_other_owners() {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(6);
    let tx: Vec<TxBuf> = pages
        .0
        .iter()
        .enumerate()
        .map(|(i, &pfn)| TxBuf {
            pfn,
            len: 60,
            owner: if i % 3 == 1 {
                TxOwner::new(4)
            } else {
                TxOwner::new(9)
            },
        })
        .collect();
    // SAFETY: fresh pages, the device's until they come back.
    assert_eq!(unsafe { nic.tx_burst(&tx) }, 6);
    assert_eq!(dev.complete_tx(|_| {}), 6);
    let mut room = vec![Pfn(0); 8];
    let mut others = Vec::new();
    let (n, total) = nic.tx_reclaim_into(TxOwner::new(9), &mut room, |pfn, tag| {
        others.push((pfn, tag))
    });
    assert_eq!((n, total), (4, 6));
    let mut mine: Vec<Pfn> = room[..4].to_vec();
    mine.sort_by_key(|p| p.0);
    let mut want: Vec<Pfn> = [0, 2, 3, 5].iter().map(|&i| pages.0[i]).collect();
    want.sort_by_key(|p| p.0);
    assert_eq!(mine, want);
    others.sort_by_key(|p| p.0 .0);
    let mut want_o = vec![(pages.0[1], TxOwner::new(4)), (pages.0[4], TxOwner::new(4))];
    want_o.sort_by_key(|p| p.0 .0);
    assert_eq!(others, want_o);
    assert_eq!(nic.tx_posted(), 0);
    assert_eq!(nic.tx_free_slots(), QUEUE_SIZE);
}

/// The hostile-device hooks: a raw used element with an id the driver never posted, and a
/// `used->idx` jump over stale entries, are skipped and counted, and no page comes back twice.
#[test]
fn raw_used_elements_and_index_jumps_are_counted_not_trusted() {
    let shared = SimShared::new(MAC);
    let (mut nic, mut dev) = up(&shared);
    let pages = Pages::new(QUEUE_SIZE);
    // SAFETY: fresh pages, ours until they come back from the rings.
    assert_eq!(unsafe { nic.rx_refill(&pages.0) }, QUEUE_SIZE);
    assert_eq!(dev.deliver_rx(&frame(1), 1), 1);
    // SAFETY: as `up`.
    let mut q = unsafe { DeviceQueue::new(&shared, SIM_RX_QUEUE) }.unwrap();
    let at = q.used_idx();
    assert_eq!(at, 1);
    q.write_used_raw(at, 4096, 60);
    // The first element again (its id is no longer posted once taken), then a jump of 3 more.
    let first = {
        let mut out = rx_bufs();
        assert_eq!(nic.rx_burst(&mut out[..1]), 1);
        out[0].pfn
    };
    q.write_used_raw(at.wrapping_add(1), 0, 60);
    q.set_used_idx(at.wrapping_add(5));
    let mut out = rx_bufs();
    let n = nic.rx_burst(&mut out);
    assert!(
        out[..n].iter().all(|b| b.pfn != first),
        "a page came back twice"
    );
    assert!(nic.stats().bad_token >= 2);
}

/// The dataplane side of a fused burst for multi-buffer frames: every frame (one page or
/// several) rewritten (first byte + 1) and forwarded; `multi` false keeps the default
/// [`ForwardOps::forward_multi`] (multi-page frames given back).
struct JumboOps<'a> {
    spare: &'a mut Vec<Pfn>,
    multi: bool,
    back: &'a mut Vec<(Pfn, GiveBack)>,
    seen: &'a mut Vec<(usize, usize)>,
}

impl ForwardOps for JumboOps<'_> {
    fn rx_page(&mut self) -> Option<Pfn> {
        self.spare.pop()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        None
    }
    fn forward(&mut self, _pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        self.seen.push((1, frame.len()));
        frame[0] = frame[0].wrapping_add(1);
        RxVerdict::Forward
    }
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        // A fresh page the burst did not post goes back to the pool (it is no frame).
        if why == GiveBack::Unused {
            self.spare.push(pfn);
            return;
        }
        self.back.push((pfn, why));
    }
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        if !self.multi {
            for (i, &pfn) in frame.pages.iter().enumerate() {
                self.back.push((pfn, GiveBack::Multi { first: i == 0 }));
            }
            return RxVerdict::Consumed;
        }
        self.seen.push((frame.pages.len(), frame.len));
        assert_eq!(
            frame.lens.iter().map(|&l| usize::from(l)).sum::<usize>(),
            frame.len
        );
        assert_eq!(frame.head.len(), usize::from(frame.lens[0]));
        frame.head[0] = frame.head[0].wrapping_add(1);
        RxVerdict::Forward
    }
}

/// A frame of `len` bytes whose bytes start at `seed`.
fn long_frame(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Round `round` of a jumbo test: a [`long_frame`] of each of `sizes` delivered to `dev`
/// ([`SimDevice::deliver_rx_mrg`]: as many posted buffers as each needs); returns the frames as
/// they should leave after [`JumboOps`] (first byte + 1), in order.
fn deliver_round(dev: &mut SimDevice<'_>, round: usize, sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut want = Vec::new();
    for (j, &len) in sizes.iter().enumerate() {
        let f = long_frame((round + j) as u8, len);
        assert_eq!(dev.deliver_rx_mrg(&f, 1), 1, "round {round} size {len}");
        let mut w = f;
        w[0] = w[0].wrapping_add(1);
        want.push(w);
    }
    want
}

/// One fused burst from `a` to `b` (owner tag 9) with [`JumboOps`].
fn jumbo_burst<'s>(
    a: &mut Nic<'s>,
    b: &mut Nic<'s>,
    spare: &mut Vec<Pfn>,
    multi: bool,
    back: &mut Vec<(Pfn, GiveBack)>,
    seen: &mut Vec<(usize, usize)>,
) -> BurstStats {
    let ops = move || {
        let (spare, back, seen) = ({ spare }, { back }, { seen });
        JumboOps {
            spare,
            multi,
            back,
            seen,
        }
    };
    burst_with(a, b, ops)
}

/// Frames of 1 to 4 pages (9,014 bytes: a 9,000-byte MTU), mixed with small ones, go from A's
/// RX to B's TX as descriptor chains of the very pages they came in, in order, past the
/// 16-bit index wrap; completions bring every page back (into the pool's room and through
/// the chain path), none leaks. `indirect`: the devices offer `VIRTIO_F_INDIRECT_DESC`
/// (§2.7.5.3), so the chain loop posts each frame as one indirect descriptor and B's TX ring
/// is back in in-order mode once the first frame's descriptor chain (the general path's) is
/// long reclaimed; without, every frame is a descriptor chain and the ring stays out of it.
fn jumbo_forward_many(rounds: usize, reclaim_into: bool, indirect: bool) {
    let features = if indirect {
        SIM_FEATURES
    } else {
        SIM_FEATURES & !NetFeatures::RING_INDIRECT_DESC.bits()
    };
    let (sa, sb) = (
        SimShared::with_features(MAC, features),
        SimShared::with_features([2, 0, 0, 0, 0, 2], features),
    );
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let sizes = [
        9014usize,
        60,
        4084,
        4085,
        8180,
        8181,
        MAX_MULTI_FRAME_LEN,
        1514,
    ];
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    let mut frames_sent = 0usize;
    for round in 0..rounds {
        let want = deliver_round(&mut da, round, &sizes);
        seen.clear();
        let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
        if round >= 16 {
            assert_eq!(b.tx_in_order(), indirect, "round {round}: in-order mode");
        }
        let bytes: usize = sizes.iter().sum();
        let bufs: usize = sizes
            .iter()
            .map(|l| (NET_HDR_LEN + l).div_ceil(PAGE_SIZE))
            .sum();
        assert_eq!(
            st,
            BurstStats {
                buffers: bufs,
                rx_frames: sizes.len(),
                rx_bytes: bytes as u64,
                tx_frames: sizes.len(),
                tx_bytes: bytes as u64,
            },
            "round {round}"
        );
        let pages_per: Vec<usize> = seen.iter().map(|&(p, _)| p).collect();
        assert_eq!(pages_per, vec![3, 1, 1, 2, 2, 3, 4, 1], "round {round}");
        let mut got = Vec::new();
        assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), sizes.len());
        assert!(
            got == want,
            "round {round}: frames arrive whole, rewritten, in order"
        );
        assert_eq!(b.tx_posted(), bufs, "the TX ring holds every page");
        if reclaim_into {
            let mut others = Vec::new();
            let (n, total) =
                b.tx_reclaim_into(TxOwner::new(9), &mut room, |p, tag| others.push((p, tag)));
            assert_eq!(total, sizes.len(), "one completion per frame");
            assert!(
                others.iter().all(|&(_, tag)| tag == TxOwner::new(9)),
                "tags without the chain bit"
            );
            assert_eq!(n + others.len(), bufs);
            spare.extend_from_slice(&room[..n]);
            spare.extend(others.iter().map(|&(p, _)| p));
        } else {
            let n = b.tx_reclaim(|p, tag| {
                assert_eq!(tag, TxOwner::new(9));
                spare.push(p);
            });
            assert_eq!(n, sizes.len());
        }
        assert_eq!(b.tx_posted(), 0);
        assert_eq!(
            b.tx_free_slots(),
            QUEUE_SIZE,
            "every descriptor of every chain freed"
        );
        frames_sent += sizes.len();
    }
    a.rx_publish();
    assert!(back.is_empty(), "nothing given back: {back:?}");
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    assert_eq!(
        spare.len(),
        QUEUE_SIZE,
        "every page is a spare or on A's ring"
    );
    assert!(frames_sent * 2 > 65_536 || rounds < 8200);
}

#[test]
fn jumbo_frames_leave_as_chains_through_reclaim_into() {
    jumbo_forward_many(100, true, true);
}

#[test]
fn jumbo_frames_leave_as_descriptor_chains_without_indirect_tables() {
    jumbo_forward_many(100, true, false);
    jumbo_forward_many(100, false, false);
}

#[test]
fn jumbo_frames_leave_as_chains_through_reclaim_and_wrap() {
    // 8 frames, 17 buffers a round: 70,000 buffers wrap both rings' indices.
    jumbo_forward_many(4200, false, true);
}

#[test]
fn jumbo_frames_are_dropped_by_a_dataplane_without_them_and_past_four_pages() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    // Default forward_multi: a 3-page frame given back, then a small frame goes on.
    assert_eq!(da.deliver_rx_mrg(&long_frame(1, 9014), 1), 1);
    assert_eq!(da.deliver_rx_mrg(&long_frame(2, 60), 1), 1);
    let st = jumbo_burst(&mut a, &mut b, &mut spare, false, &mut back, &mut seen);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (4, 2, 1));
    let why: Vec<GiveBack> = back.iter().map(|&(_, w)| w).collect();
    assert_eq!(
        why,
        vec![
            GiveBack::Multi { first: true },
            GiveBack::Multi { first: false },
            GiveBack::Multi { first: false }
        ]
    );
    // Five pages: more than MAX_FRAME_BUFFERS, given back as it comes, even by a dataplane
    // that forwards multi-page frames.
    spare.extend(back.drain(..).map(|(p, _)| p));
    assert_eq!(
        da.deliver_rx_mrg(&long_frame(3, MAX_MULTI_FRAME_LEN + 1), 1),
        1
    );
    assert_eq!(da.deliver_rx_mrg(&long_frame(4, 100), 1), 1);
    let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (6, 1, 1));
    assert_eq!(back.len(), 5);
    assert_eq!(back[0].1, GiveBack::Rx(RxStatus::TooBig));
    assert!(back[1..]
        .iter()
        .all(|&(_, w)| w == GiveBack::Rx(RxStatus::Continuation)));
    let mut lens = Vec::new();
    assert_eq!(db.complete_tx(|f| lens.push(f.len())), 2);
    assert_eq!(lens, vec![60, 100]);
    spare.extend(back.iter().map(|&(p, _)| p));
    b.tx_reclaim(|p, _| spare.push(p));
    a.rx_publish();
    // SAFETY: tearing down: both devices reset first.
    let mut held = Vec::new();
    a.reclaim(|p| held.push(p)).unwrap();
    b.reclaim(|p| held.push(p)).unwrap();
    assert_eq!(held.len() + spare.len(), 2 * QUEUE_SIZE, "no page lost");
}

/// The port's RX frame limit ([`crate::nic::Nic::set_rx_frame_limit`], the MTU + 18 of l2) at
/// MTU 1500 and 9000: frames of MTU − 1, MTU and MTU + 1 (+ 18 bytes each) go through the fused
/// burst (one-page loop, then the chain loop for jumbo frames) and the staged `rx_burst`; the
/// two within the limit are forwarded whole, the one past it is handed back as one `too_big`
/// (never shown to the dataplane), and every page comes back.
#[test]
fn frames_over_the_ports_frame_limit_are_handed_back_too_big() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    assert_eq!(
        a.rx_frame_limit(),
        MAX_MULTI_FRAME_LEN,
        "no limit by default"
    );
    let too_big = |back: &[(Pfn, GiveBack)]| {
        back.iter()
            .filter(|&&(_, w)| {
                w == GiveBack::Rx(RxStatus::TooBig) || w == GiveBack::Multi { first: true }
            })
            .count()
    };
    for mtu in [1500usize, 9000] {
        let limit = mtu + 18;
        a.set_rx_frame_limit(limit);
        for (round, len) in [limit - 1, limit, limit + 1].into_iter().enumerate() {
            assert_eq!(da.deliver_rx_mrg(&long_frame(round as u8, len), 1), 1);
        }
        let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
        assert_eq!(st.tx_frames, 2, "MTU {mtu}: {st:?}");
        assert_eq!(too_big(&back), 1, "MTU {mtu}: one too_big: {back:?}");
        let mut lens = Vec::new();
        assert_eq!(db.complete_tx(|f| lens.push(f.len())), 2);
        assert_eq!(lens, vec![limit - 1, limit], "MTU {mtu}");
        assert!(
            seen.iter().all(|&(_, l)| l <= limit),
            "MTU {mtu}: the dataplane never sees a frame over the limit: {seen:?}"
        );
        seen.clear();
        spare.extend(back.drain(..).map(|(p, _)| p));
        b.tx_reclaim(|p, _| spare.push(p));
    }
    // The staged path: a one-page frame over a 1518-byte limit is `TooBig`.
    a.set_rx_frame_limit(1518);
    assert_eq!(da.deliver_rx(&long_frame(7, 1519), 1), 1);
    assert_eq!(da.deliver_rx(&long_frame(8, 1518), 1), 1);
    a.rx_publish();
    let mut bufs = rx_bufs();
    let n = a.rx_burst(&mut bufs);
    let got: Vec<(RxStatus, usize)> = bufs[..n].iter().map(|b| (b.status, b.len)).collect();
    assert_eq!(got, vec![(RxStatus::TooBig, 0), (RxStatus::Ok, 1518)]);
    spare.extend(bufs[..n].iter().map(|b| b.pfn));
    let mut held = Vec::new();
    a.reclaim(|p| held.push(p)).unwrap();
    b.reclaim(|p| held.push(p)).unwrap();
    assert_eq!(held.len() + spare.len(), 2 * QUEUE_SIZE, "no page lost");
}

/// A frame whose continuation buffers have not all arrived yet when the burst runs is held
/// by the driver (not lost, not sent half) and goes out when the rest comes; a reset in the
/// middle hands its pages back.
#[test]
fn a_multi_buffer_frame_split_across_bursts_waits_for_its_last_buffer() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    let f = long_frame(7, 9014);
    assert_eq!(da.deliver_rx_mrg(&f, 1), 1);
    // Take the three used elements in two bursts: the first sees only two of them.
    // SAFETY: as `up`.
    let mut q = unsafe { DeviceQueue::new(&sa, SIM_RX_QUEUE) }.unwrap();
    let used = q.used_idx();
    q.set_used_idx(used.wrapping_sub(1));
    let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (2, 0, 0));
    assert_eq!(db.complete_tx(|_| {}), 0, "half a frame is not sent");
    q.set_used_idx(used);
    let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (1, 1, 1));
    let mut got = Vec::new();
    assert_eq!(db.complete_tx(|x| got.push(x.to_vec())), 1);
    let mut want = f.clone();
    want[0] += 1;
    assert!(got[0] == want);
    // Half a frame again, then a reset: its two pages come back with the ring's.
    assert_eq!(da.deliver_rx_mrg(&f, 1), 1);
    let used = q.used_idx();
    q.set_used_idx(used.wrapping_sub(1));
    jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
    a.rx_publish();
    b.tx_reclaim(|p, _| spare.push(p));
    let mut held = Vec::new();
    a.reclaim(|p| held.push(p)).unwrap();
    b.reclaim(|p| held.push(p)).unwrap();
    assert!(back.is_empty());
    assert_eq!(held.len() + spare.len(), 2 * QUEUE_SIZE, "no page lost");
}

/// TX completions in any order: the TX ring starts in in-order mode, leaves it on the first
/// completion out of order, and comes back once every descriptor is free; every page comes
/// back exactly once through each reclaim path (`tx_reclaim_into`, `tx_reclaim`,
/// `tx_complete`), and no id is ever posted twice while in flight.
#[test]
fn tx_completions_out_of_order_leave_in_order_mode_and_lose_nothing() {
    let shared = SimShared::new(MAC);
    let (mut nic, _dev) = up(&shared);
    // SAFETY: as `up`: the nic outlives the device queue and resets the device on drop.
    let mut q = unsafe { DeviceQueue::new(&shared, SIM_TX_QUEUE) }.unwrap();
    let pages = Pages::new(QUEUE_SIZE);
    assert!(nic.tx_in_order(), "a fresh TX ring is in in-order mode");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let (mut left_mode, mut came_back) = (0, 0);
    let mut free: Vec<Pfn> = pages.0.clone();
    let mut in_flight: Vec<u16> = Vec::new();
    for round in 0..400 {
        // Post up to the free pages.
        let m = 1 + rand(free.len().min(48));
        let bufs: Vec<TxBuf> = free
            .drain(..m)
            .map(|pfn| TxBuf {
                pfn,
                len: 60,
                owner: TxOwner::new(7),
            })
            .collect();
        // SAFETY: the pages are the test's and stay alive; the device never writes TX pages.
        let sent = unsafe { nic.tx_burst(&bufs) };
        assert_eq!(sent, m, "round {round}: room for every frame");
        while let Some(head) = q.take() {
            assert!(
                !in_flight.contains(&head),
                "round {round}: id {head} posted twice"
            );
            in_flight.push(head);
        }
        // Complete some of what is in flight: in order in most rounds, shuffled in some.
        let done = 1 + rand(in_flight.len());
        let shuffled = round % 5 == 3;
        for _ in 0..done {
            let at = if shuffled { rand(in_flight.len()) } else { 0 };
            let head = in_flight.remove(at);
            q.give_back(head, 0);
        }
        q.publish(false);
        let was = nic.tx_in_order();
        let mut back: Vec<Pfn> = Vec::new();
        match round % 3 {
            0 => {
                let mut room = vec![Pfn(0); QUEUE_SIZE];
                let (n, total) = nic.tx_reclaim_into(TxOwner::new(7), &mut room, |_, _| {
                    panic!("round {round}: one owner")
                });
                assert_eq!(n, total);
                back.extend_from_slice(&room[..n]);
            }
            1 => {
                nic.tx_reclaim(|pfn, owner| {
                    assert_eq!(owner, TxOwner::new(7));
                    back.push(pfn);
                });
            }
            _ => {
                let mut out = vec![
                    TxDone {
                        pfn: Pfn(0),
                        owner: TxOwner::new(0)
                    };
                    QUEUE_SIZE
                ];
                let n = nic.tx_complete(&mut out);
                back.extend(out[..n].iter().map(|d| d.pfn));
            }
        }
        assert_eq!(
            back.len(),
            done,
            "round {round}: every completion reclaimed"
        );
        for pfn in &back {
            assert!(
                !free.contains(pfn),
                "round {round}: page {pfn:?} back twice"
            );
        }
        free.extend_from_slice(&back);
        if was && !nic.tx_in_order() {
            left_mode += 1;
        }
        if !was && nic.tx_in_order() {
            came_back += 1;
        }
        assert_eq!(
            nic.tx_free_slots(),
            QUEUE_SIZE - in_flight.len(),
            "round {round}: free descriptors follow what is in flight"
        );
        if in_flight.is_empty() {
            assert!(
                nic.tx_in_order(),
                "round {round}: all free: in-order mode again"
            );
        }
    }
    assert!(left_mode > 0, "some rounds completed out of order");
    assert!(came_back > 0, "in-order mode came back after them");
    assert_eq!(nic.stats().bad_token, 0);
    // Drain: everything comes back.
    for head in in_flight.drain(..) {
        q.give_back(head, 0);
    }
    q.publish(false);
    let mut n = 0;
    nic.tx_reclaim(|_, _| n += 1);
    assert_eq!(free.len() + n, QUEUE_SIZE);
}

/// The dataplane side of a fused burst that cuts multi-page frames: a frame whose first
/// byte is even is sent cut to its first `cut` bytes (`RxVerdict::ForwardFirst`), an odd one
/// is taken whole (`RxVerdict::Consumed`, its pages kept in `taken`); fresh RX pages come
/// from the alloc-cache path (`rx_page_cached`).
struct CutOps<'a> {
    spare: &'a mut Vec<Pfn>,
    cut: usize,
    back: &'a mut Vec<(Pfn, GiveBack)>,
    taken: &'a mut Vec<Pfn>,
}

impl ForwardOps for CutOps<'_> {
    fn rx_page(&mut self) -> Option<Pfn> {
        self.spare.pop()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        self.spare.pop()
    }
    fn forward(&mut self, _pfn: Pfn, _frame: &mut [u8]) -> RxVerdict {
        RxVerdict::Forward
    }
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        if why == GiveBack::Unused {
            self.spare.push(pfn);
            return;
        }
        self.back.push((pfn, why));
    }
    fn forward_multi(&mut self, frame: MultiFrame<'_>) -> RxVerdict {
        if frame.head[0] % 2 == 1 {
            self.taken.extend_from_slice(frame.pages);
            return RxVerdict::Consumed;
        }
        RxVerdict::ForwardFirst(self.cut)
    }
}

/// One fused burst from `a` to `b` (owner tag 9) with [`CutOps`].
fn cut_burst<'s>(
    a: &mut Nic<'s>,
    b: &mut Nic<'s>,
    spare: &mut Vec<Pfn>,
    cut: usize,
    back: &mut Vec<(Pfn, GiveBack)>,
    taken: &mut Vec<Pfn>,
) -> BurstStats {
    burst_with(a, b, move || CutOps {
        spare,
        cut,
        back,
        taken,
    })
}

/// In the chain loop (the second burst, once multi-page frames flow), a frame cut inside its
/// second page leaves as a chain of two pages with exactly the first `cut` bytes, its third
/// page handed back; a frame the dataplane takes is counted received, not sent; each RX slot
/// is re-posted from the alloc cache; no page is lost.
#[test]
fn the_chain_loop_sends_a_cut_frame_and_forgets_a_consumed_one() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    let cut = 5000;
    // First burst: the general path collects the frame and turns chain mode on.
    assert_eq!(da.deliver_rx_mrg(&long_frame(2, 9014), 1), 1);
    let st = cut_burst(&mut a, &mut b, &mut spare, cut, &mut back, &mut taken);
    assert_eq!(
        (st.rx_frames, st.tx_frames, st.tx_bytes),
        (1, 1, cut as u64)
    );
    // Second burst, in the chain loop: cut, taken, cut.
    for seed in [4u8, 7, 6] {
        assert_eq!(da.deliver_rx_mrg(&long_frame(seed, 9014), 1), 1);
    }
    let st = cut_burst(&mut a, &mut b, &mut spare, cut, &mut back, &mut taken);
    assert_eq!(
        st,
        BurstStats {
            buffers: 9,
            rx_frames: 3,
            rx_bytes: 3 * 9014,
            tx_frames: 2,
            tx_bytes: 2 * cut as u64,
        }
    );
    assert_eq!(taken.len(), 3, "the consumed frame's three pages");
    let mut got = Vec::new();
    assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), 3);
    for (f, seed) in got.iter().zip([2u8, 4, 6]) {
        assert_eq!(f[..], long_frame(seed, 9014)[..cut], "seed {seed}");
    }
    assert_eq!(back.len(), 3, "one page past each cut: {back:?}");
    assert!(back
        .iter()
        .all(|&(_, w)| w == GiveBack::Rx(RxStatus::Continuation)));
    let (mut room, mut others) = (vec![Pfn(0); QUEUE_SIZE], Vec::new());
    let (n, total) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |p, _| others.push(p));
    assert_eq!((n, total, others.len()), (6, 3, 0), "two pages a frame");
    assert_eq!(b.tx_free_slots(), QUEUE_SIZE);
    a.rx_publish();
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    let held = spare.len() + n + back.len() + taken.len() + a.rx_posted();
    assert_eq!(held, 2 * QUEUE_SIZE, "no page lost");
}

/// In the chain loop, a frame whose slots run out of fresh pages part way (the pool dry at
/// its second page) is put back as it came (the slot already re-posted gets its received
/// page again, the fresh one goes back) and left to the general run, which sends it whole
/// and leaves the slots it cannot refill empty; no page is lost.
#[test]
fn the_chain_loop_undoes_a_frame_it_cannot_refill() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    // Chain mode on: a first frame through the general path.
    assert_eq!(da.deliver_rx_mrg(&long_frame(2, 9014), 1), 1);
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert_eq!((st.rx_frames, st.tx_frames), (1, 1));
    // One spare page left for a frame of three.
    let stash: Vec<Pfn> = spare.drain(1..).collect();
    assert_eq!(da.deliver_rx_mrg(&long_frame(4, 9014), 1), 1);
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert_eq!(
        st,
        BurstStats {
            buffers: 3,
            rx_frames: 1,
            rx_bytes: 9014,
            tx_frames: 1,
            tx_bytes: 9014,
        }
    );
    assert!(spare.is_empty(), "the one spare refilled a slot");
    assert_eq!(a.rx_posted(), QUEUE_SIZE - 2, "two slots left empty");
    let mut got = Vec::new();
    assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), 2);
    assert!(got[0] == long_frame(2, 9014) && got[1] == long_frame(4, 9014));
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let (n, total) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |_, _| panic!("all tagged 9"));
    assert_eq!((n, total), (6, 2));
    assert!(back.is_empty() && taken.is_empty());
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    let held = stash.len() + n + a.rx_posted();
    assert_eq!(held, 2 * QUEUE_SIZE, "no page lost");
}

/// One fused burst from `a` to `b` (owner tag 9) of at most `max` frames, with [`CutOps`]
/// forwarding every frame whole.
fn burst_of<'s>(
    a: &mut Nic<'s>,
    b: &mut Nic<'s>,
    spare: &mut Vec<Pfn>,
    max: usize,
    back: &mut Vec<(Pfn, GiveBack)>,
    taken: &mut Vec<Pfn>,
) -> BurstStats {
    let ops = CutOps {
        spare,
        cut: usize::MAX,
        back,
        taken,
    };
    // SAFETY: the ops' pages are the test's spares and go to A's RX ring; forwarded pages
    // become B's until reclaimed.
    unsafe { a.forward_burst(b, max, TxOwner::new(9), move || ops) }
}

/// In the chain loop the burst's budget counts frames, not used elements (as DPDK's
/// `rte_eth_rx_burst` counts packets): a burst of `max = 2` takes two frames of three buffers
/// each (six used elements), the others wait in the used ring for the next bursts, nothing
/// is dropped, and they leave in order; no page is lost.
#[test]
fn the_chain_loop_counts_frames_against_the_burst() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    // Chain mode on: a first frame through the general path (which counts used elements).
    assert_eq!(da.deliver_rx_mrg(&long_frame(2, 9014), 1), 1);
    let st = burst_of(&mut a, &mut b, &mut spare, 3, &mut back, &mut taken);
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (3, 1, 1));
    // Five frames of three buffers: bursts of two frames take six elements, then six, then
    // the last three.
    let seeds = [4u8, 6, 8, 10, 12];
    for seed in seeds {
        assert_eq!(da.deliver_rx_mrg(&long_frame(seed, 9014), 1), 1);
    }
    for want in [2usize, 2, 1] {
        let st = burst_of(&mut a, &mut b, &mut spare, 2, &mut back, &mut taken);
        assert_eq!(
            st,
            BurstStats {
                buffers: 3 * want,
                rx_frames: want,
                rx_bytes: 9014 * want as u64,
                tx_frames: want,
                tx_bytes: 9014 * want as u64,
            },
            "a burst of {want} frames"
        );
    }
    let st = burst_of(&mut a, &mut b, &mut spare, 2, &mut back, &mut taken);
    assert_eq!(st, BurstStats::default(), "nothing left");
    let mut got = Vec::new();
    assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), 6);
    for (f, seed) in got.iter().zip([2u8, 4, 6, 8, 10, 12]) {
        assert_eq!(f[..], long_frame(seed, 9014)[..], "seed {seed}");
    }
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let (n, total) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |_, _| panic!("all tagged 9"));
    assert_eq!((n, total), (18, 6));
    assert!(back.is_empty() && taken.is_empty());
    a.rx_publish();
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    let held = spare.len() + n + a.rx_posted();
    assert_eq!(held, 2 * QUEUE_SIZE, "no page lost");
}

/// Frames of several pages still on the TX ring as indirect descriptors (§2.7.5.3) when the
/// device is reset: `take_pages` finds every page, the ones only the indirect tables name
/// too, each once.
#[test]
fn take_pages_finds_the_pages_of_indirect_frames_in_flight() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, _db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    // The first frame turns chain mode on (general path, `tx_chain`), the next three leave
    // from the chain loop: all four as indirect descriptors; none is completed.
    for seed in [2u8, 4, 6, 8] {
        assert_eq!(da.deliver_rx_mrg(&long_frame(seed, 9014), 1), 1);
        let st = burst_of(&mut a, &mut b, &mut spare, 32, &mut back, &mut taken);
        assert_eq!(st.tx_frames, 1, "seed {seed}");
    }
    assert_eq!(b.tx_posted(), 12);
    assert_eq!(
        b.tx_free_slots(),
        QUEUE_SIZE - 4,
        "one indirect descriptor a frame (the general path's first too)"
    );
    assert!(b.tx_in_order(), "indirect frames keep the ring in order");
    assert!(a.reset_device() && b.reset_device());
    let mut got = Vec::new();
    // SAFETY: both devices were reset just above.
    unsafe {
        a.take_pages(|p| got.push(p));
        b.take_pages(|p| got.push(p));
    }
    got.extend_from_slice(&spare);
    got.sort_by_key(|p| p.0);
    let n = got.len();
    got.dedup();
    assert_eq!(got.len(), n, "no page twice");
    assert_eq!(n, 2 * QUEUE_SIZE, "every page found");
    assert!(back.is_empty() && taken.is_empty());
}

/// The boot log's feature list: the negotiated names joined by `|`, nothing for no bits, and
/// what a device really negotiates (the sim offers `VIRTIO_NET_F_MTU` too, as QEMU does with
/// `host_mtu=`).
#[test]
fn feature_names_are_the_negotiated_bits_joined_by_bars() {
    assert_eq!(FeatureNames(NetFeatures::empty()).to_string(), "");
    assert_eq!(
        FeatureNames(NetFeatures::MAC | NetFeatures::VERSION_1).to_string(),
        "MAC|VERSION_1"
    );
    let shared = SimShared::with_features(MAC, SIM_FEATURES);
    let (nic, _dev) = up(&shared);
    assert_eq!(
        FeatureNames(nic.features()).to_string(),
        "MTU|MAC|MRG_RXBUF|RING_INDIRECT_DESC|RING_EVENT_IDX|VERSION_1"
    );
}

/// Indirect frames completed into a `room` too small for them all (`tx_reclaim_into`'s
/// in-order loop for multi-page frames): the loop takes whole frames while four more pages
/// fit and leaves the rest in the used ring; a `room` smaller than a frame hands that frame
/// to the chains loop (pages past the room to `other`); a later call takes the rest. Every
/// page comes back exactly once, every descriptor is freed, the ring stays in in-order mode.
#[test]
fn indirect_frames_complete_into_a_small_room() {
    let (sa, sb) = (
        SimShared::with_features(MAC, SIM_FEATURES),
        SimShared::with_features([2, 0, 0, 0, 0, 2], SIM_FEATURES),
    );
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    // 3, 1, 1, 2, 2, 3, 4, 1 pages.
    let sizes = [
        9014usize,
        60,
        4084,
        4085,
        8180,
        8181,
        MAX_MULTI_FRAME_LEN,
        1514,
    ];
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    // Two bursts: the first frame of a chain spell leaves through the general path; the
    // second burst's frames are all the chain loop's indirect ones.
    for round in 0..2 {
        for (j, &len) in sizes.iter().enumerate() {
            let f = long_frame((round + j) as u8, len);
            assert_eq!(da.deliver_rx_mrg(&f, 1), 1);
        }
        jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
        assert_eq!(db.complete_tx(|_| ()), sizes.len());
        let mut room = vec![Pfn(0); QUEUE_SIZE];
        let (n, _) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |_, _| panic!("one owner"));
        spare.extend_from_slice(&room[..n]);
    }
    assert!(b.tx_in_order(), "indirect frames keep in-order mode");
    for (j, &len) in sizes.iter().enumerate() {
        assert_eq!(da.deliver_rx_mrg(&long_frame(j as u8, len), 1), 1);
    }
    jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
    assert_eq!(db.complete_tx(|_| ()), sizes.len());
    assert!(b.tx_in_order());
    let posted = b.tx_posted();
    assert_eq!(posted, 17);
    let mut got = Vec::new();
    // Room for 10: 3 + 1 + 1 + 2 pages while four more fit, then the second 2-page frame
    // (7 + 4 > 10) waits.
    let mut room = vec![Pfn(0); 10];
    let (n, total) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |_, _| panic!("room first"));
    assert_eq!((n, total), (7, 4));
    got.extend_from_slice(&room[..n]);
    assert_eq!(b.tx_posted(), posted - 7);
    // Room for 2: the 2-page frame fits no four-page room: the chains loop takes it.
    let mut room = vec![Pfn(0); 2];
    let mut others = Vec::new();
    let (n, _) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |p, tag| others.push((p, tag)));
    got.extend_from_slice(&room[..n]);
    assert!(
        others.iter().all(|&(_, tag)| tag == TxOwner::new(9)),
        "tags without the chain bit"
    );
    got.extend(others.iter().map(|&(p, _)| p));
    // The rest.
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let (n, _) = b.tx_reclaim_into(TxOwner::new(9), &mut room, |_, _| panic!("room for all"));
    got.extend_from_slice(&room[..n]);
    assert_eq!(got.len(), 17, "every page once: {got:?}");
    let mut uniq = got.clone();
    uniq.sort_by_key(|p| p.0);
    uniq.dedup();
    assert_eq!(uniq.len(), 17, "no page twice");
    assert_eq!(b.tx_posted(), 0);
    assert_eq!(b.tx_free_slots(), QUEUE_SIZE, "every descriptor freed");
    assert!(back.is_empty(), "nothing given back: {back:?}");
}

/// A hostile device moves `used->idx` two rings' worth past the three elements of a 9,014-byte
/// frame. The burst stops at that frame and goes on in the chain loop, which reads `used->idx`
/// again. The whole burst still takes at most a ring's worth of used elements. Before the fix,
/// the chain loop's new read ignored the three already taken: the `used_ring` fuzz target found
/// `buffers` 259 of a 256-entry ring (its input is seed `burst_past_ring`).
#[test]
fn a_burst_takes_at_most_a_ring_of_used_elements() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, _db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    assert_eq!(da.deliver_rx_mrg(&long_frame(2, 9014), 1), 1);
    // SAFETY: as `up`.
    let mut q = unsafe { DeviceQueue::new(&sa, SIM_RX_QUEUE) }.unwrap();
    let at = q.used_idx();
    assert_eq!(at, 3, "the frame's three buffers");
    q.set_used_idx(at.wrapping_add(2 * QUEUE_SIZE as u16));
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert!(st.buffers <= QUEUE_SIZE, "{st:?}");
    assert!(
        st.rx_frames >= 1 && st.tx_frames >= 1,
        "the frame went out: {st:?}"
    );
}

/// The device fills the next posted RX buffer and returns it: the virtio-net header with
/// `num_buffers = nb`, then `body` (`nb` `None`: `body` alone, a continuation, §5.1.6.4).
/// Returns the buffer's page.
fn rx_raw(shared: &SimShared, nb: Option<u16>, body: &[u8]) -> Pfn {
    // SAFETY: as `up`.
    let mut q = unsafe { DeviceQueue::new(shared, SIM_RX_QUEUE) }.unwrap();
    let head = q.take().expect("a posted RX buffer");
    let page = Pfn::from_addr(q.desc(head).unwrap().addr);
    let mut hdr = [0u8; NET_HDR_LEN];
    let n = match nb {
        Some(nb) => {
            hdr[10..12].copy_from_slice(&nb.to_le_bytes());
            q.write_chain(head, &[&hdr, body])
        }
        None => q.write_chain(head, &[body]),
    };
    q.give_back(head, n as u32);
    q.publish(false);
    page
}

/// A frame's first buffer is collected by a fused burst, its two continuations are taken by
/// `rx_burst` instead (which does not collect), and then the next frame's first buffer
/// arrives: the collected page of the broken frame goes back (`Continuation`), not lost.
/// Found by the `used_ring` fuzz target (seed `chain_left_by_rx_burst`): one page of 832 lost.
#[test]
fn a_collected_page_is_given_back_when_its_frame_cannot_complete() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, _da), (mut b, _db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    let first = rx_raw(&sa, Some(3), &[0x45; 64]);
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert_eq!((st.rx_frames, st.tx_frames), (0, 0), "collected, not whole");
    assert!(back.is_empty());
    rx_raw(&sa, None, &[1; 100]);
    rx_raw(&sa, None, &[2; 100]);
    let mut out = rx_bufs();
    assert_eq!(
        a.rx_burst(&mut out),
        2,
        "the continuations, through rx_burst"
    );
    rx_raw(&sa, Some(3), &[0x45; 64]);
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert_eq!(st.rx_frames, 0, "the new frame is collected: {st:?}");
    assert_eq!(
        back,
        vec![(first, GiveBack::Rx(RxStatus::Continuation))],
        "the broken frame's page"
    );
}

/// A frame's first buffer is collected by a fused burst and its continuations are taken by
/// `rx_burst`; later a one-page frame and then the head of a frame of more buffers than the
/// driver collects ([`MAX_FRAME_BUFFERS`] + 2) arrive with its continuations. The orphaned
/// page goes back (`Continuation`), the too-big frame's head (`TooBig`) and every one of its
/// continuations go back, and only the one-page frame is sent. Before the fix the orphaned
/// chain took the too-big frame's continuations as its own: it was sent as a frame of
/// [`MAX_FRAME_BUFFERS`] pages and the continuations past that were lost (found by the
/// `used_ring` fuzz target in CI: 6 pages of 832; seed `orphaned_chain_meets_too_big`).
#[test]
fn an_orphaned_chain_never_takes_the_next_frames_continuations() {
    use crate::virtio_net::MAX_FRAME_BUFFERS;
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, _da), (mut b, _db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx(&mut a);
    let (mut back, mut taken) = (Vec::new(), Vec::new());
    let first = rx_raw(&sa, Some(3), &[0x45; 64]);
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert_eq!((st.rx_frames, st.tx_frames), (0, 0), "collected, not whole");
    rx_raw(&sa, None, &[1; 100]);
    rx_raw(&sa, None, &[2; 100]);
    let mut out = rx_bufs();
    assert_eq!(
        a.rx_burst(&mut out),
        2,
        "the continuations, through rx_burst"
    );
    rx_raw(&sa, Some(1), &[0x46; 80]);
    let nb = MAX_FRAME_BUFFERS as u16 + 2;
    let head = rx_raw(&sa, Some(nb), &[0x45; 64]);
    let conts: Vec<Pfn> = (1..nb)
        .map(|i| rx_raw(&sa, None, &[i as u8; 100]))
        .collect();
    let st = cut_burst(
        &mut a,
        &mut b,
        &mut spare,
        usize::MAX,
        &mut back,
        &mut taken,
    );
    assert_eq!(st.tx_frames, 1, "only the one-page frame is sent: {st:?}");
    let mut want = vec![
        (first, GiveBack::Rx(RxStatus::Continuation)),
        (head, GiveBack::Rx(RxStatus::TooBig)),
    ];
    want.extend(
        conts
            .iter()
            .map(|&p| (p, GiveBack::Rx(RxStatus::Continuation))),
    );
    assert_eq!(back, want, "every page of both frames back, once");
    assert!(taken.is_empty());
}

// --- Big RX buffers (`VirtioNet::set_rx_buffer_pages`): one used element per frame. ---

/// Pages per big RX buffer in these tests: a 9,000-byte MTU's (`rx_buffer_pages_for_mtu`).
const BIG: usize = 3;

/// `nic` with RX buffers of [`BIG`] pages, its ring filled (`BIG * QUEUE_SIZE` pages) and
/// `QUEUE_SIZE` spares; the `Pages` frees them all on drop.
fn filled_rx_big(nic: &mut Nic<'_>) -> (Pages, Vec<Pfn>) {
    assert_eq!(crate::virtio_net::rx_buffer_pages_for_mtu(9000), BIG);
    nic.set_rx_buffer_pages(BIG)
        .expect("the sim device offers indirect descriptors");
    let pages = Pages::new((BIG + 1) * QUEUE_SIZE);
    // SAFETY: fresh pages, ours until they come back.
    let n = unsafe { nic.rx_refill(&pages.0[..BIG * QUEUE_SIZE]) };
    assert_eq!(n, BIG * QUEUE_SIZE, "every slot takes {BIG} pages");
    assert_eq!(nic.rx_free_slots(), 0);
    let spare = pages.0[BIG * QUEUE_SIZE..].to_vec();
    (pages, spare)
}

/// Frames of 1 to 3 pages (9,014 bytes: a 9,000-byte MTU, and the largest a 3-page buffer
/// holds, 12,276), mixed with small ones, each arrive as **one** used element of a big RX
/// buffer (`num_buffers` 1), reach the dataplane with the pages their length reaches
/// (`forward` for one, `forward_multi` for more), and leave from B's TX ring as one indirect
/// descriptor of the same pages, whole and in order; each slot is re-posted with fresh pages
/// only where the frame was (a small frame costs one page). Completions bring every page back;
/// none leaks.
#[test]
fn big_rx_buffers_take_each_frame_as_one_used_element() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx_big(&mut a);
    let sizes = [
        9014usize,
        60,
        4084,
        4085,
        8180,
        8181,
        3 * PAGE_SIZE - NET_HDR_LEN,
        1514,
    ];
    let pages_of = |l: usize| (NET_HDR_LEN + l).div_ceil(PAGE_SIZE);
    let mut room = vec![Pfn(0); QUEUE_SIZE];
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    for round in 0..100usize {
        let want = deliver_round(&mut da, round, &sizes);
        let spare_before = spare.len();
        seen.clear();
        let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
        let bytes: usize = sizes.iter().sum();
        let pages: usize = sizes.iter().map(|&l| pages_of(l)).sum();
        assert_eq!(
            st,
            BurstStats {
                buffers: sizes.len(),
                rx_frames: sizes.len(),
                rx_bytes: bytes as u64,
                tx_frames: sizes.len(),
                tx_bytes: bytes as u64,
            },
            "round {round}: one used element per frame"
        );
        let pages_per: Vec<usize> = seen.iter().map(|&(p, _)| p).collect();
        assert_eq!(pages_per, vec![3, 1, 1, 2, 2, 3, 3, 1], "round {round}");
        assert_eq!(
            spare_before - spare.len(),
            pages,
            "round {round}: a fresh page only where a frame was"
        );
        assert_eq!(
            a.rx_posted(),
            BIG * QUEUE_SIZE,
            "every slot re-posted whole"
        );
        let mut got = Vec::new();
        assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), sizes.len());
        assert!(
            got == want,
            "round {round}: frames arrive whole, rewritten, in order"
        );
        assert_eq!(b.tx_posted(), pages, "the TX ring holds every page");
        assert!(
            b.tx_in_order(),
            "one descriptor per frame: the ring stays in order"
        );
        let mut others = Vec::new();
        let (n, total) =
            b.tx_reclaim_into(TxOwner::new(9), &mut room, |p, tag| others.push((p, tag)));
        assert_eq!(total, sizes.len(), "one completion per frame");
        assert_eq!(n + others.len(), pages);
        spare.extend_from_slice(&room[..n]);
        spare.extend(others.iter().map(|&(p, _)| p));
        assert_eq!(b.tx_posted(), 0);
    }
    a.rx_publish();
    assert!(back.is_empty(), "nothing given back: {back:?}");
    assert_eq!(a.stats().bad_token + b.stats().bad_token, 0);
    assert_eq!(
        spare.len(),
        QUEUE_SIZE,
        "every page is a spare or on A's ring"
    );
    let mut all = spare.clone();
    a.reclaim(|p| all.push(p)).unwrap();
    assert_eq!(
        all.len(),
        (BIG + 1) * QUEUE_SIZE,
        "reclaim finds every page of every slot"
    );
    all.sort();
    all.dedup();
    assert_eq!(all.len(), (BIG + 1) * QUEUE_SIZE, "each page once");
}

/// With the pool dry, a big slot the burst cannot refill whole is released: a jumbo frame is
/// still forwarded (its pages are the frame's), a small frame's two untouched pages go back
/// to the pool (`Unused`), and the ring holds three pages fewer per released slot until
/// `rx_refill` posts the slot whole again.
#[test]
fn a_big_slot_no_pool_page_refills_is_released_whole() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, spare) = filled_rx_big(&mut a);
    let mut dry = Vec::new();
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    let jumbo = long_frame(7, 9014);
    assert_eq!(da.deliver_rx_mrg(&jumbo, 1), 1);
    assert_eq!(da.deliver_rx(&frame(3), 1), 1);
    let st = jumbo_burst(&mut a, &mut b, &mut dry, true, &mut back, &mut seen);
    assert_eq!(
        (st.buffers, st.rx_frames, st.tx_frames),
        (2, 2, 2),
        "{st:?}"
    );
    assert!(back.is_empty(), "{back:?}");
    assert_eq!(
        dry.len(),
        2,
        "the small frame's slot: its two untouched pages back"
    );
    assert_eq!(a.rx_free_slots(), 2);
    assert_eq!(a.rx_posted(), BIG * (QUEUE_SIZE - 2));
    let mut got = Vec::new();
    assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), 2);
    assert_eq!(got[0].len(), 9014);
    assert_eq!(&got[0][1..], &jumbo[1..]);
    // SAFETY: spare pages, ours.
    let n = unsafe { a.rx_refill(&spare[..2 * BIG + 1]) };
    assert_eq!(
        n,
        2 * BIG,
        "whole slots only: the odd page stays the caller's"
    );
    assert_eq!(a.rx_posted(), BIG * QUEUE_SIZE);
}

/// A frame larger than a big buffer (14,000 bytes: the device spreads it over two, with
/// `num_buffers` 2, §5.1.6.4) is dropped whole: the first buffer's pages as `TooBig` and
/// continuations, the second's first page as a continuation; nothing is sent and the frames
/// after it pass.
#[test]
fn a_frame_past_a_big_buffer_is_dropped_whole() {
    let (sa, sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let ((mut a, mut da), (mut b, _db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx_big(&mut a);
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    assert_eq!(da.deliver_rx_mrg(&long_frame(1, 14_000), 1), 1);
    assert_eq!(da.deliver_rx(&frame(2), 1), 1);
    let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
    assert_eq!(
        (st.buffers, st.rx_frames, st.tx_frames),
        (3, 1, 1),
        "{st:?}"
    );
    let why: Vec<GiveBack> = back.iter().map(|&(_, w)| w).collect();
    assert_eq!(
        why,
        vec![
            GiveBack::Rx(RxStatus::TooBig),
            GiveBack::Rx(RxStatus::Continuation),
            GiveBack::Rx(RxStatus::Continuation),
            GiveBack::Rx(RxStatus::Continuation),
        ]
    );
    assert_eq!(a.rx_posted(), BIG * QUEUE_SIZE, "every slot re-posted");
}

/// The non-fused `rx_burst` on big buffers: a jumbo frame comes out as its first page
/// (`TooBig`: this path does not collect) and two continuations, a small frame as `Ok`; with
/// no page to re-post, each slot is released and its untouched pages come out as `Unused`.
/// `rx_burst_refill` re-posts where it can.
#[test]
fn rx_burst_on_big_buffers_hands_out_every_page_once() {
    let (sa, _sb) = (SimShared::new(MAC), SimShared::new([2, 0, 0, 0, 0, 2]));
    let (mut a, mut da) = up(&sa);
    let (_pages, mut spare) = filled_rx_big(&mut a);
    assert_eq!(da.deliver_rx_mrg(&long_frame(1, 9014), 1), 1);
    assert_eq!(da.deliver_rx(&frame(2), 1), 1);
    let mut out = rx_bufs();
    let n = a.rx_burst(&mut out);
    let st: Vec<RxStatus> = out[..n].iter().map(|b| b.status).collect();
    assert_eq!(
        st,
        vec![
            RxStatus::TooBig,
            RxStatus::Continuation,
            RxStatus::Continuation,
            RxStatus::Ok,
            RxStatus::Unused,
            RxStatus::Unused,
        ]
    );
    assert_eq!(out[3].len, 60);
    let mut all: Vec<Pfn> = out[..n].iter().map(|b| b.pfn).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 6, "six distinct pages");
    assert_eq!(a.rx_posted(), BIG * (QUEUE_SIZE - 2));
    assert_eq!(da.deliver_rx_mrg(&long_frame(3, 9014), 1), 1);
    // SAFETY: spare pages, ours.
    let n = unsafe { a.rx_burst_refill(&mut out, || spare.pop()) };
    assert_eq!(n, 3, "the frame's three pages, its slot re-posted");
    assert_eq!(a.rx_posted(), BIG * (QUEUE_SIZE - 2));
}

/// `set_rx_buffer_pages` refuses a bad count, a ring that already holds buffers and a device
/// without `VIRTIO_F_INDIRECT_DESC`, and leaves one page per buffer then.
#[test]
fn big_buffers_need_indirect_descriptors_and_an_empty_ring() {
    use crate::virtio_net::RxBufferPagesError as E;
    let sa = SimShared::new(MAC);
    let (mut a, _da) = up(&sa);
    assert_eq!(a.set_rx_buffer_pages(0), Err(E::BadCount(0)));
    assert_eq!(a.set_rx_buffer_pages(5), Err(E::BadCount(5)));
    let (_pages, _spare) = filled_rx(&mut a);
    assert_eq!(a.set_rx_buffer_pages(3), Err(E::RingNotEmpty));
    assert_eq!(a.rx_buffer_pages(), 1);
    let sb = SimShared::with_features(
        MAC,
        SIM_FEATURES & !crate::virtio_net::NetFeatures::RING_INDIRECT_DESC.bits(),
    );
    let (mut b, _db) = up(&sb);
    assert_eq!(b.set_rx_buffer_pages(3), Err(E::NoIndirect));
    assert_eq!(b.rx_buffer_pages(), 1);
}

/// Big RX buffers forwarding to a TX ring without indirect tables (another device, without
/// `VIRTIO_F_INDIRECT_DESC`): every frame goes one at a time through the slow path, a jumbo
/// frame out as a descriptor chain of its pages, and every page comes back.
#[test]
fn big_rx_buffers_forward_to_a_tx_ring_without_tables() {
    let sa = SimShared::new(MAC);
    let sb = SimShared::with_features(
        [2, 0, 0, 0, 0, 2],
        SIM_FEATURES & !crate::virtio_net::NetFeatures::RING_INDIRECT_DESC.bits(),
    );
    let ((mut a, mut da), (mut b, mut db)) = (up(&sa), up(&sb));
    let (_pages, mut spare) = filled_rx_big(&mut a);
    let (mut back, mut seen) = (Vec::new(), Vec::new());
    for round in 0..20u8 {
        let (jumbo, small) = (long_frame(round, 9014), frame(round));
        assert_eq!(da.deliver_rx_mrg(&jumbo, 1), 1);
        assert_eq!(da.deliver_rx(&small, 1), 1);
        let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
        assert_eq!(
            (st.buffers, st.rx_frames, st.tx_frames),
            (2, 2, 2),
            "{st:?}"
        );
        let mut got = Vec::new();
        assert_eq!(db.complete_tx(|f| got.push(f.to_vec())), 2);
        assert_eq!((got[0].len(), &got[0][1..]), (9014, &jumbo[1..]));
        assert_eq!((got[1].len(), &got[1][1..]), (60, &small[1..]));
        let before = spare.len();
        let n = b.tx_reclaim(|p, tag| {
            assert_eq!(tag, TxOwner::new(9));
            spare.push(p);
        });
        assert_eq!(n, 2, "two completions");
        assert_eq!(
            spare.len() - before,
            4,
            "the jumbo frame's three pages, the small one's"
        );
    }
    assert!(back.is_empty(), "{back:?}");
    assert_eq!(spare.len(), QUEUE_SIZE);
    assert_eq!(a.rx_posted(), BIG * QUEUE_SIZE);
}

/// `rx_burst_refill` on big buffers with a small `out` (a small `burst=`): room for a slot's
/// pages takes an element, released whole when there is no room for a partial refill's worst
/// case; room for less takes nothing (the dataplane gives it room for two slots).
#[test]
fn rx_burst_on_big_buffers_with_little_room_still_takes_frames() {
    let sa = SimShared::new(MAC);
    let (mut a, mut da) = up(&sa);
    let (_pages, mut spare) = filled_rx_big(&mut a);
    assert_eq!(da.deliver_rx(&frame(1), 2), 2);
    let mut out = rx_bufs();
    // SAFETY: spare pages, ours.
    let n = unsafe { a.rx_burst_refill(&mut out[..BIG - 1], || spare.pop()) };
    assert_eq!(n, 0, "no room for a slot's pages");
    let before = spare.len();
    // SAFETY: as above.
    let n = unsafe { a.rx_burst_refill(&mut out[..BIG], || spare.pop()) };
    let st: Vec<RxStatus> = out[..n].iter().map(|b| b.status).collect();
    assert_eq!(st, vec![RxStatus::Ok, RxStatus::Unused, RxStatus::Unused]);
    assert_eq!(
        spare.len(),
        before,
        "no page taken: the slot released whole"
    );
    assert_eq!(a.rx_free_slots(), 1);
    // SAFETY: as above.
    let n = unsafe { a.rx_burst_refill(&mut out[..2 * BIG - 1], || spare.pop()) };
    assert_eq!(n, 1, "room for the worst case: refilled in place");
    assert_eq!(spare.len(), before - 1);
    assert_eq!(a.rx_free_slots(), 1);
}

/// Without `VIRTIO_NET_F_MRG_RXBUF` the driver ignores `num_buffers`: QEMU before 7.2.18 and
/// 10.0 leaves bytes 10..12 of the header as they were (VIRTIO 1.2 §5.1.6.4.1 says 1), so a page that last held
/// frame bytes reads as the head of a frame of many buffers. Played here by a device writing 7
/// there: with one-page buffers and with big ones, every frame is forwarded, none dropped, and
/// the frames after it are not taken for continuations.
#[test]
fn without_mergeable_buffers_num_buffers_is_ignored() {
    for big in [false, true] {
        let sa = SimShared::with_features(
            MAC,
            SIM_FEATURES & !crate::virtio_net::NetFeatures::MRG_RXBUF.bits(),
        );
        let sb = SimShared::new([2, 0, 0, 0, 0, 2]);
        let ((mut a, _da), (mut b, mut db)) = (up(&sa), up(&sb));
        let (_pages, mut spare) = if big {
            filled_rx_big(&mut a)
        } else {
            filled_rx(&mut a)
        };
        let (mut back, mut seen) = (Vec::new(), Vec::new());
        let jumbo = long_frame(3, if big { 9014 } else { 1500 });
        rx_raw(&sa, Some(7), &jumbo);
        rx_raw(&sa, Some(300), &frame(4));
        rx_raw(&sa, Some(2), &frame(5));
        let st = jumbo_burst(&mut a, &mut b, &mut spare, true, &mut back, &mut seen);
        assert_eq!(
            (st.buffers, st.rx_frames, st.tx_frames),
            (3, 3, 3),
            "big {big}: {st:?}"
        );
        assert!(back.is_empty(), "big {big}: {back:?}");
        let mut got = Vec::new();
        assert_eq!(db.complete_tx(|f| got.push(f.len())), 3);
        assert_eq!(got, vec![jumbo.len(), 60, 60], "big {big}");
    }
}
