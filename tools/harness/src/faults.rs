//! `cargo xtask faults`: the fault image (`cargo xtask build --fault-inject`, cargo feature
//! `fault-inject`, `mm::fault`) forwarding real frames while faults are injected at set rates,
//! then checked.
//!
//! For each mode ([`FaultConfig::modes`], default io, l2, router) one guest boots with
//! `fault=` ([`FaultConfig::rates`]: once every N opportunities of each kind, from `ready`
//! on) and the generator sends [`FaultConfig::frames`] frames in all, half each way, with a
//! window that lost frames do not hold ([`GenConfig::skip_lost`]). When about a third of them
//! were forwarded, the console's `fault dry MS` starves every page_pool for
//! [`FaultConfig::dry_ms`]: every RX ring runs empty and the device drops what comes. Then
//! `fault off`, a clean phase of [`CLEAN_FRAMES`] frames each way, and `quit`. The checks,
//! each named in a failure:
//!
//! - **every fault fired**: each kind with a rate was injected at least once (else its
//!   injection point was never reached and the run proves nothing about it);
//! - **every fault counted**: what handled a fault counted it: `ports[].bad_token` equals the
//!   RX and TX bad ids injected, `ports[].drops.bad_desc` the bad lengths, `drops.tx_ring_full`
//!   is at least the TX-ring-full faults, `pools[].refill_failed` equals the failed DMA
//!   mappings, `pools[].alloc_empty` is at least the empty bulk allocations, one starvation
//!   window of at least `dry_ms`;
//! - **frames intact**: no frame the generator got back failed validation (a fault never
//!   corrupts a frame that is forwarded), no generator warning;
//! - **forwarding resumes by itself**: every frame of the faulted phase was sent (the window
//!   never stalled for good), the longest gap without a frame coming back is under
//!   `dry_ms` + [`RESUME_SLACK_MS`], and the clean phase loses nothing;
//! - **every frame counted**: the frames lost equal the guest's drop counters plus the RX
//!   elements given a bad id (the device's frame behind one is never seen);
//! - **no page lost**: `quit` is clean, the guest printed `gannet: shutdown clean`, and the
//!   final `STATS` has no page_pool page in flight and free pages equal to boot's (the pages of
//!   RX and TX slots whose used element got a bad id are reclaimed from the rings at `quit`).

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::append::gannet_append;
use crate::bench_sim::SimMode;
use crate::gen::{GenConfig, GenReport, Generator};
use crate::qemu::{Guest, GuestConfig, Stats};
use crate::soak::{quit_checked, STATS_TIMEOUT};

/// Default rates, `(kind, N)`: once every N opportunities (RX or TX used elements, frames to
/// send, bulk allocations, page mappings, TX reclaims). Chosen so that 10^6 frames meet every
/// kind several times while the lost RX and TX slots (one per bad id, until `quit`) stay a
/// small part of the 256-entry rings even over 10^7 frames: a bad id per 200,000 elements is
/// ~50 slots over 10^7 frames and 4 ports' worth of rings.
pub const DEFAULT_RATES: &[(&str, u64)] = &[
    ("rx_bad_id", 200_000),
    ("rx_bad_len", 20_000),
    ("tx_bad_id", 200_000),
    ("tx_ring_full", 20_000),
    ("bulk_short", 4),
    ("bulk_zero", 8),
    ("dma_map", 64),
    ("recycle_full", 1000),
];
/// Default frames per mode, both directions together (CI's figure; the benchmarks journal has 10^7).
pub const DEFAULT_FRAMES: u64 = 1_000_000;
/// Default starvation window, ms.
pub const DEFAULT_DRY_MS: u64 = 1000;
/// Frames per direction of the clean phase after `fault off`: none may be lost.
pub const CLEAN_FRAMES: u64 = 10_000;
/// Slack over the starvation window for the longest gap between frames coming back, ms:
/// the RX rings are refilled within 10 ms of the window's end, but under TCG on a shared
/// 2-core host the guest can lose the CPU for a while.
pub const RESUME_SLACK_MS: f64 = 3000.0;
/// How long the faulted phase may take per 10^6 frames before it counts as stalled.
pub const PHASE_TIMEOUT_PER_MILLION: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// The guest (its `image` must be the fault image; `append` is the user's command line:
    /// `mode=` is replaced per mode, router mode gets `ip0=`/`ip1=` unless given, and `fault=`
    /// is added from `rates`). The socket directory is made per mode; `nics` is 2.
    pub guest: GuestConfig,
    /// Modes, in order.
    pub modes: Vec<SimMode>,
    /// Frames per mode, both directions together.
    pub frames: u64,
    /// Starvation window, ms (0: none).
    pub dry_ms: u64,
    /// `(kind, N)` pairs for `fault=`.
    pub rates: Vec<(String, u64)>,
    /// Generator window per direction.
    pub window: u64,
}

impl FaultConfig {
    /// `frames` per mode with the default rates, window and starvation window.
    pub fn new(guest: GuestConfig, modes: Vec<SimMode>, frames: u64) -> FaultConfig {
        FaultConfig {
            guest,
            modes,
            frames,
            dry_ms: DEFAULT_DRY_MS,
            rates: DEFAULT_RATES
                .iter()
                .map(|&(k, n)| (k.to_string(), n))
                .collect(),
            window: GenConfig::default().window,
        }
    }

    /// The `fault=` key.
    pub fn fault_key(&self) -> String {
        let v: Vec<String> = self.rates.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        format!("fault={}", v.join(","))
    }
}

/// One mode's run: figures and verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FaultResult {
    /// Forwarding mode.
    pub mode: String,
    /// Accelerator that ran it.
    pub accel: String,
    /// The guest's command line.
    pub append: String,
    /// Faulted phase: frames sent and received (both directions), and seconds.
    pub sent: u64,
    /// See `sent`.
    pub received: u64,
    /// See `sent`.
    pub seconds: f64,
    /// Frames received per second in the faulted phase.
    pub pps: f64,
    /// Longest gap between two frames coming back (either direction), ms.
    pub longest_gap_ms: f64,
    /// Frames that failed the generator's validation (faulted and clean phases).
    pub bad: u64,
    /// Clean phase: sent and received.
    pub clean_sent: u64,
    /// See `clean_sent`.
    pub clean_received: u64,
    /// Faults injected, by kind (the final `STATS`' `faults`).
    pub injected: BTreeMap<String, u64>,
    /// What handled them, from the final `STATS` (summed over ports or pools).
    pub handled: BTreeMap<String, u64>,
    /// Free pages at boot and after `quit`.
    pub free_pages_boot: u64,
    /// See `free_pages_boot`.
    pub free_pages_quit: Option<u64>,
    /// `quit` clean, leak check passed.
    pub quit_clean: bool,
    /// Failed checks.
    pub failures: Vec<String>,
    /// "PASS" or "FAIL".
    pub verdict: String,
}

impl FaultResult {
    /// Every check held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// One line per mode.
pub fn summary_line(r: &FaultResult) -> String {
    let inj: Vec<String> = r.injected.iter().map(|(k, n)| format!("{k}={n}")).collect();
    format!(
        "faults: mode {} ({}): {} — sent {} received {} ({:.0} pps), longest gap {:.0} ms, clean phase {}/{}, injected {}, free pages {} → {}{}",
        r.mode,
        r.accel,
        r.verdict,
        r.sent,
        r.received,
        r.pps,
        r.longest_gap_ms,
        r.clean_received,
        r.clean_sent,
        inj.join(" "),
        r.free_pages_boot,
        r.free_pages_quit.map_or("?".to_string(), |n| n.to_string()),
        if r.failures.is_empty() {
            String::new()
        } else {
            format!("\n  {}", r.failures.join("\n  "))
        }
    )
}

/// A Markdown table of `rs` (docs/benchmarks-journal.md).
pub fn markdown(rs: &[FaultResult]) -> String {
    let mut s = String::from(
        "| mode | accel | frames sent | received | pps | longest gap ms | clean phase | injected | handled | free pages boot → quit | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rs {
        let kv = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        s += &format!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {}/{} | {} | {} | {} → {} | {} |\n",
            r.mode,
            r.accel,
            r.sent,
            r.received,
            r.pps,
            r.longest_gap_ms,
            r.clean_received,
            r.clean_sent,
            kv(&r.injected),
            kv(&r.handled),
            r.free_pages_boot,
            r.free_pages_quit.map_or("?".to_string(), |n| n.to_string()),
            r.verdict
        );
    }
    s
}

/// Runs every mode in turn; `log` gets progress lines. An error means a mode could not run at
/// all (the guest did not boot, say); failed checks are in the results.
pub fn run(cfg: &FaultConfig, mut log: impl FnMut(&str)) -> Result<Vec<FaultResult>> {
    anyhow::ensure!(!cfg.modes.is_empty(), "--modes: give at least one mode");
    anyhow::ensure!(cfg.frames >= 2, "--frames: at least 2");
    let mut out = Vec::new();
    let progress = crate::progress::Progress::new("faults", cfg.modes.len() as u64);
    for &mode in &cfg.modes {
        progress.phase(format!("mode {}", mode.as_str()));
        let r = run_mode(cfg, mode, &mut log)
            .with_context(|| format!("fault run, mode {}", mode.as_str()))?;
        progress.inc(1);
        log(&summary_line(&r));
        out.push(r);
    }
    Ok(out)
}

/// One mode; see the module documentation.
pub fn run_mode(
    cfg: &FaultConfig,
    mode: SimMode,
    log: &mut dyn FnMut(&str),
) -> Result<FaultResult> {
    let tmp = tempfile::Builder::new()
        .prefix("gannet-faults-")
        .tempdir_in("/tmp")
        .context("creating the socket directory")?;
    let mut gcfg = cfg.guest.clone();
    gcfg.append = format!(
        "{} {}",
        gannet_append(&cfg.guest.append, mode.as_str()),
        cfg.fault_key()
    );
    gcfg.dgram_dir = tmp.path().to_path_buf();
    gcfg.nics = 2;
    let per_dir = cfg.frames / 2;
    let mut gen = Generator::bind(&GenConfig {
        dir: tmp.path().to_path_buf(),
        count: Some(per_dir),
        window: cfg.window,
        bidir: true,
        skip_lost: true,
        loss_timeout: Duration::from_millis(100),
        expect_ttl: (mode == SimMode::Router).then_some(63),
        ..GenConfig::default()
    })?;
    let mut guest = Guest::boot(&gcfg)?;
    guest.wait_ready(crate::qemu::READY_TIMEOUT)?;
    log(&format!(
        "faults: mode {} ({}): ready; {} frames each way, starving the pools for {} ms after a third",
        mode.as_str(),
        gcfg.append,
        per_dir,
        cfg.dry_ms
    ));
    let mut r = FaultResult {
        mode: mode.as_str().to_string(),
        accel: guest.accel().name().to_string(),
        append: gcfg.append.clone(),
        sent: 0,
        received: 0,
        seconds: 0.0,
        pps: 0.0,
        longest_gap_ms: 0.0,
        bad: 0,
        clean_sent: 0,
        clean_received: 0,
        injected: BTreeMap::new(),
        handled: BTreeMap::new(),
        free_pages_boot: 0,
        free_pages_quit: None,
        quit_clean: false,
        failures: Vec::new(),
        verdict: String::new(),
    };
    let faulted = faulted_phase(cfg, &guest, &gen, &mut r, log)?;
    r.sent = faulted.sent;
    r.received = faulted.received;
    r.seconds = faulted.seconds;
    r.pps = faulted.received_pps;
    r.longest_gap_ms = faulted.longest_gap_ms;
    r.bad = faulted.bad;
    check_traffic(&faulted, per_dir, cfg, &mut r);
    // Stop injecting; then nothing may be lost.
    let from = guest.line_count();
    guest.send_line("fault off")?;
    guest
        .wait_for_line_from(from, |l| l.contains("fault: off"), STATS_TIMEOUT)
        .context("waiting for `fault: off`")?;
    gen.set_count(CLEAN_FRAMES);
    let clean = gen.run()?;
    r.clean_sent = clean.sent;
    r.clean_received = clean.received;
    r.bad += clean.bad;
    if clean.sent != 2 * CLEAN_FRAMES || clean.received != clean.sent {
        r.failures.push(format!(
            "forwarding resumes: the clean phase after `fault off` got {} of {} frames back (sent {})",
            clean.received,
            2 * CLEAN_FRAMES,
            clean.sent
        ));
    }
    if clean.bad > 0 {
        r.failures.push(format!(
            "frames intact: {} frames of the clean phase failed validation",
            clean.bad
        ));
    }
    quit(&mut guest, cfg, &mut r);
    r.verdict = if r.passed() { "PASS" } else { "FAIL" }.to_string();
    drop(guest);
    drop(gen);
    drop(tmp);
    Ok(r)
}

/// The generator on another thread; on this one, `STATS` every half second until a third of
/// the frames were forwarded, then `fault dry MS`.
fn faulted_phase(
    cfg: &FaultConfig,
    guest: &Guest,
    gen: &Generator,
    r: &mut FaultResult,
    log: &mut dyn FnMut(&str),
) -> Result<GenReport> {
    thread::scope(|s| {
        let h = s.spawn(|| gen.run());
        let start = Instant::now();
        let mut dried = cfg.dry_ms == 0;
        while !h.is_finished() {
            thread::sleep(Duration::from_millis(500));
            if dried || h.is_finished() {
                continue;
            }
            match guest.stats(STATS_TIMEOUT) {
                Ok(st) if st.forwarded >= cfg.frames / 3 => {
                    let _ = guest.send_line(&format!("fault dry {}", cfg.dry_ms));
                    log(&format!(
                        "faults: mode {} t={:.1}s: forwarded {}: every page_pool dry for {} ms",
                        r.mode,
                        start.elapsed().as_secs_f64(),
                        st.forwarded,
                        cfg.dry_ms
                    ));
                    dried = true;
                }
                Ok(_) => {}
                Err(e) => {
                    r.failures
                        .push(format!("forwarding resumes: no STATS answer: {e:#}"));
                    dried = true;
                }
            }
        }
        if !dried {
            r.failures.push(
                "every fault fired: the traffic ended before the starvation window started"
                    .to_string(),
            );
        }
        h.join().expect("generator thread panicked")
    })
}

fn check_traffic(g: &GenReport, per_dir: u64, cfg: &FaultConfig, r: &mut FaultResult) {
    if g.sent != 2 * per_dir {
        r.failures.push(format!(
            "forwarding resumes: the generator sent {} of {} frames",
            g.sent,
            2 * per_dir
        ));
    }
    if g.received == 0 {
        r.failures
            .push("forwarding resumes: no frame came back".to_string());
    }
    let limit = cfg.dry_ms as f64 + RESUME_SLACK_MS;
    if g.longest_gap_ms > limit {
        r.failures.push(format!(
            "forwarding resumes: longest gap between frames coming back {:.0} ms, over {limit:.0} ms",
            g.longest_gap_ms
        ));
    }
    if g.bad > 0 {
        r.failures.push(format!(
            "frames intact: {} frames of the faulted phase failed validation",
            g.bad
        ));
    }
    for w in &g.warnings {
        r.failures.push(format!("frames intact: generator: {w}"));
    }
}

/// The handled-fault counters of the final `STATS`, summed over ports or pools.
pub fn handled(s: &Stats) -> BTreeMap<String, u64> {
    let ports = |f: fn(&netstack::stats::PortStats) -> u64| s.ports.iter().map(f).sum::<u64>();
    let pools = |f: fn(&netstack::stats::PoolStats) -> u64| s.pools.iter().map(f).sum::<u64>();
    BTreeMap::from([
        ("bad_token".to_string(), ports(|p| p.bad_token)),
        ("bad_desc".to_string(), ports(|p| p.drops.bad_desc)),
        ("tx_ring_full".to_string(), ports(|p| p.drops.tx_ring_full)),
        ("no_buffer".to_string(), ports(|p| p.no_buffer)),
        (
            "refill_failed".to_string(),
            pools(|p| p.counters.refill_failed),
        ),
        ("alloc_empty".to_string(), pools(|p| p.counters.alloc_empty)),
        ("released".to_string(), pools(|p| p.counters.released)),
    ])
}

/// The "every fault fired" and "every fault counted" checks of the final `STATS` `s`.
pub fn check_counts(s: &Stats, cfg: &FaultConfig) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut fails = Vec::new();
    let Some(f) = s.faults else {
        return (
            BTreeMap::new(),
            vec!["every fault counted: STATS has no `faults` key: not the fault image".into()],
        );
    };
    let injected = BTreeMap::from([
        ("rx_bad_id".to_string(), f.rx_bad_id),
        ("rx_bad_len".to_string(), f.rx_bad_len),
        ("tx_bad_id".to_string(), f.tx_bad_id),
        ("tx_ring_full".to_string(), f.tx_ring_full),
        ("bulk_short".to_string(), f.bulk_short),
        ("bulk_zero".to_string(), f.bulk_zero),
        ("dma_map".to_string(), f.dma_map),
        ("recycle_full".to_string(), f.recycle_full),
        ("pool_dry_ms".to_string(), f.pool_dry_ms),
    ]);
    for (kind, n) in &cfg.rates {
        if *n > 0 && injected.get(kind).copied().unwrap_or(0) == 0 {
            fails.push(format!(
                "every fault fired: `{kind}` (every {n}) was never injected"
            ));
        }
    }
    let h = handled(s);
    let mut need = |what: &str, ok: bool, detail: String| {
        if !ok {
            fails.push(format!("every fault counted: {what}: {detail}"));
        }
    };
    let ids = f.rx_bad_id + f.tx_bad_id;
    need(
        "bad ids",
        h["bad_token"] == ids,
        format!(
            "ports[].bad_token {} != rx_bad_id + tx_bad_id {ids}",
            h["bad_token"]
        ),
    );
    need(
        "bad lengths",
        h["bad_desc"] == f.rx_bad_len,
        format!(
            "drops.bad_desc {} != rx_bad_len {}",
            h["bad_desc"], f.rx_bad_len
        ),
    );
    need(
        "TX ring full",
        h["tx_ring_full"] >= f.tx_ring_full,
        format!(
            "drops.tx_ring_full {} < injected {}",
            h["tx_ring_full"], f.tx_ring_full
        ),
    );
    need(
        "DMA mappings",
        h["refill_failed"] == f.dma_map,
        format!(
            "pools[].refill_failed {} != dma_map {}",
            h["refill_failed"], f.dma_map
        ),
    );
    need(
        "empty bulk allocations",
        h["alloc_empty"] >= f.bulk_zero,
        format!(
            "pools[].alloc_empty {} < bulk_zero {}",
            h["alloc_empty"], f.bulk_zero
        ),
    );
    if cfg.dry_ms > 0 {
        need(
            "starvation",
            f.pool_dry_windows == 1 && f.pool_dry_ms >= cfg.dry_ms,
            format!(
                "{} windows, {} ms (asked: 1 of {} ms)",
                f.pool_dry_windows, f.pool_dry_ms, cfg.dry_ms
            ),
        );
    }
    (injected, fails)
}

/// `quit`: clean exit, the guest's own leak check, the final `STATS` counts and leak check.
fn quit(guest: &mut Guest, cfg: &FaultConfig, r: &mut FaultResult) {
    let (fin, fails) = quit_checked(guest);
    r.quit_clean = fails.is_empty();
    r.failures
        .extend(fails.into_iter().map(|f| format!("no page lost: {f}")));
    if let Some(fin) = fin {
        r.free_pages_boot = fin.free_pages_boot;
        r.free_pages_quit = Some(fin.free_pages_now);
        let (injected, fails) = check_counts(&fin, cfg);
        // Every frame lost lands in one counter: a guest drop, or an RX element whose id
        // was made bad (the device's frame is never seen).
        let drops = fin.drops();
        let counted: u64 = drops.values().sum::<u64>() + fin.faults.map_or(0, |f| f.rx_bad_id);
        let lost = (r.sent + r.clean_sent).saturating_sub(r.received + r.clean_received);
        // (dgram backend: QEMU holds frames back while an RX ring is empty, it drops none.)
        if cfg.guest.backend == crate::qemu::Backend::Dgram && lost != counted {
            r.failures.push(format!(
                "every frame counted: {lost} frames lost, {counted} counted (guest drops {drops:?} + rx_bad_id)"
            ));
        }
        r.injected = injected;
        r.handled = handled(&fin);
        r.failures.extend(fails);
    }
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct FaultJson<'a> {
    /// Frames per mode.
    pub frames: u64,
    /// Starvation window, ms.
    pub dry_ms: u64,
    /// The `fault=` key.
    pub fault: String,
    /// Per mode.
    pub modes: &'a [FaultResult],
}

#[cfg(test)]
mod tests {
    use super::*;
    use netstack::stats::{FaultStats, PoolStats, PortStats};

    fn cfg() -> FaultConfig {
        FaultConfig::new(GuestConfig::default(), vec![SimMode::L2], 1000)
    }

    fn stats(f: FaultStats, bad_token: u64, bad_desc: u64) -> Stats {
        let mut s = netstack::stats::Stats {
            faults: Some(f),
            ..Default::default()
        };
        s.ports
            .push(PortStats {
                bad_token,
                drops: netstack::stats::PortDrops {
                    bad_desc,
                    tx_ring_full: f.tx_ring_full,
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap();
        s.pools
            .push(PoolStats {
                counters: netstack::stats::PagePoolStats {
                    refill_failed: f.dma_map,
                    alloc_empty: f.bulk_zero,
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap();
        Stats(s)
    }

    fn all_fired() -> FaultStats {
        FaultStats {
            rx_bad_id: 3,
            rx_bad_len: 40,
            tx_bad_id: 2,
            tx_ring_full: 50,
            bulk_short: 9,
            bulk_zero: 4,
            dma_map: 30,
            recycle_full: 7,
            pool_dry_windows: 1,
            pool_dry_ms: 1003,
        }
    }

    #[test]
    fn counts_that_agree_pass_and_each_disagreement_is_named() {
        let (inj, fails) = check_counts(&stats(all_fired(), 5, 40), &cfg());
        assert!(fails.is_empty(), "{fails:?}");
        assert_eq!(inj["rx_bad_id"], 3);
        let (_, fails) = check_counts(&stats(all_fired(), 4, 40), &cfg());
        assert_eq!(fails.len(), 1);
        assert!(
            fails[0].contains("bad_token 4 != rx_bad_id + tx_bad_id 5"),
            "{fails:?}"
        );
        let (_, fails) = check_counts(&stats(all_fired(), 5, 41), &cfg());
        assert!(
            fails[0].contains("bad_desc 41 != rx_bad_len 40"),
            "{fails:?}"
        );
        let f = FaultStats {
            dma_map: 0,
            ..all_fired()
        };
        let (_, fails) = check_counts(&stats(f, 5, 40), &cfg());
        assert_eq!(fails.len(), 1);
        assert!(
            fails[0].contains("`dma_map` (every 64) was never injected"),
            "{fails:?}"
        );
        let f = FaultStats {
            pool_dry_ms: 20,
            ..all_fired()
        };
        let (_, fails) = check_counts(&stats(f, 5, 40), &cfg());
        assert!(fails[0].contains("starvation"), "{fails:?}");
        let (_, fails) = check_counts(&Stats(Default::default()), &cfg());
        assert!(fails[0].contains("not the fault image"), "{fails:?}");
    }

    #[test]
    fn the_fault_key_lists_every_rate() {
        let k = cfg().fault_key();
        assert!(
            k.starts_with("fault=rx_bad_id:200000,rx_bad_len:20000,"),
            "{k}"
        );
        assert_eq!(k.matches(':').count(), DEFAULT_RATES.len());
        // Every default kind is one the kernel knows.
        let c = netstack::Config::parse(&k).unwrap();
        assert_eq!(
            c.faults.iter().filter(|&&n| n > 0).count(),
            DEFAULT_RATES.len()
        );
    }
}
