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
use nvarray_host::{fine_timer_slack, Device, HostError, Opcode, Options};
use nvarray_model::DeviceConfig;
use nvarray_report::{process_cpu_seconds, RunReport, StreamStats};
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
    for (index, phase) in phase_plans.into_iter().enumerate() {
        let mut phase_progress = |f: f64| progress((index as f64 + f) / phase_count);
        let ran = run_phase(device, &shared, phase, &mut phase_progress)?;
        measured_ns += ran.measured_ns;
        ramps = ramps.plus(&ran.ramp);
        for (stream, result) in ran.results {
            streams[stream].merge(&result.stats);
            verified_blocks += result.verified_blocks;
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
    report.require_enough_requests();
    Ok(report)
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
    let start = Instant::now();
    // Each thread says when it has finished, so the phase ends when its last thread does,
    // not at the next progress tick.
    let (finished_tx, finished_rx) = std::sync::mpsc::channel::<()>();
    let results: Vec<Result<(usize, ThreadResult), EmuRunError>> = std::thread::scope(|s| {
        let handles = plan
            .threads
            .into_iter()
            .map(|plan| {
                let done = &done;
                let finished = FinishedSignal(finished_tx.clone());
                std::thread::Builder::new()
                    .name(format!("nvarray-job-{}", plan.stream))
                    .spawn_scoped(s, move || {
                        let _finished = finished;
                        let (stream, index) = (plan.stream, plan.index);
                        if let Some(cpu) = device.host_cpu(index as usize) {
                            pin_this_thread(cpu).map_err(|source| EmuRunError::Pin {
                                thread: index,
                                cpu,
                                source,
                            })?;
                        }
                        run_thread(device, shared, plan, start, done).map(|st| (stream, st))
                    })
            })
            .collect::<Result<Vec<_>, _>>();
        let handles = match handles {
            Ok(handles) => handles,
            // The threads already started end on their own (the workload bounds them); the
            // scope waits for them.
            Err(e) => return vec![Err(EmuRunError::ThreadStart(e))],
        };
        // Only the threads hold senders now, so the channel disconnects when the last ends.
        drop(finished_tx);
        // The calling thread reports progress while the workers run, and reads the device
        // when the ramp ends; it wakes for each thread that finishes.
        let mut running = handles.len();
        while running > 0 {
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
            if at_ramp_end.is_none() {
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
}

/// A timestamped trace's request issued more than this after its time counts as issued late
/// (every slot was taken, or the host thread was busy finishing others).
const ISSUED_LATE_NS: u64 = 1_000;

/// Naps shorter than this are spun instead of slept (a kernel sleep overshoots by tens of
/// microseconds; see `driver::NAP_WAKE_MARGIN_NS`).
const THINK_SPIN_BELOW: Duration = Duration::from_micros(50);

/// Waits until `until`: sleeps for all but the last `THINK_SPIN_BELOW`, spins the rest.
fn think_until(until: Instant) {
    let now = Instant::now();
    if until <= now {
        return;
    }
    if until - now > THINK_SPIN_BELOW {
        fine_timer_slack();
        std::thread::sleep(until - now - THINK_SPIN_BELOW);
    }
    while Instant::now() < until {
        std::hint::spin_loop();
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
    start: Instant,
    progress: &Progress,
) -> Result<ThreadResult, EmuRunError> {
    let began = Instant::now();
    // Completions before the end of the job's ramp are not counted.
    let measure_from = start + Duration::from_nanos(plan.ramp_ns);
    let completion = device.completion();
    let mut issuer = Issuer::new(device, shared, completion);
    let block = device.block_bytes() as usize;
    let mut stats = StreamStats::new("thread");
    // Per tag: when this thread prepared the command (tags are device-wide, so index by tag).
    let mut started: Vec<Option<Instant>> = vec![None; device.tags()];
    let mut scratch = vec![0u8; device.command_bytes_max() as usize];
    let mut write_data = vec![0x5au8; device.command_bytes_max() as usize];
    let runtime = plan.runtime_ns.map(Duration::from_nanos);
    let deadline = runtime.map(|r| start + r);
    let thinktime = Duration::from_nanos(plan.thinktime_ns);
    // When each of the `iodepth` slots may issue again.
    let mut slots: VecDeque<Instant> = std::iter::repeat_n(start, plan.iodepth as usize).collect();
    let mut issued = 0u64;
    let mut in_flight = 0usize;
    let mut verified_blocks = 0u64;
    let mut error = None;
    let mut finished = Vec::with_capacity(device.tags());
    // A request taken but not yet issued (a timestamped trace's before its time, or one that
    // found no tag), and its time (`None`: whenever it goes).
    let mut pending: Option<(Request, Option<Instant>)> = None;
    let mut trace_ended = false;
    let mut issued_late = 0u64;
    let mut issued_bytes = 0u64;
    loop {
        let time_up = deadline.is_some_and(|d| Instant::now() >= d);
        let more = !time_up
            && error.is_none()
            && issued < plan.ios
            && issued_bytes < plan.io_bytes
            && !trace_ended;
        if more && in_flight == 0 {
            if let Some(&ready) = slots.front() {
                // Nothing to wait for but the think time, or the next request's time.
                think_until(
                    pending
                        .and_then(|(_, due)| due)
                        .map_or(ready, |due| due.max(ready)),
                );
            }
        }
        while more && issued < plan.ios && issued_bytes < plan.io_bytes {
            let now = Instant::now();
            match slots.front() {
                Some(&ready) if ready <= now => {}
                _ => break,
            }
            let (r, due_at) = match pending.take() {
                Some(p) => p,
                None => match plan.requests.next_request() {
                    Ok(Next::Request(r, due_ns)) => {
                        (r, due_ns.map(|ns| start + Duration::from_nanos(ns)))
                    }
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
            let late_ns = now.duration_since(due).as_nanos() as u64;
            issued_late += u64::from(late_ns > ISSUED_LATE_NS);
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
            // Latency counts from a timed request's due time (a timestamped trace's, a paced
            // job's): one issued late, every slot taken, shows its wait, as the device's
            // queueing would. Others count from here, after their data was made.
            let t0 = match due_at {
                Some(due) => Instant::now().min(due),
                None => Instant::now(),
            };
            match device.prepare(op, r.offset_bytes, r.len_bytes, data) {
                Ok(p) => {
                    started[p.tag().index()] = Some(t0);
                    issuer.issue(p);
                    slots.pop_front();
                    issued += 1;
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
        for done in finished.drain(..) {
            let t0 = started[done.tag.index()].take().expect("started");
            let (is_read, len, offset) =
                (done.op == Opcode::Read, done.len_bytes, done.offset_bytes);
            let out = is_read.then_some(&mut scratch[..len as usize]);
            match device.finish(done, out) {
                Ok(()) => {
                    let now = Instant::now();
                    if now >= measure_from {
                        let latency_ns = now.duration_since(t0).as_nanos() as u64;
                        // All of it as host time for now; `device_report` moves the modelled
                        // device's share to its components.
                        stats.record_host(is_read, len, latency_ns);
                    }
                    if is_read && plan.verify {
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
            slots.push_back(Instant::now() + thinktime);
            progress.ios.fetch_add(1, Ordering::Relaxed);
            progress.bytes.fetch_add(u64::from(len), Ordering::Relaxed);
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
        ended
            .saturating_duration_since(measure_from.max(began))
            .as_nanos()
            .max(1) as u64,
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
        }),
    }
}
