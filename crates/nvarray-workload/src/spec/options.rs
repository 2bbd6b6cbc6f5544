//! A job written back as fio options: the keys and values that make it from the defaults,
//! which `JobSpec::set` reads back to the same job. fio's JSON report lists a job's options
//! (`job options`); nvarray's comes from here, so it says what the job did whichever way it
//! was given (a job file, the command line).

use nvarray_units::{format_duration_ns, format_size};

use super::{JobSpec, RateProcess, Verify, ZoneMode, RANDSEED_DEFAULT};

impl JobSpec {
    /// The verification keys of `fio_options`: the pattern first, since on its own it turns
    /// verification on, then `verify`.
    fn verify_options(&self, put: &mut impl FnMut(&'static str, String)) {
        if let Some(pattern) = &self.verify_pattern {
            let hex: String = pattern.iter().map(|b| format!("{b:02x}")).collect();
            put("verify_pattern", format!("0x{hex}"));
        }
        if self.verify != Verify::None || self.verify_pattern.is_some() {
            put("verify", self.verify.to_string());
        }
        if let Some(bytes) = self.verify_interval_bytes {
            put("verify_interval", format_size(bytes));
        }
        if let Some(n) = self.verify_backlog {
            put("verify_backlog", n.to_string());
        }
        if !self.do_verify {
            put("do_verify", "0".into());
        }
    }

    /// The strided-zone keys of `fio_options`.
    fn zone_options(&self, put: &mut impl FnMut(&'static str, String)) {
        if self.zonemode != ZoneMode::None {
            put("zonemode", self.zonemode.to_string());
        }
        if self.zones.size_bytes != 0 {
            put("zonesize", format_size(self.zones.size_bytes));
        }
        if let Some(range) = self.zones.range_bytes {
            put("zonerange", format_size(range));
        }
        if self.zones.skip_bytes != 0 {
            put("zoneskip", format_size(self.zones.skip_bytes));
        }
    }

    /// The job's settings that differ from the defaults, as fio `key=value` pairs in the order
    /// fio's documentation lists them; applying them with [`JobSpec::set`] to a default job
    /// gives this job back (its name aside, which is the section's). `nvarray fio`'s
    /// `ends_by_size` without `runtime=0` is the one setting no key writes.
    pub fn fio_options(&self) -> Vec<(&'static str, String)> {
        let out = self.options_written();
        // Each key once: a key written twice would be set twice, the second value winning,
        // and fio's JSON would list it twice.
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, (k, _))| out[..i].iter().all(|(other, _)| other != k)),
            "a key written back twice: {out:?}"
        );
        out
    }

    /// `fio_options`' pairs, in its order.
    fn options_written(&self) -> Vec<(&'static str, String)> {
        let d = JobSpec::default();
        let mut out = Vec::new();
        let mut put = |key: &'static str, value: String| out.push((key, value));
        let size = |bytes: u64| format_size(bytes);
        if self.rw != d.rw || self.rw_run != d.rw_run || self.rw_gap_bytes != d.rw_gap_bytes {
            let modifier = if self.rw.is_random() && self.rw_run != 1 {
                format!(":{}", self.rw_run)
            } else if !self.rw.is_random() && self.rw_gap_bytes != 0 {
                let sign = if self.rw_gap_bytes < 0 { "-" } else { "" };
                format!(":{sign}{}", size(self.rw_gap_bytes.unsigned_abs()))
            } else {
                String::new()
            };
            put("rw", format!("{}{modifier}", self.rw));
        }
        if self.rw_sequencer != d.rw_sequencer {
            put("rw_sequencer", self.rw_sequencer.to_string());
        }
        if self.bs != d.bs {
            put(self.bs.key(), self.bs.to_string());
        }
        if self.rwmixread != d.rwmixread {
            put("rwmixread", self.rwmixread.to_string());
        }
        if self.iodepth != d.iodepth {
            put("iodepth", self.iodepth.to_string());
        }
        if self.numjobs != d.numjobs {
            put("numjobs", self.numjobs.to_string());
        }
        match self.runtime_ns {
            Some(ns) => put("runtime", format_duration_ns(ns)),
            // `runtime=0`: no time limit, the job ends by its size.
            None if self.ends_by_size => put("runtime", "0".into()),
            None => {}
        }
        if let Some(n) = self.number_ios {
            put("number_ios", n.to_string());
        }
        if let Some(bytes) = self.io_size_bytes {
            put("io_size", size(bytes));
        }
        if self.random_distribution != d.random_distribution {
            put("random_distribution", self.random_distribution.to_string());
        }
        if self.randseed != RANDSEED_DEFAULT {
            put("randseed", self.randseed.to_string());
        }
        if self.offset_bytes != 0 {
            put("offset", size(self.offset_bytes));
        }
        if self.offset_increment_bytes != 0 {
            put("offset_increment", size(self.offset_increment_bytes));
        }
        if self.fill_device {
            put("fill_device", "1".into());
        } else if let Some(bytes) = self.size_bytes {
            put("size", size(bytes));
        }
        if self.loops != d.loops {
            put("loops", self.loops.to_string());
        }
        if let Some(bytes) = self.blockalign_bytes {
            put("blockalign", size(bytes));
        }
        if self.thinktime_ns != 0 {
            put("thinktime", format_duration_ns(self.thinktime_ns));
        }
        self.control_options(&mut put);
        if let Some(bytes_per_s) = self.rate_bytes_per_s {
            put("rate", size(bytes_per_s));
        }
        if let Some(iops) = self.rate_iops {
            put("rate_iops", iops.to_string());
        }
        if self.rate_process != RateProcess::Linear {
            put("rate_process", self.rate_process.to_string());
        }
        self.verify_options(&mut put);
        if self.ramp_time_ns != 0 {
            put("ramp_time", format_duration_ns(self.ramp_time_ns));
        }
        for (on, key) in [
            (self.stonewall, "stonewall"),
            (self.new_group, "new_group"),
            (self.norandommap, "norandommap"),
            (self.random_sequence_stride, "random_sequence_stride"),
            (self.time_based, "time_based"),
        ] {
            if on {
                put(key, "1".into());
            }
        }
        self.zone_options(&mut put);
        if let Some(name) = &self.wait_for {
            put("wait_for", name.clone());
        }
        out
    }
}
