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
}

impl Default for IssueDelays {
    fn default() -> Self {
        IssueDelays {
            histogram: NsHistogram::new(),
            own: NsHistogram::new(),
            max_ns: 0,
            late: 0,
        }
    }
}

impl IssueDelays {
    /// One timed request, issued `delay_ns` after it could have gone; `machine_late`: its
    /// time came while the machine paused the thread.
    pub fn record(&mut self, delay_ns: u64, machine_late: bool) {
        self.histogram.record(delay_ns.saturating_add(1));
        if !machine_late {
            self.own.record(delay_ns.saturating_add(1));
        }
        self.max_ns = self.max_ns.max(delay_ns);
        self.late += u64::from(delay_ns > ISSUED_LATE_NS);
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
    }

    /// The summary, or `None` when no timed request was issued.
    pub fn summary(&self) -> Option<IssueLatenessNs> {
        if self.histogram.is_empty() {
            return None;
        }
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
            own_p99,
        })
    }
}
