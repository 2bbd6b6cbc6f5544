//! How late the emulator posts completions, and whether a run was faithful.
//!
//! For every command: the time the completion was actually posted minus the model's deadline.
//! Never negative (posting early is a bug the engine must not have). A run is faithful while
//! the p99 lateness stays within max(1 µs, 5 % of the mean modelled latency) (issue 3): beyond
//! that, the host is not keeping up and what software feels is not the modelled device.

use hdrhistogram::Histogram;

/// The absolute part of the faithfulness bound.
pub const LATENESS_NS_TOLERATED: u64 = 1_000;
/// The relative part, in percent of the mean modelled latency.
pub const LATENESS_PERCENT_TOLERATED: u64 = 5;

/// Lateness percentiles and the verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct LatenessReport {
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// The p99 lateness a faithful run stays within (`Lateness::bound`): anything else the
    /// emulator's timing depends on (a timed request's issue) is held to the same bound.
    pub bound_ns: u64,
    pub faithful: bool,
    /// Why the run was not faithful (None when it was).
    pub unfaithful_reason: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Lateness {
    /// Lateness plus 1 ns (the histogram's least value is 1, and on time is 0 late).
    histogram: Histogram<u64>,
    /// The exact greatest lateness (the histogram's is the top of its bucket).
    max_ns: u64,
    /// Every lateness summed, for the exact mean.
    late_ns_sum: u128,
    modelled_ns_sum: u128,
    early: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Self::new()
    }
}

/// A histogram of nanoseconds, 1 ns to one hour at 3 significant digits, for values recorded
/// plus 1 (its least value is 1, and 0 ns is a value here).
pub(crate) fn ns_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

impl Lateness {
    pub fn new() -> Self {
        Lateness {
            histogram: ns_histogram(),
            max_ns: 0,
            late_ns_sum: 0,
            modelled_ns_sum: 0,
            early: 0,
        }
    }

    /// Records one completion: the model's deadline, when it was posted, and the modelled
    /// latency of the command (deadline minus submission).
    #[inline]
    pub fn record(&mut self, deadline_ns: u64, posted_ns: u64, modelled_ns: u64) {
        debug_assert!(
            posted_ns >= deadline_ns,
            "completion posted {} ns early",
            deadline_ns - posted_ns
        );
        if posted_ns < deadline_ns {
            self.early += 1;
        }
        let late_ns = posted_ns.saturating_sub(deadline_ns);
        self.histogram.saturating_record(late_ns + 1);
        self.max_ns = self.max_ns.max(late_ns);
        self.late_ns_sum += u128::from(late_ns);
        self.modelled_ns_sum += u128::from(modelled_ns);
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Adds `other`'s completions to these (each queue pair records its own; a report joins
    /// them).
    pub fn merge(&mut self, other: &Lateness) {
        self.histogram
            .add(&other.histogram)
            .expect("lateness histograms share their bounds");
        self.max_ns = self.max_ns.max(other.max_ns);
        self.late_ns_sum += other.late_ns_sum;
        self.modelled_ns_sum += other.modelled_ns_sum;
        self.early += other.early;
    }

    /// The mean modelled latency and the p99 lateness a faithful run stays within:
    /// `max(LATENESS_NS_TOLERATED, LATENESS_PERCENT_TOLERATED % of that mean)`.
    fn bound(&self) -> (u64, u64) {
        let modelled_mean = (self.modelled_ns_sum / u128::from(self.count().max(1))) as u64;
        let bound = LATENESS_NS_TOLERATED.max(modelled_mean * LATENESS_PERCENT_TOLERATED / 100);
        (modelled_mean, bound)
    }

    /// What the machine's own jitter says of a late run: when a thread that only spins on this
    /// machine was itself late past the bound at p99 (`machine_p99_ns`, `jitter`), the
    /// lateness tail is the machine's as much as the emulator's, and the verdict says so
    /// (`report`'s hint). `None` when the machine kept within the bound.
    pub fn machine_hint(&self, machine_p99_ns: u64) -> Option<String> {
        let (_, bound) = self.bound();
        (machine_p99_ns > bound).then(|| {
            format!(
                "this machine's own jitter p99 in the same run, {machine_p99_ns} ns, exceeds that bound too: a thread that only spins here is that late without the emulator's work (see the machine jitter line; the README's section on tail latency says how to set CPUs aside)"
            )
        })
    }

    /// The verdict. `hint` says what on this host is the likely cause when the run is late
    /// (e.g. measured memcpy bandwidth below the modelled link).
    pub fn report(&self, hint: Option<&str>) -> LatenessReport {
        if self.histogram.is_empty() {
            return LatenessReport {
                mean_ns: 0.0,
                p50_ns: 0,
                p99_ns: 0,
                max_ns: 0,
                bound_ns: LATENESS_NS_TOLERATED,
                faithful: true,
                unfaithful_reason: None,
            };
        }
        // Inside what was measured: a histogram answers with the top of a value's bucket.
        let at = |q: f64| (self.histogram.value_at_quantile(q) - 1).min(self.max_ns);
        let (p50, p99, max) = (at(0.50), at(0.99), self.max_ns);
        let (modelled_mean, bound) = self.bound();
        let mut reasons = Vec::new();
        if self.early > 0 {
            reasons.push(format!(
                "{} completions posted before their deadline (engine bug)",
                self.early
            ));
        }
        if p99 > bound {
            let mut r = format!(
                "p99 lateness {p99} ns exceeds max({LATENESS_NS_TOLERATED} ns, {LATENESS_PERCENT_TOLERATED} % of the mean modelled latency {modelled_mean} ns) = {bound} ns"
            );
            if let Some(h) = hint {
                r.push_str(": ");
                r.push_str(h);
            }
            reasons.push(r);
        }
        LatenessReport {
            mean_ns: self.late_ns_sum as f64 / self.count() as f64,
            p50_ns: p50,
            p99_ns: p99,
            max_ns: max,
            bound_ns: bound,
            faithful: reasons.is_empty(),
            unfaithful_reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(samples: &[(u64, u64)], modelled_ns: u64, faithful: bool) {
        let mut l = Lateness::new();
        for &(deadline, posted) in samples {
            l.record(deadline, posted, modelled_ns);
        }
        let r = l.report(Some("host memcpy too slow"));
        assert_eq!(
            r.faithful, faithful,
            "{samples:?} modelled {modelled_ns}: {r:?}"
        );
        assert_eq!(r.unfaithful_reason.is_some(), !faithful);
        if !faithful {
            assert!(r
                .unfaithful_reason
                .unwrap()
                .contains("host memcpy too slow"));
        }
    }

    #[test]
    fn the_bound_is_1_us_or_5_percent_of_the_modelled_latency() {
        let on_time: Vec<(u64, u64)> = (0..1000).map(|i| (i * 10, i * 10 + 200)).collect();
        check(&on_time, 8_000, true);
        let late_2us: Vec<(u64, u64)> = (0..1000).map(|i| (i * 10, i * 10 + 2_000)).collect();
        check(&late_2us, 8_000, false); // 2 µs > max(1 µs, 400 ns)
        check(&late_2us, 100_000, true); // 2 µs < 5 % of 100 µs
                                         // A 1 % tail of very late completions does not move p99 past the bound.
        let mut tail = on_time.clone();
        for s in tail.iter_mut().take(9) {
            s.1 += 1_000_000;
        }
        check(&tail, 8_000, true);
    }

    #[test]
    fn the_machines_jitter_is_named_only_when_it_exceeds_the_bound_too() {
        let mut l = Lateness::new();
        for i in 0..1000u64 {
            l.record(i * 10, i * 10 + 3_000, 8_000);
        }
        // The bound is max(1 µs, 5 % of 8 µs) = 1 µs.
        assert_eq!(
            l.machine_hint(1_000),
            None,
            "at the bound: the machine kept within it"
        );
        let hint = l.machine_hint(1_001).expect("past the bound");
        assert!(
            hint.contains("jitter p99 in the same run, 1001 ns"),
            "{hint}"
        );
        let r = l.report(Some(&hint));
        assert!(!r.faithful);
        let why = r.unfaithful_reason.unwrap();
        assert!(why.starts_with("p99 lateness 3000 ns exceeds"), "{why}");
        assert!(why.ends_with(&hint), "{why}");
        // Nothing recorded yet: the bound is the 1 µs floor, not a division by zero.
        assert_eq!(Lateness::new().machine_hint(999), None);
        assert!(Lateness::new().machine_hint(1_001).is_some());
    }

    #[test]
    fn percentiles_are_reported() {
        let mut l = Lateness::new();
        for i in 0..100u64 {
            l.record(1_000, 1_000 + i * 10, 5_000);
        }
        let r = l.report(None);
        assert!((490..=510).contains(&r.p50_ns), "{r:?}");
        assert_eq!(r.max_ns, 990, "the greatest lateness, exactly");
        assert_eq!(r.mean_ns, 495.0, "the mean of 0, 10, ..., 990");
        // On time is 0 late, not the histogram's least value of 1.
        let mut on_time = Lateness::new();
        for i in 0..100u64 {
            on_time.record(i, i, 5_000);
        }
        let r = on_time.report(None);
        assert_eq!((r.p50_ns, r.p99_ns, r.max_ns), (0, 0, 0), "{r:?}");
    }
}
