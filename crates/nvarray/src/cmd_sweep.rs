//! `nvarray sim sweep` and `nvarray bench sweep`: one parameter over a list of values,
//! optionally a second one as separate curves (e.g. memory latency x controller count, Moneta's
//! sensitivity figure). The engine that runs each point is the caller's `Runner`.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use nvarray_model::overrides::parse_value;
use nvarray_model::{apply_overrides, DeviceConfig};
use nvarray_report::RunReport;
use nvarray_workload::Workload;
use serde::Serialize;

use crate::cmd_sim::RunArgs;
use crate::input_error;
use crate::plot::{write_chart, Chart, Series};
use crate::progress::Progress;

/// Runs one point with some engine, calling the progress callback with the fraction done.
pub type Runner<'a> =
    dyn FnMut(&DeviceConfig, &Workload, &mut dyn FnMut(f64)) -> Result<RunReport> + 'a;

/// What to vary and what to write; the device, workload and engine come from the command.
#[derive(Args, Debug)]
pub struct SweepSpec {
    /// Parameter to vary: a fio key (bs, iodepth, numjobs, rwmixread, rw, ...) or a dotted device
    /// key (memory.controllers, controller.policy, ...). `memory.latency_ns` sets both the read
    /// and the write latency. Required.
    #[arg(long, value_name = "KEY")]
    pub param: String,
    /// Values of --param, comma-separated (e.g. `4ns,16ns,64ns,256ns,1us,4us` or `512,4k,64k`),
    /// in the units of the key (a time's default unit is its key's). Required.
    #[arg(long, value_name = "LIST", value_delimiter = ',', required = true)]
    pub values: Vec<String>,
    /// A second parameter drawn as one curve per value (e.g. memory.controllers) [default:
    /// none, one curve].
    #[arg(long, value_name = "KEY", requires = "series_values")]
    pub series: Option<String>,
    /// Values of --series, comma-separated (required with --series).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "series")]
    pub series_values: Vec<String>,
    /// What the table's sweep columns and the plot show.
    #[arg(long, value_enum, default_value_t = Metric::Bandwidth)]
    pub metric: Metric,
    /// Output path without extension: writes PATH.json and PATH.svg (or .png) [default:
    /// sweep-PARAM in the current directory, dots as dashes].
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Plot format.
    #[arg(long, value_enum, default_value_t = PlotFormat::Svg)]
    pub plot: PlotFormat,
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Read + write bandwidth, GB/s.
    Bandwidth,
    /// Requests per second.
    Iops,
    /// Mean latency, µs.
    Mean,
    /// Median latency, µs.
    P50,
    /// 99th percentile latency, µs.
    P99,
    /// 99.9th percentile latency, µs.
    P999,
}

impl Metric {
    fn of(self, r: &RunReport) -> f64 {
        let t = &r.totals;
        match self {
            Metric::Bandwidth => {
                (t.read_bandwidth_bytes_per_s + t.write_bandwidth_bytes_per_s) / 1e9
            }
            Metric::Iops => t.iops,
            Metric::Mean => t.latency_ns.mean / 1e3,
            Metric::P50 => t.latency_ns.p50 as f64 / 1e3,
            Metric::P99 => t.latency_ns.p99 as f64 / 1e3,
            Metric::P999 => t.latency_ns.p999 as f64 / 1e3,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Metric::Bandwidth => "bandwidth (GB/s)",
            Metric::Iops => "IOPS",
            Metric::Mean => "mean latency (µs)",
            Metric::P50 => "p50 latency (µs)",
            Metric::P99 => "p99 latency (µs)",
            Metric::P999 => "p99.9 latency (µs)",
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PlotFormat {
    Svg,
    Png,
}

#[derive(Serialize)]
struct SweepPoint {
    value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    series: Option<String>,
    report: RunReport,
}

#[derive(Serialize)]
struct SweepReport {
    param: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    series_param: Option<String>,
    metric: Metric,
    points: Vec<SweepPoint>,
}

/// The device and workload of one point: device keys (dotted) become overrides, others are
/// fio keys.
fn point(args: &RunArgs, settings: &[(&str, &str)]) -> Result<(DeviceConfig, Workload)> {
    let (text, mut overrides) = args.device.base()?;
    let mut fio = Vec::new();
    for (key, value) in settings {
        // Device keys (dotted) go to the overrides, which expand aliases such as
        // memory.latency_ns themselves.
        let pair = (key.to_string(), value.to_string());
        if key.contains('.') {
            overrides.push(pair);
        } else {
            fio.push(pair);
        }
    }
    let device = apply_overrides(&text, &overrides).map_err(input_error)?;
    let workload = args.fio.workload(&fio)?;
    Ok((device, workload))
}

/// A value as a number for the x axis, if it reads as one.
fn numeric(value: &str) -> Option<f64> {
    match parse_value(value) {
        toml::Value::Integer(i) => Some(i as f64),
        toml::Value::Float(f) => Some(f),
        _ => None,
    }
}

/// Runs every point of `args` on the device and workload of `run`, each through `runner`.
pub fn run(args: &SweepSpec, run: &RunArgs, runner: &mut Runner<'_>) -> Result<()> {
    let series_values: Vec<Option<String>> = if args.series.is_some() {
        args.series_values.iter().cloned().map(Some).collect()
    } else {
        vec![None]
    };
    // Every point's device and workload are built before any runs, so a bad value is reported
    // at once instead of after the points before it have run (and their results are lost).
    let mut prepared = Vec::with_capacity(args.values.len() * series_values.len());
    for s in &series_values {
        for v in &args.values {
            let mut settings = vec![(args.param.as_str(), v.as_str())];
            if let (Some(key), Some(sv)) = (&args.series, s) {
                settings.push((key.as_str(), sv.as_str()));
            }
            let what = match (&args.series, s) {
                (Some(key), Some(sv)) => format!("sweep point {}={v} {key}={sv}", args.param),
                _ => format!("sweep point {}={v}", args.param),
            };
            prepared.push(point(run, &settings).with_context(|| what)?);
        }
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("sweep-{}", args.param.replace('.', "-"))));
    let json_path = out.with_extension("json");
    let plot_path = out.with_extension(match args.plot {
        PlotFormat::Svg => "svg",
        PlotFormat::Png => "png",
    });
    // Before the first point runs, so a bad --out fails now and not after the whole sweep.
    crate::output::check_writable(&json_path)?;
    crate::output::check_writable(&plot_path)?;

    let total = prepared.len() as u64;
    let bar = Progress::new("sweeping", total);
    let mut points = Vec::with_capacity(total as usize);
    let mut prepared = prepared.into_iter();
    for s in &series_values {
        for v in &args.values {
            let step = points.len() as u64;
            bar.set_message(match s {
                Some(s) => format!(
                    "point {}/{total} {}={v} {}={s}",
                    step + 1,
                    args.param,
                    args.series.as_deref().unwrap_or("")
                ),
                None => format!("point {}/{total} {}={v}", step + 1, args.param),
            });
            bar.set(step, 0.0);
            let (device, workload) = prepared.next().expect("one prepared point per value");
            let report = runner(&device, &workload, &mut |f| bar.set(step, f))
                .with_context(|| format!("sweep point {}={v}", args.param))?;
            points.push(SweepPoint {
                value: v.clone(),
                series: s.clone(),
                report,
            });
            bar.set(step + 1, 0.0);
        }
    }
    bar.finish();

    let sweep = SweepReport {
        param: args.param.clone(),
        series_param: args.series.clone(),
        metric: args.metric,
        points,
    };
    std::fs::write(&json_path, serde_json::to_string_pretty(&sweep)?)
        .with_context(|| format!("cannot write {}", json_path.display()))?;
    plot(args, &sweep, &plot_path)?;

    if run.json {
        println!("{}", serde_json::to_string_pretty(&sweep)?);
    } else {
        print!("{}", table(args, &sweep));
        for p in sweep.points.iter().filter(|p| !p.report.faithful) {
            println!(
                "NOT FAITHFUL at {}={}{}: {}",
                sweep.param,
                p.value,
                match (&sweep.series_param, &p.series) {
                    (Some(k), Some(v)) => format!(" {k}={v}"),
                    _ => String::new(),
                },
                p.report
                    .unfaithful_reason
                    .as_deref()
                    .unwrap_or("no reason given")
            );
        }
        println!(
            "\nwrote {} and {}",
            json_path.display(),
            plot_path.display()
        );
    }
    Ok(())
}

fn table(args: &SweepSpec, sweep: &SweepReport) -> String {
    let mut s = String::new();
    match &args.series {
        None => {
            let _ = writeln!(
                s,
                "{:>14} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9}",
                args.param, "IOPS", "read MB/s", "write MB/s", "mean µs", "p50 µs", "p99 µs"
            );
            for p in &sweep.points {
                let t = &p.report.totals;
                let _ = writeln!(
                    s,
                    "{:>14} {:>11.0} {:>10.1} {:>10.1} {:>9.2} {:>9.2} {:>9.2}",
                    p.value,
                    t.iops,
                    t.read_bandwidth_bytes_per_s / 1e6,
                    t.write_bandwidth_bytes_per_s / 1e6,
                    t.latency_ns.mean / 1e3,
                    t.latency_ns.p50 as f64 / 1e3,
                    t.latency_ns.p99 as f64 / 1e3,
                );
            }
        }
        Some(series) => {
            let _ = writeln!(
                s,
                "{} by {} (rows) and {} (columns)",
                args.metric.label(),
                args.param,
                series
            );
            let _ = write!(s, "{:>14}", args.param);
            for sv in &args.series_values {
                let _ = write!(s, " {:>12}", format!("{series}={sv}"));
            }
            s.push('\n');
            for v in &args.values {
                let _ = write!(s, "{v:>14}");
                for sv in &args.series_values {
                    let p = sweep
                        .points
                        .iter()
                        .find(|p| &p.value == v && p.series.as_deref() == Some(sv.as_str()));
                    let _ = write!(
                        s,
                        " {:>12.3}",
                        p.map_or(f64::NAN, |p| args.metric.of(&p.report))
                    );
                }
                s.push('\n');
            }
        }
    }
    s
}

fn plot(args: &SweepSpec, sweep: &SweepReport, path: &std::path::Path) -> Result<()> {
    let xs: Vec<Option<f64>> = args.values.iter().map(|v| numeric(v)).collect();
    let categorical = xs.iter().any(Option::is_none);
    let x_of = |i: usize| {
        if categorical {
            i as f64
        } else {
            xs[i].expect("numeric")
        }
    };
    let positive: Vec<f64> = xs.iter().flatten().copied().filter(|x| *x > 0.0).collect();
    let log_x = !categorical
        && positive.len() == xs.len()
        && positive.iter().cloned().fold(f64::MIN, f64::max)
            / positive.iter().cloned().fold(f64::MAX, f64::min)
            >= 100.0;
    let series_keys: Vec<Option<String>> = if args.series.is_some() {
        args.series_values.iter().cloned().map(Some).collect()
    } else {
        vec![None]
    };
    let series: Vec<Series> = series_keys
        .iter()
        .map(|sk| Series {
            label: match sk {
                Some(v) => format!("{}={v}", args.series.as_deref().unwrap_or("")),
                None => sweep
                    .points
                    .first()
                    .map_or_else(String::new, |p| p.report.device.clone()),
            },
            points: args
                .values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    sweep
                        .points
                        .iter()
                        .find(|p| &p.value == v && &p.series == sk)
                        .map(|p| (x_of(i), args.metric.of(&p.report)))
                })
                .collect(),
        })
        .collect();
    let x_label = if categorical {
        format!(
            "{} ({})",
            args.param,
            args.values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{i}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        args.param.clone()
    };
    let title = format!("{} vs {}", args.metric.label(), args.param);
    write_chart(
        path,
        &Chart {
            title: &title,
            x_label: &x_label,
            y_label: args.metric.label(),
            log_x,
            log_y: false,
            series: &series,
            reference: None,
        },
    )
}
