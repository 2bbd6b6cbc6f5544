//! `RunReport`, everything one run measured, and the parts only it holds: per-stream and
//! per-group totals, utilisation, wear, lateness, the machine's jitter, the emulator's setup;
//! and its verdict, which `mark` keeps at the worst of every reason given. Field names are
//! the JSON API of `--json`.

use nvarray_model::Verdict;
use serde::Serialize;

use crate::totals::Totals;

/// One stream: a job-file section (or the command-line job).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamReport {
    pub name: String,
    /// The job's reporting group (fio's `groupid`: a new one at each `stonewall`, `wait_for`
    /// or `new_group`), from 0.
    pub group: usize,
    #[serde(flatten)]
    pub totals: Totals,
    /// What its latency target and steady-state watch found.
    #[serde(flatten)]
    pub control: crate::control::StreamControl,
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
    /// What the FTL did (flash behind one, `[ftl]`): write amplification, collection, erases
    /// per block, free lines over time. Counted over the whole run, ramp included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ftl: Option<nvarray_model::FtlStats>,
    pub streams: Vec<StreamReport>,
    /// Each reporting group, when there is more than one (`stonewall`, `wait_for`,
    /// `new_group`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupReport>,
    /// CPU time (user + system) per GB (1e9 bytes) read or written: what the host software,
    /// and for the emulator the device threads too, cost per byte moved. The emulator and the
    /// servers count the whole process; the simulator counts the thread that simulated.
    /// `null` when too little moved for the figure to mean anything (`cpu_time::BYTES_FEW`,
    /// `REQUESTS_FEW`); `cpu_seconds` is there either way.
    pub cpu_seconds_per_gb: Option<f64>,
    /// The CPU time itself, over the same span.
    #[serde(default)]
    pub cpu_seconds: f64,
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
    /// Set when the run completed fewer than `REQUESTS_FEW` requests: why its latencies and
    /// rates are not worth reading. The emulator's verdict is then `not-faithful`; the
    /// simulator's stays `faithful` (its clock is exact whatever it measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub too_few_requests: Option<String>,
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
    /// A channel daemon's counts (`nvarray serve --channels`): channels opened and refused,
    /// and commands the device refused before touching data (absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelCounts>,
}

/// What a channel daemon let in and kept out (`RunReport::channels`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChannelCounts {
    /// Channels given to client processes.
    pub opened: u64,
    /// Connections refused a channel (no grant, wrong version, too many channels).
    pub refused: u64,
    /// Channels open now.
    pub live: u64,
    /// Commands outside every extent granted to their process, failed unexecuted.
    pub permission_denied: u64,
    /// Commands with a malformed field (id, buffer, opcode) or past the device's limits,
    /// failed unexecuted.
    pub malformed: u64,
    /// Times a client's ring counters were found impossible (its channel stalls until mended).
    pub ring_faults: u64,
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
    /// Every block read back and checked by `verify`: the verified ones, and those that read
    /// as zeroes, as a block never written must on a device that starts zeroed (a block
    /// that is neither fails the run).
    pub checked_blocks: u64,
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
    /// The device threads' CPU time per second of the measured window (1.0: a whole core
    /// busy); absent inline, where the host threads run the device. Near 0 for an idle
    /// device: its threads sleep on the doorbell (issue 56).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_cpu_per_second: Option<f64>,
    /// Times the host's doorbell woke a sleeping device thread.
    pub doorbell_wakeups: u64,
}

/// Completion posting time minus its modelled deadline, in nanoseconds: of every completion,
/// then whose it was. A completion is machine-late when its deadline fell while the machine
/// paused the thread serving it (`nvarray_emu::pauses`), wake-late when it fell after a
/// sleeping device thread should have been back and before the kernel woke it; the others'
/// lateness is the emulator's own (`own_*`). A completion that fell due while an inline host
/// ran its own code is late from the host's next poll (`host_code`).
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
    pub wake_late: u64,
    pub wake_late_percent: f64,
    /// Completions whose deadline fell while a host thread that runs the device inline was in
    /// its own code: their lateness counts from its next poll, the first time it could have
    /// seen them from any device (`nvarray_emu::pauses::PauseWatch::host_code`).
    pub host_code: u64,
    pub host_code_percent: f64,
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
    /// Of the others, those held more than `ISSUED_LATE_NS` by the command before them on
    /// their queue slot: a completion that came late (the device's lateness, judged with the
    /// completions', or the kernel's late interrupt) or that command's own late issue
    /// (counted once, as its delay). That hold is left out of `own_p99`.
    pub held_by_previous: u64,
    pub own_p99: u64,
}

pub use crate::enough::REQUESTS_FEW;

impl RunReport {
    /// Records the CPU time the run took, and per GB moved when enough moved
    /// (`cpu_seconds_per_gb`). Call once the totals are final.
    pub fn set_cpu_seconds(&mut self, cpu_seconds: f64) {
        let bytes = self.totals.read_bytes + self.totals.write_bytes;
        self.cpu_seconds = cpu_seconds;
        self.cpu_seconds_per_gb =
            crate::enough::cpu_seconds_per_gb(cpu_seconds, bytes, self.totals.requests);
    }

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
        self.too_few_requests = Some(format!(
            "{done} completed; fewer than {REQUESTS_FEW} give no latency or rate worth reading ({advice})"
        ));
        // The simulator is exact by construction: the verdict words are the emulator's.
        if self.engine != "sim" {
            self.mark_unfaithful(format!("too few requests: {done} completed; fewer than {REQUESTS_FEW} give no latency or rate worth reading ({advice})"));
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A simulation of too few requests keeps its verdict (its clock is exact) and says why
    /// its figures are not worth reading; an emulation of as few is not faithful.
    #[test]
    fn a_simulation_of_too_few_requests_says_so_without_a_verdict() {
        for (engine, verdict) in [("sim", Verdict::Faithful), ("emu", Verdict::NotFaithful)] {
            let mut r = RunReport {
                engine,
                faithful: true,
                ..RunReport::default()
            };
            r.totals.requests = 3;
            r.require_enough_requests();
            assert_eq!(r.verdict, verdict, "{engine}");
            assert!(r
                .too_few_requests
                .as_deref()
                .unwrap()
                .starts_with("3 completed"));
        }
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

    #[test]
    fn unfaithful_reason_is_null_not_absent() {
        let json = serde_json::to_value(RunReport::default()).unwrap();
        assert!(json["unfaithful_reason"].is_null());
        assert!(json.as_object().unwrap().contains_key("unfaithful_reason"));
        assert_eq!(json["lateness_ns"]["p99"], 0);
    }
}
