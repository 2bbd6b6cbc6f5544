//! Errors of the user-space driver: one line each, naming the value and the accepted range.

use nvarray_emu::device_core::Status;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum HostError {
    /// The device or its backing could not be opened.
    #[error(transparent)]
    Emu(#[from] nvarray_emu::error::EmuError),
    /// A device setting the driver cannot honour (e.g. a capacity the command word cannot
    /// address); the message names the setting.
    #[error("{0}")]
    Config(String),
    /// The workload does not fit this device.
    #[error("{0}")]
    Workload(String),
    /// The device completed a command with an error status.
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes}: {status}")]
    Command {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u64,
        status: Status,
    },
    /// Every tag is in use: wait for a completion first.
    #[error("no free tag: all {tags} are in flight")]
    NoTag { tags: usize },
    #[error("data verification failed: {0}")]
    Verify(String),
}

impl HostError {
    /// Whether the error is in what the user asked for (a bad setting or workload) rather than
    /// in the device or the machine.
    pub fn is_input_error(&self) -> bool {
        matches!(self, HostError::Config(_) | HostError::Workload(_))
            || matches!(self, HostError::Emu(e) if e.is_input_error())
    }
}
