//! `nvarray-host`: the user-space, polled driver for the emulated device.
//!
//! `Device::open` starts the emulator in-process; each thread takes a `QueuePair` and issues
//! commands without a lock or a system call (Moneta, DC Express). `bench` runs fio-like
//! workloads through it and reports in the same shape as the simulator.

pub mod bench;
pub mod driver;
pub mod error;
pub mod ladder;
pub mod options;
pub mod verify;

pub use driver::{Device, Done, Prepared, QueuePair};
pub use error::HostError;
pub use nvarray_emu::device_core::{IoOp, Status};
pub use options::{Completion, Options, Stack};
