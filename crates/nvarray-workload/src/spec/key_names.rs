//! The fio keys a job understands and those it accepts and ignores (each with why), and the
//! known key closest to a typo. A leaf: the error messages name these lists too.

/// Every key [`JobSpec::set`] understands, in the order the docs list them.
///
/// `readwrite` is fio's alias of `rw`, `timeout` of `runtime`, `blocksize` of `bs`, `ba` of `blockalign`, `io_limit`
/// of `io_size`; `rwmixwrite=N` sets `rwmixread` to `100 - N` as in fio. `dataplacement=fdp`,
/// `plids` and `plid_select` are newer fio's names of `fdp=1`, `fdp_pli` and `fdp_pli_select`.
pub const SUPPORTED_KEYS: &[&str] = &[
    "name",
    "rw",
    "readwrite",
    "rw_sequencer",
    "verify_pattern",
    "verify_interval",
    "do_verify",
    "verify_backlog",
    "fill_device",
    "filesize",
    "exitall",
    "exit_what",
    "bs",
    "blocksize",
    "bssplit",
    "bsrange",
    "rwmixread",
    "rwmixwrite",
    "iodepth",
    "numjobs",
    "runtime",
    "timeout",
    "number_ios",
    "io_size",
    "io_limit",
    "random_distribution",
    "randseed",
    "offset",
    "offset_increment",
    "size",
    "loops",
    "blockalign",
    "ba",
    "thinktime",
    "thinktime_spin",
    "thinktime_blocks",
    "thinktime_blocks_type",
    "thinktime_iotime",
    "latency_target",
    "latency_window",
    "latency_percentile",
    "latency_run",
    "flow_id",
    "flow",
    "flow_sleep",
    "steadystate",
    "ss",
    "steadystate_duration",
    "ss_dur",
    "steadystate_ramp_time",
    "ss_ramp",
    "steadystate_check_interval",
    "ss_interval",
    "rate",
    "rate_iops",
    "rate_process",
    "verify",
    "ramp_time",
    "stonewall",
    "wait_for_previous",
    "new_group",
    "wait_for",
    "norandommap",
    "random_sequence_stride",
    "zonemode",
    "zonesize",
    "zonerange",
    "zoneskip",
    "time_based",
    "fdp",
    "fdp_pli",
    "fdp_pli_select",
    "dataplacement",
    "plids",
    "plid_select",
];

/// Keys that are switches: given bare (`stonewall`) they mean 1.
pub(super) const SWITCH_KEYS: &[&str] = &[
    "stonewall",
    "wait_for_previous",
    "new_group",
    "norandommap",
    "random_sequence_stride",
    "time_based",
    "fdp",
    "exitall",
];

/// fio keys that are accepted (with or without a value) and ignored, each with why: they do
/// not change the requests a modelled array sees. A front end says so in one line
/// ([`ignored_reason`]). Keys that change what happens and are not modelled fail as unknown.
const IGNORED: &[(&str, &str)] = &[
    ("ioengine", "nvarray is the engine: requests go to the modelled device"),
    (
        "filename",
        "the device is chosen by --preset/--device, not by a file (the name still seeds pareto and normal offsets, as in fio)",
    ),
    ("allow_file_create", "the device is chosen by --preset/--device: no file is created"),
    ("direct", "no page cache is modelled: every request reaches the device, as with direct=1"),
    ("buffered", "no page cache is modelled: every request reaches the device, as with buffered=0"),
    ("thread", "threads or processes look the same to the device"),
    ("threads", "threads or processes look the same to the device"),
    ("group_reporting", "nvarray reports each job, its threads summed, and the whole"),
    ("randrepeat", "runs always repeat: the same randseed gives the same requests (change randseed for others)"),
    ("random_generator", "offsets come from xoshiro256++; the generator changes which offsets, not how they spread"),
    ("invalidate", "the array has no page cache to invalidate"),
    ("fadvise_hint", "the array has no page cache"),
    ("iodepth_batch", "requests are submitted one at a time, as they free a slot"),
    ("iodepth_batch_submit", "requests are submitted one at a time, as they free a slot"),
    ("iodepth_batch_complete", "completions are reaped as they arrive"),
    ("iodepth_low", "requests are submitted one at a time, as they free a slot"),
    ("description", "a description changes nothing"),
    ("gtod_reduce", "nvarray reads its own clock, cheaply"),
    ("disable_lat", "nvarray measures every latency"),
    ("disable_clat", "nvarray measures every latency"),
    ("disable_slat", "nvarray measures every latency"),
    ("disable_bw_measurement", "nvarray measures every rate"),
    ("clat_percentiles", "percentiles are always reported"),
    ("lat_percentiles", "percentiles are always reported"),
    ("write_lat_log", "per-request logs are not written; the report has the percentiles (--output-format json+ the bins)"),
    ("write_bw_log", "per-interval logs are not written"),
    ("write_iops_log", "per-interval logs are not written"),
    ("write_hist_log", "per-interval logs are not written"),
    ("log_avg_msec", "per-interval logs are not written"),
    ("per_job_logs", "per-interval logs are not written"),
    ("log_offset", "per-interval logs are not written"),
    ("flow_watermark", "deprecated in fio, where it changes nothing either (parse.c:984-986)"),
    ("verify_dump", "a failed check stops the run with the block's offset and what is wrong in the error; no dump files are written"),
    ("create_serialize", "the device is chosen by --preset/--device: no file is created"),
    ("verify_write_sequence", "nvarray's verify checks each block's own header, not the order of writes"),
    (
        "io_submit_mode",
        "each thread issues its own requests, paced ones at their times (what offload is for in fio)",
    ),
];

/// The names of the keys accepted and ignored (see [`ignored_reason`]).
pub const IGNORED_KEYS: &[&str] = &[
    "ioengine",
    "filename",
    "allow_file_create",
    "direct",
    "buffered",
    "thread",
    "threads",
    "group_reporting",
    "randrepeat",
    "random_generator",
    "invalidate",
    "fadvise_hint",
    "iodepth_batch",
    "iodepth_batch_submit",
    "iodepth_batch_complete",
    "iodepth_low",
    "description",
    "gtod_reduce",
    "disable_lat",
    "disable_clat",
    "disable_slat",
    "disable_bw_measurement",
    "clat_percentiles",
    "lat_percentiles",
    "write_lat_log",
    "write_bw_log",
    "write_iops_log",
    "write_hist_log",
    "log_avg_msec",
    "per_job_logs",
    "log_offset",
    "flow_watermark",
    "verify_dump",
    "create_serialize",
    "verify_write_sequence",
    "io_submit_mode",
];

/// Why `key` is accepted and ignored, if it is.
pub fn ignored_reason(key: &str) -> Option<&'static str> {
    IGNORED.iter().find(|(k, _)| *k == key).map(|&(_, why)| why)
}

/// The known key closest to `key` by edit distance, if one is close enough to be a typo.
pub(crate) fn closest_key(key: &str) -> Option<&'static str> {
    SUPPORTED_KEYS
        .iter()
        .chain(IGNORED_KEYS)
        .map(|&k| (strsim::damerau_levenshtein(key, k), k))
        .filter(|&(d, k)| d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ignored key says why, and the two lists of ignored keys name the same keys.
    #[test]
    fn every_ignored_key_has_its_reason() {
        for key in IGNORED_KEYS {
            assert!(ignored_reason(key).is_some(), "{key} has no reason");
        }
        assert_eq!(
            IGNORED_KEYS.len(),
            IGNORED.len(),
            "the two lists name the same keys"
        );
    }
}
