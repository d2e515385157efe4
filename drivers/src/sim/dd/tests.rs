//! Host tests of the DD-bit driver ([`crate::ddnic::DdNic`]) on the simulated NIC, alone and
//! paired with the virtio-net driver: port pairs of two driver types through the contract's
//! fused burst ([`Nic::forward_burst`]), frames checked byte for byte, every page back.

use super::*;
use crate::nic::TxOwner;
use crate::nic::{ForwardOps, GiveBack, Nic, RxBuf, RxStatus, RxVerdict, TxBuf, TxDone};
use crate::sim::{HostHal, HostSimDd, HostSimNet, SimDevice, SimShared, SimTransport};
use mm::Pfn;
use virtio_drivers::{BufferDirection, Hal};

extern crate std;
use std::boxed::Box;
use std::vec;
use std::vec::Vec;

/// A DD NIC and its player on a leaked register file (the contract wants `'static` handles).
fn dd(mac: [u8; 6]) -> (HostSimDd<'static>, SimDdDevice<'static>) {
    let shared: &'static SimDdShared = Box::leak(Box::new(SimDdShared::new(mac)));
    let nic = HostSimDd::new(SimDdRegs(shared)).expect("rings");
    // SAFETY: HostHal memory is identity-mapped and outlives the player in these tests.
    (nic, unsafe { SimDdDevice::new(shared) })
}

/// A virtio-net driver and its device player on a leaked simulated device.
fn virtio(mac: [u8; 6]) -> (HostSimNet<'static>, SimDevice<'static>) {
    let shared: &'static SimShared = Box::leak(Box::new(SimShared::new(mac)));
    let nic = HostSimNet::new(SimTransport::new(shared)).expect("sim init");
    // SAFETY: as `dd`.
    (nic, unsafe { SimDevice::new(shared) })
}

/// `n` fresh HostHal pages (leaked: the tests count them back instead of freeing them).
fn pages(n: usize) -> Vec<Pfn> {
    (0..n)
        .map(|_| Pfn::from_addr(HostHal::dma_alloc(1, BufferDirection::Both).0))
        .collect()
}

/// A 60-byte frame whose bytes start at `seed`.
fn frame(seed: u8) -> Vec<u8> {
    (0..60u8).map(|i| seed.wrapping_add(i)).collect()
}

#[test]
fn the_dd_driver_receives_at_offset_0_sends_and_gets_every_page_back() {
    let (mut nic, mut dev) = dd([2, 0, 0, 0, 0, 1]);
    assert_eq!(nic.mac(), [2, 0, 0, 0, 0, 1]);
    assert_eq!(<HostSimDd<'static> as Nic>::FRAME_OFFSET, 0);
    let p = pages(300);
    // SAFETY: fresh pages, ours until they come back.
    let posted = unsafe { nic.rx_refill(&p) };
    assert_eq!(
        posted, 255,
        "one descriptor stays empty: head == tail is an empty ring"
    );
    assert_eq!(dev.rx_available(), 255);
    assert!(!nic.rx_ready());
    assert_eq!(dev.deliver_rx(&frame(7), 3), 3);
    assert!(nic.rx_ready());
    // `rx_pending` is one DD read: an upper bound the burst clamps (the burst reads each DD).
    assert_eq!(
        (nic.rx_completed(), nic.rx_pending()),
        (3, crate::nic::RING_SIZE)
    );
    let mut out = [RxBuf {
        pfn: Pfn(0),
        len: 0,
        status: RxStatus::Unused,
    }; 8];
    assert_eq!(nic.rx_burst(&mut out), 3);
    for b in &out[..3] {
        assert_eq!((b.len, b.status), (60, RxStatus::Ok));
        // SAFETY: the page is ours again; the NIC wrote the frame at its start.
        let got = unsafe { core::slice::from_raw_parts(b.pfn.addr() as usize as *const u8, 60) };
        assert_eq!(
            got,
            &frame(7)[..],
            "the frame at offset 0, no header before it"
        );
    }
    let tx: Vec<TxBuf> = out[..3]
        .iter()
        .map(|b| TxBuf {
            pfn: b.pfn,
            len: b.len,
            owner: TxOwner::new(5),
        })
        .collect();
    // SAFETY: the pages are ours and hold the frames at offset 0.
    assert_eq!(unsafe { nic.tx_burst(&tx) }, 3);
    let mut sent = Vec::new();
    assert_eq!(dev.complete_tx(|f| sent.push(f.to_vec())), 3);
    assert!(sent.iter().all(|f| *f == frame(7)));
    let mut done = [TxDone {
        pfn: Pfn(0),
        owner: TxOwner::new(0),
    }; 8];
    assert_eq!(nic.tx_complete(&mut done), 3);
    assert!(done[..3].iter().all(|d| d.owner == TxOwner::new(5)));
    assert_eq!(nic.tx_posted(), 0);
    // A frame of two buffers: the first is too big, the second a continuation.
    let big = vec![9u8; 5000];
    assert_eq!(dev.deliver_rx(&big, 1), 1);
    assert_eq!(nic.rx_burst(&mut out), 2);
    assert_eq!(
        (out[0].status, out[1].status),
        (RxStatus::TooBig, RxStatus::Continuation)
    );
    // Teardown: reset, then every page still posted comes back.
    assert!(nic.reset_device());
    let mut back = 0;
    // SAFETY: the NIC was reset just above.
    unsafe { nic.take_pages(&mut |_| back += 1) };
    assert_eq!(back, 255 - 5, "the RX ring's pages less the five taken");
    assert_eq!((nic.rx_posted(), nic.tx_posted()), (0, 0));
}

/// The dataplane's side of a burst in these tests: fresh pages from `spare`, `forward` flips
/// the frame's first byte and forwards it, pages handed back are kept.
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
    fn forward(&mut self, _pfn: Pfn, frame: &mut [u8]) -> RxVerdict {
        frame[0] ^= 0xff;
        RxVerdict::Forward
    }
    fn give_back(&mut self, pfn: Pfn, why: GiveBack) {
        self.back.push((pfn, why));
    }
}

/// Frames from `rx`'s device through one fused burst onto `tx`'s TX ring and out of its
/// device, byte for byte (first byte flipped by the ops), then every page counted back.
fn pair<R: Nic, T: Nic>(
    (mut rx, deliver): (R, impl FnOnce(usize) -> usize),
    (mut tx, complete): (T, impl FnOnce(&mut dyn FnMut(&[u8])) -> usize),
) {
    let p = pages(400);
    // SAFETY: fresh pages, ours until they come back.
    let posted = unsafe { rx.rx_refill(&p[..200]) };
    let mut spare = p[200..].to_vec();
    assert_eq!(deliver(32), 32);
    let mut back = Vec::new();
    let (spare_r, back_r) = (&mut spare, &mut back);
    let ops = move || {
        let (spare, back) = ({ spare_r }, { back_r });
        Ops { spare, back }
    };
    // SAFETY: fresh pages from `spare` (ours), forwarded ones stay `tx`'s until completed.
    let st = unsafe { rx.forward_burst(&mut tx, 64, TxOwner::new(3), ops) };
    assert_eq!((st.buffers, st.rx_frames, st.tx_frames), (32, 32, 32));
    assert_eq!((st.rx_bytes, st.tx_bytes), (32 * 60, 32 * 60));
    assert!(back.is_empty());
    let mut want = frame(40);
    want[0] ^= 0xff;
    let mut out = Vec::new();
    assert_eq!(complete(&mut |f| out.push(f.to_vec())), 32);
    assert!(out.iter().all(|f| *f == want), "byte for byte");
    let mut sent = Vec::new();
    assert_eq!(tx.tx_reclaim(|pfn, owner| sent.push((pfn, owner))), 32);
    assert!(sent.iter().all(|&(_, o)| o == TxOwner::new(3)));
    // Every page: on the RX ring, sent and reclaimed, or spare.
    assert!(rx.reset_device() && tx.reset_device());
    let mut all = Vec::new();
    // SAFETY: both NICs were reset just above.
    unsafe {
        rx.take_pages(&mut |p| all.push(p));
        tx.take_pages(&mut |p| all.push(p));
    }
    all.extend(sent.iter().map(|&(p, _)| p));
    all.extend(spare.iter().copied());
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 400, "{posted} posted; every page back, once");
}

#[test]
fn a_port_pair_of_two_driver_types_forwards_byte_for_byte() {
    // virtio-net RX (frames at 12) onto the DD NIC's TX (at 0): in place, no move.
    let (v, mut vd) = virtio([2, 0, 0, 0, 0, 1]);
    let (d, mut dd_dev) = dd([2, 0, 0, 0, 0, 2]);
    pair(
        (v, |n| vd.deliver_rx(&frame(40), n)),
        (d, |f: &mut dyn FnMut(&[u8])| dd_dev.complete_tx(f)),
    );
    // The DD NIC's RX (at 0) onto virtio-net's TX (12 header bytes): each frame moves up.
    let (d, mut dd_dev) = dd([2, 0, 0, 0, 0, 3]);
    let (v, mut vd) = virtio([2, 0, 0, 0, 0, 4]);
    pair(
        (d, |n| dd_dev.deliver_rx(&frame(40), n)),
        (v, |f: &mut dyn FnMut(&[u8])| vd.complete_tx(f)),
    );
    // Two DD NICs: the neutral loop as the DD driver's own.
    let (a, mut ad) = dd([2, 0, 0, 0, 0, 5]);
    let (b, mut bd) = dd([2, 0, 0, 0, 0, 6]);
    pair(
        (a, |n| ad.deliver_rx(&frame(40), n)),
        (b, |f: &mut dyn FnMut(&[u8])| bd.complete_tx(f)),
    );
}
