//! `nvarray-run`: running a workload on a device, in either engine.
//!
//! - `plan`: the workload's jobs as host threads (queue depth, bounds, think time, verify),
//!   the same for both engines, with their defaults.
//! - `sim`: the discrete-event simulator over `nvarray-model` (virtual clock, no data);
//!   `sim_zones`: a zoned namespace's write pointers in it, as the emulated device keeps them.
//! - `emu`: the emulator's runner: real host threads issue through the driver
//!   (`nvarray-host`) against the wall clock, with data verification (`verify`).
//! - `control`: what steers a running thread by what it measured (think time policy,
//!   latency target, flows, steady state), the same state machines in both engines.
//! - `parallel`: independent runs (a sweep's simulator points) on several threads.
//! - `device_report`: the one report of an emulated device, for `nvarray bench` and the front
//!   ends alike.
//! - `served`: the statistics of a device front ends serve to clients (a stream per client)
//!   and its report.
//!
//! The driver only drives; everything that decides what to issue and measures it lives here.

pub mod control;
pub mod device_report;
pub mod emu;
mod emu_exit;
mod emu_steady;
pub mod error;
mod host_thread;
mod pacing;
pub mod parallel;
pub mod plan;
pub mod served;
pub mod sim;
mod sim_steady;
mod sim_zones;
pub mod verify;

pub use device_report::device_report;
pub use error::{EmuRunError, SimError};
pub use nvarray_report::{LatencySummary, RunReport, StreamReport, Totals};
pub use plan::{Plan, PlanError, ThreadPlan, DEFAULT_RUNTIME_NS};
