//! The deterministic datapath benchmark (`sim=K`): simulated virtio-net devices on in-memory
//! rings, `-smp 1 -icount shift=0,sleep=off`, no NIC. The figure must be identical run to run,
//! every delivered frame must leave port 1 as expected, and the guest must shut down with every
//! page back (`cargo xtask bench sim` runs the full table).

use gannet_tests::bench_sim::{run_one_acl, run_one_with_log, SimBenchConfig, SimMode, SimRecord};
use gannet_tests::*;

fn run(mode: SimMode, k: u16) -> (SimRecord, Vec<String>) {
    let cfg = SimBenchConfig::new(image());
    run_one_with_log(&cfg, mode, k).unwrap_or_else(|e| panic!("sim {mode:?} K={k}: {e:#}"))
}

/// The final STATS line: every page is back (as the clean exit status already says).
fn assert_no_leak(lines: &[String]) {
    let stats = lines
        .iter()
        .rev()
        .find_map(|l| Stats::from_line(l))
        .unwrap_or_else(|| panic!("no final STATS line; log:\n{}", lines.join("\n")))
        .expect("STATS matches the schema");
    assert_eq!(
        stats.free_pages_now, stats.free_pages_boot,
        "pages leaked: {stats}"
    );
    assert!(
        lines.iter().any(|l| l.contains("shutdown clean")),
        "no clean shutdown line"
    );
}

#[test]
fn l2_k4_is_identical_run_to_run_and_forwards_every_frame() {
    let (a, log) = run(SimMode::L2, 4);
    assert_eq!((a.mode.as_str(), a.k), ("l2", 4));
    assert_eq!(
        a.delivered,
        a.k * a.iters,
        "the device delivered K frames every iteration"
    );
    assert_eq!(
        a.packets, a.delivered,
        "frames forwarded == frames delivered"
    );
    assert_eq!(
        a.out, a.packets,
        "every forwarded frame left port 1 as expected"
    );
    assert_eq!(a.other, 0);
    assert!(a.instructions_per_packet > 0.0);
    assert!(
        log.iter().any(|l| l.contains("simulated virtio-net")),
        "the ports are the simulated devices"
    );
    assert!(
        !log.iter()
            .any(|l| l.contains("virtio-net-pci") || l.contains(" PCI transport")),
        "no PCI device was touched"
    );
    assert_no_leak(&log);
    let (b, log) = run(SimMode::L2, 4);
    assert_eq!(
        a, b,
        "the deterministic benchmark gave two different results"
    );
    assert_no_leak(&log);
}

#[test]
fn router_k4_forwards_every_frame_to_the_resolved_next_hop() {
    let (r, log) = run(SimMode::Router, 4);
    assert_eq!((r.mode.as_str(), r.k), ("router", 4));
    assert_eq!(r.packets, r.delivered);
    assert_eq!(r.out, r.packets, "routed, TTL 63, to the next hop's MAC");
    assert_eq!(r.other, 0);
    assert!(
        log.iter().any(|l| l.contains("next hop 10.0.1.2 resolved")),
        "the next hop was resolved before measuring"
    );
    assert_no_leak(&log);
}

/// `sim_nic=dd` (issue 32): the same benchmark on simulated DD-bit NICs (0 header bytes before
/// the frame, Descriptor Done bits instead of a used ring): the router resolves its next hop,
/// forwards every frame as expected, and every page comes back.
#[test]
fn router_k4_on_the_dd_nic_forwards_every_frame() {
    let mut cfg = SimBenchConfig::new(image());
    cfg.append = "sim_nic=dd".into();
    let (r, log) = run_one_with_log(&cfg, SimMode::Router, 4)
        .unwrap_or_else(|e| panic!("sim router K=4 sim_nic=dd: {e:#}"));
    assert_eq!(r.packets, r.delivered);
    assert_eq!(r.out, r.packets, "routed, TTL 63, to the next hop's MAC");
    assert_eq!(r.other, 0);
    assert!(
        log.iter().any(|l| l.contains("simulated DD-bit NIC")),
        "the ports are the DD-bit NICs"
    );
    assert!(
        !log.iter().any(|l| l.contains("simulated virtio-net")),
        "no virtio-net port"
    );
    assert_no_leak(&log);
}

/// `sim_nic=e1000e` (issue 36): the simulated DD-bit NIC brought up as an 82574L (reset, MAC,
/// link, filter) forwards every frame in l2, and its drivers read no device register in the
/// measured iterations (the simulated NIC counts every read).
#[test]
fn l2_k32_on_the_simulated_e1000e_reads_no_register_in_the_loop() {
    let mut cfg = SimBenchConfig::new(image());
    cfg.append = "sim_nic=e1000e".into();
    let (r, log) = run_one_with_log(&cfg, SimMode::L2, 32)
        .unwrap_or_else(|e| panic!("sim l2 K=32 sim_nic=e1000e: {e:#}"));
    assert_eq!(r.packets, r.delivered);
    assert_eq!(r.out, r.packets, "rewritten as l2 must");
    assert!(
        log.iter().any(|l| l.contains("NIC DD-bit as an 82574L")),
        "the e1000e bring-up ran"
    );
    assert!(
        log.iter()
            .any(|l| l.contains("simbench: 0 device register reads in the measured iterations")),
        "register reads in the loop:\n{}",
        log.join("\n")
    );
    // Issue 36 item 2: at most one RDT write per 32 frames (a refill batch of at least 32).
    let rdt: u64 = log
        .iter()
        .find_map(|l| {
            l.split("simbench: ")
                .nth(1)?
                .split(" RDT writes")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no RDT writes line:\n{}", log.join("\n")));
    assert!(
        rdt > 0 && rdt * 32 <= r.delivered,
        "{rdt} RDT writes for {} frames",
        r.delivered
    );
    assert_no_leak(&log);
}

#[test]
fn acl_cycles_through_1024_tuples_and_forwards_or_denies_every_frame() {
    let cfg = SimBenchConfig::new(image());
    let a = run_one_acl(&cfg, 10, 4).unwrap_or_else(|e| panic!("sim acl 10 rules K=4: {e:#}"));
    assert_eq!((a.mode.as_str(), a.k, a.acl_rules), ("acl", 4, Some(10)));
    assert_eq!(a.delivered, a.k * a.iters);
    assert_eq!(a.packets + a.dropped, a.delivered);
    assert!(
        a.packets > 0 && a.dropped > 0,
        "some allowed, some denied: {a:?}"
    );
    assert_eq!((a.out, a.other), (a.packets, 0));
    assert!(a.flows.is_some_and(|f| f >= 1024), "{a:?}");
    assert_eq!(a.frames_per_busy_iter, 4.0);
    let b = run_one_acl(&cfg, 10, 4).unwrap();
    assert_eq!(a, b, "identical run to run");
}
