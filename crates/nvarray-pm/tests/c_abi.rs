//! C programs compiled against the static library this package builds: the example, run twice
//! over one pool (the counters persist across runs, aborts leave nothing, bad writes are
//! refused), and the ABI's edges (fork, mode bits, a failed create, thread hand-off, the bound
//! on open transactions).

mod common;

use std::path::PathBuf;
use std::process::Command;

/// This package's static library: `cargo test` leaves it in `target/<profile>/deps/`, beside
/// the test executable; `cargo build` also copies it to `target/<profile>/`.
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let name = "libnvarray_pm.a";
    let beside = deps.join(name);
    match deps.parent() {
        Some(profile) if !beside.exists() => profile.join(name),
        _ => beside,
    }
}

/// Compiles `source` (relative to this package) against the static library into `exe`.
fn compile(source: &str, exe: &std::path::Path) {
    let lib = static_lib();
    assert!(lib.exists(), "{} was not built", lib.display());
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join(source))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(exe)
        .output()
        .expect("gcc runs (the test command installs it)");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_c_example_builds_runs_and_its_commits_persist_across_runs() {
    let s = common::Scratch::new();
    let exe = s.dir.path().join("counters");
    compile("examples/c/counters.c", &exe);

    let pool = s.dir.path().join("counters.pool");
    let run = |n: &str| {
        let out = Command::new(&exe)
            .arg(&pool)
            .arg(n)
            .env("NVARRAY_PM_NVM_DIR", s.dir.path())
            .env("NVARRAY_PM_LOG_SIZE", "1m")
            .env("NVARRAY_PM_CACHE_SIZE", "1m")
            .output()
            .expect("run the example");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let first = run("1000");
    assert!(first.contains("start x=0 y=0"), "{first}");
    assert!(first.contains("end x=1000 y=2000"), "{first}");
    assert!(first.contains("refused: write of 8 bytes"), "{first}");
    let second = run("10");
    assert!(second.contains("start x=1000 y=2000"), "{second}");
    assert!(second.contains("end x=1010 y=2020"), "{second}");
}

/// Each edge of the ABI that used to misbehave (issue 15): unknown mode bits were accepted, a
/// refused `NV_CREATE` left a 0-byte file, a fork()ed child calling into its parent's pool
/// printed a Rust panic, and `nv_txbegin` without commit grew without bound.
#[test]
fn the_c_abi_refuses_cleanly_at_its_edges() {
    let s = common::Scratch::new();
    let exe = s.dir.path().join("abi_edges");
    compile("tests/c/abi_edges.c", &exe);
    let out = Command::new(&exe)
        .arg(s.dir.path())
        .env("NVARRAY_PM_NVM_DIR", s.dir.path())
        .env("NVARRAY_PM_LOG_SIZE", "1m")
        .env("NVARRAY_PM_CACHE_SIZE", "1m")
        .output()
        .expect("run abi_edges");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no `{key}` line in {stdout}"))
            .to_string()
    };
    let mode = line("mode:");
    assert!(mode.starts_with("mode: refused created=0"), "{mode}");
    assert!(mode.contains("unknown mode bits 0x40"), "{mode}");
    let create = line("create:");
    assert!(create.starts_with("create: refused left=0"), "{create}");
    assert_eq!(line("handoff:"), "handoff: rc=0 value=42");
    let fork = line("fork-write:");
    assert!(fork.starts_with("fork-write: rc=-1"), "{fork}");
    assert!(fork.contains("before fork()"), "{fork}");
    assert_eq!(line("fork-exit:"), "fork-exit: 0");
    let bound = line("open-bound:");
    assert!(
        bound.starts_with(&format!(
            "open-bound: opened={}",
            nvarray_pm::ffi::TX_OPEN_MAX
        )),
        "{bound}"
    );
    assert!(bound.contains("already open"), "{bound}");
    assert_eq!(line("open-after-abort:"), "open-after-abort: ok");
}
