//! Power cuts through the C ABI: simulated pools (`sim.rs`) for programs that reach the
//! library only through `nv_*` calls, such as SQLite through the VFS
//! (`native/sqlite-vfs`, tested in `tests/sqlite_vfs.rs`).
//!
//! ```c
//! nv_sim_start(seed, NV_SIM_NEVER, 1);   // dry run: count the operations
//! run_workload();  uint64_t total = nv_sim_ops();
//! nv_sim_start(seed, some_point_below_total, 1);
//! run_workload_until(nv_sim_crashed());  // the pool keeps running after the cut
//! close_everything();
//! nv_sim_recover();                      // the next nv_allocate opens the crash image
//! reopen_and_check();
//! nv_sim_stop();
//! ```
//!
//! Between `nv_sim_start` and `nv_sim_stop`, `nv_allocate` opens a simulated pool kept in
//! this process's memory, one per path, instead of the file's pool: persistence is the
//! simulated one (fenced lines and synced pages survive a cut, every other pending unit
//! survives or not by a seeded coin, and with `tear_lines` a pending line may be torn at
//! 8-byte words). A file of the pool's size is still created at the path (sparse, never
//! written), so a program that stats or locks the path behaves as with a real pool. A pool
//! reopened after a clean `nv_free` continues from where it was closed.

use std::collections::HashMap;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{io_err, PmError};
use crate::options::PoolOptions;
use crate::pool::{open_backing, Pool};
use crate::sim::SimWorld;

/// `crash_at` of `nv_sim_start` that never cuts power (the dry run).
pub const NV_SIM_NEVER: u64 = u64::MAX;

struct Session {
    seed: u64,
    crash_at: Option<u64>,
    tear: bool,
    worlds: HashMap<PathBuf, Arc<SimWorld>>,
    /// Pools opened with a recovery since the session started.
    recoveries: u64,
}

static SESSION: Mutex<Option<Session>> = Mutex::new(None);

fn session() -> std::sync::MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

/// `nv_allocate` inside a session: the simulated pool of `path`, or `None` outside one.
pub(crate) fn open(path: &Path, size: u64, options: PoolOptions) -> Option<Result<Pool, PmError>> {
    let mut guard = session();
    let s = guard.as_mut()?;
    Some(open_in(s, path, size, options))
}

fn open_in(s: &mut Session, path: &Path, size: u64, options: PoolOptions) -> Result<Pool, PmError> {
    let (file, created) = open_backing(path, options.create)?;
    let size = if size == 0 {
        file.metadata().map_err(io_err(path))?.len()
    } else {
        size
    };
    if created {
        file.set_len(size).map_err(io_err(path))?;
    }
    let key = std::fs::canonicalize(path).map_err(io_err(path))?;
    let options = PoolOptions {
        // No modelled persist latency and no background threads: a simulated pool's work is
        // all on the caller's thread, so the operation count is the same in every run.
        persist_ns: Some(0),
        background: false,
        ..options
    };
    let world = match s.worlds.get(&key) {
        Some(world) if world.crashed() => {
            return Err(PmError::BadOption(format!(
                "{}: this simulated pool lost power; call nv_sim_recover() before opening it again",
                path.display()
            )))
        }
        Some(world) => world.clone(),
        None => {
            let (nvm, storage) = Pool::simulated_sizes(size, &options);
            let world = Arc::new(SimWorld::new(
                &vec![0; nvm],
                &vec![0; storage],
                s.crash_at,
                s.seed,
            ));
            world.tear_lines(s.tear);
            s.worlds.insert(key, world.clone());
            world
        }
    };
    let pool = Pool::open_simulated(world, size, &options)?;
    if pool.recovery().is_some() {
        s.recoveries += 1;
    }
    Ok(pool)
}

/// Pools are open: a session may not start, recover or stop under them.
fn refuse_with_pools_open(what: &str) -> Option<c_int> {
    let open = crate::ffi::open_pools();
    (open > 0).then(|| {
        crate::ffi::set_error(format!(
            "{what}: {open} pool(s) are open; nv_free them first"
        ));
        crate::ffi::NV_ERROR
    })
}

/// Starts a session: from now on `nv_allocate` opens simulated pools (see the module
/// comment), each cutting power before its operation `crash_at` (counted from the pool's
/// first `nv_allocate`; `NV_SIM_NEVER`: never). `seed` drives the keep-or-drop coins;
/// `tear_lines` non-zero lets pending lines tear. Forgets the simulated pools of an earlier
/// session. Refused while pools are open.
#[no_mangle]
pub extern "C" fn nv_sim_start(seed: u64, crash_at: u64, tear_lines: c_int) -> c_int {
    crate::ffi::guarded(crate::ffi::NV_ERROR, || {
        if let Some(rc) = refuse_with_pools_open("nv_sim_start") {
            return rc;
        }
        *session() = Some(Session {
            seed,
            crash_at: (crash_at != NV_SIM_NEVER).then_some(crash_at),
            tear: tear_lines != 0,
            worlds: HashMap::new(),
            recoveries: 0,
        });
        crate::ffi::NV_OK
    })
}

/// Operations (writes, flushes, fences, syncs) the session's simulated pools have performed.
#[no_mangle]
pub extern "C" fn nv_sim_ops() -> u64 {
    crate::ffi::guarded(0, || {
        session()
            .as_ref()
            .map_or(0, |s| s.worlds.values().map(|w| w.ops()).sum())
    })
}

/// 1 once a simulated pool of the session has lost power, else 0.
#[no_mangle]
pub extern "C" fn nv_sim_crashed() -> c_int {
    crate::ffi::guarded(0, || {
        let crashed = session()
            .as_ref()
            .is_some_and(|s| s.worlds.values().any(|w| w.crashed()));
        c_int::from(crashed)
    })
}

/// Replaces every simulated pool that lost power by the image the cut left, never to cut
/// again: the next `nv_allocate` of its path recovers it. Returns how many were replaced, or
/// `NV_ERROR` outside a session or while pools are open.
#[no_mangle]
pub extern "C" fn nv_sim_recover() -> c_int {
    crate::ffi::guarded(crate::ffi::NV_ERROR, || {
        if let Some(rc) = refuse_with_pools_open("nv_sim_recover") {
            return rc;
        }
        let mut guard = session();
        let Some(s) = guard.as_mut() else {
            crate::ffi::set_error("nv_sim_recover: no session (nv_sim_start)");
            return crate::ffi::NV_ERROR;
        };
        let mut replaced = 0;
        for world in s.worlds.values_mut() {
            if let Some(image) = world.crash_image() {
                *world = Arc::new(SimWorld::new(&image.nvm, &image.storage, None, 0));
                replaced += 1;
            }
        }
        replaced
    })
}

/// Pools the session opened with a recovery (after a cut), so a test can tell that it
/// reopened the crash image and not a cleanly closed pool.
#[no_mangle]
pub extern "C" fn nv_sim_recoveries() -> u64 {
    crate::ffi::guarded(0, || session().as_ref().map_or(0, |s| s.recoveries))
}

/// Ends the session: `nv_allocate` opens file pools again, and the simulated ones are gone.
/// Refused while pools are open.
#[no_mangle]
pub extern "C" fn nv_sim_stop() -> c_int {
    crate::ffi::guarded(crate::ffi::NV_ERROR, || {
        if let Some(rc) = refuse_with_pools_open("nv_sim_stop") {
            return rc;
        }
        *session() = None;
        crate::ffi::NV_OK
    })
}
