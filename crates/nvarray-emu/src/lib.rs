//! `nvarray-emu`: the real-time engine over `nvarray-model`.
//!
//! It owns the backing store (RAM or a file), the device side of the queue pairs (rings and
//! tags), the wall clock, and the accounting of its own lateness. It drives the same
//! `nvarray_model::DeviceModel` as the simulator — there is no second copy of the timing logic —
//! and posts each completion when the wall clock reaches the model's deadline, never earlier.

// The shared-memory interface between host and device, as hardware would define it: the
// queues (the driver holds one end of each), the wire formats of commands and completions,
// the tag pool and the interrupt word. Public because the driver builds on them.
pub mod irq;
pub mod nvme_cq;
pub mod protocol;
pub mod ring;
pub mod tag_pool;
pub mod word_ring;

// The hand-off from the model's visitor to a queue pair's owner: public for its loom model.
pub mod mailbox;

// The device itself: crate-private. The driver sees it only through the items below.
mod arena;
mod backing;
mod clock;
mod device_core;
mod device_sleep;
mod dma_memory;
mod engine;
mod error;
mod jitter;
mod lateness;
mod mapping_fault;
mod queue_work;
mod range_locks;
mod sync;

// Where the threads run (`--cpus`), and how data is copied: public so the host pins its
// threads by the same list and copies its side of a command the same way.
pub mod cpus;
pub mod dma_copy;

// When the machine paused a thread: the device's serving threads feed it, and a host thread
// that times its requests feeds the same thread-local watch, so its issue lateness is
// attributed the same way.
pub mod pauses;

#[cfg(test)]
mod backing_kill_tests;

pub use backing::{BackingKind, BackingPages};
pub use device_sleep::fine_timer_slack;
pub use dma_memory::{DmaMemory, IN_DATA_DONE};
pub use engine::{Emulator, EmulatorOptions, Polled, QueueHandle};
pub use error::EmuError;
pub use jitter::{JitterReport, JITTER_SAMPLE_PERIOD_NS};
pub use lateness::LatenessReport;
pub use nvarray_faults::{BackingFaults, BackingOp, Fault};
pub use protocol::{Opcode, Status};
pub use queue_work::DeviceQueue;
