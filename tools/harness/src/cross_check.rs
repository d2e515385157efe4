//! `bench --cross-check trafgen`: netsniff-ng's `trafgen` (Debian's `netsniff-ng`), a
//! generator the field trusts, against our paced generator ([`crate::rate`]) on the same guest,
//! the same tap port and the same offered rate (issue 42 item 5).
//!
//! **Backend: tap, for both.** trafgen writes to a network device, so the guest runs on the
//! tap backend ([`TapNet`]: one namespace, taps `gtap0` and `gtap1`), and our generator runs on
//! the same taps (AF_PACKET sockets, [`crate::gen::HostSock::Packet`]) in the same boot: the
//! two loss figures then differ only by the generator. NDR is searched on tap too
//! ([`crate::search::search_row`], the search's method, with its trials on the taps), so it is
//! not the dgram search's NDR (another host queue: QEMU's unix socket instead of the tap's
//! ring).
//!
//! **Streams.** Per frame size and per multiple of NDR (1.0 and 1.2 by default):
//! 1. trafgen sends `rate × seconds` copies of one frame our generator would build (sequence
//!    [`TRAFGEN_SEQ`], valid checksums) with an inter-frame gap (`--gap Nns`: a `nanosleep`
//!    after every frame, a smooth stream; its `-b Npps` would send each second's frames in one
//!    burst). A sleep ends late, so the gap is the period less the lateness measured on the
//!    previous stream; a stream whose rate is further than [`RATE_TOLERANCE`] from the target
//!    is run again (at most [`MAX_RUNS`]), and the last one is reported;
//! 2. trafgen goes through the qdisc (`--qdisc-path`, as our AF_PACKET socket: without it
//!    trafgen bypasses the qdisc), at the default priority (as ours; not `--prio-high`), with
//!    timer slack 1 ns (as our sender); its offered rate is its own count over its own time
//!    (its `N sec, M usec on CPU0` line). A receiver on `gtap1` counts the copies that come out
//!    (answering the guest's ARP, as the trials do);
//! 3. our generator runs at trafgen's measured offered rate, not the target: the same offered
//!    rate for both;
//! 4. around each, Gannet's STATS (port 0 RX, port 1 TX, drop counters) and `gtap0`'s TX
//!    drops (frames the tap's ring refused) are read; each generator's loss is (offered −
//!    received at the far side) / offered;
//! 5. steps 1–4 run [`CrossCheckConfig::pairs`] times (default 3), and the two generators'
//!    median losses agree when they differ by at most [`CrossCheckConfig::tolerance_pp`]
//!    percentage points (issue 42: 2): one stream that meets a hiccup of the shared host
//!    (QEMU not scheduled for tens of milliseconds) does not decide the point.
//!
//! trafgen retries a send refused with `ENOBUFS` (it yields and sends again), where ours counts
//! the frame as refused at the host and moves on; both count what they offered, so the loss is
//! comparable, and trafgen's retries show as a lower offered rate than asked.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;

use crate::gen::{self, HostSock, FCS_LEN};
use crate::qemu::{self, Backend, Guest, GuestConfig};
use crate::rate::{self, Ceiling, Sizes, Trial};
use crate::search::{self, RowResult, SearchConfig};
use crate::setup;
use crate::tap::{self, TapNet};

/// The sequence number of trafgen's frame: far above any trial's range, so its copies are
/// told apart from our generator's frames.
pub const TRAFGEN_SEQ: u64 = 1 << 62;
/// trafgen streams per point at most: a stream whose measured rate is further than
/// [`RATE_TOLERANCE`] from the target is run again with the gap corrected.
pub const MAX_RUNS: usize = 4;
/// How close trafgen's measured rate must come to the target, a fraction.
pub const RATE_TOLERANCE: f64 = 0.05;
/// The smallest inter-frame gap trafgen is given, ns (0 would turn its pacing off).
pub const MIN_GAP_NS: f64 = 1000.0;
/// After a stream, how long the far side waits for stragglers (as [`rate::DRAIN`]).
pub const DRAIN: Duration = rate::DRAIN;
/// How long a STATS request may take under load.
const STATS_TIMEOUT: Duration = Duration::from_secs(20);

/// What the cross-check runs.
#[derive(Debug, Clone, Serialize)]
pub struct CrossCheckConfig {
    /// Frame sizes, bytes on the wire (FCS included); issue 42: 64 and 1518.
    pub sizes: Vec<usize>,
    /// Multiples of NDR to offer (issue 42: 1.0 and about 1.2).
    pub factors: Vec<f64>,
    /// Length of each measured stream, s.
    pub seconds: f64,
    /// Streams of each generator per point, alternating; their median losses are compared (a
    /// hiccup of the shared host that hits one stream does not decide the point).
    pub pairs: usize,
    /// NDR per size, frames/s, instead of searching it on tap (same order as `sizes`).
    pub ndr: Option<Vec<f64>>,
    /// The search that finds NDR on tap (its `max_rate` is required: the upper bound, as no
    /// ceiling is measured on tap).
    pub search: SearchConfig,
    /// Largest difference of the two generators' loss that agrees, percentage points.
    pub tolerance_pp: f64,
}

impl Default for CrossCheckConfig {
    fn default() -> Self {
        CrossCheckConfig {
            sizes: vec![64, 1518],
            factors: vec![1.0, 1.2],
            seconds: 2.0,
            pairs: 3,
            ndr: None,
            search: SearchConfig {
                resolution_pps: 1000.0,
                trial_seconds: 0.5,
                final_seconds: 1.0,
                repeats: 2,
                warmup_seconds: 0.5,
                max_rate: Some(40_000.0),
                ..Default::default()
            },
            tolerance_pp: 2.0,
        }
    }
}

/// One stream of one generator, with its counts on both sides of the guest.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stream {
    /// "trafgen" or "gannet-gen" (our generator, [`crate::rate`]).
    pub generator: String,
    /// The rate asked for, frames/s (trafgen: the target; ours: trafgen's measured rate).
    pub asked_pps: f64,
    /// Frames offered (trafgen: sent; ours: sent or refused at the host).
    pub offered: u64,
    /// Sending time, s (trafgen's own measure for trafgen).
    pub seconds: f64,
    /// `offered / seconds`.
    pub offered_pps: f64,
    /// Ours: frames the host refused (`ENOBUFS`/`EAGAIN`); trafgen retries them (0).
    pub refused: u64,
    /// Frames of this stream that came out of port 1 (`gtap1`).
    pub received: u64,
    /// `(offered − received) / offered`.
    pub loss: f64,
    /// Growth of `gtap0`'s TX drops: frames the tap's ring refused on their way to QEMU.
    pub tap_dropped: u64,
    /// Growth of Gannet's port 0 RX count (STATS).
    pub guest_rx: u64,
    /// Growth of Gannet's port 1 TX count (STATS).
    pub guest_tx: u64,
    /// Gannet's drop counters that grew, by reason.
    pub guest_drops: BTreeMap<String, u64>,
    /// trafgen: the inter-frame gap it ran with, ns; ours: `None`.
    pub gap_ns: Option<u64>,
    /// Ours: the pacing error (p99 over 10 ms windows); trafgen: `None`.
    pub pacing_p99: Option<f64>,
    /// Ours: times its schedule slipped rather than burst (`rate::CATCH_UP_FRAMES`); trafgen: 0.
    pub slips: u64,
    /// Ours: how far its schedule slipped in all, ms; trafgen: 0.
    pub slip_ms: f64,
}

/// One stream of each generator, trafgen's first.
#[derive(Debug, Clone, Serialize)]
pub struct Pair {
    pub trafgen: Stream,
    pub ours: Stream,
    /// trafgen streams run for this pair (the last is the one reported).
    pub trafgen_runs: usize,
}

/// Both generators at one offered rate, [`CrossCheckConfig::pairs`] times.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The multiple of NDR aimed at.
    pub factor: f64,
    /// `factor × NDR`, frames/s.
    pub target_pps: f64,
    /// The streams, in the order run.
    pub pairs: Vec<Pair>,
    /// Median of trafgen's losses over the pairs, a fraction.
    pub trafgen_loss: f64,
    /// Median of our generator's losses over the pairs, a fraction.
    pub ours_loss: f64,
    /// |trafgen_loss − ours_loss|, percentage points.
    pub diff_pp: f64,
    /// `diff_pp <= tolerance_pp`.
    pub agree: bool,
}

/// The median of `v` (the mean of the middle two for an even count); 0 if empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One frame size's cross-check.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    /// Bytes on the wire, FCS included.
    pub size: usize,
    /// NDR on tap, frames/s.
    pub ndr_pps: f64,
    /// "search on tap" or "given".
    pub ndr_from: &'static str,
    /// The search that found NDR, when it ran.
    pub search: Option<RowResult>,
    pub points: Vec<Point>,
}

/// The `--cross-check trafgen` JSON result.
#[derive(Debug, Clone, Serialize)]
pub struct CrossCheckReport {
    /// "tap" (both generators).
    pub backend: &'static str,
    /// QEMU's accelerator ("tcg", "kvm").
    pub accel: &'static str,
    /// The guest's kernel command line.
    pub append: String,
    /// `trafgen -v`'s first line.
    pub trafgen_version: String,
    pub host_cores: usize,
    pub config: CrossCheckConfig,
    pub sizes: Vec<SizeResult>,
    /// Every point agrees.
    pub agree: bool,
}

/// `trafgen`'s packet configuration for one frame: its bytes, comma-separated hex, in braces.
pub fn trafgen_conf(frame: &[u8]) -> String {
    let bytes: Vec<String> = frame.iter().map(|b| format!("0x{b:02x}")).collect();
    format!("{{ {} }}\n", bytes.join(", "))
}

/// What trafgen says it sent: (frames, seconds) from its closing lines
/// (`N packets outgoing`, `S sec, U usec on CPU0 (N packets)`; summed over CPUs).
///
/// # Errors
/// No such lines (another trafgen version's output, or it failed).
pub fn parse_trafgen(stdout: &str) -> Result<(u64, f64)> {
    let mut packets = None;
    let mut seconds = 0.0;
    let mut cpus = 0;
    for l in stdout.lines().map(str::trim) {
        if let Some(n) = l.strip_suffix("packets outgoing") {
            packets = Some(n.trim().parse::<u64>().with_context(|| format!("{l:?}"))?);
        } else if l.contains(" usec on CPU") {
            let w: Vec<&str> = l.split_whitespace().collect();
            let (s, u) = match w.as_slice() {
                [s, "sec,", u, "usec", ..] => (s, u),
                _ => bail!("trafgen's time line {l:?}"),
            };
            let s: f64 = s.parse().with_context(|| format!("{l:?}"))?;
            let u: f64 = u.parse().with_context(|| format!("{l:?}"))?;
            // With several CPUs each sends apart; they run at the same time.
            seconds = f64::max(seconds, s + u / 1e6);
            cpus += 1;
        }
    }
    let packets = packets.context("no `N packets outgoing` line in trafgen's output")?;
    ensure!(
        cpus > 0 && seconds > 0.0,
        "no `S sec, U usec on CPU…` line in trafgen's output"
    );
    Ok((packets, seconds))
}

/// `gtap0`'s TX drop count (`ip -s -j link show`, `stats64.tx.dropped`) in namespace `ns`.
fn tap_tx_dropped(ns: &str, dev: &str) -> Result<u64> {
    let out = Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", "dev", dev])
        .output()
        .context("running ip -s -j link show")?;
    ensure!(
        out.status.success(),
        "ip -n {ns} -s -j link show dev {dev}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("ip -j's output is not JSON")?;
    v[0]["stats64"]["tx"]["dropped"]
        .as_u64()
        .with_context(|| format!("no stats64.tx.dropped for {dev}: {v}"))
}

/// Gannet's counters a stream is read with.
#[derive(Debug, Clone, Default)]
struct Counters {
    rx0: u64,
    tx1: u64,
    drops: BTreeMap<String, u64>,
    tap_dropped: u64,
}

impl Counters {
    fn read(guest: &Guest, ns: &str) -> Result<Counters> {
        let s = guest.stats(STATS_TIMEOUT)?;
        let sum = |port: u32, f: fn(&netstack::stats::PortStats) -> u64| -> u64 {
            s.ports.iter().filter(|p| p.port == port).map(f).sum()
        };
        Ok(Counters {
            rx0: sum(0, |p| p.rx),
            tx1: sum(1, |p| p.tx),
            drops: s.drops(),
            tap_dropped: tap_tx_dropped(ns, &tap::tap_name(0))?,
        })
    }

    /// Fills `s`'s guest and tap figures with the growth from `self` to `after`.
    fn fill(&self, after: &Counters, s: &mut Stream) {
        s.guest_rx = after.rx0.saturating_sub(self.rx0);
        s.guest_tx = after.tx1.saturating_sub(self.tx1);
        s.tap_dropped = after.tap_dropped.saturating_sub(self.tap_dropped);
        s.guest_drops = after
            .drops
            .iter()
            .filter_map(|(k, &v)| {
                let d = v.saturating_sub(self.drops.get(k).copied().unwrap_or(0));
                (d > 0).then(|| (k.clone(), d))
            })
            .collect();
    }
}

/// trafgen on `gtap0` of namespace `ns`.
struct Trafgen<'a> {
    bin: PathBuf,
    ns: &'a str,
    conf: PathBuf,
}

impl Trafgen<'_> {
    /// Sends `count` frames with a gap of `gap_ns` after each; returns (sent, seconds).
    fn send(&self, count: u64, gap_ns: u64) -> Result<(u64, f64)> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns])
            .arg(&self.bin)
            .args(["--dev", &tap::tap_name(0), "--conf"])
            .arg(&self.conf)
            .args(["--num", &count.to_string()])
            .args(["--gap", &format!("{gap_ns}ns")])
            // One process (the gap mode sends from one anyway), the qdisc path as our
            // AF_PACKET socket, no system socket-memory tuning (read-only /proc/sys in a
            // container). Not `--prio-high` (nice -20): on a 2-core host a generator at -20
            // takes the CPU from QEMU's threads (measured: 12-70 % loss at rates that lost
            // nothing at the default priority), and ours runs at the default too.
            .args(["--cpus", "1", "--qdisc-path", "--no-sock-mem"]);
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // which is async-signal-safe; timer slack is kept across exec and fork.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
                Ok(())
            });
        }
        let out = cmd.output().context("running trafgen")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "trafgen failed ({}): {}{}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        parse_trafgen(&stdout).with_context(|| format!("trafgen said: {stdout}"))
    }
}

/// Counts the copies of trafgen's frame that leave port 1 while `f` runs, and for
/// [`DRAIN`] after it; answers the guest's ARP requests. Returns `f`'s result and the count.
fn count_far_side<R>(rx: &HostSock, f: impl FnOnce() -> Result<R>) -> Result<(R, u64)> {
    // Frames of an earlier run (trafgen's calibration) still queued on the socket are not
    // this stream's.
    rx.set_nonblocking(true)?;
    let mut buf = vec![0u8; gen::RECV_BUF_LEN];
    while rx.recv(&mut buf).is_ok() {}
    rx.set_nonblocking(false)?;
    rx.set_read_timeout(Some(Duration::from_millis(20)))?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let counter = s.spawn(|| -> Result<u64> {
            let mut buf = vec![0u8; gen::RECV_BUF_LEN];
            let mut n = 0;
            loop {
                match rx.recv(&mut buf) {
                    Ok(len) => {
                        let fr = &buf[..len];
                        if let Some(r) = gen::arp_reply(fr, 1) {
                            rx.send(&r).context("answering the guest's ARP request")?;
                        } else if matches!(gen::validate_frame(fr), Ok(g) if g.seq == TRAFGEN_SEQ && g.dir == 0)
                        {
                            n += 1;
                        }
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        if stop.load(Ordering::Acquire) {
                            return Ok(n);
                        }
                    }
                    Err(e) => return Err(e).context("receiving from port 1"),
                }
            }
        });
        let r = f();
        std::thread::sleep(DRAIN);
        stop.store(true, Ordering::Release);
        let n = counter.join().expect("far-side counter panicked")?;
        Ok((r?, n))
    })
}

/// Runs the cross-check on Gannet booted from `like` (accelerator, `-cpu`, `--append`), on a
/// fresh tap namespace. Prints every stream to stderr.
///
/// # Errors
/// Not root or no `/dev/net/tun` (the tap backend), trafgen missing and not installable,
/// `-icount` asked for, a size outside 64..=1518, no `search.max_rate` when NDR is searched,
/// the guest not booting or exiting uncleanly, or trafgen failing.
pub fn run(like: &GuestConfig, cfg: &CrossCheckConfig) -> Result<CrossCheckReport> {
    ensure!(
        !like.icount,
        "--cross-check measures rates in wall-clock time: drop --icount"
    );
    ensure!(cfg.pairs >= 1, "--pairs must be at least 1");
    for &s in &cfg.sizes {
        ensure!(
            (64..=1518).contains(&s),
            "--sizes: {s} B is outside 64..=1518 (the taps' MTU is 1500)"
        );
    }
    if let Some(n) = &cfg.ndr {
        ensure!(
            n.len() == cfg.sizes.len(),
            "--ndr gives {} rates for {} sizes",
            n.len(),
            cfg.sizes.len()
        );
    } else {
        ensure!(
            cfg.search.max_rate.is_some(),
            "the search on tap needs --max-rate (no generator ceiling is measured on tap)"
        );
    }
    if let Some(why) = tap::unavailable() {
        bail!("--cross-check runs on the tap backend: {why}");
    }
    let bin = setup::ensure_trafgen()?;
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    let net = TapNet::create(2, 1)?;
    let dir = tempfile::Builder::new()
        .prefix("gannet-xcheck-")
        .tempdir_in("/tmp")
        .context("creating the run's directory")?;
    let generator = gen::Generator::bind(&gen::GenConfig {
        dir: dir.path().to_path_buf(),
        netns: Some(net.path()),
        size: 64,
        ..Default::default()
    })?;
    let (tx, rx) = (generator.socket(0)?, generator.socket(1)?);
    let gcfg = GuestConfig {
        dgram_dir: dir.path().to_path_buf(),
        cpus: 1,
        nics: 2,
        backend: Backend::Tap,
        queues: 1,
        netns: Some(net.path()),
        ..like.clone()
    };
    let mut guest = Guest::boot(&gcfg)?;
    guest.wait_ready(qemu::READY_TIMEOUT)?;
    let accel = gcfg.accel.name();
    eprintln!(
        "cross-check: Gannet ready on the tap backend ({accel}); trafgen {} vs our generator, {} s streams",
        bin.display(),
        cfg.seconds
    );
    let ns = net.name();
    let mut seq_base = 0u64;
    let mut sizes = Vec::new();
    for (i, &size) in cfg.sizes.iter().enumerate() {
        let row = Sizes::one(size);
        let (ndr, ndr_from, search) = match &cfg.ndr {
            Some(n) => (n[i], "given", None),
            None => {
                let upper = cfg.search.max_rate.unwrap_or(0.0);
                let ceiling = Ceiling {
                    pps: upper,
                    offered_pps: upper,
                    host_cores: rate::host_cores(),
                    pinned: "not measured on tap: the bound is --max-rate".into(),
                    sizes: row.name.clone(),
                };
                let mut run = |sz: &Sizes, pps: f64, secs: f64| -> Result<Trial> {
                    let before = Counters::read(&guest, ns)?;
                    let mut t = rate::trial(&tx, &rx, sz, pps, secs, seq_base)?;
                    seq_base += t.offered + 1;
                    let after = Counters::read(&guest, ns)?;
                    let mut s = Stream::default();
                    before.fill(&after, &mut s);
                    t.attribute(s.guest_drops);
                    eprintln!(
                        "cross-check:   search {} at {pps:.0} fps for {secs} s: offered {}, received {}, loss {:.3} %",
                        sz.label(), t.offered, t.received, t.loss * 100.0
                    );
                    Ok(t)
                };
                let r = search::search_row(&cfg.search, &row, &ceiling, &mut run)
                    .with_context(|| format!("searching NDR at {} on tap", row.label()))?;
                let ndr = r.ndr.as_ref().map_or(0.0, |x| x.pps);
                (ndr, "search on tap", Some(r))
            }
        };
        eprintln!(
            "cross-check: {}: NDR on tap {ndr:.0} fps ({ndr_from}, {accel})",
            row.label()
        );
        if ndr <= 0.0 {
            sizes.push(SizeResult {
                size,
                ndr_pps: ndr,
                ndr_from,
                search,
                points: Vec::new(),
            });
            continue;
        }
        let conf = dir.path().join(format!("trafgen-{size}.cfg"));
        let frame = gen::build_frame(0, TRAFGEN_SEQ, 0, size - FCS_LEN)?;
        std::fs::write(&conf, trafgen_conf(&frame))
            .with_context(|| format!("writing {}", conf.display()))?;
        let tg = Trafgen {
            bin: bin.clone(),
            ns,
            conf,
        };
        let mut points = Vec::new();
        // How late trafgen's sleeps end on this host, ns: learnt from each stream.
        let mut overshoot_ns = 0.0;
        let mut measured = false;
        for &factor in &cfg.factors {
            let target = ndr * factor;
            let period = 1e9 / target;
            let count = (target * cfg.seconds).round() as u64;
            let mut pairs = Vec::new();
            for _ in 0..cfg.pairs {
                let mut runs = 0;
                let (t, gap) = loop {
                    runs += 1;
                    // The sleep's overshoot measured so far comes off the period.
                    let gap = (period - overshoot_ns).clamp(MIN_GAP_NS, period);
                    let before = Counters::read(&guest, ns)?;
                    let ((sent, secs), received) =
                        count_far_side(&rx, || tg.send(count, gap as u64))?;
                    let after = Counters::read(&guest, ns)?;
                    let mut t = Stream {
                        generator: "trafgen".into(),
                        asked_pps: target,
                        offered: sent,
                        seconds: secs,
                        offered_pps: sent as f64 / secs,
                        received,
                        loss: sent.saturating_sub(received) as f64 / sent.max(1) as f64,
                        gap_ns: Some(gap as u64),
                        ..Default::default()
                    };
                    before.fill(&after, &mut t);
                    // Damped: one sleep's lateness varies from run to run on a loaded host.
                    let late = (1e9 / t.offered_pps - gap).max(0.0);
                    overshoot_ns = if measured {
                        (overshoot_ns + late) / 2.0
                    } else {
                        late
                    };
                    measured = true;
                    if (t.offered_pps - target).abs() <= RATE_TOLERANCE * target || runs == MAX_RUNS
                    {
                        break (t, gap as u64);
                    }
                    eprintln!(
                        "cross-check:     trafgen sent {} frames at {:.0} fps for {target:.0} (gap {gap:.0} ns): again with the gap corrected",
                        t.offered, t.offered_pps
                    );
                };
                let before = Counters::read(&guest, ns)?;
                let o = rate::trial(&tx, &rx, &row, t.offered_pps, cfg.seconds, seq_base)?;
                seq_base += o.offered + 1;
                let after = Counters::read(&guest, ns)?;
                let mut ours = Stream {
                    generator: "gannet-gen".into(),
                    asked_pps: t.offered_pps,
                    offered: o.offered,
                    seconds: o.seconds,
                    offered_pps: o.offered_pps,
                    refused: o.refused,
                    received: o.received,
                    loss: o.loss,
                    pacing_p99: Some(o.pacing_p99),
                    slips: o.slips,
                    slip_ms: o.slip_ms,
                    ..Default::default()
                };
                before.fill(&after, &mut ours);
                for s in [&t, &ours] {
                    eprintln!(
                        "cross-check:   {} B at {factor:.2} x NDR, {:<10} offered {} at {:.0} fps, received {}, loss {:.3} % (tap refused {}, guest rx {} tx {}, drops {:?}; trafgen gap {gap} ns, run {runs}; ours slipped {} times, {:.1} ms)",
                        size, s.generator, s.offered, s.offered_pps, s.received, s.loss * 100.0,
                        s.tap_dropped, s.guest_rx, s.guest_tx, s.guest_drops, s.slips, s.slip_ms
                    );
                }
                pairs.push(Pair {
                    trafgen: t,
                    ours,
                    trafgen_runs: runs,
                });
            }
            let trafgen_loss = median(&pairs.iter().map(|p| p.trafgen.loss).collect::<Vec<_>>());
            let ours_loss = median(&pairs.iter().map(|p| p.ours.loss).collect::<Vec<_>>());
            let diff_pp = (trafgen_loss - ours_loss).abs() * 100.0;
            let agree = diff_pp <= cfg.tolerance_pp;
            eprintln!(
                "cross-check: {size} B at {factor:.2} x NDR ({target:.0} fps): median loss of {} pairs trafgen {:.3} % vs ours {:.3} %: {diff_pp:.2} pp ({}, tolerance {} pp; {accel})",
                pairs.len(),
                trafgen_loss * 100.0,
                ours_loss * 100.0,
                if agree { "agree" } else { "DISAGREE" },
                cfg.tolerance_pp
            );
            points.push(Point {
                factor,
                target_pps: target,
                pairs,
                trafgen_loss,
                ours_loss,
                diff_pp,
                agree,
            });
        }
        sizes.push(SizeResult {
            size,
            ndr_pps: ndr,
            ndr_from,
            search,
            points,
        });
    }
    let (_, exit) = guest.quit(Duration::from_secs(30))?;
    ensure!(
        exit.is_clean(),
        "the guest exited {exit:?}\n{}",
        guest.tail_report()
    );
    let agree = sizes.iter().all(|s| s.points.iter().all(|p| p.agree));
    drop(generator);
    drop(net);
    Ok(CrossCheckReport {
        backend: "tap",
        accel,
        append: gcfg.append.clone(),
        trafgen_version: version,
        host_cores: rate::host_cores(),
        config: cfg.clone(),
        sizes,
        agree,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trafgen_closing_lines_give_count_and_time() {
        let out = "     1 packets to schedule\n    60 bytes in total\nRunning! Hang up with ^C!\n\n\n        5000 packets outgoing\n      300000 bytes outgoing\n           0 sec, 665892 usec on CPU0 (5000 packets)\n";
        let (n, s) = parse_trafgen(out).unwrap();
        assert_eq!(n, 5000);
        assert!((s - 0.665892).abs() < 1e-9, "{s}");
        assert!(parse_trafgen("Running!\n").is_err());
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[0.3, 0.0, 0.1]), 0.1);
        assert!((median(&[0.4, 0.0, 0.1, 0.2]) - 0.15).abs() < 1e-12);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn trafgen_conf_is_the_frame_in_hex() {
        assert_eq!(trafgen_conf(&[0x02, 0x00, 0xff]), "{ 0x02, 0x00, 0xff }\n");
        let f = gen::build_frame(0, TRAFGEN_SEQ, 0, 60).unwrap();
        let g = gen::validate_frame(&f).unwrap();
        assert_eq!((g.seq, g.dir), (TRAFGEN_SEQ, 0));
    }
}
