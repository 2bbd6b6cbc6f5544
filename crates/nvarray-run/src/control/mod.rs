//! What steers a running thread by what it has done and measured, the same for both engines
//! (fio's `do_io` loop checks, backend.c:990-1137): each is a small state machine the engine
//! feeds with its times and counts and that says when the thread must drain, pause or stop.
//!
//! - `think`: fio's think time policy (`thinktime_blocks`, `_spin`, `_blocks_type`,
//!   `_iotime`): when the thread stalls.
//! - `depth_search`: fio's latency target: the queue depth the thread may use.
//! - `flow`: fio's flows: whether the thread is ahead of its share of its flow's requests.
//! - `steady`: fio's steady state: when a job's metric has settled.
//! - `thread_control`: what a thread's job asks of these, as planned (`ThreadControl`).
//! - `steering`: the first three together, as one thread's gate: when it may issue, when
//!   it drains and what it does once drained.

mod depth_search;
mod flow;
mod steady;
mod steering;
mod think;
mod thread_control;

pub(crate) use depth_search::{DepthSearch, DepthStep, TargetMissedAtDepthOne};
pub(crate) use flow::{FlowGroups, FlowMember};
pub(crate) use steady::{SteadyCounts, SteadyWatch};
pub(crate) use steering::{Gate, Steering};
pub(crate) use think::Thinker;
pub use thread_control::ThreadControl;
