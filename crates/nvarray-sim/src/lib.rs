//! `nvarray-sim`: the discrete-event engine over `nvarray-model`.
//!
//! It owns the virtual clock, the simulated host threads (one per fio job thread, each with
//! its queue depth and per-request software cost) and the statistics of a run. Runs are
//! deterministic for a given device, workload and seed, except `cpu_seconds_per_gb`, which is
//! this machine's CPU time for the run. It never sleeps, never reads the wall clock and never
//! touches data: the emulator does that, over the same model.

pub mod engine;
pub mod error;

pub use engine::{run, DEFAULT_RUNTIME_NS};
pub use error::SimError;
pub use nvarray_report::{LatencySummary, RunReport, StreamReport, Totals};
