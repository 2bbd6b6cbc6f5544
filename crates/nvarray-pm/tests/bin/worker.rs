//! Test worker: `nvarray-pm-worker POOL NVM_DIR WORKER WORKERS GENERATION`.
//!
//! Commits transactions forever (until killed), each stamping one of this worker's slots in
//! three places on three different pages and incrementing a counter shared by all workers
//! (read for update, so workers serialise on it). After each commit returns it prints
//! `ack K`. Stamp `K = GENERATION * 1e9 + i` identifies the transaction; see `tests/kill.rs`
//! for the layout it shares with the checker. With `NVARRAY_PM_WORKER_ABI=c` it goes through
//! the C ABI (`nv_allocate`, `nv_txbegin`, `nv_write`, `nv_commit`) instead of the Rust API;
//! with `NVARRAY_PM_WORKER_REOPEN=1` it closes the pool and opens it again after each
//! acknowledgement, so a kill lands in opening and closing too.

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
    if std::env::var("NVARRAY_PM_WORKER_ABI").as_deref() == Ok("c") {
        return c_abi::run(&args[1], &args[2], worker, workers, generation);
    }
    let options = PoolOptions {
        nvm_dir: args[2].clone().into(),
        log_size_bytes: 256 << 10,
        cache_size_bytes: 256 << 10,
        ..Default::default()
    };
    let die = |e: PmError| -> ! {
        eprintln!("nvarray-pm-worker: {e}");
        std::process::exit(1)
    };
    let open = || Pool::open(&args[1], 1 << 20, &options).unwrap_or_else(|e| die(e));
    let reopen = std::env::var("NVARRAY_PM_WORKER_REOPEN").as_deref() == Ok("1");
    let mut pool = open();
    let per_worker = SLOTS / workers;
    let mut out = std::io::stdout().lock();
    for i in 0.. {
        let k = generation * 1_000_000_000 + i;
        let slot = worker + workers * (i % per_worker);
        loop {
            match transaction(&pool, k, worker, slot) {
                Ok(()) => break,
                Err(PmError::Conflict { .. }) => continue,
                Err(e) => die(e),
            }
        }
        if writeln!(out, "ack {k}").and_then(|_| out.flush()).is_err() {
            return; // the parent stopped listening
        }
        if reopen {
            pool.close().unwrap_or_else(|e| die(e));
            pool = open();
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

/// The same transactions through the C ABI.
mod c_abi {
    use std::ffi::{c_void, CStr, CString};
    use std::io::Write;

    use nvarray_pm::ffi::*;

    use super::{COUNTER, MAGIC, PART_STRIDE, SLOTS};

    fn die(what: &str) -> ! {
        // SAFETY: nv_last_error returns a NUL-terminated string valid until the next call.
        let msg = unsafe { CStr::from_ptr(nv_last_error()) }.to_string_lossy();
        eprintln!("nvarray-pm-worker: {what}: {msg}");
        std::process::exit(1)
    }

    pub fn run(pool: &str, nvm_dir: &str, worker: u64, workers: u64, generation: u64) {
        std::env::set_var("NVARRAY_PM_NVM_DIR", nvm_dir);
        std::env::set_var("NVARRAY_PM_LOG_SIZE", "256k");
        std::env::set_var("NVARRAY_PM_CACHE_SIZE", "256k");
        let path = CString::new(pool).expect("no NUL in the path");
        // SAFETY: `path` is NUL-terminated and outlives the call.
        let base = unsafe { nv_allocate(path.as_ptr(), 1 << 20, NV_CREATE) } as usize;
        if base == 0 {
            die("nv_allocate");
        }
        let per_worker = SLOTS / workers;
        let mut out = std::io::stdout().lock();
        for i in 0.. {
            let k = generation * 1_000_000_000 + i;
            let slot = worker + workers * (i % per_worker);
            while !transaction(base, k, worker, slot) {}
            if writeln!(out, "ack {k}").and_then(|_| out.flush()).is_err() {
                return;
            }
        }
    }

    /// One transaction; false if it must be retried (a conflict, or fenced at commit).
    fn transaction(base: usize, k: u64, worker: u64, slot: u64) -> bool {
        let tid = nv_txbegin();
        if tid < 0 {
            die("nv_txbegin");
        }
        let write = |off: u64, data: &[u8]| -> bool {
            // SAFETY: `data` is readable for its length; the address is inside the pool.
            let rc = unsafe {
                nv_write(
                    tid,
                    (base + off as usize) as *mut c_void,
                    data.as_ptr() as *const c_void,
                    data.len(),
                )
            };
            match rc {
                NV_OK => true,
                NV_ECONFLICT => false,
                _ => die("nv_write"),
            }
        };
        let mut stamp = [0u8; 24];
        stamp[..8].copy_from_slice(&k.to_le_bytes());
        stamp[8..16].copy_from_slice(&worker.to_le_bytes());
        stamp[16..].copy_from_slice(&(k ^ MAGIC).to_le_bytes());
        let mut ok = (0..3).all(|part| write(part * PART_STRIDE + slot * 32, &stamp));
        // The counter: write first, which takes its page's lock, so the committed value read
        // through the mapping cannot change before this transaction commits.
        ok = ok && write(COUNTER, &[0u8; 8]);
        if ok {
            // SAFETY: COUNTER + 8 is inside the 1 MiB mapping.
            let now = unsafe { ((base + COUNTER as usize) as *const u64).read_unaligned() };
            ok = write(COUNTER, &(now + 1).to_le_bytes());
        }
        if !ok {
            nv_abort(tid);
            return false;
        }
        match nv_commit(tid) {
            NV_OK => true,
            NV_ECONFLICT => false,
            _ => die("nv_commit"),
        }
    }
}
