//! `nvarray-channel`: many processes, one emulated device, straight from user space:
//! protected channels as Moneta-D gave them (Caulfield et al., ASPLOS'12: "a private,
//! virtualized interface for each process", permission checks "moved into hardware").
//!
//! A daemon hosts the device (`Daemon`, behind `nvarray serve --channels`); each client
//! process connects to its Unix socket and gets a channel: rings and a DMA region in shared
//! memory. Commands and completions then pass through that memory with no system call on
//! either side. The device checks every command against the extents granted to the client's
//! user before it touches data.
//!
//! - `layout`: the shared memory (geometry, counters, rings, DMA region) both sides agree on;
//! - `hello`: the two socket messages that set a channel up;
//! - `status`: a completion's status and the errno it becomes;
//! - `grants`: the named extents and the per-channel check;
//! - `device_side`: the device's end of one channel (take, check, serve, post);
//! - `daemon`: accepting clients and the serving thread;
//! - `simulation`: the same daemon stepped by one thread, for deterministic simulation;
//! - `counts`: what the daemon let in and kept out;
//! - `client`: the Rust client (`Channel`), which `libnvarray`'s C API wraps;
//!   `client_zones`: its zoned-namespace calls (report zones, zone management);
//! - `wakeups`: the two sleep-and-wake handshakes between a client and the serving thread
//!   (`sync`: std's or loom's fence);
//! - `sys`: the memfd, credential and descriptor-passing system calls;
//! - `error`: `ChannelError`.
//!
//! Must never: let a command touch bytes outside its process's grants or its channel's DMA
//! region, let one channel's bad memory fail another channel or the daemon, or post a
//! completion before the device completed the command.

pub mod client;
mod client_zones;
mod counts;
pub mod daemon;
mod device_side;
mod error;
pub mod grants;
mod greeting;
pub mod hello;
pub mod layout;
pub mod simulation;
pub mod status;
mod sync;
mod sys;
pub mod wakeups;

pub use client::{Channel, Completion, Op, SubmitError};
pub use client_zones::ZONE_COMMAND;
pub use daemon::{Daemon, DaemonOptions, ShutdownHandle, CHANNELS_DEFAULT};
pub use error::ChannelError;
pub use grants::Grant;
pub use simulation::SimulatedDaemon;
pub use status::ChannelStatus;
