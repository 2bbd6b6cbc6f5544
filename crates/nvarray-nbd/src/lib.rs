//! `nvarray-nbd`: an NBD server that exports an emulated nvarray device, so unmodified
//! software (fio's `nbd` engine, qemu-io and qemu-img, nbdcopy, nbdinfo, the kernel's
//! nbd-client) reaches the timing model through the protocol they already speak.
//!
//! This is the only crate that knows NBD. It is a client of the user-space driver
//! (`nvarray-host`): every byte a client reads or writes goes through a device command on the
//! connection's own queue pair, so it is timed by the model like any other.
//!
//! - `proto`: the wire format and the checks every request passes before it touches the
//!   device (pure; property-tested and fuzzed).
//! - `handshake`: fixed newstyle negotiation; `gate`: who may start one (budgets per peer).
//! - `transmission`: one connection's pipelined request loop, in turns.
//! - `serving`: what serving a connection takes, listening or not (the export, slots, queue
//!   pairs, statistics, tag shares).
//! - `clock`: the wall's time, or a simulation's.
//! - `pace`: how long a connection may wait to serve a client that is behind in one burst.
//! - `server`: listening, one thread per connection, shutdown, the report.
//! - `simulation`: the same connections served by one thread, turn by turn, over in-memory
//!   streams (`pipe`), for deterministic simulation.
//! - `error`: the server's errors.
//! - `client`: a minimal blocking client for tests that must speak the protocol exactly.
//!
//! Must never: write outside the export, panic on anything a client sends, or acknowledge a
//! write before its device command has completed.

pub mod client;
pub mod clock;
mod error;
pub mod gate;
pub mod handshake;
pub mod io;
pub mod pace;
pub mod pipe;
pub mod proto;
pub mod server;
pub mod serving;
pub mod simulation;
pub mod transmission;

pub use error::NbdError;
pub use server::{Bound, Listen, Server, ServerOptions, ShutdownHandle};
pub use simulation::SimulatedServer;
