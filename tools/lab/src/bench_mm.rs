//! `cargo xtask bench mm`: the page allocator micro-benchmark on the host (issue 3).
//!
//! Runs `cargo bench -p mm --bench mm_alloc` (the harness is `mm/benches/mm_alloc.rs`: cycles
//! per page by `rdtsc` for the single-page pcp path, the bulk array and list forms and
//! `buddy_system_allocator`'s order-0 path at batch sizes 1..16384, and 2 threads vs 1), which
//! prints its table, writes the JSON record and draws [`PLOT`]. Then checks the record's shape
//! and prints the targets against the measured figures.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use harness::envelope::{self, Envelope, Ran};
use serde_json::Value;

use harness::qemu;

/// Where the plot goes, relative to the workspace root (embedded in `docs/benchmarks-journal.md`).
pub const PLOT: &str = "docs/mm-bench.png";

/// Batch sizes of every table.
pub const SIZES: [u32; 15] = [
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
];

/// The tables every record must have (alloc+free cycles per page, one key per batch size).
pub const TABLES: [&str; 4] = [
    "single_total_cycles",
    "bulk_total_cycles",
    "list_total_cycles",
    "buddy_system_allocator_total_cycles",
];

/// The figures the issue sets targets on, read from a record.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Bulk (array) alloc+free cycles per page at batch 64 (target <= 25).
    pub bulk64: f64,
    /// Single-page pcp alloc+free cycles per page at batch 64 (target <= 40).
    pub single64: f64,
    /// `buddy_system_allocator` cycles per page at batch 64 divided by bulk (target >= 5).
    pub vs_bsa64: f64,
    /// 2-thread over 1-thread throughput (target >= 1.8).
    pub threads2_speedup: f64,
}

/// Check that `v` has the four tables with every batch size and `threads2_speedup`, and pull out
/// the figures with targets.
pub fn check_record(v: &Value) -> Result<Summary> {
    for t in TABLES {
        let table = v
            .get(t)
            .and_then(Value::as_object)
            .with_context(|| format!("record has no table `{t}`"))?;
        for b in SIZES {
            let x = table
                .get(&b.to_string())
                .and_then(Value::as_f64)
                .with_context(|| format!("`{t}` has no number for batch {b}"))?;
            if !(x.is_finite() && x > 0.0) {
                bail!("`{t}` batch {b}: {x} is not a positive number of cycles");
            }
        }
    }
    let at = |t: &str| v[t]["64"].as_f64().unwrap();
    let threads2_speedup = v
        .get("threads2_speedup")
        .and_then(Value::as_f64)
        .context("record has no number `threads2_speedup`")?;
    Ok(Summary {
        bulk64: at("bulk_total_cycles"),
        single64: at("single_total_cycles"),
        vs_bsa64: at("buddy_system_allocator_total_cycles") / at("bulk_total_cycles"),
        threads2_speedup,
    })
}

/// One line per target: figure, target, met or missed (and by how much).
pub fn targets_report(s: &Summary) -> String {
    fn line(what: &str, got: f64, target: f64, lower_is_better: bool, unit: &str) -> String {
        let met = if lower_is_better {
            got <= target
        } else {
            got >= target
        };
        let verdict = if met {
            "met".to_string()
        } else {
            format!("MISSED by {:.0}%", ((got / target) - 1.0).abs() * 100.0)
        };
        let cmp = if lower_is_better { "<=" } else { ">=" };
        format!("  {what:<46} {got:>8.2}{unit} (target {cmp} {target}{unit}): {verdict}\n")
    }
    let mut out = String::from("targets (issue 3):\n");
    out += &line("bulk alloc+free at batch 64", s.bulk64, 25.0, true, " cyc");
    out += &line(
        "single-page alloc+free at batch 64",
        s.single64,
        40.0,
        true,
        " cyc",
    );
    out += &line(
        "buddy_system_allocator / bulk at batch 64",
        s.vs_bsa64,
        5.0,
        false,
        "x",
    );
    out += &line(
        "2 threads / 1 thread throughput",
        s.threads2_speedup,
        1.8,
        false,
        "x",
    );
    out
}

/// Run the benchmark: the bench's own record to `target/mm-bench.json`, the plot to [`PLOT`];
/// print the table and the targets; with `json`, the record in the envelope there (`-`:
/// stdout). Returns the summary.
pub fn run(json: Option<&Path>) -> Result<Summary> {
    let root = qemu::workspace_root();
    let raw: PathBuf = root.join("target").join("mm-bench.json");
    if let Some(dir) = raw.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let plot = root.join(PLOT);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("xtask: cargo bench -p mm --bench mm_alloc (a few minutes; keep the machine quiet)");
    let status = Command::new(cargo)
        .current_dir(&root)
        .args(["bench", "-p", "mm", "--bench", "mm_alloc", "--", "--json"])
        .arg(&raw)
        .arg("--png")
        .arg(&plot)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p mm --bench mm_alloc failed: {status}");
    }
    let text =
        std::fs::read_to_string(&raw).with_context(|| format!("reading {}", raw.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", raw.display()))?;
    let s = check_record(&v)?;
    print!("{}", targets_report(&s));
    eprintln!("xtask: wrote {} and {}", raw.display(), plot.display());
    if let Some(p) = json {
        envelope::write(p, &Envelope::new("mm", Ran::Host, &v))?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Value {
        let table = |base: f64| {
            let m: serde_json::Map<String, Value> = SIZES
                .iter()
                .map(|b| (b.to_string(), Value::from(base + *b as f64 / 1000.0)))
                .collect();
            Value::Object(m)
        };
        serde_json::json!({
            "single_total_cycles": table(17.0),
            "bulk_total_cycles": table(18.0),
            "list_total_cycles": table(17.0),
            "buddy_system_allocator_total_cycles": table(200.0),
            "threads2_speedup": 1.9,
        })
    }

    #[test]
    fn complete_record_summarises() {
        let s = check_record(&record()).unwrap();
        assert_eq!(s.bulk64, 18.064);
        assert_eq!(s.single64, 17.064);
        assert!((s.vs_bsa64 - 200.064 / 18.064).abs() < 1e-9);
        let r = targets_report(&s);
        assert_eq!(r.matches(": met").count(), 4, "{r}");
    }

    #[test]
    fn missing_batch_or_table_or_speedup_is_an_error() {
        let mut v = record();
        v["bulk_total_cycles"]
            .as_object_mut()
            .unwrap()
            .remove("16384");
        let e = check_record(&v).unwrap_err().to_string();
        assert!(
            e.contains("bulk_total_cycles") && e.contains("16384"),
            "{e}"
        );
        let mut v = record();
        v.as_object_mut().unwrap().remove("list_total_cycles");
        assert!(check_record(&v).is_err());
        let mut v = record();
        v.as_object_mut().unwrap().remove("threads2_speedup");
        assert!(check_record(&v)
            .unwrap_err()
            .to_string()
            .contains("threads2_speedup"));
        let mut v = record();
        v["single_total_cycles"]["64"] = Value::from(0.0);
        assert!(check_record(&v).is_err());
    }

    #[test]
    fn missed_targets_say_by_how_much() {
        let s = Summary {
            bulk64: 30.0,
            single64: 20.0,
            vs_bsa64: 4.0,
            threads2_speedup: 1.5,
        };
        let r = targets_report(&s);
        assert!(r.contains("MISSED by 20%"), "{r}");
        assert!(r.contains("MISSED by 17%"), "{r}");
        assert_eq!(r.matches("MISSED").count(), 3, "{r}");
    }
}
