//! The job plan: a workload's jobs as the host threads that run them, the same for both
//! engines. Each fio job becomes `numjobs` threads, all reporting into the job's stream; each
//! thread has its own request generator (seeded by its index within the job), queue depth,
//! bound (a request count or a runtime, `DEFAULT_RUNTIME_NS` when the job gives neither) and
//! think time.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufReader;

use nvarray_model::DeviceConfig;

use crate::control::ThreadControl;
use nvarray_report::StreamStats;
use nvarray_workload::trace::{
    refused_job_key, trace_span, AddressMode, Geometry, Loops, Reopen, ReplayMode, TimedRequest,
    TraceError, TraceFeed, TraceSpec,
};
use nvarray_workload::{
    JobSpec, PlacementPicker, RateProcess, Request, RequestGen, Workload, WorkloadError,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
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
    /// The phase the thread runs in (`Workload::phases`): phases run one after another.
    pub phase: usize,
    /// Its job's `ramp_time`: what completes before then, from its phase's start, is not
    /// counted.
    pub ramp_ns: u64,
    pub requests: Requests,
    pub iodepth: u32,
    /// Requests the thread issues at most after its ramp (`number_ios`, which, as in fio,
    /// does not count the ramp's; `u64::MAX` when only time bounds it).
    pub ios: u64,
    /// Bytes the thread moves at most: it stops issuing once it has issued this many
    /// (`io_size`, or the region's size for `runtime=0`; `u64::MAX`: no limit).
    pub io_bytes: u64,
    /// When the thread stops issuing, from its phase's start, its ramp included (`None` when
    /// only `ios` bounds it).
    pub runtime_ns: Option<u64>,
    /// Its job's `thinktime` (the pause after every `thinktime_blocks` requests).
    pub thinktime_ns: u64,
    /// What steers it as it runs: think time policy, latency target, flow, steady state.
    pub control: crate::control::ThreadControl,
    /// Writes carry self-checking data and reads are checked (`verify`): how, if they do.
    pub verify: Option<crate::verify::Verifier>,
    /// Each write's placement handle (`fdp=1`), set by `Plan::place_writes`.
    pub placement: Option<PlacementPicker>,
}

/// Whether a thread whose time ends at `end_ns` issues a request that can go at `goes_ns`:
/// the later of its due time (a paced or timestamped one's) and the moment a queue slot freed
/// for it. Only before the end, as in fio 3.33, which checks the runtime at the top of each
/// round of `do_io` (backend.c), before it takes the next request: one that waited for a
/// slot past the end is never issued, even if it was due before. Both engines ask this (the
/// emulator used to issue such a request, the simulator did not: issue 55); it moves the
/// request count and rates by at most a queue's depth at the end of a timed run, and the
/// paced-lateness counts and the tail latencies by those requests' waits.
pub fn issues_before_end(goes_ns: u64, end_ns: Option<u64>) -> bool {
    end_ns.is_none_or(|end| goes_ns < end)
}

/// Where a thread's requests come from.
// The generator stays inline: the simulator draws from it millions of times per second, and a
// box would add a pointer chase to each.
#[allow(clippy::large_enum_variant)]
pub enum Requests {
    /// Generated from the job (`rw`, `bs`, ...), without end; spaced by the pacer when the
    /// job caps its rate.
    Generated(RequestGen, Option<Pacer>),
    /// Read from a trace, until its end.
    Trace(Box<TraceFeed>),
}

/// A thread's next request, and when it is due (from the run's start) if the trace is replayed
/// at its timestamps.
pub enum Next {
    /// Issue it now (`None`), or at its time (from the start of the thread's phase).
    Request(Request, Option<u64>),
    /// The trace has ended.
    End,
}

impl Requests {
    /// The thread's next request.
    pub fn next_request(&mut self) -> Result<Next, TraceError> {
        match self {
            Requests::Generated(gen, pacer) => {
                let r = gen.next_request();
                Ok(Next::Request(r, pacer.as_mut().map(|p| p.due(r.len_bytes))))
            }
            Requests::Trace(feed) => Ok(match feed.next_request()? {
                None => Next::End,
                Some(TimedRequest { due_ns, request }) => Next::Request(
                    request,
                    (feed.mode() == ReplayMode::Timestamps).then_some(due_ns),
                ),
            }),
        }
    }
}

impl Requests {
    /// Whether the requests are generated at a capped rate (each has its due time).
    pub fn is_paced(&self) -> bool {
        matches!(self, Requests::Generated(_, Some(_)))
    }

    /// Whether every request has a due time: paced, or a trace replayed at its timestamps.
    pub fn is_timed(&self) -> bool {
        match self {
            Requests::Generated(_, pacer) => pacer.is_some(),
            Requests::Trace(feed) => feed.mode() == ReplayMode::Timestamps,
        }
    }

    /// How far through its requests the thread is (0.0 to 1.0), when that is known: a trace
    /// of known length.
    pub fn fraction_done(&self) -> Option<f64> {
        match self {
            Requests::Generated(..) => None,
            Requests::Trace(feed) => feed.fraction_read(),
        }
    }
}

/// Spaces a rate-capped thread's requests (fio's `rate_iops`, `rate`, `rate_process`): each
/// request is due a gap after the one before, the longer of 1 / `rate_iops` and its length /
/// `rate`; with `poisson` the gap is drawn from an exponential distribution of that mean. The
/// engines issue each request at its due time and measure its latency from there, as for a
/// trace replayed at its timestamps: a device that cannot keep the rate shows queueing.
pub struct Pacer {
    iops: Option<u64>,
    bytes_per_s: Option<u64>,
    poisson: Option<SmallRng>,
    next_due_ns: f64,
}

impl Pacer {
    /// The pacer of `job`'s thread `thread` (`None` when the job caps no rate).
    pub fn new(job: &JobSpec, thread: u32) -> Option<Pacer> {
        if job.rate_iops.is_none() && job.rate_bytes_per_s.is_none() {
            return None;
        }
        // Its own stream, so pacing does not change the offsets the generator draws.
        let seed = job.randseed ^ 0x5ace_da7e ^ (u64::from(thread) << 32);
        Some(Pacer {
            iops: job.rate_iops,
            bytes_per_s: job.rate_bytes_per_s,
            poisson: (job.rate_process == RateProcess::Poisson)
                .then(|| SmallRng::seed_from_u64(seed)),
            next_due_ns: 0.0,
        })
    }

    /// When a request of `len_bytes` is due, from the run's start.
    pub fn due(&mut self, len_bytes: u32) -> u64 {
        let due = self.next_due_ns;
        let mut gap = 0f64;
        if let Some(iops) = self.iops {
            gap = gap.max(1e9 / iops as f64);
        }
        if let Some(rate) = self.bytes_per_s {
            gap = gap.max(f64::from(len_bytes) * 1e9 / rate as f64);
        }
        if let Some(rng) = &mut self.poisson {
            // Inverse transform: -ln(1 - U) is exponential of mean 1, U uniform in [0, 1).
            let u: f64 = rng.gen();
            gap *= -(1.0 - u).ln();
        }
        self.next_due_ns += gap;
        due as u64
    }
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
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("a trace replays on one thread: numjobs={numjobs} with --trace (use iodepth for concurrency)")]
    TraceThreads { numjobs: u32 },
    #[error("{key} cannot be used with --trace: {why}")]
    TraceKey {
        key: &'static str,
        why: &'static str,
    },
    #[error(
        "time_based with --trace replays the trace over and over until the runtime: give \
         --runtime (or --loops N for N passes)"
    )]
    TraceTimeBasedWithoutRuntime,
    #[error("job `{job}`: {why}")]
    Placement { job: String, why: String },
}

/// When `job`'s threads stop issuing, from their phase's start, their ramp included
/// (`None`: only a count bounds them); `DEFAULT_RUNTIME_NS` when nothing else bounds them.
/// `trace`: the run replays a trace.
fn runtime_of(job: &JobSpec, trace: bool) -> Option<u64> {
    // A trace ends on its own; a job that ends by size needs no time limit.
    let bounded =
        job.number_ios.is_some() || job.io_size_bytes.is_some() || trace || job.ends_by_size;
    let runtime_ns = match job.runtime_ns {
        None if !bounded => Some(DEFAULT_RUNTIME_NS),
        runtime => runtime,
    };
    let loops = u64::from(job.loops);
    // fio's `ramp_time` comes first; the runtime is measured after it.
    runtime_ns.map(|r| r.saturating_mul(loops).saturating_add(job.ramp_time_ns))
}

/// Refuses what a job replaying a trace cannot do: several threads, a key the replay would
/// not use, `time_based` without a runtime.
fn check_trace_job(job: &JobSpec) -> Result<(), PlanError> {
    if job.numjobs != 1 {
        return Err(PlanError::TraceThreads {
            numjobs: job.numjobs,
        });
    }
    // A key the replay would not use is refused, never silently ignored.
    if let Some((key, why)) = refused_job_key(job) {
        return Err(PlanError::TraceKey { key, why });
    }
    if job.time_based && job.runtime_ns.is_none() {
        return Err(PlanError::TraceTimeBasedWithoutRuntime);
    }
    Ok(())
}

/// `job` as its thread `t` runs it: with fio's `offset_increment`, its region further on.
fn thread_job(job: &JobSpec, t: u32) -> Cow<'_, JobSpec> {
    if job.offset_increment_bytes == 0 {
        return Cow::Borrowed(job);
    }
    let mut own = job.clone();
    own.offset_bytes = u64::from(t)
        .checked_mul(job.offset_increment_bytes)
        .and_then(|d| d.checked_add(job.offset_bytes))
        .unwrap_or(u64::MAX);
    Cow::Owned(own)
}

/// Where thread `t` of `job` takes its requests: the `trace`, opened for it, or a generator
/// of its own on a device of `geometry`.
fn requests_of(
    trace: Option<&TraceSpec>,
    job: &JobSpec,
    t: u32,
    geometry: Geometry,
) -> Result<Requests, PlanError> {
    Ok(match trace {
        Some(spec) => Requests::Trace(Box::new(open_trace(spec, geometry, Loops::of(job))?)),
        None => Requests::Generated(
            RequestGen::new(job, t, geometry.capacity_bytes, geometry.block_bytes).map_err(
                |source| PlanError::Job {
                    job: job.name.clone(),
                    source,
                },
            )?,
            Pacer::new(job, t),
        ),
    })
}

impl Plan {
    /// The threads of `workload` on a device of `geometry` (a trace is opened here, and read
    /// once first for `--trace-address scale`).
    pub fn new(workload: &Workload, geometry: Geometry) -> Result<Plan, PlanError> {
        if workload.jobs.is_empty() {
            return Err(PlanError::NoJobs);
        }
        let mut threads = Vec::new();
        let (phases, groups, exits) = (workload.phases(), workload.groups(), workload.exits());
        for (stream, job) in workload.jobs.iter().enumerate() {
            let runtime_ns = runtime_of(job, workload.trace.is_some());
            if workload.trace.is_some() {
                check_trace_job(job)?;
            }
            let loops = u64::from(job.loops);
            for t in 0..job.numjobs {
                let own = thread_job(job, t);
                let job: &JobSpec = &own;
                let requests = requests_of(workload.trace.as_ref(), job, t, geometry)?;
                let mut control = ThreadControl::of(job);
                control.exit = exits.then_some((job.exit_what, groups[stream]));
                let io_bytes = io_bytes_of(job, &requests, &control, loops);
                threads.push(ThreadPlan {
                    index: threads.len() as u64,
                    stream,
                    phase: phases[stream],
                    ramp_ns: job.ramp_time_ns,
                    requests,
                    iodepth: job.iodepth,
                    ios: job.number_ios.map_or(u64::MAX, |n| n.saturating_mul(loops)),
                    io_bytes,
                    runtime_ns,
                    thinktime_ns: job.thinktime_ns,
                    control,
                    verify: crate::verify::Verifier::of_job(job),
                    placement: None,
                });
            }
        }
        let numjobs: u64 = workload.jobs.iter().map(|j| u64::from(j.numjobs)).sum();
        assert_eq!(
            threads.len() as u64,
            numjobs,
            "{} threads planned for jobs of {numjobs} threads in all",
            threads.len()
        );
        let longest_runtime_ns = threads.iter().filter_map(|t| t.runtime_ns).max();
        Ok(Plan {
            threads,
            longest_runtime_ns,
        })
    }

    /// Gives every thread of a job with `fdp=1` the placement handles of its writes, on
    /// `device` (the handles of its FTL, on an NVMe device: the command that carries one).
    pub fn place_writes(
        &mut self,
        workload: &Workload,
        device: &DeviceConfig,
    ) -> Result<(), PlanError> {
        let nvme = device.interface.protocol == nvarray_model::Protocol::Nvme;
        let handles = if device.ftl.enabled && nvme {
            device.ftl.placement_handles
        } else {
            0
        };
        for t in &mut self.threads {
            let job = &workload.jobs[t.stream];
            let seed = job.randseed ^ t.index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            t.placement =
                PlacementPicker::new(&job.data_placement, handles, seed).map_err(|why| {
                    PlanError::Placement {
                        job: job.name.clone(),
                        why,
                    }
                })?;
        }
        Ok(())
    }

    /// The threads of the plan (one phase's, which run side by side) join their flows.
    pub(crate) fn join_flows(&mut self) {
        let mut flows = crate::control::FlowGroups::default();
        for t in &mut self.threads {
            if let Some((id, weight, _)) = t.control.flow {
                t.control.flow_member = Some(flows.join(id, weight));
            }
        }
    }

    /// The plan's phases, in order: the threads of each, which run side by side once the
    /// phase before has finished.
    pub fn into_phases(self) -> Vec<Plan> {
        let count = self.threads.iter().map(|t| t.phase + 1).max().unwrap_or(0);
        let mut phases: Vec<Vec<ThreadPlan>> = (0..count).map(|_| Vec::new()).collect();
        for t in self.threads {
            phases[t.phase].push(t);
        }
        phases
            .into_iter()
            .map(|threads| Plan {
                longest_runtime_ns: threads.iter().filter_map(|t| t.runtime_ns).max(),
                threads,
            })
            .collect()
    }

    /// The longest `ramp_time` of the plan's threads: the part of its time not measured.
    pub fn ramp_ns(&self) -> u64 {
        self.threads.iter().map(|t| t.ramp_ns).max().unwrap_or(0)
    }

    /// Requests the threads keep in flight at once, summed.
    pub fn outstanding(&self) -> u64 {
        self.threads.iter().map(|t| u64::from(t.iodepth)).sum()
    }

    /// Bytes the run moves at most (saturating: `u64::MAX` when nothing but time or a count
    /// bounds it).
    pub fn io_bytes(&self) -> u64 {
        self.threads
            .iter()
            .map(|t| t.io_bytes)
            .fold(0, u64::saturating_add)
    }

    /// Requests the run issues at most (saturating: `u64::MAX` when time bounds it).
    pub fn ios(&self) -> u64 {
        self.threads
            .iter()
            .map(|t| t.ios)
            .fold(0, u64::saturating_add)
    }
}

/// The bytes a thread of `job` moves at most: its `io_size`, or for a job that ends by
/// size its region, once per loop (`u64::MAX`: no limit). fio gives a writing job that reads
/// back as it goes (`verify_backlog`) room for the reads: its size once more (backend.c's
/// `total_bytes`).
fn io_bytes_of(job: &JobSpec, requests: &Requests, control: &ThreadControl, loops: u64) -> u64 {
    let io_bytes = match (requests, job.io_size_bytes) {
        (_, Some(bytes)) => bytes.saturating_mul(loops),
        // fio's job without a time limit moves its region once per loop.
        (Requests::Generated(gen, _), None) if job.ends_by_size => {
            gen.region_len_bytes().saturating_mul(loops)
        }
        _ => u64::MAX,
    };
    if control.backlog.is_some() && job.read_fraction() < 1.0 {
        io_bytes.saturating_mul(2)
    } else {
        io_bytes
    }
}

/// One report stream per job of `workload`, each placed in its phase and reporting group.
pub fn job_streams(workload: &Workload) -> Vec<StreamStats> {
    let (phases, groups) = (workload.phases(), workload.groups());
    workload
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| StreamStats::new(&j.name).placed(phases[i], groups[i]))
        .collect()
}

/// Opens the trace `spec` names for a replay on `geometry`, `loops` times over.
pub fn open_trace(
    spec: &TraceSpec,
    geometry: Geometry,
    loops: Loops,
) -> Result<TraceFeed, TraceError> {
    let name = spec.path.display().to_string();
    let path = spec.path.clone();
    let open = move || -> Result<Box<dyn std::io::BufRead + Send>, TraceError> {
        let file = File::open(&path).map_err(|e| TraceError::Read {
            trace: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
    };
    // A pipe (`--trace /dev/stdin`) or a device can be read only once: a second reading would
    // find it empty and replay nothing.
    let regular = std::fs::metadata(&spec.path).map(|m| m.is_file());
    if let Ok(false) = regular {
        let reads_twice = if spec.address == AddressMode::Scale {
            Some("--trace-address scale reads it once for its span before replaying it")
        } else if loops.repeats() {
            Some("--loops (or --time_based) reads it again for each pass")
        } else {
            None
        };
        if let Some(why) = reads_twice {
            return Err(TraceError::Setup(format!(
                "--trace {name} is not a regular file (a pipe?) and can be read only once, \
                 but {why}: save the trace to a file first"
            )));
        }
    }
    let span_bytes = match spec.address {
        AddressMode::Scale => trace_span(&name, open()?, spec)?,
        AddressMode::Wrap => 0,
    };
    let mut feed = TraceFeed::new(&name, open()?, spec, geometry, span_bytes)?;
    if loops.repeats() {
        let reopen: Reopen = Box::new(open);
        feed = feed.with_loops(loops, reopen);
    }
    if let Ok(meta) = std::fs::metadata(&spec.path) {
        if meta.is_file() {
            feed.set_len_bytes(meta.len());
        }
    }
    Ok(feed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(capacity_bytes: u64, block_bytes: u32) -> Geometry {
        Geometry {
            capacity_bytes,
            block_bytes,
            max_transfer_bytes: 128 << 10,
        }
    }

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
            trace: None,
        };
        let plan = Plan::new(&workload, geometry(1 << 20, 512)).unwrap();
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
        let e = Plan::new(
            &Workload {
                jobs: vec![],
                trace: None,
            },
            geometry(1 << 20, 512),
        )
        .err()
        .unwrap();
        assert!(matches!(e, PlanError::NoJobs));
    }
}
