//! The one table of the fio keys a job understands, [`KEYS`]: each entry holds a key's name
//! and fio's other names for it, how its value is read into a [`JobSpec`] (with the limit it
//! enforces), how the job's setting is written back for `fio_options`, and the range check a
//! job whose fields were written directly must pass. `JobSpec::set`, `JobSpec::fio_options`,
//! `JobSpec::check_fields` and the list of supported keys all read this table, so adding a
//! fio key is one entry here.
//!
//! Units are fio 3.33's (options.c): `runtime`, `ramp_time`, `thinktime_iotime` and the
//! steady-state times are seconds without a unit; `thinktime`, `thinktime_spin`,
//! `flow_sleep` and the latency target and window are microseconds.

use nvarray_units::{format_duration_ns, format_size};

use super::control::FLOW_WEIGHT_MAX;
use super::distribution::check_distribution;
use super::limits::{
    IODEPTH_MAX, NUMBER_IOS_MAX, NUMJOBS_MAX, RAMP_TIME_NS_MAX, RANDSEED_DEFAULT, RUNTIME_NS_MAX,
    THINKTIME_NS_MAX,
};
use super::parse::{
    parse_bs, parse_bsrange, parse_bssplit, parse_duration_limited, parse_flag, parse_named,
    parse_percent, parse_randseed, parse_rate, parse_rw, parse_size, parse_size_nonzero,
    parse_u32_in,
};
use super::placement::parse_ids;
use super::validate::{check_block_size, check_name};
use super::vocabulary::{parse_verify_pattern, BlockSize, Verify, ZoneMode};
use super::JobSpec;
use crate::error::{value_error, WorkloadError};
use crate::units::{NS_PER_S, NS_PER_US};

/// Most `loops` a job may run.
const LOOPS_MAX: u32 = 1_000_000;

/// The longest time of the steering options (think I/O time, latency window, flows, steady
/// state): an hour.
const CONTROL_TIME_NS_MAX: u64 = 3_600 * NS_PER_S;

/// One fio key.
pub(super) struct KeyDef {
    /// fio's name for the key, the one `fio_options` writes.
    pub name: &'static str,
    /// fio's other names for the same key (`readwrite` for `rw`).
    pub aliases: &'static [&'static str],
    /// How a value is read into a job.
    pub read: Read,
    /// How the job's setting is written back.
    pub write: Write,
    /// The range `read` enforces, checked on a job whose fields were written directly.
    pub check: Option<Check>,
}

/// A range check of a job's fields: an `Invalid` error naming the key when one is out.
pub(super) type Check = fn(&JobSpec) -> Result<(), WorkloadError>;

/// How a key's value is read.
pub(super) enum Read {
    /// A switch: given bare or 1 it is on, 0 off.
    Switch(fn(&mut JobSpec, bool)),
    /// A value (trimmed, never empty), read for the key as the user spelled it; on error the
    /// job is unchanged.
    Value(fn(&mut JobSpec, &str, &str) -> Result<(), WorkloadError>),
}

/// How a job's setting is written back as this key's value.
pub(super) enum Write {
    /// The value that sets it again, given the job and a default job; `None` when the job
    /// has the default.
    Value(fn(&JobSpec, &JobSpec) -> Option<String>),
    /// Never written under this name: another key writes the same setting (the entry says
    /// which).
    Never,
}

impl KeyDef {
    /// Whether `key` is this key or one of fio's other names for it.
    pub fn answers_to(&self, key: &str) -> bool {
        self.name == key || self.aliases.contains(&key)
    }
}

/// The entry of `key`, under any of its names.
pub(super) fn find(key: &str) -> Option<&'static KeyDef> {
    KEYS.iter().find(|def| def.answers_to(key))
}

/// Every key [`JobSpec::set`] understands, each name followed by fio's other names for it,
/// in the order `fio_options` writes them.
pub fn supported_keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter()
        .flat_map(|def| std::iter::once(def.name).chain(def.aliases.iter().copied()))
}

/// Stores a parsed value: the field changes only when the value parsed.
fn store<T>(field: &mut T, parsed: Result<T, WorkloadError>) -> Result<(), WorkloadError> {
    *field = parsed?;
    Ok(())
}

/// The value of a setting that differs from its default.
fn changed<T: PartialEq + ToString>(value: &T, default: &T) -> Option<String> {
    (value != default).then(|| value.to_string())
}

/// A size that is not 0, written with fio's suffixes.
fn nonzero_size(bytes: u64) -> Option<String> {
    (bytes != 0).then(|| format_size(bytes))
}

/// A time that is not 0, written with its unit.
fn nonzero_time(ns: u64) -> Option<String> {
    (ns != 0).then(|| format_duration_ns(ns))
}

/// A switch that is on.
fn on(switch: bool) -> Option<String> {
    switch.then(|| "1".to_string())
}

/// The block size when `key` (`bs`, `bssplit` or `bsrange`) is the key that writes it.
fn block_size(job: &JobSpec, d: &JobSpec, key: &str) -> Option<String> {
    (job.bs != d.bs && job.bs.key() == key).then(|| job.bs.to_string())
}

/// An out-of-range field of a job written directly.
fn invalid(key: &'static str, reason: String) -> Result<(), WorkloadError> {
    Err(WorkloadError::Invalid { key, reason })
}

/// fio's `rw` value of a job: the mode and its `:N`.
fn rw_value(job: &JobSpec, d: &JobSpec) -> Option<String> {
    if (job.rw, job.rw_run, job.rw_gap_bytes) == (d.rw, d.rw_run, d.rw_gap_bytes) {
        return None;
    }
    let modifier = if job.rw.is_random() && job.rw_run != 1 {
        format!(":{}", job.rw_run)
    } else if !job.rw.is_random() && job.rw_gap_bytes != 0 {
        let sign = if job.rw_gap_bytes < 0 { "-" } else { "" };
        format!(":{sign}{}", format_size(job.rw_gap_bytes.unsigned_abs()))
    } else {
        String::new()
    };
    Some(format!("{}{modifier}", job.rw))
}

/// `runtime`: a limit, or 0 for a job that ends by its size.
fn read_runtime(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    let runtime_ns = parse_duration_limited(key, value, NS_PER_S, RUNTIME_NS_MAX)?;
    job.runtime_ns = (runtime_ns > 0).then_some(runtime_ns);
    job.ends_by_size = runtime_ns == 0;
    Ok(())
}

/// `number_ios`: a count with size suffixes, 0 for no limit.
fn read_number_ios(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    let number_ios = nvarray_units::parse_size(value)
        .map_err(|_| value_error(key, value, "must be a request count such as 1000000 or 1m"))?;
    if number_ios > NUMBER_IOS_MAX {
        return Err(value_error(
            key,
            value,
            &format!("must be at most {NUMBER_IOS_MAX} (0 means no limit)"),
        ));
    }
    job.number_ios = (number_ios > 0).then_some(number_ios);
    Ok(())
}

/// `size`, ignored while `fill_device` is on.
fn read_size(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    let why = "must be > 0 (leave it out to use the whole device after offset)";
    let size_bytes = parse_size_nonzero(key, value, why)?;
    if !job.fill_device {
        job.size_bytes = Some(size_bytes);
    }
    Ok(())
}

/// `filesize`: fio's file size, and the job's size when `size` is not given; nvarray's one
/// region takes `size` when both are.
fn read_filesize(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    if value.contains(['-', ':', ',']) {
        return Err(value_error(
            key,
            value,
            "one size (a range picks each file's size at random; nvarray's job has one region)",
        ));
    }
    let bytes = parse_size_nonzero(key, value, "must be > 0")?;
    if job.size_bytes.is_none() && !job.fill_device {
        job.size_bytes = Some(bytes);
    }
    Ok(())
}

/// `verify_pattern`: on its own it verifies the header and the pattern, as in fio.
fn read_verify_pattern(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    let pattern = parse_verify_pattern(value).map_err(|reason| value_error(key, value, &reason))?;
    job.verify_pattern = Some(pattern);
    if job.verify == Verify::None {
        job.verify = Verify::Meta;
    }
    Ok(())
}

/// `zoneskip`: a size, or fio's count of zones `Nz`.
fn read_zoneskip(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    job.zones.skip_bytes = match value.strip_suffix(['z', 'Z']) {
        Some(count) => {
            let zones: u64 = count
                .trim()
                .parse()
                .map_err(|_| value_error(key, value, "Nz must be a count of zones"))?;
            zones.saturating_mul(job.zones.size_bytes)
        }
        None => parse_size(key, value)?,
    };
    Ok(())
}

/// `zonemode` with `zonesize`: strided zones need a size, a size needs strided zones, and
/// `zbd` is real fio's.
fn check_zone_mode(job: &JobSpec) -> Result<(), WorkloadError> {
    match (job.zonemode, job.zones.size_bytes) {
        (ZoneMode::None, size) if size > 0 => invalid(
            "zonesize",
            "needs zonemode=strided (fio: zonemode=none and zonesize are not compatible)"
                .to_string(),
        ),
        (ZoneMode::Strided, 0) => invalid("zonemode", "strided needs a zonesize".to_string()),
        (ZoneMode::Zbd, _) => invalid(
            "zonemode",
            "zbd works a zoned device's write pointers, which nvarray's generator does not: \
             run real fio through the channel engine on a [zns] device (docs/flash.md, \
             \"Zoned namespaces\")"
                .to_string(),
        ),
        _ => Ok(()),
    }
}

/// `dataplacement`: newer fio's `fdp` with a value.
fn read_data_placement(job: &mut JobSpec, key: &str, value: &str) -> Result<(), WorkloadError> {
    job.data_placement.enabled = match value {
        "fdp" => true,
        "none" => false,
        _ => {
            return Err(value_error(
                key,
                value,
                "is not modelled: use fdp or none (the device has no streams)",
            ))
        }
    };
    Ok(())
}

/// The placement IDs as `fdp_pli` takes them back.
fn placement_ids(job: &JobSpec) -> Option<String> {
    let ids = job.data_placement.ids.as_ref()?;
    let ids: Vec<String> = ids.iter().map(u16::to_string).collect();
    Some(ids.join(","))
}

/// An integer in `min..=max`, for `check`.
fn check_in<T: PartialOrd + std::fmt::Display>(
    key: &'static str,
    value: T,
    min: T,
    max: T,
) -> Result<(), WorkloadError> {
    if value < min || value > max {
        return invalid(key, format!("must be in {min}..={max}, got {value}"));
    }
    Ok(())
}

/// Every key, in the order `fio_options` writes them (fio's documentation's, mostly).
#[rustfmt::skip]
pub(super) const KEYS: &[KeyDef] = &[
    KeyDef {
        name: "name", aliases: &[],
        read: Read::Value(|job, key, v| {
            check_name(v).map_err(|reason| value_error(key, v, &reason))?;
            store(&mut job.name, Ok(v.to_string()))
        }),
        // Never written: the job's section header names it.
        write: Write::Never,
        check: Some(|job| match check_name(&job.name) {
            Err(reason) => invalid("name", format!("{reason}, got '{}'", job.name)),
            Ok(()) => Ok(()),
        }),
    },
    KeyDef {
        name: "rw", aliases: &["readwrite"],
        read: Read::Value(|job, key, v| {
            (job.rw, job.rw_run, job.rw_gap_bytes) = parse_rw(key, v)?;
            Ok(())
        }),
        write: Write::Value(rw_value),
        check: None,
    },
    KeyDef {
        name: "rw_sequencer", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.rw_sequencer, parse_named(key, v))),
        write: Write::Value(|job, d| changed(&job.rw_sequencer, &d.rw_sequencer)),
        check: None,
    },
    // `bs`, `bssplit` and `bsrange` set the one block size, each replacing the others; the
    // one its kind names writes it back.
    KeyDef {
        name: "bs", aliases: &["blocksize"],
        read: Read::Value(|job, key, v| store(&mut job.bs, parse_bs(key, v).map(BlockSize::Fixed))),
        write: Write::Value(|job, d| block_size(job, d, "bs")),
        check: Some(|job| check_block_size(&job.bs).or_else(|reason| invalid(job.bs.key(), reason))),
    },
    KeyDef {
        name: "bssplit", aliases: &[],
        read: Read::Value(|job, _, v| store(&mut job.bs, parse_bssplit(v))),
        write: Write::Value(|job, d| block_size(job, d, "bssplit")),
        check: None,
    },
    KeyDef {
        name: "bsrange", aliases: &[],
        read: Read::Value(|job, _, v| store(&mut job.bs, parse_bsrange(v))),
        write: Write::Value(|job, d| block_size(job, d, "bsrange")),
        check: None,
    },
    KeyDef {
        name: "rwmixread", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.rwmixread, parse_percent(key, v))),
        write: Write::Value(|job, d| changed(&job.rwmixread, &d.rwmixread)),
        check: Some(|job| check_in("rwmixread", job.rwmixread, 0, 100)),
    },
    KeyDef {
        name: "rwmixwrite", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.rwmixread, parse_percent(key, v).map(|w| 100 - w))),
        // Never written: `rwmixread` writes the same setting (100 minus this, as in fio).
        write: Write::Never,
        check: None,
    },
    KeyDef {
        name: "iodepth", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.iodepth, parse_u32_in(key, v, 1, IODEPTH_MAX))),
        write: Write::Value(|job, d| changed(&job.iodepth, &d.iodepth)),
        check: Some(|job| check_in("iodepth", job.iodepth, 1, IODEPTH_MAX)),
    },
    KeyDef {
        name: "numjobs", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.numjobs, parse_u32_in(key, v, 1, NUMJOBS_MAX))),
        write: Write::Value(|job, d| changed(&job.numjobs, &d.numjobs)),
        check: Some(|job| check_in("numjobs", job.numjobs, 1, NUMJOBS_MAX)),
    },
    KeyDef {
        name: "runtime", aliases: &["timeout"],
        read: Read::Value(read_runtime),
        write: Write::Value(|job, _| match job.runtime_ns {
            Some(ns) => Some(format_duration_ns(ns)),
            // `runtime=0`: no time limit, the job ends by its size.
            None => job.ends_by_size.then(|| "0".to_string()),
        }),
        check: Some(|job| match job.runtime_ns {
            Some(ns) if !(1..=RUNTIME_NS_MAX).contains(&ns) => invalid(
                "runtime",
                format!("must be in 1..={RUNTIME_NS_MAX} ns or None, got {ns}"),
            ),
            _ => Ok(()),
        }),
    },
    KeyDef {
        name: "number_ios", aliases: &[],
        read: Read::Value(read_number_ios),
        write: Write::Value(|job, _| job.number_ios.map(|n| n.to_string())),
        check: Some(|job| match job.number_ios {
            Some(n) if !(1..=NUMBER_IOS_MAX).contains(&n) => invalid(
                "number_ios",
                format!("must be in 1..={NUMBER_IOS_MAX} or None, got {n}"),
            ),
            _ => Ok(()),
        }),
    },
    KeyDef {
        name: "io_size", aliases: &["io_limit"],
        read: Read::Value(|job, key, v| store(&mut job.io_size_bytes, parse_size(key, v).map(|b| (b > 0).then_some(b)))),
        write: Write::Value(|job, _| job.io_size_bytes.map(format_size)),
        check: None,
    },
    KeyDef {
        name: "random_distribution", aliases: &[],
        read: Read::Value(|job, _, v| store(&mut job.random_distribution, v.parse())),
        write: Write::Value(|job, d| changed(&job.random_distribution, &d.random_distribution)),
        check: Some(|job| check_distribution(&job.random_distribution).or_else(|reason| {
            invalid("random_distribution", format!("{reason}, got {}", job.random_distribution))
        })),
    },
    KeyDef {
        name: "randseed", aliases: &[],
        read: Read::Value(|job, _, v| store(&mut job.randseed, parse_randseed(v))),
        write: Write::Value(|job, _| changed(&job.randseed, &RANDSEED_DEFAULT)),
        check: None,
    },
    KeyDef {
        name: "offset", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.offset_bytes, parse_size(key, v))),
        write: Write::Value(|job, _| nonzero_size(job.offset_bytes)),
        check: None,
    },
    KeyDef {
        name: "offset_increment", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.offset_increment_bytes, parse_size(key, v))),
        write: Write::Value(|job, _| nonzero_size(job.offset_increment_bytes)),
        check: None,
    },
    KeyDef {
        name: "fill_device", aliases: &[],
        read: Read::Value(|job, key, v| {
            job.fill_device = parse_flag(key, v)?;
            if job.fill_device {
                // To the end of the device (`size` is ignored while it is on).
                job.size_bytes = None;
            }
            Ok(())
        }),
        write: Write::Value(|job, _| on(job.fill_device)),
        check: None,
    },
    KeyDef {
        name: "size", aliases: &[],
        read: Read::Value(read_size),
        write: Write::Value(|job, _| job.size_bytes.filter(|_| !job.fill_device).map(format_size)),
        check: Some(|job| match job.size_bytes {
            Some(0) => invalid("size", "must be > 0 or None".to_string()),
            _ => Ok(()),
        }),
    },
    KeyDef {
        name: "filesize", aliases: &[],
        read: Read::Value(read_filesize),
        // Never written: `size` writes the job's one region.
        write: Write::Never,
        check: None,
    },
    KeyDef {
        name: "loops", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.loops, parse_u32_in(key, v, 1, LOOPS_MAX))),
        write: Write::Value(|job, d| changed(&job.loops, &d.loops)),
        check: None,
    },
    KeyDef {
        name: "blockalign", aliases: &["ba"],
        read: Read::Value(|job, key, v| {
            let bytes = parse_size_nonzero(key, v, "must be at least one device block")?;
            store(&mut job.blockalign_bytes, Ok(Some(bytes)))
        }),
        write: Write::Value(|job, _| job.blockalign_bytes.map(format_size)),
        // `validate` checks it against the device's block.
        check: None,
    },
    KeyDef {
        name: "thinktime", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.thinktime_ns, parse_duration_limited(key, v, NS_PER_US, THINKTIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.thinktime_ns)),
        check: Some(|job| match job.thinktime_ns {
            ns if ns > THINKTIME_NS_MAX => invalid(
                "thinktime",
                format!("must be at most {THINKTIME_NS_MAX} ns, got {ns}"),
            ),
            _ => Ok(()),
        }),
    },
    // fio's think time policy (`control.rs`' `ThinkPolicy`).
    KeyDef {
        name: "thinktime_spin", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.think.spin_ns, parse_duration_limited(key, v, NS_PER_US, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.think.spin_ns)),
        check: None,
    },
    KeyDef {
        name: "thinktime_blocks", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.think.blocks, parse_u32_in(key, v, 1, u32::MAX).map(Some))),
        write: Write::Value(|job, _| job.think.blocks.map(|n| n.to_string())),
        check: None,
    },
    KeyDef {
        name: "thinktime_blocks_type", aliases: &[],
        read: Read::Value(|job, key, v| {
            job.think.count_issued = match v {
                "complete" => false,
                "issue" => true,
                _ => return Err(value_error(key, v, "must be complete or issue")),
            };
            Ok(())
        }),
        write: Write::Value(|job, _| job.think.count_issued.then(|| "issue".to_string())),
        check: None,
    },
    KeyDef {
        name: "thinktime_iotime", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.think.iotime_ns, parse_duration_limited(key, v, NS_PER_S, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.think.iotime_ns)),
        check: None,
    },
    // fio's latency target (`LatencyTarget`).
    KeyDef {
        name: "latency_target", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.latency_target.target_ns, parse_duration_limited(key, v, NS_PER_US, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.latency_target.target_ns)),
        check: None,
    },
    KeyDef {
        name: "latency_window", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.latency_target.window_ns, parse_duration_limited(key, v, NS_PER_US, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.latency_target.window_ns)),
        check: None,
    },
    KeyDef {
        name: "latency_percentile", aliases: &[],
        read: Read::Value(|job, key, v| {
            let percentile = v.parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p));
            let percentile = percentile.ok_or_else(|| value_error(key, v, "must be a percentage, 0 to 100"));
            store(&mut job.latency_target.percentile, percentile)
        }),
        write: Write::Value(|job, d| changed(&job.latency_target.percentile, &d.latency_target.percentile)),
        check: Some(|job| match job.latency_target.percentile {
            p if !(0.0..=100.0).contains(&p) => invalid("latency_percentile", format!("must be 0 to 100, got {p}")),
            _ => Ok(()),
        }),
    },
    KeyDef {
        name: "latency_run", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.latency_target.keep_searching, parse_flag(key, v))),
        write: Write::Value(|job, _| on(job.latency_target.keep_searching)),
        check: None,
    },
    // fio's flows (`Flow`).
    KeyDef {
        name: "flow_id", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.flow.id, parse_u32_in(key, v, 0, u32::MAX))),
        write: Write::Value(|job, d| changed(&job.flow.id, &d.flow.id)),
        check: None,
    },
    KeyDef {
        name: "flow", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.flow.weight, parse_u32_in(key, v, 0, FLOW_WEIGHT_MAX))),
        write: Write::Value(|job, d| changed(&job.flow.weight, &d.flow.weight)),
        check: Some(|job| match job.flow.weight {
            w if w > FLOW_WEIGHT_MAX => invalid("flow", format!("must be at most {FLOW_WEIGHT_MAX}, got {w}")),
            _ => Ok(()),
        }),
    },
    KeyDef {
        name: "flow_sleep", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.flow.sleep_ns, parse_duration_limited(key, v, NS_PER_US, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.flow.sleep_ns)),
        check: None,
    },
    KeyDef {
        name: "exitall", aliases: &[],
        read: Read::Switch(|job, on| job.exitall = on),
        write: Write::Value(|job, _| on(job.exitall)),
        check: None,
    },
    KeyDef {
        name: "exit_what", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.exit_what, parse_named(key, v))),
        write: Write::Value(|job, d| changed(&job.exit_what, &d.exit_what)),
        check: None,
    },
    // fio's steady state (`SteadyState`).
    KeyDef {
        name: "steadystate", aliases: &["ss"],
        read: Read::Value(|job, key, v| job.steadystate.set_criterion(key, v)),
        write: Write::Value(|job, d| {
            let (ss, ds) = (&job.steadystate, &d.steadystate);
            ((ss.metric, ss.slope, ss.percent, ss.limit) != (ds.metric, ds.slope, ds.percent, ds.limit))
                .then(|| ss.criterion_value())
        }),
        check: None,
    },
    KeyDef {
        name: "steadystate_duration", aliases: &["ss_dur"],
        read: Read::Value(|job, key, v| store(&mut job.steadystate.duration_ns, parse_duration_limited(key, v, NS_PER_S, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.steadystate.duration_ns)),
        check: Some(|job| {
            let ss = &job.steadystate;
            if ss.is_set() && ss.duration_ns < ss.interval_ns {
                return invalid("steadystate_duration", format!(
                    "must hold at least one sample, one steadystate_check_interval ({} ns), got {} ns",
                    ss.interval_ns, ss.duration_ns
                ));
            }
            Ok(())
        }),
    },
    KeyDef {
        name: "steadystate_ramp_time", aliases: &["ss_ramp"],
        read: Read::Value(|job, key, v| store(&mut job.steadystate.ramp_ns, parse_duration_limited(key, v, NS_PER_S, CONTROL_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.steadystate.ramp_ns)),
        check: None,
    },
    KeyDef {
        name: "steadystate_check_interval", aliases: &["ss_interval"],
        read: Read::Value(|job, key, v| {
            let ns = parse_duration_limited(key, v, NS_PER_S, CONTROL_TIME_NS_MAX)?;
            if ns < NS_PER_US * 1000 {
                return Err(value_error(key, v, "must be at least 1 ms"));
            }
            store(&mut job.steadystate.interval_ns, Ok(ns))
        }),
        write: Write::Value(|job, d| {
            (job.steadystate.interval_ns != d.steadystate.interval_ns).then(|| format_duration_ns(job.steadystate.interval_ns))
        }),
        check: None,
    },
    // Pacing.
    KeyDef {
        name: "rate", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.rate_bytes_per_s, parse_rate(key, v, "bytes per second such as 100m"))),
        write: Write::Value(|job, _| job.rate_bytes_per_s.map(format_size)),
        check: None,
    },
    KeyDef {
        name: "rate_iops", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.rate_iops, parse_rate(key, v, "requests per second such as 50000"))),
        write: Write::Value(|job, _| job.rate_iops.map(|n| n.to_string())),
        check: None,
    },
    KeyDef {
        name: "rate_process", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.rate_process, parse_named(key, v))),
        write: Write::Value(|job, d| changed(&job.rate_process, &d.rate_process)),
        check: None,
    },
    // Verification: the pattern before `verify`, since on its own it turns verification on.
    KeyDef {
        name: "verify_pattern", aliases: &[],
        read: Read::Value(read_verify_pattern),
        write: Write::Value(|job, _| {
            let pattern = job.verify_pattern.as_ref()?;
            let hex: String = pattern.iter().map(|b| format!("{b:02x}")).collect();
            Some(format!("0x{hex}"))
        }),
        check: None,
    },
    KeyDef {
        name: "verify", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.verify, parse_named(key, v))),
        write: Write::Value(|job, _| {
            (job.verify != Verify::None || job.verify_pattern.is_some()).then(|| job.verify.to_string())
        }),
        check: Some(|job| match (job.verify, &job.verify_pattern) {
            (Verify::Pattern, None) => invalid(
                "verify",
                "pattern needs the bytes to write and expect: give verify_pattern".to_string(),
            ),
            _ => Ok(()),
        }),
    },
    KeyDef {
        name: "verify_interval", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.verify_interval_bytes, parse_size_nonzero(key, v, "must be at least 1 byte").map(Some))),
        write: Write::Value(|job, _| job.verify_interval_bytes.map(format_size)),
        check: None,
    },
    KeyDef {
        name: "verify_backlog", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.verify_backlog, parse_size(key, v).map(|n| (n > 0).then_some(n)))),
        write: Write::Value(|job, _| job.verify_backlog.map(|n| n.to_string())),
        check: None,
    },
    KeyDef {
        name: "do_verify", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.do_verify, parse_flag(key, v))),
        write: Write::Value(|job, _| (!job.do_verify).then(|| "0".to_string())),
        check: None,
    },
    KeyDef {
        name: "ramp_time", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.ramp_time_ns, parse_duration_limited(key, v, NS_PER_S, RAMP_TIME_NS_MAX))),
        write: Write::Value(|job, _| nonzero_time(job.ramp_time_ns)),
        check: None,
    },
    // Phases and the order of offsets.
    KeyDef {
        name: "stonewall", aliases: &["wait_for_previous"],
        read: Read::Switch(|job, on| job.stonewall = on),
        write: Write::Value(|job, _| on(job.stonewall)),
        check: None,
    },
    KeyDef {
        name: "new_group", aliases: &[],
        read: Read::Switch(|job, on| job.new_group = on),
        write: Write::Value(|job, _| on(job.new_group)),
        check: None,
    },
    KeyDef {
        name: "norandommap", aliases: &[],
        read: Read::Switch(|job, on| job.norandommap = on),
        write: Write::Value(|job, _| on(job.norandommap)),
        check: None,
    },
    KeyDef {
        name: "random_sequence_stride", aliases: &[],
        read: Read::Switch(|job, on| job.random_sequence_stride = on),
        write: Write::Value(|job, _| on(job.random_sequence_stride)),
        check: None,
    },
    KeyDef {
        name: "time_based", aliases: &[],
        read: Read::Switch(|job, on| job.time_based = on),
        write: Write::Value(|job, _| on(job.time_based)),
        check: None,
    },
    // fio's strided zones.
    KeyDef {
        name: "zonemode", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.zonemode, parse_named(key, v))),
        write: Write::Value(|job, d| changed(&job.zonemode, &d.zonemode)),
        check: Some(check_zone_mode),
    },
    KeyDef {
        name: "zonesize", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.zones.size_bytes, parse_size_nonzero(key, v, "must be more than 0 bytes"))),
        write: Write::Value(|job, _| nonzero_size(job.zones.size_bytes)),
        check: None,
    },
    KeyDef {
        name: "zonerange", aliases: &[],
        read: Read::Value(|job, key, v| store(&mut job.zones.range_bytes, parse_size_nonzero(key, v, "must be more than 0 bytes").map(Some))),
        write: Write::Value(|job, _| job.zones.range_bytes.map(format_size)),
        check: None,
    },
    KeyDef {
        name: "zoneskip", aliases: &[],
        read: Read::Value(read_zoneskip),
        write: Write::Value(|job, _| nonzero_size(job.zones.skip_bytes)),
        check: None,
    },
    KeyDef {
        name: "wait_for", aliases: &[],
        read: Read::Value(|job, key, v| {
            check_name(v).map_err(|reason| value_error(key, v, &reason))?;
            store(&mut job.wait_for, Ok(Some(v.to_string())))
        }),
        write: Write::Value(|job, _| job.wait_for.clone()),
        check: None,
    },
    // Flexible Data Placement (`placement.rs`).
    KeyDef {
        name: "fdp", aliases: &[],
        read: Read::Switch(|job, on| job.data_placement.enabled = on),
        write: Write::Value(|job, _| on(job.data_placement.enabled)),
        check: None,
    },
    KeyDef {
        name: "dataplacement", aliases: &[],
        read: Read::Value(read_data_placement),
        // Never written: `fdp`, the older name, writes the same setting.
        write: Write::Never,
        check: None,
    },
    KeyDef {
        name: "fdp_pli", aliases: &["plids"],
        read: Read::Value(|job, key, v| {
            let ids = parse_ids(v).map_err(|reason| value_error(key, v, &reason))?;
            store(&mut job.data_placement.ids, Ok(Some(ids)))
        }),
        write: Write::Value(|job, _| placement_ids(job)),
        check: None,
    },
    KeyDef {
        name: "fdp_pli_select", aliases: &["plid_select"],
        read: Read::Value(|job, key, v| store(&mut job.data_placement.select, parse_named(key, v))),
        write: Write::Value(|job, d| changed(&job.data_placement.select, &d.data_placement.select)),
        check: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_one_keys() {
        let names: Vec<&str> = supported_keys().collect();
        for (i, name) in names.iter().enumerate() {
            assert!(!names[..i].contains(name), "{name} is in the table twice");
            assert_eq!(find(name).map(|def| def.answers_to(name)), Some(true));
        }
        assert!(find("no_such_key").is_none());
    }

    #[test]
    fn every_never_written_key_sets_what_another_key_writes() {
        // A key no name writes back must change a field some written key also sets: set it
        // on a default job and `fio_options` must not be empty.
        for (key, value) in [
            ("name", "x"),
            ("rwmixwrite", "30"),
            ("filesize", "1m"),
            ("dataplacement", "fdp"),
        ] {
            let def = find(key).expect("in the table");
            assert!(matches!(def.write, Write::Never), "{key}");
            let mut job = JobSpec::default();
            job.set(key, value).unwrap();
            assert!(
                key == "name" || !job.fio_options().is_empty(),
                "{key}={value} is written by no key"
            );
        }
        let never: Vec<&str> = KEYS
            .iter()
            .filter(|def| matches!(def.write, Write::Never))
            .map(|def| def.name)
            .collect();
        assert_eq!(never, ["name", "rwmixwrite", "filesize", "dataplacement"]);
    }
}
