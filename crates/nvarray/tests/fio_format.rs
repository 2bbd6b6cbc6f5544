//! `--output-format json|json+`: fio's own layout, read by the same small parser as real
//! fio's output, and by fio's own `fio_jsonplus_clat2csv`.

use std::process::Command;

fn nvarray(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("run nvarray");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
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

#[test]
fn real_fio_and_nvarray_json_read_the_same_way() {
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed (scripts/setup.sh installs it)");
        return;
    }
    let out = Command::new("fio")
        .args([
            "--name=peer",
            "--ioengine=null",
            "--size=16m",
            "--rw=randrw",
            "--bs=4k",
            "--number_ios=4000",
            "--output-format=json",
        ])
        .output()
        .expect("run fio");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fio: serde_json::Value = serde_json::from_slice(&out.stdout).expect("fio's JSON");
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
            "one of normal, json, json+",
        ),
        (&["sim", "--output-format", "terse"][..], "terse"),
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
