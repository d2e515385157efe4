//! `cargo xtask bench --peer linux,dpdk` (issues 6 and 12): Gannet (`io`, `l2`, router), a Linux
//! guest (bridge, IPv4 forwarding) and DPDK's testpmd (`io`, `mac`) forwarding the same generator
//! traffic through the same QEMU command line (same ports, MACs, dgram backend, `-cpu`), one
//! boot per row, every frame size of the run measured in that boot.
//!
//! Past ~800 lines because the runs, tables, JSON and plots all work on one `Record` type of one
//! benchmark.
//!
//! Per row and size: forwarded pps and loss from the generator; guest instructions per packet
//! under `--icount` (Gannet: Δ`busy_cycles` ÷ Δ`forwarded` from `STATS`, the TSC counting
//! instructions; Linux: Δ(ktime − nohz idle − iowait) from `/proc/timer_list`, one virtual ns per
//! instruction, ÷ frames received by the generator; `/proc/stat`'s tick-sampled busy time is
//! logged beside it, see [`peer_linux::timer_ns`] for why it is not used; testpmd: Δ busy cycles
//! ÷ Δ packets of its `--record-core-cycles` line, see [`peer_dpdk`]); frames per busy poll
//! iteration beside it (Gannet: Δ`forwarded` ÷ Δ`busy_iters`; testpmd: Δ frames received ÷ Δ RX
//! bursts that returned frames; the batch size the instruction count was amortised over); kicks
//! per packet (Gannet only).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::peer_dpdk::{self, DpdkMode, DpdkPeer, FwdDelta, FwdStats};
use harness::append::gannet_append;
use harness::gen::{GenConfig, GenReport, Generator};
use harness::peer_linux::{self, LinuxPeer, PeerMode};
use harness::qemu::{self, Accel, Echo, Guest, GuestConfig, NicModel};

/// PNG of forwarded pps vs frame size (relative to the workspace root).
pub const PLOT_PPS: &str = "docs/peer-pps.png";
/// PNG of instructions per packet vs frame size.
pub const PLOT_IPP: &str = "docs/peer-instructions.png";

/// What to run.
#[derive(Debug, Clone)]
pub struct PeerBenchConfig {
    /// Frame sizes on the wire, FCS included.
    pub sizes: Vec<usize>,
    /// Write `{"sweep": […]}` (set by `--sizes`) instead of one record.
    pub sweep: bool,
    /// Seconds of traffic per row and size.
    pub seconds: f64,
    /// Generator window (maximum outstanding frames).
    pub window: u64,
    pub accel: Accel,
    pub icount: bool,
    /// QEMU `-cpu` of every row (`None`: QEMU's default, `qemu64`).
    pub cpu: Option<String>,
    /// Extra Gannet command line (any `mode=` is replaced per row).
    pub append: String,
    /// Gannet image.
    pub image: PathBuf,
    /// Where guest consoles are echoed.
    pub echo: Echo,
    /// Draw the two PNGs (only meaningful with more than one size).
    pub plots: bool,
    /// `--mtu`: QEMU `host_mtu` on every row's two ports (`None`: none, QEMU's default).
    pub mtu: Option<qemu::Mtus>,
    /// The generator also sends into port 1 (`gen --bidir`; `window` per direction): `bench
    /// --burst-in`. `false` for `--peer` (port 0 → port 1 only).
    pub bidir: bool,
    /// Frames per direction sent before the measured run, at most [`WARMUP_WINDOW`]
    /// outstanding (router mode: the next hops' ARP resolved, so the run loses no frame to
    /// the neighbour queue); 0: none.
    pub warmup: u64,
    /// `--nic`: the two ports' NIC model, Gannet's and testpmd's (`e1000e`: QEMU's 82574L,
    /// testpmd's `net_e1000_em` PMD); the Linux peer runs on virtio-net only (its initramfs
    /// has no e1000e module), so its rows are `null` with another NIC.
    pub nic: NicModel,
}

/// Generator window of the warm-up ([`PeerBenchConfig::warmup`]): the router's neighbour
/// queue holds 8 frames per unresolved next hop.
pub const WARMUP_WINDOW: u64 = 8;

/// One row of the record (`null` in JSON when the row could not run).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub forwarded_pps: f64,
    pub loss: f64,
    /// Only with `--icount`.
    pub instructions_per_packet: Option<f64>,
    /// Frames per busy poll iteration: Gannet Δ`forwarded` ÷ Δ`busy_iters`; testpmd Δ frames
    /// received ÷ Δ RX bursts that returned frames; Linux `null`.
    pub frames_per_busy_iter: Option<f64>,
    /// Gannet only.
    pub kicks_per_packet: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct GannetRows {
    pub io: Option<Row>,
    pub l2: Option<Row>,
    pub l3: Option<Row>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct LinuxRows {
    pub l2: Option<Row>,
    pub l3: Option<Row>,
}

/// testpmd's rows (`--forward-mode=io`, `mac`).
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct DpdkRows {
    pub io: Option<Row>,
    pub mac: Option<Row>,
}

/// The record for one frame size.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Record {
    /// The ports' NIC model of every row (`virtio`, `e1000e`).
    pub nic: String,
    pub accel: String,
    pub icount: bool,
    /// QEMU `-cpu` of every row; `null`: QEMU's default (`qemu64`).
    pub cpu: Option<String>,
    /// Generator window (maximum outstanding frames).
    pub window: u64,
    pub frame_size: usize,
    pub gannet: GannetRows,
    pub linux: LinuxRows,
    pub dpdk: DpdkRows,
}

/// `--sizes` output.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sweep {
    pub sweep: Vec<Record>,
}

/// Everything a run produced: records, per-row notes (why a row is null), and the Linux busy
/// fraction per row/size (table only).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub records: Vec<Record>,
    pub notes: Vec<String>,
    /// Any row other than Gannet's router failed.
    pub failed: bool,
}

/// The peers a run measures beside Gannet (`None`: those rows are `null`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Peers<'a> {
    pub linux: Option<&'a LinuxPeer>,
    pub dpdk: Option<&'a DpdkPeer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Gannet(&'static str),
    Linux(PeerMode),
    Dpdk(DpdkMode),
}

impl Engine {
    fn label(self) -> &'static str {
        match self {
            Engine::Gannet("io") => "gannet io",
            Engine::Gannet("l2") => "gannet l2",
            Engine::Gannet(_) => "gannet l3 (router)",
            Engine::Linux(PeerMode::L2) => "linux l2 (bridge)",
            Engine::Linux(PeerMode::L3) => "linux l3 (forwarding)",
            Engine::Dpdk(DpdkMode::Io) => "testpmd io",
            Engine::Dpdk(DpdkMode::Mac) => "testpmd mac",
        }
    }
}

const ENGINES: [Engine; 7] = [
    Engine::Gannet("io"),
    Engine::Gannet("l2"),
    Engine::Gannet("router"),
    Engine::Linux(PeerMode::L2),
    Engine::Linux(PeerMode::L3),
    Engine::Dpdk(DpdkMode::Io),
    Engine::Dpdk(DpdkMode::Mac),
];

/// A counter snapshot. Gannet: (TSC busy cycles, frames, kicks, busy poll iterations); Linux:
/// (busy ns = ktime now − nohz idle − iowait, `/proc/stat` busy ticks (USER_HZ, for the log
/// only), 0, 0); testpmd: its forward statistics.
#[derive(Debug, Clone)]
enum Snap {
    Counters(u64, u64, u64, u64),
    Dpdk(FwdStats),
}

fn snapshot(engine: Engine, guest: &Guest, tag: &str) -> Result<Snap> {
    match engine {
        Engine::Gannet(_) => {
            let s = guest.stats(Duration::from_secs(30))?;
            Ok(Snap::Counters(
                s.busy_cycles,
                s.forwarded,
                s.kicks,
                s.busy_iters,
            ))
        }
        Engine::Linux(_) => {
            let (now, idle, iowait) = peer_linux::timer_ns(guest, tag)?;
            let ticks = peer_linux::cpu_ticks(guest, tag)?.0;
            Ok(Snap::Counters(
                now.saturating_sub(idle + iowait),
                ticks,
                0,
                0,
            ))
        }
        Engine::Dpdk(_) => peer_dpdk::snapshot(guest, tag).map(Snap::Dpdk),
    }
}

/// Computes a row from the generator report and the counter deltas.
fn row(engine: Engine, icount: bool, r: &GenReport, a: &Snap, b: &Snap) -> Result<Row> {
    let (ipp, fpi, kpp) = match (engine, a, b) {
        (Engine::Gannet(_), Snap::Counters(a0, a1, a2, a3), Snap::Counters(b0, b1, b2, b3)) => {
            let busy = b0.saturating_sub(*a0) as f64;
            let fwd = b1.saturating_sub(*a1);
            let kicks = b2.saturating_sub(*a2) as f64;
            let iters = b3.saturating_sub(*a3);
            if fwd == 0 {
                (None, None, None)
            } else {
                (
                    icount.then(|| busy / fwd as f64),
                    (iters > 0).then(|| fwd as f64 / iters as f64),
                    Some(kicks / fwd as f64),
                )
            }
        }
        (Engine::Linux(_), Snap::Counters(a0, ..), Snap::Counters(b0, ..)) => {
            let busy = b0.saturating_sub(*a0) as f64;
            (
                (icount && r.received > 0).then(|| busy / r.received as f64),
                None,
                None,
            )
        }
        (Engine::Dpdk(_), Snap::Dpdk(a), Snap::Dpdk(b)) => {
            let d = FwdDelta::between(a, b)?;
            (
                if icount { d.cycles_per_packet() } else { None },
                d.frames_per_busy_burst(),
                None,
            )
        }
        _ => anyhow::bail!("{}: snapshot of the wrong kind", engine.label()),
    };
    Ok(Row {
        forwarded_pps: r.received_pps,
        loss: r.loss,
        instructions_per_packet: ipp,
        frames_per_busy_iter: fpi,
        kicks_per_packet: kpp,
    })
}

/// Boots `engine` once and measures every size. Returns one row per size.
fn measure(cfg: &PeerBenchConfig, engine: Engine, peers: Peers) -> Result<Vec<Row>> {
    let tmp = tempfile::Builder::new()
        .prefix("gannet-peer-")
        .tempdir_in("/tmp")
        .context("creating the socket directory")?;
    let gcfg = |size| GenConfig {
        dir: tmp.path().to_path_buf(),
        size,
        seconds: cfg.seconds,
        window: cfg.window,
        bidir: cfg.bidir,
        ..Default::default()
    };
    // The host side binds first: QEMU's frames to an unbound path are lost.
    let mut generator = Some(Generator::bind(&gcfg(cfg.sizes[0]))?);
    let mut qcfg: GuestConfig = match engine {
        Engine::Gannet(mode) => GuestConfig {
            image: cfg.image.clone(),
            dgram_dir: tmp.path().to_path_buf(),
            append: gannet_append(&cfg.append, mode),
            accel: cfg.accel,
            icount: cfg.icount,
            echo: cfg.echo,
            ..Default::default()
        },
        Engine::Linux(mode) => peer_linux::guest_config(
            peers.linux.context("no Linux peer prepared")?,
            tmp.path(),
            mode,
            cfg.accel,
            cfg.icount,
            cfg.echo,
        ),
        Engine::Dpdk(mode) => peer_dpdk::guest_config(
            peers.dpdk.context("no DPDK peer prepared")?,
            tmp.path(),
            mode,
            cfg.accel,
            cfg.icount,
            cfg.cpu.clone(),
            cfg.echo,
        ),
    };
    qcfg.cpu = cfg.cpu.clone();
    qcfg.mtu = cfg.mtu.clone();
    qcfg.nic = cfg.nic;
    eprintln!(
        "xtask: peer bench: booting {} (accel {}{}, -cpu {})",
        engine.label(),
        cfg.accel,
        if cfg.icount { " + icount" } else { "" },
        cfg.cpu.as_deref().unwrap_or("default (qemu64)")
    );
    let mut guest = Guest::boot(&qcfg)?;
    let res = measure_booted(cfg, engine, &mut guest, &mut generator, &gcfg);
    if let Engine::Dpdk(mode) = engine {
        let log = peer_dpdk::console_log(mode);
        match peer_dpdk::save_console(&guest, &log) {
            Ok(()) => eprintln!("xtask: {} serial log: {}", engine.label(), log.display()),
            Err(e) => eprintln!("xtask: warning: {e:#}"),
        }
    }
    drop(guest);
    drop(generator);
    drop(tmp);
    res
}

/// [`measure`] once QEMU runs: wait for the guest, one window per size, shut down.
fn measure_booted(
    cfg: &PeerBenchConfig,
    engine: Engine,
    guest: &mut Guest,
    generator: &mut Option<Generator>,
    gcfg: &dyn Fn(usize) -> GenConfig,
) -> Result<Vec<Row>> {
    match engine {
        Engine::Gannet(_) => guest.wait_ready(qemu::READY_TIMEOUT)?,
        Engine::Linux(_) => {
            let l = peer_linux::wait_ready(guest)?;
            eprintln!("xtask: {l}");
        }
        Engine::Dpdk(_) => {
            let ports = peer_dpdk::wait_ready(guest)?;
            eprintln!("xtask: testpmd probed {ports:?}");
            peer_dpdk::start(guest)?;
        }
    }
    if cfg.warmup > 0 {
        drop(generator.take());
        let w = Generator::bind(&GenConfig {
            count: Some(cfg.warmup),
            window: WARMUP_WINDOW,
            ..gcfg(cfg.sizes[0])
        })?;
        let r = w.run()?;
        eprintln!(
            "xtask: {} warm-up: sent {} received {}",
            engine.label(),
            r.sent,
            r.received
        );
        drop(w);
        *generator = Some(Generator::bind(&gcfg(cfg.sizes[0]))?);
    }
    let mut rows = Vec::new();
    for (k, &size) in cfg.sizes.iter().enumerate() {
        if k > 0 {
            drop(generator.take());
            *generator = Some(Generator::bind(&gcfg(size))?);
        }
        let g = generator.as_ref().context("no generator")?;
        let a = snapshot(engine, guest, &format!("a{size}"))?;
        let r = g.run()?;
        let b = snapshot(engine, guest, &format!("b{size}"))?;
        let row = row(engine, cfg.icount, &r, &a, &b)?;
        if matches!(engine, Engine::Gannet(_)) && r.sent != r.received {
            // Say where the lost frames went: the guest's drop counters (or none of them,
            // then the loss was outside the guest).
            let s = guest.stats(Duration::from_secs(30))?;
            eprintln!(
                "xtask: {} {size} B: {} frames lost; the guest's drop counters since boot: {:?}",
                engine.label(),
                r.sent.saturating_sub(r.received),
                s.drops()
            );
        }
        match (&a, &b) {
            (Snap::Counters(a0, a1, ..), Snap::Counters(b0, b1, ..))
                if matches!(engine, Engine::Linux(_)) =>
            {
                let ns = b0.saturating_sub(*a0) as f64;
                let ticks = b1.saturating_sub(*a1) as f64;
                eprintln!(
                    "xtask: {} {size} B: busy {:.1} ms of {:.2} s traffic (guest clock); /proc/stat \
                     tick samples say {:.0} ms",
                    engine.label(),
                    ns / 1e6,
                    r.seconds,
                    ticks * 1e3 / peer_linux::USER_HZ
                );
            }
            (Snap::Dpdk(x), Snap::Dpdk(y)) => {
                let d = FwdDelta::between(x, y)?;
                eprintln!(
                    "xtask: {} {size} B: testpmd received {} frames in {} busy of {} RX bursts \
                     ({} empty), {} busy cycles over {} packets (testpmd's cumulative figure: {} \
                     cycles/packet at {} MHz)",
                    engine.label(),
                    d.rx_packets,
                    d.busy_bursts,
                    d.rx_bursts,
                    d.empty_fraction()
                        .map_or("n/a".into(), |f| format!("{:.2}%", f * 100.0)),
                    d.busy_cycles,
                    d.cycle_packets,
                    fmt_opt(y.cycles_per_packet, 2),
                    y.tsc_mhz.map_or("?".into(), |m| m.to_string()),
                );
            }
            _ => {}
        }
        eprintln!(
            "xtask: {} {size} B: sent {} received {} -> {:.0} pps, loss {:.4}, instr/pkt {} at {} frames/busy iter, kicks/pkt {}",
            engine.label(),
            r.sent,
            r.received,
            row.forwarded_pps,
            row.loss,
            fmt_opt(row.instructions_per_packet, 0),
            fmt_opt(row.frames_per_busy_iter, 2),
            fmt_opt(row.kicks_per_packet, 3)
        );
        rows.push(row);
    }
    match engine {
        Engine::Gannet(_) => {
            let (_, exit) = guest.quit(Duration::from_secs(30))?;
            if !exit.is_clean() {
                eprintln!(
                    "xtask: warning: {} ended with {exit}\n{}",
                    engine.label(),
                    guest.tail_report()
                );
            }
        }
        Engine::Linux(_) => {
            let _ = guest.send_line("quit");
            if guest.wait_exit(Duration::from_secs(20)).is_err() {
                eprintln!("xtask: warning: Linux peer did not power off; killed");
            }
        }
        Engine::Dpdk(_) => {
            if let Err(e) = peer_dpdk::stop_and_quit(guest) {
                eprintln!("xtask: warning: testpmd did not shut down cleanly; killed: {e:#}");
            }
        }
    }
    Ok(rows)
}

/// Runs every row; the rows of a peer that is `None` in `peers` are `null`.
pub fn run(cfg: &PeerBenchConfig, peers: Peers) -> Result<Outcome> {
    anyhow::ensure!(!cfg.sizes.is_empty(), "no frame sizes");
    let mut out = Outcome {
        records: cfg
            .sizes
            .iter()
            .map(|&s| Record {
                nic: cfg.nic.name().to_string(),
                accel: cfg.accel.name().to_string(),
                icount: cfg.icount,
                cpu: cfg.cpu.clone(),
                window: cfg.window,
                frame_size: s,
                gannet: GannetRows::default(),
                linux: LinuxRows::default(),
                dpdk: DpdkRows::default(),
            })
            .collect(),
        ..Default::default()
    };
    let progress = harness::progress::Progress::new("bench --peer", ENGINES.len() as u64);
    for engine in ENGINES {
        progress.phase(engine.label());
        let _step = Step(&progress);
        if matches!(engine, Engine::Linux(_))
            && peers.linux.is_some()
            && cfg.nic != NicModel::Virtio
        {
            out.notes.push(format!(
                "{}: null (the Linux peer runs on virtio-net only: its initramfs has no {} module)",
                engine.label(),
                cfg.nic.name()
            ));
            continue;
        }
        if matches!(engine, Engine::Linux(_)) && peers.linux.is_none() {
            out.notes.push(format!(
                "{}: null (Linux peer not requested)",
                engine.label()
            ));
            continue;
        }
        if matches!(engine, Engine::Dpdk(_)) && peers.dpdk.is_none() {
            out.notes.push(format!(
                "{}: null (DPDK peer not requested)",
                engine.label()
            ));
            continue;
        }
        let rows = match measure(cfg, engine, peers) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("{e:#}");
                let router_missing =
                    engine == Engine::Gannet("router") && msg.contains(qemu::CONFIG_ERROR_MARKER);
                if router_missing {
                    out.notes.push(format!(
                        "{}: null (this Gannet image has no router mode: `mode=router` is a \
                         config error)",
                        engine.label()
                    ));
                } else {
                    out.failed = true;
                    eprintln!("xtask: error: {}: {msg}", engine.label());
                    out.notes.push(format!(
                        "{}: null (failed: {})",
                        engine.label(),
                        first_line(&msg)
                    ));
                }
                continue;
            }
        };
        for (rec, r) in out.records.iter_mut().zip(rows) {
            let slot = match engine {
                Engine::Gannet("io") => &mut rec.gannet.io,
                Engine::Gannet("l2") => &mut rec.gannet.l2,
                Engine::Gannet(_) => &mut rec.gannet.l3,
                Engine::Linux(PeerMode::L2) => &mut rec.linux.l2,
                Engine::Linux(PeerMode::L3) => &mut rec.linux.l3,
                Engine::Dpdk(DpdkMode::Io) => &mut rec.dpdk.io,
                Engine::Dpdk(DpdkMode::Mac) => &mut rec.dpdk.mac,
            };
            *slot = Some(r);
        }
    }
    Ok(out)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "null".to_string(), |v| format!("{v:.prec$}"))
}

/// The table of one record, with ratios.
pub fn table(rec: &Record) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "frame size {} B, accel {}, icount {}, -cpu {}, generator window {}",
        rec.frame_size,
        rec.accel,
        if rec.icount { "yes" } else { "no" },
        rec.cpu.as_deref().unwrap_or("default (qemu64)"),
        rec.window
    );
    let _ = writeln!(
        s,
        "  {:<22} {:>12} {:>8} {:>14} {:>17} {:>11}",
        "row", "fwd pps", "loss", "instr/packet", "frames/busy iter", "kicks/pkt"
    );
    let rows: [(&str, &Option<Row>); 7] = [
        ("gannet io", &rec.gannet.io),
        ("gannet l2", &rec.gannet.l2),
        ("gannet l3 (router)", &rec.gannet.l3),
        ("linux l2 (bridge)", &rec.linux.l2),
        ("linux l3 (forwarding)", &rec.linux.l3),
        ("testpmd io", &rec.dpdk.io),
        ("testpmd mac", &rec.dpdk.mac),
    ];
    for (name, r) in rows {
        match r {
            Some(r) => {
                let _ = writeln!(
                    s,
                    "  {name:<22} {:>12.0} {:>7.2}% {:>14} {:>17} {:>11}",
                    r.forwarded_pps,
                    r.loss * 100.0,
                    fmt_opt(r.instructions_per_packet, 0),
                    fmt_opt(r.frames_per_busy_iter, 2),
                    fmt_opt(r.kicks_per_packet, 3)
                );
            }
            None => {
                let _ = writeln!(s, "  {name:<22} {:>12}", "null (did not run)");
            }
        }
    }
    let ratio = |a: &Option<Row>, b: &Option<Row>, f: fn(&Row) -> Option<f64>| -> String {
        match (a.as_ref().and_then(f), b.as_ref().and_then(f)) {
            (Some(x), Some(y)) if y > 0.0 => format!("{:.2}x", x / y),
            _ => "n/a".into(),
        }
    };
    let pps = |r: &Row| Some(r.forwarded_pps);
    let ipp = |r: &Row| r.instructions_per_packet;
    let _ = writeln!(
        s,
        "  ratios: pps gannet l2 / linux l2 {}, gannet l2 / linux l3 {}, gannet l3 / linux l3 {}, gannet l2 / gannet io {}",
        ratio(&rec.gannet.l2, &rec.linux.l2, pps),
        ratio(&rec.gannet.l2, &rec.linux.l3, pps),
        ratio(&rec.gannet.l3, &rec.linux.l3, pps),
        ratio(&rec.gannet.l2, &rec.gannet.io, pps),
    );
    if rec.icount {
        let _ = writeln!(
            s,
            "          instructions/packet linux l2 / gannet l2 {}, linux l3 / gannet l2 {}",
            ratio(&rec.linux.l2, &rec.gannet.l2, ipp),
            ratio(&rec.linux.l3, &rec.gannet.l2, ipp),
        );
        let _ = writeln!(
            s,
            "          instructions/packet testpmd io / gannet io {}, testpmd mac / gannet l2 {} \
             (issue 12 target: >= 3x)",
            ratio(&rec.dpdk.io, &rec.gannet.io, ipp),
            ratio(&rec.dpdk.mac, &rec.gannet.l2, ipp),
        );
    }
    if rec.gannet.l3.is_none() {
        let _ = writeln!(
            s,
            "  gannet l3 is null: this image has no router mode, or the row failed (see notes)"
        );
    }
    s
}

/// The targets against one record (64 B): met, or missed by how much.
pub fn targets(rec: &Record) -> String {
    fn line(what: &str, got: Option<f64>, target: f64, lower_is_better: bool) -> String {
        let cmp = if lower_is_better { "<=" } else { ">=" };
        match got {
            None => format!("  {what:<44} n/a (target {cmp} {target})\n"),
            Some(g) => {
                let met = if lower_is_better {
                    g <= target
                } else {
                    g >= target
                };
                let verdict = if met {
                    "met".to_string()
                } else {
                    format!("MISSED by {:.0}%", ((g / target) - 1.0).abs() * 100.0)
                };
                format!("  {what:<44} {g:>9.3} (target {cmp} {target}): {verdict}\n")
            }
        }
    }
    let l2 = rec.gannet.l2.as_ref();
    let io = rec.gannet.io.as_ref();
    let lin = rec
        .linux
        .l3
        .as_ref()
        .or(rec.linux.l2.as_ref())
        .map(|r| r.forwarded_pps);
    let lin_best = match (rec.linux.l2.as_ref(), rec.linux.l3.as_ref()) {
        (Some(a), Some(b)) => Some(a.forwarded_pps.max(b.forwarded_pps)),
        _ => lin,
    };
    let mut s = format!("targets (issues 6 and 12, {} B):\n", rec.frame_size);
    s += &line(
        "gannet l2 instructions/packet",
        l2.and_then(|r| r.instructions_per_packet),
        200.0,
        true,
    );
    s += &format!(
        "  {:<44} {:>9}\n",
        "  (at frames per busy iteration)",
        fmt_opt(l2.and_then(|r| r.frames_per_busy_iter), 2)
    );
    s += &line(
        "gannet l2 pps / best linux pps",
        l2.zip(lin_best).map(|(r, b)| r.forwarded_pps / b),
        2.0,
        false,
    );
    s += &line(
        "gannet l2 pps / gannet io pps",
        l2.zip(io).map(|(a, b)| a.forwarded_pps / b.forwarded_pps),
        0.95,
        false,
    );
    s += &line(
        "gannet l2 kicks/packet",
        l2.and_then(|r| r.kicks_per_packet),
        0.25,
        true,
    );
    let ipp_ratio = |peer: &Option<Row>, g: Option<&Row>| {
        peer.as_ref()
            .and_then(|p| p.instructions_per_packet)
            .zip(g.and_then(|r| r.instructions_per_packet))
            .and_then(|(p, g)| (g > 0.0).then(|| p / g))
    };
    if rec.dpdk.io.is_some() || rec.dpdk.mac.is_some() {
        s += &line(
            "testpmd mac / gannet l2 instructions/packet",
            ipp_ratio(&rec.dpdk.mac, l2),
            3.0,
            false,
        );
        s += &line(
            "testpmd io / gannet io instructions/packet",
            ipp_ratio(&rec.dpdk.io, io),
            3.0,
            false,
        );
    }
    s
}

type Series = (&'static str, plotters::style::RGBColor, Vec<(f64, f64)>);
type Select = fn(&Record) -> &Option<Row>;

fn series(records: &[Record], f: fn(&Row) -> Option<f64>) -> Vec<Series> {
    use plotters::style::RGBColor;
    let pick: [(&'static str, RGBColor, Select); 7] = [
        ("gannet io", RGBColor(0x1f, 0x77, 0xb4), |r| &r.gannet.io),
        ("gannet l2", RGBColor(0x2c, 0xa0, 0x2c), |r| &r.gannet.l2),
        ("gannet l3", RGBColor(0x17, 0xbe, 0xcf), |r| &r.gannet.l3),
        ("linux l2 (bridge)", RGBColor(0xff, 0x7f, 0x0e), |r| {
            &r.linux.l2
        }),
        ("linux l3 (forwarding)", RGBColor(0xd6, 0x27, 0x28), |r| {
            &r.linux.l3
        }),
        ("testpmd io", RGBColor(0x94, 0x67, 0xbd), |r| &r.dpdk.io),
        ("testpmd mac", RGBColor(0x8c, 0x56, 0x4b), |r| &r.dpdk.mac),
    ];
    pick.iter()
        .map(|(name, c, sel)| {
            let pts = records
                .iter()
                .filter_map(|r| {
                    sel(r)
                        .as_ref()
                        .and_then(f)
                        .map(|y| (r.frame_size as f64, y))
                })
                .collect();
            (*name, *c, pts)
        })
        .filter(|(_, _, p): &Series| !p.is_empty())
        .collect()
}

fn plot(
    path: &Path,
    title: &str,
    ylabel: &str,
    data: &[Series],
    log_y: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let text = plot::register_font();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let xs = data.iter().flat_map(|(_, _, p)| p.iter().map(|q| q.0));
    let xmax = xs.clone().fold(0.0, f64::max) * 1.05 + 10.0;
    let ys = data.iter().flat_map(|(_, _, p)| p.iter().map(|q| q.1));
    let ymax = ys.clone().fold(0.0, f64::max) * 1.15;
    let ymin = ys.fold(f64::INFINITY, f64::min);
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(15);
    if text {
        builder
            .caption(title, ("sans-serif", 22))
            .x_label_area_size(45)
            .y_label_area_size(70);
    }
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            if text {
                chart
                    .configure_mesh()
                    .x_desc("frame size on the wire, FCS included (bytes)")
                    .y_desc(ylabel)
                    .label_style(("sans-serif", 14))
                    .draw()?;
            } else {
                chart.configure_mesh().x_labels(0).y_labels(0).draw()?;
            }
            for (name, c, pts) in data {
                let style = ShapeStyle::from(c).stroke_width(2);
                let s = chart.draw_series(LineSeries::new(pts.clone(), style))?;
                if text {
                    let c = *c;
                    s.label(*name).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                }
                chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
            }
            if text {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 14))
                    .position(SeriesLabelPosition::UpperRight)
                    .draw()?;
            }
        }};
    }
    if log_y {
        let lo = (ymin * 0.5).max(1.0);
        draw!(builder.build_cartesian_2d(0.0..xmax, (lo..ymax * 8.0).log_scale())?);
    } else {
        draw!(builder.build_cartesian_2d(0.0..xmax, 0.0..ymax)?);
    }
    root.present()?;
    Ok(())
}

/// Draws [`PLOT_PPS`] and [`PLOT_IPP`] (the latter only with `--icount`) under `root`.
pub fn plots(root: &Path, records: &[Record]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mode = if records.first().is_some_and(|r| r.icount) {
        "TCG, -icount"
    } else {
        "TCG"
    };
    let p = root.join(PLOT_PPS);
    plot(
        &p,
        &format!("Forwarded packets per second vs frame size ({mode}, 1 vCPU)"),
        "forwarded pps",
        &series(records, |r| Some(r.forwarded_pps)),
        false,
    )
    .map_err(|e| anyhow::anyhow!("drawing {}: {e}", p.display()))?;
    out.push(p);
    let ipp = series(records, |r| r.instructions_per_packet);
    if !ipp.is_empty() {
        let p = root.join(PLOT_IPP);
        plot(
            &p,
            "Guest instructions per forwarded packet vs frame size (-icount, log scale)",
            "guest instructions / packet",
            &ipp,
            true,
        )
        .map_err(|e| anyhow::anyhow!("drawing {}: {e}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// Parses `--sizes 64,128,…`.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .with_context(|| format!("--sizes: {x:?} is not a number"))
        })
        .collect::<Result<_>>()?;
    anyhow::ensure!(!v.is_empty(), "--sizes is empty");
    for &x in &v {
        anyhow::ensure!(
            (64..=harness::gen::MAX_SIZE).contains(&x),
            "--sizes: {x} out of range 64..={}",
            harness::gen::MAX_SIZE
        );
    }
    Ok(v)
}

/// The JSON value to print/write: one record, or `{"sweep": […]}`.
pub fn json(cfg: &PeerBenchConfig, out: &Outcome) -> Result<serde_json::Value> {
    Ok(if cfg.sweep {
        serde_json::to_value(Sweep {
            sweep: out.records.clone(),
        })?
    } else {
        serde_json::to_value(&out.records[0])?
    })
}

/// One step of a [`harness::progress::Progress`], counted done when dropped (whichever way
/// the loop body leaves).
struct Step<'a>(&'a harness::progress::Progress);

impl Drop for Step<'_> {
    fn drop(&mut self) {
        self.0.inc(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pps: f64, ipp: Option<f64>, kpp: Option<f64>) -> Option<Row> {
        Some(Row {
            forwarded_pps: pps,
            loss: 0.0,
            instructions_per_packet: ipp,
            frames_per_busy_iter: kpp.map(|_| 3.5),
            kicks_per_packet: kpp,
        })
    }

    fn rec() -> Record {
        Record {
            nic: "virtio".into(),
            accel: "tcg".into(),
            icount: true,
            cpu: Some("max".into()),
            window: 32,
            frame_size: 64,
            gannet: GannetRows {
                io: r(100.0, Some(300.0), Some(0.1)),
                l2: r(96.0, Some(320.0), Some(0.1)),
                l3: None,
            },
            linux: LinuxRows {
                l2: r(40.0, Some(6000.0), None),
                l3: r(50.0, Some(7500.0), None),
            },
            dpdk: DpdkRows {
                io: r(90.0, Some(480.0), None),
                mac: r(88.0, Some(1280.0), None),
            },
        }
    }

    #[test]
    fn record_json_shape() {
        let v = serde_json::to_value(rec()).unwrap();
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&v),
            [
                "accel",
                "cpu",
                "dpdk",
                "frame_size",
                "gannet",
                "icount",
                "linux",
                "nic",
                "window"
            ]
        );
        assert_eq!(keys(&v["gannet"]), ["io", "l2", "l3"]);
        assert_eq!(keys(&v["linux"]), ["l2", "l3"]);
        assert_eq!(keys(&v["dpdk"]), ["io", "mac"]);
        assert_eq!(v["cpu"], "max");
        assert!(v["gannet"]["l3"].is_null());
        assert_eq!(
            keys(&v["gannet"]["l2"]),
            [
                "forwarded_pps",
                "frames_per_busy_iter",
                "instructions_per_packet",
                "kicks_per_packet",
                "loss"
            ]
        );
        assert!(v["linux"]["l3"]["kicks_per_packet"].is_null());
        assert!(v["linux"]["l3"]["frames_per_busy_iter"].is_null());
        assert_eq!(v["gannet"]["l2"]["frames_per_busy_iter"], 3.5);
        let s = serde_json::to_value(Sweep {
            sweep: vec![rec(), rec()],
        })
        .unwrap();
        assert_eq!(s["sweep"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn targets_say_by_how_much() {
        let t = targets(&rec());
        // 320 vs 200: missed by 60%; 96/50 = 1.92 vs 2: missed by 4%; 0.96 >= 0.95 met;
        // testpmd mac 1280 / gannet l2 320 = 4 >= 3 met; testpmd io 480 / gannet io 300 = 1.6
        // vs 3: missed by 47%.
        assert!(t.contains("MISSED by 60%"), "{t}");
        assert!(t.contains("MISSED by 4%"), "{t}");
        assert!(t.contains("MISSED by 47%"), "{t}");
        assert_eq!(t.matches(": met").count(), 3, "{t}");
        let tab = table(&rec());
        assert!(tab.contains("testpmd io / gannet io 1.60x"), "{tab}");
        assert!(tab.contains("testpmd mac / gannet l2 4.00x"), "{tab}");
        assert!(tab.contains("-cpu max, generator window 32"), "{tab}");
        assert!(
            t.contains("(at frames per busy iteration)") && t.contains(" 3.50\n"),
            "{t}"
        );
        assert!(table(&rec()).contains("gannet l3 is null"));
        assert!(table(&rec()).contains("frames/busy iter"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("64, 128").unwrap(), [64, 128]);
        assert!(parse_sizes("63").is_err());
        assert!(parse_sizes("a").is_err());
    }
}
