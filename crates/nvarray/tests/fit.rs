//! `nvarray fit`: the identifiability check (fio JSON+ from the simulator on a device the fit
//! is not told, with noise, fitted from the base preset), bad input (another tool's output,
//! failed jobs, a grid too small, a file with data), and `fit collect` with real fio.

use std::path::Path;
use std::process::Command;

use nvarray_fit::grid::{self, Job, Pattern};
use nvarray_fit::manifest::Manifest;
use serde_json::Value;

fn nvarray(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("nvarray runs")
}

/// The hidden device: the optane preset with the fitted keys moved (the fit starts from the
/// preset itself and is not told these).
const HIDDEN: [(&str, &str, f64); 5] = [
    ("memory", "read_latency_ns", 900.0),
    ("memory", "write_latency_ns", 2500.0),
    ("link", "propagation_ns", 800.0),
    ("host", "software_ns", 2000.0),
    ("memory", "banks_per_controller", 8.0),
];

fn hidden_toml() -> String {
    let mut t: toml::Table = nvarray_model::presets::preset("optane")
        .unwrap()
        .toml
        .parse()
        .unwrap();
    for (table, key, v) in HIDDEN {
        let tab = t
            .entry(table)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap();
        tab.insert(key.into(), toml::Value::Integer(v as i64));
    }
    // The firmware's stage times doubled (1200 → 2400 ns a command).
    let c = t["controller"].as_table_mut().unwrap();
    for (k, v) in [
        ("firmware_fetch_ns", 600),
        ("firmware_prp_ns", 400),
        ("firmware_translation_ns", 800),
        ("firmware_completion_ns", 600),
    ] {
        c.insert(k.into(), toml::Value::Integer(v));
    }
    toml::to_string(&t).unwrap()
}

/// Writes the collection `nvarray fit simulate` makes of `device_toml`, with `noise`, kept to
/// the jobs `keep` accepts.
fn simulated_collection(dir: &Path, device_toml: &str, keep: impl Fn(&Job) -> bool, noise: f64) {
    let device = dir.with_extension("device.toml");
    std::fs::write(&device, device_toml).unwrap();
    let out = nvarray(&[
        "fit",
        "simulate",
        "--device",
        device.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--noise",
        &noise.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = Manifest::read(dir).unwrap();
    m.jobs.retain(|j| keep(&j.job));
    m.write(dir).unwrap();
}

fn fit_json(dir: &Path, base: &str, extra: &[&str]) -> Value {
    let out_toml = dir.join("fitted.toml");
    let mut args = vec![
        "fit",
        dir.to_str().unwrap(),
        "--base",
        base,
        "--out",
        out_toml.to_str().unwrap(),
        "--output-format",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = nvarray(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `nvarray fit DIR --base optane --out DIR/f.toml --held-out 0 --evaluations N`, its text.
fn fit_text(dir: &Path, evaluations: &str) -> std::process::Output {
    nvarray(&[
        "fit",
        dir.to_str().unwrap(),
        "--base",
        "optane",
        "--out",
        dir.join("f.toml").to_str().unwrap(),
        "--held-out",
        "0",
        "--evaluations",
        evaluations,
    ])
}

fn param<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["params"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} fitted"))
}

/// Issue 61's identifiability check: the whole grid from a device with seven keys moved
/// (media, firmware, link, host, banks), ±3 % noise, fitted from the optane preset. About
/// 4 minutes.
#[test]
fn the_fit_recovers_a_hidden_device_where_the_grid_identifies_it_and_names_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    simulated_collection(dir.path(), &hidden_toml(), |_| true, 0.03);
    let report = fit_json(dir.path(), "optane", &[]);
    let mut checked = Vec::new();
    let firmware = [("controller", "firmware_*_ns", 2400.0)];
    for (table, key, hidden) in HIDDEN.iter().chain(&firmware) {
        let name = format!("{table}.{key}");
        let p = param(&report, &name);
        if p["range"]["identified"] == true {
            let v = p["value"].as_f64().unwrap();
            assert!(
                (v / hidden - 1.0).abs() <= 0.10,
                "{name}: fitted {v}, hidden {hidden}"
            );
            checked.push(name);
        }
    }
    // The parameters the grid pins: the media, the firmware and the fixed delays.
    for must in [
        "memory.read_latency_ns",
        "memory.write_latency_ns",
        "host.software_ns",
    ] {
        assert!(
            checked.iter().any(|c| c == must),
            "{must} identified: {checked:?}"
        );
    }
    let held = &report["held_out"];
    assert!(held["jobs"].as_u64().unwrap() >= 20);
    assert!(held["iops"].as_f64().unwrap() < 10.0, "{held}");
    assert!(held["mean_latency"].as_f64().unwrap() < 10.0, "{held}");
    // The preset written runs, and carries its source.
    let preset = std::fs::read_to_string(dir.path().join("fitted.toml")).unwrap();
    assert!(preset.contains("fitted to"), "{preset}");
    assert!(nvarray_model::DeviceConfig::from_toml(&preset).is_ok());
    assert!(dir.path().join("fitted.svg").exists());
}

/// The criterion on a smaller grid: a device whose host software time and media read
/// latency differ from the base's, measured by the grid's first 40 jobs (the most telling, by
/// `grid::by_priority`) with ±1 % noise: every parameter the fit calls identified is within
/// 10 % of the hidden device's, the host time among them, and the held-out error is under
/// 10 %.
#[test]
fn what_the_fit_calls_identified_is_within_ten_percent_of_a_hidden_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut t: toml::Table = nvarray_model::presets::preset("optane")
        .unwrap()
        .toml
        .parse()
        .unwrap();
    t["memory"]
        .as_table_mut()
        .unwrap()
        .insert("read_latency_ns".into(), toml::Value::Integer(900));
    let mut host = toml::Table::new();
    host.insert("software_ns".into(), toml::Value::Integer(2000));
    t.insert("host".into(), toml::Value::Table(host));
    let first: Vec<Job> = grid::full_grid().into_iter().take(40).collect();
    simulated_collection(
        dir.path(),
        &toml::to_string(&t).unwrap(),
        |j| first.contains(j),
        0.01,
    );
    let report = fit_json(dir.path(), "optane", &["--evaluations", "400"]);
    // The hidden device's value of every fitted parameter (optane's, but for the two moved).
    let hidden = |name: &str| match name {
        "host.software_ns" => 2000.0,
        "memory.read_latency_ns" => 900.0,
        "link.propagation_ns" => 250.0,
        "link.lanes" => 4.0,
        "ring.bandwidth_bytes_per_s" => 16e9,
        "controller.firmware_*_ns" => 1200.0,
        "memory.write_latency_ns" => 1000.0,
        "memory.banks_per_controller" => 16.0,
        other => panic!("a parameter this test does not know: {other}"),
    };
    let mut identified = Vec::new();
    for p in report["params"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if p["range"]["identified"] == true {
            let v = p["value"].as_f64().unwrap();
            assert!(
                (v / hidden(name) - 1.0).abs() <= 0.10,
                "{name}: fitted {v}, hidden {}",
                hidden(name)
            );
            identified.push(name.to_string());
        }
    }
    assert!(
        identified.iter().any(|n| n == "host.software_ns"),
        "{identified:?}"
    );
    assert!(
        identified.len() < report["params"].as_array().unwrap().len(),
        "some are named unidentified"
    );
    let held = &report["held_out"];
    assert!(held["jobs"].as_u64().unwrap() > 0);
    assert!(held["iops"].as_f64().unwrap() < 10.0, "{held}");
    assert!(report["loss"].as_f64().unwrap() < report["loss_base"].as_f64().unwrap() / 10.0);
}

#[test]
fn a_grid_too_small_says_what_it_cannot_identify() {
    let dir = tempfile::tempdir().unwrap();
    // Only small random reads: nothing moves the write latency or the large transfers.
    let small_reads = |j: &Job| j.pattern == Pattern::RandRead && j.bs <= 4096;
    simulated_collection(dir.path(), &hidden_toml(), small_reads, 0.0);
    let report = fit_json(
        dir.path(),
        "optane",
        &["--held-out", "0", "--evaluations", "300"],
    );
    let write = param(&report, "memory.write_latency_ns");
    assert_eq!(write["range"]["identified"], false, "{write}");
    let out = fit_text(dir.path(), "50");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("not identified by these jobs") && text.contains("memory.write_latency_ns"),
        "{text}"
    );
}

#[test]
fn another_tools_output_and_failed_jobs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let first: Vec<Job> = grid::full_grid().into_iter().take(12).collect();
    simulated_collection(dir.path(), &hidden_toml(), |j| first.contains(j), 0.0);
    // One job failed in fio; it is skipped and named.
    let mut m = Manifest::read(dir.path()).unwrap();
    m.jobs[3].error = Some("fio exited with 1: Input/output error".into());
    m.write(dir.path()).unwrap();
    let out = fit_text(dir.path(), "20");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("skipped {}", m.jobs[3].job.name())),
        "{text}"
    );

    // A job whose output says fio failed it.
    let file = dir.path().join(&m.jobs[4].file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    v["jobs"][0]["error"] = Value::from(5);
    std::fs::write(&file, v.to_string()).unwrap();
    let out = fit_text(dir.path(), "20");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("error 5"), "{text}");

    // Output of another tool version: refused, naming it.
    v["fio version"] = Value::from("fio-2.21");
    std::fs::write(&file, v.to_string()).unwrap();
    let out = nvarray(&[
        "fit",
        dir.path().to_str().unwrap(),
        "--base",
        "optane",
        "--out",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("fio-2.21"), "{err}");

    // Not a collection at all.
    let out = nvarray(&["fit", "/", "--base", "optane", "--out", "/tmp/never.toml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("manifest.json"),
        "{err}"
    );
}

/// `nvarray fit collect DISK --out OUT --size 64m --runtime 200ms` with `extra`: real fio on
/// a file, a few of the grid's jobs.
fn collect_on_file(disk: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "fit",
        "collect",
        disk.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--size",
        "64m",
        "--runtime",
        "200ms",
    ];
    args.extend_from_slice(extra);
    nvarray(&args)
}

#[test]
fn collect_runs_real_fio_on_a_file_and_refuses_one_with_data() {
    let dir = tempfile::tempdir().unwrap();
    let (disk, out_dir) = (dir.path().join("disk.img"), dir.path().join("c"));
    let out = collect_on_file(&disk, &out_dir, &["--budget", "4s", "--ramp", "100ms"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m = Manifest::read(&out_dir).unwrap();
    assert!(m.fio_version.starts_with("fio-3."), "{}", m.fio_version);
    assert!(!m.jobs.is_empty() && !m.left_out.is_empty());
    assert_eq!(m.jobs[0].job.name(), "randread-4k-qd1");
    for j in &m.jobs {
        assert_eq!(j.error, None);
        let text = std::fs::read_to_string(out_dir.join(&j.file)).unwrap();
        let f = nvarray_fit::measured::figures(&text, &j.file).unwrap();
        assert!(
            f.iops > 0.0 && f.mean_ns > 0.0 && f.p99_ns >= f.mean_ns * 0.5,
            "{f:?}"
        );
    }
    // The file now holds the preconditioning's data: a second collection is refused and
    // leaves it as it was.
    let before = std::fs::read(&disk).unwrap();
    let out = nvarray(&[
        "fit",
        "collect",
        disk.to_str().unwrap(),
        "--out",
        dir.path().join("d").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--destroy-data"),
        "{err}"
    );
    assert!(std::fs::read(&disk).unwrap() == before, "nothing written");
    assert!(!dir.path().join("d").exists());
}

/// `--repeat 3` with real fio: every job run three times, its figures the medians of its
/// passes, the passes kept in the manifest, and the device's spread printed.
#[test]
fn repeated_passes_give_each_job_the_median_of_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (disk, out_dir) = (dir.path().join("disk.img"), dir.path().join("c"));
    let extra = ["--budget", "3s", "--ramp", "0", "--repeat", "3"];
    let out = collect_on_file(&disk, &out_dir, &extra);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("the device's own spread"), "{stdout}");
    let m = Manifest::read(&out_dir).unwrap();
    assert!(!m.jobs.is_empty());
    for j in &m.jobs {
        assert_eq!(j.passes.len(), 3, "{}", j.job.name());
        let mut iops: Vec<f64> = j
            .passes
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(out_dir.join(&p.file)).unwrap();
                let f = nvarray_fit::measured::figures(&text, &p.file).unwrap();
                assert_eq!(p.figures.unwrap().iops, f.iops, "the pass's file");
                f.iops
            })
            .collect();
        iops.sort_by(f64::total_cmp);
        assert_eq!(j.figures.unwrap().iops, iops[1], "the median of three");
    }
    assert!(m.repeatability().unwrap().jobs == m.jobs.len());
    // No passes is no collection.
    let bad = nvarray(&["fit", "collect", "x", "--out", "y", "--repeat", "0"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// The steady-state fit end to end: `fit simulate --steady-state` of a flash drive (tlc with
/// 64 KiB erase blocks and 20 % over-provisioning) fitted from the same drive without its
/// over-provisioning: the preset gets it back from the steady random-write IOPS, and
/// reproduces them.
#[test]
fn the_steady_state_writes_give_the_over_provisioning_back() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let out = nvarray(&[
        "fit",
        "simulate",
        "--preset",
        "tlc",
        "--set",
        "memory.erase_block_bytes=65536",
        "--set",
        "ftl.over_provisioning=0.2",
        "--steady-state",
        "--size",
        "1g",
        "--out",
        runs.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base: toml::Table = nvarray_model::presets::preset("tlc")
        .unwrap()
        .toml
        .parse()
        .unwrap();
    assert!(
        base.get("ftl")
            .and_then(|f| f.get("over_provisioning"))
            .is_none(),
        "the base does not know the drive's share"
    );
    let mut base = base;
    base["memory"]
        .as_table_mut()
        .unwrap()
        .insert("erase_block_bytes".into(), toml::Value::Integer(65536));
    let base_file = dir.path().join("tlc-64k.toml");
    std::fs::write(&base_file, toml::to_string(&base).unwrap()).unwrap();
    let report = fit_json(&runs, base_file.to_str().unwrap(), &["--evaluations", "60"]);
    let steady = &report["steady"];
    let op = steady["over_provisioning"].as_f64().unwrap();
    assert!((op / 0.2 - 1.0).abs() < 0.15, "{steady}");
    let (measured, fitted) = (
        steady["measured_iops"].as_f64().unwrap(),
        steady["fitted_iops"].as_f64().unwrap(),
    );
    assert!((fitted / measured - 1.0).abs() < 0.03, "{steady}");
    let preset = std::fs::read_to_string(runs.join("fitted.toml")).unwrap();
    assert!(preset.contains("steady-state writes"), "{preset}");
}
