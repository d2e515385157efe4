//! `cargo xtask bench --burst-in` (issue 12, item 1): Gannet `io`, `l2` and router on QEMU's
//! real virtio-net device with the guest's bench-only burst-in gate (`burstin=on`,
//! `unikernel::dataplane::burstin`): the poll loop leaves RX alone until a port's used ring
//! holds 224 entries (or 10 ms passed), then drains in bursts of 32, and only the drain
//! iterations are busy. The rows are measured as `bench --peer`'s Gannet rows
//! ([`crate::bench_peer`]: Δ`busy_cycles` ÷ Δ`forwarded` under `--icount`, Δ`forwarded` ÷
//! Δ`busy_iters` beside it), with the generator sending both ways ([`PeerBenchConfig::bidir`])
//! and a window per direction that lets 224 frames pile up in each RX ring.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use serde::Serialize;

use crate::bench_peer::{Outcome, PeerBenchConfig, Record, Row};

/// The guest's gate threshold: used entries a port's RX ring must hold before it drains
/// (`unikernel::dataplane::BURSTIN_USED`, 256 − 32).
pub const GUEST_USED_THRESHOLD: u64 = 224;
/// The guest's wait bound in ms (`unikernel::dataplane::BURSTIN_WAIT_MS`).
pub const GUEST_WAIT_MS: u64 = 10;
/// Default generator window per direction: 256 frames, a whole RX ring's worth, so the
/// threshold is reached with frames to spare (the rest wait in QEMU's socket).
pub const DEFAULT_WINDOW: u64 = 256;
/// The target: l2 at most this many guest instructions per packet…
pub const L2_TARGET_INSTRUCTIONS: f64 = 130.0;
/// … at no fewer frames per busy poll iteration than this.
pub const TARGET_FRAMES_PER_ITER: f64 = 30.0;

/// Frames per direction before each row's measured run (router mode: ARP resolved first).
pub const WARMUP_FRAMES: u64 = 64;

/// `--append` with `burstin=on backpressure=on` added. `backpressure=on` because a drain
/// can forward up to a whole RX ring (256 frames) into a TX ring of 256 whose completions the
/// poll iteration reaps only after its RX: the next drain's first burst would find it full
/// and drop 32 frames (`tx_ring_full`); with it the burst reaps first, inside the iteration
/// (counted busy).
///
/// # Errors
/// The line already sets `burstin=` or `backpressure=` (this run sets them).
pub fn append(user: &str) -> Result<String> {
    for key in ["burstin=", "backpressure="] {
        if user.split_whitespace().any(|kv| kv.starts_with(key)) {
            bail!("--burst-in sets burstin=on backpressure=on itself: drop {key} from --append");
        }
    }
    Ok(format!("{user} burstin=on backpressure=on")
        .trim()
        .to_string())
}

/// Check the generator window (frames per direction).
///
/// # Errors
/// Below [`GUEST_USED_THRESHOLD`]: no RX ring could fill to the threshold, so every drain
/// would wait for the 10 ms timeout.
pub fn check_window(window: u64) -> Result<()> {
    if window < GUEST_USED_THRESHOLD {
        bail!(
            "--window {window}: --burst-in needs at least {GUEST_USED_THRESHOLD} frames in \
             flight per direction (the guest drains once a port's RX used ring holds \
             {GUEST_USED_THRESHOLD} entries; fewer leave it waiting for its {GUEST_WAIT_MS} ms \
             timeout); default {DEFAULT_WINDOW}"
        );
    }
    Ok(())
}

/// The JSON record: the bench record of the three Gannet rows, and the run's gate.
#[derive(Debug, Clone, Serialize)]
pub struct BurstInRecord {
    /// Always `true`: the guest ran with `burstin=on`.
    pub burst_in: bool,
    /// The generator sent both ways.
    pub bidir: bool,
    /// The guest's threshold (used entries per RX ring).
    pub used_threshold: u64,
    /// The guest's wait bound (ms).
    pub wait_ms: u64,
    /// The rows (`linux` and `dpdk` are `null`).
    #[serde(flatten)]
    pub record: Record,
}

/// The record of a run (the first frame size's).
pub fn record(cfg: &PeerBenchConfig, out: &Outcome) -> Option<BurstInRecord> {
    out.records.first().map(|r| BurstInRecord {
        burst_in: true,
        bidir: cfg.bidir,
        used_threshold: GUEST_USED_THRESHOLD,
        wait_ms: GUEST_WAIT_MS,
        record: r.clone(),
    })
}

/// The table: one line per mode (forwarded pps, loss, instructions per packet, frames per
/// busy poll iteration, kicks per packet), headed by the accelerator and window.
pub fn table(rec: &Record, bidir: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "burst-in (burstin=on: drain at {GUEST_USED_THRESHOLD} used RX entries or {GUEST_WAIT_MS} ms), \
         frame size {} B, accel {}{}, -cpu {}, generator window {} per direction{}",
        rec.frame_size,
        rec.accel,
        if rec.icount { " + icount" } else { "" },
        rec.cpu.as_deref().unwrap_or("default (qemu64)"),
        rec.window,
        if bidir {
            ", both directions"
        } else {
            ", port 0 -> port 1 only"
        }
    );
    let _ = writeln!(
        s,
        "  {:<8} {:>12} {:>8} {:>14} {:>17} {:>11}",
        "mode", "fwd pps", "loss", "instr/packet", "frames/busy iter", "kicks/pkt"
    );
    let rows: [(&str, &Option<Row>); 3] = [
        ("io", &rec.gannet.io),
        ("l2", &rec.gannet.l2),
        ("router", &rec.gannet.l3),
    ];
    for (name, r) in rows {
        let line = match r {
            Some(r) => format!(
                "  {name:<8} {:>12.0} {:>7.2}% {:>14} {:>17} {:>11}",
                r.forwarded_pps,
                r.loss * 100.0,
                opt(r.instructions_per_packet, 1),
                opt(r.frames_per_busy_iter, 2),
                opt(r.kicks_per_packet, 3)
            ),
            None => format!("  {name:<8} {:>12}", "not run"),
        };
        let _ = writeln!(s, "{line}");
    }
    s
}

/// The target line for l2: met, missed (and by what), or not measurable (no
/// `--icount`, or the row did not run).
pub fn verdict(rec: &Record) -> String {
    let target = format!(
        "l2 <= {L2_TARGET_INSTRUCTIONS} instructions/packet at >= {TARGET_FRAMES_PER_ITER} frames/busy iter"
    );
    let Some(l2) = rec.gannet.l2.as_ref() else {
        return format!("target {target}: n/a (the l2 row did not run)\n");
    };
    let (Some(ipp), Some(fpi)) = (l2.instructions_per_packet, l2.frames_per_busy_iter) else {
        return format!("target {target}: n/a (instructions need --icount)\n");
    };
    let mut missed = Vec::new();
    if ipp > L2_TARGET_INSTRUCTIONS {
        missed.push(format!("{ipp:.1} instructions/packet"));
    }
    if fpi < TARGET_FRAMES_PER_ITER {
        missed.push(format!("{fpi:.2} frames/busy iter"));
    }
    if missed.is_empty() {
        format!("target {target}: met ({ipp:.1} at {fpi:.2})\n")
    } else {
        format!("target {target}: MISSED ({})\n", missed.join(", "))
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "null".to_string(), |v| format!("{v:.prec$}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_peer::{DpdkRows, GannetRows, LinuxRows};

    fn row(ipp: Option<f64>, fpi: f64) -> Option<Row> {
        Some(Row {
            forwarded_pps: 20_000.0,
            loss: 0.0,
            instructions_per_packet: ipp,
            frames_per_busy_iter: Some(fpi),
            kicks_per_packet: Some(0.05),
        })
    }

    fn rec(l2: Option<Row>) -> Record {
        Record {
            nic: "virtio".into(),
            accel: "tcg".into(),
            icount: true,
            cpu: None,
            window: 256,
            frame_size: 64,
            gannet: GannetRows {
                io: row(Some(120.0), 40.0),
                l2,
                l3: None,
            },
            linux: LinuxRows::default(),
            dpdk: DpdkRows::default(),
        }
    }

    #[test]
    fn append_adds_burstin_and_backpressure_and_refuses_a_user_setting() {
        assert_eq!(append("").unwrap(), "burstin=on backpressure=on");
        assert_eq!(
            append("mode=io log=warn").unwrap(),
            "mode=io log=warn burstin=on backpressure=on"
        );
        let e = append("burstin=off").unwrap_err().to_string();
        assert!(e.contains("drop burstin="), "{e}");
        let e = append("log=warn backpressure=off").unwrap_err().to_string();
        assert!(e.contains("drop backpressure="), "{e}");
    }

    #[test]
    fn window_below_the_threshold_is_refused() {
        assert!(check_window(224).is_ok());
        assert!(check_window(DEFAULT_WINDOW).is_ok());
        let e = check_window(223).unwrap_err().to_string();
        assert!(
            e.contains("--window 223") && e.contains("at least 224"),
            "{e}"
        );
    }

    #[test]
    fn verdict_names_what_missed() {
        assert_eq!(
            verdict(&rec(row(Some(125.0), 31.0))),
            "target l2 <= 130 instructions/packet at >= 30 frames/busy iter: met (125.0 at 31.00)\n"
        );
        let v = verdict(&rec(row(Some(140.5), 12.0)));
        assert!(
            v.contains("MISSED (140.5 instructions/packet, 12.00 frames/busy iter)"),
            "{v}"
        );
        assert!(verdict(&rec(row(None, 40.0))).contains("n/a (instructions need --icount)"));
        assert!(verdict(&rec(None)).contains("n/a (the l2 row did not run)"));
    }

    #[test]
    fn table_has_a_line_per_mode_and_says_which_accelerator() {
        let t = table(&rec(row(Some(125.04), 31.0)), true);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        assert!(lines[0].contains("accel tcg + icount") && lines[0].contains("both directions"));
        assert!(
            lines[3].starts_with("  l2 ")
                && lines[3].contains("125.0")
                && lines[3].contains("31.00")
        );
        assert!(lines[4].contains("router") && lines[4].contains("not run"));
    }
}
