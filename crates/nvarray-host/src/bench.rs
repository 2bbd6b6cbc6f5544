//! `nvarray bench --engine emu`: fio-like workloads through the driver against the wall clock.
//!
//! One host thread per fio job thread, each keeping its queue depth of commands in flight on
//! its own way to the device (see `ladder`). Latency is what the host thread observes: from
//! preparing the command (taking a tag, copying a write's data) to finishing it (copying a
//! read's data out), so it includes the driver's whole cost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nvarray_model::{Breakdown, Component, DeviceConfig};
use nvarray_report::{cpu_seconds_per_gb, process_cpu_seconds, LatenessNs, RunReport, StreamStats};
use nvarray_workload::{Op, RequestGen, Workload};

use crate::driver::Device;
use crate::ladder::{Issuer, LadderShared};
use crate::{HostError, IoOp, Options};

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

/// Runs `workload` on an opened device (so tests and servers can reuse one).
pub fn run_on(
    device: &Device,
    workload: &Workload,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, HostError> {
    if workload.jobs.is_empty() {
        return Err(HostError::Workload("the workload has no jobs".into()));
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
                stream,
                gen,
                iodepth: job.iodepth as usize,
                ios: job.number_ios.unwrap_or(u64::MAX),
                runtime,
            });
        }
    }
    let longest = plans.iter().filter_map(|p| p.runtime).max();
    let ios_total: u64 = plans.iter().map(|p| p.ios).fold(0, u64::saturating_add);
    let done_ios = AtomicU64::new(0);
    let cpu_start = process_cpu_seconds();
    let start = Instant::now();
    let results: Vec<Result<(usize, StreamStats), HostError>> = std::thread::scope(|s| {
        let handles: Vec<_> = plans
            .into_iter()
            .map(|plan| {
                let (shared, done_ios) = (&shared, &done_ios);
                s.spawn(move || {
                    let stream = plan.stream;
                    run_thread(device, shared, plan, start, done_ios).map(|st| (stream, st))
                })
            })
            .collect();
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
    for r in results {
        let (stream, stats) = r?;
        streams[stream].merge(&stats);
    }
    let cpu_seconds = process_cpu_seconds() - cpu_start;
    let mut report = device.emulator().with_core(|core| {
        let mut report = RunReport::from_model("emu", core.model(), &streams, elapsed_ns);
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
    Ok(report)
}

struct ThreadPlan {
    stream: usize,
    gen: RequestGen,
    iodepth: usize,
    ios: u64,
    runtime: Option<Duration>,
}

/// One host thread: keeps `iodepth` commands in flight until its run ends, then drains.
fn run_thread(
    device: &Device,
    shared: &LadderShared,
    mut plan: ThreadPlan,
    start: Instant,
    done_ios: &AtomicU64,
) -> Result<StreamStats, HostError> {
    let completion = device.options().completion;
    let mut issuer = Issuer::new(device, shared, completion);
    let in_data = completion == crate::Completion::InData;
    let mut stats = StreamStats::new("thread");
    // Per tag: when this thread prepared the command (tags are device-wide, so index by tag).
    let mut started: Vec<Option<Instant>> = vec![None; device.tags()];
    let mut scratch = vec![0u8; device.command_bytes_max() as usize];
    let write_data = vec![0x5au8; device.command_bytes_max() as usize];
    let deadline = plan.runtime.map(|r| start + r);
    let mut issued = 0u64;
    let mut in_flight = 0usize;
    let mut error = None;
    let mut finished = Vec::with_capacity(device.tags());
    loop {
        let time_up = deadline.is_some_and(|d| Instant::now() >= d);
        while !time_up && error.is_none() && in_flight < plan.iodepth && issued < plan.ios {
            let r = plan.gen.next_request();
            let (op, data) = match r.op {
                Op::Read => (IoOp::Read, None),
                Op::Write => (IoOp::Write, Some(&write_data[..r.len_bytes as usize])),
            };
            let t0 = Instant::now();
            match device.prepare(op, r.offset_bytes, r.len_bytes, data, in_data) {
                Ok(p) => {
                    started[p.tag().index()] = Some(t0);
                    issuer.issue(p);
                    issued += 1;
                    in_flight += 1;
                }
                // Other threads hold every tag: collect our own completions first.
                Err(HostError::NoTag { .. }) if in_flight > 0 => break,
                Err(HostError::NoTag { .. }) => std::hint::spin_loop(),
                Err(e) => error = Some(e),
            }
        }
        if in_flight == 0 {
            break;
        }
        let mine = |tag: usize| started.get(tag).is_some_and(|s| s.is_some());
        issuer.wait(&mine, &mut |done| finished.push(done));
        for done in finished.drain(..) {
            let t0 = started[done.tag.index()].take().expect("started");
            let (is_read, len) = (done.op == IoOp::Read, done.len_bytes);
            let out = is_read.then_some(&mut scratch[..len as usize]);
            match device.finish(done, out) {
                Ok(()) => {
                    let latency_ns = t0.elapsed().as_nanos() as u64;
                    // All of it as host time for now; `attribute_device_time` moves the
                    // modelled device's share to its components.
                    let mut breakdown = Breakdown::default();
                    breakdown.set(Component::Host, latency_ns);
                    stats.record(is_read, len, latency_ns, &breakdown);
                }
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
            in_flight -= 1;
            done_ios.fetch_add(1, Ordering::Relaxed);
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Splits each stream's mean latency into the modelled device's components (the model's mean
/// over every command, which the emulator cannot attribute to single streams) and `host`:
/// what the software stack and the emulation added on top.
fn attribute_device_time(report: &mut RunReport, sum: &Breakdown, count: u64) {
    if count == 0 {
        return;
    }
    let device_mean = |c: Component| sum.get(c) as f64 / count as f64;
    let device_total: f64 = Component::ALL
        .iter()
        .filter(|&&c| c != Component::Host)
        .map(|&c| device_mean(c))
        .sum();
    let totals =
        std::iter::once(&mut report.totals).chain(report.streams.iter_mut().map(|s| &mut s.totals));
    for t in totals {
        let host = (t.latency_ns.mean - device_total).max(0.0);
        for (name, ns) in t.breakdown_ns.0.iter_mut() {
            let c = Component::ALL
                .iter()
                .copied()
                .find(|c| c.name() == *name)
                .expect("breakdown names are component names");
            *ns = if c == Component::Host {
                host
            } else {
                device_mean(c)
            };
        }
    }
}
