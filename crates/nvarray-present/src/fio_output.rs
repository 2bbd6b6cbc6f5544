//! fio's own report layouts, `--output-format json`, `json+` and `terse`, so the tools written for fio
//! (fio-plot, `fio_jsonplus_clat2csv`, notebooks that read `jobs[].read.clat_ns.percentile`)
//! read nvarray's results unchanged. `--json` keeps nvarray's own layout; the whole of it is
//! also here, under `nvarray`.
//!
//! How nvarray's figures map onto fio's fields:
//! - One fio job per nvarray stream (a job file's section, or the command line's job), its
//!   `numjobs` threads summed, as fio's `group_reporting` does.
//! - `lat_ns` and `clat_ns` are both the request's whole latency, from the host preparing it
//!   to seeing its completion (the host's software is `host` in nvarray's breakdown);
//!   `slat_ns` is empty (`N` 0): nvarray does not time submission apart.
//! - The per-interval bandwidth and IOPS samples fio logs (`bw_min`, `iops_stddev`, ...) are
//!   not taken: their sample counts are 0 and their figures 0.
//! - `usr_cpu`, `sys_cpu`, `ctx`, `majf`, `minf` are 0: not measured per job.
//! - `iodepth_level`, `iodepth_submit` and `iodepth_complete` are counted as fio counts them
//!   (each request's thread depth at issue; requests handed over one per call; completions
//!   per look), by both engines.
//! - `job options` are each job's settings that differ from the defaults, however they were
//!   given (`JobSpec::fio_options`, plus the trace flags of a replay); `global options` is
//!   empty, since every job's options are written out whole.

use std::fmt::Write as _;

use nvarray_report::{DirectionTotals, IoDepths, RunReport, SteadyReport, StreamReport, Totals};
use nvarray_workload::trace::TraceSpec;
use nvarray_workload::{JobSpec, Workload};
use serde_json::{json, Map, Value};

/// nvarray's version as the layouts print it: the workspace's, which every crate shares with
/// the `nvarray` binary.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// fio's default `percentile_list`.
pub const PERCENTILES_DEFAULT: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// Parses fio's `percentile_list` (`99:99.9:99.99`, colon-separated, each in (0, 100]).
pub fn parse_percentile_list(text: &str) -> Result<Vec<f64>, String> {
    let list: Vec<f64> = text
        .split(':')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .ok()
                .filter(|p| *p > 0.0 && *p <= 100.0)
                .ok_or_else(|| {
                    format!(
                        "--percentile_list {text}: '{p}' is not a percentile in (0, 100]; write them colon-separated, e.g. 50:99:99.9"
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    if list.len() > 64 {
        return Err(format!("--percentile_list {text}: at most 64 percentiles"));
    }
    Ok(list)
}

/// The report in fio's JSON layout; `plus` adds the latency bins of `json+`.
pub fn report(workload: &Workload, r: &RunReport, percentiles: &[f64], plus: bool) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let jobs: Vec<Value> = r
        .streams
        .iter()
        .map(|s| {
            let spec = workload.jobs.iter().find(|j| j.name == s.name);
            job(
                &s.name,
                s.group,
                spec.map(|j| job_options(j, workload.trace.as_ref())),
                control_fields(spec, s),
                &s.totals,
                r.elapsed_ns,
                percentiles,
                plus,
            )
        })
        .collect();
    json!({
        "fio version": format!("nvarray-{VERSION}"),
        "timestamp": now.as_secs(),
        "timestamp_ms": now.as_millis() as u64,
        "time": ctime(now.as_secs()),
        "global options": {},
        "jobs": jobs,
        "nvarray": r,
    })
}

#[allow(clippy::too_many_arguments)]
fn job(
    name: &str,
    group: usize,
    options: Option<Map<String, Value>>,
    control: Map<String, Value>,
    t: &Totals,
    elapsed_ns: u64,
    percentiles: &[f64],
    plus: bool,
) -> Value {
    // The time the stream's rates are over (its own, if it stopped before the run).
    let runtime_ms = runtime_ns(t, elapsed_ns) / 1_000_000;
    let buckets = |edges: &[u64], scale: u64, from_ns: u64| -> Map<String, Value> {
        let mut m: Map<String, Value> = edges
            .iter()
            .zip(distribution(t, edges, scale, from_ns, false))
            .map(|(edge, percent)| (edge.to_string(), json!(percent)))
            .collect();
        // The ms series ends with `>=2000`: everything above its last edge.
        if scale == 1_000_000 {
            let above = distribution(t, &[u64::MAX / scale], scale, 2_000 * scale, false)[0];
            m.insert(">=2000".into(), json!(above));
        }
        m
    };
    let depths = |labels: &[&str; 7], counts: &[u64; 7]| -> Map<String, Value> {
        labels
            .iter()
            .zip(IoDepths::percents(counts))
            .map(|(label, percent)| (label.to_string(), json!(percent)))
            .collect()
    };
    let d = &t.io_depths;
    let mut v = json!({
        "jobname": name,
        "groupid": group,
        "error": 0,
        "eta": 0,
        "elapsed": elapsed_ns.div_ceil(1_000_000_000),
        "job options": options.unwrap_or_default(),
        "read": direction(&t.read, runtime_ms, percentiles, plus),
        "write": direction(&t.write, runtime_ms, percentiles, plus),
        "trim": direction(&DirectionTotals::default(), runtime_ms, percentiles, false),
        "sync": { "total_ios": 0, "lat_ns": stats(&DirectionTotals::default()) },
        "job_runtime": runtime_ms,
        "usr_cpu": 0.0,
        "sys_cpu": 0.0,
        "ctx": 0,
        "majf": 0,
        "minf": 0,
        "iodepth_level": depths(&IoDepths::LEVEL_LABELS, &d.at_issue),
        "iodepth_submit": depths(&IoDepths::BATCH_LABELS, &d.submitted),
        "iodepth_complete": depths(&IoDepths::BATCH_LABELS, &d.completed),
        "latency_ns": buckets(&EDGES, 1, 0),
        "latency_us": buckets(&EDGES, 1_000, 1_000),
        "latency_ms": buckets(&EDGES_MS, 1_000_000, 1_000_000),
    });
    if let Value::Object(m) = &mut v {
        m.extend(control);
    }
    v
}

/// fio's latency target fields (every job has them: a job without a target shows its
/// `iodepth`, target 0), and its `steadystate` block when the job watched for one
/// (stat.c:1817-1822, 1867-1914).
fn control_fields(spec: Option<&JobSpec>, s: &StreamReport) -> Map<String, Value> {
    let (depth, target_ns, window_us, percentile) = latency_fields(spec, s);
    let mut m = Map::new();
    m.insert("latency_depth".into(), json!(depth));
    m.insert("latency_target".into(), json!(target_ns));
    m.insert("latency_percentile".into(), json!(percentile));
    m.insert("latency_window".into(), json!(window_us));
    if let Some(ss) = &s.control.steadystate {
        m.insert(
            "steadystate".into(),
            json!({
                "ss": ss.ss,
                "duration": ss.duration,
                "attained": u8::from(ss.attained),
                "criterion": ss.criterion,
                "max_deviation": ss.max_deviation,
                "slope": ss.slope,
                "data": {
                    "bw_mean": ss.bw_mean,
                    "iops_mean": ss.iops_mean,
                    "iops": ss.iops,
                    "bw": ss.bw,
                },
            }),
        );
    }
    m
}

/// A job's latency target as fio reports it: the depth its search ended at (its `iodepth`
/// without one), the target in ns, the window in µs, the percentile.
fn latency_fields(spec: Option<&JobSpec>, s: &StreamReport) -> (u32, u64, u64, f64) {
    let target = spec.map(|j| j.latency_target.clone()).unwrap_or_default();
    let depth = s
        .control
        .latency_depth
        .unwrap_or_else(|| spec.map_or(1, |j| j.iodepth));
    (
        depth,
        target.target_ns,
        target.window_ns / 1_000,
        target.percentile,
    )
}

/// fio's latency edges: the ns and µs series (≤ 2, 4, ... 1000 of the unit) and the ms one.
const EDGES: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
const EDGES_MS: [u64; 11] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000, 2000];

/// fio's latency distribution: the percent of requests in each bucket up to its edge (in
/// `scale` ns), the first starting at `from_ns` (each unit's series starts where the smaller
/// unit's ends: ≤ 1 µs in ns, then µs, then ms). With `open_top` the last edge also takes
/// everything above.
fn distribution(t: &Totals, edges: &[u64], scale: u64, from_ns: u64, open_top: bool) -> Vec<f64> {
    // Each bucket starts where the one before ended.
    assert!(
        edges.windows(2).all(|w| w[0] < w[1]),
        "latency edges {edges:?} not ascending"
    );
    assert!(
        edges.first().is_none_or(|&e| from_ns < e * scale),
        "the first bucket starts at {from_ns} ns, past its edge"
    );
    let mut low = from_ns;
    let percents: Vec<f64> = edges
        .iter()
        .enumerate()
        .map(|(i, &edge)| {
            let high = if open_top && i == edges.len() - 1 {
                u64::MAX / 2
            } else {
                edge * scale
            };
            let share = t.read.share_between(low, high) * t.read.requests as f64
                + t.write.share_between(low, high) * t.write.requests as f64;
            low = high;
            100.0 * share / t.requests.max(1) as f64
        })
        .collect();
    // The buckets do not overlap (`share_between` counts each once): no request twice.
    let total: f64 = percents.iter().sum();
    assert!(
        total <= 100.0 + 1e-6,
        "latency buckets {percents:?} hold {total} %"
    );
    percents
}

/// Fields of a terse version 3 line without disk utilisation, as fio's HOWTO lists them.
const TERSE_V3_FIELDS: usize = 121;

/// The report in fio's terse layout, version 3 (`--output-format terse`, fio's default terse
/// version): one semicolon-separated line per job, fields as fio's HOWTO lists them
/// ("terse_version_3;fio_version;jobname;groupid;error;read_kb;..."). Latencies are in µs,
/// the completion-latency percentiles fill 20 fields (`0%=0` past the list's end), and what
/// nvarray does not measure per job (submission latency, per-interval bandwidth samples,
/// CPU) is 0, as fio writes a statistic it has no samples of. No disk-utilisation
/// fields: there is no host disk.
pub fn terse(r: &RunReport, percentiles: &[f64]) -> String {
    let mut out = String::new();
    for st in &r.streams {
        let t = &st.totals;
        let runtime_ms = runtime_ns(t, r.elapsed_ns) / 1_000_000;
        let mut f: Vec<String> = vec![
            "3".into(),
            format!("nvarray-{VERSION}"),
            st.name.clone(),
            st.group.to_string(),
            "0".into(),
        ];
        for d in [&t.read, &t.write] {
            terse_direction(&mut f, d, runtime_ms, percentiles);
        }
        // CPU usage: not measured per job. Then the I/O depths at issue, as fio's.
        f.extend(["0.000000%", "0.000000%", "0", "0", "0"].map(String::from));
        f.extend(
            IoDepths::percents(&t.io_depths.at_issue)
                .into_iter()
                .map(|p| format!("{p:.1}%")),
        );
        f.extend(terse_latency_buckets(t));
        assert_eq!(
            f.len(),
            TERSE_V3_FIELDS,
            "a terse line of {} fields",
            f.len()
        );
        out += &f.join(";");
        out.push('\n');
    }
    out
}

/// One direction's 41 terse fields: data moved, bandwidth, IOPS and runtime, the submission,
/// completion and total latencies with the completion percentiles, bandwidth samples.
fn terse_direction(f: &mut Vec<String>, d: &DirectionTotals, runtime_ms: u64, percentiles: &[f64]) {
    let runtime = if d.requests > 0 { runtime_ms } else { 0 };
    let (kib_s, iops) = match runtime {
        0 => (0, 0),
        ms => (d.bytes * 1000 / ms / 1024, d.requests * 1000 / ms),
    };
    f.extend([
        (d.bytes >> 10).to_string(),
        kib_s.to_string(),
        iops.to_string(),
        runtime.to_string(),
    ]);
    let l = &d.latency_ns;
    let lat = |f: &mut Vec<String>| {
        if d.requests == 0 {
            f.extend(["0", "0", "0.000000", "0.000000"].map(String::from));
        } else {
            f.extend([
                (l.min / 1000).to_string(),
                (l.max / 1000).to_string(),
                format!("{:.6}", l.mean / 1000.0),
                format!("{:.6}", l.stdev / 1000.0),
            ]);
        }
    };
    // Submission latency: not timed apart.
    f.extend(["0", "0", "0.000000", "0.000000"].map(String::from));
    lat(f);
    for i in 0..20 {
        f.push(match percentiles.get(i) {
            Some(&q) if d.requests > 0 => {
                format!("{q:.6}%={}", d.percentile_ns(q) / 1000)
            }
            _ => "0%=0".into(),
        });
    }
    lat(f);
    // Per-interval bandwidth samples: not taken.
    f.extend(["0", "0", "0.000000%", "0.000000", "0.000000"].map(String::from));
}

/// The terse line's latency distribution: the µs buckets, then the ms ones, as percents.
fn terse_latency_buckets(t: &Totals) -> Vec<String> {
    let percent = |p: f64| {
        // fio shows a bucket that holds anything as at least 0.01%.
        let p = if p > 0.0 && p < 0.01 { 0.01 } else { p };
        format!("{p:3.2}%")
    };
    // The µs series' first bucket also holds everything under 1 µs, as fio's does.
    let mut us = distribution(t, &EDGES, 1_000, 0, false);
    let mut ms = distribution(t, &EDGES_MS, 1_000_000, 1_000_000, false);
    // fio's last ms bucket: over 2000 ms (an edge past any latency, so it takes the rest).
    ms.push(distribution(t, &[u64::MAX / 2_000_000], 1_000_000, 2_000_000_000, false)[0]);
    us.append(&mut ms);
    us.into_iter().map(percent).collect()
}

/// A job's settings as fio prints them, its keys with their values as strings: those that
/// differ from the defaults, and for a replay the trace's flags instead of the generator's
/// (the trace gives each request's direction, size and place).
fn job_options(j: &JobSpec, trace: Option<&TraceSpec>) -> Map<String, Value> {
    let mut m: Map<String, Value> = j
        .fio_options()
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::String(v)))
        .collect();
    if let Some(t) = trace {
        let text = |v: Value| match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        m.insert("trace".into(), t.path.display().to_string().into());
        if let Some(format) = t.format {
            m.insert("trace_format".into(), format.name().into());
        }
        if let Some(device) = &t.device {
            m.insert("trace_device".into(), device.clone().into());
        }
        for (key, value) in [
            ("replay_mode", serde_json::to_value(t.mode)),
            ("replay_speed", serde_json::to_value(t.speed)),
            ("trace_address", serde_json::to_value(t.address)),
        ] {
            if let Ok(v) = value {
                m.insert(key.into(), text(v).into());
            }
        }
    }
    m
}

/// One direction in fio's layout.
fn direction(d: &DirectionTotals, runtime_ms: u64, percentiles: &[f64], plus: bool) -> Value {
    let mut clat = stats(d);
    if d.requests > 0 {
        let mut p = Map::new();
        for &q in percentiles {
            p.insert(format!("{q:.6}"), json!(d.percentile_ns(q)));
        }
        clat["percentile"] = Value::Object(p);
        if plus {
            let bins = d.bins();
            // fio's tools count the requests from the bins: every one is in one.
            let binned: u64 = bins.iter().map(|&(_, n)| n).sum();
            assert_eq!(
                binned, d.requests,
                "{binned} requests in the bins of {}",
                d.requests
            );
            let bins: Map<String, Value> = bins
                .into_iter()
                .map(|(ns, n)| (ns.to_string(), json!(n)))
                .collect();
            clat["bins"] = Value::Object(bins);
        }
    }
    json!({
        "io_bytes": d.bytes,
        "io_kbytes": d.bytes / 1024,
        "bw_bytes": d.bandwidth_bytes_per_s as u64,
        "bw": (d.bandwidth_bytes_per_s / 1024.0) as u64,
        "iops": d.iops,
        "runtime": if d.requests > 0 { runtime_ms } else { 0 },
        "total_ios": d.requests,
        "short_ios": 0,
        "drop_ios": 0,
        "slat_ns": { "min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0 },
        "clat_ns": clat,
        "lat_ns": stats(d),
        "bw_min": 0,
        "bw_max": 0,
        "bw_agg": if d.requests > 0 { 100.0 } else { 0.0 },
        "bw_mean": 0.0,
        "bw_dev": 0.0,
        "bw_samples": 0,
        "iops_min": 0,
        "iops_max": 0,
        "iops_mean": 0.0,
        "iops_stddev": 0.0,
        "iops_samples": 0,
    })
}

/// The report in fio's normal text layout: a header line per job, then per job and
/// direction the IOPS and bandwidth line, `clat` and `lat` statistics and the completion
/// latency percentiles, then the group's run status, so a diff against fio's own output of
/// the same job lines up. nvarray's device line and verdict come first.
pub fn normal(
    workload: &Workload,
    r: &RunReport,
    percentiles: &[f64],
    device_line: &str,
) -> String {
    let mut s = String::new();
    write_job_headers(&mut s, workload);
    write_banner(&mut s, workload, r, device_line);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    for st in &r.streams {
        let spec = workload.jobs.iter().find(|j| j.name == st.name);
        write_job(&mut s, st, spec, now.as_secs(), r.elapsed_ns, percentiles);
    }
    write_run_status(&mut s, r);
    s
}

/// fio's line per job before the run: its group, direction, block sizes, engine and depth.
fn write_job_headers(s: &mut String, workload: &Workload) {
    let groups = workload.groups();
    for (j, group) in workload.jobs.iter().zip(&groups) {
        let lens = || j.bs.lens_bytes();
        let bs = format!(
            "{}B-{}B",
            lens().min().unwrap_or(0),
            lens().max().unwrap_or(0)
        );
        let _ = writeln!(
            s,
            "{}: (g={group}): rw={}, bs=(R) {bs}, (W) {bs}, (T) {bs}, ioengine=nvarray, iodepth={}",
            j.name, j.rw, j.iodepth
        );
    }
}

/// nvarray's version, device line and verdict, then fio's count of the threads starting.
fn write_banner(s: &mut String, workload: &Workload, r: &RunReport, device_line: &str) {
    let _ = writeln!(s, "nvarray-{VERSION} (fio's layout)");
    let _ = writeln!(s, "device: {device_line}");
    if let Some(line) = crate::table::verdict_line(r) {
        let _ = writeln!(s, "{line}");
    }
    let threads: u32 = workload.jobs.iter().map(|j| j.numjobs).sum();
    let _ = writeln!(
        s,
        "Starting {threads} thread{}\n",
        if threads == 1 { "" } else { "s" }
    );
}

/// One job's results: its status line, a block per direction it moved data in, then its I/O
/// depths.
fn write_job(
    s: &mut String,
    st: &StreamReport,
    spec: Option<&JobSpec>,
    now_secs: u64,
    elapsed_ns: u64,
    percentiles: &[f64],
) {
    let t = &st.totals;
    let _ = writeln!(
        s,
        "{}: (groupid={}, jobs={}): err= 0: pid={}: {}",
        st.name,
        st.group,
        spec.map_or(1, |j| j.numjobs),
        std::process::id(),
        ctime(now_secs)
    );
    let runtime_ms = runtime_ns(t, elapsed_ns) / 1_000_000;
    for (name, d) in [("read", &t.read), ("write", &t.write)] {
        if d.requests == 0 {
            continue;
        }
        write_direction(s, name, d, runtime_ms, percentiles);
    }
    write_io_depths(s, t);
    let (depth, target_ns, window_us, percentile) = latency_fields(spec, st);
    let _ = writeln!(
        s,
        "     latency   : target={target_ns}, window={window_us}, percentile={percentile:.2}%, depth={depth}"
    );
    if let Some(ss) = &st.control.steadystate {
        write_steadystate(s, ss);
    }
    s.push('\n');
}

/// A job's `steadystate` line: whether it was attained, the means and the criterion as fio
/// names its metric.
fn write_steadystate(s: &mut String, ss: &SteadyReport) {
    let (metric, judged) = match ss.ss.split_once(':') {
        Some((name, _)) => (
            if name.starts_with("bw") {
                "bw"
            } else if name.starts_with("lat") {
                "lat"
            } else {
                "iops"
            },
            if name.ends_with("_slope") {
                " slope"
            } else {
                " mean dev"
            },
        ),
        None => ("iops", " mean dev"),
    };
    let _ = writeln!(
        s,
        "  steadystate  : attained={}, bw={} ({}), iops={}, {metric}{judged}={}",
        if ss.attained { "yes" } else { "no" },
        binary_rate(ss.bw_mean),
        decimal_rate(ss.bw_mean),
        si(ss.iops_mean),
        ss.criterion
            .trim_end_matches('%')
            .parse::<f64>()
            .map_or(ss.criterion.clone(), |c| {
                format!(
                    "{c:.3}{}",
                    if ss.criterion.ends_with('%') { "%" } else { "" }
                )
            }),
    );
}

/// A job's block for one direction: the IOPS and bandwidth line, the `clat` and `lat`
/// statistics and the completion latency percentiles.
fn write_direction(
    s: &mut String,
    name: &str,
    d: &DirectionTotals,
    runtime_ms: u64,
    percentiles: &[f64],
) {
    let _ = writeln!(
        s,
        "  {name}: IOPS={}, BW={} ({})({}/{}msec)",
        si(d.iops),
        binary_rate(d.bandwidth_bytes_per_s),
        decimal_rate(d.bandwidth_bytes_per_s),
        binary_size(d.bytes),
        runtime_ms.max(1)
    );
    let l = &d.latency_ns;
    let (unit, div) = unit_for(l.max);
    let stat = |label: &str| {
        format!(
            "{label} ({unit}): min={}, max={}, avg={:.2}, stdev={:.2}",
            l.min / div,
            l.max / div,
            l.mean / div as f64,
            l.stdev / div as f64
        )
    };
    let _ = writeln!(s, "    {}", stat("clat"));
    let _ = writeln!(s, "     {}", stat("lat"));
    write_clat_percentiles(s, d, percentiles, unit, div);
}

/// The completion latency percentiles, four to a line, in `unit` (`div` ns each).
fn write_clat_percentiles(
    s: &mut String,
    d: &DirectionTotals,
    percentiles: &[f64],
    unit: &str,
    div: u64,
) {
    let _ = writeln!(s, "    clat percentiles ({unit}):");
    for (i, chunk) in percentiles.chunks(4).enumerate() {
        let cells: Vec<String> = chunk
            .iter()
            .map(|&q| format!("{q:>5.2}th=[{:>5}]", d.percentile_ns(q) / div))
            .collect();
        let last = (i + 1) * 4 >= percentiles.len();
        let _ = writeln!(
            s,
            "     | {}{}",
            cells.join(", "),
            if last { "" } else { "," }
        );
    }
}

/// A job's I/O depths (at issue, per submission, per completion look) and its requests
/// issued.
fn write_io_depths(s: &mut String, t: &Totals) {
    let d = &t.io_depths;
    let line = |labels: &[&str; 7], counts: &[u64; 7]| {
        labels
            .iter()
            .zip(IoDepths::percents(counts))
            .map(|(label, p)| format!("{label}={p:.1}%"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        s,
        "  IO depths    : {}",
        line(&IoDepths::LEVEL_LABELS, &d.at_issue)
    );
    let _ = writeln!(
        s,
        "     submit    : {}",
        line(&IoDepths::BATCH_LABELS, &d.submitted)
    );
    let _ = writeln!(
        s,
        "     complete  : {}",
        line(&IoDepths::BATCH_LABELS, &d.completed)
    );
    let _ = writeln!(
        s,
        "     issued rwts: total={},{},0,0 short=0,0,0,0 dropped=0,0,0,0",
        t.read.requests, t.write.requests
    );
}

/// The group summary: per reporting group (the whole run when there are none), a line per
/// direction it moved data in.
fn write_run_status(s: &mut String, r: &RunReport) {
    let groups: Vec<(usize, &Totals)> = if r.groups.is_empty() {
        vec![(0, &r.totals)]
    } else {
        r.groups.iter().map(|g| (g.group, &g.totals)).collect()
    };
    for (i, (group, t)) in groups.into_iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        let _ = writeln!(s, "Run status group {group} (all jobs):");
        let members: Vec<&Totals> = r
            .streams
            .iter()
            .filter(|st| st.group == group)
            .map(|st| &st.totals)
            .collect();
        for (label, of) in [
            (
                "   READ",
                (|t: &Totals| &t.read) as fn(&Totals) -> &DirectionTotals,
            ),
            ("  WRITE", |t: &Totals| &t.write),
        ] {
            let d = of(t);
            if d.requests == 0 {
                continue;
            }
            write_group_direction(s, label, d, &members, of, r.elapsed_ns);
        }
    }
}

/// A group's line for one direction (`of` picks it from a job's totals): the group's rate
/// and data moved in `d`, with the range of its `members`' own rates and run times.
fn write_group_direction(
    s: &mut String,
    label: &str,
    d: &DirectionTotals,
    members: &[&Totals],
    of: fn(&Totals) -> &DirectionTotals,
    elapsed_ns: u64,
) {
    // The group's requests are its jobs' requests.
    let members_requests: u64 = members.iter().map(|m| of(m).requests).sum();
    assert_eq!(
        members_requests, d.requests,
        "{label}: the group's jobs made {members_requests} requests of its {}",
        d.requests
    );
    // As fio: the group's rate, then the least and greatest of its jobs' own rates
    // and run times, over the jobs that moved data this way.
    let jobs: Vec<(f64, u64)> = members
        .iter()
        .filter(|m| of(m).requests > 0)
        .map(|m| {
            (
                of(m).bandwidth_bytes_per_s,
                runtime_ns(m, elapsed_ns) / 1_000_000,
            )
        })
        .collect();
    let fold = |f: fn(f64, f64) -> f64, init: f64, pick: fn(&(f64, u64)) -> f64| {
        jobs.iter().map(pick).fold(init, f)
    };
    let (bw_min, bw_max) = (
        fold(f64::min, f64::INFINITY, |j| j.0),
        fold(f64::max, 0.0, |j| j.0),
    );
    let (run_min, run_max) = (
        jobs.iter().map(|j| j.1).min().unwrap_or(0),
        jobs.iter().map(|j| j.1).max().unwrap_or(0),
    );
    let _ = writeln!(
        s,
        "{label}: bw={} ({}), {}-{} ({}-{}), io={} ({}), run={}-{}msec",
        binary_rate(d.bandwidth_bytes_per_s),
        decimal_rate(d.bandwidth_bytes_per_s),
        binary_rate(bw_min),
        binary_rate(bw_max),
        decimal_rate(bw_min),
        decimal_rate(bw_max),
        binary_size(d.bytes),
        decimal_size(d.bytes),
        run_min.max(1),
        run_max.max(1)
    );
}

/// The time a stream's rates are over.
fn runtime_ns(t: &Totals, elapsed_ns: u64) -> u64 {
    if t.iops > 0.0 {
        (t.requests as f64 / t.iops * 1e9) as u64
    } else {
        elapsed_ns
    }
}

/// fio's unit for a latency line: nsec below 10 µs, usec below 10 ms, else msec.
fn unit_for(max_ns: u64) -> (&'static str, u64) {
    match max_ns {
        n if n < 10_000 => ("nsec", 1),
        n if n < 10_000_000 => ("usec", 1_000),
        _ => ("msec", 1_000_000),
    }
}

/// fio's significant figures for sizes, rates and IOPS (`sig_figs`, default 4).
const SIG_FIGS: usize = 4;

/// A number as fio's `num2str` writes it (`lib/num2str.c`, fio 3.33), with `SIG_FIGS`
/// digits: divided by 1000 (or 1024 with `binary`) until at most that many digits are left,
/// then the digits the room allows after the point, from what the last division left over:
/// `15.6MiB`, `3072KiB`, `16.8MB`, `20.0k`. Like fio's, the decimals are the remainder's own
/// rounding: a remainder of 0.97 shows as `.0` with one decimal (fio prints `15.0` there too).
fn num2str(mut num: u64, binary: bool, unit: &str) -> String {
    const PREFIXES: [&str; 6] = ["", "k", "M", "G", "T", "P"];
    const IEC: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let thousand = if binary { 1024 } else { 1000 };
    let mut post = 0usize;
    let mut modulo = None;
    // fio divides once more past its largest prefix and prints a sixth of the value there;
    // this stops at it (the figure takes more digits instead).
    while post < PREFIXES.len() - 1 && num.to_string().len() > SIG_FIGS {
        modulo = Some(num % thousand);
        num /= thousand;
        post += 1;
    }
    let prefix = if binary { IEC[post] } else { PREFIXES[post] };
    let Some(modulo) = modulo else {
        return format!("{num}{prefix}{unit}");
    };
    let digits = num.to_string().len();
    if SIG_FIGS.saturating_sub(digits) <= 1 {
        // No room for decimals: round the remainder.
        let carry = u64::from(modulo >= thousand / 2);
        return format!("{}{prefix}{unit}", num + carry);
    }
    let decimals = SIG_FIGS - digits - 1;
    let fraction = format!("{:.*}", decimals, modulo as f64 / thousand as f64);
    // "0.23" -> "23" (and "1.0" -> "0", as fio's `&tmp[2]` does).
    format!("{num}.{}{prefix}{unit}", &fraction[2..])
}

/// `972k`, `20.0k`, `4987`: fio's IOPS figure.
fn si(v: f64) -> String {
    num2str(v as u64, false, "")
}

fn binary_rate(bytes_per_s: f64) -> String {
    num2str(bytes_per_s as u64, true, "B/s")
}

fn decimal_rate(bytes_per_s: f64) -> String {
    num2str(bytes_per_s as u64, false, "B/s")
}

/// `3072KiB`, `15.2MiB`: fio's binary sizes.
fn binary_size(b: u64) -> String {
    num2str(b, true, "B")
}

/// `3146kB`, `16.0MB`: fio's decimal sizes.
fn decimal_size(b: u64) -> String {
    num2str(b, false, "B")
}

/// fio's `{min, max, mean, stddev, N}` of a latency.
fn stats(d: &DirectionTotals) -> Value {
    let l = &d.latency_ns;
    json!({ "min": l.min, "max": l.max, "mean": l.mean, "stddev": l.stdev, "N": d.requests })
}

/// `Wed Nov 25 03:51:00 2026`, local time, as fio's `time` field.
fn ctime(secs: u64) -> String {
    let t = secs as libc::time_t;
    // SAFETY: `tm` is a plain C struct, zeroed then filled by `localtime_r` from a valid
    // `time_t`; `buf` is large enough for the format and `strftime` writes at most its length.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return String::new();
        }
        let mut buf = [0u8; 64];
        let n = libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%a %b %e %H:%M:%S %Y".as_ptr(),
            &tm,
        );
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fio 3.33's own output (`ioengine=null`, `bs=4k`): `size=15600k` at 20,000 a second
    /// printed `IOPS=20.0k, BW=78.1MiB/s (81.9MB/s)(15.2MiB/195msec)`, `size=3m` at 5,000
    /// `IOPS=4987, BW=19.5MiB/s (20.4MB/s)(3072KiB/154msec)`, their group `io=18.2MiB
    /// (19.1MB)`, and `size=16m` `io=16.0MiB (16.8MB)` at `8000MiB/s (8389MB/s)`.
    #[test]
    fn sizes_and_rates_are_written_as_fio_writes_them() {
        for (n, binary, unit, fio) in [
            (15_974_400, true, "B", "15.2MiB"),
            (3 << 20, true, "B", "3072KiB"),
            (19_120_128, true, "B", "18.2MiB"),
            (19_120_128, false, "B", "19.1MB"),
            (16 << 20, true, "B", "16.0MiB"),
            (16 << 20, false, "B", "16.8MB"),
            (8_388_608_000, true, "B/s", "8000MiB/s"),
            (8_388_608_000, false, "B/s", "8389MB/s"),
            (81_920_000, true, "B/s", "78.1MiB/s"),
            (20_000, false, "", "20.0k"),
            (4987, false, "", "4987"),
            (0, true, "B", "0B"),
            (u64::MAX, true, "B", "16384PiB"),
        ] {
            assert_eq!(num2str(n, binary, unit), fio, "{n}");
        }
    }

    #[test]
    fn percentile_lists_are_fios() {
        assert_eq!(
            parse_percentile_list("50:99:99.9").unwrap(),
            [50.0, 99.0, 99.9]
        );
        assert!(parse_percentile_list("0:50").unwrap_err().contains("'0'"));
        assert!(parse_percentile_list("50,99").is_err());
        assert!(parse_percentile_list("101").is_err());
    }
}
