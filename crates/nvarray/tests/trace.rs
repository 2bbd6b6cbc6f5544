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
    let cases: [(&[&str], &str); 9] = [
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
