//! Result tables and the machine-readable bench record.

use std::fmt::Write as _;

use serde::Serialize;

use harness::gen::GenReport;

/// The `cargo xtask bench` JSON record.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct BenchResult {
    /// Frame size on the wire, FCS included.
    pub frame_size: usize,
    /// Measured sending time.
    pub seconds: f64,
    pub offered_pps: f64,
    /// The generator's `received_pps`.
    pub forwarded_pps: f64,
    pub loss: f64,
    /// Guest `busy_cycles / forwarded` from the final `STATS` line.
    pub guest_cycles_per_packet: Option<f64>,
    /// Guest `forwarded / busy_iters` from the final `STATS` line: frames per busy poll
    /// iteration, the batch `guest_cycles_per_packet` was amortised over.
    pub frames_per_busy_iter: Option<f64>,
    /// Guest `kicks / forwarded` from the final `STATS` line.
    pub kicks_per_packet: Option<f64>,
    /// "tcg" or "kvm".
    pub accel: String,
    /// Forwarding mode reported by the guest (`STATS` `mode`).
    pub mode: Option<String>,
    pub icount: bool,
    /// With several port pairs (`--nics 4 --cpus 2` …): one entry per forwarding core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_core: Option<Vec<PerCore>>,
}

/// One forwarding core's share of a multi-pair run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PerCore {
    /// CPU number (it forwards port pair `cpu`: ports `2·cpu`, `2·cpu + 1`).
    pub cpu: usize,
    /// Frames per second its pair's generator received.
    pub forwarded_pps: f64,
    /// That core's `busy_cycles / forwarded` from the final STATS `per_cpu` entry.
    pub guest_cycles_per_packet: Option<f64>,
    /// That core's frames per busy poll iteration (`forwarded / busy_iters`), the batch its
    /// cycles per packet were amortised over.
    pub frames_per_busy_iter: Option<f64>,
    /// That core's TLB shootdown counters (pages unmapped, batches, requests, IPIs, flushes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tlb: Option<netstack::stats::TlbCpuStats>,
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.prec$}"))
}

/// Formats a two-column table.
pub fn table(rows: &[(&str, String)]) -> String {
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut s = String::new();
    for (k, v) in rows {
        let _ = writeln!(s, "  {k:<w$}  {v}");
    }
    s
}

/// The generator's results table.
pub fn gen_table(r: &GenReport) -> String {
    let mut rows: Vec<(String, String)> = [
        ("sent", r.sent.to_string()),
        ("received", r.received.to_string()),
        ("loss", format!("{:.4} ({:.2}%)", r.loss, r.loss * 100.0)),
        ("duplicates", r.duplicates.to_string()),
        ("reordered", r.reordered.to_string()),
        ("bad", r.bad.to_string()),
        ("offered_pps", format!("{:.0}", r.offered_pps)),
        ("received_pps", format!("{:.0}", r.received_pps)),
        ("seconds", format!("{:.3}", r.seconds)),
        ("longest_gap_ms", format!("{:.1}", r.longest_gap_ms)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if r.directions.len() > 1 {
        for d in &r.directions {
            let (from, to) = (d.base + d.dir, d.base + 1 - d.dir);
            rows.push((
                format!("port{from}->port{to}"),
                format!(
                    "sent {} received {} bad {} dup {} reord {}",
                    d.sent, d.received, d.bad, d.duplicates, d.reordered
                ),
            ));
        }
    }
    if r.stray > 0 {
        rows.push(("stray (ignored)".to_string(), r.stray.to_string()));
    }
    let rows: Vec<(&str, String)> = rows.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut s = table(&rows);
    for w in &r.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    s
}

/// The `run` / `bench` results table.
pub fn bench_table(b: &BenchResult) -> String {
    table(&[
        ("accel", b.accel.clone()),
        ("icount", b.icount.to_string()),
        ("mode", b.mode.clone().unwrap_or_else(|| "n/a".into())),
        ("frame size", format!("{} B", b.frame_size)),
        ("seconds", format!("{:.3}", b.seconds)),
        ("offered pps", format!("{:.0}", b.offered_pps)),
        ("forwarded pps", format!("{:.0}", b.forwarded_pps)),
        ("LOSS", format!("{:.2}%", b.loss * 100.0)),
        ("guest cycles/packet", fmt_opt(b.guest_cycles_per_packet, 0)),
        ("frames/busy iteration", fmt_opt(b.frames_per_busy_iter, 2)),
        ("kicks/packet", fmt_opt(b.kicks_per_packet, 3)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_json_keys() {
        let v = serde_json::to_value(BenchResult::default()).unwrap();
        let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "accel",
                "forwarded_pps",
                "frame_size",
                "frames_per_busy_iter",
                "guest_cycles_per_packet",
                "icount",
                "kicks_per_packet",
                "loss",
                "mode",
                "offered_pps",
                "seconds"
            ]
        );
        assert!(bench_table(&BenchResult::default()).contains("LOSS"));
        let b = BenchResult {
            guest_cycles_per_packet: Some(350.0),
            frames_per_busy_iter: Some(4.25),
            ..BenchResult::default()
        };
        assert!(bench_table(&b).contains("frames/busy iteration  4.25"));
    }
}
