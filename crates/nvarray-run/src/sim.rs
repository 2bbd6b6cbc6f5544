//! The simulator: a discrete-event loop in which simulated host threads issue requests into
//! the timing model on a virtual clock.
//!
//! It owns the virtual clock, the simulated host threads (the job plan's, each with its queue
//! depth and per-request software cost) and the statistics of a run. Runs are deterministic
//! for a given device, workload and seed, except `cpu_seconds_per_gb`, which is this
//! machine's CPU time for the run. It never sleeps, never reads the wall clock and never
//! touches data: the emulator does that, over the same model.
//!
//! Two event sources are merged in time order: the host's (a thread is ready to issue; a
//! completion becomes visible) and the device's (`DeviceModel::next_event_ns`). On a tie the device
//! goes first, so a submission never lands before device work that was due at the same
//! instant. Every queue is ordered by `(time, sequence number)`, so a run is a pure function of
//! its inputs and seeds.

use std::collections::{HashMap, VecDeque};

use nvarray_model::min_queue::MinQueue;
use nvarray_model::{Command, Completion, Component, DeviceConfig, DeviceModel, Op, ResourceBusy};
use nvarray_workload::trace::{Geometry, TraceReport};
use nvarray_workload::{Direction, ExitWhat, PlacementPicker, Request, Workload};

use crate::control::SteadyCounts;
use crate::control::{Gate, Steering};
use crate::error::SimError;
use crate::plan::{job_streams, Next, Plan, Requests};
use crate::sim_steady::{Sampled, SteadyWatches};
use crate::sim_zones::SimZones;
use nvarray_report::{thread_cpu_seconds, IoDepths, RunReport, StreamStats};

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
    /// A job's steady state is sampled (the event's index is the job's stream).
    Sample,
}

struct Thread {
    stream: usize,
    requests: Requests,
    /// A trace replayed at its timestamps: requests taken from it by a free queue slot before
    /// they were due, each with an `Issue` event at its time (in time order).
    scheduled: VecDeque<(Request, u64)>,
    /// Timed requests (a timestamped trace's, a paced job's) that found every queue slot
    /// taken at their time.
    issued_late: u64,
    /// Requests this thread may still issue (`u64::MAX` when bounded by time). As in fio,
    /// `number_ios` counts the requests issued after the ramp: those issued during it do not
    /// count.
    remaining: u64,
    /// Bytes it may still issue (`u64::MAX`: no byte limit).
    bytes_left: u64,
    /// What steers it (think time, latency target, flow); `None` for a plain thread. The
    /// queue slots its steering holds back (`parked`) go again when it lets them.
    steer: Option<Box<Steering>>,
    parked: u32,
    /// With `exitall`: what ends when it ends, and its group; whether it has ended.
    exit: Option<(ExitWhat, usize)>,
    exited: bool,
    /// A latency target's thread counts its own figures (its final window forgets the
    /// search's); merged into its stream at the phase's end.
    own: Option<Box<StreamStats>>,
    /// The thread stops issuing at this time (`u64::MAX` when bounded by count).
    end_ns: u64,
    /// The thread's CPU is busy with software work until then.
    cpu_free_ns: u64,
    /// Completions before this (its job's `ramp_time` into the phase) are not counted.
    measure_from_ns: u64,
    /// Its requests in flight, and fio's depth distributions of the measured ones.
    in_flight: u32,
    io_depths: IoDepths,
    /// Each write's placement handle (`fdp=1`).
    placement: Option<PlacementPicker>,
}

impl Thread {
    /// Whether it may still issue at `t` (`plan::issues_before_end`).
    fn has_work(&self, t: u64) -> bool {
        self.remaining > 0
            && self.bytes_left > 0
            && crate::plan::issues_before_end(t, Some(self.end_ns))
    }
}

#[derive(Clone, Copy)]
struct Pending {
    thread: u32,
    issue_ns: u64,
    submit_ns: u64,
    cmd: Command,
    completion: Option<Completion>,
}

/// The host side of a run: threads, requests in flight, and the event queue.
struct Host {
    threads: Vec<Thread>,
    pending: Vec<Pending>,
    free_ids: Vec<u32>,
    /// Host events by (time, order scheduled); mostly scheduled in time order (a request's
    /// submission a fixed software time after its issue, the next issue a think time after a
    /// completion), which `MinQueue` is fast for.
    events: MinQueue<(u64, u64, HostEvent, u32)>,
    seq: u64,
    software_ns: u64,
    /// The phase's start: the times a trace or pacer gives are from here.
    origin_ns: u64,
    /// Per flow: the threads with a slot waiting for another of the flow's to issue.
    flow_waiters: HashMap<u32, Vec<u32>>,
    /// A thread with `exit_what=all` ended: the later phases do not run.
    exit_all: bool,
}

impl Host {
    /// The simulated host of a phase starting at `start_ns`: its threads from the plan, each
    /// with an `Issue` event per queue slot at the start.
    fn for_phase(plan: Plan, device: &DeviceConfig, start_ns: u64) -> Host {
        let outstanding_total = plan.outstanding();
        let mut first_issues = Vec::with_capacity(plan.threads.len());
        let mut plan = plan;
        plan.join_flows();
        let threads: Vec<Thread> = plan
            .threads
            .into_iter()
            .enumerate()
            .map(|(x, t)| {
                first_issues.push((x as u32, t.iodepth));
                Thread {
                    stream: t.stream,
                    requests: t.requests,
                    scheduled: VecDeque::new(),
                    issued_late: 0,
                    remaining: t.ios,
                    bytes_left: t.io_bytes,
                    own: t
                        .control
                        .depth
                        .is_some()
                        .then(|| Box::new(StreamStats::new("thread"))),
                    exit: t.control.exit,
                    exited: false,
                    steer: Steering::of(t.control, start_ns),
                    parked: 0,
                    end_ns: t
                        .runtime_ns
                        .map_or(u64::MAX, |r| start_ns.saturating_add(r)),
                    cpu_free_ns: start_ns,
                    measure_from_ns: start_ns + t.ramp_ns,
                    in_flight: 0,
                    io_depths: IoDepths::default(),
                    placement: t.placement,
                }
            })
            .collect();
        let mut host = Host {
            threads,
            pending: Vec::with_capacity(outstanding_total as usize),
            free_ids: Vec::with_capacity(outstanding_total as usize),
            events: MinQueue::with_capacity(outstanding_total as usize * 2),
            seq: 0,
            software_ns: device.host.software_ns,
            origin_ns: start_ns,
            flow_waiters: HashMap::new(),
            exit_all: false,
        };
        for (thread, iodepth) in first_issues {
            for _ in 0..iodepth {
                host.push(start_ns, HostEvent::Issue, thread);
            }
        }
        host
    }

    /// The host of a phase (`for_phase`) and its jobs' steady-state watches, each with its
    /// first sample scheduled. Kept out of the event loop's function, as `PhaseEnd::close`
    /// is, so the loop's inlining (the model's `advance` in it) is decided on the loop alone.
    #[inline(never)]
    fn with_watches(
        plan: Plan,
        device: &DeviceConfig,
        start_ns: u64,
        streams: usize,
    ) -> (Host, SteadyWatches) {
        let steady = SteadyWatches::of(
            (0..streams)
                .map(|s| {
                    let mut own = plan.threads.iter().filter(|t| t.stream == s);
                    own.next().and_then(|t| t.control.steady.clone())
                })
                .collect(),
            start_ns,
        );
        let mut host = Host::for_phase(plan, device, start_ns);
        for (stream, at) in steady.first_samples() {
            host.push(at, HostEvent::Sample, stream as u32);
        }
        (host, steady)
    }

    /// How far the phase is, `elapsed_ns` into it: the furthest of its time bound
    /// (`bound_ns`), its request count, its byte limit and its traces.
    fn fraction_done(&self, elapsed_ns: u64, bound_ns: u64, ios: u64, bytes: u64) -> f64 {
        let by_time = elapsed_ns as f64 / bound_ns as f64;
        let sum =
            |f: fn(&Thread) -> u64| self.threads.iter().map(f).fold(0u64, u64::saturating_add);
        let issued = ios.saturating_sub(sum(|t| t.remaining));
        let moved = bytes.saturating_sub(sum(|t| t.bytes_left));
        let by_trace = self
            .threads
            .iter()
            .filter_map(|t| t.requests.fraction_done())
            .fold(0.0, f64::max);
        by_time
            .max(issued as f64 / ios as f64)
            .max(moved as f64 / bytes as f64)
            .max(by_trace)
            .min(1.0)
    }

    fn push(&mut self, t: u64, event: HostEvent, x: u32) {
        self.seq += 1;
        self.events.push((t, self.seq, event, x));
    }

    /// Another thread of `flow` issued (or left) at `t`: the slots waiting on it try again.
    fn wake_flow(&mut self, flow: u32, t: u64) {
        if let Some(waiting) = self.flow_waiters.remove(&flow) {
            for x in waiting {
                self.unpark(x, t);
            }
        }
    }

    /// A thread of group `group` ended at `t` under fio's `exitall`: the threads `what`
    /// names stop issuing (its group's, or the phase's; with `all` the later phases do not
    /// run either).
    #[inline(never)]
    fn exit(&mut self, (what, group): (ExitWhat, usize), t: u64) {
        for th in &mut self.threads {
            if what != ExitWhat::Group || th.exit.is_some_and(|(_, g)| g == group) {
                th.end_ns = th.end_ns.min(t);
            }
        }
        self.exit_all |= what == ExitWhat::All;
    }

    /// Thread `x`'s parked slots try again at `t`, unless it is draining.
    fn unpark(&mut self, x: u32, t: u64) {
        let th = &mut self.threads[x as usize];
        if th.steer.as_ref().is_none_or(|s| s.holding()) {
            return;
        }
        for _ in 0..std::mem::take(&mut th.parked) {
            self.push(t, HostEvent::Issue, x);
        }
    }

    /// Thread `x` has drained at `t`: it forgets what it measured if its search's final
    /// window starts, and its slots go again after its pause.
    fn resume(&mut self, x: u32, t: u64) {
        let th = &mut self.threads[x as usize];
        debug_assert_eq!(th.in_flight, 0, "resumed before it drained");
        let steer = th.steer.as_mut().expect("only a steered thread holds");
        let resume = steer.drained(t);
        if resume.reset {
            th.own = Some(Box::new(StreamStats::new("thread")));
            th.io_depths = IoDepths::default();
            th.measure_from_ns = th.measure_from_ns.max(t);
        }
        th.cpu_free_ns = th.cpu_free_ns.max(t) + resume.spin_ns;
        for _ in 0..std::mem::take(&mut th.parked) {
            self.push(resume.resume_ns, HostEvent::Issue, x);
        }
    }

    /// Request `x`'s completion reached its thread at `t`: counted (after the ramp) into
    /// its thread's figures, its slot issued again (or held by the thread's steering).
    /// The stream it belongs to.
    #[inline(always)]
    fn complete(
        &mut self,
        model: &mut DeviceModel,
        zones: &mut Option<SimZones>,
        streams: &mut [StreamStats],
        steady_counts: &mut [SteadyCounts],
        x: u32,
        t: u64,
    ) -> Result<usize, SimError> {
        let p = self.pending[x as usize];
        let c = p.completion.expect("completion recorded before its event");
        let th = &mut self.threads[p.thread as usize];
        th.in_flight -= 1;
        let latency = c.visible_ns - p.issue_ns;
        let measured = t >= th.measure_from_ns;
        if measured {
            // The simulated host takes each completion alone.
            th.io_depths.record_collected(1);
            let mut breakdown = c.breakdown;
            breakdown.set(Component::Host, p.submit_ns - p.issue_ns);
            debug_assert_eq!(breakdown.total_ns(), latency);
            let stats = match th.own.as_mut() {
                Some(own) => own,
                None => &mut streams[th.stream],
            };
            stats.record(c.op == Op::Read, c.len_bytes, latency, &breakdown);
        }
        if let Some(counts) = steady_counts.get_mut(th.stream) {
            counts.ios += 1;
            counts.bytes += u64::from(c.len_bytes);
            counts.latency_sum_ns += latency;
        }
        let stream = th.stream;
        self.free_ids.push(x);
        if self.threads[p.thread as usize].steer.is_none() {
            // Device events due at `t` have all run (the device goes first on ties), so
            // issuing now is the same as queueing an Issue event for `t`.
            self.issue(model, zones, p.thread, t)?;
        } else {
            let job = &streams[stream].name;
            self.complete_steered(p.thread, t, latency, measured, job)?;
        }
        Ok(stream)
    }

    /// A steered thread's completion at `t`: its steering sees it, and its slot waits
    /// with the others until the steering lets them go.
    #[inline(never)]
    fn complete_steered(
        &mut self,
        x: u32,
        t: u64,
        latency: u64,
        measured: bool,
        job: &str,
    ) -> Result<(), SimError> {
        let th = &mut self.threads[x as usize];
        let steer = th.steer.as_deref_mut().expect("a steered thread");
        let done = steer.completed(t, latency, measured).map_err(|miss| {
            SimError::LatencyTargetMissed {
                job: job.to_string(),
                latency_ns: miss.latency_ns,
                target_ns: miss.target_ns,
            }
        })?;
        if done {
            th.remaining = 0;
        }
        th.parked += 1;
        if !steer.holding() {
            self.unpark(x, t);
        } else if th.in_flight == 0 {
            self.resume(x, t);
        }
        Ok(())
    }

    /// Job `stream`'s steady state is sampled at `t`: a steady job's threads stop; another
    /// is sampled again while it runs.
    #[inline(never)]
    fn sample(&mut self, steady: &mut SteadyWatches, stream: usize, t: u64) {
        match steady.sample(stream, t) {
            Sampled::Steady => {
                for th in self.threads.iter_mut().filter(|th| th.stream == stream) {
                    th.end_ns = th.end_ns.min(t);
                }
            }
            Sampled::Next(next) => {
                let live = self
                    .threads
                    .iter()
                    .any(|th| th.stream == stream && (th.in_flight > 0 || th.has_work(t)));
                if live {
                    self.push(next, HostEvent::Sample, stream as u32);
                }
            }
        }
    }

    /// Whether thread `x` may issue at `t` (it has work, and its steering lets it).
    #[inline(always)]
    fn may_issue(&mut self, x: u32, t: u64) -> bool {
        let th = &self.threads[x as usize];
        if !th.has_work(t) {
            self.out_of_work(x, t);
            return false;
        }
        if th.steer.is_none() {
            return true;
        }
        self.steered_gate(x, t)
    }

    /// Thread `x` has no more work at `t`: it leaves its flow, and under `exitall` ends
    /// what its `exit_what` names (once).
    #[cold]
    #[inline(never)]
    fn out_of_work(&mut self, x: u32, t: u64) {
        let th = &mut self.threads[x as usize];
        let flow = th.steer.as_mut().and_then(|s| s.finish());
        let exit = th.exit.filter(|_| !std::mem::replace(&mut th.exited, true));
        if let Some(flow) = flow {
            self.wake_flow(flow, t);
        }
        if let Some(exit) = exit {
            self.exit(exit, t);
        }
    }

    /// A steered thread `x` issued at `t` (a write if `is_write`): its steering counts it, and
    /// the flow it advanced lets waiting slots try again.
    #[inline(never)]
    fn steered_issued(&mut self, x: u32, t: u64, is_write: bool) {
        let steer = self.threads[x as usize].steer.as_mut();
        if let Some(flow) = steer.and_then(|s| s.issued(t, is_write)) {
            self.wake_flow(flow, t);
        }
    }

    /// A steered thread `x`'s gate at `t`: whether its slot may issue; if not, the slot
    /// waits (parked) for what the gate names.
    #[inline(never)]
    fn steered_gate(&mut self, x: u32, t: u64) -> bool {
        let th = &mut self.threads[x as usize];
        let steer = th.steer.as_deref_mut().expect("a steered thread");
        match steer.gate(th.in_flight) {
            Gate::Go => return true,
            Gate::Park => th.parked += 1,
            Gate::ParkForFlow(flow) => {
                th.parked += 1;
                self.flow_waiters.entry(flow).or_default().push(x);
            }
            Gate::Hold => {
                th.parked += 1;
                if th.in_flight == 0 {
                    self.resume(x, t);
                }
            }
        }
        false
    }

    /// Runs the device's events due at `t`: each completion is recorded on its request, and
    /// reaches the host at its visible time.
    #[inline(always)]
    fn take_device_events(&mut self, model: &mut DeviceModel, t: u64) {
        model.advance(t, |c| {
            self.pending[c.id as usize].completion = Some(c);
            self.push(c.visible_ns, HostEvent::Complete, c.id as u32);
        });
    }

    /// Thread `x` issues its next request at `t` from a free queue slot, if it still has
    /// work. A timestamped trace's request due later is scheduled for its time instead (the
    /// slot waits for it); one due earlier found no free slot then, and its latency counts
    /// from its time.
    fn issue(
        &mut self,
        model: &mut DeviceModel,
        zones: &mut Option<SimZones>,
        x: u32,
        t: u64,
    ) -> Result<(), SimError> {
        if !self.may_issue(x, t) {
            return Ok(());
        }
        let Some((r, issue_ns)) = self.take_request(x, t)? else {
            return Ok(());
        };
        let th = &mut self.threads[x as usize];
        let submit = th.count_issue(&r, t, self.software_ns);
        if th.steer.is_some() {
            self.steered_issued(x, t, r.op == Direction::Write);
        }
        let (op, placement) = self.threads[x as usize].command_op(&r);
        if let (Some(zones), Op::Write) = (zones.as_mut(), op) {
            zones.write(r.offset_bytes, r.len_bytes)?;
        }
        let (id, cmd) = self.store_pending(Pending {
            thread: x,
            issue_ns,
            submit_ns: submit,
            cmd: Command {
                id: 0,
                op,
                offset_bytes: r.offset_bytes,
                len_bytes: r.len_bytes,
                placement,
            },
            completion: None,
        });
        if submit == t {
            model.submit(cmd, t).map_err(SimError::Command)
        } else {
            self.push(submit, HostEvent::Submit, id);
            Ok(())
        }
    }

    /// The request thread `x`'s free slot issues at `t`, and the time its latency counts
    /// from: a scheduled one now due, or the next. `None` when the slot issues nothing now
    /// (the trace ended, or its next request is due later and is scheduled for its time).
    #[inline(always)]
    fn take_request(&mut self, x: u32, t: u64) -> Result<Option<(Request, u64)>, SimError> {
        let th = &mut self.threads[x as usize];
        Ok(Some(match th.scheduled.front() {
            Some(&(r, due)) if due <= t => {
                th.scheduled.pop_front();
                (r, due)
            }
            _ => match th.requests.next_request().map_err(SimError::Trace)? {
                Next::End => {
                    // Requests already scheduled still go at their times.
                    if th.scheduled.is_empty() {
                        th.remaining = 0;
                    }
                    return Ok(None);
                }
                Next::Request(r, None) => (r, t),
                Next::Request(r, Some(due)) if due + self.origin_ns > t => {
                    let due = due + self.origin_ns;
                    th.scheduled.push_back((r, due));
                    self.push(due, HostEvent::Issue, x);
                    return Ok(None);
                }
                Next::Request(r, Some(due)) => {
                    let due = due + self.origin_ns;
                    th.issued_late += u64::from(due < t);
                    (r, due)
                }
            },
        }))
    }

    /// Stores request `p` under a free id (a new one when none is free); returns the id and
    /// the request's command, which carries it.
    #[inline(always)]
    fn store_pending(&mut self, mut p: Pending) -> (u32, Command) {
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None => {
                self.pending.push(p);
                (self.pending.len() - 1) as u32
            }
        };
        p.cmd.id = u64::from(id);
        self.pending[id as usize] = p;
        (id, p.cmd)
    }
}

impl Thread {
    /// Counts request `r` issued at `t` (in flight, and after the ramp against its limits)
    /// and pays its software cost of `software_ns` on the thread's CPU; returns when it is
    /// submitted.
    #[inline(always)]
    fn count_issue(&mut self, r: &Request, t: u64, software_ns: u64) -> u64 {
        self.in_flight += 1;
        if t >= self.measure_from_ns {
            self.remaining -= 1;
            self.io_depths.record_issue(self.in_flight);
        }
        self.bytes_left = self.bytes_left.saturating_sub(u64::from(r.len_bytes));
        let start = t.max(self.cpu_free_ns);
        let submit = start + software_ns;
        self.cpu_free_ns = submit;
        submit
    }

    /// The model's operation for request `r`, and a write's placement handle (0 otherwise).
    #[inline(always)]
    fn command_op(&mut self, r: &Request) -> (Op, u16) {
        match r.op {
            Direction::Read => (Op::Read, 0),
            Direction::Write => (
                Op::Write,
                self.placement.as_mut().map_or(0, |p| p.next_handle()),
            ),
        }
    }
}

/// Runs `workload` against a device built from `device` and returns what it measured.
///
/// Phases (`stonewall`, `wait_for`) run one after another on the one model: a phase starts
/// once the one before has stopped and the device has finished its requests. Each job's
/// `ramp_time` is left out of its figures, and the longest of a phase's out of the device's.
/// Refuses a run the virtual clock could not end: a thread bounded only by time (no request
/// or byte limit, no think time, no rate) on a device that completes requests in no time.
/// Before, `nvarray sim --preset null` ran for ever.
fn refuse_standing_time(
    device: &DeviceConfig,
    workload: &Workload,
    plan: &Plan,
) -> Result<(), SimError> {
    let instant = device.model.kind == nvarray_model::ModelKind::Null
        && device.model.null_latency_ns == 0
        && device.host.software_ns == 0;
    if !instant {
        return Ok(());
    }
    let endless = plan.threads.iter().find(|t| {
        t.ios == u64::MAX
            && t.io_bytes == u64::MAX
            && t.thinktime_ns == 0
            && matches!(t.requests, crate::plan::Requests::Generated(_, None))
    });
    match endless {
        Some(t) => Err(SimError::TimeStandsStill {
            job: workload.jobs[t.stream].name.clone(),
        }),
        None => Ok(()),
    }
}

pub fn run(device: &DeviceConfig, workload: &Workload) -> Result<RunReport, SimError> {
    run_with_progress(device, workload, &mut |_| ())
}

/// Simulator events between two calls of a run's progress callback: often enough for a bar
/// (a few times a second), rare enough to cost nothing measurable.
const EVENTS_PER_PROGRESS: u32 = 1 << 18;

/// [`run`], calling `progress` now and then with the fraction done (0.0 to 1.0): of the time
/// bound, the request count, the byte limit or the trace, whichever is furthest.
pub fn run_with_progress(
    device: &DeviceConfig,
    workload: &Workload,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport, SimError> {
    // CPU time, not the wall clock: the cost of simulating, comparable with the emulator's. The
    // thread's, so that points simulated side by side (a parallel sweep) each count their own.
    let cpu_start_s = thread_cpu_seconds();
    let capacity = device.memory.capacity_bytes;
    let block = device.controller.block_bytes;
    // Every job against the device, and the workload as a whole (two streams with one name would
    // mix their statistics).
    workload
        .validate(capacity, block, device.controller.max_transfer_bytes)
        .map_err(SimError::InvalidWorkload)?;
    let mut model = DeviceModel::new(device);
    let mut zones = SimZones::of(device)?;

    let plan = plan_run(device, workload)?;
    let mut streams = job_streams(workload);
    let phase_plans = plan.into_phases();
    let last = phase_plans.len() - 1;
    let (mut start_ns, mut measured_ns) = (0u64, 0u64);
    let mut busy = ResourceBusy::default();
    let mut trace = None;
    let mut paced_issued_late = None;
    let phase_count = phase_plans.len() as f64;
    for (index, phase) in phase_plans.into_iter().enumerate() {
        let mut phase_progress = |f: f64| progress((index as f64 + f) / phase_count);
        let ran = run_phase(
            &mut model,
            &mut zones,
            device,
            phase,
            start_ns,
            &mut streams,
            &mut phase_progress,
        )?;
        measured_ns += ran.measured_ns;
        busy = busy.plus(&ran.busy);
        trace = trace.or(ran.trace);
        if let Some(late) = ran.paced_issued_late {
            *paced_issued_late.get_or_insert(0) += late;
        }
        if ran.exit_all {
            // fio's `exit_what=all`: the later phases' jobs never start.
            break;
        }
        if index < last {
            start_ns = drain(&mut model, ran.end_ns);
        }
    }
    progress(1.0);
    let cpu_s = thread_cpu_seconds() - cpu_start_s;
    let mut report = RunReport::from_model_over("sim", &model, busy, &streams, measured_ns);
    report.set_cpu_seconds(cpu_s);
    report.trace = trace;
    report.paced_issued_late = paced_issued_late;
    // Completions were posted exactly at their modelled time on the virtual clock, so
    // lateness stays 0 and the run is faithful, unless it completed too few requests to
    // measure anything.
    report.require_enough_requests();
    Ok(report)
}

/// The plan of `workload` on `device`: its threads, each write's placement, and its
/// bounds checked (requests outstanding, a run the virtual clock could end).
fn plan_run(device: &DeviceConfig, workload: &Workload) -> Result<Plan, SimError> {
    let geometry = Geometry {
        capacity_bytes: device.memory.capacity_bytes,
        block_bytes: device.controller.block_bytes,
        max_transfer_bytes: device.controller.max_transfer_bytes,
    };
    let mut plan = Plan::new(workload, geometry)?;
    plan.place_writes(workload, device)?;
    if plan.outstanding() > OUTSTANDING_MAX {
        return Err(SimError::TooManyOutstanding {
            outstanding: plan.outstanding(),
            max: OUTSTANDING_MAX,
        });
    }
    refuse_standing_time(device, workload, &plan)?;
    Ok(plan)
}

/// Runs `model`'s events until it has finished every request; returns when the next phase
/// starts: then, or at `end_ns`, the phase's end, if later.
fn drain(model: &mut DeviceModel, end_ns: u64) -> u64 {
    // The next phase starts once the device has finished this one's requests.
    let mut start_ns = end_ns;
    while let Some(t) = model.next_event_ns() {
        model.advance(t, |_| ());
        start_ns = start_ns.max(t);
    }
    start_ns
}

/// What one phase did.
struct PhaseRun {
    /// When it stopped: its time bound, or its last completion.
    end_ns: u64,
    /// Its length less its ramp, and what that kept the device busy.
    measured_ns: u64,
    busy: ResourceBusy,
    trace: Option<TraceReport>,
    /// Paced requests issued late (`None`: no thread was paced).
    paced_issued_late: Option<u64>,
    /// A thread with `exitall` and `exit_what=all` ended: no later phase runs.
    exit_all: bool,
}

/// Runs one phase's threads on `model` from `start_ns`, recording into `streams`.
fn run_phase(
    model: &mut DeviceModel,
    zones: &mut Option<SimZones>,
    device: &DeviceConfig,
    plan: Plan,
    start_ns: u64,
    streams: &mut [StreamStats],
    progress: &mut dyn FnMut(f64),
) -> Result<PhaseRun, SimError> {
    let (ios_total, bytes_total) = (plan.ios(), plan.io_bytes());
    let mut events_to_progress = EVENTS_PER_PROGRESS;
    let ramp_end_ns = start_ns + plan.ramp_ns();
    let stop_ns = plan
        .longest_runtime_ns
        .map_or(u64::MAX, |r| start_ns.saturating_add(r));
    let (mut host, mut steady) = Host::with_watches(plan, device, start_ns, streams.len());
    let mut last_completion_ns = start_ns;
    // Per stream: its last completion.
    let mut stream_last_ns = vec![start_ns; streams.len()];
    // Whether the phase reached `stop_ns` (rather than running out of work first).
    let mut stopped_by_time = false;
    // The device's busy time when the ramp ended (taken at the first event after it).
    let mut busy_at_ramp_end = (ramp_end_ns == start_ns).then(|| model.resource_busy());

    while let Some((t, device_first)) = next_event(model, &host) {
        if t > stop_ns {
            stopped_by_time = true;
            break;
        }
        if busy_at_ramp_end.is_none() && t >= ramp_end_ns {
            busy_at_ramp_end = Some(model.resource_busy());
        }
        events_to_progress -= 1;
        if events_to_progress == 0 {
            events_to_progress = EVENTS_PER_PROGRESS;
            progress(host.fraction_done(t - start_ns, stop_ns - start_ns, ios_total, bytes_total));
        }
        if device_first {
            host.take_device_events(model, t);
            continue;
        }
        let (t, _, event, x) = host.events.pop().expect("checked");
        match event {
            HostEvent::Issue => host.issue(model, zones, x, t)?,
            HostEvent::Submit => model
                .submit(host.pending[x as usize].cmd, t)
                .map_err(SimError::Command)?,
            HostEvent::Complete => {
                let stream = host.complete(model, zones, streams, &mut steady.counts, x, t)?;
                stream_last_ns[stream] = t;
                last_completion_ns = t;
            }
            HostEvent::Sample => host.sample(&mut steady, x as usize, t),
        }
    }
    steady.report_into(streams);
    let end = PhaseEnd {
        last_completion_ns,
        stream_last_ns,
        stopped_by_time,
        busy_at_ramp_end,
    };
    end.close(host, model, streams, (ramp_end_ns, stop_ns))
}

/// The next event's time, and whether it is the device's (first on a tie); `None` when
/// neither the device nor the host has one.
#[inline(always)]
fn next_event(model: &DeviceModel, host: &Host) -> Option<(u64, bool)> {
    let device_t = model.next_event_ns();
    let host_t = host.events.peek().map(|(t, ..)| t);
    let device_first = match (device_t, host_t) {
        (None, None) => return None,
        (Some(d), Some(h)) => d <= h,
        (Some(_), None) => true,
        (None, Some(_)) => false,
    };
    let t = if device_first { device_t } else { host_t }.expect("checked");
    Some((t, device_first))
}

/// What a phase's loop keeps for its end: when it stopped and why, each stream's last
/// completion, and the device's busy time when the ramp ended.
struct PhaseEnd {
    last_completion_ns: u64,
    /// Per stream: its last completion.
    stream_last_ns: Vec<u64>,
    /// Whether the phase reached its time bound (rather than running out of work first).
    stopped_by_time: bool,
    /// The device's busy time when the ramp ended (taken at the first event after it).
    busy_at_ramp_end: Option<ResourceBusy>,
}

impl PhaseEnd {
    /// The phase's figures: its end (its time bound, or its last completion), its measured
    /// time and the device's busy time in it, each stream's own time, the threads' depth
    /// distributions, paced lateness and trace summary. `(ramp_end_ns, stop_ns)`.
    // Once per phase: kept out of the event loop's function, so the loop's inlining
    // (the model's `advance` in it) is decided on the loop alone.
    #[inline(never)]
    fn close(
        self,
        host: Host,
        model: &DeviceModel,
        streams: &mut [StreamStats],
        (ramp_end_ns, stop_ns): (u64, u64),
    ) -> Result<PhaseRun, SimError> {
        let end_ns = if self.stopped_by_time {
            stop_ns
        } else {
            self.last_completion_ns
        };
        let measure_from_ns = ramp_end_ns.min(end_ns);
        let busy = model.resource_busy().since(
            &self
                .busy_at_ramp_end
                .unwrap_or_else(|| model.resource_busy()),
        );
        self.set_active_times(&host, streams, end_ns);
        host.check_ids(self.stopped_by_time);
        let (trace, paced_issued_late) = merge_threads(host.threads, streams)?;
        Ok(PhaseRun {
            end_ns,
            measured_ns: end_ns - measure_from_ns,
            busy,
            trace,
            paced_issued_late,
            exit_all: host.exit_all,
        })
    }

    /// Sets each stream's own time, from the end of its ramp: to its last completion when
    /// every thread of it ran out of work, else to its runtime or the phase's end, `end_ns`.
    /// A stream that stopped before the others reports its rates over its own time, as fio
    /// does.
    fn set_active_times(&self, host: &Host, streams: &mut [StreamStats], end_ns: u64) {
        for (stream, stats) in streams.iter_mut().enumerate() {
            let own = || host.threads.iter().filter(|t| t.stream == stream);
            let Some(first) = own().next() else {
                continue;
            };
            let stopped = if own().all(|t| t.remaining == 0 || t.bytes_left == 0) {
                self.stream_last_ns[stream]
            } else {
                first.end_ns.min(end_ns)
            };
            // From the earliest of its threads' measuring starts (a latency target's final
            // window starts its thread's anew).
            let measured_from = own().map(|t| t.measure_from_ns).min().unwrap_or(0);
            stats.set_active_ns(stopped.saturating_sub(measured_from));
        }
    }
}

impl Host {
    /// Checks, at a phase's end, that every request id is in flight on its thread or free,
    /// and that a phase that ran out of events (not `stopped_by_time`) has nothing in flight.
    fn check_ids(&self, stopped_by_time: bool) {
        let in_flight: u64 = self.threads.iter().map(|t| u64::from(t.in_flight)).sum();
        let ids_taken = (self.pending.len() - self.free_ids.len()) as u64;
        assert_eq!(
            in_flight, ids_taken,
            "{in_flight} requests in flight hold {ids_taken} ids"
        );
        assert!(
            stopped_by_time || in_flight == 0,
            "the phase ran out of events with {in_flight} requests in flight"
        );
    }
}

/// Merges a phase's `threads` into `streams` (their depth distributions, a latency target's
/// own figures and the depth it found); returns the trace's summary and the paced requests
/// issued late (`None`: no thread was paced).
fn merge_threads(
    threads: Vec<Thread>,
    streams: &mut [StreamStats],
) -> Result<(Option<TraceReport>, Option<u64>), SimError> {
    let mut trace = None;
    let mut paced_issued_late = None;
    for th in threads {
        streams[th.stream].io_depths_mut().merge(&th.io_depths);
        if let Some(own) = &th.own {
            streams[th.stream].merge(own);
        }
        if let Some(steer) = &th.steer {
            let stream = &mut streams[th.stream];
            if let Some(depth) = steer.depth() {
                let d = stream.control.latency_depth.get_or_insert(depth);
                *d = (*d).min(depth);
            }
        }
        if th.requests.is_paced() {
            *paced_issued_late.get_or_insert(0) += th.issued_late;
        }
        if let Requests::Trace(feed) = th.requests {
            // Requests scheduled but never issued (the run ended first) were not replayed.
            let stopped = !th.scheduled.is_empty();
            let mut report = feed.finish(th.issued_late).map_err(SimError::Trace)?;
            report.stopped_early |= stopped;
            trace = Some(report);
        }
    }
    Ok((trace, paced_issued_late))
}
