//! The issue delays of timed requests (a paced job's, a timestamped trace's), recorded per
//! host thread and summarised as an `IssueLatenessNs`.

use nvarray_histogram::NsHistogram;

use crate::run_report::IssueLatenessNs;

/// A timed request issued more than this after it could have gone counts as issued late.
pub const ISSUED_LATE_NS: u64 = 1_000;

/// The issue delays of one thread's timed requests, merged into an [`IssueLatenessNs`].
#[derive(Clone, Debug)]
pub struct IssueDelays {
    /// Each delay plus 1 ns (the histogram's least value is 1; on time is 0 late), of all
    /// and of those not machine-late.
    histogram: NsHistogram,
    own: NsHistogram,
    max_ns: u64,
    late: u64,
    /// Requests held more than `ISSUED_LATE_NS` by the command before them on their slot.
    held_by_previous: u64,
}

impl Default for IssueDelays {
    fn default() -> Self {
        IssueDelays {
            histogram: NsHistogram::new(),
            own: NsHistogram::new(),
            max_ns: 0,
            late: 0,
            held_by_previous: 0,
        }
    }
}

impl IssueDelays {
    /// One timed request, issued `delay_ns` after it could have gone; `machine_late`: its
    /// time came while the machine paused the thread; `waited_ns` of the delay the command
    /// before it on its slot held it (a late completion, judged with the completions'
    /// lateness, or that command's late issue, counted as its own delay): left out of the
    /// thread's own.
    pub fn record(&mut self, delay_ns: u64, machine_late: bool, waited_ns: u64) {
        debug_assert!(
            waited_ns <= delay_ns,
            "a wait of {waited_ns} ns inside a delay of {delay_ns} ns"
        );
        self.histogram.record(delay_ns.saturating_add(1));
        if !machine_late {
            self.own
                .record(delay_ns.saturating_sub(waited_ns).saturating_add(1));
        }
        self.max_ns = self.max_ns.max(delay_ns);
        self.late += u64::from(delay_ns > ISSUED_LATE_NS);
        self.held_by_previous += u64::from(!machine_late && waited_ns > ISSUED_LATE_NS);
    }

    pub fn merge(&mut self, other: &IssueDelays) {
        for (mine, theirs) in [
            (&mut self.histogram, &other.histogram),
            (&mut self.own, &other.own),
        ] {
            mine.add(theirs);
        }
        self.max_ns = self.max_ns.max(other.max_ns);
        self.late += other.late;
        self.held_by_previous += other.held_by_previous;
    }

    /// The summary, or `None` when no timed request was issued.
    pub fn summary(&self) -> Option<IssueLatenessNs> {
        if self.histogram.is_empty() {
            return None;
        }
        // `own` and `late` count among the requests `histogram` counts.
        assert!(
            self.own.len() <= self.histogram.len(),
            "{} own delays of {} timed requests",
            self.own.len(),
            self.histogram.len()
        );
        assert!(
            self.late <= self.histogram.len(),
            "{} issued late of {} timed requests",
            self.late,
            self.histogram.len()
        );
        let [p50, p99] = self
            .histogram
            .shifted_quantiles([0.50, 0.99], 0, self.max_ns);
        let [own_p99] = self.own.shifted_quantiles([0.99], 0, self.max_ns);
        Some(IssueLatenessNs {
            requests: self.histogram.len(),
            late: self.late,
            p50,
            p99,
            max: self.max_ns,
            machine_late: self.histogram.len() - self.own.len(),
            held_by_previous: self.held_by_previous,
            own_p99,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request held 2 ms by a late completion, then issued 10 µs after it: the thread's own
    /// delay is the 10 µs; one paused by the machine is left out of the own p99 whole.
    #[test]
    fn a_wait_for_a_late_completion_is_left_out_of_the_threads_own_delay() {
        let mut d = IssueDelays::default();
        for _ in 0..98 {
            d.record(500, false, 0);
        }
        d.record(2_010_000, false, 2_000_000);
        d.record(5_000_000, true, 0);
        let s = d.summary().expect("timed requests");
        assert_eq!((s.requests, s.late, s.machine_late), (100, 2, 1));
        assert_eq!(s.held_by_previous, 1);
        assert_eq!(s.max, 5_000_000);
        // The own p99 (99 requests) is the 10 µs the thread took after the completion, not
        // the 2 ms it waited for it (within the histogram's precision).
        assert!(
            (9_900..=10_100).contains(&s.own_p99),
            "own p99 {} ns",
            s.own_p99
        );
        assert!(
            s.p99 >= 2_000_000,
            "the whole delay stays in the p99: {}",
            s.p99
        );
    }
}
