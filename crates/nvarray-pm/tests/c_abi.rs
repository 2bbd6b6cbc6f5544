//! The C example, compiled against the static library this package builds, run twice over one
//! pool: the counters persist across runs, aborts leave nothing, bad writes are refused.

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

#[test]
fn the_c_example_builds_runs_and_its_commits_persist_across_runs() {
    let lib = static_lib();
    assert!(lib.exists(), "{} was not built", lib.display());
    let s = common::Scratch::new();
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = s.dir.path().join("counters");
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-I"])
        .arg(manifest.join("include"))
        .arg(manifest.join("examples/c/counters.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .expect("gcc runs (the test command installs it)");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );

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
