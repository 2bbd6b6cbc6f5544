//! `--ftl-plot FILE`: the FTL over device time, from its samples (`nvarray_model::FtlSample`):
//! FILE charts the write amplification of each interval between samples, and its sibling
//! `FILE-bandwidth` (same format) the host's write bandwidth over the same intervals, so the
//! write cliff shows in both. One curve for a run; one per point for a sweep.

use std::path::{Path, PathBuf};

use anyhow::Result;
use nvarray_model::FtlSample;
use nvarray_present::plot::{write_chart, Chart, Series};

use nvarray_sys::input::input_error;

/// One curve: a run's (or a sweep point's) samples.
pub struct Curve {
    pub label: String,
    pub page_bytes: u32,
    pub samples: Vec<FtlSample>,
}

/// The bandwidth chart beside `path`: `waf.png` gives `waf-bandwidth.png`.
pub fn bandwidth_path(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-bandwidth.{}", ext.to_string_lossy()),
        None => format!("{stem}-bandwidth"),
    };
    let bandwidth = path.with_file_name(name);
    // The second chart must never overwrite the first.
    assert_ne!(bandwidth, path, "the bandwidth chart is the WAF chart");
    bandwidth
}

/// Each interval between samples in which the host wrote: its end (ms of device time), its
/// write amplification and the host's write bandwidth in MB/s.
fn intervals(curve: &Curve) -> Vec<(f64, f64, f64)> {
    curve
        .samples
        .windows(2)
        .filter(|w| w[1].host_pages_written > w[0].host_pages_written)
        .map(|w| {
            let host = (w[1].host_pages_written - w[0].host_pages_written) as f64;
            let flash = (w[1].flash_pages_programmed - w[0].flash_pages_programmed) as f64;
            let ns = w[1].device_ns.saturating_sub(w[0].device_ns).max(1) as f64;
            let mb_per_s = host * f64::from(curve.page_bytes) / ns * 1e3;
            (w[1].device_ns as f64 / 1e6, flash / host, mb_per_s)
        })
        .collect()
}

/// Writes both charts for `curves` under `title` (what was run). A curve with fewer than two
/// samples in which the host wrote is left out; none left is an input error that says to
/// write more.
pub fn write(path: &Path, title: &str, curves: &[Curve]) -> Result<()> {
    let mut waf = Vec::new();
    let mut bandwidth = Vec::new();
    for c in curves {
        let points = intervals(c);
        if points.is_empty() {
            continue;
        }
        waf.push(Series {
            label: c.label.clone(),
            points: points.iter().map(|&(t, w, _)| (t, w)).collect(),
        });
        bandwidth.push(Series {
            label: c.label.clone(),
            points: points.iter().map(|&(t, _, b)| (t, b)).collect(),
        });
    }
    if waf.is_empty() {
        return Err(input_error(
            "--ftl-plot: no run wrote enough for two samples of the FTL's counts (write more: \
             a longer --runtime)",
        ));
    }
    let charts = [
        (
            path.to_path_buf(),
            format!("{title}: write amplification per interval"),
            "write amplification (flash pages / host pages)",
            waf,
        ),
        (
            bandwidth_path(path),
            format!("{title}: host write bandwidth per interval"),
            "host writes (MB/s)",
            bandwidth,
        ),
    ];
    for (file, title, y_label, series) in &charts {
        write_chart(
            file,
            &Chart {
                title,
                x_label: "device time (ms)",
                y_label,
                log_x: false,
                log_y: false,
                series,
                reference: None,
                guide_then_points: false,
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("wrote {}", file.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, host: u64, flash: u64) -> FtlSample {
        FtlSample {
            device_ns: ms * 1_000_000,
            host_pages_written: host,
            flash_pages_programmed: flash,
            free_lines: 0,
        }
    }

    #[test]
    fn intervals_give_each_ones_amplification_and_bandwidth() {
        let curve = Curve {
            label: String::new(),
            page_bytes: 4096,
            samples: vec![
                sample(0, 0, 0),
                sample(10, 1000, 1000),
                // The host wrote nothing: no interval.
                sample(20, 1000, 1500),
                sample(30, 3000, 9500),
            ],
        };
        let got = intervals(&curve);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (10.0, 1.0, 1000.0 * 4096.0 / 10e6 * 1e3));
        // 2000 host pages over 10 ms, programmed 8000 flash pages.
        assert_eq!((got[1].0, got[1].1), (30.0, 4.0));
        assert!((got[1].2 - 2000.0 * 4096.0 / 0.01 / 1e6).abs() < 1e-9);
    }

    #[test]
    fn the_bandwidth_chart_sits_beside_the_first() {
        assert_eq!(
            bandwidth_path(Path::new("out/waf.png")),
            Path::new("out/waf-bandwidth.png")
        );
        assert_eq!(
            bandwidth_path(Path::new("w.v1.svg")),
            Path::new("w.v1-bandwidth.svg")
        );
    }
}
