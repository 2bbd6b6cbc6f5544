//! The two background threads of the seed (slide 15): the *applier* moves committed log
//! records into the NVM write cache, freeing log space; the *write-back* thread writes the
//! cache's dirty pages to the backing file once more than the threshold fraction is dirty.
//!
//! Bounded: each holds the maintenance lock for at most one batch (`DIGEST_BATCH` records, or
//! one write-back). Stoppable: `Pool::close` (or drop) sets the stop flag, unparks and joins
//! them. Observable: their work is counted in `Pool::stats`. Every attached process runs its
//! own pair; they take turns through the maintenance lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::pool_state::PoolState;

/// How long background threads sleep when they have nothing to do.
pub(crate) const IDLE: Duration = Duration::from_micros(500);

pub(crate) fn spawn(inner: &Arc<PoolState>, stop: &Arc<AtomicBool>) -> Vec<JoinHandle<()>> {
    let applier = {
        let (inner, stop) = (inner.clone(), stop.clone());
        std::thread::Builder::new()
            .name("nvpm-applier".into())
            .spawn(move || run(&inner, &stop, apply_once))
    };
    let writer = {
        let (inner, stop) = (inner.clone(), stop.clone());
        std::thread::Builder::new()
            .name("nvpm-writeback".into())
            .spawn(move || run(&inner, &stop, write_back_once))
    };
    // A thread that cannot be spawned leaves its work to committers (who apply the log when
    // it fills) and to `Pool::maintain`.
    [applier, writer]
        .into_iter()
        .filter_map(|t| t.ok())
        .collect()
}

/// Repeats `step` until stopped; sleeps when a step found nothing to do.
fn run(inner: &PoolState, stop: &AtomicBool, step: fn(&PoolState) -> bool) {
    while !stop.load(Ordering::Acquire) {
        if !step(inner) {
            std::thread::park_timeout(IDLE);
        }
    }
}

/// One batch of the applier. True if it applied anything.
fn apply_once(inner: &PoolState) -> bool {
    let head = inner.nvm.load_word(crate::layout::H_LOG_HEAD);
    if inner.durable().load(Ordering::Acquire) == head {
        if inner.tail().load(Ordering::Acquire) != head {
            // Nothing published yet: possibly a reservation a dead process abandoned.
            if let Err(e) = inner.pass_abandoned() {
                eprintln!("nvarray-pm: {}: {e}", inner.nvm_path.display());
            }
        }
        return false;
    }
    match inner.try_digest() {
        Ok(n) => n > 0,
        Err(e) => {
            log_once(&e, "applying the log of", &inner.nvm_path);
            false
        }
    }
}

/// One write-back if the cache is over its dirty threshold. True if it wrote back.
fn write_back_once(inner: &PoolState) -> bool {
    if !inner.over_threshold() {
        return false;
    }
    let Some(_guard) = inner.try_lock_maintenance() else {
        return false;
    };
    if !inner.over_threshold() {
        return false;
    }
    match inner.write_back() {
        Ok(_) => true,
        Err(e) => {
            log_once(&e, "writing back", &inner.backing_path);
            false
        }
    }
}

/// Logs a background step's error, unless it only repeats that a write-back failed (said
/// when it did): the step is retried every few milliseconds.
fn log_once(e: &crate::error::PmError, doing: &str, path: &std::path::Path) {
    if !matches!(e, crate::error::PmError::WriteBackFailedBefore { .. }) {
        eprintln!("nvarray-pm: {doing} {}: {e}", path.display());
    }
}
