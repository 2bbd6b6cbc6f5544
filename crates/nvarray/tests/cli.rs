//! End-to-end tests of the real `nvarray` binary: output shape, job files, sweeps, presets,
//! and bad input (exit status 2, one line naming the field, never a panic).

use std::path::Path;
use std::process::{Command, Output};

fn nvarray(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("run nvarray")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = nvarray(args);
    assert!(
        out.status.success(),
        "nvarray {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// A report without the one field measured on this machine rather than simulated.
fn simulated_part(mut report: serde_json::Value) -> serde_json::Value {
    let cpu = report.as_object_mut().unwrap().remove("cpu_seconds_per_gb");
    report.as_object_mut().unwrap().remove("cpu_seconds");
    assert!(cpu.is_some(), "cpu_seconds_per_gb missing from {report}");
    report
}

/// A directory of a test's own, removed with everything in it when the test ends.
struct Scratch(tempfile::TempDir);

fn scratch(name: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("nvarray-cli-{name}-"))
            .tempdir()
            .unwrap(),
    )
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.path().as_os_str()
    }
}

#[test]
fn json_report_has_the_documented_fields() {
    let r = json(&[
        "sim",
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--numjobs",
        "4",
        "--runtime",
        "2ms",
        "--json",
    ]);
    for key in [
        "iops",
        "read_bandwidth_bytes_per_s",
        "write_bandwidth_bytes_per_s",
    ] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key} in {r}");
    }
    for key in ["mean", "p50", "p99", "p999", "p9999", "p99999", "max"] {
        assert!(
            r["latency_ns"][key].as_f64().unwrap() > 0.0,
            "latency_ns.{key}"
        );
    }
    let l = &r["latency_ns"];
    assert!(l["p50"].as_u64() <= l["p99"].as_u64() && l["p99"].as_u64() <= l["max"].as_u64());
    assert_eq!(r["streams"][0]["name"], "job0");
    assert_eq!(
        r["streams"][0]["iops"], r["iops"],
        "one stream carries the whole run"
    );
    let parts: f64 = r["breakdown_ns"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!(
        (parts - l["mean"].as_f64().unwrap()).abs() < 1e-6 * parts,
        "breakdown adds up to the mean"
    );
}

#[test]
fn a_job_file_gives_one_stream_per_section() {
    let dir = scratch("jobfile");
    let path = dir.join("two.fio");
    std::fs::write(&path, "[global]\nruntime=2ms\n; a comment\n[reader]\nrw=randread\nbs=4k\n[writer]\nrw=write\nbs=64k\niodepth=2\n").unwrap();
    let r = json(&["sim", path.to_str().unwrap(), "--json"]);
    let streams = r["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2);
    assert_eq!(streams[0]["name"], "reader");
    assert_eq!(streams[1]["name"], "writer");
    assert_eq!(streams[0]["write_requests"], 0);
    assert_eq!(streams[1]["read_requests"], 0);
    let total = streams[0]["requests"].as_u64().unwrap() + streams[1]["requests"].as_u64().unwrap();
    assert_eq!(r["requests"].as_u64().unwrap(), total);
}

/// A stream that finishes its `number_ios` early reports its rate over its own active time,
/// as fio does, not over the whole run: its IOPS times the run's length is well above its
/// request count (over the whole run they were equal).
#[test]
fn a_stream_that_ends_early_reports_its_rate_over_its_own_time() {
    let dir = scratch("active");
    let path = dir.join("early.fio");
    std::fs::write(
        &path,
        "[global]\nrw=randread\nbs=4k\nsize=64m\n[short]\nnumber_ios=2000\n[long]\nruntime=500ms\n",
    )
    .unwrap();
    for engine in [
        &["sim"][..],
        &["bench", "--engine", "emu", "--size", "64m"][..],
    ] {
        let mut args = engine.to_vec();
        args.extend([path.to_str().unwrap(), "--json"]);
        let r = json(&args);
        let run_s = r["elapsed_ns"].as_f64().unwrap() / 1e9;
        let short = &r["streams"].as_array().unwrap()[0];
        assert_eq!(short["requests"], 2000, "{engine:?}");
        let over_run = short["iops"].as_f64().unwrap() * run_s;
        assert!(
            over_run > 2.0 * 2000.0,
            "{engine:?}: {} IOPS x {run_s} s = {over_run}: the rate is over the whole run",
            short["iops"]
        );
    }
}

#[test]
fn a_printed_preset_runs_like_the_preset() {
    let toml = nvarray(&["presets", "show", "optane"]);
    assert!(toml.status.success());
    let dir = scratch("preset");
    let path = dir.join("optane.toml");
    std::fs::write(&path, &toml.stdout).unwrap();
    let args = [
        "--rw",
        "randread",
        "--iodepth",
        "8",
        "--runtime",
        "1ms",
        "--json",
    ];
    let mut from_file = vec!["sim", "--device", path.to_str().unwrap()];
    from_file.extend(args);
    let mut from_preset = vec!["sim", "--preset", "optane"];
    from_preset.extend(args);
    assert_eq!(
        simulated_part(json(&from_file)),
        simulated_part(json(&from_preset))
    );
    let list = String::from_utf8(nvarray(&["presets"]).stdout).unwrap();
    for name in [
        "moneta", "pcm", "stt-mram", "dram", "optane", "z-nand", "slc", "mlc", "tlc",
    ] {
        assert!(
            list.lines().any(|l| l.starts_with(name)),
            "{name} missing from:\n{list}"
        );
    }
}

#[test]
fn set_changes_the_model() {
    let base = json(&["sim", "--rw", "randread", "--number_ios", "100", "--json"]);
    let slow = json(&[
        "sim",
        "--rw",
        "randread",
        "--number_ios",
        "100",
        "--set",
        "memory.read_latency_ns=10us",
        "--json",
    ]);
    let (b, s) = (
        base["latency_ns"]["p50"].as_f64().unwrap(),
        slow["latency_ns"]["p50"].as_f64().unwrap(),
    );
    assert!(s > b + 10_000.0, "10 us slower media: {b} -> {s}");
    let host = json(&[
        "sim",
        "--number_ios",
        "100",
        "--set",
        "host.software_ns=5us",
        "--json",
    ]);
    assert_eq!(host["breakdown_ns"]["host"].as_f64().unwrap(), 5000.0);
}

/// The null preset in the simulator: every request takes exactly the fixed latency, all of it
/// the device's, and the device line says what the device is rather than listing unused parts.
#[test]
fn the_null_preset_completes_every_request_after_its_fixed_latency() {
    let r = json(&[
        "sim",
        "--preset",
        "null",
        "--set",
        "model.null_latency_ns=3us",
        "--rw",
        "randrw",
        "--iodepth",
        "8",
        "--number_ios",
        "500",
        "--json",
    ]);
    for p in ["min", "p50", "max"] {
        assert_eq!(r["latency_ns"][p].as_u64().unwrap(), 3000, "{p} of {r}");
    }
    assert_eq!(r["breakdown_ns"]["media"].as_f64().unwrap(), 3000.0);
    let out = nvarray(&["sim", "--preset", "null", "--number_ios", "100"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("null device: every command completes 0 ns after submission"),
        "{text}"
    );
}

#[test]
fn sweep_writes_json_and_a_plot() {
    let dir = scratch("sweep");
    let out = dir.join("lat");
    let o = nvarray(&[
        "sim",
        "sweep",
        "--param",
        "memory.latency_ns",
        "--values",
        "4,1us,64us",
        "--series",
        "memory.controllers",
        "--series-values",
        "1,8",
        "--rw",
        "randread",
        "--bs",
        "64k",
        "--numjobs",
        "8",
        "--runtime",
        "1ms",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let points = sweep_points(&out);
    assert_eq!(points.len(), 6);
    let bw = |value: &str, series: &str| {
        let p = points
            .iter()
            .find(|p| p["value"] == value && p["series"] == series)
            .unwrap();
        p["report"]["read_bandwidth_bytes_per_s"].as_f64().unwrap()
    };
    assert!(
        bw("64us", "1") < bw("4", "1"),
        "slower memory, less bandwidth"
    );
    let svg = std::fs::read_to_string(out.with_extension("svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("memory.controllers=8"));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("memory.controllers=1"), "{table}");
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_field() {
    let dir = scratch("bad");
    let bad_toml = dir.join("bad.toml");
    std::fs::write(&bad_toml, "name = \"x\"\n[link\n").unwrap();
    let bad_job = dir.join("bad.fio");
    std::fs::write(&bad_job, "[a]\nrw=randread\nfrobnicate=1\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["sim", "--preset", "nosuch"], "nosuch"),
        (vec!["sim", "--device", bad_toml.to_str().unwrap()], "TOML"),
        (
            vec!["sim", "--device", "/nonexistent/device.toml"],
            "/nonexistent/device.toml",
        ),
        (
            vec!["sim", "--set", "memory.controllers=0"],
            "memory.controllers",
        ),
        (
            vec!["sim", "--set", "controller.buffer_bytes=128g"],
            "controller.buffer_bytes",
        ),
        (
            vec!["sim", "--set", "controller.policy=lifo"],
            "controller.policy",
        ),
        (vec!["sim", "--set", "nokey"], "nokey"),
        (vec!["sim", "--bs", "16m"], "16"),
        (
            vec!["sim", "--rw", "randread", "--random_distribution", "zipf:0"],
            "zipf",
        ),
        (vec!["sim", "--iodepth", "0"], "iodepth"),
        (vec!["sim", bad_job.to_str().unwrap()], "frobnicate"),
        // Endless files are refused after 1 MiB, not read until memory runs out.
        (vec!["sim", "/dev/zero"], "larger than"),
        (vec!["sim", "--device", "/dev/zero"], "larger than"),
        (
            vec!["bench", "--size", "512g", "--runtime", "1"],
            "--backing file:",
        ),
        (vec!["presets", "show", "nosuch"], "nosuch"),
        // Issue 55: the region is the cause, not the tag buffers; a zoned namespace has no FTL
        // to precondition; a simulation the clock could not end is refused, not run for ever.
        (
            vec!["bench", "--size", "16k", "--bs", "64k"],
            "larger than the job's region of 16384 bytes",
        ),
        (
            vec![
                "sim",
                "--preset",
                "tlc",
                "--set",
                "zns.enabled=true",
                "--set",
                "zns.zone_bytes=16m",
                "--precondition",
                "fill",
            ],
            "no FTL to map, collect or precondition",
        ),
        (vec!["sim", "--preset", "null"], "would never end"),
        // Each blames what the user typed (issue 15): the size, not the buffers; a fraction,
        // not a limit; the real key name.
        (
            vec!["serve", "--size", "1k"],
            "memory.capacity_bytes = 1024",
        ),
        (vec!["serve", "--size", "1000000T"], "wear.enabled=false"),
        (
            vec!["sim", "--runtime", "0.5ns"],
            "whole number of nanoseconds",
        ),
        (vec!["sim", "--set", "memory.capacity_bytes=4KiB"], "IEC"),
        (
            vec!["sim", "--set", "memory.latency_ns=abc"],
            "memory.read_latency_ns",
        ),
        (
            vec![
                "sim",
                "sweep",
                "--param",
                "bs",
                "--values",
                "4k",
                "--out",
                "/proc/nvarray-sweep/x",
            ],
            "cannot make its directory /proc/nvarray-sweep",
        ),
        (
            vec!["repro", "--out", "/proc/x", "moneta"],
            "--out: cannot create /proc/x",
        ),
    ];
    for (args, needle) in cases {
        let o = nvarray(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "nvarray {args:?}: status {:?}, stderr {err}",
            o.status
        );
        assert!(
            err.contains(needle),
            "nvarray {args:?}: `{needle}` not in {err}"
        );
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "nvarray {args:?}: one line, got {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn bench_sim_reports_like_sim_plus_cost_and_faithfulness() {
    // Long enough to move the megabyte a figure per GB needs (`BYTES_FEW`).
    let args = [
        "--rw",
        "randrw",
        "--numjobs",
        "2",
        "--runtime",
        "10ms",
        "--json",
    ];
    let mut bench_args = vec!["bench", "--engine", "sim"];
    bench_args.extend(args);
    let bench = json(&bench_args);
    // bench's default device size.
    let mut sim_args = vec!["sim", "--set", "memory.capacity_bytes=1g"];
    sim_args.extend(args);
    let sim = json(&sim_args);
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&bench), keys(&sim), "one report shape");
    assert_eq!(bench["engine"], "sim");
    assert_eq!(bench["faithful"], true);
    assert!(
        bench.as_object().unwrap().contains_key("unfaithful_reason")
            && bench["unfaithful_reason"].is_null(),
        "unfaithful_reason is null, not absent: {bench}"
    );
    for key in ["p50", "p99", "max"] {
        assert_eq!(bench["lateness_ns"][key], 0, "lateness_ns.{key}");
    }
    let cpu = bench["cpu_seconds_per_gb"].as_f64().unwrap();
    assert!(cpu.is_finite() && cpu >= 0.0, "cpu_seconds_per_gb {cpu}");
    assert_eq!(
        simulated_part(bench),
        simulated_part(sim),
        "same simulation"
    );

    let table =
        String::from_utf8(nvarray(&["bench", "--engine", "sim", "--runtime", "10ms"]).stdout)
            .unwrap();
    for needle in ["engine   sim", "s per GB moved", "lateness", "p99.999"] {
        assert!(table.contains(needle), "`{needle}` not in:\n{table}");
    }
    assert!(!table.contains("NOT FAITHFUL"), "{table}");
    // Too little moved for a figure per GB: no figure, the time, and why (issue 55: a channel
    // daemon printed 89,241 s per GB after 12 KB).
    let few = json(&["sim", "--number_ios", "3", "--json"]);
    assert!(few["cpu_seconds_per_gb"].is_null(), "{few}");
    assert!(few["cpu_seconds"].as_f64().unwrap() >= 0.0);
    let table = String::from_utf8(nvarray(&["sim", "--number_ios", "3"]).stdout).unwrap();
    assert!(
        table.contains("too little moved for a figure per GB")
            && table.contains("too few requests to measure: 3 completed")
            && !table.contains("NOT FAITHFUL"),
        "{table}"
    );
}

#[test]
fn bench_size_sets_the_device_capacity() {
    // A job may start anywhere below the device's end: 1020 MiB is inside a 1 GiB device,
    // 1 GiB is not.
    let inside = nvarray(&[
        "bench",
        "--engine",
        "sim",
        "--size",
        "1G",
        "--offset",
        "1020m",
        "--runtime",
        "1ms",
    ]);
    assert!(
        inside.status.success(),
        "{}",
        String::from_utf8_lossy(&inside.stderr)
    );
    let outside = nvarray(&[
        "bench",
        "--engine",
        "sim",
        "--size",
        "1G",
        "--offset",
        "1G",
        "--runtime",
        "1ms",
    ]);
    assert_eq!(outside.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&outside.stderr).contains("offset"));

    let device = |args: &[&str]| {
        let o = nvarray(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let table = String::from_utf8(o.stdout).unwrap();
        table.lines().next().unwrap().to_string()
    };
    let quick = ["--engine", "sim", "--runtime", "10us"];
    let with = |extra: &[&'static str]| {
        let mut a = vec!["bench"];
        a.extend(quick);
        a.extend(extra);
        device(&a)
    };
    assert!(
        with(&[]).contains("1g of pcm"),
        "default size: {}",
        with(&[])
    );
    let set = ["--set", "memory.capacity_bytes=2g"];
    assert!(
        with(&set).contains("2g of pcm"),
        "--set wins over the default"
    );
    let both = ["--set", "memory.capacity_bytes=2g", "--size", "4g"];
    assert!(with(&both).contains("4g of pcm"), "--size wins over --set");
    let sim = device(&["sim", "--runtime", "10us"]);
    assert!(
        sim.contains("64g of pcm"),
        "sim keeps the preset's size: {sim}"
    );
}

#[test]
fn bench_bad_options_exit_2_naming_the_flag() {
    let cases: [(&[&str], &str); 10] = [
        (&["bench", "--durable"], "--durable"),
        (&["bench", "--cpus", "1-0"], "runs backwards"),
        (&["bench", "--cpus", "0,x"], "--cpus"),
        (
            &["bench", "--cpus", "1023", "--number_ios", "10"],
            "CPU 1023 is not one",
        ),
        (&["bench", "--engine", "sim", "--durable"], "--durable"),
        (&["bench", "--backing", "bogus"], "--backing"),
        (&["bench", "--backing", "file:"], "--backing"),
        (&["bench", "--device-threads", "9"], "--device-threads"),
        (&["bench", "--completion", "poll"], "--completion"),
        (&["bench", "--engine", "sim", "--size", "3x"], "--size"),
    ];
    for (args, needle) in cases {
        let o = nvarray(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "nvarray {args:?}: status {:?}, stderr {err}",
            o.status
        );
        assert!(
            err.contains(needle),
            "nvarray {args:?}: `{needle}` not in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Mistakes found by trying the commands as a new user: each exits 2 naming what to change.
/// (Before, a sweep's --out in a directory that takes no files exited 1 after the check had
/// let it through, and a backing file of the wrong size told `bench` users to pass --size,
/// which for bench is the job's region, not the device's.)
#[test]
fn output_and_backing_mistakes_exit_2_saying_what_to_change() {
    let dir = scratch("mistakes");
    let small = dir.join("small.img");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let backing = format!("file:{}", small.display());
    let cases: [(Vec<&str>, &str); 2] = [
        (
            vec!["bench", "--backing", &backing, "--runtime", "1ms"],
            "--set memory.capacity_bytes=1048576",
        ),
        (
            vec![
                "sim",
                "sweep",
                "--param",
                "bs",
                "--values",
                "4k",
                "--runtime",
                "1ms",
                "--out",
                "/proc/nvarray-sweep",
            ],
            "cannot write /proc/nvarray-sweep",
        ),
    ];
    for (args, needle) in cases {
        let o = nvarray(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "nvarray {args:?}: {err}");
        assert!(
            err.contains(needle),
            "nvarray {args:?}: `{needle}` not in {err}"
        );
    }
}

#[test]
fn bench_sweep_runs_the_chosen_engine_and_writes_json_and_a_plot() {
    let dir = scratch("bench-sweep");
    let out = dir.join("bs");
    let o = nvarray(&[
        "bench",
        "sweep",
        "--engine",
        "sim",
        "--param",
        "bs",
        "--values",
        "4k,64k",
        "--rw",
        "randread",
        "--runtime",
        "1ms",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let points = sweep_points(&out);
    assert_eq!(points.len(), 2);
    for p in &points {
        assert_eq!(p["report"]["engine"], "sim");
        assert_eq!(p["report"]["faithful"], true);
    }
    let bw = |i: usize| {
        points[i]["report"]["read_bandwidth_bytes_per_s"]
            .as_f64()
            .unwrap()
    };
    assert!(
        bw(1) > bw(0),
        "64k requests move more bytes than 4k at QD 1"
    );
    let svg = std::fs::read_to_string(out.with_extension("svg")).unwrap();
    assert!(svg.contains("<svg"));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("64k"), "{table}");
}

#[test]
fn compare_sim_sets_model_and_emulator_side_by_side() {
    let args = [
        "bench",
        "--compare-sim",
        "--size",
        "64m",
        "--rw",
        "randread",
        "--runtime",
        "50ms",
    ];
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let c = json(&json_args);
    assert_eq!(c["sim"]["engine"], "sim");
    assert_eq!(c["emu"]["engine"], "emu");
    let ratio = c["ratio"].as_object().unwrap();
    for key in [
        "latency_ns_p50",
        "latency_ns_p99",
        "latency_ns_mean",
        "iops",
        "read_bandwidth_bytes_per_s",
        "write_bandwidth_bytes_per_s",
    ] {
        assert!(ratio.contains_key(key), "ratio.{key} in {c}");
    }
    let iops = c["emu"]["iops"].as_f64().unwrap() / c["sim"]["iops"].as_f64().unwrap();
    assert!((ratio["iops"].as_f64().unwrap() - iops).abs() < 1e-9 * iops);
    assert!(
        ratio["write_bandwidth_bytes_per_s"].is_null(),
        "no writes in the model: no ratio"
    );
    // The difference in mean latency is split into parts that add up to it.
    let d = &c["difference_ns"];
    let mean = |r: &serde_json::Value| r["latency_ns"]["mean"].as_f64().unwrap();
    let total = d["total"].as_f64().unwrap();
    assert!(
        (total - (mean(&c["emu"]) - mean(&c["sim"]))).abs() < 1e-6,
        "{d}"
    );
    let parts: f64 = ["host_software", "lateness", "device"]
        .iter()
        .map(|k| d[k].as_f64().unwrap())
        .sum();
    assert!(
        (parts - total).abs() < 1e-6,
        "parts {parts} != total {total}: {d}"
    );
    assert!(d["lateness"].as_f64().unwrap() >= 0.0, "{d}");
    // The machine's pauses are a part of the lateness, never more than it.
    let machine = d["machine_lateness"].as_f64().unwrap();
    assert!(
        (0.0..=d["lateness"].as_f64().unwrap() + 1e-9).contains(&machine),
        "{d}"
    );

    let o = nvarray(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8(o.stdout).unwrap();
    for needle in [
        "model (sim)",
        "emulated (emu)",
        "emu/sim",
        "p99 latency",
        "IOPS",
        "host software and waiting",
        "lateness (completions posted after the model's time)",
        "the machine's pauses",
        "the emulator's own",
        "the modelled device",
    ] {
        assert!(table.contains(needle), "`{needle}` not in:\n{table}");
    }
}

/// The points of the sweep JSON written next to `out` (`out` with a `.json` extension).
fn sweep_points(out: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(out.with_extension("json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    report["points"].as_array().unwrap().clone()
}

#[test]
fn bench_emu_reports_its_setup_and_what_verify_checked() {
    let quick = [
        "bench",
        "--preset",
        "dram",
        "--rw",
        "randrw",
        "--number_ios",
        "2000",
        "--json",
    ];
    let run = |extra: &[&str]| {
        let mut a = quick.to_vec();
        a.extend(extra);
        json(&a)
    };
    // `auto` (the default) gives the device a thread only when a core is left for it.
    let cores = std::thread::available_parallelism().unwrap().get();
    let r = run(&["--numjobs", "2", "--size", "64k", "--verify", "crc32c"]);
    let setup = &r["emulator"];
    assert_eq!(setup["device_threads"], u64::from(cores > 2), "{setup}");
    assert_eq!(setup["stack"], "spin");
    assert_eq!(setup["completion"], "adaptive");
    // 4000 requests, half reads, on a device of 16 blocks of 4 KB: nearly every read finds
    // written data.
    let verified = setup["verified_blocks"].as_u64().unwrap();
    assert!(verified > 1000, "{verified} blocks verified");
    // Every block read is checked: those that held this run's data, and the rest, which
    // must read as zeroes (issue 55: only the first were counted, as if the rest were not).
    let checked = setup["checked_blocks"].as_u64().unwrap();
    let read_bytes = r["read_bytes"].as_u64().unwrap();
    assert!(checked >= verified && checked > 0, "{setup}");
    assert_eq!(
        read_bytes % checked,
        0,
        "{checked} blocks of {read_bytes} bytes read"
    );
    let r = run(&["--device-threads", "0", "--size", "16m"]);
    assert_eq!(r["emulator"]["device_threads"], 0);
    assert_eq!(
        r["emulator"]["verified_blocks"], 0,
        "verify is off by default"
    );

    let out = nvarray(&[
        "bench",
        "--preset",
        "dram",
        "--size",
        "16m",
        "--number_ios",
        "10",
        "--device-threads",
        "0",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(
            "engine   emu: device inline (each host thread runs its own queue pairs), stack spin"
        ),
        "{table}"
    );
}

/// `--device-threads auto` runs the device inline for one host thread that keeps one request
/// in flight and spins for it, and gives it a thread of its own otherwise (where a core is
/// free for it): deeper queues, a completion mode that sleeps, or requests the adaptive rule
/// sleeps for (a disk's milliseconds).
#[test]
fn auto_device_threads_run_the_device_inline_for_one_spun_for_request() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let threads = |extra: &[&str]| {
        let mut args = vec!["bench", "--size", "16m", "--number_ios", "20", "--json"];
        args.extend_from_slice(extra);
        json(&args)["emulator"]["device_threads"].as_u64().unwrap()
    };
    assert_eq!(
        threads(&[]),
        0,
        "moneta 4 KiB QD 1, adaptive: spins, inline"
    );
    assert_eq!(threads(&["--preset", "dram", "--completion", "spin"]), 0);
    let free_core = u64::from(cores > 1);
    assert_eq!(threads(&["--iodepth", "2"]), free_core);
    assert_eq!(threads(&["--completion", "sleep"]), free_core);
    assert_eq!(threads(&["--stack", "baseline"]), free_core);
    assert_eq!(
        threads(&["--preset", "hdd", "--rw", "randread"]),
        free_core,
        "a disk's reads take milliseconds: adaptive sleeps for them"
    );
    assert_eq!(threads(&["--device-threads", "1"]), 1, "a count is kept");
}

/// `--cpus` puts the device thread on the list's first CPU and the host thread on the next,
/// and the report says so; the machine's jitter, sampled while the device thread spun idle,
/// sits beside the lateness in the JSON and the table.
#[test]
fn bench_pins_threads_and_reports_the_machines_jitter() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let cpus = if cores > 1 { "1,0" } else { "0" };
    let args = [
        "bench",
        "--preset",
        "moneta",
        "--size",
        "16m",
        "--number_ios",
        "3000",
        "--device-threads",
        "1",
        "--completion",
        "spin",
        "--cpus",
        cpus,
    ];
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let r = json(&with_json);
    let setup = &r["emulator"];
    let (device_cpu, host_cpu) = if cores > 1 { (1, 0) } else { (0, 0) };
    assert_eq!(
        setup["device_cpus"],
        serde_json::json!([device_cpu]),
        "{setup}"
    );
    assert_eq!(setup["host_cpus"], serde_json::json!([host_cpu]), "{setup}");
    let j = &r["machine_jitter_ns"];
    let get = |k: &str| j[k].as_u64().unwrap_or_else(|| panic!("{k} in {j}"));
    assert!(get("samples") > 0, "{j}");
    assert!(get("p50") <= get("p99") && get("p99") <= get("p9999") && get("p9999") <= get("max"));
    let table = String::from_utf8_lossy(&nvarray(&args).stdout).to_string();
    assert!(
        table.contains(&format!(
            "pinned: device on CPU {device_cpu}, host on CPU {host_cpu}"
        )),
        "{table}"
    );
    assert!(table.contains("machine jitter, µs"), "{table}");
    // The simulator has no machine to measure.
    let sim = json(&["bench", "--engine", "sim", "--number_ios", "100", "--json"]);
    assert!(sim.get("machine_jitter_ns").is_none(), "{sim}");
}

/// A bad value anywhere in a sweep is reported before any point runs: the first point would
/// take 30 s here.
#[test]
fn a_sweep_with_a_bad_value_fails_before_running_any_point() {
    let dir = scratch("bad-sweep");
    let out = dir.join("sweep");
    let started = std::time::Instant::now();
    let o = nvarray(&[
        "bench",
        "sweep",
        "--param",
        "iodepth",
        "--values",
        "1,0",
        "--runtime",
        "30",
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("iodepth=0"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "the sweep ran a point before refusing"
    );
}

/// `pm-bench tx` bounds what it would start: an endless or absurd run is refused with exit 2
/// before any thread or file exists (`--seconds inf` panicked; `--threads 100000` hung while
/// memory ran out).
#[test]
fn pm_bench_refuses_unbounded_runs() {
    for (args, needle) in [
        (&["--seconds", "inf"][..], "more than a day"),
        (&["--seconds", "NaN"][..], "must be > 0"),
        (&["--threads", "100000"][..], "more than 1024"),
        (
            &["--tx-bytes", "1000000", "--objects", "1000000"][..],
            "GiB pool",
        ),
        (
            &["--data-dir", "/nonexistent"][..],
            "--data-dir /nonexistent",
        ),
    ] {
        let mut all = vec!["pm-bench", "tx"];
        all.extend_from_slice(args);
        let out = nvarray(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A tmpfs of `size` mounted on a scratch directory (the tests run as root), for a
/// directory short of room; unmounted when dropped, a failing test included.
struct SmallTmpfs(Scratch);

impl SmallTmpfs {
    fn mount(name: &str, size: &str) -> SmallTmpfs {
        let dir = scratch(name);
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&*dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount a {size} tmpfs (the tests run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallTmpfs(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&*self.0).status();
    }
}

/// A device's image on a file system without room for it (issue 58: the storage under nvarray
/// fills): `bench`, `serve` and `mount` each refuse it at once with the sizes (exit 2), since
/// the whole image is allocated when the device opens, and leave no image behind; a write
/// through the mapping can then never meet a full disk (it would be a SIGBUS).
#[test]
fn a_device_image_on_a_full_file_system_is_refused_at_open_and_leaves_nothing() {
    let small = SmallTmpfs::mount("device-room", "8m");
    let image = small.path().join("image");
    let backing = format!("file:{}", image.display());
    let mnt = small.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for args in [
        vec![
            "bench",
            "--backing",
            &backing,
            "--size",
            "64m",
            "--runtime",
            "1s",
        ],
        vec!["serve", "--backing", &backing, "--size", "64m"],
        vec![
            "mount",
            mnt.to_str().unwrap(),
            "--backing",
            &backing,
            "--size",
            "64m",
        ],
    ] {
        let out = nvarray(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("cannot allocate the 67108864-byte device image"),
            "{args:?}: {err}"
        );
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
        assert!(!image.exists(), "{args:?} left its image behind");
    }
}

/// Issue 44: `pm-bench pages --array-bytes 64m` with a 16 MiB `--data-dir` died of SIGBUS
/// (exit 135, no message) at its first store into the sparse pool file. Each file pm-bench
/// maps now has its blocks reserved first: a directory short of room is refused (exit 2)
/// with the sizes, before the run, and leaves nothing behind.
#[test]
fn pm_bench_refuses_directories_without_room() {
    let small = SmallTmpfs::mount("pm-room", "16m");
    let dir = small.path().to_str().unwrap();
    let small_nvm = ["--log-size", "1m", "--cache-size", "1m"];
    for (args, needle) in [
        (
            vec!["pages", "--array-bytes", "64m", "--data-dir", dir],
            "needs 67108864 bytes",
        ),
        // The unlogged baseline's file, made before the library's pool.
        (
            vec![
                "ycsb",
                "--records",
                "65536",
                "--ops",
                "10",
                "--data-dir",
                dir,
            ],
            "baseline",
        ),
        (
            vec![
                "tx",
                "--tx-bytes",
                "16m",
                "--objects",
                "1",
                "--nvm-dir",
                dir,
            ],
            "lower the log or cache size",
        ),
    ] {
        let mut all = vec!["pm-bench"];
        all.extend_from_slice(&args);
        if !args.contains(&"--nvm-dir") {
            all.extend_from_slice(&small_nvm);
        }
        let out = nvarray(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.contains("free"), "{args:?}: {err}");
        let left: Vec<_> = std::fs::read_dir(small.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
}

/// Issue 44's smaller pm-bench defects: `--tx-bytes 1k` was refused while `--log-size 1k`
/// worked (one size parser now); `--seconds 0.0001` printed 0 transactions (each thread now
/// commits at least one); `--values` without `--sweep` was ignored; `--plot x.txt` failed
/// only after the whole sweep had run.
#[test]
fn pm_bench_reads_sizes_alike_and_checks_its_flags_before_running() {
    let nvm = scratch("pm-flags-nvm");
    let data = scratch("pm-flags-data");
    let dirs = [
        "--nvm-dir",
        nvm.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--log-size",
        "1m",
        "--cache-size",
        "1m",
    ];
    let run = |args: &[&str]| {
        let mut all = vec!["pm-bench"];
        all.extend_from_slice(args);
        all.extend_from_slice(&dirs);
        nvarray(&all)
    };
    let out = run(&["tx", "--tx-bytes", "1k", "--seconds", "0.01"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["tx_bytes"], 1024, "{r}");

    let out = run(&["tx", "--threads", "2", "--seconds", "0.0001"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["transactions"].as_u64().unwrap() >= 2, "{r}");
    assert!(r["tx_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["p50_ns"].as_u64().unwrap() > 0, "{r}");

    let ycsb = ["ycsb", "--records", "1000", "--ops", "1000"];
    for (extra, needle) in [
        (&["--values", "1m,2m"][..], "--values is for --sweep"),
        (
            &[
                "--sweep", "log-size", "--values", "1m,2m", "--plot", "x.txt",
            ][..],
            ".svg or .png",
        ),
    ] {
        let mut args = ycsb.to_vec();
        args.extend_from_slice(extra);
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(out.stdout.is_empty(), "{extra:?} ran before refusing");
    }
}

/// Issue 44: NVM-tier state files outlived their pools and nothing said how to clean them
/// up. `nvarray pm list` says what each is for; `nvarray pm clean` removes the ones no pool
/// needs, and one that may hold commits only with `--discard-commits`.
#[test]
fn pm_list_and_clean_remove_only_what_no_pool_needs() {
    use nvarray_pm::{Pool, PoolOptions};
    let nvm = scratch("pm-clean-nvm");
    let data = scratch("pm-clean-data");
    let options = PoolOptions {
        nvm_dir: nvm.to_path_buf(),
        log_size_bytes: 1 << 20,
        cache_size_bytes: 1 << 20,
        background: false,
        ..Default::default()
    };
    // A pool whose process "died" with a commit in its log (the state as a crash leaves it),
    // and whose file was then removed.
    let crashed = |name: &str| {
        let pool = Pool::open(data.join(name), 1 << 20, &options).unwrap();
        let mut tx = pool.begin().unwrap();
        tx.write(0, b"commit").unwrap();
        tx.commit().unwrap();
        let image = std::fs::read(pool.nvm_path()).unwrap();
        let state = pool.nvm_path().to_path_buf();
        pool.close().unwrap();
        std::fs::write(&state, image).unwrap();
        state
    };
    let orphan = crashed("gone.pool");
    std::fs::remove_file(data.join("gone.pool")).unwrap();
    let recovering = crashed("kept.pool");
    let open = Pool::open(data.join("open.pool"), 1 << 20, &options).unwrap();
    let nvm_dir = nvm.to_str().unwrap();

    let out = nvarray(&["pm", "list", "--nvm-dir", nvm_dir]);
    assert!(out.status.success());
    let listed = String::from_utf8_lossy(&out.stdout);
    let line = |state: &Path| {
        listed
            .lines()
            .find(|l| l.starts_with(state.to_str().unwrap()))
            .unwrap_or_else(|| panic!("{} not in {listed}", state.display()))
            .to_string()
    };
    assert!(line(&orphan).contains("no longer exists"), "{listed}");
    assert!(line(&orphan).contains("may hold commits"), "{listed}");
    assert!(line(&recovering).contains("recovers it"), "{listed}");
    assert!(
        line(open.nvm_path()).contains("in use by process"),
        "{listed}"
    );

    let out = nvarray(&["pm", "clean", "--nvm-dir", nvm_dir]);
    assert!(out.status.success());
    assert!(orphan.exists() && recovering.exists() && open.nvm_path().exists());
    let out = nvarray(&[
        "pm",
        "clean",
        "--nvm-dir",
        nvm_dir,
        "--discard-commits",
        "--dry-run",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("would remove"));
    assert!(orphan.exists());
    let out = nvarray(&["pm", "clean", "--nvm-dir", nvm_dir, "--discard-commits"]);
    assert!(out.status.success());
    let cleaned = String::from_utf8_lossy(&out.stdout);
    assert!(
        cleaned.contains(&format!("removed {}", orphan.display())),
        "{cleaned}"
    );
    assert!(!orphan.exists());
    assert!(recovering.exists() && open.nvm_path().exists(), "{cleaned}");
    // Named, a state in use is refused with the reason.
    let out = nvarray(&[
        "pm",
        "clean",
        "--discard-commits",
        open.nvm_path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by process"));
    open.close().unwrap();
}

/// A `pm-bench` run killed with SIGKILL leaves no pool file behind in either directory (it
/// used to leave `/dev/shm/nvarray-pm-*.nvm` and `/tmp/nvarray-pm-tx-*.pool`).
#[test]
fn a_killed_pm_bench_leaves_no_files() {
    let nvm = scratch("pm-kill-nvm");
    let data = scratch("pm-kill-data");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(["pm-bench", "tx", "--seconds", "60", "--log-size", "1m"])
        .args(["--cache-size", "1m", "--nvm-dir"])
        .arg(&nvm)
        .arg("--data-dir")
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the pool is open: both of its files mapped and no longer named in either
    // directory (an NVM-tier file is built unnamed and shows as deleted before the pool is
    // open, so its mapping alone is no sign: the data file was still there in 1 of ~30 runs),
    // then kill.
    let maps = format!("/proc/{}/maps", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let empty = |dir: &std::path::Path| std::fs::read_dir(dir).unwrap().next().is_none();
    let pool_mapped = || {
        let maps = std::fs::read_to_string(&maps).unwrap_or_default();
        let mapped_deleted = |dir: &std::path::Path| {
            maps.lines()
                .any(|l| l.contains(dir.to_str().unwrap()) && l.ends_with("(deleted)"))
        };
        mapped_deleted(&nvm) && mapped_deleted(&data) && empty(&nvm) && empty(&data)
    };
    while !pool_mapped() {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool never opened"
        );
        std::thread::yield_now();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    for dir in [&nvm, &data] {
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{}: {left:?}", dir.display());
    }
}

/// A device that completes requests in no time has no rate to show: `unbounded` in the
/// table, `null` in the JSON (issue 55: a 1 ns floor printed 10^12 IOPS and more), never a
/// number.
#[test]
fn rates_over_no_time_are_unbounded() {
    let r = json(&["sim", "--preset", "null", "--number_ios", "1000", "--json"]);
    assert_eq!(r["requests"], 1000);
    assert!(
        r["iops"].is_null() && r["read_bandwidth_bytes_per_s"].is_null(),
        "{r}"
    );
    let out = nvarray(&["sim", "--preset", "null", "--number_ios", "1000"]);
    let table = String::from_utf8_lossy(&out.stdout);
    let all = table.lines().find(|l| l.starts_with("all")).unwrap();
    assert_eq!(all.split_whitespace().nth(1), Some("unbounded"), "{table}");
}

/// A request larger than its region blames the region, not `--buffer-size`, which changes
/// nothing there (issue 55).
#[test]
fn a_request_larger_than_its_region_blames_the_region() {
    let out = nvarray(&["bench", "--size", "16k", "--bs", "64k"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("region of 16384 bytes") && !err.contains("--buffer-size"),
        "{err}"
    );
}

/// The README's `--out runs/v1.1` with no `runs/` yet: the directory is made, as users expect
/// of an output path (issue 55: it failed, "directory runs does not exist").
#[test]
fn a_sweeps_output_directory_is_made() {
    let dir = scratch("out-dir");
    let out = dir.join("runs/v1.1");
    let o = nvarray(&[
        "sim",
        "sweep",
        "--param",
        "bs",
        "--values",
        "4k,8k",
        "--rw",
        "randread",
        "--runtime",
        "1ms",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for ext in ["jsonl", "json", "svg"] {
        let file = dir.join(format!("runs/v1.1.{ext}"));
        assert!(file.exists(), "{} missing", file.display());
    }
}

/// `--backing none` (issue 60): a 16 TiB drive runs on this machine, the report names the
/// backing, and what needs the data (verify, durability) is refused with why; and a sparse
/// file: 2 TiB on a disk with less free, blocks taken as they are written.
#[test]
fn a_device_larger_than_the_machine_runs_with_no_data_kept() {
    let bench = |size: &str, backing: &str| {
        json(&[
            "bench",
            "--preset",
            "optane",
            "--size",
            size,
            "--backing",
            backing,
            "--rw",
            "randrw",
            "--runtime",
            "200ms",
            "--json",
        ])
    };
    let report = bench("16t", "none");
    assert_eq!(
        report["emulator"]["backing_pages"],
        "nothing (no data kept: writes discarded, reads zeroes)",
        "{report}"
    );
    assert!(report["requests"].as_u64().unwrap() > 0, "{report}");
    let dir = scratch("sparse");
    let image = dir.join("big.img");
    let report = bench("2t", &format!("file:{},sparse", image.display()));
    assert_eq!(
        report["emulator"]["backing_pages"],
        "page cache of a sparse file (blocks taken on first write)",
        "{report}"
    );
    use std::os::unix::fs::MetadataExt;
    let taken = std::fs::metadata(&image).unwrap().blocks() * 512;
    assert!(
        taken < 1 << 30,
        "{taken} bytes of disk for a 2 TiB sparse image"
    );
    for (extra, why) in [
        (&["--verify", "crc32c"][..], "--backing none keeps no data"),
        (&["--durable"][..], "nothing is kept to make durable"),
    ] {
        let mut args = vec![
            "bench",
            "--size",
            "1g",
            "--backing",
            "none",
            "--rw",
            "randrw",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--runtime", "100ms"]);
        let out = nvarray(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}
