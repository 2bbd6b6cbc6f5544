//! `DIR/manifest.json`: what a collection ran, on what, with which fio, and where each job's
//! fio output is. `nvarray fit collect` writes it; `nvarray fit DIR` reads it.

use std::path::Path;

use crate::grid::Job;
use crate::measured::Figures;
use crate::target::TargetKind;

pub const MANIFEST: &str = "manifest.json";
/// The layout's version; a reader refuses another.
pub const FORMAT: u32 = 1;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The device or file measured.
    pub target: String,
    pub kind: TargetKind,
    /// The bytes the jobs ranged over, from offset 0.
    pub span_bytes: u64,
    /// `fio --version`, e.g. `fio-3.33`.
    pub fio_version: String,
    /// When the collection started, RFC 3339 in UTC.
    pub date: String,
    /// Each job's measured time and the ramp before it.
    pub runtime_ms: u64,
    pub ramp_ms: u64,
    pub jobs: Vec<JobRecord>,
    /// Jobs of the grid the time budget left out, by name.
    #[serde(default)]
    pub left_out: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precondition: Option<Precondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_state: Option<SteadyState>,
}

/// One job of the grid and its fio output, relative to the directory.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobRecord {
    #[serde(flatten)]
    pub job: Job,
    pub file: String,
    /// Why fio failed, when it did (its exit status and last words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The figures themselves, for published points (`points`), which have no fio output;
    /// `file` then names their source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<Figures>,
    /// Each pass of a collection run with `--repeat`: `figures` is then each figure's median
    /// over the passes fio completed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passes: Vec<Pass>,
}

/// One pass of a repeated job.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Pass {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<Figures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How far a device's passes of the same jobs stray from their median: the mean over jobs and
/// passes of `|pass − median| / median`, in percent.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Repeatability {
    pub jobs: usize,
    pub iops: f64,
    pub mean_latency: f64,
}

impl Manifest {
    /// The passes' spread, over the jobs with two or more passes that fio completed; `None`
    /// for a collection run once.
    pub fn repeatability(&self) -> Option<Repeatability> {
        let (mut n, mut iops, mut mean, mut jobs) = (0usize, 0.0, 0.0, 0);
        for record in &self.jobs {
            let (Some(median), passes) = (record.figures, &record.passes) else {
                continue;
            };
            let done: Vec<Figures> = passes.iter().filter_map(|p| p.figures).collect();
            if done.len() < 2 {
                continue;
            }
            jobs += 1;
            for f in done {
                n += 1;
                iops += (f.iops / median.iops - 1.0).abs();
                mean += (f.mean_ns / median.mean_ns - 1.0).abs();
            }
        }
        (n > 0).then(|| Repeatability {
            jobs,
            iops: 100.0 * iops / n as f64,
            mean_latency: 100.0 * mean / n as f64,
        })
    }
}

/// SNIA PTS's workload-independent preconditioning: the span written sequentially in 128 KiB
/// requests, twice.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Precondition {
    pub bytes: u64,
    pub seconds: f64,
}

/// The steady-state write phase: rounds of 4 KiB random writes at depth 32 until SNIA's rule
/// holds (`steady::steady_mean`) or 25 rounds have run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SteadyState {
    pub round_ms: u64,
    /// Write IOPS of each round.
    pub rounds_iops: Vec<f64>,
    /// The mean of the last window, when it was steady.
    pub steady_iops: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(
        "{dir}: no {MANIFEST}: is this a directory `nvarray fit collect --out` wrote? ({source})"
    )]
    Missing { dir: String, source: std::io::Error },
    #[error("{path}: {source}")]
    Malformed {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: layout version {found}, this nvarray reads version {FORMAT}")]
    Version { path: String, found: u32 },
}

impl Manifest {
    pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Missing {
            dir: dir.display().to_string(),
            source,
        })?;
        let m: Manifest =
            serde_json::from_str(&text).map_err(|source| ManifestError::Malformed {
                path: path.display().to_string(),
                source,
            })?;
        if m.format != FORMAT {
            return Err(ManifestError::Version {
                path: path.display().to_string(),
                found: m.format,
            });
        }
        Ok(m)
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("a manifest serialises");
        std::fs::write(dir.join(MANIFEST), text + "\n")
    }
}
