//! `nvarray bench --engine emu`: fio-like workloads through the driver against the wall clock.
//!
//! One host thread per thread of the job plan, each keeping its queue depth of commands in
//! flight on its own way to the device (see `nvarray_host::ladder`). Latency is what the host
//! thread observes: from preparing the command (taking a tag, copying a write's data) to
//! finishing it (copying a read's data out), so it includes the driver's whole cost.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nvarray_host::ladder::LadderShared;
use nvarray_host::options::pin_this_thread;
use nvarray_host::{Device, Options};
use nvarray_model::DeviceConfig;
use nvarray_report::{
    process_cpu_seconds, IssueDelays, RunReport, StreamStats, Verdict, ISSUED_LATE_NS,
};
use nvarray_workload::trace::{Geometry, TraceReport};
use nvarray_workload::Workload;

use crate::device_report::{device_report_over, DeviceReading};
use crate::emu_exit::PhaseExit;
use crate::emu_steady::{EmuSteady, JobSteady};
use crate::error::EmuRunError;
use crate::host_thread::{run_thread, Progress, ThreadResult};
use crate::pacing::device_ns_at;
use crate::plan::{job_streams, Plan, ThreadPlan};

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
        .map_err(|e| match e {
            // The emulator's largest command is its tag buffer: that, and only that, is what
            // --buffer-size changes.
            e @ nvarray_workload::WorkloadError::TransferTooLarge { .. } => {
                EmuRunError::Workload(format!(
                    "{e} (the emulator's largest command is the tag buffer size, --buffer-size)"
                ))
            }
            e => EmuRunError::Workload(e.to_string()),
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
    let mut plan = Plan::new(workload, geometry)?;
    plan.place_writes(workload, device.config())?;
    let block = device.block_bytes() as usize;
    check_verify_fits(&plan, block, device)?;
    let threads = plan.threads.len();
    check_thread_count(threads)?;
    let shared = LadderShared::new(device);
    let mut streams = job_streams(workload);
    let phase_plans = plan.into_phases();
    let cpu_start = process_cpu_seconds();
    let totals = run_phases(device, &shared, phase_plans, &mut streams, progress)?;
    progress(1.0);
    let cpu_seconds = process_cpu_seconds() - cpu_start;
    let mut report = device_report_over(
        device,
        &streams,
        totals.measured_ns.max(1),
        cpu_seconds,
        &totals.ramps,
    );
    if let Some(setup) = report.emulator.as_mut() {
        setup.verified_blocks = totals.verified_blocks;
        setup.checked_blocks = totals.checked_blocks;
        setup.host_cpus = (0..threads).filter_map(|i| device.host_cpu(i)).collect();
        setup.host_threads = threads;
    }
    report.trace = totals.trace;
    report.paced_issued_late = totals.paced_issued_late;
    report.issue_lateness_ns = totals.issue_delays.summary();
    judge_issue_lateness(&mut report, device);
    report.require_enough_requests();
    Ok(report)
}

/// Refuses a workload of more host threads than `HOST_THREADS_MAX`.
fn check_thread_count(threads: usize) -> Result<(), EmuRunError> {
    if threads > HOST_THREADS_MAX {
        return Err(EmuRunError::Workload(format!(
            "the workload asks for {threads} threads (numjobs summed over its jobs); the emulator runs each as a real thread with its own queue pair, at most {HOST_THREADS_MAX} (the simulator, --engine sim, has no such limit)"
        )));
    }
    Ok(())
}

/// What a run's phases add up to, beside the figures their threads merge into the streams.
#[derive(Default)]
struct RunTotals {
    measured_ns: u64,
    verified_blocks: u64,
    checked_blocks: u64,
    /// What the device did during the phases' ramps, to leave out of its figures.
    ramps: DeviceReading,
    trace: Option<TraceReport>,
    paced_issued_late: Option<u64>,
    issue_delays: IssueDelays,
}

impl RunTotals {
    /// Adds what phase `ran` did, merging its threads' figures into `streams`.
    fn add(&mut self, ran: PhaseRun, streams: &mut [StreamStats]) {
        self.measured_ns += ran.measured_ns;
        self.ramps = self.ramps.plus(&ran.ramp);
        for (stream, result) in ran.results {
            streams[stream].merge(&result.stats);
            self.verified_blocks += result.verified_blocks;
            self.checked_blocks += result.checked_blocks;
            self.issue_delays.merge(&result.issue_delays);
            self.trace = self.trace.take().or(result.trace);
            if let Some(late) = result.paced_issued_late {
                *self.paced_issued_late.get_or_insert(0) += late;
            }
        }
    }
}

/// Runs the phases one after another, each once the one before has ended, and returns
/// what they add up to; `progress` sees the fraction of all of them done.
fn run_phases(
    device: &Device,
    shared: &LadderShared,
    phase_plans: Vec<Plan>,
    streams: &mut [StreamStats],
    progress: &mut dyn FnMut(f64),
) -> Result<RunTotals, EmuRunError> {
    let phase_count = phase_plans.len() as f64;
    let mut totals = RunTotals::default();
    for (index, phase) in phase_plans.into_iter().enumerate() {
        let mut phase_progress = |f: f64| progress((index as f64 + f) / phase_count);
        let ran = run_phase(device, shared, phase, streams, &mut phase_progress)?;
        let ends_the_run = ran.ends_the_run;
        totals.add(ran, streams);
        if ends_the_run {
            // fio's `exit_what=all`: the later phases' jobs never start.
            break;
        }
    }
    Ok(totals)
}

/// Marks `report` machine-limited or unfaithful when its timed requests were issued later
/// (its `issue_lateness_ns` p99) than `device`'s lateness bound.
fn judge_issue_lateness(report: &mut RunReport, device: &Device) {
    let Some(issue) = report.issue_lateness_ns else {
        return;
    };
    // The offered load's timing is part of what the run claims: timed requests issued
    // later than the completions may be posted make it not the workload asked for.
    // Held to the same bound and told apart the same way as the completions: late only
    // where the machine paused the thread is machine-limited.
    let bound = device.lateness().bound_ns;
    if issue.p99 > bound {
        let late = format!(
            "timed requests (rate, rate_iops, a trace's timestamps) issued late by the host thread: p99 {} ns after they could have gone exceeds the lateness bound {bound} ns ({} of {} later than {ISSUED_LATE_NS} ns; {} came due while the machine paused the thread: a sleep the kernel ended late, a gap in its spinning; {} held by the request before them on their slot: a completion that came late, judged with the completions' lateness, or that request's own late issue)",
            issue.p99, issue.late, issue.requests, issue.machine_late, issue.held_by_previous
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

/// Every verifying thread's header fits in its `verify_interval`, which splits the device's
/// blocks of `block` bytes, and the device keeps the data it would check.
fn check_verify_fits(plan: &Plan, block: usize, device: &Device) -> Result<(), EmuRunError> {
    let verifies = plan.threads.iter().any(|t| t.verify.is_some());
    if verifies && device.options().backing == nvarray_host::BackingKind::None {
        return Err(EmuRunError::Workload(
            "verify checks the data read against what was written, and --backing none keeps \
             no data (every read returns zeroes): use --backing ram or file:PATH to verify"
                .into(),
        ));
    }
    for v in plan.threads.iter().filter_map(|t| t.verify.as_ref()) {
        let (header, interval) = (v.header_bytes(), v.interval_bytes(block));
        if interval < header {
            return Err(EmuRunError::Workload(format!(
                "verify needs {header} bytes for its header in each verify_interval; this one \
                 is {interval} (a device block of this device, if verify_interval is not set)"
            )));
        }
        if !block.is_multiple_of(interval) {
            return Err(EmuRunError::Workload(format!(
                "verify_interval={interval} must divide the device's block of {block} bytes \
                 (every request is whole blocks)"
            )));
        }
    }
    Ok(())
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
        // Each thread arrives once (`Arrival`), and the gate waits for every thread.
        assert!(state.0 > 0, "more threads arrived than the gate waits for");
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
    /// A thread with `exitall` and `exit_what=all` ended: no later phase runs.
    ends_the_run: bool,
}

/// Runs one phase's threads side by side until each has finished.
fn run_phase(
    device: &Device,
    shared: &LadderShared,
    plan: Plan,
    streams: &mut [StreamStats],
    progress: &mut dyn FnMut(f64),
) -> Result<PhaseRun, EmuRunError> {
    let ramp = Duration::from_nanos(plan.ramp_ns());
    let done = Progress::default();
    let at_start = DeviceReading::take(device);
    let mut watch = PhaseWatch::of(&plan, ramp, &at_start);
    let mut plan = plan;
    plan.join_flows();
    let steady = EmuSteady::of(&plan.threads, streams.len());
    let exit = phase_exit(&plan);
    let threads = plan.threads.len();
    let gate = StartGate::new(threads);
    // Until every thread is set up the phase has not started; the progress bar counts from
    // here meanwhile.
    let spawned = Instant::now();
    // Each thread says when it has finished, so the phase ends when its last thread does,
    // not at the next progress tick.
    let (finished_tx, finished_rx) = std::sync::mpsc::channel::<()>();
    let results: Vec<Result<(usize, ThreadResult), EmuRunError>> = std::thread::scope(|s| {
        let sharing = (&done, &gate, &steady, &exit);
        let handles = spawn_threads(s, device, shared, plan.threads, sharing, &finished_tx);
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
        watch.until_all_end(
            handles.len(),
            &finished_rx,
            (&gate, spawned, &done, &steady),
            device,
            progress,
        );
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let results = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    steady.report_into(streams);
    let start = gate.started().unwrap_or(spawned);
    let measured_ns = measured_ns(&results, start, ramp);
    // A phase that ended within its ramp measured nothing.
    let at_ramp_end = watch
        .at_ramp_end
        .unwrap_or_else(|| DeviceReading::take(device));
    Ok(PhaseRun {
        results,
        measured_ns,
        ramp: at_ramp_end.since(&at_start),
        ends_the_run: exit.ends_the_run(),
    })
}

/// The phase's `exitall` flags, one per reporting group its threads end (none without
/// `exitall`).
fn phase_exit(plan: &Plan) -> PhaseExit {
    let groups = plan
        .threads
        .iter()
        .filter_map(|t| t.control.exit)
        .map(|(_, g)| g + 1)
        .max();
    PhaseExit::new(groups.unwrap_or(0))
}

/// The phase's measured time: from its `start` to its end, less its `ramp`.
fn measured_ns(results: &[(usize, ThreadResult)], start: Instant, ramp: Duration) -> u64 {
    // The phase's end is when its last thread stopped measuring, not when this thread
    // noticed (joining threads is nobody's I/O).
    let ended = results
        .iter()
        .map(|(_, r)| r.ended)
        .max()
        .unwrap_or_else(Instant::now);
    ended
        .saturating_duration_since(start)
        .saturating_sub(ramp)
        .as_nanos() as u64
}

/// Starts each of a phase's `threads` in scope `s`, each with a clone of `finished` to
/// signal its end; the error of the first that could not be started. `(done, gate, steady,
/// exit)`: what the phase's threads share, its progress counters, start gate, steady-state
/// watches and `exitall` flags.
fn spawn_threads<'s, 'e: 's>(
    s: &'s std::thread::Scope<'s, 'e>,
    device: &'e Device,
    shared: &'e LadderShared,
    threads: Vec<ThreadPlan>,
    (done, gate, steady, exit): (&'e Progress, &'e StartGate, &'e EmuSteady, &'e PhaseExit),
    finished: &std::sync::mpsc::Sender<()>,
) -> std::io::Result<Vec<ThreadHandle<'s>>> {
    threads
        .into_iter()
        .map(|plan| {
            let finished = FinishedSignal(finished.clone());
            let job = steady.job(plan.stream);
            spawn_thread(s, device, shared, plan, (done, gate, finished, (job, exit)))
        })
        .collect()
}

type ThreadHandle<'s> =
    std::thread::ScopedJoinHandle<'s, Result<(usize, ThreadResult), EmuRunError>>;

/// Starts one host thread of a phase: pinned to its CPU if the options say so, then
/// `run_thread`. `(done, gate, finished)`: the phase's progress counters, its start gate, and
/// the signal the thread sends however it ends.
fn spawn_thread<'s, 'e: 's>(
    s: &'s std::thread::Scope<'s, 'e>,
    device: &'e Device,
    shared: &'e LadderShared,
    plan: ThreadPlan,
    (done, gate, finished, (steady, exit)): (
        &'e Progress,
        &'e StartGate,
        FinishedSignal,
        (Option<&'e JobSteady>, &'e PhaseExit),
    ),
) -> std::io::Result<ThreadHandle<'s>> {
    std::thread::Builder::new()
        .name(format!("nvarray-job-{}", plan.stream))
        .spawn_scoped(s, move || {
            let _finished = finished;
            // Arrives at the gate on every way out, so no thread waits for one that failed
            // before it was ready.
            let mut arrival = Arrival::new(gate);
            let (stream, index) = (plan.stream, plan.index);
            if let Some(cpu) = device.host_cpu(index as usize) {
                pin_this_thread(cpu).map_err(|source| EmuRunError::Pin {
                    thread: index,
                    cpu,
                    source,
                })?;
            }
            run_thread(
                device,
                shared,
                plan,
                || arrival.start(),
                (done, steady, exit),
            )
            .map(|st| (stream, st))
        })
}

/// What the calling thread watches while a phase's threads run: how far they are, for the
/// progress figure, and the device's reading when the ramp ends.
struct PhaseWatch {
    longest: Option<Duration>,
    ramp: Duration,
    ios_total: u64,
    bytes_total: u64,
    at_ramp_end: Option<DeviceReading>,
}

impl PhaseWatch {
    /// The watch of phase `plan`, whose ramp is `ramp` and whose device reading at its start
    /// is `at_start` (also the ramp's end when it has none).
    fn of(plan: &Plan, ramp: Duration, at_start: &DeviceReading) -> Self {
        PhaseWatch {
            longest: plan.longest_runtime_ns.map(Duration::from_nanos),
            ramp,
            ios_total: plan.ios(),
            bytes_total: plan.io_bytes(),
            at_ramp_end: ramp.is_zero().then(|| at_start.clone()),
        }
    }

    /// Reports progress and reads the device when the ramp ends, until each of `running`
    /// threads has signalled its end (or every sender is gone). `(gate, spawned, done)`: the
    /// phase's start gate, when its threads were spawned, and their progress counters.
    fn until_all_end(
        &mut self,
        mut running: usize,
        finished: &std::sync::mpsc::Receiver<()>,
        (gate, spawned, done, steady): (&StartGate, Instant, &Progress, &EmuSteady),
        device: &Device,
        progress: &mut dyn FnMut(f64),
    ) {
        while running > 0 {
            let started = gate.started();
            let start = started.unwrap_or(spawned);
            let by_time = self
                .longest
                .map(|r| start.elapsed().as_secs_f64() / r.as_secs_f64());
            let by_ios = done.ios.load(Ordering::Relaxed) as f64 / self.ios_total.max(1) as f64;
            let by_bytes =
                done.bytes.load(Ordering::Relaxed) as f64 / self.bytes_total.max(1) as f64;
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
            if let Some(started) = started {
                if let Some(next) = steady.tick(device_ns_at(device, started), device.now_ns()) {
                    nap = nap.min(Duration::from_nanos(next));
                }
            }
            if self.at_ramp_end.is_none() && started.is_some() {
                let to_ramp_end = self.ramp.saturating_sub(start.elapsed());
                if to_ramp_end.is_zero() {
                    self.at_ramp_end = Some(DeviceReading::take(device));
                }
                nap = nap.min(to_ramp_end);
            }
            match finished.recv_timeout(nap) {
                Ok(()) => running -= 1,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                // Every sender is gone: every thread has ended.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }
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
