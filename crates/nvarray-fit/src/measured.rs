//! One job's figures from fio's JSON+ output: IOPS, mean latency and p99, reads and writes
//! together. Read from fio 3 (whose JSON+ layout these fields have kept since fio-3.0) or from
//! nvarray's own rendering of that layout (`nvarray sim --output-format json+`).

use serde_json::Value;

/// The three figures the fit matches and reports.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    /// Reads and writes completed per second.
    pub iops: f64,
    /// Mean latency from submission to completion (fio's `lat_ns`), in ns, over both directions.
    pub mean_ns: f64,
    /// 99th percentile of that latency over both directions, in ns (from the JSON+ bins).
    pub p99_ns: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum FioOutputError {
    #[error(
        "{file}: not JSON ({source}); was fio run with --output-format=json+ and --output=FILE?"
    )]
    NotJson {
        file: String,
        source: serde_json::Error,
    },
    #[error("{file}: written by {version:?}; nvarray fit reads fio 3's JSON+ (fio-3.x) or nvarray's own")]
    Version { file: String, version: String },
    #[error("{file}: {what}")]
    Layout { file: String, what: String },
    #[error("{file}: job {job} failed in fio (error {errno}: {text})")]
    JobFailed {
        file: String,
        job: String,
        errno: i64,
        text: String,
    },
    #[error("{file}: job {job} completed no I/O")]
    NoIo { file: String, job: String },
}

/// Whether `version` (fio's `fio version` field) is a layout this reader knows.
pub fn known_version(version: &str) -> bool {
    version.starts_with("fio-3.") || version.starts_with("nvarray-") || version == "published"
}

/// The figures of the first job in `text`, fio's JSON+ output; `file` names it in errors.
pub fn figures(text: &str, file: &str) -> Result<Figures, FioOutputError> {
    let v: Value = serde_json::from_str(text).map_err(|source| FioOutputError::NotJson {
        file: file.into(),
        source,
    })?;
    let layout = |what: &str| FioOutputError::Layout {
        file: file.into(),
        what: what.into(),
    };
    let version = v["fio version"].as_str().unwrap_or("(none)");
    if !known_version(version) {
        return Err(FioOutputError::Version {
            file: file.into(),
            version: version.into(),
        });
    }
    let job = v["jobs"]
        .get(0)
        .ok_or_else(|| layout("no jobs in the output"))?;
    let name = job["jobname"].as_str().unwrap_or("?").to_string();
    let errno = job["error"].as_i64().unwrap_or(0);
    if errno != 0 {
        return Err(FioOutputError::JobFailed {
            file: file.into(),
            job: name,
            errno,
            text: std::io::Error::from_raw_os_error(errno as i32).to_string(),
        });
    }
    let mut iops = 0.0;
    let mut ios = 0.0;
    let mut lat_sum = 0.0;
    let mut bins: Vec<(f64, f64)> = Vec::new();
    for dir in ["read", "write"] {
        let d = &job[dir];
        let n = d["total_ios"].as_f64().unwrap_or(0.0);
        if n == 0.0 {
            continue;
        }
        let mean = d["lat_ns"]["mean"]
            .as_f64()
            .ok_or_else(|| layout(&format!("{dir}.lat_ns.mean missing")))?;
        iops += d["iops"]
            .as_f64()
            .ok_or_else(|| layout(&format!("{dir}.iops missing")))?;
        ios += n;
        lat_sum += mean * n;
        push_latency_bins(d, dir, &layout, &mut bins)?;
    }
    if ios == 0.0 || iops.is_nan() || iops <= 0.0 {
        return Err(FioOutputError::NoIo {
            file: file.into(),
            job: name,
        });
    }
    Ok(Figures {
        iops,
        mean_ns: lat_sum / ios,
        p99_ns: quantile(&mut bins, 0.99),
    })
}

/// Adds direction `dir`'s latency bins (`d`, fio's object for it) to `bins` as (ns, count);
/// `layout` makes the error for a missing or malformed field.
fn push_latency_bins(
    d: &Value,
    dir: &str,
    layout: &dyn Fn(&str) -> FioOutputError,
    bins: &mut Vec<(f64, f64)>,
) -> Result<(), FioOutputError> {
    // `lat_ns` has bins with --lat_percentiles=1; otherwise the completion latency's.
    let b = d["lat_ns"]["bins"]
        .as_object()
        .or_else(|| d["clat_ns"]["bins"].as_object())
        .ok_or_else(|| {
            layout(&format!(
                "{dir} has no latency bins: run fio with --output-format=json+"
            ))
        })?;
    for (k, c) in b {
        let at: f64 = k
            .parse()
            .map_err(|_| layout(&format!("{dir} bin key {k:?} is not a number")))?;
        bins.push((at, c.as_f64().unwrap_or(0.0)));
    }
    Ok(())
}

/// The `q` quantile of `(value, count)` bins: the smallest value with at least `q` of the
/// counts at or below it.
pub(crate) fn quantile(bins: &mut [(f64, f64)], q: f64) -> f64 {
    assert!((0.0..=1.0).contains(&q), "quantile {q} outside 0 to 1");
    bins.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = bins.iter().map(|b| b.1).sum();
    let mut seen = 0.0;
    for &(at, count) in bins.iter() {
        seen += count;
        if seen >= q * total {
            return at;
        }
    }
    bins.last().map_or(0.0, |b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(version: &str, error: i64) -> String {
        serde_json::json!({
            "fio version": version,
            "jobs": [{
                "jobname": "randrw-4k-qd1", "error": error,
                "read": { "total_ios": 70, "iops": 700.0,
                          "lat_ns": { "mean": 1000.0, "bins": { "900": 60, "5000": 10 } } },
                "write": { "total_ios": 30, "iops": 300.0,
                           "lat_ns": { "mean": 2000.0 },
                           "clat_ns": { "bins": { "1800": 29, "9000": 1 } } },
            }]
        })
        .to_string()
    }

    #[test]
    fn both_directions_count_and_the_p99_comes_from_the_bins() {
        let f = figures(&output("fio-3.33", 0), "x.json").unwrap();
        assert_eq!(f.iops, 1000.0);
        assert_eq!(f.mean_ns, 1300.0);
        // 60 + 29 = 89 ≤ 1800; the 99th of 100 is in the 5000 bin.
        assert_eq!(f.p99_ns, 5000.0);
    }

    #[test]
    fn another_tool_a_failed_job_and_plain_json_are_refused() {
        let e = figures(&output("fio-2.21", 0), "x.json").unwrap_err();
        assert!(e.to_string().contains("fio-2.21"), "{e}");
        let e = figures(&output("fio-3.33", 5), "x.json").unwrap_err();
        assert!(
            matches!(e, FioOutputError::JobFailed { errno: 5, .. }),
            "{e}"
        );
        let plain = output("fio-3.33", 0).replace("\"bins\"", "\"nobins\"");
        assert!(figures(&plain, "x.json")
            .unwrap_err()
            .to_string()
            .contains("json+"));
        assert!(matches!(
            figures("fio: warning\n{", "x.json"),
            Err(FioOutputError::NotJson { .. })
        ));
    }
}
