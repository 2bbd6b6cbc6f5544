//! [`JobSpec::set`]: the one place a fio `key=value` is parsed and range-checked, for job
//! files and command lines alike, and the lists of the keys it supports and ignores.
//!
//! Sizes and durations are read by `nvarray-units`, so a value means here what it means in a
//! device override.

use nvarray_units::{DurationErrorKind, SizeError, SizeErrorKind};

use super::key_names::{IGNORED_KEYS, SUPPORTED_KEYS, SWITCH_KEYS};
use super::limits::{
    BSSPLIT_ENTRIES_MAX, BS_BYTES_MAX, IODEPTH_MAX, NUMBER_IOS_MAX, NUMJOBS_MAX, RAMP_TIME_NS_MAX,
    RUNTIME_NS_MAX, THINKTIME_NS_MAX,
};
use super::validate::{check_block_size, check_name};
use super::vocabulary::BlockSize;
use super::JobSpec;
use crate::error::{value_error, WorkloadError};
use crate::units::{NS_PER_S, NS_PER_US};

/// Most `loops` a job may run.
const LOOPS_MAX: u32 = 1_000_000;

impl JobSpec {
    /// Parses and applies one fio option; the job-file parser and the command line both go
    /// through here, so a key means the same thing everywhere.
    ///
    /// Keys are [`SUPPORTED_KEYS`]; keys in [`IGNORED_KEYS`] are accepted with any value
    /// (even none) and change nothing. Every other key is
    /// an error naming it. The value is trimmed; an empty value for a supported key is a
    /// [`WorkloadError::MissingValue`]. On error `self` is unchanged.
    ///
    /// Values:
    /// - `name`: 1 to [`NAME_BYTES_MAX`](super::NAME_BYTES_MAX) bytes, no control characters.
    /// - `rw`, `readwrite`: see [`RwMode`](super::RwMode)'s `FromStr`.
    /// - `bs`, `blocksize`: one size (see [`parse_size`](crate::parse_size)), 1 byte to
    ///   [`BS_BYTES_MAX`]; fio's `R,W` pairs are refused. Replaces an earlier `bssplit`.
    /// - `bssplit`: `LEN/PERCENT[:LEN/PERCENT...]`, at most [`BSSPLIT_ENTRIES_MAX`] entries,
    ///   percentages summing to 100. Replaces an earlier `bs`.
    /// - `rwmixread`, `rwmixwrite`: integer percent `0..=100`.
    /// - `iodepth`: `1..=IODEPTH_MAX`; `numjobs`: `1..=NUMJOBS_MAX`.
    /// - `runtime`: duration, seconds by default, at most [`RUNTIME_NS_MAX`]; 0 clears it.
    /// - `number_ios`: count (size suffixes allowed, as in fio), at most [`NUMBER_IOS_MAX`];
    ///   0 clears it.
    /// - `random_distribution`: see [`Distribution`](super::Distribution)'s `FromStr`.
    /// - `randseed`: any `u64`, decimal or `0x` hex.
    /// - `offset`: size; `size`: nonzero size.
    /// - `thinktime`: duration, **microseconds** by default as in fio, at most
    ///   [`THINKTIME_NS_MAX`].
    /// - `verify`: see [`Verify`](super::Verify)'s `FromStr`.
    /// - `fdp` (switch), `dataplacement` (`fdp` or `none`), `fdp_pli` / `plids` (IDs and
    ///   ranges, at most [`PLACEMENT_IDS_MAX`](super::PLACEMENT_IDS_MAX)), `fdp_pli_select` /
    ///   `plid_select` (`roundrobin` or `random`): see `placement.rs`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), WorkloadError> {
        let value = value.trim();
        if key == "filename" {
            // Ignored for the device, kept for the seed (see `JobSpec::filename`).
            self.filename = (!value.is_empty()).then(|| value.to_string());
        }
        if IGNORED_KEYS.contains(&key) {
            return Ok(());
        }
        if !SUPPORTED_KEYS.contains(&key) {
            return Err(WorkloadError::UnknownKey {
                key: key.to_string(),
            });
        }
        if SWITCH_KEYS.contains(&key) {
            return self.set_switch(key, value);
        }
        if value.is_empty() {
            return Err(WorkloadError::MissingValue {
                key: key.to_string(),
            });
        }
        if self.set_request_shape(key, value)?
            || self.set_verify(key, value)?
            || self.set_extent_or_pace(key, value)?
            || self.set_zones(key, value)?
            || self.set_control(key, value)?
        {
            return Ok(());
        }
        unreachable!("key {key} is in SUPPORTED_KEYS but has no parser")
    }

    /// A switch (`SWITCH_KEYS`): bare or 1 turns it on, 0 off.
    fn set_switch(&mut self, key: &str, value: &str) -> Result<(), WorkloadError> {
        let on = match value {
            "" | "1" => true,
            "0" => false,
            _ => {
                return Err(value_error(
                    key,
                    value,
                    "is a switch: give it bare, or 0 or 1",
                ))
            }
        };
        match key {
            "new_group" => self.new_group = on,
            "norandommap" => self.norandommap = on,
            "random_sequence_stride" => self.random_sequence_stride = on,
            "time_based" => self.time_based = on,
            "fdp" => self.data_placement.enabled = on,
            "exitall" => self.exitall = on,
            _ => self.stonewall = on,
        }
        Ok(())
    }

    /// The keys that say what a request is and how many are in flight (name, direction,
    /// sizes, mix, depth, threads, offsets' distribution and seed, verification, pacing's
    /// process); `false` for any other key.
    fn set_request_shape(&mut self, key: &str, value: &str) -> Result<bool, WorkloadError> {
        match key {
            "name" => {
                check_name(value).map_err(|reason| value_error(key, value, &reason))?;
                self.name = value.to_string();
            }
            "rw" | "readwrite" => {
                let (mode, modifier) = value.split_once(':').unwrap_or((value, ""));
                let rw: super::RwMode = mode.parse().map_err(|e| rekey(e, key))?;
                let (mut run, mut gap) = (1, 0);
                if !modifier.trim().is_empty() {
                    if rw.is_random() {
                        run = parse_run(key, value, modifier)?;
                    } else {
                        gap = parse_gap(key, value, modifier)?;
                    }
                }
                (self.rw, self.rw_run, self.rw_gap_bytes) = (rw, run, gap);
            }
            "rw_sequencer" => {
                self.rw_sequencer = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            "bs" | "blocksize" => self.bs = BlockSize::Fixed(parse_bs(key, value)?),
            "bssplit" => self.bs = parse_bssplit(value)?,
            "bsrange" => self.bs = parse_bsrange(value)?,
            "wait_for" => {
                check_name(value).map_err(|reason| value_error(key, value, &reason))?;
                self.wait_for = Some(value.to_string());
            }
            "rwmixread" => self.rwmixread = parse_percent(key, value)?,
            "rwmixwrite" => self.rwmixread = 100 - parse_percent(key, value)?,
            "iodepth" => self.iodepth = parse_u32_in(key, value, 1, IODEPTH_MAX)?,
            "numjobs" => self.numjobs = parse_u32_in(key, value, 1, NUMJOBS_MAX)?,
            "rate_process" => {
                self.rate_process = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            "random_distribution" => self.random_distribution = value.parse()?,
            "randseed" => self.randseed = parse_randseed(value)?,
            "dataplacement" => {
                self.data_placement.enabled = match value {
                    "fdp" => true,
                    "none" => false,
                    _ => {
                        return Err(value_error(
                            key,
                            value,
                            "is not modelled: use fdp or none (the device has no streams)",
                        ))
                    }
                }
            }
            "fdp_pli" | "plids" => {
                let ids = super::placement::parse_ids(value)
                    .map_err(|reason| value_error(key, value, &reason))?;
                self.data_placement.ids = Some(ids);
            }
            "fdp_pli_select" | "plid_select" => {
                self.data_placement.select = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            "fill_device" => {
                self.fill_device = parse_flag(key, value)?;
                if self.fill_device {
                    // To the end of the device (`size` is ignored while it is on).
                    self.size_bytes = None;
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The verification keys (`verify`, `verify_pattern`, `verify_interval`, `do_verify`,
    /// `verify_backlog`); `false` for any other key.
    fn set_verify(&mut self, key: &str, value: &str) -> Result<bool, WorkloadError> {
        match key {
            "verify" => {
                self.verify = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            "verify_pattern" => {
                let pattern = super::vocabulary::parse_verify_pattern(value)
                    .map_err(|reason| value_error(key, value, &reason))?;
                self.verify_pattern = Some(pattern);
                // fio: a pattern alone verifies the header and the pattern.
                if self.verify == super::Verify::None {
                    self.verify = super::Verify::Meta;
                }
            }
            "verify_interval" => {
                let bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                if bytes == 0 {
                    return Err(value_error(key, value, "must be at least 1 byte"));
                }
                self.verify_interval_bytes = Some(bytes);
            }
            "do_verify" => self.do_verify = parse_flag(key, value)?,
            "verify_backlog" => {
                let n = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                self.verify_backlog = (n > 0).then_some(n);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// fio's strided zones (`zonemode`, `zonesize`, `zonerange`, `zoneskip`); `false` for any
    /// other key.
    fn set_zones(&mut self, key: &str, value: &str) -> Result<bool, WorkloadError> {
        match key {
            "zonemode" => {
                self.zonemode = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            "zonesize" | "zonerange" => {
                let bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                if bytes == 0 {
                    return Err(value_error(key, value, "must be more than 0 bytes"));
                }
                if key == "zonesize" {
                    self.zones.size_bytes = bytes;
                } else {
                    self.zones.range_bytes = Some(bytes);
                }
            }
            "zoneskip" => {
                // fio also takes a count of zones, `Nz`.
                self.zones.skip_bytes = match value.strip_suffix(['z', 'Z']) {
                    Some(count) => {
                        let zones: u64 = count
                            .trim()
                            .parse()
                            .map_err(|_| value_error(key, value, "Nz must be a count of zones"))?;
                        zones.saturating_mul(self.zones.size_bytes)
                    }
                    None => nvarray_units::parse_size(value)
                        .map_err(|e| size_value_error(key, value, &e))?,
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The keys that say where, how much and how fast (region, counts, sizes, times, rates);
    /// `false` for any other key.
    fn set_extent_or_pace(&mut self, key: &str, value: &str) -> Result<bool, WorkloadError> {
        match key {
            "ramp_time" => {
                self.ramp_time_ns = parse_duration_limited(key, value, NS_PER_S, RAMP_TIME_NS_MAX)?;
            }
            "runtime" | "timeout" => {
                let runtime_ns = parse_duration_limited(key, value, NS_PER_S, RUNTIME_NS_MAX)?;
                self.runtime_ns = (runtime_ns > 0).then_some(runtime_ns);
                self.ends_by_size = runtime_ns == 0;
            }
            "offset_increment" => {
                self.offset_increment_bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
            }
            "loops" => self.loops = parse_u32_in(key, value, 1, LOOPS_MAX)?,
            "io_size" | "io_limit" => {
                let bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                self.io_size_bytes = (bytes > 0).then_some(bytes);
            }
            "rate" => {
                self.rate_bytes_per_s = parse_rate(key, value, "bytes per second such as 100m")?;
            }
            "rate_iops" => {
                self.rate_iops = parse_rate(key, value, "requests per second such as 50000")?;
            }
            "number_ios" => {
                let number_ios = nvarray_units::parse_size(value).map_err(|_| {
                    value_error(key, value, "must be a request count such as 1000000 or 1m")
                })?;
                if number_ios > NUMBER_IOS_MAX {
                    return Err(value_error(
                        key,
                        value,
                        &format!("must be at most {NUMBER_IOS_MAX} (0 means no limit)"),
                    ));
                }
                self.number_ios = (number_ios > 0).then_some(number_ios);
            }
            "offset" => {
                self.offset_bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
            }
            "blockalign" | "ba" => {
                let bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                if bytes == 0 {
                    return Err(value_error(key, value, "must be at least one device block"));
                }
                self.blockalign_bytes = Some(bytes);
            }
            "size" => {
                let size_bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                if size_bytes == 0 {
                    return Err(value_error(
                        key,
                        value,
                        "must be > 0 (leave it out to use the whole device after offset)",
                    ));
                }
                if !self.fill_device {
                    self.size_bytes = Some(size_bytes);
                }
            }
            "filesize" => {
                if value.contains(['-', ':', ',']) {
                    return Err(value_error(
                        key,
                        value,
                        "one size (a range picks each file's size at random; nvarray's job has one region)",
                    ));
                }
                let bytes = nvarray_units::parse_size(value)
                    .map_err(|e| size_value_error(key, value, &e))?;
                if bytes == 0 {
                    return Err(value_error(key, value, "must be > 0"));
                }
                // fio: the file's size, and the job's size when `size` is not given; nvarray's
                // one region takes `size` when both are.
                if self.size_bytes.is_none() && !self.fill_device {
                    self.size_bytes = Some(bytes);
                }
            }
            "thinktime" => {
                self.thinktime_ns =
                    parse_duration_limited(key, value, NS_PER_US, THINKTIME_NS_MAX)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A rate (`rate`, `rate_iops`): one value with fio's size suffixes, 0 for no cap. fio's
/// `READ,WRITE[,TRIM]` form is taken when every value is the same (`rate=300,300,300`);
/// different ones are refused: one cap for both directions.
fn parse_rate(key: &str, value: &str, what: &str) -> Result<Option<u64>, WorkloadError> {
    let parse = |v: &str| {
        nvarray_units::parse_size(v.trim())
            .map_err(|_| value_error(key, value, &format!("must be {what} (0: no cap)")))
    };
    let mut values = value.split(',').map(parse);
    let rate = values.next().expect("split gives one at least")?;
    for other in values {
        if other? != rate {
            return Err(value_error(
                key,
                value,
                "one value for reads and writes alike (separate read,write caps are not modelled)",
            ));
        }
    }
    Ok((rate > 0).then_some(rate))
}

/// Renames the key of a `Value` error, so `readwrite=x` complains about `readwrite`.
fn rekey(error: WorkloadError, key: &str) -> WorkloadError {
    match error {
        WorkloadError::Value { value, reason, .. } => WorkloadError::Value {
            key: key.to_string(),
            value,
            reason,
        },
        other => other,
    }
}

/// Turns a size error into a `Value` error for `key`, keeping its reason.
fn size_value_error(key: &str, value: &str, error: &SizeError) -> WorkloadError {
    value_error(key, value, error.reason())
}

/// fio's bool: 1 or 0.
pub(super) fn parse_flag(key: &str, value: &str) -> Result<bool, WorkloadError> {
    match value {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(value_error(key, value, "must be 0 or 1")),
    }
}

pub(super) fn parse_u32_in(
    key: &str,
    value: &str,
    min: u32,
    max: u32,
) -> Result<u32, WorkloadError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| value_error(key, value, &format!("must be an integer in {min}..={max}")))
}

fn parse_percent(key: &str, value: &str) -> Result<u8, WorkloadError> {
    let percent = parse_u32_in(key, value, 0, 100)?;
    Ok(u8::try_from(percent).expect("percent is at most 100"))
}

/// The `N` of `rw=randread:N`: requests per random jump. fio reads it with `atoi`, so a unit
/// after the digits is ignored (`8k` is 8).
fn parse_run(key: &str, value: &str, modifier: &str) -> Result<u32, WorkloadError> {
    let digits: String = modifier
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if digits.is_empty() {
        return Err(value_error(
            key,
            value,
            "needs a number of requests per random jump after ':' (randread:8)",
        ));
    }
    digits
        .parse()
        .map_err(|_| value_error(key, value, "has a run longer than 4294967295 requests"))
}

/// The `N` of `rw=read:N`: a size, negative to step backwards.
fn parse_gap(key: &str, value: &str, modifier: &str) -> Result<i64, WorkloadError> {
    let modifier = modifier.trim();
    let (negative, size) = match modifier.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, modifier.strip_prefix('+').unwrap_or(modifier)),
    };
    let bytes = nvarray_units::parse_size(size).map_err(|e| size_value_error(key, value, &e))?;
    let bytes = i64::try_from(bytes)
        .map_err(|_| value_error(key, value, "has a gap larger than 2^63 bytes"))?;
    Ok(if negative { -bytes } else { bytes })
}

fn parse_randseed(value: &str) -> Result<u64, WorkloadError> {
    let parsed = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| {
        value_error(
            "randseed",
            value,
            "must be an unsigned 64-bit integer, decimal or 0x hex",
        )
    })
}

pub(super) fn parse_duration_limited(
    key: &str,
    value: &str,
    default_unit_ns: u64,
    max_ns: u64,
) -> Result<u64, WorkloadError> {
    let unit = if default_unit_ns == NS_PER_S {
        "seconds"
    } else {
        "microseconds"
    };
    let too_large = || value_error(key, value, &format!("must be at most {max_ns} ns"));
    let duration_ns = nvarray_units::parse_duration_ns(value, default_unit_ns).map_err(|e| {
        match e.kind() {
            // A well-formed number that overflows is too large.
            DurationErrorKind::Overflow => too_large(),
            // A well-formed number that is not whole nanoseconds: say so.
            DurationErrorKind::NotWholeNanoseconds | DurationErrorKind::FractionTooLong => {
                value_error(key, value, e.reason())
            }
            // DefaultUnitZero cannot happen (the default units are constants) and reads as
            // malformed if it ever does.
            DurationErrorKind::Malformed | DurationErrorKind::DefaultUnitZero => {
                let reason = format!(
                    "must be a number with an optional unit, such as 10, 500us, 1.5ms, 5s, 2m, \
                     1h (no suffix: {unit})"
                );
                value_error(key, value, &reason)
            }
        }
    })?;
    if duration_ns > max_ns {
        return Err(too_large());
    }
    Ok(duration_ns)
}

fn parse_len(key: &str, value: &str) -> Result<u32, WorkloadError> {
    let reason = format!(
        "must be a size from 1 to {} bytes, such as 4k",
        BS_BYTES_MAX
    );
    let len_bytes = nvarray_units::parse_size(value).map_err(|e| match e.kind() {
        // A size refused for a reason the range does not explain says why.
        SizeErrorKind::IecSuffix
        | SizeErrorKind::NotWholeBytes
        | SizeErrorKind::FractionTooLong => value_error(key, value, e.reason()),
        SizeErrorKind::Malformed | SizeErrorKind::Percentage | SizeErrorKind::Overflow => {
            value_error(key, value, &reason)
        }
    })?;
    if !(1..=u64::from(BS_BYTES_MAX)).contains(&len_bytes) {
        return Err(value_error(key, value, &reason));
    }
    Ok(u32::try_from(len_bytes).expect("bounded by BS_BYTES_MAX"))
}

fn parse_bs(key: &str, value: &str) -> Result<u32, WorkloadError> {
    if value.contains(',') {
        return Err(value_error(
            key,
            value,
            "separate read,write sizes are not supported; give one size such as 4k",
        ));
    }
    parse_len(key, value)
}

/// fio's `bsrange=MIN-MAX`: every request a multiple of MIN up to MAX, each equally likely
/// (what fio's draw, `min + max x U` rounded down to a multiple of MIN and capped at MAX,
/// gives when MAX is a multiple of MIN).
fn parse_bsrange(value: &str) -> Result<BlockSize, WorkloadError> {
    const KEY: &str = "bsrange";
    if value.contains(',') {
        return Err(value_error(
            KEY,
            value,
            "separate read,write ranges are not supported; give one range such as 4k-64k",
        ));
    }
    let Some((min, max)) = value.split_once('-') else {
        return Err(value_error(KEY, value, "must look like 4k-64k (MIN-MAX)"));
    };
    let (min, max) = (parse_len(KEY, min.trim())?, parse_len(KEY, max.trim())?);
    if min > max || max % min != 0 {
        return Err(value_error(
            KEY,
            value,
            "MAX must be a multiple of MIN and at least MIN (lengths are multiples of MIN)",
        ));
    }
    Ok(if min == max {
        BlockSize::Fixed(min)
    } else {
        BlockSize::Range { min, max }
    })
}

fn parse_bssplit(value: &str) -> Result<BlockSize, WorkloadError> {
    const KEY: &str = "bssplit";
    const FORMAT: &str = "must look like 4k/50:64k/50 (LEN/PERCENT pairs joined by ':')";
    if value.contains(',') {
        return Err(value_error(
            KEY,
            value,
            "separate read,write splits are not supported; give one split such as 4k/50:64k/50",
        ));
    }
    let mut entries = Vec::new();
    for entry in value.split(':') {
        if entries.len() == BSSPLIT_ENTRIES_MAX {
            return Err(value_error(
                KEY,
                value,
                &format!("must have at most {BSSPLIT_ENTRIES_MAX} entries"),
            ));
        }
        let Some((len_text, percent_text)) = entry.split_once('/') else {
            return Err(value_error(KEY, value, FORMAT));
        };
        let len_bytes = parse_len(KEY, len_text)?;
        let percent = parse_percent(KEY, percent_text.trim()).map_err(|_| {
            value_error(KEY, value, "each percentage must be an integer in 0..=100")
        })?;
        entries.push((len_bytes, u32::from(percent)));
    }
    let block_size = BlockSize::Split(entries);
    check_block_size(&block_size).map_err(|reason| value_error(KEY, value, &reason))?;
    Ok(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Distribution, RateProcess, RwMode, Verify, NAME_BYTES_MAX};

    fn d() -> JobSpec {
        JobSpec::default()
    }

    /// Applies `key=value` to a default job and compares the whole job, or the error message.
    fn check(key: &str, value: &str, expected: Result<JobSpec, &str>) {
        let mut job = d();
        let actual = job
            .set(key, value)
            .map(|()| job.clone())
            .map_err(|e| e.to_string());
        if actual.is_err() {
            assert_eq!(job, d(), "a failed set({key:?}, {value:?}) changed the job");
        }
        assert_eq!(
            actual,
            expected.map_err(str::to_string),
            "set({key:?}, {value:?})"
        );
    }

    #[test]
    fn set_name() {
        check(
            "name",
            "seq-reader",
            Ok(JobSpec {
                name: "seq-reader".into(),
                ..d()
            }),
        );
        check(
            "name",
            "  padded ",
            Ok(JobSpec {
                name: "padded".into(),
                ..d()
            }),
        );
        check("name", "", Err("name: needs a value, write name=VALUE"));
        let long = "x".repeat(NAME_BYTES_MAX + 1);
        check(
            "name",
            &long,
            Err(&format!(
                "name: must be 1 to 255 bytes without control characters, got '{long}'"
            )),
        );
        check(
            "name",
            "a\u{7}b",
            Err("name: must be 1 to 255 bytes without control characters, got 'a\u{7}b'"),
        );
    }

    #[test]
    fn set_rw() {
        for (value, rw) in [
            ("read", RwMode::Read),
            ("write", RwMode::Write),
            ("randread", RwMode::RandRead),
            ("randwrite", RwMode::RandWrite),
            ("rw", RwMode::Rw),
            ("readwrite", RwMode::Rw),
            ("randrw", RwMode::RandRw),
        ] {
            check("rw", value, Ok(JobSpec { rw, ..d() }));
            check("readwrite", value, Ok(JobSpec { rw, ..d() }));
        }
        let reason = "must be one of read, write, randread, randwrite, rw (readwrite), randrw, \
                      with an optional :N (trim modes are not supported)";
        for bad in ["trim", "randtrim", "trimwrite", "READ", "rand"] {
            check("rw", bad, Err(&format!("rw: {reason}, got '{bad}'")));
        }
        // `:N`: requests per random jump (fio's atoi: a unit is ignored), or a signed gap.
        for (value, rw, rw_run, rw_gap_bytes) in [
            ("randrw:8", RwMode::RandRw, 8, 0),
            ("randread:8k", RwMode::RandRead, 8, 0),
            ("randread:0", RwMode::RandRead, 0, 0),
            ("randread:", RwMode::RandRead, 1, 0),
            ("read:-8k", RwMode::Read, 1, -8192),
            ("write:112k", RwMode::Write, 1, 112 << 10),
            ("rw:+4k", RwMode::Rw, 1, 4096),
        ] {
            let job = JobSpec {
                rw,
                rw_run,
                rw_gap_bytes,
                ..d()
            };
            check("rw", value, Ok(job));
        }
        check(
            "rw",
            "randread:x",
            Err(
                "rw: needs a number of requests per random jump after ':' (randread:8), got \
                 'randread:x'",
            ),
        );
        check(
            "rw",
            "read:8q",
            Err(
                "rw: expected an unsigned number with an optional suffix k, m, g, t or p \
                 (powers of 1024, optionally followed by b, any case), or 0x followed by hex \
                 digits, got 'read:8q'",
            ),
        );
        check(
            "rw_sequencer",
            "identical:2",
            Ok(JobSpec {
                rw_sequencer: crate::spec::RwSequencer::Identical,
                ..d()
            }),
        );
        check(
            "rw_sequencer",
            "random",
            Err("rw_sequencer: must be sequential or identical, got 'random'"),
        );
        check(
            "readwrite",
            "x",
            Err(&format!("readwrite: {reason}, got 'x'")),
        );
    }

    #[test]
    fn set_bs() {
        check(
            "bs",
            "4k",
            Ok(JobSpec {
                bs: BlockSize::Fixed(4096),
                ..d()
            }),
        );
        check(
            "bs",
            "512",
            Ok(JobSpec {
                bs: BlockSize::Fixed(512),
                ..d()
            }),
        );
        check(
            "blocksize",
            "128k",
            Ok(JobSpec {
                bs: BlockSize::Fixed(128 << 10),
                ..d()
            }),
        );
        check(
            "bs",
            "1g",
            Ok(JobSpec {
                bs: BlockSize::Fixed(1 << 30),
                ..d()
            }),
        );
        let reason = "must be a size from 1 to 1073741824 bytes, such as 4k";
        check("bs", "0", Err(&format!("bs: {reason}, got '0'")));
        check("bs", "2g", Err(&format!("bs: {reason}, got '2g'")));
        check("bs", "4q", Err(&format!("bs: {reason}, got '4q'")));
        check(
            "bs",
            "4k,8k",
            Err(
                "bs: separate read,write sizes are not supported; give one size such as 4k, \
                 got '4k,8k'",
            ),
        );
        check(
            "bs",
            "4KiB",
            Err(
                "bs: IEC suffixes (KiB, MiB, ...) are refused because fio's default \
                 kb_base=1024 reads them as powers of 1000; write 4k for 4096 bytes, got '4KiB'",
            ),
        );
        check(
            "bs",
            "0.5k",
            Ok(JobSpec {
                bs: BlockSize::Fixed(512),
                ..d()
            }),
        );
        check(
            "bs",
            "1.3",
            Err(
                "bs: a fraction must come to a whole number of bytes, as 0.5k (512) does, \
                 got '1.3'",
            ),
        );
    }

    #[test]
    fn set_bssplit() {
        check(
            "bssplit",
            "4k/50:64k/50",
            Ok(JobSpec {
                bs: BlockSize::Split(vec![(4096, 50), (65536, 50)]),
                ..d()
            }),
        );
        check(
            "bssplit",
            "4k/10:8k/0:16k/90",
            Ok(JobSpec {
                bs: BlockSize::Split(vec![(4096, 10), (8192, 0), (16384, 90)]),
                ..d()
            }),
        );
        check(
            "bssplit",
            "4k/100",
            Ok(JobSpec {
                bs: BlockSize::Split(vec![(4096, 100)]),
                ..d()
            }),
        );
        check(
            "bssplit",
            "4k/50:64k/40",
            Err("bssplit: percentages must sum to 100, they sum to 90, got '4k/50:64k/40'"),
        );
        check(
            "bssplit",
            "4k/50:64k",
            Err(
                "bssplit: must look like 4k/50:64k/50 (LEN/PERCENT pairs joined by ':'), \
                 got '4k/50:64k'",
            ),
        );
        check(
            "bssplit",
            "4k/150",
            Err("bssplit: each percentage must be an integer in 0..=100, got '4k/150'"),
        );
        check(
            "bssplit",
            "0/100",
            Err("bssplit: must be a size from 1 to 1073741824 bytes, such as 4k, got '0'"),
        );
        check(
            "bssplit",
            "4k/50:64k/50,8k/100",
            Err(
                "bssplit: separate read,write splits are not supported; give one split such as \
                 4k/50:64k/50, got '4k/50:64k/50,8k/100'",
            ),
        );
        let too_many = vec!["4k/0"; BSSPLIT_ENTRIES_MAX + 1].join(":");
        check(
            "bssplit",
            &too_many,
            Err(&format!(
                "bssplit: must have at most 64 entries, got '{too_many}'"
            )),
        );
    }

    #[test]
    fn bs_and_bssplit_replace_each_other() {
        let mut job = d();
        job.set("bssplit", "4k/50:8k/50").unwrap();
        job.set("bs", "16k").unwrap();
        assert_eq!(job.bs, BlockSize::Fixed(16384));
        job.set("bssplit", "4k/100").unwrap();
        assert_eq!(job.bs, BlockSize::Split(vec![(4096, 100)]));
    }

    #[test]
    fn set_integers() {
        check(
            "rwmixread",
            "70",
            Ok(JobSpec {
                rwmixread: 70,
                ..d()
            }),
        );
        check(
            "rwmixread",
            "0",
            Ok(JobSpec {
                rwmixread: 0,
                ..d()
            }),
        );
        check(
            "rwmixread",
            "100",
            Ok(JobSpec {
                rwmixread: 100,
                ..d()
            }),
        );
        check(
            "rwmixwrite",
            "30",
            Ok(JobSpec {
                rwmixread: 70,
                ..d()
            }),
        );
        check(
            "rwmixwrite",
            "100",
            Ok(JobSpec {
                rwmixread: 0,
                ..d()
            }),
        );
        check(
            "rwmixread",
            "101",
            Err("rwmixread: must be an integer in 0..=100, got '101'"),
        );
        check(
            "rwmixwrite",
            "-1",
            Err("rwmixwrite: must be an integer in 0..=100, got '-1'"),
        );
        check("iodepth", "32", Ok(JobSpec { iodepth: 32, ..d() }));
        check(
            "iodepth",
            "4096",
            Ok(JobSpec {
                iodepth: 4096,
                ..d()
            }),
        );
        check(
            "iodepth",
            "0",
            Err("iodepth: must be an integer in 1..=4096, got '0'"),
        );
        check(
            "iodepth",
            "4097",
            Err("iodepth: must be an integer in 1..=4096, got '4097'"),
        );
        check(
            "iodepth",
            "8k",
            Err("iodepth: must be an integer in 1..=4096, got '8k'"),
        );
        check("numjobs", "4", Ok(JobSpec { numjobs: 4, ..d() }));
        check(
            "numjobs",
            "1024",
            Ok(JobSpec {
                numjobs: 1024,
                ..d()
            }),
        );
        check(
            "numjobs",
            "0",
            Err("numjobs: must be an integer in 1..=1024, got '0'"),
        );
        check(
            "numjobs",
            "1025",
            Err("numjobs: must be an integer in 1..=1024, got '1025'"),
        );
        check(
            "number_ios",
            "1000",
            Ok(JobSpec {
                number_ios: Some(1000),
                ..d()
            }),
        );
        check(
            "number_ios",
            "1m",
            Ok(JobSpec {
                number_ios: Some(1 << 20),
                ..d()
            }),
        );
        check(
            "number_ios",
            "0",
            Ok(JobSpec {
                number_ios: None,
                ..d()
            }),
        );
        check(
            "number_ios",
            "2t",
            Err("number_ios: must be at most 1099511627776 (0 means no limit), got '2t'"),
        );
        check(
            "number_ios",
            "many",
            Err("number_ios: must be a request count such as 1000000 or 1m, got 'many'"),
        );
        check(
            "randseed",
            "42",
            Ok(JobSpec {
                randseed: 42,
                ..d()
            }),
        );
        check(
            "randseed",
            "0xdeadbeef",
            Ok(JobSpec {
                randseed: 0xdead_beef,
                ..d()
            }),
        );
        check(
            "randseed",
            "18446744073709551615",
            Ok(JobSpec {
                randseed: u64::MAX,
                ..d()
            }),
        );
        check(
            "randseed",
            "-3",
            Err("randseed: must be an unsigned 64-bit integer, decimal or 0x hex, got '-3'"),
        );
    }

    #[test]
    fn set_durations() {
        let runtime_too_large = "must be at most 2592000000000000 ns";
        let runtime_malformed = "must be a number with an optional unit, such as 10, 500us, \
                                 1.5ms, 5s, 2m, 1h (no suffix: seconds)";
        let not_whole_ns = "a fraction must come to a whole number of nanoseconds, as 1.5us \
                            (1500ns) does";
        check(
            "runtime",
            "10",
            Ok(JobSpec {
                runtime_ns: Some(10 * NS_PER_S),
                ..d()
            }),
        );
        check(
            "runtime",
            "500ms",
            Ok(JobSpec {
                runtime_ns: Some(500_000_000),
                ..d()
            }),
        );
        check(
            "runtime",
            "2m",
            Ok(JobSpec {
                runtime_ns: Some(120 * NS_PER_S),
                ..d()
            }),
        );
        check(
            "runtime",
            "1h",
            Ok(JobSpec {
                runtime_ns: Some(3_600 * NS_PER_S),
                ..d()
            }),
        );
        check(
            "runtime",
            "30d",
            Ok(JobSpec {
                runtime_ns: Some(RUNTIME_NS_MAX),
                ..d()
            }),
        );
        check(
            "runtime",
            "0",
            Ok(JobSpec {
                runtime_ns: None,
                ends_by_size: true,
                ..d()
            }),
        );
        check(
            "runtime",
            "31d",
            Err(&format!("runtime: {runtime_too_large}, got '31d'")),
        );
        // Fractions that come to whole nanoseconds, with a unit or in the default seconds.
        check(
            "runtime",
            "1.5s",
            Ok(JobSpec {
                runtime_ns: Some(1_500_000_000),
                ..d()
            }),
        );
        check(
            "runtime",
            "0.5",
            Ok(JobSpec {
                runtime_ns: Some(500_000_000),
                ..d()
            }),
        );
        check(
            "runtime",
            "0.5ns",
            Err(&format!("runtime: {not_whole_ns}, got '0.5ns'")),
        );
        check(
            "runtime",
            "0.0000000001",
            Err(&format!("runtime: {not_whole_ns}, got '0.0000000001'")),
        );
        check(
            "runtime",
            "1e3",
            Err(&format!("runtime: {runtime_malformed}, got '1e3'")),
        );
        check(
            "runtime",
            "99999999999999999999",
            Err(&format!(
                "runtime: {runtime_too_large}, got '99999999999999999999'"
            )),
        );
        let thinktime_too_large = "must be at most 60000000000 ns";
        let thinktime_malformed = "must be a number with an optional unit, such as 10, 500us, \
                                   1.5ms, 5s, 2m, 1h (no suffix: microseconds)";
        check(
            "thinktime",
            "2.5",
            Ok(JobSpec {
                thinktime_ns: 2_500,
                ..d()
            }),
        );
        check(
            "thinktime",
            "0.0005",
            Err(&format!("thinktime: {not_whole_ns}, got '0.0005'")),
        );
        check(
            "thinktime",
            "10",
            Ok(JobSpec {
                thinktime_ns: 10_000,
                ..d()
            }),
        );
        check(
            "thinktime",
            "2ms",
            Ok(JobSpec {
                thinktime_ns: 2_000_000,
                ..d()
            }),
        );
        check(
            "thinktime",
            "1m",
            Ok(JobSpec {
                thinktime_ns: 60 * NS_PER_S,
                ..d()
            }),
        );
        check(
            "thinktime",
            "0",
            Ok(JobSpec {
                thinktime_ns: 0,
                ..d()
            }),
        );
        check(
            "thinktime",
            "61s",
            Err(&format!("thinktime: {thinktime_too_large}, got '61s'")),
        );
        check(
            "thinktime",
            "soon",
            Err(&format!("thinktime: {thinktime_malformed}, got 'soon'")),
        );
    }

    #[test]
    fn set_random_distribution() {
        check("random_distribution", "random", Ok(d()));
        check(
            "random_distribution",
            "zipf:1.2",
            Ok(JobSpec {
                random_distribution: Distribution::Zipf {
                    theta: 1.2,
                    center: None,
                },
                ..d()
            }),
        );
        check(
            "random_distribution",
            "zipf:1",
            Err(
                "random_distribution: zipf theta must not be 1, as fio refuses it (its generator \
                 divides by 1 - theta): give 0.99 or 1.01, got 'zipf:1'",
            ),
        );
        check(
            "random_distribution",
            "zipf:100",
            Ok(JobSpec {
                random_distribution: Distribution::Zipf {
                    theta: 100.0,
                    center: None,
                },
                ..d()
            }),
        );
        check(
            "random_distribution",
            "zipf:0",
            Err("random_distribution: zipf theta must be in (0, 100], got 'zipf:0'"),
        );
        check(
            "random_distribution",
            "zipf:100.5",
            Err("random_distribution: zipf theta must be in (0, 100], got 'zipf:100.5'"),
        );
        check(
            "random_distribution",
            "zipf:NaN",
            Err("random_distribution: zipf theta must be in (0, 100], got 'zipf:NaN'"),
        );
        check(
            "random_distribution",
            "zipf:",
            Err("random_distribution: zipf theta must be in (0, 100], got 'zipf:'"),
        );
        check(
            "random_distribution",
            "pareto:0.9",
            Ok(JobSpec {
                random_distribution: Distribution::Pareto {
                    h: 0.9,
                    center: None,
                },
                ..d()
            }),
        );
        check(
            "random_distribution",
            "uniform",
            Err(
                "random_distribution: must be random, zipf:THETA, pareto[:H], normal[:DEV], \
                 zoned:A/S[:A/S...], zoned_abs:A/SIZE[:A/SIZE...] or sequence:B[,B...], got \
                 'uniform'",
            ),
        );
    }

    #[test]
    fn set_region() {
        check(
            "offset",
            "1g",
            Ok(JobSpec {
                offset_bytes: 1 << 30,
                ..d()
            }),
        );
        check("offset", "0", Ok(d()));
        check(
            "size",
            "8g",
            Ok(JobSpec {
                size_bytes: Some(8 << 30),
                ..d()
            }),
        );
        check(
            "size",
            "0",
            Err("size: must be > 0 (leave it out to use the whole device after offset), got '0'"),
        );
        check(
            "size",
            "50%",
            Err(
                "size: percentages of the device are not supported; give a byte count such as \
                 1g, got '50%'",
            ),
        );
        check(
            "offset",
            "1.5g",
            Ok(JobSpec {
                offset_bytes: 3 << 29,
                ..d()
            }),
        );
        check(
            "offset",
            "0.3k",
            Err(
                "offset: a fraction must come to a whole number of bytes, as 0.5k (512) does, \
                 got '0.3k'",
            ),
        );
        check(
            "size",
            "4KiB",
            Err(&format!(
                "size: {}, got '4KiB'",
                SizeErrorKind::IecSuffix.reason()
            )),
        );
        check(
            "offset",
            "1.5x",
            Err(&format!(
                "offset: {}, got '1.5x'",
                SizeErrorKind::Malformed.reason()
            )),
        );
    }

    #[test]
    fn set_keys_ignored_unknown_and_missing() {
        for key in IGNORED_KEYS {
            check(key, "", Ok(d()));
        }
        // Switches that change the run: `nvarray fio` ends a job without `time_based` by its
        // size; `norandommap` turns fio's random map off.
        check(
            "time_based",
            "",
            Ok(JobSpec {
                time_based: true,
                ..d()
            }),
        );
        check(
            "norandommap",
            "1",
            Ok(JobSpec {
                norandommap: true,
                ..d()
            }),
        );
        check("norandommap", "0", Ok(d()));
        check("ioengine", "io_uring", Ok(d()));
        check(
            "filename",
            "/dev/nvme0n1",
            Ok(JobSpec {
                filename: Some("/dev/nvme0n1".into()),
                ..d()
            }),
        );
        check("direct", "1", Ok(d()));
        // Accepted either way, noted by the front end: no page cache is modelled.
        check("direct", "0", Ok(d()));
        let unknown = WorkloadError::UnknownKey {
            key: "iodpeth".into(),
        }
        .to_string();
        assert!(unknown.starts_with(
            "unknown key 'iodpeth' (did you mean 'iodepth'?); supported keys: name, rw, "
        ));
        assert!(unknown.ends_with(&format!(
            "accepted and ignored: {}",
            IGNORED_KEYS.join(", ")
        )));
        assert!(unknown
            .contains("accepted and ignored: ioengine, filename, allow_file_create, direct, "));
        check("iodpeth", "4", Err(&unknown));
        check(
            "exitall_on_error",
            "",
            Err(&WorkloadError::UnknownKey {
                key: "exitall_on_error".into(),
            }
            .to_string()),
        );
        for key in SUPPORTED_KEYS.iter().filter(|k| !SWITCH_KEYS.contains(k)) {
            check(
                key,
                "  ",
                Err(&format!("{key}: needs a value, write {key}=VALUE")),
            );
        }
    }

    #[test]
    fn verify_takes_fio_names_and_refuses_others() {
        let mut job = d();
        assert_eq!(job.verify, Verify::None);
        for (value, want) in [
            ("crc32c", Verify::Crc32c),
            ("0", Verify::None),
            ("1", Verify::Crc32c),
            ("none", Verify::None),
            ("crc32c-intel", Verify::Crc32c),
            ("crc64", Verify::Crc64),
            ("md5", Verify::Md5),
            ("sha256", Verify::Sha256),
            ("meta", Verify::Meta),
            ("pattern", Verify::Pattern),
            ("none", Verify::None),
        ] {
            job.set("verify", value).unwrap();
            assert_eq!(job.verify, want, "verify={value}");
        }
        let err = job.set("verify", "sha512").unwrap_err().to_string();
        assert!(err.contains("not built"), "{err}");
        assert_eq!(job.verify, Verify::None, "a refused value changed the job");
        // A pattern alone turns on fio's header-and-pattern check; its forms.
        job.set("verify_pattern", "0xaa555aa5").unwrap();
        assert_eq!(job.verify, Verify::Meta);
        assert_eq!(
            job.verify_pattern.as_deref(),
            Some(&[0xaa, 0x55, 0x5a, 0xa5][..])
        );
        for (text, bytes) in [
            ("\"ab\"", &b"ab"[..]),
            ("258", &[2, 1][..]),
            ("0xabc", &[0x0a, 0xbc][..]),
            ("0x01 \"z\"", &[1, b'z'][..]),
        ] {
            job.set("verify_pattern", text).unwrap();
            assert_eq!(job.verify_pattern.as_deref(), Some(bytes), "{text}");
        }
        for bad in ["%o", "'/no/such/pattern'", "'open", "0x", "\"open", "xyz"] {
            assert!(job.set("verify_pattern", bad).is_err(), "{bad}");
        }
        // A 'file' gives its bytes, its first 512 (fio's most).
        let dir = std::env::temp_dir().join(format!("nvarray-pattern-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.bin");
        std::fs::write(&file, (0..600u32).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
        job.set("verify_pattern", &format!("0xff '{}'", file.display()))
            .unwrap();
        let pattern = job.verify_pattern.clone().unwrap();
        assert_eq!(pattern.len(), 513);
        assert_eq!((pattern[0], pattern[1], pattern[512]), (0xff, 0, 255));
        std::fs::remove_dir_all(&dir).unwrap();
        // verify=pattern without one is refused when the job is checked.
        let mut lone = d();
        lone.set("verify", "pattern").unwrap();
        let err = lone
            .validate(1 << 30, 512, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.contains("give verify_pattern"), "{err}");
    }

    /// Sizes and durations mean in a job what they mean in a device override: both are read
    /// by `nvarray-units` (`nvarray-model` has the same test for `--set`).
    #[test]
    fn fio_keys_read_numbers_as_nvarray_units_does() {
        for text in [
            "4k", "0.5k", "1.5m", "0x1000", "512b", "3gb", "4KiB", "1.3", "0.3k",
        ] {
            let mut job = d();
            let expected = nvarray_units::parse_size(text).map_err(|e| e.reason().to_string());
            let actual = job
                .set("size", text)
                .map(|()| job.size_bytes.expect("size is set"))
                .map_err(|e| match e {
                    WorkloadError::Value { reason, .. } => reason,
                    other => other.to_string(),
                });
            assert_eq!(actual, expected, "size={text}");
        }
        for text in ["1us", "1.5us", "128us", "2ms", "0.5ns"] {
            let mut job = d();
            let expected = nvarray_units::parse_duration_ns(text, NS_PER_US)
                .map_err(|e| e.reason().to_string());
            let actual = job
                .set("thinktime", text)
                .map(|()| job.thinktime_ns)
                .map_err(|e| match e {
                    WorkloadError::Value { reason, .. } => reason,
                    other => other.to_string(),
                });
            assert_eq!(actual, expected, "thinktime={text}");
        }
    }

    #[test]
    fn rates_io_size_and_their_refusals() {
        let mut job = d();
        job.set("rate_iops", "50k").unwrap();
        job.set("rate", "100m").unwrap();
        job.set("rate_process", "poisson").unwrap();
        job.set("io_limit", "1g").unwrap();
        assert_eq!(job.rate_iops, Some(50 * 1024));
        assert_eq!(job.rate_bytes_per_s, Some(100 << 20));
        assert_eq!(job.rate_process, RateProcess::Poisson);
        assert_eq!(job.io_size_bytes, Some(1 << 30));
        job.set("rate_iops", "0").unwrap();
        assert_eq!(job.rate_iops, None, "0: no cap");
        let e = job.set("rate", "1m,2m").unwrap_err().to_string();
        assert!(e.contains("one value for reads and writes"), "{e}");
        let e = job.set("rate_process", "bursty").unwrap_err().to_string();
        assert!(e.contains("linear or poisson"), "{e}");
        assert!(job.set("randrepeat", "0").is_ok());
        assert!(job.set("buffered", "1").is_ok());
    }

    #[test]
    fn an_unknown_key_names_the_closest_known_one() {
        for (typo, meant) in [
            ("iodept", "iodepth"),
            ("rate_iop", "rate_iops"),
            ("blocksze", "blocksize"),
            ("runtme", "runtime"),
        ] {
            let e = d().set(typo, "1").unwrap_err().to_string();
            assert!(
                e.contains(&format!("did you mean '{meant}'")),
                "{typo}: {e}"
            );
        }
        let e = d().set("xyzzy", "1").unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }
}
