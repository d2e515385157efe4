//! Host tests of the dataplane: real cores, real drivers, simulated devices on the drivers'
//! split-ring memory, pages from a real zone. Every test ends with `quit` and checks that
//! every page came back.

mod acl;
mod ddnic;
mod fw;
mod held;
mod mgmt;
mod nat;
mod nf;
mod router6;
mod trains;

use super::page::{PageBuf, RawPage};
use super::testing as rig;
use super::QuitPhase;
use netstack::simframes::{arp_request, udp4_frame};
use netstack::{DropReason, MacAddr};
use rig::{port_mac, Rig};
use std::net::Ipv4Addr;
use std::vec::Vec;

/// Pages in the zone of most tests: 4096 (16 MiB).
const PAGES: usize = 4096;

/// The ARP reply (RFC 826) in which the neighbour `ip` on port 1 (`mac`) answers the router's
/// request from port 1's address, 10.0.1.1.
fn arp_reply(mac: MacAddr, ip: Ipv4Addr) -> Vec<u8> {
    let mut reply = [0u8; 64];
    let n = arp_request(&mut reply, mac, ip, Ipv4Addr::new(10, 0, 1, 1));
    reply[..6].copy_from_slice(&port_mac(1).0);
    reply[14 + 6..14 + 8].copy_from_slice(&2u16.to_be_bytes());
    reply[14 + 18..14 + 24].copy_from_slice(&port_mac(1).0);
    reply[..n].to_vec()
}

/// A 60-byte UDP frame from `src` to `dst`, to `dst_mac`.
fn udp(dst_mac: MacAddr, src: Ipv4Addr, dst: Ipv4Addr, ttl: u8) -> Vec<u8> {
    let mut f = std::vec![0u8; 60];
    udp4_frame(
        &mut f,
        60,
        dst_mac,
        MacAddr([2, 0, 0, 0, 0, 9]),
        src,
        dst,
        ttl,
    );
    f
}

fn l2_frame() -> Vec<u8> {
    udp(
        port_mac(0),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 1, 2),
        64,
    )
}

#[test]
fn l2_forwards_rewrites_and_every_page_comes_back() {
    let mut rig = Rig::new("mode=l2 peer1=02:00:00:00:00:aa", 1, PAGES);
    let frame = l2_frame();
    let mut out = Vec::new();
    for _ in 0..50 {
        let c = &mut rig.cores[0];
        assert_eq!(c.dev[0].deliver_rx(&frame, 8), 8);
        c.core.poll_once();
        c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    }
    assert_eq!(out.len(), 400);
    for f in &out {
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 0xaa], "destination = peer1");
        assert_eq!(&f[6..12], &port_mac(1).0, "source = port 1's MAC");
        assert_eq!(&f[12..], &frame[12..], "the rest untouched");
    }
    let c = rig.cores[0].core.counters();
    assert_eq!((c[0].rx, c[1].tx, c[0].drops_total()), (400, 400, 0));
    assert_eq!((c[0].rx_bytes, c[1].tx_bytes), (400 * 60, 400 * 60));
    rig.quit_and_check();
    // After quit the devices are gone: every entry point is a no-op, nothing touches them.
    let core = &mut rig.cores[0].core;
    assert!(core.torn_down() && core.nics().is_none());
    assert_eq!(core.poll_once(), 0);
    assert!(!core.arm_interrupts());
    core.idle_tick();
    assert_eq!(core.quit_phase(super::QuitPhase::Stop), 0);
    assert_eq!(
        core.nic_stats(0).kicks_rx,
        rig.cores[0].core.snap(true, 0).nic[0].kicks_rx
    );
}

#[test]
fn io_mode_leaves_frames_untouched() {
    let mut rig = Rig::new("mode=io", 1, PAGES);
    let frame = l2_frame();
    let mut out = Vec::new();
    for _ in 0..10 {
        let c = &mut rig.cores[0];
        c.dev[1].deliver_rx(&frame, 4);
        c.core.poll_once();
        c.dev[0].complete_tx(|f| out.push(f.to_vec()));
    }
    assert_eq!(out.len(), 40);
    assert!(out.iter().all(|f| *f == frame));
    rig.quit_and_check();
}

#[test]
fn quit_with_frames_still_on_the_tx_ring_takes_them_back() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&l2_frame(), 64);
    c.core.poll_once(); // a burst is 32 frames (burst=)
    c.core.poll_once();
    // The device never completes TX: the pages are on the TX ring when quit starts.
    assert_eq!(
        drivers::nic::Nic::tx_posted(&*c.core.nics().unwrap()[1]),
        64
    );
    rig.quit_and_check();
}

#[test]
fn tx_ring_full_is_counted_and_the_pages_recycled() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let frame = l2_frame();
    let c = &mut rig.cores[0];
    // 300 frames in, no TX completion: the 256-descriptor TX ring fills.
    for _ in 0..10 {
        c.dev[0].deliver_rx(&frame, 30);
        c.core.poll_once();
    }
    let counters = c.core.counters();
    assert_eq!(counters[0].rx, 300);
    assert_eq!(counters[1].tx, 256);
    assert_eq!(
        counters[1].tx_bytes,
        256 * frame.len() as u64,
        "refused frames' bytes not counted"
    );
    assert_eq!(counters[1].drops_for(DropReason::TxRingFull), 44);
    rig.quit_and_check();
}

/// `backpressure=on`: with the TX ring full, frames stay in the RX ring (not taken, not
/// dropped) and go out once the device completes TX; nothing is counted `tx_ring_full`.
#[test]
fn backpressure_leaves_frames_in_the_rx_ring_until_tx_has_room() {
    let mut rig = Rig::new("mode=l2 backpressure=on", 1, PAGES);
    let frame = l2_frame();
    let c = &mut rig.cores[0];
    for _ in 0..10 {
        c.dev[0].deliver_rx(&frame, 30);
        c.core.poll_once();
    }
    let counters = c.core.counters();
    assert_eq!((counters[0].rx, counters[1].tx), (256, 256));
    assert_eq!(counters[1].drops_for(DropReason::TxRingFull), 0);
    assert_eq!(c.core.nic_stats(0).bad_token, 0);
    // The device takes the 256; the 44 left waiting go out on the next iterations.
    let mut out = 0;
    out += c.dev[1].complete_tx(|_| {});
    for _ in 0..4 {
        c.core.poll_once();
        out += c.dev[1].complete_tx(|_| {});
    }
    let counters = c.core.counters();
    assert_eq!((out, counters[0].rx, counters[1].tx), (300, 300, 300));
    assert_eq!(counters[0].drops_total() + counters[1].drops_total(), 0);
    rig.quit_and_check();
}

#[test]
fn rx_pool_empty_is_counted_and_forwarding_goes_on() {
    // 300 pages: the pools' refills cannot fill both 256-slot RX rings.
    let mut rig = Rig::new("mode=l2", 1, 300);
    let no_buffer = |rig: &Rig| {
        rig.cores[0]
            .core
            .counters()
            .iter()
            .map(|c| c.no_buffer)
            .sum::<u64>()
    };
    assert!(
        no_buffer(&rig) > 0,
        "the second port's refill found the zone empty"
    );
    let frame = l2_frame();
    let mut sent = 0;
    for _ in 0..20 {
        let c = &mut rig.cores[0];
        c.dev[0].deliver_rx(&frame, 16);
        c.core.poll_once();
        sent += c.dev[1].complete_tx(|_| {});
    }
    assert!(sent > 0, "frames still forwarded");
    rig.quit_and_check();
}

#[test]
fn bad_used_entries_are_counted_not_trusted() {
    let mut rig = Rig::new("mode=l2", 1, PAGES);
    let shared = rig.cores[0].dev[0].shared();
    // SAFETY: the rig's devices are host memory at their physical address; the device player
    // is not used while this queue view is.
    let mut q = unsafe { drivers::sim::DeviceQueue::new(shared, drivers::sim::SIM_RX_QUEUE) }
        .expect("rx queue");
    let heads: Vec<u16> = (0..3).map(|_| q.take().expect("posted")).collect();
    q.give_back(300, 100); // an id the driver never posted (ring of 256)
    q.give_back(heads[0], 4); // shorter than the virtio-net header
    q.give_back(heads[1], (mm::PAGE_SIZE + 100) as u32); // longer than the buffer
    q.publish(false);
    rig.cores[0].core.poll_once();
    let c = &rig.cores[0].core;
    assert_eq!(c.nic_stats(0).bad_token, 1);
    assert_eq!(c.counters()[0].drops_for(DropReason::BadDesc), 2);
    assert_eq!(c.counters()[1].tx, 0);
    // heads[2] was taken by the "device" and never returned: it is still posted and comes back
    // at quit with the rest.
    rig.quit_and_check();
}

/// The router rig's configuration: port 0 on 10.0.0.0/24, port 1 on 10.0.1.0/24.
const ROUTER: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=none";

#[test]
fn router_resolves_the_next_hop_forwards_and_every_page_comes_back() {
    let mut rig = Rig::new(ROUTER, 1, PAGES);
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 1, 2));
    let frame = udp(port_mac(0), src, dst, 64);
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&frame, 4);
    c.core.poll_once();
    // The next hop is unknown: the frames wait and an ARP request goes out of port 1.
    let mut arp = Vec::new();
    c.dev[1].complete_tx(|f| arp.push(f.to_vec()));
    assert_eq!(arp.len(), 1);
    assert_eq!(&arp[0][12..14], &[0x08, 0x06]);
    // The neighbour answers (an ARP request from it teaches the router too).
    let mut req = [0u8; 64];
    let n = arp_request(
        &mut req,
        MacAddr([2, 0, 0, 0, 1, 2]),
        dst,
        Ipv4Addr::new(10, 0, 1, 1),
    );
    c.dev[1].deliver_rx(&req[..n], 1);
    c.core.poll_once();
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.to_vec()));
    let routed: Vec<_> = out.iter().filter(|f| f[12..14] == [0x08, 0x00]).collect();
    assert_eq!(routed.len(), 4, "the queued frames leave once resolved");
    assert!(routed
        .iter()
        .all(|f| f[0..6] == [2, 0, 0, 0, 1, 2] && f[14 + 8] == 63));
    // More frames go straight through; the entry, learned from a request, is Stale (Linux's
    // arp_process), so its use also re-asks once.
    c.dev[0].deliver_rx(&frame, 8);
    c.core.poll_once();
    let mut kinds = (0, 0);
    c.dev[1].complete_tx(|f| match f[12..14] {
        [0x08, 0x00] => kinds.0 += 1,
        _ => kinds.1 += 1,
    });
    assert_eq!(kinds, (8, 1));
    rig.quit_and_check();
}

#[test]
fn router_quit_with_frames_waiting_for_arp_returns_them() {
    let mut rig = Rig::new(ROUTER, 1, PAGES);
    let frame = udp(
        port_mac(0),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 1, 7),
        64,
    );
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&frame, 6);
    c.core.poll_once();
    assert!(c.core.route().unwrap().router.queued_frames() > 0);
    rig.quit_and_check();
}

#[test]
fn router_ttl_expiry_sends_icmp_from_the_spare_page() {
    let mut rig = Rig::new(ROUTER, 1, PAGES);
    let frame = udp(
        port_mac(0),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 1, 2),
        1,
    );
    let c = &mut rig.cores[0];
    c.dev[0].deliver_rx(&frame, 1);
    c.core.poll_once();
    let r = c.core.route().unwrap().router.counters();
    assert_eq!(r.icmp_sent, 1, "Time Exceeded built");
    // The ICMP error waits for the source's MAC (ARP request out of port 0).
    c.core.poll_once();
    assert!(c.dev[0].complete_tx(|_| {}) >= 1);
    rig.quit_and_check();
}

#[test]
fn xcore_hands_frames_to_the_next_core_and_pages_go_home() {
    let mut rig = Rig::new("mode=l2 xcore=on", 2, PAGES);
    let frame = l2_frame();
    let mut out = Vec::new();
    for _ in 0..20 {
        rig.cores[0].dev[0].deliver_rx(&frame, 8);
        rig.poll();
        rig.cores[1].dev[1].complete_tx(|f| out.push(f.to_vec()));
    }
    assert_eq!(out.len(), 160);
    assert!(
        out.iter().all(|f| f[6..12] == port_mac(3).0),
        "rewritten for core 1's port"
    );
    // Core 1 returned core 0's pages through pool 0's recycle ring.
    rig.poll();
    let s = rig.cores[0].core.snap(false, 0);
    assert!(s.pools[0].stats.recycle_ring > 0 || !rig.fabric.pool_rings[0].is_empty());
    rig.quit_and_check();
}

/// `xcore=on` between ports of different MTUs: a frame over the next core's egress port's MTU
/// is dropped before the hand-off, counted `over_mtu` on that (local) port.
#[test]
fn xcore_keeps_to_the_egress_mtu() {
    let mut rig = Rig::new("mode=l2 xcore=on mtu0=3000 mtu1=1500", 2, PAGES);
    let mut f = l2_frame();
    let mut out = Vec::new();
    for len in [1518, 1519, 3018] {
        f.resize(len, 0xab);
        rig.cores[0].dev[0].deliver_rx(&f, 1);
    }
    rig.poll();
    rig.cores[1].dev[1].complete_tx(|f| out.push(f.len()));
    assert_eq!(out, std::vec![1518]);
    let k = rig.cores[0].core.counters();
    assert_eq!((k[0].rx, k[1].drops_for(DropReason::OverMtu)), (3, 2));
    rig.quit_and_check();
}

#[test]
fn a_halted_core_is_woken_for_a_hand_off_and_only_then() {
    let mut rig = Rig::new("mode=l2 xcore=on", 2, PAGES);
    let wakes = || rig::WAKES.with(|w| w.get()[1]);
    let before = wakes();
    // Core 1 is busy (not halting): a hand-off sends no wake-up.
    rig.cores[0].dev[0].deliver_rx(&l2_frame(), 4);
    rig.cores[0].core.poll_once();
    assert_eq!(wakes(), before, "no IPI to a core that is not halting");
    // It sees the hand-off when it arms interrupts to halt: it must not halt.
    assert!(
        rig.cores[1].core.arm_interrupts(),
        "pending hand-off stops the halt"
    );
    rig.cores[1].core.park_interrupts();
    rig.cores[1].core.poll_once();
    // Now it halts with nothing pending; the next hand-off wakes it.
    assert!(!rig.cores[1].core.arm_interrupts());
    rig.cores[0].dev[0].deliver_rx(&l2_frame(), 4);
    rig.cores[0].core.poll_once();
    assert_eq!(wakes(), before + 1, "one IPI for the burst");
    rig.cores[1].core.park_interrupts();
    rig.poll();
    rig.quit_and_check();
}

#[test]
fn router_on_two_cores_hands_management_frames_to_core_0() {
    let cfg = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=ip0";
    let mut rig = Rig::new(cfg, 2, PAGES);
    // An ARP request for the management address arrives on core 1's port 0: the router
    // answers it, and the management plane does not see it (it would answer a second time).
    let mut req = [0u8; 64];
    let n = arp_request(
        &mut req,
        MacAddr([2, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
    );
    rig.cores[1].dev[0].deliver_rx(&req[..n], 1);
    rig.poll();
    rig.poll();
    let mut replies = Vec::new();
    rig.cores[1].dev[0].complete_tx(|f| replies.push(f.to_vec()));
    assert_eq!(replies.len(), 1, "one ARP reply, from the router");
    assert_eq!(rig.cores[0].core.mgmt_plane().unwrap().frames.len(), 0);
    // Any other ARP frame on that port (a request for another host) reaches core 0's
    // management plane, handed off by core 1.
    let n = arp_request(
        &mut req,
        MacAddr([2, 0, 0, 0, 0, 2]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 3),
    );
    rig.cores[1].dev[0].deliver_rx(&req[..n], 1);
    rig.poll();
    rig.poll();
    let m = rig.cores[0].core.mgmt_plane().unwrap();
    assert_eq!(m.frames.len(), 1, "core 0's management plane got the copy");
    assert_eq!(&m.frames[0][..n], &req[..n]);
    let path = rig.cores[1].core.mgmt_path().unwrap();
    assert_eq!((path.handoff, path.handoff_dropped), (1, 0));
    // A request is not shared (only replies to us are: arp_accept=0, each core creates its own
    // entries when it forwards).
    assert_eq!(rig.cores[0].core.route().unwrap().sync.neigh_applied, 0);
    rig.quit_and_check();
}

#[test]
fn quit_phases_run_in_order_on_every_core() {
    let mut rig = Rig::new("mode=l2", 3, PAGES);
    rig.cores[2].dev[0].deliver_rx(&l2_frame(), 5);
    rig.poll();
    let (seen, report) = rig.quit();
    for k in 1..3 {
        let phases: Vec<QuitPhase> = seen.iter().filter(|s| s.0 == k).map(|s| s.1).collect();
        assert_eq!(phases, QuitPhase::ALL.to_vec(), "core {k}");
    }
    // Core 1 finished phase p before core 2 did, and both before phase p + 1 began.
    let order: Vec<QuitPhase> = seen.iter().map(|s| s.1).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(report.leaked, 0);
    assert_eq!(rig.zone.free_pages(), rig.free_at_start);
}

#[test]
#[should_panic(expected = "dropped without being handed on")]
fn dropping_a_page_token_is_a_named_bug() {
    let z = rig::zone(1024);
    let pfn = z.alloc_pages(0).unwrap();
    // SAFETY: a fresh page from the zone, ours.
    let page = unsafe {
        PageBuf::from_raw(RawPage {
            pfn,
            pool: mm::NO_POOL,
        })
    };
    drop(page);
}

#[test]
fn page_token_bytes_are_the_page_after_its_header_area() {
    let z = rig::zone(1024);
    let raw = RawPage {
        pfn: z.alloc_pages(0).unwrap(),
        pool: mm::NO_POOL,
    };
    // SAFETY: a fresh page from the zone, ours.
    let mut page = unsafe { PageBuf::from_raw(raw) };
    type N = rig::SimNic;
    let room = super::page::frame_room::<N>();
    assert_eq!(room, mm::PAGE_SIZE - 12, "virtio-net: 12 header bytes");
    page.frame_mut::<N>(4).copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(page.frame_mut::<N>(8)[..4], [1, 2, 3, 4]);
    assert_eq!(
        page.page()[12..16],
        [1, 2, 3, 4],
        "the frame starts after the header area"
    );
    assert_eq!(page.room_mut::<N>().len(), room);
    assert_eq!(
        page.frame_mut::<N>(1 << 20).len(),
        room,
        "clamped to the page"
    );
    z.free_pages_order(page.into_raw().pfn, 0);
}

#[test]
fn handoff_record_roundtrips_and_a_full_ring_gives_it_back() {
    use super::handoff::{Handoff, HandoffRing, RestPages};
    let z = rig::zone(4096);
    let ring: &'static HandoffRing =
        std::boxed::Box::leak(std::boxed::Box::new(HandoffRing::new()));
    // Record `i` carries `i % 4` pages after its first (a frame of up to four pages).
    let page = |pool| {
        let raw = RawPage {
            pfn: z.alloc_pages(0).unwrap(),
            pool,
        };
        // SAFETY: a fresh page from the zone, ours.
        unsafe { PageBuf::from_raw(raw) }
    };
    let mut firsts = Vec::new();
    let mut pushed = 0u32;
    let refused = loop {
        let pool = 40 + pushed;
        let mut rest = RestPages::new();
        for _ in 0..pushed % 4 {
            rest.push(page(pool)).unwrap();
        }
        let h = Handoff {
            page: page(pool),
            rest,
            len: 60 + pushed as u16,
            port: (pushed % 2) as u8,
            mark: pushed as u16,
        };
        let pfns: Vec<mm::Pfn> = core::iter::once(h.page.pfn())
            .chain(h.rest.iter().map(|p| p.pfn()))
            .collect();
        match ring.push(h) {
            Ok(()) => {
                firsts.push(pfns);
                pushed += 1
            }
            Err(h) => {
                let back: Vec<mm::Pfn> = core::iter::once(h.page.pfn())
                    .chain(h.rest.iter().map(|p| p.pfn()))
                    .collect();
                assert_eq!(back, pfns, "the refused record keeps its pages");
                break h;
            }
        }
        assert!(pushed < 100_000, "the ring is bounded");
    };
    // The refused record comes back whole.
    assert_eq!(
        (refused.len, refused.port, refused.mark, refused.rest.len()),
        (
            60 + pushed as u16,
            (pushed % 2) as u8,
            pushed as u16,
            (pushed % 4) as usize
        )
    );
    for p in refused.into_pages() {
        assert_eq!(p.pool(), 40 + pushed);
        z.free_pages_order(p.into_raw().pfn, 0);
    }
    // Popped in order, each field and page as pushed.
    let mut next = 0u32;
    while ring.pop_each(64, |h| {
        assert_eq!(h.len, 60 + next as u16);
        assert_eq!(h.port, (next % 2) as u8);
        assert_eq!(h.mark, next as u16);
        assert_eq!(h.rest.len(), (next % 4) as usize);
        let pages: Vec<PageBuf> = h.into_pages().collect();
        let pfns: Vec<mm::Pfn> = pages.iter().map(|p| p.pfn()).collect();
        assert_eq!(pfns, firsts[next as usize]);
        for p in pages {
            assert_eq!(p.pool(), 40 + next, "every page keeps its pool");
            z.free_pages_order(p.into_raw().pfn, 0);
        }
        next += 1;
    }) > 0
    {}
    assert_eq!(next, pushed);
    assert!(ring.is_empty());
}

/// A `len`-byte IPv4/UDP frame to the router's port 0 address (10.0.0.1) from 10.0.0.2, to
/// global port `port`'s MAC: a frame for the management plane.
fn to_router(len: usize, port: usize) -> Vec<u8> {
    let mut f = std::vec![0u8; len];
    udp4_frame(
        &mut f,
        len,
        port_mac(port),
        MacAddr([2, 0, 0, 0, 0, 9]),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        64,
    );
    f
}

/// The router rig with the management plane on port 0.
const ROUTER_MGMT: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=ip0";
/// [`ROUTER_MGMT`] at a 9,000-byte MTU on both ports (a 9,014-byte frame passes the ports'
/// frame limit).
const ROUTER_MGMT_JUMBO: &str =
    "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 mgmt=ip0 mtu0=9000 mtu1=9000";

#[test]
fn a_jumbo_frame_for_the_router_reaches_the_management_plane_linear_and_its_reply_leaves_as_a_chain(
) {
    let mut rig = Rig::new(ROUTER_MGMT_JUMBO, 1, PAGES);
    rig.cores[0].core.mgmt_plane_mut().unwrap().echo = true;
    let linear_before = rig::LINEAR.with(|c| c.get());
    // 9,014 bytes: three RX pages (4,084 + 4,096 + 834).
    let frame = to_router(9014, 0);
    let c = &mut rig.cores[0];
    assert_eq!(c.dev[0].deliver_rx_mrg(&frame, 1), 1);
    c.core.poll_once();
    let m = c.core.mgmt_plane().unwrap();
    assert_eq!(m.frames.len(), 1, "one frame for the management plane");
    assert_eq!(m.frames[0], frame, "linear, byte for byte");
    let path = c.core.mgmt_path().unwrap();
    assert_eq!((path.linear, path.linear_failed), (1, 0));
    let rs = c.core.route().unwrap();
    assert_eq!(rig::LINEAR.with(|c| c.get()) - linear_before, 1);
    assert_eq!(rs.router.counters().to_host, 1);
    // Its "reply" (the same bytes) left port 0 as one chain of fresh pages.
    let mut out = Vec::new();
    c.dev[0].complete_tx(|f| out.push(f.to_vec()));
    assert_eq!(out, std::vec![frame.clone()]);
    let counters = c.core.counters();
    assert_eq!((counters[0].tx, counters[0].tx_bytes), (1, 9014));
    assert_eq!(counters[0].drops_total(), 0);
    // A one-page frame longer than the queue's 1,514 bytes is processed at once too.
    let mid = to_router(3000, 0);
    c.dev[0].deliver_rx_mrg(&mid, 1);
    c.core.poll_once();
    let m = c.core.mgmt_plane().unwrap();
    assert_eq!(m.frames.len(), 2);
    assert_eq!(m.frames[1], mid);
    rig.quit_and_check();
}

#[test]
fn a_jumbo_frame_for_the_router_on_another_core_is_handed_to_core_0_with_all_its_pages() {
    let mut rig = Rig::new(ROUTER_MGMT_JUMBO, 2, PAGES);
    let frame = to_router(9014, 2);
    rig.cores[1].dev[0].deliver_rx_mrg(&frame, 1);
    rig.poll();
    rig.poll();
    let m = rig.cores[0].core.mgmt_plane().unwrap();
    assert_eq!(m.frames.len(), 1, "core 0's management plane got it");
    assert_eq!(m.frames[0], frame, "linear, byte for byte");
    let s1 = rig.cores[1].core.mgmt_path().unwrap();
    assert_eq!((s1.handoff, s1.handoff_dropped), (1, 0));
    let s0 = rig.cores[0].core.mgmt_path().unwrap();
    assert_eq!((s0.linear, s0.linear_failed), (1, 0));
    // Its pages went home to core 1's pool (through that pool's recycle ring).
    rig.poll();
    rig.quit_and_check();
}

#[test]
fn quit_with_a_jumbo_hand_off_still_in_the_ring_returns_every_page() {
    let mut rig = Rig::new(ROUTER_MGMT_JUMBO, 2, PAGES);
    rig.cores[1].dev[0].deliver_rx_mrg(&to_router(9014, 2), 2);
    // Only core 1 runs: both frames wait in core 0's ring, three pages each.
    rig.cores[1].core.poll_once();
    let s1 = rig.cores[1].core.mgmt_path().unwrap();
    assert_eq!(s1.handoff, 2);
    assert!(!rig.fabric.mgmt.is_empty());
    rig.quit_and_check();
}

/// The ports' frame limit (issue 40): MTU + 14 in router mode (it forwards untagged IPv4
/// only), MTU + 18 in l2 (an 802.1Q tag passes through). A frame one byte over is counted
/// `too_big` on its ingress port and never reaches the mode: not the router's management
/// plane, not the other port in l2.
#[test]
fn frames_over_the_ingress_mtu_are_counted_too_big_on_their_port() {
    let mut rig = Rig::new(ROUTER_MGMT, 1, PAGES);
    let c = &mut rig.cores[0];
    for len in [1514, 1515] {
        assert_eq!(c.dev[0].deliver_rx(&to_router(len, 0), 1), 1);
    }
    c.core.poll_once();
    let lens: Vec<usize> = c
        .core
        .mgmt_plane()
        .unwrap()
        .frames
        .iter()
        .map(|f| f.len())
        .collect();
    assert_eq!(
        lens,
        [1514],
        "the 1,515-byte frame never reaches the router"
    );
    let k = c.core.counters();
    assert_eq!((k[0].rx, k[0].drops_for(DropReason::TooBig)), (2, 1));
    assert_eq!(
        k[1].drops_for(DropReason::TooBig),
        0,
        "counted on the ingress port"
    );
    rig.quit_and_check();

    assert_eq!(
        l2_sends("mode=l2", &[1518, 1519]),
        (std::vec![1518], (2, 1, 1, 0))
    );
}

/// `cfg` on one rig: frames of `lens` bytes into port 0, one poll; the lengths port 1 sent
/// and port 0's `rx` and `too_big` drops, port 1's `tx` and `over_mtu` drops; every page back
/// at quit.
fn l2_sends(cfg: &str, lens: &[usize]) -> (Vec<usize>, (u64, u64, u64, u64)) {
    let mut rig = Rig::new(cfg, 1, PAGES);
    let c = &mut rig.cores[0];
    let mut f = l2_frame();
    for &len in lens {
        f.resize(len, 0xab);
        assert_eq!(c.dev[0].deliver_rx_mrg(&f, 1), 1);
    }
    c.core.poll_once();
    let mut out = Vec::new();
    c.dev[1].complete_tx(|f| out.push(f.len()));
    let k = c.core.counters();
    let counts = (
        k[0].rx,
        k[0].drops_for(DropReason::TooBig),
        k[1].tx,
        k[1].drops_for(DropReason::OverMtu),
    );
    assert_eq!(
        k[0].drops_for(DropReason::OverMtu),
        0,
        "counted on the egress port"
    );
    rig.quit_and_check();
    (out, counts)
}

/// l2 and io between ports of different MTUs (9000 in, 1500 out): port 0 receives up to its
/// own MTU + 18 (longer: `too_big` on port 0); of those, a frame over port 1's MTU + 18 is
/// never sent but dropped, counted `over_mtu` on port 1 (one page or several); the other
/// way nothing is capped.
#[test]
fn l2_never_sends_over_the_egress_mtu() {
    for mode in ["l2", "io"] {
        assert_eq!(
            l2_sends(
                &std::format!("mode={mode} mtu0=9000 mtu1=1500"),
                &[1518, 1519, 4000, 9018, 9019]
            ),
            (std::vec![1518], (5, 1, 1, 3)),
            "{mode}"
        );
    }
    // Equal MTUs: no cap, the same frames as before.
    assert_eq!(
        l2_sends("mode=l2 mtu0=9000 mtu1=9000", &[1519, 9018, 9019]),
        (std::vec![1519, 9018], (3, 1, 2, 0))
    );
}
