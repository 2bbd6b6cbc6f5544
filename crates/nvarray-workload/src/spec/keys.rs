//! [`JobSpec::set`], [`JobSpec::fio_options`] and [`JobSpec::check_fields`]: a fio
//! `key=value` read into a job, a job written back as the pairs that make it, and a job's
//! fields checked against the ranges `set` enforces. All three walk the table of keys
//! (`key_table.rs`), for job files and command lines alike.

use super::key_names::{ignored_reason, unknown_key};
use super::key_table::{find, Read, Write, KEYS};
use super::JobSpec;
use crate::error::{value_error, WorkloadError};

impl JobSpec {
    /// Parses and applies one fio option; the job-file parser and the command line both go
    /// through here, so a key means the same thing everywhere.
    ///
    /// Keys are [`supported_keys`](super::supported_keys), each read as its entry of the
    /// table of keys says; keys in [`ignored_keys`](super::ignored_keys) are accepted with
    /// any value (even none) and change nothing. Every other key is an error naming it. The
    /// value is trimmed; a switch (`stonewall`) given bare is on, and any other key with an
    /// empty value is a [`WorkloadError::MissingValue`]. On error `self` is unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), WorkloadError> {
        let value = value.trim();
        if key == "filename" {
            // Ignored for the device, kept for the seed (see `JobSpec::filename`).
            self.filename = (!value.is_empty()).then(|| value.to_string());
        }
        if ignored_reason(key).is_some() {
            return Ok(());
        }
        let Some(def) = find(key) else {
            return Err(unknown_key(key));
        };
        match def.read {
            Read::Switch(set) => {
                set(self, parse_switch(key, value)?);
                Ok(())
            }
            Read::Value(_) if value.is_empty() => Err(WorkloadError::MissingValue {
                key: key.to_string(),
            }),
            Read::Value(set) => set(self, key, value),
        }
    }

    /// The job's settings that differ from the defaults, as fio `key=value` pairs in the
    /// table's order (fio's documentation's); applying them with [`JobSpec::set`] to a
    /// default job gives this job back (its name aside, which is the section's). `nvarray
    /// fio`'s `ends_by_size` without `runtime=0` is the one setting no key writes.
    pub fn fio_options(&self) -> Vec<(&'static str, String)> {
        let default = JobSpec::default();
        let out: Vec<(&'static str, String)> = KEYS
            .iter()
            .filter_map(|def| match def.write {
                Write::Value(write) => write(self, &default).map(|value| (def.name, value)),
                Write::Never => None,
            })
            .collect();
        assert!(out.iter().all(|(_, value)| !value.is_empty()), "{out:?}");
        out
    }

    /// Checks every field against the ranges [`JobSpec::set`] enforces (each key's check in
    /// the table of keys), for a job whose public fields were written directly.
    pub(crate) fn check_fields(&self) -> Result<(), WorkloadError> {
        KEYS.iter()
            .filter_map(|def| def.check)
            .try_for_each(|check| check(self))
    }
}

/// A switch's value: bare or 1 turns it on, 0 off.
fn parse_switch(key: &str, value: &str) -> Result<bool, WorkloadError> {
    match value {
        "" | "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(value_error(
            key,
            value,
            "is a switch: give it bare, or 0 or 1",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::key_names::ignored_keys;
    use crate::spec::key_table::supported_keys;
    use crate::spec::limits::{BSSPLIT_ENTRIES_MAX, RUNTIME_NS_MAX};
    use crate::spec::vocabulary::BlockSize;
    use crate::spec::{Distribution, RateProcess, RwMode, Verify, NAME_BYTES_MAX};
    use crate::units::{NS_PER_S, NS_PER_US};
    use nvarray_units::SizeErrorKind;

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
        for key in ignored_keys() {
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
        let unknown = unknown_key("iodpeth").to_string();
        assert!(unknown.starts_with(
            "unknown key 'iodpeth' (did you mean 'iodepth'?); supported keys: name, rw, "
        ));
        assert!(unknown.ends_with(&format!(
            "accepted and ignored: {}",
            ignored_keys().collect::<Vec<_>>().join(", ")
        )));
        assert!(unknown
            .contains("accepted and ignored: ioengine, filename, allow_file_create, direct, "));
        check("iodpeth", "4", Err(&unknown));
        check(
            "exitall_on_error",
            "",
            Err(&unknown_key("exitall_on_error").to_string()),
        );
        let switches = |key: &str| matches!(find(key).map(|def| &def.read), Some(Read::Switch(_)));
        for key in supported_keys().filter(|k| !switches(k)) {
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

#[cfg(test)]
mod control_key_tests {
    use super::*;
    use crate::spec::control::SteadyMetric;
    use crate::units::NS_PER_S;

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
