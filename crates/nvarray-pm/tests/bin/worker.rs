//! Test worker: `nvarray-pm-worker POOL NVM_DIR WORKER WORKERS GENERATION`.
//!
//! Commits transactions forever (until killed), each stamping one of this worker's slots in
//! three places on three different pages and incrementing a counter shared by all workers
//! (read for update, so workers serialise on it). After each commit returns it prints
//! `ack K`. Stamp `K = GENERATION * 1e9 + i` identifies the transaction; see `tests/kill.rs`
//! for the layout it shares with the checker.

use std::io::Write;

use nvarray_pm::{PmError, Pool, PoolOptions};

const SLOTS: u64 = 64;
const PART_STRIDE: u64 = 64 << 10;
const COUNTER: u64 = 3 * PART_STRIDE;
const MAGIC: u64 = 0x5eed_f00d_dead_beef;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!("usage: nvarray-pm-worker POOL NVM_DIR WORKER WORKERS GENERATION");
        std::process::exit(2);
    }
    let num = |i: usize| -> u64 {
        args[i].parse().unwrap_or_else(|_| {
            eprintln!(
                "nvarray-pm-worker: argument {i} ({:?}) is not a number",
                args[i]
            );
            std::process::exit(2)
        })
    };
    let (worker, workers, generation) = (num(3), num(4), num(5));
    let options = PoolOptions {
        nvm_dir: args[2].clone().into(),
        log_size: 256 << 10,
        cache_size: 256 << 10,
        ..Default::default()
    };
    let pool = Pool::open(&args[1], 1 << 20, &options).unwrap_or_else(|e| {
        eprintln!("nvarray-pm-worker: {e}");
        std::process::exit(1)
    });
    let per_worker = SLOTS / workers;
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        let k = generation * 1_000_000_000 + i;
        let slot = worker + workers * (i % per_worker);
        loop {
            match transaction(&pool, k, worker, slot) {
                Ok(()) => break,
                Err(PmError::Conflict { .. }) => continue,
                Err(e) => {
                    eprintln!("nvarray-pm-worker: {e}");
                    std::process::exit(1)
                }
            }
        }
        if writeln!(out, "ack {k}").and_then(|_| out.flush()).is_err() {
            return; // the parent stopped listening
        }
    }
}

fn transaction(pool: &Pool, k: u64, worker: u64, slot: u64) -> Result<(), PmError> {
    let mut tx = pool.begin()?;
    let mut stamp = [0u8; 24];
    stamp[..8].copy_from_slice(&k.to_le_bytes());
    stamp[8..16].copy_from_slice(&worker.to_le_bytes());
    stamp[16..].copy_from_slice(&(k ^ MAGIC).to_le_bytes());
    for part in 0..3 {
        tx.write(part * PART_STRIDE + slot * 32, &stamp)?;
    }
    let mut counter = [0u8; 8];
    tx.read_for_update(COUNTER, &mut counter)?;
    tx.write(COUNTER, &(u64::from_le_bytes(counter) + 1).to_le_bytes())?;
    tx.commit()?;
    Ok(())
}
