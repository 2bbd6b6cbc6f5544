//! What steers one thread of a job, as planned (`ThreadControl`), before its phase starts.

use nvarray_workload::{ExitWhat, JobSpec, SteadyState};

use super::depth_search::DepthSearch;
use super::flow::FlowMember;
use super::think::Thinker;

/// What steers one thread of a job, as planned: its think time policy, depth search and
/// flow (joined per phase: `Plan::join_flows`), and its job's steady state (watched per job).
#[derive(Default)]
pub struct ThreadControl {
    pub(crate) think: Option<Thinker>,
    pub(crate) depth: Option<DepthSearch>,
    /// `(flow_id, weight, flow_sleep)`, for a job in a flow.
    pub(crate) flow: Option<(u32, u32, u64)>,
    /// Its place in its flow, once its phase's threads have joined (`Plan::join_flows`).
    pub(crate) flow_member: Option<FlowMember>,
    pub(crate) steady: Option<SteadyState>,
    /// `verify_backlog`: the thread drains after every this many writes, before reading
    /// them back.
    pub(crate) backlog: Option<u64>,
    /// With fio's `exitall`: what ends when this thread ends (`exit_what`), and its job's
    /// reporting group.
    pub(crate) exit: Option<(ExitWhat, usize)>,
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
            backlog: job
                .verify_backlog
                .filter(|_| job.verify != nvarray_workload::Verify::None),
            exit: None,
        }
    }

    /// Whether the thread changes its depth, pauses or stops by what it sees: the engines
    /// then take its slower path.
    pub(crate) fn steers(&self) -> bool {
        self.think.is_some()
            || self.depth.is_some()
            || self.flow.is_some()
            || self.backlog.is_some()
    }
}
