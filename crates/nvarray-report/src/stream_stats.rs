//! `StreamStats`: one stream's completions as they are recorded (each direction's latencies in
//! an `NsHistogram` with exact least, greatest, sum and sum of squares; the breakdown's sum;
//! the I/O depths; the stream's phase, group and own active time), and its `Totals`.

use hdrhistogram::Histogram;
use nvarray_histogram::NsHistogram;
use nvarray_model::{Breakdown, Component};

use crate::io_depths::IoDepths;
use crate::totals::{BreakdownNs, DirectionTotals, LatencySummary, Totals};

/// One direction's latencies as a stream records them.
#[derive(Clone, Debug)]
struct DirectionStats {
    /// Each latency plus 1 ns.
    histogram: NsHistogram,
    /// The exact least and greatest latency recorded (the histogram's are bucketed), and the
    /// exact sum and sum of squares, for the mean and the standard deviation.
    min_ns: u64,
    max_ns: u64,
    sum_ns: u128,
    sum_sq_ns: u128,
    requests: u64,
    bytes: u64,
}

impl DirectionStats {
    fn new() -> Self {
        DirectionStats {
            // 1 ns to one hour at 3 significant digits.
            histogram: NsHistogram::new(),
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0,
            sum_sq_ns: 0,
            requests: 0,
            bytes: 0,
        }
    }

    #[inline]
    fn count(&mut self, len_bytes: u32, latency_ns: u64) {
        // One higher, so a request of 0 ns (the null device) is not counted as 1 ns.
        self.histogram.record(latency_ns + 1);
        self.min_ns = self.min_ns.min(latency_ns);
        self.max_ns = self.max_ns.max(latency_ns);
        self.sum_ns += u128::from(latency_ns);
        self.sum_sq_ns += u128::from(latency_ns) * u128::from(latency_ns);
        self.requests += 1;
        self.bytes += u64::from(len_bytes);
    }

    fn merge(&mut self, other: &DirectionStats) {
        self.histogram.add(&other.histogram);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns += other.sum_sq_ns;
        self.requests += other.requests;
        self.bytes += other.bytes;
    }

    /// The latency summary, with the exact mean and standard deviation; `histogram` is
    /// `self.histogram`'s (`NsHistogram::to_histogram`).
    fn latency(&self, histogram: &Histogram<u64>) -> LatencySummary {
        if self.requests == 0 {
            return LatencySummary::default();
        }
        let n = self.requests as f64;
        let mean = self.sum_ns as f64 / n;
        let variance = (self.sum_sq_ns as f64 / n - mean * mean).max(0.0);
        LatencySummary {
            mean,
            stdev: variance.sqrt(),
            ..LatencySummary::from_histogram(histogram, self.min_ns, self.max_ns)
        }
    }

    fn totals(&self, elapsed_ns: u64) -> DirectionTotals {
        assert_eq!(
            self.histogram.len(),
            self.requests,
            "the histogram holds {} latencies of {} requests",
            self.histogram.len(),
            self.requests
        );
        let histogram = self.histogram.to_histogram();
        DirectionTotals {
            requests: self.requests,
            bytes: self.bytes,
            iops: per_second(self.requests, elapsed_ns),
            bandwidth_bytes_per_s: per_second(self.bytes, elapsed_ns),
            latency_ns: self.latency(&histogram),
            histogram: (self.requests > 0).then(|| std::sync::Arc::new(histogram)),
        }
    }
}

/// `count` per second over `elapsed_ns`: 0 for nothing, and infinite (`unbounded` in the
/// table, `null` in the JSON) for something in no time at all (a device that completes
/// requests in none). Before, a floor of 1 ns printed 10^14 IOPS for `--preset null`.
pub fn per_second(count: u64, elapsed_ns: u64) -> f64 {
    match (count, elapsed_ns) {
        (0, _) => 0.0,
        (_, 0) => f64::INFINITY,
        (c, ns) => c as f64 / (ns as f64 / 1e9),
    }
}

/// Accumulates one stream's completions.
#[derive(Clone, Debug)]
pub struct StreamStats {
    pub name: String,
    /// Reads, then writes: each direction's latencies (the stream's are both together).
    directions: [DirectionStats; 2],
    breakdown_sum: Breakdown,
    io_depths: IoDepths,
    /// The stream's own active time, if it differs from the run's: a job that finished its
    /// `number_ios` early, or ran a shorter `runtime`, reports its rates over its own time,
    /// as fio does.
    pub(crate) active_ns: Option<u64>,
    /// The phase the stream ran in (phases run one after another; see
    /// `nvarray_workload::Workload::phases`) and its reporting group.
    pub(crate) phase: usize,
    pub(crate) group: usize,
    /// What the job's latency target and steady-state watch found.
    pub control: crate::control::StreamControl,
}

impl StreamStats {
    pub fn new(name: &str) -> Self {
        StreamStats {
            name: name.to_string(),
            directions: [DirectionStats::new(), DirectionStats::new()],
            breakdown_sum: Breakdown::default(),
            io_depths: IoDepths::default(),
            active_ns: None,
            phase: 0,
            group: 0,
            control: crate::control::StreamControl::default(),
        }
    }

    /// The stream of a job that ran in `phase` and reports in `group`. A run of several
    /// phases must set every stream's active time: its elapsed time is theirs summed.
    pub fn placed(mut self, phase: usize, group: usize) -> Self {
        self.phase = phase;
        self.group = group;
        self
    }

    /// The stream's I/O depths, for its engine to count into.
    pub fn io_depths_mut(&mut self) -> &mut IoDepths {
        &mut self.io_depths
    }

    /// Sets the stream's own active time (see `active_ns`); rates are over it.
    pub fn set_active_ns(&mut self, ns: u64) {
        self.active_ns = Some(ns);
    }

    /// The time this stream's rates are over: its own active time, or else `run_ns`.
    pub fn active_or(&self, run_ns: u64) -> u64 {
        self.active_ns.unwrap_or(run_ns)
    }

    #[inline]
    pub fn record(
        &mut self,
        is_read: bool,
        len_bytes: u32,
        latency_ns: u64,
        breakdown: &Breakdown,
    ) {
        self.breakdown_sum.add(breakdown);
        self.count(is_read, len_bytes, latency_ns);
    }

    /// Records a request whose whole latency is host time as measured: what a front end or
    /// the emulator's runner sees from outside the device. `nvarray_run::device_report` then
    /// moves the modelled device's share to its components.
    #[inline]
    pub fn record_host(&mut self, is_read: bool, len_bytes: u32, latency_ns: u64) {
        let host_ns = self.breakdown_sum.get(Component::Host);
        self.breakdown_sum
            .set(Component::Host, host_ns + latency_ns);
        self.count(is_read, len_bytes, latency_ns);
    }

    #[inline]
    fn count(&mut self, is_read: bool, len_bytes: u32, latency_ns: u64) {
        self.directions[usize::from(!is_read)].count(len_bytes, latency_ns);
    }

    pub fn merge(&mut self, other: &StreamStats) {
        for (mine, theirs) in self.directions.iter_mut().zip(&other.directions) {
            mine.merge(theirs);
        }
        self.breakdown_sum.add(&other.breakdown_sum);
        self.io_depths.merge(&other.io_depths);
        self.control.merge(&other.control);
        // Threads of one stream ran side by side: the stream was active as long as the
        // longest of them.
        self.active_ns = match (self.active_ns, other.active_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    pub fn totals(&self, elapsed_ns: u64) -> Totals {
        let [read, write] = &self.directions;
        let mut both = read.clone();
        both.merge(write);
        let requests = both.requests;
        let n = requests.max(1) as f64;
        let totals = Totals {
            requests,
            read_requests: read.requests,
            write_requests: write.requests,
            read_bytes: read.bytes,
            write_bytes: write.bytes,
            iops: per_second(requests, elapsed_ns),
            read_bandwidth_bytes_per_s: per_second(read.bytes, elapsed_ns),
            write_bandwidth_bytes_per_s: per_second(write.bytes, elapsed_ns),
            latency_ns: LatencySummary {
                // Exact, not the histogram's bucketed mean, so the breakdown adds up to it.
                mean: if requests == 0 {
                    0.0
                } else {
                    self.breakdown_sum.total_ns() as f64 / n
                },
                ..both.latency(&both.histogram.to_histogram())
            },
            read: read.totals(elapsed_ns),
            write: write.totals(elapsed_ns),
            io_depths: self.io_depths,
            breakdown_ns: BreakdownNs(
                Component::ALL
                    .iter()
                    .map(|&c| (c.name(), self.breakdown_sum.get(c) as f64 / n))
                    .collect(),
            ),
        };
        // `Totals::breakdown_ns` promises its means add up to the mean latency.
        let (breakdown_ns, mean_ns) = (
            totals.breakdown_ns.0.iter().map(|(_, ns)| ns).sum::<f64>(),
            totals.latency_ns.mean,
        );
        assert!(
            (breakdown_ns - mean_ns).abs() <= 1e-9 * mean_ns.max(1.0),
            "the breakdown's means add up to {breakdown_ns} ns, the mean latency is {mean_ns} ns"
        );
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::totals::DirectionTotals;

    /// Percentiles never leave the range that was measured, and the least and greatest are
    /// exact, though the histogram keeps 3 significant digits: requests that all took
    /// 3,000 ns report 3,000 everywhere (the histogram alone says 3,001), and a greatest
    /// value between two buckets' tops is reported as it was.
    #[test]
    fn latency_figures_stay_inside_what_was_measured() {
        let mut all_equal = StreamStats::new("a");
        for _ in 0..100 {
            all_equal.record_host(true, 512, 3000);
        }
        let t = all_equal.totals(1_000_000).latency_ns;
        assert_eq!(
            (t.min, t.p50, t.p99, t.p99999, t.max),
            (3000, 3000, 3000, 3000, 3000)
        );
        let mut spread = StreamStats::new("b");
        for latency_ns in [1_000, 2_000, 1_234_567] {
            spread.record_host(false, 4096, latency_ns);
        }
        let t = spread.totals(1_000_000).latency_ns;
        assert_eq!((t.min, t.max), (1_000, 1_234_567));
        assert!(t.p99 <= t.max && t.p50 >= t.min, "{t:?}");
        let mut merged = StreamStats::new("all");
        merged.merge(&all_equal);
        merged.merge(&spread);
        let t = merged.totals(1_000_000).latency_ns;
        assert_eq!((t.min, t.max), (1_000, 1_234_567));
    }

    /// `record_host` is `record` with the whole latency as host time, request for request,
    /// however the requests mix reads, writes and sizes.
    #[test]
    fn record_host_counts_as_a_breakdown_of_only_host_time() {
        let (mut by_host, mut by_breakdown) = (StreamStats::new("a"), StreamStats::new("b"));
        for (i, latency_ns) in [1u64, 700, 15_000, 3_000_000].into_iter().enumerate() {
            let (is_read, len) = (i % 2 == 0, 512 << i);
            by_host.record_host(is_read, len, latency_ns);
            let mut b = Breakdown::default();
            b.set(Component::Host, latency_ns);
            by_breakdown.record(is_read, len, latency_ns, &b);
        }
        let (h, b) = (by_host.totals(1_000_000), by_breakdown.totals(1_000_000));
        assert_eq!(
            serde_json::to_value(&h).unwrap(),
            serde_json::to_value(&b).unwrap()
        );
        let host = h
            .breakdown_ns
            .0
            .iter()
            .find(|(n, _)| *n == "host")
            .unwrap()
            .1;
        assert_eq!(host, h.latency_ns.mean, "all of the mean is host time");
    }

    /// Reads and writes of a mixed stream each get their own figures, and the stream's are
    /// both together: exact mean and standard deviation, rates over the same time.
    #[test]
    fn each_direction_has_its_own_latency_and_rates() {
        let mut s = StreamStats::new("mixed");
        for _ in 0..300 {
            s.record_host(true, 4096, 100);
        }
        for _ in 0..100 {
            s.record_host(false, 512, 300);
            s.record_host(false, 512, 500);
        }
        let t = s.totals(1_000_000_000);
        assert_eq!(
            (t.read.requests, t.write.requests, t.requests),
            (300, 200, 500)
        );
        assert_eq!((t.read.bytes, t.write.bytes), (300 * 4096, 200 * 512));
        assert_eq!((t.read.iops, t.write.iops, t.iops), (300.0, 200.0, 500.0));
        let (r, w, all) = (&t.read.latency_ns, &t.write.latency_ns, &t.latency_ns);
        assert_eq!((r.mean, r.stdev, r.min, r.max), (100.0, 0.0, 100, 100));
        assert_eq!((w.mean, w.stdev, w.min, w.max), (400.0, 100.0, 300, 500));
        assert_eq!((w.p50, w.p99), (300, 500));
        assert_eq!(t.write.bins(), [(300, 100), (500, 100)]);
        assert_eq!(t.write.percentile_ns(25.0), 300);
        assert_eq!(t.write.share_between(0, 300), 0.5);
        assert_eq!(t.write.share_between(300, 1000), 0.5);
        // All 500: mean 220, values 100 (300x), 300 (100x), 500 (100x).
        assert_eq!(all.mean, 220.0);
        let variance =
            (300.0 * 120f64.powi(2) + 100.0 * 80f64.powi(2) + 100.0 * 280f64.powi(2)) / 500.0;
        assert!((all.stdev - variance.sqrt()).abs() < 1e-9, "{}", all.stdev);
        assert_eq!((all.min, all.max), (100, 500));
        // A direction without requests reports zeros, never NaN.
        let reads_only = {
            let mut s = StreamStats::new("r");
            s.record_host(true, 512, 7);
            s.totals(1)
        };
        assert_eq!(reads_only.write, DirectionTotals::default());
        assert_eq!(reads_only.read.bins(), [(7, 1)]);
        assert_eq!(reads_only.read.percentile_ns(50.0), 7);
        let json = serde_json::to_value(&reads_only).unwrap();
        assert_eq!(json["write"]["latency_ns"]["stdev"], 0.0);
        assert_eq!(json["read"]["latency_ns"]["mean"], 7.0);
    }

    /// fio's latency distributions meet at edges: a bucket of the histogram that straddles an
    /// edge is counted in one range only, so the ranges add up to every request (they
    /// counted 100 requests at exactly 10 us in both (2, 10] and (10, 20] us).
    #[test]
    fn ranges_that_meet_at_an_edge_count_each_request_once() {
        let mut s = StreamStats::new("edge");
        for _ in 0..100 {
            s.record_host(true, 4096, 10_000);
        }
        for latency_ns in (9_000..21_000).step_by(7) {
            s.record_host(true, 4096, latency_ns);
        }
        let t = s.totals(1_000_000_000);
        let edges = [0, 2_000, 10_000, 20_000, 50_000];
        let shares: Vec<f64> = edges
            .windows(2)
            .map(|w| t.read.share_between(w[0], w[1]))
            .collect();
        let total: f64 = shares.iter().sum();
        assert!((total - 1.0).abs() < 1e-12, "{shares:?}");
        let at_10us = t.read.share_between(2_000, 10_000) * t.read.requests as f64;
        assert!(at_10us >= 100.0, "{at_10us}");
    }
}
