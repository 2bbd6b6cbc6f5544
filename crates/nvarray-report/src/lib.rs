//! `nvarray-report`: the result of a run, in the shape every engine reports (human table and JSON).
//!
//! The simulator and the emulator fill the same types, so `nvarray sim`, `nvarray bench
//! --engine sim` and `nvarray bench --engine emu` print the same table and JSON fields. It also
//! owns the one measurement both engines take the same way, the process's CPU time
//! (`process_cpu_seconds`); it never runs anything itself.

use hdrhistogram::Histogram;
use nvarray_histogram::{shifted_quantile, NsHistogram};
pub use nvarray_model::Verdict;
use nvarray_model::{Breakdown, Component};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// Latency percentiles in nanoseconds, from an HDR histogram (3 significant digits), with the
/// exact minimum and maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub mean: f64,
    /// Standard deviation (population), exact from the recorded values.
    pub stdev: f64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub p99999: u64,
    pub max: u64,
}

impl LatencySummary {
    /// The summary of the values recorded in `h`, whose exact least and greatest were
    /// `min_ns` and `max_ns`. A histogram answers with the top of the bucket a value fell in
    /// (3,001 for a run of requests that all took 3,000 ns); percentiles are kept inside the
    /// exact range, so no figure is outside what was measured. Values are recorded in `h`
    /// one higher than they were, so that 0 keeps its own bucket.
    pub fn from_histogram(h: &Histogram<u64>, min_ns: u64, max_ns: u64) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        // Values are recorded one higher (the histogram's least value is 1; see `count`).
        let at = |q: f64| shifted_quantile(h, q, min_ns, max_ns);
        LatencySummary {
            mean: h.mean(),
            stdev: h.stdev(),
            min: min_ns,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            p99999: at(0.99999),
            max: max_ns,
        }
    }
}

/// Throughput and latency of a set of requests (one stream, or all of them).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub iops: f64,
    pub read_bandwidth_bytes_per_s: f64,
    pub write_bandwidth_bytes_per_s: f64,
    pub latency_ns: LatencySummary,
    /// Mean nanoseconds per request in each component; they add up to `latency_ns.mean`.
    pub breakdown_ns: BreakdownNs,
    /// The reads alone and the writes alone (a direction without requests has zeros).
    pub read: DirectionTotals,
    pub write: DirectionTotals,
    /// How deep the host's queues were and how it handed requests over and collected them
    /// (absent where nobody counted: a front end's clients).
    #[serde(skip_serializing_if = "IoDepths::is_empty")]
    pub io_depths: IoDepths,
}

/// fio's I/O depth distributions (its `IO depths`, `submit` and `complete` lines, and
/// `iodepth_level`, `iodepth_submit`, `iodepth_complete` in its JSON), as counts per bucket.
/// Both engines count them as fio does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct IoDepths {
    /// Requests by how many of their thread's were in flight once each was issued (itself
    /// included), in fio's buckets: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64 and more
    /// ([`IoDepths::LEVEL_LABELS`]).
    pub at_issue: [u64; 7],
    /// Calls that handed requests to the device, by how many each handed: 0, 1-4, 5-8, 9-16,
    /// 17-32, 33-64, more ([`IoDepths::BATCH_LABELS`]). nvarray issues one at a time.
    pub submitted: [u64; 7],
    /// Calls that collected completions, by how many each collected (same buckets): the
    /// simulator's host takes each completion alone; the emulator's thread takes what it
    /// finds when it looks.
    pub completed: [u64; 7],
}

impl IoDepths {
    /// fio's labels of the `at_issue` buckets.
    pub const LEVEL_LABELS: [&'static str; 7] = ["1", "2", "4", "8", "16", "32", ">=64"];
    /// fio's labels of the `submitted` and `completed` buckets.
    pub const BATCH_LABELS: [&'static str; 7] = ["0", "4", "8", "16", "32", "64", ">=64"];

    /// A request issued with `depth` of its thread's in flight (itself included), handed over
    /// alone.
    pub fn record_issue(&mut self, depth: u32) {
        let level = match depth {
            0 | 1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            16..=31 => 4,
            32..=63 => 5,
            _ => 6,
        };
        self.at_issue[level] += 1;
        self.submitted[Self::batch(1)] += 1;
    }

    /// A look for completions that collected `count`.
    pub fn record_collected(&mut self, count: usize) {
        self.completed[Self::batch(count)] += 1;
    }

    fn batch(count: usize) -> usize {
        match count {
            0 => 0,
            1..=4 => 1,
            5..=8 => 2,
            9..=16 => 3,
            17..=32 => 4,
            33..=64 => 5,
            _ => 6,
        }
    }

    pub fn merge(&mut self, other: &IoDepths) {
        for (mine, theirs) in [
            (&mut self.at_issue, &other.at_issue),
            (&mut self.submitted, &other.submitted),
            (&mut self.completed, &other.completed),
        ] {
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == IoDepths::default()
    }

    /// Each bucket's share of its counts in percent, as fio prints them (all 0 when empty).
    pub fn percents(counts: &[u64; 7]) -> [f64; 7] {
        let all: u64 = counts.iter().sum();
        counts.map(|c| {
            if all == 0 {
                0.0
            } else {
                100.0 * c as f64 / all as f64
            }
        })
    }
}

/// Throughput and latency of the requests of one direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DirectionTotals {
    pub requests: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bandwidth_bytes_per_s: f64,
    pub latency_ns: LatencySummary,
    /// The latencies themselves, for any percentile and for fio's json+ bins (not in the
    /// JSON: `latency_ns` summarises them).
    #[serde(skip)]
    pub histogram: Option<std::sync::Arc<Histogram<u64>>>,
}

impl DirectionTotals {
    /// The latency below which `percent` % of the requests completed, in ns (0 without
    /// requests), kept inside the exact least and greatest as `LatencySummary` does.
    pub fn percentile_ns(&self, percent: f64) -> u64 {
        match &self.histogram {
            Some(h) if !h.is_empty() => {
                let l = &self.latency_ns;
                shifted_quantile(h, percent / 100.0, l.min, l.max)
            }
            _ => 0,
        }
    }

    /// Every latency bucket that holds requests: (its latency in ns, how many), ascending.
    /// A bucket is 3 significant digits wide; its latency is the bucket's highest value,
    /// kept inside the exact least and greatest.
    pub fn bins(&self) -> Vec<(u64, u64)> {
        let Some(h) = &self.histogram else {
            return Vec::new();
        };
        let l = &self.latency_ns;
        h.iter_recorded()
            .map(|v| {
                (
                    (v.value_iterated_to() - 1).clamp(l.min, l.max),
                    v.count_at_value(),
                )
            })
            .collect()
    }

    /// Requests whose latency was above `low_ns` (from 0 included when `low_ns` is 0) and at
    /// most `high_ns`, as a share of all, at the histogram's 3 significant digits.
    pub fn share_between(&self, low_ns: u64, high_ns: u64) -> f64 {
        match &self.histogram {
            Some(h) if !h.is_empty() && high_ns > low_ns => {
                // Recorded one higher; `count_between` takes both ends.
                let from = if low_ns == 0 { 1 } else { low_ns + 2 };
                let n = h.count_between(from, high_ns + 1);
                n as f64 / h.len() as f64
            }
            _ => 0.0,
        }
    }
}

/// One direction's latencies as a stream records them.
#[derive(Clone, Debug)]
struct DirectionStats {
    /// Each latency plus 1 ns.
    histogram: NsHistogram,
    /// The exact least and greatest latency recorded (the histogram's are bucketed), and the
    /// exact sum and sum of squares, for the mean and the standard deviation.
    min_ns: u64,
    max_ns: u64,
    sum_ns: u128,
    sum_sq_ns: u128,
    requests: u64,
    bytes: u64,
}

impl DirectionStats {
    fn new() -> Self {
        DirectionStats {
            // 1 ns to one hour at 3 significant digits.
            histogram: NsHistogram::new(),
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0,
            sum_sq_ns: 0,
            requests: 0,
            bytes: 0,
        }
    }

    #[inline]
    fn count(&mut self, len_bytes: u32, latency_ns: u64) {
        // One higher, so a request of 0 ns (the null device) is not counted as 1 ns.
        self.histogram.record(latency_ns + 1);
        self.min_ns = self.min_ns.min(latency_ns);
        self.max_ns = self.max_ns.max(latency_ns);
        self.sum_ns += u128::from(latency_ns);
        self.sum_sq_ns += u128::from(latency_ns) * u128::from(latency_ns);
        self.requests += 1;
        self.bytes += u64::from(len_bytes);
    }

    fn merge(&mut self, other: &DirectionStats) {
        self.histogram.add(&other.histogram);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns += other.sum_sq_ns;
        self.requests += other.requests;
        self.bytes += other.bytes;
    }

    /// The latency summary, with the exact mean and standard deviation; `histogram` is
    /// `self.histogram`'s (`NsHistogram::to_histogram`).
    fn latency(&self, histogram: &Histogram<u64>) -> LatencySummary {
        if self.requests == 0 {
            return LatencySummary::default();
        }
        let n = self.requests as f64;
        let mean = self.sum_ns as f64 / n;
        let variance = (self.sum_sq_ns as f64 / n - mean * mean).max(0.0);
        LatencySummary {
            mean,
            stdev: variance.sqrt(),
            ..LatencySummary::from_histogram(histogram, self.min_ns, self.max_ns)
        }
    }

    fn totals(&self, seconds: f64) -> DirectionTotals {
        let histogram = self.histogram.to_histogram();
        DirectionTotals {
            requests: self.requests,
            bytes: self.bytes,
            iops: self.requests as f64 / seconds,
            bandwidth_bytes_per_s: self.bytes as f64 / seconds,
            latency_ns: self.latency(&histogram),
            histogram: (self.requests > 0).then(|| std::sync::Arc::new(histogram)),
        }
    }
}

/// Mean nanoseconds per component, in the order of `Component::ALL` (the path of a request).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BreakdownNs(pub Vec<(&'static str, f64)>);

impl Serialize for BreakdownNs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// One stream: a job-file section (or the command-line job).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamReport {
    pub name: String,
    /// The job's reporting group (fio's `groupid`: a new one at each `stonewall`, `wait_for`
    /// or `new_group`), from 0.
    pub group: usize,
    #[serde(flatten)]
    pub totals: Totals,
}

/// One reporting group: its jobs' requests together, rates over the longest of their times
/// (the jobs of a group run side by side). Reported when a workload has more than one.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupReport {
    pub group: usize,
    /// The jobs in the group, in job-file order.
    pub jobs: Vec<String>,
    #[serde(flatten)]
    pub totals: Totals,
}

/// Fraction of time each resource was busy (for pools: mean over its members).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Utilisation {
    pub link_to_device: f64,
    pub link_to_host: f64,
    pub controller: f64,
    pub ring: f64,
    pub banks: f64,
    pub buffers: f64,
    pub tags: f64,
    /// Each direction of the network's wire, for a remote device (`[fabric]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fabric_to_device: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fabric_to_host: Option<f64>,
    /// The remote CPU's cores, on a TCP fabric.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_cpu: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WearReport {
    pub line_writes_max: u64,
    pub line_writes_mean: f64,
    pub gap_moves: u64,
}

/// Everything one run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunReport {
    pub engine: &'static str,
    pub device: String,
    /// Time the measurement covers (virtual time for the simulator), which rates and
    /// utilisation are divided by. For a server it is the active time (`BusyClock`: for
    /// `serve`, each connection from its first request to its close; for `mount`, requests in
    /// flight; and the short gaps between them); `uptime_ns` is then the whole time it ran.
    pub elapsed_ns: u64,
    /// A server's whole running time, idle included (absent for a benchmark run, whose
    /// elapsed time is its running time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uptime_ns: Option<u64>,
    #[serde(flatten)]
    pub totals: Totals,
    pub utilisation: Utilisation,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wear: Option<WearReport>,
    pub erases: u64,
    pub streams: Vec<StreamReport>,
    /// Each reporting group, when there is more than one (`stonewall`, `wait_for`,
    /// `new_group`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupReport>,
    /// CPU time (user + system) per GB (1e9 bytes) read or written: what the host software,
    /// and for the emulator the device threads too, cost per byte moved. The emulator and the
    /// servers count the whole process; the simulator counts the thread that simulated.
    pub cpu_seconds_per_gb: f64,
    /// How late completions were posted against their modelled time (0 for the simulator,
    /// whose virtual clock is exact).
    pub lateness_ns: LatenessNs,
    /// Whether the timing the run reports is the model's, in three words: `faithful`;
    /// `machine-limited` (late only where the machine paused the emulator's threads: the
    /// figures hold those pauses); `not-faithful` (the emulator itself fell behind its model,
    /// or the run measured too little). `unfaithful_reason` says why when not faithful.
    pub verdict: Verdict,
    /// `verdict` is `faithful` (kept for scripts that read only this).
    pub faithful: bool,
    pub unfaithful_reason: Option<String>,
    /// The machine's own jitter, measured in the same run by the emulator's spinning threads
    /// (`MachineJitterNs`); absent for the simulator, and when no thread ever spun idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_jitter_ns: Option<MachineJitterNs>,
    /// How the emulator and its host side were set up (absent for the simulator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator: Option<EmulatorSetup>,
    /// Requests of rate-capped jobs (fio's `rate`, `rate_iops`) issued after their due time:
    /// every queue slot was taken, so their latency holds the wait. Absent when no job caps
    /// its rate (a trace's are in `trace.issued_late`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paced_issued_late: Option<u64>,
    /// How late the emulator's host threads issued timed requests after they could have gone
    /// (absent for the simulator, whose clock is exact, and for runs with none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issue_lateness_ns: Option<IssueLatenessNs>,
    /// The replayed trace's own summary and what the replay did to it (absent without
    /// `--trace`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<nvarray_workload::trace::TraceReport>,
}

/// The emulator's host-side setup of a run, and what verification saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EmulatorSetup {
    /// Threads that ran the device; 0 means inline, on the host threads.
    pub device_threads: usize,
    /// How the device's work was split among threads, in words.
    pub work_split: String,
    /// The device's serial part per command, in nanoseconds: the time the timing model's lock
    /// was held (the model and the hand-off to and from it) over the commands handed to it.
    /// No number of threads runs it in parallel: 1e9 / this is the device's ceiling in
    /// commands per second for this workload (per command it falls at deeper queues, where a
    /// visit to the model carries a batch). Absent when no command reached the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial_ns_per_command: Option<f64>,
    /// The pages behind the device's bytes: "1 GiB huge pages", "2 MiB huge pages",
    /// "transparent huge pages" or "page cache".
    pub backing_pages: &'static str,
    /// The host software stack (`--stack`) and completion mode (`--completion`).
    pub stack: &'static str,
    pub completion: &'static str,
    /// Blocks read back that held data this run wrote and passed `verify` (0 without verify).
    pub verified_blocks: u64,
    /// The CPUs `--cpus` pinned the device threads and the host threads to, one per thread
    /// in order (empty: not pinned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_cpus: Vec<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_cpus: Vec<usize>,
    /// The host threads that ran requests (0 where the caller does not count them) and the
    /// cores the process could run on: more spinning threads than cores take turns.
    pub host_threads: usize,
    pub cores: usize,
}

/// Completion posting time minus its modelled deadline, in nanoseconds: of every completion,
/// then whose it was. A completion is machine-late when its deadline fell while the machine
/// paused the thread serving it (`nvarray_emu::pauses`); the others' lateness is the
/// emulator's own (`own_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatenessNs {
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    pub completions: u64,
    pub machine_late: u64,
    /// `machine_late` in percent of `completions` (0 without completions).
    pub machine_late_percent: f64,
    pub own_mean: f64,
    pub own_p50: u64,
    pub own_p99: u64,
    pub own_max: u64,
}

/// How late a spinning thread of this machine notices an instant, in nanoseconds: for instants
/// sampled every microsecond while the emulator's threads spun idle, the time to the thread's
/// next clock reading. Interrupts, the scheduler and the hypervisor make it; the emulator's
/// code does not (see `nvarray_emu::JitterReport`). A latency or lateness tail as long as this
/// one is the machine's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct MachineJitterNs {
    pub p50: u64,
    pub p99: u64,
    pub p9999: u64,
    pub max: u64,
    /// Instants sampled, and the idle spinning they were sampled from.
    pub samples: u64,
    pub observed_ns: u64,
}

/// How late the emulator's host threads issued timed requests (a paced job's, a timestamped
/// trace's), in nanoseconds after each could have gone: its due time, or the moment a queue
/// slot freed when every slot was taken then. This is the host thread's own delay (a sleep the
/// kernel ended late, a thread the machine paused or kept busy), never the device's, so it is
/// left out of the requests' latency and held to the lateness bound on its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct IssueLatenessNs {
    /// Timed requests issued.
    pub requests: u64,
    /// Those issued more than `ISSUED_LATE_NS` after they could have gone.
    pub late: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    /// Those whose time came while the machine paused the thread (a sleep the kernel ended
    /// late, a gap in its spinning), and the p99 of the others': the thread's own.
    pub machine_late: u64,
    pub own_p99: u64,
}

/// A timed request issued more than this after it could have gone counts as issued late.
pub const ISSUED_LATE_NS: u64 = 1_000;

/// The issue delays of one thread's timed requests, merged into an [`IssueLatenessNs`].
#[derive(Clone, Debug)]
pub struct IssueDelays {
    /// Each delay plus 1 ns (the histogram's least value is 1; on time is 0 late), of all
    /// and of those not machine-late.
    histogram: NsHistogram,
    own: NsHistogram,
    max_ns: u64,
    late: u64,
}

impl Default for IssueDelays {
    fn default() -> Self {
        IssueDelays {
            histogram: NsHistogram::new(),
            own: NsHistogram::new(),
            max_ns: 0,
            late: 0,
        }
    }
}

impl IssueDelays {
    /// One timed request, issued `delay_ns` after it could have gone; `machine_late`: its
    /// time came while the machine paused the thread.
    pub fn record(&mut self, delay_ns: u64, machine_late: bool) {
        self.histogram.record(delay_ns.saturating_add(1));
        if !machine_late {
            self.own.record(delay_ns.saturating_add(1));
        }
        self.max_ns = self.max_ns.max(delay_ns);
        self.late += u64::from(delay_ns > ISSUED_LATE_NS);
    }

    pub fn merge(&mut self, other: &IssueDelays) {
        for (mine, theirs) in [
            (&mut self.histogram, &other.histogram),
            (&mut self.own, &other.own),
        ] {
            mine.add(theirs);
        }
        self.max_ns = self.max_ns.max(other.max_ns);
        self.late += other.late;
    }

    /// The summary, or `None` when no timed request was issued.
    pub fn summary(&self) -> Option<IssueLatenessNs> {
        if self.histogram.is_empty() {
            return None;
        }
        let [p50, p99] = self
            .histogram
            .shifted_quantiles([0.50, 0.99], 0, self.max_ns);
        let [own_p99] = self.own.shifted_quantiles([0.99], 0, self.max_ns);
        Some(IssueLatenessNs {
            requests: self.histogram.len(),
            late: self.late,
            p50,
            p99,
            max: self.max_ns,
            machine_late: self.histogram.len() - self.own.len(),
            own_p99,
        })
    }
}

/// CPU seconds (user + system) this process has used so far, every thread included.
pub fn process_cpu_seconds() -> f64 {
    rusage_cpu_seconds(libc::RUSAGE_SELF)
}

/// CPU time (user + system) of the calling thread, in seconds: what one simulation cost when
/// others run beside it in the same process (a parallel sweep).
pub fn thread_cpu_seconds() -> f64 {
    rusage_cpu_seconds(libc::RUSAGE_THREAD)
}

fn rusage_cpu_seconds(who: libc::c_int) -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `usage` is a valid, writable `rusage`; RUSAGE_SELF and RUSAGE_THREAD cannot fail
    // with a valid pointer, and the result is checked before the value is read.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage({who}) failed");
    // SAFETY: getrusage returned 0, so it filled `usage`.
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CPU seconds per GB (1e9 bytes) moved; 0 when nothing moved (no division by zero).
pub fn cpu_seconds_per_gb(cpu_seconds: f64, bytes: u64) -> f64 {
    if bytes == 0 {
        return 0.0;
    }
    cpu_seconds / (bytes as f64 / 1e9)
}

/// A client's time between its requests (its own software, the network) that is still part
/// of its rate: a gap shorter than this between two requests in flight counts as active,
/// longer ones (idle time between programs) do not.
pub const ACTIVE_GAP_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// A server's active time: time with at least one interval begun and not yet ended (a
/// request in flight; for `serve`, a connection's session from its first request to its
/// close), over any number of threads, plus the gaps shorter than `gap_max` between them. A server's rates are divided
/// by it, so idle time between clients does not dilute them (a server up 10 s that served
/// fio for 3 s reports fio's rate, not a third of it), while the client's own time between
/// requests still counts, as it does in the client's measurement.
#[derive(Debug)]
pub struct BusyClock {
    gap_max: std::time::Duration,
    state: std::sync::Mutex<BusyState>,
}

#[derive(Debug, Default)]
struct BusyState {
    in_flight: u64,
    /// When `in_flight` last rose from 0.
    since: Option<std::time::Instant>,
    /// When `in_flight` last fell to 0.
    last_end: Option<std::time::Instant>,
    /// Active intervals that have ended.
    ended_ns: u64,
}

impl Default for BusyClock {
    fn default() -> Self {
        Self::with_gap_max(ACTIVE_GAP_MAX)
    }
}

impl BusyClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock that bridges gaps up to `gap_max` (zero: strictly the time requests were in
    /// flight).
    pub fn with_gap_max(gap_max: std::time::Duration) -> Self {
        BusyClock {
            gap_max,
            state: std::sync::Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BusyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request has started.
    pub fn begin(&self) {
        self.begin_at(std::time::Instant::now());
    }

    /// A request started at `now` (for callers that timed it already).
    pub fn begin_at(&self, now: std::time::Instant) {
        let mut s = self.state();
        if s.in_flight == 0 {
            if let Some(end) = s.last_end {
                let gap = now.saturating_duration_since(end);
                if gap <= self.gap_max {
                    s.ended_ns += gap.as_nanos() as u64;
                }
            }
            s.since = Some(now);
        }
        s.in_flight += 1;
    }

    /// A request begun with `begin` has ended (answered, failed or abandoned).
    pub fn end(&self) {
        let mut s = self.state();
        debug_assert!(s.in_flight > 0, "end without begin");
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            let now = std::time::Instant::now();
            if let Some(since) = s.since.take() {
                s.ended_ns += now.duration_since(since).as_nanos() as u64;
            }
            s.last_end = Some(now);
        }
    }

    /// Active nanoseconds so far, the interval under way included.
    pub fn busy_ns(&self) -> u64 {
        let s = self.state();
        s.ended_ns + s.since.map_or(0, |t| t.elapsed().as_nanos() as u64)
    }
}

/// Accumulates one stream's completions.
#[derive(Clone, Debug)]
pub struct StreamStats {
    pub name: String,
    /// Reads, then writes: each direction's latencies (the stream's are both together).
    directions: [DirectionStats; 2],
    breakdown_sum: Breakdown,
    io_depths: IoDepths,
    /// The stream's own active time, if it differs from the run's: a job that finished its
    /// `number_ios` early, or ran a shorter `runtime`, reports its rates over its own time,
    /// as fio does.
    active_ns: Option<u64>,
    /// The phase the stream ran in (phases run one after another; see
    /// `nvarray_workload::Workload::phases`) and its reporting group.
    phase: usize,
    group: usize,
}

impl StreamStats {
    pub fn new(name: &str) -> Self {
        StreamStats {
            name: name.to_string(),
            directions: [DirectionStats::new(), DirectionStats::new()],
            breakdown_sum: Breakdown::default(),
            io_depths: IoDepths::default(),
            active_ns: None,
            phase: 0,
            group: 0,
        }
    }

    /// The stream of a job that ran in `phase` and reports in `group`. A run of several
    /// phases must set every stream's active time: its elapsed time is theirs summed.
    pub fn placed(mut self, phase: usize, group: usize) -> Self {
        self.phase = phase;
        self.group = group;
        self
    }

    /// The stream's I/O depths, for its engine to count into.
    pub fn io_depths_mut(&mut self) -> &mut IoDepths {
        &mut self.io_depths
    }

    /// Sets the stream's own active time (see `active_ns`); rates are over it.
    pub fn set_active_ns(&mut self, ns: u64) {
        self.active_ns = Some(ns);
    }

    /// The time this stream's rates are over: its own active time, or else `run_ns`.
    pub fn active_or(&self, run_ns: u64) -> u64 {
        self.active_ns.unwrap_or(run_ns)
    }

    #[inline]
    pub fn record(
        &mut self,
        is_read: bool,
        len_bytes: u32,
        latency_ns: u64,
        breakdown: &Breakdown,
    ) {
        self.breakdown_sum.add(breakdown);
        self.count(is_read, len_bytes, latency_ns);
    }

    /// Records a request whose whole latency is host time as measured: what a front end or
    /// the emulator's runner sees from outside the device. `nvarray_run::device_report` then
    /// moves the modelled device's share to its components.
    #[inline]
    pub fn record_host(&mut self, is_read: bool, len_bytes: u32, latency_ns: u64) {
        let host_ns = self.breakdown_sum.get(Component::Host);
        self.breakdown_sum
            .set(Component::Host, host_ns + latency_ns);
        self.count(is_read, len_bytes, latency_ns);
    }

    #[inline]
    fn count(&mut self, is_read: bool, len_bytes: u32, latency_ns: u64) {
        self.directions[usize::from(!is_read)].count(len_bytes, latency_ns);
    }

    pub fn merge(&mut self, other: &StreamStats) {
        for (mine, theirs) in self.directions.iter_mut().zip(&other.directions) {
            mine.merge(theirs);
        }
        self.breakdown_sum.add(&other.breakdown_sum);
        self.io_depths.merge(&other.io_depths);
        // Threads of one stream ran side by side: the stream was active as long as the
        // longest of them.
        self.active_ns = match (self.active_ns, other.active_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub fn totals(&self, elapsed_ns: u64) -> Totals {
        let seconds = (elapsed_ns.max(1)) as f64 / 1e9;
        let [read, write] = &self.directions;
        let mut both = read.clone();
        both.merge(write);
        let requests = both.requests;
        let n = requests.max(1) as f64;
        Totals {
            requests,
            read_requests: read.requests,
            write_requests: write.requests,
            read_bytes: read.bytes,
            write_bytes: write.bytes,
            iops: requests as f64 / seconds,
            read_bandwidth_bytes_per_s: read.bytes as f64 / seconds,
            write_bandwidth_bytes_per_s: write.bytes as f64 / seconds,
            latency_ns: LatencySummary {
                // Exact, not the histogram's bucketed mean, so the breakdown adds up to it.
                mean: if requests == 0 {
                    0.0
                } else {
                    self.breakdown_sum.total_ns() as f64 / n
                },
                ..both.latency(&both.histogram.to_histogram())
            },
            read: read.totals(seconds),
            write: write.totals(seconds),
            io_depths: self.io_depths,
            breakdown_ns: BreakdownNs(
                Component::ALL
                    .iter()
                    .map(|&c| (c.name(), self.breakdown_sum.get(c) as f64 / n))
                    .collect(),
            ),
        }
    }
}

/// A run that completed fewer requests than this measured nothing worth a percentile or a
/// rate: it is reported, but not called faithful.
pub const REQUESTS_FEW: u64 = 10;

impl RunReport {
    /// Refuses to call a run faithful when it completed fewer than `REQUESTS_FEW` requests
    /// (`--runtime 1ns`; a sweep point at a very high memory latency), saying so: its
    /// latencies would print as 0.00 us and its rates as measured. Engines call this last, on
    /// the report of a finished run.
    pub fn require_enough_requests(&mut self) {
        let advice = if self.trace.is_some() {
            "replay a longer trace, or raise --runtime or --number_ios if they stopped it"
        } else {
            "lengthen --runtime or set --number_ios"
        };
        self.require_requests(advice);
    }

    /// [`RunReport::require_enough_requests`] for a front end's report (`serve`, `mount`),
    /// whose requests are the clients': a session of a few requests is reported, its
    /// verdict is not read off one outlier.
    pub fn require_enough_served(&mut self) {
        self.require_requests("the clients sent fewer; read the report after more I/O");
    }

    fn require_requests(&mut self, advice: &str) {
        let done = self.totals.requests;
        if done >= REQUESTS_FEW {
            return;
        }
        let why = format!(
            "too few requests: {done} completed; fewer than {REQUESTS_FEW} give no latency or rate worth reading ({advice})"
        );
        self.mark_unfaithful(why);
    }

    /// Calls the run not faithful for `why`, ahead of any reason already given.
    pub fn mark_unfaithful(&mut self, why: String) {
        self.mark(Verdict::NotFaithful, why);
    }

    /// Gives the run `verdict` for `why` unless it already has a worse one: the worse
    /// verdict's reason comes first, and every reason is kept.
    pub fn mark(&mut self, verdict: Verdict, why: String) {
        if verdict == Verdict::Faithful {
            return;
        }
        let other = self.unfaithful_reason.take().filter(|_| !self.faithful);
        self.unfaithful_reason = Some(match other {
            Some(other) if verdict >= self.verdict => format!("{why}; and {other}"),
            Some(other) => format!("{other}; and {why}"),
            None => why,
        });
        self.verdict = self.verdict.worst(verdict);
        self.faithful = false;
    }

    /// The report of a run over `model`: totals from `streams` (one per job), utilisation and
    /// wear from the model. Both engines build their report here; the fields only they know
    /// (CPU cost, lateness, faithfulness) are set by the caller.
    pub fn from_model(
        engine: &'static str,
        model: &nvarray_model::DeviceModel,
        streams: &[StreamStats],
        elapsed_ns: u64,
    ) -> RunReport {
        Self::from_model_over(engine, model, model.resource_busy(), streams, elapsed_ns)
    }

    /// [`RunReport::from_model`] over a measured window: `busy` is what the window kept the
    /// model's resources busy (a run with `ramp_time` or several phases leaves out the ramps)
    /// and `elapsed_ns` its length.
    pub fn from_model_over(
        engine: &'static str,
        model: &nvarray_model::DeviceModel,
        busy: nvarray_model::ResourceBusy,
        streams: &[StreamStats],
        elapsed_ns: u64,
    ) -> RunReport {
        let all_ns = whole_ns(streams, elapsed_ns);
        let e = elapsed_ns.max(1) as f64;
        let frac = |ns: u64, n: u32| (ns as f64 / (e * f64::from(n.max(1)))).min(1.0);
        let remote = model.config().fabric.kind != nvarray_model::FabricKind::None;
        RunReport {
            engine,
            device: model.config().name.clone(),
            elapsed_ns,
            utilisation: Utilisation {
                link_to_device: frac(busy.link_to_device_ns, 1),
                link_to_host: frac(busy.link_to_host_ns, 1),
                controller: frac(busy.controller_ns, busy.controller_engines),
                ring: frac(busy.ring_ns, 1),
                banks: frac(busy.banks_ns, busy.banks),
                buffers: frac(busy.buffers_ns, busy.buffers),
                tags: frac(busy.tags_ns, busy.tags),
                fabric_to_device: remote.then(|| frac(busy.fabric_to_device_ns, 1)),
                fabric_to_host: remote.then(|| frac(busy.fabric_to_host_ns, 1)),
                remote_cpu: (busy.remote_cpu_cores > 0)
                    .then(|| frac(busy.remote_cpu_ns, busy.remote_cpu_cores)),
            },
            wear: model.wear_stats().map(|w| WearReport {
                line_writes_max: w.line_writes_max,
                line_writes_mean: w.line_writes_mean,
                gap_moves: w.gap_moves,
            }),
            erases: model.erases(),
            totals: merged("all", streams.iter()).totals(all_ns),
            streams: streams
                .iter()
                .map(|s| StreamReport {
                    name: s.name.clone(),
                    group: s.group,
                    totals: s.totals(s.active_or(elapsed_ns)),
                })
                .collect(),
            groups: group_reports(streams, elapsed_ns),
            verdict: Verdict::Faithful,
            faithful: true,
            ..RunReport::default()
        }
    }
}

/// The streams' requests together.
fn merged<'a>(name: &str, streams: impl Iterator<Item = &'a StreamStats>) -> StreamStats {
    let mut all = StreamStats::new(name);
    for s in streams {
        all.merge(s);
    }
    all
}

/// The time the whole's rates are over. Phases ran one after another: their times add up.
/// Within a phase, streams ran side by side: when each stopped on its own (a request count or
/// byte limit), the longest of their own times, since the run's elapsed time also holds
/// starting and joining threads, which is nobody's I/O; any stream that ran to the end makes
/// it the run's time.
fn whole_ns(streams: &[StreamStats], elapsed_ns: u64) -> u64 {
    let phases = streams.iter().map(|s| s.phase).max().map_or(0, |p| p + 1);
    if phases <= 1 {
        return streams
            .iter()
            .map(|s| s.active_ns)
            .collect::<Option<Vec<u64>>>()
            .and_then(|ns| ns.into_iter().max())
            .unwrap_or(elapsed_ns);
    }
    (0..phases)
        .map(|phase| {
            streams
                .iter()
                .filter(|s| s.phase == phase)
                .map(|s| s.active_or(elapsed_ns))
                .max()
                .unwrap_or(0)
        })
        .sum::<u64>()
        .max(1)
}

/// Each reporting group's totals, when there is more than one group: its streams together,
/// over the longest of their times.
fn group_reports(streams: &[StreamStats], elapsed_ns: u64) -> Vec<GroupReport> {
    let groups = streams.iter().map(|s| s.group).max().map_or(0, |g| g + 1);
    if groups <= 1 {
        return Vec::new();
    }
    (0..groups)
        .map(|group| {
            let members = || streams.iter().filter(move |s| s.group == group);
            let ns = members()
                .map(|s| s.active_or(elapsed_ns))
                .max()
                .unwrap_or(elapsed_ns);
            GroupReport {
                group,
                jobs: members().map(|s| s.name.clone()).collect(),
                totals: merged(&format!("group {group}"), members()).totals(ns),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Percentiles never leave the range that was measured, and the least and greatest are
    /// exact, though the histogram keeps 3 significant digits: requests that all took
    /// 3,000 ns report 3,000 everywhere (the histogram alone says 3,001), and a greatest
    /// value between two buckets' tops is reported as it was.
    #[test]
    fn latency_figures_stay_inside_what_was_measured() {
        let mut all_equal = StreamStats::new("a");
        for _ in 0..100 {
            all_equal.record_host(true, 512, 3000);
        }
        let t = all_equal.totals(1_000_000).latency_ns;
        assert_eq!(
            (t.min, t.p50, t.p99, t.p99999, t.max),
            (3000, 3000, 3000, 3000, 3000)
        );
        let mut spread = StreamStats::new("b");
        for latency_ns in [1_000, 2_000, 1_234_567] {
            spread.record_host(false, 4096, latency_ns);
        }
        let t = spread.totals(1_000_000).latency_ns;
        assert_eq!((t.min, t.max), (1_000, 1_234_567));
        assert!(t.p99 <= t.max && t.p50 >= t.min, "{t:?}");
        let mut merged = StreamStats::new("all");
        merged.merge(&all_equal);
        merged.merge(&spread);
        let t = merged.totals(1_000_000).latency_ns;
        assert_eq!((t.min, t.max), (1_000, 1_234_567));
    }

    /// `record_host` is `record` with the whole latency as host time, request for request,
    /// however the requests mix reads, writes and sizes.
    #[test]
    fn record_host_counts_as_a_breakdown_of_only_host_time() {
        let (mut by_host, mut by_breakdown) = (StreamStats::new("a"), StreamStats::new("b"));
        for (i, latency_ns) in [1u64, 700, 15_000, 3_000_000].into_iter().enumerate() {
            let (is_read, len) = (i % 2 == 0, 512 << i);
            by_host.record_host(is_read, len, latency_ns);
            let mut b = Breakdown::default();
            b.set(Component::Host, latency_ns);
            by_breakdown.record(is_read, len, latency_ns, &b);
        }
        let (h, b) = (by_host.totals(1_000_000), by_breakdown.totals(1_000_000));
        assert_eq!(
            serde_json::to_value(&h).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
        let host = h
            .breakdown_ns
            .0
            .iter()
            .find(|(n, _)| *n == "host")
            .unwrap()
            .1;
        assert_eq!(host, h.latency_ns.mean, "all of the mean is host time");
    }

    /// Overlapping requests count once, and without gap bridging the time between two is
    /// not busy.
    #[test]
    fn busy_time_is_the_union_of_requests_in_flight() {
        let clock = BusyClock::with_gap_max(std::time::Duration::ZERO);
        assert_eq!(clock.busy_ns(), 0);
        let wall = std::time::Instant::now();
        clock.begin();
        clock.begin();
        std::thread::sleep(std::time::Duration::from_millis(20));
        clock.end();
        clock.end();
        let wall_ns = wall.elapsed().as_nanos() as u64;
        let first = clock.busy_ns();
        // Counted once: at least the 20 ms, at most the wall time around it (twice, if each
        // request counted on its own).
        assert!(
            (20_000_000..=wall_ns).contains(&first),
            "{first} of {wall_ns}"
        );
        // Idle: nothing in flight, the clock stands still, and the gap is not counted.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(clock.busy_ns(), first);
        clock.begin();
        clock.end();
        assert!(clock.busy_ns() < first + 5_000_000, "the gap was counted");
    }

    /// A gap shorter than `gap_max` between requests (the client's own time) counts; the idle
    /// time after the last request does not, until another request comes within the gap.
    #[test]
    fn short_gaps_between_requests_count_as_active() {
        let clock = BusyClock::with_gap_max(std::time::Duration::from_secs(3600));
        clock.begin();
        clock.end();
        let after_first = clock.busy_ns();
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert_eq!(clock.busy_ns(), after_first, "trailing idle time counted");
        clock.begin();
        clock.end();
        assert!(
            clock.busy_ns() >= after_first + 10_000_000,
            "the 10 ms gap was not bridged"
        );
    }

    #[test]
    fn cpu_seconds_per_gb_divides_by_gigabytes() {
        assert_eq!(cpu_seconds_per_gb(2.0, 0), 0.0);
        assert_eq!(cpu_seconds_per_gb(2.0, 1_000_000_000), 2.0);
        assert_eq!(cpu_seconds_per_gb(1.0, 4_000_000_000), 0.25);
    }

    #[test]
    fn process_cpu_time_grows_with_work() {
        let before = process_cpu_seconds();
        let mut x = 0u64;
        let end = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while std::time::Instant::now() < end {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = process_cpu_seconds();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn a_run_of_too_few_requests_is_not_called_faithful() {
        for (requests, faithful) in [
            (0, false),
            (1, false),
            (REQUESTS_FEW - 1, false),
            (REQUESTS_FEW, true),
        ] {
            let mut r = RunReport {
                faithful: true,
                ..RunReport::default()
            };
            r.totals.requests = requests;
            r.require_enough_requests();
            assert_eq!(r.faithful, faithful, "{requests} requests");
            assert_eq!(
                r.unfaithful_reason.is_some(),
                !faithful,
                "{requests}: {:?}",
                r.unfaithful_reason
            );
        }
        // A reason already given is kept beside it.
        let mut r = RunReport {
            verdict: Verdict::NotFaithful,
            faithful: false,
            unfaithful_reason: Some("lateness".into()),
            ..RunReport::default()
        };
        r.require_enough_requests();
        let why = r.unfaithful_reason.unwrap();
        assert!(
            why.starts_with("too few requests: 0 completed") && why.ends_with("lateness"),
            "{why}"
        );
    }

    /// A front end's session of a few requests says so, with the clients' advice, and is
    /// not read off one outlier.
    #[test]
    fn a_served_session_of_too_few_requests_says_the_clients_sent_few() {
        let mut r = RunReport {
            faithful: true,
            ..RunReport::default()
        };
        r.totals.requests = 2;
        r.require_enough_served();
        assert_eq!(r.verdict, Verdict::NotFaithful);
        let why = r.unfaithful_reason.unwrap();
        assert!(
            why.starts_with("too few requests: 2 completed")
                && why.contains("the clients sent fewer"),
            "{why}"
        );
        let mut r = RunReport {
            faithful: true,
            ..RunReport::default()
        };
        r.totals.requests = REQUESTS_FEW;
        r.require_enough_served();
        assert_eq!((r.verdict, r.faithful), (Verdict::Faithful, true));
    }

    /// A run takes the worst verdict of its parts, the worst one's reason first, every
    /// reason kept; a faithful run has none.
    #[test]
    fn the_worst_verdict_wins_and_its_reason_comes_first() {
        let faithful = || RunReport {
            faithful: true,
            ..RunReport::default()
        };
        let mut r = faithful();
        r.mark(Verdict::Faithful, "nothing".into());
        assert_eq!(
            (r.verdict, r.faithful, r.unfaithful_reason),
            (Verdict::Faithful, true, None)
        );
        let mut r = faithful();
        r.mark(Verdict::MachineLimited, "paused".into());
        assert_eq!((r.verdict, r.faithful), (Verdict::MachineLimited, false));
        r.mark(Verdict::NotFaithful, "own".into());
        assert_eq!(r.verdict, Verdict::NotFaithful);
        assert_eq!(r.unfaithful_reason.as_deref(), Some("own; and paused"));
        r.mark(Verdict::MachineLimited, "issue paused".into());
        assert_eq!(r.verdict, Verdict::NotFaithful);
        assert_eq!(
            r.unfaithful_reason.as_deref(),
            Some("own; and paused; and issue paused")
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["verdict"], "not-faithful");
        assert_eq!(json["faithful"], false);
    }

    /// Reads and writes of a mixed stream each get their own figures, and the stream's are
    /// both together: exact mean and standard deviation, rates over the same time.
    #[test]
    fn each_direction_has_its_own_latency_and_rates() {
        let mut s = StreamStats::new("mixed");
        for _ in 0..300 {
            s.record_host(true, 4096, 100);
        }
        for _ in 0..100 {
            s.record_host(false, 512, 300);
            s.record_host(false, 512, 500);
        }
        let t = s.totals(1_000_000_000);
        assert_eq!(
            (t.read.requests, t.write.requests, t.requests),
            (300, 200, 500)
        );
        assert_eq!((t.read.bytes, t.write.bytes), (300 * 4096, 200 * 512));
        assert_eq!((t.read.iops, t.write.iops, t.iops), (300.0, 200.0, 500.0));
        let (r, w, all) = (&t.read.latency_ns, &t.write.latency_ns, &t.latency_ns);
        assert_eq!((r.mean, r.stdev, r.min, r.max), (100.0, 0.0, 100, 100));
        assert_eq!((w.mean, w.stdev, w.min, w.max), (400.0, 100.0, 300, 500));
        assert_eq!((w.p50, w.p99), (300, 500));
        assert_eq!(t.write.bins(), [(300, 100), (500, 100)]);
        assert_eq!(t.write.percentile_ns(25.0), 300);
        assert_eq!(t.write.share_between(0, 300), 0.5);
        assert_eq!(t.write.share_between(300, 1000), 0.5);
        // All 500: mean 220, values 100 (300x), 300 (100x), 500 (100x).
        assert_eq!(all.mean, 220.0);
        let variance =
            (300.0 * 120f64.powi(2) + 100.0 * 80f64.powi(2) + 100.0 * 280f64.powi(2)) / 500.0;
        assert!((all.stdev - variance.sqrt()).abs() < 1e-9, "{}", all.stdev);
        assert_eq!((all.min, all.max), (100, 500));
        // A direction without requests reports zeros, never NaN.
        let reads_only = {
            let mut s = StreamStats::new("r");
            s.record_host(true, 512, 7);
            s.totals(1)
        };
        assert_eq!(reads_only.write, DirectionTotals::default());
        assert_eq!(reads_only.read.bins(), [(7, 1)]);
        assert_eq!(reads_only.read.percentile_ns(50.0), 7);
        let json = serde_json::to_value(&reads_only).unwrap();
        assert_eq!(json["write"]["latency_ns"]["stdev"], 0.0);
        assert_eq!(json["read"]["latency_ns"]["mean"], 7.0);
    }

    #[test]
    fn unfaithful_reason_is_null_not_absent() {
        let json = serde_json::to_value(RunReport::default()).unwrap();
        assert!(json["unfaithful_reason"].is_null());
        assert!(json.as_object().unwrap().contains_key("unfaithful_reason"));
        assert_eq!(json["lateness_ns"]["p99"], 0);
    }
}
