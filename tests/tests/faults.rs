//! Fault injection (issue 15) in CI: the fault image (`cargo xtask build --fault-inject`,
//! cargo feature `fault-inject`) forwards 10^6 frames in each of io, l2 and router mode while
//! `fault=` injects every kind of fault at the default rates and every page_pool is starved
//! for 1 s, through the same library code as `cargo xtask faults` (`harness::faults`). Every
//! check must pass: every fault fired and was counted by what handled it, every lost frame is
//! in a counter, no frame came back corrupted, forwarding resumed by itself (and the clean
//! phase after `fault off` lost nothing), no page lost at `quit`. docs/benchmarks-journal.md has the
//! 10^7-frame run. The release image refuses `fault=` by name.

use gannet_tests::bench_sim::SimMode;
use gannet_tests::*;

#[test]
fn a_million_frames_per_mode_with_every_fault_injected() {
    let guest = GuestConfig {
        image: fault_image(),
        ..GuestConfig::default()
    };
    let modes = vec![SimMode::Io, SimMode::L2, SimMode::Router];
    let cfg = faults::FaultConfig::new(guest, modes, faults::DEFAULT_FRAMES);
    assert_eq!(cfg.frames, 1_000_000);
    let results =
        faults::run(&cfg, |l| eprintln!("{l}")).unwrap_or_else(|e| panic!("faults: {e:#}"));
    let names: Vec<&str> = results.iter().map(|r| r.mode.as_str()).collect();
    assert_eq!(names, ["io", "l2", "router"]);
    for r in &results {
        let line = faults::summary_line(r);
        assert!(
            r.passed(),
            "{line}\nfailed checks:\n{}",
            r.failures.join("\n")
        );
        assert_eq!(r.verdict, "PASS", "{line}");
        assert_eq!(r.accel, "tcg", "{line}");
        assert_eq!(r.sent, 1_000_000, "{line}");
        // Faults cost frames (bad lengths, a full TX ring, bad RX ids), a few hundred at most.
        assert!(r.received < r.sent && r.received > r.sent - 2000, "{line}");
        assert_eq!(r.bad, 0, "{line}");
        assert_eq!(r.clean_received, 2 * faults::CLEAN_FRAMES, "{line}");
        for (kind, _) in faults::DEFAULT_RATES {
            assert!(r.injected[*kind] > 0, "{line}: {kind}");
        }
        assert!(r.injected["pool_dry_ms"] >= 1000, "{line}");
        assert_eq!(
            r.handled["bad_token"],
            r.injected["rx_bad_id"] + r.injected["tx_bad_id"],
            "{line}"
        );
        assert_eq!(r.handled["refill_failed"], r.injected["dma_map"], "{line}");
        // The starvation window: refills that found no page.
        assert!(r.handled["no_buffer"] > 0, "{line}");
        assert!(r.quit_clean, "{line}");
        assert_eq!(r.free_pages_quit, Some(r.free_pages_boot), "{line}");
    }
}

#[test]
fn the_release_image_refuses_the_fault_key_by_name() {
    let (exit, lines) = boot_failing("mode=l2 fault=dma_map:64", 2);
    assert_ne!(exit, GuestExit::Clean, "{lines:?}");
    assert!(
        lines.iter().any(|l| l
            .contains("config error: key `fault`: this image was built without fault injection")),
        "{lines:?}"
    );
}

#[test]
fn a_bad_fault_key_is_a_named_config_error() {
    let (_, lines) = boot_failing("mode=l2 fault=dma_map:0", 2);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("config error: bad value `dma_map:0` for key `fault`")),
        "{lines:?}"
    );
}
