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
//! - `transmission`: one connection's pipelined request loop.
//! - `pace`: how long a connection may wait to serve a client that is behind in one burst.
//! - `server`: listening, the connection limit, shutdown, statistics.
//! - `client`: a minimal blocking client for tests that must speak the protocol exactly.
//!
//! Must never: write outside the export, panic on anything a client sends, or acknowledge a
//! write before its device command has completed.

pub mod client;
pub mod gate;
pub mod handshake;
pub mod io;
pub mod pace;
pub mod proto;
pub mod server;
pub mod tag_share;
pub mod transmission;

pub use server::{Bound, Listen, Server, ServerOptions, ShutdownHandle};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum NbdError {
    /// A setting the server cannot use; the message names it and the accepted range.
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// (Not a `source`: the message quotes it, and the binary prints the chain of sources.)
    #[error("flushing the device at shutdown: {0}")]
    Device(nvarray_host::HostError),
}

impl NbdError {
    /// Whether the error is in what the user asked for.
    pub fn is_input_error(&self) -> bool {
        matches!(self, NbdError::Config(_) | NbdError::Bind { .. })
    }
}
