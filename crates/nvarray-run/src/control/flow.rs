//! fio's flows (flow.c): the jobs of one `flow_id` share a counter of the requests they
//! issued and the sum of their weights. Before each request a job compares its share of the
//! counter with its share of the weights; ahead of its share it does not issue (it waits for
//! its requests and sleeps `flow_sleep`, or tries again at once). So the jobs' request counts
//! keep the ratio of their weights, whatever each one's speed.
//!
//! fio registers every job's weight when the job file is read, so a flow's job behind a
//! `stonewall` stalls the jobs before it forever (docs/research/fio-3.33-semantics.md §6);
//! nvarray registers the threads of each phase, which run side by side.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One flow: its counter (from 1, as fio's) and its threads' weights summed.
struct FlowGroup {
    counter: AtomicU64,
    total_weight: AtomicU64,
}

/// The flows of one phase, by `flow_id`.
#[derive(Default)]
pub(crate) struct FlowGroups(HashMap<u32, Arc<FlowGroup>>);

impl FlowGroups {
    /// Registers a thread of weight `weight` (1..) in flow `id`.
    pub(crate) fn join(&mut self, id: u32, weight: u32) -> FlowMember {
        assert!(weight > 0, "a thread of weight 0 joined flow {id}");
        let group = self
            .0
            .entry(id)
            .or_insert_with(|| {
                Arc::new(FlowGroup {
                    counter: AtomicU64::new(1),
                    total_weight: AtomicU64::new(0),
                })
            })
            .clone();
        group
            .total_weight
            .fetch_add(u64::from(weight), Ordering::Relaxed);
        FlowMember {
            group,
            id,
            weight: u64::from(weight),
            count: 0,
            left: false,
        }
    }
}

/// A thread's place in its flow.
pub(crate) struct FlowMember {
    group: Arc<FlowGroup>,
    /// Its `flow_id`.
    pub(crate) id: u32,
    weight: u64,
    count: u64,
    left: bool,
}

impl FlowMember {
    /// Whether the thread may issue a request now; if so, it is counted (fio's
    /// `flow_threshold_exceeded`, false).
    pub(crate) fn may_issue(&mut self) -> bool {
        let counter = self.group.counter.load(Ordering::Relaxed);
        let total = self.group.total_weight.load(Ordering::Relaxed);
        if self.count as f64 / counter as f64 > self.weight as f64 / total as f64 {
            return false;
        }
        self.group.counter.fetch_add(1, Ordering::Relaxed);
        self.count += 1;
        true
    }

    /// The thread has stopped: its requests and weight leave the flow (fio's
    /// `flow_exit_job`), so the others are not held to a share it no longer takes.
    pub(crate) fn leave(&mut self) {
        if !self.left {
            self.left = true;
            // The counter is 1 plus the requests of the members still in the flow.
            let counter = self.group.counter.fetch_sub(self.count, Ordering::Relaxed);
            assert!(
                counter > self.count,
                "flow {}: a member of {} requests leaves a counter of {counter}",
                self.id,
                self.count
            );
            let total = self
                .group
                .total_weight
                .fetch_sub(self.weight, Ordering::Relaxed);
            assert!(
                total >= self.weight,
                "flow {}: a member of weight {} leaves a total weight of {total}",
                self.id,
                self.weight
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two members issuing whenever allowed, `a` given 3 chances to `b`'s 1 (a faster
    /// thread), keep their weights' ratio.
    #[test]
    fn counts_keep_the_weights_ratio_whatever_the_speeds() {
        let mut flows = FlowGroups::default();
        let mut a = flows.join(7, 1);
        let mut b = flows.join(7, 8);
        let (mut na, mut nb) = (0u64, 0u64);
        for step in 0..90_000 {
            if a.may_issue() {
                na += 1;
            }
            if step % 3 == 0 && b.may_issue() {
                nb += 1;
            }
        }
        let ratio = nb as f64 / na as f64;
        assert!((ratio - 8.0).abs() < 0.01, "{nb} / {na} = {ratio}");
    }

    #[test]
    fn a_member_that_leaves_no_longer_holds_the_others() {
        let mut flows = FlowGroups::default();
        let mut a = flows.join(0, 1);
        let mut b = flows.join(0, 1);
        // fio's counter starts at 1: 0/1 and 1/2 are within a half, 2/3 is not.
        assert!(a.may_issue() && a.may_issue());
        assert!(!a.may_issue(), "b's turn");
        b.leave();
        assert!(a.may_issue(), "alone in the flow");
        // Another flow is separate.
        let mut c = flows.join(1, 5);
        assert!(c.may_issue() && c.may_issue());
    }
}
