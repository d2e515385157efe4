//! Ports on QEMU's Intel 82574L model (`-device e1000e,romfile=`, issue 36): the kernel finds
//! them on PCI (behind `pcie-root-port`s too), brings them up (MAC, link, filter) and forwards
//! io, l2 and router both ways with the DD-bit driver; RX tail writes stay at one per 32
//! re-posted buffers and no register is read per frame (`ports[].nic` in STATS); a jumbo MTU
//! forwards frames of several descriptors whole (zero copy); QMP `set_link`
//! takes the link down and up (seen in STATS, forwarding resumes); every page comes back at
//! `quit`. QEMU's model, not silicon.
//!
//! The same for QEMU's Intel 82576 model (`-device igb`, issue 41; the same DD-bit driver
//! with advanced descriptors): io and l2 both ways on the root bus, a jumbo MTU, with the
//! same doorbell, register-read and page figures.

use std::time::{Duration, Instant};

use gannet_tests::*;
use harness::qemu::{NicBus, NicModel};

/// Frames per direction: several rings' worth (RX buffers recycled), small for CI time.
const FRAMES: u64 = 1_000;

/// The NIC-level counters of port `p` (panics if the driver kept none: not an e1000e port).
fn nic(s: &Stats, p: usize) -> netstack::stats::NicStats {
    s.ports[p]
        .nic
        .unwrap_or_else(|| panic!("port {p} has no `nic` counters: {s}"))
}

/// The tail-write and register-read figures every e1000e or igb run must meet (`s` the final
/// STATS; `before` and `after` taken live around the traffic): at most one `RDT` write per 32
/// frames received (plus the initial fill), one `TDT` write per TX burst at most, no register
/// read per frame (the reads between `before` and `after` are STATS' own: under 100, however
/// many frames), the link up, no receive error. The final STATS reports the link as it was
/// while forwarding, up and no change counted since `after`: `quit`'s own reset of the NICs
/// (which clears an 82576's `STATUS.LU`) is not a link change.
fn assert_doorbells(s: &Stats, before: &Stats, after: &Stats, label: &str) {
    for p in 0..2 {
        let port = &s.ports[p];
        let n = nic(after, p);
        let end = nic(s, p);
        assert_eq!(
            (end.link_up, end.link_speed_mbps, end.link_changes),
            (true, 1000, n.link_changes),
            "{label} port {p}: final STATS after quit: link not as while forwarding: {s}"
        );
        let reads = n.mmio_reads - nic(before, p).mmio_reads;
        assert!(
            port.kicks_rx <= port.rx / 32 + 1,
            "{label} port {p}: {} RDT writes for {} frames received: {s}",
            port.kicks_rx,
            port.rx
        );
        assert!(
            port.kicks_tx <= port.tx.max(1),
            "{label} port {p}: {} TDT writes for {} frames sent: {s}",
            port.kicks_tx,
            port.tx
        );
        assert!(
            reads < 100,
            "{label} port {p}: {reads} register reads while forwarding {} frames: {after}",
            port.rx + port.tx
        );
        assert!(n.link_up, "{label} port {p}: link down: {after}");
        assert_eq!(
            (n.rx_errors, n.crc_errors, n.missed),
            (0, 0, 0),
            "{label} port {p}: {s}"
        );
    }
}

/// Boots `mode` on two ports of `model` (e1000e or igb) on the root bus, checks the boot log
/// names them, forwards [`FRAMES`] each way and quits clean.
fn forwards_both_ways(model: NicModel, mode: &str) {
    let mut rig = Rig::start_intel(
        model,
        &format!("mode={mode}"),
        gen_count(FRAMES, 64, true),
        NicBus::Root,
        Vec::new(),
    );
    let lines = rig.guest.lines();
    let chip = match model {
        NicModel::Igb => "igb (82576)",
        _ => "e1000e (82574L)",
    };
    for p in 0..2 {
        let needle = format!("{chip} MAC {}", mac_str(guest_mac(p)));
        assert!(
            lines.iter().any(|l| l.contains(&needle)),
            "{mode}: no `{needle}`\n{}",
            rig.tail()
        );
    }
    forwards_every_frame_and_quits_clean_checked(&mut rig, mode);
}

/// [`forwards_every_frame_and_quits_clean`] with the e1000e figures checked on the way.
fn forwards_every_frame_and_quits_clean_checked(rig: &mut Rig, mode: &str) {
    let before = rig.stats();
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates),
        (2 * FRAMES, 2 * FRAMES, 0, 0),
        "{mode}: {r:?}\n{}",
        rig.tail()
    );
    let after = rig.stats();
    let s = rig.quit();
    for p in 0..2 {
        assert_eq!((s.ports[p].rx, s.ports[p].tx), (FRAMES, FRAMES), "{s}");
        assert_eq!(s.ports[p].drops, PortDrops::default(), "{s}");
    }
    assert_doorbells(&s, &before, &after, mode);
    assert_no_leak(&s);
}

/// One virtio-net port (0) and one e1000e port (1), `--nic mixed`: the kernel runs them as one
/// pair (`setup::mixed`, the frames 12 bytes into their pages on both) and forwards l2 both
/// ways across the two drivers; the e1000e side keeps its doorbell and register-read figures.
#[test]
fn mixed_virtio_and_e1000e_pair_forwards_l2_both_ways() {
    let mut rig = Rig::start_mixed("mode=l2", gen_count(FRAMES, 64, true));
    let lines = rig.guest.lines();
    for needle in [
        format!("virtio-net MAC {}", mac_str(guest_mac(0))),
        format!("e1000e (82574L) MAC {} link up", mac_str(guest_mac(1))),
    ] {
        assert!(
            lines.iter().any(|l| l.contains(&needle)),
            "no `{needle}`\n{}",
            rig.tail()
        );
    }
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates),
        (2 * FRAMES, 2 * FRAMES, 0, 0),
        "{r:?}\n{}",
        rig.tail()
    );
    let s = rig.quit();
    for p in 0..2 {
        assert_eq!((s.ports[p].rx, s.ports[p].tx), (FRAMES, FRAMES), "{s}");
        assert_eq!(s.ports[p].drops, PortDrops::default(), "{s}");
    }
    assert!(s.ports[0].nic.is_none(), "port 0 is virtio-net: {s}");
    let (e, n) = (&s.ports[1], nic(&s, 1));
    assert!(
        e.kicks_rx <= e.rx / 32 + 1,
        "{} RDT writes: {s}",
        e.kicks_rx
    );
    assert!(e.kicks_tx <= e.tx.max(1), "{} TDT writes: {s}", e.kicks_tx);
    assert!(n.link_up && n.mmio_reads < 100, "{s}");
    assert_no_leak(&s);
}

#[test]
fn e1000e_l2_forwards_both_ways() {
    forwards_both_ways(NicModel::E1000e, "l2");
}

#[test]
fn e1000e_io_forwards_both_ways() {
    forwards_both_ways(NicModel::E1000e, "io");
}

#[test]
fn igb_l2_forwards_both_ways() {
    forwards_both_ways(NicModel::Igb, "l2");
}

#[test]
fn igb_io_forwards_both_ways() {
    forwards_both_ways(NicModel::Igb, "io");
}

/// Router mode: the router's ports resolve their next hops (ARP through the filter: broadcast
/// accepted, unicast to the port's MAC only) and route both ways; only frames past the
/// neighbour queue while ARP was pending may be lost, and those are counted.
#[test]
fn e1000e_router_routes_both_ways() {
    let mut rig = Rig::start_e1000e(
        "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24",
        gen_count(FRAMES, 64, true),
        NicBus::Root,
        Vec::new(),
    );
    let before = rig.stats();
    let r = rig.run();
    let after = rig.stats();
    let s = rig.quit();
    let rs = router(&s);
    let lost = rs.drops.neigh_queue_full;
    assert_eq!(r.bad, 0, "{r:?}");
    assert_eq!(r.received + lost, r.sent, "{r:?} {s}");
    assert!(
        lost <= 2 * 64,
        "only the ARP window may be lost: {lost} {s}"
    );
    assert!(rs.forwarded >= 2 * FRAMES - lost, "{s}");
    assert_eq!(rs.arp_requests, 2, "one ARP request per next hop: {s}");
    assert_doorbells(&s, &before, &after, "router");
    assert_no_leak(&s);
}

/// Each e1000e behind its own `pcie-root-port` (libvirt's placement): found by the scan
/// behind the bridges, forwarded.
#[test]
fn e1000e_behind_pcie_root_ports() {
    let mut rig = Rig::start_e1000e(
        "mode=l2",
        gen_count(FRAMES, 64, true),
        NicBus::RootPorts,
        Vec::new(),
    );
    let lines = rig.guest.lines();
    let needle = "pci: e1000e (8086:10d3) at 01:00.0 02:00.0";
    assert!(
        lines.iter().any(|l| l.contains(needle)),
        "no `{needle}`\n{}",
        rig.tail()
    );
    forwards_every_frame_and_quits_clean_checked(&mut rig, "l2");
}

/// MTU 9000 (`mtu0=`/`mtu1=`: e1000e has no `host_mtu`; `RCTL.LPE` set): a 4,000-byte frame
/// fits one 4 KiB buffer; a 9,018-byte one (9,014 without FCS) spans three descriptors, which
/// the driver collects and sends, zero copy, as three TX descriptors of the same pages: every
/// frame of either size forwarded whole, none dropped, every page back.
#[test]
fn e1000e_jumbo_mtu_forwards_frames_of_several_descriptors_whole() {
    jumbo_mtu_forwards_frames_of_several_descriptors_whole(NicModel::E1000e, NicBus::Root);
}

/// [`e1000e_jumbo_mtu_forwards_frames_of_several_descriptors_whole`] on igb ports (advanced
/// descriptors; `RCTL.LPE` and `RLPML` 9,022), each behind its own `pcie-root-port` (found by
/// the scan behind the bridges; no second boot for the placement).
#[test]
fn igb_jumbo_mtu_behind_pcie_root_ports_forwards_frames_of_several_descriptors_whole() {
    jumbo_mtu_forwards_frames_of_several_descriptors_whole(NicModel::Igb, NicBus::RootPorts);
}

/// The jumbo test on ports of `model` placed as `bus`.
fn jumbo_mtu_forwards_frames_of_several_descriptors_whole(model: NicModel, bus: NicBus) {
    const N: u64 = 100;
    let mut rig = Rig::start_intel(
        model,
        "mode=io mtu0=9000 mtu1=9000",
        gen_count(N, 4000, true),
        bus,
        Vec::new(),
    );
    if bus == NicBus::RootPorts {
        let id = match model {
            NicModel::Igb => "igb (8086:10c9)",
            _ => "e1000e (8086:10d3)",
        };
        let needle = format!("pci: {id} at 01:00.0 02:00.0");
        assert!(
            rig.guest.lines().iter().any(|l| l.contains(&needle)),
            "no `{needle}`\n{}",
            rig.tail()
        );
    }
    let before = rig.stats();
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad),
        (2 * N, 2 * N, 0),
        "4000 B: {r:?}\n{}",
        rig.tail()
    );
    const LONG: u64 = 100;
    rig.gen
        .set_size(9018)
        .expect("a size the dgram backend takes");
    rig.gen.set_count(LONG);
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates),
        (2 * LONG, 2 * LONG, 0, 0),
        "9018 B: {r:?}\n{}",
        rig.tail()
    );
    let after = rig.stats();
    let s = rig.quit();
    for p in 0..2 {
        assert_eq!(s.ports[p].drops, PortDrops::default(), "port {p}: {s}");
        assert_eq!(
            (s.ports[p].rx, s.ports[p].tx),
            (N + LONG, N + LONG),
            "port {p}: both sizes, each frame once: {s}"
        );
        // RDT once per 32 re-posted buffers: a 9,018-byte frame takes three.
        let buffers = N + 3 * LONG;
        assert!(
            s.ports[p].kicks_rx <= buffers / 32 + 1,
            "port {p}: {} RDT writes for {buffers} buffers: {s}",
            s.ports[p].kicks_rx
        );
        let n = nic(&after, p);
        let reads = n.mmio_reads - nic(&before, p).mmio_reads;
        assert!(
            reads < 100,
            "port {p}: {reads} reads while forwarding: {after}"
        );
        assert!(n.link_up, "port {p}: {after}");
        assert_eq!((n.rx_errors, n.crc_errors, n.missed), (0, 0, 0), "{after}");
    }
    assert_no_leak(&s);
}

/// QMP `set_link` takes port 0's link down and up again: STATS and `/metrics` report it down
/// (speed 0), then up at 1000 Mb/s after QEMU's autonegotiation (500 ms of virtual time), two
/// changes counted, and forwarding resumes both ways with every frame. `append` is `mode=l2`
/// or the router's (`router`: the first run may lose the frames past the neighbour queue while
/// ARP is pending, counted; during the outage the router counts its routed frames for port 0
/// `tx_dropped`).
fn set_link_down_and_up(model: NicModel, append: &str) {
    const N: u64 = 300;
    let routed = append.contains("mode=router");
    let qdir = TestDir::new();
    let sock = qdir.path().join("qmp.sock");
    let mut rig = Rig::start_intel(
        model,
        append,
        gen_count(N, 64, true),
        NicBus::Root,
        vec![
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", sock.display()),
        ],
    );
    let mut qmp = harness::qmp::Qmp::connect(&sock, Duration::from_secs(10)).expect("QMP");
    let r = rig.run();
    let s = rig.stats();
    let lost = if routed {
        router(&s).drops.neigh_queue_full
    } else {
        0
    };
    assert!(
        lost <= 2 * 64,
        "only the ARP window may be lost: {lost} {s}"
    );
    assert_eq!(r.received + lost, 2 * N, "before: {r:?}");
    assert_eq!(
        (nic(&s, 0).link_up, nic(&s, 0).link_speed_mbps),
        (true, 1000),
        "{s}"
    );
    qmp.set_link("p0", false, Duration::from_secs(10))
        .expect("set_link off");
    let s = rig.stats();
    assert_eq!(
        (nic(&s, 0).link_up, nic(&s, 0).link_speed_mbps),
        (false, 0),
        "port 0 still up after set_link off: {s}"
    );
    assert!(nic(&s, 1).link_up, "{s}");
    let m = rig.metrics();
    for line in [
        "gannet_nic_link_up{port=\"0\"} 0",
        "gannet_nic_link_up{port=\"1\"} 1",
        "gannet_nic_link_speed_mbps{port=\"1\"} 1000",
    ] {
        assert!(
            m.lines().any(|l| l == line),
            "/metrics lacks `{line}`:\n{m}"
        );
    }
    // While port 0 is down, frames bound for it are dropped before TX and counted
    // `link_down` there (once the core's link poll, every 500 ms, saw it go down).
    let deadline = Instant::now() + Duration::from_secs(20);
    let p1 = rig.port(1);
    let mut frame = Vec::new();
    etherparse::PacketBuilder::ethernet2(peer_mac(1), guest_mac(1))
        .ipv4([10, 0, 1, 2], [10, 0, 0, 2], 64)
        .udp(4000, 5000)
        .write(&mut frame, b"while the link is down")
        .unwrap();
    let s = loop {
        p1.send(&frame).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let s = rig.stats();
        if s.ports[0].drops.link_down > 0 || Instant::now() > deadline {
            break s;
        }
    };
    assert!(s.ports[0].drops.link_down > 0, "no link_down drop: {s}");
    assert_eq!(s.ports[0].drops.tx_ring_full, 0, "{s}");
    if routed {
        // Routed to 10.0.0.2 (resolved in the first run), then refused by the down port.
        assert!(router(&s).tx_dropped > 0, "{s}");
    }
    drop(p1);
    qmp.set_link("p0", true, Duration::from_secs(10))
        .expect("set_link on");
    // Autonegotiation: 500 ms of virtual time; wait for STATS to say up (bounded).
    let deadline = Instant::now() + Duration::from_secs(20);
    let s = loop {
        let s = rig.stats();
        if nic(&s, 0).link_up || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(nic(&s, 0).link_up, "port 0 not up again: {s}");
    // The core's own link poll (every tick while a link is down) lets frames to it again.
    rig.guest
        .wait_for_line(
            |l| l.contains("port 0: link up: forwarding to it again"),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", rig.tail()));
    assert_eq!(nic(&s, 0).link_speed_mbps, 1000, "{s}");
    assert_eq!(nic(&s, 0).link_changes, 2, "down and up: {s}");
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad),
        (2 * N, 2 * N, 0),
        "after: {r:?}\n{}",
        rig.tail()
    );
    let s = rig.quit();
    // Every frame of the second run forwarded: the link_down drops stayed those of the outage.
    assert_eq!(s.ports[0].drops.over_mtu, 0, "{s}");
    assert_no_leak(&s);
}

#[test]
fn e1000e_set_link_down_and_up_is_counted_and_forwarding_resumes() {
    set_link_down_and_up(NicModel::E1000e, "mode=l2");
}

#[test]
fn igb_set_link_down_and_up_is_counted_and_forwarding_resumes() {
    set_link_down_and_up(NicModel::Igb, "mode=l2");
}

/// Issue 41 item 5 in router mode: the router's routed frames for a port whose link is down
/// are dropped (`link_down` on the port, `tx_dropped` in the router), and routing resumes on up.
#[test]
fn igb_router_across_set_link_down_and_up() {
    set_link_down_and_up(NicModel::Igb, "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24");
}
