//! Linux hosts behind the router's ports (`--backend tap --hosts`, `harness::hosts`): each port's
//! tap device in a namespace of its own with an address and a route via the router, and the
//! distribution's `ping`, `curl`, `iperf3` (TCP) and `prometheus` talking through and to
//! Gannet (issue 16, items 1 and 4).

use gannet_tests::hosts::{out, run_iperf3, run_iperf3_to};
use gannet_tests::*;
use harness::hosts::Hosts;

const APPEND: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";

/// [`APPEND`] with the router's IPv6 addresses: the hosts get 2001:db8::2 and 2001:db8:1::2.
const APPEND6: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24 \
                       ip6_0=2001:db8::1/64 ip6_1=2001:db8:1::1/64";

/// The router on two tap ports, ready, with a host behind each port.
fn boot_with_hosts() -> (TapNet, Guest, Hosts) {
    boot_with_hosts_append(APPEND)
}

/// [`boot_with_hosts`] with another command line (router mode with `ip0`/`ip1`).
fn boot_with_hosts_append(append: &str) -> (TapNet, Guest, Hosts) {
    gannet_tests::hosts::boot_with_hosts(append, None)
}

/// Three pings from the host behind `port` with `args` (the destination last).
fn ping(hosts: &Hosts, port: usize, args: &[&str]) -> std::process::Output {
    let mut cmd = vec!["ping", "-n", "-c", "3", "-i", "0.2", "-W", "3"];
    cmd.extend_from_slice(args);
    hosts.exec(port, &cmd).unwrap()
}

/// Pings that must all answer: from host 0 to host 1 (`dst[0]`), from host 1 to host 0
/// (`dst[1]`), and from host 0 to the router's two addresses (`dst[2]`, `dst[3]`).
fn ping_across(hosts: &Hosts, family: &[&str], dst: [&str; 4]) {
    for (port, d) in [(0, dst[0]), (1, dst[1]), (0, dst[2]), (0, dst[3])] {
        let args: Vec<&str> = family.iter().copied().chain([d]).collect();
        let o = ping(hosts, port, &args);
        assert!(
            o.status.success(),
            "ping {args:?} from host {port}: {}",
            out(&o)
        );
    }
}

/// An iperf3 TCP report `j` moved more than 100 kB (its figures printed, `what` the path).
fn iperf3_moves_data(j: &serde_json::Value, what: &str) {
    let sent = &j["end"]["sum_sent"];
    let bytes = sent["bytes"].as_f64().unwrap_or(0.0);
    eprintln!(
        "iperf3 TCP {what} (TCG): {:.1} Mbit/s, {} retransmits, {bytes} bytes",
        sent["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
        sent["retransmits"]
    );
    assert!(bytes > 100_000.0, "iperf3 {what} moved {bytes} bytes: {j}");
}

#[test]
fn linux_hosts_ping_across_the_router_and_scrape_its_metrics() {
    require_tap();
    harness::setup::ensure_host_tools().expect("ping and curl");
    let (net, mut guest, hosts) = boot_with_hosts();
    // Across the router, both ways, and to each of its addresses.
    ping_across(
        &hosts,
        &[],
        ["10.0.1.2", "10.0.0.2", "10.0.0.1", "10.0.1.1"],
    );
    // TTL 1: the router answers Time Exceeded from its address on the host's side.
    let o = ping(&hosts, 0, &["-t", "1", "10.0.1.2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("From 10.0.0.1") && text.contains("Time to live exceeded"),
        "{}",
        out(&o)
    );
    // The management plane from a host.
    let o = hosts
        .exec(
            0,
            &["curl", "-sS", "-m", "10", "http://10.0.0.1:9100/metrics"],
        )
        .unwrap();
    let body = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && body.contains("gannet_router_forwarded_total"),
        "{}",
        out(&o)
    );
    // iperf3 TCP through the router for 3 s: it completes and moves data (figures printed).
    iperf3_moves_data(&run_iperf3(&hosts, 3), "through the router");
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    let r = router(&s);
    assert!(r.forwarded >= 6, "the pings were routed: {s}");
    assert!(
        r.echo_replies >= 6,
        "the router answered its own pings: {s}"
    );
    assert!(r.drops.ttl_expired >= 1, "{s}");
    assert_no_leak(&s);
    drop(hosts);
    drop(net);
}

/// Debian's `prometheus` in the namespace of the host behind port 0, scraping the router with
/// `docs/prometheus.yml` every second while pings cross it; its HTTP API must report the target
/// up and a positive `rate()` of the forwarded counter.
#[test]
fn a_real_prometheus_scrapes_the_router() {
    require_tap();
    harness::setup::ensure_host_tools().expect("ping and curl");
    harness::setup::ensure_promtool().expect("the prometheus package");
    let (net, mut guest, hosts) = boot_with_hosts();
    let dir = TestDir::new();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/prometheus.yml");
    let ns = hosts.namespace(0).unwrap().to_string();
    let mut prom = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "prometheus"])
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .args(["--web.listen-address=127.0.0.1:9090", "--log.level=warn"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting prometheus");
    // ~20 s of scrapes while frames cross the router.
    let o = hosts
        .exec(
            0,
            &["ping", "-n", "-q", "-c", "100", "-i", "0.2", "10.0.1.2"],
        )
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    let query = |q: &str| -> String {
        let o = hosts
            .exec(
                0,
                &[
                    "curl",
                    "-sS",
                    "-m",
                    "10",
                    "--data-urlencode",
                    &format!("query={q}"),
                    "http://127.0.0.1:9090/api/v1/query",
                ],
            )
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let up = query("up{job=\"gannet\"}");
    let rate = query("rate(gannet_router_forwarded_total[10s])");
    let _ = prom.kill();
    let _ = prom.wait();
    let value = |json: &str| -> f64 {
        let v: serde_json::Value =
            serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
        v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no sample in {json}"))
    };
    assert_eq!(value(&up), 1.0, "{up}");
    assert!(value(&rate) > 0.0, "{rate}");
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    assert_no_leak(&stats.expect("final STATS"));
    drop(hosts);
    drop(net);
}

/// One iperf3 TCP run of `secs` seconds from the host behind port 0 to the one behind port 1
/// through the router booted with `append`: (Mbit/s, retransmits, the guest's `tx_ring_full`
/// drops over both ports).
fn iperf3_tcp(append: &str, secs: u32) -> (f64, u64, u64) {
    let (net, mut guest, hosts) = boot_with_hosts_append(append);
    let j = run_iperf3(&hosts, secs);
    let sent = &j["end"]["sum_sent"];
    let received = &j["end"]["sum_received"];
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    assert_no_leak(&s);
    let full = s.ports.iter().map(|p| p.drops.tx_ring_full).sum();
    drop(hosts);
    drop(net);
    (
        received["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
        sent["retransmits"].as_u64().unwrap_or(0),
        full,
    )
}

/// Issue 16 item 2, a measurement (by hand: `cargo test -p tests --test hosts -- --ignored
/// --nocapture backpressure`): iperf3 TCP through the router for 10 s, with `backpressure=off`
/// and `on`, alternately, `GANNET_BP_RUNS` times each (default 2); prints goodput, retransmits
/// and `tx_ring_full` drops per run.
#[test]
#[ignore]
fn iperf3_tcp_with_and_without_backpressure() {
    require_tap();
    harness::setup::ensure_host_tools().expect("iperf3");
    let runs: u32 = std::env::var("GANNET_BP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for run in 0..runs {
        for bp in ["off", "on"] {
            let (mbit, retr, full) = iperf3_tcp(&format!("{APPEND} backpressure={bp}"), 10);
            eprintln!(
                "BACKPRESSURE run={run} backpressure={bp} goodput_mbit={mbit:.1} \
                 retransmits={retr} tx_ring_full={full} accelerator=tcg"
            );
            assert!(mbit > 0.0);
        }
    }
}

/// Issue 16 item 1: `iperf3` UDP at full rate (18-byte payloads, `-b 0`) for 3 s from the host
/// behind port 0 to the one behind port 1, and every datagram accounted for
/// (`harness::hosts::UdpRun`): those the client sent = those that arrived at the receiving
/// host (its IP layer's deliveries less TCP's and ICMP's; the server read fewer: its socket
/// buffer overflowed, counted as UDP input errors) + the sender's UDP send-buffer errors (its
/// tap's queue discipline dropped them) + its tap's TX drops (QEMU did not read them in time) +
/// the guest's drop counters (ports and router) + the receiver's tap RX drops, to within the
/// run's few non-datagram frames (which the drop counters also count) and the receiving
/// kernel's input-backlog drops (counted only machine-wide); printed term by term.
#[test]
fn iperf3_udp_at_full_rate_every_datagram_accounted_for() {
    require_tap();
    harness::setup::ensure_host_tools().expect("iperf3");
    let (net, mut guest, hosts) = boot_with_hosts();
    // Resolve the hosts' neighbours first (ARP both ways), so the run starts routed.
    let o = hosts
        .exec(
            0,
            &["ping", "-n", "-c", "2", "-i", "0.2", "-W", "3", "10.0.1.2"],
        )
        .unwrap();
    assert!(o.status.success(), "ping: {}", out(&o));
    let u = hosts.iperf3_udp(0, 1, 18, 3).expect("iperf3 UDP");
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    assert_no_leak(&s);
    let port_drops: u64 = s.ports.iter().map(|p| p.drops.total()).sum();
    let router_drops = router(&s).drops.total();
    let unaccounted = u.unaccounted(port_drops + router_drops);
    eprintln!(
        "UDPBALANCE accelerator=tcg {u:?} guest_port_drops={port_drops} \
         guest_router_drops={router_drops} guest_rx0={} guest_tx1={} unaccounted={unaccounted}",
        s.ports[0].rx, s.ports[1].tx
    );
    drop(hosts);
    drop(net);
    assert!(
        u.sent > 10_000,
        "iperf3 sent only {} datagrams: {u:?}",
        u.sent
    );
    assert!(
        u.read > 0 && u.read + u.receiver_socket + u.no_ports <= u.arrived,
        "server read {} of {} arrived: {u:?}",
        u.read,
        u.arrived
    );
    // The drop counters also count the run's other frames (iperf3's TCP control connection,
    // ARP) if they were dropped: at most that many more than the datagrams. A datagram the
    // receiving kernel dropped from its input backlog (`netdev_max_backlog`) is counted only
    // machine-wide: at most that many fewer.
    assert!(
        unaccounted >= -((u.tcp_segments + 8) as i64) && unaccounted <= u.backlog as i64,
        "{unaccounted} datagrams unaccounted for, beyond the run's {} TCP segments and {} \
         backlog drops: see UDPBALANCE above",
        u.tcp_segments,
        u.backlog
    );
}

/// Issue 37 item 6: the hosts over IPv6 (`accept_ra=0`, `accept_dad=0`; their Neighbor
/// Discovery and MLD reports left on): `ping -6` across the router both ways and to its
/// addresses, hop limit 1 answered Time Exceeded from the router's address on the host's
/// side, `curl -6` of `/metrics` at the management address over IPv6, and iperf3 TCP over
/// IPv6 through the router. Every IPv6 frame the router got ends in exactly one outcome (the
/// hosts' MLD reports among the drops), and every page comes back.
#[test]
fn linux_hosts_over_ipv6_ping_scrape_and_iperf3() {
    require_tap();
    harness::setup::ensure_host_tools().expect("ping and curl");
    let (net, mut guest, hosts) = boot_with_hosts_append(APPEND6);
    let far = [
        "2001:db8:1::2",
        "2001:db8::2",
        "2001:db8::1",
        "2001:db8:1::1",
    ];
    ping_across(&hosts, &["-6"], far);
    let o = ping(&hosts, 0, &["-6", "-t", "1", "2001:db8:1::2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("From 2001:db8::1") && text.contains("Time exceeded"),
        "{}",
        out(&o)
    );
    let o = hosts
        .exec(
            0,
            &[
                "curl",
                "-6",
                "-sS",
                "-m",
                "10",
                "http://[2001:db8::1]:9100/metrics",
            ],
        )
        .unwrap();
    let body = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && body.contains("gannet_router6_frames_total{outcome=\"to_host\"}"),
        "{}",
        out(&o)
    );
    let j = run_iperf3_to(&hosts, 2, "2001:db8:1::2");
    iperf3_moves_data(&j, "over IPv6 through the router");
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    let r6 = s.router6.unwrap_or_else(|| panic!("no router6: {s}"));
    assert_eq!(
        r6.outcomes() + r6.queued_now,
        r6.rx,
        "every frame once: {s}"
    );
    assert!(r6.forwarded >= 6 && r6.echo_replies >= 6, "{s}");
    assert!(r6.to_host > 0 && r6.nd_answered > 0, "{s}");
    assert!(r6.drops.hop_limit >= 1, "{s}");
    assert_no_leak(&s);
    drop(hosts);
    drop(net);
}

/// Issue 37 item 2, end to end: with `ra6=on` a Linux host that accepts router advertisements
/// (the host behind port 0: no static IPv6 address or route) autoconfigures an address in the
/// port's /64 and a default route via the router's link-local address from them (RFC 4862),
/// and pings the host behind port 1 through the router with it.
#[test]
fn a_linux_host_autoconfigures_from_the_routers_advertisements() {
    require_tap();
    harness::setup::ensure_host_tools().expect("ping");
    let append = format!("{APPEND6} ra6=on");
    let mut plans = harness::hosts::plan(&append, 2).expect("plan");
    plans[0].ipv6 = None;
    plans[0].slaac = true;
    let (net, mut guest, hosts) = gannet_tests::hosts::boot_with_planned_hosts(&append, &plans);
    let show = |args: &[&str]| {
        let o = hosts.exec(0, args).unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    // The host solicits when its link comes up; the router answers within 3 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut addr, mut route) = (String::new(), String::new());
    while std::time::Instant::now() < deadline {
        addr = show(&[
            "ip", "-6", "addr", "show", "dev", "gtap0", "scope", "global",
        ]);
        route = show(&["ip", "-6", "route", "show", "default"]);
        if addr.contains("inet6 2001:db8::") && route.contains("via fe80::") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert!(
        addr.contains("inet6 2001:db8::") && addr.contains("/64"),
        "no autoconfigured address: {addr}\n{route}\n{}",
        guest.tail_report()
    );
    assert!(
        route.contains("via fe80::") && route.contains("proto ra"),
        "{route}"
    );
    let o = ping(&hosts, 0, &["-6", "2001:db8:1::2"]);
    assert!(o.status.success(), "{}", out(&o));
    let (stats, exit) = guest.quit(QUIT_TIMEOUT).expect("quit");
    assert!(exit.is_clean(), "{exit}");
    let s = stats.expect("final STATS");
    let r6 = s.router6.unwrap_or_else(|| panic!("no router6: {s}"));
    assert!(r6.ra_sent >= 2 && r6.forwarded >= 6, "{s}");
    assert_eq!(r6.outcomes() + r6.queued_now, r6.rx, "{s}");
    assert_no_leak(&s);
    drop(hosts);
    drop(net);
}
