//! fio's steady state (steadystate.c): every interval (1 s) a job's requests per second,
//! bytes per second and mean completion latency over that interval are sampled; once the
//! last `ss_dur` worth of samples stay within the limit (their largest deviation from their
//! mean, or their least-squares slope, absolute or as a percentage of the mean), the job
//! ends, as if its runtime had run out. Samples start one interval after `ss_ramp`.
//!
//! fio samples each thread, or each reporting group with `group_reporting`; nvarray samples
//! each job, its threads summed (a job's `numjobs` threads are fio's group in its example).

use std::collections::VecDeque;

use nvarray_report::SteadyReport;
use nvarray_workload::{SteadyMetric, SteadyState};

/// A job's totals so far, of every request completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SteadyCounts {
    pub(crate) ios: u64,
    pub(crate) bytes: u64,
    pub(crate) latency_sum_ns: u64,
}

/// One sample: requests/s, bytes/s, mean latency (ns) over an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sample {
    iops: u64,
    bw: u64,
    lat_ns: u64,
}

/// A job's steady-state watch.
pub(crate) struct SteadyWatch {
    spec: SteadyState,
    start_ns: u64,
    prev_ns: u64,
    prev: SteadyCounts,
    window: VecDeque<Sample>,
    attained: bool,
    /// The last full window's criterion, largest deviation and slope.
    last: Option<(f64, f64, f64)>,
}

impl SteadyWatch {
    /// A watch of a job starting at `start_ns`.
    pub(crate) fn new(spec: &SteadyState, start_ns: u64) -> SteadyWatch {
        SteadyWatch {
            spec: spec.clone(),
            start_ns,
            prev_ns: start_ns,
            prev: SteadyCounts::default(),
            window: VecDeque::with_capacity(spec.samples()),
            attained: false,
            last: None,
        }
    }

    /// When the next sample is due.
    pub(crate) fn next_sample_ns(&self) -> u64 {
        self.prev_ns + self.spec.interval_ns
    }

    /// Takes a sample at `now_ns` of the job's totals; whether the job is now steady (it
    /// stays so: later samples are ignored).
    pub(crate) fn sample(&mut self, now_ns: u64, counts: SteadyCounts) -> bool {
        if self.attained {
            return true;
        }
        assert!(
            now_ns >= self.start_ns,
            "sampled at {now_ns} ns, before the watch's start at {} ns",
            self.start_ns
        );
        assert!(
            counts.ios >= self.prev.ios,
            "the job's requests went from {} to {}",
            self.prev.ios,
            counts.ios
        );
        let elapsed = now_ns.saturating_sub(self.prev_ns).max(1);
        let ramp_over = now_ns - self.start_ns >= self.spec.ramp_ns + self.spec.interval_ns
            || self.spec.ramp_ns == 0;
        let ios = counts.ios - self.prev.ios;
        let sample = Sample {
            iops: per_second(ios, elapsed),
            bw: per_second(counts.bytes - self.prev.bytes, elapsed),
            lat_ns: (counts.latency_sum_ns - self.prev.latency_sum_ns)
                .checked_div(ios)
                .unwrap_or(0),
        };
        (self.prev_ns, self.prev) = (now_ns, counts);
        if !ramp_over {
            return false;
        }
        if self.window.len() == self.spec.samples() {
            self.window.pop_front();
        }
        self.window.push_back(sample);
        if self.window.len() < self.spec.samples() {
            return false;
        }
        let (criterion, deviation, slope) = self.judge();
        self.last = Some((criterion, deviation, slope));
        self.attained = if self.spec.slope {
            criterion.abs() < self.spec.limit
        } else {
            criterion < self.spec.limit
        };
        self.attained
    }

    /// The window's criterion, largest deviation from its mean and slope (per sample).
    fn judge(&self) -> (f64, f64, f64) {
        let values: Vec<f64> = self.values().map(|v| v as f64).collect();
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let deviation = values.iter().map(|v| (v - mean).abs()).fold(0.0, f64::max);
        let (sx, sy) = ((n - 1.0) * n / 2.0, values.iter().sum::<f64>());
        let sxx = (0..values.len()).map(|i| (i * i) as f64).sum::<f64>();
        let sxy = values
            .iter()
            .enumerate()
            .map(|(i, v)| i as f64 * v)
            .sum::<f64>();
        let slope = (sxy - sx * sy / n) / (sxx - sx * sx / n);
        let raw = if self.spec.slope { slope } else { deviation };
        let criterion = if self.spec.percent {
            100.0 * raw / mean
        } else {
            raw
        };
        (criterion, deviation, slope)
    }

    /// The window's values of the judged metric.
    fn values(&self) -> impl Iterator<Item = u64> + '_ {
        let metric = self.spec.metric;
        self.window.iter().map(move |s| match metric {
            SteadyMetric::Iops => s.iops,
            SteadyMetric::Bw => s.bw,
            SteadyMetric::Lat => s.lat_ns,
        })
    }

    /// What the watch saw, in fio's terms.
    pub(crate) fn report(&self) -> SteadyReport {
        let (criterion, max_deviation, slope) = self.last.unwrap_or((0.0, 0.0, 0.0));
        let column = |f: fn(&Sample) -> u64| self.window.iter().map(f).collect::<Vec<u64>>();
        let mean = |v: &[u64]| {
            if v.is_empty() {
                0.0
            } else {
                v.iter().sum::<u64>() as f64 / v.len() as f64
            }
        };
        let (iops, bw, lat_ns) = (column(|s| s.iops), column(|s| s.bw), column(|s| s.lat_ns));
        SteadyReport {
            ss: self.spec.criterion_name(),
            duration: self.spec.samples(),
            attained: self.attained,
            criterion: format!("{criterion:.6}{}", if self.spec.percent { "%" } else { "" }),
            max_deviation,
            slope,
            iops_mean: mean(&iops),
            bw_mean: mean(&bw),
            lat_mean_ns: mean(&lat_ns),
            iops,
            bw,
            lat_ns,
        }
    }
}

/// `count` per second over `elapsed_ns`, truncated as fio's integer samples are.
fn per_second(count: u64, elapsed_ns: u64) -> u64 {
    u64::try_from(u128::from(count) * 1_000_000_000 / u128::from(elapsed_ns)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn spec(ss: &str, dur: &str, ramp: &str) -> SteadyState {
        let mut job = nvarray_workload::JobSpec::default();
        job.set("ss", ss).unwrap();
        job.set("ss_dur", dur).unwrap();
        job.set("ss_ramp", ramp).unwrap();
        job.steadystate
    }

    /// Feeds per-second request counts; returns the second it attained at.
    fn feed(watch: &mut SteadyWatch, per_second: &[u64]) -> Option<usize> {
        let mut counts = SteadyCounts::default();
        for (k, n) in per_second.iter().enumerate() {
            counts.ios += n;
            counts.bytes += n * 4096;
            counts.latency_sum_ns += n * 10_000;
            if watch.sample((k as u64 + 1) * S, counts) {
                return Some(k + 1);
            }
        }
        None
    }

    #[test]
    fn a_deviation_limit_waits_for_a_full_window_within_it() {
        let mut w = SteadyWatch::new(&spec("iops:10%", "3", "0"), 0);
        // Rising, then within 10 % of the mean for 3 samples.
        let at = feed(&mut w, &[100, 200, 400, 1000, 1040, 1000, 1020]);
        assert_eq!(at, Some(6), "samples 4..6 are the first steady window");
        let r = w.report();
        assert!(r.attained);
        assert_eq!(r.iops, [1000, 1040, 1000]);
        assert_eq!(r.bw, [1000 * 4096, 1040 * 4096, 1000 * 4096]);
        assert_eq!(r.lat_ns, [10_000; 3]);
        assert_eq!(r.ss, "iops:10.000000%");
        assert!(
            (r.max_deviation - 26.666_666).abs() < 1e-3,
            "{}",
            r.max_deviation
        );
    }

    #[test]
    fn a_slope_limit_ignores_a_flat_offset_and_the_ramp_holds_samples_back() {
        // ss_ramp=2: samples count from 3 s (ramp + one interval).
        let mut w = SteadyWatch::new(&spec("iops_slope:1%", "2", "2"), 0);
        assert_eq!(feed(&mut w, &[5000, 5000, 5000, 5000]), Some(4));
        let mut w = SteadyWatch::new(&spec("iops_slope:1%", "3", "0"), 0);
        assert_eq!(
            feed(&mut w, &[100, 110, 120, 130, 140]),
            None,
            "10% a sample"
        );
        assert!(!w.report().attained);
        assert!((w.report().slope - 10.0).abs() < 1e-9);
    }

    #[test]
    fn no_requests_is_never_steady() {
        let mut w = SteadyWatch::new(&spec("iops:10%", "2", "0"), 0);
        assert_eq!(feed(&mut w, &[0, 0, 0]), None);
    }
}
