//! `bench --search` in brief (issue 42): Gannet only, 64 B, a coarse resolution and a fixed
//! number of short trials (about 20 s of trials). Checks NDR <= PDR <= the search's upper bound
//! <= the generator's ceiling, that NDR's confirming trials ran and lost nothing, and that the
//! latency percentiles are ordered with one sample per received frame. The full method and a
//! real run are in README.md ("Throughput and latency search") and BENCHMARKS.md.

use gannet_tests::*;
use harness::bench_search::{self, SearchReport};
use harness::rate::Sizes;
use harness::search::{Phase, RowOutcome, SearchConfig};

fn search() -> SearchReport {
    let guest = GuestConfig {
        image: image(),
        ..Default::default()
    };
    let cfg = SearchConfig {
        resolution_pps: 4000.0,
        pdr_loss: 0.005,
        trial_seconds: 0.3,
        final_seconds: 0.5,
        repeats: 2,
        warmup_seconds: 0.5,
        max_rate: Some(20_000.0),
    };
    bench_search::run_gannet(
        &guest,
        &[Sizes::one(64)],
        &cfg,
        0.5,
        Some(256),
        &bench_search::Dimensions::default(),
    )
    .unwrap_or_else(|e| panic!("search: {e:#}"))
}

#[test]
fn search_64b_ndr_pdr_and_latency() {
    let r = search();
    assert_eq!(r.rows.len(), 1);
    let (row, ceiling) = (&r.rows[0], &r.ceilings[0]);
    assert_ne!(row.outcome, RowOutcome::NeverForwards, "{row:#?}");
    assert!(ceiling.pps > 0.0 && ceiling.host_cores >= 1);
    assert!(row.upper_pps <= ceiling.pps && row.upper_pps <= 20_000.0);
    let ndr = row.ndr.as_ref().expect("NDR confirmed");
    let pdr = row.pdr.as_ref().expect("PDR confirmed");
    assert!(ndr.pps > 0.0, "NDR {}", ndr.pps);
    assert!(ndr.pps <= pdr.pps, "NDR {} > PDR {}", ndr.pps, pdr.pps);
    assert!(
        pdr.pps <= row.upper_pps,
        "PDR {} over {}",
        pdr.pps,
        row.upper_pps
    );
    assert_eq!(ndr.worst_loss, 0.0);
    assert!(pdr.worst_loss <= 0.005);
    // The last `repeats` confirming trials at NDR are at NDR and lost nothing.
    let confirming: Vec<_> = row
        .trials
        .iter()
        .filter(|t| t.phase == Phase::ConfirmNdr && t.trial.rate_pps == ndr.pps)
        .collect();
    assert_eq!(confirming.len(), 2, "{:#?}", row.trials);
    for t in &confirming {
        assert!(t.pass);
        assert_eq!(t.trial.received, t.trial.offered);
        assert_eq!(t.trial.loss, 0.0);
    }
    assert_eq!(row.latency.len(), 3);
    for l in &row.latency {
        let x = l.trial.latency.as_ref().expect("latency samples");
        assert_eq!(x.count, l.trial.received);
        assert!(x.min_us > 0.0, "{x:?}");
        assert!(x.min_us <= x.p50_us && x.p50_us <= x.p99_us, "{x:?}");
        assert!(x.p99_us <= x.p999_us && x.p999_us <= x.max_us, "{x:?}");
    }
}
