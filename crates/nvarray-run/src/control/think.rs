//! fio's think time policy (backend.c:855-935): after each step of its loop the thread
//! checks whether `thinktime_blocks` requests (completed, or issued) have gone by since its
//! last think, or `thinktime_iotime` has passed; if so it waits for all of its requests, then
//! thinks (`thinktime`, of which `thinktime_spin` busy).
//!
//! As in fio, the count and the time of a think are taken when it is decided, before the
//! thread drains: the requests that complete while it drains count toward the next think
//! (so with a deep queue and `thinktime_blocks=1`, every think after the first burst follows
//! a single request, as fio's do).

use nvarray_workload::JobSpec;

/// One thread's think time policy.
pub(crate) struct Thinker {
    /// The whole pause, and the part of it the thread's CPU is busy.
    pub(crate) think_ns: u64,
    pub(crate) spin_ns: u64,
    blocks: u64,
    /// `thinktime_blocks` was given (without it, `thinktime_iotime` alone decides).
    blocks_given: bool,
    count_issued: bool,
    iotime_ns: u64,
    last_blocks: u64,
    last_think_ns: u64,
}

impl Thinker {
    /// The policy of a thread of `job` starting at `start_ns`; `None` without a think time.
    pub(crate) fn of(job: &JobSpec, start_ns: u64) -> Option<Thinker> {
        let thinker = (job.thinktime_ns > 0).then(|| Thinker {
            think_ns: job.thinktime_ns,
            spin_ns: job.think_spin_ns(),
            blocks: job.think.blocks_or_default(),
            blocks_given: job.think.blocks.is_some(),
            count_issued: job.think.count_issued,
            iotime_ns: job.think.iotime_ns,
            last_blocks: 0,
            last_think_ns: start_ns,
        })?;
        Some(thinker)
    }

    /// The thread starts at `start_ns` (`thinktime_iotime` counts from then).
    pub(crate) fn start_at(&mut self, start_ns: u64) {
        self.last_think_ns = start_ns;
    }

    /// Whether the thread stalls now, at `now_ns`, having issued `issued` and completed
    /// `completed` requests (fio's `handle_thinktime`). A stall is recorded at once.
    pub(crate) fn stall_due(&mut self, now_ns: u64, issued: u64, completed: u64) -> bool {
        let mut stall = false;
        if self.iotime_ns > 0 {
            if now_ns.saturating_sub(self.last_think_ns) >= self.iotime_ns + self.think_ns {
                stall = true;
            } else if !self.blocks_given {
                return false;
            }
        }
        let b = if self.count_issued { issued } else { completed };
        debug_assert!(b >= self.last_blocks, "request count went back");
        if b >= self.last_blocks + self.blocks {
            stall = true;
        }
        if stall {
            self.last_blocks = b;
            if self.iotime_ns > 0 {
                self.last_think_ns = now_ns;
            }
        }
        stall
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thinker(pairs: &[(&str, &str)]) -> Thinker {
        let mut job = JobSpec::default();
        job.set("thinktime", "100").unwrap();
        for (k, v) in pairs {
            job.set(k, v).unwrap();
        }
        Thinker::of(&job, 0).unwrap()
    }

    #[test]
    fn no_think_time_no_policy() {
        assert!(Thinker::of(&JobSpec::default(), 0).is_none());
    }

    #[test]
    fn every_n_completions_by_default() {
        let mut t = thinker(&[("thinktime_blocks", "4")]);
        assert!(!t.stall_due(0, 8, 3));
        assert!(t.stall_due(0, 8, 4));
        // Completions while draining count toward the next think.
        assert!(!t.stall_due(0, 9, 7));
        assert!(t.stall_due(0, 9, 8));
    }

    #[test]
    fn issue_type_counts_issued_requests() {
        let mut t = thinker(&[
            ("thinktime_blocks", "2"),
            ("thinktime_blocks_type", "issue"),
        ]);
        assert!(!t.stall_due(0, 1, 0));
        assert!(t.stall_due(0, 2, 0));
    }

    #[test]
    fn iotime_alone_ignores_the_default_count() {
        // 1 s of I/O, then a 100 µs think: due once 1 s + 100 µs has passed since the last.
        let mut t = thinker(&[("thinktime_iotime", "1")]);
        assert!(!t.stall_due(500_000_000, 1000, 1000));
        assert!(t.stall_due(1_000_100_000, 2000, 2000));
        assert!(!t.stall_due(1_500_000_000, 3000, 3000));
        assert!(t.stall_due(2_000_200_000, 4000, 4000));
        // With a count given too, whichever comes first.
        let mut t = thinker(&[("thinktime_iotime", "1"), ("thinktime_blocks", "10")]);
        assert!(t.stall_due(1_000, 10, 10));
    }
}
