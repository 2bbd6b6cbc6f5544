use nvarray_model::CommandError;
use nvarray_workload::WorkloadError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SimError {
    #[error("the workload has no jobs")]
    NoJobs,
    #[error("{0}")]
    InvalidWorkload(WorkloadError),
    #[error("job `{job}`: {source}")]
    Workload { job: String, source: WorkloadError },
    #[error(
        "{outstanding} requests outstanding (iodepth x numjobs summed over jobs); at most {max}"
    )]
    TooManyOutstanding { outstanding: u64, max: u64 },
    #[error("device refused a generated request: {0}")]
    Command(CommandError),
}
