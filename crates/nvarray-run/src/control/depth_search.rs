//! fio's latency target (io_u.c:1443-1581): the thread starts at depth 1 and tries each depth
//! for a window; a window whose requests meet the target (enough of them: the percentile)
//! doubles the depth until one fails, then the search bisects between the deepest that met
//! it and the shallowest that failed. When a window that met the target leaves the depth
//! unchanged, the thread drains, forgets what it measured and runs one more window at that
//! depth; the job ends when that window meets the target too (unless `latency_run` keeps it
//! searching). With the default percentile, 100, every request over the target steps the
//! depth down at once, and one over it at depth 1 ends the job with an error.

use nvarray_workload::JobSpec;

/// What the thread does after a step of the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DepthStep {
    /// Go on at the (perhaps new) depth.
    Go,
    /// The depth stepped down: drain, then start a new window (`new_window`).
    Drain,
    /// The search settled: drain, forget what was measured, then start the final window.
    FinalRun,
    /// The final window met the target: the job is done.
    Done,
}

/// One thread's depth search.
pub(crate) struct DepthSearch {
    target_ns: u64,
    window_ns: u64,
    percentile: f64,
    keep_searching: bool,
    iodepth: u32,
    /// The depth the thread may use now.
    pub(crate) depth: u32,
    low: u32,
    high: u32,
    stable: u32,
    window_start_ns: u64,
    window_first: u64,
    failed: u64,
    final_run: bool,
}

/// A request missed the target at depth 1 with percentile 100: fio's fatal error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TargetMissedAtDepthOne {
    pub(crate) latency_ns: u64,
    pub(crate) target_ns: u64,
}

impl DepthSearch {
    /// The search of a thread of `job` starting at `start_ns`; `None` without a target.
    pub(crate) fn of(job: &JobSpec, start_ns: u64) -> Option<DepthSearch> {
        let t = &job.latency_target;
        t.is_set().then_some(DepthSearch {
            target_ns: t.target_ns,
            window_ns: t.window_ns,
            percentile: t.percentile,
            keep_searching: t.keep_searching,
            iodepth: job.iodepth,
            depth: 1,
            low: 1,
            high: job.iodepth,
            stable: 0,
            window_start_ns: start_ns,
            window_first: 0,
            failed: 0,
            final_run: false,
        })
    }

    /// A request completed with `latency_ns` (fio's check at each completion).
    pub(crate) fn completed(
        &mut self,
        latency_ns: u64,
    ) -> Result<DepthStep, TargetMissedAtDepthOne> {
        if latency_ns <= self.target_ns {
            return Ok(DepthStep::Go);
        }
        if self.percentile < 100.0 {
            self.failed += 1;
            return Ok(DepthStep::Go);
        }
        if self.depth == 1 {
            return Err(TargetMissedAtDepthOne {
                latency_ns,
                target_ns: self.target_ns,
            });
        }
        self.step_down();
        Ok(DepthStep::Drain)
    }

    /// fio's window check, at `now_ns` with `completed` requests so far (outside the ramp).
    pub(crate) fn check(&mut self, now_ns: u64, completed: u64) -> DepthStep {
        if now_ns.saturating_sub(self.window_start_ns) < self.window_ns {
            return DepthStep::Go;
        }
        assert!(
            completed >= self.window_first,
            "{completed} completed, the window began at {}",
            self.window_first
        );
        let ios = completed - self.window_first;
        assert!(
            self.failed <= ios,
            "{} of the window's {ios} requests missed the target",
            self.failed
        );
        // 0 of 0 is not a success (fio's NaN).
        let met = ios > 0 && 100.0 * (ios - self.failed) as f64 / ios as f64 >= self.percentile;
        if !met {
            if self.depth == 1 {
                // fio gives up only from a completion: the window starts again.
                self.new_window(now_ns, completed);
                return DepthStep::Go;
            }
            self.step_down();
            return DepthStep::Drain;
        }
        let before = self.depth;
        self.low = self.depth;
        if self.depth + 1 == self.high {
            self.stable += 1;
            if self.stable >= 3 {
                self.high += 1;
                self.stable = 0;
            }
        }
        self.depth = if self.high != self.iodepth {
            (self.depth + self.high) / 2
        } else {
            self.depth.saturating_mul(2)
        }
        .min(self.iodepth);
        assert!(
            (1..=self.iodepth).contains(&self.depth),
            "depth {} outside 1..={}",
            self.depth,
            self.iodepth
        );
        self.new_window(now_ns, completed);
        if !self.keep_searching && self.depth == before {
            if self.final_run {
                return DepthStep::Done;
            }
            self.final_run = true;
            return DepthStep::FinalRun;
        }
        DepthStep::Go
    }

    /// A new window from `now_ns`, with `completed` requests so far.
    pub(crate) fn new_window(&mut self, now_ns: u64, completed: u64) {
        self.window_start_ns = now_ns;
        self.window_first = completed;
        self.failed = 0;
    }

    fn step_down(&mut self) {
        // At depth 1 a miss ends the job or starts the window again (`completed`, `check`).
        assert!(self.depth > 1, "stepped down from depth {}", self.depth);
        self.high = self.depth;
        if self.depth == self.low {
            self.low -= 1;
        }
        self.depth = ((self.depth + self.low) / 2).max(1);
        self.stable = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(iodepth: u32, percentile: &str) -> DepthSearch {
        let mut job = JobSpec::default();
        for (k, v) in [
            ("iodepth", iodepth.to_string().as_str()),
            ("latency_target", "100"),
            ("latency_window", "1000"),
            ("latency_percentile", percentile),
        ] {
            job.set(k, v).unwrap();
        }
        DepthSearch::of(&job, 0).unwrap()
    }

    const W: u64 = 1_000_000;

    #[test]
    fn doubles_while_it_meets_the_target_then_settles_at_the_queue_depth() {
        let mut s = search(8, "100");
        let mut depths = vec![s.depth];
        let mut steps = vec![];
        for k in 1..=6 {
            steps.push(s.check(k * W, k * 100));
            depths.push(s.depth);
        }
        assert_eq!(depths, [1, 2, 4, 8, 8, 8, 8]);
        use DepthStep::*;
        assert_eq!(steps, [Go, Go, Go, FinalRun, Done, Done]);
    }

    #[test]
    fn a_miss_steps_down_then_it_bisects() {
        let mut s = search(32, "100");
        for k in 1..=4 {
            s.check(k * W, k * 100);
        }
        assert_eq!(s.depth, 16);
        // A request over the target at 16: halfway back to 8, the last depth that met it.
        assert_eq!(s.completed(100_001), Ok(DepthStep::Drain));
        assert_eq!(s.depth, 12);
        s.new_window(5 * W, 500);
        // 12 meets it: bisect toward 16.
        assert_eq!(s.check(6 * W, 600), DepthStep::Go);
        assert_eq!(s.depth, 14);
        assert_eq!(
            s.completed(100_000),
            Ok(DepthStep::Go),
            "at the target is within it"
        );
    }

    #[test]
    fn a_percentile_counts_misses_per_window() {
        let mut s = search(4, "90");
        for _ in 0..9 {
            assert_eq!(s.completed(500_000), Ok(DepthStep::Go));
        }
        // 91 of 100 met it: 91% >= 90%.
        assert_eq!(s.check(W, 100), DepthStep::Go);
        assert_eq!(s.depth, 2);
        for _ in 0..11 {
            s.completed(500_000).unwrap();
        }
        // 89 of 100: step down.
        assert_eq!(s.check(2 * W, 200), DepthStep::Drain);
        assert_eq!(s.depth, 1);
    }

    #[test]
    fn a_miss_at_depth_one_is_fatal_and_an_empty_window_is_not_a_success() {
        let mut s = search(4, "100");
        assert_eq!(
            s.completed(200_000),
            Err(TargetMissedAtDepthOne {
                latency_ns: 200_000,
                target_ns: 100_000
            })
        );
        let mut s = search(4, "100");
        assert_eq!(s.check(W, 0), DepthStep::Go);
        assert_eq!(s.depth, 1, "no request in the window: no step up");
    }
}
