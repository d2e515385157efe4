//! The dataplane on a NIC that is not virtio-net (issue 32, item 5): the same io, l2 and router
//! runs on the virtio-net rig and on the DD-bit NIC's (`drivers::ddnic`: 0 header bytes, DD
//! completion), every frame out compared byte for byte between the two and with what the mode
//! must make of it, every page back at quit.

use super::super::testing::{port_mac, RigOf, SimDd, SimMixed, SimNic, SimPlayer, SimPort};
use super::{l2_frame, udp, PAGES, ROUTER};
use netstack::simframes::arp_request;
use netstack::MacAddr;
use std::net::Ipv4Addr;
use std::vec::Vec;

/// Rounds of frames delivered into port 0 (8 a round) and the frames out of port 1, in order;
/// the rig quits and checks its pages.
fn run<N: SimPort>(cmdline: &str, frame: &[u8], rounds: usize, router: bool) -> Vec<Vec<u8>> {
    let mut rig = RigOf::<N>::new(cmdline, 1, PAGES);
    let mut out = Vec::new();
    let c = &mut rig.cores[0];
    if router {
        // Resolve the next hop first: one frame waits for ARP, the neighbour answers.
        assert_eq!(c.dev[0].deliver_rx(frame, 1), 1);
        c.core.poll_once();
        let mut arp = Vec::new();
        c.dev[1].complete_tx(|f| arp.push(f.to_vec()));
        assert_eq!(arp.len(), 1, "one ARP request");
        let mut req = [0u8; 64];
        let n = arp_request(
            &mut req,
            MacAddr([2, 0, 0, 0, 1, 2]),
            Ipv4Addr::new(10, 0, 1, 2),
            Ipv4Addr::new(10, 0, 1, 1),
        );
        assert_eq!(c.dev[1].deliver_rx(&req[..n], 1), 1);
        c.core.poll_once();
        c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    }
    for _ in 0..rounds {
        assert_eq!(c.dev[0].deliver_rx(frame, 8), 8);
        c.core.poll_once();
        c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    }
    let counters = c.core.counters();
    assert_eq!(counters[0].drops_total(), 0);
    rig.quit_and_check();
    out
}

/// The same run on both NICs and on a core whose ports are of the two drivers (port 0
/// virtio-net, port 1 the DD NIC: frames cross from one driver to the other on the neutral
/// fused burst): identical frames out.
fn both(cmdline: &str, frame: &[u8], rounds: usize, router: bool) -> Vec<Vec<u8>> {
    let virtio = run::<SimNic>(cmdline, frame, rounds, router);
    let dd = run::<SimDd>(cmdline, frame, rounds, router);
    assert_eq!(
        dd, virtio,
        "{cmdline}: the DD NIC's frames are the virtio-net ones"
    );
    let mixed = run::<SimMixed>(cmdline, frame, rounds, router);
    assert_eq!(
        mixed, virtio,
        "{cmdline}: virtio-net in, DD NIC out: the virtio-net frames"
    );
    dd
}

#[test]
fn io_on_the_dd_nic_leaves_frames_untouched_byte_for_byte() {
    let frame = l2_frame();
    let out = both("mode=io", &frame, 40, false);
    assert_eq!(out.len(), 320);
    assert!(out.iter().all(|f| *f == frame));
}

#[test]
fn l2_on_the_dd_nic_rewrites_the_macs_byte_for_byte() {
    let frame = l2_frame();
    let out = both("mode=l2 peer1=02:00:00:00:00:aa", &frame, 40, false);
    assert_eq!(out.len(), 320);
    for f in &out {
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 0xaa], "destination = peer1");
        assert_eq!(&f[6..12], &port_mac(1).0, "source = port 1's MAC");
        assert_eq!(&f[12..], &frame[12..], "the rest untouched");
    }
}

#[test]
fn the_router_on_the_dd_nic_forwards_byte_for_byte() {
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 1, 2));
    let frame = udp(port_mac(0), src, dst, 64);
    let out = both(ROUTER, &frame, 40, true);
    let routed: Vec<_> = out.iter().filter(|f| f[12..14] == [0x08, 0x00]).collect();
    assert_eq!(routed.len(), 321, "the queued frame and 40 rounds of 8");
    for f in &routed {
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 1, 2], "to the resolved next hop");
        assert_eq!(&f[6..12], &port_mac(1).0);
        assert_eq!(f[14 + 8], 63, "TTL decremented");
        assert_eq!(
            &f[14 + 12..],
            &frame[14 + 12..],
            "addresses and payload untouched"
        );
    }
}

#[test]
fn a_core_owns_ports_of_two_drivers() {
    use super::super::testing::{EitherDev, SimDd12};
    use drivers::nic::{EitherNic, Nic};
    assert_eq!(
        <SimDd12 as Nic>::FRAME_OFFSET,
        12,
        "the DD NIC at virtio-net's offset"
    );
    assert_eq!(<SimMixed as Nic>::FRAME_OFFSET, 12);
    let mut rig = RigOf::<SimMixed>::new(
        "mode=l2 peer0=02:00:00:00:00:bb peer1=02:00:00:00:00:aa",
        1,
        PAGES,
    );
    let c = &mut rig.cores[0];
    let nics = c.core.nics().expect("ports up");
    assert!(matches!(&*nics[0], EitherNic::A(_)), "port 0 virtio-net");
    assert!(matches!(&*nics[1], EitherNic::B(_)), "port 1 the DD NIC");
    assert!(matches!(c.dev[1], EitherDev::B(_)));
    // Both ways: virtio-net → DD and DD → virtio-net, 8 frames each, byte for byte.
    let frame = l2_frame();
    for (rx, tx, dst) in [(0, 1, [2, 0, 0, 0, 0, 0xaa]), (1, 0, [2, 0, 0, 0, 0, 0xbb])] {
        assert_eq!(c.dev[rx].deliver_rx(&frame, 8), 8);
        c.core.poll_once();
        let mut out = Vec::new();
        c.dev[tx].complete_tx(|f| out.push(f.to_vec()));
        assert_eq!(out.len(), 8, "port {rx} → port {tx}");
        for f in &out {
            assert_eq!(&f[0..6], &dst, "destination = peer{tx}");
            assert_eq!(&f[6..12], &port_mac(tx).0, "source = port {tx}'s MAC");
            assert_eq!(&f[12..], &frame[12..], "the rest untouched");
        }
    }
    assert_eq!(c.core.counters()[0].drops_total(), 0);
    assert_eq!(c.core.counters()[1].drops_total(), 0);
    rig.quit_and_check();
}

#[test]
fn the_dd_nic_has_no_header_before_the_frame() {
    use drivers::nic::Nic;
    assert_eq!(<SimDd as Nic>::FRAME_OFFSET, 0);
    assert_eq!(<SimNic as Nic>::FRAME_OFFSET, 12);
    assert_eq!(
        super::super::page::frame_room::<SimDd>(),
        mm::PAGE_SIZE,
        "a whole page of frame room"
    );
}

/// Take port `p`'s link up or down on the simulated NIC and run housekeeping for one link
/// poll (`LINK_POLL_TICKS` + 1 ticks), so the core has seen it.
fn set_link(c: &mut super::super::testing::SimCoreOf<SimDd>, p: usize, up: bool) {
    c.dev[p].shared().set_link(up);
    for _ in 0..=crate::dataplane::frame_limits::LINK_POLL_TICKS {
        c.core.idle_tick();
    }
}

/// A port whose link goes down (`STATUS.LU` clear): within one link poll (500 ms of
/// housekeeping) every frame bound for it is dropped and counted `link_down` on it, none
/// handed to the device; back up, forwarding resumes; every page back.
#[test]
fn frames_for_a_port_whose_link_is_down_are_counted_link_down() {
    let mut rig = RigOf::<SimDd>::new("mode=l2", 1, PAGES);
    let frame = l2_frame();
    let c = &mut rig.cores[0];
    set_link(c, 1, false);
    assert_eq!(c.dev[0].deliver_rx(&frame, 8), 8);
    c.core.poll_once();
    assert_eq!(
        c.dev[1].complete_tx(|_| {}),
        0,
        "nothing handed to a link that is down"
    );
    let drops = c.core.counters()[1].drops_for(netstack::DropReason::LinkDown);
    assert_eq!(drops, 8);
    set_link(c, 1, true);
    assert_eq!(c.dev[0].deliver_rx(&frame, 8), 8);
    c.core.poll_once();
    assert_eq!(c.dev[1].complete_tx(|_| {}), 8, "forwarding resumes");
    let counters = c.core.counters();
    assert_eq!(counters[1].drops_total(), 8);
    assert_eq!(counters[1].drops_for(netstack::DropReason::OverMtu), 0);
    rig.quit_and_check();
}

/// The router too: with port 1's link down, the frames it routes there (resolved or not) are
/// dropped and counted `link_down`, the router counting them `tx_dropped`, not forwarded;
/// back up, routing resumes; every page back.
#[test]
fn the_router_counts_frames_to_a_port_whose_link_is_down() {
    let mut rig = RigOf::<SimDd>::new(ROUTER, 1, PAGES);
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 1, 2));
    let frame = udp(port_mac(0), src, dst, 64);
    let c = &mut rig.cores[0];
    // Resolve the next hop first (as `run` does).
    let mut req = [0u8; 64];
    let n = arp_request(
        &mut req,
        MacAddr([2, 0, 0, 0, 1, 2]),
        dst,
        Ipv4Addr::new(10, 0, 1, 1),
    );
    assert_eq!(c.dev[1].deliver_rx(&req[..n], 1), 1);
    c.core.poll_once();
    c.dev[1].complete_tx(|_| {});
    set_link(c, 1, false);
    assert_eq!(c.dev[0].deliver_rx(&frame, 8), 8);
    c.core.poll_once();
    assert_eq!(
        c.dev[1].complete_tx(|_| {}),
        0,
        "nothing handed to a link that is down"
    );
    // The 8 routed frames, and an ARP probe of the next hop the router may stage when its
    // entry has aged (the host clock runs): dropped at the flush, counted the same.
    let down = c.core.counters()[1].drops_for(netstack::DropReason::LinkDown);
    assert!((8..=9).contains(&down), "{down} {:?}", c.core.counters()[1]);
    let r = c.core.route().unwrap().router.counters();
    assert_eq!(r.tx_dropped, 8, "{r:?}");
    set_link(c, 1, true);
    assert_eq!(c.dev[0].deliver_rx(&frame, 8), 8);
    c.core.poll_once();
    let mut routed = 0;
    c.dev[1].complete_tx(|f| routed += usize::from(f[12..14] == [0x08, 0x00]));
    assert_eq!(routed, 8, "routing resumes");
    rig.quit_and_check();
}
