//! Linux hosts behind the router's ports (`--backend tap --hosts`, `tools::hosts`): each port's
//! tap device in a namespace of its own with an address and a route via the router, and the
//! distribution's `ping` and `curl` talking through and to Gannet (issue 16, item 1).

use gannet_tests::*;
use tools::hosts::{plan, Hosts};

const APPEND: &str = "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24";

fn out(o: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn linux_hosts_ping_across_the_router_and_scrape_its_metrics() {
    require_tap();
    tools::setup::ensure_host_tools().expect("ping and curl");
    let net = TapNet::create(2, 1).expect("tap namespace");
    let cfg = GuestConfig {
        image: image(),
        append: APPEND.to_string(),
        backend: Backend::Tap,
        netns: Some(net.path()),
        ..GuestConfig::default()
    };
    let mut guest = Guest::boot(&cfg).expect("boot");
    guest.wait_ready(READY_TIMEOUT).expect("ready");
    let hosts = Hosts::create(&net, &plan(APPEND, 2).unwrap()).expect("hosts");
    let ping = |port: usize, args: &[&str]| {
        let mut cmd = vec!["ping", "-n", "-c", "3", "-i", "0.2", "-W", "3"];
        cmd.extend_from_slice(args);
        hosts.exec(port, &cmd).unwrap()
    };
    // Across the router, both ways, and to each of its addresses.
    for (port, dst) in [
        (0, "10.0.1.2"),
        (1, "10.0.0.2"),
        (0, "10.0.0.1"),
        (0, "10.0.1.1"),
    ] {
        let o = ping(port, &[dst]);
        assert!(
            o.status.success(),
            "ping {dst} from host {port}: {}",
            out(&o)
        );
    }
    // TTL 1: the router answers Time Exceeded from its address on the host's side.
    let o = ping(0, &["-t", "1", "10.0.1.2"]);
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
