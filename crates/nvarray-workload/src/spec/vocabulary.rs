//! The value types of fio's vocabulary that a job is made of: the direction of a request,
//! access patterns (`rw`), request-length mixes (`bs`, `bssplit`) and data verification, each
//! with fio's names for reading and writing it back (offset distributions are in
//! `distribution.rs`).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{value_error, WorkloadError};
use crate::units::format_size;

/// The direction of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Direction {
    /// Read from the device.
    Read,
    /// Write to the device.
    Write,
}

/// One request as the generator issues it; the simulator adds time and a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Request {
    /// Read or write.
    pub op: Direction,
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

    /// True for `write` and `randwrite`, the modes that only write.
    pub fn writes_only(self) -> bool {
        matches!(self, RwMode::Write | RwMode::RandWrite)
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
                    "must be one of read, write, randread, randwrite, rw (readwrite), randrw, \
                     with an optional :N (trim modes are not supported)",
                ))
            }
        };
        Ok(mode)
    }
}

/// How the requests between two random jumps of `rw=randread:N` choose their offsets (fio's
/// `rw_sequencer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RwSequencer {
    /// `sequential` (fio's default): each continues where the previous one of its direction
    /// ended.
    #[default]
    Sequential,
    /// `identical`: each repeats the previous one's offset.
    Identical,
}

impl fmt::Display for RwSequencer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RwSequencer::Sequential => "sequential",
            RwSequencer::Identical => "identical",
        })
    }
}

impl FromStr for RwSequencer {
    type Err = String;

    /// `sequential` or `identical`; a `:N` after it is ignored, as fio 3.33 ignores it (the
    /// run's length comes from `rw=...:N`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':').map_or(s, |(name, _)| name).trim() {
            "sequential" => Ok(RwSequencer::Sequential),
            "identical" => Ok(RwSequencer::Identical),
            _ => Err("must be sequential or identical".to_string()),
        }
    }
}

/// fio's `zonemode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ZoneMode {
    /// `none` (default): no zones.
    #[default]
    None,
    /// `strided`: fio's own zones over the region (`StridedZones`).
    Strided,
    /// `zbd`: the zoned device's zones.
    Zbd,
}

impl fmt::Display for ZoneMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ZoneMode::None => "none",
            ZoneMode::Strided => "strided",
            ZoneMode::Zbd => "zbd",
        })
    }
}

impl FromStr for ZoneMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(ZoneMode::None),
            "strided" => Ok(ZoneMode::Strided),
            "zbd" => Ok(ZoneMode::Zbd),
            _ => Err("must be none, strided or zbd".to_string()),
        }
    }
}

/// fio's strided zones (`zonemode=strided`): `size` bytes of I/O in a zone of `range` bytes,
/// then the next zone `range + skip` bytes on, from the region's start again past its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StridedZones {
    /// `zonesize`: bytes of I/O per zone (0: not given).
    pub size_bytes: u64,
    /// `zonerange`: the zone's extent (default `zonesize`).
    pub range_bytes: Option<u64>,
    /// `zoneskip`: bytes between one zone's end and the next's start.
    pub skip_bytes: u64,
}

impl StridedZones {
    /// The zone's extent: `zonerange`, or `zonesize`.
    pub fn range(&self) -> u64 {
        self.range_bytes.unwrap_or(self.size_bytes)
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
    /// fio's `bsrange`: every multiple of `min` from `min` to `max` (a multiple of `min`),
    /// each equally likely.
    Range {
        /// The shortest length, and the step between lengths.
        min: u32,
        /// The longest length.
        max: u32,
    },
}

impl BlockSize {
    /// The mean request length in bytes.
    pub fn mean_bytes(&self) -> f64 {
        match self {
            BlockSize::Fixed(len_bytes) => f64::from(*len_bytes),
            BlockSize::Split(entries) => {
                let percent: u32 = entries.iter().map(|&(_, p)| p).sum();
                let weighted: f64 = entries
                    .iter()
                    .map(|&(len, p)| f64::from(len) * f64::from(p))
                    .sum();
                weighted / f64::from(percent.max(1))
            }
            BlockSize::Range { min, max } => (f64::from(*min) + f64::from(*max)) / 2.0,
        }
    }

    /// The job key that sets this variant, for error messages.
    pub fn key(&self) -> &'static str {
        match self {
            BlockSize::Fixed(_) => "bs",
            BlockSize::Split(_) => "bssplit",
            BlockSize::Range { .. } => "bsrange",
        }
    }

    /// The lengths a request may have that checks need: every `bssplit` entry (including
    /// those with 0 percent), and a `bsrange`'s two ends (its other lengths are multiples of
    /// its smallest, so they pass every check both ends pass).
    pub fn lens_bytes(&self) -> impl Iterator<Item = u32> + '_ {
        let (ends, split): ([Option<u32>; 2], &[(u32, u32)]) = match self {
            BlockSize::Fixed(len_bytes) => ([Some(*len_bytes), None], &[]),
            BlockSize::Split(entries) => ([None, None], entries),
            BlockSize::Range { min, max } => ([Some(*min), Some(*max)], &[]),
        };
        ends.into_iter()
            .flatten()
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
            BlockSize::Range { min, max } => write!(
                f,
                "{}-{}",
                format_size(u64::from(*min)),
                format_size(u64::from(*max))
            ),
        }
    }
}

/// Data verification, fio's `verify` key. Only engines that move data (the emulator) verify;
/// the simulator moves none and ignores it. Every kind but `pattern` writes a header in each
/// device block (its own offset and a write stamp, checked on every read with a CRC-32C of
/// its own); the checksum kinds add a digest of the block's data. A block read back must be
/// all zeroes (never written) or pass its checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// `verify=0` or `verify=none`: data is not checked.
    #[default]
    None,
    /// `verify=crc32c` (or `crc32c-intel`, `1`): a CRC-32C of the block.
    Crc32c,
    /// `verify=crc64`: a CRC-64 of the data (fio's: reflected ECMA-182 polynomial of Jones,
    /// known as CRC-64/REDIS).
    Crc64,
    /// `verify=md5`: an MD5 digest of the data.
    Md5,
    /// `verify=sha256`: a SHA-256 digest of the data (standard SHA-256; fio's own differs
    /// from the standard, which only matters for data fio wrote).
    Sha256,
    /// `verify=meta`: the header alone (offset, stamp); with `verify_pattern`, the data must
    /// also be the pattern (fio's header-plus-pattern check).
    Meta,
    /// `verify=pattern`: no header; every byte of the block is `verify_pattern`'s.
    Pattern,
}

impl FromStr for Verify {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" | "none" => Ok(Verify::None),
            "1" | "crc32c" | "crc32c-intel" => Ok(Verify::Crc32c),
            "crc64" => Ok(Verify::Crc64),
            "md5" => Ok(Verify::Md5),
            "sha256" => Ok(Verify::Sha256),
            "meta" => Ok(Verify::Meta),
            "pattern" => Ok(Verify::Pattern),
            _ => Err(
                "must be crc32c (or 1), crc64, md5, sha256, meta or pattern to verify, none (or \
                 0) not to (crc16, crc7, sha1, sha512, xxhash and the sha3 kinds are not built)"
                    .to_string(),
            ),
        }
    }
}

impl fmt::Display for Verify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verify::None => "none",
            Verify::Crc32c => "crc32c",
            Verify::Crc64 => "crc64",
            Verify::Md5 => "md5",
            Verify::Sha256 => "sha256",
            Verify::Meta => "meta",
            Verify::Pattern => "pattern",
        })
    }
}

/// The most bytes a `'file'` pattern takes, as fio's `MAX_PATTERN_SIZE`.
const PATTERN_FILE_BYTES_MAX: usize = 512;

/// fio's `verify_pattern`: `0x` and hex digits (bytes in written order), a decimal number (its
/// bytes, least significant first, as few as it needs), a `"quoted"` string, or a `'file'`
/// (its first 512 bytes); several concatenated. fio's `%o` (each request's offset) is not
/// taken.
pub fn parse_verify_pattern(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').ok_or("a '\"' without its closing quote")?;
            out.extend_from_slice(&quoted.as_bytes()[..end]);
            rest = quoted[end + 1..].trim_start();
        } else if let Some(hex) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
            let end = hex
                .find(|c: char| !c.is_ascii_hexdigit())
                .unwrap_or(hex.len());
            let digits = &hex[..end];
            if digits.is_empty() {
                return Err("0x without hex digits".into());
            }
            // An odd count reads as a leading 0.
            let padded = if digits.len() % 2 == 1 {
                format!("0{digits}")
            } else {
                digits.to_string()
            };
            for pair in padded.as_bytes().chunks(2) {
                let pair = std::str::from_utf8(pair).expect("hex digits are ASCII");
                out.push(u8::from_str_radix(pair, 16).expect("hex digits"));
            }
            rest = hex[end..].trim_start();
        } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let n: u64 = rest[..end]
                .parse()
                .map_err(|_| format!("{} is too large", &rest[..end]))?;
            let bytes = n.to_le_bytes();
            let used = (8 - n.leading_zeros() as usize / 8).max(1);
            out.extend_from_slice(&bytes[..used]);
            rest = rest[end..].trim_start();
        } else if let Some(quoted) = rest.strip_prefix('\'') {
            // fio's 'file': the pattern's bytes read from a file, at most fio's 512
            // (`MAX_PATTERN_SIZE`; lib/pattern.c reads no more).
            let end = quoted
                .find('\'')
                .ok_or("a \"'\" without its closing quote")?;
            let path = &quoted[..end];
            let mut bytes =
                std::fs::read(path).map_err(|e| format!("cannot read pattern file {path}: {e}"))?;
            if bytes.is_empty() {
                return Err(format!("pattern file {path} is empty"));
            }
            bytes.truncate(PATTERN_FILE_BYTES_MAX);
            out.extend_from_slice(&bytes);
            rest = quoted[end + 1..].trim_start();
        } else if rest.starts_with("%o") {
            return Err(
                "fio's %o (each request's offset in the pattern) is not taken: nvarray checks \
                 each block by itself, without the request that wrote it"
                    .into(),
            );
        } else {
            return Err(format!(
                "unexpected {rest:?}: give 0xHEX, a number or \"text\""
            ));
        }
    }
    if out.is_empty() {
        return Err("is empty".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::JobSpec;

    fn d() -> JobSpec {
        JobSpec::default()
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
        for rw in ["read", "write", "randread", "randwrite", "rw", "randrw"] {
            assert_eq!(rw.parse::<RwMode>().unwrap().to_string(), rw);
        }
    }
}

/// How a rate-capped job spaces its requests (fio's `rate_process`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RateProcess {
    /// `linear` (fio's default): evenly, one every 1 / rate.
    #[default]
    Linear,
    /// `poisson`: exponentially distributed gaps of mean 1 / rate, as independent users
    /// arrive (a Poisson process).
    Poisson,
}

impl fmt::Display for RateProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RateProcess::Linear => "linear",
            RateProcess::Poisson => "poisson",
        })
    }
}

impl FromStr for RateProcess {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "linear" => Ok(RateProcess::Linear),
            "poisson" => Ok(RateProcess::Poisson),
            _ => Err("must be linear or poisson".to_string()),
        }
    }
}
