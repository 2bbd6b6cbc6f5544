//! What a sweep writes and reads back: one JSON line per point (`PATH.jsonl`, written as each
//! point finishes, so a shard's or an interrupted sweep's results are never lost), the whole
//! sweep's JSON, and the sweep's identity that tells shards of one sweep from another's.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::grid::{Grid, Shard};
use super::present::Metric;

/// One point's result: the line a sweep appends to `PATH.jsonl` when the point finishes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointLine {
    /// The sweep's identity (`identity`): equal for every shard of one sweep.
    pub sweep: String,
    /// The point's index in the grid, from 0.
    pub point: usize,
    /// How many points the whole sweep has.
    pub points: usize,
    /// The shard that ran it (`0/1` for a whole sweep).
    pub shard: String,
    pub grid: Grid,
    pub metric: Metric,
    /// The value of every parameter at this point.
    pub settings: BTreeMap<String, String>,
    /// The run's report, as `nvarray sim --json` prints it.
    pub report: serde_json::Value,
}

impl PointLine {
    pub fn new(
        sweep: &str,
        grid: &Grid,
        metric: Metric,
        shard: Shard,
        point: usize,
        report: serde_json::Value,
    ) -> Self {
        PointLine {
            sweep: sweep.to_string(),
            point,
            points: grid.len(),
            shard: shard.to_string(),
            grid: grid.clone(),
            metric,
            settings: grid
                .settings(point)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            report,
        }
    }

    /// The figures the table and the plot show.
    pub fn figures(&self) -> Result<Figures> {
        Figures::deserialize(&self.report)
            .with_context(|| format!("point {} has no run report", self.point))
    }
}

/// The figures of a run report the table and the plot read.
#[derive(Debug, Deserialize)]
pub struct Figures {
    pub device: String,
    pub iops: f64,
    pub read_bandwidth_bytes_per_s: f64,
    pub write_bandwidth_bytes_per_s: f64,
    pub latency_ns: LatencyFigures,
    pub faithful: bool,
    #[serde(default)]
    pub unfaithful_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct LatencyFigures {
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
}

/// A sweep's identity: FNV-1a (64 bits) over the nvarray version, the engine and its options,
/// the grid, and every point's device and workload as JSON (`add_point`, in grid order). Two
/// shards agree on it only when they run the same points of the same sweep. Hand-written:
/// std's hasher is not promised to give the same value in another build, and shards may run
/// on other machines.
pub struct Identity(Fnv);

impl Identity {
    pub fn new(engine: &str, grid: &Grid) -> Self {
        let mut h = Fnv::default();
        h.write(env!("CARGO_PKG_VERSION").as_bytes());
        h.write(engine.as_bytes());
        h.write(
            serde_json::to_string(grid)
                .expect("a grid is JSON")
                .as_bytes(),
        );
        Identity(h)
    }

    pub fn add_point(&mut self, device: &impl Serialize, workload: &impl Serialize) {
        for part in [
            serde_json::to_string(device).expect("a device is JSON"),
            serde_json::to_string(workload).expect("a workload is JSON"),
        ] {
            self.0.write(part.as_bytes());
        }
    }

    pub fn finish(self) -> String {
        format!("{:016x}", self.0 .0)
    }
}

struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// The lines of one `.jsonl` file; a blank line is skipped, a broken one is an error naming
/// the file and line (a shard killed while writing leaves its last line cut short).
pub fn read_lines(path: &Path) -> Result<Vec<PointLine>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let point: PointLine = serde_json::from_str(&line).map_err(|e| {
            crate::input_error(format!(
                "{}:{}: not a sweep point line ({e}); was the shard killed while writing?",
                path.display(),
                n + 1
            ))
        })?;
        lines.push(point);
    }
    Ok(lines)
}

/// The whole sweep's JSON (`PATH.json`): its parameters and every point in grid order. With
/// one or two parameters each point also has `value` (the first parameter's) and, with two,
/// `series` (the second's), as before grids had more.
#[derive(Serialize)]
pub struct SweepFile<'a> {
    pub sweep: &'a str,
    pub param: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series_param: Option<&'a str>,
    pub params: &'a Grid,
    pub metric: Metric,
    pub points: Vec<SweepFilePoint<'a>>,
}

#[derive(Serialize)]
pub struct SweepFilePoint<'a> {
    pub value: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<&'a str>,
    pub settings: &'a BTreeMap<String, String>,
    pub report: &'a serde_json::Value,
}

impl<'a> SweepFile<'a> {
    /// `points` in grid order, all of them.
    pub fn new(sweep: &'a str, grid: &'a Grid, metric: Metric, points: &'a [PointLine]) -> Self {
        let two = grid.dims.len() == 2;
        SweepFile {
            sweep,
            param: &grid.dims[0].key,
            series_param: two.then(|| grid.dims[1].key.as_str()),
            params: grid,
            metric,
            points: points
                .iter()
                .map(|p| {
                    let setting = |d: usize| p.settings[&grid.dims[d].key].as_str();
                    SweepFilePoint {
                        value: setting(0),
                        series: two.then(|| setting(1)),
                        settings: &p.settings,
                        report: &p.report,
                    }
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_changes_with_any_input() {
        let g = Grid::from_flags(&["bs".into()], &["4k,8k".into()], None).unwrap();
        let g2 = Grid::from_flags(&["bs".into()], &["4k,16k".into()], None).unwrap();
        let id = |engine: &str, grid: &Grid, points: &[(&str, &str)]| {
            let mut h = Identity::new(engine, grid);
            for (d, w) in points {
                h.add_point(d, w);
            }
            h.finish()
        };
        let base = id("sim", &g, &[("dev", "w1")]);
        assert_eq!(base, id("sim", &g, &[("dev", "w1")]), "deterministic");
        assert_eq!(base.len(), 16);
        assert_ne!(base, id("emu", &g, &[("dev", "w1")]));
        assert_ne!(base, id("sim", &g2, &[("dev", "w1")]));
        assert_ne!(base, id("sim", &g, &[("dev", "w2")]));
        assert_ne!(id("sim", &g, &[("ab", "c")]), id("sim", &g, &[("a", "bc")]));
    }
}
