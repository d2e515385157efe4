//! Issue 34 item 3 (in part): the stock ACL firewall, `mode=acl`, with its rules from the boot
//! bundle (`--- rules`, `netstack::acl`'s syntax): real frames, each rule's verdict and hits
//! (the console's `acl`, and `STATS` `nf_counters` and the console's `metrics`: issue 34 item
//! 3's per-rule hit counters), the denied ones counted (`nf.dropped`), ARP passing, a bad rules
//! line refused by its number, and every page back.

use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use gannet_tests::*;

const RULES: &str = "#!gannet-bundle 1\n--- rules\n\
# the firewall of the test\n\
deny proto udp dport 5000\n\
allow proto udp src 10.0.0.0/8 dport 1000-9000\n\
allow proto icmp\n\
default deny\n";

fn bundle(dir: &TestDir, text: &str) -> Vec<String> {
    let file = dir.path().join("acl.bundle");
    std::fs::write(&file, text).unwrap();
    vec!["-initrd".to_string(), file.display().to_string()]
}

fn udp(src: [u8; 4], dport: u16) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(peer_mac(0), guest_mac(0))
        .ipv4(src, [10, 0, 1, 2], 64)
        .udp(4000, dport)
        .write(&mut f, b"acl")
        .unwrap();
    f
}

#[test]
fn acl_rules_decide_and_count_each_frame() {
    let dir = TestDir::new();
    let mut rig = Rig::start_with("mode=acl", gen_count(1, 64, false), bundle(&dir, RULES));
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("acl: 3 rules in ")),
        "{}",
        rig.tail()
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    // 4 denied by rule 0, 3 allowed by rule 1, 2 by the default (source outside 10/8).
    let mut sent = Vec::new();
    for _ in 0..4 {
        sent.push((udp([10, 0, 0, 2], 5000), false));
    }
    for _ in 0..3 {
        sent.push((udp([10, 0, 0, 2], 6000), true));
    }
    for _ in 0..2 {
        sent.push((udp([192, 0, 2, 1], 6000), false));
    }
    for (f, _) in &sent {
        p0.send(f).unwrap();
    }
    let want = sent.iter().filter(|(_, ok)| *ok).count();
    let mut got = Vec::new();
    let deadline = Instant::now() + FRAME_TIMEOUT;
    while got.len() < want && Instant::now() < deadline {
        if let Some(f) = p1.recv_timeout(Duration::from_millis(200)) {
            got.push(f);
        }
    }
    while let Some(f) = p1.recv_timeout(Duration::from_millis(300)) {
        got.push(f);
    }
    assert_eq!(got.len(), want, "{}", rig.tail());
    assert!(got
        .iter()
        .all(|f| f[12..] == udp([10, 0, 0, 2], 6000)[12..]));
    let from = rig.guest.line_count();
    rig.guest.send_line("acl").unwrap();
    rig.guest
        .wait_for_line_from(
            from,
            |l| l.contains("acl default hits"),
            Duration::from_secs(10),
        )
        .unwrap();
    let lines = rig.guest.lines()[from..].to_vec();
    let line = |prefix: &str| {
        lines
            .iter()
            .find(|l| l.contains(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` in {lines:?}"))
            .clone()
    };
    assert!(
        line("acl rule 0 hits ").contains("acl rule 0 hits 4: deny"),
        "{lines:?}"
    );
    assert!(
        line("acl rule 1 hits ").contains("acl rule 1 hits 3: allow"),
        "{lines:?}"
    );
    assert!(
        line("acl rule 2 hits ").contains("acl rule 2 hits 0: allow"),
        "{lines:?}"
    );
    assert!(
        line("acl default hits ").contains("acl default hits 2: Deny"),
        "{lines:?}"
    );
    // The same hits as the NF's own counters, in STATS (rule by rule) and in /metrics.
    let s = rig.stats();
    assert_eq!(s.nf_name, "acl", "{s}");
    assert_eq!(
        s.nf_counters.per_index("rule_hits"),
        Some(&[4, 3, 0][..]),
        "{s}"
    );
    assert_eq!(s.nf_counters.one("later_rule_hits"), Some(0), "{s}");
    assert_eq!(s.nf_counters.one("default_hits"), Some(2), "{s}");
    let text = rig.metrics();
    for want in [
        "gannet_nf_acl_rule_hits_total{rule=\"0\"} 4",
        "gannet_nf_acl_rule_hits_total{rule=\"1\"} 3",
        "gannet_nf_acl_rule_hits_total{rule=\"2\"} 0",
        "gannet_nf_acl_later_rule_hits_total 0",
        "gannet_nf_acl_default_hits_total 2",
        "gannet_nf_frames_total{nf=\"acl\",verdict=\"dropped\"} 6",
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Acl, "{s}");
    assert_eq!(
        s.nf_counters.per_index("rule_hits"),
        Some(&[4, 3, 0][..]),
        "{s}"
    );
    assert_eq!(s.nf.dropped, 6, "{s}");
    assert_eq!(s.ports[1].tx, 3, "{s}");
    assert_no_leak(&s);
}

#[test]
fn a_bad_rules_line_or_no_rules_stops_the_boot_by_name() {
    let dir = TestDir::new();
    let bad = "#!gannet-bundle 1\n--- rules\nallow proto udp\nallow dport 80\n";
    let (exit, lines) = boot_failing_with("mode=acl", 2, 1, |_| bundle(&dir, bad));
    assert_eq!(exit, GuestExit::GuestFailure, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("config error: rules file: ") && l.contains("line 2")),
        "{lines:?}"
    );
    let (exit, lines) = boot_failing("mode=acl", 2);
    assert_eq!(exit, GuestExit::GuestFailure, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("config error: mode=acl needs a rules file")),
        "{lines:?}"
    );
}

/// The ACL in front of the router (`mode=router` with a rules file: issue 34 item 4's static
/// chain).
const CHAIN_RULES: &str = "#!gannet-bundle 1\n--- rules\n\
deny proto udp dport 5000\n\
allow proto udp\n\
allow proto icmp\n\
default deny\n";

#[test]
fn acl_in_front_of_the_router_filters_then_routes() {
    let dir = TestDir::new();
    let mut rig = Rig::start_with(
        "mode=router ip0=10.0.0.1/24 ip1=10.0.1.1/24",
        gen_count(1, 64, false),
        bundle(&dir, CHAIN_RULES),
    );
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("acl: 3 rules in ")),
        "{}",
        rig.tail()
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    // 3 denied by rule 0, never routed; 2 allowed by rule 1 and routed to 10.0.1.2 (ARP
    // resolved on port 1 first, the ARP exchange itself passing the ACL: not IPv4).
    for _ in 0..3 {
        p0.send(&udp([10, 0, 0, 2], 5000)).unwrap();
    }
    for _ in 0..2 {
        p0.send(&udp([10, 0, 0, 2], 6000)).unwrap();
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + FRAME_TIMEOUT;
    while got.len() < 2 && Instant::now() < deadline {
        if let Some(f) = recv_answering_arp(&p1, 1, Duration::from_millis(500)) {
            got.push(f);
        }
    }
    while let Some(f) = p1.recv_timeout(Duration::from_millis(300)) {
        got.push(f);
    }
    assert_eq!(got.len(), 2, "{}", rig.tail());
    for f in &got {
        assert_eq!(&f[0..6], &peer_mac(1), "to the resolved next hop");
        assert_eq!(&f[6..12], &guest_mac(1), "from port 1");
        assert_eq!(f[14 + 8], 63, "TTL decremented by the router");
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 6000);
    }
    let text = rig.metrics();
    for want in [
        "gannet_nf_acl_router_rule_hits_total{rule=\"0\"} 3",
        "gannet_nf_acl_router_rule_hits_total{rule=\"1\"} 2",
        "gannet_nf_frames_total{nf=\"acl_router\",verdict=\"dropped\"} 3",
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Router, "{s}");
    assert_eq!(s.nf_name, "acl_router", "{s}");
    assert_eq!(
        s.nf_counters.per_index("rule_hits"),
        Some(&[3, 2, 0][..]),
        "{s}"
    );
    assert_eq!(s.nf.dropped, 3, "the ACL's denials: {s}");
    assert_eq!(router(&s).forwarded, 2, "{s}");
    assert_eq!(s.ports[1].tx, 3, "2 routed + 1 ARP request: {s}");
    assert_no_leak(&s);
}
