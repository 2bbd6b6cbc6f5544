//! How late the emulator posts completions, and whether a run was faithful.
//!
//! For every command: the time the completion was actually posted minus the model's deadline.
//! Never negative (posting early is a bug the engine must not have). A run is faithful while
//! the p99 lateness stays within max(1 µs, 5 % of the mean modelled latency) (issue 3): beyond
//! that, what software feels is not the modelled device. Whose lateness it is comes next
//! (issue 37): a completion whose deadline fell while the machine paused the thread serving
//! it is machine-late (`pauses`); the others' lateness is the emulator's own. A run late only
//! by the machine's pauses is `machine-limited`; one whose own lateness is past the bound is
//! `NOT FAITHFUL`.

use nvarray_histogram::NsHistogram;
use nvarray_model::Verdict;

use crate::pauses::Held;

/// The absolute part of the faithfulness bound.
pub const LATENESS_NS_TOLERATED: u64 = 1_000;
/// The relative part, in percent of the mean modelled latency.
pub const LATENESS_PERCENT_TOLERATED: u64 = 5;

/// The lateness tolerated of a completion whose modelled latency is `modelled_ns`:
/// `max(LATENESS_NS_TOLERATED, LATENESS_PERCENT_TOLERATED % of it)`.
#[inline]
pub fn tolerated_ns(modelled_ns: u64) -> u64 {
    LATENESS_NS_TOLERATED.max(modelled_ns * LATENESS_PERCENT_TOLERATED / 100)
}

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
    /// Completions recorded, those whose deadline fell inside a pause of the machine, and
    /// those whose deadline fell after a device thread should have woken and before the
    /// kernel woke it (`device_sleep`: wake-late).
    pub completions: u64,
    pub machine_late: u64,
    pub wake_late: u64,
    /// Completions whose deadline fell while an inline host thread ran its own code: their
    /// lateness counts from its next poll, the first time it could have seen them from any
    /// device (`Lateness::record`).
    pub host_code: u64,
    /// The emulator's own lateness: the mean and percentiles over the completions not
    /// machine-late.
    pub own_mean_ns: f64,
    pub own_p50_ns: u64,
    pub own_p99_ns: u64,
    pub own_max_ns: u64,
    pub verdict: Verdict,
    /// Why the run was not faithful (None when it was).
    pub unfaithful_reason: Option<String>,
}

impl LatenessReport {
    pub fn faithful(&self) -> bool {
        self.verdict == Verdict::Faithful
    }

    /// The report of a run without completions: faithful, every figure 0.
    fn empty() -> Self {
        LatenessReport {
            mean_ns: 0.0,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
            bound_ns: LATENESS_NS_TOLERATED,
            completions: 0,
            machine_late: 0,
            wake_late: 0,
            host_code: 0,
            own_mean_ns: 0.0,
            own_p50_ns: 0,
            own_p99_ns: 0,
            own_max_ns: 0,
            verdict: Verdict::Faithful,
            unfaithful_reason: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Lateness {
    /// The emulator's own completions (not machine-late), the machine-late ones and the
    /// wake-late ones, apart: one record per completion on the hot path, the whole run's
    /// figures joined when read.
    own: Part,
    machine: Part,
    wake: Part,
    modelled_ns_sum: u128,
    early: u64,
    /// Completions whose deadline fell while an inline host thread ran its own code, late
    /// only from its next poll (`pauses::PauseWatch::host_code`).
    host_code: u64,
}

/// The lateness of some of the completions.
#[derive(Clone, Debug)]
struct Part {
    /// Lateness plus 1 ns (the histogram's least value is 1, and on time is 0 late).
    histogram: NsHistogram,
    /// The exact greatest lateness (the histogram's is the top of its bucket).
    max_ns: u64,
    /// Every lateness summed, for the exact mean.
    late_ns_sum: u128,
}

impl Part {
    fn new() -> Self {
        Part {
            histogram: NsHistogram::new(),
            max_ns: 0,
            late_ns_sum: 0,
        }
    }

    #[inline]
    fn record(&mut self, late_ns: u64) {
        self.histogram.record(late_ns + 1);
        self.max_ns = self.max_ns.max(late_ns);
        self.late_ns_sum += u128::from(late_ns);
    }

    fn merge(&mut self, other: &Part) {
        self.histogram.add(&other.histogram);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.late_ns_sum += other.late_ns_sum;
    }

    fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The lateness at quantiles `qs`, inside what was measured; 0 when empty.
    fn at<const N: usize>(&self, qs: [f64; N]) -> [u64; N] {
        self.histogram.shifted_quantiles(qs, 0, self.max_ns)
    }

    fn mean_ns(&self) -> f64 {
        if self.histogram.is_empty() {
            0.0
        } else {
            self.late_ns_sum as f64 / self.count() as f64
        }
    }
}

impl Default for Lateness {
    fn default() -> Self {
        Self::new()
    }
}

impl Lateness {
    pub fn new() -> Self {
        Lateness {
            own: Part::new(),
            machine: Part::new(),
            wake: Part::new(),
            modelled_ns_sum: 0,
            early: 0,
            host_code: 0,
        }
    }

    /// Records one completion: the model's deadline, from when the host could have seen it
    /// (`seen_from_ns`: the deadline, or the next poll of an inline host that was running its
    /// own code then, `pauses::PauseWatch::seen_from`), when it was posted, the modelled
    /// latency of the command (deadline minus submission), and whether its deadline fell
    /// inside a pause of the machine or a late wake-up (`pauses::PauseWatch::held_at`). Its
    /// lateness is from `seen_from_ns` to the post.
    #[inline]
    pub fn record(
        &mut self,
        deadline_ns: u64,
        seen_from_ns: u64,
        posted_ns: u64,
        modelled_ns: u64,
        held: Option<Held>,
    ) {
        debug_assert!(
            posted_ns >= deadline_ns,
            "completion posted {} ns early",
            deadline_ns - posted_ns
        );
        debug_assert!(seen_from_ns >= deadline_ns, "seen before it was due");
        if posted_ns < deadline_ns {
            self.early += 1;
        }
        self.host_code += u64::from(seen_from_ns > deadline_ns);
        let late_ns = posted_ns.saturating_sub(seen_from_ns.max(deadline_ns));
        match held {
            None => self.own.record(late_ns),
            Some(Held::Paused) => self.machine.record(late_ns),
            Some(Held::WokeLate) => self.wake.record(late_ns),
        }
        self.modelled_ns_sum += u128::from(modelled_ns);
    }

    pub fn count(&self) -> u64 {
        self.own.count() + self.machine.count() + self.wake.count()
    }

    /// Adds `other`'s completions to these (each queue pair records its own; a report joins
    /// them).
    pub fn merge(&mut self, other: &Lateness) {
        self.own.merge(&other.own);
        self.machine.merge(&other.machine);
        self.wake.merge(&other.wake);
        self.modelled_ns_sum += other.modelled_ns_sum;
        self.early += other.early;
        self.host_code += other.host_code;
    }

    /// The mean modelled latency and the p99 lateness a faithful run stays within:
    /// `tolerated_ns` of that mean.
    fn bound(&self) -> (u64, u64) {
        let modelled_mean = (self.modelled_ns_sum / u128::from(self.count().max(1))) as u64;
        (modelled_mean, tolerated_ns(modelled_mean))
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

    /// The verdict. `hint` says what on this host is the likely cause when the emulator's
    /// own lateness is past the bound (e.g. measured memcpy bandwidth below the modelled
    /// link).
    pub fn report(&self, hint: Option<&str>) -> LatenessReport {
        let completions = self.count();
        if completions == 0 {
            return LatenessReport::empty();
        }
        let all = self.joined();
        assert_eq!(
            all.count(),
            completions,
            "the joined lateness holds another number of completions than its parts"
        );
        let [p50, p99] = all.at([0.50, 0.99]);
        let [own_p50, own_p99] = self.own.at([0.50, 0.99]);
        let (_, bound) = self.bound();
        let (verdict, reasons) = self.verdict(p99, own_p99, hint);
        LatenessReport {
            mean_ns: all.mean_ns(),
            p50_ns: p50,
            p99_ns: p99,
            max_ns: all.max_ns,
            bound_ns: bound,
            completions,
            machine_late: self.machine.count(),
            wake_late: self.wake.count(),
            host_code: self.host_code,
            own_mean_ns: self.own.mean_ns(),
            own_p50_ns: own_p50,
            own_p99_ns: own_p99,
            own_max_ns: self.own.max_ns,
            verdict,
            unfaithful_reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        }
    }

    /// Every completion's lateness in one part: the emulator's own, the machine-late and the
    /// wake-late joined.
    fn joined(&self) -> Part {
        let mut all = self.own.clone();
        all.merge(&self.machine);
        all.merge(&self.wake);
        all
    }

    /// The verdict of a run whose p99 lateness is `p99` (`own_p99`: the emulator's own), and
    /// the reasons it was not faithful (empty when it was).
    fn verdict(&self, p99: u64, own_p99: u64, hint: Option<&str>) -> (Verdict, Vec<String>) {
        let (modelled_mean, bound) = self.bound();
        let mut verdict = Verdict::Faithful;
        let mut reasons = Vec::new();
        if self.early > 0 {
            verdict = Verdict::NotFaithful;
            reasons.push(format!(
                "{} completions posted before their deadline (engine bug)",
                self.early
            ));
        }
        if p99 > bound {
            let late = format!(
                "p99 lateness {p99} ns exceeds max({LATENESS_NS_TOLERATED} ns, {LATENESS_PERCENT_TOLERATED} % of the mean modelled latency {modelled_mean} ns) = {bound} ns"
            );
            let paused = self.paused_text();
            if own_p99 <= bound {
                verdict = verdict.worst(Verdict::MachineLimited);
                reasons.push(format!(
                    "{late} only by the machine: {paused}, and without them the emulator's own p99 is {own_p99} ns; the figures hold those pauses (for the model's own timing, run on CPUs set aside: --cpus, and the README's section on tail latency)"
                ));
            } else {
                verdict = Verdict::NotFaithful;
                let mut r = format!(
                    "{late}, and the emulator's own p99, {own_p99} ns, is past it too ({paused}; the rest were late by the emulator's own work)"
                );
                if let Some(h) = hint {
                    r.push_str(": ");
                    r.push_str(h);
                }
                reasons.push(r);
            }
        }
        (verdict, reasons)
    }

    /// How many completions fell due while the machine paused the thread serving them, and
    /// how many were wake-late, for the reasons of a late run.
    fn paused_text(&self) -> String {
        let completions = self.count();
        let machine_late = self.machine.count();
        let wake_late = self.wake.count();
        let percent = |n: u64| n as f64 * 100.0 / completions as f64;
        let mut paused = format!(
            "{machine_late} of {completions} completions ({:.2} %) fell due while the machine paused the thread serving them",
            percent(machine_late)
        );
        if wake_late > 0 {
            paused.push_str(&format!(
                " and {wake_late} ({:.2} %) after a device thread should have woken and before the kernel woke it (wake-late)",
                percent(wake_late)
            ));
        }
        paused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(samples: &[(u64, u64)], modelled_ns: u64, faithful: bool) {
        let mut l = Lateness::new();
        for &(deadline, posted) in samples {
            l.record(deadline, deadline, posted, modelled_ns, None);
        }
        let r = l.report(Some("host memcpy too slow"));
        assert_eq!(
            r.faithful(),
            faithful,
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
            l.record(i * 10, i * 10, i * 10 + 3_000, 8_000, None);
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
        assert_eq!(r.verdict, Verdict::NotFaithful);
        let why = r.unfaithful_reason.unwrap();
        assert!(why.starts_with("p99 lateness 3000 ns exceeds"), "{why}");
        assert!(why.contains("own p99, 3000 ns, is past it too"), "{why}");
        assert!(why.ends_with(&hint), "{why}");
        // Nothing recorded yet: the bound is the 1 µs floor, not a division by zero.
        assert_eq!(Lateness::new().machine_hint(999), None);
        assert!(Lateness::new().machine_hint(1_001).is_some());
    }

    #[test]
    fn percentiles_are_reported() {
        let mut l = Lateness::new();
        for i in 0..100u64 {
            l.record(1_000, 1_000, 1_000 + i * 10, 5_000, None);
        }
        let r = l.report(None);
        assert!((490..=510).contains(&r.p50_ns), "{r:?}");
        assert_eq!(r.max_ns, 990, "the greatest lateness, exactly");
        assert_eq!(r.mean_ns, 495.0, "the mean of 0, 10, ..., 990");
        // On time is 0 late, not the histogram's least value of 1.
        let mut on_time = Lateness::new();
        for i in 0..100u64 {
            on_time.record(i, i, i, 5_000, None);
        }
        let r = on_time.report(None);
        assert_eq!((r.p50_ns, r.p99_ns, r.max_ns), (0, 0, 0), "{r:?}");
    }

    /// A completion due while an inline host ran its own code is late only from the host's
    /// next poll: 200 µs of the host's `send` before it are not the emulator's, the 300 ns
    /// the poll took to post it are, and the report counts such completions.
    #[test]
    fn a_completion_due_in_the_hosts_own_code_is_late_from_its_next_poll() {
        let mut l = Lateness::new();
        for i in 0..100u64 {
            let deadline = i * 1_000_000;
            let seen_from = deadline + if i % 10 == 0 { 200_000 } else { 0 };
            l.record(deadline, seen_from, seen_from + 300, 4_000, None);
        }
        let r = l.report(None);
        assert_eq!((r.completions, r.host_code), (100, 10));
        assert_eq!((r.p99_ns, r.max_ns, r.own_max_ns), (300, 300, 300), "{r:?}");
        assert_eq!(r.verdict, Verdict::Faithful);
    }

    /// 3 % of completions late by 40 µs: past the 1 µs bound at p99. When their deadlines fell
    /// inside pauses of the machine the run is machine-limited, with the emulator's own p99
    /// beside it; when they did not, the emulator itself fell behind.
    #[test]
    fn a_tail_the_machine_paused_is_machine_limited_and_only_that_tail() {
        let run = |paused: bool| {
            let mut l = Lateness::new();
            for i in 0..1000u64 {
                let late = i % 33 == 0;
                let posted = i * 10_000 + if late { 40_000 } else { 100 };
                l.record(
                    i * 10_000,
                    i * 10_000,
                    posted,
                    8_000,
                    (late && paused).then_some(Held::Paused),
                );
            }
            l.report(Some("the host's hint"))
        };
        let r = run(true);
        assert_eq!(r.verdict, Verdict::MachineLimited, "{r:?}");
        assert_eq!((r.completions, r.machine_late), (1000, 31));
        assert_eq!(r.p99_ns, 40_000);
        assert_eq!((r.own_p50_ns, r.own_p99_ns, r.own_max_ns), (100, 100, 100));
        assert_eq!(r.own_mean_ns, 100.0);
        assert_eq!(r.mean_ns, (969.0 * 100.0 + 31.0 * 40_000.0) / 1000.0);
        let why = r.unfaithful_reason.unwrap();
        assert!(why.contains("31 of 1000 completions (3.10 %)"), "{why}");
        assert!(why.contains("own p99 is 100 ns"), "{why}");
        assert!(
            !why.contains("hint"),
            "the host's hint is for the emulator's own lateness"
        );
        let r = run(false);
        assert_eq!(r.verdict, Verdict::NotFaithful, "{r:?}");
        assert_eq!((r.machine_late, r.own_p99_ns), (0, 40_000));
        assert!(r.unfaithful_reason.unwrap().ends_with("the host's hint"));
        // A few machine-late completions under the bound change nothing.
        let mut l = Lateness::new();
        for i in 0..1000u64 {
            l.record(i, i, i + 100, 8_000, (i < 5).then_some(Held::Paused));
        }
        let r = l.report(None);
        assert_eq!((r.verdict, r.machine_late), (Verdict::Faithful, 5));
    }

    /// Completions due after a device thread should have woken and before the kernel woke it
    /// are counted apart (wake-late) and, like pauses, leave the emulator's own p99 alone.
    #[test]
    fn a_tail_of_late_wake_ups_is_counted_apart_and_is_the_machines() {
        let mut l = Lateness::new();
        for i in 0..1000u64 {
            let held = match i % 50 {
                0 => Some(Held::WokeLate),
                1 => Some(Held::Paused),
                _ => None,
            };
            let late = if held.is_some() { 300_000 } else { 100 };
            l.record(i * 100_000, i * 100_000, i * 100_000 + late, 50_000, held);
        }
        let r = l.report(None);
        assert_eq!((r.completions, r.machine_late, r.wake_late), (1000, 20, 20));
        assert_eq!(r.verdict, Verdict::MachineLimited, "{r:?}");
        assert_eq!(r.own_p99_ns, 100);
        let why = r.unfaithful_reason.unwrap();
        assert!(
            why.contains("20 (2.00 %) after a device thread should have woken"),
            "{why}"
        );
        let mut merged = Lateness::new();
        merged.merge(&l);
        assert_eq!(
            merged.report(None).wake_late,
            20,
            "kept when pairs are joined"
        );
    }
}
