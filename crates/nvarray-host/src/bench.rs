//! `nvarray bench --engine emu`: fio-like workloads through the driver against the wall clock.
//!
//! One host thread per fio job thread, each keeping its queue depth of commands in flight on
//! its own way to the device (see `ladder`). Latency is what the host thread observes: from
//! preparing the command (taking a tag, copying a write's data) to finishing it (copying a
//! read's data out), so it includes the driver's whole cost.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nvarray_model::{Breakdown, Component, DeviceConfig};
use nvarray_report::{
    cpu_seconds_per_gb, process_cpu_seconds, EmulatorSetup, LatenessNs, RunReport, StreamStats,
};
use nvarray_workload::{Op, RequestGen, Verify, Workload};

use crate::driver::Device;
use crate::ladder::{Issuer, LadderShared};
use crate::{verify, HostError, IoOp, Options};

/// Run length when a job gives neither `runtime` nor `number_ios` (as the simulator).
pub const DEFAULT_RUNTIME: Duration = Duration::from_millis(100);

/// Runs `workload` on an emulated `device`. `progress` is called now and then with the
/// fraction done (0.0 to 1.0).
pub fn run(
    device: &DeviceConfig,
    workload: &Workload,
    options: &Options,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, HostError> {
    let opened = Device::open(device, options)?;
    workload
        .validate(
            opened.size_bytes(),
            opened.block_bytes(),
            opened.command_bytes_max(),
        )
        .map_err(|e| {
            HostError::Workload(format!(
                "{e} (the emulator's largest command is the tag buffer size, --buffer-size)"
            ))
        })?;
    run_on(&opened, workload, progress)
}

/// Host threads one emulator run starts at most: each is a real thread with its own queue
/// pair, and more than this only take turns on the cores.
pub const HOST_THREADS_MAX: usize = 1024;

/// Runs `workload` on an opened device (so tests and servers can reuse one).
pub fn run_on(
    device: &Device,
    workload: &Workload,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, HostError> {
    if workload.jobs.is_empty() {
        return Err(HostError::Workload("the workload has no jobs".into()));
    }
    let block = device.block_bytes() as usize;
    if workload.jobs.iter().any(|j| j.verify != Verify::None) && block < verify::HEADER_BYTES {
        return Err(HostError::Workload(format!(
            "verify needs blocks of at least {} bytes for its header; this device's are {block}",
            verify::HEADER_BYTES
        )));
    }
    let threads: u64 = workload
        .jobs
        .iter()
        .map(|j| u64::from(j.numjobs))
        .fold(0, u64::saturating_add);
    if threads > HOST_THREADS_MAX as u64 {
        return Err(HostError::Workload(format!(
            "the workload asks for {threads} threads (numjobs summed over its jobs); the emulator runs each as a real thread with its own queue pair, at most {HOST_THREADS_MAX} (the simulator, --engine sim, has no such limit)"
        )));
    }
    let shared = LadderShared::new(device);
    let mut plans = Vec::new();
    for (stream, job) in workload.jobs.iter().enumerate() {
        let runtime = match (job.runtime_ns, job.number_ios) {
            (None, None) => Some(DEFAULT_RUNTIME),
            (r, _) => r.map(Duration::from_nanos),
        };
        for t in 0..job.numjobs {
            let gen = RequestGen::new(job, t, device.size_bytes(), device.block_bytes())
                .map_err(|e| HostError::Workload(format!("job {}: {e}", job.name)))?;
            plans.push(ThreadPlan {
                index: plans.len() as u64,
                stream,
                gen,
                iodepth: job.iodepth as usize,
                ios: job.number_ios.unwrap_or(u64::MAX),
                runtime,
                longest_runtime: None,
                thinktime: Duration::from_nanos(job.thinktime_ns),
                verify: job.verify != Verify::None,
            });
        }
    }
    let longest = plans.iter().filter_map(|p| p.runtime).max();
    for p in &mut plans {
        p.longest_runtime = longest;
    }
    let ios_total: u64 = plans.iter().map(|p| p.ios).fold(0, u64::saturating_add);
    let done_ios = AtomicU64::new(0);
    let cpu_start = process_cpu_seconds();
    let start = Instant::now();
    let results: Vec<Result<(usize, ThreadResult), HostError>> = std::thread::scope(|s| {
        let handles = plans
            .into_iter()
            .map(|plan| {
                let (shared, done_ios) = (&shared, &done_ios);
                std::thread::Builder::new()
                    .name(format!("nvarray-job-{}", plan.stream))
                    .spawn_scoped(s, move || {
                        let stream = plan.stream;
                        run_thread(device, shared, plan, start, done_ios).map(|st| (stream, st))
                    })
            })
            .collect::<Result<Vec<_>, _>>();
        let handles = match handles {
            Ok(handles) => handles,
            // The threads already started end on their own (the workload bounds them); the
            // scope waits for them.
            Err(e) => {
                return vec![Err(HostError::Config(format!(
                    "cannot start a job thread: {e}"
                )))]
            }
        };
        // The calling thread reports progress while the workers run.
        while !handles.iter().all(|h| h.is_finished()) {
            let by_time = longest.map(|r| start.elapsed().as_secs_f64() / r.as_secs_f64());
            let by_ios = done_ios.load(Ordering::Relaxed) as f64 / ios_total.max(1) as f64;
            progress(by_time.unwrap_or(0.0).max(by_ios).min(1.0));
            std::thread::sleep(Duration::from_millis(50));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    progress(1.0);
    let mut streams: Vec<StreamStats> = workload
        .jobs
        .iter()
        .map(|j| StreamStats::new(&j.name))
        .collect();
    let mut verified_blocks = 0;
    for r in results {
        let (stream, result) = r?;
        streams[stream].merge(&result.stats);
        verified_blocks += result.verified_blocks;
    }
    let cpu_seconds = process_cpu_seconds() - cpu_start;
    let mut report = device_report(device, &streams, elapsed_ns, cpu_seconds);
    if let Some(setup) = report.emulator.as_mut() {
        setup.verified_blocks = verified_blocks;
    }
    report.require_enough_requests();
    Ok(report)
}

/// The report of a run on an opened `device`: totals from `streams` (what the host side
/// measured, each latency recorded as `host` time), the model's utilisation and wear, the
/// modelled device's share of the mean latency moved from `host` to its components, CPU
/// seconds per GB, the emulator's lateness and faithfulness verdict, and its setup.
/// `nvarray bench` and the front ends (`nvarray serve`, `nvarray mount`) all report through
/// it, so their tables read the same; `verified_blocks` is left 0 for the caller to fill.
pub fn device_report(
    device: &Device,
    streams: &[StreamStats],
    elapsed_ns: u64,
    cpu_seconds: f64,
) -> RunReport {
    let mut report = device.emulator().with_core(|core| {
        let mut report = RunReport::from_model("emu", core.model(), streams, elapsed_ns);
        let (sum, count) = core.modelled();
        attribute_device_time(&mut report, sum, count);
        report
    });
    let bytes = report.totals.read_bytes + report.totals.write_bytes;
    report.cpu_seconds_per_gb = cpu_seconds_per_gb(cpu_seconds, bytes);
    let lateness = device.emulator().lateness();
    report.lateness_ns = LatenessNs {
        p50: lateness.p50_ns,
        p99: lateness.p99_ns,
        max: lateness.max_ns,
    };
    report.faithful = lateness.faithful;
    report.unfaithful_reason = lateness.unfaithful_reason;
    let options = device.options();
    report.emulator = Some(EmulatorSetup {
        device_threads: options.device_threads,
        stack: options.stack.name(),
        completion: device.completion().name(),
        verified_blocks: 0,
    });
    report
}

/// What one host thread measured.
struct ThreadResult {
    stats: StreamStats,
    /// Blocks read back that held data this run wrote and passed verification.
    verified_blocks: u64,
}

struct ThreadPlan {
    /// The thread's number in the run (part of every verify stamp it writes).
    index: u64,
    stream: usize,
    gen: RequestGen,
    iodepth: usize,
    ios: u64,
    runtime: Option<Duration>,
    /// The longest job's runtime: a thread with a shorter one ends before the run does.
    longest_runtime: Option<Duration>,
    thinktime: Duration,
    verify: bool,
}

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
        crate::driver::fine_timer_slack();
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
    done_ios: &AtomicU64,
) -> Result<ThreadResult, HostError> {
    let began = Instant::now();
    let completion = device.completion();
    let mut issuer = Issuer::new(device, shared, completion);
    let block = device.block_bytes() as usize;
    let mut stats = StreamStats::new("thread");
    // Per tag: when this thread prepared the command (tags are device-wide, so index by tag).
    let mut started: Vec<Option<Instant>> = vec![None; device.tags()];
    let mut scratch = vec![0u8; device.command_bytes_max() as usize];
    let mut write_data = vec![0x5au8; device.command_bytes_max() as usize];
    let deadline = plan.runtime.map(|r| start + r);
    // When each of the `iodepth` slots may issue again.
    let mut slots: VecDeque<Instant> = std::iter::repeat_n(start, plan.iodepth).collect();
    let mut issued = 0u64;
    let mut in_flight = 0usize;
    let mut verified_blocks = 0u64;
    let mut error = None;
    let mut finished = Vec::with_capacity(device.tags());
    loop {
        let time_up = deadline.is_some_and(|d| Instant::now() >= d);
        let more = !time_up && error.is_none() && issued < plan.ios;
        if more && in_flight == 0 {
            if let Some(&ready) = slots.front() {
                // Nothing to wait for but the think time.
                think_until(ready);
            }
        }
        while more && issued < plan.ios {
            let now = Instant::now();
            match slots.front() {
                Some(&ready) if ready <= now => {}
                _ => break,
            }
            let r = plan.gen.next_request();
            let len = r.len_bytes as usize;
            let (op, data) = match r.op {
                Op::Read => (IoOp::Read, None),
                Op::Write => {
                    if plan.verify {
                        let stamp = (plan.index << 40) | issued;
                        verify::fill(&mut write_data[..len], r.offset_bytes, block, stamp);
                    }
                    (IoOp::Write, Some(&write_data[..len]))
                }
            };
            let t0 = Instant::now();
            match device.prepare(op, r.offset_bytes, r.len_bytes, data) {
                Ok(p) => {
                    started[p.tag().index()] = Some(t0);
                    issuer.issue(p);
                    slots.pop_front();
                    issued += 1;
                    in_flight += 1;
                }
                // Other threads hold every tag: collect our own completions first.
                Err(HostError::NoTag { .. }) if in_flight > 0 => break,
                Err(HostError::NoTag { .. }) => std::hint::spin_loop(),
                Err(e) => {
                    error = Some(e);
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
        issuer.wait(&mine, &mut |done| finished.push(done));
        for done in finished.drain(..) {
            let t0 = started[done.tag.index()].take().expect("started");
            let (is_read, len, offset) = (done.op == IoOp::Read, done.len_bytes, done.offset_bytes);
            let out = is_read.then_some(&mut scratch[..len as usize]);
            match device.finish(done, out) {
                Ok(()) => {
                    let latency_ns = t0.elapsed().as_nanos() as u64;
                    // All of it as host time for now; `attribute_device_time` moves the
                    // modelled device's share to its components.
                    let mut breakdown = Breakdown::default();
                    breakdown.set(Component::Host, latency_ns);
                    stats.record(is_read, len, latency_ns, &breakdown);
                    if is_read && plan.verify {
                        match verify::check(&scratch[..len as usize], offset, block) {
                            Ok(n) => verified_blocks += n,
                            Err(e) => {
                                error.get_or_insert(HostError::Verify(e));
                            }
                        }
                    }
                }
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
            in_flight -= 1;
            slots.push_back(Instant::now() + plan.thinktime);
            done_ios.fetch_add(1, Ordering::Relaxed);
        }
    }
    // A thread that stopped before the run did (its number_ios done, or a runtime shorter
    // than the longest job's) reports its rates over its own time, as fio does.
    let shorter = plan.runtime.is_some_and(|r| Some(r) < plan.longest_runtime);
    if issued >= plan.ios || shorter {
        stats.set_active_ns(began.elapsed().as_nanos() as u64);
    }
    match error {
        Some(e) => Err(e),
        None => Ok(ThreadResult {
            stats,
            verified_blocks,
        }),
    }
}

/// Splits each stream's mean latency into the modelled device's components and `host`: what
/// the software stack and the emulation added on top. The device's share of a request is
/// every command's modelled time over the requests they served (the emulator cannot tell
/// streams apart, so every stream gets the same share): one command per request gives the
/// model's mean command, and a request split into several commands (a FUSE read-modify-write,
/// an NBD request larger than a command) carries all of them. Where commands overlapped, so
/// that their sum exceeds a stream's mean latency, the device's components are scaled down
/// to that mean and host is 0: the components always add up to the mean, as the report says.
fn attribute_device_time(report: &mut RunReport, sum: &Breakdown, commands: u64) {
    let requests = report.totals.requests;
    if commands == 0 || requests == 0 {
        return;
    }
    let per_request = |c: Component| sum.get(c) as f64 / requests as f64;
    let device_total: f64 = Component::ALL
        .iter()
        .filter(|&&c| c != Component::Host)
        .map(|&c| per_request(c))
        .sum();
    let totals =
        std::iter::once(&mut report.totals).chain(report.streams.iter_mut().map(|s| &mut s.totals));
    for t in totals {
        let mean = t.latency_ns.mean;
        let scale = if device_total > mean && device_total > 0.0 {
            mean / device_total
        } else {
            1.0
        };
        let host = (mean - device_total * scale).max(0.0);
        for (name, ns) in t.breakdown_ns.0.iter_mut() {
            let c = Component::ALL
                .iter()
                .copied()
                .find(|c| c.name() == *name)
                .expect("breakdown names are component names");
            *ns = if c == Component::Host {
                host
            } else {
                per_request(c) * scale
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvarray_report::StreamStats;

    /// A report of `requests` requests of `latency_ns` each, all host time as recorded.
    fn report(requests: u64, latency_ns: u64) -> RunReport {
        let mut s = StreamStats::new("s");
        let mut b = Breakdown::default();
        b.set(Component::Host, latency_ns);
        for _ in 0..requests {
            s.record(true, 4096, latency_ns, &b);
        }
        RunReport {
            totals: s.totals(1_000_000),
            ..RunReport::default()
        }
    }

    fn parts(r: &RunReport) -> f64 {
        r.totals.breakdown_ns.0.iter().map(|(_, ns)| ns).sum()
    }

    fn get(r: &RunReport, name: &str) -> f64 {
        r.totals
            .breakdown_ns
            .0
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
    }

    #[test]
    fn one_command_per_request_keeps_the_models_mean_command() {
        let mut r = report(10, 15_000);
        let mut sum = Breakdown::default();
        sum.set(Component::Media, 10 * 4_000);
        sum.set(Component::Link, 10 * 1_000);
        attribute_device_time(&mut r, &sum, 10);
        assert_eq!(get(&r, "media"), 4_000.0);
        assert_eq!(get(&r, "link"), 1_000.0);
        assert_eq!(get(&r, "host"), 10_000.0);
        assert_eq!(parts(&r), 15_000.0);
    }

    /// A FUSE request that became a read and a write (read-modify-write) carries both: the
    /// per-command mean under-counted it; and where commands overlap, the parts are scaled so
    /// they still add up (the report printed 15.12 µs mean, parts 15.57 µs, host 0).
    #[test]
    fn split_and_overlapping_commands_still_add_up_to_the_mean() {
        let mut r = report(10, 15_000);
        let mut sum = Breakdown::default();
        sum.set(Component::Media, 20 * 5_000);
        attribute_device_time(&mut r, &sum, 20);
        assert_eq!(get(&r, "media"), 10_000.0);
        assert_eq!(get(&r, "host"), 5_000.0);
        assert_eq!(parts(&r), 15_000.0);

        let mut r = report(10, 15_000);
        let mut sum = Breakdown::default();
        sum.set(Component::Media, 20 * 12_000);
        sum.set(Component::Link, 20 * 3_000);
        attribute_device_time(&mut r, &sum, 20);
        assert_eq!(get(&r, "host"), 0.0);
        assert!((parts(&r) - 15_000.0).abs() < 1e-6, "{}", parts(&r));
        assert!((get(&r, "media") / get(&r, "link") - 4.0).abs() < 1e-9);
    }
}
