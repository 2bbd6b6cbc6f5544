//! The server's errors: what it refuses to start with, and what stops it.

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
