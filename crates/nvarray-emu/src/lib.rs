//! `nvarray-emu`: the real-time engine over `nvarray-model`.
//!
//! It owns the backing store (RAM or a file), the device side of the queue pairs (rings and
//! tags), the wall clock, and the accounting of its own lateness. It drives the same
//! `nvarray_model::Device` as the simulator — there is no second copy of the timing logic —
//! and posts each completion when the wall clock reaches the model's deadline, never earlier.

pub mod arena;
pub mod backing;
pub mod clock;
pub mod device_core;
pub mod engine;
pub mod error;
pub mod irq;
pub mod lateness;
pub mod nvme_cq;
pub mod protocol;
pub mod ring;
mod sync;
pub mod tag_pool;
pub mod word_ring;
