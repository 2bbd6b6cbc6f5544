//! What a job's own controls found while it ran: the depth its latency target settled on,
//! and its steady state (fio's `latency_depth` and `steadystate` output, stat.c:1817-1914).

use serde::Serialize;

/// A stream's control results; empty for a job without a latency target or steady state.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamControl {
    /// The queue depth a latency target's search ended at (the least of the job's threads').
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_depth: Option<u32>,
    /// What the steady-state watch saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steadystate: Option<SteadyReport>,
}

impl StreamControl {
    /// Both streams' results: the shallower depth, and either's steady state.
    pub fn merge(&mut self, other: &StreamControl) {
        self.latency_depth = match (self.latency_depth, other.latency_depth) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.steadystate.is_none() {
            self.steadystate.clone_from(&other.steadystate);
        }
    }
}

/// A steady-state watch's result, in fio's terms.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SteadyReport {
    /// The criterion, as fio writes it: `iops_slope:0.010000%`.
    pub ss: String,
    /// Samples in the window.
    pub duration: usize,
    /// Whether the job ended because the metric was steady.
    pub attained: bool,
    /// The last window's criterion value, as fio writes it (`4.508473%`).
    pub criterion: String,
    /// The last window's largest deviation from its mean, and its least-squares slope per
    /// sample, in the metric's unit.
    pub max_deviation: f64,
    pub slope: f64,
    /// The window's samples, oldest first: requests per second, bytes per second, and the
    /// mean completion latency in ns (its means too).
    pub iops: Vec<u64>,
    pub bw: Vec<u64>,
    pub lat_ns: Vec<u64>,
    pub iops_mean: f64,
    pub bw_mean: f64,
    pub lat_mean_ns: f64,
}
