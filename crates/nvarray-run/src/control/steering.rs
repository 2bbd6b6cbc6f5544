//! A thread's steering (`control`), for both engines: its think time policy, depth search
//! and flow turned into when the thread may issue. A thread that must drain (to think, after
//! its depth stepped down, before its final window, or to sleep off being ahead of its flow)
//! holds: the queue slots it frees wait until its last request completes, then all go again,
//! after the pause. A slot the depth cap or the flow does not let go waits the same way,
//! until the cap rises or the flow moves on. The simulator keeps its waiting slots as
//! events to replay; the emulator's thread simply stops issuing until the gate opens.

use super::{DepthSearch, DepthStep, FlowMember, TargetMissedAtDepthOne, Thinker, ThreadControl};

/// Why a thread drains: what it does once its last request has completed.
#[derive(Clone, Copy, Default)]
struct Hold {
    think: bool,
    new_window: bool,
    final_run: bool,
    flow_sleep: bool,
    /// Before a `verify_backlog`'s reads: drain, nothing more.
    backlog: bool,
}

impl Hold {
    fn any(self) -> bool {
        self.think || self.new_window || self.final_run || self.flow_sleep || self.backlog
    }
}

/// What the gate says to a slot that would issue.
pub(crate) enum Gate {
    Go,
    /// Wait (parked) until the thread resumes or its depth rises.
    Park,
    /// Wait (parked) until another thread of the flow issues.
    ParkForFlow(u32),
    /// The thread holds to sleep off its lead in its flow: resume now if it has nothing in
    /// flight.
    Hold,
}

/// What a resumed thread does: issue again at `resume_ns` (its CPU busy `spin_ns` from the
/// drain), having forgotten what it measured if `reset`.
pub(crate) struct Resume {
    pub(crate) resume_ns: u64,
    pub(crate) spin_ns: u64,
    pub(crate) reset: bool,
}

/// One simulated thread's steering state.
pub(crate) struct Steering {
    think: Option<Thinker>,
    depth: Option<DepthSearch>,
    flow: Option<FlowMember>,
    flow_sleep_ns: u64,
    hold: Hold,
    /// `verify_backlog`: writes between read-backs, and the writes issued.
    backlog_every: u64,
    writes: u64,
    issued: u64,
    completed: u64,
}

impl Steering {
    /// The steering of a thread planned with `control` (its flow joined), starting at
    /// `start_ns`; `None` when nothing steers it.
    pub(crate) fn of(control: ThreadControl, start_ns: u64) -> Option<Box<Steering>> {
        if !control.steers() {
            return None;
        }
        let flow = control.flow_member;
        let mut steering = Box::new(Steering {
            think: control.think,
            depth: control.depth,
            flow,
            flow_sleep_ns: control.flow.map_or(0, |(_, _, sleep)| sleep),
            hold: Hold::default(),
            backlog_every: control.backlog.unwrap_or(0),
            writes: 0,
            issued: 0,
            completed: 0,
        });
        steering.start_at(start_ns);
        Some(steering)
    }

    /// Before a slot issues, with `in_flight` of the thread's requests in flight.
    pub(crate) fn gate(&mut self, in_flight: u32) -> Gate {
        if self.hold.any() || self.depth.as_ref().is_some_and(|d| in_flight >= d.depth) {
            return Gate::Park;
        }
        if let Some(flow) = &mut self.flow {
            if !flow.may_issue() {
                if self.flow_sleep_ns > 0 {
                    self.hold.flow_sleep = true;
                    return Gate::Hold;
                }
                return Gate::ParkForFlow(flow.id);
            }
        }
        Gate::Go
    }

    /// A request (a write if `is_write`) was issued at `t`; the flow it advanced, if any.
    pub(crate) fn issued(&mut self, t: u64, is_write: bool) -> Option<u32> {
        self.issued += 1;
        if is_write && self.backlog_every > 0 {
            self.writes += 1;
            // The generator reads these writes back next: they must have completed.
            self.hold.backlog |= self.writes.is_multiple_of(self.backlog_every);
        }
        self.check_think(t);
        self.flow.as_ref().map(|f| f.id)
    }

    /// A request completed at `t` after `latency_ns`; `measured`: outside the ramp. Whether
    /// the thread's search is done (the job ends).
    pub(crate) fn completed(
        &mut self,
        t: u64,
        latency_ns: u64,
        measured: bool,
    ) -> Result<bool, TargetMissedAtDepthOne> {
        self.completed += 1;
        debug_assert!(self.completed <= self.issued, "more completed than issued");
        let mut done = false;
        if let Some(depth) = &mut self.depth {
            if depth.completed(latency_ns)? == DepthStep::Drain {
                self.hold.new_window = true;
            }
            if measured && !self.hold.any() {
                match depth.check(t, self.completed) {
                    DepthStep::Go => {}
                    DepthStep::Drain => self.hold.new_window = true,
                    DepthStep::FinalRun => self.hold.final_run = true,
                    DepthStep::Done => done = true,
                }
            }
        }
        self.check_think(t);
        Ok(done)
    }

    /// fio's think check, made after each step of its loop; not while the thread drains
    /// (fio's drain runs inside one step).
    fn check_think(&mut self, t: u64) {
        if let (Some(think), false) = (&mut self.think, self.hold.any()) {
            self.hold.think = think.stall_due(t, self.issued, self.completed);
        }
    }

    /// Whether the thread is draining.
    pub(crate) fn holding(&self) -> bool {
        self.hold.any()
    }

    /// The thread's last request completed at `t` while it held: what it does now.
    pub(crate) fn drained(&mut self, t: u64) -> Resume {
        debug_assert!(self.hold.any(), "drained without holding");
        let hold = std::mem::take(&mut self.hold);
        if hold.new_window || hold.final_run {
            if let Some(depth) = &mut self.depth {
                depth.new_window(t, self.completed);
            }
        }
        let think_ns = self.think.as_ref().filter(|_| hold.think);
        let pause_ns = think_ns.map_or(0, |k| k.think_ns).max(if hold.flow_sleep {
            self.flow_sleep_ns
        } else {
            0
        });
        Resume {
            resume_ns: t + pause_ns,
            spin_ns: think_ns.map_or(0, |k| k.spin_ns),
            reset: hold.final_run,
        }
    }

    /// The thread has no more work: it leaves its flow; the flow it leaves, if any.
    pub(crate) fn finish(&mut self) -> Option<u32> {
        self.flow.as_mut().map(|f| {
            f.leave();
            f.id
        })
    }

    /// The thread starts at `start_ns` (planned before the phase's start was known).
    pub(crate) fn start_at(&mut self, start_ns: u64) {
        if let Some(t) = &mut self.think {
            t.start_at(start_ns);
        }
        if let Some(d) = &mut self.depth {
            d.new_window(start_ns, 0);
        }
    }

    /// The depth its latency target's search is at.
    pub(crate) fn depth(&self) -> Option<u32> {
        self.depth.as_ref().map(|d| d.depth)
    }
}
