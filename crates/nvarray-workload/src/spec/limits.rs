//! The limits of a job's values: what `JobSpec::set` accepts and `JobSpec::validate` checks
//! again, named once for both and for the messages that state them.

use crate::units::NS_PER_S;

/// Seed used when a job sets no `randseed`.
///
/// fio's own default differs between versions; nvarray only promises that a job without
/// `randseed` is reproducible, so any fixed value does.
pub const RANDSEED_DEFAULT: u64 = 0x89;
/// Largest accepted `iodepth`.
pub const IODEPTH_MAX: u32 = 4096;
/// Largest accepted `numjobs`.
pub const NUMJOBS_MAX: u32 = 1024;
/// Largest accepted request length (`bs` or a `bssplit` entry), 1 GiB.
///
/// Real devices cap transfers far lower (see `max_transfer_bytes` in [`JobSpec::validate`]);
/// this bound only keeps arithmetic on lengths far away from `u32` overflow.
pub const BS_BYTES_MAX: u32 = 1 << 30;
/// Most entries a `bssplit` may have; fio's own limit (`BSSPLIT_MAX`) is also 64.
pub const BSSPLIT_ENTRIES_MAX: usize = 64;
/// Largest accepted zipf theta. Beyond this practically every request hits the hottest block.
pub const ZIPF_THETA_MAX: f64 = 100.0;
/// Longest accepted `runtime`: 30 days of simulated time.
pub const RUNTIME_NS_MAX: u64 = 30 * 86_400 * NS_PER_S;
/// Longest accepted `thinktime`: one minute between requests.
pub const THINKTIME_NS_MAX: u64 = 60 * NS_PER_S;
/// Largest accepted `number_ios`, about 1.1e12 requests per thread.
pub const NUMBER_IOS_MAX: u64 = 1 << 40;
/// Longest accepted job name, in bytes.
pub const NAME_BYTES_MAX: usize = 255;
/// Longest accepted `ramp_time`: one hour.
pub const RAMP_TIME_NS_MAX: u64 = 3_600 * NS_PER_S;
