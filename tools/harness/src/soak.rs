//! `cargo xtask soak`: every forwarding mode at full rate for a while, the guest's `STATS`
//! sampled every few seconds and checked, then a clean `quit`.
//!
//! Just past ~800 lines: one command's run loop and the checks it names, with their tests.
//!
//! For each mode ([`SoakConfig::modes`], default io, l2, router) one guest boots (router mode
//! with `ip0=10.0.0.1/24 ip1=10.0.1.1/24` unless `--append` gives them; the generator answers
//! its ARP requests for 10.0.0.2 and 10.0.1.2 and expects TTL 63), the generator offers traffic
//! in both directions at full rate (as fast as the window lets it: at most
//! [`SoakConfig::window`] frames outstanding per direction) for the mode's share of the time,
//! and every [`SoakConfig::stats_every`] the console's `stats` command is asked for one `STATS`
//! line. The checks, each named in a failure (`check: what`):
//!
//! - **no stall**: the generator's longest gap between two frames coming back
//!   ([`crate::gen::DirReport::longest_gap_ms`], either direction) stays under
//!   [`SoakConfig::max_gap_ms`], and the guest's `forwarded` grows between every two samples;
//! - **counters monotonic**: every number in a `STATS` sample except the gauges ([`GAUGES`]) is
//!   at least what it was in the sample before (and in the final `STATS` after `quit`); the
//!   strings (mode, MACs, refill modes) and the array lengths do not change: `forwarded`,
//!   `kicks`, `busy_cycles`, `busy_iters`, every `ports[]` `rx`/`tx`/bytes/kicks/`no_buffer`
//!   and `drops.*`, every `pools[]` counter, every `per_cpu[]` counter, `router.*` (drops
//!   included) and the FIB's counters;
//! - **free pages stable**: every sample's `free_pages_now` is within
//!   [`SoakConfig::free_pages_tolerance`] pages of the first sample's (taken after
//!   `stats_every` of traffic: the warm-up, with the RX rings, page_pool caches and pcp lists
//!   at their working size); the tolerance lets that working set move, not drift;
//! - **quit clean**: after the traffic (drained: the generator waits for stragglers) `quit`
//!   ends QEMU with the guest's clean status, the guest printed `gannet: shutdown clean` (its own
//!   leak check), and the final `STATS` has no page_pool page in flight and free pages (+ FIB
//!   pages) equal to boot's;
//! - **frames intact**: frames came back, and none failed the generator's validation (bad), and
//!   the generator did not give up on back-pressure.
//!
//! Frames lost (sent − received) are reported, not checked: under TCG a full-rate window can
//! overrun a TX ring (`drops.tx_ring_full`), which the counters show.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde::Serialize;

use crate::append::gannet_append;
use crate::bench_sim::SimMode;
use crate::gen::{GenConfig, GenReport, Generator};
use crate::qemu::{Backend, Guest, GuestConfig, Stats};
use crate::tap::TapNet;

/// Default interval between two `STATS` samples.
pub const DEFAULT_STATS_EVERY: Duration = Duration::from_secs(5);
/// Default stall threshold, ms: the longest gap between frames coming back that still passes.
/// Under TCG on a 2-core host shared with builds and other QEMUs the guest can lose the CPU
/// for a few hundred ms; a guest that stops forwarding shows gaps of seconds.
pub const DEFAULT_MAX_GAP_MS: f64 = 1000.0;
/// Default free-page tolerance, pages: how far a sample's `free_pages_now` may be from the
/// first sample's. The RX rings stay posted; what can move with traffic is, per port, a TX ring
/// of 256 frames in flight and a page_pool alloc cache of 128 pages (`PP_ALLOC_CACHE_SIZE`):
/// at most 2 × (256 + 128) = 768 pages; 1,024 pages (4 MiB) leaves margin (a 1-minute run
/// moves by 0). A leak of a page per thousand frames crosses it within seconds; the exact
/// check is at `quit`.
pub const DEFAULT_FREE_PAGES_TOLERANCE: u64 = 1024;
/// Time allowed for a `stats` answer under full-rate traffic.
pub const STATS_TIMEOUT: Duration = Duration::from_secs(20);
/// Time allowed for `quit` (drain, final STATS, leak check, exit).
pub const QUIT_TIMEOUT: Duration = Duration::from_secs(60);
/// The line the guest prints when its own leak check at `quit` passed.
pub const SHUTDOWN_CLEAN: &str = "gannet: shutdown clean";

/// `STATS` fields that are gauges (may go down), as paths with array indices written `[]`.
/// Every other number is a counter (or a constant) and must never decrease.
pub const GAUGES: &[&str] = &[
    "pcp_count",
    "free_pages_now",
    "pools[].in_flight",
    "pools[].cached",
    "per_cpu[].tlb.pending_pages",
    "router.queued_now",
    "fib.routes",
    "fib.pages",
    "fib.pages_retiring",
    "fib.last_build_ms",
    "fib.last_swap_us",
    "fib.routes_text_pages",
    "fib.build_steps",
];

/// What to soak.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The guest: image, accelerator, `-cpu`, memory, backend, queues, MTU, extra QEMU
    /// arguments (`-initrd ROUTES`), vCPUs, echo. Its `append` is the user's command line:
    /// `mode=` is replaced per mode (and router mode gets `ip0=`/`ip1=` unless given). Its
    /// socket directory and tap namespace are made per mode; `nics` is 2.
    pub guest: GuestConfig,
    /// Modes, in order.
    pub modes: Vec<SimMode>,
    /// Seconds of traffic per mode.
    pub seconds_per_mode: f64,
    /// Interval between two `STATS` samples.
    pub stats_every: Duration,
    /// Generator window (frames outstanding per direction).
    pub window: u64,
    /// Frame size on the wire, FCS included.
    pub size: usize,
    /// Stall threshold, ms.
    pub max_gap_ms: f64,
    /// Free-page tolerance, pages.
    pub free_pages_tolerance: u64,
}

impl SoakConfig {
    /// `minutes` in all over `modes` (an equal share each), every other setting its default.
    pub fn new(guest: GuestConfig, modes: Vec<SimMode>, minutes: f64) -> SoakConfig {
        let n = modes.len().max(1) as f64;
        SoakConfig {
            guest,
            modes,
            seconds_per_mode: minutes * 60.0 / n,
            stats_every: DEFAULT_STATS_EVERY,
            window: GenConfig::default().window,
            size: 64,
            max_gap_ms: DEFAULT_MAX_GAP_MS,
            free_pages_tolerance: DEFAULT_FREE_PAGES_TOLERANCE,
        }
    }
}

/// One mode's soak: the figures and the verdict.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModeResult {
    pub mode: String,
    /// "tcg" or "kvm".
    pub accel: String,
    /// The guest's kernel command line.
    pub append: String,
    /// Minutes of traffic asked for (this mode's share).
    pub minutes: f64,
    /// Measured sending time, s.
    pub seconds: f64,
    /// Frames sent, both directions.
    pub sent: u64,
    /// Distinct valid frames received, both directions.
    pub received: u64,
    /// `sent − received`.
    pub lost: u64,
    pub bad: u64,
    pub offered_pps: f64,
    /// Frames received per second.
    pub pps: f64,
    /// Longest gap between frames coming back, either direction, ms.
    pub longest_gap_ms: f64,
    /// The stall threshold it was checked against, ms.
    pub max_gap_ms: f64,
    /// `STATS` samples taken during the traffic.
    pub samples: usize,
    /// Numbers compared per pair of samples (counters and constants; gauges excluded).
    pub counters_checked: usize,
    /// `free_pages_boot` (when forwarding started).
    pub free_pages_boot: u64,
    /// `free_pages_now` of the first sample: the baseline.
    pub free_pages_first: Option<u64>,
    pub free_pages_min: Option<u64>,
    pub free_pages_max: Option<u64>,
    /// The tolerance around the first sample, pages.
    pub free_pages_tolerance: u64,
    /// `free_pages_now` of the final `STATS` after `quit`.
    pub free_pages_quit: Option<u64>,
    /// The guest's `forwarded` in the final `STATS`.
    pub forwarded: Option<u64>,
    /// The final `STATS`'s non-zero drop counters (`ports[i].drops.*` summed over the ports
    /// as `port.*`, `router.drops.*` as `router.*`): where the lost frames went.
    pub drops: std::collections::BTreeMap<String, u64>,
    /// True if `quit` ended cleanly (status, `gannet: shutdown clean`, no leak).
    pub quit_clean: bool,
    /// Every failed check, `check: what`.
    pub failures: Vec<String>,
    /// "PASS" or "FAIL".
    pub verdict: String,
}

impl ModeResult {
    /// True if every check passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// One line per mode, for the terminal.
pub fn summary_line(r: &ModeResult) -> String {
    let fp = match (r.free_pages_min, r.free_pages_max) {
        (Some(a), Some(b)) => format!("{a}..{b}"),
        _ => "n/a".into(),
    };
    format!(
        "soak: mode {} accel {} minutes {:.2}: sent {} received {} lost {} ({:.3}%), {:.0} pps, \
         longest gap {:.1} ms (limit {:.0}), {} STATS samples, free pages {fp} (first {}, \
         ±{}; quit {} of {} at boot), guest drops {}, quit {}: {}",
        r.mode,
        r.accel,
        r.minutes,
        r.sent,
        r.received,
        r.lost,
        if r.sent > 0 {
            r.lost as f64 * 100.0 / r.sent as f64
        } else {
            0.0
        },
        r.pps,
        r.longest_gap_ms,
        r.max_gap_ms,
        r.samples,
        r.free_pages_first
            .map_or("n/a".to_string(), |v| v.to_string()),
        r.free_pages_tolerance,
        r.free_pages_quit
            .map_or("n/a".to_string(), |v| v.to_string()),
        r.free_pages_boot,
        drops_text(r),
        if r.quit_clean { "clean" } else { "NOT clean" },
        r.verdict
    )
}

/// `reason N, …` or `none`.
fn drops_text(r: &ModeResult) -> String {
    if r.drops.is_empty() {
        return "none".into();
    }
    r.drops
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The results as a Markdown table (docs/benchmarks-journal.md).
pub fn markdown(rs: &[ModeResult]) -> String {
    let mut s = String::from(
        "| mode | accel | minutes | sent | received | lost | pps | longest gap ms | STATS samples | free pages min–max (boot) | guest drops | quit | verdict |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rs {
        let fp = match (r.free_pages_min, r.free_pages_max) {
            (Some(a), Some(b)) => format!("{a}–{b} ({})", r.free_pages_boot),
            _ => "n/a".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {} | {} | {} | {:.0} | {:.1} | {} | {fp} | {} | {} | {} |",
            r.mode,
            r.accel,
            r.minutes,
            r.sent,
            r.received,
            r.lost,
            r.pps,
            r.longest_gap_ms,
            r.samples,
            drops_text(r),
            if r.quit_clean { "clean" } else { "NOT clean" },
            r.verdict
        );
    }
    s
}

/// Compares two `STATS` samples: every number that is not a [`GAUGES`] entry must not have
/// decreased from `prev` to `next`, strings must be equal and arrays keep their length.
/// Returns how many numbers were compared and one message per regression.
pub fn regressions(prev: &Stats, next: &Stats) -> (usize, Vec<String>) {
    let a = serde_json::to_value(&prev.0).expect("Stats serialises");
    let b = serde_json::to_value(&next.0).expect("Stats serialises");
    let mut out = Vec::new();
    let mut checked = 0;
    walk(&a, &b, "", "", &mut checked, &mut out);
    (checked, out)
}

fn walk(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: &str,
    pattern: &str,
    checked: &mut usize,
    out: &mut Vec<String>,
) {
    use serde_json::Value as V;
    let name = if path.is_empty() { "STATS" } else { path };
    match (a, b) {
        (V::Object(x), V::Object(y)) => {
            for (k, va) in x {
                let (p, q) = if path.is_empty() {
                    (k.clone(), k.clone())
                } else {
                    (format!("{path}.{k}"), format!("{pattern}.{k}"))
                };
                match y.get(k) {
                    Some(vb) => walk(va, vb, &p, &q, checked, out),
                    None => out.push(format!("{p} disappeared")),
                }
            }
        }
        (V::Array(x), V::Array(y)) => {
            if x.len() != y.len() {
                out.push(format!("{name} has {} entries, had {}", y.len(), x.len()));
            }
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                walk(
                    va,
                    vb,
                    &format!("{path}[{i}]"),
                    &format!("{pattern}[]"),
                    checked,
                    out,
                );
            }
        }
        (V::Number(x), V::Number(y)) => {
            if GAUGES.contains(&pattern) {
                return;
            }
            *checked += 1;
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                if y < x {
                    out.push(format!("{name} went down from {x} to {y}"));
                }
            }
        }
        (x, y) if x == y => {}
        (x, y) => out.push(format!("{name} changed from {x} to {y}")),
    }
}

/// The final `STATS` leak check: no page_pool page in flight, and free pages (+ FIB pages)
/// equal to boot's. `None` if it holds, else what differs.
pub fn leak(s: &Stats) -> Option<String> {
    let in_flight: Vec<String> = s
        .pools
        .iter()
        .filter(|p| p.in_flight != 0)
        .map(|p| format!("pool {} has {} pages in flight", p.id, p.in_flight))
        .collect();
    if !in_flight.is_empty() {
        return Some(in_flight.join(", "));
    }
    let (fib_now, fib_boot) = s.fib.map_or((0, 0), |f| {
        (
            f.pages + f.pages_retiring + f.routes_text_pages,
            f.pages_boot,
        )
    });
    (s.free_pages_now + fib_now != s.free_pages_boot + fib_boot).then(|| {
        format!(
            "{} free pages + {fib_now} FIB pages after quit, {} + {fib_boot} at boot",
            s.free_pages_now, s.free_pages_boot
        )
    })
}

/// Soaks every mode in turn; `log` gets progress lines. An error means a mode could not run
/// at all (the guest did not boot, say); failed checks are in the results.
pub fn run(cfg: &SoakConfig, mut log: impl FnMut(&str)) -> Result<Vec<ModeResult>> {
    ensure!(!cfg.modes.is_empty(), "--modes: give at least one mode");
    ensure!(cfg.seconds_per_mode > 0.0, "--minutes must be positive");
    ensure!(!cfg.stats_every.is_zero(), "--stats-every must be positive");
    let mut out = Vec::new();
    let progress = crate::progress::Progress::new("soak", cfg.modes.len() as u64);
    for &mode in &cfg.modes {
        progress.phase(format!("mode {}", mode.as_str()));
        let r = run_mode(cfg, mode, &mut log)
            .with_context(|| format!("soak, mode {}", mode.as_str()))?;
        progress.inc(1);
        log(&summary_line(&r));
        out.push(r);
    }
    Ok(out)
}

/// Soaks one mode: boot, traffic with periodic `STATS`, quit; see the module documentation.
pub fn run_mode(cfg: &SoakConfig, mode: SimMode, log: &mut dyn FnMut(&str)) -> Result<ModeResult> {
    let tmp = tempfile::Builder::new()
        .prefix("gannet-soak-")
        .tempdir_in("/tmp")
        .context("creating the socket directory")?;
    let mut gcfg = cfg.guest.clone();
    gcfg.append = gannet_append(&cfg.guest.append, mode.as_str());
    gcfg.dgram_dir = tmp.path().to_path_buf();
    gcfg.nics = 2;
    let net = if gcfg.backend == Backend::Tap {
        let n = TapNet::create_with_mtu(2, gcfg.queues, gcfg.mtu.as_ref())
            .context("setting up the tap backend")?;
        gcfg.netns = Some(n.path());
        Some(n)
    } else {
        None
    };
    let gen = Generator::bind(&GenConfig {
        dir: tmp.path().to_path_buf(),
        netns: gcfg.netns.clone(),
        size: cfg.size,
        seconds: cfg.seconds_per_mode,
        window: cfg.window,
        bidir: true,
        // The tun driver steers frames onto queues by flow hash.
        flows: if net.is_some() { 16 } else { 1 },
        // One routed hop: the generator sends with TTL 64.
        expect_ttl: (mode == SimMode::Router).then_some(63),
        ..GenConfig::default()
    })?;
    let mut guest = Guest::boot(&gcfg)?;
    guest.wait_ready(crate::qemu::READY_TIMEOUT)?;
    log(&format!(
        "soak: mode {} ({}): ready; {:.0} s of traffic both ways, window {}, STATS every {:?}",
        mode.as_str(),
        gcfg.append,
        cfg.seconds_per_mode,
        cfg.window,
        cfg.stats_every
    ));
    let mut r = ModeResult {
        mode: mode.as_str().to_string(),
        accel: guest.accel().name().to_string(),
        append: gcfg.append.clone(),
        minutes: cfg.seconds_per_mode / 60.0,
        seconds: 0.0,
        sent: 0,
        received: 0,
        lost: 0,
        bad: 0,
        offered_pps: 0.0,
        pps: 0.0,
        longest_gap_ms: 0.0,
        max_gap_ms: cfg.max_gap_ms,
        samples: 0,
        counters_checked: 0,
        free_pages_boot: 0,
        free_pages_first: None,
        free_pages_min: None,
        free_pages_max: None,
        free_pages_tolerance: cfg.free_pages_tolerance,
        free_pages_quit: None,
        forwarded: None,
        drops: Default::default(),
        quit_clean: false,
        failures: Vec::new(),
        verdict: String::new(),
    };
    let (report, last) = traffic(cfg, &guest, &gen, &mut r, log);
    let report = report?;
    record_traffic(&mut r, &report, cfg);
    quit(&mut guest, last.as_ref(), &mut r);
    r.verdict = if r.passed() { "PASS" } else { "FAIL" }.to_string();
    drop(guest);
    drop(gen);
    drop(net);
    drop(tmp);
    Ok(r)
}

/// Runs the generator on another thread and samples `STATS` on this one (the guest stays on
/// the thread that booted it). Returns the generator's report and the last sample.
fn traffic(
    cfg: &SoakConfig,
    guest: &Guest,
    gen: &Generator,
    r: &mut ModeResult,
    log: &mut dyn FnMut(&str),
) -> (Result<GenReport>, Option<Stats>) {
    let mut last: Option<Stats> = None;
    let report = thread::scope(|s| {
        let start = Instant::now();
        let h = s.spawn(|| gen.run());
        let mut k = 1u32;
        loop {
            let at = cfg.stats_every * k;
            if at.as_secs_f64() >= cfg.seconds_per_mode {
                break;
            }
            let due = start + at;
            while Instant::now() < due && !h.is_finished() {
                thread::sleep((due - Instant::now()).min(Duration::from_millis(100)));
            }
            if h.is_finished() {
                break;
            }
            let st = match guest.stats(STATS_TIMEOUT) {
                Ok(st) => st,
                Err(e) => {
                    r.failures.push(format!("no stall: no STATS answer: {e:#}"));
                    break;
                }
            };
            sample(&st, last.as_ref(), r, cfg);
            log(&format!(
                "soak: mode {} t={:.0}s: forwarded {} free pages {} (pcp {}, in flight {})",
                r.mode,
                start.elapsed().as_secs_f64(),
                st.forwarded,
                st.free_pages_now,
                st.pcp_count,
                st.pools.iter().map(|p| p.in_flight).sum::<u64>()
            ));
            last = Some(st);
            k += 1;
        }
        h.join().expect("generator thread panicked")
    });
    (report, last)
}

/// Checks one sample against the one before (or, for the first, takes it as the baseline).
fn sample(st: &Stats, prev: Option<&Stats>, r: &mut ModeResult, cfg: &SoakConfig) {
    r.samples += 1;
    r.free_pages_boot = st.free_pages_boot;
    let now = st.free_pages_now;
    let first = *r.free_pages_first.get_or_insert(now);
    r.free_pages_min = Some(r.free_pages_min.map_or(now, |m| m.min(now)));
    r.free_pages_max = Some(r.free_pages_max.map_or(now, |m| m.max(now)));
    if now.abs_diff(first) > cfg.free_pages_tolerance {
        r.failures.push(format!(
            "free pages stable: sample {} has {now} free pages, the first had {first} (tolerance \
             ±{})",
            r.samples, cfg.free_pages_tolerance
        ));
    }
    match prev {
        Some(p) => {
            let (n, bad) = regressions(p, st);
            r.counters_checked = n;
            r.failures.extend(bad.into_iter().map(|b| {
                format!(
                    "counters monotonic: between samples {} and {}: {b}",
                    r.samples - 1,
                    r.samples
                )
            }));
            if st.forwarded <= p.forwarded {
                r.failures.push(format!(
                    "no stall: forwarded did not grow between samples {} and {} ({} then {})",
                    r.samples - 1,
                    r.samples,
                    p.forwarded,
                    st.forwarded
                ));
            }
        }
        None if st.forwarded == 0 => r
            .failures
            .push("no stall: nothing forwarded by the first sample".into()),
        None => {}
    }
}

fn record_traffic(r: &mut ModeResult, g: &GenReport, cfg: &SoakConfig) {
    r.seconds = g.seconds;
    r.sent = g.sent;
    r.received = g.received;
    r.lost = g.sent.saturating_sub(g.received);
    r.bad = g.bad;
    r.offered_pps = g.offered_pps;
    r.pps = g.received_pps;
    r.longest_gap_ms = g.longest_gap_ms;
    if g.longest_gap_ms > cfg.max_gap_ms {
        let per_dir: Vec<String> = g
            .directions
            .iter()
            .map(|d| {
                format!(
                    "port{}->port{} {:.1} ms",
                    d.base + d.dir,
                    d.base + 1 - d.dir,
                    d.longest_gap_ms
                )
            })
            .collect();
        r.failures.push(format!(
            "no stall: longest gap between frames coming back {:.1} ms, over {:.0} ms ({})",
            g.longest_gap_ms,
            cfg.max_gap_ms,
            per_dir.join(", ")
        ));
    }
    if g.received == 0 {
        r.failures
            .push("frames intact: no frame came back".to_string());
    }
    if g.bad > 0 {
        r.failures
            .push(format!("frames intact: {} frames failed validation", g.bad));
    }
    for w in &g.warnings {
        r.failures.push(format!("frames intact: generator: {w}"));
    }
    // The generator stops early only on back-pressure (a warning above); say so plainly too.
    if g.seconds < cfg.seconds_per_mode * 0.9 {
        r.failures.push(format!(
            "no stall: the generator sent for {:.1} s of {:.1}",
            g.seconds, cfg.seconds_per_mode
        ));
    }
}

/// `quit`: clean exit, the guest's own leak check, the final STATS against the last sample.
/// `quit` and the checks every long run makes of it: QEMU's clean exit status, the guest's
/// `gannet: shutdown clean` line (its own leak check), a final `STATS` line and [`leak`] of it.
/// Returns that `STATS` (if the guest printed one) and the checks that failed, unprefixed;
/// none failed exactly when the list is empty.
pub fn quit_checked(guest: &mut Guest) -> (Option<Stats>, Vec<String>) {
    let from = guest.line_count();
    let (fin, exit) = match guest.quit(QUIT_TIMEOUT) {
        Ok(x) => x,
        Err(e) => return (None, vec![format!("{e:#}")]),
    };
    let mut fails = Vec::new();
    if !exit.is_clean() {
        fails.push(format!("{exit}\n{}", guest.tail_report()));
    }
    let lines = guest.lines();
    let skip = lines.len().saturating_sub(guest.line_count() - from);
    if !lines[skip..].iter().any(|l| l.contains(SHUTDOWN_CLEAN)) {
        fails.push(format!("no `{SHUTDOWN_CLEAN}` line after quit"));
    }
    match &fin {
        Some(s) => fails.extend(leak(s)),
        None => fails.push("no final STATS line after quit".to_string()),
    }
    (fin, fails)
}

fn quit(guest: &mut Guest, last: Option<&Stats>, r: &mut ModeResult) {
    let (fin, fails) = quit_checked(guest);
    r.quit_clean = fails.is_empty();
    r.failures
        .extend(fails.into_iter().map(|f| format!("quit clean: {f}")));
    if let Some(fin) = fin {
        r.free_pages_quit = Some(fin.free_pages_now);
        r.free_pages_boot = fin.free_pages_boot;
        r.forwarded = Some(fin.forwarded);
        r.drops = fin.drops();
        if let Some(p) = last {
            let (_, bad) = regressions(p, &fin);
            r.failures.extend(
                bad.into_iter()
                    .map(|b| format!("counters monotonic: last sample to quit: {b}")),
            );
        }
    }
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct SoakJson<'a> {
    pub minutes: f64,
    pub stats_every_s: f64,
    pub window: u64,
    pub size: usize,
    pub image: PathBuf,
    pub modes: &'a [ModeResult],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> Stats {
        let mut s = netstack::stats::Stats {
            forwarded: 100,
            free_pages_now: 5000,
            free_pages_boot: 5100,
            ..Default::default()
        };
        s.ports
            .push(netstack::stats::PortStats {
                rx: 50,
                tx: 50,
                ..Default::default()
            })
            .unwrap();
        s.pools
            .push(netstack::stats::PoolStats {
                in_flight: 300,
                cached: 10,
                ..Default::default()
            })
            .unwrap();
        Stats(s)
    }

    #[test]
    fn counters_must_not_go_down_gauges_may() {
        let a = stats();
        let mut b = a.clone();
        b.0.forwarded = 200;
        b.0.free_pages_now = 4000;
        b.0.pools[0].in_flight = 10;
        b.0.pools[0].cached = 0;
        let (n, bad) = regressions(&a, &b);
        assert!(bad.is_empty(), "{bad:?}");
        assert!(n > 20, "{n} numbers compared");
        b.0.ports[0].drops.tx_ring_full = 0;
        b.0.ports[0].tx = 49;
        b.0.free_pages_boot = 5099;
        let (_, bad) = regressions(&a, &b);
        assert_eq!(
            bad,
            [
                "free_pages_boot went down from 5100 to 5099",
                "ports[0].tx went down from 50 to 49"
            ]
        );
        let mut c = a.clone();
        c.0.mode = netstack::config::Mode::Router;
        c.0.ports.pop();
        let (_, bad) = regressions(&a, &c);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].starts_with("mode changed"), "{bad:?}");
        assert_eq!(bad[1], "ports has 0 entries, had 1");
    }

    #[test]
    fn gauges_name_real_fields() {
        // Every GAUGES path must exist in a full STATS value (router mode, one of each entry).
        let mut s = stats();
        s.0.router = Some(Default::default());
        s.0.fib = Some(Default::default());
        s.0.per_cpu.push(Default::default()).unwrap();
        let v = serde_json::to_value(&s.0).unwrap();
        for g in GAUGES {
            let mut cur = &v;
            for part in g.split('.') {
                let (key, arr) = match part.strip_suffix("[]") {
                    Some(k) => (k, true),
                    None => (part, false),
                };
                cur = &cur[key];
                if arr {
                    cur = &cur[0];
                }
            }
            assert!(cur.is_number(), "gauge {g} is not a STATS number");
        }
    }

    #[test]
    fn the_leak_check_wants_boot_and_no_pages_in_flight() {
        let mut s = stats();
        assert!(leak(&s).unwrap().contains("pool 0 has 300 pages in flight"));
        s.0.pools[0].in_flight = 0;
        assert!(leak(&s).unwrap().contains("5000 free pages"));
        s.0.free_pages_now = 5100;
        assert_eq!(leak(&s), None);
    }

    #[test]
    fn samples_check_free_pages_and_progress() {
        let cfg = SoakConfig::new(GuestConfig::default(), vec![SimMode::L2], 1.0);
        assert_eq!(cfg.seconds_per_mode, 60.0);
        let mut r = ModeResult {
            mode: "l2".into(),
            accel: "tcg".into(),
            append: String::new(),
            minutes: 1.0,
            seconds: 0.0,
            sent: 0,
            received: 0,
            lost: 0,
            bad: 0,
            offered_pps: 0.0,
            pps: 0.0,
            longest_gap_ms: 0.0,
            max_gap_ms: 1000.0,
            samples: 0,
            counters_checked: 0,
            free_pages_boot: 0,
            free_pages_first: None,
            free_pages_min: None,
            free_pages_max: None,
            free_pages_tolerance: 1024,
            free_pages_quit: None,
            forwarded: None,
            drops: Default::default(),
            quit_clean: false,
            failures: Vec::new(),
            verdict: String::new(),
        };
        let a = stats();
        sample(&a, None, &mut r, &cfg);
        let mut b = a.clone();
        b.0.forwarded = 300;
        b.0.free_pages_now = 5000 - 1024;
        sample(&b, Some(&a), &mut r, &cfg);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        let mut c = b.clone();
        c.0.free_pages_now = 5000 - 1025;
        sample(&c, Some(&b), &mut r, &cfg);
        assert_eq!(r.failures.len(), 2, "{:?}", r.failures);
        assert!(r.failures[0].starts_with("free pages stable: sample 3 has 3975"));
        assert!(r.failures[1].starts_with("no stall: forwarded did not grow"));
        assert_eq!(
            (r.samples, r.free_pages_min, r.free_pages_max),
            (3, Some(3975), Some(5000))
        );
    }
}
