//! The fence and orderings of the wake-up handshakes (`wakeups`): loom's when built with
//! `--cfg loom` (so `tests/loom_wakeups.rs` explores every interleaving), std's otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, Ordering};
