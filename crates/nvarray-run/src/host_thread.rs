//! One host thread of an emulator run: keeps `iodepth` commands in flight until its run
//! ends, then drains, in small steps over its state (`HostThread`): wait for a slot or a due
//! time, issue what may go, collect what completed. The times it keeps per slot and per
//! command (`Slot`, `InFlight`) tell the thread's own delay from the device's time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nvarray_host::ladder::{Issuer, LadderShared};
use nvarray_host::{pauses, Device, Done, HostError, Opcode, Prepared};
use nvarray_report::{IssueDelays, StreamStats, ISSUED_LATE_NS};
use nvarray_workload::trace::TraceReport;
use nvarray_workload::{Direction, ExitWhat, Request};

use crate::control::{Gate, Steering};
use crate::emu_exit::PhaseExit;
use crate::emu_steady::JobSteady;
use crate::error::EmuRunError;
use crate::pacing::{device_ns_at, Pacer};
use crate::plan::{Next, Requests, ThreadPlan};

/// How often a thread that may be stopped from outside looks while it waits for a time.
const LOOK_EVERY_NS: u64 = 10_000_000;

/// What a phase's threads have done so far, for the progress bar.
#[derive(Default)]
pub(crate) struct Progress {
    pub(crate) ios: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// How far through its trace a replaying thread has read, in millionths.
    pub(crate) trace_millionths: AtomicU64,
}

/// What one host thread measured.
pub(crate) struct ThreadResult {
    pub(crate) stats: StreamStats,
    /// Blocks read back that held data this run wrote and passed verification.
    pub(crate) verified_blocks: u64,
    /// Blocks read back and checked: those, and those that read as zeroes (never written).
    pub(crate) checked_blocks: u64,
    /// The summary of the trace the thread replayed.
    pub(crate) trace: Option<TraceReport>,
    /// A paced thread's requests issued late (`None`: not paced).
    pub(crate) paced_issued_late: Option<u64>,
    /// When the thread stopped: its last completion was collected.
    pub(crate) ended: Instant,
    /// How late the thread issued its timed requests after they could have gone.
    pub(crate) issue_delays: IssueDelays,
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
    /// When the thread began the wait for completions that collected its last command
    /// (`NOT_WAITING`: the slot is fresh), and when it issued that command: a timed request
    /// that came due while the thread issued it or waited for it was held by that command
    /// (`InFlight::held_by_previous_ns`), not by the thread's other work.
    waited_from_ns: u64,
    previous_issued_ns: u64,
}

/// A slot whose last command was not collected in a wait for completions.
const NOT_WAITING: u64 = u64::MAX;

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

    /// How long after it could have gone the thread issued it.
    fn host_delay_ns(&self) -> u64 {
        self.issued_ns - self.could_go_ns
    }

    /// The part of its delay (`host_delay_ns`) that its `slot` held it: from when it could go
    /// until the command before it on the slot was collected, if the thread spent that time
    /// issuing that command and waiting for it (its wait began no later than this request's
    /// time, or than that command's issue). Held either by a completion posted after its
    /// deadline (the device's lateness, judged with the completions', wake-late included) or
    /// an interrupt the kernel delivered late, or by that command's own late issue, already
    /// counted as its delay (at QD 1, one late issue makes the requests due before it
    /// completes late too, each a period less). Not the thread's own work either way
    /// (issue 56: a paced QD 1 job whose device thread the kernel woke 2 ms late counted those
    /// 2 ms, and the catch-up after them, as the host thread's own issue lateness, "busy when
    /// they came due", and was NOT FAITHFUL).
    fn held_by_previous_ns(&self, slot: &Slot) -> u64 {
        if slot.waited_from_ns > self.could_go_ns.max(slot.previous_issued_ns) {
            return 0;
        }
        slot.ready_ns
            .saturating_sub(self.could_go_ns)
            .min(self.host_delay_ns())
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

    /// The slot it frees when collected at `collected_ns` in a wait for completions begun at
    /// `waited_from_ns` (`NOT_WAITING`: not in one), the device having taken `device_ns`:
    /// ready again at once. Had the thread kept time, it would have been ready at the device's
    /// completion, however late the thread collected it (a pause between the two is the
    /// thread's, not the device's).
    fn frees(&self, collected_ns: u64, device_ns: u64, waited_from_ns: u64) -> Slot {
        Slot {
            ready_ns: collected_ns,
            ready_on_time_ns: self.done_on_time_ns(device_ns),
            waited_from_ns,
            previous_issued_ns: self.issued_ns,
        }
    }
}

/// One host thread: keeps `iodepth` commands in flight until its run ends, then drains. Its
/// steering (`control`: think time, latency target, flow) holds it back as in the
/// simulator: it stops issuing while its gate is shut, and a hold waits for its last
/// command, then for the pause. With `verify`, every write carries self-checking data
/// (`verify`) and every read is checked. `arrive` waits at the phase's start gate and returns
/// the phase's start; it is called once the thread is set up.
pub(crate) fn run_thread(
    device: &Device,
    shared: &LadderShared,
    plan: ThreadPlan,
    arrive: impl FnOnce() -> Instant,
    (progress, steady, exit): (&Progress, Option<&JobSteady>, &PhaseExit),
) -> Result<ThreadResult, EmuRunError> {
    let began_ns = device.now_ns();
    let mut thread = HostThread::new(device, shared, plan, (steady, exit));
    // Set up (everything above allocates: the histograms alone take about 0.3 ms to fault
    // in): the phase starts when every thread of it is (`StartGate`).
    thread.start(device_ns_at(device, arrive()));
    loop {
        let more = thread.has_more();
        if more && thread.in_flight == 0 {
            thread.wait_for_first_slot();
        }
        if more {
            thread.issue_ready();
        }
        if thread.in_flight == 0 {
            if more && !thread.slots.is_empty() {
                continue;
            }
            break;
        }
        thread.collect(progress);
        thread.resume_if_drained();
    }
    if let Some((what, group)) = thread.exit {
        exit.ended(what, group);
    }
    thread.finish(began_ns)
}

/// A host thread's state while it runs. Every time is the device clock's nanoseconds (one
/// `clock_gettime` and a subtraction a reading; `Instant` arithmetic cost about 150
/// instructions per request, issue 38).
struct HostThread<'d> {
    device: &'d Device,
    plan: ThreadPlan,
    issuer: Issuer,
    block: usize,
    stats: StreamStats,
    /// Per tag: this thread's command on it (tags are device-wide, so index by tag).
    started: Vec<Option<InFlight>>,
    scratch: Vec<u8>,
    write_data: Vec<u8>,
    finished: Vec<Done>,
    issued: u64,
    /// Requests issued since the ramp ended: `number_ios` counts these, as in fio (fio 3.33:
    /// `rate_iops=1000 number_ios=2000 ramp_time=1` does 2,000 after its ramp). Bytes
    /// (`size`, `io_size`) count from the start, the ramp's too, as fio's do.
    issued_counted: u64,
    issued_bytes: u64,
    in_flight: usize,
    /// Bytes read back that held data this run wrote and passed verification.
    verified_bytes: u64,
    /// Bytes read back and checked (verified, or zeroes: never written).
    checked_bytes: u64,
    error: Option<EmuRunError>,
    /// A request taken but not yet issued (a timestamped trace's before its time, or one that
    /// found no tag), and its time (`None`: whenever it goes).
    pending: Option<(Request, Option<u64>)>,
    trace_ended: bool,
    /// Timed requests that waited for a slot (every slot taken at their due time), and how
    /// late the thread issued each after it could have gone (its own delay).
    issued_late: u64,
    issue_delays: IssueDelays,
    pacer: Pacer,
    /// A timed thread's run is every request due before its end, as in the simulator: one the
    /// thread is late for still goes after the end (its lateness is reported), so the offered
    /// load does not depend on this machine's pauses. An untimed thread stops at the end.
    timed: bool,
    /// Slots wait for time only in a timed thread or one with think time.
    fresh_for_slots: bool,
    /// The phase's start, the end of the job's ramp (completions before it are not
    /// counted), and the end of its runtime.
    start: u64,
    measure_from: u64,
    deadline: Option<u64>,
    /// The latest reading of the clock in the loop (`now_ns`).
    latest_ns: u64,
    /// When each of the `iodepth` slots may issue again.
    slots: VecDeque<Slot>,
    /// What steers it (think time policy, latency target, flow), and whether its latency
    /// target's search has ended the job.
    steer: Option<Box<Steering>>,
    steer_done: bool,
    /// Its job's steady-state watch, which it counts into and which may stop it.
    steady: Option<&'d JobSteady>,
    /// With fio's `exitall`: what ends when it ends and its group, and the phase's flags,
    /// which may stop it.
    exit: Option<(ExitWhat, usize)>,
    phase_exit: &'d PhaseExit,
}

impl<'d> HostThread<'d> {
    /// The thread's buffers and queue pair, allocated before the phase starts.
    fn new(
        device: &'d Device,
        shared: &LadderShared,
        mut plan: ThreadPlan,
        (steady, phase_exit): (Option<&'d JobSteady>, &'d PhaseExit),
    ) -> Self {
        let exit = plan.control.exit;
        let steer = Steering::of(std::mem::take(&mut plan.control), 0);
        let completion = device.completion();
        let command_bytes_max = device.command_bytes_max() as usize;
        let timed = plan.requests.is_timed();
        HostThread {
            device,
            issuer: Issuer::new(device, shared, completion),
            block: device.block_bytes() as usize,
            stats: StreamStats::new("thread"),
            started: vec![None; device.tags()],
            scratch: vec![0u8; command_bytes_max],
            write_data: vec![0x5au8; command_bytes_max],
            finished: Vec::with_capacity(device.tags()),
            issued: 0,
            issued_counted: 0,
            issued_bytes: 0,
            in_flight: 0,
            verified_bytes: 0,
            checked_bytes: 0,
            error: None,
            pending: None,
            trace_ended: false,
            issued_late: 0,
            issue_delays: IssueDelays::default(),
            pacer: Pacer::new(),
            timed,
            fresh_for_slots: timed || steer.is_some(),
            start: 0,
            measure_from: 0,
            deadline: None,
            latest_ns: 0,
            slots: VecDeque::with_capacity(plan.iodepth as usize),
            plan,
            steer,
            steer_done: false,
            steady,
            exit,
            phase_exit,
        }
    }

    /// The phase started at `start`: every slot is ready then.
    fn start(&mut self, start: u64) {
        assert!(self.slots.is_empty(), "the thread started twice");
        self.start = start;
        self.measure_from = start + self.plan.ramp_ns;
        self.deadline = self.plan.runtime_ns.map(|r| start + r);
        self.latest_ns = start;
        if let Some(steer) = &mut self.steer {
            steer.start_at(start);
        }
        self.slots.extend(std::iter::repeat_n(
            Slot {
                ready_ns: start,
                ready_on_time_ns: start,
                waited_from_ns: NOT_WAITING,
                previous_issued_ns: start,
            },
            self.plan.iodepth as usize,
        ));
    }

    #[inline(always)]
    fn now_ns(&self) -> u64 {
        self.device.now_ns()
    }

    /// Whether the thread may issue more: its time is not up (an untimed thread's runtime,
    /// or a timed one's next request due at or after the end), nothing failed, and neither
    /// its counts, its bytes nor its trace ran out.
    #[inline(always)]
    fn has_more(&self) -> bool {
        // A request goes at the later of its due time and now: none goes once either is at
        // the end (`plan::issues_before_end`).
        let time_up = match self.deadline {
            None => false,
            Some(d) => {
                let pending_due = self.pending.and_then(|(_, due)| due).unwrap_or(0);
                let goes = if self.timed {
                    pending_due.max(self.now_ns())
                } else {
                    self.now_ns()
                };
                !crate::plan::issues_before_end(goes, Some(d))
            }
        };
        !time_up
            && self.error.is_none()
            && self.issued_counted < self.plan.ios
            && self.issued_bytes < self.plan.io_bytes
            && !self.trace_ended
            && !self.steer_done
            && !self.steady.is_some_and(JobSteady::stopped)
            && !self
                .exit
                .is_some_and(|(_, group)| self.phase_exit.stops(group))
    }

    /// With nothing in flight, nothing to wait for but the think time, or the next request's
    /// time.
    fn wait_for_first_slot(&mut self) {
        if let Some(slot) = self.slots.front() {
            let until = self
                .pending
                .and_then(|(_, due)| due)
                .map_or(slot.ready_ns, |due| due.max(slot.ready_ns));
            let device = self.device;
            if self.exit.is_none() && self.steady.is_none() {
                self.pacer.wait_until(until, || device.now_ns());
                return;
            }
            // A job that may be stopped from outside (`exitall`, a steady state) looks now
            // and then while it waits (a paced request's time may be seconds away).
            loop {
                let now = device.now_ns();
                if now >= until || !self.has_more() {
                    break;
                }
                self.pacer
                    .wait_until(until.min(now + LOOK_EVERY_NS), || device.now_ns());
            }
        }
    }

    /// Issues every request that may go now: a slot is ready and the request is due (and due
    /// before the run's end).
    #[inline(always)]
    fn issue_ready(&mut self) {
        while self.issued_counted < self.plan.ios && self.issued_bytes < self.plan.io_bytes {
            // An untimed thread without think time has a slot ready whenever one is free
            // (each was freed at a reading of the clock, and the clock does not go back), so
            // the latest reading answers; only the issue below reads the clock again.
            let now = if self.fresh_for_slots {
                self.now_ns()
            } else {
                self.latest_ns
            };
            let slot = match self.slots.front() {
                Some(&slot) if slot.ready_ns <= now => slot,
                _ => break,
            };
            if let Some(steer) = self.steer.as_deref_mut() {
                match steer.gate(self.in_flight as u32) {
                    Gate::Go => {}
                    Gate::Hold => {
                        self.resume_if_drained();
                        break;
                    }
                    // A flow's thread ahead of its share tries again at once, as fio's does.
                    Gate::Park | Gate::ParkForFlow(_) => break,
                }
            }
            let Some((r, due_at)) = self.next_request() else {
                break;
            };
            let due = due_at.unwrap_or(now);
            // It goes at the later of its due time and its slot's: only before the end
            // (`plan::issues_before_end`, as the simulator and fio). Not yet due: finish what
            // is in flight meanwhile, or wait for it.
            if !crate::plan::issues_before_end(due.max(now), self.deadline) || due > now {
                self.pending = Some((r, due_at));
                break;
            }
            if !self.issue(r, due_at, slot) {
                break;
            }
        }
    }

    /// The request to issue next: the one held back, or the plan's next. `None` when the
    /// trace has ended or failed.
    #[inline(always)]
    fn next_request(&mut self) -> Option<(Request, Option<u64>)> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        match self.plan.requests.next_request() {
            Ok(Next::Request(r, due_ns)) => Some((r, due_ns.map(|ns| self.start + ns))),
            Ok(Next::End) => {
                self.trace_ended = true;
                None
            }
            Err(e) => {
                self.error = Some(EmuRunError::Trace(e));
                None
            }
        }
    }

    /// Issues `r` on `slot`; `false` when the thread must stop issuing for now (no tag while
    /// its own commands are in flight, or an error).
    #[inline(always)]
    fn issue(&mut self, r: Request, due_at: Option<u64>, slot: Slot) -> bool {
        let len = r.len_bytes as usize;
        let (op, data) = match r.op {
            Direction::Read => (Opcode::Read, None),
            Direction::Write => {
                self.fill_verified(&r);
                (Opcode::Write, Some(&self.write_data[..len]))
            }
        };
        // The issue time, measured. A timed request (a timestamped trace's, a paced
        // job's) could go at its due time, or when a slot would have freed had this
        // thread kept time (`Slot::ready_on_time`) if every slot was taken then: that wait
        // for a slot is the workload's queueing, as in the simulator, and counts in its
        // latency. Anything after that is this thread's own delay (a sleep that ended
        // late, a pause, finishing other requests first): it is measured apart
        // (`issue_delays`) and left out of the latency, which is the device's.
        self.latest_ns = self.device.now_ns();
        let command = InFlight::issue(self.latest_ns, due_at, &slot);
        if due_at.is_some() {
            self.issued_late += u64::from(command.slot_wait_ns > ISSUED_LATE_NS);
            // Issued late by the machine when its time came inside a pause of this
            // thread (a sleep the kernel ended late, a gap in its spinning or serving).
            let machine_late = pauses::this_thread(|w| w.paused_at(command.could_go_ns));
            self.issue_delays.record(
                command.host_delay_ns(),
                machine_late,
                command.held_by_previous_ns(&slot),
            );
        }
        let device = self.device;
        let prepared = device
            .prepare(op, r.offset_bytes, r.len_bytes, data)
            .and_then(|p| match self.plan.placement.as_mut() {
                // Checked against the device's handles when planned (`Plan::place_writes`).
                Some(picker) if op == Opcode::Write => device.place(p, picker.next_handle()),
                _ => Ok(p),
            });
        match prepared {
            Ok(p) => {
                self.issue_prepared(p, command, op, r.len_bytes);
                true
            }
            // Other threads hold every tag: collect our own completions first.
            Err(HostError::NoTag { .. }) if self.in_flight > 0 => {
                self.pending = Some((r, due_at));
                false
            }
            Err(HostError::NoTag { .. }) => {
                self.pending = Some((r, due_at));
                std::hint::spin_loop();
                true
            }
            Err(e) => {
                self.error = Some(e.into());
                false
            }
        }
    }

    /// With `verify`, fills the write buffer with `r`'s self-checking data, stamped with
    /// this thread and its issue count.
    #[inline(always)]
    fn fill_verified(&mut self, r: &Request) {
        if let Some(v) = &self.plan.verify {
            let len = r.len_bytes as usize;
            let stamp = (self.plan.index << 40) | self.issued;
            let interval = v.interval_bytes(self.block);
            v.fill(&mut self.write_data[..len], r.offset_bytes, interval, stamp);
        }
    }

    /// Issues the prepared command `p` (`op`, of `len_bytes`) as `command` on the slot in
    /// front, and counts it: depth, requests and bytes issued, the steering's count.
    #[inline(always)]
    fn issue_prepared(&mut self, p: Prepared, command: InFlight, op: Opcode, len_bytes: u32) {
        let counted = command.could_go_ns >= self.measure_from;
        if counted {
            self.stats
                .io_depths_mut()
                .record_issue(self.in_flight as u32 + 1);
        }
        self.started[p.tag().index()] = Some(command);
        self.issuer.issue(p);
        self.slots.pop_front();
        self.issued += 1;
        self.issued_counted += u64::from(counted);
        self.issued_bytes += u64::from(len_bytes);
        self.in_flight += 1;
        if let Some(steer) = self.steer.as_deref_mut() {
            steer.issued(self.latest_ns, op == Opcode::Write);
        }
    }

    /// Waits for completions (until the held-back request's time, if it has one) and
    /// collects them: latency, verification, the slots they free, progress.
    #[inline(always)]
    fn collect(&mut self, progress: &Progress) {
        // The wait begins at the thread's latest clock reading (only bookkeeping since).
        let waited_from = self.latest_ns;
        let started = &self.started;
        let mine = |tag: usize| started.get(tag).is_some_and(|s| s.is_some());
        let finished = &mut self.finished;
        match self.pending.and_then(|(_, due)| due) {
            // A trace's request is due: collect what completes until then, no longer.
            Some(due) => self
                .issuer
                .wait_until(due, &mine, &mut |done| finished.push(done)),
            None => self.issuer.wait(&mine, &mut |done| finished.push(done)),
        };
        debug_assert!(
            self.finished.len() <= self.in_flight,
            "collected more than were in flight"
        );
        if self.plan.ramp_ns == 0 || self.now_ns() >= self.measure_from {
            self.stats
                .io_depths_mut()
                .record_collected(self.finished.len());
        }
        // Counted for the progress bar once per round (an atomic add per request was a line
        // every host thread wrote).
        let (collected_ios, mut collected_bytes) = (self.finished.len() as u64, 0u64);
        let mut finished = std::mem::take(&mut self.finished);
        for done in finished.drain(..) {
            collected_bytes += u64::from(done.len_bytes);
            self.collect_one(done, waited_from);
        }
        self.finished = finished;
        if collected_ios > 0 {
            progress.ios.fetch_add(collected_ios, Ordering::Relaxed);
            progress.bytes.fetch_add(collected_bytes, Ordering::Relaxed);
        }
        if let Some(fraction) = self.plan.requests.fraction_done() {
            progress
                .trace_millionths
                .fetch_max((fraction * 1e6) as u64, Ordering::Relaxed);
        }
    }

    /// One completion: its data out (checked with `verify`), its latency, its slot freed.
    #[inline(always)]
    fn collect_one(&mut self, done: Done, waited_from_ns: u64) {
        let command = self.started[done.tag.index()].take().expect("started");
        let (is_read, len, offset) = (done.op == Opcode::Read, done.len_bytes, done.offset_bytes);
        // The device's time: from the issue to the model's completion, not to this
        // thread's collecting it.
        let device_ns = done.deadline_ns.saturating_sub(command.issued_ns);
        // The read's data is in its tag buffer, which stands for the application's DMA buffer
        // (the device wrote it there, as an NVMe device writes into the pages the host gave
        // it). It is copied out only to be checked: a copy into a buffer of the thread's own
        // is a step no zero-copy user-space stack takes (SPDK, io_uring with registered
        // buffers), and added about 0.1 µs to the main job's p50 (4 KiB, QD 1; issue 57).
        let checks = is_read && self.plan.verify.as_ref().is_some_and(|v| v.checks_reads());
        let out = checks.then_some(&mut self.scratch[..len as usize]);
        // When the thread had the completion, for its slot (`InFlight::frees`): the
        // latency's reading unless checking the data took time after it (one clock
        // reading per request fewer, issue 38).
        let mut collected = None;
        match self.device.finish(done, out) {
            Ok(()) => {
                let now = self.device.now_ns();
                self.latest_ns = now;
                collected = Some(now);
                let latency_ns = command.latency_ns(now);
                let counted = command.done_on_time_ns(device_ns) >= self.measure_from;
                if counted {
                    // All of it as host time for now; `device_report` moves the modelled
                    // device's share to its components.
                    self.stats.record_host(is_read, len, latency_ns);
                }
                if let Some(job) = self.steady {
                    job.completed(len, latency_ns);
                }
                if let Some(steer) = self.steer.as_deref_mut() {
                    match steer.completed(now, latency_ns, counted) {
                        Ok(done) => self.steer_done |= done,
                        Err(miss) => {
                            self.error.get_or_insert(EmuRunError::LatencyTargetMissed {
                                latency_ns: miss.latency_ns,
                                target_ns: miss.target_ns,
                            });
                        }
                    }
                }
                if let Some(v) = self.plan.verify.as_ref().filter(|_| checks) {
                    collected = None;
                    let interval = v.interval_bytes(self.block);
                    match v.check(&self.scratch[..len as usize], offset, interval) {
                        // Counted in bytes, reported in device blocks.
                        Ok(n) => {
                            self.verified_bytes += n * interval as u64;
                            self.checked_bytes += len as u64 / interval as u64 * interval as u64;
                        }
                        Err(e) => {
                            self.error.get_or_insert(EmuRunError::Verify(e));
                        }
                    }
                }
            }
            Err(e) => {
                self.error.get_or_insert(e.into());
            }
        }
        self.in_flight -= 1;
        let collected = collected.unwrap_or_else(|| self.device.now_ns());
        self.latest_ns = self.latest_ns.max(collected);
        self.slots
            .push_back(command.frees(collected, device_ns, waited_from_ns));
    }

    /// A steered thread holding (to think, or after its depth changed) whose requests have
    /// all completed: it forgets what it measured if its latency target's final window
    /// starts, and its slots are ready again after its pause (`thinktime_spin` of it busy).
    fn resume_if_drained(&mut self) {
        let Some(steer) = self.steer.as_deref_mut() else {
            return;
        };
        if !steer.holding() || self.in_flight > 0 {
            return;
        }
        let now = self.device.now_ns();
        let resume = steer.drained(now);
        if resume.reset {
            self.stats = StreamStats::new("thread");
            self.measure_from = self.measure_from.max(now);
        }
        if resume.spin_ns > 0 {
            let until = now + resume.spin_ns;
            while self.device.now_ns() < until {
                std::hint::spin_loop();
            }
        }
        for slot in &mut self.slots {
            slot.ready_ns = slot.ready_ns.max(resume.resume_ns);
            slot.ready_on_time_ns = slot.ready_on_time_ns.max(resume.resume_ns);
        }
    }

    /// What the thread measured, once it has drained. Its own time is from its ramp's end:
    /// a thread that stopped before the phase did (its number_ios done, or a runtime shorter
    /// than the longest job's) reports its rates over it, as fio does; and a run of several
    /// phases adds the phases' times up.
    fn finish(mut self, began_ns: u64) -> Result<ThreadResult, EmuRunError> {
        assert_eq!(
            self.in_flight, 0,
            "the thread finished with commands in flight"
        );
        // Every command gave its slot back.
        assert_eq!(
            self.slots.len(),
            self.plan.iodepth as usize,
            "{} slots of a queue depth of {}",
            self.slots.len(),
            self.plan.iodepth
        );
        // Verified bytes are among the checked ones.
        assert!(
            self.verified_bytes <= self.checked_bytes,
            "{} bytes verified of {} checked",
            self.verified_bytes,
            self.checked_bytes
        );
        // The device clock first: the thread's active time lies inside the phase's elapsed.
        let ended_ns = self.device.now_ns();
        let ended = Instant::now();
        if let Some(steer) = self.steer.as_deref_mut() {
            steer.finish();
            self.stats.control.latency_depth = steer.depth();
        }
        self.stats.set_active_ns(
            ended_ns
                .saturating_sub(self.measure_from.max(began_ns))
                .max(1),
        );
        let paced_issued_late = self.plan.requests.is_paced().then_some(self.issued_late);
        let trace: Option<TraceReport> = match self.plan.requests {
            Requests::Trace(feed) if self.error.is_none() => {
                let stopped = self.pending.is_some();
                let mut trace = feed.finish(self.issued_late).map_err(EmuRunError::Trace)?;
                trace.stopped_early |= stopped;
                Some(trace)
            }
            _ => None,
        };
        match self.error {
            Some(e) => Err(e),
            None => Ok(ThreadResult {
                stats: self.stats,
                verified_blocks: self.verified_bytes / self.block as u64,
                checked_blocks: self.checked_bytes / self.block as u64,
                trace,
                paced_issued_late,
                ended,
                issue_delays: self.issue_delays,
            }),
        }
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

    /// A slot as a thread's start leaves it, at `t0`.
    fn fresh_slot(t0: u64) -> Slot {
        Slot {
            ready_ns: t0,
            ready_on_time_ns: t0,
            waited_from_ns: NOT_WAITING,
            previous_issued_ns: t0,
        }
    }

    /// A paced thread (QD 1, a request due every 1,000 µs, each on the device 10 µs) that
    /// woke `late_by` late for one request: that request's latency is still the device's,
    /// the delay is the thread's own, and the requests after it neither wait for a slot nor
    /// inherit the delay.
    #[test]
    fn a_late_wake_up_is_the_threads_delay_and_not_the_requests_latency() {
        let t0 = T0;
        let late_by = us(3_000);
        let mut slot = fresh_slot(t0);
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
            slot = c.frees(collected, us(10), NOT_WAITING);
        }
    }

    /// Requests due faster than the device serves them at QD 1 wait for the slot, as in the
    /// simulator: the wait is in their latency and is not the thread's delay.
    #[test]
    fn a_request_due_while_its_slot_is_taken_waits_for_it_in_its_latency() {
        let t0 = T0;
        let slot = fresh_slot(t0);
        // Both due at t0; the first takes 10 µs on the device.
        let first = InFlight::issue(t0, Some(t0), &slot);
        let slot = first.frees(t0 + us(10), us(10), NOT_WAITING);
        let second = InFlight::issue(t0 + us(10), Some(t0), &slot);
        assert_eq!(second.slot_wait_ns, us(10));
        assert_eq!(second.host_delay_ns(), 0);
        assert_eq!(second.latency_ns(t0 + us(20)), us(20));
    }

    /// An untimed request's latency is from its issue; it has no due time to be late for.
    #[test]
    fn an_untimed_request_counts_from_its_issue() {
        let t0 = T0;
        let slot = fresh_slot(t0);
        let c = InFlight::issue(t0 + us(5), None, &slot);
        assert_eq!((c.slot_wait_ns, c.host_delay_ns()), (0, 0));
        assert_eq!(c.latency_ns(t0 + us(12)), us(7));
        let freed = c.frees(t0 + us(12), us(7), NOT_WAITING);
        assert_eq!(freed.ready_ns, t0 + us(12));
    }

    /// A thread paused between the device's completion and its collecting it (a machine
    /// pause of 100 ms at QD 1): the requests due meanwhile did not wait for a slot the
    /// device had freed; they were issued late by the thread.
    #[test]
    fn a_pause_before_collecting_is_the_threads_not_a_full_slot() {
        let t0 = T0;
        let slot = fresh_slot(t0);
        let first = InFlight::issue(t0, Some(t0), &slot);
        // The device took 10 µs; the thread collected it 100 ms later.
        let collected = t0 + us(100_000);
        let slot = first.frees(collected, us(10), NOT_WAITING);
        // The next was due 1 ms after the first and goes as soon as the thread is back.
        let second = InFlight::issue(collected, Some(t0 + us(1_000)), &slot);
        assert_eq!(second.slot_wait_ns, 0);
        assert_eq!(second.host_delay_ns(), us(99_000));
        assert_eq!(second.latency_ns(collected + us(10)), us(10));
    }

    /// A paced QD 1 request due while the thread waited for the previous one's completion,
    /// which the device posted 2 ms late (its thread woken late by the kernel): the thread
    /// issues it 2 ms late, but that wait is the completion's lateness, not the thread's own
    /// delay; only what the thread took after collecting is its own.
    #[test]
    fn a_request_held_by_a_late_completion_is_not_the_threads_own_delay() {
        let t0 = T0;
        let slot = fresh_slot(t0);
        let first = InFlight::issue(t0, Some(t0), &slot);
        // Modelled at 450 µs, collected at 2,450 µs by a wait that began at the issue.
        let collected = t0 + us(2_450);
        let slot = first.frees(collected, us(450), t0);
        let due = t0 + us(1_000);
        let second = InFlight::issue(collected + us(3), Some(due), &slot);
        assert_eq!(second.host_delay_ns(), us(1_453));
        assert_eq!(second.held_by_previous_ns(&slot), us(1_450));
        // The same completion collected by a thread that was busy elsewhere when the request
        // came due (its wait began after): the whole delay is the thread's.
        let busy = first.frees(collected, us(450), due + us(1));
        let third = InFlight::issue(collected + us(3), Some(due), &busy);
        assert_eq!(third.held_by_previous_ns(&busy), 0);
        // Collected in time: nothing waited for.
        let on_time = first.frees(t0 + us(450), us(450), t0);
        let fourth = InFlight::issue(due + us(2), Some(due), &on_time);
        assert_eq!(fourth.held_by_previous_ns(&on_time), 0);
    }

    /// One late issue at QD 1 (3 ms, a pause: counted once, as that request's delay) makes
    /// the requests due while it is in flight go late too, each a period less: they were held
    /// by the command before them, not by the thread's own work.
    #[test]
    fn the_catch_up_after_a_late_issue_is_not_counted_again() {
        let t0 = T0;
        let mut slot = fresh_slot(t0);
        let first = InFlight::issue(t0 + us(3_000), Some(t0), &slot);
        assert_eq!(first.host_delay_ns(), us(3_000));
        let mut previous = first;
        for k in 1..=5u64 {
            // Collected 450 µs after its issue by a wait that began at the issue; the next is
            // issued 2 µs after that.
            let collected = previous.issued_ns + us(450);
            slot = previous.frees(collected, us(450), previous.issued_ns);
            let due = t0 + us(1_000 * k);
            let next = InFlight::issue(collected.max(due) + us(2), Some(due), &slot);
            let own = next.host_delay_ns() - next.held_by_previous_ns(&slot);
            assert_eq!(
                own,
                us(2),
                "request {k}: only the 2 µs after collecting are its own"
            );
            previous = next;
        }
    }
}
