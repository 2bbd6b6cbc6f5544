//! fio's options that steer a running job by what it measures, in the simulator (whose
//! virtual clock makes each exact): the think time policy (`thinktime_blocks`,
//! `thinktime_blocks_type`, `thinktime_iotime`), the latency target's depth search, flows,
//! and steady state. Each test checks what fio's source says the option does
//! (docs/research/fio-3.33-semantics.md §4, §6, §7, §8).

mod common;

use common::one_job;
use nvarray_model::DeviceConfig;
use nvarray_run::{sim, RunReport, SimError};
use nvarray_workload::{parse_job_file, Workload};

fn optane() -> DeviceConfig {
    common::device_of("optane", "64m")
}

fn run(pairs: &[(&str, &str)]) -> RunReport {
    sim::run(&optane(), &one_job(pairs)).unwrap()
}

/// The share of requests issued with at least fio's depth bucket `bucket` in flight (3: 8,
/// 5: 32).
fn share_issued_from(d: &nvarray_report::IoDepths, bucket: usize) -> f64 {
    let all: u64 = d.at_issue.iter().sum();
    d.at_issue[bucket..].iter().sum::<u64>() as f64 / all.max(1) as f64
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[test]
fn thinktime_blocks_thinks_after_every_n_completions() {
    let base = [("rw", "randread"), ("number_ios", "1000")];
    let plain = run(&base);
    let think = |blocks: &str| {
        let mut pairs = base.to_vec();
        pairs.extend([("thinktime", "100"), ("thinktime_blocks", blocks)]);
        run(&pairs)
    };
    // 1,000 requests one at a time: a think after every 10th completion but the last.
    let ten = think("10");
    let extra = ten.elapsed_ns - plain.elapsed_ns;
    assert!(
        (extra as f64 / 9.9e6 - 1.0).abs() < 0.01,
        "99 thinks of 100 µs, got {} ms more",
        ms(extra)
    );
    assert_eq!(ten.totals.requests, 1000);
    let every = think("1").elapsed_ns - plain.elapsed_ns;
    assert!(
        (every as f64 / 99.9e6 - 1.0).abs() < 0.01,
        "999 thinks, got {} ms",
        ms(every)
    );
}

#[test]
fn a_deep_queue_drains_before_each_think_as_fios_does() {
    // iodepth 8, thinktime_blocks=1: the first burst of 8 drains into one think; the
    // completions while draining count toward the next, so every later think follows a
    // single request (fio's handle_thinktime takes the count before it drains). Thinking
    // per queue slot instead would take about 100 / 8 thinks.
    let r = run(&[
        ("rw", "randread"),
        ("iodepth", "8"),
        ("number_ios", "100"),
        ("thinktime", "1ms"),
    ]);
    let thinks = r.elapsed_ns as f64 / 1e6;
    assert!((90.0..94.0).contains(&thinks), "{thinks} ms");
    // Counting issued requests instead: 8 issued, drain, think; 10 bursts, 9 thinks between.
    let r = run(&[
        ("rw", "randread"),
        ("iodepth", "8"),
        ("number_ios", "80"),
        ("thinktime", "1ms"),
        ("thinktime_blocks", "8"),
        ("thinktime_blocks_type", "issue"),
    ]);
    let thinks = r.elapsed_ns as f64 / 1e6;
    assert!((9.0..9.5).contains(&thinks), "{thinks} ms");
    assert!(
        share_issued_from(&r.totals.io_depths, 3) > 0.0,
        "bursts of 8 in flight"
    );
}

#[test]
fn thinktime_iotime_thinks_by_the_clock() {
    // 200 ms of I/O then a 100 ms think, the cycle counted from each think's start: I/O in
    // 0-300, 400-600 and 700-900 ms of the 1 s: 70 % of the plain run's requests.
    let base = [("rw", "randread"), ("runtime", "1s")];
    let plain = run(&base).totals.requests as f64;
    let mut pairs = base.to_vec();
    pairs.extend([("thinktime", "100ms"), ("thinktime_iotime", "200ms")]);
    let share = run(&pairs).totals.requests as f64 / plain;
    assert!((0.69..0.71).contains(&share), "{share}");
}

fn latency_target(target_us: &str, percentile: &str) -> Result<RunReport, SimError> {
    let job = one_job(&[
        ("rw", "randread"),
        ("iodepth", "64"),
        ("runtime", "1s"),
        ("latency_target", target_us),
        ("latency_window", "2ms"),
        ("latency_percentile", percentile),
    ]);
    sim::run(&optane(), &job)
}

#[test]
fn a_latency_target_far_above_any_latency_doubles_to_the_queue_depth() {
    let r = latency_target("1000", "100").unwrap();
    let s = &r.streams[0];
    assert_eq!(s.control.latency_depth, Some(64));
    // Windows at depths 1, 2, 4 ... 64 (7), then the final window at 64 counts alone, and
    // the job ends after it, long before its 1 s.
    assert!(r.elapsed_ns < 20_000_000, "{} ms", ms(r.elapsed_ns));
    let final_window = s.totals.requests as f64 / s.totals.iops;
    assert!(
        (2.0e-3..2.2e-3).contains(&final_window),
        "only the final window counts: {final_window} s"
    );
    assert!(
        share_issued_from(&s.totals.io_depths, 5) > 0.9,
        "the final window ran at depth 64"
    );
}

#[test]
fn a_latency_target_settles_on_a_depth_that_meets_it() {
    // On this device a random 4k read takes 4.2 µs alone, up to 11 µs at depth 8 and 12.9 µs
    // at 16: an 11 µs target for 99.9 % of requests (examples/latency-profile.fio's share)
    // settles between.
    let r = latency_target("11", "99.9").unwrap();
    let s = &r.streams[0];
    let depth = s.control.latency_depth.unwrap();
    assert!((4..16).contains(&depth), "{depth}");
    assert!(
        s.totals.latency_ns.p99 <= 11_100,
        "the final window's p99 {} ns",
        s.totals.latency_ns.p99
    );
    assert!(r.elapsed_ns < 1_000_000_000, "the search ended the job");
    // Half the requests meeting it allows a depth at least as deep.
    let half = latency_target("11", "50").unwrap().streams[0]
        .control
        .latency_depth
        .unwrap();
    assert!(half >= depth, "50 %: {half}, 99.9 %: {depth}");
}

#[test]
fn a_latency_target_missed_at_depth_one_is_fios_error() {
    let e = latency_target("2", "100").unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            SimError::LatencyTargetMissed {
                target_ns: 2000,
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("queue depth 1"), "{text}");
    // With percentile 100, every request over the target steps the depth down, those still
    // in flight from the deeper queue too (fio checks each completion, its drain's as well):
    // a target the device meets only below depth 16 steps all the way down to 1.
    assert!(latency_target("11", "100").is_err());
}

fn flow_jobs(extra: &str) -> Workload {
    parse_job_file(&format!(
        "[global]\nrw=randread\nruntime=10ms\nflow_id=3\n{extra}\n[slow]\nflow=1\n[fast]\nflow=8\niodepth=4\n"
    ))
    .unwrap()
}

#[test]
fn flows_keep_their_jobs_request_counts_in_the_weights_ratio() {
    for extra in ["", "flow_sleep=100"] {
        let r = sim::run(&optane(), &flow_jobs(extra)).unwrap();
        let (slow, fast) = (
            r.streams[0].totals.requests as f64,
            r.streams[1].totals.requests as f64,
        );
        assert!((fast / slow - 8.0).abs() < 0.1, "{extra}: {fast} / {slow}");
        assert!(slow > 100.0, "{extra}: {slow}");
    }
    // Without flows the deeper job does several times the other's requests, not 8 x.
    let free =
        parse_job_file("[global]\nrw=randread\nruntime=10ms\n[slow]\n[fast]\niodepth=4\n").unwrap();
    let r = sim::run(&optane(), &free).unwrap();
    let ratio = r.streams[1].totals.requests as f64 / r.streams[0].totals.requests as f64;
    assert!((ratio - 8.0).abs() > 1.0, "{ratio}");
}

#[test]
fn a_flow_whose_other_job_ends_goes_on_alone() {
    // `slow` stops after 100 requests; `fast` is then alone in the flow, not held to 8 x 100.
    let w = parse_job_file(
        "[global]\nrw=randread\nflow_id=1\n[slow]\nflow=1\nnumber_ios=100\n[fast]\nflow=8\nruntime=10ms\n",
    )
    .unwrap();
    let r = sim::run(&optane(), &w).unwrap();
    assert_eq!(r.streams[0].totals.requests, 100);
    assert!(
        r.streams[1].totals.requests > 2000,
        "{}",
        r.streams[1].totals.requests
    );
}

fn steady(ss: &str) -> RunReport {
    run(&[
        ("rw", "randread"),
        ("iodepth", "4"),
        ("runtime", "1s"),
        ("ss", ss),
        ("ss_dur", "50ms"),
        ("ss_interval", "10ms"),
    ])
}

#[test]
fn a_steady_job_ends_once_its_window_is_steady() {
    let r = steady("iops:5%");
    let ss = r.streams[0].control.steadystate.as_ref().unwrap();
    assert!(ss.attained);
    assert_eq!(ss.duration, 5);
    assert_eq!(ss.iops.len(), 5);
    // A steady device is steady from the first full window: 5 samples of 10 ms.
    assert!(
        (50_000_000..50_100_000).contains(&r.elapsed_ns),
        "stopped at 50 ms, then its requests in flight completed: {}",
        r.elapsed_ns
    );
    let mean = ss.iops.iter().sum::<u64>() as f64 / 5.0;
    assert!(
        (mean / r.streams[0].totals.iops - 1.0).abs() < 0.01,
        "{mean}"
    );
    for (iops, bw) in ss.iops.iter().zip(&ss.bw) {
        assert_eq!(iops * 4096, *bw);
    }
    assert_eq!(ss.ss, "iops:5.000000%");
    assert!(ss.criterion.ends_with('%'));
}

#[test]
fn a_job_never_steady_runs_its_time_and_says_so() {
    // Nothing is within 0 %: the job runs its 1 s and reports the window it last judged.
    let r = steady("iops:0%");
    let ss = r.streams[0].control.steadystate.as_ref().unwrap();
    assert!(!ss.attained);
    assert_eq!(r.elapsed_ns, 1_000_000_000);
    // Latency and bandwidth criteria are judged on their own samples.
    let r = steady("lat_slope:1%");
    let ss = r.streams[0].control.steadystate.as_ref().unwrap();
    assert!(ss.attained);
    assert!(ss.lat_ns.iter().all(|l| *l > 4_000), "{:?}", ss.lat_ns);
}

/// fio's `exitall`: when a job ends, `exit_what` says which others end with it (any job's
/// `exitall` holds for all, as in fio).
fn exits(what: &str) -> RunReport {
    let w = parse_job_file(&format!(
        "[global]\nrw=randread\nexit_what={what}\n[short]\nnumber_ios=1000\nexitall\n\
         [long]\nnew_group\nruntime=1s\n[later]\nstonewall\nruntime=1s\n"
    ))
    .unwrap();
    sim::run(&optane(), &w).unwrap()
}

#[test]
fn exitall_ends_the_jobs_exit_what_names() {
    let short_ns = |r: &RunReport| {
        (r.streams[0].totals.requests as f64 / r.streams[0].totals.iops * 1e9) as u64
    };
    // group: only `short`'s group; `long` (a group of its own) runs its second.
    let r = exits("group");
    let long_s = r.streams[1].totals.requests as f64 / r.streams[1].totals.iops;
    assert!((long_s - 1.0).abs() < 1e-6, "{long_s} s");
    assert!(r.streams[2].totals.requests > 0);
    // stonewall: every running job ends with `short`; the next phase still runs.
    let r = exits("stonewall");
    let long_s = r.streams[1].totals.requests as f64 / r.streams[1].totals.iops;
    assert!(
        (long_s * 1e9 - short_ns(&r) as f64).abs() < 1e5,
        "long ran {long_s} s, short {} ns",
        short_ns(&r)
    );
    assert!(r.streams[2].totals.requests > 0, "the later phase ran");
    // all: the later phase never starts.
    let r = exits("all");
    assert_eq!(r.streams[2].totals.requests, 0);
    assert!(r.elapsed_ns < 10_000_000, "{} ns", r.elapsed_ns);
}
