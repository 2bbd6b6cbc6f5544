//! fio's own option names on the command line and in job files: aliases, rate caps, byte
//! limits, and the options nvarray accepts and ignores, each said on stderr with why.

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
    for key in [
        "ioengine",
        "direct",
        "filename",
        "time_based",
        "norandommap",
        "group_reporting",
    ] {
        assert!(
            notes.contains(&format!("note: --{key} ignored: ")),
            "{key}: {notes}"
        );
    }
    assert_eq!(notes.lines().count(), 6, "one line each: {notes}");
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
