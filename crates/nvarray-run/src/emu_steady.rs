//! The emulator's steady-state watches (`control::SteadyWatch`): each watched job's threads
//! add their completions to the job's counters, and the phase's calling thread samples them
//! on the device clock (between its progress updates) and tells the job's threads to stop
//! once the job is steady, as fio's helper thread does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use nvarray_report::StreamStats;
use nvarray_workload::SteadyState;

use crate::control::{SteadyCounts, SteadyWatch};
use crate::plan::ThreadPlan;

/// One watched job's counters, stop flag and watch.
pub(crate) struct JobSteady {
    ios: AtomicU64,
    bytes: AtomicU64,
    latency_sum_ns: AtomicU64,
    stop: AtomicBool,
    spec: SteadyState,
    /// Started at the phase's start; only the calling thread samples it.
    watch: Mutex<Option<SteadyWatch>>,
}

impl JobSteady {
    /// One of the job's requests completed.
    #[inline]
    pub(crate) fn completed(&self, len_bytes: u32, latency_ns: u64) {
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add(u64::from(len_bytes), Ordering::Relaxed);
        self.latency_sum_ns.fetch_add(latency_ns, Ordering::Relaxed);
    }

    /// Whether the job is steady: its threads stop issuing.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn counts(&self) -> SteadyCounts {
        SteadyCounts {
            ios: self.ios.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            latency_sum_ns: self.latency_sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// The watched jobs of a phase, by stream.
pub(crate) struct EmuSteady(Vec<Option<JobSteady>>);

impl EmuSteady {
    /// Watches for the jobs of `threads` (a phase's) that ask for one, among `streams`.
    pub(crate) fn of(threads: &[ThreadPlan], streams: usize) -> EmuSteady {
        let mut jobs: Vec<Option<JobSteady>> = (0..streams).map(|_| None).collect();
        for t in threads {
            if let (Some(spec), None) = (&t.control.steady, &jobs[t.stream]) {
                jobs[t.stream] = Some(JobSteady {
                    ios: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                    latency_sum_ns: AtomicU64::new(0),
                    stop: AtomicBool::new(false),
                    spec: spec.clone(),
                    watch: Mutex::new(None),
                });
            }
        }
        EmuSteady(jobs)
    }

    /// The watch of `stream`'s job, if it has one.
    pub(crate) fn job(&self, stream: usize) -> Option<&JobSteady> {
        self.0.get(stream).and_then(Option::as_ref)
    }

    /// Samples every watched job due by `now_ns` (device clock; the phase started at
    /// `start_ns`), stopping those now steady; how long until the next sample is due.
    pub(crate) fn tick(&self, start_ns: u64, now_ns: u64) -> Option<u64> {
        let mut next_in: Option<u64> = None;
        for job in self.0.iter().flatten() {
            let mut watch = job.watch.lock().expect("only the calling thread samples");
            let watch = watch.get_or_insert_with(|| SteadyWatch::new(&job.spec, start_ns));
            if job.stopped() {
                continue;
            }
            if watch.next_sample_ns() <= now_ns && watch.sample(now_ns, job.counts()) {
                job.stop.store(true, Ordering::Relaxed);
                continue;
            }
            let wait = watch.next_sample_ns().saturating_sub(now_ns);
            next_in = Some(next_in.map_or(wait, |n| n.min(wait)));
        }
        next_in
    }

    /// Writes each watch's findings into its stream.
    pub(crate) fn report_into(self, streams: &mut [StreamStats]) {
        assert_eq!(
            self.0.len(),
            streams.len(),
            "watches for {} streams reported into {}",
            self.0.len(),
            streams.len()
        );
        for (stream, job) in self.0.into_iter().enumerate() {
            let watch = job.and_then(|j| j.watch.into_inner().ok().flatten());
            if let Some(w) = watch {
                streams[stream].control.steadystate = Some(w.report());
            }
        }
    }
}
