//! `nvarray bench --engine emu`: fio-like workloads through the driver against the wall clock.
//!
//! One host thread per thread of the job plan, each keeping its queue depth of commands in
//! flight on its own way to the device (see `nvarray_host::ladder`). Latency is what the host
//! thread observes: from preparing the command (taking a tag, copying a write's data) to
//! finishing it (copying a read's data out), so it includes the driver's whole cost.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nvarray_host::ladder::{Issuer, LadderShared};
use nvarray_host::options::pin_this_thread;
use nvarray_host::{fine_timer_slack, pauses, Device, HostError, Opcode, Options};
use nvarray_model::DeviceConfig;
use nvarray_report::{
    process_cpu_seconds, IssueDelays, RunReport, StreamStats, Verdict, ISSUED_LATE_NS,
};
use nvarray_workload::trace::{Geometry, TraceReport};
use nvarray_workload::{Direction, Request, Workload};

use crate::device_report::{device_report_over, DeviceReading};
use crate::error::EmuRunError;
use crate::plan::{job_streams, Next, Plan, Requests, ThreadPlan};
use crate::verify;

/// Runs `workload` on an emulated `device`. `progress` is called now and then with the
/// fraction done (0.0 to 1.0).
pub fn run(
    device: &DeviceConfig,
    workload: &Workload,
    options: &Options,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, EmuRunError> {
    let opened = Device::open(device, options)?;
    workload
        .validate(
            opened.size_bytes(),
            opened.block_bytes(),
            opened.command_bytes_max(),
        )
        .map_err(|e| {
            EmuRunError::Workload(format!(
                "{e} (the emulator's largest command is the tag buffer size, --buffer-size)"
            ))
        })?;
    run_on(&opened, workload, progress)
}

/// Host threads one emulator run starts at most: each is a real thread with its own queue
/// pair, and more than this only take turns on the cores.
pub const HOST_THREADS_MAX: usize = 1024;

/// Runs `workload` on an opened device (so tests and servers can reuse one).
///
/// Phases (`stonewall`, `wait_for`) run one after another: a phase's threads start once the
/// one before has finished and its threads are joined. Each job's `ramp_time` is left out of
/// its figures, and the longest of a phase's out of the device's.
pub fn run_on(
    device: &Device,
    workload: &Workload,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, EmuRunError> {
    let geometry = Geometry {
        capacity_bytes: device.size_bytes(),
        block_bytes: device.block_bytes(),
        max_transfer_bytes: device.command_bytes_max(),
    };
    let plan = Plan::new(workload, geometry)?;
    let block = device.block_bytes() as usize;
    if plan.threads.iter().any(|t| t.verify) && block < verify::HEADER_BYTES {
        return Err(EmuRunError::Workload(format!(
            "verify needs blocks of at least {} bytes for its header; this device's are {block}",
            verify::HEADER_BYTES
        )));
    }
    let threads = plan.threads.len();
    if threads > HOST_THREADS_MAX {
        return Err(EmuRunError::Workload(format!(
            "the workload asks for {threads} threads (numjobs summed over its jobs); the emulator runs each as a real thread with its own queue pair, at most {HOST_THREADS_MAX} (the simulator, --engine sim, has no such limit)"
        )));
    }
    let shared = LadderShared::new(device);
    let mut streams = job_streams(workload);
    let phase_plans = plan.into_phases();
    let phase_count = phase_plans.len() as f64;
    let cpu_start = process_cpu_seconds();
    let (mut measured_ns, mut verified_blocks) = (0u64, 0u64);
    let mut ramps = DeviceReading::default();
    let mut trace = None;
    let mut paced_issued_late = None;
    let mut issue_delays = IssueDelays::default();
    for (index, phase) in phase_plans.into_iter().enumerate() {
        let mut phase_progress = |f: f64| progress((index as f64 + f) / phase_count);
        let ran = run_phase(device, &shared, phase, &mut phase_progress)?;
        measured_ns += ran.measured_ns;
        ramps = ramps.plus(&ran.ramp);
        for (stream, result) in ran.results {
            streams[stream].merge(&result.stats);
            verified_blocks += result.verified_blocks;
            issue_delays.merge(&result.issue_delays);
            trace = trace.or(result.trace);
            if let Some(late) = result.paced_issued_late {
                *paced_issued_late.get_or_insert(0) += late;
            }
        }
    }
    progress(1.0);
    let cpu_seconds = process_cpu_seconds() - cpu_start;
    let mut report = device_report_over(device, &streams, measured_ns.max(1), cpu_seconds, &ramps);
    if let Some(setup) = report.emulator.as_mut() {
        setup.verified_blocks = verified_blocks;
        setup.host_cpus = (0..threads).filter_map(|i| device.host_cpu(i)).collect();
        setup.host_threads = threads;
    }
    report.trace = trace;
    report.paced_issued_late = paced_issued_late;
    report.issue_lateness_ns = issue_delays.summary();
    if let Some(issue) = report.issue_lateness_ns {
        // The offered load's timing is part of what the run claims: timed requests issued
        // later than the completions may be posted make it not the workload asked for.
        // Held to the same bound and told apart the same way as the completions: late only
        // where the machine paused the thread is machine-limited.
        let bound = device.lateness().bound_ns;
        if issue.p99 > bound {
            let late = format!(
                "timed requests (rate, rate_iops, a trace's timestamps) issued late by the host thread: p99 {} ns after they could have gone exceeds the lateness bound {bound} ns ({} of {} later than {ISSUED_LATE_NS} ns; {} came due while the machine paused the thread: a sleep the kernel ended late, a gap in its spinning)",
                issue.p99, issue.late, issue.requests, issue.machine_late
            );
            if issue.own_p99 <= bound {
                report.mark(
                    Verdict::MachineLimited,
                    format!(
                        "{late}; without them the thread's own p99 is {} ns",
                        issue.own_p99
                    ),
                );
            } else {
                report.mark_unfaithful(format!(
                    "{late}; the thread's own p99, {} ns, is past the bound too (it was busy when they came due)",
                    issue.own_p99
                ));
            }
        }
    }
    report.require_enough_requests();
    Ok(report)
}

/// A phase's start: when every thread of it has set itself up (attached its queue pair,
/// allocated its buffers; about 1.4 ms on the project's VM). Started before that, a timed
/// job's first requests were issued late by the setup (issue lateness max 1.3-1.9 ms in every
/// paced run), and a counted one's time held it.
struct StartGate {
    state: std::sync::Mutex<(usize, Option<Instant>)>,
    opened: std::sync::Condvar,
}

impl StartGate {
    fn new(threads: usize) -> Self {
        StartGate {
            state: std::sync::Mutex::new((threads, None)),
            opened: std::sync::Condvar::new(),
        }
    }

    /// One thread is ready: waits for the others, then returns the start, the same for all.
    fn arrive(&self) -> Instant {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(1);
        if state.0 == 0 && state.1.is_none() {
            state.1 = Some(Instant::now());
            self.opened.notify_all();
        }
        let state = self
            .opened
            .wait_while(state, |s| s.1.is_none())
            .unwrap_or_else(|e| e.into_inner());
        state.1.expect("opened")
    }

    /// Opens the gate whoever has arrived (a thread could not be started).
    fn open(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1.get_or_insert_with(Instant::now);
        self.opened.notify_all();
    }

    fn started(&self) -> Option<Instant> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

/// A thread's place at the gate: it arrives once, when ready, or when it ends without
/// getting there (a failed pin, an error), so the others never wait for it.
struct Arrival<'a> {
    gate: &'a StartGate,
    start: Option<Instant>,
}

impl<'a> Arrival<'a> {
    fn new(gate: &'a StartGate) -> Self {
        Arrival { gate, start: None }
    }

    fn start(&mut self) -> Instant {
        *self.start.get_or_insert_with(|| self.gate.arrive())
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if self.start.is_none() {
            self.gate.arrive();
        }
    }
}

/// What one phase did.
struct PhaseRun {
    /// Each thread's stream and what it measured.
    results: Vec<(usize, ThreadResult)>,
    /// The phase's time less its ramp.
    measured_ns: u64,
    /// What the device did during the ramp, to leave out of its figures.
    ramp: DeviceReading,
}

/// Runs one phase's threads side by side until each has finished.
fn run_phase(
    device: &Device,
    shared: &LadderShared,
    plan: Plan,
    progress: &mut dyn FnMut(f64),
) -> Result<PhaseRun, EmuRunError> {
    let longest = plan.longest_runtime_ns.map(Duration::from_nanos);
    let ramp = Duration::from_nanos(plan.ramp_ns());
    let ios_total = plan.ios();
    let bytes_total = plan.io_bytes();
    let done = Progress::default();
    let at_start = DeviceReading::take(device);
    let mut at_ramp_end = ramp.is_zero().then(|| at_start.clone());
    let gate = StartGate::new(plan.threads.len());
    // Until every thread is set up the phase has not started; the progress bar counts from
    // here meanwhile.
    let spawned = Instant::now();
    // Each thread says when it has finished, so the phase ends when its last thread does,
    // not at the next progress tick.
    let (finished_tx, finished_rx) = std::sync::mpsc::channel::<()>();
    let results: Vec<Result<(usize, ThreadResult), EmuRunError>> = std::thread::scope(|s| {
        let handles = plan
            .threads
            .into_iter()
            .map(|plan| {
                let done = &done;
                let gate = &gate;
                let finished = FinishedSignal(finished_tx.clone());
                std::thread::Builder::new()
                    .name(format!("nvarray-job-{}", plan.stream))
                    .spawn_scoped(s, move || {
                        let _finished = finished;
                        // Arrives at the gate on every way out, so no thread waits for one
                        // that failed before it was ready.
                        let mut arrival = Arrival::new(gate);
                        let (stream, index) = (plan.stream, plan.index);
                        if let Some(cpu) = device.host_cpu(index as usize) {
                            pin_this_thread(cpu).map_err(|source| EmuRunError::Pin {
                                thread: index,
                                cpu,
                                source,
                            })?;
                        }
                        run_thread(device, shared, plan, &mut arrival, done).map(|st| (stream, st))
                    })
            })
            .collect::<Result<Vec<_>, _>>();
        let handles = match handles {
            Ok(handles) => handles,
            // The threads already started end on their own (the workload bounds them); the
            // scope waits for them.
            Err(e) => {
                gate.open();
                return vec![Err(EmuRunError::ThreadStart(e))];
            }
        };
        // Only the threads hold senders now, so the channel disconnects when the last ends.
        drop(finished_tx);
        // The calling thread reports progress while the workers run, and reads the device
        // when the ramp ends; it wakes for each thread that finishes.
        let mut running = handles.len();
        while running > 0 {
            let started = gate.started();
            let start = started.unwrap_or(spawned);
            let by_time = longest.map(|r| start.elapsed().as_secs_f64() / r.as_secs_f64());
            let by_ios = done.ios.load(Ordering::Relaxed) as f64 / ios_total.max(1) as f64;
            let by_bytes = done.bytes.load(Ordering::Relaxed) as f64 / bytes_total.max(1) as f64;
            let by_trace = done.trace_millionths.load(Ordering::Relaxed) as f64 / 1e6;
            progress(
                by_time
                    .unwrap_or(0.0)
                    .max(by_ios)
                    .max(by_bytes)
                    .max(by_trace)
                    .min(1.0),
            );
            let mut nap = PROGRESS_EVERY;
            if at_ramp_end.is_none() && started.is_some() {
                let to_ramp_end = ramp.saturating_sub(start.elapsed());
                if to_ramp_end.is_zero() {
                    at_ramp_end = Some(DeviceReading::take(device));
                }
                nap = nap.min(to_ramp_end);
            }
            match finished_rx.recv_timeout(nap) {
                Ok(()) => running -= 1,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                // Every sender is gone: every thread has ended.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let start = gate.started().unwrap_or(spawned);
    // The phase's end is when its last thread stopped measuring, not when this thread
    // noticed (joining threads is nobody's I/O).
    let ended = results
        .iter()
        .map(|(_, r)| r.ended)
        .max()
        .unwrap_or_else(Instant::now);
    // A phase that ended within its ramp measured nothing.
    let at_ramp_end = at_ramp_end.unwrap_or_else(|| DeviceReading::take(device));
    Ok(PhaseRun {
        results,
        measured_ns: ended
            .saturating_duration_since(start)
            .saturating_sub(ramp)
            .as_nanos() as u64,
        ramp: at_ramp_end.since(&at_start),
    })
}

/// How often the calling thread updates the progress figure while a phase runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// Tells the phase's calling thread that a host thread has ended, however it ended (returned,
/// failed, or panicked), when dropped.
struct FinishedSignal(std::sync::mpsc::Sender<()>);

impl Drop for FinishedSignal {
    fn drop(&mut self) {
        // The receiver outlives every thread of the scope; a send can fail only after it
        // stopped listening, when nobody needs the signal.
        let _ = self.0.send(());
    }
}

/// What a phase's threads have done so far, for the progress bar.
#[derive(Default)]
struct Progress {
    ios: AtomicU64,
    bytes: AtomicU64,
    /// How far through its trace a replaying thread has read, in millionths.
    trace_millionths: AtomicU64,
}

/// What one host thread measured.
struct ThreadResult {
    stats: StreamStats,
    /// Blocks read back that held data this run wrote and passed verification.
    verified_blocks: u64,
    /// The summary of the trace the thread replayed.
    trace: Option<TraceReport>,
    /// A paced thread's requests issued late (`None`: not paced).
    paced_issued_late: Option<u64>,
    /// When the thread stopped: its last completion was collected.
    ended: Instant,
    /// How late the thread issued its timed requests after they could have gone.
    issue_delays: IssueDelays,
}

/// How a host thread waits for a time (a think time, a paced or timestamped request's due
/// time): it sleeps for all but a margin and spins the rest, so that it wakes on time though
/// the kernel ends sleeps late. The margin follows how late this thread's sleeps have ended
/// (on the VMs of docs/perf.md, half of all `nanosleep`s overshoot by more than 50 µs and
/// the p99 is about 200 µs): it rises at once to a late wake-up's overshoot and decays slowly,
/// so a thread spins longer only on a machine that needs it. Times are the device's clock's
/// nanoseconds (`Device::now_ns`), as everywhere in a host thread's loop.
struct Pacer {
    margin_ns: u64,
}

impl Pacer {
    /// The least margin: naps shorter than this are spun, never slept (a kernel sleep
    /// overshoots by tens of microseconds; see `nvarray_host`'s `NAP_WAKE_MARGIN_NS`).
    const MARGIN_MIN_NS: u64 = 50_000;
    /// The greatest margin: a thread spins at most this long before a due time.
    const MARGIN_MAX_NS: u64 = 2_000_000;
    /// Room over the latest overshoot, so the next one like it still wakes in time.
    const MARGIN_SLACK_NS: u64 = 20_000;

    fn new() -> Self {
        Pacer {
            margin_ns: Self::MARGIN_MIN_NS,
        }
    }

    /// Waits until `until_ns` on the clock `now_ns` reads, telling this thread's pause watch
    /// (`nvarray_emu::pauses`) what it saw: a sleep the kernel ended after `until_ns`, and
    /// gaps in the spin that follows, are the machine's, so a timed request due in them is
    /// issued late by the machine, not by this thread's own work.
    fn wait_until(&mut self, until_ns: u64, now_ns: impl Fn() -> u64) {
        let now = now_ns();
        if until_ns <= now {
            return;
        }
        if until_ns - now > self.margin_ns {
            fine_timer_slack();
            let wake_at = until_ns - self.margin_ns;
            std::thread::sleep(Duration::from_nanos(wake_at - now));
            let woke = now_ns();
            let overshoot = woke.saturating_sub(wake_at);
            // Rise to the overshoot at once; otherwise decay by 1/64 a sleep.
            let decayed = self.margin_ns - self.margin_ns / 64;
            self.margin_ns = (overshoot + Self::MARGIN_SLACK_NS)
                .max(decayed)
                .clamp(Self::MARGIN_MIN_NS, Self::MARGIN_MAX_NS);
            pauses::this_thread(|w| {
                if woke > until_ns {
                    // Not running from when the sleep was to end until the kernel ended it.
                    w.overslept(wake_at, woke);
                } else {
                    w.restart(woke);
                }
            });
        } else {
            // Too near to sleep: the margin decays here too, or one long overshoot (a pause of
            // the machine) would leave a margin past the job's period and the thread spinning
            // for the rest of the run.
            self.margin_ns = (self.margin_ns - self.margin_ns / 64).max(Self::MARGIN_MIN_NS);
            pauses::this_thread(|w| w.restart(now));
        }
        loop {
            let now = now_ns();
            pauses::this_thread(|w| w.reading(now));
            if now >= until_ns {
                break;
            }
            std::hint::spin_loop();
        }
    }
}

/// The device's clock (`Device::now_ns`, which completions' model times and a host thread's
/// loop are on) seen as `Instant`s at a thread's edges: both are `CLOCK_MONOTONIC`, so one
/// pair of readings relates them.
struct DeviceClock {
    instant: Instant,
    ns: u64,
}

impl DeviceClock {
    fn new(device: &Device) -> Self {
        DeviceClock {
            instant: Instant::now(),
            ns: device.now_ns(),
        }
    }

    /// The device clock's reading at `instant`.
    fn ns_of(&self, instant: Instant) -> u64 {
        match instant.checked_duration_since(self.instant) {
            Some(after) => self.ns + after.as_nanos() as u64,
            None => self
                .ns
                .saturating_sub((self.instant - instant).as_nanos() as u64),
        }
    }
}

/// One of a thread's `iodepth` slots: when it may issue again (device clock, ns).
#[derive(Clone, Copy)]
struct Slot {
    /// When this thread may issue on it: its last command was collected (plus the think time).
    ready_ns: u64,
    /// When it would have been ready had the thread kept time: its last command's device time
    /// (issue to collection) after the moment that command could have gone. A timed request
    /// waits for a slot only until this, so one late issue of the thread's does not make the
    /// requests behind it look queued.
    ready_on_time_ns: u64,
}

/// A command of this thread's in flight (device clock, ns).
#[derive(Clone, Copy)]
struct InFlight {
    /// When it was issued (measured).
    issued_ns: u64,
    /// How long a timed request waited for a slot past its due time (counts in its latency).
    slot_wait_ns: u64,
    /// When it could have gone: its due time, or when a slot was ready on time after it
    /// (an untimed request's is its issue).
    could_go_ns: u64,
}

impl InFlight {
    /// A command issued at `issued_ns` on `slot`; a timed one was due at `due_ns`.
    fn issue(issued_ns: u64, due_ns: Option<u64>, slot: &Slot) -> InFlight {
        let could_go_ns = match due_ns {
            Some(due) => due.max(slot.ready_on_time_ns).min(issued_ns),
            None => issued_ns,
        };
        InFlight {
            issued_ns,
            slot_wait_ns: due_ns.map_or(0, |due| could_go_ns.saturating_sub(due)),
            could_go_ns,
        }
    }

    /// How long after it could have gone the thread issued it: the thread's own delay.
    fn host_delay_ns(&self) -> u64 {
        self.issued_ns - self.could_go_ns
    }

    /// Its latency when collected at `collected_ns`: from its issue, plus its wait for a slot.
    fn latency_ns(&self, collected_ns: u64) -> u64 {
        collected_ns.saturating_sub(self.issued_ns) + self.slot_wait_ns
    }

    /// When it would have completed had the thread kept time: `device_ns` (from its issue
    /// to the model's completion, whenever the thread collected it) after the moment it could
    /// have gone. Whether it counts after a ramp is decided by this, as the simulator decides
    /// by its completion time, so a late thread does not move requests due in the ramp into
    /// the measured window.
    fn done_on_time_ns(&self, device_ns: u64) -> u64 {
        self.could_go_ns + device_ns
    }

    /// The slot it frees when collected at `collected_ns`, the device having taken
    /// `device_ns`: ready again `thinktime_ns` later. Had the thread kept time, it would have
    /// been ready `thinktime_ns` after the device's completion, however late the thread
    /// collected it (a pause between the two is the thread's, not the device's).
    fn frees(&self, collected_ns: u64, thinktime_ns: u64, device_ns: u64) -> Slot {
        Slot {
            ready_ns: collected_ns + thinktime_ns,
            ready_on_time_ns: self.done_on_time_ns(device_ns) + thinktime_ns,
        }
    }
}

/// One host thread: keeps `iodepth` commands in flight until its run ends, then drains. With
/// `thinktime`, each completion frees its slot only that long after it arrived (as in the
/// simulator; with `iodepth` > 1 a slot that frees while the thread waits for a completion
/// is used once the thread wakes). With `verify`, every write carries self-checking data
/// (`verify`) and every read is checked.
fn run_thread(
    device: &Device,
    shared: &LadderShared,
    mut plan: ThreadPlan,
    arrival: &mut Arrival,
    progress: &Progress,
) -> Result<ThreadResult, EmuRunError> {
    let began = Instant::now();
    // Completions before the end of the job's ramp are not counted (`measure_from`).
    let completion = device.completion();
    let clock = DeviceClock::new(device);
    let mut issuer = Issuer::new(device, shared, completion);
    let block = device.block_bytes() as usize;
    let mut stats = StreamStats::new("thread");
    // Per tag: this thread's command on it (tags are device-wide, so index by tag).
    let mut started: Vec<Option<InFlight>> = vec![None; device.tags()];
    let mut scratch = vec![0u8; device.command_bytes_max() as usize];
    let mut write_data = vec![0x5au8; device.command_bytes_max() as usize];
    let mut issued = 0u64;
    // Requests issued since the ramp ended: `number_ios` counts these, as in fio (fio 3.33:
    // `rate_iops=1000 number_ios=2000 ramp_time=1` does 2,000 after its ramp). Bytes
    // (`size`, `io_size`) count from the start, the ramp's too, as fio's do.
    let mut issued_counted = 0u64;
    let mut in_flight = 0usize;
    let mut verified_blocks = 0u64;
    let mut error = None;
    let mut finished = Vec::with_capacity(device.tags());
    // A request taken but not yet issued (a timestamped trace's before its time, or one that
    // found no tag), and its time (`None`: whenever it goes).
    let mut pending: Option<(Request, Option<u64>)> = None;
    let mut trace_ended = false;
    // Timed requests that waited for a slot (every slot taken at their due time), and how
    // late the thread issued each after it could have gone (its own delay).
    let mut issued_late = 0u64;
    let mut issue_delays = IssueDelays::default();
    let mut pacer = Pacer::new();
    let mut issued_bytes = 0u64;
    // A timed thread's run is every request due before its end, as in the simulator: one the
    // thread is late for still goes after the end (its lateness is reported), so the offered
    // load does not depend on this machine's pauses. An untimed thread stops at the end.
    let timed = plan.requests.is_timed();
    // Set up (everything above allocates: the histograms alone take about 0.3 ms to fault
    // in): the phase starts when every thread of it is (`StartGate`).
    // From here on every time is the device clock's nanoseconds (one `clock_gettime` and a
    // subtraction a reading; `Instant` arithmetic cost about 150 instructions per request,
    // issue 38).
    let now_ns = || device.now_ns();
    let start = clock.ns_of(arrival.start());
    let measure_from = start + plan.ramp_ns;
    let deadline = plan.runtime_ns.map(|r| start + r);
    let thinktime = plan.thinktime_ns;
    // Slots wait for time only in a timed thread or one with think time.
    let fresh_for_slots = timed || thinktime > 0;
    // The latest reading of the clock in the loop (`now_ns`).
    let mut latest_ns = start;
    // When each of the `iodepth` slots may issue again.
    let mut slots: VecDeque<Slot> = std::iter::repeat_n(
        Slot {
            ready_ns: start,
            ready_on_time_ns: start,
        },
        plan.iodepth as usize,
    )
    .collect();
    loop {
        let time_up = match deadline {
            None => false,
            Some(d) if timed => pending.is_some_and(|(_, due)| due.is_some_and(|due| due >= d)),
            Some(d) => now_ns() >= d,
        };
        let more = !time_up
            && error.is_none()
            && issued_counted < plan.ios
            && issued_bytes < plan.io_bytes
            && !trace_ended;
        if more && in_flight == 0 {
            if let Some(slot) = slots.front() {
                // Nothing to wait for but the think time, or the next request's time.
                pacer.wait_until(
                    pending
                        .and_then(|(_, due)| due)
                        .map_or(slot.ready_ns, |due| due.max(slot.ready_ns)),
                    now_ns,
                );
            }
        }
        while more && issued_counted < plan.ios && issued_bytes < plan.io_bytes {
            // An untimed thread without think time has a slot ready whenever one is free
            // (each was freed at a reading of the clock, and the clock does not go back), so
            // the latest reading answers; only the issue below reads the clock again.
            let now = if fresh_for_slots { now_ns() } else { latest_ns };
            let slot = match slots.front() {
                Some(&slot) if slot.ready_ns <= now => slot,
                _ => break,
            };
            let (r, due_at) = match pending.take() {
                Some(p) => p,
                None => match plan.requests.next_request() {
                    Ok(Next::Request(r, due_ns)) => (r, due_ns.map(|ns| start + ns)),
                    Ok(Next::End) => {
                        trace_ended = true;
                        break;
                    }
                    Err(e) => {
                        error = Some(EmuRunError::Trace(e));
                        break;
                    }
                },
            };
            let due = due_at.unwrap_or(now);
            if deadline.is_some_and(|d| due >= d) {
                // Due when the run ends (a paced or timestamped request): not issued, as in
                // the simulator.
                pending = Some((r, due_at));
                break;
            }
            if due > now {
                // Not yet: finish what is in flight meanwhile, or wait for it.
                pending = Some((r, due_at));
                break;
            }
            let len = r.len_bytes as usize;
            let (op, data) = match r.op {
                Direction::Read => (Opcode::Read, None),
                Direction::Write => {
                    if plan.verify {
                        let stamp = (plan.index << 40) | issued;
                        verify::fill(&mut write_data[..len], r.offset_bytes, block, stamp);
                    }
                    (Opcode::Write, Some(&write_data[..len]))
                }
            };
            // The issue time, measured. A timed request (a timestamped trace's, a paced
            // job's) could go at its due time, or when a slot would have freed had this
            // thread kept time (`Slot::ready_on_time`) if every slot was taken then: that wait
            // for a slot is the workload's queueing, as in the simulator, and counts in its
            // latency. Anything after that is this thread's own delay (a sleep that ended
            // late, a pause, finishing other requests first): it is measured apart
            // (`issue_delays`) and left out of the latency, which is the device's.
            latest_ns = now_ns();
            let command = InFlight::issue(latest_ns, due_at, &slot);
            if due_at.is_some() {
                issued_late += u64::from(command.slot_wait_ns > ISSUED_LATE_NS);
                // Issued late by the machine when its time came inside a pause of this
                // thread (a sleep the kernel ended late, a gap in its spinning or serving).
                let machine_late = pauses::this_thread(|w| w.paused_at(command.could_go_ns));
                issue_delays.record(command.host_delay_ns(), machine_late);
            }
            match device.prepare(op, r.offset_bytes, r.len_bytes, data) {
                Ok(p) => {
                    if command.could_go_ns >= measure_from {
                        stats.io_depths_mut().record_issue(in_flight as u32 + 1);
                    }
                    started[p.tag().index()] = Some(command);
                    issuer.issue(p);
                    slots.pop_front();
                    issued += 1;
                    issued_counted += u64::from(command.could_go_ns >= measure_from);
                    issued_bytes += u64::from(r.len_bytes);
                    in_flight += 1;
                }
                // Other threads hold every tag: collect our own completions first.
                Err(HostError::NoTag { .. }) if in_flight > 0 => {
                    pending = Some((r, due_at));
                    break;
                }
                Err(HostError::NoTag { .. }) => {
                    pending = Some((r, due_at));
                    std::hint::spin_loop();
                }
                Err(e) => {
                    error = Some(e.into());
                    break;
                }
            }
        }
        if in_flight == 0 {
            if more && !slots.is_empty() {
                continue;
            }
            break;
        }
        let mine = |tag: usize| started.get(tag).is_some_and(|s| s.is_some());
        match pending.and_then(|(_, due)| due) {
            // A trace's request is due: collect what completes until then, no longer.
            Some(due) => issuer.wait_until(due, &mine, &mut |done| finished.push(done)),
            None => issuer.wait(&mine, &mut |done| finished.push(done)),
        };
        if plan.ramp_ns == 0 || now_ns() >= measure_from {
            stats.io_depths_mut().record_collected(finished.len());
        }
        // Counted for the progress bar once per round (an atomic add per request was a line
        // every host thread wrote).
        let (collected_ios, mut collected_bytes) = (finished.len() as u64, 0u64);
        for done in finished.drain(..) {
            let command = started[done.tag.index()].take().expect("started");
            let (is_read, len, offset) =
                (done.op == Opcode::Read, done.len_bytes, done.offset_bytes);
            // The device's time: from the issue to the model's completion, not to this
            // thread's collecting it.
            let device_ns = done.deadline_ns.saturating_sub(command.issued_ns);
            let out = is_read.then_some(&mut scratch[..len as usize]);
            // When the thread had the completion, for its slot (`InFlight::frees`): the
            // latency's reading unless checking the data took time after it (one clock
            // reading per request fewer, issue 38).
            let mut collected = None;
            match device.finish(done, out) {
                Ok(()) => {
                    let now = now_ns();
                    latest_ns = now;
                    collected = Some(now);
                    if command.done_on_time_ns(device_ns) >= measure_from {
                        let latency_ns = command.latency_ns(now);
                        // All of it as host time for now; `device_report` moves the modelled
                        // device's share to its components.
                        stats.record_host(is_read, len, latency_ns);
                    }
                    if is_read && plan.verify {
                        collected = None;
                        match verify::check(&scratch[..len as usize], offset, block) {
                            Ok(n) => verified_blocks += n,
                            Err(e) => {
                                error.get_or_insert(EmuRunError::Verify(e));
                            }
                        }
                    }
                }
                Err(e) => {
                    error.get_or_insert(e.into());
                }
            }
            in_flight -= 1;
            let collected = collected.unwrap_or_else(now_ns);
            latest_ns = latest_ns.max(collected);
            slots.push_back(command.frees(collected, thinktime, device_ns));
            collected_bytes += u64::from(len);
        }
        if collected_ios > 0 {
            progress.ios.fetch_add(collected_ios, Ordering::Relaxed);
            progress.bytes.fetch_add(collected_bytes, Ordering::Relaxed);
        }
        if let Some(fraction) = plan.requests.fraction_done() {
            progress
                .trace_millionths
                .fetch_max((fraction * 1e6) as u64, Ordering::Relaxed);
        }
    }
    // The thread's own time, after its ramp: a thread that stopped before the phase did (its
    // number_ios done, or a runtime shorter than the longest job's) reports its rates over
    // it, as fio does; and a run of several phases adds the phases' times up.
    let ended = Instant::now();
    stats.set_active_ns(
        clock
            .ns_of(ended)
            .saturating_sub(measure_from.max(clock.ns_of(began)))
            .max(1),
    );
    let paced_issued_late = plan.requests.is_paced().then_some(issued_late);
    let trace = match plan.requests {
        Requests::Trace(feed) if error.is_none() => {
            let stopped = pending.is_some();
            let mut trace = feed.finish(issued_late).map_err(EmuRunError::Trace)?;
            trace.stopped_early |= stopped;
            Some(trace)
        }
        _ => None,
    };
    match error {
        Some(e) => Err(e),
        None => Ok(ThreadResult {
            stats,
            verified_blocks,
            trace,
            paced_issued_late,
            ended,
            issue_delays,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> u64 {
        n * 1_000
    }

    /// A device-clock time some way into a run.
    const T0: u64 = 5_000_000_000;

    /// A margin raised to its greatest by one long overshoot (a pause of the machine) comes
    /// back down while the thread's waits are too short to sleep: it used to decay only at a
    /// sleep, so a job whose period was under 2 ms spun through the rest of its run.
    #[test]
    fn the_pacing_margin_decays_when_the_thread_does_not_sleep() {
        let origin = Instant::now();
        let now_ns = || origin.elapsed().as_nanos() as u64;
        let mut pacer = Pacer::new();
        pacer.margin_ns = Pacer::MARGIN_MAX_NS;
        for _ in 0..300 {
            pacer.wait_until(now_ns() + us(1), now_ns);
        }
        assert_eq!(pacer.margin_ns, Pacer::MARGIN_MIN_NS);
    }

    /// A paced thread (QD 1, a request due every 1,000 µs, each on the device 10 µs) that
    /// woke `late_by` late for one request: that request's latency is still the device's,
    /// the delay is the thread's own, and the requests after it neither wait for a slot nor
    /// inherit the delay.
    #[test]
    fn a_late_wake_up_is_the_threads_delay_and_not_the_requests_latency() {
        let t0 = T0;
        let late_by = us(3_000);
        let mut slot = Slot {
            ready_ns: t0,
            ready_on_time_ns: t0,
        };
        for k in 0..5u64 {
            let due = t0 + us(1_000 * k);
            // Request 1 goes out 3 ms late; the others at once (request 2 is already due
            // when the thread gets back, so it goes as soon as its slot is collected).
            let issued_at = match k {
                1 => due + late_by,
                2..=4 => due.max(slot.ready_ns),
                _ => due,
            };
            let c = InFlight::issue(issued_at, Some(due), &slot);
            let collected = issued_at + us(10);
            assert_eq!(
                c.latency_ns(collected),
                us(10),
                "request {k}: the device's time"
            );
            assert_eq!(c.slot_wait_ns, 0, "request {k} never waited for a slot");
            let expected_delay = match k {
                1 => late_by,
                _ => issued_at - due,
            };
            assert_eq!(c.host_delay_ns(), expected_delay, "request {k}");
            slot = c.frees(collected, 0, us(10));
        }
    }

    /// Requests due faster than the device serves them at QD 1 wait for the slot, as in the
    /// simulator: the wait is in their latency and is not the thread's delay.
    #[test]
    fn a_request_due_while_its_slot_is_taken_waits_for_it_in_its_latency() {
        let t0 = T0;
        let slot = Slot {
            ready_ns: t0,
            ready_on_time_ns: t0,
        };
        // Both due at t0; the first takes 10 µs on the device.
        let first = InFlight::issue(t0, Some(t0), &slot);
        let slot = first.frees(t0 + us(10), 0, us(10));
        let second = InFlight::issue(t0 + us(10), Some(t0), &slot);
        assert_eq!(second.slot_wait_ns, us(10));
        assert_eq!(second.host_delay_ns(), 0);
        assert_eq!(second.latency_ns(t0 + us(20)), us(20));
    }

    /// An untimed request's latency is from its issue; it has no due time to be late for.
    #[test]
    fn an_untimed_request_counts_from_its_issue() {
        let t0 = T0;
        let slot = Slot {
            ready_ns: t0,
            ready_on_time_ns: t0,
        };
        let c = InFlight::issue(t0 + us(5), None, &slot);
        assert_eq!((c.slot_wait_ns, c.host_delay_ns()), (0, 0));
        assert_eq!(c.latency_ns(t0 + us(12)), us(7));
        let freed = c.frees(t0 + us(12), us(100), us(7));
        assert_eq!(freed.ready_ns, t0 + us(112));
    }

    /// A thread paused between the device's completion and its collecting it (a machine
    /// pause of 100 ms at QD 1): the requests due meanwhile did not wait for a slot the
    /// device had freed; they were issued late by the thread.
    #[test]
    fn a_pause_before_collecting_is_the_threads_not_a_full_slot() {
        let t0 = T0;
        let slot = Slot {
            ready_ns: t0,
            ready_on_time_ns: t0,
        };
        let first = InFlight::issue(t0, Some(t0), &slot);
        // The device took 10 µs; the thread collected it 100 ms later.
        let collected = t0 + us(100_000);
        let slot = first.frees(collected, 0, us(10));
        // The next was due 1 ms after the first and goes as soon as the thread is back.
        let second = InFlight::issue(collected, Some(t0 + us(1_000)), &slot);
        assert_eq!(second.slot_wait_ns, 0);
        assert_eq!(second.host_delay_ns(), us(99_000));
        assert_eq!(second.latency_ns(collected + us(10)), us(10));
    }
}
