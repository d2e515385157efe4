//! Issue 38 item 3 (in the kernel, first part): the stock connection-tracking firewall,
//! `mode=firewall`, booted in QEMU with real frames: the inside opens a flow and the outside's
//! replies pass, untouched both ways; the outside cannot open one (counted by reason); ARP
//! passes; the counters reach `STATS` and `/metrics`; every page comes back; several queue
//! pairs are refused by name.

use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use gannet_tests::*;

const INSIDE: [u8; 4] = [10, 0, 0, 2];
const SERVER: [u8; 4] = [198, 51, 100, 7];

fn udp(port: usize, src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(peer_mac(port), guest_mac(port))
        .ipv4(src, dst, 64)
        .udp(sp, dp)
        .write(&mut f, b"through the firewall")
        .unwrap();
    f
}

#[test]
fn the_inside_opens_and_the_outside_only_answers() {
    let mut rig = Rig::start("mode=firewall fw_sessions=1024", gen_count(1, 64, false));
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("firewall: 1024 connections per core")),
        "{}",
        rig.tail()
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    // Unsolicited from the outside first: dropped (waited for, so that the inside's frames
    // do not reach the guest in the same poll iteration, which takes port 0 first).
    p1.send(&udp(1, SERVER, 53, INSIDE, 5000)).unwrap();
    let deadline = Instant::now() + FRAME_TIMEOUT;
    let dropped = |s: &Stats| s.nf_counters.per_index("drops").map_or(0, |d| d[1]);
    while dropped(&rig.stats()) == 0 {
        assert!(Instant::now() < deadline, "no drop counted: {}", rig.tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(receive_frames(&p0, 0).is_empty(), "{}", rig.tail());
    let out = udp(0, INSIDE, 5000, SERVER, 53);
    for _ in 0..2 {
        p0.send(&out).unwrap();
    }
    let got = receive_frames(&p1, 2);
    assert_eq!(got.len(), 2, "{}", rig.tail());
    assert!(got.iter().all(|f| f[..] == out[..]), "forwarded untouched");
    for _ in 0..3 {
        p1.send(&udp(1, SERVER, 53, INSIDE, 5000)).unwrap();
    }
    let back = receive_frames(&p0, 3);
    assert_eq!(back.len(), 3, "{}", rig.tail());
    let s = rig.stats();
    assert_eq!(s.nf_name, "firewall", "{s}");
    let c = &s.nf_counters;
    assert_eq!(
        (c.one("new"), c.one("established")),
        (Some(1), Some(4)),
        "{s}"
    );
    let drops = c.per_index("drops").unwrap();
    assert_eq!((drops[1], drops.iter().sum::<u64>()), (1, 1), "{s}");
    assert_eq!(c.one("connections"), Some(1), "the one tracked: {s}");
    let text = rig.metrics();
    for want in [
        "gannet_nf_firewall_connections 1",
        "gannet_nf_firewall_new_total 1",
        "gannet_nf_firewall_established_total 4",
        "gannet_nf_firewall_drops_total{reason=\"1\"} 1",
    ] {
        assert!(text.lines().any(|l| l == want), "no `{want}` in:\n{text}");
    }
    let s = rig.quit();
    assert_eq!(s.mode, netstack::Mode::Firewall, "{s}");
    assert_eq!((s.ports[1].tx, s.ports[0].tx), (2, 3), "{s}");
    assert_no_leak(&s);
}

#[test]
fn a_firewall_on_several_queue_pairs_stops_the_boot_by_name() {
    let (exit, lines) = boot_failing("mode=firewall queues=2", 2);
    assert_eq!(exit, GuestExit::GuestFailure, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("config error")
            && l.contains("queues")
            && l.contains("mode=firewall")),
        "{lines:?}"
    );
}

/// The ACL as the firewall's stateless first stage (`mode=firewall` with a bundle's `rules`):
/// what the rules deny never reaches the connection table, what they allow is tracked.
#[test]
fn the_acl_in_front_of_the_firewall_filters_first() {
    let dir = TestDir::new();
    let file = dir.path().join("fw.bundle");
    let rules =
        "#!gannet-bundle 1\n--- rules\ndeny proto udp dport 5001\nallow proto udp\ndefault deny\n";
    std::fs::write(&file, rules).unwrap();
    let mut rig = Rig::start_with(
        "mode=firewall",
        gen_count(1, 64, false),
        vec!["-initrd".to_string(), file.display().to_string()],
    );
    assert!(
        rig.guest
            .lines()
            .iter()
            .any(|l| l.contains("acl: 2 rules in ")),
        "{}",
        rig.tail()
    );
    let (p0, p1) = (rig.port(0), rig.port(1));
    for _ in 0..2 {
        p0.send(&udp(0, INSIDE, 5000, SERVER, 5001)).unwrap();
    }
    p0.send(&udp(0, INSIDE, 5000, SERVER, 53)).unwrap();
    let got = receive_frames(&p1, 1);
    assert_eq!(got.len(), 1, "{}", rig.tail());
    let s = rig.quit();
    let c = &s.nf_counters;
    assert_eq!(s.nf_name, "firewall", "{s}");
    assert_eq!(
        (c.one("new"), c.one("established")),
        (Some(1), Some(0)),
        "{s}"
    );
    assert_eq!(c.per_index("drops").unwrap().iter().sum::<u64>(), 0, "{s}");
    assert_eq!(s.nf.dropped, 2, "denied by the ACL: {s}");
    assert_no_leak(&s);
}

/// Jumbo frames (MTU 9000, several pages) are judged by their headers in the first page: the
/// inside's opens the connection, the outside's reply passes, both untouched.
#[test]
fn jumbo_frames_are_tracked_like_any_other() {
    let mut rig = Rig::start_mtu("mode=firewall", gen_count(1, 64, false), 9000);
    let (p0, p1) = (rig.port(0), rig.port(1));
    let jumbo = |port, src, sp, dst, dp| {
        let payload: Vec<u8> = (0..9000 - 28).map(|i| (i % 251) as u8).collect();
        let mut f = Vec::new();
        PacketBuilder::ethernet2(peer_mac(port), guest_mac(port))
            .ipv4(src, dst, 64)
            .udp(sp, dp)
            .write(&mut f, &payload)
            .unwrap();
        f
    };
    let out = jumbo(0, INSIDE, 5000, SERVER, 53);
    p0.send(&out).unwrap();
    let got = receive_frames(&p1, 1);
    assert_eq!(got.len(), 1, "{}", rig.tail());
    assert_eq!(got[0][12..], out[12..], "untouched past the MACs");
    let reply = jumbo(1, SERVER, 53, INSIDE, 5000);
    p1.send(&reply).unwrap();
    let back = receive_frames(&p0, 1);
    assert_eq!(back.len(), 1, "{}", rig.tail());
    let s = rig.quit();
    let c = &s.nf_counters;
    assert_eq!(
        (c.one("new"), c.one("established")),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_no_leak(&s);
}
