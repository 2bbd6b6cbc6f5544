//! fio's options that change what a run does, in both engines: `rate_iops` and `rate` pace a
//! thread's requests (evenly, or as a Poisson process), a device slower than the rate shows
//! queueing from each request's paced time, `io_size` stops a thread after so many bytes,
//! `runtime=0` ends a job after its region, `loops` repeats it, `offset_increment` gives each
//! thread its own region.

mod common;

use common::one_job as workload;
use nvarray_host::{Device, Options};
use nvarray_model::DeviceConfig;
use nvarray_run::{emu, sim};

fn device(name: &str) -> DeviceConfig {
    common::device_of(name, "64m")
}

#[test]
fn rate_iops_issues_evenly_at_the_rate() {
    let w = workload(&[
        ("rw", "randread"),
        ("iodepth", "8"),
        ("rate_iops", "100000"),
        ("runtime", "10ms"),
    ]);
    let r = sim::run(&device("dram"), &w).unwrap();
    // One request every 10 µs for 10 ms: 1,000 (the last one due at 9.99 ms).
    assert_eq!(r.totals.requests, 1000);
    let l = &r.totals.latency_ns;
    assert!(
        l.max - l.min < 100,
        "evenly spaced: no request waits for another: {l:?}"
    );
}

#[test]
fn a_byte_rate_paces_by_each_requests_length() {
    // 64 KiB at 64 MiB/s: one request per 0.977 ms, 11 in 10 ms (due at 0, 0.98, ... 9.77 ms).
    let w = workload(&[
        ("rw", "read"),
        ("bs", "64k"),
        ("rate", "64m"),
        ("runtime", "10ms"),
    ]);
    let r = sim::run(&device("dram"), &w).unwrap();
    assert_eq!(r.totals.requests, 11);
}

#[test]
fn poisson_pacing_keeps_the_mean_rate_with_random_gaps() {
    let w = workload(&[
        ("rw", "randread"),
        ("iodepth", "16"),
        ("rate_iops", "200000"),
        ("rate_process", "poisson"),
        ("runtime", "50ms"),
    ]);
    let r = sim::run(&device("dram"), &w).unwrap();
    // 10,000 expected; a Poisson count's standard deviation is 100.
    let n = r.totals.requests as f64;
    assert!((9_500.0..10_500.0).contains(&n), "{n} requests");
    let l = &r.totals.latency_ns;
    // Arrivals bunch up: some wait behind others, unlike even pacing.
    assert!(l.max > l.min + 100, "{l:?}");
}

#[test]
fn a_rate_beyond_the_device_shows_queueing_from_the_paced_times() {
    // An hdd serves a few hundred random reads a second; ask for 2,000 at QD 1.
    let w = workload(&[
        ("rw", "randread"),
        ("rate_iops", "2000"),
        ("runtime", "50ms"),
    ]);
    let r = sim::run(&device("hdd"), &w).unwrap();
    let l = &r.totals.latency_ns;
    // The same reads one after another: each request's own service time.
    let closed = sim::run(
        &device("hdd"),
        &workload(&[("rw", "randread"), ("runtime", "50ms")]),
    )
    .unwrap();
    let service_ns = closed.totals.latency_ns.mean;
    // Requests fall further and further behind their paced times: the last waits for those
    // before it (about five in 50 ms), not only its own service.
    assert!(
        l.max as f64 > 3.0 * service_ns,
        "{l:?} against {service_ns} ns a read"
    );
    assert!(
        l.max as f64 > 20e6,
        "the last waited most of the run: {l:?}"
    );
}

#[test]
fn io_size_and_runtime_zero_end_a_job_by_bytes() {
    let cfg = device("dram");
    let r = sim::run(
        &cfg,
        &workload(&[("rw", "randwrite"), ("io_size", "1m"), ("iodepth", "4")]),
    )
    .unwrap();
    assert_eq!((r.totals.requests, r.totals.write_bytes), (256, 1 << 20));
    // runtime=0: no time limit; the job moves its region (size=2m) once.
    let r = sim::run(
        &cfg,
        &workload(&[
            ("rw", "read"),
            ("size", "2m"),
            ("bs", "64k"),
            ("runtime", "0"),
        ]),
    )
    .unwrap();
    assert_eq!(r.totals.read_bytes, 2 << 20);
    // And each of two threads does.
    let r = sim::run(
        &cfg,
        &workload(&[
            ("rw", "read"),
            ("size", "2m"),
            ("bs", "64k"),
            ("runtime", "0"),
            ("numjobs", "2"),
        ]),
    )
    .unwrap();
    assert_eq!(r.totals.read_bytes, 4 << 20);
}

#[test]
fn the_emulator_paces_and_limits_bytes_too() {
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let opened = Device::open(&device("dram"), &options).unwrap();
    let w = workload(&[
        ("rw", "randread"),
        ("iodepth", "4"),
        ("rate_iops", "20000"),
        ("runtime", "50ms"),
    ]);
    let r = emu::run_on(&opened, &w, &mut |_| {}).unwrap();
    // 1,000 due in 50 ms.
    common::assert_paced_count(&r, 990..=1000);
    let w = workload(&[("rw", "randwrite"), ("io_size", "256k"), ("bs", "4k")]);
    let r = emu::run_on(&opened, &w, &mut |_| {}).unwrap();
    assert_eq!((r.totals.requests, r.totals.write_bytes), (64, 256 << 10));
}

#[test]
fn loops_repeat_and_offset_increment_separates_the_threads() {
    let cfg = device("dram");
    let r = sim::run(
        &cfg,
        &workload(&[("rw", "write"), ("io_size", "256k"), ("loops", "3")]),
    )
    .unwrap();
    assert_eq!(r.totals.write_bytes, 3 * (256 << 10));
    let r = sim::run(&cfg, &workload(&[("number_ios", "10"), ("loops", "4")])).unwrap();
    assert_eq!(r.totals.requests, 40);
    let r = sim::run(&cfg, &workload(&[("runtime", "1ms"), ("loops", "3")])).unwrap();
    assert_eq!(r.elapsed_ns, 3_000_000);
    // Four threads, each writing 1 MiB sequentially in its own 1 MiB region: together they
    // cover 4 MiB once, which a shared region (all four starting at 0) would not.
    let plan = nvarray_run::Plan::new(
        &workload(&[
            ("rw", "write"),
            ("bs", "64k"),
            ("size", "1m"),
            ("offset_increment", "1m"),
            ("numjobs", "4"),
        ]),
        nvarray_workload::trace::Geometry {
            capacity_bytes: 64 << 20,
            block_bytes: 512,
            max_transfer_bytes: 1 << 20,
        },
    )
    .unwrap();
    let starts: Vec<u64> = plan
        .threads
        .iter()
        .map(|t| match &t.requests {
            nvarray_run::plan::Requests::Generated(g, _) => g.region_start_bytes(),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(starts, [0, 1 << 20, 2 << 20, 3 << 20]);
    let mut w = workload(&[
        ("rw", "write"),
        ("bs", "64k"),
        ("size", "1m"),
        ("offset_increment", "1m"),
        ("numjobs", "4"),
        ("runtime", "0"),
    ]);
    let r = sim::run(&cfg, &w).unwrap();
    assert_eq!(r.totals.write_bytes, 4 << 20);
    // The last thread's region past the device's end is refused, naming the job.
    w.jobs[0].set("offset_increment", "32m").unwrap();
    let e = sim::run(&cfg, &w).unwrap_err().to_string();
    assert!(e.contains("offset"), "{e}");
}
