//! The summary's plots (`cargo xtask report`), drawn from `results/`: `docs/plots/sim.png`
//! (guest instructions per packet of the deterministic benchmark, per mode, frame size and K)
//! and `docs/plots/peer.png` (end-to-end forwarded pps, Gannet beside the Linux and testpmd
//! peers of the same run), `docs/plots/search-latency.png` (the latency CDFs of
//! `bench --search`'s first row at 10, 50 and 90 % of NDR) and `docs/plots/search-sizes.png`
//! (NDR and PDR per frame size: throughput against size, RFC 2544 §26.1's figure). A file whose
//! results are missing is not drawn.

use std::path::{Path, PathBuf};

use crate::summary::{self, Results};
use anyhow::Result;
use plotters::style::RGBColor;

const GANNET: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const PEER: RGBColor = RGBColor(0x7f, 0x7f, 0x7f);

/// One horizontal bar: label, value, colour.
type Bar = (String, f64, RGBColor);

/// Draw the plots whose results are present into `dir`; returns the files written.
///
/// # Errors
/// A plot cannot be drawn or written (named).
pub fn plots(r: &Results, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let sim: Vec<Bar> = summary::sim_records(r)
        .into_iter()
        .map(|s| {
            (
                format!("{} @ {:.0} fr/iter", s.name(), s.frames_per_busy_iter),
                s.instructions_per_packet,
                GANNET,
            )
        })
        .collect();
    if !sim.is_empty() {
        let p = dir.join("sim.png");
        bars(
            &p,
            "bench sim: guest instructions per packet (TCG -icount, deterministic)",
            "guest instructions / packet",
            &sim,
        )
        .map_err(|e| anyhow::anyhow!("drawing {}: {e}", p.display()))?;
        out.push(p);
    }
    if let Some((e, rec)) = summary::peer_record(r) {
        let mut peer: Vec<Bar> = Vec::new();
        for (label, path, colour) in [
            ("Gannet io", ["gannet", "io"], GANNET),
            ("Gannet l2", ["gannet", "l2"], GANNET),
            ("Gannet router", ["gannet", "l3"], GANNET),
            ("testpmd io", ["dpdk", "io"], PEER),
            ("testpmd mac", ["dpdk", "mac"], PEER),
            ("Linux bridge", ["linux", "l2"], PEER),
            ("Linux IPv4 fwd", ["linux", "l3"], PEER),
        ] {
            if let Some(pps) = rec[path[0]][path[1]]["forwarded_pps"].as_f64() {
                peer.push((label.to_string(), pps, colour));
            }
        }
        if !peer.is_empty() {
            let p = dir.join("peer.png");
            let size = rec["frame_size"].as_u64().unwrap_or(64);
            bars(
                &p,
                &format!(
                    "Forwarded pps, {size} B, one vCPU each, same run ({}, wall clock)",
                    e.accel
                ),
                "forwarded packets per second",
                &peer,
            )
            .map_err(|e| anyhow::anyhow!("drawing {}: {e}", p.display()))?;
            out.push(p);
        }
    }
    if let Some(p) = search_sizes(r, dir)? {
        out.push(p);
    }
    if let Some(e) = r.files.get("search") {
        let row = &e.result["rows"][0];
        let name = row["sizes"]["name"].as_str().unwrap_or("?");
        let curves: Vec<(String, Vec<(f64, f64)>)> = row["latency"]
            .as_array()
            .map(|ls| {
                ls.iter()
                    .filter_map(|l| {
                        let pts = l["trial"]["latency"]["cdf"]
                            .as_array()?
                            .iter()
                            .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
                            .collect::<Vec<_>>();
                        Some((
                            format!(
                                "{:.0} % of NDR ({:.0} fps)",
                                l["fraction"].as_f64()? * 100.0,
                                l["trial"]["rate_pps"].as_f64()?
                            ),
                            pts,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !curves.is_empty() {
            let p = dir.join("search-latency.png");
            cdf(
                &p,
                &format!(
                    "bench --search {name} B: latency CDF at fractions of NDR ({}, wall clock)",
                    e.accel
                ),
                &curves,
            )
            .map_err(|e| anyhow::anyhow!("drawing {}: {e}", p.display()))?;
            out.push(p);
        }
    }
    Ok(out)
}

/// `search-sizes.png`: NDR and PDR offered fps of every row of `results/search.json` (one per
/// frame size, IMIX last), `None` without search results.
fn search_sizes(r: &Results, dir: &Path) -> Result<Option<PathBuf>> {
    let Some(e) = r.files.get("search") else {
        return Ok(None);
    };
    let mut data: Vec<Bar> = Vec::new();
    for row in e.result["rows"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let name = match row["sizes"]["name"].as_str().unwrap_or("?") {
            "imix" => "IMIX".to_string(),
            n => format!("{n} B"),
        };
        for (k, colour) in [("ndr", GANNET), ("pdr", PEER)] {
            if let Some(pps) = row[k]["pps"].as_f64() {
                data.push((format!("{name} {}", k.to_uppercase()), pps, colour));
            }
        }
    }
    if data.is_empty() {
        return Ok(None);
    }
    let p = dir.join("search-sizes.png");
    bars(
        &p,
        &format!(
            "bench --search: NDR (0 loss) and PDR offered fps per frame size ({}, wall clock)",
            e.accel
        ),
        "offered frames per second",
        &data,
    )
    .map_err(|err| anyhow::anyhow!("drawing {}: {err}", p.display()))?;
    Ok(Some(p))
}

/// Latency CDFs: x latency in µs (log scale), y the fraction of frames at or below it, one
/// line per curve.
fn cdf(
    path: &Path,
    title: &str,
    curves: &[(String, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let text = plot::register_font();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let xs = curves.iter().flat_map(|c| c.1.iter().map(|p| p.0));
    let xmin = xs.clone().fold(f64::INFINITY, f64::min).max(0.1) * 0.8;
    let xmax = xs.fold(0.0, f64::max).max(xmin * 10.0) * 1.2;
    let root = BitMapBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(15);
    if text {
        builder
            .caption(title, ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(60);
    }
    let mut chart = builder.build_cartesian_2d((xmin..xmax).log_scale(), 0.0..1.0)?;
    if text {
        chart
            .configure_mesh()
            .x_desc("latency, µs (host send to host receive)")
            .y_desc("fraction of frames")
            .label_style(("sans-serif", 14))
            .draw()?;
    } else {
        chart.configure_mesh().x_labels(0).y_labels(0).draw()?;
    }
    for (i, (label, pts)) in curves.iter().enumerate() {
        let c = Palette99::pick(i).to_rgba();
        let s = chart.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?;
        if text {
            s.label(label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
            });
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// A horizontal bar chart of `data`, top to bottom in order, each bar's value at its end.
fn bars(
    path: &Path,
    title: &str,
    xlabel: &str,
    data: &[Bar],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let text = plot::register_font();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let n = data.len();
    let xmax = data.iter().map(|b| b.1).fold(0.0, f64::max) * 1.2 + 1.0;
    let height = 120 + 34 * n as u32;
    let root = BitMapBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(15);
    if text {
        builder
            .caption(title, ("sans-serif", 20))
            .x_label_area_size(40)
            .y_label_area_size(250);
    }
    let mut chart = builder.build_cartesian_2d(0.0..xmax, 0.0..n as f64)?;
    // Bar i is drawn from the top: row n-1-i of the y axis.
    let label_of = |y: &f64| -> String {
        let row = n as f64 - 1.0 - y.floor();
        if y.fract() == 0.0 || row < 0.0 {
            return String::new();
        }
        data.get(row as usize)
            .map_or(String::new(), |b| b.0.clone())
    };
    if text {
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(xlabel)
            .y_labels(2 * n + 1)
            .y_label_formatter(&label_of)
            .label_style(("sans-serif", 14))
            .draw()?;
    } else {
        chart.configure_mesh().x_labels(0).y_labels(0).draw()?;
    }
    for (i, (_, v, c)) in data.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + 0.15), (*v, y + 0.85)],
            c.filled(),
        )))?;
        if text {
            chart.draw_series(std::iter::once(Text::new(
                format_value(*v),
                (*v + xmax * 0.01, y + 0.65),
                ("sans-serif", 13),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}

fn format_value(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.0}", v)
    } else {
        format!("{v:.2}")
    }
}
