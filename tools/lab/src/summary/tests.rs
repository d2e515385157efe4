use super::*;

fn env(bench: &str, command: &str, result: Value) -> Envelope<Value> {
    Envelope {
        schema: envelope::SCHEMA,
        bench: bench.to_string(),
        command: command.to_string(),
        commit: "0123456789abcdef".to_string(),
        dirty: false,
        accel: "tcg".to_string(),
        icount: true,
        host_cpu: "Test CPU".to_string(),
        date: "2026-12-05T00:00:00Z".to_string(),
        result,
    }
}

fn sim(records: Value) -> Envelope<Value> {
    env(
        "sim",
        "cargo xtask bench sim --modes l2 --k 4,32 --json results/sim.json",
        serde_json::json!({ "append": "", "routes_file": null, "records": records }),
    )
}

fn rec(mode: &str, size: u64, k: u64, ipp: f64) -> Value {
    serde_json::json!({ "mode": mode, "size": size, "k": k, "instructions_per_packet": ipp,
                        "frames_per_busy_iter": k as f64 })
}

const BASELINE: &str = r#"{ "tolerance": 0.01, "cases": [
  { "mode": "l2", "k": 32, "instructions_per_packet": 90.09, "frames_per_busy_iter": 32.0 },
  { "mode": "l2", "k": 32, "size": 9018, "instructions_per_packet": 215.78, "frames_per_busy_iter": 32.0 }
] }"#;

#[test]
fn deterministic_rows_must_be_the_guarded_figures() {
    let mut r = Results::default();
    r.files.insert(
        "sim".into(),
        sim(serde_json::json!([
            rec("l2", 64, 32, 90.09),
            rec("l2", 64, 4, 140.53)
        ])),
    );
    let g = baseline(BASELINE).unwrap();
    assert_eq!(g[1].1.size, 9018);
    assert_eq!(g[0].1.size, 64, "no size: 64 B");
    let unguarded = check_guarded(&r, &g).unwrap();
    assert_eq!(unguarded, ["l2 64 B K=4"]);
    r.files.insert(
        "sim".into(),
        sim(serde_json::json!([rec("l2", 64, 32, 91.00)])),
    );
    let err = format!("{:#}", check_guarded(&r, &g).unwrap_err());
    assert!(
        err.contains("l2 64 B K=32") && err.contains("91.00") && err.contains("90.09"),
        "{err}"
    );
}

#[test]
fn rows_carry_figures_ratios_commands_and_commits() {
    let mut r = Results::default();
    r.files.insert(
        "sim".into(),
        sim(serde_json::json!([rec("l2", 64, 32, 90.0)])),
    );
    r.files.insert(
        "sim-9018".into(),
        sim(serde_json::json!([rec("l2", 9018, 32, 216.0)])),
    );
    r.files.insert(
        "soak".into(),
        env(
            "soak",
            "cargo xtask soak --minutes 3 --json=x.json",
            serde_json::json!({ "modes": [ { "mode": "l2", "verdict": "pass", "sent": 1234567,
                "received": 1234567, "bad": 0, "failures": [] } ] }),
        ),
    );
    let rows = rows(&r);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].gannet, "90.00 @ 32.00");
    assert_eq!(
        (rows[1].peer.as_str(), rows[1].ratio.as_str()),
        ("64 B: 90.00", "2.40×")
    );
    assert_eq!(rows[2].gannet, "pass (1,234,567 / 1,234,567, 0 bad)");
    let md = markdown(&r, &rows, &[]);
    assert!(
        md.starts_with(BEGIN) && md.trim_end().ends_with(END),
        "{md}"
    );
    assert!(
        md.contains("| `cargo xtask bench sim --modes l2 --k 4,32` | 0123456 |"),
        "{md}"
    );
    assert!(
        md.contains("`cargo xtask soak --minutes 3` | 0123456 |"),
        "{md}"
    );
    assert!(
        md.contains("Not in `results/`, so not shown: `sim-1518`")
            && md.contains(
                ", `peer` (`cargo xtask bench --peer linux,dpdk --json results/peer.json`)"
            ),
        "{md}"
    );
    assert!(md.contains("Measured on: Test CPU (tcg)."), "{md}");
}

#[test]
fn e1000e_rows_sit_beside_virtio_net_with_their_tail_writes() {
    let mut r = Results::default();
    r.files.insert(
        "sim".into(),
        sim(serde_json::json!([rec("l2", 64, 32, 90.0)])),
    );
    let mut e = rec("l2", 64, 32, 84.0);
    e["nic"] = "e1000e".into();
    e["packets"] = 32768.into();
    e["rdt_writes"] = 1024.into();
    e["tdt_writes"] = 2048.into();
    r.files
        .insert("sim-e1000e".into(), sim(serde_json::json!([e])));
    let rows = rows(&r);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[1].metric,
        "`bench sim` e1000e l2 64 B K=32: guest instructions/packet @ frames/busy poll iteration; forwarded frames per `RDT` / `TDT` write"
    );
    assert_eq!(rows[1].gannet, "84.00 @ 32.00; 32.00 / 16.00");
    assert_eq!(
        (
            rows[1].peer.as_str(),
            rows[1].ratio.as_str(),
            rows[1].file.as_str()
        ),
        ("virtio-net: 90.00", "0.93×", "sim-e1000e")
    );
    let g = baseline(
        r#"{ "cases": [ { "nic": "e1000e", "mode": "l2", "k": 32, "instructions_per_packet": 84.0 } ] }"#,
    )
    .unwrap();
    assert_eq!(g[0].1.nic, "e1000e");
    assert_eq!(check_guarded(&r, &g).unwrap(), ["l2 64 B K=32"]);
}

#[test]
fn search_rows_give_ndr_pdr_and_the_latency_at_half_ndr() {
    let mut r = Results::default();
    r.files.insert(
        "search".into(),
        env(
            "search",
            "cargo xtask bench --search --sizes 64",
            serde_json::json!({
                "config": { "pdr_loss": 0.005 },
                "ceilings": [ { "pps": 210000.0, "host_cores": 2 } ],
                "rows": [ {
                    "sizes": { "name": "64" },
                    "outcome": "found",
                    "ndr": { "pps": 12000.0, "gbps": 0.008064 },
                    "pdr": { "pps": 20500.0, "gbps": 0.013776 },
                    "latency": [
                        { "fraction": 0.1, "trial": { "latency": { "min_us": 1.0 } } },
                        { "fraction": 0.5, "trial": { "latency": {
                            "min_us": 40.2, "p50_us": 120.4, "p99_us": 300.0,
                            "p999_us": 900.0, "max_us": 1500.0 } } }
                    ]
                } ]
            }),
        ),
    );
    let rows = rows(&r);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0].gannet,
        "12,000 (0.0081 Gbit/s) / 20,500 (0.0138 Gbit/s)"
    );
    assert!(
        rows[0].metric.contains("PDR (≤ 0.5 %)"),
        "{}",
        rows[0].metric
    );
    assert!(rows[0]
        .metric
        .contains("ceiling 210,000 fps on 2 host cores"));
    assert!(rows[0].metric.contains("tcg"));
    assert_eq!((rows[0].peer.as_str(), rows[0].ratio.as_str()), ("—", "—"));
    assert_eq!(rows[1].gannet, "40 / 120 / 300 / 900 / 1500");
}

/// `--search --peer dpdk`: the peer's NDR / PDR of the same row and Gannet's NDR ÷ the peer's.
#[test]
fn search_rows_give_the_peer_and_the_ratio() {
    let mut r = Results::default();
    let row = |ndr: f64, pdr: f64| {
        serde_json::json!({
            "sizes": { "name": "64" }, "outcome": "found",
            "ndr": { "pps": ndr, "gbps": 0.0 }, "pdr": { "pps": pdr, "gbps": 0.0 },
            "latency": []
        })
    };
    r.files.insert(
        "search".into(),
        env(
            "search",
            "cargo xtask bench --search --sizes 64 --peer dpdk",
            serde_json::json!({
                "config": { "pdr_loss": 0.005 },
                "dimensions": { "label": "port 0 -> 1, virtio, 4 flows, 1 core x 1 queue" },
                "ceilings": [ { "pps": 100000.0, "host_cores": 2 } ],
                "rows": [ row(12000.0, 20500.0) ],
                "peers": [ { "dut": "testpmd-mac", "rows": [ row(8000.0, 9000.0) ] } ]
            }),
        ),
    );
    let rows = rows(&r);
    assert_eq!(rows[0].peer, "testpmd-mac: 8,000 / 9,000");
    assert_eq!(rows[0].ratio, "1.50×");
    assert!(rows[0].metric.contains("Gannet's NDR ÷ the peer's"));
    assert!(
        rows[0].metric.contains(
            "`bench --search` 64 B [port 0 -> 1, virtio, 4 flows, 1 core x 1 queue]: NDR"
        ),
        "{}",
        rows[0].metric
    );
}

#[test]
fn splice_replaces_only_the_block() {
    let text = format!("# B\n\nintro\n{BEGIN}\nold\n{END}\n\nrest\n");
    let out = splice(&text, &format!("{BEGIN}\nnew\n{END}\n")).unwrap();
    assert_eq!(out, format!("# B\n\nintro\n{BEGIN}\nnew\n{END}\n\nrest\n"));
    assert!(splice("no markers", "x").is_err());
    assert!(splice(&format!("{END}\n{BEGIN}\n"), "x").is_err());
}

/// The CI check: BENCHMARKS.md's summary is what `results/` makes, and its deterministic rows
/// are the figures `tests/perf-baseline.json` guards. Mend with `cargo xtask report`.
#[test]
fn benchmarks_md_summary_is_generated_from_the_committed_results() {
    let root = harness::qemu::workspace_root();
    let report = generate(&root).unwrap_or_else(|e| panic!("{e:#}"));
    assert!(
        !report.changed,
        "BENCHMARKS.md's summary is not what results/ makes: run `cargo xtask report` and commit"
    );
}
