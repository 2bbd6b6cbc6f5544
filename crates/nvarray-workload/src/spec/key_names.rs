//! The fio keys a job accepts and ignores, each with why, and the known key closest to a
//! typo (the keys it understands are `key_table.rs`' table).

use super::key_table::supported_keys;
use crate::error::WorkloadError;

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
pub fn ignored_keys() -> impl Iterator<Item = &'static str> {
    IGNORED.iter().map(|&(key, _)| key)
}

/// The error of a key neither supported nor ignored: it names the closest known key, then
/// every key supported and ignored.
pub(crate) fn unknown_key(key: &str) -> WorkloadError {
    let closest = closest_key(key)
        .map(|k| format!(" (did you mean '{k}'?)"))
        .unwrap_or_default();
    let supported: Vec<&str> = supported_keys().collect();
    let ignored: Vec<&str> = ignored_keys().collect();
    WorkloadError::UnknownKey {
        key: key.to_string(),
        known: format!(
            "{closest}; supported keys: {}; accepted and ignored: {}",
            supported.join(", "),
            ignored.join(", ")
        ),
    }
}

/// Why `key` is accepted and ignored, if it is.
pub fn ignored_reason(key: &str) -> Option<&'static str> {
    IGNORED.iter().find(|(k, _)| *k == key).map(|&(_, why)| why)
}

/// The known key closest to `key` by edit distance, if one is close enough to be a typo.
fn closest_key(key: &str) -> Option<&'static str> {
    supported_keys()
        .chain(ignored_keys())
        .map(|k| (strsim::damerau_levenshtein(key, k), k))
        .filter(|&(d, k)| d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No key is ignored twice, or both ignored and understood.
    #[test]
    fn every_key_is_ignored_once_and_never_also_understood() {
        let ignored: Vec<&str> = ignored_keys().collect();
        for (i, key) in ignored.iter().enumerate() {
            assert!(!ignored[..i].contains(key), "{key} is ignored twice");
            assert!(
                supported_keys().all(|k| k != *key),
                "{key} is both understood and ignored"
            );
        }
    }
}
