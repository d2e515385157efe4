//! `burstin=on` on QEMU's real virtio-net device (issue 12, item 1): the guest leaves RX alone
//! until a port's used ring holds 224 entries (or 10 ms passed), then drains in bursts of 32,
//! and only the drain iterations are busy. A short l2 run under `-icount`, both directions,
//! a window that fills 224 entries per port: every frame comes back, none is dropped, no page
//! leaks, and the busy iterations forward at least 30 frames each, at no more than 130 guest
//! instructions per packet (the target). With `backpressure=on`, as
//! `bench --burst-in` runs it (`lab::bench_burstin::append`: a drain of a whole RX ring
//! leaves the TX ring full of unreaped completions for the next drain's first burst).

use std::time::Duration;

use gannet_tests::*;

/// Frames per direction: about 5 s of this test under TCG + icount on a loaded machine.
const FRAMES: u64 = 20_000;
/// Generator window per direction: a whole RX ring's worth (`bench --burst-in`'s default).
const WINDOW: u64 = 256;

#[test]
fn l2_drains_in_bursts_of_32_without_loss() {
    let cfg = GenConfig {
        window: WINDOW,
        loss_timeout: Duration::from_secs(2),
        ..gen_count(FRAMES, 64, true)
    };
    let mut rig = Rig::start_icount("mode=l2 burstin=on backpressure=on", cfg);
    let lines = rig.guest.lines();
    assert!(
        lines
            .iter()
            .any(|l| l
                .contains("burstin (cpu 0): RX left alone until a used ring holds 224 entries")),
        "no burstin line in the boot log\n{}",
        rig.tail()
    );
    let r = rig.run();
    let summary = format!(
        "sent {} received {} bad {} dup {} warnings {:?}",
        r.sent, r.received, r.bad, r.duplicates, r.warnings
    );
    let s = rig.quit();
    assert_eq!(r.sent, 2 * FRAMES, "{summary}");
    assert_eq!(r.received, 2 * FRAMES, "{summary}\n{s}\n{:?}", r.directions);
    assert_eq!((r.bad, r.duplicates), (0, 0), "{summary}");
    assert_eq!(s.forwarded, 2 * FRAMES, "{s}");
    for p in 0..2 {
        assert_eq!(s.ports[p].drops, PortDrops::default(), "port {p}: {s}");
    }
    assert_no_leak(&s);
    let per_iter = s.forwarded as f64 / s.busy_iters as f64;
    let per_packet = s.busy_cycles as f64 / s.forwarded as f64;
    eprintln!(
        "burstin l2: {} frames in {} busy iterations ({per_iter:.2} per iteration), \
         {per_packet:.1} guest instructions per packet, {} halts",
        s.forwarded, s.busy_iters, s.halts
    );
    assert!(
        per_iter >= 30.0,
        "{per_iter:.2} frames per busy iteration: {s}"
    );
    assert_eq!(s.halts, 0, "the gate busy-polls: {s}");
    // Issue 12's target for this run (docs/benchmarks-journal.md "End-to-end burst-in run": ~101).
    assert!(
        per_packet <= 130.0,
        "{per_packet:.1} guest instructions per packet at {per_iter:.2} frames per busy iteration: {s}"
    );
}
