//! `--trace` end to end through the real binary: every format in both engines with the same
//! output shape, and bad input (exit status 2, one line naming the trace, line and field).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nvarray(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .output()
        .expect("run nvarray")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = nvarray(args);
    assert!(
        out.status.success(),
        "nvarray {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The error line of a run that must fail on its input (exit status 2).
fn refused(args: &[&str]) -> String {
    let out = nvarray(args);
    assert_eq!(out.status.code(), Some(2), "nvarray {args:?}: {out:?}");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!text.contains("panicked"), "{text}");
    text
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Eight 4 KiB requests (six reads), 1 ms apart, in each format's own units and layout.
fn traces(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let rows: Vec<(u64, bool, u64)> = (0..8u64).map(|i| (i, i % 4 != 3, i * 8)).collect();
    let mut blk = String::new();
    let mut v2 = String::from("fio version 2 iolog\n/dev/x add\n/dev/x open\n");
    let mut v3 = String::from("fio version 3 iolog\n0 /dev/x add\n0 /dev/x open\n");
    let (mut msr, mut fiu, mut csv) = (String::new(), String::new(), String::new());
    csv.push_str("time_ns,op,offset_bytes,len_bytes\n");
    for (i, read, sector) in rows {
        let (rw, word, long) = if read {
            ("R", "read", "Read")
        } else {
            ("W", "write", "Write")
        };
        blk += &format!(
            "  8,0    0  {}  {}.{:09}  100  Q  {rw} {sector} + 8 [db]\n",
            i + 1,
            0,
            i * 1_000_000
        );
        if i > 0 {
            v2 += "/dev/x wait 1000 0\n";
        }
        v2 += &format!("/dev/x {word} {} 4096\n", sector * 512);
        v3 += &format!("{} /dev/x {word} {} 4096\n", i * 1000, sector * 512);
        msr += &format!(
            "{},h,0,{long},{},4096,10\n",
            128_166_372_000_000_000u64 + i * 10_000,
            sector * 512
        );
        fiu += &format!("{} 42 db {sector} 8 {rw} 8 0\n", 5_000_000 + i * 1_000_000);
        csv += &format!("{},{rw},{},4096\n", i * 1_000_000, sector * 512);
    }
    vec![
        ("blkparse", write(dir, "t.blk", &blk)),
        ("iolog2", write(dir, "t.v2", &v2)),
        ("iolog3", write(dir, "t.v3", &v3)),
        ("msr", write(dir, "t.msr", &msr)),
        ("fiu", write(dir, "t.fiu", &fiu)),
        ("csv", write(dir, "t.csv", &csv)),
    ]
}

fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[test]
fn every_format_replays_in_both_engines_with_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    for (format, path) in traces(dir.path()) {
        let path = path.to_str().unwrap();
        for mode in ["as-fast", "timestamps"] {
            let common = [
                "--preset",
                "dram",
                "--trace",
                path,
                "--replay-mode",
                mode,
                "--json",
            ];
            let sim = json(&[&["sim"][..], &common].concat());
            let emu = json(&[&["bench", "--size", "64m"][..], &common].concat());
            for (engine, r) in [("sim", &sim), ("emu", &emu)] {
                let t = &r["trace"];
                assert_eq!(t["format"], format, "{engine} {format} {mode}: {t}");
                assert_eq!(t["requests"], 8, "{engine} {format} {mode}");
                assert_eq!(t["reads"], 6, "{engine} {format} {mode}");
                assert_eq!(t["duration_ns"], 7_000_000, "{engine} {format} {mode}");
                assert_eq!(t["footprint_bytes"], 8 * 4096, "{engine} {format} {mode}");
                assert_eq!(r["requests"], 8, "{engine} {format} {mode}");
                assert_eq!(r["write_requests"], 2, "{engine} {format} {mode}");
                if mode == "timestamps" {
                    assert!(
                        r["elapsed_ns"].as_u64().unwrap() >= 7_000_000,
                        "{engine}: {r}"
                    );
                }
            }
            assert_eq!(keys(&sim["trace"]), keys(&emu["trace"]), "{format}");
        }
    }
}

#[test]
fn the_table_shows_the_trace_and_what_the_replay_did() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "big.csv",
        "time_ns,op,offset_bytes,len_bytes\n0,R,100,100\n10,W,0,1048576\n20,R,68719476736,4096\n",
    );
    let out = nvarray(&[
        "sim",
        "--preset",
        "dram",
        "--set",
        "memory.capacity_bytes=1g",
        "--set",
        "controller.max_transfer_bytes=128k",
        "--trace",
        path.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("trace    ") && text.contains("big.csv"),
        "{text}"
    );
    assert!(
        text.contains("trace: 3 requests in 4 lines (csv)"),
        "{text}"
    );
    // 1 MiB split at the largest transfer (128 KiB): 8 pieces; 64 GiB wrapped into 1 GiB.
    assert!(
        text.contains(
            "replay: 10 requests to the device; split 1 (+7), aligned 1, offsets moved 1"
        ),
        "{text}"
    );
}

#[test]
fn bad_traces_and_flags_are_refused_with_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.csv",
        "time_ns,op,offset_bytes,len_bytes\n0,R,0,512\n1,Q,0,512\n",
    );
    let bad = bad.to_str().unwrap();
    for engine in ["sim", "bench"] {
        let e = refused(&[engine, "--trace", bad]);
        assert!(
            e.contains("bad.csv line 3: op 'Q' is not R or W"),
            "{engine}: {e}"
        );
    }
    let good = write(
        dir.path(),
        "good.csv",
        "time_ns,op,offset_bytes,len_bytes\n0,R,0,512\n",
    );
    let good = good.to_str().unwrap();
    let cases: [(&[&str], &str); 19] = [
        (
            &["--trace", good, "--size", "1g"],
            "--size limits a generated job's region",
        ),
        (
            &["--trace", "/nonexistent/t.csv"],
            "reading /nonexistent/t.csv",
        ),
        (
            &["--trace", good, "--rw", "read"],
            "cannot be used with '--rw",
        ),
        (
            &["--trace", good, "--numjobs", "2"],
            "cannot be used with '--numjobs",
        ),
        (
            &["--trace", good, "--replay-speed", "2"],
            "needs --replay-mode timestamps",
        ),
        (
            &[
                "--trace",
                good,
                "--replay-mode",
                "timestamps",
                "--replay-speed",
                "0",
            ],
            "--replay-speed 0 is outside",
        ),
        (
            &["--trace", good, "--replay-mode", "later"],
            "--replay-mode later: one of as-fast, timestamps",
        ),
        (
            &["--trace", good, "--trace-format", "pcap"],
            "one of blkparse, iolog2, iolog3, msr, fiu, csv",
        ),
        (&["--trace", "/dev/null"], "no requests in it"),
        // Flags a replay would not use are refused, saying why, not silently ignored.
        (
            &["--trace", good, "--rate_iops", "1000"],
            "--rate_iops cannot be used with --trace: a trace's pace is its own",
        ),
        (
            &["--trace", good, "--rate", "1m"],
            "--rate cannot be used with --trace",
        ),
        (
            &["--trace", good, "--rate_process", "poisson"],
            "--rate_process cannot be used with --trace",
        ),
        (
            &["--trace", good, "--offset_increment", "1m"],
            "--offset_increment cannot be used with --trace",
        ),
        (
            &["--trace", good, "--rwmixwrite", "30"],
            "--rwmixwrite cannot be used with --trace",
        ),
        (
            &["--trace", good, "--randseed", "7"],
            "--randseed cannot be used with --trace",
        ),
        (
            &["--trace", good, "--norandommap"],
            "--norandommap cannot be used with --trace",
        ),
        (
            &["--trace", good, "--time_based"],
            "time_based with --trace replays the trace over and over until the runtime: give --runtime",
        ),
        (
            &["--trace", good, "--trace-device", "8,16"],
            "no requests of --trace-device 8,16; the trace's devices: none named",
        ),
        (
            &["--trace", good, "--trace-device", " "],
            "--trace-device is empty",
        ),
    ];
    for (args, expected) in cases {
        let e = refused(&[&["sim"][..], args].concat());
        assert!(e.contains(expected), "{args:?}: {e}");
    }
    let unknown = write(dir.path(), "what.txt", "hello world\n");
    let e = refused(&["sim", "--trace", unknown.to_str().unwrap()]);
    assert!(
        e.contains("cannot tell the format") && e.contains("--trace-format"),
        "{e}"
    );
}

/// `nvarray ARGS` with `input` on its standard input, through a pipe.
fn piped(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nvarray");
    let mut stdin = child.stdin.take().unwrap();
    // The run may refuse before reading: a broken pipe is then expected.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn a_pipe_read_once_is_refused_where_the_replay_reads_the_trace_twice() {
    let text = b"time_ns,op,offset_bytes,len_bytes\n0,R,0,4096\n1,W,4096,4096\n";
    // (arguments after `--trace /dev/stdin`, the error, or "" when the replay works)
    let cases: [(&[&str], &str); 4] = [
        (
            &["sim", "--trace-address", "scale"],
            "--trace-address scale reads it once for its span",
        ),
        (
            &["sim", "--loops", "2"],
            "--loops (or --time_based) reads it again",
        ),
        (
            &["bench", "--compare-sim", "--size", "64m"],
            "--compare-sim replays it in both engines",
        ),
        (&["sim"], ""),
    ];
    for (args, expected) in cases {
        let all = [
            args,
            &["--preset", "dram", "--trace", "/dev/stdin", "--json"],
        ]
        .concat();
        let out = piped(&all, text);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if expected.is_empty() {
            assert!(out.status.success(), "{args:?}: {stderr}");
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(r["requests"], 2, "{args:?}");
        } else {
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(
                stderr.contains("not a regular file") && stderr.contains(expected),
                "{args:?}: {stderr}"
            );
        }
    }
}

#[test]
fn loops_replay_the_trace_again_in_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "t.csv",
        "time_ns,op,offset_bytes,len_bytes\n0,R,0,4096\n1000000,W,4096,4096\n2000000,R,8192,4096\n",
    );
    let path = path.to_str().unwrap();
    for mode in ["as-fast", "timestamps"] {
        let common = [
            "--preset",
            "dram",
            "--trace",
            path,
            "--replay-mode",
            mode,
            "--loops",
            "3",
            "--json",
        ];
        let sim = json(&[&["sim"][..], &common].concat());
        let emu = json(&[&["bench", "--size", "64m"][..], &common].concat());
        for (engine, r) in [("sim", &sim), ("emu", &emu)] {
            assert_eq!(r["requests"], 9, "{engine} {mode}");
            assert_eq!(r["write_requests"], 3, "{engine} {mode}");
            let t = &r["trace"];
            assert_eq!(
                (&t["requests"], &t["replayed"], &t["passes"], &t["loops"]),
                (&3.into(), &9.into(), &3.into(), &3.into()),
                "{engine} {mode}: {t}"
            );
            if mode == "timestamps" {
                // Each pass's times continue from the one before: the last request is due at
                // 6 ms.
                assert!(
                    r["elapsed_ns"].as_u64().unwrap() >= 6_000_000,
                    "{engine}: {}",
                    r["elapsed_ns"]
                );
            }
        }
    }
    // With --time_based, pass after pass until --runtime.
    let r = json(&[
        "sim",
        "--preset",
        "dram",
        "--trace",
        path,
        "--replay-mode",
        "timestamps",
        "--time_based",
        "--runtime",
        "20ms",
        "--json",
    ]);
    assert!(
        r["trace"]["passes"].as_u64().unwrap() >= 9,
        "{}",
        r["trace"]
    );
    assert_eq!(r["trace"]["loops"], serde_json::Value::Null);
}

/// Four 4 KiB requests, two on each of two devices or files, and a 512-byte one 64 KiB
/// further on, in each format that names devices: (format, file, first device, second).
fn two_device_traces(dir: &Path) -> Vec<(&'static str, PathBuf, &'static str, &'static str)> {
    vec![
        (
            "blkparse",
            write(
                dir,
                "two.blk",
                "8,0 0 1 0.000001 1 Q R 0 + 8 [a]\n8,16 0 2 0.000002 1 Q W 8 + 8 [a]\n\
                 8,0 0 3 0.000003 1 Q R 16 + 8 [a]\n8,16 0 4 0.000004 1 Q W 24 + 8 [a]\n\
                 8,0 0 5 0.000005 1 Q R 160 + 1 [a]\n",
            ),
            "8,0",
            "8,16",
        ),
        (
            "iolog3",
            // As fio --write_iolog writes a job of nrfiles=2.
            write(
                dir,
                "two.v3",
                "fio version 3 iolog\n0 j.0.0 add\n0 j.0.1 add\n0 j.0.0 open\n0 j.0.1 open\n\
                 1 j.0.0 read 0 4096\n2 j.0.1 write 4096 4096\n3 j.0.0 read 8192 4096\n\
                 4 j.0.1 write 12288 4096\n5 j.0.0 read 81920 512\n6 j.0.0 close\n6 j.0.1 close\n",
            ),
            "j.0.0",
            "j.0.1",
        ),
        (
            "msr",
            write(
                dir,
                "two.msr",
                "10,hm,0,Read,0,4096,1\n20,hm,1,Write,4096,4096,1\n30,hm,0,Read,8192,4096,1\n\
                 40,hm,1,Write,12288,4096,1\n50,hm,0,Read,81920,512,1\n",
            ),
            "hm,0",
            "hm,1",
        ),
    ]
}

#[test]
fn several_devices_are_counted_and_one_can_be_picked_and_the_footprint_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    for (format, path, a, b) in two_device_traces(dir.path()) {
        let path = path.to_str().unwrap();
        let common = ["--preset", "dram", "--trace", path];
        let r = json(&[&["sim"][..], &common, &["--json"]].concat());
        let t = &r["trace"];
        assert_eq!(t["requests"], 5, "{format}");
        // Exactly the distinct bytes: four 4 KiB requests and one of 512 bytes.
        assert_eq!(t["footprint_bytes"], 4 * 4096 + 512, "{format}: {t}");
        assert_eq!(t["footprint_exact"], true, "{format}");
        assert_eq!(
            t["devices"],
            serde_json::json!([{"name": a, "requests": 3}, {"name": b, "requests": 2}]),
            "{format}"
        );
        let out = nvarray(&[&["sim"][..], &common].concat());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!(
                "devices: 2 in the trace, laid over the one device: {a} (3 requests), {b} (2 requests)"
            )),
            "{format}: {text}"
        );
        let picked = json(&[&["sim"][..], &common, &["--json", "--trace-device", b]].concat());
        let t = &picked["trace"];
        assert_eq!(
            (&picked["requests"], &t["writes"]),
            (&2.into(), &2.into()),
            "{format}"
        );
        assert_eq!(t["device"], b, "{format}");
        assert_eq!(t["footprint_bytes"], 2 * 4096, "{format}");
    }
}

#[test]
fn a_byte_order_mark_is_skipped_and_a_huge_length_is_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let bom = write(
        dir.path(),
        "bom.csv",
        "\u{feff}time_ns,op,offset_bytes,len_bytes\n0,R,0,4096\n",
    );
    let r = json(&[
        "sim",
        "--preset",
        "dram",
        "--trace",
        bom.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        (&r["requests"], &r["trace"]["format"]),
        (&1.into(), &"csv".into())
    );
    // A length near 2^64 was replayed as one 512-byte request, the summary saying 18 EB read.
    let huge = write(
        dir.path(),
        "huge.csv",
        &format!(
            "time_ns,op,offset_bytes,len_bytes\n0,R,0,{}\n1,R,0,4096\n",
            u64::MAX - 616
        ),
    );
    let r = json(&[
        "sim",
        "--preset",
        "dram",
        "--trace",
        huge.to_str().unwrap(),
        "--json",
    ]);
    let t = &r["trace"];
    assert_eq!(
        (&r["requests"], &t["read_bytes"]),
        (&1.into(), &4096.into()),
        "{t}"
    );
    assert_eq!(t["skipped"]["longer_than_device"], 1, "{t}");
    // A time 2^64 ns after the first, replayed at the timestamps, is an error naming it.
    let late = write(
        dir.path(),
        "late.csv",
        &format!(
            "time_ns,op,offset_bytes,len_bytes\n0,R,0,4096\n{},R,0,4096\n",
            u64::MAX
        ),
    );
    let e = refused(&[
        "sim",
        "--trace",
        late.to_str().unwrap(),
        "--replay-mode",
        "timestamps",
    ]);
    assert!(
        e.contains("late.csv line 3: due 18446744073709551615 ns"),
        "{e}"
    );
}
