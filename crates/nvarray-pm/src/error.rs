//! Every way a pool operation can fail. Errors about files name the file; errors about a
//! request name the offending offset and length and the limit it broke.

use std::path::PathBuf;

use crate::identity::Identity;

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
    /// A write-back of the cache to the backing file failed before: none may succeed on this
    /// open of the pool (see `Media::sync_all`).
    #[error(
        "{path}: an earlier write-back failed ({first}): the pages it should have carried may \
         not be on disk, so no write-back can succeed until the pool is opened again (its \
         recovery writes the cache's committed lines back)"
    )]
    WriteBackFailedBefore { path: PathBuf, first: String },
    #[error("{path}: pool format version {found}, this library reads version {expected}")]
    WrongVersion {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{path}: {what}")]
    Mismatch { path: PathBuf, what: String },
    /// A file cannot get the blocks it needs: refused at open, where a write into a hole of a
    /// mapped file on a full file system would later kill the process with SIGBUS.
    #[error(
        "{path}: {what} needs {need_bytes} bytes but its file system has {free_bytes} bytes \
         free; {hint}"
    )]
    NoSpace {
        path: PathBuf,
        what: &'static str,
        need_bytes: u64,
        free_bytes: u64,
        hint: &'static str,
    },
    /// The NVM-tier state found for a backing file's path was made for another file, which
    /// left commits in it that were never written back (`identity.rs`).
    #[error(
        "{backing} is not the pool whose commits {state} holds: that pool's last process died \
         before writing them back, and its file has since been removed, replaced or copied \
         (the state was made for {recorded}; the file there now has {found}). Nothing was \
         written to {backing}. If that pool is gone for good, discard its commits with \
         `nvarray pm clean --discard-commits {state}` (or delete that file); if its file was \
         moved away, move it back and open it to recover them"
    )]
    NotThisPool {
        state: PathBuf,
        backing: PathBuf,
        recorded: Identity,
        found: Identity,
    },
    /// The NVM-tier state found for a backing file's path is in use for another file.
    #[error(
        "{state} is in use by process {pids} for the pool that was at {backing}, which has \
         since been removed or replaced: the file there now is another one. Nothing was \
         written to it; stop those processes (they still hold the old pool), then open again"
    )]
    InUseForAnotherFile {
        state: PathBuf,
        backing: PathBuf,
        pids: String,
    },
    /// The state found for a backing file is this file's but superseded (a newer state of
    /// the file was made since, through another NVM directory), and processes still use it.
    #[error(
        "{state} is the pool state of generation {state_generation} of {backing}, but the file \
         has since been written through a state of generation {file_generation} (opened with \
         another NVM directory), and process {pids} still use the old one: two states of one \
         file would each overwrite the other's commits. Stop those processes, then open again \
         (the old state is then discarded: the file has moved on from it)"
    )]
    Superseded {
        state: PathBuf,
        backing: PathBuf,
        state_generation: u64,
        file_generation: u64,
        pids: String,
    },
    /// The file is held by another part of nvarray, or is marked as one's (`nvarray-owner`):
    /// a device's backing, or a pool's NVM-tier state.
    #[error("{path} cannot be opened as a pool: {why}; nothing was written to it")]
    Owned { path: PathBuf, why: String },
    /// `remove_state_file` refused: the state may be needed (`StateStatus::removable`).
    #[error("{path}: kept, {why}")]
    StateKept { path: PathBuf, why: String },
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
