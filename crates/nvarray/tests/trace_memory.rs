//! A long trace replays in bounded memory: 10 million requests, generated here (about 300 MB
//! of CSV), through `nvarray sim`, whose peak RSS must stay under 100 MiB. Alone in its test
//! binary, so the peak of this process's children is that run's.

use std::io::Write;
use std::process::Command;

const REQUESTS: u64 = 10_000_000;
const RSS_MAX_BYTES: i64 = 100 << 20;

#[test]
fn ten_million_requests_replay_in_under_100_mib() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.csv");
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
    writeln!(f, "time_ns,op,offset_bytes,len_bytes").unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..REQUESTS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let op = if x % 10 < 7 { 'R' } else { 'W' };
        writeln!(f, "{},{op},{},4096", i * 250, (x >> 20) % (1 << 22) * 4096).unwrap();
    }
    f.flush().unwrap();
    drop(f);
    let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args([
            "sim",
            "--preset",
            "dram",
            "--iodepth",
            "32",
            "--json",
            "--trace",
        ])
        .arg(&path)
        .output()
        .expect("run nvarray");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["requests"], REQUESTS);
    assert_eq!(r["trace"]["requests"], REQUESTS);
    // SAFETY: `getrusage` fills the struct it is given; RUSAGE_CHILDREN covers the children
    // this process has waited for, here only the run above.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) },
        0
    );
    let peak_bytes = usage.ru_maxrss * 1024;
    assert!(
        peak_bytes < RSS_MAX_BYTES,
        "peak RSS {} MiB replaying {REQUESTS} requests",
        peak_bytes >> 20
    );
    eprintln!("peak RSS {} MiB for {REQUESTS} requests", peak_bytes >> 20);
}
