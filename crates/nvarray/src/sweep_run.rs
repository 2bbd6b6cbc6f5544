//! `nvarray sim sweep` and `nvarray bench sweep` through `nvarray-sweep`: each point's device
//! and workload from the run's flags (device keys, dotted, become overrides; others are fio
//! keys), the progress bar, and `--ftl-plot` drawn over the points once they have run.

use std::path::Path;
use std::sync::Mutex;

use anyhow::Result;
use nvarray_model::{apply_overrides, DeviceConfig};
use nvarray_sweep::{Caller, Engine, Grid, PointLine, SweepSpec, Watch, NO_FTL_TO_PLOT};
use nvarray_sys::input::input_error;
use nvarray_workload::Workload;

use crate::progress::Progress;
use crate::run_args::RunArgs;

/// Runs the sweep `spec` on the device and workload of `run`, each point through `engine`.
pub fn run(spec: &SweepSpec, run: &RunArgs, engine: &Engine<'_>) -> Result<()> {
    run.check_output()?;
    let point = |settings: &[(&str, &str)]| point(run, settings);
    let watch = Bar(Mutex::new(None));
    let caller = Caller {
        point: &point,
        watch: &watch,
        json: run.json,
        ftl_plot: run.ftl_plot.is_some(),
    };
    let swept = nvarray_sweep::run(spec, &caller, engine)?;
    // The sweep refuses --ftl-plot with --shard before any point runs.
    assert!(
        swept.whole || run.ftl_plot.is_none(),
        "--ftl-plot let through for a shard"
    );
    match &run.ftl_plot {
        Some(path) if swept.whole => write_ftl_plot(path, &swept.grid, &swept.lines),
        _ => Ok(()),
    }
}

/// The device and workload of one point: device keys (dotted) become overrides, which expand
/// aliases such as memory.latency_ns themselves; others are fio keys.
fn point(args: &RunArgs, settings: &[(&str, &str)]) -> Result<(DeviceConfig, Workload)> {
    let (text, mut overrides) = args.device.base()?;
    let mut fio = Vec::new();
    for (key, value) in settings {
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

/// The sweep's progress bar, made when the sweep knows how many points it runs.
struct Bar(Mutex<Option<Progress>>);

impl Bar {
    fn with(&self, f: impl FnOnce(&Progress)) {
        if let Some(bar) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            f(bar);
        }
    }
}

impl Watch for Bar {
    fn start(&self, points: usize, at_a_time: usize) {
        assert!(at_a_time > 0, "{points} points, none at a time");
        assert!(
            at_a_time <= points,
            "{at_a_time} points at a time of {points}"
        );
        let bar = Progress::new("sweeping", points as u64);
        bar.set_message(format!("{points} points, {at_a_time} at a time"));
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }

    fn done(&self, points: f64) {
        self.with(|bar| bar.set_done(points));
    }

    fn finish(&self) {
        if let Some(bar) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            bar.finish();
        }
    }
}

/// `--ftl-plot` for a sweep: one curve per point with an FTL (`ftl_plot`).
fn write_ftl_plot(path: &Path, grid: &Grid, lines: &[PointLine]) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Samples {
        page_bytes: u32,
        samples: Vec<nvarray_model::FtlSample>,
    }
    // One curve per point: the sweep returns each point's line once, in grid order.
    debug_assert!(
        lines.windows(2).all(|w| w[0].point < w[1].point),
        "the sweep's points out of grid order"
    );
    let curves: Vec<crate::ftl_plot::Curve> = lines
        .iter()
        .filter_map(|l| {
            let ftl = serde_json::from_value::<Samples>(l.report.get("ftl")?.clone()).ok()?;
            Some(crate::ftl_plot::Curve {
                label: grid.describe(l.point),
                page_bytes: ftl.page_bytes,
                samples: ftl.samples,
            })
        })
        .collect();
    if curves.is_empty() {
        return Err(input_error(NO_FTL_TO_PLOT));
    }
    let stem = grid.file_stem();
    debug_assert!(stem.starts_with("sweep-"), "a sweep's file stem {stem}");
    let title = format!("sweep of {}", stem.trim_start_matches("sweep-"));
    crate::ftl_plot::write(path, &title, &curves)
}
