//! Errors of a run, one line each, naming the value and the accepted range.

use nvarray_host::HostError;
use nvarray_model::CommandError;
use nvarray_workload::trace::TraceError;
use nvarray_workload::WorkloadError;
use thiserror::Error;

use crate::plan::PlanError;

/// Why the simulator could not run a workload.
#[derive(Debug, Error)]
pub enum SimError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{0}")]
    InvalidWorkload(WorkloadError),
    #[error(
        "{outstanding} requests outstanding (iodepth x numjobs summed over jobs); at most {max}"
    )]
    TooManyOutstanding { outstanding: u64, max: u64 },
    #[error("device refused a generated request: {0}")]
    Command(CommandError),
    #[error(transparent)]
    Trace(TraceError),
    /// A write the zoned namespace refuses (as the emulator's device would).
    #[error("write of {len_bytes} bytes at offset {offset_bytes}: {status} (a zoned namespace is written at each zone's write pointer)")]
    ZoneRefused {
        offset_bytes: u64,
        len_bytes: u32,
        status: nvarray_model::zones::ZoneStatus,
    },
    #[error("zns: {0}")]
    Zoned(String),
    /// A job only time ends, on a device that completes requests in no time: the virtual
    /// clock would never move, and the run never end.
    #[error(
        "job {job}: the device completes every request in no time (the null device with \
         model.null_latency_ns = 0), so a simulation bounded only by time would never end: \
         bound it by count (--number_ios, --io_size), or give the device a latency (--set \
         model.null_latency_ns=1us) or the host one (--set host.software_ns=...)"
    )]
    TimeStandsStill { job: String },
    /// fio's fatal latency error: a request over `latency_target` at depth 1 (with
    /// `latency_percentile=100`).
    #[error("job {job}: a request took {latency_ns} ns at queue depth 1, over its latency_target of {target_ns} ns (fio ends such a job with an error; a latency_percentile below 100 lets some requests miss)")]
    LatencyTargetMissed {
        job: String,
        latency_ns: u64,
        target_ns: u64,
    },
}

/// Why the emulator's runner could not run a workload, or what went wrong in the run.
#[derive(Debug, Error)]
pub enum EmuRunError {
    /// The device could not be opened, or a command failed.
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The workload does not fit this device.
    #[error("{0}")]
    Workload(String),
    #[error("data verification failed: {0}")]
    Verify(String),
    #[error(transparent)]
    Trace(TraceError),
    #[error("cannot start a job thread: {0}")]
    ThreadStart(std::io::Error),
    /// fio's fatal latency error (see `SimError::LatencyTargetMissed`).
    #[error("a request took {latency_ns} ns at queue depth 1, over its job's latency_target of {target_ns} ns (fio ends such a job with an error; a latency_percentile below 100 lets some requests miss)")]
    LatencyTargetMissed { latency_ns: u64, target_ns: u64 },
    #[error("--cpus: cannot pin job thread {thread} to CPU {cpu}: {source}")]
    Pin {
        thread: u64,
        cpu: usize,
        source: std::io::Error,
    },
}

impl EmuRunError {
    /// Whether the error is in what the user asked for (a bad setting or workload) rather than
    /// in the device or the machine.
    pub fn is_input_error(&self) -> bool {
        match self {
            EmuRunError::Host(e) => e.is_input_error(),
            EmuRunError::Plan(_)
            | EmuRunError::Workload(_)
            | EmuRunError::Trace(_)
            | EmuRunError::LatencyTargetMissed { .. } => true,
            EmuRunError::Verify(_) | EmuRunError::ThreadStart(_) | EmuRunError::Pin { .. } => false,
        }
    }
}
