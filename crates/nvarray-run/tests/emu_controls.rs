//! The steering options in the emulator, against the wall clock: the same state machines as
//! the simulator's (`fio_controls.rs`), so these check the emulator's use of them — that a
//! think drains the queue first, that the latency search ends a job, that flows keep their
//! ratio between real threads, that a steady job stops. Bounds are loose where the machine's
//! pauses could move a time.

use std::time::Instant;

mod common;

use common::one_job;
use nvarray_host::{Device, Options};
use nvarray_run::{emu, EmuRunError, RunReport};
use nvarray_workload::{parse_job_file, Workload};

fn device() -> Device {
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    Device::open(&common::device_of("dram", "4m"), &options).unwrap()
}

fn run(w: &Workload) -> Result<(RunReport, f64), EmuRunError> {
    let t0 = Instant::now();
    let r = emu::run_on(&device(), w, &mut |_| {})?;
    Ok((r, t0.elapsed().as_secs_f64() * 1e3))
}

#[test]
fn a_deep_queue_drains_before_each_think() {
    // 40 requests at depth 8, a 2 ms think after each completion counted (fio's default
    // thinktime_blocks=1): one burst of 8, then one request per think, so at least 32
    // thinks. Thinking per queue slot would take about 40 / 8 thinks (10 ms).
    let (r, ms) = run(&one_job(&[
        ("rw", "randread"),
        ("iodepth", "8"),
        ("number_ios", "40"),
        ("thinktime", "2ms"),
    ]))
    .unwrap();
    assert_eq!(r.totals.requests, 40);
    assert!(ms >= 64.0, "{ms} ms");
    // Every 10th completion: 9 thinks between 100 requests at depth 1.
    let (r, ms) = run(&one_job(&[
        ("rw", "randread"),
        ("number_ios", "100"),
        ("thinktime", "2ms"),
        ("thinktime_blocks", "10"),
    ]))
    .unwrap();
    assert_eq!(r.totals.requests, 100);
    assert!((18.0..150.0).contains(&ms), "{ms} ms");
}

#[test]
fn a_latency_target_far_above_any_latency_ends_the_job_at_its_queue_depth() {
    let (r, ms) = run(&one_job(&[
        ("rw", "randread"),
        ("iodepth", "16"),
        ("runtime", "10s"),
        ("latency_target", "50ms"),
        ("latency_window", "20ms"),
        ("latency_percentile", "99"),
    ]))
    .unwrap();
    assert_eq!(r.streams[0].control.latency_depth, Some(16));
    // Depths 1 to 16 (5 windows), the final window, then done: far short of 10 s.
    assert!(ms < 3_000.0, "{ms} ms");
    assert!(r.totals.requests > 0);
}

#[test]
fn a_latency_target_no_request_meets_at_depth_one_is_fios_error() {
    let e = run(&one_job(&[
        ("rw", "randread"),
        ("iodepth", "4"),
        ("runtime", "1s"),
        ("latency_target", "10ns"),
    ]))
    .unwrap_err();
    assert!(
        matches!(e, EmuRunError::LatencyTargetMissed { target_ns: 10, .. }),
        "{e}"
    );
}

#[test]
fn flows_keep_real_threads_in_their_weights_ratio() {
    let w = parse_job_file(
        "[global]\nrw=randread\nruntime=200ms\nflow_id=2\n[one]\nflow=1\n[four]\nflow=4\niodepth=4\n",
    )
    .unwrap();
    let (r, _) = run(&w).unwrap();
    let (one, four) = (
        r.streams[0].totals.requests as f64,
        r.streams[1].totals.requests as f64,
    );
    // Tens of thousands each on an idle machine. On a loaded one every hand-over between
    // the two threads can cost a time slice, leaving a few dozen (30 and 125 seen with three
    // busy loops on two cores): the ratio still holds, to a request or 5 %.
    assert!(one >= 10.0, "{one}");
    assert!(
        (four - 4.0 * one).abs() <= 5.0_f64.max(0.05 * four),
        "{four} / {one}"
    );
}

#[test]
fn a_steady_job_stops_and_reports_its_window() {
    let (r, ms) = run(&one_job(&[
        ("rw", "randread"),
        ("runtime", "20s"),
        ("ss", "iops:1000%"),
        ("ss_dur", "100ms"),
        ("ss_interval", "20ms"),
    ]))
    .unwrap();
    let ss = r.streams[0].control.steadystate.as_ref().unwrap();
    assert!(ss.attained, "{ss:?}");
    assert_eq!(ss.iops.len(), 5);
    assert!(ss.iops.iter().all(|&n| n > 0), "{:?}", ss.iops);
    // Steady from the first full window (any deviation is within 1000 %): about 100 ms.
    assert!(ms < 5_000.0, "{ms} ms");
}

#[test]
fn exitall_stops_a_paced_thread_waiting_for_its_time() {
    // `slow` thinks 1 ms after each of 50 requests (about 50 ms); `paced` issues one request
    // a second and would run 10 s, but ends with `slow` (exit_what=stonewall), even while it
    // waits for its next request's time.
    let w = parse_job_file(
        "[global]\nrw=randread\nexitall\nexit_what=stonewall\n[slow]\nnumber_ios=50\nthinktime=1ms\n\
         [paced]\nrate_iops=1\nruntime=10s\n",
    )
    .unwrap();
    let (r, ms) = run(&w).unwrap();
    assert_eq!(r.streams[0].totals.requests, 50);
    assert!(ms < 3_000.0, "{ms} ms");
}
