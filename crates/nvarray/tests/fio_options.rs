//! fio's own option names on the command line and in job files: aliases, rate caps, byte
//! limits, and the options nvarray accepts and ignores, each said on stderr with why.

mod common;

use std::process::{Command, Output};

fn nvarray(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("run nvarray")
}

fn run(args: &[&str]) -> (serde_json::Value, String) {
    let out = nvarray(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "nvarray {args:?}: {stderr}");
    (serde_json::from_slice(&out.stdout).expect("JSON"), stderr)
}

#[test]
fn a_fio_command_line_runs_with_its_own_option_names() {
    let (r, notes) = run(&[
        "sim",
        "--preset",
        "dram",
        "--ioengine=libaio",
        "--direct=1",
        "--filename=/dev/nvme0n1",
        "--time_based",
        "--norandommap",
        "--group_reporting",
        "--readwrite=randrw",
        "--rwmixwrite=30",
        "--blocksize=8k",
        "--iodepth=8",
        "--rate_iops=50000",
        "--runtime=20ms",
        "--json",
    ]);
    // 50,000 a second for 20 ms.
    assert_eq!(r["requests"], 1000);
    let reads = r["read_requests"].as_f64().unwrap();
    assert!((600.0..800.0).contains(&reads), "about 70 % reads: {reads}");
    assert_eq!(r["read_bytes"].as_f64().unwrap(), reads * 8192.0);
    for key in ["ioengine", "direct", "filename", "group_reporting"] {
        assert!(
            notes.contains(&format!("note: --{key} ignored: ")),
            "{key}: {notes}"
        );
    }
    // fio's switches that change the run are applied, not noted.
    for key in ["time_based", "norandommap"] {
        assert!(!notes.contains(&format!("--{key}")), "{key}: {notes}");
    }
    assert_eq!(notes.lines().count(), 4, "one line each: {notes}");
}

#[test]
fn io_size_and_runtime_zero_end_a_job_by_bytes_as_in_fio() {
    let (r, _) = run(&[
        "sim",
        "--rw",
        "write",
        "--bs",
        "64k",
        "--io_size",
        "1m",
        "--json",
    ]);
    assert_eq!(r["write_bytes"], 1 << 20);
    let (r, _) = run(&[
        "sim",
        "--rw",
        "read",
        "--bs",
        "1m",
        "--size",
        "16m",
        "--runtime",
        "0",
        "--json",
    ]);
    assert_eq!(r["read_bytes"], 16 << 20);
}

#[test]
fn a_job_file_notes_its_ignored_keys_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.fio");
    std::fs::write(
        &path,
        "[global]\nioengine=io_uring\ndirect=1\nbs=4k\n[reader]\nrw=randread\nrate_iops=10k\nrate_process=poisson\nruntime=10ms\n",
    )
    .unwrap();
    let (r, notes) = run(&["sim", "--preset", "dram", path.to_str().unwrap(), "--json"]);
    let n = r["requests"].as_f64().unwrap();
    // 10k = 10,240 a second, Poisson: about 102 in 10 ms.
    assert!((60.0..150.0).contains(&n), "{n}");
    assert!(notes.contains("line 2: ioengine ignored"), "{notes}");
    assert!(notes.contains("line 3: direct ignored"), "{notes}");
}

#[test]
fn what_is_not_modelled_is_noted_and_what_is_malformed_refused() {
    // No page cache, always repeatable: accepted, and said.
    let (_, notes) = run(&[
        "sim",
        "--direct=0",
        "--randrepeat=0",
        "--number_ios=10",
        "--json",
    ]);
    assert!(
        notes.contains("--direct ignored: no page cache is modelled"),
        "{notes}"
    );
    assert!(
        notes.contains("--randrepeat ignored: runs always repeat"),
        "{notes}"
    );
    for (args, expected) in [
        (
            &["sim", "--rate=1m,2m"][..],
            "one value for reads and writes",
        ),
        (&["sim", "--rate_process=bursty"][..], "linear or poisson"),
        (
            &["sim", "--rwmixread=70", "--rwmixwrite=30"][..],
            "cannot be used with",
        ),
    ] {
        let out = nvarray(args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(expected), "{args:?}: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.fio");
    std::fs::write(&path, "[j]\nrate_iop=5\n").unwrap();
    let out = nvarray(&["sim", path.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("line 2: unknown key 'rate_iop' (did you mean 'rate_iops'?)"),
        "{e}"
    );
}

/// One job-file key with a value and what the report must show for it.
struct KeyCase {
    key: &'static str,
    value: &'static str,
    /// Other lines the job needs for the key to show (a mixed `rw` for `rwmixread`).
    with: &'static str,
    check: fn(&serde_json::Value) -> bool,
}

fn job(r: &serde_json::Value) -> &serde_json::Value {
    &r["streams"][0]
}

/// The first job's requests over the second's.
fn flow_ratio(r: &serde_json::Value) -> f64 {
    let n = |i: usize| r["streams"][i]["requests"].as_f64().unwrap();
    n(0) / n(1).max(1.0)
}

/// A steady-state job: 100 ms at most, judged over 5 samples of 1 ms.
const STEADY: &str = "runtime=100ms\nss=iops:50%\nss_dur=5ms\nss_interval=1ms";

fn steady(r: &serde_json::Value) -> &serde_json::Value {
    &job(r)["steadystate"]
}

fn mean_len(r: &serde_json::Value) -> f64 {
    let bytes = r["read_bytes"].as_f64().unwrap() + r["write_bytes"].as_f64().unwrap();
    bytes / r["requests"].as_f64().unwrap().max(1.0)
}

/// The data placement keys, which need a device with placement handles.
const PLACEMENT_KEYS: &[&str] = &[
    "fdp",
    "dataplacement",
    "fdp_pli",
    "plids",
    "fdp_pli_select",
    "plid_select",
];

/// The settings that put the flash tests' small drive (`common::SMALL_TLC`) behind an FTL
/// with two placement handles.
const PLACEMENT_FTL: &[&str] = &[
    "--set",
    "ftl.enabled=true",
    "--set",
    "ftl.placement_handles=2",
    "--set",
    "ftl.over_provisioning=0.2",
];

/// Random writes enough to spread over the handles.
const PLACED_WRITES: &str = "rw=randwrite\niodepth=16\nruntime=50ms";

/// Host pages the FTL counted under each placement handle.
fn handle_pages(r: &serde_json::Value) -> Vec<u64> {
    r["ftl"]["host_pages_by_handle"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_u64()).collect())
        .unwrap_or_default()
}

/// Every key nvarray supports, in a job file of its own, with a check that it did what
/// fio's key does; a new key without a case here fails the test.
#[test]
fn every_supported_key_works_in_a_job_file() {
    let cases = [
        KeyCase {
            key: "name",
            value: "alpha",
            with: "",
            check: |r| job(r)["name"] == "alpha",
        },
        KeyCase {
            key: "rw",
            value: "randwrite",
            with: "",
            check: |r| r["read_requests"] == 0 && r["write_requests"].as_u64() > Some(0),
        },
        KeyCase {
            key: "readwrite",
            value: "write",
            with: "",
            check: |r| r["read_requests"] == 0,
        },
        KeyCase {
            key: "bs",
            value: "8k",
            with: "",
            check: |r| mean_len(r) == 8192.0,
        },
        KeyCase {
            key: "blocksize",
            value: "16k",
            with: "",
            check: |r| mean_len(r) == 16384.0,
        },
        KeyCase {
            key: "bssplit",
            value: "4k/50:8k/50",
            with: "",
            check: |r| (5000.0..7300.0).contains(&mean_len(r)),
        },
        KeyCase {
            key: "bsrange",
            value: "4k-16k",
            with: "",
            check: |r| (9000.0..11500.0).contains(&mean_len(r)),
        },
        KeyCase {
            key: "rwmixread",
            value: "100",
            with: "rw=randrw",
            check: |r| r["write_requests"] == 0,
        },
        KeyCase {
            key: "rwmixwrite",
            value: "100",
            with: "rw=randrw",
            check: |r| r["read_requests"] == 0,
        },
        KeyCase {
            key: "iodepth",
            value: "16",
            with: "rw=randread",
            // 0.14 at iodepth 1: sixteen in flight keep the link to the host busy.
            check: |r| r["utilisation"]["link_to_host"].as_f64() > Some(0.5),
        },
        KeyCase {
            key: "numjobs",
            value: "3",
            with: "number_ios=10",
            check: |r| r["requests"] == 30,
        },
        KeyCase {
            key: "runtime",
            value: "1ms",
            with: "",
            check: |r| r["elapsed_ns"] == 1_000_000,
        },
        KeyCase {
            key: "timeout",
            value: "1ms",
            with: "",
            check: |r| r["elapsed_ns"] == 1_000_000,
        },
        KeyCase {
            key: "number_ios",
            value: "77",
            with: "",
            check: |r| r["requests"] == 77,
        },
        KeyCase {
            key: "io_size",
            value: "64k",
            with: "",
            check: |r| r["read_bytes"] == 65536,
        },
        KeyCase {
            key: "io_limit",
            value: "32k",
            with: "",
            check: |r| r["read_bytes"] == 32768,
        },
        KeyCase {
            key: "random_distribution",
            value: "zipf:1.2",
            with: "rw=randread",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "zonemode",
            value: "strided",
            with: "zonesize=64k\nzoneskip=1m\nrw=read\nsize=4m\nbs=64k",
            // One 64 KiB request per zone, every 1 MiB + 64 KiB of the 4 MiB region: the job
            // moves its size in 64 requests all the same.
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "zonesize",
            value: "128k",
            with: "zonemode=strided\nrw=read",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "zonerange",
            value: "256k",
            with: "zonemode=strided\nzonesize=64k\nrw=randread",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "zoneskip",
            value: "2z",
            with: "zonemode=strided\nzonesize=64k\nrw=read",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "verify_pattern",
            value: "0xaa555aa5",
            with: "rw=write\nverify=pattern",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "random_sequence_stride",
            value: "1",
            with: "rw=randread\nrandom_distribution=sequence:2,0,1",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "rw_sequencer",
            value: "identical",
            with: "rw=randread:4",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "randseed",
            value: "7",
            with: "rw=randread",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "offset",
            value: "1m",
            with: "size=64k\nruntime=0",
            check: |r| r["read_bytes"] == 65536,
        },
        KeyCase {
            key: "offset_increment",
            value: "1m",
            with: "numjobs=2\nsize=64k\nruntime=0",
            check: |r| r["read_bytes"] == 131072,
        },
        KeyCase {
            key: "size",
            value: "128k",
            with: "runtime=0",
            check: |r| r["read_bytes"] == 131072,
        },
        KeyCase {
            key: "loops",
            value: "3",
            with: "number_ios=10",
            check: |r| r["requests"] == 30,
        },
        KeyCase {
            key: "blockalign",
            value: "8k",
            with: "rw=randread",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "ba",
            value: "8k",
            with: "rw=randread",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "thinktime",
            value: "100",
            with: "",
            check: |r| r["requests"].as_u64() < Some(25),
        },
        // The steering keys (fio semantics checked in nvarray-run's fio_controls.rs).
        KeyCase {
            key: "thinktime_spin",
            value: "50",
            with: "thinktime=100",
            check: |r| r["requests"].as_u64() < Some(25),
        },
        // A think every 10 completions instead of every one.
        KeyCase {
            key: "thinktime_blocks",
            value: "10",
            with: "thinktime=100",
            check: |r| (100..400).contains(&r["requests"].as_u64().unwrap()),
        },
        // Bursts of 4 issued, then a think; counting completions, one request a think after
        // the first burst.
        KeyCase {
            key: "thinktime_blocks_type",
            value: "issue",
            with: "thinktime=100\nthinktime_blocks=4\niodepth=4",
            check: |r| (60..100).contains(&r["requests"].as_u64().unwrap()),
        },
        // 1 ms of I/O, then a think, instead of a think after every request.
        KeyCase {
            key: "thinktime_iotime",
            value: "1ms",
            with: "thinktime=500",
            check: |r| r["requests"].as_u64() > Some(100),
        },
        KeyCase {
            key: "latency_target",
            value: "1000",
            with: "iodepth=8\nlatency_window=100us",
            check: |r| job(r)["latency_depth"] == 8 && r["elapsed_ns"].as_u64() < Some(2_000_000),
        },
        KeyCase {
            key: "latency_window",
            value: "100us",
            with: "iodepth=8\nlatency_target=1000",
            check: |r| job(r)["latency_depth"] == 8 && r["elapsed_ns"].as_u64() < Some(2_000_000),
        },
        KeyCase {
            key: "latency_percentile",
            value: "50",
            with: "iodepth=8\nlatency_target=1000\nlatency_window=100us",
            check: |r| job(r)["latency_depth"] == 8,
        },
        // The search never settles, so the job runs its 2 ms.
        KeyCase {
            key: "latency_run",
            value: "1",
            with: "iodepth=8\nlatency_target=1000\nlatency_window=100us",
            check: |r| job(r)["latency_depth"] == 8 && r["elapsed_ns"].as_u64() >= Some(2_000_000),
        },
        // Two jobs at depth 1 on one device do about as many requests each; in one flow,
        // weights 8 and 1, eight times as many.
        KeyCase {
            key: "flow_id",
            value: "5",
            with: "flow_id=5\nflow=8\n[k]\nflow=1",
            check: |r| flow_ratio(r) > 7.5 && flow_ratio(r) < 8.5,
        },
        KeyCase {
            key: "flow",
            value: "1",
            with: "flow=8\n[k]",
            check: |r| flow_ratio(r) > 7.5 && flow_ratio(r) < 8.5,
        },
        KeyCase {
            key: "flow_sleep",
            value: "100",
            with: "flow=8\n[k]\nflow=1",
            check: |r| flow_ratio(r) > 7.5 && flow_ratio(r) < 8.5,
        },
        KeyCase {
            key: "steadystate",
            value: "iops:50%",
            with: STEADY,
            check: |r| steady(r)["attained"] == true && steady(r)["ss"] == "iops:50.000000%",
        },
        KeyCase {
            key: "ss",
            value: "bw_slope:50%",
            with: STEADY,
            check: |r| steady(r)["attained"] == true && steady(r)["ss"] == "bw_slope:50.000000%",
        },
        KeyCase {
            key: "steadystate_duration",
            value: "4ms",
            with: "runtime=100ms\nss=iops:50%\nss_interval=1ms",
            check: |r| steady(r)["duration"] == 4 && r["elapsed_ns"].as_u64() < Some(5_000_000),
        },
        KeyCase {
            key: "ss_dur",
            value: "6ms",
            with: "runtime=100ms\nss=iops:50%\nss_interval=1ms",
            check: |r| steady(r)["duration"] == 6 && r["elapsed_ns"].as_u64() < Some(7_000_000),
        },
        // Samples start one interval after the ramp.
        KeyCase {
            key: "steadystate_ramp_time",
            value: "10ms",
            with: STEADY,
            check: |r| steady(r)["attained"] == true && r["elapsed_ns"].as_u64() > Some(14_000_000),
        },
        KeyCase {
            key: "ss_ramp",
            value: "20ms",
            with: STEADY,
            check: |r| steady(r)["attained"] == true && r["elapsed_ns"].as_u64() > Some(24_000_000),
        },
        KeyCase {
            key: "steadystate_check_interval",
            value: "2ms",
            with: "runtime=100ms\nss=iops:50%\nss_dur=10ms",
            check: |r| steady(r)["duration"] == 5,
        },
        KeyCase {
            key: "ss_interval",
            value: "5ms",
            with: "runtime=100ms\nss=iops:50%\nss_dur=10ms",
            check: |r| steady(r)["duration"] == 2,
        },
        KeyCase {
            key: "rate",
            value: "4m",
            with: "",
            check: |r| r["paced_issued_late"] == 0 && r["requests"].as_u64() < Some(5),
        },
        KeyCase {
            key: "rate_iops",
            value: "10000",
            with: "",
            check: |r| r["requests"] == 20,
        },
        KeyCase {
            key: "rate_process",
            value: "poisson",
            with: "rate_iops=10000",
            check: |r| r["requests"] != 20,
        },
        KeyCase {
            key: "verify",
            value: "crc32c",
            with: "",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        // The emulator checks these (nvarray-run tests/emu.rs); the simulator moves no data.
        KeyCase {
            key: "verify_interval",
            value: "512",
            with: "rw=write\nverify=crc32c",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        KeyCase {
            key: "do_verify",
            value: "0",
            with: "verify=crc32c",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        // One file's size: the job's region when `size` is not given.
        KeyCase {
            key: "filesize",
            value: "64k",
            with: "rw=write\nruntime=0",
            check: |r| r["write_bytes"] == 65536,
        },
        // `j` ends after 10 requests and ends `k` (a job of its own group) with it.
        KeyCase {
            key: "exitall",
            value: "",
            with: "number_ios=10\nexit_what=stonewall\n[k]\nnew_group",
            check: |r| r["elapsed_ns"].as_u64() < Some(100_000),
        },
        // `j2` ends after 10 requests and, with `stonewall`, every running job with it.
        KeyCase {
            key: "exit_what",
            value: "stonewall",
            with: "exitall\n[j2]\nnew_group\nnumber_ios=10",
            check: |r| r["elapsed_ns"].as_u64() < Some(100_000),
        },
        // Every write read back: 64 KiB written, 64 KiB read.
        KeyCase {
            key: "verify_backlog",
            value: "4",
            with: "rw=write\nverify=crc32c\nio_size=64k\nruntime=0",
            check: |r| r["write_bytes"] == 65536 && r["read_bytes"] == 65536,
        },
        // The whole device (the dram preset's 16 GiB), whatever `size` says.
        KeyCase {
            key: "fill_device",
            value: "1",
            with: "rw=write\nbs=1m\nsize=64k\nruntime=0",
            check: |r| r["write_bytes"] == 16u64 << 30,
        },
        KeyCase {
            key: "ramp_time",
            value: "1ms",
            with: "",
            check: |r| r["elapsed_ns"] == 2_000_000,
        },
        KeyCase {
            key: "stonewall",
            value: "",
            with: "",
            check: |r| {
                r["groups"].as_array().map(Vec::len) == Some(2) && r["elapsed_ns"] == 4_000_000
            },
        },
        KeyCase {
            key: "wait_for_previous",
            value: "",
            with: "",
            check: |r| r["elapsed_ns"] == 4_000_000,
        },
        KeyCase {
            key: "new_group",
            value: "",
            with: "",
            check: |r| {
                r["groups"].as_array().map(Vec::len) == Some(2) && r["elapsed_ns"] == 2_000_000
            },
        },
        KeyCase {
            key: "wait_for",
            value: "first",
            with: "",
            check: |r| r["elapsed_ns"] == 4_000_000,
        },
        // Offsets drawn independently (what it changes is tested with the emulator's
        // read-back in `the_random_map_writes_every_block_of_a_pass_once`).
        KeyCase {
            key: "norandommap",
            value: "",
            with: "rw=randwrite",
            check: |r| r["requests"].as_u64() > Some(10),
        },
        // Ends a job by its runtime under `nvarray fio` (tested there); `sim` runs by it.
        KeyCase {
            key: "time_based",
            value: "",
            with: "",
            check: |r| r["elapsed_ns"] == 2_000_000,
        },
        // Data placement (run on the small flash drive, `common::SMALL_TLC`, with two placement
        // handles, `PLACEMENT_FTL`): each write's handle, counted by the FTL per handle.
        KeyCase {
            key: "fdp",
            value: "1",
            with: PLACED_WRITES,
            check: |r| handle_pages(r).iter().all(|&p| p > 0),
        },
        KeyCase {
            key: "dataplacement",
            value: "fdp",
            with: PLACED_WRITES,
            check: |r| handle_pages(r).iter().all(|&p| p > 0),
        },
        KeyCase {
            key: "fdp_pli",
            value: "1",
            with: "rw=randwrite\niodepth=16\nruntime=50ms\nfdp=1",
            check: |r| handle_pages(r)[0] == 0 && handle_pages(r)[1] > 0,
        },
        KeyCase {
            key: "plids",
            value: "1",
            with: "rw=randwrite\niodepth=16\nruntime=50ms\nfdp=1",
            check: |r| handle_pages(r)[0] == 0 && handle_pages(r)[1] > 0,
        },
        // Round robin (the default) splits the writes evenly; random does not (for this
        // seed: 163 and 133 of about 300, a binomial spread).
        KeyCase {
            key: "fdp_pli_select",
            value: "random",
            with: "rw=randwrite\niodepth=16\nruntime=50ms\nfdp=1\nrandseed=1",
            check: |r| handle_pages(r)[0].abs_diff(handle_pages(r)[1]) > 10,
        },
        KeyCase {
            key: "plid_select",
            value: "roundrobin",
            with: "rw=randwrite\niodepth=16\nruntime=50ms\nfdp=1",
            check: |r| handle_pages(r)[0].abs_diff(handle_pages(r)[1]) <= 1,
        },
    ];
    let covered: Vec<&str> = cases.iter().map(|c| c.key).collect();
    for key in nvarray_workload::supported_keys() {
        assert!(covered.contains(&key), "no job-file case for '{key}'");
    }
    let dir = tempfile::tempdir().unwrap();
    for c in &cases {
        let line = if c.value.is_empty() {
            c.key.to_string()
        } else {
            format!("{}={}", c.key, c.value)
        };
        // The phase and group keys act on a second job; the others on the only one.
        let text = if ["stonewall", "wait_for_previous", "new_group", "wait_for"].contains(&c.key) {
            format!("[global]\nruntime=2ms\n[first]\n[second]\n{line}\n")
        } else {
            format!("[global]\nruntime=2ms\n[j]\n{}\n{line}\n", c.with)
        };
        let path = dir.path().join(format!("{}.fio", c.key));
        std::fs::write(&path, &text).unwrap();
        let mut args = vec!["sim"];
        if PLACEMENT_KEYS.contains(&c.key) {
            args.extend_from_slice(common::SMALL_TLC);
            args.extend_from_slice(PLACEMENT_FTL);
        } else {
            args.extend_from_slice(&["--preset", "dram"]);
        }
        args.extend_from_slice(&[path.to_str().unwrap(), "--json"]);
        let (r, _) = run(&args);
        assert!((c.check)(&r), "{} in\n{text}\ngave {r:#}", c.key);
    }
}

/// Every key nvarray accepts and ignores, in a job file: each is noted with its line and
/// why; and the forms nvarray refuses, each with a message naming the key.
#[test]
fn every_ignored_key_is_noted_and_every_refused_form_named() {
    let dir = tempfile::tempdir().unwrap();
    for key in nvarray_workload::ignored_keys() {
        let path = dir.path().join(format!("{key}.fio"));
        std::fs::write(&path, format!("[j]\nnumber_ios=20\n{key}=1\n")).unwrap();
        let (r, notes) = run(&["sim", "--preset", "dram", path.to_str().unwrap(), "--json"]);
        assert_eq!(r["requests"], 20, "{key}");
        let why = nvarray_workload::ignored_reason(key).unwrap();
        assert!(
            notes.contains(&format!("line 3: {key} ignored: {why}")),
            "{key}: {notes}"
        );
    }
    for (text, expected) in [
        (
            "[j]\nexitall_on_error\n",
            "line 2: unknown key 'exitall_on_error'",
        ),
        ("[j]\nramp_tim=1\n", "did you mean 'ramp_time'?"),
        ("[j]\nbsrange=4k\n", "bsrange: must look like 4k-64k"),
        ("[j]\nbsrange=4k-6k\n", "MAX must be a multiple of MIN"),
        (
            "[j]\nbsrange=16k-4k\n",
            "MAX must be a multiple of MIN and at least MIN",
        ),
        ("[j]\nbsrange=4k-8k,4k-8k\n", "separate read,write ranges"),
        ("[j]\nramp_time=2h\n", "ramp_time: must be at most"),
        ("[j]\nramp_time=soon\n", "ramp_time: must be a number"),
        ("[j]\nstonewall=yes\n", "stonewall: is a switch"),
        (
            "[a]\n[b]\nwait_for=c\n",
            "wait_for: names no job before this one: 'c'",
        ),
        (
            "[a]\nwait_for=b\n[b]\n",
            "wait_for: names no job before this one: 'b'",
        ),
        ("[j]\nbs=4k,8k\n", "separate read,write sizes"),
        ("[j]\ndirect=0\nrw=trim\n", "rw"),
        ("[j]\nzonesize=64k\n", "zonesize: needs zonemode=strided"),
        (
            "[j]\nzonemode=strided\n",
            "zonemode: strided needs a zonesize",
        ),
        ("[j]\nzonemode=zbd\nzonesize=64k\n", "channel engine"),
        (
            "[j]\nsize=1m\nzonemode=strided\nzonesize=2m\n",
            "zonerange: a zone of 2097152 bytes must fit",
        ),
        (
            "[j]\nrw=randread\nrandom_distribution=sequence\n",
            "needs its block indices",
        ),
        (
            "[j]\nrw=randread\nrandom_distribution=zoned:50/5:30/15:20/,50/10:50/90\n",
            "per-direction distributions",
        ),
        (
            "[j]\nrw=randread\nsize=1m\nrandom_distribution=zoned_abs:50/1m:50/1m\n",
            "past the job's region",
        ),
        (
            "[j]\npercentile_list=50:99\n",
            "unknown key 'percentile_list'",
        ),
    ] {
        let path = dir.path().join("refused.fio");
        std::fs::write(&path, text).unwrap();
        let out = nvarray(&["sim", "--preset", "dram", path.to_str().unwrap()]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {e}");
        assert!(e.contains(expected), "{text}: {e}");
    }
}

/// fio's random map, on by default: a random write job over a region writes every block of it
/// once per pass, so a read phase after it finds each block written by the run (`verify`
/// checks each block the run wrote and passes over zeroes); with `norandommap` about a third
/// of the blocks are never written and read back as zeroes.
#[test]
fn the_random_map_writes_every_block_of_a_pass_once() {
    let dir = tempfile::tempdir().unwrap();
    let verified = |extra: &str| {
        let path = dir.path().join(format!("map{}.fio", extra.len()));
        std::fs::write(
            &path,
            format!(
                "[global]\nbs=4k\nsize=4m\nnumber_ios=1024\nverify=crc32c\n{extra}\n\
                 [fill]\nrw=randwrite\n[check]\nstonewall\nrw=read\n"
            ),
        )
        .unwrap();
        let (r, _) = run(&["bench", "--size", "64m", path.to_str().unwrap(), "--json"]);
        r["emulator"]["verified_blocks"].as_u64().unwrap()
    };
    // 4 MiB of 512-byte device blocks.
    assert_eq!(
        verified(""),
        8192,
        "every block read back was written by the run"
    );
    let without = verified("norandommap");
    assert!(
        (4000..6500).contains(&without),
        "norandommap: {without} of 8192 blocks written (about 1 - 1/e)"
    );
}

/// Every `verify` kind in the emulator: a write phase, then a read phase that checks every
/// block the writes made (all 8,192 of the 4 MiB region, 512-byte device blocks).
#[test]
fn every_verify_kind_checks_what_the_writes_made() {
    let dir = tempfile::tempdir().unwrap();
    for verify in [
        "verify=crc32c",
        "verify=crc64",
        "verify=md5",
        "verify=sha256",
        "verify=meta",
        "verify=meta\nverify_pattern=0xaa555aa5",
        "verify=pattern\nverify_pattern=\"nvarray\"",
        "verify_pattern=0x1234",
    ] {
        let path = dir.path().join("verify.fio");
        std::fs::write(
            &path,
            format!(
                "[global]\nbs=4k\nsize=4m\nnumber_ios=1024\n{verify}\n[fill]\nrw=write\n\
                 [check]\nstonewall\nrw=read\n"
            ),
        )
        .unwrap();
        let (r, _) = run(&["bench", "--size", "64m", path.to_str().unwrap(), "--json"]);
        let verified = r["emulator"]["verified_blocks"].as_u64();
        assert_eq!(verified, Some(8192), "{verify}: {r:#}");
    }
}

/// `nvarray fio` takes any fio job key on its command line, as fio does: a global that every
/// job of the file starts from and a section may set again (issue 62). A key that is not
/// fio's is still refused, and a bad value names its flag.
#[test]
fn nvarray_fio_takes_any_job_key_as_a_global() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("two.fio");
    std::fs::write(
        &job,
        "[global]\nrw=randread\nsize=16m\nnumber_ios=500\n[a]\n[b]\nstonewall\nlatency_window=1s\n",
    )
    .unwrap();
    let job = job.to_str().unwrap();
    let out = nvarray(&[
        "fio",
        "--engine",
        "sim",
        "--latency_target=100us",
        "--latency_window=50ms",
        job,
        "--output-format=json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(&stdout[stdout.find('{').unwrap()..]).expect("fio's JSON");
    let option = |job: usize, key: &str| json["jobs"][job]["job options"][key].clone();
    assert_eq!(option(0, "latency_window"), "50ms");
    assert_eq!(
        option(1, "latency_window"),
        "1s",
        "the section sets it again"
    );
    assert_eq!(option(0, "latency_target"), option(1, "latency_target"));
    assert_eq!(option(1, "latency_target"), "100us");

    let refused = nvarray(&["fio", "--engine", "sim", "--latency_window=soon", job]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("latency_window"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let unknown = nvarray(&["fio", "--engine", "sim", "--not_a_fio_key=1", job]);
    assert_eq!(unknown.status.code(), Some(2));
    // `nvarray bench` keeps its own flags only.
    let bench = nvarray(&["bench", "--engine", "sim", "--latency_window=50ms"]);
    assert_eq!(bench.status.code(), Some(2));
}
