//! A real guest kernel on the emulated device (issue 59), under QEMU's TCG
//! (`scripts/guest.py`: Debian's qemu-system-x86 and cloud kernel, extracted, and a busybox
//! initramfs with fio and e2fsprogs). One `nvarray serve` offers the device twice, as a
//! vhost-user-blk disk and over NBD, and guests boot one after another:
//!
//! 1. vhost-user-blk: fio writes and verifies (crc32c) on two virtqueues, and `dd` O_DIRECT;
//! 2. vhost-user-blk: mkfs.ext4, 47 files with their sha256 in a manifest, sync, power off;
//! 3. QEMU's NVMe controller over NBD (`/dev/nvme0n1`): `e2fsck -n -f` clean, every file
//!    read back against the manifest;
//! 4. vhost-user-blk: numbered records, each O_DIRECT then flushed and announced, until the
//!    VM is killed with SIGKILL mid-write; after the server stops, every announced record is in
//!    the backing file.
//!
//! Needs root (apt-get) the first time; `scripts/guest.py prepare` keeps what it built in
//! `target/guest`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

mod common;
use common::serve::Serve;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `scripts/guest.py ARGS` and returns its last line (a JSON object), failing with the
/// whole output unless it says `"result": "ok"`.
fn guest(args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(repo().join("scripts/guest.py"))
        .args(args)
        .output()
        .expect("run scripts/guest.py");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let last = stdout.lines().last().unwrap_or("").to_string();
    assert!(
        out.status.success() && last.contains("\"result\": \"ok\""),
        "scripts/guest.py {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    last
}

/// The number after `"key": ` in a JSON line.
fn number(json: &str, key: &str) -> u64 {
    let at = json.find(&format!("\"{key}\": ")).expect(key) + key.len() + 4;
    json[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number for {key} in {json}"))
}

#[test]
fn a_guest_kernel_writes_verifies_makes_a_file_system_and_loses_no_flushed_write() {
    let started = Instant::now();
    let prepared = Command::new("python3")
        .arg(repo().join("scripts/guest.py"))
        .arg("prepare")
        .status()
        .expect("run scripts/guest.py prepare");
    assert!(prepared.success(), "scripts/guest.py prepare failed");

    let dir = std::env::temp_dir().join(format!("nvarray-guest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (vhost, nbd, image) = (
        dir.join("vhost.sock"),
        dir.join("nbd.sock"),
        dir.join("disk.img"),
    );
    let arg = |prefix: &str, p: &Path| format!("{prefix}{}", p.display());
    let args: Vec<String> = [
        "serve",
        "--preset",
        "moneta",
        "--size",
        "256m",
        &arg("--backing=file:", &image),
        &arg("--vhost-user-blk=unix:", &vhost),
        &arg("--listen=unix:", &nbd),
        "--vhost-queues",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let serve = Serve::start_with(&args, nbd.clone());
    let vhost_s = vhost.display().to_string();
    let on_vhost = |job: &str, extra: &[&str]| {
        let mut a = vec![
            "run",
            "--job",
            job,
            "--vhost-user-blk",
            &vhost_s,
            "--num-queues",
            "2",
        ];
        a.extend_from_slice(extra);
        let line = guest(&a);
        eprintln!("guest {job} over vhost-user-blk: {line}");
        line
    };
    on_vhost("verify", &[]);
    on_vhost("mkfs", &[]);
    let uri = format!("nbd+unix:///nvarray?socket={}", nbd.display());
    let line = guest(&["run", "--job", "check", "--nbd", &uri, "--as", "nvme"]);
    eprintln!("guest check over NVMe on NBD: {line}");
    let killed = on_vhost("flushes", &["--kill-after-acks", "40"]);
    let acked = number(&killed, "acked");
    assert!(acked >= 40, "{killed}");

    serve.signal("-USR1");
    let (status, out) = serve.stop("-TERM");
    assert!(status.success(), "serve exited with {status}:\n{out}");
    // One stream per guest that sent requests over vhost-user (three boots), beside NBD's.
    for n in 1..=3 {
        assert!(
            out.contains(&format!("\nguest {n} ")),
            "no stream for guest {n}:\n{out}"
        );
    }
    assert!(out.contains("vhost-user-blk guests at unix:"), "{out}");
    let records = guest(&[
        "check-records",
        "--image",
        &image.display().to_string(),
        "--acked",
        &acked.to_string(),
    ]);
    assert!(records.contains("\"missing_count\": 0"), "{records}");
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("guest test: {:.1} s", started.elapsed().as_secs_f64());
}
