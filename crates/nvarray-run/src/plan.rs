//! The job plan: a workload's jobs as the host threads that run them, the same for both
//! engines. Each fio job becomes `numjobs` threads, all reporting into the job's stream; each
//! thread has its own request generator (seeded by its index within the job), queue depth,
//! bound (a request count or a runtime, `DEFAULT_RUNTIME_NS` when the job gives neither) and
//! think time.

use nvarray_workload::{RequestGen, Verify, Workload, WorkloadError};
use thiserror::Error;

/// Run length when a job gives neither `runtime` nor `number_ios`: simulated time in the
/// simulator, wall-clock time in the emulator.
pub const DEFAULT_RUNTIME_NS: u64 = 100_000_000;

/// One host thread of a run.
pub struct ThreadPlan {
    /// The thread's number in the run, from 0 (the emulator's verify stamps carry it).
    pub index: u64,
    /// The job (and so the report stream) the thread belongs to.
    pub stream: usize,
    pub gen: RequestGen,
    pub iodepth: u32,
    /// Requests the thread issues at most (`u64::MAX` when only time bounds it).
    pub ios: u64,
    /// When the thread stops issuing, from the run's start (`None` when only `ios` bounds it).
    pub runtime_ns: Option<u64>,
    /// Pause between a completion and the next request from its queue slot.
    pub thinktime_ns: u64,
    /// Writes carry self-checking data and reads are checked (`verify=crc32c`).
    pub verify: bool,
}

/// A workload's threads, in job order.
pub struct Plan {
    pub threads: Vec<ThreadPlan>,
    /// The longest runtime of any thread (`None` when every thread is bounded by count): the
    /// run's end when time bounds it.
    pub longest_runtime_ns: Option<u64>,
}

#[derive(Debug, Error)]
pub enum PlanError {
    #[error("the workload has no jobs")]
    NoJobs,
    #[error("job `{job}`: {source}")]
    Job { job: String, source: WorkloadError },
}

impl Plan {
    /// The threads of `workload` on a device of `size_bytes` in blocks of `block_bytes`.
    pub fn new(workload: &Workload, size_bytes: u64, block_bytes: u32) -> Result<Plan, PlanError> {
        if workload.jobs.is_empty() {
            return Err(PlanError::NoJobs);
        }
        let mut threads = Vec::new();
        for (stream, job) in workload.jobs.iter().enumerate() {
            let runtime_ns = match (job.runtime_ns, job.number_ios) {
                (None, None) => Some(DEFAULT_RUNTIME_NS),
                (runtime, _) => runtime,
            };
            for t in 0..job.numjobs {
                let gen = RequestGen::new(job, t, size_bytes, block_bytes).map_err(|source| {
                    PlanError::Job {
                        job: job.name.clone(),
                        source,
                    }
                })?;
                threads.push(ThreadPlan {
                    index: threads.len() as u64,
                    stream,
                    gen,
                    iodepth: job.iodepth,
                    ios: job.number_ios.unwrap_or(u64::MAX),
                    runtime_ns,
                    thinktime_ns: job.thinktime_ns,
                    verify: job.verify != Verify::None,
                });
            }
        }
        let longest_runtime_ns = threads.iter().filter_map(|t| t.runtime_ns).max();
        Ok(Plan {
            threads,
            longest_runtime_ns,
        })
    }

    /// Requests the threads keep in flight at once, summed.
    pub fn outstanding(&self) -> u64 {
        self.threads.iter().map(|t| u64::from(t.iodepth)).sum()
    }

    /// Requests the run issues at most (saturating: `u64::MAX` when time bounds it).
    pub fn ios(&self) -> u64 {
        self.threads
            .iter()
            .map(|t| t.ios)
            .fold(0, u64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvarray_workload::JobSpec;

    fn job(pairs: &[(&str, &str)]) -> JobSpec {
        let mut job = JobSpec::default();
        for (k, v) in pairs {
            job.set(k, v).unwrap();
        }
        job
    }

    #[test]
    fn each_job_becomes_numjobs_threads_of_its_stream_with_its_bounds() {
        let workload = Workload {
            jobs: vec![
                job(&[("name", "a"), ("numjobs", "2"), ("iodepth", "4")]),
                job(&[("name", "b"), ("number_ios", "10"), ("thinktime", "5")]),
                job(&[("name", "c"), ("runtime", "2")]),
            ],
        };
        let plan = Plan::new(&workload, 1 << 20, 512).unwrap();
        let t = &plan.threads;
        assert_eq!(t.len(), 4);
        assert_eq!(
            t.iter().map(|t| (t.index, t.stream)).collect::<Vec<_>>(),
            [(0, 0), (1, 0), (2, 1), (3, 2)]
        );
        assert_eq!(t[0].iodepth, 4);
        assert_eq!(
            t[0].runtime_ns,
            Some(DEFAULT_RUNTIME_NS),
            "neither bound given"
        );
        assert_eq!((t[2].ios, t[2].runtime_ns), (10, None), "a count alone");
        assert_eq!(t[2].thinktime_ns, 5_000, "fio's thinktime is in µs");
        assert_eq!(t[3].runtime_ns, Some(2_000_000_000));
        assert_eq!(plan.longest_runtime_ns, Some(2_000_000_000));
        assert_eq!(plan.outstanding(), 4 + 4 + 1 + 1);
        assert_eq!(plan.ios(), u64::MAX);
    }

    #[test]
    fn no_jobs_is_an_error() {
        let e = Plan::new(&Workload { jobs: vec![] }, 1 << 20, 512)
            .err()
            .unwrap();
        assert!(matches!(e, PlanError::NoJobs));
    }
}
