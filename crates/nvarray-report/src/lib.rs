//! `nvarray-report`: the result of a run, in the shape every engine reports (human table and JSON).
//!
//! The simulator and the emulator fill the same types, so `nvarray sim`, `nvarray bench
//! --engine sim` and `nvarray bench --engine emu` print the same table and JSON fields.

use hdrhistogram::Histogram;
use nvarray_model::{Breakdown, Component};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// Latency percentiles in nanoseconds, from an HDR histogram (3 significant digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub p99999: u64,
    pub max: u64,
}

impl LatencySummary {
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        LatencySummary {
            mean: h.mean(),
            min: h.min(),
            p50: h.value_at_quantile(0.50),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            p99999: h.value_at_quantile(0.99999),
            max: h.max(),
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

/// One stream: a job-file section (or the command-line job).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamReport {
    pub name: String,
    #[serde(flatten)]
    pub totals: Totals,
}

/// Fraction of time each resource was busy (for pools: mean over its members).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Utilisation {
    pub link_to_device: f64,
    pub link_to_host: f64,
    pub controller: f64,
    pub ring: f64,
    pub banks: f64,
    pub buffers: f64,
    pub tags: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WearReport {
    pub line_writes_max: u64,
    pub line_writes_mean: f64,
    pub gap_moves: u64,
}

/// Everything one run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunReport {
    pub engine: &'static str,
    pub device: String,
    /// Time the measurement covers (virtual time for the simulator).
    pub elapsed_ns: u64,
    #[serde(flatten)]
    pub totals: Totals,
    pub utilisation: Utilisation,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wear: Option<WearReport>,
    pub erases: u64,
    pub streams: Vec<StreamReport>,
}

/// Accumulates one stream's completions.
#[derive(Clone, Debug)]
pub struct StreamStats {
    pub name: String,
    histogram: Histogram<u64>,
    breakdown_sum: Breakdown,
    requests: u64,
    read_requests: u64,
    read_bytes: u64,
    write_bytes: u64,
}

impl StreamStats {
    pub fn new(name: &str) -> Self {
        StreamStats {
            name: name.to_string(),
            // 1 ns to one hour at 3 significant digits.
            histogram: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            breakdown_sum: Breakdown::default(),
            requests: 0,
            read_requests: 0,
            read_bytes: 0,
            write_bytes: 0,
        }
    }

    #[inline]
    pub fn record(
        &mut self,
        is_read: bool,
        len_bytes: u32,
        latency_ns: u64,
        breakdown: &Breakdown,
    ) {
        self.histogram.saturating_record(latency_ns.max(1));
        self.breakdown_sum.add(breakdown);
        self.requests += 1;
        if is_read {
            self.read_requests += 1;
            self.read_bytes += u64::from(len_bytes);
        } else {
            self.write_bytes += u64::from(len_bytes);
        }
    }

    pub fn merge(&mut self, other: &StreamStats) {
        self.histogram
            .add(&other.histogram)
            .expect("same histogram bounds");
        self.breakdown_sum.add(&other.breakdown_sum);
        self.requests += other.requests;
        self.read_requests += other.read_requests;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
    }

    pub fn totals(&self, elapsed_ns: u64) -> Totals {
        let seconds = (elapsed_ns.max(1)) as f64 / 1e9;
        let n = self.requests.max(1) as f64;
        Totals {
            requests: self.requests,
            read_requests: self.read_requests,
            write_requests: self.requests - self.read_requests,
            read_bytes: self.read_bytes,
            write_bytes: self.write_bytes,
            iops: self.requests as f64 / seconds,
            read_bandwidth_bytes_per_s: self.read_bytes as f64 / seconds,
            write_bandwidth_bytes_per_s: self.write_bytes as f64 / seconds,
            latency_ns: LatencySummary {
                // Exact, not the histogram's bucketed mean, so the breakdown adds up to it.
                mean: if self.requests == 0 {
                    0.0
                } else {
                    self.breakdown_sum.total_ns() as f64 / n
                },
                ..LatencySummary::from_histogram(&self.histogram)
            },
            breakdown_ns: BreakdownNs(
                Component::ALL
                    .iter()
                    .map(|&c| (c.name(), self.breakdown_sum.get(c) as f64 / n))
                    .collect(),
            ),
        }
    }
}
