//! PNG plots of a run: throughput vs clients (one panel per workload) and latency CDFs
//! (one file per workload, every client count of both systems, percentiles on a "nines"
//! axis so the tail is visible). Text needs a TTF font (DejaVu Sans by default).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::report::{Results, Row};

const CAIRN_SHADES: [RGBColor; 4] = [
    RGBColor(107, 174, 214),
    RGBColor(49, 130, 189),
    RGBColor(8, 81, 156),
    RGBColor(8, 48, 107),
];
const ETCD_SHADES: [RGBColor; 4] = [
    RGBColor(252, 146, 114),
    RGBColor(239, 59, 44),
    RGBColor(203, 24, 29),
    RGBColor(103, 0, 13),
];

/// (system, color, (x, ops/s) points) of one throughput line.
type Series = (&'static str, RGBColor, Vec<(f64, f64)>);

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

fn load_font(path: &Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "reading font {} (Debian: apt-get install fonts-dejavu-core)",
            path.display()
        )
    })?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{} is not a usable font", path.display()))
}

/// Renders every plot into `dir`; returns the files written.
pub fn render(res: &Results, dir: &Path, font: &Path) -> Result<Vec<PathBuf>> {
    load_font(font)?;
    let mut files = Vec::new();
    let value_bytes = res.settings.value_bytes;
    let workloads: Vec<String> = {
        let mut w: Vec<String> = Vec::new();
        for r in res.rows.iter().filter(|r| r.value_bytes == value_bytes) {
            if !w.contains(&r.workload) {
                w.push(r.workload.clone());
            }
        }
        w
    };
    if workloads.is_empty() {
        return Ok(files);
    }
    let path = dir.join("throughput.png");
    throughput(res, &workloads, value_bytes, &path)?;
    files.push(path);
    for w in &workloads {
        let path = dir.join(format!("latency-cdf-{w}.png"));
        latency_cdf(res, w, value_bytes, &path)?;
        files.push(path);
    }
    Ok(files)
}

fn clients_of(res: &Results, value_bytes: usize) -> Vec<usize> {
    let mut c: Vec<usize> = res
        .rows
        .iter()
        .filter(|r| r.value_bytes == value_bytes)
        .map(|r| r.clients)
        .collect();
    c.sort_unstable();
    c.dedup();
    c
}

fn throughput(res: &Results, workloads: &[String], value_bytes: usize, path: &Path) -> Result<()> {
    let clients = clients_of(res, value_bytes);
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            &format!(
                "Throughput vs concurrent clients ({value_bytes} B values, {} mode)",
                res.mode
            ),
            ("sans-serif", 26),
        )
        .map_err(err)?;
    let cols = if workloads.len() > 1 { 2 } else { 1 };
    let rows = workloads.len().div_ceil(cols);
    let panels = root.split_evenly((rows, cols));
    for (area, w) in panels.iter().zip(workloads) {
        let series = throughput_series(res, w, &clients, value_bytes);
        throughput_panel(area, w, series, &clients)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// cairn's and etcd's ops/s of workload `w`, x = index of the client count.
fn throughput_series(res: &Results, w: &str, clients: &[usize], value_bytes: usize) -> Vec<Series> {
    [("cairn", CAIRN_SHADES[2]), ("etcd", ETCD_SHADES[2])]
        .into_iter()
        .map(|(sys, color)| {
            let pts = clients
                .iter()
                .enumerate()
                .filter_map(|(i, c)| {
                    res.find(sys, w, *c, value_bytes)
                        .map(|r| (i as f64, r.ops_per_s))
                })
                .collect();
            (sys, color, pts)
        })
        .collect()
}

/// One workload's panel: a line with markers per system, client counts on the x axis.
fn throughput_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    w: &str,
    series: Vec<Series>,
    clients: &[usize],
) -> Result<()> {
    let ymax = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y))
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = clients.len().max(1) as f64;
    let labels = clients.to_vec();
    let mut chart = ChartBuilder::on(area)
        .caption(w, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.3f64..(n - 0.7), 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(clients.len().max(2))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.05 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc("concurrent clients")
        .y_desc("ops/s")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    for (sys, color, pts) in series {
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(3)))
            .map_err(err)?
            .label(sys)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 5, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(err)
}

/// Percentile q as "nines": 0 → 0, 0.9 → 1, 0.99 → 2, ...
fn nines(q: f64) -> f64 {
    -(1.0 - q).max(1e-6).log10()
}

/// The y range of a latency plot: every row's percentiles below p100, with a margin;
/// `None` when there is nothing to draw.
fn latency_bounds(rows: &[&Row]) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for r in rows {
        for (q, ms) in &r.latency_cdf {
            if *q < 1.0 && *ms > 0.0 {
                lo = lo.min(*ms);
                hi = hi.max(*ms);
            }
        }
    }
    if hi <= 0.0 {
        return None;
    }
    Some(((lo / 1.5).max(0.001), hi * 1.5))
}

/// A row's (nines, ms) points below p100.
fn cdf_points(r: &Row) -> Vec<(f64, f64)> {
    r.latency_cdf
        .iter()
        .filter(|(q, ms)| *q < 1.0 && *ms > 0.0)
        .map(|(q, ms)| (nines(*q), *ms))
        .collect()
}

fn percentile_label(x: &f64) -> String {
    match x.round() as i64 {
        0 => "p0".into(),
        1 => "p90".into(),
        2 => "p99".into(),
        3 => "p99.9".into(),
        4 => "p99.99".into(),
        _ => String::new(),
    }
}

fn latency_label(y: &f64) -> String {
    if *y >= 10.0 {
        format!("{y:.0}")
    } else if *y >= 1.0 {
        format!("{y:.1}")
    } else {
        format!("{y:.2}")
    }
}

type CdfChart<'a, 'b> =
    ChartContext<'a, BitMapBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// One latency line: solid for cairn, dashed for etcd, with its legend entry.
fn cdf_line(
    chart: &mut CdfChart<'_, '_>,
    sys: &str,
    label: String,
    color: RGBColor,
    pts: Vec<(f64, f64)>,
) -> Result<()> {
    if sys == "cairn" {
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(3)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    } else {
        chart
            .draw_series(DashedLineSeries::new(pts, 10, 6, color.stroke_width(3)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(
                    vec![(x, y), (x + 8, y), (x + 14, y), (x + 24, y)],
                    color.stroke_width(3),
                )
            });
    }
    Ok(())
}

fn latency_cdf(res: &Results, workload: &str, value_bytes: usize, path: &Path) -> Result<()> {
    let clients = clients_of(res, value_bytes);
    let rows: Vec<_> = res
        .rows
        .iter()
        .filter(|r| r.workload == workload && r.value_bytes == value_bytes)
        .collect();
    let Some((lo, hi)) = latency_bounds(&rows) else {
        return Ok(());
    };
    let root = BitMapBackend::new(path, (1200, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Latency by percentile: {workload} ({value_bytes} B values; cairn solid, etcd dashed)"),
            ("sans-serif", 24),
        )
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..4.2f64, (lo..hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&percentile_label)
        .y_label_formatter(&latency_label)
        .x_desc("percentile")
        .y_desc("latency (ms, log scale)")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    for (sys, shades) in [("cairn", CAIRN_SHADES), ("etcd", ETCD_SHADES)] {
        for (i, c) in clients.iter().enumerate() {
            let Some(r) = rows.iter().find(|r| r.system == sys && r.clients == *c) else {
                continue;
            };
            let color = shades[i.min(shades.len() - 1)];
            let pts = cdf_points(r);
            cdf_line(&mut chart, sys, format!("{sys} c={c}"), color, pts)?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
