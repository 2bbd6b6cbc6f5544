//! End-to-end tests of the real `nvarray` binary: output shape, job files, sweeps, presets,
//! and bad input (exit status 2, one line naming the field, never a panic).

use std::path::PathBuf;
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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nvarray-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    assert_eq!(json(&from_file), json(&from_preset));
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
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.with_extension("json")).unwrap())
            .unwrap();
    let points = report["points"].as_array().unwrap();
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
        (vec!["presets", "show", "nosuch"], "nosuch"),
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
