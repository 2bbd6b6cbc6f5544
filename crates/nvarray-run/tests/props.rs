//! Engine properties over random valid devices and workloads: every request completes
//! exactly once, bytes moved equal bytes requested, and the breakdown adds up.

use nvarray_model::presets::PRESETS;
use nvarray_workload::{JobSpec, RequestGen, Workload};
use proptest::prelude::*;

fn job(name: &str, pairs: &[(&str, String)]) -> JobSpec {
    let mut j = JobSpec::default();
    j.set("name", name).unwrap();
    for (k, v) in pairs {
        j.set(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
    j
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_request_completes_once_and_bytes_add_up(
        preset in 0usize..PRESETS.len(),
        policy in prop_oneof![Just("fifo"), Just("split-rw"), Just("round-robin")],
        streams in proptest::collection::vec(
            (
                prop_oneof![Just("read"), Just("write"), Just("randread"), Just("randwrite"), Just("rw"), Just("randrw")],
                prop_oneof![Just("512"), Just("4k"), Just("64k"), Just("4k/50:128k/50")],
                1u32..9,
                1u32..4,
                1u64..60,
                0u64..1000,
                any::<bool>(),
            ),
            1..4,
        ),
        host_ns in 0u64..3000,
    ) {
        let ov = vec![
            ("controller.policy".to_string(), policy.to_string()),
            ("host.software_ns".to_string(), host_ns.to_string()),
            // Every preset takes the 128 KiB requests below.
            ("controller.max_transfer_bytes".to_string(), "1m".to_string()),
        ];
        let cfg = PRESETS[preset].load(&ov).unwrap();
        let jobs: Vec<JobSpec> = streams
            .iter()
            .enumerate()
            .map(|(i, (rw, bs, qd, threads, ios, seed, zipf))| {
                let key = if bs.contains('/') { "bssplit" } else { "bs" };
                let mut pairs = vec![
                    ("rw", rw.to_string()),
                    (key, bs.to_string()),
                    ("iodepth", qd.to_string()),
                    ("numjobs", threads.to_string()),
                    ("number_ios", ios.to_string()),
                    ("randseed", seed.to_string()),
                ];
                if *zipf {
                    pairs.push(("random_distribution", "zipf:1.1".to_string()));
                }
                job(&format!("s{i}"), &pairs)
            })
            .collect();
        let workload = Workload { jobs: jobs.clone(), trace: None };
        let r = nvarray_run::sim::run(&cfg, &workload).unwrap();

        // Replay the generators to know exactly what was asked for.
        for (j, stream) in jobs.iter().zip(&r.streams) {
            let (mut reads, mut writes, mut read_bytes, mut write_bytes) = (0, 0, 0, 0);
            for t in 0..j.numjobs {
                let mut g = RequestGen::new(j, t, cfg.memory.capacity_bytes, cfg.controller.block_bytes).unwrap();
                for _ in 0..j.number_ios.unwrap() {
                    let q = g.next_request();
                    match q.op {
                        nvarray_workload::Direction::Read => { reads += 1; read_bytes += u64::from(q.len_bytes); }
                        nvarray_workload::Direction::Write => { writes += 1; write_bytes += u64::from(q.len_bytes); }
                    }
                }
            }
            let t = &stream.totals;
            prop_assert_eq!((t.read_requests, t.write_requests), (reads, writes), "stream {}", stream.name);
            prop_assert_eq!((t.read_bytes, t.write_bytes), (read_bytes, write_bytes), "stream {}", stream.name);
            let parts: f64 = t.breakdown_ns.0.iter().map(|(_, v)| v).sum();
            prop_assert!((parts - t.latency_ns.mean).abs() <= 1e-9 * t.latency_ns.mean.max(1.0),
                "breakdown {parts} vs mean {}", t.latency_ns.mean);
            let host = t.breakdown_ns.0.iter().find(|(k, _)| *k == "host").unwrap().1;
            prop_assert!(host >= host_ns as f64, "host share {host} below the software cost {host_ns}");
            prop_assert!(t.latency_ns.min as f64 >= host_ns as f64);
        }
    }
}

#[test]
fn a_workload_that_does_not_fit_the_device_is_refused() {
    let cfg = PRESETS[0].load(&[]).unwrap();
    let big = job("big", &[("bs", "16m".to_string())]);
    let e = nvarray_run::sim::run(
        &cfg,
        &Workload {
            jobs: vec![big],
            trace: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("big"), "{e}");
    let outside = job("outside", &[("offset", "1t".to_string())]);
    assert!(nvarray_run::sim::run(
        &cfg,
        &Workload {
            jobs: vec![outside],
            trace: None,
        }
    )
    .is_err());
    assert!(nvarray_run::sim::run(
        &cfg,
        &Workload {
            jobs: vec![],
            trace: None
        }
    )
    .is_err());
}

fn run(overrides: &[(&str, &str)], jobs: Vec<JobSpec>) -> nvarray_run::RunReport {
    let ov: Vec<(String, String)> = overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cfg = nvarray_model::presets::preset("moneta")
        .unwrap()
        .load(&ov)
        .unwrap();
    nvarray_run::sim::run(&cfg, &Workload { jobs, trace: None }).unwrap()
}

fn job_of(name: &str, pairs: &[(&str, &str)]) -> JobSpec {
    let pairs: Vec<(&str, String)> = pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
    job(name, &pairs)
}

#[test]
fn runs_are_deterministic_per_seed() {
    let jobs = || {
        vec![job_of(
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
    (a.cpu_seconds_per_gb, a.cpu_seconds) = (None, 0.0);
    (b.cpu_seconds_per_gb, b.cpu_seconds) = (None, 0.0);
    assert_eq!(a, b);
    let mut other = jobs();
    other[0].set("randseed", "7").unwrap();
    let c = run(&[("controller.policy", "round-robin")], other);
    assert_ne!(
        a.totals.latency_ns, c.totals.latency_ns,
        "a different seed gives a different run"
    );
}
