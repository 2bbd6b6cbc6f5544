//! `JobSpec::fio_options` writes a job back as the fio options that make it: applied to a
//! default job with `JobSpec::set`, they give the same job, whatever keys (and spellings)
//! built it. fio's JSON report lists them as the job's options.

use nvarray_workload::JobSpec;
use proptest::prelude::*;

/// Keys with values `set` accepts, several spellings of the same setting among them.
const SETTINGS: &[(&str, &[&str])] = &[
    (
        "rw",
        &[
            "read",
            "write",
            "randread",
            "randwrite",
            "rw",
            "randrw",
            "readwrite",
            "randread:8",
            "randrw:0",
            "read:-8k",
            "write:112k",
        ],
    ),
    ("readwrite", &["randwrite", "write:4k"]),
    ("rw_sequencer", &["sequential", "identical", "identical:3"]),
    ("bs", &["512", "4k", "64k", "1m", "3k"]),
    ("bssplit", &["4k/50:64k/50", "512/10:4k/0:16k/90"]),
    ("bsrange", &["4k-16k", "512-4k"]),
    ("blocksize", &["8k"]),
    ("rwmixread", &["0", "30", "50", "100"]),
    ("rwmixwrite", &["25"]),
    ("iodepth", &["1", "32"]),
    ("numjobs", &["1", "4"]),
    ("runtime", &["0", "1", "20ms", "1500us", "2s"]),
    ("timeout", &["3"]),
    ("number_ios", &["0", "77", "4k"]),
    ("io_size", &["1m", "12345k"]),
    ("io_limit", &["2g"]),
    (
        "random_distribution",
        &[
            "random",
            "zipf:1.2",
            "zipf:0.5",
            "pareto:0.3",
            "normal:5:0.5",
            "gauss",
            "zoned:50/5:30/15:20/",
            "zoned_abs:50/1m:50/2m",
            "sequence:2,0,1",
        ],
    ),
    ("random_sequence_stride", &["", "0", "1"]),
    ("zonemode", &["none", "strided"]),
    ("zonesize", &["64k", "256m"]),
    ("zonerange", &["1m"]),
    ("zoneskip", &["0", "2g"]),
    ("randseed", &["1", "137", "0x89"]),
    ("offset", &["0", "1m"]),
    ("offset_increment", &["64k"]),
    ("size", &["4m", "1g"]),
    ("loops", &["1", "3"]),
    ("blockalign", &["4k"]),
    ("ba", &["8k"]),
    ("thinktime", &["0", "10", "1500ns", "2ms"]),
    ("thinktime_spin", &["5", "1ms"]),
    ("verify_interval", &["512", "4k"]),
    ("do_verify", &["0", "1"]),
    ("verify_backlog", &["0", "1", "1024"]),
    ("fill_device", &["0", "1"]),
    ("filesize", &["1m"]),
    ("exitall", &["", "0", "1"]),
    ("exit_what", &["group", "stonewall", "all"]),
    ("thinktime_blocks", &["1", "16"]),
    ("thinktime_blocks_type", &["complete", "issue"]),
    ("thinktime_iotime", &["2", "500ms"]),
    ("latency_target", &["500", "2ms"]),
    ("latency_window", &["5s", "100000"]),
    ("latency_percentile", &["99.9", "100", "50"]),
    ("latency_run", &["0", "1"]),
    ("flow_id", &["0", "3"]),
    ("flow", &["0", "1", "1000"]),
    ("flow_sleep", &["1000", "2ms"]),
    (
        "steadystate",
        &[
            "iops_slope:0.01%",
            "iops:10%",
            "bw_slope:1%",
            "bw:10m",
            "iops:2.5",
            "lat:5%",
            "lat_slope:20",
        ],
    ),
    ("ss", &["iops:20%"]),
    ("steadystate_duration", &["30", "50ms"]),
    ("ss_dur", &["10s"]),
    ("steadystate_ramp_time", &["10"]),
    ("ss_ramp", &["5s"]),
    ("steadystate_check_interval", &["1", "10ms"]),
    ("ss_interval", &["2s"]),
    ("rate", &["1m", "100k"]),
    ("rate_iops", &["1000"]),
    ("rate_process", &["linear", "poisson"]),
    (
        "verify",
        &[
            "crc32c",
            "none",
            "crc64",
            "md5",
            "sha256",
            "meta",
            "pattern",
            "crc32c-intel",
        ],
    ),
    ("verify_pattern", &["0xaa555aa5", "\"abc\"", "255"]),
    ("ramp_time", &["0", "1", "5ms"]),
    ("stonewall", &["", "0", "1"]),
    ("wait_for_previous", &["1"]),
    ("new_group", &["", "0"]),
    ("wait_for", &["first"]),
    ("norandommap", &["", "0", "1"]),
    ("time_based", &["", "1", "0"]),
    ("fdp", &["", "0", "1"]),
    ("dataplacement", &["fdp", "none"]),
    ("fdp_pli", &["0", "1,3", "0-2,7"]),
    ("plids", &["4-5"]),
    ("fdp_pli_select", &["roundrobin", "random"]),
    ("plid_select", &["random"]),
];

proptest! {
    #[test]
    fn a_jobs_fio_options_build_it_again(
        picks in proptest::collection::vec((0..SETTINGS.len(), 0usize..8), 0..20)
    ) {
        let mut job = JobSpec::default();
        for (key_index, value_index) in picks {
            let (key, values) = SETTINGS[key_index];
            // A value `set` refuses leaves the job as it was; the options must still hold.
            let _ = job.set(key, values[value_index % values.len()]);
        }
        let mut again = JobSpec::default();
        for (key, value) in job.fio_options() {
            prop_assert!(again.set(key, &value).is_ok(), "{key}={value} refused");
        }
        prop_assert_eq!(again, job);
    }
}

/// A job given nothing has no options; one given its defaults in other words has none either.
#[test]
fn the_default_job_has_no_options() {
    assert!(JobSpec::default().fio_options().is_empty());
    let mut job = JobSpec::default();
    for (key, value) in [
        ("rw", "read"),
        ("bs", "4096"),
        ("rwmixwrite", "50"),
        ("iodepth", "1"),
    ] {
        job.set(key, value).unwrap();
    }
    assert_eq!(job.fio_options(), Vec::<(&str, String)>::new());
}

/// Every key `set` understands is among the settings the property draws from, so a key added
/// to the table without a way back fails here (the job's name is the section's).
#[test]
fn every_key_is_drawn() {
    for key in nvarray_workload::supported_keys().filter(|&k| k != "name") {
        assert!(
            SETTINGS.iter().any(|(k, _)| *k == key),
            "no setting draws {key}"
        );
    }
}
