//! `nvarray fit collect`: real fio over the grid on a checked target, each job's JSON+ output
//! kept in `DIR/jobs/`, and the manifest that says what ran. The target is first
//! preconditioned as SNIA's PTS does (its span written twice, sequentially, in 128 KiB
//! requests); with `steady_state`, rounds of 4 KiB random writes at depth 32 follow the grid
//! until SNIA's steady-state rule holds (`steady`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::grid::{self, Job};
use crate::manifest::{JobRecord, Manifest, Precondition, SteadyState, FORMAT, MANIFEST};
use crate::measured;
use crate::steady;
use crate::target::Target;

/// fio's start-up and tear-down around each job, counted into the budget.
const JOB_OVERHEAD: Duration = Duration::from_millis(300);

pub struct CollectOptions {
    pub out: PathBuf,
    /// The grid's share of the time: jobs past it are left out (`grid::plan`).
    pub budget: Duration,
    pub runtime: Duration,
    pub ramp: Duration,
    /// Run the steady-state write phase after the grid (for flash).
    pub steady_state: bool,
    /// Each steady-state round's length.
    pub round: Duration,
    /// The fio to run.
    pub fio: PathBuf,
}

/// Where a collection is, for a progress bar.
pub enum Step<'a> {
    Precondition,
    Job {
        index: usize,
        total: usize,
        name: &'a str,
    },
    SteadyRound {
        round: usize,
        iops: Option<f64>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot run {fio}: {source}; install fio (apt-get install fio) or pass --fio PATH")]
    NoFio { fio: String, source: std::io::Error },
    #[error("{fio} says it is {version:?}; nvarray fit reads fio 3's JSON+ (fio-3.x)")]
    FioVersion { fio: String, version: String },
    #[error("{dir} already holds a collection ({MANIFEST}); give another --out")]
    OutExists { dir: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("preconditioning failed: {0}")]
    Precondition(String),
    #[error("the budget leaves no job: each takes {per_job:?} (ramp, runtime and start-up)")]
    NoJobs { per_job: Duration },
}

/// What `opts` would run on a target: the jobs, and those the budget leaves out.
pub fn plan(opts: &CollectOptions) -> grid::Plan {
    grid::plan(
        grid::full_grid(),
        opts.budget,
        opts.runtime + opts.ramp + JOB_OVERHEAD,
    )
}

/// Runs the collection on `target` into `opts.out`; `step` hears each stage as it starts.
pub fn collect(
    target: &Target,
    opts: &CollectOptions,
    step: &mut dyn FnMut(Step),
) -> Result<Manifest, CollectError> {
    let plan = plan(opts);
    if plan.jobs.is_empty() {
        return Err(CollectError::NoJobs {
            per_job: plan.per_job,
        });
    }
    let fio_version = fio_version(&opts.fio)?;
    let jobs_dir = opts.out.join("jobs");
    if opts.out.join(MANIFEST).exists() {
        return Err(CollectError::OutExists {
            dir: opts.out.display().to_string(),
        });
    }
    std::fs::create_dir_all(&jobs_dir).map_err(|source| CollectError::Io {
        what: format!("making {}", jobs_dir.display()),
        source,
    })?;
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let device = target.path.display().to_string();

    step(Step::Precondition);
    let started = Instant::now();
    let mut args = crate::grid::direct_io_args(
        "precondition",
        &device,
        "write",
        128 << 10,
        32,
        target.span_bytes,
    );
    args.extend(["--loops=2".into(), "--output-format=json".into()]);
    run_fio(&opts.fio, &args, &opts.out.join("precondition.json"))
        .map_err(CollectError::Precondition)?;
    let precondition = Precondition {
        bytes: 2 * target.span_bytes,
        seconds: started.elapsed().as_secs_f64(),
    };

    let mut records = Vec::with_capacity(plan.jobs.len());
    for (index, job) in plan.jobs.iter().enumerate() {
        let name = job.name();
        step(Step::Job {
            index,
            total: plan.jobs.len(),
            name: &name,
        });
        let file = format!("jobs/{name}.json");
        let args = job.fio_args(&device, target.span_bytes, opts.runtime, opts.ramp);
        let error = run_fio(&opts.fio, &args, &opts.out.join(&file)).err();
        records.push(JobRecord {
            job: *job,
            file,
            error,
            figures: None,
        });
    }

    let steady_state = if opts.steady_state {
        Some(steady_phase(target, opts, step))
    } else {
        None
    };
    let manifest = Manifest {
        format: FORMAT,
        target: device,
        kind: target.kind,
        span_bytes: target.span_bytes,
        fio_version,
        date,
        runtime_ms: opts.runtime.as_millis() as u64,
        ramp_ms: opts.ramp.as_millis() as u64,
        jobs: records,
        left_out: plan.left_out.iter().map(Job::name).collect(),
        precondition: Some(precondition),
        steady_state,
    };
    manifest
        .write(&opts.out)
        .map_err(|source| CollectError::Io {
            what: format!("writing {}", opts.out.join(MANIFEST).display()),
            source,
        })?;
    Ok(manifest)
}

/// Rounds of 4 KiB random writes at depth 32 until steady (SNIA) or `steady::ROUNDS_MAX`.
fn steady_phase(target: &Target, opts: &CollectOptions, step: &mut dyn FnMut(Step)) -> SteadyState {
    let device = target.path.display().to_string();
    let job = Job {
        pattern: grid::Pattern::RandWrite,
        bs: 4096,
        iodepth: 32,
    };
    let mut rounds = Vec::new();
    let mut steady_iops = None;
    for round in 0..steady::ROUNDS_MAX {
        step(Step::SteadyRound {
            round,
            iops: rounds.last().copied(),
        });
        let file = opts.out.join(format!("steady-{round:02}.json"));
        let args = job.fio_args(&device, target.span_bytes, opts.round, Duration::ZERO);
        let iops = run_fio(&opts.fio, &args, &file)
            .ok()
            .and_then(|_| std::fs::read_to_string(&file).ok())
            .and_then(|t| measured::figures(&t, &file.display().to_string()).ok())
            .map_or(0.0, |f| f.iops);
        rounds.push(iops);
        steady_iops = steady::steady_mean(&rounds);
        if steady_iops.is_some() {
            break;
        }
    }
    SteadyState {
        round_ms: opts.round.as_millis() as u64,
        rounds_iops: rounds,
        steady_iops,
    }
}

fn fio_version(fio: &Path) -> Result<String, CollectError> {
    let out = Command::new(fio)
        .arg("--version")
        .output()
        .map_err(|source| CollectError::NoFio {
            fio: fio.display().to_string(),
            source,
        })?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !version.starts_with("fio-3.") {
        return Err(CollectError::FioVersion {
            fio: fio.display().to_string(),
            version,
        });
    }
    Ok(version)
}

/// Runs fio with `args`, its report into `output` (not stdout: fio may print warnings
/// before the JSON there); the error is fio's exit status and the end of what it said.
fn run_fio(fio: &Path, args: &[String], output: &Path) -> Result<(), String> {
    let out = Command::new(fio)
        .args(args)
        .arg(format!("--output={}", output.display()))
        .output()
        .map_err(|e| format!("running {}: {e}", fio.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = said.lines().rev().take(3).collect();
    Err(format!(
        "fio exited with {}: {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
    ))
}
