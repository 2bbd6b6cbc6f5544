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
    spawn_with(dir, worker, workers, generation, "rust")
}

/// A worker using `abi`: `rust` (the `Pool` API) or `c` (the C ABI's entry points).
fn spawn_with(dir: &Path, worker: u64, workers: u64, generation: u64, abi: &str) -> Worker {
    spawn_env(dir, worker, workers, generation, abi, false)
}

/// `spawn_with`; with `reopen`, the worker closes and reopens the pool after each ack.
fn spawn_env(
    dir: &Path,
    worker: u64,
    workers: u64,
    generation: u64,
    abi: &str,
    reopen: bool,
) -> Worker {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvarray-pm-worker"))
        .env("NVARRAY_PM_WORKER_ABI", abi)
        .env("NVARRAY_PM_WORKER_REOPEN", if reopen { "1" } else { "0" })
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
        log_size_bytes: 256 << 10,
        cache_size_bytes: 256 << 10,
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

/// Issue 44 made the last close remove the pool's NVM-tier state and the next open make it
/// anew (formatted in an unnamed file, then linked into place), and every open check the
/// state's identity. Workers that open, commit and close in a loop are killed at random
/// moments, inside those steps too: the pool then still opens (never a half-made state, never
/// a refusal) with every acknowledged transaction.
#[test]
fn workers_killed_while_opening_and_closing_leave_a_pool_that_opens_whole() {
    let s = common::Scratch::new();
    let dir = s.dir.path();
    let workers = 2;
    let mut rng = SmallRng::seed_from_u64(0x0072_656f);
    let mut checker = Checker {
        workers,
        min_stamp: HashMap::new(),
        counter: 0,
    };
    for trial in 1..=40u64 {
        let running: Vec<Worker> = (0..workers)
            .map(|w| spawn_env(dir, w, workers, trial, "rust", true))
            .collect();
        let mut acked: Vec<Vec<u64>> = vec![Vec::new(); workers as usize];
        for (w, worker) in running.into_iter().enumerate() {
            worker.wait_acks(rng.gen_range(1..20), &mut acked[w]);
            worker.kill(&mut acked[w]);
        }
        let acked: Vec<(u64, u64)> = acked
            .iter()
            .enumerate()
            .flat_map(|(w, ks)| ks.iter().map(move |&k| (w as u64, k)))
            .collect();
        checker.check(dir, &acked, workers, trial);
        let left = common::state_files(dir);
        assert!(
            left.is_empty(),
            "trial {trial}: the checker's close left {left:?}"
        );
    }
}

/// Several worker processes share one pool; one of them, chosen at random, is killed first
/// and the others must keep committing (the dead one may have held locks and log space),
/// then all are killed and the pool is checked.
///
/// The test command runs 30 trials of 2 workers on the Rust API and 8 of 4 through the C
/// ABI; `scripts/campaign.sh pm-kill` runs 1,000 of 4 through the C ABI
/// (`NVARRAY_PM_KILL_TRIALS`, `NVARRAY_PM_KILL_WORKERS`, `NVARRAY_PM_KILL_ABI`).
#[test]
fn workers_share_a_pool_and_killing_one_neither_corrupts_nor_blocks_the_others() {
    let abi = std::env::var("NVARRAY_PM_KILL_ABI").unwrap_or_else(|_| "rust".into());
    let trials = common::campaign_env("NVARRAY_PM_KILL_TRIALS", 30);
    let workers = common::campaign_env("NVARRAY_PM_KILL_WORKERS", 2);
    let seed = common::campaign_env("NVARRAY_PM_KILL_SEED", 0x0074_776f);
    kill_campaign(&abi, trials, workers, seed);
}

#[test]
fn c_abi_workers_share_a_pool_and_killing_one_neither_corrupts_nor_blocks_the_others() {
    kill_campaign("c", 8, 4, 0x00ab_1c0d);
}

fn kill_campaign(abi: &str, trials: u64, workers: u64, seed: u64) {
    assert!((1..=8).contains(&workers) && SLOTS.is_multiple_of(workers));
    let s = common::Scratch::new();
    let dir = s.dir.path();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut checker = Checker {
        workers,
        min_stamp: HashMap::new(),
        counter: 0,
    };
    eprintln!(
        "pm kill campaign: a failure at trial T replays with NVARRAY_PM_KILL_SEED={seed} \
         NVARRAY_PM_KILL_WORKERS={workers} NVARRAY_PM_KILL_ABI={abi} NVARRAY_PM_KILL_TRIALS=T \
         cargo test --release -p nvarray-pm --test kill -- workers_share"
    );
    let started = std::time::Instant::now();
    let mut total = 0usize;
    for trial in 1..=trials {
        let running: Vec<Worker> = (0..workers)
            .map(|w| spawn_with(dir, w, workers, trial, abi))
            .collect();
        let mut acked: Vec<Vec<u64>> = vec![Vec::new(); workers as usize];
        for (w, worker) in running.iter().enumerate() {
            worker.wait_acks(rng.gen_range(1..100), &mut acked[w]);
        }
        let first = rng.gen_range(0..workers as usize);
        let mut running: Vec<Option<Worker>> = running.into_iter().map(Some).collect();
        running[first].take().unwrap().kill(&mut acked[first]);
        // The survivors keep committing, though the dead one may have held the counter's lock.
        for (w, worker) in running.iter().enumerate() {
            if let Some(worker) = worker {
                worker.wait_acks(50, &mut acked[w]);
            }
        }
        for (w, worker) in running.into_iter().enumerate() {
            if let Some(worker) = worker {
                worker.kill(&mut acked[w]);
            }
        }
        let acked: Vec<(u64, u64)> = acked
            .iter()
            .enumerate()
            .flat_map(|(w, ks)| ks.iter().map(move |&k| (w as u64, k)))
            .collect();
        total += acked.len();
        checker.check(dir, &acked, workers, trial);
    }
    let api = if abi == "c" {
        "the C ABI"
    } else {
        "the Rust API"
    };
    println!(
        "pm kill -9 campaign: seed {seed:#x}, {trials} trials of {workers} processes sharing \
         a pool through {api}, {total} acknowledged transactions, 0 torn, 0 lost, {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
