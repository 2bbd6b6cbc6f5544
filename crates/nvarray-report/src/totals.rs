//! The figures of a set of requests (one stream, one group, or all of them): `Totals`, each
//! direction's `DirectionTotals`, the `LatencySummary` read off a histogram and the mean
//! `BreakdownNs`. Plain values: `StreamStats` fills them, every layout reads them.

use hdrhistogram::Histogram;
use nvarray_histogram::shifted_quantile;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::io_depths::IoDepths;

/// Latency percentiles in nanoseconds, from an HDR histogram (3 significant digits), with the
/// exact minimum and maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub mean: f64,
    /// Standard deviation (population), exact from the recorded values.
    pub stdev: f64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub p99999: u64,
    pub max: u64,
}

impl LatencySummary {
    /// The summary of the values recorded in `h`, whose exact least and greatest were
    /// `min_ns` and `max_ns`. A histogram answers with the top of the bucket a value fell in
    /// (3,001 for a run of requests that all took 3,000 ns); percentiles are kept inside the
    /// exact range, so no figure is outside what was measured. Values are recorded in `h`
    /// one higher than they were, so that 0 keeps its own bucket.
    pub fn from_histogram(h: &Histogram<u64>, min_ns: u64, max_ns: u64) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        assert!(
            min_ns <= max_ns,
            "least latency {min_ns} ns above the greatest {max_ns} ns of {} recorded",
            h.len()
        );
        // Values are recorded one higher (the histogram's least value is 1; see `count`).
        let at = |q: f64| shifted_quantile(h, q, min_ns, max_ns);
        LatencySummary {
            mean: h.mean(),
            stdev: h.stdev(),
            min: min_ns,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            p99999: at(0.99999),
            max: max_ns,
        }
    }
}

/// Throughput and latency of a set of requests (one stream, or all of them).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub iops: f64,
    pub read_bandwidth_bytes_per_s: f64,
    pub write_bandwidth_bytes_per_s: f64,
    pub latency_ns: LatencySummary,
    /// Mean nanoseconds per request in each component; they add up to `latency_ns.mean`.
    pub breakdown_ns: BreakdownNs,
    /// The reads alone and the writes alone (a direction without requests has zeros).
    pub read: DirectionTotals,
    pub write: DirectionTotals,
    /// How deep the host's queues were and how it handed requests over and collected them
    /// (absent where nobody counted: a front end's clients).
    #[serde(skip_serializing_if = "IoDepths::is_empty")]
    pub io_depths: IoDepths,
}

/// Throughput and latency of the requests of one direction.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DirectionTotals {
    pub requests: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bandwidth_bytes_per_s: f64,
    pub latency_ns: LatencySummary,
    /// The latencies themselves, for any percentile and for fio's json+ bins (not in the
    /// JSON: `latency_ns` summarises them).
    #[serde(skip)]
    pub histogram: Option<std::sync::Arc<Histogram<u64>>>,
}

impl DirectionTotals {
    /// The latency below which `percent` % of the requests completed, in ns (0 without
    /// requests), kept inside the exact least and greatest as `LatencySummary` does.
    pub fn percentile_ns(&self, percent: f64) -> u64 {
        match &self.histogram {
            Some(h) if !h.is_empty() => {
                let l = &self.latency_ns;
                shifted_quantile(h, percent / 100.0, l.min, l.max)
            }
            _ => 0,
        }
    }

    /// Every latency bucket that holds requests: (its latency in ns, how many), ascending.
    /// A bucket is 3 significant digits wide; its latency is the bucket's highest value,
    /// kept inside the exact least and greatest.
    pub fn bins(&self) -> Vec<(u64, u64)> {
        let Some(h) = &self.histogram else {
            return Vec::new();
        };
        let l = &self.latency_ns;
        h.iter_recorded()
            .map(|v| {
                (
                    (v.value_iterated_to() - 1).clamp(l.min, l.max),
                    v.count_at_value(),
                )
            })
            .collect()
    }

    /// Requests whose latency was above `low_ns` (from 0 included when `low_ns` is 0) and at
    /// most `high_ns`, as a share of all, at the histogram's 3 significant digits: each
    /// bucket counted whole at its latency (`bins`), so ranges that meet at an edge never
    /// both count a bucket that straddles it (hdrhistogram's `count_between` takes the
    /// buckets at both ends, which counted requests near an edge twice).
    pub fn share_between(&self, low_ns: u64, high_ns: u64) -> f64 {
        match &self.histogram {
            Some(h) if !h.is_empty() && high_ns > low_ns => {
                let bins = self.bins();
                let at_most = |ns: u64| -> u64 {
                    bins.iter()
                        .filter(|(at, _)| *at <= ns)
                        .map(|(_, n)| n)
                        .sum()
                };
                let below = if low_ns == 0 { 0 } else { at_most(low_ns) };
                let n = at_most(high_ns) - below;
                assert!(n <= h.len(), "{n} of {} requests in one range", h.len());
                n as f64 / h.len() as f64
            }
            _ => 0.0,
        }
    }
}

/// Mean nanoseconds per component, in the order of `Component::ALL` (the path of a request).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BreakdownNs(pub Vec<(&'static str, f64)>);

impl Serialize for BreakdownNs {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}
