//! End-to-end tests of `nvarray mount`: the real binary, the kernel's FUSE, loop devices, XFS
//! and SQLite, as a user would run them. They need root, /dev/fuse, fusermount3 and (most of
//! them) loop devices; where something is missing a test prints `SKIPPED (not passed):` and
//! the reason to stderr, and returns. Every test cleans up after itself through guards
//! (file system unmounted, loop device detached, server stopped or killed, dead mount
//! removed), also when it fails.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{campaign_env, run, run_for, run_ok};

/// Small and fast: the DRAM preset. XFS refuses file systems under 300 MiB.
const XFS_SIZE: &str = "320M";
const SMALL_SIZE: &str = "64M";
const SMALL_SIZE_BYTES: u64 = 64 << 20;

/// Upper bound on waiting for a mount to appear or a server to stop.
const WAIT_MAX: Duration = Duration::from_secs(30);

fn skipped(test: &str, reason: &str) {
    // Straight to the process's stderr, past the test harness's capture, so that a skipped
    // test is seen as skipped and not mistaken for a pass.
    let _ = writeln!(std::io::stderr(), "SKIPPED (not passed): {test}: {reason}");
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

/// Why FUSE tests cannot run here, if they cannot.
fn fuse_missing() -> Option<String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: mounting FUSE file systems and loop devices needs root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    if !on_path("fusermount3") {
        return Some("fusermount3 is missing (Debian package fuse3)".into());
    }
    None
}

/// Why loop-device tests cannot run here, if they cannot: FUSE, the tools, and a loop device
/// that can actually be attached to a plain file.
fn loop_missing(tools: &[&str]) -> Option<String> {
    if let Some(reason) = fuse_missing() {
        return Some(reason);
    }
    for tool in ["losetup", "mount", "umount"].iter().chain(tools) {
        if !on_path(tool) {
            return Some(format!("{tool} is missing"));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("/dev/loop-control is missing (no loop devices here)".into());
    }
    let probe = tempfile::NamedTempFile::new().expect("temporary file");
    probe.as_file().set_len(1 << 20).expect("temporary file");
    match LoopDevice::attach(probe.path()) {
        Ok(_detached_on_drop) => None,
        Err(e) => Some(format!("cannot attach a loop device to a plain file: {e}")),
    }
}

/// Whether `dir` is a mount point of a file system whose type starts with `fstype`.
fn mounted(dir: &Path, fstype: &str) -> bool {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = dir.to_string_lossy();
    mounts.lines().any(|line| {
        let mut fields = line.split(' ');
        let (_source, target, kind) = (fields.next(), fields.next(), fields.next());
        target == Some(&*dir) && kind.is_some_and(|k| k.starts_with(fstype))
    })
}

/// Polls `done` until it holds or `WAIT_MAX` has passed; returns whether it held.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT_MAX;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// A running `nvarray mount`. Dropping it stops it (SIGINT, then SIGKILL if it does not go)
/// and removes its mount if one is left (a dead one after a SIGKILL).
struct Server {
    child: Option<Child>,
    dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Server {
    /// Starts `nvarray mount DIR` with the DRAM preset and `args`, and waits until DIR is
    /// mounted.
    fn start(work: &Path, dir: &Path, args: &[&str]) -> Server {
        std::fs::create_dir_all(dir).unwrap();
        let n = std::fs::read_dir(work).unwrap().count();
        let stdout = work.join(format!("server{n}.out"));
        let stderr = work.join(format!("server{n}.err"));
        let child = Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .arg("mount")
            .arg(dir)
            .args(["--preset", "dram"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).unwrap())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .expect("start nvarray mount");
        let mut server = Server {
            child: Some(child),
            dir: dir.canonicalize().unwrap(),
            stdout,
            stderr,
        };
        let up = wait_for(|| mounted(&server.dir, "fuse") || !server.running());
        assert!(
            up && server.running(),
            "nvarray mount did not mount {}: {}",
            server.dir.display(),
            server.logs()
        );
        server
    }

    fn disk(&self) -> PathBuf {
        self.dir.join("disk")
    }

    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn logs(&self) -> String {
        format!(
            "\n--- stdout ---\n{}\n--- stderr ---\n{}",
            std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    /// SIGINT, repeated while the server says the file is still busy (a loop device's
    /// detach can lag), until it exits; returns its status, stdout and stderr.
    fn stop(&mut self) -> (ExitStatus, String, String) {
        let mut child = self.child.take().expect("server running");
        let deadline = Instant::now() + WAIT_MAX;
        let mut next_signal = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("nvarray mount did not stop on SIGINT: {}", self.logs());
            }
            if Instant::now() >= next_signal {
                // SAFETY: kill only sends a signal to our own child's pid.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
                next_signal = Instant::now() + Duration::from_secs(2);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (
            status,
            std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }

    /// SIGKILL, then the lazy unmount a user must do after a crashed FUSE server.
    fn kill9(&mut self) {
        self.kill9_leaving_a_dead_mount();
        remove_dead_mount(&self.dir);
        assert!(!mounted(&self.dir, "fuse"), "dead mount still there");
    }

    /// SIGKILL only: the directory stays a dead FUSE mount (until this is dropped).
    fn kill9_leaving_a_dead_mount(&mut self) {
        let mut child = self.child.take().expect("server running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }
}

fn remove_dead_mount(dir: &Path) {
    if mounted(dir, "fuse") {
        let dir = dir.to_str().unwrap();
        if !run("fusermount3", &["-u", "-z", dir]).status.success() {
            let _ = run("umount", &["-l", dir]);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill only sends a signal to our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let stopped = wait_for(|| !matches!(child.try_wait(), Ok(None)));
            if !stopped {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        remove_dead_mount(&self.dir);
    }
}

/// A loop device over a file, detached on drop.
struct LoopDevice {
    dev: String,
}

impl LoopDevice {
    fn attach(file: &Path) -> Result<LoopDevice, String> {
        let out = run("losetup", &["--find", "--show", file.to_str().unwrap()]);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(LoopDevice {
            dev: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        })
    }

    /// Detaches now, and waits until nothing refers to `file` any more.
    fn detach(mut self, file: &Path) {
        let dev = std::mem::take(&mut self.dev);
        run_ok("losetup", &["-d", &dev]);
        let file = file.to_str().unwrap().to_string();
        let gone = wait_for(|| run_ok("losetup", &["-j", &file]).trim().is_empty());
        assert!(gone, "{dev} still refers to {file} after losetup -d");
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if !self.dev.is_empty() {
            let _ = run("losetup", &["-d", &self.dev]);
        }
    }
}

/// A file system mounted from a block device, unmounted on drop.
struct FsMount {
    dir: PathBuf,
}

impl FsMount {
    fn mount(dev: &str, dir: &Path) -> FsMount {
        std::fs::create_dir_all(dir).unwrap();
        run_ok("mount", &[dev, dir.to_str().unwrap()]);
        FsMount {
            dir: dir.to_path_buf(),
        }
    }

    fn unmount(mut self) {
        let dir = std::mem::take(&mut self.dir);
        run_ok("umount", &[dir.to_str().unwrap()]);
    }
}

impl Drop for FsMount {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let dir = self.dir.to_str().unwrap();
            if !run("umount", &[dir]).status.success() {
                let _ = run("umount", &["-l", dir]);
            }
        }
    }
}

/// Deterministic bytes (xorshift64), different per seed.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a, 64 bits: a checksum of a file's contents.
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Length and checksum of every file under `root`, by path relative to it.
fn checksums(root: &Path) -> BTreeMap<PathBuf, (usize, u64)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let data = std::fs::read(&path).unwrap();
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, (data.len(), checksum(&data)));
            }
        }
    }
    out
}

#[test]
fn xfs_on_a_loop_device_survives_a_server_restart() {
    if let Some(reason) = loop_missing(&["mkfs.xfs", "xfs_repair", "sync"]) {
        return skipped("xfs_on_a_loop_device_survives_a_server_restart", &reason);
    }
    let work = tempfile::tempdir().unwrap();
    let (dir, fs_dir) = (work.path().join("fuse"), work.path().join("xfs"));
    let backing = work.path().join("device.img");
    let args = [
        "--size",
        XFS_SIZE,
        "--backing",
        &format!("file:{}", backing.display()),
    ];

    let mut server = Server::start(work.path(), &dir, &args);
    let disk = server.disk();
    let lo = LoopDevice::attach(&disk).expect("loop device over the FUSE file");
    run_ok("mkfs.xfs", &["-q", &lo.dev]);
    let fs = FsMount::mount(&lo.dev, &fs_dir);
    std::fs::create_dir_all(fs_dir.join("tree/deeper")).unwrap();
    let sizes = [0usize, 1, 511, 4096, 65_537, 1 << 20, (5 << 20) + 3];
    for (i, &len) in sizes.iter().enumerate() {
        std::fs::write(fs_dir.join(format!("file{i}")), bytes(len, i as u64)).unwrap();
    }
    for i in 0..64 {
        let sub = if i % 2 == 0 { "tree" } else { "tree/deeper" };
        let path = fs_dir.join(format!("{sub}/small{i}"));
        std::fs::write(path, bytes(100 + i * 37, 1000 + i as u64)).unwrap();
    }
    run_ok("sync", &[]);
    let written = checksums(&fs_dir);
    assert_eq!(written.len(), sizes.len() + 64);
    fs.unmount();
    lo.detach(&disk);
    let (status, stdout, stderr) = server.stop();
    assert!(
        status.success(),
        "nvarray mount exited with {status}: {stderr}"
    );
    assert!(
        stdout.contains("served   FUSE file") && stdout.contains("fsyncs"),
        "device report at exit: {stdout}"
    );
    assert!(!mounted(&server.dir, "fuse"), "unmounted at exit");

    // A new server on the same backing file: the file system and every file are there.
    let server = Server::start(work.path(), &dir, &args);
    let lo = LoopDevice::attach(&server.disk()).expect("loop device over the FUSE file");
    run_ok("xfs_repair", &["-n", &lo.dev]);
    let _fs = FsMount::mount(&lo.dev, &fs_dir);
    assert_eq!(checksums(&fs_dir), written, "files after the restart");
}

#[test]
fn sqlite_runs_on_xfs_over_the_fuse_file() {
    if let Some(reason) = loop_missing(&["mkfs.xfs", "sqlite3"]) {
        return skipped("sqlite_runs_on_xfs_over_the_fuse_file", &reason);
    }
    let work = tempfile::tempdir().unwrap();
    let (dir, fs_dir) = (work.path().join("fuse"), work.path().join("xfs"));
    let mut server = Server::start(work.path(), &dir, &["--size", XFS_SIZE]);
    let disk = server.disk();
    let lo = LoopDevice::attach(&disk).expect("loop device over the FUSE file");
    run_ok("mkfs.xfs", &["-q", &lo.dev]);
    let fs = FsMount::mount(&lo.dev, &fs_dir);
    let db = fs_dir.join("test.db");
    let db = db.to_str().unwrap();

    // 100 transactions of 1000 rows each; every commit is an fsync down to the device.
    let mut script = String::from(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT NOT NULL);\n\
         CREATE INDEX t_k ON t(k);\n",
    );
    for _ in 0..100 {
        script.push_str(
            "BEGIN;\n\
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000)\n\
             INSERT INTO t(k, v) SELECT abs(random()) % 100000, hex(randomblob(24)) FROM c;\n\
             COMMIT;\n",
        );
    }
    sqlite(db, &script);
    // Remount, so the checks read the database from the device and not from the cache.
    fs.unmount();
    let fs = FsMount::mount(&lo.dev, &fs_dir);
    let out = sqlite(db, "PRAGMA integrity_check;\nSELECT count(*) FROM t;\n");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["ok", "100000"], "{out}");

    // Each commit's fsync went down through XFS and the loop device to a device flush.
    fs.unmount();
    lo.detach(&disk);
    let (status, stdout, stderr) = server.stop();
    assert!(status.success(), "exit {status}: {stderr}");
    let fsyncs: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("fuse: ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no fsync count in the report: {stdout}"));
    assert!(fsyncs >= 100, "{fsyncs} device flushes for 100 commits");
}

/// Runs `script` in the sqlite3 CLI on `db`; returns its output. A failing statement fails
/// the test (`-bail`).
fn sqlite(db: &str, script: &str) -> String {
    let mut child = Command::new("sqlite3")
        .args(["-bail", db])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sqlite3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    if let Some(reason) = fuse_missing() {
        return skipped("acknowledged_writes_survive_kill_9", &reason);
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("fuse");
    let backing = work.path().join("device.img");
    let args = [
        "--size",
        SMALL_SIZE,
        "--backing",
        &format!("file:{}", backing.display()),
    ];
    let mut server = Server::start(work.path(), &dir, &args);
    // O_DIRECT writes at block-aligned offsets, and buffered-API writes at odd offsets and
    // lengths made durable with fsync: both are acknowledged before the kill.
    let direct = bytes(1 << 20, 1);
    let odd: Vec<(u64, Vec<u8>)> = [
        (12_345u64, 777usize),
        (3 << 20, 4097),
        (SMALL_SIZE_BYTES - 5, 5),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(offset, len))| (offset, bytes(len, 10 + i as u64)))
    .collect();
    {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(server.disk())
            .unwrap();
        // O_DIRECT wants an aligned buffer: a page-aligned slice of a larger one.
        let mut buf = vec![0u8; direct.len() + 4096];
        let at = buf.as_ptr().align_offset(4096);
        buf[at..at + direct.len()].copy_from_slice(&direct);
        file.write_all_at(&buf[at..at + direct.len()], 8 << 20)
            .unwrap();
        let file = OpenOptions::new().write(true).open(server.disk()).unwrap();
        for (offset, data) in &odd {
            file.write_all_at(data, *offset).unwrap();
        }
        file.sync_all().unwrap();
    }
    server.kill9();

    let server = Server::start(work.path(), &dir, &args);
    let file = File::open(server.disk()).unwrap();
    let mut got = vec![0u8; direct.len()];
    file.read_exact_at(&mut got, 8 << 20).unwrap();
    assert!(got == direct, "O_DIRECT write lost or changed");
    for (offset, data) in &odd {
        let mut got = vec![0u8; data.len()];
        file.read_exact_at(&mut got, *offset).unwrap();
        assert!(&got == data, "write at {offset} lost or changed");
    }
}

#[test]
fn bad_requests_get_errors_and_nothing_panics() {
    if let Some(reason) = fuse_missing() {
        return skipped("bad_requests_get_errors_and_nothing_panics", &reason);
    }
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("fuse");
    let mut server = Server::start(work.path(), &dir, &["--size", SMALL_SIZE]);
    let disk = server.disk();
    let size = SMALL_SIZE_BYTES;
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), size);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["disk"]);

    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&disk)
        .unwrap();
    // Odd offsets and lengths read back exactly, neighbours untouched.
    let data = bytes(10_001, 7);
    file.write_all_at(&data, 1_000_003).unwrap();
    let mut got = vec![0u8; data.len() + 2];
    file.read_exact_at(&mut got, 1_000_002).unwrap();
    assert_eq!(got[0], 0);
    assert!(got[1..=data.len()] == data[..]);
    assert_eq!(got[data.len() + 1], 0);

    // At and past the end: reads return nothing, writes fail with ENOSPC, and a write across
    // the end is short.
    let mut buf = [0u8; 4096];
    assert_eq!(file.read_at(&mut buf, size).unwrap(), 0, "read at the end");
    assert_eq!(file.read_at(&mut buf, size + (1 << 30)).unwrap(), 0);
    assert_eq!(
        file.read_at(&mut buf, size - 10).unwrap(),
        10,
        "read across"
    );
    let err = file.write_at(b"x", size).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "write at the end: {err}"
    );
    let err = file.write_at(b"x", size + (1 << 40)).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "write far beyond: {err}"
    );
    assert_eq!(
        file.write_at(&[1u8; 100], size - 10).unwrap(),
        10,
        "short write"
    );

    // The size is fixed and the directory holds one file.
    let err = file.set_len(0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "truncate: {err}");
    file.set_len(size).expect("setting the size it has is fine");
    assert!(File::create(&disk).is_err(), "open with O_TRUNC");
    assert!(File::create(dir.join("other")).is_err(), "create");
    assert!(std::fs::create_dir(dir.join("sub")).is_err(), "mkdir");
    assert!(std::fs::remove_file(&disk).is_err(), "unlink");
    file.sync_all().unwrap();
    drop(file);
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), size);

    let (status, stdout, stderr) = server.stop();
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stdout.contains("requests refused (last: write at offset"),
        "refusals counted in the report: {stdout}"
    );
}

#[test]
fn mount_refuses_a_missing_dir_or_a_file_with_one_line() {
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("missing");
    let file = work.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    for (dir, says) in [(&missing, "does not exist"), (&file, "is not a directory")] {
        let out = Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .arg("mount")
            .arg(dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_nvarray"))
        .args(["mount", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("losetup") && help.contains("--backing"),
        "{help}"
    );
}

/// How many FUSE mounts are stacked on `dir`.
fn fuse_mounts_on(dir: &Path) -> usize {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = dir.to_string_lossy();
    mounts
        .lines()
        .filter(|line| {
            let mut fields = line.split(' ');
            let (_source, target, kind) = (fields.next(), fields.next(), fields.next());
            target == Some(&*dir) && kind.is_some_and(|k| k.starts_with("fuse"))
        })
        .count()
}

/// `nvarray mount` with `args`, expected to refuse at once: exit 2, one line on stderr that
/// contains every one of `says`. Run for at most 30 s, so a mount that wrongly starts is
/// killed (then its dead mount is removed) and the test fails.
fn mount_refused(dir: &Path, args: &[&str], says: &[&str]) {
    let mut all = vec!["mount", dir.to_str().unwrap(), "--preset", "dram"];
    all.extend_from_slice(args);
    let (out, killed) = run_for(env!("CARGO_BIN_EXE_nvarray"), &all, WAIT_MAX);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if killed {
        remove_dead_mount(dir);
        panic!("{all:?} was not refused: it mounted and ran: {stderr}");
    }
    assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{all:?}: {stderr}");
    for s in says {
        assert!(stderr.contains(s), "{all:?} does not say {s:?}: {stderr}");
    }
}

/// A mount hides what its directory holds, so `mount` refuses a directory that is not empty,
/// one an `nvarray mount` already serves, and one (or a path under one) that a killed server
/// left as a dead FUSE mount, saying how to remove it; the same advice comes for a backing
/// file or a socket under the dead mount instead of a bare "Transport endpoint is not
/// connected".
#[test]
fn mount_refuses_a_directory_it_would_hide_or_a_dead_mount_with_advice() {
    if let Some(reason) = fuse_missing() {
        return skipped(
            "mount_refuses_a_directory_it_would_hide_or_a_dead_mount_with_advice",
            &reason,
        );
    }
    let work = tempfile::tempdir().unwrap();
    let full = work.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("precious"), b"still here").unwrap();
    mount_refused(&full, &["--size", SMALL_SIZE], &["not empty", "precious"]);
    assert_eq!(fuse_mounts_on(&full), 0);
    assert_eq!(std::fs::read(full.join("precious")).unwrap(), b"still here");

    let dir = work.path().join("fuse");
    let mut server = Server::start(work.path(), &dir, &["--size", SMALL_SIZE]);
    mount_refused(
        &server.dir,
        &["--size", SMALL_SIZE],
        &["already has an nvarray mount"],
    );
    assert_eq!(fuse_mounts_on(&server.dir), 1, "a second mount was stacked");
    assert!(server.running());

    server.kill9_leaving_a_dead_mount();
    let unmount = format!("fusermount3 -u -z {}", server.dir.display());
    mount_refused(&server.dir, &["--size", SMALL_SIZE], &[&unmount]);
    mount_refused(
        &server.dir.join("sub"),
        &["--size", SMALL_SIZE],
        &[&unmount, "inside"],
    );
    let nvarray = env!("CARGO_BIN_EXE_nvarray");
    let backing = format!("file:{}", server.dir.join("image").display());
    let listen = format!("unix:{}", server.dir.join("nbd.sock").display());
    for args in [
        vec![
            "serve",
            "--preset",
            "dram",
            "--size",
            SMALL_SIZE,
            "--backing",
            &backing,
        ],
        vec![
            "serve", "--preset", "dram", "--size", SMALL_SIZE, "--listen", &listen,
        ],
        vec![
            "bench",
            "--preset",
            "dram",
            "--size",
            SMALL_SIZE,
            "--backing",
            &backing,
        ],
    ] {
        let (out, killed) = run_for(nvarray, &args, WAIT_MAX);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!killed, "{args:?} ran: {stderr}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(&unmount), "{args:?}: {stderr}");
    }
    drop(server); // removes the dead mount
    assert_eq!(fuse_mounts_on(&dir.canonicalize().unwrap()), 0);
}

/// Two devices on one backing file would overwrite each other's data (ext4 through both lost
/// every file written on one side): while `mount` holds the file, a second `mount` and a
/// `serve` on it exit 2 naming the holder, and the second directory stays unmounted.
#[test]
fn a_backing_file_in_use_by_a_mount_is_refused_to_a_second_front_end() {
    if let Some(reason) = fuse_missing() {
        return skipped(
            "a_backing_file_in_use_by_a_mount_is_refused_to_a_second_front_end",
            &reason,
        );
    }
    let work = tempfile::tempdir().unwrap();
    let image = work.path().join("device.img");
    let backing = format!("file:{}", image.display());
    let args = ["--size", SMALL_SIZE, "--backing", &backing];
    let mut server = Server::start(work.path(), &work.path().join("first"), &args);
    let holder = format!("process {} (", server.pid());
    let second = work.path().join("second");
    std::fs::create_dir_all(&second).unwrap();
    mount_refused(&second, &args, &[&holder, "mount"]);
    assert_eq!(fuse_mounts_on(&second.canonicalize().unwrap()), 0);
    let listen = format!("unix:{}", work.path().join("nbd.sock").display());
    let (out, killed) = run_for(
        env!("CARGO_BIN_EXE_nvarray"),
        &[
            "serve",
            "--preset",
            "dram",
            "--listen",
            &listen,
            "--size",
            SMALL_SIZE,
            "--backing",
            &backing,
        ],
        WAIT_MAX,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!killed, "serve ran beside the mount: {stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&holder), "{stderr}");
    let (status, _, stderr) = server.stop();
    assert!(status.success(), "{stderr}");
}

/// SQLite (through Python's `sqlite3`, the real library) committing transactions of 50 rows
/// on XFS, printing each transaction's number once its COMMIT has returned. `synchronous=EXTRA`:
/// in the default rollback-journal mode a commit is the journal's unlink, which only EXTRA
/// makes durable (it syncs the directory); with FULL the last commit before a crash may be
/// rolled back, as SQLite documents, and the first trial of this test saw exactly that.
const SQLITE_WRITER: &str = r#"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA synchronous=EXTRA")
db.execute("CREATE TABLE IF NOT EXISTS t(txn INTEGER NOT NULL, k INTEGER NOT NULL, v TEXT NOT NULL)")
n = db.execute("SELECT coalesce(max(txn), 0) FROM t").fetchone()[0]
while True:
    n += 1
    db.execute("BEGIN")
    for k in range(50):
        db.execute("INSERT INTO t VALUES (?, ?, ?)", (n, k, "%016x" % (n * 1000003 + k)))
    db.execute("COMMIT")
    print(n, flush=True)
"#;

/// kill -9 of `nvarray mount` at a random moment while SQLite commits on XFS over a loop
/// device over the FUSE file (file backing). After each kill: unmount what is left, restart
/// the server on the same file, replay XFS's log (mount, unmount), then `xfs_repair -n` must
/// find nothing, SQLite's `integrity_check` must say ok, and every transaction whose COMMIT
/// returned must be there whole.
///
/// The test command runs `NVARRAY_FUSE_KILL_TRIALS` trials (default 1); `scripts/campaign.sh
/// fuse-kill` runs 300.
#[test]
fn sqlite_on_xfs_survives_kill_9_of_the_server_at_random_moments() {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::io::{BufRead, BufReader};

    let name = "sqlite_on_xfs_survives_kill_9_of_the_server_at_random_moments";
    if let Some(reason) = loop_missing(&["mkfs.xfs", "xfs_repair", "python3"]) {
        return skipped(name, &reason);
    }
    let trials = campaign_env("NVARRAY_FUSE_KILL_TRIALS", 1);
    let seed = campaign_env("NVARRAY_FUSE_KILL_SEED", 0x6675_7365);
    let mut rng = SmallRng::seed_from_u64(seed);
    let work = tempfile::tempdir().unwrap();
    let (dir, fs_dir) = (work.path().join("fuse"), work.path().join("xfs"));
    let backing = work.path().join("device.img");
    let args = [
        "--size",
        XFS_SIZE,
        "--backing",
        &format!("file:{}", backing.display()),
    ];
    let db = fs_dir.join("test.db");
    let db = db.to_str().unwrap().to_string();
    let mut committed = 0u64;
    let started = Instant::now();
    for trial in 1..=trials {
        let replay = format!(
            "replay: NVARRAY_FUSE_KILL_SEED={seed} NVARRAY_FUSE_KILL_TRIALS={trial} cargo test \
             --release -p nvarray --test fuse -- {name}"
        );
        let mut server = Server::start(work.path(), &dir, &args);
        let disk = server.disk();
        let lo = LoopDevice::attach(&disk).expect("loop device over the FUSE file");
        if trial == 1 {
            run_ok("mkfs.xfs", &["-q", &lo.dev]);
        }
        let fs = FsMount::mount(&lo.dev, &fs_dir);
        let mut writer = Command::new("python3")
            .args(["-c", SQLITE_WRITER, &db])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the SQLite writer");
        let stdout = writer.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| l.trim().parse::<u64>().ok())
                .max()
        });
        // The random moment: from the writer's start to well into its commits.
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..1500)));
        server.kill9();
        let _ = writer.kill();
        let _ = writer.wait();
        if let Some(n) = reader.join().unwrap() {
            committed = committed.max(n);
        }
        // What a user does after a crashed server: unmount XFS (it has shut down on the I/O
        // errors), detach the loop device.
        drop(fs);
        drop(lo);

        let server = Server::start(work.path(), &dir, &args);
        let disk = server.disk();
        let lo = LoopDevice::attach(&disk).expect("loop device after the restart");
        // Mounting replays XFS's log; the check must then find nothing to repair.
        FsMount::mount(&lo.dev, &fs_dir).unmount();
        let repair = run("xfs_repair", &["-n", &lo.dev]);
        assert!(
            repair.status.success(),
            "trial {trial}: xfs_repair -n found damage:\n{}\n{replay}",
            String::from_utf8_lossy(&repair.stdout)
        );
        let fs = FsMount::mount(&lo.dev, &fs_dir);
        if committed > 0 {
            let out = sqlite(
                &db,
                &format!(
                    "PRAGMA integrity_check;\n\
                     SELECT count(DISTINCT txn) FROM t WHERE txn <= {committed};\n\
                     SELECT count(*) FROM (SELECT txn FROM t GROUP BY txn HAVING count(*) != 50);\n"
                ),
            );
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(
                lines,
                ["ok", &committed.to_string(), "0"],
                "trial {trial}: integrity, committed transactions ({committed}), torn \
                 transactions; {replay}"
            );
        }
        fs.unmount();
        lo.detach(&disk);
        drop(server);
    }
    println!(
        "fuse kill -9 campaign: seed {seed:#x}, {trials} trials, {committed} SQLite \
         transactions committed on XFS, xfs_repair clean, integrity ok, 0 lost, {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
