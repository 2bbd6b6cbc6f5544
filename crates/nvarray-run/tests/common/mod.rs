//! What the runner's tests share: a small device, a one-job workload from fio pairs, and the
//! check of a paced emulator run's count.
// Each test binary uses its own share of these.
#![allow(dead_code)]

use nvarray_model::presets::preset;
use nvarray_model::{DeviceConfig, Verdict};
use nvarray_report::RunReport;
use nvarray_workload::{JobSpec, Workload};

/// The preset `name` with a capacity of `capacity` (a size such as `64m`).
pub fn device_of(name: &str, capacity: &str) -> DeviceConfig {
    preset(name)
        .unwrap()
        .load(&[("memory.capacity_bytes".into(), capacity.into())])
        .unwrap()
}

/// One job set from fio `key=value` pairs.
pub fn one_job(pairs: &[(&str, &str)]) -> Workload {
    let mut job = JobSpec::default();
    for (k, v) in pairs {
        job.set(k, v).unwrap();
    }
    Workload {
        jobs: vec![job],
        trace: None,
    }
}

/// Checks the requests a paced emulator run completed against `due`, the count its rate
/// makes due in its runtime: in range (the clock may cut the last few), or fewer when the
/// machine paused the host thread for milliseconds (a loaded CI runner leaves some unissued
/// when the time is up), and then the run must say so: not faithful (machine-limited, or
/// unfaithful when the pauses hid from the pause watch), for timed requests the host thread
/// issued late. Never more.
pub fn assert_paced_count(r: &RunReport, due: std::ops::RangeInclusive<u64>) {
    let n = r.totals.requests;
    let issued_late = r
        .issue_lateness_ns
        .as_ref()
        .is_some_and(|issue| issue.late > 0);
    assert!(
        n <= *due.end(),
        "{n} requests, more than the {} due",
        due.end()
    );
    assert!(
        due.contains(&n) || (issued_late && r.verdict != Verdict::Faithful),
        "{n} requests, {due:?} due, and the run does not say its requests went out late: \
         {:?}, {:?}",
        r.verdict,
        r.issue_lateness_ns
    );
}
