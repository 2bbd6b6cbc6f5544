//! `nvarray fit DIR`: the base preset's parameters (`params`) moved until the simulator
//! reproduces the training jobs' IOPS and mean latency (`search`, the loss in log ratios, so a
//! 10 % miss weighs the same at 500 IOPS as at 500 K), then each parameter's range and
//! whether the grid identifies it (`uncertainty`), and the error on the held-out jobs the fit
//! never saw.

use std::path::Path;
use std::time::Instant;

use nvarray_model::overrides::apply_overrides;
use nvarray_model::DeviceConfig;
use nvarray_workload::Workload;

use crate::grid::Job;
use crate::least_squares;
use crate::manifest::Manifest;
use crate::measured::{self, Figures};
use crate::objective::{cauchy_loss, Objective, Outcome};
use crate::params::{self, Param};
use crate::search;
use crate::simulate;
use crate::uncertainty::{self, Range};

/// A run the candidate device cannot make counts as this far off in each log ratio (×100).
const MISS: f64 = 4.605_170_185_988_091; // ln 100

pub struct FitOptions {
    /// Threads for the simulator's runs.
    pub jobs: usize,
    /// Most objective evaluations (each a simulation of every training job).
    pub evaluations: usize,
}

/// One measured job, ready for the simulator.
pub struct JobData {
    pub job: Job,
    pub measured: Figures,
    pub held_out: bool,
    workload: Workload,
}

/// Jobs of the collection left out of the fit, and why.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skipped {
    pub job: String,
    pub why: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    #[error("{dir}: fio reports {version:?}; nvarray fit reads fio 3's JSON+ (fio-3.x) or nvarray's own")]
    FioVersion { dir: String, version: String },
    #[error("{0}")]
    Output(#[from] measured::FioOutputError),
    #[error(
        "only {training} jobs in {dir} left for the fit once {held_out} are held out and {skipped} skipped; a fit needs at least {needed} (a smaller --held-out leaves more)"
    )]
    TooFewJobs {
        dir: String,
        training: usize,
        held_out: usize,
        skipped: usize,
        needed: usize,
    },
    #[error("the base device: {0}")]
    Base(String),
    #[error(transparent)]
    Points(#[from] crate::points::PointsError),
}

/// The jobs of a collection (a directory `fit collect` wrote, or a file of published points)
/// with their figures; jobs fio failed are skipped with the reason.
pub fn load(
    path: &Path,
    held_out: f64,
) -> Result<(Manifest, Vec<JobData>, Vec<Skipped>), FitError> {
    let (manifest, dir) = if path.is_file() {
        (crate::points::read(path)?, None)
    } else {
        (Manifest::read(path)?, Some(path))
    };
    if !measured::known_version(&manifest.fio_version) {
        return Err(FitError::FioVersion {
            dir: path.display().to_string(),
            version: manifest.fio_version.clone(),
        });
    }
    let (jobs, skipped) = jobs_of(&manifest, dir, held_out)?;
    let needed = 3;
    let training = jobs.iter().filter(|j| !j.held_out).count();
    if training < needed {
        return Err(FitError::TooFewJobs {
            dir: path.display().to_string(),
            training,
            held_out: jobs.len() - training,
            skipped: skipped.len(),
            needed,
        });
    }
    Ok((manifest, jobs, skipped))
}

/// The collection's records as jobs with their figures (read from each job's fio output in
/// `dir`, for a collection `fit collect` wrote), and the records skipped with the reason.
fn jobs_of(
    manifest: &Manifest,
    dir: Option<&Path>,
    held_out: f64,
) -> Result<(Vec<JobData>, Vec<Skipped>), FitError> {
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    for record in &manifest.jobs {
        let name = record.job.name();
        let skip = |why: String| Skipped {
            job: name.clone(),
            why,
        };
        if let Some(e) = &record.error {
            skipped.push(skip(e.clone()));
            continue;
        }
        let figures = match (record.figures, dir) {
            (Some(f), _) => f,
            (None, None) => {
                skipped.push(skip("no figures".into()));
                continue;
            }
            (None, Some(dir)) => match read_figures(dir, &record.file) {
                Ok(f) => f,
                // Another tool's output is the collection's fault, not one job's.
                Err(e @ measured::FioOutputError::Version { .. }) => return Err(e.into()),
                Err(e) => {
                    skipped.push(skip(e.to_string()));
                    continue;
                }
            },
        };
        jobs.push(JobData {
            job: record.job,
            measured: figures,
            held_out: is_held_out(&name, held_out),
            workload: simulate::workload(&record.job, &figures, manifest.span_bytes),
        });
    }
    assert_eq!(
        jobs.len() + skipped.len(),
        manifest.jobs.len(),
        "every record of the collection is either a job or skipped"
    );
    Ok((jobs, skipped))
}

/// The figures of one job's fio output, the file `file` in `dir`.
fn read_figures(dir: &Path, file: &str) -> Result<Figures, measured::FioOutputError> {
    let path = dir.join(file);
    let shown = path.display().to_string();
    std::fs::read_to_string(&path)
        .map_err(|e| measured::FioOutputError::Layout {
            file: shown.clone(),
            what: e.to_string(),
        })
        .and_then(|text| measured::figures(&text, &shown))
}

/// Whether the job called `name` is held out: a share `fraction` of names, by FNV-1a hash,
/// so the split is the same on every machine and for every subset of the grid.
pub fn is_held_out(name: &str, fraction: f64) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    ((h >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

/// A fitted parameter as the report shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FittedParam {
    pub name: &'static str,
    pub meaning: &'static str,
    pub base: f64,
    pub value: f64,
    pub range: Range,
    /// The `key = value` overrides that give it `value` (a group sets several keys).
    pub assignments: Vec<(String, String)>,
}

/// One job's measured and fitted figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct JobFit {
    pub job: String,
    pub held_out: bool,
    pub measured: Figures,
    /// `None` when the fitted device could not run it.
    pub fitted: Option<Figures>,
}

/// Mean absolute percentage errors over a set of jobs.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Mape {
    pub jobs: usize,
    pub iops: f64,
    pub mean_latency: f64,
    pub p99: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct FitReport {
    pub base: String,
    pub params: Vec<FittedParam>,
    pub jobs: Vec<JobFit>,
    pub training: Mape,
    pub held_out: Mape,
    /// Loss (`objective::cauchy_loss` of the log ratios of IOPS and of mean latency over the training jobs) at
    /// the base preset and at the fit.
    pub loss_base: f64,
    pub loss: f64,
    pub evaluations: usize,
    /// Other points the search met whose loss is under `uncertainty::near_limit`: the ranges
    /// hold them.
    pub near_fits: usize,
    pub budget_spent: bool,
    pub seconds: f64,
    pub skipped: Vec<Skipped>,
    /// The fitted parameters' overrides on the base preset.
    pub assignments: Vec<(String, String)>,
    /// Over-provisioning fitted to the steady-state rounds (a flash base, steady data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<crate::steady_fit::SteadyFit>,
}

impl FitReport {
    /// The error in a few words: on the held-out jobs, or on the training jobs when none was
    /// held out (published points), said so.
    pub fn error_words(&self) -> String {
        if self.held_out.jobs > 0 {
            format!(
                "held-out MAPE {:.1} % IOPS, {:.1} % mean latency ({} jobs)",
                self.held_out.iops, self.held_out.mean_latency, self.held_out.jobs
            )
        } else {
            format!(
                "no job held out; training MAPE {:.1} % IOPS, {:.1} % mean latency ({} jobs)",
                self.training.iops, self.training.mean_latency, self.training.jobs
            )
        }
    }

    pub fn not_identified(&self) -> Vec<&'static str> {
        self.params
            .iter()
            .filter(|p| !p.range.identified)
            .map(|p| p.name)
            .collect()
    }
}

/// Fits `base_toml` (named `base_name` in the report) to `jobs`; `progress(evaluations, loss)`
/// hears each improvement.
pub fn fit(
    base_name: &str,
    base_toml: &str,
    manifest: &Manifest,
    jobs: &[JobData],
    skipped: Vec<Skipped>,
    opts: &FitOptions,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<FitReport, FitError> {
    let started = Instant::now();
    let base = apply_overrides(base_toml, &[]).map_err(|e| FitError::Base(e.to_string()))?;
    let params = params::for_base(&base);
    let training: Vec<&JobData> = jobs.iter().filter(|j| !j.held_out).collect();
    let train_loads: Vec<Workload> = training.iter().map(|j| j.workload.clone()).collect();
    let train_measured: Vec<Figures> = training.iter().map(|j| j.measured).collect();
    let cut = capacity_cut(&base, base_toml, manifest);
    let device_at = |values: &[f64]| -> Option<DeviceConfig> {
        let mut o = assignments(&params, values);
        o.extend(cut.clone());
        apply_overrides(base_toml, &o).ok()
    };
    let residuals_at = |values: &[f64]| -> Vec<f64> {
        match device_at(values) {
            Some(d) => residuals(
                &simulate::predict(&d, &train_loads, opts.jobs),
                &train_measured,
            ),
            None => vec![MISS; 2 * train_loads.len()],
        }
    };
    let searched = search_fit(&params, residuals_at, opts.evaluations, progress);
    let outcome = &searched.outcome;

    // Every job at the fit, training and held out.
    let fitted_device = device_at(&outcome.values).ok_or_else(|| {
        FitError::Base("the fitted values do not make a valid device".to_string())
    })?;
    let fitted = assignments(&params, &outcome.values);
    let steady = steady_fit(&base, base_toml, manifest, &fitted);
    let job_fits = job_fits(&fitted_device, jobs, opts.jobs);
    Ok(FitReport {
        base: base_name.to_string(),
        params: fitted_params(&params, &outcome.values, searched.ranges),
        training: mape(job_fits.iter().filter(|j| !j.held_out)),
        held_out: mape(job_fits.iter().filter(|j| j.held_out)),
        jobs: job_fits,
        loss_base: searched.loss_base,
        loss: outcome.loss,
        evaluations: searched.evaluations,
        near_fits: searched.near_fits,
        budget_spent: outcome.budget_spent,
        seconds: started.elapsed().as_secs_f64(),
        skipped,
        assignments: fitted,
        steady,
    })
}

/// The capacity override that shrinks the simulator's device to the span the jobs touched,
/// or `None` when the base is no larger or that size is not a valid capacity.
fn capacity_cut(
    base: &DeviceConfig,
    base_toml: &str,
    manifest: &Manifest,
) -> Option<(String, String)> {
    // The simulator's device spans only what the jobs touched: a preset's capacity would
    // build its wear-levelling tables for hundreds of GB at every run (a quarter of the
    // search's time on optane). Kept at the base's when that size is not a valid capacity.
    let cut = (
        "memory.capacity_bytes".to_string(),
        manifest.span_bytes.to_string(),
    );
    (base.memory.capacity_bytes > manifest.span_bytes
        && apply_overrides(base_toml, std::slice::from_ref(&cut)).is_ok())
    .then_some(cut)
}

/// What the search found: where it ended, the loss at the base, each parameter's range and
/// how many other points those ranges hold.
struct Searched {
    outcome: Outcome,
    loss_base: f64,
    ranges: Vec<Range>,
    near_fits: usize,
    evaluations: usize,
}

/// Searches from the parameters' start for the values whose residuals (`residuals_at`) have
/// the least loss, within `budget` evaluations, telling `progress` of each improvement; then
/// the parameters' ranges around the fit.
fn search_fit(
    params: &[Param],
    residuals_at: impl Fn(&[f64]) -> Vec<f64>,
    budget: usize,
    progress: &mut dyn FnMut(usize, f64),
) -> Searched {
    let mut best = f64::INFINITY;
    let mut calls = 0;
    let mut residuals_seen = |values: &[f64]| {
        let r = residuals_at(values);
        let l = cauchy_loss(&r);
        calls += 1;
        if l < best {
            best = l;
            progress(calls, l);
        }
        r
    };
    let start: Vec<f64> = params.iter().map(Param::start).collect();
    let mut objective = Objective::new(params, &mut residuals_seen);
    let loss_base = objective.at(&objective.legal(&start));
    let outcome = search::minimise(&mut objective, &start, budget);
    let (jacobian, at_fit) = least_squares::jacobian(&mut objective, &outcome.values);
    let mut ranges = uncertainty::ranges(&jacobian, &at_fit, &outcome.values);
    let limit = uncertainty::near_limit(outcome.loss, at_fit.len(), params.len());
    let near = objective.within(limit);
    assert!(
        !near.is_empty(),
        "the fit's own point (loss {}) is under its limit {limit}",
        outcome.loss
    );
    uncertainty::widen(&mut ranges, &outcome.values, &near);
    let evaluations = objective.evaluations();
    Searched {
        outcome,
        loss_base,
        ranges,
        near_fits: near.len().saturating_sub(1),
        evaluations,
    }
}

/// Over-provisioning fitted alone to the steady-state rounds, for a flash base (one with
/// erase blocks) whose collection has them.
fn steady_fit(
    base: &DeviceConfig,
    base_toml: &str,
    manifest: &Manifest,
    fitted: &[(String, String)],
) -> Option<crate::steady_fit::SteadyFit> {
    match manifest.steady_state.as_ref().and_then(|s| s.steady_iops) {
        Some(iops) if base.memory.erase_block_bytes > 0 => {
            crate::steady_fit::fit(base_toml, fitted, manifest.span_bytes, iops)
        }
        _ => None,
    }
}

/// The parameters as the report shows them: base, fitted value, range and keys.
fn fitted_params(params: &[Param], values: &[f64], ranges: Vec<Range>) -> Vec<FittedParam> {
    assert_eq!(values.len(), params.len(), "one fitted value per parameter");
    assert_eq!(ranges.len(), params.len(), "one range per parameter");
    params
        .iter()
        .zip(values)
        .zip(ranges)
        .map(|((p, &value), range)| FittedParam {
            name: p.name,
            meaning: p.meaning,
            base: p.start(),
            value,
            range,
            assignments: p.assignments(value),
        })
        .collect()
}

/// Every job, training and held out, on the fitted device.
fn job_fits(device: &DeviceConfig, jobs: &[JobData], threads: usize) -> Vec<JobFit> {
    let all_loads: Vec<Workload> = jobs.iter().map(|j| j.workload.clone()).collect();
    let predicted = simulate::predict(device, &all_loads, threads);
    jobs.iter()
        .zip(predicted)
        .map(|(j, p)| JobFit {
            job: j.job.name(),
            held_out: j.held_out,
            measured: j.measured,
            fitted: p,
        })
        .collect()
}

fn assignments(params: &[Param], values: &[f64]) -> Vec<(String, String)> {
    assert_eq!(values.len(), params.len(), "one value per parameter");
    params
        .iter()
        .zip(values)
        .flat_map(|(p, &v)| p.assignments(v))
        .collect()
}

/// Log ratios of IOPS and of mean latency, two per job; a run that failed misses by `MISS`.
fn residuals(predicted: &[Option<Figures>], measured: &[Figures]) -> Vec<f64> {
    assert_eq!(
        predicted.len(),
        measured.len(),
        "one prediction per measured training job"
    );
    predicted
        .iter()
        .zip(measured)
        .flat_map(|(p, m)| match p {
            Some(p) => [(p.iops / m.iops).ln(), (p.mean_ns / m.mean_ns).ln()],
            None => [MISS, MISS],
        })
        .collect()
}

fn mape<'a>(jobs: impl Iterator<Item = &'a JobFit>) -> Mape {
    let mut m = Mape::default();
    let off = |p: f64, q: f64| 100.0 * (p - q).abs() / q;
    for j in jobs {
        m.jobs += 1;
        let (iops, mean, p99) = match &j.fitted {
            Some(f) => (
                off(f.iops, j.measured.iops),
                off(f.mean_ns, j.measured.mean_ns),
                off(f.p99_ns, j.measured.p99_ns),
            ),
            None => (100.0, 100.0, 100.0),
        };
        m.iops += iops;
        m.mean_latency += mean;
        m.p99 += p99;
    }
    let n = m.jobs.max(1) as f64;
    m.iops /= n;
    m.mean_latency /= n;
    m.p99 /= n;
    m
}
