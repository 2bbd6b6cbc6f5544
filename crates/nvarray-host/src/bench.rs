//! `nvarray bench --engine emu`: fio-like workloads through the driver against the wall clock.

use nvarray_model::DeviceConfig;
use nvarray_report::RunReport;
use nvarray_workload::Workload;

use crate::{HostError, Options};

/// Runs `workload` on an emulated `device`. `progress` is called now and then with the
/// fraction done (0.0 to 1.0).
pub fn run(
    device: &DeviceConfig,
    workload: &Workload,
    options: &Options,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, HostError> {
    let _ = (device, workload, options, progress);
    Err(HostError::Config(
        "the emulator engine is being wired in".into(),
    ))
}
