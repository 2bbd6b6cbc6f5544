//! The options that steer a running job by what it measures rather than say what its requests
//! are: fio's think time policy (`thinktime_blocks`, `thinktime_spin`,
//! `thinktime_blocks_type`, `thinktime_iotime`), its latency target (`latency_target`,
//! `latency_window`, `latency_percentile`, `latency_run`), flows (`flow_id`, `flow`,
//! `flow_sleep`) and steady state (`steadystate`, `ss_dur`, `ss_ramp`, `ss_interval`).
//! The engines carry them out (`nvarray-run`'s `control`); here are their values, and
//! the table of keys (`key_table.rs`) reads and writes their keys.
//!
//! Units are fio 3.33's (options.c:3756-3978, 5086-5188): think and flow times and the
//! latency target and window are microseconds without a unit; the think I/O time and the
//! steady-state times are seconds.

use serde::Serialize;

use crate::error::{value_error, WorkloadError};
use crate::units::{NS_PER_S, NS_PER_US};

/// fio's largest `flow` weight (`FLOW_MAX_WEIGHT`, flow.h:4).
pub const FLOW_WEIGHT_MAX: u32 = 1000;

/// fio's think time policy, beside `thinktime` itself (`JobSpec::thinktime_ns`): after every
/// `blocks` requests (completed, or issued), the thread waits for all of its requests to
/// complete and then thinks (backend.c:865-935).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ThinkPolicy {
    /// `thinktime_blocks`: requests between thinks (`None`: fio's default, 1, which
    /// `thinktime_iotime` leaves out).
    pub blocks: Option<u32>,
    /// `thinktime_blocks_type=issue`: count issued requests, not completed ones.
    pub count_issued: bool,
    /// `thinktime_spin`: the part of the think time the thread's CPU is busy (at most the
    /// think time, as fio caps it).
    pub spin_ns: u64,
    /// `thinktime_iotime`: think once this long has passed since the last think began (the
    /// think time included), whatever the count.
    pub iotime_ns: u64,
}

impl ThinkPolicy {
    /// Requests between thinks, fio's default 1 when not given.
    pub fn blocks_or_default(&self) -> u64 {
        self.blocks.map_or(1, u64::from)
    }
}

/// fio's latency target: the thread searches for the deepest queue whose latency meets the
/// target (io_u.c:1443-1581). Inactive while `target_ns` is 0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyTarget {
    /// `latency_target`: a request's whole latency must stay at or below this.
    pub target_ns: u64,
    /// `latency_window`: how long each depth is tried.
    pub window_ns: u64,
    /// `latency_percentile`: the share of a window's requests that must meet the target.
    pub percentile: f64,
    /// `latency_run`: keep searching for the whole run instead of settling on a depth.
    pub keep_searching: bool,
}

impl Default for LatencyTarget {
    fn default() -> Self {
        LatencyTarget {
            target_ns: 0,
            window_ns: 0,
            percentile: 100.0,
            keep_searching: false,
        }
    }
}

impl LatencyTarget {
    /// Whether the job searches for a depth.
    pub fn is_set(&self) -> bool {
        self.target_ns > 0
    }
}

/// fio's flows: the jobs of one `flow_id` issue requests in the ratio of their weights
/// (flow.c:17-55). Inactive while `weight` is 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Flow {
    /// `flow_id`.
    pub id: u32,
    /// `flow`: the job's weight, 0 to [`FLOW_WEIGHT_MAX`] (0: not in a flow).
    pub weight: u32,
    /// `flow_sleep`: a job ahead of its share waits for its requests, then this long; 0: it
    /// tries again at once.
    pub sleep_ns: u64,
}

/// fio's `exit_what`: which jobs end when one ends, with `exitall` (libfio.c:241-278).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitWhat {
    /// `group` (default): the jobs of its reporting group.
    #[default]
    Group,
    /// `stonewall`: every job running (its phase's); the next phase still runs.
    Stonewall,
    /// `all`: every job, the later phases' too.
    All,
}

impl std::fmt::Display for ExitWhat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ExitWhat::Group => "group",
            ExitWhat::Stonewall => "stonewall",
            ExitWhat::All => "all",
        })
    }
}

impl std::str::FromStr for ExitWhat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "group" => Ok(ExitWhat::Group),
            "stonewall" => Ok(ExitWhat::Stonewall),
            "all" => Ok(ExitWhat::All),
            _ => Err("must be group, stonewall or all".to_string()),
        }
    }
}

/// What a steady state is judged on (`steadystate=METRIC[_slope]:LIMIT[%]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SteadyMetric {
    /// Requests per second.
    #[default]
    Iops,
    /// Bytes per second.
    Bw,
    /// Mean completion latency (newer fio than 3.33).
    Lat,
}

/// fio's steady state: the job ends once the metric, sampled every `interval_ns`, has stayed
/// within `limit` over the last `duration_ns` (steadystate.c). Inactive while `duration_ns`
/// is 0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SteadyState {
    /// What is sampled.
    pub metric: SteadyMetric,
    /// Judge the least-squares slope (`*_slope`) rather than the largest deviation from the
    /// mean.
    pub slope: bool,
    /// The limit is a percentage of the window's mean (`%`).
    pub percent: bool,
    /// The limit: in the metric's unit (IOPS, bytes/s, ns) unless `percent`.
    pub limit: f64,
    /// `steadystate_duration` (`ss_dur`): the window judged.
    pub duration_ns: u64,
    /// `steadystate_ramp_time` (`ss_ramp`): time before the first sample counts.
    pub ramp_ns: u64,
    /// `steadystate_check_interval` (`ss_interval`, newer fio): the sampling period; 1 s.
    pub interval_ns: u64,
}

impl Default for SteadyState {
    /// fio's default criterion, `iops_slope:0.01%`, inert until a duration is given.
    fn default() -> Self {
        SteadyState {
            metric: SteadyMetric::Iops,
            slope: true,
            percent: true,
            limit: 0.01,
            duration_ns: 0,
            ramp_ns: 0,
            interval_ns: NS_PER_S,
        }
    }
}

impl SteadyState {
    /// Whether the job watches for a steady state.
    pub fn is_set(&self) -> bool {
        self.duration_ns > 0
    }

    /// Samples in a window (at least 1).
    pub fn samples(&self) -> usize {
        usize::try_from(self.duration_ns / self.interval_ns.max(1))
            .unwrap_or(usize::MAX)
            .max(1)
    }

    /// fio's name of the criterion, as its JSON output writes it: `iops_slope:0.010000%`.
    pub fn criterion_name(&self) -> String {
        let metric = match self.metric {
            SteadyMetric::Iops => "iops",
            SteadyMetric::Bw => "bw",
            SteadyMetric::Lat => "lat",
        };
        let slope = if self.slope { "_slope" } else { "" };
        let pct = if self.percent { "%" } else { "" };
        format!("{metric}{slope}:{:.6}{pct}", self.limit)
    }

    /// The criterion as `steadystate=` takes it back, exactly: `iops_slope:0.01%`,
    /// `bw:1048576` (bytes/s), `lat:20000ns`.
    pub(super) fn criterion_value(&self) -> String {
        let metric = match self.metric {
            SteadyMetric::Iops => "iops",
            SteadyMetric::Bw => "bw",
            SteadyMetric::Lat => "lat",
        };
        let slope = if self.slope { "_slope" } else { "" };
        let limit = match (self.percent, self.metric) {
            (true, _) => format!("{}%", self.limit),
            (false, SteadyMetric::Iops) => self.limit.to_string(),
            (false, SteadyMetric::Bw) => format!("{}", self.limit as u64),
            (false, SteadyMetric::Lat) => format!("{}ns", self.limit as u64),
        };
        format!("{metric}{slope}:{limit}")
    }

    /// Parses `METRIC[_slope]:LIMIT[%]` (fio's `str_steadystate_cb`, options.c:1235-1310):
    /// `bw` limits without `%` take size units (bytes/s), `lat` ones time units (µs without).
    pub(super) fn set_criterion(&mut self, key: &str, value: &str) -> Result<(), WorkloadError> {
        let usage = "must be iops, iops_slope, bw, bw_slope, lat or lat_slope, then ':' and \
                     a limit, a number or a percentage (iops_slope:0.1%)";
        let (name, limit) = value
            .split_once(':')
            .ok_or_else(|| value_error(key, value, usage))?;
        let (metric, slope) = match name.trim() {
            "iops" => (SteadyMetric::Iops, false),
            "iops_slope" => (SteadyMetric::Iops, true),
            "bw" => (SteadyMetric::Bw, false),
            "bw_slope" => (SteadyMetric::Bw, true),
            "lat" => (SteadyMetric::Lat, false),
            "lat_slope" => (SteadyMetric::Lat, true),
            _ => return Err(value_error(key, value, usage)),
        };
        let limit = limit.trim();
        let (percent, number) = match limit.strip_suffix('%') {
            Some(n) => (true, n.trim()),
            None => (false, limit),
        };
        let limit = if percent || metric == SteadyMetric::Iops {
            number.parse::<f64>().ok()
        } else if metric == SteadyMetric::Bw {
            nvarray_units::parse_size(number).ok().map(|b| b as f64)
        } else {
            nvarray_units::parse_duration_ns(number, NS_PER_US)
                .ok()
                .map(|ns| ns as f64)
        }
        .filter(|l| l.is_finite() && *l >= 0.0)
        .ok_or_else(|| value_error(key, value, usage))?;
        (self.metric, self.slope, self.percent, self.limit) = (metric, slope, percent, limit);
        Ok(())
    }
}
