//! The `moneta` preset reproduces the Moneta figures quoted in the seeds (Moneta MICRO'10
//! slides and the 2011 talk). The simulator is deterministic, so these are exact tests: a
//! change to the model that moves a figure outside its band fails here.

use nvarray_model::presets::preset;
use nvarray_sim::RunReport;
use nvarray_workload::{JobSpec, Workload};

fn job(name: &str, pairs: &[(&str, &str)]) -> JobSpec {
    let mut j = JobSpec::default();
    j.set("name", name).unwrap();
    for (k, v) in pairs {
        j.set(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    j
}

fn run(overrides: &[(&str, &str)], jobs: Vec<JobSpec>) -> RunReport {
    let ov: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cfg = preset("moneta").unwrap().load(&ov).unwrap();
    nvarray_sim::run(&cfg, &Workload { jobs }).unwrap()
}

fn gb_per_s(r: &RunReport) -> f64 {
    (r.totals.read_bandwidth_bytes_per_s + r.totals.write_bandwidth_bytes_per_s) / 1e9
}

fn assert_within(what: &str, got: f64, expected: f64, tolerance: f64) {
    let err = (got - expected).abs() / expected;
    assert!(
        err <= tolerance,
        "{what}: got {got:.3}, expected {expected} ± {:.0}% (off by {:.1}%)",
        tolerance * 100.0,
        err * 100.0
    );
}

#[test]
fn a_4k_read_at_qd1_takes_8_2_us() {
    // "Baseline latency (4KB): hardware 8.2 us" (Moneta MICRO'10 slides).
    let r = run(
        &[],
        vec![job(
            "qd1",
            &[("rw", "randread"), ("bs", "4k"), ("number_ios", "2000")],
        )],
    );
    assert_within(
        "4 KiB QD1 read p50 latency (µs)",
        r.totals.latency_ns.p50 as f64 / 1e3,
        8.2,
        0.10,
    );
    assert_within(
        "4 KiB QD1 read mean latency (µs)",
        r.totals.latency_ns.mean / 1e3,
        8.2,
        0.10,
    );
}

#[test]
fn sequential_512k_reads_and_writes_reach_the_link_limit() {
    // "tops out at about 1.7 gigabytes a second ... the PCIe bandwidth minus the PCIe overhead".
    for rw in ["read", "write"] {
        let r = run(
            &[],
            vec![job(
                rw,
                &[
                    ("rw", rw),
                    ("bs", "512k"),
                    ("iodepth", "4"),
                    ("runtime", "20ms"),
                ],
            )],
        );
        assert_within(
            &format!("sequential 512 KiB {rw} GB/s"),
            gb_per_s(&r),
            1.7,
            0.10,
        );
    }
}

fn mixed_large(policy: &str) -> f64 {
    let jobs = vec![job(
        "mix",
        &[
            ("rw", "randrw"),
            ("rwmixread", "50"),
            ("bs", "512k"),
            ("numjobs", "8"),
            ("iodepth", "1"),
            ("runtime", "40ms"),
        ],
    )];
    gb_per_s(&run(&[("controller.policy", policy)], jobs))
}

#[test]
fn split_read_write_queues_use_both_link_directions() {
    // "our bandwidth ends up topping out at about 1.6 gigabytes a second ... we can get up to
    // just under three gigabytes a second" (Moneta talk).
    let fifo = mixed_large("fifo");
    let split = mixed_large("split-rw");
    assert!(
        fifo <= 1.9,
        "fifo mixed bandwidth {fifo:.3} GB/s, expected about 1.6"
    );
    assert!(
        split >= 2.6,
        "split-rw mixed bandwidth {split:.3} GB/s, expected just under 3"
    );
    assert!(
        split <= 3.2,
        "split-rw mixed bandwidth {split:.3} GB/s, expected just under 3"
    );
}

fn small_beside_large(policy: &str) -> (f64, f64) {
    let jobs = vec![
        job(
            "small",
            &[("rw", "randread"), ("bs", "4k"), ("iodepth", "1")],
        ),
        job(
            "large",
            &[("rw", "randread"), ("bs", "512k"), ("iodepth", "1")],
        ),
    ];
    let r = run(
        &[("controller.policy", policy)],
        jobs.into_iter()
            .map(|mut j| {
                j.set("runtime", "40ms").unwrap();
                j
            })
            .collect(),
    );
    let small = r
        .streams
        .iter()
        .find(|s| s.name == "small")
        .unwrap()
        .totals
        .read_bandwidth_bytes_per_s;
    (small, gb_per_s(&r) * 1e9)
}

#[test]
fn round_robin_gives_small_requests_their_share() {
    // "we get about a 12x improvement for the small request bandwidth without impeding the
    // overall total bandwidth at all" (Moneta talk).
    let (small_fifo, total_fifo) = small_beside_large("fifo");
    let (small_rr, total_rr) = small_beside_large("round-robin");
    assert!(
        small_rr >= 8.0 * small_fifo,
        "small stream: fifo {:.1} MB/s, round-robin {:.1} MB/s",
        small_fifo / 1e6,
        small_rr / 1e6
    );
    assert_within(
        "total bandwidth, round-robin vs fifo",
        total_rr,
        total_fifo,
        0.05,
    );
}

fn bandwidth_at(latency: &str, controllers: &str) -> f64 {
    let jobs = vec![job(
        "sweep",
        &[
            ("rw", "randread"),
            ("bs", "64k"),
            ("numjobs", "16"),
            ("iodepth", "1"),
            ("runtime", "10ms"),
        ],
    )];
    gb_per_s(&run(
        &[
            ("memory.read_latency_ns", latency),
            ("memory.write_latency_ns", latency),
            ("memory.controllers", controllers),
        ],
        jobs,
    ))
}

#[test]
fn memory_latency_is_hidden_by_enough_controllers() {
    // "Moneta tolerates memory latencies up to 1us without BW loss; increased parallelism
    // hides extra memory latency" (MICRO'10 slides, sensitivity figure, 1/2/4/8 controllers).
    let eight_fast = bandwidth_at("4", "8");
    let eight_1us = bandwidth_at("1000", "8");
    assert_within(
        "8 controllers: bandwidth at 1 µs vs 4 ns",
        eight_1us,
        eight_fast,
        0.10,
    );
    let one_fast = bandwidth_at("4", "1");
    let one_256ns = bandwidth_at("256", "1");
    assert!(
        one_256ns < 0.75 * one_fast,
        "1 controller: {one_fast:.3} GB/s at 4 ns, {one_256ns:.3} GB/s at 256 ns"
    );
    let slow = bandwidth_at("128000", "8");
    assert!(
        slow < 0.2 * eight_fast,
        "at 128 µs even 8 controllers fall: {slow:.3} GB/s"
    );
}

#[test]
fn random_4k_mixed_with_16_threads_gives_541k_iops() {
    // "541K random 4KB IOPS" (MICRO'10 abstract).
    let r = run(
        &[],
        vec![job(
            "mixed",
            &[
                ("rw", "randrw"),
                ("rwmixread", "50"),
                ("bs", "4k"),
                ("numjobs", "16"),
                ("iodepth", "1"),
                ("runtime", "20ms"),
            ],
        )],
    );
    assert_within(
        "random 4 KiB 50/50 IOPS (thousands)",
        r.totals.iops / 1e3,
        541.0,
        0.15,
    );
}

#[test]
fn runs_are_deterministic_per_seed() {
    let jobs = || {
        vec![job(
            "mixed",
            &[
                ("rw", "randrw"),
                ("bs", "8k"),
                ("numjobs", "4"),
                ("iodepth", "4"),
                ("runtime", "2ms"),
                ("random_distribution", "zipf:1.1"),
            ],
        )]
    };
    let mut a = run(&[("controller.policy", "round-robin")], jobs());
    let mut b = run(&[("controller.policy", "round-robin")], jobs());
    // The one field measured on this machine rather than simulated.
    a.cpu_seconds_per_gb = 0.0;
    b.cpu_seconds_per_gb = 0.0;
    assert_eq!(a, b);
    let mut other = jobs();
    other[0].set("randseed", "7").unwrap();
    let c = run(&[("controller.policy", "round-robin")], other);
    assert_ne!(
        a.totals.latency_ns, c.totals.latency_ns,
        "a different seed gives a different run"
    );
}
