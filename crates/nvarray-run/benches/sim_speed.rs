//! Simulation speed: simulated requests per wall-clock second on one core.
//!
//! Target (issue 2): at least 5 million simulated 4 KiB random reads per second with the
//! `moneta` preset. Run with `cargo bench -p nvarray-run --bench sim_speed`; it prints the
//! median of several runs for a few workloads, and the raw runs, for docs/perf.md.

use std::time::Instant;

use nvarray_model::presets::preset;
use nvarray_workload::{JobSpec, Workload};

const RUNS: usize = 7;

/// With `NVARRAY_BENCH_SMOKE` set (the test command's smoke run): one run of each case with a
/// hundredth of the requests, so the bench is built and run but nothing is timed.
fn smoke() -> bool {
    std::env::var_os("NVARRAY_BENCH_SMOKE").is_some()
}

/// A benchmark case: name, preset, fio key/value pairs.
type Case = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

fn workload(pairs: &[(&str, &str)]) -> Workload {
    let mut j = JobSpec::default();
    for (k, v) in pairs {
        j.set(k, v).expect("valid job");
    }
    Workload {
        jobs: vec![j],
        trace: None,
    }
}

fn main() {
    let cases: [Case; 4] = [
        (
            "4k randread qd1 x16 threads",
            "moneta",
            vec![
                ("rw", "randread"),
                ("bs", "4k"),
                ("numjobs", "16"),
                ("number_ios", "62500"),
            ],
        ),
        (
            "4k randread qd32 x1 thread",
            "moneta",
            vec![
                ("rw", "randread"),
                ("bs", "4k"),
                ("iodepth", "32"),
                ("number_ios", "1000000"),
            ],
        ),
        (
            "4k randrw 50/50 qd1 x16",
            "moneta",
            vec![
                ("rw", "randrw"),
                ("bs", "4k"),
                ("numjobs", "16"),
                ("number_ios", "62500"),
            ],
        ),
        (
            "4k randread nvme optane qd32",
            "optane",
            vec![
                ("rw", "randread"),
                ("bs", "4k"),
                ("iodepth", "32"),
                ("number_ios", "1000000"),
            ],
        ),
    ];
    println!(
        "{:<32} {:>12} {:>16}   raw runs (M req/s)",
        "workload", "requests", "median M req/s"
    );
    for (name, device, pairs) in cases {
        let cfg = preset(device)
            .expect("preset")
            .load(&[])
            .expect("valid preset");
        let runs = if smoke() { 1 } else { RUNS };
        let mut w = workload(&pairs);
        if smoke() {
            for job in &mut w.jobs {
                job.number_ios = job.number_ios.map(|n| (n / 100).max(1));
            }
        }
        let mut rates = Vec::with_capacity(runs);
        let mut requests = 0;
        for _ in 0..runs {
            let start = Instant::now();
            let r = nvarray_run::sim::run(&cfg, &w).expect("run");
            let secs = start.elapsed().as_secs_f64();
            requests = r.totals.requests;
            rates.push(requests as f64 / secs / 1e6);
        }
        let mut sorted = rates.clone();
        sorted.sort_by(f64::total_cmp);
        let raw: Vec<String> = rates.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{name:<32} {requests:>12} {:>16.2}   {}",
            sorted[runs / 2],
            raw.join(" ")
        );
    }
}
