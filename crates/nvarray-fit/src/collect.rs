//! `nvarray fit collect`: real fio over the grid on a checked target, each job's JSON+ output
//! kept in `DIR/jobs/`, and the manifest that says what ran. The target is first
//! preconditioned as SNIA's PTS does (its span written twice, sequentially, in 128 KiB
//! requests); with `steady_state`, rounds of 4 KiB random writes at depth 32 follow the grid
//! until SNIA's steady-state rule holds (`steady`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::grid::{self, Job};
use crate::manifest::{JobRecord, Manifest, Pass, Precondition, SteadyState, FORMAT, MANIFEST};
use crate::measured;
use crate::measured::Figures;
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
    /// Passes over the jobs (at least 1): each job's figures are then the medians of its
    /// passes, and the manifest keeps every pass.
    pub repeat: usize,
}

/// Where a collection is, for a progress bar.
pub enum Step<'a> {
    Precondition,
    Job {
        index: usize,
        total: usize,
        /// Which pass (from 0) of `passes`.
        pass: usize,
        passes: usize,
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
        (opts.runtime + opts.ramp + JOB_OVERHEAD) * opts.repeat.max(1) as u32,
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
    let precondition = precondition(target, &device, opts)?;

    let records = run_passes(&plan.jobs, &device, target.span_bytes, opts, step);

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

/// SNIA's preconditioning: the target's span written twice in 128 KiB sequential writes,
/// fio's output kept as `precondition.json`; what it wrote and how long it took.
fn precondition(
    target: &Target,
    device: &str,
    opts: &CollectOptions,
) -> Result<Precondition, CollectError> {
    let started = Instant::now();
    let mut args = crate::grid::direct_io_args(
        "precondition",
        device,
        "write",
        128 << 10,
        32,
        target.span_bytes,
    );
    args.extend(["--loops=2".into(), "--output-format=json".into()]);
    run_fio(&opts.fio, &args, &opts.out.join("precondition.json"))
        .map_err(CollectError::Precondition)?;
    Ok(Precondition {
        bytes: 2 * target.span_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Every job of `jobs` on `device` through fio, `opts.repeat` passes; each job's record.
fn run_passes(
    jobs: &[Job],
    device: &str,
    span_bytes: u64,
    opts: &CollectOptions,
    step: &mut dyn FnMut(Step),
) -> Vec<JobRecord> {
    // Pass after pass over the whole plan, not each job again at once: what drifts over minutes
    // (a cloud disk's burst credit, the host's other work) falls on each job's passes apart.
    let passes = opts.repeat.max(1);
    let mut runs: Vec<Vec<Pass>> = vec![Vec::with_capacity(passes); jobs.len()];
    for pass in 0..passes {
        for (index, job) in jobs.iter().enumerate() {
            let name = job.name();
            step(Step::Job {
                index,
                total: jobs.len(),
                pass,
                passes,
                name: &name,
            });
            let file = if pass == 0 {
                format!("jobs/{name}.json")
            } else {
                format!("jobs/{name}.pass{}.json", pass + 1)
            };
            let args = job.fio_args(device, span_bytes, opts.runtime, opts.ramp);
            let error = run_fio(&opts.fio, &args, &opts.out.join(&file)).err();
            runs[index].push(Pass {
                file,
                figures: None,
                error,
            });
        }
    }
    assert!(
        runs.iter().all(|r| r.len() == passes),
        "a job without one run per pass ({passes})"
    );
    jobs.iter()
        .zip(runs)
        .map(|(job, passes)| record(&opts.out, *job, passes))
        .collect()
}

/// A job's record from its passes: one pass as fio left it (the fit reads its file); several
/// with each pass's figures and their medians.
fn record(out: &Path, job: Job, mut passes: Vec<Pass>) -> JobRecord {
    assert!(
        !passes.is_empty(),
        "job {} recorded without a pass",
        job.name()
    );
    if passes.len() == 1 {
        let pass = passes.remove(0);
        return JobRecord {
            job,
            file: pass.file,
            error: pass.error,
            figures: None,
            passes: Vec::new(),
        };
    }
    for pass in passes.iter_mut().filter(|p| p.error.is_none()) {
        let path = out.join(&pass.file);
        let shown = path.display().to_string();
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| measured::figures(&t, &shown).map_err(|e| e.to_string()))
        {
            Ok(f) => pass.figures = Some(f),
            Err(e) => pass.error = Some(e),
        }
    }
    let done: Vec<Figures> = passes.iter().filter_map(|p| p.figures).collect();
    let first_ok = passes.iter().find(|p| p.figures.is_some());
    JobRecord {
        job,
        file: first_ok.unwrap_or(&passes[0]).file.clone(),
        error: if done.is_empty() {
            passes.iter().find_map(|p| p.error.clone())
        } else {
            None
        },
        figures: (!done.is_empty()).then(|| Figures {
            iops: median(done.iter().map(|f| f.iops)),
            mean_ns: median(done.iter().map(|f| f.mean_ns)),
            p99_ns: median(done.iter().map(|f| f.p99_ns)),
        }),
        passes,
    }
}

/// The median of some values (the mean of the middle two for an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    assert!(!v.is_empty(), "the median of no values");
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0].into_iter()), 2.5);
    }

    #[test]
    fn repeated_passes_give_the_medians_and_a_failed_pass_is_kept_out() {
        let dir = tempfile::tempdir().unwrap();
        let job = grid::full_grid()[0];
        // Three passes: one fio failed, one wrote a file that is not fio's, one is missing.
        let pass = |file: &str, error: Option<&str>| Pass {
            file: file.into(),
            figures: None,
            error: error.map(String::from),
        };
        std::fs::write(dir.path().join("bad.json"), "{}").unwrap();
        let r = record(
            dir.path(),
            job,
            vec![
                pass("a.json", Some("fio exited with 1")),
                pass("bad.json", None),
                pass("gone.json", None),
            ],
        );
        assert!(r.figures.is_none() && r.error.as_deref() == Some("fio exited with 1"));
        assert!(r.passes[1].error.is_some() && r.passes[2].error.is_some());

        // Passes fio completed: the record's figures are each figure's median over them.
        let mut passes = vec![pass("x", Some("fio exited with 1"))];
        for (i, iops) in [100.0, 300.0, 200.0].into_iter().enumerate() {
            let file = format!("p{i}.json");
            let mean = 1e9 / iops;
            let fio = serde_json::json!({
                "fio version": "fio-3.33",
                "jobs": [{ "jobname": "j", "error": 0,
                    "read": { "total_ios": 100, "iops": iops,
                              "lat_ns": { "mean": mean, "bins": { (mean as u64).to_string(): 100 } } },
                    "write": { "total_ios": 0, "iops": 0.0, "lat_ns": { "mean": 0.0 } } }]
            });
            std::fs::write(dir.path().join(&file), fio.to_string()).unwrap();
            passes.push(pass(&file, None));
        }
        let r = record(dir.path(), job, passes);
        let f = r.figures.unwrap();
        assert_eq!(f.iops, 200.0);
        assert_eq!(f.mean_ns, 1e9 / 200.0);
        assert_eq!(r.file, "p0.json", "the first pass fio completed");
        assert!(r.error.is_none() && r.passes.len() == 4);
        let m = Manifest {
            format: FORMAT,
            target: "t".into(),
            kind: crate::target::TargetKind::File,
            span_bytes: 1 << 30,
            fio_version: "fio-3.33".into(),
            date: String::new(),
            runtime_ms: 1000,
            ramp_ms: 0,
            jobs: vec![r],
            left_out: Vec::new(),
            precondition: None,
            steady_state: None,
        };
        let spread = m.repeatability().unwrap();
        // IOPS: |100/200 − 1|, |300/200 − 1|, 0 → 100/3 %.
        assert_eq!(spread.jobs, 1);
        assert!((spread.iops - 100.0 / 3.0).abs() < 1e-9, "{spread:?}");
    }
}
