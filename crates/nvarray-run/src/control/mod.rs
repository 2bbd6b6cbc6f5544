//! What steers a running thread by what it has done and measured, the same for both engines
//! (fio's `do_io` loop checks, backend.c:990-1137): each is a small state machine the engine
//! feeds with its times and counts and that says when the thread must drain, pause or stop.
//!
//! - `think`: fio's think time policy (`thinktime_blocks`, `_spin`, `_blocks_type`,
//!   `_iotime`): when the thread stalls.
//! - `depth_search`: fio's latency target: the queue depth the thread may use.
//! - `flow`: fio's flows: whether the thread is ahead of its share of its flow's requests.
//! - `steady`: fio's steady state: when a job's metric has settled.

mod depth_search;
mod flow;
mod steady;
mod think;

pub(crate) use depth_search::{DepthSearch, DepthStep, TargetMissedAtDepthOne};
pub(crate) use flow::{FlowGroups, FlowMember};
pub(crate) use steady::{SteadyCounts, SteadyWatch};
pub(crate) use think::Thinker;

use nvarray_workload::{JobSpec, SteadyState};

/// What steers one thread of a job, as planned: its think time policy, depth search and
/// flow (joined per phase: `FlowGroups`), and its job's steady state (watched per job).
pub struct ThreadControl {
    pub(crate) think: Option<Thinker>,
    pub(crate) depth: Option<DepthSearch>,
    /// `(flow_id, weight, flow_sleep)`, for a job in a flow.
    pub(crate) flow: Option<(u32, u32, u64)>,
    pub(crate) steady: Option<SteadyState>,
}

impl ThreadControl {
    /// A thread of `job`'s.
    pub(crate) fn of(job: &JobSpec) -> ThreadControl {
        ThreadControl {
            think: Thinker::of(job, 0),
            depth: DepthSearch::of(job, 0),
            flow: (job.flow.weight > 0).then_some((job.flow.id, job.flow.weight, job.flow.sleep_ns)),
            steady: job.steadystate.is_set().then(|| job.steadystate.clone()),
        }
    }

    /// The thread starts at `start_ns`: its think and depth clocks start then.
    pub(crate) fn start_at(&mut self, start_ns: u64) {
        if let Some(t) = &mut self.think {
            t.start_at(start_ns);
        }
        if let Some(d) = &mut self.depth {
            d.new_window(start_ns, 0);
        }
    }

    /// Whether the thread changes its depth, pauses or stops by what it sees: the engines
    /// then take its slower path.
    pub(crate) fn steers(&self) -> bool {
        self.think.is_some() || self.depth.is_some() || self.flow.is_some()
    }
}
