//! Trace replay in both engines: every request once, at its time in timestamps mode, latency
//! counted from that time, and the same trace giving the same simulation.

use std::io::Write;
use std::path::Path;

use nvarray_host::{Device, Options};
use nvarray_model::presets::preset;
use nvarray_model::DeviceConfig;
use nvarray_run::{emu, sim, RunReport};
use nvarray_workload::trace::{AddressMode, ReplayMode, TraceSpec};
use nvarray_workload::{JobSpec, Workload};

fn device(name: &str, capacity: &str) -> DeviceConfig {
    preset(name)
        .unwrap()
        .load(&[("memory.capacity_bytes".into(), capacity.into())])
        .unwrap()
}

/// Writes `rows` (time ns, 'R'/'W', offset, length) as an nvarray CSV trace.
fn csv(dir: &Path, rows: &[(u64, char, u64, u64)]) -> std::path::PathBuf {
    let path = dir.join("trace.csv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, "time_ns,op,offset_bytes,len_bytes").unwrap();
    for (t, op, off, len) in rows {
        writeln!(f, "{t},{op},{off},{len}").unwrap();
    }
    f.flush().unwrap();
    path
}

fn replay(path: &Path, mode: ReplayMode, speed: f64, iodepth: u32) -> Workload {
    let mut job = JobSpec::default();
    job.set("iodepth", &iodepth.to_string()).unwrap();
    Workload {
        jobs: vec![job],
        trace: Some(TraceSpec {
            path: path.to_path_buf(),
            format: None,
            mode,
            speed,
            address: AddressMode::Wrap,
            device: None,
        }),
    }
}

fn requests(r: &RunReport) -> u64 {
    r.totals.requests
}

#[test]
fn as_fast_replays_every_request_once_with_the_traces_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<_> = (0..500u64)
        .map(|i| {
            (
                i,
                if i % 4 == 0 { 'W' } else { 'R' },
                (i * 7919 % 1000) * 4096,
                4096,
            )
        })
        .collect();
    let path = csv(dir.path(), &rows);
    let r = sim::run(
        &device("dram", "64m"),
        &replay(&path, ReplayMode::AsFast, 1.0, 8),
    )
    .unwrap();
    assert_eq!(requests(&r), 500);
    assert_eq!(r.totals.write_requests, 125);
    assert_eq!(r.totals.read_bytes, 375 * 4096);
    let t = r.trace.as_ref().unwrap();
    assert_eq!((t.requests, t.replayed, t.writes), (500, 500, 125));
    assert!(!t.stopped_early);
    // Deterministic: the same trace, the same simulation.
    let again = sim::run(
        &device("dram", "64m"),
        &replay(&path, ReplayMode::AsFast, 1.0, 8),
    )
    .unwrap();
    assert_eq!(again.totals.latency_ns, r.totals.latency_ns);
}

#[test]
fn timestamps_issue_each_request_at_its_time() {
    let dir = tempfile::tempdir().unwrap();
    // One 4 KiB read every 100 µs: far apart for a dram device, so no queueing.
    let rows: Vec<_> = (0..200u64)
        .map(|i| (i * 100_000, 'R', i * 4096, 4096))
        .collect();
    let path = csv(dir.path(), &rows);
    let cfg = device("dram", "64m");
    let r = sim::run(&cfg, &replay(&path, ReplayMode::Timestamps, 1.0, 4)).unwrap();
    assert_eq!(requests(&r), 200);
    // The last request is due at 19.9 ms and completes a device latency later.
    assert!(
        (19_900_000..19_950_000).contains(&r.elapsed_ns),
        "elapsed {} ns",
        r.elapsed_ns
    );
    let l = &r.totals.latency_ns;
    assert!(l.max - l.p50 < 1_000, "no request waited: {l:?}");
    assert_eq!(r.trace.as_ref().unwrap().issued_late, 0);
    // Twice as fast: half the time.
    let fast = sim::run(&cfg, &replay(&path, ReplayMode::Timestamps, 2.0, 4)).unwrap();
    assert!(
        (9_950_000..10_000_000).contains(&fast.elapsed_ns),
        "elapsed {} ns at x2",
        fast.elapsed_ns
    );
    // As fast as it can: much less than the trace's time.
    let closed = sim::run(&cfg, &replay(&path, ReplayMode::AsFast, 1.0, 4)).unwrap();
    assert!(closed.elapsed_ns < 1_000_000, "{} ns", closed.elapsed_ns);
}

#[test]
fn a_device_slower_than_the_trace_shows_queueing_from_each_requests_time() {
    let dir = tempfile::tempdir().unwrap();
    // 50 reads all due at once, one in flight at a time: the k-th waits for the k before it.
    let rows: Vec<_> = (0..50u64).map(|i| (0, 'R', i * 4096, 4096)).collect();
    let path = csv(dir.path(), &rows);
    let cfg = device("dram", "64m");
    let r = sim::run(&cfg, &replay(&path, ReplayMode::Timestamps, 1.0, 1)).unwrap();
    assert_eq!(requests(&r), 50);
    let l = &r.totals.latency_ns;
    // Each request alone takes `min`; the last is due at 0 and completes after all 50.
    assert!(
        l.max as f64 > 45.0 * l.min as f64,
        "latency from the due time: min {} max {}",
        l.min,
        l.max
    );
    assert!(
        (l.max as f64 - r.elapsed_ns as f64).abs() < 1_000.0,
        "{l:?} vs {}",
        r.elapsed_ns
    );
    assert_eq!(r.trace.as_ref().unwrap().issued_late, 49);
    // Closed loop, the same trace: each request's latency is its own service time.
    let closed = sim::run(&cfg, &replay(&path, ReplayMode::AsFast, 1.0, 1)).unwrap();
    let c = &closed.totals.latency_ns;
    assert!(c.max < 2 * c.min, "{c:?}");
}

#[test]
fn a_runtime_shorter_than_the_trace_stops_it_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<_> = (0..100u64).map(|i| (i * 1_000_000, 'W', 0, 512)).collect();
    let path = csv(dir.path(), &rows);
    let mut w = replay(&path, ReplayMode::Timestamps, 1.0, 2);
    w.jobs[0].set("runtime", "10ms").unwrap();
    let r = sim::run(&device("dram", "64m"), &w).unwrap();
    assert!((10..=11).contains(&requests(&r)), "{}", requests(&r));
    assert!(r.trace.unwrap().stopped_early);
}

#[test]
fn a_bad_line_mid_trace_fails_the_run_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    std::fs::write(
        &path,
        "time_ns,op,offset_bytes,len_bytes\n0,R,0,512\n5,X,0,512\n",
    )
    .unwrap();
    let e = sim::run(
        &device("dram", "64m"),
        &replay(&path, ReplayMode::AsFast, 1.0, 1),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bad.csv line 3") && e.contains("op 'X'"), "{e}");
    let missing = dir.path().join("missing.csv");
    let e = sim::run(
        &device("dram", "64m"),
        &replay(&missing, ReplayMode::AsFast, 1.0, 1),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("missing.csv") && e.contains("No such file"),
        "{e}"
    );
}

#[test]
fn the_emulator_replays_the_same_requests() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<_> = (0..300u64)
        .map(|i| {
            (
                i * 20_000,
                if i % 3 == 0 { 'W' } else { 'R' },
                (i % 64) * 8192,
                8192,
            )
        })
        .collect();
    let path = csv(dir.path(), &rows);
    let cfg = device("dram", "4m");
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let opened = Device::open(&cfg, &options).unwrap();
    for mode in [ReplayMode::AsFast, ReplayMode::Timestamps] {
        let r = emu::run_on(&opened, &replay(&path, mode, 1.0, 4), &mut |_| {}).unwrap();
        assert_eq!(requests(&r), 300, "{mode:?}");
        assert_eq!(r.totals.write_requests, 100, "{mode:?}");
        let t = r.trace.unwrap();
        assert_eq!((t.requests, t.replayed), (300, 300));
        if mode == ReplayMode::Timestamps {
            // The last request is due at 5.98 ms.
            assert!(r.elapsed_ns >= 5_980_000, "{} ns", r.elapsed_ns);
        }
    }
}

#[test]
fn a_job_key_a_trace_would_ignore_is_refused_in_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let path = csv(dir.path(), &[(0, 'R', 0, 4096)]);
    // As a sweep's parameter sets them, past the command line's checks.
    let cases = [
        ("rate_iops", "1000"),
        ("rate", "1m"),
        ("rate_process", "poisson"),
        ("offset_increment", "1m"),
        ("bs", "8k"),
        ("randseed", "9"),
    ];
    let cfg = device("dram", "64m");
    for (key, value) in cases {
        let mut w = replay(&path, ReplayMode::AsFast, 1.0, 1);
        w.jobs[0].set(key, value).unwrap();
        let e = sim::run(&cfg, &w).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{key} cannot be used with --trace")),
            "{key}: {e}"
        );
        let e = emu::run(&cfg, &w, &Options::default(), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{key} cannot be used with --trace")),
            "emu {key}: {e}"
        );
    }
}

#[test]
fn loops_replay_the_trace_again_with_times_continuing_in_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    // One 4 KiB read every 100 µs, 20 of them: 1.9 ms of trace.
    let rows: Vec<_> = (0..20u64)
        .map(|i| (i * 100_000, 'R', i * 4096, 4096))
        .collect();
    let path = csv(dir.path(), &rows);
    let cfg = device("dram", "4m");
    let mut w = replay(&path, ReplayMode::Timestamps, 1.0, 2);
    w.jobs[0].set("loops", "3").unwrap();
    let r = sim::run(&cfg, &w).unwrap();
    assert_eq!(requests(&r), 60);
    // The third pass's last request is due at 3 x 1.9 ms.
    assert!(
        (5_700_000..5_750_000).contains(&r.elapsed_ns),
        "elapsed {} ns",
        r.elapsed_ns
    );
    let t = r.trace.as_ref().unwrap();
    assert_eq!((t.requests, t.replayed, t.passes), (20, 60, 3));
    assert!(!t.stopped_early);
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let opened = Device::open(&cfg, &options).unwrap();
    let e = emu::run_on(&opened, &w, &mut |_| {}).unwrap();
    assert_eq!(requests(&e), 60);
    assert!(e.elapsed_ns >= 5_700_000, "{} ns", e.elapsed_ns);
    // number_ios counts per loop, as for a generated job: 3 x 15 of the 60, stopping in the
    // third pass.
    w.jobs[0].set("number_ios", "15").unwrap();
    let r = sim::run(&cfg, &w).unwrap();
    assert_eq!(requests(&r), 45);
    let t = r.trace.unwrap();
    assert!(t.stopped_early && t.passes == 3, "{t:?}");
}
