//! Router mode on two cores (`mode=router queues=2`, virtio-net multi-queue on the tap
//! backend): one FIB shared read-only, one router per core, neighbour learning handed between
//! the cores (an ARP reply lands on whichever queue the tap steers it to), the management
//! plane's frames handed to core 0.
//!
//! These tests need root and /dev/net/tun (a network namespace with tap devices): they fail,
//! with that message, where those are missing.

use std::time::{Duration, Instant};

use etherparse::{Ipv4Header, PacketBuilder, SlicedPacket, TransportSlice};
use gannet_tests::*;
use netstack::wire::{ETH_DST, ETH_HDR_LEN, ETH_SRC};

const ROUTER_MQ: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 queues=2";
/// Flows offered: the kernel's tun driver steers frames onto the tap's queues by flow hash.
const FLOWS: u16 = 16;

/// Receive `n` non-ARP frames on host port `p` within `timeout`, answering ARP requests for
/// the host behind it (as the next hop would).
fn recv_n_answering_arp(
    port: &gen::RawPort,
    p: usize,
    n: usize,
    timeout: Duration,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < n {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        let Some(f) = port.recv_timeout(left) else {
            break;
        };
        match gen::arp_reply(&f, p) {
            Some(reply) => port.send(&reply).expect("sending the ARP reply"),
            None => got.push(f),
        }
    }
    got
}

#[test]
fn two_cores_route_with_one_fib_and_shared_neighbours() {
    const FRAMES: u64 = 2000;
    // Window 8: frames that arrive while a core resolves the next hop wait in its queue
    // (8 per neighbour), so no frame overflows it and every one must arrive.
    let gen = GenConfig {
        flows: FLOWS,
        window: 8,
        expect_ttl: Some(63),
        ..gen_count(FRAMES, 64, false)
    };
    let mut rig = Rig::start_tap(ROUTER_MQ, gen, 2, 2);
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("port 0: ") && l.contains("2 of 2 queue pairs active")),
        "{}",
        rig.tail()
    );
    // First, before anything is resolved: one frame per flow, all at once. Each core queues
    // the frames of its queue and asks for 10.0.1.2; the tap steers each reply onto one
    // queue, and a core whose reply went to the other core learns it through the neighbour
    // update (STATS router.neigh_sync).
    let (p0, p1) = (rig.port(0), rig.port(1));
    let n = 8usize;
    for flow in 0..n as u16 {
        p0.send(&gen::build_frame(0, 1_000_000 + u64::from(flow), flow, 60).unwrap())
            .unwrap();
    }
    let got = recv_n_answering_arp(&p1, 1, n, Duration::from_secs(3));
    assert_eq!(got.len(), n, "routed {} of {n}\n{}", got.len(), rig.tail());
    for f in &got {
        assert_eq!(&f[ETH_DST], &peer_mac(1), "dst MAC = the resolved next hop");
        assert_eq!(&f[ETH_SRC], &guest_mac(1), "src MAC = port 1");
        let (ip, _) = Ipv4Header::from_slice(&f[ETH_HDR_LEN..]).expect("IPv4");
        assert_eq!(ip.time_to_live, 63);
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        gen::validate_frame(f).expect("generator payload intact");
    }
    drop((p0, p1));
    // Then the generator: many flows, every frame routed (TTL 63, valid checksums).
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates),
        (FRAMES, FRAMES, 0, 0),
        "every frame sent must be routed out of port 1 with TTL 63: {r:?}\n{}",
        rig.tail()
    );
    // `neigh` on the console: every core prints its own table, and both know 10.0.1.2.
    let from = rig.guest.line_count();
    rig.guest.send_line("neigh").unwrap();
    for cpu in 0..2 {
        rig.guest
            .wait_for_line_from(
                from,
                |l| l.contains(&format!("neigh cpu {cpu} 10.0.1.2 port 1 ")),
                STATS_TIMEOUT,
            )
            .unwrap_or_else(|e| panic!("neigh: no entry from cpu {cpu}: {e:#}\n{}", rig.tail()));
    }
    let s = rig.quit();
    assert_eq!(s.queues, 2, "{}", s);
    assert_eq!(s.per_cpu.len(), 2, "{}", s);
    let mut total = 0;
    for (k, c) in s.per_cpu.iter().enumerate() {
        let fwd = c.forwarded;
        assert!(fwd > 0, "cpu {k} routed nothing: {}", s);
        total += fwd;
    }
    // per_cpu counts frames sent: the routed frames plus the ARP requests the cores sent.
    let total_routed = FRAMES + n as u64;
    assert_eq!(router(&s).forwarded, total_routed, "{}", s);
    assert!(total >= total_routed, "{}", s);
    // Router counters are summed over the cores: every frame received has one outcome.
    assert_eq!(router(&s).queued_now, 0, "{}", s);
    assert_eq!(router(&s).drops.neigh_queue_full, 0, "{}", s);
    assert_eq!(router(&s).drops.neigh_timeout, 0, "{}", s);
    // What one core learned from ARP reached the other.
    assert!(router(&s).neigh_sync.sent > 0, "{}", s);
    assert_eq!(
        router(&s).neigh_sync.applied,
        router(&s).neigh_sync.sent,
        "{}",
        s
    );
    assert_eq!(router(&s).neigh_sync.dropped, 0, "{}", s);
    assert_no_leak(&s);
}

/// The management plane (smoltcp) runs on core 0 only: frames for it that the tap steers onto
/// core 1's queue are handed to core 0. TCP SYNs to a closed port of 10.0.0.1 on many flows
/// (source ports) go to the host, and smoltcp answers each with a RST; echo requests are
/// answered by whichever core's router receives them. One SYN at a time (smoltcp's queues are
/// 16 frames deep and it drops a reply whose neighbour it is still resolving: retried).
#[test]
fn management_plane_answers_on_every_queue() {
    const SYNS: u16 = 16;
    let mut rig = Rig::start_tap(ROUTER_MQ, gen_count(1, 64, false), 2, 2);
    let p0 = rig.port(0);
    // Introduce ourselves (smoltcp learns neighbours from ARP aimed at it).
    p0.send(&arp_request([10, 0, 0, 1])).unwrap();
    let mut echoes = 0;
    let rst = |p0: &gen::RawPort, sport: u16, echoes: &mut u16| -> bool {
        let mut syn = Vec::new();
        PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
            .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
            .tcp(sport, 81, 1000, 1024)
            .syn()
            .write(&mut syn, &[])
            .unwrap();
        p0.send(&syn).unwrap();
        let mut echo = Vec::new();
        PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
            .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
            .icmpv4_echo_request(0x4711, sport)
            .write(&mut echo, b"gannet ping")
            .unwrap();
        p0.send(&echo).unwrap();
        let deadline = Instant::now() + Duration::from_millis(1500);
        let mut got = false;
        while Instant::now() < deadline {
            let Some(f) = p0.recv_timeout(Duration::from_millis(100)) else {
                continue;
            };
            if let Some(r) = gen::arp_reply(&f, 0) {
                p0.send(&r).unwrap();
                continue;
            }
            let Ok(pkt) = SlicedPacket::from_ethernet(&f) else {
                continue;
            };
            match &pkt.transport {
                Some(TransportSlice::Tcp(t)) if t.rst() && t.destination_port() == sport => {
                    got = true
                }
                Some(TransportSlice::Icmpv4(i)) if i.type_u8() == 0 => *echoes += 1,
                _ => {}
            }
            if got && *echoes > sport - 40000 {
                break;
            }
        }
        got
    };
    let mut missing = Vec::new();
    for i in 0..SYNS {
        let sport = 40000 + i;
        if !(0..3).any(|_| rst(&p0, sport, &mut echoes)) {
            missing.push(sport);
        }
    }
    assert!(
        missing.is_empty(),
        "no RST for source ports {missing:?}\n{}",
        rig.tail()
    );
    drop(p0);
    let s = rig.quit();
    assert!(router(&s).to_host >= u64::from(SYNS), "{:?}", router(&s));
    let path = s.mgmt.expect("STATS has `mgmt` with a management address");
    assert!(
        path.handoff > 0,
        "no frame for the management plane reached core 1's queue: {}",
        s
    );
    assert_eq!(path.handoff_dropped, 0, "{}", s);
    assert!(router(&s).echo_replies >= u64::from(SYNS), "{}", s);
    assert_no_leak(&s);
}

/// Resolve 10.0.1.2 on both cores first: 8 flows (the tun driver spreads them over both
/// queues) routed, each core's ARP request answered.
fn resolve_on_both_cores(rig: &Rig) {
    let (p0, p1) = (rig.port(0), rig.port(1));
    let n = 8usize;
    for flow in 0..n as u16 {
        p0.send(&gen::build_frame(0, 1_000_000 + u64::from(flow), flow, 60).unwrap())
            .unwrap();
    }
    let got = recv_n_answering_arp(&p1, 1, n, Duration::from_secs(3));
    assert_eq!(got.len(), n, "routed {} of {n}\n{}", got.len(), rig.tail());
}

/// Live route reload on two routing cores: the FIB is replaced 6 times (`routes commit` with
/// a new prefix, then `routes reload` back to the boot routes, alternately) while 64-byte
/// traffic flows to 10.0.1.2, whose route never changes. Both cores switch at their quiescent
/// point; each old FIB is retired with one batched shootdown to both cores. The generator's
/// window (8 frames in flight) keeps the rate at one the router sustains, so no frame may be
/// lost while core 0 builds (in bounded steps between its poll iterations).
#[test]
fn two_cores_keep_forwarding_through_six_fib_reloads() {
    const FRAMES: u64 = 60_000;
    const RELOADS: u64 = 6;
    let gen = GenConfig {
        flows: FLOWS,
        window: 8,
        expect_ttl: Some(63),
        ..gen_count(FRAMES, 64, false)
    };
    let mut rig = Rig::start_tap(ROUTER_MQ, gen, 2, 2);
    resolve_on_both_cores(&rig);
    let mut during = 0;
    let mut swaps = Vec::new();
    let r = std::thread::scope(|sc| {
        let h = sc.spawn(|| rig.gen.run());
        std::thread::sleep(Duration::from_millis(200));
        for i in 0..RELOADS {
            let generation = i + 2;
            let from = rig.guest.line_count();
            if i % 2 == 0 {
                rig.guest
                    .send_line(&format!("route add 172.{}.0.0/16,10.0.1.2", 16 + i))
                    .unwrap();
                rig.guest.send_line("routes commit").unwrap();
            } else {
                rig.guest.send_line("routes reload").unwrap();
            }
            let retired = format!("FIB generation {} retired", generation - 1);
            let line = rig
                .guest
                .wait_for_line_from(from, |l| l.contains(&retired), Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("reload {i}: `{retired}`: {e:#}\n{}", rig.tail()));
            swaps.push(line.1);
            if !h.is_finished() {
                during += 1;
            }
        }
        h.join().unwrap()
    })
    .unwrap_or_else(|e| panic!("generator: {e:#}"));
    eprintln!("reloads during traffic: {during}; {swaps:#?}; {r:?}");
    assert!(
        during >= 3,
        "only {during} reloads while traffic flowed: {r:?}"
    );
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates),
        (FRAMES, FRAMES, 0, 0),
        "frames lost or damaged across the reloads: {r:?}\n{}",
        rig.tail()
    );
    let s = rig.quit();
    let f = s.fib.unwrap_or_else(|| panic!("no fib section: {s}"));
    assert_eq!(
        (f.generation, f.reloads, f.retired, f.failed),
        (RELOADS + 1, RELOADS, RELOADS, 0),
        "{s}"
    );
    // Each retirement: one batch from cpu 0 to both cores (the FIB fits one batch).
    assert_eq!(f.retire_batches, RELOADS, "{s}");
    assert!(s.per_cpu[0].tlb.batches >= RELOADS, "{s}");
    assert!(s.per_cpu[1].tlb.flushes_received >= RELOADS, "{s}");
    for c in &s.per_cpu {
        assert!(c.forwarded > 0, "cpu {} routed nothing: {s}", c.cpu);
    }
    assert_no_leak(&s);
}

/// Benchmark (`--ignored`; docs/benchmarks-journal.md "Live route reload"): the 100,000-route table replaced
/// 10 times while 64-byte traffic on 16 flows is routed by two cores (`queues=2`, tap): each
/// build runs in steps on core 0 between its poll iterations, core 1 switches at its quiescent
/// point, each old FIB goes with one shootdown to both cores; no frame lost, every page back.
#[test]
#[ignore = "benchmark: ~1 min; cargo test -p tests --test router_mq -- --ignored"]
fn hundred_thousand_routes_replaced_ten_times_on_two_routing_cores() {
    const RELOADS: u64 = 10;
    let dir = TestDir::new();
    let file = dir.path().join("routes100k.txt");
    write_routes_100k(&file);
    let window: u64 = std::env::var("GANNET_RELOAD_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let gen = GenConfig {
        flows: FLOWS,
        window,
        count: None,
        // The ceiling: traffic ends when the 10th old FIB is retired.
        seconds: 150.0,
        expect_ttl: Some(63),
        ..gen_count(0, 64, false)
    };
    let extra = vec!["-initrd".to_string(), file.display().to_string()];
    let mut rig = Rig::start_tap_with(ROUTER_MQ, gen, 2, 2, extra);
    resolve_on_both_cores(&rig);
    let (r, during) = reload_while_forwarding(&mut rig, RELOADS, Duration::from_secs(60));
    let s = rig.quit();
    eprintln!("{s}");
    assert_eq!(during, RELOADS, "reloads after traffic ended: {r:?}");
    assert_eq!(
        (r.received, r.bad, r.duplicates),
        (r.sent, 0, 0),
        "frames lost across the reloads: {r:?}"
    );
    let f = s.fib.unwrap_or_else(|| panic!("no fib section: {s}"));
    assert_eq!(
        (f.generation, f.retired, f.failed),
        (RELOADS + 1, RELOADS, 0),
        "{s}"
    );
    assert_eq!(f.retire_batches, RELOADS, "{s}");
    assert!(s.per_cpu[1].tlb.flushes_received >= RELOADS, "{s}");
    for c in &s.per_cpu {
        assert!(c.forwarded > 0, "cpu {} routed nothing: {s}", c.cpu);
    }
    assert_no_leak(&s);
}
