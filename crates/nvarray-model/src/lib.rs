//! `nvarray-model`: the timing model of an NVM storage array.
//!
//! It owns the device description (`DeviceConfig`, TOML files, named presets), the timing of
//! every resource (PCIe link per direction, command protocol, controller engines, transfer
//! buffers, ring, banks), the scheduling policies and start-gap wear levelling.
//!
//! It is pure: no clock, no threads, no I/O. Time is a `u64` of nanoseconds passed in by the
//! caller, so the discrete-event simulator and the real-time emulator drive the same code and
//! must agree. Do not add a call to `Instant::now` or a file read here.

pub mod breakdown;
pub mod config;
pub mod device;
pub mod device_model;
pub mod disk;
pub mod error;
mod events;
pub mod fabric;
pub mod link;
pub mod memory;
pub mod min_queue;
pub mod null_device;
pub mod overrides;
pub mod presets;
pub mod protocol_cost;
pub mod timeline;
pub mod verdict;
pub mod wear;

pub use breakdown::{Breakdown, Component};
pub use config::{ControllerMode, DeviceConfig, FabricKind, ModelKind, Policy, Protocol};
pub use device::{check_command, ArrayModel, Command, Completion, Op, ResourceBusy};
pub use device_model::DeviceModel;
pub use error::{CommandError, ConfigError};
pub use memory::{FtlSample, FtlStats, MapCacheStats, WearStats};
/// Zoned namespaces (`[zns]`): the state machine the emulated device and the simulator keep.
pub use nvarray_ftl::zones;
pub use overrides::{apply_overrides, parse_assignment};
pub use verdict::Verdict;
