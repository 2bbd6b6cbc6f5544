//! The parsers of fio's values that several keys share: sizes, durations, bounded integers,
//! switches and flags, rates, block sizes and `rw`'s `:N` modifier. Each turns a bad value
//! into a [`WorkloadError::Value`] naming the key as the user spelled it. The table of keys
//! (`key_table.rs`) calls them.
//!
//! Sizes and durations are read by `nvarray-units`, so a value means here what it means in a
//! device override.

use std::str::FromStr;

use nvarray_units::{DurationErrorKind, SizeError, SizeErrorKind};

use super::limits::{BSSPLIT_ENTRIES_MAX, BS_BYTES_MAX};
use super::validate::check_block_size;
use super::vocabulary::{BlockSize, RwMode};
use crate::error::{value_error, WorkloadError};
use crate::units::NS_PER_S;

/// A rate (`rate`, `rate_iops`): one value with fio's size suffixes, 0 for no cap. fio's
/// `READ,WRITE[,TRIM]` form is taken when every value is the same (`rate=300,300,300`);
/// different ones are refused: one cap for both directions.
pub(super) fn parse_rate(key: &str, value: &str, what: &str) -> Result<Option<u64>, WorkloadError> {
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

/// `rw`'s value: the mode, then its `:N`, requests per random jump for a random mode (1
/// without one) or the gap between sequential requests (0 without one).
pub(super) fn parse_rw(key: &str, value: &str) -> Result<(RwMode, u32, i64), WorkloadError> {
    let (mode, modifier) = value.split_once(':').unwrap_or((value, ""));
    let rw: RwMode = mode.parse().map_err(|e| rekey(e, key))?;
    let (mut run, mut gap) = (1, 0);
    if !modifier.trim().is_empty() {
        if rw.is_random() {
            run = parse_run(key, value, modifier)?;
        } else {
            gap = parse_gap(key, value, modifier)?;
        }
    }
    Ok((rw, run, gap))
}

/// A value one of whose names `T` reads (`rate_process`, `verify`, `zonemode`, ...).
pub(super) fn parse_named<T: FromStr<Err = String>>(
    key: &str,
    value: &str,
) -> Result<T, WorkloadError> {
    value
        .parse()
        .map_err(|reason: String| value_error(key, value, &reason))
}

/// A size with fio's suffixes.
pub(super) fn parse_size(key: &str, value: &str) -> Result<u64, WorkloadError> {
    nvarray_units::parse_size(value).map_err(|e| size_value_error(key, value, &e))
}

/// A size that must not be 0, `why` saying so.
pub(super) fn parse_size_nonzero(key: &str, value: &str, why: &str) -> Result<u64, WorkloadError> {
    let bytes = parse_size(key, value)?;
    if bytes == 0 {
        return Err(value_error(key, value, why));
    }
    Ok(bytes)
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
pub(super) fn size_value_error(key: &str, value: &str, error: &SizeError) -> WorkloadError {
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

pub(super) fn parse_percent(key: &str, value: &str) -> Result<u8, WorkloadError> {
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

pub(super) fn parse_randseed(value: &str) -> Result<u64, WorkloadError> {
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

pub(super) fn parse_bs(key: &str, value: &str) -> Result<u32, WorkloadError> {
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
pub(super) fn parse_bsrange(value: &str) -> Result<BlockSize, WorkloadError> {
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

pub(super) fn parse_bssplit(value: &str) -> Result<BlockSize, WorkloadError> {
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
