//! The machine's own jitter, measured in the run by the threads that spin for the device.
//!
//! A spinning thread on a shared machine loses the CPU now and then: timer ticks, other
//! interrupts, the scheduler, the hypervisor. A completion whose deadline falls in such a
//! stall is posted late by what is left of the stall, and no emulator code can prevent it.
//! So the emulator measures the machine the way `hwlatdetect` and `cyclictest` do, with no
//! thread of its own (on a 2-core machine a third spinning thread would cause the stalls it
//! measures): every pass of the device that finds nothing to do is a spin loop's iteration,
//! and the time between two consecutive idle readings of the clock is loop overhead plus
//! whatever the machine took.
//!
//! The statistic is the one a deadline sees. Instants are sampled every
//! `JITTER_SAMPLE_PERIOD_NS` of idle spinning; each instant's jitter is the time from it to
//! the thread's next clock reading, i.e. how late the spinning thread would notice a deadline
//! set at that instant. On a quiet core it is spread over the loop's own period (tens of
//! nanoseconds); a 40 µs stall gives 40 instants late by 40, 39, ..., 1 µs. So its p99 and
//! p99.99 compare directly with the lateness and latency tails of the same run: a tail the
//! machine has too is the machine's.

use nvarray_histogram::NsHistogram;

/// The spacing of the sampled instants. Finer costs more recording in idle passes; coarser
/// takes longer to see the rare stalls. At 1 µs a second of idle spinning gives a million
/// samples, enough for a p99.99 from the first 10 ms.
pub const JITTER_SAMPLE_PERIOD_NS: u64 = 1_000;

/// Instants recorded one by one per gap at most: a gap longer than this many periods (a
/// preemption of milliseconds) is recorded in this many steps, each standing for its share of
/// the instants, so one long stall costs a bounded time to record. 4096 steps put every
/// recorded value within 0.025 % of the gap of the exact one.
const STEPS_PER_GAP_MAX: u64 = 4096;

/// Jitter percentiles over the instants sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct JitterReport {
    /// Instants sampled (one per `JITTER_SAMPLE_PERIOD_NS` of idle spinning).
    pub samples: u64,
    /// Idle spinning observed, in nanoseconds: the gaps the samples came from.
    pub observed_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p99_99_ns: u64,
    /// The longest gap seen between two idle clock readings.
    pub max_ns: u64,
}

/// Who ran a pass: passes chain into a gap only when the same thread ran both.
pub type Runner = usize;

/// The calling thread's `Runner`: the address of a thread-local, unique among live threads
/// and free to read.
pub fn this_runner() -> Runner {
    thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|m| m as *const u8 as usize)
}

#[derive(Clone, Debug)]
pub struct JitterProbe {
    /// Each sampled instant's jitter plus 1 ns (the histogram's least value is 1).
    histogram: NsHistogram,
    max_ns: u64,
    observed_ns: u64,
    /// The clock reading of the last pass that did nothing after it, and who ran it.
    last_idle: Option<(u64, Runner)>,
}

impl Default for JitterProbe {
    fn default() -> Self {
        Self::new()
    }
}

impl JitterProbe {
    pub fn new() -> Self {
        JitterProbe {
            histogram: NsHistogram::new(),
            max_ns: 0,
            observed_ns: 0,
            last_idle: None,
        }
    }

    /// A pass by `runner` read the clock at `now_ns`, having done nothing before the reading
    /// (took no command, posted nothing). If the same runner's previous pass did nothing after
    /// its reading and `chained` says nothing else ran in between (no sleep, no lock released),
    /// the time between the two readings was pure spinning: it is sampled.
    #[inline]
    pub fn idle_reading(&mut self, now_ns: u64, runner: Runner, chained: bool) {
        if let Some((prev_ns, prev_runner)) = self.last_idle.take() {
            if chained && prev_runner == runner && now_ns > prev_ns {
                self.gap(prev_ns, now_ns);
            }
        }
        self.last_idle = Some((now_ns, runner));
    }

    /// The pass that made the last reading did something after it (advanced the model,
    /// posted, submitted): the time up to the next reading is work, not jitter.
    #[inline]
    pub fn worked(&mut self) {
        self.last_idle = None;
    }

    /// Samples the instants `k · JITTER_SAMPLE_PERIOD_NS` in (`from_ns`, `to_ns`]: each is
    /// late by `to_ns` minus itself.
    fn gap(&mut self, from_ns: u64, to_ns: u64) {
        let gap_ns = to_ns - from_ns;
        self.observed_ns += gap_ns;
        self.max_ns = self.max_ns.max(gap_ns);
        let first = from_ns / JITTER_SAMPLE_PERIOD_NS + 1;
        let last = to_ns / JITTER_SAMPLE_PERIOD_NS;
        if first > last {
            return; // no sampled instant in this gap
        }
        let instants = last - first + 1;
        if instants == 1 {
            self.histogram
                .record(to_ns - last * JITTER_SAMPLE_PERIOD_NS + 1);
            return;
        }
        // Many instants: `steps` equal shares, each recorded at its middle instant.
        let steps = instants.min(STEPS_PER_GAP_MAX);
        for s in 0..steps {
            let (lo, hi) = (
                first + instants * s / steps,
                first + instants * (s + 1) / steps,
            );
            let middle = lo + (hi - lo) / 2;
            let late_ns = to_ns - middle * JITTER_SAMPLE_PERIOD_NS;
            self.histogram.record_n(late_ns + 1, hi - lo);
        }
    }

    /// Adds the instants `other` sampled to these (each queue pair's passes sample their own;
    /// a report joins them).
    pub fn merge(&mut self, other: &JitterProbe) {
        self.histogram.add(&other.histogram);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.observed_ns += other.observed_ns;
    }

    /// The percentiles so far; `None` before any instant was sampled (the threads never spun
    /// idle: every pass had work).
    pub fn report(&self) -> Option<JitterReport> {
        if self.histogram.is_empty() {
            return None;
        }
        let [p50, p99, p9999] =
            self.histogram
                .shifted_quantiles([0.50, 0.99, 0.9999], 0, self.max_ns);
        Some(JitterReport {
            samples: self.histogram.len(),
            observed_ns: self.observed_ns,
            p50_ns: p50,
            p99_ns: p99,
            p99_99_ns: p9999,
            max_ns: self.max_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = JITTER_SAMPLE_PERIOD_NS;

    /// Readings every `step` ns from `start`, all idle and chained, by one runner.
    fn spin(probe: &mut JitterProbe, start: u64, step: u64, n: u64) -> u64 {
        for i in 0..n {
            probe.idle_reading(start + i * step, 1, true);
        }
        start + (n - 1) * step
    }

    #[test]
    fn a_quiet_spin_is_late_by_less_than_its_loop() {
        let mut probe = JitterProbe::new();
        spin(&mut probe, 0, 40, 100_000);
        let r = probe.report().unwrap();
        // 4 ms of spinning: one instant per µs.
        assert_eq!(r.samples, 3_999);
        assert_eq!(r.observed_ns, 99_999 * 40);
        assert_eq!(r.max_ns, 40);
        assert!(r.p99_99_ns < 40 && r.p50_ns < 40, "{r:?}");
    }

    #[test]
    fn a_stall_shows_as_the_instants_it_swallowed() {
        let mut probe = JitterProbe::new();
        // 1 s of 50 ns loops with one 100 µs stall in it: 0.01 % of the time.
        let end = spin(&mut probe, 0, 50, 10_000_000);
        probe.idle_reading(end + 100_000, 1, true);
        let r = probe.report().unwrap();
        assert_eq!(r.max_ns, 100_000);
        // 100 of the ~500,100 instants fall in the stall, late by 1..100 µs: above p99.99
        // (the top 50 instants) they are late by 50 µs or more; p99 is the loop's.
        assert!(r.p99_ns < 50, "{r:?}");
        assert!((49_000..=51_000).contains(&r.p99_99_ns), "{r:?}");
    }

    #[test]
    fn a_long_gap_is_recorded_in_bounded_steps_with_every_instant_counted() {
        let mut probe = JitterProbe::new();
        probe.idle_reading(0, 1, true);
        probe.idle_reading(1_000_000_000, 1, true); // a second with the CPU taken away
        let r = probe.report().unwrap();
        assert_eq!(r.samples, 1_000_000, "one instant per µs of the gap");
        assert_eq!(r.max_ns, 1_000_000_000);
        // Half the instants are late by more than half the gap.
        assert!((499_000_000..=501_000_000).contains(&r.p50_ns), "{r:?}");
    }

    #[test]
    fn work_other_runners_and_breaks_end_a_chain() {
        let mut probe = JitterProbe::new();
        probe.idle_reading(0, 1, true);
        probe.worked(); // the pass posted a completion after its reading
        probe.idle_reading(10 * P, 1, true);
        probe.idle_reading(20 * P, 2, true); // another thread's pass
        probe.idle_reading(30 * P, 2, false); // after a sleep or a lock hand-over
        assert!(probe.report().is_none(), "no gap was pure spinning");
        probe.idle_reading(31 * P + 500, 2, true);
        let r = probe.report().unwrap();
        assert_eq!((r.samples, r.p50_ns, r.max_ns), (1, 500, 1_500), "{r:?}");
    }

    #[test]
    fn no_idle_pass_means_no_report() {
        let mut probe = JitterProbe::new();
        for i in 0..1000 {
            probe.idle_reading(i * 100, 1, true);
            probe.worked();
        }
        assert_eq!(probe.report(), None);
    }
}
