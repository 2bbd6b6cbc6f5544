//! Errors of the emulator: one line each, naming the file, value or range at fault.
//!
//! A message that quotes the system's error of a failure the user did not cause carries it as
//! text (`error`), not as a `source`: the binary prints such errors with their chain of
//! sources, which would say it twice.

use std::path::PathBuf;

use thiserror::Error;

const GIB: f64 = (1u64 << 30) as f64;

#[derive(Debug, Error)]
pub enum EmuError {
    #[error("backing size {size_bytes} bytes is out of range: expected 1 to {max_bytes}")]
    BackingSize { size_bytes: u64, max_bytes: u64 },
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is {file_bytes} bytes but the device is {size_bytes}: make the device \
         {file_bytes} bytes (serve, mount: --size {file_bytes}; bench: --set \
         memory.capacity_bytes={file_bytes}) or use another file"
    )]
    FileSize {
        path: PathBuf,
        file_bytes: u64,
        size_bytes: u64,
    },
    #[error("{path}: cannot allocate the {size_bytes}-byte device image: {source}")]
    Allocate {
        path: PathBuf,
        size_bytes: u64,
        source: std::io::Error,
    },
    #[error(
        "{path} is in use: {holder}. A device never shares its backing file (two owners would \
         overwrite each other's data): stop that process first, or give another file"
    )]
    BackingInUse { path: PathBuf, holder: String },
    #[error("{path} cannot back a device: {mark}")]
    BackingMarked { path: PathBuf, mark: String },
    #[error(
        "{path} is a {kind}: a device's backing must be a regular file (an image made with \
         truncate or fallocate, or a new path, which nvarray makes at the device's size)"
    )]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error("{path} is open read-only: the device refuses writes")]
    ReadOnlyBacking { path: PathBuf },
    #[error("{path}: cannot lock the backing file (so that no second device opens it): {error}")]
    Lock {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot map {what}: {error}")]
    Map { what: String, error: std::io::Error },
    #[error("DMA memory of {tags} tags x {buffer_bytes} bytes is out of range: expected 1 byte to 1 GiB in all (lower --buffer-size or the tag count)")]
    Arena { tags: usize, buffer_bytes: usize },
    #[error("cannot start a device thread: {error}")]
    Thread { error: std::io::Error },
    #[error("--cpus: {0}")]
    Cpus(String),
    /// The device description cannot run (the caller validates it first; this is the check
    /// the emulator cannot do without).
    #[error(transparent)]
    Config(#[from] nvarray_model::ConfigError),
    #[error(
        "a RAM device of {:.1} GiB does not fit in the {:.1} GiB of memory this machine has available: use --backing file:PATH or a smaller --size",
        *.size_bytes as f64 / GIB,
        *.available_bytes as f64 / GIB
    )]
    NotEnoughMemory {
        size_bytes: u64,
        available_bytes: u64,
    },
    #[error("an earlier flush failed ({first}): writes since then may not be on disk, so no flush can succeed")]
    FlushFailedBefore { first: String },
    #[error(
        "the file system holding {} has no page for a {what} of {len_bytes} bytes at offset \
         {offset_bytes} (a sparse backing takes its blocks as they are first written): that \
         {what} fails, the device goes on; free space, or use a file allocated at open \
         (file:PATH without ,sparse)",
        path.display()
    )]
    NoSpace {
        path: PathBuf,
        what: &'static str,
        offset_bytes: u64,
        len_bytes: u64,
    },
    #[error("{path}: the file lost the device's bytes at offset {offset_bytes} (length {len_bytes}) under its mapping (truncated, or its file system could not give a page)")]
    MappingLost {
        path: PathBuf,
        offset_bytes: u64,
        len_bytes: u64,
    },
    #[error("{store}: {what} failed: {error} (an injected fault)")]
    InjectedFault {
        store: String,
        what: String,
        error: std::io::Error,
    },
    #[error("the device has failed ({first}) and refuses every command")]
    DeviceFailed { first: String },
    #[error("access beyond end of backing store: offset={offset_bytes} len={len_bytes} size={size_bytes}")]
    OutOfRange {
        offset_bytes: u64,
        len_bytes: u64,
        size_bytes: u64,
    },
}

impl EmuError {
    /// Whether the error is in what the user gave (a size, a file of the wrong size) rather
    /// than in the machine (a mapping that failed).
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            EmuError::BackingSize { .. }
                | EmuError::FileSize { .. }
                | EmuError::BackingInUse { .. }
                | EmuError::BackingMarked { .. }
                | EmuError::NotRegularFile { .. }
                | EmuError::File { .. }
                | EmuError::Allocate { .. }
                | EmuError::Arena { .. }
                | EmuError::NotEnoughMemory { .. }
                | EmuError::Cpus(_)
        )
    }
}
