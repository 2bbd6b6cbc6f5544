//! The keys of `control.rs`'s options: [`JobSpec::set_control`] reads them (units as fio
//! 3.33's: think and flow times, the latency target and window in µs without a unit; the
//! think I/O time and the steady-state times in seconds) and `control_options` writes them
//! back for `fio_options`.

use nvarray_units::format_duration_ns;

use super::control::FLOW_WEIGHT_MAX;
use super::keys::{parse_duration_limited, parse_flag, parse_u32_in};
use super::JobSpec;
use crate::error::{value_error, WorkloadError};
use crate::units::{NS_PER_S, NS_PER_US};

/// The longest of these options' times: an hour.
const CONTROL_TIME_NS_MAX: u64 = 3_600 * NS_PER_S;

impl JobSpec {
    /// The keys of this file; `false` for any other key.
    pub(super) fn set_control(&mut self, key: &str, value: &str) -> Result<bool, WorkloadError> {
        let us = |v| parse_duration_limited(key, v, NS_PER_US, CONTROL_TIME_NS_MAX);
        let s = |v| parse_duration_limited(key, v, NS_PER_S, CONTROL_TIME_NS_MAX);
        match key {
            "thinktime_spin" => self.think.spin_ns = us(value)?,
            "thinktime_blocks" => {
                self.think.blocks = Some(parse_u32_in(key, value, 1, u32::MAX)?);
            }
            "thinktime_blocks_type" => {
                self.think.count_issued = match value {
                    "complete" => false,
                    "issue" => true,
                    _ => return Err(value_error(key, value, "must be complete or issue")),
                };
            }
            "thinktime_iotime" => self.think.iotime_ns = s(value)?,
            "latency_target" => self.latency_target.target_ns = us(value)?,
            "latency_window" => self.latency_target.window_ns = us(value)?,
            "latency_percentile" => {
                self.latency_target.percentile = value
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=100.0).contains(p))
                    .ok_or_else(|| value_error(key, value, "must be a percentage, 0 to 100"))?;
            }
            "latency_run" => self.latency_target.keep_searching = parse_flag(key, value)?,
            "flow_id" => self.flow.id = parse_u32_in(key, value, 0, u32::MAX)?,
            "flow" => self.flow.weight = parse_u32_in(key, value, 0, FLOW_WEIGHT_MAX)?,
            "flow_sleep" => self.flow.sleep_ns = us(value)?,
            "exit_what" => {
                self.exit_what = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            "steadystate" | "ss" => self.steadystate.set_criterion(key, value)?,
            "steadystate_duration" | "ss_dur" => self.steadystate.duration_ns = s(value)?,
            "steadystate_ramp_time" | "ss_ramp" => self.steadystate.ramp_ns = s(value)?,
            "steadystate_check_interval" | "ss_interval" => {
                let ns = s(value)?;
                if ns < NS_PER_US * 1000 {
                    return Err(value_error(key, value, "must be at least 1 ms"));
                }
                self.steadystate.interval_ns = ns;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// This file's keys for `fio_options`: those that differ from the defaults.
    pub(super) fn control_options(&self, put: &mut impl FnMut(&'static str, String)) {
        let d = JobSpec::default();
        let time = format_duration_ns;
        let t = &self.think;
        if t.spin_ns != 0 {
            put("thinktime_spin", time(t.spin_ns));
        }
        if let Some(blocks) = t.blocks {
            put("thinktime_blocks", blocks.to_string());
        }
        if t.count_issued {
            put("thinktime_blocks_type", "issue".into());
        }
        if t.iotime_ns != 0 {
            put("thinktime_iotime", time(t.iotime_ns));
        }
        let l = &self.latency_target;
        if l.target_ns != 0 {
            put("latency_target", time(l.target_ns));
        }
        if l.window_ns != 0 {
            put("latency_window", time(l.window_ns));
        }
        if l.percentile != d.latency_target.percentile {
            put("latency_percentile", l.percentile.to_string());
        }
        if l.keep_searching {
            put("latency_run", "1".into());
        }
        let f = &self.flow;
        if f.id != 0 {
            put("flow_id", f.id.to_string());
        }
        if f.weight != 0 {
            put("flow", f.weight.to_string());
        }
        if f.sleep_ns != 0 {
            put("flow_sleep", time(f.sleep_ns));
        }
        if self.exitall {
            put("exitall", "1".into());
        }
        if self.exit_what != d.exit_what {
            put("exit_what", self.exit_what.to_string());
        }
        let ss = &self.steadystate;
        let ds = &d.steadystate;
        if (ss.metric, ss.slope, ss.percent, ss.limit)
            != (ds.metric, ds.slope, ds.percent, ds.limit)
        {
            put("steadystate", ss.criterion_value());
        }
        if ss.duration_ns != 0 {
            put("steadystate_duration", time(ss.duration_ns));
        }
        if ss.ramp_ns != 0 {
            put("steadystate_ramp_time", time(ss.ramp_ns));
        }
        if ss.interval_ns != ds.interval_ns {
            put("steadystate_check_interval", time(ss.interval_ns));
        }
    }

    /// fio caps `thinktime_spin` at `thinktime` (init.c:728-732).
    pub fn think_spin_ns(&self) -> u64 {
        self.think.spin_ns.min(self.thinktime_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::control::SteadyMetric;

    fn set(pairs: &[(&str, &str)]) -> Result<JobSpec, WorkloadError> {
        let mut job = JobSpec::default();
        for (k, v) in pairs {
            job.set(k, v)?;
        }
        Ok(job)
    }

    #[test]
    fn units_are_fios() {
        let job = set(&[
            ("thinktime", "100"),
            ("thinktime_spin", "40"),
            ("thinktime_iotime", "2"),
            ("latency_target", "500"),
            ("latency_window", "1s"),
            ("flow_sleep", "1000"),
            ("ss_dur", "30"),
            ("ss_ramp", "10s"),
        ])
        .unwrap();
        assert_eq!(job.think.spin_ns, 40_000, "µs");
        assert_eq!(job.think.iotime_ns, 2 * NS_PER_S, "seconds");
        assert_eq!(job.latency_target.target_ns, 500_000, "µs");
        assert_eq!(job.latency_target.window_ns, NS_PER_S);
        assert_eq!(job.flow.sleep_ns, 1_000_000, "µs");
        assert_eq!(job.steadystate.duration_ns, 30 * NS_PER_S, "seconds");
        assert_eq!(job.steadystate.ramp_ns, 10 * NS_PER_S);
        assert_eq!(job.steadystate.samples(), 30);
    }

    #[test]
    fn spin_is_capped_at_the_think_time() {
        let job = set(&[("thinktime", "10"), ("thinktime_spin", "50")]).unwrap();
        assert_eq!(job.think_spin_ns(), 10_000);
    }

    #[test]
    fn steady_state_criteria_parse_as_fio_reads_them() {
        for (value, metric, slope, percent, limit) in [
            ("iops:10%", SteadyMetric::Iops, false, true, 10.0),
            ("iops_slope:0.1%", SteadyMetric::Iops, true, true, 0.1),
            ("iops:2", SteadyMetric::Iops, false, false, 2.0),
            ("bw_slope:1%", SteadyMetric::Bw, true, true, 1.0),
            (
                "bw:10m",
                SteadyMetric::Bw,
                false,
                false,
                10.0 * 1024.0 * 1024.0,
            ),
            ("lat:5%", SteadyMetric::Lat, false, true, 5.0),
            ("lat_slope:20", SteadyMetric::Lat, true, false, 20_000.0),
        ] {
            let job = set(&[("ss", value)]).unwrap();
            let ss = &job.steadystate;
            assert_eq!(
                (ss.metric, ss.slope, ss.percent, ss.limit),
                (metric, slope, percent, limit),
                "{value}"
            );
        }
        assert_eq!(
            set(&[("ss", "iops:10%")])
                .unwrap()
                .steadystate
                .criterion_name(),
            "iops:10.000000%"
        );
        for bad in ["iops", "speed:1%", "iops:x", "iops:-1"] {
            assert!(set(&[("ss", bad)]).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        for (k, v) in [
            ("flow", "1001"),
            ("thinktime_blocks", "0"),
            ("thinktime_blocks_type", "sometimes"),
            ("latency_percentile", "101"),
            ("latency_run", "yes"),
            ("ss_interval", "100us"),
        ] {
            assert!(set(&[(k, v)]).is_err(), "{k}={v}");
        }
    }
}
