//! The synchronisation primitives of the lock-free queues and the hand-offs between threads:
//! loom's checked versions when built with `--cfg loom` (so the loom tests explore every
//! interleaving), std's otherwise. One place decides, so a module cannot mix the two.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Arc, Mutex, MutexGuard,
};

/// Locks `mutex`, ignoring poisoning: the data behind these locks stays consistent at every
/// point a panic could leave it (a vector of items, pushed or taken whole).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
