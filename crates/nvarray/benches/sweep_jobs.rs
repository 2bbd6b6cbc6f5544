//! How much faster a simulator sweep runs with its points side by side: the same sweep with
//! `--jobs 1` and `--jobs 2`, through the real `nvarray` binary, alternating runs so that drift
//! of this shared machine falls on both alike.
//!
//! Target (issue 23): `--jobs 2` takes at most 0.6x the time of `--jobs 1` on a 2-core machine.
//! Run with `cargo bench -p nvarray --bench sweep_jobs`; it prints every run, the medians and
//! their ratio for each of two sweeps, for docs/perf.md. Beyond the cores measured here a sweep of P equal points on
//! J threads takes about ceil(P/J)/P of the serial time (a projection, not a measurement).

use std::process::Command;
use std::time::Instant;

/// With `NVARRAY_BENCH_SMOKE` set (the test command's smoke run): one round of a tiny sweep,
/// so the bench is built and run but nothing is timed.
fn smoke() -> bool {
    std::env::var_os("NVARRAY_BENCH_SMOKE").is_some()
}

/// The sweeps timed: a device-design grid of 12 points of equal cost (memory latency x
/// controller count, Moneta's sensitivity figure), and an uneven one of 8 points where the two
/// 256 KiB points hold about 70 % of the work, so no schedule on 2 threads beats about 0.63.
const SWEEPS: [(&str, &[&str]); 2] = [
    (
        "design grid, 12 even points",
        &[
            "--param",
            "memory.latency_ns=4,16,64,256,1us,4us",
            "--param",
            "memory.controllers=1,8",
            "--bs",
            "4k",
            "--iodepth",
            "8",
        ],
    ),
    (
        "bs x iodepth, 8 uneven points",
        &["--param", "bs=4k,16k,64k,256k", "--param", "iodepth=1,32"],
    ),
];

fn sweep(jobs: usize, grid: &[&str], ios: &str, out: &std::path::Path) -> f64 {
    let started = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(["sim", "sweep", "--preset", "dram", "--rw", "randread"])
        .args(grid)
        // Every round starts the sweep over: without --overwrite a second round would resume
        // the first's finished points and time nothing.
        .args([
            "--number_ios",
            ios,
            "--jobs",
            &jobs.to_string(),
            "--overwrite",
            "--out",
        ])
        .arg(out)
        .output()
        .expect("run nvarray");
    let seconds = started.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    seconds
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("nvarray-sweep-jobs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let (rounds, ios) = if smoke() { (1, "2000") } else { (7, "400000") };
    for (name, grid) in SWEEPS {
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let a = sweep(1, grid, ios, &dir.join(format!("{name} one")));
            let b = sweep(2, grid, ios, &dir.join(format!("{name} two")));
            println!(
                "{name}, round {round}: --jobs 1 {a:.3} s, --jobs 2 {b:.3} s, ratio {:.3}",
                b / a
            );
            one.push(a);
            two.push(b);
        }
        let (m1, m2) = (median(one), median(two));
        println!(
            "{name} x {ios} requests: median --jobs 1 {m1:.3} s, --jobs 2 {m2:.3} s, ratio {:.3} \
             (target <= 0.6)",
            m2 / m1
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
