//! The TLB shootdown torture test and benchmark (`tlbtest=N`, `unikernel/src/tlbtest.rs`): boot
//! the image with N batches on `cpus` vCPUs (no NIC), wait for it to exit, and read its
//! `TLBTEST` line. `cargo xtask bench tlb` runs `tlb=batch` and `tlb=immediate` side by side,
//! and the negative control (`tlbtest_skip=on`).

use crate::bench_sim::KvLine;
use crate::qemu::{Accel, Guest, GuestConfig, GuestExit};
use anyhow::{anyhow, Result};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// The prefix of the result line.
pub const LINE_PREFIX: &str = "TLBTEST ";

/// One run's figures (the `TLBTEST` line).
#[derive(Debug, Clone, Serialize)]
pub struct TlbRecord {
    /// `batch` or `immediate`.
    pub tlb: String,
    /// The negative control was on (targets acknowledged without flushing).
    pub skip: bool,
    /// vCPUs (1 initiator, the rest readers).
    pub cpus: u64,
    /// Batches run.
    pub batches: u64,
    /// Pages remapped (each one unmapped from every CPU's view).
    pub pages: u64,
    /// Reader samples taken.
    pub samples: u64,
    /// Samples that read a frame the shootdown should have made unreachable.
    pub stale: u64,
    /// Flush requests posted in targets' poll words (one per target per dispatch).
    pub requests: u64,
    /// TLB IPIs sent (halted targets, deadlines).
    pub ipis: u64,
    /// `requests` per 1000 remapped pages per target CPU.
    pub requests_per_1000_pages_per_target: f64,
    /// Pages flushed one `invlpg` each, on every CPU.
    pub invlpg: u64,
    /// Full flushes (CR3 reloads), on every CPU.
    pub full_flushes: u64,
    /// Batch time from the first remap to the last acknowledgement, p50 and p99 (ns, quarter
    /// powers of two).
    pub wait_p50_ns: u64,
    /// See `wait_p50_ns`.
    pub wait_p99_ns: u64,
    /// Wall-clock seconds of the whole boot-to-exit run.
    pub seconds: f64,
    /// The accelerator that ran it (in the JSON: the envelope's `accel`).
    #[serde(skip)]
    pub accel: Accel,
}

/// The negative control on one vCPU count: runs (`tlbtest_skip=on`) whose readers caught a
/// stale read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TlbControl {
    /// vCPUs.
    pub cpus: u32,
    /// Runs that caught at least one stale read.
    pub caught: u32,
    /// Runs.
    pub runs: u32,
}

/// `bench tlb --json`'s record (inside the envelope): the batch and immediate runs, then the
/// negative control per vCPU count.
#[derive(Debug, Clone, Serialize)]
pub struct TlbBenchJson<'a> {
    /// One record per (policy, vCPU count), and the first control run per count.
    pub runs: &'a [TlbRecord],
    /// The negative control per vCPU count.
    pub control: Vec<TlbControl>,
}

impl<'a> TlbBenchJson<'a> {
    /// The record of `runs` and the control counts `(cpus, caught, runs)`.
    pub fn new(runs: &'a [TlbRecord], control: &[(u32, u32, u32)]) -> Self {
        TlbBenchJson {
            runs,
            control: control
                .iter()
                .map(|&(cpus, caught, runs)| TlbControl { cpus, caught, runs })
                .collect(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct TlbRun {
    /// The kernel image.
    pub image: PathBuf,
    /// vCPUs (at least 2).
    pub cpus: u32,
    /// Batches (`tlbtest=`).
    pub batches: u64,
    /// `tlb=` value.
    pub tlb: &'static str,
    /// `tlbtest_skip=on`.
    pub skip: bool,
    /// More kernel command-line keys (e.g. `tlb_ceiling=8`).
    pub extra: String,
    /// How long the guest may run.
    pub timeout: Duration,
}

/// The record of a `TLBTEST` result line.
///
/// # Errors
/// The line lacks a field or a value does not parse.
pub fn parse_record(line: &str, accel: Accel, seconds: f64) -> Result<TlbRecord> {
    let kv = KvLine::parse(line, LINE_PREFIX).ok_or_else(|| anyhow!("not a TLBTEST line"))?;
    Ok(TlbRecord {
        tlb: kv.get("tlb")?.to_string(),
        skip: kv.get("skip")? == "on",
        cpus: kv.num("cpus")?,
        batches: kv.num("batches")?,
        pages: kv.num("pages")?,
        samples: kv.num("samples")?,
        stale: kv.num("stale")?,
        requests: kv.num("requests")?,
        ipis: kv.num("ipis")?,
        requests_per_1000_pages_per_target: kv.num("requests_per_1000_pages_per_target")?,
        invlpg: kv.num("invlpg")?,
        full_flushes: kv.num("full_flushes")?,
        wait_p50_ns: kv.num("wait_p50_ns")?,
        wait_p99_ns: kv.num("wait_p99_ns")?,
        seconds,
        accel,
    })
}

/// Boot `run`, wait for the exit, return the record, the exit status and the log.
///
/// # Errors
/// QEMU does not start, the guest does not exit within the timeout, or prints no result line.
pub fn run_one(run: &TlbRun) -> Result<(TlbRecord, GuestExit, Vec<String>)> {
    let mut append = format!("tlbtest={} tlb={}", run.batches, run.tlb);
    if run.skip {
        append.push_str(" tlbtest_skip=on");
    }
    if !run.extra.is_empty() {
        append.push(' ');
        append.push_str(&run.extra);
    }
    let cfg = GuestConfig {
        image: run.image.clone(),
        append,
        cpus: run.cpus,
        nics: 0,
        ..GuestConfig::default()
    };
    let t0 = std::time::Instant::now();
    let mut guest = Guest::boot(&cfg)?;
    let exit = guest.wait_exit(run.timeout)?;
    let seconds = t0.elapsed().as_secs_f64();
    let lines = guest.lines();
    let line = lines
        .iter()
        .find(|l| l.contains(LINE_PREFIX) && l.contains("batches="))
        .ok_or_else(|| anyhow!("no TLBTEST line ({exit})\n{}", guest.tail_report()))?;
    let r = parse_record(line, guest.accel(), seconds)?;
    Ok((r, exit, lines))
}

/// A Markdown table of `records`.
pub fn markdown(records: &[TlbRecord]) -> String {
    let mut s = String::from(
        "| tlb | skip | vCPUs | batches | pages | requests | IPIs | requests / 1000 pages / target | invlpg | full flushes | batch wait p50 / p99 (µs) | samples | stale | s | accel |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in records {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} | {:.1} / {:.1} | {} | {} | {:.1} | {} |\n",
            r.tlb,
            if r.skip { "on" } else { "off" },
            r.cpus,
            r.batches,
            r.pages,
            r.requests,
            r.ipis,
            r.requests_per_1000_pages_per_target,
            r.invlpg,
            r.full_flushes,
            r.wait_p50_ns as f64 / 1000.0,
            r.wait_p99_ns as f64 / 1000.0,
            r.samples,
            r.stale,
            r.seconds,
            r.accel.name(),
        ));
    }
    s
}
