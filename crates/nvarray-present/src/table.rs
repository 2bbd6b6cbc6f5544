//! Human-readable reports: one run's report table (the same for every engine), a served
//! device's (`serve`, `mount`), the simulator beside the emulator (`--compare-sim`), the
//! device and job lines, and a preset's link traffic per command (`--protocol-cost`).

use std::fmt::Write;

use nvarray_model::DeviceConfig;
use nvarray_report::{
    EmulatorSetup, LatencySummary, MachineJitterNs, RunReport, Totals, Utilisation, Verdict,
};
use nvarray_workload::trace::{shown, AddressMode, ReplayMode, TraceReport};
use nvarray_workload::{format_size, JobSpec, RateProcess, Verify, Workload};
use serde::Serialize;

/// One line describing the device.
pub fn device_line(d: &DeviceConfig) -> String {
    if d.model.kind == nvarray_model::ModelKind::Null {
        return format!(
            "{} — {} null device: every command completes {} ns after submission, nothing shared, {} interface",
            d.name,
            nvarray_workload::format_size(d.memory.capacity_bytes),
            d.model.null_latency_ns,
            d.interface.protocol.name(),
        );
    }
    format!(
        "{} — {} of {} media, PCIe gen{} x{}, {} interface, {} controller, policy {}, {} memory controllers x {} banks",
        d.name,
        nvarray_workload::format_size(d.memory.capacity_bytes),
        d.memory.technology,
        d.link.generation,
        d.link.lanes,
        d.interface.protocol.name(),
        match d.controller.mode {
            nvarray_model::ControllerMode::Hardware => "hardware",
            nvarray_model::ControllerMode::Firmware => "firmware",
        },
        d.controller.policy.name(),
        d.memory.controllers,
        d.memory.banks_per_controller,
    )
}

/// The emulator's setup, after the engine's name: `: 1 device thread runs every queue pair,
/// stack spin, ...`.
fn setup_line(e: &EmulatorSetup) -> String {
    let threads = &e.work_split;
    let mut s = format!(
        ": {threads}, stack {}, completion {}, backing on {}",
        e.stack, e.completion, e.backing_pages
    );
    if !e.device_cpus.is_empty() || !e.host_cpus.is_empty() {
        s += &pinned_note(e);
    }
    // Unpinned, the scheduler shares the cores out; threads that spin (host threads waiting
    // by spinning, as `adaptive` does for short commands; device threads always) beyond the
    // cores stall each other for time slices.
    let spinning = e.device_threads
        + if matches!(e.completion, "spin" | "in-data" | "adaptive") {
            e.host_threads
        } else {
            0
        };
    if e.device_cpus.is_empty() && e.host_cpus.is_empty() && spinning > e.cores {
        s += &format!(
            " ({spinning} spinning threads on {} cores take turns: expect stalls of a time slice, and figures the scheduler decides)",
            e.cores
        );
    }
    if let Some(cpu) = e.device_cpu_per_second {
        s += &format!(
            ", device threads used {:.1} % of a core ({} doorbell wake-ups)",
            cpu * 100.0,
            e.doorbell_wakeups
        );
    }
    if e.checked_blocks > 0 {
        // The verified blocks are among those checked.
        assert!(
            e.verified_blocks <= e.checked_blocks,
            "{} blocks verified of {} checked",
            e.verified_blocks,
            e.checked_blocks
        );
        s += &format!(
            ", {} blocks read back and checked ({} held this run's writes and passed; the other \
             {} read as zeroes, as blocks never written must)",
            e.checked_blocks,
            e.verified_blocks,
            e.checked_blocks.saturating_sub(e.verified_blocks)
        );
    }
    s
}

/// The CPUs the emulator's threads are pinned to, `, pinned: device on CPU 0,1, ...`, and a
/// warning when more threads than CPUs take turns on them.
fn pinned_note(e: &EmulatorSetup) -> String {
    let list = |cpus: &[usize]| {
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut pinned = Vec::new();
    if !e.device_cpus.is_empty() {
        pinned.push(format!("device on CPU {}", list(&e.device_cpus)));
    }
    if !e.host_cpus.is_empty() {
        pinned.push(format!("host on CPU {}", list(&e.host_cpus)));
    }
    let mut s = format!(", pinned: {}", pinned.join(", "));
    let mut all: Vec<usize> = e.device_cpus.iter().chain(&e.host_cpus).copied().collect();
    let threads = all.len();
    all.sort_unstable();
    all.dedup();
    if all.len() < threads {
        s += &format!(
            " ({threads} threads on {} CPUs take turns: expect stalls of a time slice)",
            all.len()
        );
    }
    s
}

/// One line describing a job in fio's terms.
pub fn job_line(j: &JobSpec) -> String {
    let mut s = format!(
        "{}: rw={} bs={} iodepth={} numjobs={}",
        j.name, j.rw, j.bs, j.iodepth, j.numjobs
    );
    if j.rw.is_mixed() {
        s += &format!(" rwmixread={}", j.rwmixread);
    }
    if j.rw.is_random() {
        s += &format!(" random_distribution={}", j.random_distribution);
    }
    if let Some(n) = j.number_ios {
        s += &format!(" number_ios={n}");
    }
    if let Some(r) = j.runtime_ns {
        s += &format!(" runtime={}", fmt_ns(r));
    } else if j.ends_by_size {
        s += " runtime=0";
    }
    if j.loops > 1 {
        s += &format!(" loops={}", j.loops);
    }
    if j.offset_increment_bytes > 0 {
        s += &format!(
            " offset_increment={}",
            format_size(j.offset_increment_bytes)
        );
    }
    if let Some(b) = j.io_size_bytes {
        s += &format!(" io_size={}", format_size(b));
    }
    if let Some(r) = j.rate_iops {
        s += &format!(" rate_iops={r}");
    }
    if let Some(r) = j.rate_bytes_per_s {
        s += &format!(" rate={}", format_size(r));
    }
    if (j.rate_iops.is_some() || j.rate_bytes_per_s.is_some())
        && j.rate_process != RateProcess::Linear
    {
        s += &format!(" rate_process={}", j.rate_process);
    }
    if j.thinktime_ns > 0 {
        s += &format!(" thinktime={}", fmt_ns(j.thinktime_ns));
    }
    if j.ramp_time_ns > 0 {
        s += &format!(" ramp_time={}", fmt_ns(j.ramp_time_ns));
    }
    if j.stonewall {
        s += " stonewall";
    }
    if let Some(w) = &j.wait_for {
        s += &format!(" wait_for={w}");
    }
    if j.new_group {
        s += " new_group";
    }
    if j.verify != Verify::None {
        s += &format!(" verify={}", j.verify);
    }
    s += &format!(" randseed={}", j.randseed);
    s
}

fn fmt_ns(ns: u64) -> String {
    match ns {
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1000.0)
}

/// A rate for the table: `unbounded` when the run measured no time (a device that completes
/// requests in none, `--preset null`: a count over 0 s; the JSON has `null`).
fn rate(v: f64, decimals: usize) -> String {
    if v.is_infinite() {
        "unbounded".to_string()
    } else {
        format!("{v:.decimals$}")
    }
}

/// The stream table's first column: wide enough for its longest name (a served stream is
/// `pid N (command)`), at least as wide as it always was.
fn name_width(names: &[&str]) -> usize {
    names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .max(12)
}

/// One row of the stream table: rates, then latency (µs).
fn row(
    (name, width): (&str, usize),
    iops: f64,
    read_mb: Option<f64>,
    write_mb: Option<f64>,
    l: &LatencySummary,
) -> String {
    // A name past the column's width pushes the row's figures out of line (issue 55).
    assert!(
        name.chars().count() <= width,
        "stream name `{name}` is wider than its column of {width}"
    );
    let mb = |v: Option<f64>| v.map_or(String::new(), |v| rate(v, 1));
    format!(
        "{:<width$} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        name,
        rate(iops, 0),
        mb(read_mb),
        mb(write_mb),
        us(l.min as f64),
        us(l.mean),
        us(l.stdev),
        us(l.p50 as f64),
        us(l.p99 as f64),
        us(l.p999 as f64),
        us(l.p9999 as f64),
        us(l.p99999 as f64),
        us(l.max as f64),
    )
}

/// A stream's row, and when it both read and wrote, a row for each direction under it: a
/// mixed job's reads and writes seldom share a latency.
fn totals_rows(name: &str, width: usize, t: &Totals) -> String {
    assert_eq!(
        t.read.requests + t.write.requests,
        t.requests,
        "`{name}`: {} reads and {} writes of {} requests",
        t.read.requests,
        t.write.requests,
        t.requests
    );
    let mut s = row(
        (name, width),
        t.iops,
        Some(t.read_bandwidth_bytes_per_s / 1e6),
        Some(t.write_bandwidth_bytes_per_s / 1e6),
        &t.latency_ns,
    );
    if t.read.requests > 0 && t.write.requests > 0 {
        let (r, w) = (&t.read, &t.write);
        s += &row(
            ("  read", width),
            r.iops,
            Some(r.bandwidth_bytes_per_s / 1e6),
            None,
            &r.latency_ns,
        );
        s += &row(
            ("  write", width),
            w.iops,
            None,
            Some(w.bandwidth_bytes_per_s / 1e6),
            &w.latency_ns,
        );
    }
    s
}

/// The workload's lines under the device line: each job, or the trace and how it replays.
fn workload_lines(workload: &Workload) -> String {
    let mut s = String::new();
    match &workload.trace {
        Some(t) => {
            let j = &workload.jobs[0];
            let mode = match t.mode {
                ReplayMode::AsFast => "as fast as --iodepth allows".to_string(),
                ReplayMode::Timestamps if t.speed == 1.0 => "at its timestamps".to_string(),
                ReplayMode::Timestamps => format!("at its timestamps x{}", t.speed),
            };
            let format = t
                .format
                .map_or("format guessed".to_string(), |f| f.name().to_string());
            let name = if j.name == "trace" {
                String::new()
            } else {
                format!("{}: ", j.name)
            };
            let mut line = format!(
                "{name}{} ({format}), {mode}, iodepth={}, offsets {}",
                t.path.display(),
                j.iodepth,
                match t.address {
                    AddressMode::Wrap => "wrapped",
                    AddressMode::Scale => "scaled",
                }
            );
            if let Some(d) = &t.device {
                line += &format!(", device {} only", shown(d));
            }
            if let Some(n) = j.number_ios {
                line += &format!(" number_ios={n}");
            }
            if let Some(r) = j.runtime_ns {
                line += &format!(" runtime={}", fmt_ns(r));
            }
            if j.time_based {
                line += " time_based (passes until the runtime)";
            } else if j.loops > 1 {
                line += &format!(" loops={}", j.loops);
            }
            let _ = writeln!(s, "trace    {line}");
        }
        None => {
            for j in &workload.jobs {
                let _ = writeln!(s, "job      {}", job_line(j));
            }
        }
    }
    s
}

/// The trace's own summary and what the replay did to it.
fn trace_lines(t: &TraceReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "trace: {} requests in {} lines ({}), {:.1} % reads, {} read, {} written, over {:.3} ms of trace time; footprint {}",
        t.requests,
        t.lines,
        t.format.name(),
        t.read_fraction * 100.0,
        bytes(t.read_bytes),
        bytes(t.write_bytes),
        t.duration_ns as f64 / 1e6,
        footprint(t),
    );
    if let Some(line) = devices_line(t) {
        let _ = writeln!(s, "{line}");
    }
    let sizes: Vec<String> = t
        .size_histogram
        .iter()
        .map(|b| match b.up_to_bytes {
            0 => format!("> 1 MiB: {}", b.requests),
            up => format!("<= {}: {}", format_size(up), b.requests),
        })
        .collect();
    let _ = writeln!(s, "  sizes: {}", sizes.join(" | "));
    let f = &t.fitted;
    let k = &t.skipped;
    let mut replay = format!(
        "  replay: {} requests to the device; split {} (+{}), aligned {}, offsets moved {}, clamped at the end {}; skipped {} trim, {} flush, {} zero-length, {} other lines",
        t.replayed, f.split, f.split_added, f.aligned, f.moved, f.clamped, k.trim, k.flush, k.empty, k.other
    );
    if k.other_device > 0 {
        replay += &format!(", {} of other devices", k.other_device);
    }
    if k.longer_than_device > 0 {
        replay += &format!(
            ", {} requests longer than the whole device",
            k.longer_than_device
        );
    }
    if t.out_of_order > 0 {
        replay += &format!("; {} out of order", t.out_of_order);
    }
    match t.loops {
        Some(1) => {}
        Some(n) => replay += &format!("; {} of {n} passes over the trace (--loops)", t.passes),
        None => {
            replay += &format!(
                "; {} pass{} over the trace (--time_based: until the runtime)",
                t.passes,
                if t.passes == 1 { "" } else { "es" }
            )
        }
    }
    if t.replay_mode == ReplayMode::Timestamps {
        replay += &format!(
            "; waited for a queue slot past their time {}",
            t.issued_late
        );
    }
    // Until the runtime, passes end by being stopped; a first pass cut short is still said.
    if t.stopped_early && (t.loops.is_some() || t.passes == 1) {
        replay += "; STOPPED before the trace's end (--runtime, --number_ios or --io_size)";
    }
    let _ = writeln!(s, "{replay}");
    s
}

/// "40.10 MB", or for a footprint counted in coarser granules than the device's block,
/// "at most 52.43 MB (counted in 64 KiB granules: ...)".
fn footprint(t: &TraceReport) -> String {
    if t.footprint_exact {
        return bytes(t.footprint_bytes);
    }
    format!(
        "at most {} (counted in {} granules: the replay touched too many separate extents to \
         count them apart)",
        bytes(t.footprint_bytes),
        format_size(t.footprint_granule_bytes)
    )
}

/// The trace's devices, when it held more than one or one was picked: how many, and that
/// they were laid over the one device.
fn devices_line(t: &TraceReport) -> Option<String> {
    let listed = t.devices.len() + usize::from(t.unlisted_device_requests > 0);
    if listed <= 1 && t.device.is_none() {
        return None;
    }
    let count = if t.unlisted_device_requests > 0 {
        format!("more than {}", t.devices.len())
    } else {
        t.devices.len().to_string()
    };
    Some(match &t.device {
        None => format!(
            "  devices: {count} in the trace, laid over the one device: {} (--trace-device NAME replays one)",
            t.devices_described()
        ),
        Some(d) => format!(
            "  devices: {count} in the trace, {} replayed alone (--trace-device): {}",
            shown(d),
            t.devices_described()
        ),
    })
}

/// Bytes for a reader: "1.09 GB" (decimal units, as the bandwidth columns).
fn bytes(n: u64) -> String {
    let n = n as f64;
    match n {
        n if n >= 1e12 => format!("{:.2} TB", n / 1e12),
        n if n >= 1e9 => format!("{:.2} GB", n / 1e9),
        n if n >= 1e6 => format!("{:.2} MB", n / 1e6),
        n if n >= 1e3 => format!("{:.2} kB", n / 1e3),
        n => format!("{n} B"),
    }
}

/// The full report of one run.
pub fn run_report(device: &DeviceConfig, workload: &Workload, r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "device   {}", device_line(device));
    s += &workload_lines(workload);
    s + &report_body(r, "")
}

/// The report of a device that served outside software (`nvarray serve`, `nvarray mount`):
/// the same table as `nvarray bench`, with `source` (who sent the requests) in place of the
/// jobs. `active` says what counts as active time, which the rates are over (a server's
/// report has `uptime_ns` beside it).
pub fn served_report(device: &DeviceConfig, source: &str, active: &str, r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "device   {}", device_line(device));
    let _ = writeln!(s, "served   {source}");
    s + &report_body(r, active)
}

/// The FTL's lines: its settings, write amplification (the run's and its intervals' range),
/// the collector's work, erases per block and free lines.
fn ftl_lines(f: &nvarray_model::FtlStats) -> String {
    let c = &f.counters;
    assert!(
        f.free_lines <= f.lines,
        "{} free lines of {}",
        f.free_lines,
        f.lines
    );
    let range = write_amplification_range(f);
    let placement = match f.host_pages_by_handle.as_slice() {
        [] | [_] => String::new(),
        pages => format!(
            " | host pages by placement handle {}",
            pages
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let buffer = match f.write_buffer_bytes {
        0 => String::new(),
        b => format!(", write buffer {}", described_bytes(b)),
    };
    let map_cache = f.map_cache.as_ref().map_or(String::new(), map_cache_line);
    let bulk = if f.precondition_in_bulk {
        " in bulk (line-level model)"
    } else {
        ""
    };
    format!(
        "ftl ({}, {} B pages, over-provisioning {:.1} % of logical = spare factor {:.1} % of \
         physical, preconditioned {}{bulk}{buffer}): write amplification {}{range} | host pages \
         {} | flash pages {}\n\
         ftl collection: {} lines ({} forced), {} pages copied | erases per block min {} mean \
         {:.2} max {} | free lines {} of {} (fewest {}) | pages trimmed {}{placement}\n\
         ftl maps in host memory: {:.1} MiB (budget {})\n\
         {map_cache}",
        f.victim,
        f.page_bytes,
        f.over_provisioning * 100.0,
        f.spare_factor * 100.0,
        f.precondition,
        f.write_amplification
            .map_or("none (no writes)".to_string(), |w| format!("{w:.3}")),
        c.host_pages_written,
        f.flash_pages_programmed,
        c.gc_victims,
        c.gc_victims_forced,
        c.gc_pages_copied,
        f.erases_per_block.min,
        f.erases_per_block.mean,
        f.erases_per_block.max,
        f.free_lines,
        f.lines,
        c.free_lines_min,
        c.pages_trimmed,
        f.host_map_bytes as f64 / f64::from(1 << 20),
        described_bytes(f.map_budget_bytes),
    )
}

/// The range of write amplification over the run's sample intervals that wrote host pages,
/// ` (per interval of the run: LO to HI)`, or nothing without such an interval.
fn write_amplification_range(f: &nvarray_model::FtlStats) -> String {
    let intervals: Vec<f64> = f
        .samples
        .windows(2)
        .filter(|w| w[1].host_pages_written > w[0].host_pages_written)
        .map(|w| {
            // The samples are counts of one run, taken in order: they never go down.
            assert!(
                w[1].flash_pages_programmed >= w[0].flash_pages_programmed,
                "flash pages programmed went from {} to {}",
                w[0].flash_pages_programmed,
                w[1].flash_pages_programmed
            );
            (w[1].flash_pages_programmed - w[0].flash_pages_programmed) as f64
                / (w[1].host_pages_written - w[0].host_pages_written) as f64
        })
        .collect();
    match (
        intervals.iter().copied().reduce(f64::min),
        intervals.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => format!(" (per interval of the run: {lo:.3} to {hi:.3})"),
        _ => String::new(),
    }
}

/// A size as a device description sets it (binary units), not as a rate column reads.
fn described_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b.is_multiple_of(1 << 30) => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The mapping-table cache's line: its size, its hit ratio and the map's flash traffic.
fn map_cache_line(m: &nvarray_model::MapCacheStats) -> String {
    let c = &m.counters;
    assert!(
        c.hits <= c.lookups,
        "{} map cache hits of {} lookups",
        c.hits,
        c.lookups
    );
    let hits = m.hit_ratio.map_or("none (no lookups)".to_string(), |h| {
        format!("{h:.4} ({} of {} lookups)", c.hits, c.lookups)
    });
    format!(
        "ftl map cache ({} = {} of {} translation pages of {} entries): hit ratio {hits} | \
         map pages read {}, written {} (in the write amplification)\n",
        described_bytes(m.bytes),
        m.pages,
        m.map_pages,
        m.entries_per_page,
        c.pages_read,
        c.pages_written,
    )
}

/// Everything after the device and job lines: engine, faithfulness, totals, breakdown,
/// utilisation, wear, CPU and lateness. `active`: what a server's active time is.
fn report_body(r: &RunReport, active: &str) -> String {
    let mut s = engine_line(r, active);
    // First, so nobody reads the numbers below without knowing they are not the model's.
    if let Some(line) = verdict_line(r) {
        let _ = writeln!(s, "{line}");
    }
    s.push('\n');
    s += &stream_table(r);
    if let Some(late) = r.paced_issued_late {
        let _ = writeln!(
            s,
            "paced requests (rate, rate_iops) that waited for a queue slot past their due time: {late}{}",
            if late > 0 {
                " (every slot was taken: their latency holds the wait)"
            } else {
                ""
            }
        );
    }
    s += &breakdown_lines(r);
    s += &utilisation_line(&r.utilisation);
    if let Some(w) = &r.wear {
        let _ = writeln!(
            s,
            "wear (start-gap): max writes to one line {} | mean {:.4} | gap moves {}",
            w.line_writes_max, w.line_writes_mean, w.gap_moves
        );
    }
    if r.erases > 0 {
        let _ = writeln!(s, "flash erases: {}", r.erases);
    }
    if let Some(f) = &r.ftl {
        s += &ftl_lines(f);
    }
    if let Some(c) = &r.channels {
        let _ = writeln!(
            s,
            "channels: {} opened, {} open now, {} refused | commands refused unexecuted: {} \
             outside the grants, {} malformed | ring counter faults: {}",
            c.opened, c.live, c.refused, c.permission_denied, c.malformed, c.ring_faults
        );
    }
    let _ = writeln!(s, "{}", cpu_line(r));
    s += &lateness_lines(r);
    if let Some(e) = &r.emulator {
        let _ = writeln!(s, "{}", jitter_line(r.machine_jitter_ns.as_ref()));
        if let Some(line) = serial_line(e, r.totals.requests) {
            let _ = writeln!(s, "{line}");
        }
    }
    if let Some(t) = &r.trace {
        s += &trace_lines(t);
    }
    s
}

/// The engine, the emulator's setup, and the time the rates are over.
fn engine_line(r: &RunReport, active: &str) -> String {
    let time = match r.uptime_ns {
        // A server: say which time the rates are over.
        Some(up) => format!(
            "{:.3} ms active ({active}, and gaps under {} ms between them) of {:.3} s up; rates and utilisation are over the active time",
            r.elapsed_ns as f64 / 1e6,
            nvarray_report::ACTIVE_GAP_MAX.as_millis(),
            up as f64 / 1e9
        ),
        None => format!(
            "{:.3} ms of {}",
            r.elapsed_ns as f64 / 1e6,
            if r.engine == "sim" {
                "device time"
            } else {
                "wall-clock time"
            }
        ),
    };
    format!(
        "engine   {}{} ({time})\n",
        r.engine,
        r.emulator.as_ref().map(setup_line).unwrap_or_default(),
    )
}

/// The table of rates and latencies: the whole run, each stream when there are several and
/// each reporting group, then which jobs each group holds.
fn stream_table(r: &RunReport) -> String {
    let mut s = String::new();
    let groups: Vec<String> = r
        .groups
        .iter()
        .map(|g| format!("group {}", g.group))
        .collect();
    let streams = if r.streams.len() > 1 {
        &r.streams[..]
    } else {
        &[]
    };
    let names: Vec<&str> = std::iter::once("all")
        .chain(streams.iter().map(|st| st.name.as_str()))
        .chain(groups.iter().map(String::as_str))
        .collect();
    let width = name_width(&names);
    let _ = writeln!(
        s,
        "{:<width$} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "stream",
        "IOPS",
        "read MB/s",
        "write MB/s",
        "min µs",
        "mean",
        "stdev",
        "p50",
        "p99",
        "p99.9",
        "p99.99",
        "p99.999",
        "max"
    );
    s.push_str(&totals_rows("all", width, &r.totals));
    for st in streams {
        s.push_str(&totals_rows(&st.name, width, &st.totals));
    }
    for (g, name) in r.groups.iter().zip(&groups) {
        s.push_str(&totals_rows(name, width, &g.totals));
    }
    if !r.groups.is_empty() {
        let members: Vec<String> = r
            .groups
            .iter()
            .inspect(|g| assert!(!g.jobs.is_empty(), "group {} has no job", g.group))
            .map(|g| format!("group {}: {}", g.group, g.jobs.join(", ")))
            .collect();
        let _ = writeln!(
            s,
            "groups (each over its own time; stonewall/wait_for groups ran one after another): {}",
            members.join(" | ")
        );
    }
    s
}

/// The mean latency's parts, in µs per request.
fn breakdown_lines(r: &RunReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nlatency breakdown, mean µs per request (adds up to the mean latency):"
    );
    let parts: Vec<String> = r
        .totals
        .breakdown_ns
        .0
        .iter()
        .map(|(k, v)| format!("{k} {}", us(*v)))
        .collect();
    let _ = writeln!(s, "  {}", parts.join(" | "));
    s
}

/// How busy each resource was, with the fabric and remote CPU when the device has them.
fn utilisation_line(u: &Utilisation) -> String {
    // Each is a share of the time (`RunReport::from_model_over` caps it at the whole).
    for share in [
        u.link_to_device,
        u.link_to_host,
        u.controller,
        u.ring,
        u.banks,
        u.buffers,
        u.tags,
    ] {
        assert!(
            (0.0..=1.0).contains(&share),
            "a utilisation of {share} outside 0 to 1"
        );
    }
    let mut line = format!(
        "utilisation: link to device {:.0}% | link to host {:.0}% | controller {:.0}% | ring {:.0}% | banks {:.0}% | buffers {:.0}% | tags {:.0}%",
        u.link_to_device * 100.0,
        u.link_to_host * 100.0,
        u.controller * 100.0,
        u.ring * 100.0,
        u.banks * 100.0,
        u.buffers * 100.0,
        u.tags * 100.0
    );
    for (name, value) in [
        ("fabric to device", u.fabric_to_device),
        ("fabric to host", u.fabric_to_host),
        ("remote cpu", u.remote_cpu),
    ] {
        if let Some(v) = value {
            let _ = write!(line, " | {name} {:.0}%", v * 100.0);
        }
    }
    line.push('\n');
    line
}

/// How late completions came after their modelled time (and, for the emulator, without the
/// machine's pauses), and how late timed requests were issued.
fn lateness_lines(r: &RunReport) -> String {
    let mut s = String::new();
    let l = &r.lateness_ns;
    let us = |ns: u64| ns as f64 / 1e3;
    let _ = writeln!(
        s,
        "lateness, µs after the modelled completion time: p50 {:.3} | p99 {:.3} | max {:.3}",
        us(l.p50),
        us(l.p99),
        us(l.max)
    );
    if l.host_code > 0 {
        assert!(
            l.host_code <= l.completions,
            "{} host-code completions of {}",
            l.host_code,
            l.completions
        );
        let _ = writeln!(
            s,
            "  {} of {} completions ({:.2} %) fell due while the host thread that runs the device inline ran its own code: late from its next poll, the first time it could have seen them from any device",
            l.host_code, l.completions, l.host_code_percent
        );
    }
    if r.emulator.is_some() {
        let woke = if l.wake_late > 0 {
            format!(
                " and the {} ({:.2} %) due after a device thread should have woken and before the kernel woke it",
                l.wake_late, l.wake_late_percent
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "  the emulator's own, without the {} of {} completions ({:.2} %) due in a pause of the machine{woke}: p50 {:.3} | p99 {:.3} | max {:.3}",
            l.machine_late,
            l.completions,
            l.machine_late_percent,
            us(l.own_p50),
            us(l.own_p99),
            us(l.own_max)
        );
    }
    if let Some(i) = &r.issue_lateness_ns {
        let _ = writeln!(
            s,
            "issue lateness, µs the host thread issued a timed request after it could have gone (not in its latency): p50 {:.3} | p99 {:.3} | max {:.3} ({} of {} later than {:.0} µs; {} due in a pause of the machine, {} held by the request before them; the thread's own p99 {:.3})",
            us(i.p50),
            us(i.p99),
            us(i.max),
            i.late,
            i.requests,
            nvarray_report::ISSUED_LATE_NS as f64 / 1e3,
            i.machine_late,
            i.held_by_previous,
            us(i.own_p99)
        );
    }
    s
}

/// CPU time per GB moved, or, when too little moved for that figure to mean anything, the
/// time itself and why there is no rate.
fn cpu_line(r: &RunReport) -> String {
    let whose = if r.engine == "sim" {
        "the simulating thread"
    } else {
        "whole process"
    };
    match r.cpu_seconds_per_gb {
        Some(per_gb) => format!("cpu: {per_gb:.3} s per GB moved (user + system, {whose})"),
        None => format!(
            "cpu: {:.3} s (user + system, {whose}) over {} in {} requests: too little moved for \
             a figure per GB (it needs {} in {} requests)",
            r.cpu_seconds,
            bytes_words(r.totals.read_bytes + r.totals.write_bytes),
            r.totals.requests,
            bytes_words(nvarray_report::BYTES_FEW),
            nvarray_report::REQUESTS_FEW
        ),
    }
}

/// A byte count as a person reads it: 12 KiB, 1 MiB, 3.4 GiB.
fn bytes_words(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The device's serial part at this run's load and the ceiling it sets, whatever the threads.
/// Per command it falls as queues deepen (a visit to the model carries a batch), so the
/// ceiling is this load's. Over fewer than `REQUESTS_FEW` requests it says that instead.
fn serial_line(e: &EmulatorSetup, requests: u64) -> Option<String> {
    let ns = e.serial_ns_per_command.filter(|ns| *ns > 0.0)?;
    if requests < nvarray_report::REQUESTS_FEW {
        return Some(format!(
            "serial part: not measured over {requests} requests (it needs {})",
            nvarray_report::REQUESTS_FEW
        ));
    }
    Some(format!(
        "serial part: {ns:.0} ns per command in the timing model's lock (the model and the hand-off), so at most {:.1} M commands/s with this workload at any number of threads (less per command at deeper queues, where visits carry batches)",
        1e3 / ns
    ))
}

/// The machine's own jitter beside the lateness, so a tail can be told apart from it.
fn jitter_line(j: Option<&MachineJitterNs>) -> String {
    let Some(j) = j else {
        return "machine jitter: not measured (no device thread spun idle in this run: every pass had work, or the threads slept)".into();
    };
    let us = |ns: u64| ns as f64 / 1e3;
    format!(
        "machine jitter, µs a spinning thread here noticed an instant late: p50 {:.3} | p99 {:.3} | p99.99 {:.3} | max {:.3} ({} instants over {:.1} ms of idle spinning)",
        us(j.p50),
        us(j.p99),
        us(j.p9999),
        us(j.max),
        j.samples,
        j.observed_ns as f64 / 1e6
    )
}

/// The verdict in its three words (`nvarray_report::Verdict`), with the reason when the run
/// was not faithful: `NOT FAITHFUL: <reason>`, `machine-limited: <reason>`, or for an
/// emulated run `faithful` and its lateness. `None` for a faithful simulation, whose clock is
/// exact.
pub fn verdict_line(r: &RunReport) -> Option<String> {
    let why = || r.unfaithful_reason.as_deref().unwrap_or("no reason given");
    match r.verdict {
        Verdict::NotFaithful => Some(format!("NOT FAITHFUL: {}", why())),
        Verdict::MachineLimited => Some(format!("machine-limited: {}", why())),
        Verdict::Faithful if r.emulator.is_some() => {
            let l = &r.lateness_ns;
            let woke = if l.wake_late > 0 {
                format!(", {} ({:.2} %) wake-late", l.wake_late, l.wake_late_percent)
            } else {
                String::new()
            };
            Some(format!(
                "faithful: lateness p99 {:.3} µs, within the bound ({} of {} completions, {:.2} %, fell due in a pause of the machine{woke})",
                l.p99 as f64 / 1e3,
                l.machine_late,
                l.completions,
                l.machine_late_percent
            ))
        }
        Verdict::Faithful => r
            .too_few_requests
            .as_ref()
            .map(|why| format!("too few requests to measure: {why}")),
    }
}

/// One quantity `nvarray bench --compare-sim` sets side by side.
pub struct Compared {
    /// Table row, with the unit `of` returns.
    pub label: &'static str,
    /// Key of its ratio in the JSON, named after the `RunReport` field.
    pub key: &'static str,
    pub of: fn(&Totals) -> f64,
}

pub const COMPARED: [Compared; 6] = [
    Compared {
        label: "p50 latency (µs)",
        key: "latency_ns_p50",
        of: |t| t.latency_ns.p50 as f64 / 1e3,
    },
    Compared {
        label: "p99 latency (µs)",
        key: "latency_ns_p99",
        of: |t| t.latency_ns.p99 as f64 / 1e3,
    },
    Compared {
        label: "mean latency (µs)",
        key: "latency_ns_mean",
        of: |t| t.latency_ns.mean / 1e3,
    },
    Compared {
        label: "IOPS",
        key: "iops",
        of: |t| t.iops,
    },
    Compared {
        label: "read bandwidth (MB/s)",
        key: "read_bandwidth_bytes_per_s",
        of: |t| t.read_bandwidth_bytes_per_s / 1e6,
    },
    Compared {
        label: "write bandwidth (MB/s)",
        key: "write_bandwidth_bytes_per_s",
        of: |t| t.write_bandwidth_bytes_per_s / 1e6,
    },
];

/// emu / sim, or None when the model's value is 0 (e.g. write bandwidth of a read workload).
pub fn ratio(emu: f64, sim: f64) -> Option<f64> {
    (sim != 0.0).then(|| emu / sim)
}

/// The model's answer and the emulator's, side by side.
pub fn comparison(
    device: &DeviceConfig,
    workload: &Workload,
    sim: &RunReport,
    emu: &RunReport,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "device   {}", device_line(device));
    s += &workload_lines(workload);
    s.push('\n');
    let _ = writeln!(
        s,
        "{:<22} {:>14} {:>14} {:>9}",
        "", "model (sim)", "emulated (emu)", "emu/sim"
    );
    for c in &COMPARED {
        let (m, e) = ((c.of)(&sim.totals), (c.of)(&emu.totals));
        let _ = writeln!(
            s,
            "{:<22} {m:>14.2} {e:>14.2} {:>9}",
            c.label,
            ratio(e, m).map_or_else(|| "-".to_string(), |x| format!("{x:.3}"))
        );
    }
    s.push('\n');
    s.push_str(&difference_in_words(sim, emu));
    if let Some(line) = verdict_line(emu) {
        let _ = writeln!(s, "\n{line}");
    }
    s
}

/// Where the emulated mean latency differs from the model's, in nanoseconds; the three parts
/// add up to `total`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Difference {
    /// Emulated mean latency minus the model's.
    pub total: f64,
    /// The host's own software and waiting: the emulator's `host` component, less the
    /// lateness inside it and the host time the simulator charges too (`host.software_ns`).
    pub host_software: f64,
    /// The emulator posting completions after the model's time (mean lateness), and the part
    /// of it that completions due in a pause of the machine or after a late wake-up make (the
    /// rest is the emulator's own).
    pub lateness: f64,
    pub machine_lateness: f64,
    /// The modelled device itself: its share of the emulated run against the simulator's
    /// (requests that arrive at other times meet other queues).
    pub device: f64,
}

/// `Difference` of two runs of the same device and workload, or None when either completed
/// no request.
pub fn difference(sim: &RunReport, emu: &RunReport) -> Option<Difference> {
    let (sim_t, emu_t) = (&sim.totals, &emu.totals);
    if sim_t.requests == 0 || emu_t.requests == 0 {
        return None;
    }
    let host = |t: &Totals| {
        t.breakdown_ns
            .0
            .iter()
            .find(|(name, _)| *name == "host")
            .map_or(0.0, |(_, ns)| *ns)
    };
    let (sim_host, emu_host) = (host(sim_t), host(emu_t));
    // The emulator's host component holds everything the model did not produce.
    let l = &emu.lateness_ns;
    let lateness = l.mean.min(emu_host);
    // Machine-late and wake-late completions are some of the completions.
    assert!(
        l.machine_late + l.wake_late <= l.completions,
        "{} machine-late and {} wake-late of {} completions",
        l.machine_late,
        l.wake_late,
        l.completions
    );
    // Per request: the own completions' lateness over every completion; the rest is the
    // machine's pauses'.
    let own = if l.completions == 0 {
        0.0
    } else {
        l.own_mean * (l.completions - l.machine_late - l.wake_late) as f64 / l.completions as f64
    };
    let d = Difference {
        total: emu_t.latency_ns.mean - sim_t.latency_ns.mean,
        host_software: emu_host - lateness - sim_host,
        lateness,
        machine_lateness: (lateness - own).max(0.0),
        device: (emu_t.latency_ns.mean - emu_host) - (sim_t.latency_ns.mean - sim_host),
    };
    // `Difference` promises its three parts add up to `total`, and the machine's share of
    // the lateness is part of it.
    let parts = d.host_software + d.lateness + d.device;
    let scale = emu_t.latency_ns.mean.abs() + sim_t.latency_ns.mean.abs() + emu_host + sim_host;
    assert!(
        (parts - d.total).abs() <= 1e-9 * scale.max(1.0),
        "the parts add up to {parts} ns, the difference is {} ns",
        d.total
    );
    assert!(
        d.machine_lateness <= d.lateness,
        "{} ns of {} ns lateness the machine's",
        d.machine_lateness,
        d.lateness
    );
    Some(d)
}

/// `difference` in words, one line per part.
pub fn difference_in_words(sim: &RunReport, emu: &RunReport) -> String {
    let Some(d) = difference(sim, emu) else {
        return "no difference to explain: one of the runs completed no request\n".into();
    };
    let us = |ns: f64| ns / 1e3;
    let mut s = format!(
        "mean latency: emulated {:.2} µs, modelled {:.2} µs, difference {:+.2} µs:\n",
        us(emu.totals.latency_ns.mean),
        us(sim.totals.latency_ns.mean),
        us(d.total)
    );
    let setup = emu.emulator.as_ref();
    let _ = writeln!(
        s,
        "  {:+.2} µs host software and waiting (driver, polling, wake-ups: --stack {}, --completion {})",
        us(d.host_software),
        setup.map_or("?", |e| e.stack),
        setup.map_or("?", |e| e.completion),
    );
    let l = &emu.lateness_ns;
    let _ = writeln!(
        s,
        "  {:+.2} µs lateness (completions posted after the model's time): {:+.2} µs the machine's pauses and late wake-ups ({} completions fell due in one), {:+.2} µs the emulator's own (its p99 {:.2} µs)",
        us(d.lateness),
        us(d.machine_lateness),
        l.machine_late + l.wake_late,
        us(d.lateness - d.machine_lateness),
        us(l.own_p99 as f64)
    );
    let _ = writeln!(
        s,
        "  {:+.2} µs the modelled device (requests arriving at other times meet other queues)",
        us(d.device)
    );
    s
}

/// The per-command link traffic of every protocol on one device's link
/// (`nvarray presets show NAME --protocol-cost`).
pub fn protocol_cost(
    d: &DeviceConfig,
    rows: &[nvarray_model::protocol_cost::CommandTraffic],
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "link traffic of one command alone on {}'s link (PCIe gen{} x{}, {}-byte payloads, {} bytes of overhead per packet); * marks the preset's own protocol",
        d.name, d.link.generation, d.link.lanes, d.link.max_payload_bytes, d.link.tlp_overhead_bytes
    );
    let _ = writeln!(
        out,
        "packets (bytes on the wire); \"protocol\" is everything but the data and the read requests that fetch it\n"
    );
    let _ = writeln!(
        out,
        "{:<13} {:<6} {:>5}  {:>22}  {:>22}  {:>7}  {:>8}",
        "protocol", "op", "size", "to device", "to host", "packets", "protocol"
    );
    for r in rows {
        let own = if r.protocol == d.interface.protocol.name() {
            " *"
        } else {
            ""
        };
        let dir = |t: &nvarray_model::link::DirectionTraffic| {
            let total = t.total();
            format!("{} ({} B)", total.packets, total.wire_bytes)
        };
        let _ = writeln!(
            out,
            "{:<13} {:<6} {:>5}  {:>22}  {:>22}  {:>7}  {:>8}",
            format!("{}{own}", r.protocol),
            match r.op {
                nvarray_model::Op::Read => "read",
                nvarray_model::Op::Write => "write",
            },
            nvarray_workload::format_size(u64::from(r.len_bytes)),
            dir(&r.to_device),
            dir(&r.to_host),
            r.packets(),
            r.protocol_packets(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(
        device_threads: usize,
        host_threads: usize,
        completion: &'static str,
    ) -> EmulatorSetup {
        EmulatorSetup {
            device_threads,
            host_threads,
            completion,
            cores: 2,
            work_split: "w".into(),
            ..EmulatorSetup::default()
        }
    }

    /// A stream whose name is longer than the first column (a served client's `pid N
    /// (command)`) widens the column for every row, so each figure stays under its header
    /// (issue 55: the row's figures were pushed out of line); a rate over no time reads
    /// `unbounded`.
    #[test]
    fn long_stream_names_keep_every_column_in_line() {
        let stream = |name: &str| nvarray_report::StreamReport {
            name: name.to_string(),
            ..Default::default()
        };
        let mut r = RunReport {
            streams: vec![stream("job0"), stream("pid 123456 (nvarray-example)")],
            ..RunReport::default()
        };
        r.totals.iops = f64::INFINITY;
        let table = stream_table(&r);
        let lines: Vec<&str> = table.lines().take(4).collect();
        // The name column is as wide as the longest name, then the 11-wide IOPS column: on
        // the header and on every row, the IOPS figure ends at the same byte.
        let end = "pid 123456 (nvarray-example)".len() + 1 + 11;
        for line in &lines {
            let b = line.as_bytes();
            assert!(b[end - 1] != b' ' && b[end] == b' ', "{table}");
        }
        assert_eq!(&lines[0][end - 4..end], "IOPS");
        assert_eq!(
            lines[1].split_whitespace().nth(1),
            Some("unbounded"),
            "{table}"
        );
    }

    /// The engine line warns when more threads spin than there are cores (unpinned), counting
    /// host threads only when they wait by spinning.
    #[test]
    fn more_spinning_threads_than_cores_are_called_out() {
        for completion in ["spin", "adaptive"] {
            let line = setup_line(&setup(2, 2, completion));
            assert!(
                line.contains("4 spinning threads on 2 cores take turns"),
                "{line}"
            );
        }
        for quiet in [
            setup(1, 1, "spin"),
            setup(0, 2, "spin"),
            setup(1, 4, "sleep"),
        ] {
            let line = setup_line(&quiet);
            assert!(!line.contains("take turns"), "{line}");
        }
    }
}
