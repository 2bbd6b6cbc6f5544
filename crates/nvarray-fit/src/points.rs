//! Published points instead of a collection: a datasheet's or a paper's figures, each a grid
//! job with its IOPS, mean latency or bandwidth, in a TOML file that `nvarray fit` reads in
//! place of a directory (docs/fit/*.toml). A closed loop at queue depth `qd` has
//! `IOPS = qd / mean latency` (Little's law), so either figure gives the other; a point has no
//! distribution, so its p99 is its mean.

use std::path::Path;

use crate::grid::{Job, Pattern};
use crate::manifest::{JobRecord, Manifest, FORMAT};
use crate::measured::Figures;
use crate::target::TargetKind;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PointsFile {
    /// Where the figures come from.
    source: String,
    point: Vec<Point>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Point {
    /// A grid job's name, `randread-4k-qd16`.
    job: String,
    iops: Option<f64>,
    mean_us: Option<f64>,
    /// Megabytes (1e6 bytes) per second.
    mb_per_s: Option<f64>,
    /// Where this figure comes from, when not the file's source.
    #[serde(default)]
    source: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PointsError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Toml { path: String, message: String },
    #[error("{path}: point {job:?}: {why}")]
    Point {
        path: String,
        job: String,
        why: String,
    },
}

/// The points in `path` as a collection: a manifest whose jobs carry their figures.
pub fn read(path: &Path) -> Result<Manifest, PointsError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PointsError::Read {
        path: shown.clone(),
        source,
    })?;
    let file: PointsFile = toml::from_str(&text).map_err(|e| PointsError::Toml {
        path: shown.clone(),
        message: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    })?;
    let mut jobs = Vec::new();
    for p in file.point {
        let bad = |why: &str| PointsError::Point {
            path: shown.clone(),
            job: p.job.clone(),
            why: why.into(),
        };
        let job = job_named(&p.job).ok_or_else(|| {
            bad("not a job name: PATTERN-SIZE-qdDEPTH, e.g. randread-4k-qd16 or randrw-512-qd1")
        })?;
        let qd = f64::from(job.iodepth);
        let iops = p
            .iops
            .or(p.mb_per_s.map(|m| m * 1e6 / f64::from(job.bs)))
            .or(p.mean_us.map(|us| qd / (us * 1e-6)))
            .ok_or_else(|| bad("give iops, mean_us or mb_per_s"))?;
        let mean_ns = p.mean_us.map_or(qd / iops * 1e9, |us| us * 1e3);
        if !(iops > 0.0 && mean_ns > 0.0 && iops.is_finite() && mean_ns.is_finite()) {
            return Err(bad("figures must be positive"));
        }
        jobs.push(JobRecord {
            job,
            file: p.source.unwrap_or_else(|| file.source.clone()),
            error: None,
            passes: Vec::new(),
            figures: Some(Figures {
                iops,
                mean_ns,
                p99_ns: mean_ns,
            }),
        });
    }
    Ok(Manifest {
        format: FORMAT,
        target: file.source,
        kind: TargetKind::File,
        span_bytes: 1 << 30,
        fio_version: "published".into(),
        date: String::new(),
        runtime_ms: 0,
        ramp_ms: 0,
        jobs,
        left_out: Vec::new(),
        precondition: None,
        steady_state: None,
    })
}

/// The job called `name` (`Job::name`'s form: `randread-4k-qd16`); sizes and depths need
/// not be the grid's, as a datasheet's points often are not.
fn job_named(name: &str) -> Option<Job> {
    let mut parts = name.split('-');
    let (rw, size, depth) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let pattern = *Pattern::ALL.iter().find(|p| p.rw() == rw)?;
    let (digits, unit) = match size.strip_suffix('k') {
        Some(d) => (d, 1 << 10),
        None => size.strip_suffix('m').map_or((size, 1), |d| (d, 1 << 20)),
    };
    let bs = digits.parse::<u32>().ok()?.checked_mul(unit)?;
    let iodepth = depth.strip_prefix("qd")?.parse::<u32>().ok()?;
    let job = Job {
        pattern,
        bs,
        iodepth,
    };
    (bs > 0 && iodepth > 0 && job.name() == name).then_some(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_gives_iops_from_latency_or_bandwidth_by_littles_law() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(
            &path,
            "source = \"sheet\"\n\
             [[point]]\njob = \"randread-4k-qd1\"\nmean_us = 10\n\
             [[point]]\njob = \"read-64k-qd16\"\nmb_per_s = 2400\n\
             [[point]]\njob = \"randwrite-4k-qd16\"\niops = 500000\n",
        )
        .unwrap();
        let m = read(&path).unwrap();
        let f: Vec<Figures> = m.jobs.iter().map(|j| j.figures.unwrap()).collect();
        assert_eq!(
            (f[0].iops.round(), f[0].mean_ns.round()),
            (100_000.0, 10_000.0)
        );
        assert_eq!(f[1].iops.round(), (2.4e9_f64 / 65536.0).round());
        assert_eq!(f[2].mean_ns.round(), 32_000.0);
        std::fs::write(
            &path,
            "source = \"s\"\n[[point]]\njob = \"randread-3x-qd1\"\niops = 1\n",
        )
        .unwrap();
        assert!(read(&path)
            .unwrap_err()
            .to_string()
            .contains("not a job name"));
        std::fs::write(
            &path,
            "source = \"s\"\n[[point]]\njob = \"randread-4k-qd1\"\n",
        )
        .unwrap();
        assert!(read(&path).unwrap_err().to_string().contains("give iops"));
    }
}
