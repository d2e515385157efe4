//! SMP bring-up: with `-smp 1`, `2` and `4` every CPU the MADT lists comes online and reports,
//! `drain_all_pages` is acknowledged by every CPU, and forwarding works beside idle APs.

use gannet_tests::*;

fn boot_cpus(cpus: u32) -> Rig {
    Rig::start_cpus("mode=l2", gen_count(1000, 64, false), cpus)
}

fn cpus_lines(rig: &Rig, cpus: u32) -> Vec<String> {
    let from = rig.guest.line_count();
    rig.guest.send_line("cpus").unwrap();
    let mut out = Vec::new();
    let mut at = from;
    while out.len() < cpus as usize {
        let (next, line) = rig
            .guest
            .wait_for_line_from(at, |l| l.starts_with("cpu "), STATS_TIMEOUT)
            .unwrap_or_else(|e| panic!("cpus: only {} lines: {e:#}\n{}", out.len(), rig.tail()));
        out.push(line);
        at = next + 1;
    }
    out
}

#[test]
fn every_cpu_comes_online_and_drains() {
    for cpus in [1u32, 2, 4] {
        let mut rig = boot_cpus(cpus);
        let lines = rig.guest.lines();
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("smp: {cpus} CPUs online"))),
            "-smp {cpus}: {}",
            rig.tail()
        );
        let r = rig.run();
        assert_eq!(r.received, 1000, "-smp {cpus}: {r:?}");
        let cl = cpus_lines(&rig, cpus);
        for (i, l) in cl.iter().enumerate() {
            assert!(
                l.starts_with(&format!("cpu {i}: apic {i} online")),
                "-smp {cpus}: {l}"
            );
        }
        assert!(cl[0].contains("forwarding forwarded 1000"), "{}", cl[0]);
        let from = rig.guest.line_count();
        rig.guest.send_line("drain").unwrap();
        let (_, line) = rig
            .guest
            .wait_for_line_from(from, |l| l.starts_with("drain_all_pages:"), STATS_TIMEOUT)
            .unwrap();
        assert!(
            line.starts_with(&format!("drain_all_pages: ok on {cpus} CPUs")),
            "-smp {cpus}: {line}"
        );
        // Every AP honoured the request from its own loop.
        for (i, l) in cpus_lines(&rig, cpus).iter().enumerate().skip(1) {
            assert!(l.ends_with("drains 1"), "-smp {cpus}, cpu {i}: {l}");
        }
        let s = rig.quit();
        assert_eq!(s.cpus_online, cpus);
        assert_no_leak(&s);
    }
}

/// CPU time (user + system) of process `pid` in clock ticks, from /proc/PID/stat.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("QEMU's /proc stat");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn idle_guest_with_four_cpus_uses_little_host_cpu() {
    let clk_tck: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100);
    let mut rig = boot_cpus(4);
    let pid = rig.guest.pid();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert!(
        comm.starts_with("qemu-system"),
        "pid {pid} is `{comm}`, not QEMU"
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let t0 = cpu_ticks(pid);
    let wall = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let used = (cpu_ticks(pid) - t0) as f64 / clk_tck as f64;
    let share = used / wall.elapsed().as_secs_f64();
    // Four busy-polling vCPUs would take both host cores (measured: 100% of one core for
    // idle=poll with -smp 4); halted ones take a few percent (measured 2%).
    assert!(
        share < 0.25,
        "idle -smp 4 guest used {:.0}% of a host core",
        share * 100.0
    );
    let s = rig.quit();
    assert_no_leak(&s);
}

#[test]
fn two_cores_forward_two_port_pairs_at_once() {
    let (mut rig, more) = Rig::start_pairs("mode=l2", gen_count(3000, 64, true), Vec::new(), 2, 2);
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("forwarding 2 port pair(s) on 2 core(s)")),
        "{}",
        rig.tail()
    );
    let (r0, r1) = std::thread::scope(|s| {
        let other = s.spawn(|| more[0].run().expect("generator for pair 1"));
        (rig.run(), other.join().unwrap())
    });
    for (k, r) in [(0, &r0), (1, &r1)] {
        assert_eq!(
            (r.sent, r.received, r.bad),
            (6000, 6000, 0),
            "pair {k}: {r:?}\n{}",
            rig.tail()
        );
    }
    // `pools` lists every core's pools, ids 0..4 in order.
    let from = rig.guest.line_count();
    rig.guest.send_line("pools").unwrap();
    let mut at = from;
    for id in 0..4 {
        let (next, line) = rig
            .guest
            .wait_for_line_from(at, |l| l.starts_with("pool {"), STATS_TIMEOUT)
            .unwrap_or_else(|e| panic!("pools: {e:#}\n{}", rig.tail()));
        let pool: netstack::stats::PoolStats = serde_json::from_str(&line["pool ".len()..])
            .unwrap_or_else(|e| panic!("pool line {id}: {e}: {line}"));
        assert_eq!(pool.id, id, "pool line {id}: {line}");
        at = next + 1;
    }
    let s = rig.quit();
    assert_eq!(s.pairs, 2);
    assert_eq!(s.per_cpu.len(), 2);
    for (k, c) in s.per_cpu.iter().enumerate() {
        assert_eq!(c.cpu as usize, k);
        assert_eq!(c.forwarded, 6000, "cpu {k}: {c:?}");
    }
    for p in 0..4 {
        assert_eq!(s.ports[p].rx, 3000, "port {p}: {}", s);
        assert_eq!(s.ports[p].tx, 3000, "port {p}: {}", s);
    }
    assert_eq!(s.pools.len(), 4);
    assert_no_leak(&s);
}

#[test]
fn pages_cross_cores_and_come_home_through_the_pool_ring() {
    // xcore=on: frames received on pair k leave through pair k+1 (the other core's TX queue);
    // the transmitting core returns each page to its owner's pool through the pool's ring.
    let (mut rig, more) = Rig::start_pairs(
        "mode=l2 xcore=on",
        gen_count(1, 64, false),
        Vec::new(),
        2,
        2,
    );
    let ports = [
        rig.port(0),
        rig.port(1),
        more[0].raw_port(0).unwrap(),
        more[0].raw_port(1).unwrap(),
    ];
    const FRAMES: u64 = 200;
    // (in port, out port): port 0 (cpu 0) -> port 3 (cpu 1), port 2 (cpu 1) -> port 1 (cpu 0).
    for (inp, out) in [(0usize, 3usize), (2, 1)] {
        for seq in 0..FRAMES {
            let f = gen::build_frame(0, seq, 0, 60).unwrap();
            ports[inp].send(&f).unwrap();
            let got = ports[out].recv_timeout(FRAME_TIMEOUT).unwrap_or_else(|| {
                panic!(
                    "frame {seq} from port {inp} not out of port {out}\n{}",
                    rig.tail()
                )
            });
            assert_eq!(
                &got[0..6],
                &peer_mac(out % 2),
                "dst MAC = the out port's peer"
            );
            assert_eq!(
                &got[6..12],
                &[2, 0, 0, 0, 0, out as u8 + 1],
                "src MAC = port {out}"
            );
            assert_eq!(&got[12..], &f[12..], "payload changed");
        }
    }
    let s = rig.quit();
    for p in [0usize, 2] {
        let back = s.pools[p].counters.recycle_ring;
        assert!(
            back >= FRAMES,
            "pool {p}: {back} pages came back through its ring, expected {FRAMES}: {}",
            s
        );
    }
    assert_no_leak(&s);
}

#[test]
fn ipis_reach_one_cpu_a_set_and_all_others() {
    let mut rig = boot_cpus(4);
    let from = rig.guest.line_count();
    rig.guest.send_line("ipi").unwrap();
    let mut lines = Vec::new();
    let mut at = from;
    // all others, the set of online CPUs (minus the sender), then CPUs 1, 2 and 3 one by one.
    while lines.len() < 5 {
        let (next, line) = rig
            .guest
            .wait_for_line_from(at, |l| l.starts_with("ipi "), STATS_TIMEOUT)
            .unwrap_or_else(|e| panic!("ipi: {lines:?}: {e:#}\n{}", rig.tail()));
        lines.push(line);
        at = next + 1;
    }
    assert!(
        lines[0].starts_with("ipi all others") && lines[0].ends_with("3 of 3 CPUs answered"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("ipi set") && lines[1].ends_with("3 of 3 CPUs answered"),
        "{lines:?}"
    );
    for (i, l) in lines[2..].iter().enumerate() {
        assert!(
            l.starts_with(&format!("ipi one One({})", i + 1))
                && l.ends_with("1 of 1 CPUs answered"),
            "{lines:?}"
        );
    }
    let s = rig.quit();
    assert_no_leak(&s);
}
