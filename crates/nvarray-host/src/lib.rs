//! `nvarray-host`: the user-space, polled driver for the emulated device, and the only door
//! to it: front ends and runners reach the device through this crate alone.
//!
//! `Device::open` starts the emulator in-process; each thread takes a `QueuePair` and issues
//! commands without a lock or a system call (Moneta, DC Express).
//!
//! - `device`: opening, preparing and finishing commands (tags and DMA buffers);
//! - `command`: `Prepared` and `Done`, a command and its buffer between those steps;
//! - `queue_pair`: one thread's rings, issuing, polling and waiting;
//! - `encode`: the command word and the NVMe SQE (the emulator decodes them);
//! - `sync_io`: `read_at` / `write_at` / `flush` on a queue pair;
//! - `nap`: the waiting policy (`QueuePair::nap_time` asks it);
//! - `ladder`: the Moneta software-stack ladder; `options`: how the device is driven;
//! - `tag_share`: fair shares of the device's tags among a server's clients;
//! - `simulation`: the device deterministic simulations of the front ends run on;
//! - `zoned`: Zone Append, zone management and report zones (a `[zns]` device).

mod command;
mod device;
mod encode;
pub mod error;
pub mod ladder;
mod nap;
pub mod options;
mod queue_pair;
pub mod simulation;
mod sync_io;
pub mod tag_share;
mod zoned;

pub use command::{Done, Prepared};
pub use device::Device;
pub use error::HostError;
pub use nap::{fine_timer_slack, idle_latency_ns, waits_by_spinning_alone};
pub use nvarray_emu::protocol::nvme::{read_zone_report, ZONE_REPORT_ENTRY_BYTES};
pub use nvarray_emu::{pauses, BackingPages, LatenessReport, Opcode, Status};
pub use nvarray_model::zones::{ZoneAction, ZoneDescriptor, ZoneLayout, ZoneState};
pub use options::{BackingKind, CompletionMode, Options, Stack, BUFFER_BYTES_DEFAULT};
pub use queue_pair::QueuePair;
pub use zoned::ZoneReport;
