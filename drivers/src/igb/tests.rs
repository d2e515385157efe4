//! Host tests of the 82576 bring-up and its advanced descriptors on the simulated NIC
//! ([`crate::sim::dd`], which writes advanced descriptors once `SRRCTL.DESCTYPE` says so): the
//! registers the bring-up leaves, io/l2 forwarding through a pair of igb ports byte for byte
//! with every page back, frames of several descriptors, and the named failures (no link, a
//! queue that does not enable, a NIC that never sets DD).

use super::*;
use crate::ddnic::{RCTL, SRRCTL, TXDCTL};
use crate::e1000e::{
    LINK_TIMEOUT_MS, MAX_MULTICAST, RCTL_BAM, RCTL_LPE, RCTL_MPE, RCTL_SECRC, RCTL_UPE, STATUS,
};
use crate::nic::{ForwardOps, GiveBack, MultiFrame, Nic, RxBuf, RxStatus, RxVerdict, TxOwner};
use crate::sim::dd::{SimDdDevice, SimDdRegs, SimDdShared};
use crate::sim::{HostHal, HostSimIgb};
use mm::Pfn;
use virtio_drivers::{BufferDirection, Hal};

extern crate std;
use std::boxed::Box;
use std::vec::Vec;

/// A clock that moves 100 µs per reading.
fn clock() -> impl Fn() -> u64 {
    let t = core::cell::Cell::new(0u64);
    move || {
        t.set(t.get() + 100);
        t.get()
    }
}

const L2: IgbConfig = IgbConfig {
    filter: RxFilter::Promiscuous,
    max_frame: 1514,
    multicast: [None; MAX_MULTICAST],
    link_local_group: false,
};

/// A simulated 82576 (leaked: the contract wants `'static` handles).
fn shared(mac: [u8; 6]) -> &'static SimDdShared {
    Box::leak(Box::new(SimDdShared::new(mac)))
}

/// An igb port brought up on a simulated NIC, and its player.
fn igb(mac: [u8; 6], cfg: &IgbConfig) -> (HostSimIgb<'static>, SimDdDevice<'static>) {
    let s = shared(mac);
    let nic = bring_up::<HostHal, _>(SimDdRegs(s), cfg, clock()).expect("bring-up");
    // SAFETY: HostHal memory is identity-mapped and outlives the player in these tests.
    (nic, unsafe { SimDdDevice::new(s) })
}

/// `n` fresh HostHal pages (leaked: the tests count them back instead of freeing them).
fn pages(n: usize) -> Vec<Pfn> {
    (0..n)
        .map(|_| Pfn::from_addr(HostHal::dma_alloc(1, BufferDirection::Both).0))
        .collect()
}

/// A `len`-byte frame whose bytes start at `seed`.
fn frame(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[test]
fn bring_up_sets_advanced_one_buffer_rings_promiscuous_crc_stripped_no_flow_control() {
    let s = shared([2, 0, 0, 0, 0, 7]);
    let nic = bring_up::<HostHal, _>(SimDdRegs(s), &L2, clock()).expect("bring-up");
    assert_eq!(nic.mac(), [2, 0, 0, 0, 0, 7]);
    // 4 KiB buffers, advanced one-buffer descriptors, drop when out of descriptors.
    assert_eq!(
        s.get(SRRCTL),
        4 | SRRCTL_DESCTYPE_ADV_ONEBUF | SRRCTL_DROP_EN
    );
    assert_eq!(s.get(RXDCTL) & XDCTL_ENABLE, XDCTL_ENABLE);
    assert_eq!(s.get(TXDCTL) & XDCTL_ENABLE, XDCTL_ENABLE);
    let rctl = s.get(RCTL);
    for (bit, name) in [
        (RCTL_UPE, "UPE"),
        (RCTL_MPE, "MPE"),
        (RCTL_BAM, "BAM"),
        (RCTL_SECRC, "SECRC"),
    ] {
        assert_ne!(rctl & bit, 0, "RCTL.{name} in l2 mode: {rctl:#x}");
    }
    assert_eq!(rctl & RCTL_LPE, 0, "no long packets at MTU 1500");
    // The simulated register file keeps CTRL (flow control and VLAN mode cleared, link set).
    let ctrl = s.get(crate::ddnic::CTRL);
    assert_eq!(ctrl & (CTRL_RFCE | CTRL_TFCE | CTRL_VME), 0, "{ctrl:#x}");
    // Router mode: no promiscuity; MTU 9000: long packets.
    let s = shared([2, 0, 0, 0, 0, 8]);
    let cfg = IgbConfig {
        filter: RxFilter::Router,
        max_frame: 9014,
        multicast: [None; MAX_MULTICAST],
        link_local_group: false,
    };
    let _nic = bring_up::<HostHal, _>(SimDdRegs(s), &cfg, clock()).expect("bring-up");
    let rctl = s.get(RCTL);
    assert_eq!(rctl & (RCTL_UPE | RCTL_MPE), 0, "{rctl:#x}");
    assert_ne!(rctl & RCTL_LPE, 0, "{rctl:#x}");
}

#[test]
fn a_link_that_never_comes_up_is_a_named_timeout_and_the_nic_is_left_reset() {
    let s = shared([2, 0, 0, 0, 0, 9]);
    s.set_link(false);
    let e = bring_up::<HostHal, _>(SimDdRegs(s), &L2, clock())
        .err()
        .expect("no link");
    let IgbError::Family(E1000eError::LinkTimeout { ms }) = e else {
        panic!("{e:?}")
    };
    assert!(
        (LINK_TIMEOUT_MS..LINK_TIMEOUT_MS + 10).contains(&ms),
        "{ms}"
    );
    let msg = std::format!("{e}");
    assert!(msg.starts_with("igb: link down"), "{msg}");
    assert!(s.is_reset());
    assert_eq!(s.get(STATUS), 0);
}

/// A register file whose `RXDCTL.ENABLE` never reads back (the rest: the simulated NIC).
struct NoQueue(SimDdRegs<'static>);

impl DdRegs for NoQueue {
    fn read(&self, reg: usize) -> u32 {
        match reg {
            RXDCTL => 0,
            _ => self.0.read(reg),
        }
    }
    fn write(&self, reg: usize, val: u32) {
        self.0.write(reg, val)
    }
}

#[test]
fn a_queue_that_does_not_enable_is_a_named_timeout_and_the_nic_is_left_reset() {
    let s = shared([2, 0, 0, 0, 0, 10]);
    let e = bring_up::<HostHal, _>(NoQueue(SimDdRegs(s)), &L2, clock())
        .err()
        .expect("queue never enabled");
    assert_eq!(e, IgbError::QueueTimeout { queue: 0 });
    assert!(std::format!("{e}").contains("RXDCTL0.ENABLE"));
    assert!(
        s.is_reset(),
        "the failed bring-up's rings are gone, the NIC reset"
    );
}

/// The dataplane's side of a burst: fresh pages from `spare`, every frame forwarded as is,
/// pages handed back kept.
struct Ops<'a> {
    spare: &'a mut Vec<Pfn>,
    back: &'a mut Vec<(Pfn, GiveBack)>,
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
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        self.back.push((pfn, why));
    }
}

/// A burst's `(rx_frames, tx_frames)`, the pages handed back, the frames sent.
type Forwarded = ((usize, usize), Vec<(Pfn, GiveBack)>, Vec<Vec<u8>>);

/// `frames` delivered on `a`, forwarded by the fused burst onto `b` (one `TDT` write), sent
/// by `b`'s player byte for byte; returns the burst's `(rx_frames, tx_frames)` and what was
/// handed back.
fn forward(
    a: &mut HostSimIgb<'static>,
    ad: &mut SimDdDevice<'static>,
    b: &mut HostSimIgb<'static>,
    bd: &mut SimDdDevice<'static>,
    f: &[u8],
    n: usize,
    spare: &mut Vec<Pfn>,
) -> Forwarded {
    assert_eq!(ad.deliver_rx(f, n), n);
    let mut back = Vec::new();
    let (spare_r, back_r) = (spare, &mut back);
    let ops = move || {
        let (spare, back) = ({ spare_r }, { back_r });
        Ops { spare, back }
    };
    // SAFETY: fresh pages from `spare` (ours), forwarded ones stay `b`'s until completed.
    let st = unsafe { a.forward_burst(b, 64, TxOwner::new(1), ops) };
    let mut out = Vec::new();
    bd.complete_tx(|x| out.push(x.to_vec()));
    ((st.rx_frames, st.tx_frames), back, out)
}

#[test]
fn a_pair_of_igb_ports_forwards_both_ways_byte_for_byte_and_every_page_comes_back() {
    let (mut a, mut ad) = igb([2, 0, 0, 0, 0, 1], &L2);
    let (mut b, mut bd) = igb([2, 0, 0, 0, 0, 2], &L2);
    let p = pages(600);
    // SAFETY: fresh pages, ours until they come back.
    let posted = unsafe { a.rx_refill(&p[..255]) + b.rx_refill(&p[255..510]) };
    assert_eq!(posted, 510);
    let mut spare = p[510..].to_vec();
    let (tail_a, tail_b) = (a.stats().kicks_rx, b.stats().kicks_rx);
    for round in 0..20u8 {
        let f = frame(round, 60 + usize::from(round));
        let (st, back, out) = forward(&mut a, &mut ad, &mut b, &mut bd, &f, 16, &mut spare);
        assert_eq!(st, (16, 16), "a -> b round {round}");
        assert!(back.is_empty() && out.iter().all(|x| *x == f));
        let (st, back, out) = forward(&mut b, &mut bd, &mut a, &mut ad, &f, 16, &mut spare);
        assert_eq!(st, (16, 16), "b -> a round {round}");
        assert!(back.is_empty() && out.iter().all(|x| *x == f));
        // TX completion by DD bits: the sent pages back to the spare pool.
        a.tx_reclaim(|pfn, _| spare.push(pfn));
        b.tx_reclaim(|pfn, _| spare.push(pfn));
    }
    // 320 frames each way: one RDT write per 32 re-posts, one TDT write per burst.
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.kicks_rx - tail_a, 320 / 32);
    assert_eq!(sb.kicks_rx - tail_b, 320 / 32);
    assert_eq!((sa.kicks_tx, sb.kicks_tx), (20, 20));
    assert_eq!(sa.rx_errors + sb.rx_errors, 0);
    // Teardown: every page once.
    assert!(a.reset_device() && b.reset_device());
    let mut all = spare.clone();
    // SAFETY: both NICs were reset just above.
    unsafe {
        a.take_pages(&mut |p| all.push(p));
        b.take_pages(&mut |p| all.push(p));
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 600, "every page back, once");
}

#[test]
fn a_jumbo_frame_of_three_descriptors_is_forwarded_whole_zero_copy() {
    let jumbo = IgbConfig {
        filter: RxFilter::Promiscuous,
        max_frame: 9014,
        multicast: [None; MAX_MULTICAST],
        link_local_group: false,
    };
    let (mut a, mut ad) = igb([2, 0, 0, 0, 0, 3], &jumbo);
    let (mut b, mut bd) = igb([2, 0, 0, 0, 0, 4], &jumbo);
    let p = pages(300);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { a.rx_refill(&p[..200]) };
    let mut spare = p[200..].to_vec();
    let f = frame(5, 9014);
    let (st, back, out) = forward(&mut a, &mut ad, &mut b, &mut bd, &f, 4, &mut spare);
    assert_eq!(st, (4, 4));
    assert!(back.is_empty(), "{back:?}");
    assert_eq!(out.len(), 4);
    assert!(
        out.iter().all(|x| *x == f),
        "each frame whole, byte for byte"
    );
    assert_eq!(
        b.tx_posted(),
        12,
        "three TX descriptors per frame, the RX pages"
    );
}

#[test]
fn a_device_that_never_sets_dd_gives_nothing_and_no_register_read() {
    let s = shared([2, 0, 0, 0, 0, 5]);
    let mut a = bring_up::<HostHal, _>(SimDdRegs(s), &L2, clock()).expect("bring-up");
    let (mut b, _bd) = igb([2, 0, 0, 0, 0, 6], &L2);
    let p = pages(100);
    // SAFETY: fresh pages, ours until they come back.
    unsafe { a.rx_refill(&p) };
    let reads = s.reads();
    let mut spare = Vec::new();
    let mut back = Vec::new();
    for _ in 0..1000 {
        let (spare_r, back_r) = (&mut spare, &mut back);
        let ops = move || {
            let (spare, back) = ({ spare_r }, { back_r });
            Ops { spare, back }
        };
        // SAFETY: no page changes hands (nothing completes).
        let st = unsafe { a.forward_burst(&mut b, 64, TxOwner::new(1), ops) };
        assert_eq!((st.buffers, st.rx_frames), (0, 0));
    }
    let mut out = [RxBuf {
        pfn: Pfn(0),
        len: 0,
        status: RxStatus::Unused,
    }; 4];
    assert_eq!(a.rx_burst(&mut out), 0);
    assert!(!a.rx_ready());
    assert_eq!(s.reads(), reads, "no register read while polling");
    assert!(a.reset_device());
    let mut n = 0;
    // SAFETY: reset just above.
    unsafe { a.take_pages(&mut |_| n += 1) };
    assert_eq!(n, 100, "every posted page back");
}

#[test]
fn the_staged_path_reads_advanced_write_backs_ok_too_big_and_continuations() {
    let (mut a, mut ad) = igb([2, 0, 0, 0, 0, 11], &L2);
    let p = pages(64);
    // SAFETY: fresh pages, ours until they come back.
    assert_eq!(unsafe { a.rx_refill(&p) }, 64);
    assert_eq!(ad.deliver_rx(&frame(3, 1514), 2), 2);
    // 5,000 bytes: two buffers, `EOP` on the second; this path does not collect.
    assert_eq!(ad.deliver_rx(&frame(4, 5000), 1), 1);
    let mut out = [RxBuf {
        pfn: Pfn(0),
        len: 0,
        status: RxStatus::Unused,
    }; 8];
    assert_eq!(a.rx_burst(&mut out), 4);
    assert_eq!((out[0].len, out[0].status), (1514, RxStatus::Ok));
    assert_eq!((out[1].len, out[1].status), (1514, RxStatus::Ok));
    assert_eq!(out[2].status, RxStatus::TooBig);
    assert_eq!(out[3].status, RxStatus::Continuation);
    // SAFETY: DD was set: the page is ours, the frame at offset 0.
    let got = unsafe { core::slice::from_raw_parts(out[0].pfn.addr() as usize as *const u8, 1514) };
    assert_eq!(got, &frame(3, 1514)[..]);
}

#[test]
fn other_igb_family_functions_are_named_and_the_82576_is_not_among_them() {
    assert_eq!(unbound_family_name(0x1533), Some("I210 copper"));
    assert_eq!(unbound_family_name(0x1539), Some("I211 copper"));
    assert_eq!(unbound_family_name(0x1521), Some("I350 copper"));
    assert_eq!(unbound_family_name(DEVICE_82576), None, "bound, not listed");
    assert_eq!(unbound_family_name(0x10D3), None, "the 82574L is e1000e's");
    let mut ids: Vec<u16> = IGB_FAMILY_UNBOUND.iter().map(|&(id, _)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), IGB_FAMILY_UNBOUND.len(), "no ID twice");
}
