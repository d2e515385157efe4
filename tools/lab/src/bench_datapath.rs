//! `cargo xtask bench datapath`: the host twin of the deterministic benchmark (issue 12, item 1).
//!
//! Builds `unikernel/benches/datapath.rs` (feature `host-rig`, release) and runs it once per
//! (mode, K) under `valgrind --tool=callgrind --toggle-collect='*bench_poll_once*'`: the same
//! steps as the guest's `sim=K` run ([`harness::bench_sim`]: K 60-byte UDP frames delivered on
//! port 0 and both TX rings completed outside the measured part, one `Core::poll_once` inside),
//! on the same crates (`unikernel`'s dataplane, `drivers`' `VirtioNet` and `sim` device,
//! `mm`, `netstack`), but built for the host (`x86_64-unknown-linux-gnu` instead of
//! `x86_64-unknown-none`, same release profile, debug assertions off). The callgrind output's
//! `totals:` Ir (only the measured `bench_poll_once` calls are collected) ÷ frames forwarded is
//! host instructions per packet, deterministic run to run.
//!
//! With `--with-guest` the table sets it beside the guest's figure from a fresh `bench sim`
//! run in the same invocation (no recorded figures: they go stale with every change).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde::Serialize;

use harness::bench_sim::{frames_per_iter, KvLine, SimMode};

/// Prefix of the benchmark binary's result line.
pub const LINE_PREFIX: &str = "DATAPATH ";
/// The function whose calls callgrind collects (the benchmark's measured `poll_once`).
pub const TOGGLE: &str = "*bench_poll_once*";
/// What the host figure is, said in every table.
pub const HOST_NOTE: &str = "host = callgrind Ir of the x86_64 host build of the same crates \
(target x86_64-unknown-linux-gnu vs the guest's x86_64-unknown-none; release profile, debug \
assertions off in both), the same steps against the same simulated device (drivers::sim); \
guest = guest instructions under -icount";

/// One host run (the `DATAPATH` line plus callgrind's count).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRecord {
    /// Forwarding mode.
    pub mode: String,
    /// Frames delivered on port 0 per poll iteration.
    pub k: u64,
    /// Warm-up iterations (not counted).
    pub warmup: u64,
    /// Measured iterations.
    pub iters: u64,
    /// Frames delivered during the measured iterations.
    pub delivered: u64,
    /// Frames the forwarder transmitted on port 1 in the measured iterations.
    pub packets: u64,
    /// Of those, frames equal to the expected output.
    pub out: u64,
    /// Other frames taken off either TX ring (expected 0).
    pub other: u64,
    /// Busy poll iterations measured.
    pub busy_iters: u64,
    /// `packets / busy_iters`.
    pub frames_per_busy_iter: f64,
    /// Host instructions (callgrind Ir) in the measured `poll_once` calls.
    pub instructions: u64,
    /// `instructions / packets`.
    pub instructions_per_packet: f64,
}

/// One table row: the host figure and the guest's.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The host run.
    pub host: HostRecord,
    /// Guest instructions per packet for the same (mode, K), if known.
    pub guest_instructions_per_packet: Option<f64>,
    /// Where the guest figure comes from: `bench sim` (fresh) or `docs/benchmarks-journal.md`.
    pub guest_source: &'static str,
    /// `host / guest`.
    pub ratio: Option<f64>,
}

impl Row {
    /// A row; `ratio` from the two figures.
    pub fn new(host: HostRecord, guest: Option<f64>, source: &'static str) -> Row {
        let ratio = guest
            .filter(|g| *g > 0.0)
            .map(|g| host.instructions_per_packet / g);
        Row {
            host,
            guest_instructions_per_packet: guest,
            guest_source: source,
            ratio,
        }
    }
}

/// The total Ir of a callgrind output file: its `totals:` line, else its `summary:` line.
pub fn parse_totals(text: &str) -> Option<u64> {
    let first = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_ascii_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    first("totals:").or_else(|| first("summary:"))
}

/// The record of a `DATAPATH` line and callgrind's count.
pub fn parse_record(line: &str, instructions: u64) -> Result<HostRecord> {
    let kv =
        KvLine::parse(line, LINE_PREFIX).ok_or_else(|| anyhow!("not a DATAPATH line: {line}"))?;
    let (packets, busy_iters) = (kv.num("packets")?, kv.num("busy_iters")?);
    Ok(HostRecord {
        mode: kv.get("mode")?.to_string(),
        k: kv.num("k")?,
        warmup: kv.num("warmup")?,
        iters: kv.num("iters")?,
        delivered: kv.num("delivered")?,
        packets,
        out: kv.num("out")?,
        other: kv.num("other")?,
        busy_iters,
        frames_per_busy_iter: frames_per_iter(packets, busy_iters),
        instructions,
        instructions_per_packet: frames_per_iter(instructions, packets),
    })
}

/// Build the benchmark binary (release, feature `host-rig`) and return its path.
pub fn build(root: &Path) -> Result<PathBuf> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root)
        .args([
            "build",
            "--release",
            "-p",
            "unikernel",
            "--features",
            "host-rig",
            "--bench",
            "datapath",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo build for unikernel/benches/datapath.rs")?;
    ensure!(
        out.status.success(),
        "building the datapath benchmark failed"
    );
    executable_from_messages(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| anyhow!("cargo did not report the datapath benchmark's executable"))
}

/// The `executable` of the `datapath` bench artifact in cargo's JSON messages.
pub fn executable_from_messages(stdout: &str) -> Option<PathBuf> {
    stdout.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        (v["reason"] == "compiler-artifact" && v["target"]["name"] == "datapath")
            .then(|| v["executable"].as_str().map(PathBuf::from))
            .flatten()
    })
}

/// The valgrind arguments of one run.
pub fn valgrind_args(
    exe: &Path,
    out_file: &Path,
    mode: SimMode,
    k: u16,
    iters: u32,
) -> Vec<String> {
    vec![
        "--tool=callgrind".into(),
        format!("--toggle-collect={TOGGLE}"),
        format!("--callgrind-out-file={}", out_file.display()),
        exe.display().to_string(),
        "--mode".into(),
        mode.as_str().into(),
        "--k".into(),
        k.to_string(),
        "--iters".into(),
        iters.to_string(),
    ]
}

/// Run the benchmark for (mode, K) under callgrind. Fails unless every frame was forwarded as
/// expected and every page came back (the binary's exit status).
pub fn run_one(exe: &Path, mode: SimMode, k: u16, iters: u32) -> Result<HostRecord> {
    let dir = tempfile::tempdir()?;
    let cg = dir.path().join("callgrind.out");
    let out = Command::new("valgrind")
        .args(valgrind_args(exe, &cg, mode, k, iters))
        .output()
        .context("running valgrind")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "mode {} k={k}: the datapath benchmark failed ({})\n{stdout}{}",
            mode.as_str(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = stdout
        .lines()
        .find(|l| l.contains(LINE_PREFIX))
        .ok_or_else(|| anyhow!("mode {} k={k}: no DATAPATH line\n{stdout}", mode.as_str()))?;
    let text = std::fs::read_to_string(&cg).with_context(|| format!("reading {}", cg.display()))?;
    let ir = parse_totals(&text).ok_or_else(|| anyhow!("no totals: line in {}", cg.display()))?;
    let r = parse_record(line, ir)?;
    ensure!(
        ir > 0,
        "callgrind counted nothing in {TOGGLE} (was it inlined or merged?)"
    );
    ensure!(
        r.packets > 0 && r.delivered == r.packets && r.out == r.packets && r.other == 0,
        "mode {} k={k}: not every frame was forwarded as expected: {line}",
        mode.as_str()
    );
    Ok(r)
}

/// Whether every row with a guest figure is within `tolerance` (0.10: 10%) of it.
pub fn within(rows: &[Row], tolerance: f64) -> bool {
    rows.iter()
        .filter_map(|r| r.ratio)
        .all(|x| (x - 1.0).abs() <= tolerance)
}

/// The table: mode, K, frames per busy poll iteration, host and guest instructions per packet,
/// host/guest, and where the guest figure comes from; then [`HOST_NOTE`].
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<7} {:>4} {:>17} {:>17} {:>18} {:>11}  guest figure",
        "mode", "K", "frames/busy iter", "host instr/packet", "guest instr/packet", "host/guest"
    );
    for r in rows {
        let h = &r.host;
        let guest = r
            .guest_instructions_per_packet
            .map_or("-".to_string(), |g| format!("{g:.2}"));
        let ratio = r.ratio.map_or("-".to_string(), |x| format!("{x:.3}"));
        let _ = writeln!(
            s,
            "{:<7} {:>4} {:>17.2} {:>17.2} {:>18} {:>11}  {}",
            h.mode,
            h.k,
            h.frames_per_busy_iter,
            h.instructions_per_packet,
            guest,
            ratio,
            r.guest_source
        );
    }
    let _ = writeln!(s, "({HOST_NOTE})");
    s
}

/// The JSON document `--json FILE` writes.
#[derive(Debug, Serialize)]
pub struct DatapathJson<'a> {
    /// [`HOST_NOTE`].
    pub note: &'static str,
    /// One row per (mode, K).
    pub rows: &'a [Row],
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "DATAPATH mode=l2 k=4 warmup=256 iters=1024 delivered=4096 packets=4096 out=4096 other=0 kicks=0 busy_iters=1024";

    #[test]
    fn parses_the_line_and_the_totals() {
        let cg = "events: Ir\nfl=x\nfn=y\n1 5\nsummary: 1460024\ntotals: 1460024\n";
        let ir = parse_totals(cg).unwrap();
        assert_eq!(ir, 1_460_024);
        assert_eq!(parse_totals("summary: 12\n"), Some(12));
        assert_eq!(parse_totals("events: Ir\n"), None);
        let r = parse_record(&format!("x {LINE}"), ir).unwrap();
        assert_eq!(
            (r.mode.as_str(), r.k, r.packets, r.busy_iters),
            ("l2", 4, 4096, 1024)
        );
        assert_eq!(r.frames_per_busy_iter, 4.0);
        assert!((r.instructions_per_packet - 356.451).abs() < 0.001);
        assert!(parse_record("DATAPATH mode=l2", 1).is_err());
    }

    #[test]
    fn rows_ratios_and_the_table() {
        let r = parse_record(LINE, 4096 * 350).unwrap();
        let row = Row::new(r, Some(347.59), "bench sim (this run)");
        assert!((row.ratio.unwrap() - 350.0 / 347.59).abs() < 1e-9);
        assert!(within(std::slice::from_ref(&row), 0.10));
        let t = table(&[row]);
        assert!(t.contains("350.00") && t.contains("347.59") && t.contains("1.007"));
        assert!(t.contains("x86_64-unknown-linux-gnu") && t.contains("x86_64-unknown-none"));
        let alone = Row::new(parse_record(LINE, 4096 * 350).unwrap(), None, "not run");
        assert_eq!(alone.ratio, None);
    }

    #[test]
    fn finds_the_executable_and_builds_the_command() {
        let msgs = r#"{"reason":"compiler-artifact","target":{"name":"mm"},"executable":null}
{"reason":"compiler-artifact","target":{"name":"datapath"},"executable":"/t/release/deps/datapath-1"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            executable_from_messages(msgs),
            Some(PathBuf::from("/t/release/deps/datapath-1"))
        );
        let a = valgrind_args(Path::new("/b"), Path::new("/o"), SimMode::Router, 32, 64);
        assert_eq!(a[1], "--toggle-collect=*bench_poll_once*");
        assert_eq!(a[3..].join(" "), "/b --mode router --k 32 --iters 64");
    }
}
