//! `--output-format json|json+`: fio's own layout, read by the same small parser as real
//! fio's output, and by fio's own `fio_jsonplus_clat2csv`.

use std::process::Command;

fn nvarray(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&nvarray_text(args)).expect("JSON")
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What a notebook written for fio reads of one job's direction: IOPS, bandwidth, mean
/// latency and the 99th percentile of completion latency.
#[derive(Debug)]
struct FioDirection {
    iops: f64,
    bw_bytes: u64,
    lat_mean_ns: f64,
    clat_p99_ns: u64,
    total_ios: u64,
}

fn parse(report: &serde_json::Value, direction: &str) -> FioDirection {
    let d = &report["jobs"][0][direction];
    FioDirection {
        iops: d["iops"].as_f64().expect("iops"),
        bw_bytes: d["bw_bytes"].as_u64().expect("bw_bytes"),
        lat_mean_ns: d["lat_ns"]["mean"].as_f64().expect("lat_ns.mean"),
        clat_p99_ns: d["clat_ns"]["percentile"]["99.000000"]
            .as_u64()
            .expect("clat_ns.percentile 99"),
        total_ios: d["total_ios"].as_u64().expect("total_ios"),
    }
}

/// Real fio's JSON report of a random mixed job of `number_ios` 4 KiB requests on its null
/// engine (`None`, said on stderr, when fio is not installed).
fn real_fio_json(number_ios: u32) -> Option<serde_json::Value> {
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed (scripts/setup.sh installs it)");
        return None;
    }
    let out = Command::new("fio")
        .args([
            "--name=peer",
            "--ioengine=null",
            "--size=16m",
            "--rw=randrw",
            "--bs=4k",
            &format!("--number_ios={number_ios}"),
            "--output-format=json",
        ])
        .output()
        .expect("run fio");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("fio's JSON"))
}

#[test]
fn real_fio_and_nvarray_json_read_the_same_way() {
    let Some(fio) = real_fio_json(4000) else {
        return;
    };
    let ours = nvarray(&[
        "sim",
        "--preset",
        "dram",
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--iodepth",
        "4",
        "--number_ios",
        "4000",
        "--output-format",
        "json",
    ]);
    for report in [&fio, &ours] {
        let (r, w) = (parse(report, "read"), parse(report, "write"));
        for d in [&r, &w] {
            assert!(
                d.iops > 0.0 && d.bw_bytes > 0 && d.lat_mean_ns > 0.0,
                "{d:?}"
            );
            assert!(d.clat_p99_ns > 0, "{d:?}");
        }
        assert!(r.total_ios + w.total_ios >= 3_900, "{r:?} {w:?}");
    }
    // nvarray's figures are its own report's, in fio's units.
    let native = &ours["nvarray"];
    let r = parse(&ours, "read");
    assert_eq!(r.total_ios, native["read"]["requests"]);
    assert_eq!(r.clat_p99_ns, native["read"]["latency_ns"]["p99"]);
    assert_eq!(
        ours["jobs"][0]["read"]["bw"],
        native["read"]["bandwidth_bytes_per_s"].as_f64().unwrap() as u64 / 1024
    );
}

#[test]
fn fios_own_clat2csv_reads_and_validates_json_plus() {
    if !have("fio_jsonplus_clat2csv") {
        eprintln!("SKIPPED: fio_jsonplus_clat2csv is not installed (Debian's fio package has it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("nv.json");
    let report = nvarray(&[
        "sim",
        "--preset",
        "dram",
        "--rw",
        "randrw",
        "--iodepth",
        "8",
        "--number_ios",
        "5000",
        "--output-format",
        "json+",
        "--percentile_list",
        "50:99:99.9",
    ]);
    let bins = report["jobs"][0]["write"]["clat_ns"]["bins"]
        .as_object()
        .unwrap();
    let counted: u64 = bins.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(
        counted,
        report["jobs"][0]["write"]["total_ios"].as_u64().unwrap()
    );
    assert_eq!(
        report["jobs"][0]["read"]["clat_ns"]["percentile"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["50.000000", "99.000000", "99.900000"]
    );
    std::fs::write(&json, serde_json::to_string(&report).unwrap()).unwrap();
    let csv = dir.path().join("nv.csv");
    for validate in [false, true] {
        let mut cmd = Command::new("fio_jsonplus_clat2csv");
        if validate {
            cmd.arg("--validate");
        }
        let out = cmd.arg(&json).arg(&csv).output().unwrap();
        assert!(
            out.status.success(),
            "validate={validate}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(dir.path().join("nv_job0.csv")).unwrap();
    // One line per latency bin of either direction, after the header.
    assert!(text.lines().count() > 10, "{text}");
}

#[test]
fn the_layout_flags_are_checked_before_a_run() {
    for (args, expected) in [
        (
            &["sim", "--output-format", "xml"][..],
            "one of normal, json, json+, terse",
        ),
        (
            &["sim", "--output-format", "terse", "--percentile_list", "x"][..],
            "not a percentile",
        ),
        (
            &["sim", "--percentile_list", "50:99"][..],
            "add --output-format json",
        ),
        (
            &["sim", "--output-format", "json", "--percentile_list", "0"][..],
            "(0, 100]",
        ),
        (
            &["sim", "--output-format", "json", "--json"][..],
            "cannot be used with",
        ),
        (
            &["bench", "--compare-sim", "--output-format", "json"][..],
            "--compare-sim has its own",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .args(args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(expected), "{args:?}: {e}");
    }
}

#[test]
fn nvarray_fio_runs_a_job_file_unchanged_with_fios_rules_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.fio");
    std::fs::write(
        &job,
        "[global]\nioengine=libaio\ndirect=1\nfilename=/dev/nvme0n1\nbs=4k\nsize=8m\n\
         [mixed]\nrw=randrw\nrwmixread=75\niodepth=4\n",
    )
    .unwrap();
    let job = job.to_str().unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .args(
                [
                    &["fio", "--preset", "dram", "--engine", "sim", job][..],
                    extra,
                ]
                .concat(),
            )
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (text, notes) = run(&[]);
    // Without time_based, fio's job ends after its size: 8 MiB in 4 KiB requests.
    let total = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("issued rwts: total="))
        .expect(&text);
    let counts: Vec<u64> = total
        .split(',')
        .take(2)
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(counts[0] + counts[1], 2048, "{text}");
    for line in [
        "mixed: (g=0): rw=randrw, bs=(R) 4096B-4096B",
        "  read: IOPS=",
        "  write: IOPS=",
        "    clat percentiles (",
        "Run status group 0 (all jobs):",
        "   READ: bw=",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    assert!(
        notes.contains("ioengine ignored") && notes.contains("filename ignored"),
        "{notes}"
    );
    let (json, _) = run(&["--output-format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["jobs"][0]["read"]["total_ios"].as_u64().unwrap()
            + v["jobs"][0]["write"]["total_ios"].as_u64().unwrap(),
        2048
    );
    // time_based without a runtime is ignored, with fio's warning: the job ends by size.
    let forever = dir.path().join("forever.fio");
    std::fs::write(&forever, "[j]\ntime_based\nsize=1m\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args([
            "fio",
            "--engine",
            "sim",
            "--output-format",
            "json",
            forever.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("time_based requires a runtime"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["jobs"][0]["read"]["io_bytes"], 1 << 20);
}

/// The fields of fio's terse version 3 line a script reads, by their place in fio's HOWTO
/// list ("terse_version_3;fio_version;jobname;groupid;error;read_kb;...").
#[derive(Debug)]
struct Terse {
    fields: usize,
    name: String,
    group: u64,
    read_kb: u64,
    read_iops: u64,
    read_runtime_ms: u64,
    read_clat_mean_us: f64,
    /// The completion-latency percentiles: (percent, µs).
    read_clat_percentiles: Vec<(f64, u64)>,
    write_kb: u64,
}

fn parse_terse(line: &str) -> Terse {
    let f: Vec<&str> = line.split(';').collect();
    assert_eq!(f[0], "3", "terse version: {line}");
    let num = |i: usize| {
        f[i].parse::<u64>()
            .unwrap_or_else(|_| panic!("field {i}: {line}"))
    };
    Terse {
        fields: f.len(),
        name: f[2].to_string(),
        group: num(3),
        read_kb: num(5),
        read_iops: num(7),
        read_runtime_ms: num(8),
        read_clat_mean_us: f[15].parse().unwrap(),
        read_clat_percentiles: f[17..37]
            .iter()
            .filter(|p| **p != "0%=0")
            .map(|p| {
                let (q, v) = p.split_once("%=").expect("PERCENT%=VALUE");
                (q.parse().unwrap(), v.parse().unwrap())
            })
            .collect(),
        write_kb: num(46),
    }
}

fn nvarray_text(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("run nvarray");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn terse_is_fios_version_3_line_with_nvarrays_figures() {
    let run = [
        "sim",
        "--preset",
        "optane",
        "--rw",
        "randrw",
        "--iodepth",
        "4",
        "--runtime",
        "20ms",
    ];
    let terse = nvarray_text(
        &[
            &run[..],
            &["--output-format", "terse", "--percentile_list", "50:99"],
        ]
        .concat(),
    );
    let ours = parse_terse(terse.trim_end());
    if have("fio") {
        let fio = Command::new("fio")
            .args([
                "--name=peer",
                "--ioengine=null",
                "--size=16m",
                "--rw=randrw",
                "--number_ios=4000",
                "--output-format=terse",
            ])
            .output()
            .expect("run fio");
        let peer = parse_terse(String::from_utf8_lossy(&fio.stdout).trim_end());
        assert_eq!(
            peer.fields, ours.fields,
            "the same fields as fio's own: {peer:?}"
        );
        assert_eq!(peer.read_clat_percentiles.len(), 17, "fio's default list");
    } else {
        eprintln!("SKIPPED the comparison with fio's own line: fio is not installed");
    }
    // The same (deterministic) run in nvarray's JSON.
    let json = nvarray(&[&run[..], &["--json"]].concat());
    let read = &json["read"];
    assert_eq!(ours.name, "job0");
    assert_eq!(ours.group, 0);
    assert_eq!(ours.read_kb, json["read_bytes"].as_u64().unwrap() >> 10);
    assert_eq!(ours.write_kb, json["write_bytes"].as_u64().unwrap() >> 10);
    assert_eq!(ours.read_runtime_ms, 20);
    assert_eq!(
        ours.read_iops,
        read["requests"].as_u64().unwrap() * 1000 / 20
    );
    let mean_us = read["latency_ns"]["mean"].as_f64().unwrap() / 1e3;
    assert!(
        (ours.read_clat_mean_us - mean_us).abs() < 1e-3,
        "{ours:?} {mean_us}"
    );
    let p99_us = read["latency_ns"]["p99"].as_u64().unwrap() / 1000;
    assert_eq!(ours.read_clat_percentiles.len(), 2);
    assert_eq!(ours.read_clat_percentiles[1], (99.0, p99_us));
}

#[test]
fn stonewall_groups_show_in_every_fio_layout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.fio");
    std::fs::write(
        &path,
        "[global]\nsize=1m\nbs=64k\n[fill]\nrw=write\n[check]\nstonewall\nrw=read\n",
    )
    .unwrap();
    let job = path.to_str().unwrap();
    let terse = nvarray_text(&["fio", "--engine", "sim", job, "--output-format", "terse"]);
    let lines: Vec<Terse> = terse.lines().map(parse_terse).collect();
    assert_eq!(
        lines
            .iter()
            .map(|t| (t.name.as_str(), t.group))
            .collect::<Vec<_>>(),
        [("fill", 0), ("check", 1)]
    );
    assert_eq!((lines[0].write_kb, lines[1].read_kb), (1024, 1024));
    let normal = nvarray_text(&["fio", "--engine", "sim", job]);
    for expected in [
        "check: (g=1)",
        "check: (groupid=1, jobs=1)",
        "Run status group 0 (all jobs):",
        "Run status group 1 (all jobs):",
    ] {
        assert!(normal.contains(expected), "{expected}: {normal}");
    }
    let json = nvarray(&["fio", "--engine", "sim", job, "--output-format", "json"]);
    assert_eq!(json["jobs"][1]["groupid"], 1);
    assert_eq!(json["nvarray"]["groups"][1]["jobs"][0], "check");
}

/// The keys of a JSON object, with those of its objects below it (`a.b`), down to `depth`.
fn key_paths(v: &serde_json::Value, prefix: &str, depth: usize, out: &mut Vec<String>) {
    let Some(map) = v.as_object() else {
        return;
    };
    for (k, child) in map {
        let path = format!("{prefix}{k}");
        if depth > 1 {
            key_paths(child, &format!("{path}."), depth - 1, out);
        }
        out.push(path);
    }
}

/// Every field real fio 3.33 writes in its JSON (the top level and each job, two levels
/// down), nvarray writes too, so a tool that reads one of them finds it: `global options`,
/// `iodepth_level`/`_submit`/`_complete`, and the `>=2000` bucket of `latency_ms` were missing.
#[test]
fn nvarrays_json_has_every_field_fios_has() {
    let Some(fio) = real_fio_json(400) else {
        return;
    };
    let ours = nvarray(&[
        "sim",
        "--preset",
        "dram",
        "--rw",
        "randrw",
        "--number_ios",
        "400",
        "--output-format",
        "json",
    ]);
    let (mut theirs, mut mine) = (Vec::new(), Vec::new());
    key_paths(&fio, "", 1, &mut theirs);
    key_paths(&ours, "", 1, &mut mine);
    key_paths(&fio["jobs"][0], "job.", 2, &mut theirs);
    key_paths(&ours["jobs"][0], "job.", 2, &mut mine);
    // fio's own: the host's disks under a null engine, and the job's options as given.
    let skip = |k: &str| k == "disk_util" || k.starts_with("job.job options.");
    let missing: Vec<&String> = theirs
        .iter()
        .filter(|k| !skip(k) && !mine.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "fields fio writes and nvarray does not: {missing:?}"
    );
}

/// A request over two seconds is in `latency_ms`'s `>=2000` bucket, not in `2000`; the I/O
/// depth shares are the run's (a closed loop at `iodepth=4` issues nearly all at depth 4).
#[test]
fn the_json_buckets_hold_what_they_name() {
    let slow = nvarray(&[
        "sim",
        "--preset",
        "null",
        "--set",
        "model.null_latency_ns=3s",
        "--number_ios",
        "10",
        "--output-format",
        "json",
    ]);
    let ms = &slow["jobs"][0]["latency_ms"];
    assert_eq!(ms[">=2000"], 100.0, "{ms}");
    assert_eq!(ms["2000"], 0.0, "{ms}");
    let deep = nvarray(&[
        "sim",
        "--preset",
        "dram",
        "--rw",
        "randread",
        "--iodepth",
        "4",
        "--number_ios",
        "4000",
        "--output-format",
        "json",
    ]);
    let job = &deep["jobs"][0];
    let level = &job["iodepth_level"];
    assert!(level["4"].as_f64().unwrap() > 99.0, "{level}");
    let sum: f64 = level
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((sum - 100.0).abs() < 1e-9, "{level}");
    assert_eq!(job["iodepth_submit"]["4"], 100.0);
    assert_eq!(job["iodepth_complete"]["4"], 100.0);
    // The job's options are its own settings.
    assert_eq!(job["job options"]["iodepth"], "4");
    assert_eq!(job["job options"]["rw"], "randread");
}

/// "Run status group": the group's rate, then the least and greatest of its jobs' own rates
/// and run times, as fio prints it; sizes in fio's four significant figures (`15.2MiB`, where
/// whole units once cut it to `15MiB`).
#[test]
fn the_run_status_line_ranges_over_the_groups_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.fio");
    std::fs::write(
        &path,
        "[global]\nbs=4k\n[a]\nrw=randread\nsize=15600k\nrate_iops=20000\n[b]\nrw=randread\nsize=3m\nrate_iops=5000\n",
    )
    .unwrap();
    let normal = nvarray_text(&["fio", "--engine", "sim", path.to_str().unwrap()]);
    let line = normal
        .lines()
        .find(|l| l.trim_start().starts_with("READ:"))
        .expect("a READ line");
    // a: 3,900 requests at 20,000 a second, the last due at 194.95 ms (78.1 MiB/s); b: 768
    // at 5,000, the last at 153.4 ms (3 MiB in 153.4 ms is 19.6 MiB/s); 18.2 MiB in all. Run
    // times in whole ms, cut as fio cuts them.
    assert!(line.contains("19.6MiB/s-78.1MiB/s"), "{line}");
    assert!(line.contains("io=18.2MiB (19.1MB)"), "{line}");
    assert!(line.contains("run=153-194msec"), "{line}");
    assert!(normal.contains("(15.2MiB/194msec)"), "{normal}");
}

/// A replayed trace's options are the trace's flags, not a generator's `rw` and `bs`.
#[test]
fn a_replays_job_options_name_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    std::fs::write(
        &path,
        "time_ns,op,offset_bytes,len_bytes\n0,W,0,8192\n10,R,8192,512\n",
    )
    .unwrap();
    let json = nvarray(&[
        "sim",
        "--preset",
        "dram",
        "--trace",
        path.to_str().unwrap(),
        "--output-format",
        "json",
    ]);
    let options = &json["jobs"][0]["job options"];
    assert_eq!(options["trace"], path.to_str().unwrap(), "{options}");
    assert!(
        options.get("rw").is_none() && options.get("bs").is_none(),
        "{options}"
    );
}

/// fio creates a file of a job's size; `nvarray fio` sizes its device to the largest job
/// region when the user gave no size (saying so), and keeps a size the user gave.
#[test]
fn nvarray_fio_sizes_the_device_to_the_largest_job_region_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("big.fio");
    std::fs::write(
        &job,
        "[global]\nbs=1m\nrw=read\n[a]\nsize=1500m\n[b]\nsize=256m\noffset=1g\nnumjobs=2\n\
         offset_increment=1g\n",
    )
    .unwrap();
    let job = job.to_str().unwrap();
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .args(
                [
                    &["fio", "--preset", "dram", "--engine", "sim", job][..],
                    extra,
                ]
                .concat(),
            )
            .args(["--output-format", "json"])
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let notes = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{notes}");
    // b's second thread ends at 1g + 1g + 256m.
    assert!(notes.contains("the device is sized to 2304m"), "{notes}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let read: u64 = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["read"]["io_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(read, (1500 + 2 * 256) << 20, "every job moved its size");
    for given in [
        &["--size", "1g"][..],
        &["--set", "memory.capacity_bytes=1g"],
    ] {
        let out = run(given);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{given:?}: {e}");
        assert!(
            e.contains("runs past the end of the device"),
            "{given:?}: {e}"
        );
        assert!(!e.contains("sized to"), "{given:?}: {e}");
    }
}
