//! One job in fio's vocabulary, and [`JobSpec::set`], the one place that parses its keys.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::WorkloadError;
use crate::units::{format_size, parse_duration_ns, parse_size, NS_PER_S, NS_PER_US};

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

/// Every key [`JobSpec::set`] understands, in the order the docs list them.
///
/// `readwrite` is fio's alias of `rw`, `blocksize` of `bs`; `rwmixwrite=N` sets
/// `rwmixread` to `100 - N` as in fio.
pub const SUPPORTED_KEYS: &[&str] = &[
    "name",
    "rw",
    "readwrite",
    "bs",
    "blocksize",
    "bssplit",
    "rwmixread",
    "rwmixwrite",
    "iodepth",
    "numjobs",
    "runtime",
    "number_ios",
    "random_distribution",
    "randseed",
    "offset",
    "size",
    "blockalign",
    "ba",
    "thinktime",
    "verify",
];

/// fio keys that are accepted (with or without a value) and ignored, because they do not
/// change the requests a simulated array sees:
///
/// - `ioengine`: the simulator (or emulator) is the engine.
/// - `filename`: the device is chosen outside the job description.
/// - `direct`: the array has no page cache, so every job is modelled as `direct=1`.
///   `direct=0` is refused rather than ignored, because buffered I/O would change the
///   request stream a real device sees.
/// - `thread`: threads versus processes is invisible to the device.
/// - `group_reporting`: reporting only.
/// - `time_based`: request generators always wrap around their region, which is what fio
///   does with `time_based`; a job ends when `runtime` or `number_ios` says so, never because
///   `size` bytes were transferred. A fio job that relies on `size` to end should set
///   `number_ios` instead.
///
/// Keys that look harmless but do change what happens (`stonewall`, `randrepeat`,
/// `rate`, ...) are deliberately not on this list: they fail as unknown keys.
pub const IGNORED_KEYS: &[&str] = &[
    "ioengine",
    "filename",
    "direct",
    "thread",
    "group_reporting",
    "time_based",
];

/// The direction of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Op {
    /// Read from the device.
    Read,
    /// Write to the device.
    Write,
}

/// One request as the generator issues it; the simulator adds time and a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Request {
    /// Read or write.
    pub op: Op,
    /// Byte offset from the start of the device; a multiple of the device block size.
    pub offset_bytes: u64,
    /// Transfer length; a nonzero multiple of the device block size.
    pub len_bytes: u32,
}

/// Access pattern, with fio's `--rw` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RwMode {
    /// `read`: sequential reads (fio's default).
    Read,
    /// `write`: sequential writes.
    Write,
    /// `randread`: random reads.
    RandRead,
    /// `randwrite`: random writes.
    RandWrite,
    /// `rw` or `readwrite`: sequential, mixed by `rwmixread`.
    Rw,
    /// `randrw`: random, mixed by `rwmixread`.
    RandRw,
}

impl RwMode {
    /// fio's name for this mode.
    pub fn fio_name(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::Rw => "rw",
            RwMode::RandRw => "randrw",
        }
    }

    /// True for `randread`, `randwrite` and `randrw`.
    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw)
    }

    /// True for `rw` and `randrw`, the modes where `rwmixread` applies.
    pub fn is_mixed(self) -> bool {
        matches!(self, RwMode::Rw | RwMode::RandRw)
    }
}

impl fmt::Display for RwMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.fio_name())
    }
}

impl FromStr for RwMode {
    type Err = WorkloadError;

    /// Parses fio's `--rw` values: `read`, `write`, `randread`, `randwrite`, `rw`,
    /// `readwrite` (alias of `rw`) and `randrw`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mode = match s.trim() {
            "read" => RwMode::Read,
            "write" => RwMode::Write,
            "randread" => RwMode::RandRead,
            "randwrite" => RwMode::RandWrite,
            "rw" | "readwrite" => RwMode::Rw,
            "randrw" => RwMode::RandRw,
            _ => {
                return Err(value_error(
                    "rw",
                    s,
                    "must be one of read, write, randread, randwrite, rw (readwrite), randrw \
                     (trim modes and ':N' offset modifiers are not supported)",
                ))
            }
        };
        Ok(mode)
    }
}

/// How random offsets are spread over a job's region (fio `--random_distribution`).
/// Sequential jobs ignore it, as fio does.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Distribution {
    /// `random`: every aligned offset equally likely.
    Uniform,
    /// `zipf:THETA`: the k-th hottest block is hit with probability proportional to
    /// `1 / k^theta`; the hot blocks are scattered over the region, not packed at its start.
    Zipf {
        /// Skew, in `(0, ZIPF_THETA_MAX]`; larger is more skewed. 1.0 is accepted.
        theta: f64,
    },
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => f.write_str("random"),
            Distribution::Zipf { theta } => write!(f, "zipf:{theta}"),
        }
    }
}

impl FromStr for Distribution {
    type Err = WorkloadError;

    /// Parses `random` or `zipf:THETA`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const KEY: &str = "random_distribution";
        let text = s.trim();
        if text == "random" {
            return Ok(Distribution::Uniform);
        }
        let Some(theta_text) = text.strip_prefix("zipf:") else {
            return Err(value_error(
                KEY,
                s,
                "must be random or zipf:THETA (pareto, normal and zoned are not supported)",
            ));
        };
        let theta: f64 = theta_text
            .trim()
            .parse()
            .map_err(|_| value_error(KEY, s, &theta_range()))?;
        let distribution = Distribution::Zipf { theta };
        check_distribution(&distribution).map_err(|_| value_error(KEY, s, &theta_range()))?;
        Ok(distribution)
    }
}

/// Request lengths (fio `--bs` or `--bssplit`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum BlockSize {
    /// Every request has this length in bytes.
    Fixed(u32),
    /// `(len_bytes, percent)` pairs: each request picks a length with the given probability
    /// in percent. The percentages sum to 100; an entry may have 0 percent.
    Split(Vec<(u32, u32)>),
}

impl BlockSize {
    /// The job key that sets this variant, for error messages.
    pub fn key(&self) -> &'static str {
        match self {
            BlockSize::Fixed(_) => "bs",
            BlockSize::Split(_) => "bssplit",
        }
    }

    /// Every length a request may have, including `bssplit` entries with 0 percent.
    pub fn lens_bytes(&self) -> impl Iterator<Item = u32> + '_ {
        let (fixed, split): (Option<u32>, &[(u32, u32)]) = match self {
            BlockSize::Fixed(len_bytes) => (Some(*len_bytes), &[]),
            BlockSize::Split(entries) => (None, entries),
        };
        fixed
            .into_iter()
            .chain(split.iter().map(|&(len_bytes, _)| len_bytes))
    }

    /// The longest request length.
    pub fn len_bytes_max(&self) -> u32 {
        self.lens_bytes().max().unwrap_or(0)
    }
}

impl fmt::Display for BlockSize {
    /// Writes the value back in the syntax `bs=` or `bssplit=` accepts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockSize::Fixed(len_bytes) => f.write_str(&format_size(u64::from(*len_bytes))),
            BlockSize::Split(entries) => {
                for (i, (len_bytes, percent)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(":")?;
                    }
                    write!(f, "{}/{percent}", format_size(u64::from(*len_bytes)))?;
                }
                Ok(())
            }
        }
    }
}

/// One job (one section of a fio job file): what `numjobs` identical threads do.
///
/// Build it with [`JobSpec::default`] and [`JobSpec::set`]; check it against a device with
/// [`JobSpec::validate`]. The fields are public for reading and for tests; code that writes
/// them directly must call `validate`, which re-checks every range `set` enforces.
///
/// A job never ends on its own: generators wrap around the region (fio's `time_based`), and
/// the simulator stops a job on `runtime_ns` or `number_ios`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSpec {
    /// Job name: the section name in a job file, `job0` by default.
    pub name: String,
    /// Access pattern; default [`RwMode::Read`], as in fio.
    pub rw: RwMode,
    /// Request lengths; default `Fixed(4096)`.
    pub bs: BlockSize,
    /// Percentage of reads for `rw` and `randrw`, `0..=100`; default 50.
    pub rwmixread: u8,
    /// Requests in flight per thread, `1..=IODEPTH_MAX`; default 1.
    pub iodepth: u32,
    /// Identical threads running this job, `1..=NUMJOBS_MAX`; default 1.
    pub numjobs: u32,
    /// Run time limit; `None` (default, or `runtime=0`) means no time limit.
    pub runtime_ns: Option<u64>,
    /// Requests per thread; `None` (default, or `number_ios=0`) means no count limit.
    pub number_ios: Option<u64>,
    /// Offset distribution for random modes; default [`Distribution::Uniform`].
    pub random_distribution: Distribution,
    /// Seed of every random choice; default [`RANDSEED_DEFAULT`] (0x89).
    pub randseed: u64,
    /// Start of the job's region on the device; default 0.
    pub offset_bytes: u64,
    /// Length of the job's region; `None` (default) means from `offset_bytes` to the end of
    /// the device.
    pub size_bytes: Option<u64>,
    /// Boundary random offsets are aligned to (fio's `blockalign`, alias `ba`); `None`
    /// (default) means the smallest request length, as in fio.
    pub blockalign_bytes: Option<u64>,
    /// Idle time between a completion and the thread's next submission; default 0.
    pub thinktime_ns: u64,
    /// Whether writes carry self-checking data that every read verifies; default off.
    pub verify: Verify,
}

/// Data verification, fio's `verify` key. Only engines that move data (the emulator) verify;
/// the simulator moves none and ignores it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// `verify=0` or `verify=none`: data is not checked.
    #[default]
    None,
    /// `verify=crc32c` (or `verify=1`): every block written carries a header (its own offset, a
    /// write stamp) and a CRC-32C of its contents; every block read must be all zeroes (never
    /// written) or carry a valid header for its own offset and a matching CRC.
    Crc32c,
}

impl FromStr for Verify {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" | "none" => Ok(Verify::None),
            "1" | "crc32c" => Ok(Verify::Crc32c),
            _ => Err("must be crc32c (or 1) to verify, none (or 0) not to".to_string()),
        }
    }
}

impl fmt::Display for Verify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verify::None => "none",
            Verify::Crc32c => "crc32c",
        })
    }
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            name: "job0".to_string(),
            rw: RwMode::Read,
            bs: BlockSize::Fixed(4096),
            rwmixread: 50,
            iodepth: 1,
            numjobs: 1,
            runtime_ns: None,
            number_ios: None,
            random_distribution: Distribution::Uniform,
            randseed: RANDSEED_DEFAULT,
            offset_bytes: 0,
            size_bytes: None,
            blockalign_bytes: None,
            thinktime_ns: 0,
            verify: Verify::None,
        }
    }
}

impl JobSpec {
    /// Parses and applies one fio option; the job-file parser and the command line both go
    /// through here, so a key means the same thing everywhere.
    ///
    /// Keys are [`SUPPORTED_KEYS`]; keys in [`IGNORED_KEYS`] are accepted with any value
    /// (even none) and change nothing, except that `direct=0` is refused. Every other key is
    /// an error naming it. The value is trimmed; an empty value for a supported key is a
    /// [`WorkloadError::MissingValue`]. On error `self` is unchanged.
    ///
    /// Values:
    /// - `name`: 1 to [`NAME_BYTES_MAX`] bytes, no control characters.
    /// - `rw`, `readwrite`: see [`RwMode`]'s `FromStr`.
    /// - `bs`, `blocksize`: one size (see [`parse_size`](crate::parse_size)), 1 byte to
    ///   [`BS_BYTES_MAX`]; fio's `R,W` pairs are refused. Replaces an earlier `bssplit`.
    /// - `bssplit`: `LEN/PERCENT[:LEN/PERCENT...]`, at most [`BSSPLIT_ENTRIES_MAX`] entries,
    ///   percentages summing to 100. Replaces an earlier `bs`.
    /// - `rwmixread`, `rwmixwrite`: integer percent `0..=100`.
    /// - `iodepth`: `1..=IODEPTH_MAX`; `numjobs`: `1..=NUMJOBS_MAX`.
    /// - `runtime`: duration, seconds by default, at most [`RUNTIME_NS_MAX`]; 0 clears it.
    /// - `number_ios`: count (size suffixes allowed, as in fio), at most [`NUMBER_IOS_MAX`];
    ///   0 clears it.
    /// - `random_distribution`: `random` or `zipf:THETA`, theta in `(0, 100]`.
    /// - `randseed`: any `u64`, decimal or `0x` hex.
    /// - `offset`: size; `size`: nonzero size.
    /// - `thinktime`: duration, **microseconds** by default as in fio, at most
    ///   [`THINKTIME_NS_MAX`].
    /// - `verify`: see [`Verify`]'s `FromStr`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), WorkloadError> {
        let value = value.trim();
        if IGNORED_KEYS.contains(&key) {
            if key == "direct" && !matches!(value, "" | "1") {
                return Err(value_error(
                    key,
                    value,
                    "only direct=1 is modelled (the array has no page cache)",
                ));
            }
            return Ok(());
        }
        if !SUPPORTED_KEYS.contains(&key) {
            return Err(WorkloadError::UnknownKey {
                key: key.to_string(),
            });
        }
        if value.is_empty() {
            return Err(WorkloadError::MissingValue {
                key: key.to_string(),
            });
        }
        match key {
            "name" => {
                check_name(value).map_err(|reason| value_error(key, value, &reason))?;
                self.name = value.to_string();
            }
            "rw" | "readwrite" => {
                self.rw = value.parse().map_err(|e| rekey(e, key))?;
            }
            "bs" | "blocksize" => self.bs = BlockSize::Fixed(parse_bs(key, value)?),
            "bssplit" => self.bs = parse_bssplit(value)?,
            "rwmixread" => self.rwmixread = parse_percent(key, value)?,
            "rwmixwrite" => self.rwmixread = 100 - parse_percent(key, value)?,
            "iodepth" => self.iodepth = parse_u32_in(key, value, 1, IODEPTH_MAX)?,
            "numjobs" => self.numjobs = parse_u32_in(key, value, 1, NUMJOBS_MAX)?,
            "runtime" => {
                let runtime_ns = parse_duration_limited(key, value, NS_PER_S, RUNTIME_NS_MAX)?;
                self.runtime_ns = (runtime_ns > 0).then_some(runtime_ns);
            }
            "number_ios" => {
                let number_ios = parse_size(value).map_err(|_| {
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
            "random_distribution" => self.random_distribution = value.parse()?,
            "randseed" => self.randseed = parse_randseed(value)?,
            "offset" => {
                self.offset_bytes =
                    parse_size(value).map_err(|e| size_value_error(key, value, &e))?;
            }
            "blockalign" | "ba" => {
                let bytes = parse_size(value).map_err(|e| size_value_error(key, value, &e))?;
                if bytes == 0 {
                    return Err(value_error(key, value, "must be at least one device block"));
                }
                self.blockalign_bytes = Some(bytes);
            }
            "size" => {
                let size_bytes = parse_size(value).map_err(|e| size_value_error(key, value, &e))?;
                if size_bytes == 0 {
                    return Err(value_error(
                        key,
                        value,
                        "must be > 0 (leave it out to use the whole device after offset)",
                    ));
                }
                self.size_bytes = Some(size_bytes);
            }
            "thinktime" => {
                self.thinktime_ns =
                    parse_duration_limited(key, value, NS_PER_US, THINKTIME_NS_MAX)?;
            }
            "verify" => {
                self.verify = value
                    .parse()
                    .map_err(|reason: String| value_error(key, value, &reason))?;
            }
            _ => unreachable!("key {key} is in SUPPORTED_KEYS but has no parser"),
        }
        Ok(())
    }

    /// Checks the job against a device: the region lies inside the device, offsets and
    /// lengths are multiples of `block_size_bytes`, every request length is nonzero, at most
    /// `max_transfer_bytes` and fits the region; and every field is in the range `set`
    /// enforces (the fields are public, so they may have been written directly).
    pub fn validate(
        &self,
        device_size_bytes: u64,
        block_size_bytes: u32,
        max_transfer_bytes: u32,
    ) -> Result<(), WorkloadError> {
        self.check_fields()?;
        let (_, region_len_bytes) = self.region_bytes(device_size_bytes, block_size_bytes)?;
        let key = self.bs.key();
        for len_bytes in self.bs.lens_bytes() {
            if len_bytes > max_transfer_bytes {
                return Err(WorkloadError::Invalid {
                    key,
                    reason: format!(
                        "request length {len_bytes} exceeds the device's maximum transfer of \
                         {max_transfer_bytes} bytes"
                    ),
                });
            }
        }
        debug_assert!(region_len_bytes >= u64::from(self.bs.len_bytes_max()));
        Ok(())
    }

    /// Fraction of requests that are reads: 1 for `read`/`randread`, 0 for
    /// `write`/`randwrite`, `rwmixread / 100` for `rw`/`randrw`.
    pub fn read_fraction(&self) -> f64 {
        match self.rw {
            RwMode::Read | RwMode::RandRead => 1.0,
            RwMode::Write | RwMode::RandWrite => 0.0,
            RwMode::Rw | RwMode::RandRw => f64::from(self.rwmixread) / 100.0,
        }
    }

    /// True when offsets are random (`randread`, `randwrite`, `randrw`).
    pub fn is_random(&self) -> bool {
        self.rw.is_random()
    }

    /// Checks every field against the ranges [`JobSpec::set`] enforces.
    pub(crate) fn check_fields(&self) -> Result<(), WorkloadError> {
        let invalid = |key, reason: String| Err(WorkloadError::Invalid { key, reason });
        if let Err(reason) = check_name(&self.name) {
            return invalid("name", format!("{reason}, got '{}'", self.name));
        }
        if let Err(reason) = check_block_size(&self.bs) {
            return invalid(self.bs.key(), reason);
        }
        if self.rwmixread > 100 {
            return invalid(
                "rwmixread",
                format!("must be in 0..=100, got {}", self.rwmixread),
            );
        }
        if !(1..=IODEPTH_MAX).contains(&self.iodepth) {
            return invalid(
                "iodepth",
                format!("must be in 1..={IODEPTH_MAX}, got {}", self.iodepth),
            );
        }
        if !(1..=NUMJOBS_MAX).contains(&self.numjobs) {
            return invalid(
                "numjobs",
                format!("must be in 1..={NUMJOBS_MAX}, got {}", self.numjobs),
            );
        }
        if let Some(runtime_ns) = self.runtime_ns {
            if !(1..=RUNTIME_NS_MAX).contains(&runtime_ns) {
                return invalid(
                    "runtime",
                    format!("must be in 1..={RUNTIME_NS_MAX} ns or None, got {runtime_ns}"),
                );
            }
        }
        if let Some(number_ios) = self.number_ios {
            if !(1..=NUMBER_IOS_MAX).contains(&number_ios) {
                return invalid(
                    "number_ios",
                    format!("must be in 1..={NUMBER_IOS_MAX} or None, got {number_ios}"),
                );
            }
        }
        if let Err(reason) = check_distribution(&self.random_distribution) {
            return invalid("random_distribution", reason);
        }
        if self.size_bytes == Some(0) {
            return invalid("size", "must be > 0 or None".to_string());
        }
        if self.thinktime_ns > THINKTIME_NS_MAX {
            return invalid(
                "thinktime",
                format!(
                    "must be at most {THINKTIME_NS_MAX} ns, got {}",
                    self.thinktime_ns
                ),
            );
        }
        Ok(())
    }

    /// The job's region as `(start, len)` in bytes, checked against the device: both are
    /// multiples of the block size, the region is inside the device and holds at least one
    /// request of every length. Without `size`, the region runs to the last whole block.
    pub(crate) fn region_bytes(
        &self,
        device_size_bytes: u64,
        block_size_bytes: u32,
    ) -> Result<(u64, u64), WorkloadError> {
        let block_bytes = u64::from(block_size_bytes);
        if block_bytes == 0 {
            return Err(WorkloadError::Device {
                reason: "block size must be > 0".to_string(),
            });
        }
        if device_size_bytes < block_bytes {
            return Err(WorkloadError::Device {
                reason: format!(
                    "size {device_size_bytes} bytes is smaller than one block of \
                     {block_bytes} bytes"
                ),
            });
        }
        let invalid = |key, reason: String| Err(WorkloadError::Invalid { key, reason });
        let offset_bytes = self.offset_bytes;
        if !offset_bytes.is_multiple_of(block_bytes) {
            return invalid(
                "offset",
                format!("{offset_bytes} is not a multiple of the device block size {block_bytes}"),
            );
        }
        if offset_bytes >= device_size_bytes {
            return invalid(
                "offset",
                format!("{offset_bytes} is not below the device size {device_size_bytes}"),
            );
        }
        let region_len_bytes = match self.size_bytes {
            Some(size_bytes) => {
                if size_bytes % block_bytes != 0 {
                    return invalid(
                        "size",
                        format!(
                            "{size_bytes} is not a multiple of the device block size \
                             {block_bytes}"
                        ),
                    );
                }
                if size_bytes > device_size_bytes - offset_bytes {
                    return invalid(
                        "size",
                        format!(
                            "offset {offset_bytes} + size {size_bytes} runs past the end of \
                             the device at {device_size_bytes}"
                        ),
                    );
                }
                size_bytes
            }
            None => (device_size_bytes - offset_bytes) / block_bytes * block_bytes,
        };
        if region_len_bytes == 0 {
            return invalid(
                "offset",
                format!(
                    "{offset_bytes} leaves less than one block of the device \
                     ({device_size_bytes} bytes) for the job"
                ),
            );
        }
        let key = self.bs.key();
        for len_bytes in self.bs.lens_bytes() {
            if len_bytes == 0 || u64::from(len_bytes) % block_bytes != 0 {
                return invalid(
                    key,
                    format!(
                        "request length {len_bytes} is not a nonzero multiple of the device \
                         block size {block_bytes}"
                    ),
                );
            }
            if u64::from(len_bytes) > region_len_bytes {
                return invalid(
                    key,
                    format!(
                        "request length {len_bytes} is larger than the job's region of \
                         {region_len_bytes} bytes"
                    ),
                );
            }
        }
        if let Some(align) = self.blockalign_bytes {
            if align % block_bytes != 0 {
                return invalid(
                    "blockalign",
                    format!("{align} is not a multiple of the device block size {block_bytes}"),
                );
            }
            if align > region_len_bytes {
                return invalid(
                    "blockalign",
                    format!("{align} is larger than the job's region of {region_len_bytes} bytes"),
                );
            }
        }
        Ok((offset_bytes, region_len_bytes))
    }

    /// The boundary random offsets are aligned to: `blockalign`, else the smallest request
    /// length (fio's default, "Default: bs").
    pub fn align_bytes(&self) -> u64 {
        self.blockalign_bytes
            .unwrap_or_else(|| u64::from(self.bs.lens_bytes().min().unwrap_or(1)))
    }
}

fn value_error(key: &str, value: &str, reason: &str) -> WorkloadError {
    WorkloadError::Value {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
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

/// Turns a `parse_size` error into a `Value` error for `key`, keeping its reason.
fn size_value_error(key: &str, value: &str, error: &WorkloadError) -> WorkloadError {
    let reason = match error {
        WorkloadError::Size { reason, .. } => reason,
        _ => "must be a size such as 4k",
    };
    value_error(key, value, reason)
}

/// Checks a job name; the reason on error.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX || name.chars().any(char::is_control) {
        return Err(format!(
            "must be 1 to {NAME_BYTES_MAX} bytes without control characters"
        ));
    }
    Ok(())
}

fn parse_u32_in(key: &str, value: &str, min: u32, max: u32) -> Result<u32, WorkloadError> {
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

fn parse_duration_limited(
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
    let duration_ns = parse_duration_ns(value, default_unit_ns).map_err(|e| {
        // A well-formed number that overflows is too large; anything else is malformed.
        if matches!(&e, WorkloadError::Duration { reason, .. } if *reason != crate::units::DURATION_FORMAT) {
            return too_large();
        }
        let reason = format!(
            "must be a whole number with an optional unit, such as 10, 500us, 20ms, 5s, 2m, \
             1h (no suffix: {unit}; no fractions: 0.5s is 500ms)"
        );
        value_error(key, value, &reason)
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
    let len_bytes = parse_size(value).map_err(|e| match e {
        WorkloadError::Size { reason, .. } if reason.starts_with("IEC") => {
            value_error(key, value, reason)
        }
        _ => value_error(key, value, &reason),
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

/// Range checks on a block size that do not depend on the device.
pub(crate) fn check_block_size(block_size: &BlockSize) -> Result<(), String> {
    match block_size {
        BlockSize::Fixed(len_bytes) => {
            if !(1..=BS_BYTES_MAX).contains(len_bytes) {
                return Err(format!(
                    "request length must be in 1..={BS_BYTES_MAX} bytes, got {len_bytes}"
                ));
            }
        }
        BlockSize::Split(entries) => {
            if entries.is_empty() || entries.len() > BSSPLIT_ENTRIES_MAX {
                return Err(format!(
                    "must have 1 to {BSSPLIT_ENTRIES_MAX} entries, got {}",
                    entries.len()
                ));
            }
            let mut percent_sum: u64 = 0;
            for &(len_bytes, percent) in entries {
                if !(1..=BS_BYTES_MAX).contains(&len_bytes) {
                    return Err(format!(
                        "request length must be in 1..={BS_BYTES_MAX} bytes, got {len_bytes}"
                    ));
                }
                percent_sum += u64::from(percent);
            }
            if percent_sum != 100 {
                return Err(format!(
                    "percentages must sum to 100, they sum to {percent_sum}"
                ));
            }
        }
    }
    Ok(())
}

fn theta_range() -> String {
    format!("zipf theta must be in (0, {ZIPF_THETA_MAX}]")
}

/// Range checks on a distribution.
pub(crate) fn check_distribution(distribution: &Distribution) -> Result<(), String> {
    if let Distribution::Zipf { theta } = *distribution {
        // Written so that NaN fails too.
        if !(theta > 0.0 && theta <= ZIPF_THETA_MAX) {
            return Err(format!("{}, got {theta}", theta_range()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn defaults() {
        let job = d();
        assert_eq!(job.name, "job0");
        assert_eq!(job.rw, RwMode::Read);
        assert_eq!(job.bs, BlockSize::Fixed(4096));
        assert_eq!(job.rwmixread, 50);
        assert_eq!(job.iodepth, 1);
        assert_eq!(job.numjobs, 1);
        assert_eq!(job.runtime_ns, None);
        assert_eq!(job.number_ios, None);
        assert_eq!(job.random_distribution, Distribution::Uniform);
        assert_eq!(job.randseed, 0x89);
        assert_eq!(job.offset_bytes, 0);
        assert_eq!(job.size_bytes, None);
        assert_eq!(job.thinktime_ns, 0);
        assert_eq!(job.check_fields(), Ok(()));
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
        let reason = "must be one of read, write, randread, randwrite, rw (readwrite), randrw \
                      (trim modes and ':N' offset modifiers are not supported)";
        for bad in ["trim", "randtrim", "trimwrite", "randrw:8", "READ", "rand"] {
            check("rw", bad, Err(&format!("rw: {reason}, got '{bad}'")));
        }
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
        let runtime_malformed = "must be a whole number with an optional unit, such as 10, \
                                 500us, 20ms, 5s, 2m, 1h (no suffix: seconds; no fractions: \
                                 0.5s is 500ms)";
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
                ..d()
            }),
        );
        check(
            "runtime",
            "31d",
            Err(&format!("runtime: {runtime_too_large}, got '31d'")),
        );
        check(
            "runtime",
            "1.5s",
            Err(&format!("runtime: {runtime_malformed}, got '1.5s'")),
        );
        check(
            "runtime",
            "0.5",
            Err(&format!("runtime: {runtime_malformed}, got '0.5'")),
        );
        check(
            "runtime",
            "99999999999999999999",
            Err(&format!(
                "runtime: {runtime_too_large}, got '99999999999999999999'"
            )),
        );
        let thinktime_too_large = "must be at most 60000000000 ns";
        let thinktime_malformed = "must be a whole number with an optional unit, such as 10, \
                                   500us, 20ms, 5s, 2m, 1h (no suffix: microseconds; no \
                                   fractions: 0.5s is 500ms)";
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
                random_distribution: Distribution::Zipf { theta: 1.2 },
                ..d()
            }),
        );
        check(
            "random_distribution",
            "zipf:1",
            Ok(JobSpec {
                random_distribution: Distribution::Zipf { theta: 1.0 },
                ..d()
            }),
        );
        check(
            "random_distribution",
            "zipf:100",
            Ok(JobSpec {
                random_distribution: Distribution::Zipf { theta: 100.0 },
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
            Err(
                "random_distribution: must be random or zipf:THETA (pareto, normal and zoned \
                 are not supported), got 'pareto:0.9'",
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
            Err(&format!(
                "offset: {}, got '1.5g'",
                crate::units::SIZE_FORMAT
            )),
        );
    }

    #[test]
    fn set_keys_ignored_unknown_and_missing() {
        for key in IGNORED_KEYS {
            check(key, "", Ok(d()));
        }
        check("ioengine", "io_uring", Ok(d()));
        check("filename", "/dev/nvme0n1", Ok(d()));
        check("direct", "1", Ok(d()));
        check(
            "direct",
            "0",
            Err("direct: only direct=1 is modelled (the array has no page cache), got '0'"),
        );
        let unknown = WorkloadError::UnknownKey {
            key: "iodpeth".into(),
        }
        .to_string();
        assert!(unknown.starts_with("unknown key 'iodpeth'; supported keys: name, rw, "));
        assert!(unknown.ends_with(
            "accepted and ignored: ioengine, filename, direct, thread, \
                                   group_reporting, time_based"
        ));
        check("iodpeth", "4", Err(&unknown));
        check(
            "stonewall",
            "",
            Err(&WorkloadError::UnknownKey {
                key: "stonewall".into(),
            }
            .to_string()),
        );
        for key in SUPPORTED_KEYS {
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
        ] {
            job.set("verify", value).unwrap();
            assert_eq!(job.verify, want, "verify={value}");
        }
        let err = job.set("verify", "md5").unwrap_err().to_string();
        assert!(err.contains("must be crc32c"), "{err}");
        assert_eq!(job.verify, Verify::None, "a refused value changed the job");
    }

    #[test]
    fn read_fraction_and_is_random() {
        for (rw, read_fraction, is_random) in [
            (RwMode::Read, 1.0, false),
            (RwMode::RandRead, 1.0, true),
            (RwMode::Write, 0.0, false),
            (RwMode::RandWrite, 0.0, true),
            (RwMode::Rw, 0.7, false),
            (RwMode::RandRw, 0.7, true),
        ] {
            let job = JobSpec {
                rw,
                rwmixread: 70,
                ..d()
            };
            assert_eq!(job.read_fraction(), read_fraction, "{rw}");
            assert_eq!(job.is_random(), is_random, "{rw}");
        }
    }

    fn check_validate(job: JobSpec, device_size_bytes: u64, expected: Result<(), &str>) {
        assert_eq!(
            job.validate(device_size_bytes, 4096, 128 << 10)
                .map_err(|e| e.to_string()),
            expected.map_err(str::to_string),
            "{job:?} on a device of {device_size_bytes} bytes"
        );
    }

    #[test]
    fn validate() {
        let gib = 1u64 << 30;
        check_validate(d(), gib, Ok(()));
        // A device that is not a whole number of blocks loses its tail, not the job.
        check_validate(d(), gib + 100, Ok(()));
        check_validate(
            JobSpec {
                offset_bytes: gib - 4096,
                ..d()
            },
            gib,
            Ok(()),
        );
        check_validate(
            JobSpec {
                offset_bytes: gib / 2,
                size_bytes: Some(gib / 2),
                ..d()
            },
            gib,
            Ok(()),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![(4096, 50), (128 << 10, 50)]),
                ..d()
            },
            gib,
            Ok(()),
        );
        check_validate(
            JobSpec {
                offset_bytes: 512,
                ..d()
            },
            gib,
            Err("offset: 512 is not a multiple of the device block size 4096"),
        );
        check_validate(
            JobSpec {
                offset_bytes: gib,
                ..d()
            },
            gib,
            Err("offset: 1073741824 is not below the device size 1073741824"),
        );
        check_validate(
            JobSpec {
                offset_bytes: gib,
                ..d()
            },
            gib + 100,
            Err(
                "offset: 1073741824 leaves less than one block of the device (1073741924 bytes) \
                 for the job",
            ),
        );
        check_validate(
            JobSpec {
                size_bytes: Some(6144),
                ..d()
            },
            gib,
            Err("size: 6144 is not a multiple of the device block size 4096"),
        );
        check_validate(
            JobSpec {
                offset_bytes: 4096,
                size_bytes: Some(gib),
                ..d()
            },
            gib,
            Err(
                "size: offset 4096 + size 1073741824 runs past the end of the device at \
                 1073741824",
            ),
        );
        check_validate(
            JobSpec {
                offset_bytes: u64::MAX - 4095,
                size_bytes: Some(8192),
                ..d()
            },
            u64::MAX,
            Err(
                "size: offset 18446744073709547520 + size 8192 runs past the end of the device \
                 at 18446744073709551615",
            ),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Fixed(512),
                ..d()
            },
            gib,
            Err("bs: request length 512 is not a nonzero multiple of the device block size 4096"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Fixed(256 << 10),
                ..d()
            },
            gib,
            Err("bs: request length 262144 exceeds the device's maximum transfer of 131072 bytes"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![(4096, 50), (6144, 50)]),
                ..d()
            },
            gib,
            Err(
                "bssplit: request length 6144 is not a nonzero multiple of the device block \
                 size 4096",
            ),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Fixed(65536),
                size_bytes: Some(32768),
                ..d()
            },
            gib,
            Err("bs: request length 65536 is larger than the job's region of 32768 bytes"),
        );
        check_validate(
            d(),
            2048,
            Err("device: size 2048 bytes is smaller than one block of 4096 bytes"),
        );
        assert_eq!(
            d().validate(gib, 0, 4096).map_err(|e| e.to_string()),
            Err("device: block size must be > 0".to_string())
        );
        // Fields written directly are re-checked.
        check_validate(
            JobSpec { iodepth: 0, ..d() },
            gib,
            Err("iodepth: must be in 1..=4096, got 0"),
        );
        check_validate(
            JobSpec {
                numjobs: 2000,
                ..d()
            },
            gib,
            Err("numjobs: must be in 1..=1024, got 2000"),
        );
        check_validate(
            JobSpec {
                rwmixread: 101,
                ..d()
            },
            gib,
            Err("rwmixread: must be in 0..=100, got 101"),
        );
        check_validate(
            JobSpec {
                random_distribution: Distribution::Zipf { theta: -1.0 },
                ..d()
            },
            gib,
            Err("random_distribution: zipf theta must be in (0, 100], got -1"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![(4096, 60), (8192, 60)]),
                ..d()
            },
            gib,
            Err("bssplit: percentages must sum to 100, they sum to 120"),
        );
        check_validate(
            JobSpec {
                bs: BlockSize::Split(vec![]),
                ..d()
            },
            gib,
            Err("bssplit: must have 1 to 64 entries, got 0"),
        );
        check_validate(
            JobSpec {
                size_bytes: Some(0),
                ..d()
            },
            gib,
            Err("size: must be > 0 or None"),
        );
        check_validate(
            JobSpec {
                runtime_ns: Some(0),
                ..d()
            },
            gib,
            Err("runtime: must be in 1..=2592000000000000 ns or None, got 0"),
        );
        check_validate(
            JobSpec {
                name: String::new(),
                ..d()
            },
            gib,
            Err("name: must be 1 to 255 bytes without control characters, got ''"),
        );
    }

    #[test]
    fn display_round_trips_through_set() {
        for text in ["4k", "1536", "1m"] {
            let mut job = d();
            job.set("bs", text).unwrap();
            assert_eq!(job.bs.to_string(), text);
        }
        let mut job = d();
        job.set("bssplit", "4k/10:1536/20:1m/70").unwrap();
        assert_eq!(job.bs.to_string(), "4k/10:1536/20:1m/70");
        for text in ["random", "zipf:1.2", "zipf:1"] {
            let mut job = d();
            job.set("random_distribution", text).unwrap();
            assert_eq!(job.random_distribution.to_string(), text);
        }
        for rw in ["read", "write", "randread", "randwrite", "rw", "randrw"] {
            assert_eq!(rw.parse::<RwMode>().unwrap().to_string(), rw);
        }
    }
}
