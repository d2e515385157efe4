//! Jumbo frames end to end (issue 14): `--size 9018` (a 9,000-byte MTU's frames, 9,014 bytes
//! without FCS, three RX pages each) through QEMU's dgram and tap backends with `host_mtu=9000`,
//! both directions at the generator's default window, in io and l2 (router: `router.rs`):
//! nothing lost, bad or reordered, none counted `too_big`, every page back at quit.

use gannet_tests::*;

/// Frames per direction: enough for the RX rings (256 pages, 85 jumbo frames) to wrap.
const FRAMES: u64 = 3_000;

fn check(rig: &mut Rig, mode: &str) {
    let r = rig.run();
    let summary = format!(
        "{mode}: sent {} received {} bad {} dup {} reordered {} warnings {:?}",
        r.sent, r.received, r.bad, r.duplicates, r.reordered, r.warnings
    );
    assert_eq!(r.sent, 2 * FRAMES, "{summary}");
    assert_eq!(r.received, 2 * FRAMES, "{summary}\n{}", rig.tail());
    assert_eq!((r.bad, r.duplicates, r.reordered), (0, 0, 0), "{summary}");
    let s = rig.quit();
    for p in 0..2 {
        assert_eq!(s.ports[p].rx, FRAMES, "{}", s);
        assert_eq!(s.ports[p].tx, FRAMES, "{}", s);
        assert_eq!(s.ports[p].rx_bytes, FRAMES * 9014, "{}", s);
        assert_eq!(s.ports[p].drops, PortDrops::default(), "port {p}: {}", s);
    }
    assert_no_leak(&s);
}

#[test]
fn jumbo_9018_through_dgram_in_l2() {
    let mut rig = Rig::start_mtu("mode=l2", gen_count(FRAMES, 9018, true), 9000);
    check(&mut rig, "l2");
}

#[test]
fn jumbo_9018_through_dgram_in_io() {
    let mut rig = Rig::start_mtu("mode=io", gen_count(FRAMES, 9018, true), 9000);
    check(&mut rig, "io");
}

#[test]
fn jumbo_9018_through_tap_in_l2() {
    let mut rig = Rig::start_tap_mtu("mode=l2", gen_count(FRAMES, 9018, true), 1, 1, Some(9000));
    check(&mut rig, "l2");
}
