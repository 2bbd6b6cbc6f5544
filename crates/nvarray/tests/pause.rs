//! The emulator's host thread paused (the whole process stopped with SIGSTOP, as a machine
//! pause or a preempted vCPU would) in the middle of a paced run: the requests due during the
//! pause are issued late by the host, and that delay is reported as the host's issue
//! lateness, never as the device's latency, never as queue slots that were full, and the run
//! is not called faithful.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether the process `pid` has started a thread named `name` (its run has begun).
fn has_thread(pid: u32, name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
}

#[test]
fn a_paused_host_thread_is_issue_lateness_not_device_latency() {
    let child = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args([
            "bench",
            "--preset",
            "null",
            "--size",
            "64m",
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--rate_iops",
            "1000",
            "--runtime",
            "1s",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nvarray bench");
    let pid = child.id();
    // Wait for the run's host thread, so the pause lands inside the run.
    let waited = Instant::now();
    while !has_thread(pid, "nvarray-job-0") {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the run never started"
        );
        std::thread::yield_now();
    }
    let pause = Duration::from_millis(100);
    // SAFETY: kill with a valid signal on our own child's pid has no memory effects.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    std::thread::sleep(pause); // the stimulus: how long the machine "paused" the process
                               // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGCONT) }, 0);
    let out = child.wait_with_output().expect("bench ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    // The null device completes at once: a request's latency is the driver's few µs. Its
    // p99 must not hold the pause (one request may have been in flight when it came).
    let p99_ns = r["latency_ns"]["p99"].as_u64().unwrap();
    assert!(
        p99_ns < 1_000_000,
        "p99 latency {p99_ns} ns holds the host's pause: {r}"
    );
    // The requests due during the pause were late, by the host.
    let issue = &r["issue_lateness_ns"];
    assert!(
        issue["max"].as_u64().unwrap() >= pause.as_nanos() as u64 / 2,
        "issue lateness {issue} misses a {pause:?} pause"
    );
    assert!(issue["late"].as_u64().unwrap() >= 10, "{issue}");
    // Not blamed on full slots (QD 1 at 1,000 a second never fills its slot on this device).
    assert_eq!(r["paced_issued_late"], 0, "{r}");
    assert_eq!(r["faithful"], false, "{r}");
    let why = r["unfaithful_reason"].as_str().unwrap();
    assert!(why.contains("issued late by the host thread"), "{why}");
}
