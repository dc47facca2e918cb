//! PNG plots of a run, nemesis intervals shaded on both:
//!
//! - `latency.png`: the latency (log scale) of every operation answered on its first
//!   send, at its invocation time, by outcome (ok / fail); operations that needed a
//!   resend under their `request_id` (their first answer was lost or indeterminate) as
//!   marks along the top at their invocation time.
//! - `throughput.png`: operations answered per second by outcome, and operations that
//!   needed a resend, by invocation time.
//!
//! Text needs a TTF font: DejaVu Sans (`fonts-dejavu-core`) or `$CAIRN_PLOT_FONT`.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use super::history::{NemesisInterval, Outcome, Record};

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const SIZE: (u32, u32) = (1400, 560);
const SHADE: RGBColor = RGBColor(255, 214, 170);
const OK: RGBColor = RGBColor(49, 130, 189);
const FAIL: RGBColor = RGBColor(230, 85, 13);
const INFO: RGBColor = RGBColor(200, 20, 20);

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting: {e:?}")
}

fn load_font() -> Result<()> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let path = std::env::var("CAIRN_PLOT_FONT").unwrap_or_else(|_| FONT.to_string());
            let bytes = std::fs::read(&path).map_err(|e| {
                format!("font {path}: {e} (Debian: apt-get install fonts-dejavu-core)")
            })?;
            register_font(
                "sans-serif",
                FontStyle::Normal,
                Box::leak(bytes.into_boxed_slice()),
            )
            .map_err(|_| format!("{path} is not a usable font"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

pub fn render(dir: &Path, records: &[Record], nemesis: &[NemesisInterval]) -> Result<()> {
    load_font()?;
    let end = records
        .iter()
        .map(|r| r.complete.unwrap_or(r.invoke))
        .chain(nemesis.iter().filter_map(|n| n.end))
        .max()
        .unwrap_or(1_000_000);
    let t_max = secs(end).ceil().max(1.0);
    latency(&dir.join("latency.png"), records, nemesis, t_max)?;
    throughput(&dir.join("throughput.png"), records, nemesis, t_max)
}

fn shade<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    nemesis: &[NemesisInterval],
    t_max: f64,
    (y_lo, y_hi): (f64, f64),
) -> Result<()>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(nemesis.iter().map(|n| {
            let end = n.end.map_or(t_max, secs);
            Rectangle::new(
                [(secs(n.start), y_lo), (end, y_hi)],
                SHADE.mix(0.5).filled(),
            )
        }))
        .map_err(err)?;
    // Alternate two label heights so labels of short, close intervals do not overlap.
    chart
        .draw_series(nemesis.iter().enumerate().map(|(i, n)| {
            let y = if i % 2 == 0 {
                y_hi
            } else {
                y_lo + (y_hi - y_lo) * 0.93
            };
            Text::new(
                n.kind.clone(),
                (secs(n.start), y),
                ("sans-serif", 11).into_font(),
            )
        }))
        .map_err(err)?;
    Ok(())
}

fn latency(path: &Path, records: &[Record], nemesis: &[NemesisInterval], t_max: f64) -> Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    // Resent operations' windows span their resends (up to the end of the run): their
    // latency says nothing about the cluster, so they are marked instead.
    let ms = |r: &Record| {
        r.complete
            .filter(|_| r.attempts == 1)
            .map(|c| (c.saturating_sub(r.invoke) as f64 / 1e3).max(0.05))
    };
    let y_hi = records.iter().filter_map(ms).fold(10.0f64, f64::max) * 2.0;
    let y_lo = 0.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "operation latency (nemesis intervals shaded)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, (y_lo..y_hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc("latency (ms)")
        .draw()
        .map_err(err)?;
    shade(&mut chart, nemesis, t_max, (y_lo, y_hi / 1.5))?;
    for (outcome, color, label) in [(Outcome::Ok, OK, "ok"), (Outcome::Fail, FAIL, "fail")] {
        chart
            .draw_series(
                records
                    .iter()
                    .filter(|r| r.outcome == outcome)
                    .filter_map(|r| Some((secs(r.invoke), ms(r)?)))
                    .map(move |p| Circle::new(p, 1, color.filled())),
            )
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
    }
    chart
        .draw_series(
            records
                .iter()
                .filter(|r| r.outcome == Outcome::Info || r.attempts > 1)
                .map(|r| Cross::new((secs(r.invoke), y_hi / 1.2), 3, INFO)),
        )
        .map_err(err)?
        .label("resent or still indeterminate, at invocation")
        .legend(|(x, y)| Cross::new((x, y), 4, INFO));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Operations per one-second bucket: (ok, fail, resent or still indeterminate), each
/// counted at its completion, the last at its invocation.
fn per_second(records: &[Record], t_max: f64) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let buckets = t_max as usize + 1;
    let mut ok = vec![0u32; buckets];
    let mut fail = vec![0u32; buckets];
    let mut info = vec![0u32; buckets];
    for r in records {
        let (series, t) = match (r.outcome, r.complete) {
            _ if r.attempts > 1 => (&mut info, r.invoke),
            (Outcome::Ok, Some(c)) => (&mut ok, c),
            (Outcome::Fail, Some(c)) => (&mut fail, c),
            _ => (&mut info, r.invoke),
        };
        if let Some(b) = series.get_mut((t / 1_000_000) as usize) {
            *b += 1;
        }
    }
    (ok, fail, info)
}

fn throughput(
    path: &Path,
    records: &[Record],
    nemesis: &[NemesisInterval],
    t_max: f64,
) -> Result<()> {
    let (ok, fail, info) = per_second(records, t_max);
    let y_hi = ok
        .iter()
        .chain(&fail)
        .chain(&info)
        .copied()
        .max()
        .unwrap_or(1) as f64
        * 1.15
        + 1.0;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "operations per second (nemesis intervals shaded)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..t_max, 0f64..y_hi)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc("operations / s")
        .draw()
        .map_err(err)?;
    shade(&mut chart, nemesis, t_max, (0.0, y_hi * 0.95))?;
    for (series, color, label) in [
        (&ok, OK, "ok"),
        (&fail, FAIL, "fail"),
        (&info, INFO, "resent or still indeterminate"),
    ] {
        chart
            .draw_series(LineSeries::new(
                series
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (i as f64 + 0.5, f64::from(*n))),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
