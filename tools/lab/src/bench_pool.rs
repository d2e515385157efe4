//! `cargo xtask bench pool`: the page_pool benchmark (issue 4).
//!
//! * Host: runs `cargo bench -p mm --bench pool` (the harness is `mm/benches/pool.rs`: TSC
//!   cycles per page for the recycle fast path, the ring path and the empty-pool refill, bulk
//!   vs single) and reads its `POOL_BENCH {json}` line.
//! * Guest: the "pool always empty" workload (`pool=release`, every received page released to
//!   the allocator instead of recycled) with `refill=bulk` and `refill=single`, each booted once
//!   under `--icount` (guest instructions per forwarded packet: with `-icount shift=0` the guest
//!   TSC advances with executed instructions, so `busy_cycles / forwarded` counts instructions,
//!   deterministically) and once without (wall-clock forwarded pps). If the guest rejects the
//!   keys (`config error:` on its console — the kernel side does not exist yet) or cannot be
//!   booted, the guest fields are `null` and `guest_note` says why.
//!
//! The JSON record: `recycle_fast_cycles`, `recycle_ring_cycles`, `empty_refill_cycles`,
//! `guest_bulk_instructions_per_packet`, `guest_single_instructions_per_packet`,
//! `guest_bulk_pps`, `guest_single_pps`, plus `recycle_ring_bulk_cycles`,
//! `empty_refill_single_cycles`, `guest_bulk_frames_per_busy_iter`,
//! `guest_single_frames_per_busy_iter` (`forwarded / busy_iters` of the icount runs: the batch
//! the instruction figures were amortised over) and `guest_note`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use serde_json::Value;

use harness::envelope::{self, Envelope, Ran};
use harness::gen;
use harness::qemu::{self, Accel, Echo, Guest, GuestConfig};

/// Prefix of the harness's machine-readable line.
pub const LINE_PREFIX: &str = "POOL_BENCH ";

/// The `cargo xtask bench pool` record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolBench {
    /// alloc from the cache + recycle_direct, TSC cycles per page (target <= 10; Linux 19).
    pub recycle_fast_cycles: f64,
    /// remote push (one per page) + owner drain + alloc, cycles per page (target <= 30; Linux 54).
    pub recycle_ring_cycles: f64,
    /// alloc + release_page on an always-empty pool, bulk refill (target <= 40; Linux 238).
    pub empty_refill_cycles: f64,
    pub guest_bulk_instructions_per_packet: Option<f64>,
    pub guest_single_instructions_per_packet: Option<f64>,
    /// Frames per busy poll iteration of the bulk icount run (`forwarded / busy_iters`).
    pub guest_bulk_frames_per_busy_iter: Option<f64>,
    /// Frames per busy poll iteration of the single icount run.
    pub guest_single_frames_per_busy_iter: Option<f64>,
    pub guest_bulk_pps: Option<f64>,
    pub guest_single_pps: Option<f64>,
    /// Same as `recycle_ring_cycles` with one bulk push per 64 pages.
    pub recycle_ring_bulk_cycles: f64,
    /// Same as `empty_refill_cycles` with single-page refill.
    pub empty_refill_single_cycles: f64,
    /// Why the guest fields are null (or other remarks about the guest runs).
    pub guest_note: Option<String>,
    /// The host figures' TSC cycles per page over the rounds, `[min, median, max]`
    /// ([`HostFigures::spread`]; the `*_cycles` fields above are the minimum).
    pub host_cycles_spread: BTreeMap<String, [f64; 3]>,
}

/// The host figures, from the harness's `POOL_BENCH` line.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFigures {
    pub recycle_fast: f64,
    pub recycle_ring: f64,
    pub recycle_ring_bulk: f64,
    pub empty_refill_bulk: f64,
    pub empty_refill_single: f64,
    /// TSC cycles per page over the rounds, `[min, median, max]`, per figure (`recycle_fast`,
    /// `recycle_ring`, `recycle_ring_bulk`, `empty_refill`, `empty_refill_single`); empty
    /// from a harness that printed none.
    pub spread: BTreeMap<String, [f64; 3]>,
}

/// Parse the harness output (the last `POOL_BENCH {json}` line).
pub fn parse_host(stdout: &str) -> Result<HostFigures> {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim_start().strip_prefix(LINE_PREFIX))
        .ok_or_else(|| anyhow!("no `{}` line in the bench output", LINE_PREFIX.trim()))?;
    let v: Value = serde_json::from_str(line.trim()).context("parsing the POOL_BENCH line")?;
    let f = |k: &str| -> Result<f64> {
        v.get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| anyhow!("POOL_BENCH: missing number `{k}`"))
    };
    Ok(HostFigures {
        recycle_fast: f("recycle_fast_cycles")?,
        recycle_ring: f("recycle_ring_cycles")?,
        recycle_ring_bulk: f("recycle_ring_bulk_cycles")?,
        empty_refill_bulk: f("empty_refill_cycles")?,
        empty_refill_single: f("empty_refill_single_cycles")?,
        spread: match v.get("spread") {
            Some(s) => serde_json::from_value(s.clone()).context("POOL_BENCH: `spread`")?,
            None => BTreeMap::new(),
        },
    })
}

/// Run the host harness (its table goes to stderr) and parse its figures.
pub fn host() -> Result<HostFigures> {
    let root = qemu::workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("xtask: cargo bench -p mm --bench pool (about a minute; keep the machine quiet)");
    let out = Command::new(cargo)
        .current_dir(&root)
        .args(["bench", "-p", "mm", "--bench", "pool"])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo bench -p mm --bench pool")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{stdout}");
    if !out.status.success() {
        bail!("cargo bench -p mm --bench pool failed: {}", out.status);
    }
    parse_host(&stdout)
}

/// One guest run of the pool-always-empty workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuestRun {
    /// `busy_cycles / forwarded` (instructions under icount).
    pub per_packet: Option<f64>,
    /// `forwarded / busy_iters`: frames per busy poll iteration.
    pub frames_per_busy_iter: Option<f64>,
    pub forwarded_pps: f64,
}

/// The guest's kernel command line for a refill mode (`"bulk"` or `"single"`).
pub fn guest_append(refill: &str) -> String {
    format!("pool=release refill={refill}")
}

/// Why a guest run gave no figure: the guest rejected the configuration, or something else
/// failed (boot, traffic).
#[derive(Debug)]
pub enum GuestFailure {
    /// The guest printed `config error:` (the line).
    Rejected(String),
    Other(anyhow::Error),
}

/// Boot `image` with `append`, offer `seconds` of 64-byte frames port 0 -> port 1, quit.
pub fn guest_run(
    image: &Path,
    append: &str,
    icount: bool,
    seconds: f64,
) -> Result<GuestRun, GuestFailure> {
    let other = GuestFailure::Other;
    let tmp = tempfile::Builder::new()
        .prefix("gannet-pool-")
        .tempdir_in("/tmp")
        .map_err(|e| other(e.into()))?;
    let gcfg = gen::GenConfig {
        dir: tmp.path().to_path_buf(),
        size: 64,
        seconds,
        ..Default::default()
    };
    let generator = gen::Generator::bind(&gcfg).map_err(other)?;
    let cfg = GuestConfig {
        image: image.to_path_buf(),
        dgram_dir: tmp.path().to_path_buf(),
        append: append.to_string(),
        accel: Accel::Tcg,
        icount,
        echo: Echo::Stderr,
        ..Default::default()
    };
    let mut guest = Guest::boot(&cfg).map_err(other)?;
    if let Err(e) = guest.wait_ready(qemu::READY_TIMEOUT) {
        let rejected = guest
            .lines()
            .into_iter()
            .find(|l| l.contains(qemu::CONFIG_ERROR_MARKER));
        guest.kill();
        return Err(match rejected {
            Some(line) => GuestFailure::Rejected(line),
            None => other(e),
        });
    }
    let r = generator.run().map_err(other)?;
    let (stats, exit) = guest.quit(Duration::from_secs(30)).map_err(other)?;
    drop(generator);
    drop(tmp);
    if !exit.is_clean() {
        return Err(other(anyhow!("{exit}\n{}", guest.tail_report())));
    }
    Ok(GuestRun {
        per_packet: stats.as_ref().and_then(|s| s.cycles_per_packet()),
        frames_per_busy_iter: stats
            .as_ref()
            .and_then(|s| (s.busy_iters > 0).then(|| s.forwarded as f64 / s.busy_iters as f64)),
        forwarded_pps: r.received_pps,
    })
}

/// Guest figures: `(bulk icount, single icount, bulk wall, single wall)` or why they are null.
/// Probes with the bulk/icount run first: a rejection there skips the other three boots.
pub fn guest(image: Option<PathBuf>, seconds: f64) -> Result<[GuestRun; 4], String> {
    let image = match image {
        Some(p) => p,
        None => qemu::build_image().map_err(|e| format!("building the image failed: {e:#}"))?,
    };
    let mut runs = Vec::new();
    for (refill, icount) in [
        ("bulk", true),
        ("single", true),
        ("bulk", false),
        ("single", false),
    ] {
        let append = guest_append(refill);
        eprintln!(
            "xtask: guest run `{append}`, accelerator tcg{}",
            if icount { ", icount shift=0" } else { "" }
        );
        match guest_run(&image, &append, icount, seconds) {
            Ok(r) => runs.push(r),
            Err(GuestFailure::Rejected(line)) => {
                return Err(format!(
                    "the guest rejects `{append}` (kernel side of issue 4 not there yet): {}",
                    line.trim()
                ))
            }
            Err(GuestFailure::Other(e)) => {
                return Err(format!("guest run `{append}` failed: {e:#}"))
            }
        }
    }
    Ok([runs[0], runs[1], runs[2], runs[3]])
}

/// Assemble the record from the host figures and the guest outcome.
pub fn record(h: &HostFigures, g: &Result<[GuestRun; 4], String>) -> PoolBench {
    let (bi, si, bf, sf, bw, sw, note) = match g {
        Ok([bi, si, bw, sw]) => (
            bi.per_packet,
            si.per_packet,
            bi.frames_per_busy_iter,
            si.frames_per_busy_iter,
            Some(bw.forwarded_pps),
            Some(sw.forwarded_pps),
            None,
        ),
        Err(why) => (None, None, None, None, None, None, Some(why.clone())),
    };
    PoolBench {
        recycle_fast_cycles: h.recycle_fast,
        recycle_ring_cycles: h.recycle_ring,
        empty_refill_cycles: h.empty_refill_bulk,
        guest_bulk_instructions_per_packet: bi,
        guest_single_instructions_per_packet: si,
        guest_bulk_frames_per_busy_iter: bf,
        guest_single_frames_per_busy_iter: sf,
        guest_bulk_pps: bw,
        guest_single_pps: sw,
        recycle_ring_bulk_cycles: h.recycle_ring_bulk,
        empty_refill_single_cycles: h.empty_refill_single,
        guest_note: note,
        host_cycles_spread: h.spread.clone(),
    }
}

/// `cargo xtask bench pool`: host harness, then the guest runs (`seconds` of traffic each);
/// prints the JSON record and writes it to `json` if given.
pub fn run(json: Option<&Path>, image: Option<PathBuf>, seconds: f64) -> Result<PoolBench> {
    let h = host()?;
    let g = guest(image, seconds);
    if let Err(why) = &g {
        eprintln!("xtask: guest figures null: {why}");
    }
    let rec = record(&h, &g);
    if let (Some(b), Some(s)) = (
        rec.guest_bulk_instructions_per_packet,
        rec.guest_single_instructions_per_packet,
    ) {
        let f = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.2}"));
        eprintln!(
            "xtask: guest instructions/packet bulk {b:.1} vs single {s:.1} ({:+.1}%; target <= -10%), \
             at {} vs {} frames/busy iteration",
            (b / s - 1.0) * 100.0,
            f(rec.guest_bulk_frames_per_busy_iter),
            f(rec.guest_single_frames_per_busy_iter)
        );
    }
    // Host figures (rdtsc) and guest runs under TCG, with and without icount; the record on
    // stdout unless --json names a file.
    let env = Envelope::new(
        "pool",
        Ran::Guest {
            accel: Accel::Tcg,
            icount: true,
        },
        &rec,
    );
    envelope::write(json.unwrap_or(Path::new("-")), &env)?;
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "page_pool host bench: ...\n  recycle fast 5.6\nPOOL_BENCH {\"recycle_fast_cycles\":5.6,\"recycle_ring_cycles\":16.2,\"recycle_ring_bulk_cycles\":9.7,\"empty_refill_cycles\":19.2,\"empty_refill_single_cycles\":18.8,\"rounds\":5}\n";

    fn host_figures() -> HostFigures {
        parse_host(OUT).unwrap()
    }

    #[test]
    fn parses_the_harness_line() {
        let h = host_figures();
        assert_eq!(h.recycle_fast, 5.6);
        assert_eq!(h.recycle_ring, 16.2);
        assert_eq!(h.empty_refill_single, 18.8);
        assert!(parse_host("no line\n").is_err());
        assert!(parse_host("POOL_BENCH {\"recycle_fast_cycles\":1}").is_err());
        assert!(h.spread.is_empty());
        let with_spread = OUT.replace(
            "\"rounds\":5}",
            "\"rounds\":5,\"spread\":{\"recycle_fast\":[5.6,5.9,7.0]}}",
        );
        let h = parse_host(&with_spread).unwrap();
        assert_eq!(h.spread["recycle_fast"], [5.6, 5.9, 7.0]);
        let bad = OUT.replace("\"rounds\":5}", "\"rounds\":5,\"spread\":{\"x\":[1]}}");
        assert!(parse_host(&bad).is_err());
    }

    #[test]
    fn record_has_the_issue_keys_and_nulls_with_a_reason() {
        let rec = record(&host_figures(), &Err("guest rejects it".into()));
        let v = serde_json::to_value(&rec).unwrap();
        for k in [
            "recycle_fast_cycles",
            "recycle_ring_cycles",
            "empty_refill_cycles",
            "guest_bulk_instructions_per_packet",
            "guest_single_instructions_per_packet",
            "guest_bulk_frames_per_busy_iter",
            "guest_single_frames_per_busy_iter",
            "guest_bulk_pps",
            "guest_single_pps",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(v["guest_bulk_pps"].is_null());
        assert_eq!(v["guest_note"], "guest rejects it");
        assert_eq!(v["empty_refill_cycles"], 19.2);
    }

    #[test]
    fn record_fills_guest_fields() {
        let run = |pp, pps| GuestRun {
            per_packet: Some(pp),
            frames_per_busy_iter: Some(2.5),
            forwarded_pps: pps,
        };
        let g = Ok([
            run(280.0, 1.0),
            run(320.0, 2.0),
            run(9.0, 1000.0),
            run(9.0, 900.0),
        ]);
        let rec = record(&host_figures(), &g);
        assert_eq!(rec.guest_bulk_instructions_per_packet, Some(280.0));
        assert_eq!(rec.guest_single_instructions_per_packet, Some(320.0));
        assert_eq!(rec.guest_bulk_frames_per_busy_iter, Some(2.5));
        assert_eq!(
            (rec.guest_bulk_pps, rec.guest_single_pps),
            (Some(1000.0), Some(900.0))
        );
        assert_eq!(rec.guest_note, None);
        assert_eq!(guest_append("single"), "pool=release refill=single");
    }
}
