//! Deterministic performance regression guard (issue 6): Gannet `l2` under QEMU
//! `-icount shift=0,sleep=off` (one virtual ns = one guest instruction, read through the TSC),
//! a fixed generator window and frame count, the median of 3 boots of guest instructions per
//! forwarded packet (Δ`busy_cycles` ÷ Δ`forwarded` from `STATS` around the traffic), compared
//! with the committed baseline `tests/perf-baseline.json`:
//!
//! - above baseline × (1 + tolerance): the test fails (a regression);
//! - below baseline × (1 − tolerance): the test passes and says the baseline looks stale.
//!
//! `GANNET_PERF_UPDATE=1 cargo test -p tests --test perf_regression` rewrites the baseline with
//! the measured median (commit it with the change that moved it).
//!
//! Why it is not exactly deterministic: icount makes each instruction count exactly, but how many
//! frames one poll iteration finds depends on when the host's generator and QEMU's I/O thread
//! deliver them (real time), so per-iteration overhead is amortised over batches of varying
//! size. The window bounds that variation; the median of 3 trims outliers.

use std::path::PathBuf;
use std::time::Duration;

use gannet_tests::*;

/// The baseline file, relative to the `tests` crate.
fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("perf-baseline.json")
}

struct Baseline {
    append: String,
    size: usize,
    window: u64,
    count: u64,
    runs: usize,
    tolerance: f64,
    instructions_per_packet: f64,
    note: String,
}

fn load() -> Baseline {
    let p = baseline_path();
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    // Not STATS: the baseline file's own keys.
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
    let num = |k: &str| {
        v[k].as_f64()
            .unwrap_or_else(|| panic!("{}: no number `{k}`", p.display()))
    };
    Baseline {
        append: v["append"].as_str().unwrap_or("mode=l2").to_string(),
        size: num("frame_size") as usize,
        window: num("window") as u64,
        count: num("count") as u64,
        runs: num("runs") as usize,
        tolerance: num("tolerance"),
        instructions_per_packet: num("instructions_per_packet"),
        note: v["note"].as_str().unwrap_or("").to_string(),
    }
}

/// One boot: returns (instructions per packet, kicks per packet, forwarded pps).
fn one_run(b: &Baseline) -> (f64, f64, f64) {
    let dir = TestDir::new();
    let gcfg = GenConfig {
        dir: dir.path().to_path_buf(),
        size: b.size,
        count: Some(b.count),
        window: b.window,
        loss_timeout: Duration::from_secs(2),
        straggler_wait: Duration::from_secs(5),
        ..GenConfig::default()
    };
    let generator = Generator::bind(&gcfg).unwrap_or_else(|e| panic!("binding: {e:#}"));
    let cfg = GuestConfig {
        image: image(),
        dgram_dir: dir.path().to_path_buf(),
        append: b.append.clone(),
        icount: true,
        ..GuestConfig::default()
    };
    let mut guest = Guest::boot(&cfg).unwrap_or_else(|e| panic!("booting QEMU: {e:#}"));
    if let Err(e) = guest.wait_ready(READY_TIMEOUT) {
        panic!("guest did not become ready: {e:#}");
    }
    let before = guest
        .stats(STATS_TIMEOUT)
        .unwrap_or_else(|e| panic!("stats: {e:#}"));
    let r = generator
        .run()
        .unwrap_or_else(|e| panic!("generator: {e:#}\n{}", guest.tail_report()));
    let after = guest
        .stats(STATS_TIMEOUT)
        .unwrap_or_else(|e| panic!("stats: {e:#}"));
    let (_, exit) = guest
        .quit(QUIT_TIMEOUT)
        .unwrap_or_else(|e| panic!("quit: {e:#}"));
    assert_eq!(exit, GuestExit::Clean, "{}", guest.tail_report());
    assert_eq!(
        (r.sent, r.received, r.bad),
        (b.count, b.count, 0),
        "the guest must forward every frame intact"
    );
    let fwd = after.forwarded - before.forwarded;
    assert_eq!(fwd, b.count, "STATS forwarded delta");
    (
        (after.busy_cycles - before.busy_cycles) as f64 / fwd as f64,
        (after.kicks - before.kicks) as f64 / fwd as f64,
        r.received_pps,
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[test]
fn l2_instructions_per_packet_within_baseline() {
    let b = load();
    let mut ipp = Vec::new();
    for i in 0..b.runs {
        let (x, k, pps) = one_run(&b);
        eprintln!(
            "perf_regression: run {i}: {x:.1} instructions/packet, {k:.3} kicks/packet, {pps:.0} pps"
        );
        ipp.push(x);
    }
    let runs = ipp.clone();
    let m = median(&mut ipp);
    let base = b.instructions_per_packet;
    let ratio = m / base;
    eprintln!(
        "perf_regression: median {m:.1} instructions/packet over {runs:?}; baseline {base:.1} \
         ({:+.1}%), tolerance ±{:.0}%",
        (ratio - 1.0) * 100.0,
        b.tolerance * 100.0
    );
    if std::env::var_os("GANNET_PERF_UPDATE").is_some_and(|v| v == "1") {
        let text = format!(
            "{{\n  \"note\": {:?},\n  \"append\": {:?},\n  \"frame_size\": {},\n  \"window\": {},\n  \
             \"count\": {},\n  \"runs\": {},\n  \"tolerance\": {},\n  \
             \"instructions_per_packet\": {:.1},\n  \"runs_measured\": {:?}\n}}\n",
            b.note, b.append, b.size, b.window, b.count, b.runs, b.tolerance, m, runs
        );
        std::fs::write(baseline_path(), text).unwrap();
        eprintln!(
            "perf_regression: baseline updated to {m:.1} in {}",
            baseline_path().display()
        );
        return;
    }
    if ratio < 1.0 - b.tolerance {
        eprintln!(
            "perf_regression: NOTE: {:.0}% below the baseline: if this is a real improvement, \
             update it: GANNET_PERF_UPDATE=1 cargo test -p tests --test perf_regression",
            (1.0 - ratio) * 100.0
        );
    }
    assert!(
        ratio <= 1.0 + b.tolerance,
        "guest instructions per packet regressed: median {m:.1} of {runs:?} is {:.1}% above the \
         baseline {base:.1} (tolerance {:.0}%). If the increase is intended, update the baseline \
         (GANNET_PERF_UPDATE=1 cargo test -p tests --test perf_regression) and say why in the \
         commit.",
        (ratio - 1.0) * 100.0,
        b.tolerance * 100.0
    );
}
