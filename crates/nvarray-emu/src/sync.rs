//! The synchronisation primitives of the lock-free queues: loom's checked versions when built
//! with `--cfg loom` (so the loom tests explore every interleaving), std's otherwise. One place
//! decides, so a queue module cannot mix the two.

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};
