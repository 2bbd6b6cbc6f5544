//! What steers a running thread by what it has done and measured, the same for both engines
//! (fio's `do_io` loop checks, backend.c:990-1137): each is a small state machine the engine
//! feeds with its times and counts and that says when the thread must drain, pause or stop.
//!
//! - `think`: fio's think time policy (`thinktime_blocks`, `_spin`, `_blocks_type`,
//!   `_iotime`): when the thread stalls.
//! - `depth_search`: fio's latency target: the queue depth the thread may use.
//! - `flow`: fio's flows: whether the thread is ahead of its share of its flow's requests.
//! - `steady`: fio's steady state: when a job's metric has settled.
//! - `steering`: the first three together, as one thread's gate: when it may issue, when
//!   it drains and what it does once drained.

mod depth_search;
mod flow;
mod steady;
mod steering;
mod think;

pub(crate) use depth_search::{DepthSearch, DepthStep, TargetMissedAtDepthOne};
pub(crate) use flow::{FlowGroups, FlowMember};
pub(crate) use steady::{SteadyCounts, SteadyWatch};
pub(crate) use steering::{Gate, Steering};
pub(crate) use think::Thinker;

use nvarray_workload::{JobSpec, SteadyState};

/// What steers one thread of a job, as planned: its think time policy, depth search and
/// flow (joined per phase: `join_flows`), and its job's steady state (watched per job).
#[derive(Default)]
pub struct ThreadControl {
    pub(crate) think: Option<Thinker>,
    pub(crate) depth: Option<DepthSearch>,
    /// `(flow_id, weight, flow_sleep)`, for a job in a flow.
    pub(crate) flow: Option<(u32, u32, u64)>,
    /// Its place in its flow, once its phase's threads have joined (`join_flows`).
    pub(crate) flow_member: Option<FlowMember>,
    pub(crate) steady: Option<SteadyState>,
}

/// The threads of one phase (which run side by side) join their flows.
pub(crate) fn join_flows(threads: &mut [crate::plan::ThreadPlan]) {
    let mut flows = FlowGroups::default();
    for t in threads {
        if let Some((id, weight, _)) = t.control.flow {
            t.control.flow_member = Some(flows.join(id, weight));
        }
    }
}

impl ThreadControl {
    /// A thread of `job`'s.
    pub(crate) fn of(job: &JobSpec) -> ThreadControl {
        ThreadControl {
            think: Thinker::of(job, 0),
            depth: DepthSearch::of(job, 0),
            flow: (job.flow.weight > 0).then_some((
                job.flow.id,
                job.flow.weight,
                job.flow.sleep_ns,
            )),
            flow_member: None,
            steady: job.steadystate.is_set().then(|| job.steadystate.clone()),
        }
    }

    /// Whether the thread changes its depth, pauses or stops by what it sees: the engines
    /// then take its slower path.
    pub(crate) fn steers(&self) -> bool {
        self.think.is_some() || self.depth.is_some() || self.flow.is_some()
    }
}
