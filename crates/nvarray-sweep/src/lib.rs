//! `nvarray-sweep`: `nvarray sim sweep` and `nvarray bench sweep`, a grid over any number of
//! parameters (device keys or fio keys), each point a run of the caller's engine. Simulator points run side by
//! side on every core (`--jobs`); `--shard I/N` runs one deterministic share of the points, and
//! `nvarray sweep merge` joins the shards' JSON lines into the table, JSON and plot a whole
//! sweep writes.
//!
//! - `grid`: the points, and which of them a shard runs.
//! - `record`: the JSON line per point, the sweep's JSON and its identity.
//! - `binary`: which nvarray binary ran them (its build id), part of the identity.
//! - `present`: table, plot and JSON, shared by a sweep and a merge.
//! - `merge`: `nvarray sweep merge`.
//!
//! The caller (the CLI) gives each point's device and workload from its settings, the engine
//! that runs a point, and how progress is shown (`Caller`); it draws `--ftl-plot` from the
//! points the sweep returns (`Swept`).

mod binary;
mod fnv;
mod grid;
pub mod merge;
mod present;
mod record;

pub use grid::Grid;
pub use record::PointLine;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use nvarray_model::DeviceConfig;
use nvarray_report::RunReport;
use nvarray_sys::input::input_error;
use nvarray_workload::Workload;

use grid::Shard;
use present::{Outputs, PlotFormat, OUTPUT_EXTENSIONS};
use record::{Identity, Metric};

/// Runs one point with some engine, calling the progress callback with the fraction done.
pub type Runner<'a> =
    dyn Fn(&DeviceConfig, &Workload, &mut dyn FnMut(f64)) -> Result<RunReport> + Sync + 'a;

/// The engine a sweep's points run on.
pub struct Engine<'a> {
    /// The engine and its options, as text: part of the sweep's identity, so shards run with
    /// other options are not merged.
    pub identity: String,
    /// Whether points may run side by side (the simulator's may; the emulator's measure the
    /// machine and run one at a time).
    pub parallel: bool,
    pub run: &'a Runner<'a>,
}

/// What to vary and what to write; the device, workload and engine come from the command.
#[derive(Args, Debug)]
pub struct SweepSpec {
    /// Parameter to vary: a fio key (bs, iodepth, numjobs, rwmixread, rw, ...) or a dotted device
    /// key (memory.controllers, controller.policy, ...); `memory.latency_ns` sets both the read
    /// and the write latency. Repeat it for a grid over every combination: each `--param KEY`
    /// takes the next `--values LIST`, or write `--param KEY=LIST`. The first is the x axis,
    /// the others make curves. Required.
    #[arg(long, value_name = "KEY[=LIST]", required = true)]
    pub param: Vec<String>,
    /// Values of a --param, comma-separated (e.g. `4ns,16ns,64ns,256ns,1us,4us` or
    /// `512,4k,64k`), in the units of the key (a time's default unit is its key's); one
    /// --values for each --param without `=`, in order.
    #[arg(long, value_name = "LIST")]
    pub values: Vec<String>,
    /// One more parameter, drawn as one curve per value (e.g. memory.controllers): the same as
    /// another --param [default: none].
    #[arg(long, value_name = "KEY", requires = "series_values")]
    pub series: Option<String>,
    /// Values of --series, comma-separated (required with --series).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "series")]
    pub series_values: Vec<String>,
    /// What the two-parameter table and the plot show.
    #[arg(long, value_enum, default_value_t = Metric::Bandwidth)]
    pub metric: Metric,
    /// Output path without extension: writes PATH.jsonl (one JSON line per point, as each
    /// finishes), PATH.json and PATH.svg (or .png); a shard writes PATH.jsonl only. Every dot
    /// of PATH is kept (`v1.1` writes `v1.1.jsonl`). When PATH.jsonl holds points of this same
    /// sweep (an interrupted run), the sweep resumes: those points are kept and not run again
    /// [default: sweep-PARAM+PARAM in the current directory, dots as dashes, and -shard-I-of-N
    /// for a shard].
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Start over: empty PATH.jsonl instead of resuming from the points it holds (needed when
    /// it holds another sweep's points).
    #[arg(long)]
    pub overwrite: bool,
    /// Plot format.
    #[arg(long, value_enum, default_value_t = PlotFormat::Svg)]
    pub plot: PlotFormat,
    /// Simulator points run side by side on this many threads; the emulator's always run one at
    /// a time, since each measures the machine [default: every core for the simulator
    /// (std::thread::available_parallelism), 1 for the emulator].
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Run only shard I of N (I from 0 to N-1): the points whose index leaves remainder I
    /// divided by N. Each shard writes its points' JSON lines; `nvarray sweep merge` joins
    /// them into the whole sweep's table, JSON and plot [default: the whole sweep].
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
}

/// Builds one point's device and workload from its settings (key, value), in the grid's order.
pub type PointBuilder<'a> = dyn Fn(&[(&str, &str)]) -> Result<(DeviceConfig, Workload)> + 'a;

/// How a sweep shows its progress (the CLI's bar).
pub trait Watch: Sync {
    /// `points` are to run now (those an earlier run recorded are not), `at_a_time` at once.
    fn start(&self, points: usize, at_a_time: usize);
    /// Points done so far, with a fraction for each under way.
    fn done(&self, points: f64);
    /// Every point has finished, or one failed.
    fn finish(&self);
}

/// What a sweep needs from its caller besides the engine.
pub struct Caller<'a> {
    /// Each point's device and workload.
    pub point: &'a PointBuilder<'a>,
    pub watch: &'a dyn Watch,
    /// Print JSON instead of the table.
    pub json: bool,
    /// The caller draws the FTL's samples of every point (`--ftl-plot`): refused for a shard
    /// and for a sweep without an FTL, before any point runs.
    pub ftl_plot: bool,
}

/// What a sweep ran: its grid and every point's line, in the grid's order (a shard's points
/// only, when `whole` is false).
pub struct Swept {
    pub grid: Grid,
    pub lines: Vec<PointLine>,
    pub whole: bool,
}

/// The message when `--ftl-plot` finds no point with an FTL.
pub const NO_FTL_TO_PLOT: &str =
    "--ftl-plot: no point of the sweep has an FTL (add --precondition or --set ftl.enabled=true)";

/// A point this run holds: its index in the grid, its device and its workload.
type HeldPoint = (usize, DeviceConfig, Workload);

/// Runs the points of `args` (all, or its shard's), each built by the caller and run through
/// the engine, and writes the sweep's files (a shard's JSON lines only).
pub fn run(args: &SweepSpec, caller: &Caller<'_>, engine: &Engine<'_>) -> Result<Swept> {
    let (grid, shard) = grid_and_shard(args, caller.ftl_plot)?;
    let jobs = jobs(args.jobs, engine.parallel)?;
    let (sweep, provenance, mut held) = build_points(&grid, caller.point, shard, &engine.identity)?;
    if caller.ftl_plot && !held.iter().any(|(_, d, _)| d.ftl.enabled) {
        return Err(input_error(NO_FTL_TO_PLOT));
    }

    let (lines_path, outputs) = output_paths(args, &grid, shard)?;
    // The points an earlier run of this same sweep recorded are kept, not run again; a file
    // of another sweep is never emptied without --overwrite.
    let mut lines = Vec::with_capacity(held.len());
    let mut lines_file = std::io::BufWriter::new(resume(
        &lines_path,
        &sweep,
        &provenance,
        &grid,
        shard,
        args.overwrite,
        &mut lines,
    )?);
    let recorded: std::collections::HashSet<usize> = lines.iter().map(|l| l.point).collect();
    held.retain(|(i, _, _)| !recorded.contains(i));

    if !held.is_empty() {
        // Each point's line is written as it finishes, so an interrupted sweep resumes there.
        let mut record = |point: usize, report: RunReport| {
            let json = serde_json::to_value(&report).expect("a report is JSON");
            let line = PointLine::new(&sweep, &provenance, &grid, args.metric, shard, point, json);
            append_line(&mut lines_file, &mut lines, line)
        };
        run_held(
            &held,
            jobs,
            engine,
            caller.watch,
            &grid,
            &lines_path,
            &mut record,
        )?;
    }
    lines.sort_by_key(|l| l.point);

    match outputs {
        Some(outputs) => present::write_sweep(
            &sweep,
            &grid,
            args.metric,
            &lines,
            &outputs,
            Some(&lines_path),
            caller.json,
        )?,
        None => print_shard(&grid, args.metric, shard, &lines, &lines_path, caller.json)?,
    }
    Ok(Swept {
        grid,
        lines,
        whole: shard.is_whole(),
    })
}

/// The sweep's grid from `--param`/`--values`/`--series`, and the shard this run holds;
/// `--ftl-plot` is refused for a shard.
fn grid_and_shard(args: &SweepSpec, ftl_plot: bool) -> Result<(Grid, Shard)> {
    let grid = Grid::from_flags(
        &args.param,
        &args.values,
        args.series.as_deref().map(|k| (k, &args.series_values[..])),
    )
    .map_err(input_error)?;
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    if ftl_plot && !shard.is_whole() {
        return Err(input_error(
            "--ftl-plot draws every point of a sweep: run it without --shard",
        ));
    }
    Ok((grid, shard))
}

/// The path of the sweep's JSON lines (checked writable) and, for a whole sweep, its other
/// output files.
fn output_paths(args: &SweepSpec, grid: &Grid, shard: Shard) -> Result<(PathBuf, Option<Outputs>)> {
    let out = args.out.clone().unwrap_or_else(|| default_out(grid, shard));
    let lines_path = nvarray_sys::output_files::sibling(&out, "jsonl", &OUTPUT_EXTENSIONS);
    nvarray_sys::output_files::check_writable(&lines_path)?;
    let outputs = if shard.is_whole() {
        Some(Outputs::new(&out, args.plot)?)
    } else {
        None
    };
    Ok((lines_path, outputs))
}

/// Writes `line` to `file` as one JSON line and flushes it, then keeps it in `lines` (even
/// when the write failed); returns the write's error.
fn append_line(
    file: &mut impl Write,
    lines: &mut Vec<PointLine>,
    line: PointLine,
) -> std::io::Result<()> {
    let written = serde_json::to_writer(&mut *file, &line)
        .map_err(std::io::Error::from)
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.flush());
    lines.push(line);
    written
}

/// Builds every point's device and workload, and returns the sweep's identity, its
/// provenance and the points `shard` holds. All are built before any runs, so a bad value is
/// reported at once instead of after the points before it have run; the identity covers them
/// all.
fn build_points(
    grid: &Grid,
    point: &PointBuilder<'_>,
    shard: Shard,
    engine: &str,
) -> Result<(String, record::Provenance, Vec<HeldPoint>)> {
    let mut identity = Identity::new(engine);
    let mut held = Vec::new();
    for i in 0..grid.len() {
        let (device, workload) = point(&grid.settings(i))
            .with_context(|| format!("sweep point {}", grid.describe(i)))?;
        identity.add_point(&device, &workload)?;
        if shard.holds(i) {
            held.push((i, device, workload));
        }
    }
    let (sweep, provenance) = identity.finish(grid);
    Ok((sweep, provenance, held))
}

/// The output path without --out: sweep-PARAM+PARAM, and -shard-I-of-N for a shard.
fn default_out(grid: &Grid, shard: Shard) -> PathBuf {
    let stem = grid.file_stem();
    PathBuf::from(if shard.is_whole() {
        stem
    } else {
        format!("{stem}-shard-{}-of-{}", shard.index, shard.count)
    })
}

/// Runs the `held` points on `jobs` threads under a progress bar, handing each finished
/// point's index and report to `record`. A point that fails is the error, else the first
/// error `record` met writing to `lines_path`.
fn run_held(
    held: &[HeldPoint],
    jobs: usize,
    engine: &Engine<'_>,
    watch: &dyn Watch,
    grid: &Grid,
    lines_path: &Path,
    record: &mut dyn FnMut(usize, RunReport) -> std::io::Result<()>,
) -> Result<()> {
    let total = held.len();
    assert!(total > 0, "a sweep run with no point to run");
    assert!(jobs > 0, "no thread to run the points on");
    assert!(
        engine.parallel || jobs == 1,
        "{jobs} threads for an engine that runs one point at a time"
    );
    watch.start(total, jobs.min(total));
    // The costliest points first: a long point started last would leave the other
    // threads idle at the end. The order changes when a point finishes, never its result.
    let mut order: Vec<usize> = (0..total).collect();
    let cost: Vec<f64> = held.iter().map(|(_, _, w)| cost_hint(w)).collect();
    order.sort_by(|&a, &b| cost[b].total_cmp(&cost[a]));
    let run_point = |k: usize, progress: &mut dyn FnMut(f64)| {
        let (_, device, workload) = &held[order[k]];
        (engine.run)(device, workload, progress)
    };
    let mut write_error = None;
    let mut finished = 0usize;
    let result = nvarray_run::parallel::run_points(
        total,
        jobs,
        &run_point,
        &|done| watch.done(done),
        &mut |k, report| {
            finished += 1;
            if let Err(e) = record(held[order[k]].0, report) {
                write_error.get_or_insert(e);
            }
        },
    );
    watch.finish();
    if let Err((k, e)) = result {
        return Err(e.context(format!(
            "sweep point {} (the points that finished are in {})",
            grid.describe(held[order[k]].0),
            lines_path.display()
        )));
    }
    assert_eq!(finished, total, "points recorded of the points run");
    if let Some(e) = write_error {
        return Err(anyhow::Error::new(e).context(format!("cannot write {}", lines_path.display())));
    }
    Ok(())
}

/// A shard's points on stdout, as JSON or as the table with the points that were not
/// faithful, then how to join the shards.
fn print_shard(
    grid: &Grid,
    metric: Metric,
    shard: Shard,
    lines: &[PointLine],
    lines_path: &Path,
    json: bool,
) -> Result<()> {
    // Resumed points are kept once each and not run again, so each point has one line.
    assert!(
        lines.windows(2).all(|w| w[0].point < w[1].point),
        "a point with two lines in {}",
        lines_path.display()
    );
    if json {
        println!("{}", serde_json::to_string_pretty(lines)?);
        return Ok(());
    }
    let figures = present::figures(lines)?;
    if !lines.is_empty() {
        print!("{}", present::table(grid, metric, lines, &figures, false));
    }
    present::print_unfaithful(grid, lines, &figures);
    println!(
        "\nshard {shard}: {} of the sweep's {} points; wrote {}\n\
         join the shards with `nvarray sweep merge DIR...` (every shard's .jsonl)",
        lines.len(),
        grid.len(),
        lines_path.display()
    );
    Ok(())
}

/// Opens `path` for a sweep's JSON lines. A file holding points of this same sweep (`sweep`)
/// is kept and appended to: its points (those `shard` runs) go into `lines`, a last line cut
/// short by a kill is cut off, and a note says how many points are left to run. A file of
/// another sweep is refused, naming what differs, unless `overwrite` (which empties it, as
/// does a new file).
fn resume(
    path: &std::path::Path,
    sweep: &str,
    provenance: &record::Provenance,
    grid: &Grid,
    shard: Shard,
    overwrite: bool,
    lines: &mut Vec<PointLine>,
) -> Result<std::fs::File> {
    let cannot = |e: std::io::Error| {
        anyhow::Error::new(e).context(format!("cannot write {}", path.display()))
    };
    let has_points = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
    if overwrite || !has_points {
        return std::fs::File::create(path).map_err(cannot);
    }
    let (found, good_bytes) = record::read_for_resume(path)?;
    // This run as a line of its own, to compare the file's lines with.
    let this = PointLine::new(
        sweep,
        provenance,
        grid,
        Metric::Bandwidth,
        shard,
        0,
        serde_json::Value::Null,
    );
    let shown = path.display().to_string();
    check_resumable(&found, &this, grid, path, &shown)?;
    let mut seen = std::collections::HashSet::new();
    lines.extend(
        found
            .into_iter()
            .filter(|l| shard.holds(l.point) && seen.insert(l.point)),
    );
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(cannot)?;
    // Drop a line cut short, then write after the last whole one.
    file.set_len(good_bytes).map_err(cannot)?;
    let mut file = file;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0)).map_err(cannot)?;
    let total = (0..grid.len()).filter(|&i| shard.holds(i)).count();
    eprintln!(
        "resuming: {} of the {total} points are already in {shown}; running the other {} \
         (--overwrite starts over)",
        lines.len(),
        total - lines.len()
    );
    Ok(file)
}

/// Refuses the lines `found` in `path` (`shown`) unless each is of this same sweep (`this`)
/// and of its `grid`.
fn check_resumable(
    found: &[PointLine],
    this: &PointLine,
    grid: &Grid,
    path: &Path,
    shown: &str,
) -> Result<()> {
    for line in found {
        if let Some(why) = record::refusal(this, "this run", line, shown) {
            return Err(input_error(format!(
                "{shown} holds points of another sweep, which this run would overwrite; {why}\n\
                 give another --out, or --overwrite to empty it and start this sweep over"
            )));
        }
        // A line whose identity matches but whose grid or point does not (an edited file)
        // is refused, as `merge` refuses it, before its point indexes this run's grid.
        record::check_grid(line, path)?;
        if line.grid != *grid {
            return Err(input_error(format!(
                "{shown}: point {}'s grid ({}) is not this sweep's ({}); was the file edited? \
                 --overwrite starts this sweep over",
                line.point,
                record::grid_text(&line.grid),
                record::grid_text(grid)
            )));
        }
    }
    Ok(())
}

/// A rough relative cost of simulating `w`, only to start the costliest points first: each
/// job's requests (or, bounded by time, its runtime) times the pieces of a mean request, from
/// a per-request cost measured to grow about 19x from 4 KiB to 256 KiB (`docs/perf.md`,
/// "Sweeps on every core").
fn cost_hint(w: &Workload) -> f64 {
    w.jobs
        .iter()
        .map(|j| {
            let threads = f64::from(j.numjobs.max(1));
            match (j.number_ios, j.runtime_ns) {
                (Some(n), _) => threads * n as f64 * (1.0 + j.bs.mean_bytes() / 16384.0),
                (None, Some(t)) => threads * t as f64,
                (None, None) => threads,
            }
        })
        .sum()
}

/// Threads for the points: `--jobs`, or every core for the simulator; the emulator's points
/// run one at a time.
fn jobs(asked: Option<usize>, parallel: bool) -> Result<usize> {
    match asked {
        Some(0) => Err(input_error("--jobs 0: give at least 1")),
        Some(n) if n > 1 && !parallel => Err(input_error(format!(
            "--jobs {n}: the emulator's points run one at a time, since each measures this \
             machine and needs its cores quiet (--jobs applies to --engine sim)"
        ))),
        Some(n) => Ok(n),
        None if parallel => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
        None => Ok(1),
    }
}
