//! A sweep's table, plot and JSON, the same from a whole sweep and from merged shards.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::ValueEnum;
use nvarray_model::overrides::parse_value;
use nvarray_present::plot::{write_chart, Chart, ChartError, Series};

use super::grid::{Dim, Grid};
use super::record::{Figures, Metric, PointLine, SweepFile};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PlotFormat {
    Svg,
    Png,
}

/// The extensions of the files a sweep writes beside one another (`output::sibling`).
pub const OUTPUT_EXTENSIONS: [&str; 4] = ["jsonl", "json", "svg", "png"];

/// Where a whole sweep's JSON and plot go: `out` with `.json` and `.svg` (or `.png`).
pub struct Outputs {
    pub json: PathBuf,
    pub plot: PathBuf,
}

impl Outputs {
    /// The paths, checked writable now, so a bad `--out` fails before anything runs. Every
    /// dot of `out` is kept (`output::sibling`).
    pub fn new(out: &Path, format: PlotFormat) -> Result<Self> {
        let own = OUTPUT_EXTENSIONS;
        let json = nvarray_sys::output_files::sibling(out, "json", &own);
        let plot = nvarray_sys::output_files::sibling(
            out,
            match format {
                PlotFormat::Svg => "svg",
                PlotFormat::Png => "png",
            },
            &own,
        );
        assert_ne!(json, plot, "the JSON and the plot in one file");
        nvarray_sys::output_files::check_writable(&json)?;
        nvarray_sys::output_files::check_writable(&plot)?;
        Ok(Outputs { json, plot })
    }
}

/// Writes the whole sweep's JSON and plot, then prints the table (or the JSON with
/// `print_json`) and a line for every point that was not faithful. `points` are all of the
/// grid's, in grid order.
pub fn write_sweep(
    sweep: &str,
    grid: &Grid,
    metric: Metric,
    points: &[PointLine],
    outputs: &Outputs,
    lines_path: Option<&Path>,
    print_json: bool,
) -> Result<()> {
    let figures = figures(points)?;
    let file = SweepFile::new(sweep, grid, metric, points);
    let json = serde_json::to_string_pretty(&file)?;
    std::fs::write(&outputs.json, &json)
        .with_context(|| format!("cannot write {}", outputs.json.display()))?;
    plot(grid, metric, points, &figures, &outputs.plot)?;
    if print_json {
        println!("{json}");
    } else {
        print!("{}", table(grid, metric, points, &figures, true));
        print_unfaithful(grid, points, &figures);
        println!(
            "\nwrote {}{} and {}",
            lines_path.map_or_else(String::new, |p| format!("{}, ", p.display())),
            outputs.json.display(),
            outputs.plot.display()
        );
    }
    Ok(())
}

/// The figures of every point, in the order of `points`.
pub fn figures(points: &[PointLine]) -> Result<Vec<Figures>> {
    points.iter().map(PointLine::figures).collect()
}

pub fn print_unfaithful(grid: &Grid, points: &[PointLine], figures: &[Figures]) {
    for (p, f) in points.iter().zip(figures).filter(|(_, f)| !f.faithful) {
        println!(
            "{} at {}: {}",
            f.verdict().words(),
            grid.describe(p.point),
            f.unfaithful_reason.as_deref().unwrap_or("no reason given")
        );
    }
}

/// The table: for two parameters over the whole grid, the metric with the first parameter's
/// values as rows and the second's as columns; otherwise one row per point (a column for each
/// parameter, then the rates and latencies).
pub fn table(
    grid: &Grid,
    metric: Metric,
    points: &[PointLine],
    figures: &[Figures],
    complete: bool,
) -> String {
    assert_eq!(figures.len(), points.len(), "figures of the points");
    let mut s = String::new();
    if grid.dims.len() == 2 && complete {
        let at = positions(grid, points);
        let (rows, cols) = (&grid.dims[0], &grid.dims[1]);
        assert_eq!(
            at.len(),
            rows.values.len() * cols.values.len(),
            "cells of a two-parameter table"
        );
        let _ = writeln!(
            s,
            "{} by {} (rows) and {} (columns)",
            metric.label(),
            rows.key,
            cols.key
        );
        let _ = write!(s, "{:>14}", rows.key);
        for c in &cols.values {
            let _ = write!(s, " {:>12}", format!("{}={c}", cols.key));
        }
        s.push('\n');
        for (r, rv) in rows.values.iter().enumerate() {
            let _ = write!(s, "{rv:>14}");
            for c in 0..cols.values.len() {
                // Point index: the first parameter fastest.
                let i = r + c * rows.values.len();
                let value = at[i].map_or(f64::NAN, |k| metric.of(&figures[k]));
                let _ = write!(s, " {value:>12.3}");
            }
            s.push('\n');
        }
        return s;
    }
    let widths: Vec<usize> = grid.dims.iter().map(|d| d.key.len().max(14)).collect();
    for (d, w) in grid.dims.iter().zip(&widths) {
        let _ = write!(s, "{:>w$} ", d.key);
    }
    let _ = writeln!(
        s,
        "{:>11} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "IOPS", "read MB/s", "write MB/s", "mean µs", "p50 µs", "p99 µs"
    );
    for (p, f) in points.iter().zip(figures) {
        for ((_, v), w) in grid.settings(p.point).iter().zip(&widths) {
            let _ = write!(s, "{v:>w$} ");
        }
        let _ = writeln!(
            s,
            "{:>11.0} {:>10.1} {:>10.1} {:>9.2} {:>9.2} {:>9.2}",
            f.iops,
            f.read_bandwidth_bytes_per_s / 1e6,
            f.write_bandwidth_bytes_per_s / 1e6,
            f.latency_ns.mean / 1e3,
            f.latency_ns.p50 as f64 / 1e3,
            f.latency_ns.p99 as f64 / 1e3,
        );
    }
    s
}

/// Where each of the grid's points is in `points`, if there: one pass, so a large grid's table
/// and plot do not search the points for each cell.
fn positions(grid: &Grid, points: &[PointLine]) -> Vec<Option<usize>> {
    let mut at = vec![None; grid.len()];
    for (k, p) in points.iter().enumerate() {
        if let Some(slot) = at.get_mut(p.point) {
            *slot = Some(k);
        }
    }
    at
}

/// A value as a number for the x axis, if it reads as one.
fn numeric(value: &str) -> Option<f64> {
    match parse_value(value) {
        toml::Value::Integer(i) => Some(i as f64),
        toml::Value::Float(f) => Some(f),
        _ => None,
    }
}

/// The metric against the first parameter, one curve for each combination of the others.
fn plot(
    grid: &Grid,
    metric: Metric,
    points: &[PointLine],
    figures: &[Figures],
    path: &Path,
) -> Result<(), ChartError> {
    assert_eq!(figures.len(), points.len(), "figures of the points");
    let x_dim = &grid.dims[0];
    let xs: Vec<Option<f64>> = x_dim.values.iter().map(|v| numeric(v)).collect();
    let categorical = xs.iter().any(Option::is_none);
    let x_of = |i: usize| {
        if categorical {
            i as f64
        } else {
            xs[i].expect("numeric")
        }
    };
    let log_x = log_x(&xs, categorical);
    let at = positions(grid, points);
    let per_curve = x_dim.values.len();
    let curves = grid.len() / per_curve;
    let series: Vec<Series> = (0..curves)
        .map(|c| {
            let first = c * per_curve;
            Series {
                label: curve_label(grid, figures, first),
                points: (0..per_curve)
                    .filter_map(|x| at[first + x].map(|k| (x_of(x), metric.of(&figures[k]))))
                    .collect(),
            }
        })
        .collect();
    let x_label = x_label(x_dim, categorical);
    let title = format!("{} vs {}", metric.label(), x_dim.key);
    write_chart(
        path,
        &Chart {
            title: &title,
            x_label: &x_label,
            y_label: metric.label(),
            log_x,
            log_y: false,
            series: &series,
            reference: None,
            guide_then_points: false,
        },
    )
}

/// Whether the x axis (the first parameter's values, `xs`) is drawn on a log scale.
fn log_x(xs: &[Option<f64>], categorical: bool) -> bool {
    let positive: Vec<f64> = xs.iter().flatten().copied().filter(|x| *x > 0.0).collect();
    let span = positive.iter().cloned().fold(f64::MIN, f64::max)
        / positive.iter().cloned().fold(f64::MAX, f64::min);
    // Values a hundredfold apart, or stepping by a factor (1t, 2t, 4t, ... 64t; queue depths
    // 1 to 32), read best on a log axis.
    let geometric = positive.len() >= 3 && positive.windows(2).all(|w| w[1] >= 1.5 * w[0]);
    !categorical && positive.len() == xs.len() && (span >= 100.0 || (geometric && span >= 8.0))
}

/// The label of the curve whose first point is `first`: the other parameters' settings, or
/// the device when the grid has one parameter.
fn curve_label(grid: &Grid, figures: &[Figures], first: usize) -> String {
    if grid.dims.len() == 1 {
        figures
            .first()
            .map_or_else(String::new, |f| f.device.clone())
    } else {
        grid.settings(first)[1..]
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The x axis's label: the first parameter's key, with each value's position when the
/// values are not numbers.
fn x_label(x_dim: &Dim, categorical: bool) -> String {
    if categorical {
        format!(
            "{} ({})",
            x_dim.key,
            x_dim
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{i}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        x_dim.key.clone()
    }
}
