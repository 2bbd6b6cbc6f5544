//! What a sweep writes and reads back: one JSON line per point (`PATH.jsonl`, written as each
//! point finishes, so a shard's or an interrupted sweep's results are never lost), the whole
//! sweep's JSON, and the sweep's identity that tells shards of one sweep from another's.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::ValueEnum;
use nvarray_model::{DeviceConfig, Verdict};
use nvarray_workload::Workload;
use serde::{Deserialize, Serialize};

use super::fnv::Fnv;
use super::grid::{Grid, Shard};
use nvarray_sys::input::input_error;

/// What a sweep plots and tabulates of each point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Read + write bandwidth, GB/s.
    Bandwidth,
    /// Requests per second.
    Iops,
    /// Mean latency, µs.
    Mean,
    /// Median latency, µs.
    P50,
    /// 99th percentile latency, µs.
    P99,
    /// 99.9th percentile latency, µs.
    P999,
    /// Flash pages programmed per host page written (flash behind an FTL; a point without
    /// one, or without writes, is left out of the plot and shown as NaN).
    WriteAmplification,
}

impl Metric {
    pub(super) fn of(self, f: &Figures) -> f64 {
        match self {
            Metric::Bandwidth => {
                (f.read_bandwidth_bytes_per_s + f.write_bandwidth_bytes_per_s) / 1e9
            }
            Metric::Iops => f.iops,
            Metric::Mean => f.latency_ns.mean / 1e3,
            Metric::P50 => f.latency_ns.p50 as f64 / 1e3,
            Metric::P99 => f.latency_ns.p99 as f64 / 1e3,
            Metric::P999 => f.latency_ns.p999 as f64 / 1e3,
            Metric::WriteAmplification => f
                .ftl
                .as_ref()
                .and_then(|ftl| ftl.write_amplification)
                .unwrap_or(f64::NAN),
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Metric::Bandwidth => "bandwidth (GB/s)",
            Metric::Iops => "IOPS",
            Metric::Mean => "mean latency (µs)",
            Metric::P50 => "p50 latency (µs)",
            Metric::P99 => "p99 latency (µs)",
            Metric::P999 => "p99.9 latency (µs)",
            Metric::WriteAmplification => "write amplification",
        }
    }
}

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
    /// What the sweep's identity is made of, part by part, so that a refusal can say which
    /// part differs. Absent from lines written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Provenance>,
}

impl PointLine {
    pub fn new(
        sweep: &str,
        identity: &Provenance,
        grid: &Grid,
        metric: Metric,
        shard: Shard,
        point: usize,
        report: serde_json::Value,
    ) -> Self {
        PointLine {
            identity: Some(identity.clone()),
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
    /// Absent from the lines of sweeps before the three-word verdict: `verdict()` reads
    /// `faithful` then.
    #[serde(default)]
    verdict: Option<Verdict>,
    #[serde(default)]
    pub unfaithful_reason: Option<String>,
    /// The FTL's figures, for a device with one.
    #[serde(default)]
    pub ftl: Option<FtlFigures>,
}

/// What a sweep reads of a point's FTL.
#[derive(Debug, Deserialize)]
pub struct FtlFigures {
    #[serde(default)]
    pub write_amplification: Option<f64>,
}

impl Figures {
    pub fn verdict(&self) -> Verdict {
        self.verdict.unwrap_or(if self.faithful {
            Verdict::Faithful
        } else {
            Verdict::NotFaithful
        })
    }
}

#[derive(Debug, Deserialize)]
pub struct LatencyFigures {
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
}

/// What a sweep's results depend on besides its grid, part by part: every line carries it,
/// so that a merge, or a rerun into the same `--out`, can say which part differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// nvarray's version.
    pub nvarray: String,
    /// The binary that ran the points (`binary::id`: its build id), finer than the version:
    /// two builds of different code under one version string give different numbers.
    pub binary: String,
    /// The engine and its options.
    pub engine: String,
    /// FNV-1a over every point's device, in grid order.
    pub devices: String,
    /// FNV-1a over every point's workload, in grid order, with a replayed trace counted by its
    /// content, never its path.
    pub workloads: String,
    /// The replayed trace, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceId>,
    /// The command that ran the points: shown when two sweeps' devices or workloads differ,
    /// never compared (the same sweep can be typed in many ways).
    pub command: String,
}

/// A trace by its content: two paths to one file are one trace, one path to two files two.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceId {
    /// As given on the command line; shown, not compared.
    pub path: String,
    pub bytes: u64,
    /// FNV-1a of its bytes.
    pub fnv: String,
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} bytes, fnv {})", self.path, self.bytes, self.fnv)
    }
}

impl Provenance {
    /// The sweep's identity: FNV-1a (64 bits) over every part but the command, and the grid.
    /// Two shards agree on it only when they run the same points of the same sweep with the
    /// same binary. Hand-written: std's hasher is not promised to give the same value in
    /// another build, and shards may run on other machines.
    pub fn sweep(&self, grid: &Grid) -> String {
        let mut h = Fnv::default();
        for part in [
            &self.nvarray,
            &self.binary,
            &self.engine,
            &serde_json::to_string(grid).expect("a grid is JSON"),
            &self.devices,
            &self.workloads,
        ] {
            h.write(part.as_bytes());
        }
        format!("{:016x}", h.value())
    }
}

/// Gathers a sweep's identity from its points (`add_point`, in grid order).
pub struct Identity {
    engine: String,
    devices: Fnv,
    workloads: Fnv,
    /// Each trace file read once, however many points replay it.
    traces: HashMap<PathBuf, TraceId>,
    trace: Option<TraceId>,
}

impl Identity {
    pub fn new(engine: &str) -> Self {
        Identity {
            engine: engine.to_string(),
            devices: Fnv::default(),
            workloads: Fnv::default(),
            traces: HashMap::new(),
            trace: None,
        }
    }

    pub fn add_point(&mut self, device: &DeviceConfig, workload: &Workload) -> Result<()> {
        self.devices.write(
            serde_json::to_string(device)
                .expect("a device is JSON")
                .as_bytes(),
        );
        let mut value = serde_json::to_value(workload).expect("a workload is JSON");
        if let Some(spec) = &workload.trace {
            let id = match self.traces.get(&spec.path) {
                Some(id) => id.clone(),
                None => {
                    let id = trace_id(&spec.path)?;
                    self.traces.insert(spec.path.clone(), id.clone());
                    id
                }
            };
            // The trace enters the workload's hash by its content in place of its path.
            if let Some(trace) = value.get_mut("trace").and_then(|t| t.as_object_mut()) {
                trace.insert(
                    "path".into(),
                    format!("{} bytes, fnv {}", id.bytes, id.fnv).into(),
                );
            }
            self.trace.get_or_insert(id);
        }
        self.workloads.write(value.to_string().as_bytes());
        Ok(())
    }

    /// The sweep's identity (`Provenance::sweep`) and its parts.
    pub fn finish(self, grid: &Grid) -> (String, Provenance) {
        let provenance = Provenance {
            nvarray: env!("CARGO_PKG_VERSION").to_string(),
            binary: super::binary::id().to_string(),
            engine: self.engine,
            devices: format!("{:016x}", self.devices.value()),
            workloads: format!("{:016x}", self.workloads.value()),
            trace: self.trace,
            command: command_line(),
        };
        (provenance.sweep(grid), provenance)
    }
}

/// This process's command line, as the user would type it again.
fn command_line() -> String {
    let mut words: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(first) = words.first_mut() {
        *first = "nvarray".to_string();
    }
    nvarray_sys::shell::join(&words)
}

/// A trace file by its content. It must be a regular file: a sweep replays it at every point,
/// which a pipe cannot give twice.
fn trace_id(path: &Path) -> Result<TraceId> {
    let cannot = |e: std::io::Error| input_error(format!("--trace {}: {e}", path.display()));
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(input_error(format!(
            "--trace {}: not a regular file; a sweep replays the trace at every point and \
             knows it by its content, so give a file (copy a pipe's output to one first)",
            path.display()
        )));
    }
    let mut h = Fnv::default();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(cannot)?;
        if n == 0 {
            break;
        }
        h.write_raw(&buf[..n]);
        bytes += n as u64;
    }
    Ok(TraceId {
        path: path.display().to_string(),
        bytes,
        fnv: format!("{:016x}", h.value()),
    })
}

/// Where two lines' sweeps differ: (what, its value in `a`, its value in `b`), for each part
/// of the identity that differs (the grid included). Empty when the parts agree.
pub fn differences(a: &PointLine, b: &PointLine) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    if a.grid != b.grid {
        out.push(("grid", grid_text(&a.grid), grid_text(&b.grid)));
    }
    let (pa, pb) = match (&a.identity, &b.identity) {
        (Some(pa), Some(pb)) => (pa, pb),
        (pa, pb) => {
            let said = |p: &Option<Provenance>| match p {
                Some(p) => format!("nvarray {}, {}", p.nvarray, p.binary),
                None => "not recorded (written by an older nvarray)".to_string(),
            };
            if pa != pb {
                out.push(("identity", said(pa), said(pb)));
            }
            return out;
        }
    };
    let trace = |t: &Option<TraceId>| t.as_ref().map_or("none".to_string(), |t| t.to_string());
    let content = |t: &Option<TraceId>| t.as_ref().map(|t| (t.bytes, t.fnv.clone()));
    let parts = [
        ("nvarray version", pa.nvarray.clone(), pb.nvarray.clone()),
        ("nvarray binary", pa.binary.clone(), pb.binary.clone()),
        (
            "engine and its options",
            pa.engine.clone(),
            pb.engine.clone(),
        ),
        (
            "trace content",
            format!("{:?}", content(&pa.trace)),
            format!("{:?}", content(&pb.trace)),
        ),
        (
            "devices (hash of every point's)",
            pa.devices.clone(),
            pb.devices.clone(),
        ),
        (
            "workloads (hash of every point's)",
            pa.workloads.clone(),
            pb.workloads.clone(),
        ),
    ];
    for (what, x, y) in parts {
        if x != y {
            // A trace is compared by its content and shown with its path.
            let (x, y) = if what == "trace content" {
                (trace(&pa.trace), trace(&pb.trace))
            } else {
                (x, y)
            };
            out.push((what, x, y));
        }
    }
    out
}

/// A grid as `key=v1,v2 key=...`, for messages.
pub fn grid_text(grid: &Grid) -> String {
    grid.dims
        .iter()
        .map(|d| format!("{}={}", d.key, d.values.join(",")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why `line` cannot join a sweep whose lines are like `reference`, `None` when it can: the
/// parts that differ, one a line, then the commands that ran each (when devices or
/// workloads differ, the commands are where to look). `line_from` and `reference_from` name
/// where each came from.
pub fn refusal(
    reference: &PointLine,
    reference_from: &str,
    line: &PointLine,
    line_from: &str,
) -> Option<String> {
    if line.sweep == reference.sweep {
        return None;
    }
    let parts = differences(reference, line);
    let mut text = if parts.is_empty() {
        format!(
            "its sweep identity {} is not {} although no recorded part differs (was a file \
             edited?)",
            line.sweep, reference.sweep
        )
    } else {
        let names: Vec<&str> = parts.iter().map(|p| p.0).collect();
        let mut text = format!("they differ in the {}:", names.join(", the "));
        for (what, a, b) in &parts {
            text.push_str(&format!(
                "\n  {what}: {a} in {reference_from}\n  {:w$}  {b} in {line_from}",
                "",
                w = what.len()
            ));
        }
        text
    };
    // The hashes of devices and workloads say only that they differ; the commands say how.
    let hashed = parts
        .iter()
        .any(|p| p.0.starts_with("devices") || p.0.starts_with("workloads"));
    if let (Some(a), Some(b), true) = (&reference.identity, &line.identity, hashed) {
        if a.command != b.command {
            text.push_str(&format!(
                "\n  commands: {} ({reference_from})\n            {} ({line_from})",
                a.command, b.command
            ));
        }
    }
    Some(text)
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
            nvarray_sys::input::input_error(format!(
                "{}:{}: not a sweep point line ({e}); was the shard killed while writing?",
                path.display(),
                n + 1
            ))
        })?;
        lines.push(point);
    }
    Ok(lines)
}

/// The lines a sweep wrote to `path` before it stopped, for a rerun to resume from, and how
/// many bytes of the file they fill. A last line cut short (the process killed while writing
/// it) is left out, and the caller cuts the file there; a broken line before the last is an
/// error, as in `read_lines`.
pub fn read_for_resume(path: &Path) -> Result<(Vec<PointLine>, u64)> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut lines = Vec::new();
    let mut good_bytes = 0u64;
    let mut at = 0usize;
    let mut number = 0usize;
    while at < text.len() {
        number += 1;
        let end = text[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| at + i + 1);
        let (line, next) = match end {
            Some(end) => (&text[at..end], end),
            None => (&text[at..], text.len()),
        };
        debug_assert!(
            next > at,
            "line {number} of {} makes no progress",
            path.display()
        );
        let is_last = next == text.len();
        if line.iter().all(u8::is_ascii_whitespace) {
            at = next;
            good_bytes = next as u64;
            continue;
        }
        match serde_json::from_slice::<PointLine>(line) {
            // A complete line: it ends in a newline (a line without one was being written).
            Ok(point) if end.is_some() => {
                lines.push(point);
                good_bytes = next as u64;
            }
            _ if is_last => break,
            Err(e) => {
                return Err(input_error(format!(
                    "{}:{number}: not a sweep point line ({e}); remove the file or give \
                     --overwrite to start the sweep over",
                    path.display()
                )))
            }
            Ok(_) => unreachable!("only the last line can lack its newline"),
        }
        at = next;
    }
    // The caller cuts the file to `good_bytes`: more would grow it instead.
    assert!(
        good_bytes <= text.len() as u64,
        "{good_bytes} good bytes in {} bytes",
        text.len()
    );
    Ok((lines, good_bytes))
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
        debug_assert!(
            points.windows(2).all(|w| w[0].point < w[1].point),
            "the sweep's points out of grid order"
        );
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

/// Refuses a line whose grid, point count, settings and point index do not agree.
pub(crate) fn check_grid(line: &PointLine, file: &Path) -> Result<()> {
    if line.grid.dims.is_empty()
        || line.grid.dims.iter().any(|d| d.values.is_empty())
        || line.points != line.grid.len()
        || line.settings.len() != line.grid.dims.len()
        || !line
            .grid
            .dims
            .iter()
            .all(|d| line.settings.contains_key(&d.key))
    {
        return Err(input_error(format!(
            "{}: point {}'s grid ({}) does not match its count of {} points or its \
             settings; was the file edited?",
            file.display(),
            line.point,
            grid_text(&line.grid),
            line.points
        )));
    }
    if line.point >= line.points {
        return Err(input_error(format!(
            "{}: point {} of a sweep of {} points; was the file edited?",
            file.display(),
            line.point,
            line.points
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use nvarray_model::presets::preset;
    use nvarray_workload::JobSpec;

    fn device(name: &str) -> DeviceConfig {
        preset(name).unwrap().load(&[]).unwrap()
    }

    fn workload(rw: &str) -> Workload {
        let mut job = JobSpec::default();
        job.set("rw", rw).unwrap();
        Workload {
            jobs: vec![job],
            trace: None,
        }
    }

    fn sweep(engine: &str, grid: &Grid, points: &[(&DeviceConfig, &Workload)]) -> String {
        let mut h = Identity::new(engine);
        for (d, w) in points {
            h.add_point(d, w).unwrap();
        }
        h.finish(grid).0
    }

    #[test]
    fn the_identity_changes_with_any_input() {
        let g = Grid::from_flags(&["bs".into()], &["4k,8k".into()], None).unwrap();
        let g2 = Grid::from_flags(&["bs".into()], &["4k,16k".into()], None).unwrap();
        let (moneta, optane) = (device("moneta"), device("optane-p4800x"));
        let (read, write) = (workload("randread"), workload("randwrite"));
        let base = sweep("sim", &g, &[(&moneta, &read)]);
        assert_eq!(base, sweep("sim", &g, &[(&moneta, &read)]), "deterministic");
        assert_eq!(base.len(), 16);
        assert_ne!(base, sweep("emu", &g, &[(&moneta, &read)]));
        assert_ne!(base, sweep("sim", &g2, &[(&moneta, &read)]));
        assert_ne!(base, sweep("sim", &g, &[(&optane, &read)]));
        assert_ne!(base, sweep("sim", &g, &[(&moneta, &write)]));
        let mut f = Fnv::default();
        f.write(b"ab");
        f.write(b"c");
        let mut g = Fnv::default();
        g.write(b"a");
        g.write(b"bc");
        assert_ne!(f.value(), g.value());
    }

    #[test]
    fn a_trace_counts_by_its_content_not_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        std::fs::write(&a, "0 0 R 0 4096\n").unwrap();
        let traced = |path: PathBuf| {
            let mut w = workload("randread");
            w.trace = Some(nvarray_workload::trace::TraceSpec {
                path,
                format: None,
                mode: nvarray_workload::trace::ReplayMode::AsFast,
                speed: 1.0,
                address: nvarray_workload::trace::AddressMode::Wrap,
                device: None,
            });
            w
        };
        let g = Grid::from_flags(&["bs".into()], &["4k".into()], None).unwrap();
        let moneta = device("moneta");
        let id = |w: &Workload| {
            let mut h = Identity::new("sim");
            h.add_point(&moneta, w).unwrap();
            h.finish(&g)
        };
        let (first, parts) = id(&traced(a.clone()));
        assert_eq!(parts.trace.as_ref().unwrap().bytes, 13);
        // The same file by another path is the same sweep.
        let relative = dir.path().join(".").join("a.log");
        assert_eq!(id(&traced(relative)).0, first);
        // Another file at the same path is another sweep.
        std::fs::write(&a, "0 0 W 0 4096\n").unwrap();
        let (second, parts2) = id(&traced(a.clone()));
        assert_ne!(second, first);
        let line = |sweep: &str, p: &Provenance| {
            PointLine::new(
                sweep,
                p,
                &g,
                Metric::Bandwidth,
                Shard::WHOLE,
                0,
                serde_json::json!({}),
            )
        };
        let why = refusal(&line(&first, &parts), "x", &line(&second, &parts2), "y").unwrap();
        assert!(why.contains("trace content"), "{why}");
        assert!(!why.contains("devices"), "{why}");
        // A pipe is refused with the reason.
        let e = trace_id(Path::new("/dev/stdin")).map(|_| ()).unwrap_err();
        assert!(
            e.to_string().contains("not a regular file") || e.to_string().contains("--trace"),
            "{e}"
        );
    }

    #[test]
    fn a_resumed_file_loses_only_a_cut_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let g = Grid::from_flags(&["bs".into()], &["4k,8k".into()], None).unwrap();
        let (sweep, parts) = Identity::new("sim").finish(&g);
        let line = |i| {
            serde_json::to_string(&PointLine::new(
                &sweep,
                &parts,
                &g,
                Metric::Bandwidth,
                Shard::WHOLE,
                i,
                serde_json::json!({}),
            ))
            .unwrap()
        };
        let whole = format!("{}\n\n{}\n", line(0), line(1));
        std::fs::write(&path, format!("{whole}{{\"sweep\":\"ab")).unwrap();
        let (lines, good) = read_for_resume(&path).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(good, whole.len() as u64);
        // A complete last line without its newline may have been cut exactly there: dropped.
        std::fs::write(&path, format!("{}\n{}", line(0), line(1))).unwrap();
        assert_eq!(read_for_resume(&path).unwrap().0.len(), 1);
        // Damage before the last line is an error.
        std::fs::write(&path, format!("garbage\n{}\n", line(0))).unwrap();
        let e = read_for_resume(&path).unwrap_err();
        assert!(e.to_string().contains(":1:"), "{e}");
    }
}
