//! `nvarray fit collect`: fio over the grid on a real device; `nvarray fit DIR`: a preset
//! fitted to what it measured, with its error on held-out jobs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use nvarray_fit::collect::{self, CollectOptions, Step};
use nvarray_fit::grid::Job;

use crate::cmd_sim::sim_error;
use crate::emu_args::parse_time_ns;
use crate::progress::Progress;
use nvarray_sys::input::input_error;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct FitArgs {
    #[command(subcommand)]
    command: Option<FitCommand>,
    #[command(flatten)]
    fit: FitRun,
}

/// `nvarray fit DIR --base PRESET --out FILE`.
#[derive(Args)]
struct FitRun {
    /// A directory `nvarray fit collect` wrote.
    #[arg(value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The preset (or device TOML file) whose parameters are fitted; the others are kept.
    #[arg(long, value_name = "PRESET|FILE")]
    base: Option<String>,
    /// The fitted preset to write (TOML, usable with --device).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The chart of fitted against measured (SVG or PNG) [default: --out with .svg].
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Threads for the simulator's runs [default: every core].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Most evaluations of the objective (each simulates every training job).
    #[arg(long, value_name = "N", default_value_t = 1500)]
    evaluations: usize,
    /// Share of the jobs held out of the fit to measure its error (by a hash of each job's
    /// name, so the same jobs on every machine).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.25)]
    held_out: f64,
    /// text | json.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    output_format: String,
}

#[derive(Subcommand)]
enum FitCommand {
    /// Run real fio (libaio, direct I/O, JSON+) over the grid that identifies the model's
    /// parameters on a device or file: 512 B to 1 MiB, queue depths 1 to 128, random and
    /// sequential reads and writes and a 70/30 random mix, after SNIA's preconditioning
    /// (the span written twice in 128 KiB sequential writes). `--budget` picks the jobs that
    /// fit, most telling first, and lists those left out; `--steady-state` adds SNIA's
    /// steady-state write rounds (for flash). A device with a mounted file system is
    /// refused, and one with data on it unless `--destroy-data`; a file is made if missing.
    Collect(CollectArgs),
    /// Write a collection as `fit collect` would, from the simulator instead of a device:
    /// every grid job run on the modelled device (`--preset`, `--device`, `--set`), fio's
    /// JSON+ layout, each job's IOPS and mean latency moved by up to ±`--noise`. A fit of it
    /// from another base shows what the grid identifies (docs/fit.md).
    Simulate(SimulateArgs),
}

#[derive(Args)]
struct SimulateArgs {
    #[command(flatten)]
    device: crate::args::DeviceArgs,
    /// Directory for the collection.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Bytes the jobs range over, from offset 0.
    #[arg(long, value_name = "SIZE", default_value = "1g", value_parser = parse_size)]
    size: u64,
    /// Largest relative error added to each job's IOPS and mean latency (uniform, seeded).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    noise: f64,
    /// Seed of the noise.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Also the steady-state write phase: 4 KiB random writes at depth 32 after the FTL is
    /// preconditioned with random writes (a flash device).
    #[arg(long)]
    steady_state: bool,
}

#[derive(Args)]
struct CollectArgs {
    /// The block device (e.g. /dev/nvme0n1, /dev/loop0) or file to measure. EVERYTHING ON IT
    /// IS OVERWRITTEN.
    target: PathBuf,
    /// Directory for the results (fio's JSON+ per job, and manifest.json).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Time for the grid's jobs (preconditioning and steady state come on top).
    #[arg(long, value_name = "TIME", default_value = "10m", value_parser = parse_duration)]
    budget: Duration,
    /// Each job's measured time.
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = parse_duration)]
    runtime: Duration,
    /// Each job's ramp before it is measured.
    #[arg(long, value_name = "TIME", default_value = "500ms", value_parser = parse_duration)]
    ramp: Duration,
    /// Bytes the jobs range over, from offset 0 (default: the whole device or file; 1 GiB
    /// for a new file).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size: Option<u64>,
    /// Allow overwriting a device or file that holds data.
    #[arg(long)]
    destroy_data: bool,
    /// After the grid, run 4 KiB random-write rounds at depth 32 until SNIA's steady state
    /// (5 rounds within 20 % of their mean, slope within 10 %; at most 25 rounds).
    #[arg(long)]
    steady_state: bool,
    /// Each steady-state round's length.
    #[arg(long, value_name = "TIME", default_value = "5s", value_parser = parse_duration)]
    round: Duration,
    /// The fio to run.
    #[arg(long, value_name = "PATH", default_value = "fio")]
    fio: PathBuf,
    /// Passes over the jobs: each job's figures are the medians of its passes, and the
    /// passes' spread (the device's own repeatability, a floor under any fit's error) is
    /// printed. The budget covers every pass.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    // A bare number is seconds, as fio's runtime.
    parse_time_ns(&if text.chars().all(|c| c.is_ascii_digit()) {
        format!("{text}s")
    } else {
        text.to_string()
    })
    .map(Duration::from_nanos)
}

fn parse_size(text: &str) -> Result<u64, String> {
    nvarray_workload::parse_size(text).map_err(|e| e.to_string())
}

pub fn run(args: FitArgs) -> Result<()> {
    match args.command {
        Some(FitCommand::Collect(c)) => run_collect(c),
        Some(FitCommand::Simulate(a)) => run_simulate(a),
        None => run_fit(args.fit),
    }
}

fn run_collect(c: CollectArgs) -> Result<()> {
    let opts = CollectOptions {
        out: c.out,
        budget: c.budget,
        runtime: c.runtime,
        ramp: c.ramp,
        steady_state: c.steady_state,
        round: c.round,
        fio: c.fio,
        repeat: c.repeat as usize,
    };
    let plan = collect::plan(&opts);
    let target =
        nvarray_fit::target::prepare(&c.target, c.size, c.destroy_data).map_err(input_error)?;
    print_plan(&target, &plan, &opts);
    let bar = Progress::new("collecting", (plan.jobs.len() * opts.repeat) as u64 + 1);
    let manifest = collect::collect(&target, &opts, &mut |s| match s {
        Step::Precondition => {
            bar.set_message("preconditioning (SNIA: 2x span, 128k sequential)".into())
        }
        Step::Job {
            index,
            total,
            pass,
            passes,
            name,
        } => {
            // The collection runs the plan shown above, which the bar is sized for.
            assert_eq!(total, plan.jobs.len(), "jobs of the plan");
            assert_eq!(passes, opts.repeat, "passes asked");
            assert!(index < total, "job {index} of {total}");
            assert!(pass < passes, "pass {pass} of {passes}");
            bar.set((pass * total + index) as u64 + 1, 0.0);
            bar.set_message(if passes > 1 {
                format!("{name} (pass {} of {passes})", pass + 1)
            } else {
                name.to_string()
            });
        }
        Step::SteadyRound { round, iops } => bar.set_message(format!(
            "steady-state round {} (last {})",
            round + 1,
            iops.map_or("-".into(), |i| format!("{i:.0} IOPS"))
        )),
    })
    .with_context(|| format!("collecting on {}", target.path.display()))?;
    bar.finish();
    assert_eq!(
        manifest.jobs.len(),
        plan.jobs.len(),
        "a record for every job of the plan"
    );
    print_collected(&manifest, &opts.out);
    Ok(())
}

/// On stderr, what the collection on `target` will run: the jobs that fit the budget, and
/// those left out.
fn print_plan(
    target: &nvarray_fit::target::Target,
    plan: &nvarray_fit::grid::Plan,
    opts: &CollectOptions,
) {
    eprintln!(
        "{} ({:?}, jobs over its first {}): {} of the grid's {} jobs fit the {} budget at {:.1} s each{}",
        target.path.display(),
        target.kind,
        nvarray_units::format_size(target.span_bytes),
        plan.jobs.len(),
        plan.jobs.len() + plan.left_out.len(),
        humantime::format_duration(opts.budget),
        plan.per_job.as_secs_f64(),
        if opts.repeat > 1 {
            format!(" ({} passes)", opts.repeat)
        } else {
            String::new()
        },
    );
    if !plan.left_out.is_empty() {
        let names: Vec<String> = plan.left_out.iter().take(8).map(Job::name).collect();
        eprintln!(
            "left out: {} jobs ({}{}; all in manifest.json's left_out)",
            plan.left_out.len(),
            names.join(" "),
            if plan.left_out.len() > 8 { " ..." } else { "" }
        );
    }
}

/// What a collection ran: the jobs, those fio failed, the steady state, the passes' spread,
/// and the next command.
fn print_collected(manifest: &nvarray_fit::manifest::Manifest, out: &std::path::Path) {
    let failed: Vec<&str> = manifest
        .jobs
        .iter()
        .filter(|j| j.error.is_some())
        .map(|j| j.file.as_str())
        .collect();
    println!(
        "{} jobs in {} ({} failed{}){}",
        manifest.jobs.len(),
        out.display(),
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {}", failed.join(" "))
        },
        manifest
            .steady_state
            .as_ref()
            .map_or(String::new(), |s| match s.steady_iops {
                Some(i) => format!(
                    "; steady state at {i:.0} IOPS after {} rounds",
                    s.rounds_iops.len()
                ),
                None => format!("; NOT steady after {} rounds", s.rounds_iops.len()),
            }),
    );
    if let Some(r) = manifest.repeatability() {
        println!(
            "the device's own spread: its passes differ from their median by {:.1} % IOPS, \
             {:.1} % mean latency (mean over {} jobs): expect no fit to follow its jobs much closer",
            r.iops, r.mean_latency, r.jobs
        );
    }
    println!(
        "next: nvarray fit {} --base PRESET --out my-drive.toml",
        out.display()
    );
}

fn run_fit(f: FitRun) -> Result<()> {
    let usage = "usage: nvarray fit DIR --base PRESET --out my-drive.toml (or nvarray fit collect DEVICE --out DIR)";
    let (Some(dir), Some(base), Some(out)) = (f.dir, f.base, f.out) else {
        return Err(input_error(usage));
    };
    if !(0.0..1.0).contains(&f.held_out) {
        return Err(input_error(format!(
            "--held-out {}: give a share from 0 to below 1",
            f.held_out
        )));
    }
    let json = output_is_json(&f.output_format)?;
    let plot = f.plot.unwrap_or_else(|| out.with_extension("svg"));
    nvarray_present::plot::check_chart_path(&plot).map_err(input_error)?;
    let base_toml = read_base(&base)?;
    let (manifest, jobs, skipped) =
        nvarray_fit::fit::load(&dir, f.held_out).map_err(input_error)?;
    let threads = f
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let bar = Progress::new("fitting", 1);
    let evaluations = f.evaluations.max(1);
    let report = nvarray_fit::fit::fit(
        &base,
        &base_toml,
        &manifest,
        &jobs,
        skipped,
        &nvarray_fit::fit::FitOptions {
            jobs: threads,
            evaluations,
        },
        &mut |n, loss| {
            bar.set(0, n as f64 / evaluations as f64);
            bar.set_message(format!("{n} evaluations, loss {loss:.4}"));
        },
    )
    .map_err(input_error)?;
    bar.finish();
    assert_eq!(report.jobs.len(), jobs.len(), "a fitted row for every job");
    let shown = dir.display().to_string();
    let today = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let name = out
        .file_stem()
        .map_or("fitted".into(), |s| s.to_string_lossy().into_owned());
    let preset =
        nvarray_fit::preset_out::write(&base_toml, &name, &report, &manifest, &shown, &today)
            .map_err(input_error)?;
    std::fs::write(&out, preset).with_context(|| format!("writing {}", out.display()))?;
    let shown_target = target_name(&manifest.target);
    let title = format!("{base} fitted to {shown_target}: {}", report.error_words());
    crate::fit_report::chart(&report, &title, &plot)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", crate::fit_report::table(&report, &manifest, &shown));
        println!("wrote {} and {}", out.display(), plot.display());
    }
    Ok(())
}

/// `--output-format`: whether it asks for JSON (else text).
fn output_is_json(format: &str) -> Result<bool> {
    Ok(match format {
        "text" => false,
        "json" => true,
        other => {
            return Err(input_error(format!(
                "--output-format {other}: text or json"
            )))
        }
    })
}

/// The TOML of `--base`: a device file's text, or else the preset of that name.
fn read_base(base: &str) -> Result<String> {
    Ok(match std::fs::metadata(base) {
        Ok(m) if m.is_file() => {
            std::fs::read_to_string(base).with_context(|| format!("reading {base}"))?
        }
        _ => nvarray_model::presets::preset(base)
            .map_err(input_error)?
            .toml
            .to_string(),
    })
}

/// The measured target as the chart's title names it: its file name, else as recorded.
fn target_name(target: &str) -> String {
    std::path::Path::new(target)
        .file_name()
        .map_or(target.to_string(), |n| n.to_string_lossy().into_owned())
}

fn run_simulate(a: SimulateArgs) -> Result<()> {
    use nvarray_fit::grid;
    use nvarray_fit::manifest::SteadyState;

    if !(0.0..0.5).contains(&a.noise) {
        return Err(input_error(format!(
            "--noise {}: give a share from 0 to below 0.5",
            a.noise
        )));
    }
    if a.out.join(nvarray_fit::manifest::MANIFEST).exists() {
        return Err(input_error(format!(
            "{} already holds a collection; give another --out",
            a.out.display()
        )));
    }
    let (text, overrides) = a.device.base()?;
    let device =
        nvarray_model::overrides::apply_overrides(&text, &overrides).map_err(input_error)?;
    std::fs::create_dir_all(a.out.join("jobs"))
        .with_context(|| format!("making {}", a.out.display()))?;
    let mut noise = seeded_noise(a.seed, a.noise);
    let jobs = grid::full_grid();
    let records = simulate_grid(&device, &jobs, &a, &mut noise)?;
    let steady_state = if a.steady_state {
        let iops = simulated_steady(&text, &overrides, &device, a.size)? * (1.0 + noise());
        Some(SteadyState {
            round_ms: 0,
            rounds_iops: vec![iops; nvarray_fit::steady::WINDOW],
            steady_iops: Some(iops),
        })
    } else {
        None
    };
    simulated_manifest(&a, records, steady_state)
        .write(&a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    println!("{} simulated jobs in {}", jobs.len(), a.out.display());
    Ok(())
}

/// The noise of `fit simulate`: each call a share drawn uniformly within ±`share_max`, the
/// same sequence for the same `seed` on every machine (xorshift).
fn seeded_noise(seed: u64, share_max: f64) -> impl FnMut() -> f64 {
    let mut state = seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // xorshift never reaches 0 from a state that is not.
        debug_assert_ne!(state, 0, "xorshift state");
        let share = ((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * share_max;
        debug_assert!(share.abs() <= share_max, "noise {share} past ±{share_max}");
        share
    }
}

/// Runs every grid job on `device` under a progress bar, writing each one's fio JSON+ file
/// into `a.out`'s `jobs/`; returns their manifest records, in the grid's order.
fn simulate_grid(
    device: &nvarray_model::DeviceConfig,
    jobs: &[Job],
    a: &SimulateArgs,
    noise: &mut dyn FnMut() -> f64,
) -> Result<Vec<nvarray_fit::manifest::JobRecord>> {
    use nvarray_fit::manifest::JobRecord;

    let bar = Progress::new("simulating", jobs.len() as u64);
    let mut records = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        bar.set(i as u64, 0.0);
        let out = simulated_job(device, job, a.size, noise)?;
        let file = format!("jobs/{}.json", job.name());
        std::fs::write(a.out.join(&file), out.to_string())?;
        records.push(JobRecord {
            job: *job,
            file,
            error: None,
            figures: None,
            passes: Vec::new(),
        });
    }
    bar.finish();
    assert_eq!(records.len(), jobs.len(), "a job file for every grid job");
    // Grid jobs have distinct names, so no job's file overwrote another's.
    let mut files = std::collections::HashSet::new();
    debug_assert!(
        records.iter().all(|r| files.insert(r.file.as_str())),
        "two grid jobs wrote one file"
    );
    Ok(records)
}

/// The manifest of a simulated collection: the modelled device as its target, its `records`
/// and `steady_state`.
fn simulated_manifest(
    a: &SimulateArgs,
    records: Vec<nvarray_fit::manifest::JobRecord>,
    steady_state: Option<nvarray_fit::manifest::SteadyState>,
) -> nvarray_fit::manifest::Manifest {
    use nvarray_fit::manifest::{Manifest, FORMAT};

    let source = match &a.device.device {
        Some(p) => p.display().to_string(),
        None => format!("preset {}", a.device.preset),
    };
    Manifest {
        format: FORMAT,
        target: format!("nvarray sim of {source}"),
        kind: nvarray_fit::target::TargetKind::File,
        span_bytes: a.size,
        fio_version: format!("nvarray-{}", env!("CARGO_PKG_VERSION")),
        date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        runtime_ms: 0,
        ramp_ms: 0,
        jobs: records,
        left_out: Vec::new(),
        precondition: None,
        steady_state,
    }
}

/// One grid job on `device` in fio's JSON+ layout, its IOPS and mean latency moved by
/// `noise()`: a first run sizes the second, as the fit sizes its own runs.
fn simulated_job(
    device: &nvarray_model::DeviceConfig,
    job: &Job,
    size: u64,
    noise: &mut dyn FnMut() -> f64,
) -> Result<serde_json::Value> {
    use nvarray_fit::measured::Figures;
    let guess = Figures {
        iops: 1e5,
        mean_ns: 1e4,
        p99_ns: 0.0,
    };
    let (workload, report) =
        nvarray_fit::simulate::sized_run(device, job, &guess, size).map_err(sim_error)?;
    // The noise goes into fio's first job: a grid job is one.
    assert_eq!(workload.jobs.len(), 1, "jobs of grid job {}", job.name());
    let mut out = nvarray_present::fio_output::report(&workload, &report, &[99.0], true);
    for dir in ["read", "write"] {
        let d = &mut out["jobs"][0][dir];
        if d["total_ios"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        let (x, y) = (1.0 + noise(), 1.0 + noise());
        d["iops"] = (d["iops"].as_f64().unwrap_or(0.0) * x).into();
        d["lat_ns"]["mean"] = (d["lat_ns"]["mean"].as_f64().unwrap_or(0.0) * y).into();
    }
    Ok(out)
}

/// The steady-state write IOPS of `device` (`text` with `overrides`) over `size` bytes: 4 KiB
/// random writes at depth 32 after the FTL is preconditioned with random writes.
fn simulated_steady(
    text: &str,
    overrides: &[(String, String)],
    device: &nvarray_model::DeviceConfig,
    size: u64,
) -> Result<f64> {
    use nvarray_fit::measured::Figures;
    let mut o = overrides.to_vec();
    o.extend(nvarray_fit::steady_fit::steady_overrides(
        size,
        device.ftl.over_provisioning,
    ));
    let flash = nvarray_model::overrides::apply_overrides(text, &o).map_err(input_error)?;
    let guess = Figures {
        iops: 1e4,
        mean_ns: 3.2e6,
        p99_ns: 0.0,
    };
    let job = nvarray_fit::steady_fit::STEADY_JOB;
    let (_, report) =
        nvarray_fit::simulate::sized_run(&flash, &job, &guess, size).map_err(sim_error)?;
    Ok(report.totals.iops)
}
