//! How long `nvarray fit` takes on about 200 training jobs, with the simulator's runs on one
//! thread and on two: a collection `nvarray fit simulate` made of a modelled drive (the
//! optane preset with its media and firmware moved, ±3 % noise), fitted from the
//! optane-p4800x preset, alternating `--jobs 1` and `--jobs 2` so that drift of this shared
//! machine falls on both alike.
//!
//! Target (issue 61): a fit of 200 training jobs takes at most 5 minutes on 2 cores. Run with
//! `cargo bench -p nvarray --bench fit_speed`; it prints every run (seconds, evaluations,
//! seconds per evaluation), the medians and the ratio, for docs/perf.md. Past the cores
//! measured here a fit on J threads takes about T1 × (s + (1 − s)/J), s the serial share
//! solved from the two runs (a projection, not a measurement).

use std::process::Command;
use std::time::Instant;

fn smoke() -> bool {
    std::env::var_os("NVARRAY_BENCH_SMOKE").is_some()
}

fn nvarray(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("nvarray runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let runs = dir.path().join("runs");
    nvarray(&[
        "fit",
        "simulate",
        "--preset",
        "optane",
        "--set",
        "memory.read_latency_ns=900",
        "--set",
        "memory.write_latency_ns=2500",
        "--set",
        "controller.firmware_cores=2",
        "--set",
        "host.software_ns=2000",
        "--noise",
        "0.03",
        "--out",
        runs.to_str().unwrap(),
    ]);
    let evaluations = if smoke() { "5" } else { "1500" };
    // A fit takes minutes: one round by default, more with NVARRAY_FIT_BENCH_ROUNDS.
    let rounds: usize = std::env::var("NVARRAY_FIT_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (slot, jobs) in ["1", "2"].iter().enumerate() {
            let out_toml = dir.path().join("fitted.toml");
            let started = Instant::now();
            let out = nvarray(&[
                "fit",
                runs.to_str().unwrap(),
                "--base",
                "optane-p4800x",
                "--held-out",
                "0.17",
                "--jobs",
                jobs,
                "--evaluations",
                evaluations,
                "--out",
                out_toml.to_str().unwrap(),
                "--output-format",
                "json",
            ]);
            let seconds = started.elapsed().as_secs_f64();
            let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            let n = report["evaluations"].as_f64().unwrap_or(0.0);
            println!(
                "round {round} --jobs {jobs}: {seconds:.1} s, {n} evaluations ({:.3} s each), {} training jobs, held-out MAPE {:.1} % IOPS",
                seconds / n.max(1.0),
                report["training"]["jobs"],
                report["held_out"]["iops"].as_f64().unwrap_or(f64::NAN),
            );
            times[slot].push(seconds);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (t1, t2) = (median(&mut times[0]), median(&mut times[1]));
    // T2 = T1 (s + (1 - s)/2)  =>  s = 2 T2/T1 - 1.
    let serial = (2.0 * t2 / t1 - 1.0).clamp(0.0, 1.0);
    println!(
        "median --jobs 1: {t1:.1} s; --jobs 2: {t2:.1} s; ratio {:.2}; serial share {serial:.2}",
        t2 / t1
    );
    for j in [4.0, 8.0, 16.0] {
        println!(
            "projection (not measured) for --jobs {j}: {:.1} s",
            t1 * (serial + (1.0 - serial) / j)
        );
    }
}
