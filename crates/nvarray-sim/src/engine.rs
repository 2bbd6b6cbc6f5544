//! The discrete-event loop: simulated host threads issue requests into the timing model on a
//! virtual clock.
//!
//! Two event sources are merged in time order: the host's (a thread is ready to issue; a
//! completion becomes visible) and the device's (`Device::next_event_ns`). On a tie the device
//! goes first, so a submission never lands before device work that was due at the same
//! instant. Every queue is ordered by `(time, sequence number)`, so a run is a pure function of
//! its inputs and seeds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use nvarray_model::{Command, Component, Device, DeviceConfig, Op};
use nvarray_workload::{Op as WorkOp, RequestGen, Workload};

use crate::error::SimError;
use crate::report::{RunReport, StreamStats, Utilisation, WearReport};

/// Simulated time a run covers when the workload sets neither `runtime` nor `number_ios`.
pub const DEFAULT_RUNTIME_NS: u64 = 100_000_000;

/// Outstanding requests across all threads; bounds the host-side bookkeeping.
pub const OUTSTANDING_MAX: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum HostEvent {
    /// A thread may issue one request (one per free queue slot).
    Issue,
    /// The request's software cost is paid: hand it to the device.
    Submit,
    /// The request's completion reached the host.
    Complete,
}

struct Thread {
    stream: usize,
    gen: RequestGen,
    /// Requests this thread may still issue (`u64::MAX` when bounded by time).
    remaining: u64,
    thinktime_ns: u64,
    cpu_free_ns: u64,
}

#[derive(Clone, Copy, Default)]
struct Pending {
    thread: u32,
    issue_ns: u64,
    submit_ns: u64,
    op: Option<Op>,
    offset_bytes: u64,
    len_bytes: u32,
    completion: Option<nvarray_model::Completion>,
}

/// Runs `workload` against a device built from `device` and returns what it measured.
pub fn run(device: &DeviceConfig, workload: &Workload) -> Result<RunReport, SimError> {
    if workload.jobs.is_empty() {
        return Err(SimError::NoJobs);
    }
    let mut model = Device::new(device);
    let capacity = device.memory.capacity_bytes;
    let block = device.controller.block_bytes;
    let software_ns = device.host.software_ns;

    let mut streams = Vec::with_capacity(workload.jobs.len());
    let mut threads = Vec::new();
    let mut outstanding_total: u64 = 0;
    let mut end_ns: Option<u64> = None;
    for (stream, job) in workload.jobs.iter().enumerate() {
        job.validate(capacity, block, device.controller.max_transfer_bytes)
            .map_err(|e| SimError::Workload {
                job: job.name.clone(),
                source: e,
            })?;
        streams.push(StreamStats::new(&job.name));
        let runtime = match (job.runtime_ns, job.number_ios) {
            (None, None) => Some(DEFAULT_RUNTIME_NS),
            (runtime, _) => runtime,
        };
        if let Some(r) = runtime {
            end_ns = Some(end_ns.map_or(r, |e: u64| e.max(r)));
        }
        for t in 0..job.numjobs {
            let gen = RequestGen::new(job, t, capacity, block).map_err(|e| SimError::Workload {
                job: job.name.clone(),
                source: e,
            })?;
            threads.push((
                Thread {
                    stream,
                    gen,
                    remaining: job.number_ios.unwrap_or(u64::MAX),
                    thinktime_ns: job.thinktime_ns,
                    cpu_free_ns: 0,
                },
                job.iodepth,
                runtime,
            ));
            outstanding_total += u64::from(job.iodepth);
        }
    }
    if outstanding_total > OUTSTANDING_MAX {
        return Err(SimError::TooManyOutstanding {
            outstanding: outstanding_total,
            max: OUTSTANDING_MAX,
        });
    }

    let mut host: BinaryHeap<Reverse<(u64, u64, HostEvent, u32)>> =
        BinaryHeap::with_capacity(outstanding_total as usize * 2);
    let mut seq: u64 = 0;
    let mut thread_end_ns = Vec::with_capacity(threads.len());
    let mut thread_state = Vec::with_capacity(threads.len());
    for (i, (thread, iodepth, runtime)) in threads.into_iter().enumerate() {
        thread_end_ns.push(runtime.unwrap_or(u64::MAX));
        thread_state.push(thread);
        for _ in 0..iodepth {
            seq += 1;
            host.push(Reverse((0, seq, HostEvent::Issue, i as u32)));
        }
    }
    let mut threads = thread_state;

    let mut pending: Vec<Pending> = Vec::with_capacity(outstanding_total as usize);
    let mut free_ids: Vec<u32> = Vec::with_capacity(outstanding_total as usize);
    let mut last_completion_ns = 0u64;
    let stop_ns = end_ns.unwrap_or(u64::MAX);
    // Whether the run reached `stop_ns` (rather than running out of work first).
    let mut stopped_by_time = false;

    loop {
        let device_t = model.next_event_ns();
        let host_t = host.peek().map(|Reverse((t, ..))| *t);
        let device_first = match (device_t, host_t) {
            (None, None) => break,
            (Some(d), Some(h)) => d <= h,
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        if device_first {
            let t = device_t.expect("checked");
            if t > stop_ns {
                stopped_by_time = true;
                break;
            }
            model.advance(t, |c| {
                let id = c.id as u32;
                pending[id as usize].completion = Some(c);
                seq += 1;
                host.push(Reverse((c.visible_ns, seq, HostEvent::Complete, id)));
            });
            continue;
        }
        let Reverse((t, _, event, x)) = host.pop().expect("checked");
        if t > stop_ns {
            stopped_by_time = true;
            break;
        }
        match event {
            HostEvent::Issue => {
                let th = &mut threads[x as usize];
                if th.remaining == 0 || t >= thread_end_ns[x as usize] {
                    continue;
                }
                th.remaining -= 1;
                let r = th.gen.next_request();
                let start = t.max(th.cpu_free_ns);
                let submit = start + software_ns;
                th.cpu_free_ns = submit;
                let p = Pending {
                    thread: x,
                    issue_ns: t,
                    submit_ns: submit,
                    op: Some(match r.op {
                        WorkOp::Read => Op::Read,
                        WorkOp::Write => Op::Write,
                    }),
                    offset_bytes: r.offset_bytes,
                    len_bytes: r.len_bytes,
                    completion: None,
                };
                let id = match free_ids.pop() {
                    Some(id) => {
                        pending[id as usize] = p;
                        id
                    }
                    None => {
                        pending.push(p);
                        (pending.len() - 1) as u32
                    }
                };
                if submit == t {
                    submit_to(&mut model, &pending[id as usize], id, t)?;
                } else {
                    seq += 1;
                    host.push(Reverse((submit, seq, HostEvent::Submit, id)));
                }
            }
            HostEvent::Submit => submit_to(&mut model, &pending[x as usize], x, t)?,
            HostEvent::Complete => {
                let p = pending[x as usize];
                let c = p.completion.expect("completion recorded before its event");
                let mut breakdown = c.breakdown;
                breakdown.set(Component::Host, p.submit_ns - p.issue_ns);
                let latency = c.visible_ns - p.issue_ns;
                debug_assert_eq!(breakdown.total_ns(), latency);
                let th = &mut threads[p.thread as usize];
                streams[th.stream].record(c.op == Op::Read, c.len_bytes, latency, &breakdown);
                last_completion_ns = t;
                free_ids.push(x);
                seq += 1;
                host.push(Reverse((
                    t + th.thinktime_ns,
                    seq,
                    HostEvent::Issue,
                    p.thread,
                )));
            }
        }
    }

    let elapsed_ns = if stopped_by_time {
        stop_ns
    } else {
        last_completion_ns
    }
    .max(1);
    Ok(report(device, &model, &streams, elapsed_ns))
}

fn submit_to(model: &mut Device, p: &Pending, id: u32, t: u64) -> Result<(), SimError> {
    let cmd = Command {
        id: u64::from(id),
        op: p.op.expect("set at issue"),
        offset_bytes: p.offset_bytes,
        len_bytes: p.len_bytes,
    };
    model.submit(cmd, t).map_err(SimError::Command)
}

fn report(
    cfg: &DeviceConfig,
    model: &Device,
    streams: &[StreamStats],
    elapsed_ns: u64,
) -> RunReport {
    let mut all = StreamStats::new("all");
    for s in streams {
        all.merge(s);
    }
    let busy = model.resource_busy();
    let e = elapsed_ns as f64;
    let frac = |ns: u64, n: u32| (ns as f64 / (e * f64::from(n.max(1)))).min(1.0);
    RunReport {
        engine: "sim",
        device: cfg.name.clone(),
        elapsed_ns,
        totals: all.totals(elapsed_ns),
        utilisation: Utilisation {
            link_to_device: frac(busy.link_to_device_ns, 1),
            link_to_host: frac(busy.link_to_host_ns, 1),
            controller: frac(busy.controller_ns, busy.controller_engines),
            ring: frac(busy.ring_ns, 1),
            banks: frac(busy.banks_ns, busy.banks),
            buffers: frac(busy.buffers_ns, busy.buffers),
            tags: frac(busy.tags_ns, busy.tags),
        },
        wear: model.wear_stats().map(|w| WearReport {
            line_writes_max: w.line_writes_max,
            line_writes_mean: w.line_writes_mean,
            gap_moves: w.gap_moves,
        }),
        erases: model.erases(),
        streams: streams
            .iter()
            .map(|s| crate::report::StreamReport {
                name: s.name.clone(),
                totals: s.totals(elapsed_ns),
            })
            .collect(),
    }
}
