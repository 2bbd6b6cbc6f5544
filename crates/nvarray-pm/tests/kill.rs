//! Real processes killed with SIGKILL at random moments. After each kill the pool is reopened
//! (recovering it) and checked: every acknowledged transaction is there, no transaction is torn
//! (each stamps three places on three pages), and the shared counter counts every acknowledged
//! increment (plus at most the one in flight per killed process).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::thread::JoinHandle;
use std::time::Duration;

use nvarray_pm::{Pool, PoolOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

// The worker's layout (tests/bin/worker.rs).
const SLOTS: u64 = 64;
const PART_STRIDE: u64 = 64 << 10;
const COUNTER: u64 = 3 * PART_STRIDE;
const MAGIC: u64 = 0x5eed_f00d_dead_beef;
const GEN: u64 = 1_000_000_000;

struct Worker {
    child: Child,
    acks: Receiver<u64>,
    reader: JoinHandle<()>,
}

fn spawn(dir: &Path, worker: u64, workers: u64, generation: u64) -> Worker {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvarray-pm-worker"))
        .arg(dir.join("pool.data"))
        .arg(dir)
        .args([worker, workers, generation].map(|n| n.to_string()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the worker");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, acks) = channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(k) = line.strip_prefix("ack ").and_then(|k| k.parse().ok()) {
                if tx.send(k).is_err() {
                    break;
                }
            }
        }
    });
    Worker {
        child,
        acks,
        reader,
    }
}

impl Worker {
    /// Waits for `n` more acknowledgements (bounded: a blocked pool fails the test).
    fn wait_acks(&self, n: usize, seen: &mut Vec<u64>) {
        for _ in 0..n {
            let k = self
                .acks
                .recv_timeout(Duration::from_secs(20))
                .expect("the worker kept committing");
            seen.push(k);
        }
    }

    /// SIGKILL, then every acknowledgement it printed before dying.
    fn kill(mut self, seen: &mut Vec<u64>) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("reap");
        self.reader.join().expect("reader");
        seen.extend(self.acks.try_iter());
    }
}

fn options(dir: &Path) -> PoolOptions {
    PoolOptions {
        nvm_dir: dir.to_path_buf(),
        log_size: 256 << 10,
        cache_size: 256 << 10,
        ..Default::default()
    }
}

/// What the checker has established so far.
struct Checker {
    workers: u64,
    /// Smallest stamp each slot may hold (its latest acknowledged one).
    min_stamp: HashMap<u64, u64>,
    counter: u64,
}

impl Checker {
    /// Reopens the pool (recovering it), checks it against the acknowledgements, closes it.
    /// `acked`: (worker, stamp) of every acknowledged transaction of this trial.
    fn check(&mut self, dir: &Path, acked: &[(u64, u64)], killed: u64, trial: u64) {
        let pool = Pool::open(dir.join("pool.data"), 1 << 20, &options(dir))
            .unwrap_or_else(|e| panic!("trial {trial}: reopen failed: {e}"));
        let per_worker = SLOTS / self.workers;
        for &(worker, k) in acked {
            let i = k % GEN;
            let slot = worker + self.workers * (i % per_worker);
            let m = self.min_stamp.entry(slot).or_insert(0);
            *m = (*m).max(k);
        }
        for slot in 0..SLOTS {
            let parts: Vec<[u8; 24]> = (0..3)
                .map(|p| {
                    let mut b = [0u8; 24];
                    pool.read(p * PART_STRIDE + slot * 32, &mut b).unwrap();
                    b
                })
                .collect();
            assert!(
                parts.iter().all(|p| p == &parts[0]),
                "trial {trial}: slot {slot} is torn: {parts:?}"
            );
            let word =
                |i: usize| u64::from_le_bytes(parts[0][i * 8..i * 8 + 8].try_into().unwrap());
            let (k, w, check) = (word(0), word(1), word(2));
            if k != 0 || w != 0 || check != 0 {
                assert_eq!(check, k ^ MAGIC, "trial {trial}: slot {slot} holds garbage");
                assert_eq!(
                    w,
                    slot % self.workers,
                    "trial {trial}: slot {slot} written by worker {w}"
                );
            }
            let min = self.min_stamp.get(&slot).copied().unwrap_or(0);
            assert!(
                k >= min,
                "trial {trial}: slot {slot} holds {k}, but {min} was acknowledged"
            );
        }
        let mut c = [0u8; 8];
        pool.read(COUNTER, &mut c).unwrap();
        let counter = u64::from_le_bytes(c);
        let low = self.counter + acked.len() as u64;
        assert!(
            (low..=low + killed).contains(&counter),
            "trial {trial}: counter {counter}, expected {low}..={} ({} acknowledged increments)",
            low + killed,
            acked.len()
        );
        self.counter = counter;
        pool.close().unwrap();
    }
}

#[test]
fn a_worker_killed_at_random_moments_never_loses_an_acknowledged_transaction() {
    let s = common::Scratch::new();
    let dir = s.dir.path();
    let mut rng = SmallRng::seed_from_u64(0x6b69_6c6c);
    let mut checker = Checker {
        workers: 1,
        min_stamp: HashMap::new(),
        counter: 0,
    };
    for trial in 1..=200u64 {
        let w = spawn(dir, 0, 1, trial);
        let mut acked = Vec::new();
        w.wait_acks(rng.gen_range(1..300), &mut acked);
        w.kill(&mut acked);
        let acked: Vec<(u64, u64)> = acked.into_iter().map(|k| (0, k)).collect();
        checker.check(dir, &acked, 1, trial);
    }
}

#[test]
fn two_workers_share_a_pool_and_killing_one_neither_corrupts_nor_blocks_the_other() {
    let s = common::Scratch::new();
    let dir = s.dir.path();
    let mut rng = SmallRng::seed_from_u64(0x0074_776f);
    let mut checker = Checker {
        workers: 2,
        min_stamp: HashMap::new(),
        counter: 0,
    };
    for trial in 1..=30u64 {
        let w0 = spawn(dir, 0, 2, trial);
        let w1 = spawn(dir, 1, 2, trial);
        let mut acked0 = Vec::new();
        let mut acked1 = Vec::new();
        w0.wait_acks(rng.gen_range(1..100), &mut acked0);
        w1.wait_acks(rng.gen_range(1..100), &mut acked1);
        w1.kill(&mut acked1);
        // The survivor keeps committing, though the dead one may have held the counter's lock.
        w0.wait_acks(50, &mut acked0);
        w0.kill(&mut acked0);
        let acked: Vec<(u64, u64)> = (acked0.iter().map(|&k| (0, k)))
            .chain(acked1.iter().map(|&k| (1, k)))
            .collect();
        checker.check(dir, &acked, 2, trial);
    }
}
