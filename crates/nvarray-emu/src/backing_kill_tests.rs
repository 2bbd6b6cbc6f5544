//! A write acknowledged by a file-backed store survives `kill -9` of the process (sled's
//! kill-and-restart idea, with the real process): a child process writes numbered records
//! and acknowledges each on stdout; the parent kills it with SIGKILL at a seeded moment,
//! reopens the file, and checks that every acknowledged record is there, whole. The same
//! child shows that the backing file's lock is the process's: a second open is refused
//! naming the child while it lives, and succeeds once it is killed.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::backing::{Backing, BackingKind};

const SIZE_BYTES: u64 = 1 << 20;
const RECORD_BYTES: usize = 512;
const RECORDS_MAX: u64 = SIZE_BYTES / RECORD_BYTES as u64;
const CHILD_ENV: &str = "NVARRAY_KILL_CHILD_FILE";

fn record(n: u64) -> Vec<u8> {
    (0..RECORD_BYTES)
        .map(|i| (n as usize * 31 + i) as u8)
        .collect()
}

/// The child's body: runs only when the parent starts this test binary with `CHILD_ENV` set.
#[test]
fn child_writer() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let kind = BackingKind::File {
        path: PathBuf::from(path),
        durable: false,
        read_only: false,
        sparse: false,
    };
    let b = Backing::open(&kind, SIZE_BYTES).expect("open");
    for n in 0..RECORDS_MAX {
        b.write(n * RECORD_BYTES as u64, &record(n)).expect("write");
        println!("ack {n}");
    }
    // Wait to be killed; bounded so an orphan cannot live for ever.
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let _alone = crate::backing::SPAWN_OR_RELOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for (trial, kill_after) in [1u64, 17, 300, 1500].into_iter().enumerate() {
        let path =
            std::env::temp_dir().join(format!("nvarray-kill-{}-{trial}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "backing_kill_tests::child_writer",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let mut acked = None;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("ack ") {
                let n: u64 = n.parse().unwrap();
                acked = Some(n);
                if n + 1 >= kill_after.min(RECORDS_MAX) {
                    break;
                }
            }
        }
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        assert_eq!(rc, 0);
        let _ = child.wait();
        let acked = acked.expect("the child acknowledged at least one write");
        let b = Backing::open(
            &BackingKind::File {
                path: path.clone(),
                durable: false,
                read_only: false,
                sparse: false,
            },
            SIZE_BYTES,
        )
        .unwrap();
        for n in 0..=acked {
            let mut buf = vec![0u8; RECORD_BYTES];
            b.read(n * RECORD_BYTES as u64, &mut buf).unwrap();
            assert_eq!(
                buf,
                record(n),
                "trial {trial}: acknowledged record {n} of {acked} lost or torn"
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}

/// While the child holds the file, opening it here is refused with the child's pid in the
/// message; after `kill -9` of the child (which never closed anything) the file opens.
#[test]
fn the_backing_lock_names_its_holder_and_dies_with_it() {
    let _alone = crate::backing::SPAWN_OR_RELOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("nvarray-kill-lock-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "backing_kill_tests::child_writer",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    // The first acknowledgement comes after the open, so the lock is held by then (the test
    // harness prints its own lines before it).
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("ack "));
    let kind = BackingKind::File {
        path: path.clone(),
        durable: false,
        read_only: false,
        sparse: false,
    };
    let refused = Backing::open(&kind, SIZE_BYTES);
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    drop(lines);
    assert_eq!(rc, 0);
    assert!(first.is_some(), "the child acknowledged no write");
    let message = refused.expect_err("opened beside the child").to_string();
    assert!(
        message.contains(&format!("process {}", child.id())) && message.contains("child_writer"),
        "{message}"
    );
    eprintln!("refused: {message}");
    Backing::open(&kind, SIZE_BYTES).expect("the lock died with the child");
    std::fs::remove_file(&path).unwrap();
}
