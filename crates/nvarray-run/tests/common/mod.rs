//! What the runner's tests share: a small device and a one-job workload from fio pairs.
// Each test binary uses its own share of these.
#![allow(dead_code)]

use nvarray_model::presets::preset;
use nvarray_model::DeviceConfig;
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
