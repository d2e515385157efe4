//! Jumbo frames with real Linux hosts (issue 14, item 5): hosts behind both router ports at
//! MTU 9000 (tap devices and QEMU's `host_mtu=9000`); with port 1's link at 1500 (its device,
//! tap and host: a host at 9000 there would send frames over Gannet's ingress MTU, dropped as
//! `too_big`), `ping -M dont -s 8000` crosses (fragmented by Gannet one way, by the host the
//! other), `ping -M do -s 8000` gets
//! Fragmentation Needed with MTU 1500, and an iperf3 TCP transfer completes (path-MTU
//! discovery reacts to the ICMP); with both ports at 9000 the transfer runs in jumbo frames.

use gannet_tests::hosts::{boot_with_host_mtus, boot_with_hosts, out, run_iperf3};
use gannet_tests::*;
use harness::hosts::Hosts;

const APPEND: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";

/// The router on two tap ports with `host_mtu=9000`, hosts at MTU 9000 behind them.
fn boot(append: &str) -> (TapNet, Guest, Hosts) {
    require_tap();
    harness::setup::ensure_host_tools().expect("ping, curl, iperf3");
    boot_with_hosts(append, Some(9000))
}

/// iperf3 TCP for `secs` seconds from the host behind port 0 to the one behind port 1:
/// bytes received (figures printed).
fn iperf3(hosts: &Hosts, secs: u32) -> f64 {
    let j = run_iperf3(hosts, secs);
    let r = &j["end"]["sum_received"];
    eprintln!(
        "iperf3 TCP (TCG): {:.1} Mbit/s, {} retransmits",
        r["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
        j["end"]["sum_sent"]["retransmits"]
    );
    r["bytes"].as_f64().unwrap_or(0.0)
}

/// Quit the guest cleanly; its final STATS, checked for leaks.
fn quit(guest: &mut Guest) -> Stats {
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    assert_no_leak(&s);
    s
}

#[test]
fn hosts_at_9000_through_a_1500_byte_port_fragment_and_learn_the_path_mtu() {
    require_tap();
    harness::setup::ensure_host_tools().expect("ping, curl, iperf3");
    let (net, mut guest, hosts) = boot_with_host_mtus(APPEND, Some(vec![9000, 1500]));
    let ping = |args: &[&str]| {
        let mut cmd = vec!["ping", "-n", "-c", "3", "-i", "0.3", "-W", "3"];
        cmd.extend_from_slice(args);
        hosts.exec(0, &cmd).unwrap()
    };
    // DF clear: Gannet fragments the 8,028-byte datagrams for port 1 (the first one waits
    // for ARP and is fragmented when released).
    let o = ping(&["-M", "dont", "-s", "8000", "10.0.1.2"]);
    assert!(o.status.success(), "ping -M dont -s 8000: {}", out(&o));
    // DF set: Fragmentation Needed, MTU 1500, from the router (later pings fail locally,
    // Linux having learnt the path MTU).
    let o = ping(&["-M", "do", "-s", "8000", "10.0.1.2"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        !o.status.success(),
        "ping -M do -s 8000 got answers: {}",
        out(&o)
    );
    assert!(
        text.contains("mtu = 1500") || text.contains("mtu=1500"),
        "no Fragmentation Needed with MTU 1500: {}",
        out(&o)
    );
    // TCP: path-MTU discovery takes it down to 1500 and the transfer completes.
    let bytes = iperf3(&hosts, 3);
    assert!(bytes > 100_000.0, "iperf3 moved {bytes} bytes");
    let s = quit(&mut guest);
    let r = router(&s);
    assert!(r.fragmented >= 3, "the pings were fragmented: {s}");
    assert!(r.drops.frag_needed >= 1, "{s}");
    drop(hosts);
    drop(net);
}

#[test]
fn hosts_at_9000_through_9000_byte_ports_move_tcp_in_jumbo_frames() {
    let (net, mut guest, hosts) = boot(APPEND);
    let o = hosts
        .exec(
            0,
            &[
                "ping", "-n", "-c", "3", "-i", "0.3", "-W", "3", "-M", "do", "-s", "8000",
                "10.0.1.2",
            ],
        )
        .unwrap();
    // The first may be lost (a multi-page frame waiting for ARP is dropped when released).
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("bytes from 10.0.1.2"),
        "no jumbo ping answered: {}",
        out(&o)
    );
    let bytes = iperf3(&hosts, 3);
    assert!(bytes > 100_000.0, "iperf3 moved {bytes} bytes");
    let s = quit(&mut guest);
    let r = router(&s);
    assert_eq!(r.fragmented, 0, "{s}");
    // Full-size segments: the data direction's frames average well above one page.
    let p0 = &s.ports[0];
    assert!(
        p0.rx_bytes / p0.rx.max(1) > 4096,
        "port 0 averaged {} bytes a frame: {s}",
        p0.rx_bytes / p0.rx.max(1)
    );
    drop(hosts);
    drop(net);
}

#[test]
fn a_jumbo_ping_to_the_router_is_answered_by_the_management_plane_through_a_per_core_view() {
    let (net, mut guest, hosts) = boot(APPEND);
    // 8,028-byte echo requests to the router's own address: two RX pages each, made linear
    // on core 0 (a per-core view) for smoltcp, whose 8,042-byte replies leave as chains.
    let o = hosts
        .exec(
            0,
            &[
                "ping", "-n", "-c", "3", "-i", "0.3", "-W", "3", "-M", "do", "-s", "8000",
                "10.0.0.1",
            ],
        )
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("8008 bytes from 10.0.0.1"),
        "no jumbo ping answered: {}",
        out(&o)
    );
    // /metrics over TCP at a 9,000-byte MTU (smoltcp's segments follow it).
    let o = hosts
        .exec(
            0,
            &["curl", "-sS", "-m", "10", "http://10.0.0.1:9100/metrics"],
        )
        .unwrap();
    let body = String::from_utf8_lossy(&o.stdout);
    // Whole: the last series the body writes is there.
    assert!(
        o.status.success()
            && body.contains("gannet_mgmt_frames_total")
            && body.contains("gannet_mgmt_put_routes_total{result=\"failed\"}"),
        "GET /metrics: {}",
        out(&o)
    );
    let s = quit(&mut guest);
    let r = router(&s);
    let path = s.mgmt.expect("STATS has `mgmt` with a management address");
    eprintln!(
        "jumbo pings to the router: {}; mgmt.linear {}, to_host {}, /metrics {} bytes",
        text.lines().filter(|l| l.contains("bytes from")).count(),
        path.linear,
        r.to_host,
        body.len()
    );
    assert!(
        path.linear >= 2,
        "echo requests made linear: {} ({s})",
        path.linear
    );
    assert_eq!(path.linear_failed, 0, "{s}");
    assert!(r.to_host >= 2, "{s}");
    assert_eq!(s.ports[0].drops.too_big, 0, "{s}");
    drop(hosts);
    drop(net);
}
