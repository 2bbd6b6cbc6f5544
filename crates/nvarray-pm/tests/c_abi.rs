//! C programs compiled against the static library this package builds: the example, run twice
//! over one pool (the counters persist across runs, aborts leave nothing, bad writes are
//! refused), and the ABI's edges (fork, mode bits, a failed create, thread hand-off, reading
//! through a transaction, the bound on open transactions, simulated power cuts).

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

/// Issue 44, as it was found with the example: run it on a pool, `kill -9` it, remove the
/// pool and run it again on the same path, and it started from the dead pool's counters; put
/// an unrelated 1 MiB file there instead, and `nv_allocate` rewrote its first words with
/// them. A file that is not the pool is now refused and left as it was, until the dead
/// pool's state is discarded (`nvarray pm clean --discard-commits`, here its library call).
#[test]
fn a_dead_pools_counters_are_never_written_into_a_new_file_at_its_path() {
    let s = common::Scratch::new();
    let exe = s.dir.path().join("counters");
    compile("examples/c/counters.c", &exe);
    let pool = s.dir.path().join("counters.pool");
    let counters = |n: &str| {
        let mut c = Command::new(&exe);
        c.arg(&pool)
            .arg(n)
            .env("NVARRAY_PM_NVM_DIR", s.dir.path())
            .env("NVARRAY_PM_LOG_SIZE", "1m")
            .env("NVARRAY_PM_CACHE_SIZE", "1m");
        c
    };
    let x = || {
        let bytes = std::fs::read(&pool).unwrap_or_default();
        bytes
            .get(..8)
            .map_or(0, |b| i64::from_le_bytes(b.try_into().unwrap()))
    };

    // Killed once its commits are visible (through the mapping, before any write-back).
    let mut child = counters("1000000000000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while x() < 1000 {
        assert!(std::time::Instant::now() < deadline, "no commits in 30 s");
        std::thread::yield_now();
    }
    child.kill().unwrap();
    child.wait().unwrap();

    // An unrelated file in its place: refused, and not written.
    let unrelated = common::pattern(9, 1 << 20);
    std::fs::remove_file(&pool).unwrap();
    std::fs::write(&pool, &unrelated).unwrap();
    let out = counters("10").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("is not the pool whose commits"), "{err}");
    assert!(err.contains("nvarray pm clean --discard-commits"), "{err}");
    assert!(
        std::fs::read(&pool).unwrap() == unrelated,
        "the unrelated file was written"
    );

    // Removed, and made anew by NV_CREATE: refused, and nothing left at the path.
    std::fs::remove_file(&pool).unwrap();
    let out = counters("10").output().unwrap();
    assert!(
        !out.status.success(),
        "accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!pool.exists(), "the refused create left its file");

    // Once the dead pool's state is discarded, a new pool starts from zero, and its clean
    // exit leaves no state behind.
    let states = nvarray_pm::list_state_files(s.dir.path()).unwrap();
    assert_eq!(states.len(), 1, "{states:?}");
    assert!(
        matches!(
            states[0].status,
            nvarray_pm::StateStatus::Orphan {
                unapplied: true,
                ..
            }
        ),
        "{states:?}"
    );
    nvarray_pm::remove_state_file(&states[0].path, true).unwrap();
    let out = counters("10").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("start x=0 y=0"), "{stdout}");
    assert!(stdout.contains("end x=10 y=20"), "{stdout}");
    assert_eq!(common::state_files(s.dir.path()), Vec::<PathBuf>::new());
}

/// Issue 44: `nv_allocate` sized a new pool's file with holes, so a file system without room
/// for it failed later, inside a store, with SIGBUS. It is refused at once, with the reason.
#[test]
fn nv_allocate_refuses_a_pool_its_file_system_has_no_room_for() {
    let s = common::Scratch::new();
    let exe = s.dir.path().join("counters");
    compile("examples/c/counters.c", &exe);
    let small = common::Tmpfs::mount("256k");
    let pool = small.path().join("counters.pool");
    let out = Command::new(&exe)
        .arg(&pool)
        .arg("10")
        .env("NVARRAY_PM_NVM_DIR", s.dir.path())
        .env("NVARRAY_PM_LOG_SIZE", "1m")
        .env("NVARRAY_PM_CACHE_SIZE", "1m")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs 1048576 bytes"), "{err}");
    assert!(err.contains("free"), "{err}");
    assert!(!pool.exists(), "the refused create left its file");
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
    // NV_EBADTID -3, NV_ERROR -1: an unknown id, a NULL destination, a source in no pool.
    assert_eq!(
        line("read:"),
        "read: write=0 read=0 seen=1234 pointer=0 bad_tid=-3 null=-1 outside=-1 commit=0 \
         after=1234"
    );
    // NV_EFULL -4 at the write that passes a quarter of the 1 MiB log (256 KiB: 63 pages
    // and the record's header); the aborted writes left nothing.
    assert_eq!(line("too-large:"), "too-large: rc=-4 after=63 untouched=1");
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
    // Refused with a pool open and outside a session (NV_ERROR); a clean close keeps the
    // commit and needs no recovery; a 1 MiB placeholder at the path; the cut pool refused
    // until recovered, then recovered (once) to the state before its only commit.
    assert_eq!(
        line("sim:"),
        "sim: start_open=-1 outside=-1 ops=1 reopened=99 clean_recoveries=0 file=1048576 \
         crashed=1 stop_open=-1 lost_refused=1 replaced=1 recoveries=1 recovered=0"
    );
}

/// The C ABI while `NVARRAY_INJECT_FAULTS` fails one in 3 of the pool's `fdatasync`s and
/// `fallocate`s (issue 58): a seeded stream of opens, transactions and closes
/// (`tests/c/faults.c`) checks after every open that every commit that returned `NV_OK` is
/// there. `scripts/campaign.sh pm-faults` runs ≥ 10,000 faults.
#[test]
fn the_c_abi_loses_no_commit_under_faults_in_the_pools_files() {
    let steps = common::campaign_env("NVARRAY_PM_C_FAULTS_STEPS", 3000);
    let seed = common::campaign_env("NVARRAY_PM_C_FAULTS_SEED", 0x6361_6269);
    let s = common::Scratch::new();
    let exe = s.dir.path().join("faults");
    compile("tests/c/faults.c", &exe);
    let plan = format!("one-in=3,seed={seed},ops=fsync+fallocate,faults=eio+enospc+edquot");
    let out = Command::new(&exe)
        .arg(s.backing())
        .arg(steps.to_string())
        .arg(seed.to_string())
        .env("NVARRAY_PM_NVM_DIR", s.dir.path())
        .env("NVARRAY_PM_LOG_SIZE", "64k")
        .env("NVARRAY_PM_CACHE_SIZE", "64k")
        .env("NVARRAY_INJECT_FAULTS", &plan)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "seed {seed}: {stdout}{stderr}\nreplay: NVARRAY_PM_C_FAULTS_SEED={seed} \
         NVARRAY_PM_C_FAULTS_STEPS={steps} cargo test --release -p nvarray-pm --test c_abi \
         faults"
    );
    // The program asks the library how many faults it injected (`nv_injected_faults`).
    let injected: u64 = stdout
        .trim()
        .strip_prefix("c abi faults: ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of injected faults in: {stdout}"));
    assert!(injected > 0, "{stdout}");
    println!("{} (seed {seed}, {steps} steps)", stdout.trim());
}
