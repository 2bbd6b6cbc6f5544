//! Every way a pool operation can fail. Errors about files name the file; errors about a
//! request name the offending offset and length and the limit it broke.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PmError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Corrupt { path: PathBuf, what: String },
    #[error("{path}: pool format version {found}, this library reads version {expected}")]
    WrongVersion {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{path}: {what}")]
    Mismatch { path: PathBuf, what: String },
    #[error("invalid option: {0}")]
    BadOption(String),
    #[error("write of {len} bytes at offset {offset} is outside the pool of {size} bytes")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("zero-length write at offset {0}")]
    ZeroLength(u64),
    #[error("transaction would log {bytes} bytes, more than the limit of {limit} bytes (a quarter of the NVM log)")]
    TooLarge { bytes: u64, limit: u64 },
    #[error("write conflict: an older transaction holds page {page}; abort and retry")]
    Conflict { page: u64 },
    #[error("waited {waited_ms} ms for {what}; giving up")]
    Timeout { what: &'static str, waited_ms: u64 },
    #[error(
        "commit not made: this transaction reserved log space, then stalled {stalled_ms} ms or \
         more before writing its record, so later commits fenced it off; nothing was written, \
         retry"
    )]
    Fenced { stalled_ms: u64 },
    #[error("all {0} transaction slots are in use")]
    NoTxSlot(usize),
    #[error("all {0} process slots of the pool are in use")]
    NoProcessSlot(usize),
    #[error("transaction belongs to another pool")]
    WrongPool,
}

pub type Result<T, E = PmError> = std::result::Result<T, E>;

/// Wraps an `io::Error` with the path it concerns.
pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> PmError + '_ {
    move |source| PmError::Io {
        path: path.to_path_buf(),
        source,
    }
}
