//! How a job ends under fio's own rules (`nvarray fio`), where nvarray's `bench` runs every
//! job for its `runtime` instead.
//!
//! fio's HOWTO (`time_based`, `runtime`, `size`): a job without `time_based` ends when it
//! has moved its `size` (or `io_size`) once per loop, or at its `runtime` if that comes
//! first; a job with `time_based` and a `runtime` runs for the runtime, wrapping around its
//! region. `time_based` without a runtime makes fio say "time_based requires a
//! runtime/timeout setting" and run the job as if it were not given.

use crate::Workload;

impl Workload {
    /// Gives every generated job fio's rule for how it ends (`JobSpec::ends_by_size`), and
    /// returns a note for each job whose `time_based` fio would ignore for want of a runtime.
    /// A trace's replay keeps its own bounds.
    pub fn end_jobs_as_fio(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.trace.is_some() {
            return notes;
        }
        for job in &mut self.jobs {
            if job.time_based && job.runtime_ns.is_none() {
                notes.push(format!(
                    "job {}: time_based requires a runtime: ignored, as fio does",
                    job.name
                ));
            }
            if !(job.time_based && job.runtime_ns.is_some()) {
                job.ends_by_size = true;
            }
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use crate::{JobSpec, Workload};

    fn job(name: &str, time_based: bool, runtime_ns: Option<u64>) -> JobSpec {
        JobSpec {
            name: name.into(),
            time_based,
            runtime_ns,
            ..JobSpec::default()
        }
    }

    #[test]
    fn only_a_time_based_job_with_a_runtime_runs_for_its_time() {
        let mut w = Workload {
            jobs: vec![
                job("timed", true, Some(1_000_000_000)),
                job("sized", false, None),
                job("sized-or-timed", false, Some(1_000_000_000)),
                job("no-runtime", true, None),
            ],
            trace: None,
        };
        let notes = w.end_jobs_as_fio();
        let ends: Vec<bool> = w.jobs.iter().map(|j| j.ends_by_size).collect();
        assert_eq!(ends, [false, true, true, true]);
        assert_eq!(
            notes,
            ["job no-runtime: time_based requires a runtime: ignored, as fio does"]
        );
    }
}
