//! igb (QEMU's 82576 model) with a queue pair per core and RSS (issue 41, items 3 and 7):
//! with `-smp 2` and `queues=2`, core `k` owns queue pair `k` of ports 0 and 1, and the ports
//! spread frames over the queues by the Toeplitz hash of their addresses and UDP ports under
//! Gannet's key and its round-robin redirection table. QEMU's model hashes inside the device,
//! so this runs on the unix-datagram backend, without root.
//!
//! The test computes each flow's queue with the same function ([`netstack::rss`]) and checks
//! the per-(port, queue) counters: every frame of a flow was received on its queue and sent
//! by that queue's core on the other port's queue of the same number, none reordered within
//! its flow, every page back at `quit`; the same in router mode (one router per core over one
//! FIB, once the next hops are resolved).

use gannet_tests::*;
use harness::gen::{peer_ip, UDP_DST_PORT, UDP_SRC_PORT_BASE};
use harness::qemu::NicModel;
use netstack::rss::{hash_ipv4_l4, queue_of, reta_round_robin, KEY};

/// UDP flows (source ports `10000..10016`).
const FLOWS: u16 = 16;
/// Frames per direction of the run of all flows at once: 100 per flow.
const FRAMES: u64 = 100 * FLOWS as u64;
/// Frames per direction of each flow's run alone.
const ALONE: u64 = 40;
/// Queue pairs (and cores).
const QUEUES: usize = 2;

/// The queue flow `f` of direction `dir` (0: into port 0, from the host behind it to the host
/// behind port 1) lands on: its Toeplitz hash under Gannet's key through the round-robin table.
fn queue_of_flow(dir: usize, f: u16) -> usize {
    let h = hash_ipv4_l4(
        &KEY,
        peer_ip(dir),
        peer_ip(1 - dir),
        UDP_SRC_PORT_BASE + f,
        UDP_DST_PORT,
    );
    queue_of(&reta_round_robin(QUEUES), h)
}

/// `(rx, tx)` of every (port, queue) entry of `s`, indexed `[port][queue]`.
fn per_queue(s: &Stats) -> [[(u64, u64); QUEUES]; 2] {
    let mut out = [[(0, 0); QUEUES]; 2];
    for p in &s.ports {
        out[p.port as usize][p.queue as usize] = (p.rx, p.tx);
    }
    out
}

/// Frames each core forwarded so far.
fn per_cpu(s: &Stats) -> Vec<u64> {
    s.per_cpu.iter().map(|c| c.forwarded).collect()
}

#[test]
fn two_cores_forward_each_flow_on_the_queue_its_rss_hash_picks() {
    // Frames each (ingress port, queue) should get from the run of all flows at once.
    let mut want = [[0u64; QUEUES]; 2];
    for dir in 0..2 {
        for f in 0..FLOWS {
            want[dir][queue_of_flow(dir, f)] += FRAMES / u64::from(FLOWS);
        }
        // The flows must spread (else the test could not tell the queues apart).
        assert!(
            want[dir].iter().all(|&n| n > 0),
            "flows do not spread: {want:?}"
        );
    }
    let gen = GenConfig {
        flows: FLOWS,
        ..gen_count(ALONE, 64, true)
    };
    let mut rig = Rig::start_intel_cpus(NicModel::Igb, "mode=l2 queues=2", gen, 2);
    let lines = rig.guest.lines();
    let rss = "2 queue pairs, RSS: Toeplitz over IPv4/IPv6 addresses and TCP/UDP ports, symmetric key (0x6d5a repeated, 40 bytes), RETA 128 entries round-robin over queues 0..2 (64..=64 entries each)";
    for p in 0..2 {
        let port = format!("port {p}: ");
        let needle = format!("igb (82576) MAC {} link up", mac_str(guest_mac(p)));
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&port) && l.contains(&needle) && l.contains(rss)),
            "no `{needle}` … `{rss}`\n{}",
            rig.tail()
        );
    }
    for k in 0..QUEUES {
        let needle = format!("igb queue pair {k} of ports 0 and 1: cpu {k} (polled)");
        assert!(lines.iter().any(|l| l.contains(&needle)), "no `{needle}`");
    }
    // Each flow alone, both ways: all its frames on the queue its hash picks, received there
    // and sent by that queue's core on the other port's queue of the same number, in order.
    let mut totals = [[(0u64, 0u64); QUEUES]; 2];
    for f in 0..FLOWS {
        rig.gen.set_flows(f, 1).expect("flows");
        let (before, b_cpu) = {
            let s = rig.stats();
            (per_queue(&s), per_cpu(&s))
        };
        let r = rig.run();
        assert_eq!(
            (r.sent, r.received, r.bad, r.duplicates, r.reordered),
            (2 * ALONE, 2 * ALONE, 0, 0, 0),
            "flow {f}: {r:?}\n{}",
            rig.tail()
        );
        let s = rig.stats();
        let (after, a_cpu) = (per_queue(&s), per_cpu(&s));
        let q = [queue_of_flow(0, f), queue_of_flow(1, f)];
        for port in 0..2 {
            for queue in 0..QUEUES {
                let rx = after[port][queue].0 - before[port][queue].0;
                let tx = after[port][queue].1 - before[port][queue].1;
                let want_rx = if q[port] == queue { ALONE } else { 0 };
                let want_tx = if q[1 - port] == queue { ALONE } else { 0 };
                assert_eq!(
                    (rx, tx),
                    (want_rx, want_tx),
                    "flow {f} (queues {q:?}): port {port} queue {queue} (rx, tx): {s}"
                );
                totals[port][queue].0 += rx;
                totals[port][queue].1 += tx;
            }
        }
        for k in 0..QUEUES {
            let fwd = a_cpu[k] - b_cpu[k];
            let want_fwd = ALONE * q.iter().filter(|&&x| x == k).count() as u64;
            assert_eq!(
                fwd, want_fwd,
                "flow {f} (queues {q:?}): cpu {k} forwarded: {s}"
            );
        }
    }
    // All flows at once: both cores busy, frames of different flows may pass each other, those
    // of one flow never.
    rig.gen.set_flows(0, FLOWS).expect("flows");
    rig.gen.set_count(FRAMES);
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates, r.reordered_in_flow),
        (2 * FRAMES, 2 * FRAMES, 0, 0, 0),
        "every frame forwarded, none reordered within its flow: {r:?}\n{}",
        rig.tail()
    );
    let s = rig.quit();
    assert_eq!((s.queues, s.pairs), (2, 2), "{s}");
    assert_eq!(
        s.ports.len(),
        2 * QUEUES,
        "one entry per (port, queue): {s}"
    );
    let end = per_queue(&s);
    for p in &s.ports {
        let (port, queue, cpu) = (p.port as usize, p.queue as usize, p.cpu as usize);
        assert_eq!(cpu, queue, "queue pair k belongs to cpu k: {p:?}");
        let (rx, tx) = (
            end[port][queue].0 - totals[port][queue].0,
            end[port][queue].1 - totals[port][queue].1,
        );
        assert_eq!(rx, want[port][queue], "port {port} queue {queue} rx: {s}");
        assert_eq!(
            tx,
            want[1 - port][queue],
            "port {port} queue {queue} tx: {s}"
        );
        assert_eq!(p.drops, PortDrops::default(), "{s}");
        assert!(p.kicks_rx <= p.rx / 32 + 1, "{p:?}");
        if queue == 0 {
            let n = p.nic.unwrap_or_else(|| panic!("no nic counters: {p:?}"));
            assert_eq!((n.rx_errors, n.crc_errors, n.missed), (0, 0, 0), "{s}");
            // The link as it was while forwarding: `quit`'s reset of the port (by queue 0's
            // core, while the other core disables its queue) is not a link change.
            assert_eq!(
                (n.link_up, n.link_speed_mbps, n.link_changes),
                (true, 1000, 0),
                "port {port}: final STATS after quit: {s}"
            );
        }
    }
    let forwarded: u64 = s.per_cpu.iter().map(|c| c.forwarded).sum();
    assert_eq!(forwarded, 2 * FRAMES + 2 * ALONE * u64::from(FLOWS), "{s}");
    assert_no_leak(&s);
}

#[test]
fn more_queue_pairs_than_cpus_is_a_named_config_error() {
    let dir = TestDir::new();
    let cfg = GuestConfig {
        image: image(),
        dgram_dir: dir.path().to_path_buf(),
        append: "mode=l2 queues=3".into(),
        cpus: 2,
        nic: NicModel::Igb,
        ..GuestConfig::default()
    };
    let mut guest = Guest::boot(&cfg).unwrap_or_else(|e| panic!("booting QEMU: {e:#}"));
    let exit = guest.wait_exit(FAIL_TIMEOUT).unwrap();
    assert_eq!(exit, GuestExit::GuestFailure, "{}", guest.tail_report());
    let needle = "config error: queues=3: igb ports get one queue pair per core, and 2 CPU(s) are online (the 82576 has 16 queue pairs)";
    assert!(
        guest.lines().iter().any(|l| l.contains(needle)),
        "no `{needle}`\n{}",
        guest.tail_report()
    );
}

/// Router mode on the same 2 × 2 queue pairs (one router per core over one FIB): after a
/// first run resolves the next hops, every frame of each (port, queue) was routed by that
/// queue's core out of the other port's queue of the same number, TTL 63, none reordered
/// within its flow, every page back.
#[test]
fn two_cores_route_each_flow_on_the_queue_its_rss_hash_picks() {
    const ROUTED: u64 = 50 * FLOWS as u64;
    let gen = GenConfig {
        flows: FLOWS,
        // Frames that arrive while a core resolves a next hop wait in its queue (8 per
        // neighbour): a window of 8 overflows none.
        window: 8,
        expect_ttl: Some(63),
        ..gen_count(4 * u64::from(FLOWS), 64, true)
    };
    let mut rig = Rig::start_intel_cpus(
        NicModel::Igb,
        "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 queues=2",
        gen,
        2,
    );
    let warm = rig.run();
    assert_eq!(
        (warm.received, warm.bad),
        (warm.sent, 0),
        "first run (next hops resolved on the way): {warm:?}\n{}",
        rig.tail()
    );
    let mut want = [[0u64; QUEUES]; 2];
    for (dir, w) in want.iter_mut().enumerate() {
        for f in 0..FLOWS {
            w[queue_of_flow(dir, f)] += ROUTED / u64::from(FLOWS);
        }
    }
    rig.gen.set_count(ROUTED);
    let before = per_queue(&rig.stats());
    let r = rig.run();
    assert_eq!(
        (r.sent, r.received, r.bad, r.duplicates, r.reordered_in_flow),
        (2 * ROUTED, 2 * ROUTED, 0, 0, 0),
        "every frame routed with TTL 63, none reordered within its flow: {r:?}\n{}",
        rig.tail()
    );
    let s = rig.quit();
    let after = per_queue(&s);
    for port in 0..2 {
        for queue in 0..QUEUES {
            let rx = after[port][queue].0 - before[port][queue].0;
            let tx = after[port][queue].1 - before[port][queue].1;
            assert_eq!(
                (rx, tx),
                (want[port][queue], want[1 - port][queue]),
                "port {port} queue {queue} (rx, tx): {s}"
            );
        }
    }
    assert_eq!(router(&s).drops.neigh_queue_full, 0, "{s}");
    assert_no_leak(&s);
}

/// `queues=auto` on igb takes one queue pair per CPU; `queues=2` on 3 CPUs leaves the third
/// idle, named in the boot log, and forwards on the other two.
#[test]
fn auto_takes_a_queue_pair_per_cpu_and_cpus_beyond_the_queues_stay_idle_named() {
    for (append, cpus, idle) in [
        ("mode=l2", 2, None),
        (
            "mode=l2 queues=2",
            3,
            Some("igb: 2 queue pairs per port on 3 CPUs: cpus 2..2 stay idle (no queue pair; queues=3 uses them)"),
        ),
    ] {
        let gen = GenConfig {
            flows: FLOWS,
            ..gen_count(4 * u64::from(FLOWS), 64, true)
        };
        let mut rig = Rig::start_intel_cpus(NicModel::Igb, append, gen, cpus);
        let lines = rig.guest.lines();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("port 0: ") && l.contains(", 2 queue pairs, RSS: Toeplitz")),
            "{append} on {cpus} CPUs: no 2-queue line\n{}",
            rig.tail()
        );
        if let Some(idle) = idle {
            assert!(lines.iter().any(|l| l.contains(idle)), "no `{idle}`\n{}", rig.tail());
        }
        let r = rig.run();
        assert_eq!((r.received, r.bad), (r.sent, 0), "{append}: {r:?}\n{}", rig.tail());
        let s = rig.quit();
        assert_eq!((s.queues, s.pairs, s.per_cpu.len()), (2, 2, 2), "{append}: {s}");
        assert!(s.per_cpu.iter().all(|c| c.forwarded > 0), "{append}: {s}");
        assert_no_leak(&s);
    }
}

/// What the NAT gets from RSS: nothing but the spread. On 2 igb queue pairs (`mode=nat
/// queues=2`) each inside host is translated by the core that owns it (its mapping from that
/// core's block of `nat_ports`), whichever queue its frames land on; the test computes, from
/// the key and the table, which queue each datagram and each reply lands on, and so exactly
/// how many frames the cores hand over to the owner (the NAT's software steering), and checks
/// every reply reaches its host.
#[test]
fn nat_hands_over_exactly_the_frames_rss_puts_on_a_core_that_does_not_own_their_flow() {
    const HOSTS: u8 = 16;
    const POOL: [u8; 4] = [192, 0, 2, 1];
    const SERVER: [u8; 4] = [198, 51, 100, 7];
    let udp = |port: usize, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16| {
        let mut f = Vec::new();
        etherparse::PacketBuilder::ethernet2(peer_mac(port), guest_mac(port))
            .ipv4(src, dst, 64)
            .udp(sp, dp)
            .write(&mut f, b"through the nat")
            .unwrap();
        f
    };
    // (source, source port, destination, destination port) of a UDP frame.
    let endpoints = |f: &[u8]| {
        let (ip, rest) = etherparse::Ipv4Header::from_slice(&f[14..]).unwrap();
        let (u, _) = etherparse::UdpHeader::from_slice(rest).unwrap();
        (ip.source, u.source_port, ip.destination, u.destination_port)
    };
    let reta = reta_round_robin(QUEUES);
    let host = |i: u8| [10, 0, 0, 10 + i];
    let owner = |i: u8| {
        let addr = u32::from_be_bytes(host(i));
        usize::from(netstack::nat::ports::owner_of_inside(
            addr,
            2,
            netstack::config::nat::PAIRING_KEY,
        ))
    };
    let mut rig = Rig::start_intel_cpus(
        NicModel::Igb,
        "mode=nat nat_pool=192.0.2.1 nat_ports=20000-20999 nat_sessions=1024 queues=2",
        gen_count(1, 64, false),
        2,
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    let mut handed = 0u64;
    let mut rx = [[0u64; QUEUES]; 2];
    for i in 0..HOSTS {
        let sp = 5000 + u16::from(i);
        p0.send(&udp(0, host(i), sp, SERVER, 53)).unwrap();
        let q = queue_of(&reta, hash_ipv4_l4(&KEY, host(i), SERVER, sp, 53));
        rx[0][q] += 1;
        handed += u64::from(q != owner(i));
    }
    let out = receive_frames(&p1, usize::from(HOSTS));
    assert_eq!(out.len(), usize::from(HOSTS), "{}", rig.tail());
    let mut mapped = Vec::new();
    for f in &out {
        let (src, sport, dst, dport) = endpoints(f);
        assert_eq!((src, dst, dport), (POOL, SERVER, 53));
        mapped.push(sport);
    }
    // The owner's block: core 0 has 20000-20499, core 1 20500-20999.
    let mut by_core = [0usize; 2];
    for &port in &mapped {
        let o = usize::from(port >= 20500);
        by_core[o] += 1;
        p1.send(&udp(1, SERVER, 53, POOL, port)).unwrap();
        let q = queue_of(&reta, hash_ipv4_l4(&KEY, SERVER, POOL, 53, port));
        rx[1][q] += 1;
        handed += u64::from(q != o);
    }
    let owners: Vec<usize> = (0..HOSTS).map(owner).collect();
    assert_eq!(
        by_core,
        [
            owners.iter().filter(|&&o| o == 0).count(),
            owners.iter().filter(|&&o| o == 1).count()
        ],
        "each host's mapping comes from its owner's block"
    );
    let back = receive_frames(&p0, usize::from(HOSTS));
    assert_eq!(back.len(), usize::from(HOSTS), "{}", rig.tail());
    let mut hosts_seen: Vec<u8> = back
        .iter()
        .map(|f| {
            let (src, sport, dst, dport) = endpoints(f);
            assert_eq!((src, sport), (SERVER, 53));
            assert_eq!(dport, 5000 + u16::from(dst[3] - 10), "{dst:?}");
            dst[3] - 10
        })
        .collect();
    hosts_seen.sort_unstable();
    assert_eq!(hosts_seen, (0..HOSTS).collect::<Vec<_>>());
    drop((p0, p1));
    let s = rig.quit();
    for p in &s.ports {
        assert_eq!(p.rx, rx[p.port as usize][p.queue as usize], "{p:?}: {s}");
    }
    assert!(
        handed > 0,
        "the flows must land away from their owner sometimes"
    );
    assert_eq!(s.nf.handed_off, handed, "{s}");
    assert_eq!(s.nf.handoff_dropped, 0, "{s}");
    assert_no_leak(&s);
}

/// The other hash types Gannet turns on, checked against QEMU's model frame by frame: TCP over
/// IPv4 (addresses and ports, `MRQC` bit 16) and UDP over IPv6 (bit 23), 16 flows each, one
/// frame per flow into port 0 (l2 mode forwards them out of port 1); each (port 0, queue)'s
/// received count is what [`netstack::rss`] computes.
#[test]
fn tcp_over_ipv4_and_udp_over_ipv6_land_on_the_queues_the_hash_picks() {
    let reta = reta_round_robin(QUEUES);
    let src6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let dst6 = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    // Per kind: the frames, and how many each queue should get.
    let mut kinds = [(Vec::new(), [0u64; QUEUES]), (Vec::new(), [0u64; QUEUES])];
    for f in 0..FLOWS {
        let sp = 30000 + 7 * f;
        let mut tcp = Vec::new();
        etherparse::PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
            .ipv4(peer_ip(0), peer_ip(1), 64)
            .tcp(sp, 80, 1, 1024)
            .write(&mut tcp, b"rss")
            .unwrap();
        kinds[0].0.push(tcp);
        kinds[0].1[queue_of(&reta, hash_ipv4_l4(&KEY, peer_ip(0), peer_ip(1), sp, 80))] += 1;
        let mut udp6 = Vec::new();
        etherparse::PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
            .ipv6(src6, dst6, 64)
            .udp(sp, 53)
            .write(&mut udp6, b"rss")
            .unwrap();
        kinds[1].0.push(udp6);
        let h = netstack::rss::hash_ipv6_l4(&KEY, src6, dst6, sp, 53);
        kinds[1].1[queue_of(&reta, h)] += 1;
    }
    for (name, (_, want)) in ["TCP/IPv4", "UDP/IPv6"].iter().zip(&kinds) {
        assert!(
            want.iter().all(|&n| n > 0),
            "{name} flows do not spread: {want:?}"
        );
    }
    let mut rig = Rig::start_intel_cpus(
        NicModel::Igb,
        "mode=l2 queues=2",
        gen_count(1, 64, false),
        2,
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    for (name, (frames, want)) in ["TCP/IPv4", "UDP/IPv6"].iter().zip(&kinds) {
        let before = per_queue(&rig.stats());
        for f in frames {
            p0.send(f).unwrap();
        }
        let out = receive_frames(&p1, frames.len());
        assert_eq!(out.len(), frames.len(), "{name}\n{}", rig.tail());
        let s = rig.stats();
        let after = per_queue(&s);
        let rx: Vec<u64> = (0..QUEUES)
            .map(|q| after[0][q].0 - before[0][q].0)
            .collect();
        let tx: Vec<u64> = (0..QUEUES)
            .map(|q| after[1][q].1 - before[1][q].1)
            .collect();
        assert_eq!(rx, want, "{name}: port 0 rx per queue: {s}");
        assert_eq!(tx, want, "{name}: port 1 tx per queue: {s}");
    }
    drop((p0, p1));
    let s = rig.quit();
    assert_no_leak(&s);
}
