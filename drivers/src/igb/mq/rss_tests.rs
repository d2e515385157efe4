//! Host tests of the 82576's queue pairs with RSS on the simulated NIC ([`crate::sim::dd`],
//! which hashes and steers as QEMU's model does): ports brought up with 2 and 4 queue pairs by
//! [`finish_queues`] (the kernel's set-up code), frames of 40 flows (TCP and UDP over IPv4 and
//! IPv6) delivered interleaved, and each flow's frames found on the queue the test computes from
//! the key and the redirection table with a Toeplitz hash of its own ([`toeplitz`], checked
//! against Microsoft's verification vectors), in order; forwarded by each queue pair onto the
//! other port's queue pair of the same number; frames dropped by a queue without descriptors or
//! disabled, counted; every page back at teardown.

use super::*;
use crate::e1000e::RxFilter;
use crate::igb::start;
use crate::nic::{ForwardOps, GiveBack, MultiFrame, Nic, RxBuf, RxStatus, RxVerdict, TxOwner};
use crate::sim::dd::rss::tests::{ipv4_frame, ipv6_frame, MICROSOFT_KEY, V4, V6};
use crate::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
use crate::sim::HostHal;
use mm::Pfn;
use virtio_drivers::{BufferDirection, Hal};

extern crate std;
use std::boxed::Box;
use std::collections::BTreeMap;
use std::vec::Vec;

const L2: IgbConfig = IgbConfig {
    filter: RxFilter::Promiscuous,
    max_frame: 1514,
    multicast: [None; crate::e1000e::MAX_MULTICAST],
    link_local_group: false,
};

/// The test's own Toeplitz hash (not the simulated NIC's, [`crate::sim::dd::rss::toeplitz`]):
/// the key read as one 320-bit number, input bit `i` (most significant first) XORs in key bits
/// `i..i + 32`, taken from the 64-bit big-endian window of key bytes `i / 8 ..`.
fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let mut h = 0;
    for i in 0..8 * input.len() {
        if input[i / 8] << (i % 8) & 0x80 != 0 {
            let mut w = [0u8; 8];
            for (k, b) in w.iter_mut().enumerate() {
                *b = key.get(i / 8 + k).copied().unwrap_or(0);
            }
            h ^= (u64::from_be_bytes(w) << (i % 8) >> 32) as u32;
        }
    }
    h
}

/// The hash input of a flow: source and destination addresses, then the ports when `ports`.
fn input(src: &[u8], dst: &[u8], ports: Option<(u16, u16)>) -> Vec<u8> {
    let mut b = [src, dst].concat();
    if let Some((s, d)) = ports {
        b.extend_from_slice(&s.to_be_bytes());
        b.extend_from_slice(&d.to_be_bytes());
    }
    b
}

#[test]
fn the_tests_toeplitz_matches_microsofts_verification_vectors() {
    /// Each row's two hashes, with ports and of the addresses only.
    fn check<A: AsRef<[u8]>>(rows: &[netstack::rss::vectors::Row<A>]) {
        for (dst, dport, src, sport, with_ports, addrs) in rows {
            let (src, dst) = (src.as_ref(), dst.as_ref());
            let k = &MICROSOFT_KEY;
            let hashed = toeplitz(k, &input(src, dst, Some((*sport, *dport))));
            assert_eq!(hashed, *with_ports);
            assert_eq!(toeplitz(k, &input(src, dst, None)), *addrs);
        }
    }
    check(&V4);
    check(&V6);
}

/// One flow: its frame (the last byte replaced by a sequence number per frame) and the queue
/// the test computes for it.
struct Flow {
    frame: Vec<u8>,
    queue: usize,
}

/// 40 flows: 12 TCP and 12 UDP over IPv4 (hashed with ports), 8 UDP over IPv6 (with ports), 8
/// TCP over IPv6 (addresses only: QEMU's model reads TCP/IPv6 from `MRQC` bit 18, which Gannet
/// does not set; see [`MRQC_RSS_FIELDS`]); each one's queue from `key` and `reta`.
fn flows(key: &[u8; 40], reta: &[u8; 128]) -> Vec<Flow> {
    let queue = |h: u32| usize::from(reta[(h & 0x7F) as usize] & 0x0F);
    let mut out = Vec::new();
    for f in 0..24u16 {
        let (src, dst) = ([10, 0, (f % 3) as u8, 1], [10, 1, 0, (f * 7) as u8]);
        let (sp, dp) = (20000 + 13 * f, 80 + f % 5);
        let proto = if f < 12 { 6 } else { 17 };
        let frame = ipv4_frame(proto, src, dst, sp, dp, 18, false);
        let h = toeplitz(key, &input(&src, &dst, Some((sp, dp))));
        out.push(Flow {
            frame,
            queue: queue(h),
        });
    }
    for f in 0..16u16 {
        let mut src = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let mut dst = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        src[15] = 2 + f as u8;
        dst[14] = (f * 5) as u8;
        let (sp, dp) = (40000 + 3 * f, 53);
        let (frame, ports) = if f < 8 {
            (ipv6_frame(17, src, dst, sp, dp, 10), Some((sp, dp)))
        } else {
            (ipv6_frame(6, src, dst, sp, dp, 10), None)
        };
        let h = toeplitz(key, &input(&src, &dst, ports));
        out.push(Flow {
            frame,
            queue: queue(h),
        });
    }
    out
}

/// A redirection table over `queues` queues that is not round-robin: entry `i` holds
/// `(i * 7 + i / 16) % queues`, so a wrong index into it shows.
fn reta(queues: usize) -> [u8; 128] {
    core::array::from_fn(|i| ((i * 7 + i / 16) % queues) as u8)
}

/// A simulated 82576 brought up with `queues` queue pairs by [`finish_queues`] (Microsoft's key,
/// [`reta`]), and its player.
fn port(
    mac: u8,
    queues: usize,
) -> (
    Vec<IgbQueue<HostHal, SimDdRegs<'static>>>,
    SimDdDevice<'static>,
    Rss,
) {
    let s: &'static SimDdShared = Box::leak(Box::new(SimDdShared::new([2, 0, 0, 0, 0, mac])));
    let t = core::cell::Cell::new(0u64);
    let clock = || {
        t.set(t.get() + 100);
        t.get()
    };
    let rss = Rss {
        queues,
        key: MICROSOFT_KEY,
        reta: reta(queues),
    };
    let st = start(SimDdRegs(s), &L2, &clock).expect("start");
    let qs = finish_queues::<HostHal, _>(st, &L2, &rss, &clock).expect("bring-up");
    // SAFETY: HostHal memory is identity-mapped and outlives the player in these tests.
    (
        qs.into_iter().collect(),
        unsafe { SimDdDevice::new(s) },
        rss,
    )
}

/// `n` fresh HostHal pages (leaked: the tests count them back instead of freeing them).
fn pages(n: usize) -> Vec<Pfn> {
    (0..n)
        .map(|_| Pfn::from_addr(HostHal::dma_alloc(1, BufferDirection::Both).0))
        .collect()
}

/// Which flow and sequence number `frame` is (its last byte the sequence number).
fn which(by_frame: &BTreeMap<Vec<u8>, usize>, frame: &[u8]) -> (usize, u8) {
    let (&seq, head) = frame.split_last().expect("a frame");
    let flow = *by_frame.get(head).expect("a frame of one of the flows");
    (flow, seq)
}

/// Every page of `qs` back (queues 1.. disabled, then the port reset by queue 0), added to
/// `into`.
fn teardown(qs: &mut [IgbQueue<HostHal, SimDdRegs<'static>>], into: &mut Vec<Pfn>) {
    for q in qs.iter_mut().rev() {
        q.reset_device();
    }
    for q in qs.iter_mut() {
        // SAFETY: every queue is disabled and the port reset just above.
        unsafe { q.take_pages(&mut |p| into.push(p)) };
    }
}

#[test]
fn each_flow_lands_in_order_on_the_queue_its_hash_picks_with_2_and_4_queues() {
    for queues in [2, 4] {
        let (mut qs, mut dev, rss) = port(1, queues);
        let flows = flows(&rss.key, &rss.reta);
        let by_frame: BTreeMap<Vec<u8>, usize> = flows
            .iter()
            .enumerate()
            .map(|(i, f)| (f.frame[..f.frame.len() - 1].to_vec(), i))
            .collect();
        assert_eq!(by_frame.len(), 40, "40 distinct flows");
        let per_queue: Vec<usize> = (0..queues)
            .map(|q| flows.iter().filter(|f| f.queue == q).count())
            .collect();
        assert!(
            per_queue.iter().all(|&n| n > 0),
            "{queues} queues: {per_queue:?}"
        );
        let all = pages(200 * queues);
        for (q, nic) in qs.iter_mut().enumerate() {
            // SAFETY: fresh pages, ours until they come back.
            assert_eq!(unsafe { nic.rx_refill(&all[200 * q..200 * (q + 1)]) }, 200);
        }
        // Four rounds of one frame per flow, interleaved: 160 frames.
        for seq in 0..4u8 {
            for f in &flows {
                let mut fr = f.frame.clone();
                *fr.last_mut().unwrap() = seq;
                let (q, info) = dev.rss_of(&fr).expect("RSS on");
                assert_eq!(q, f.queue, "the device's queue is the test's");
                assert_ne!(info.hash, 0);
                assert_eq!(dev.deliver_rx(&fr, 1), 1);
            }
        }
        let mut got = Vec::new();
        let mut next = [0u8; 40];
        for (q, nic) in qs.iter_mut().enumerate() {
            let mut out = [RxBuf {
                pfn: Pfn(0),
                len: 0,
                status: RxStatus::Unused,
            }; 256];
            let n = nic.rx_burst(&mut out);
            assert_eq!(n, 4 * per_queue[q], "queue {q} of {queues}");
            for b in &out[..n] {
                assert_eq!(b.status, RxStatus::Ok);
                // SAFETY: DD was set: the page is ours, the frame at offset 0.
                let fr = unsafe {
                    core::slice::from_raw_parts(b.pfn.addr() as usize as *const u8, b.len)
                };
                let (flow, seq) = which(&by_frame, fr);
                assert_eq!(flows[flow].queue, q, "flow {flow} on queue {q}");
                assert_eq!(seq, next[flow], "flow {flow}'s frames in order");
                next[flow] += 1;
                got.push(b.pfn);
            }
        }
        assert!(next.iter().all(|&n| n == 4));
        assert_eq!((0..queues).map(|q| dev.dropped(q)).sum::<u64>(), 0);
        teardown(&mut qs, &mut got);
        got.sort();
        got.dedup();
        assert_eq!(
            got.len(),
            all.len(),
            "every page back once ({queues} queues)"
        );
    }
}

/// The dataplane's side of a burst: fresh pages from `spare`, every frame forwarded as is.
struct Ops<'a> {
    spare: &'a mut Vec<Pfn>,
}

impl ForwardOps for Ops<'_> {
    fn rx_page(&mut self) -> Option<Pfn> {
        self.spare.pop()
    }
    fn rx_page_cached(&mut self) -> Option<Pfn> {
        None
    }
    fn forward(&mut self, _pfn: Pfn, _frame: &mut [u8]) -> RxVerdict {
        RxVerdict::Forward
    }
    fn forward_multi(&mut self, _frame: MultiFrame<'_>) -> RxVerdict {
        RxVerdict::Forward
    }
    fn give_back(&mut self, _pfn: Pfn, why: GiveBack) {
        panic!("nothing is given back here: {why:?}");
    }
}

#[test]
fn each_queue_pair_forwards_its_flows_onto_the_other_ports_queue_of_the_same_number() {
    for queues in [2, 4] {
        let (mut a, mut ad, rss) = port(3, queues);
        let (mut b, mut bd, _) = port(4, queues);
        let flows = flows(&rss.key, &rss.reta);
        let by_frame: BTreeMap<Vec<u8>, usize> = flows
            .iter()
            .enumerate()
            .map(|(i, f)| (f.frame[..f.frame.len() - 1].to_vec(), i))
            .collect();
        let all = pages(150 * queues);
        for (q, nic) in a.iter_mut().enumerate() {
            // SAFETY: fresh pages, ours until they come back.
            unsafe { nic.rx_refill(&all[100 * q..100 * (q + 1)]) };
        }
        let mut spare = all[100 * queues..].to_vec();
        let mut next = [0u8; 40];
        for seq in 0..2u8 {
            for f in &flows {
                let mut fr = f.frame.clone();
                *fr.last_mut().unwrap() = seq;
                assert_eq!(ad.deliver_rx(&fr, 1), 1);
            }
            for q in 0..queues {
                let spare_r = &mut spare;
                let ops = move || {
                    let spare = { spare_r };
                    Ops { spare }
                };
                // SAFETY: fresh pages from `spare`; forwarded ones stay `b[q]`'s until sent.
                let st = unsafe { a[q].forward_burst(&mut b[q], 64, TxOwner::new(1), ops) };
                assert_eq!(st.tx_frames, flows.iter().filter(|f| f.queue == q).count());
                let sent = bd.complete_tx_on(q, |fr| {
                    let (flow, s) = which(&by_frame, fr);
                    assert_eq!(flows[flow].queue, q, "flow {flow} sent on queue {q}");
                    assert_eq!(s, next[flow], "flow {flow}'s frames in order");
                    next[flow] += 1;
                });
                assert_eq!(sent, st.tx_frames);
                b[q].tx_reclaim(|p, _| spare.push(p));
            }
        }
        assert!(next.iter().all(|&n| n == 2));
        let mut back = spare;
        teardown(&mut a, &mut back);
        teardown(&mut b, &mut back);
        back.sort();
        back.dedup();
        assert_eq!(
            back.len(),
            all.len(),
            "every page back once ({queues} queues)"
        );
    }
}

#[test]
fn a_queue_without_descriptors_or_disabled_drops_its_flows_and_the_nic_counts_them() {
    let (mut qs, mut dev, rss) = port(5, 2);
    let flows = flows(&rss.key, &rss.reta);
    let all = pages(100);
    // Queue 0 gets pages; queue 1 none.
    // SAFETY: fresh pages, ours until they come back.
    assert_eq!(unsafe { qs[0].rx_refill(&all) }, 100);
    let on = |q: usize| flows.iter().filter(|f| f.queue == q).count();
    for f in &flows {
        dev.deliver_rx(&f.frame, 1);
    }
    assert_eq!((dev.dropped(0), dev.dropped(1)), (0, on(1) as u64));
    assert_eq!(dev.delivered(), on(0) as u64);
    // Queue 1 disabled (its teardown): its flows still dropped, queue 0's still delivered.
    assert!(!qs[1].reset_device());
    let mut out = [RxBuf {
        pfn: Pfn(0),
        len: 0,
        status: RxStatus::Unused,
    }; 64];
    let n = qs[0].rx_burst(&mut out);
    assert_eq!(n, on(0));
    let mut back: Vec<Pfn> = out[..n].iter().map(|b| b.pfn).collect();
    // SAFETY: the pages just taken back, ours.
    unsafe { qs[0].rx_refill(&back) };
    back.clear();
    for f in &flows {
        dev.deliver_rx(&f.frame, 2);
    }
    assert_eq!(dev.dropped(1), 3 * on(1) as u64);
    assert_eq!(dev.dropped(0), 0);
    assert_eq!(dev.delivered(), 3 * on(0) as u64);
    teardown(&mut qs, &mut back);
    back.sort();
    back.dedup();
    assert_eq!(back.len(), 100, "every page back once");
}
