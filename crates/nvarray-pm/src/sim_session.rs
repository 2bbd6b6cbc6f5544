//! A process's simulated pools for power-cut tests through the C ABI (`ffi_sim.rs` is their C
//! face): while a session runs, `nv_allocate` opens a `Pool::open_simulated` pool per path
//! instead of the file's pool.
//!
//! The simulated medium is `sim.rs`'s: fenced lines and synced pages survive a cut, every
//! other pending unit survives or not by a seeded coin, and with `tear` a pending line may be
//! torn at 8-byte words. A file of the pool's size is still made at the path (sparse, never
//! written), so a program that stats or locks the path behaves as with a real pool. A pool
//! reopened after a clean close continues from where it was closed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{io_err, PmError};
use crate::options::PoolOptions;
use crate::pool::{open_backing, Pool};
use crate::sim::SimWorld;

struct Session {
    seed: u64,
    crash_at: Option<u64>,
    tear: bool,
    worlds: HashMap<PathBuf, Arc<SimWorld>>,
    /// Pools opened with a recovery since the session started.
    recoveries: u64,
}

static SESSION: Mutex<Option<Session>> = Mutex::new(None);

fn session() -> MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a session (forgetting an earlier one's pools): each new pool cuts power before its
/// operation `crash_at` (counted from its first open; `None`: never).
pub(crate) fn start(seed: u64, crash_at: Option<u64>, tear: bool) {
    *session() = Some(Session {
        seed,
        crash_at,
        tear,
        worlds: HashMap::new(),
        recoveries: 0,
    });
}

/// Ends the session; its pools are gone.
pub(crate) fn stop() {
    *session() = None;
}

/// Whether a session is running.
pub(crate) fn active() -> bool {
    session().is_some()
}

/// Operations the session's pools have performed (0 outside a session).
pub(crate) fn ops() -> u64 {
    session()
        .as_ref()
        .map_or(0, |s| s.worlds.values().map(|w| w.ops()).sum())
}

/// Whether a pool of the session has lost power.
pub(crate) fn crashed() -> bool {
    session()
        .as_ref()
        .is_some_and(|s| s.worlds.values().any(|w| w.crashed()))
}

/// Pools the session opened with a recovery.
pub(crate) fn recoveries() -> u64 {
    session().as_ref().map_or(0, |s| s.recoveries)
}

/// Replaces every pool that lost power by the image the cut left, never to cut again; how
/// many (`None` outside a session).
pub(crate) fn recover() -> Option<usize> {
    let mut guard = session();
    let s = guard.as_mut()?;
    let mut replaced = 0;
    for world in s.worlds.values_mut() {
        if let Some(image) = world.crash_image() {
            *world = Arc::new(SimWorld::new(&image.nvm, &image.storage, None, 0));
            replaced += 1;
        }
    }
    Some(replaced)
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
