//! `nvarray serve --channels` against the real clients: fio through the external engine,
//! the C example through libnvarray, and the Rust client, on one device at once, each
//! verified; an error the device returns reaches fio's io_u; bad flags are refused.
//!
//! The engine, library and example are built by `scripts/build_native.sh` (run by
//! `scripts/setup.sh`, so by the test command); a missing one fails here with that advice.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::run;
use common::serve::Serve;

fn native(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("target/native").join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/build_native.sh (scripts/setup.sh does)",
        path.display()
    );
    path
}

/// The Rust client, built beside this binary.
fn load_client() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_nvarray")).with_file_name("nvarray-channel-load")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nvarray-ch-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn serve(dir: &Path, extra: &[&str]) -> Serve {
    let socket = dir.join("ch.sock");
    let mut args: Vec<String> = ["serve", "--preset", "dram", "--size", "256m", "--channels"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(format!("unix:{}", socket.display()));
    args.extend(extra.iter().map(|s| s.to_string()));
    Serve::start_with(&args, socket)
}

/// `nvarray serve` of the tlc preset with `extra`, channels on `dir/ch.sock`.
fn serve_flash(dir: &Path, extra: &[&str]) -> Serve {
    let socket = dir.join("ch.sock");
    let mut args: Vec<String> = ["serve", "--preset", "tlc"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    args.push("--channels".into());
    args.push(format!("unix:{}", socket.display()));
    Serve::start_with(&args, socket)
}

fn fio(socket: &Path, args: &[&str]) -> std::process::Output {
    let engine = format!("--ioengine=external:{}", native("nvarray-fio.so").display());
    Command::new("fio")
        .args([
            "--name=ch",
            &engine,
            &format!("--filename={}", socket.display()),
        ])
        .args(args)
        .args(["--output-format=json"])
        .output()
        .expect("fio runs")
}

#[test]
fn fio_the_c_example_and_the_rust_client_share_one_device_each_verified() {
    let dir = scratch("three");
    let s = serve(&dir, &[]);
    let sock = s.socket.to_str().unwrap().to_string();
    // fio on the first 64 MiB, the C example at 128 MiB, the Rust client from 192 MiB.
    let fio_child = {
        let engine = format!("--ioengine=external:{}", native("nvarray-fio.so").display());
        Command::new("fio")
            .args([
                "--name=verify",
                &engine,
                &format!("--filename={sock}"),
                "--rw=randwrite",
                "--bs=4k",
                "--iodepth=8",
                "--size=64m",
                "--verify=crc32c",
                "--do_verify=1",
                "--output-format=json",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let rust = Command::new(load_client())
        .args([
            &sock,
            "--offset",
            "192m",
            "--len",
            "32m",
            "--qd",
            "8",
            "--seconds",
            "2",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let c = run(
        native("nvarray-example").to_str().unwrap(),
        &[&sock, "134217728"],
    );
    assert!(c.status.success(), "the C example failed: {c:?}");
    let rust = rust.wait_with_output().unwrap();
    let rust_out = String::from_utf8_lossy(&rust.stdout);
    assert!(
        rust.status.success() && rust_out.contains("\"mismatches\": 0"),
        "{rust_out}"
    );
    let fio_out = fio_child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&fio_out.stdout);
    assert!(
        fio_out.status.success(),
        "fio failed: {text}\n{}",
        String::from_utf8_lossy(&fio_out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    // Every block written was read back and checked by fio (16384 of 4 KiB).
    assert_eq!(job["read"]["total_ios"], 16384, "{job}");
    let (status, out) = s.stop("-INT");
    assert!(status.success(), "{out}");
    assert!(out.contains("channels: "), "{out}");
    let streams = out.lines().filter(|l| l.starts_with("pid ")).count();
    assert!(streams >= 3, "a stream per client process: {out}");
}

/// fio's trim through the engine is the device's deallocate: on flash behind the FTL it unmaps
/// the pages (issue 41), counted in fio's trim figures and the device's `pages trimmed`.
#[test]
fn fio_trims_through_the_engine_unmap_flash_pages() {
    let dir = scratch("trim");
    let s = serve_flash(
        &dir,
        &[
            "--size",
            "1g",
            "--set",
            "memory.erase_block_bytes=64k",
            "--precondition",
            "fill",
            "--json",
        ],
    );
    let out = fio(
        &s.socket,
        &["--rw=trim", "--bs=64k", "--offset=1m", "--size=16m"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{text}");
    assert_eq!(job["trim"]["io_bytes"], 16 << 20, "{text}");
    let (status, report) = s.stop("-TERM");
    assert!(status.success(), "{status}");
    let r: serde_json::Value =
        serde_json::from_str(&report[report.find("\n{").expect("a JSON report") + 1..]).unwrap();
    // 16 MiB of 4 KiB pages, every one mapped by the fill.
    assert_eq!(r["ftl"]["pages_trimmed"], 4096, "{}", r["ftl"]);
    assert_eq!(r["ftl"]["host_pages_written"], 0, "{}", r["ftl"]);
}

/// fio's own example job `name` (from the source of the installed fio, which
/// `scripts/build_native.sh` fetches), its device lines pointed at `socket` and the engine,
/// and each `(key, value)` of `set` in place of that key's line.
fn fio_example(name: &str, socket: &Path, dir: &Path, set: &[(&str, &str)]) -> PathBuf {
    let path = native("fio-src/examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let engine = format!("external:{}", native("nvarray-fio.so").display());
    let socket = socket.display().to_string();
    let set: Vec<(&str, &str)> = [("filename", socket.as_str()), ("ioengine", engine.as_str())]
        .into_iter()
        .chain(set.iter().copied())
        .collect();
    let job: String = text
        .lines()
        .map(|line| {
            let key = line.split('=').next().unwrap_or("");
            match set.iter().find(|(k, _)| *k == key) {
                Some((k, v)) => format!("{k}={v}\n"),
                None => format!("{line}\n"),
            }
        })
        .collect();
    let out = dir.join(name);
    std::fs::write(&out, job).unwrap();
    out
}

fn fio_json(out: &std::process::Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON from fio: {text}"));
    serde_json::from_str(&text[at..]).unwrap()
}

/// fio's `zonemode=zbd` on a zoned namespace through the engine: fio's two zbd examples run
/// with only their device lines changed (and the random writer's 180 s cut to 2; the reader's
/// zone 524 moved to zone 2, as the device here has 8 zones of 256 MiB), a sequential write
/// verified by reading it back, and a write off a zone's write pointer fails with EIO.
#[test]
fn fio_zonemode_zbd_runs_fios_zoned_examples_on_a_zoned_namespace() {
    let dir = scratch("zbd");
    let s = serve_flash(
        &dir,
        &[
            "--size",
            "2g",
            "--set",
            "zns.enabled=true",
            "--set",
            "zns.zone_bytes=256m",
        ],
    );
    let run = |job: &Path| {
        let out = Command::new("fio")
            .arg(job)
            .arg("--output-format=json")
            .output()
            .expect("fio runs");
        assert!(
            out.status.success(),
            "{}: {}{}",
            job.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        fio_json(&out)
    };

    let rand_write = fio_example("zbd-rand-write.fio", &s.socket, &dir, &[("runtime", "2")]);
    let json = run(&rand_write);
    let jobs = json["jobs"].as_array().unwrap();
    assert!(jobs.iter().all(|j| j["error"] == 0), "{json}");
    let written: u64 = jobs
        .iter()
        .map(|j| j["write"]["io_bytes"].as_u64().unwrap())
        .sum();
    assert!(written > 0, "{json}");

    let seq_read = fio_example(
        "zbd-seq-read.fio",
        &s.socket,
        &dir,
        &[("offset", "512m"), ("size", "1g")],
    );
    let json = run(&seq_read);
    assert_eq!(json["jobs"][0]["error"], 0, "{json}");

    // Every zone written in order and read back verified.
    let out = fio(
        &s.socket,
        &[
            "--zonemode=zbd",
            "--rw=write",
            "--bs=128k",
            "--direct=1",
            "--iodepth=8",
            "--verify=crc32c",
        ],
    );
    let json = fio_json(&out);
    assert!(out.status.success(), "{json}");
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{json}");
    assert_eq!(job["write"]["io_bytes"], 2u64 << 30, "{json}");
    assert_eq!(job["read"]["io_bytes"], 2u64 << 30, "verified: {json}");

    // Without zonemode=zbd fio writes anywhere: the zones refuse it.
    let out = fio(&s.socket, &["--rw=randwrite", "--bs=4k", "--size=16m"]);
    assert_eq!(fio_json(&out)["jobs"][0]["error"], 5, "EIO");

    let (status, _) = s.stop("-TERM");
    assert!(status.success(), "{status}");
}

#[test]
fn a_write_outside_the_grant_fails_in_fio_with_eacces_and_is_counted() {
    let dir = scratch("grant");
    let grant = "low:0:1m:rw:*";
    let s = serve(&dir, &["--grant", grant]);
    let out = fio(
        &s.socket,
        &["--rw=write", "--bs=4k", "--offset=1m", "--size=64k"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // fio prints the I/O error before its JSON.
    let json: serde_json::Value = serde_json::from_str(&text[text.find("\n{").unwrap()..]).unwrap();
    assert_eq!(json["jobs"][0]["error"], libc::EACCES, "{text}");
    assert!(!out.status.success());
    // Inside the grant the same job passes.
    let ok = fio(
        &s.socket,
        &["--rw=write", "--bs=4k", "--offset=0", "--size=64k"],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let (_, report) = s.stop("-INT");
    let line = report.lines().find(|l| l.starts_with("channels:")).unwrap();
    assert!(!line.contains(" 0 outside the grants"), "{line}");
}

#[test]
fn bad_channel_flags_are_refused_with_the_reason() {
    let exe = env!("CARGO_BIN_EXE_nvarray");
    for (args, says) in [
        (
            vec!["serve", "--channels", "tcp:1.2.3.4:5"],
            "expected unix:PATH",
        ),
        (
            vec![
                "serve",
                "--channels",
                "unix:/tmp/x.sock",
                "--grant",
                "a:0:1m:rx:1",
            ],
            "MODE",
        ),
        (
            vec![
                "serve",
                "--channels",
                "unix:/tmp/x.sock",
                "--grant",
                "a:0:2g:rw:1",
                "--size",
                "1g",
            ],
            "past the device",
        ),
        (vec!["serve", "--grant", "a:0:1m:rw:1"], "--channels"),
    ] {
        let out = run(exe, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// fio's job error for a small write at `offset` (0 when it succeeded).
fn write_error(socket: &Path, offset: &str) -> i64 {
    let out = fio(
        socket,
        &[
            "--rw=write",
            "--bs=4k",
            &format!("--offset={offset}"),
            "--size=16k",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    json["jobs"][0]["error"].as_i64().unwrap()
}

#[test]
fn read_only_serves_no_writes_and_sighup_revokes_a_grant_from_the_file() {
    let dir = scratch("hup");
    let s = serve(&dir, &["--read-only"]);
    assert_eq!(
        write_error(&s.socket, "0"),
        i64::from(libc::EACCES),
        "--read-only wrote"
    );
    let ok = fio(&s.socket, &["--rw=read", "--bs=4k", "--size=16k"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    s.stop("-INT");

    let grants = dir.join("grants");
    std::fs::write(&grants, "# both halves\nlow:0:1m:rw:*\nhigh:1m:1m:rw:*\n").unwrap();
    let s = serve(&dir, &["--grants-file", grants.to_str().unwrap()]);
    assert_eq!(write_error(&s.socket, "1m"), 0);
    std::fs::write(&grants, "low:0:1m:rw:*\n").unwrap();
    s.signal("-HUP");
    // The daemon re-reads the file when the signal arrives: poll for it, with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while write_error(&s.socket, "1m") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP never revoked the grant"
        );
    }
    assert_eq!(write_error(&s.socket, "1m"), i64::from(libc::EACCES));
    assert_eq!(
        write_error(&s.socket, "0"),
        0,
        "the kept grant still writes"
    );
    // A file that no longer parses leaves the grants as they were.
    std::fs::write(&grants, "nonsense\n").unwrap();
    s.signal("-HUP");
    assert_eq!(write_error(&s.socket, "0"), 0);
    let (status, _) = s.stop("-INT");
    assert!(status.success());
}
