//! `nvarray-fuse`: the emulated device as one file, so unmodified software can use it.
//!
//! `mount` presents an opened `nvarray_host::Device` as the regular file `DIR/disk` in a
//! read-only directory; `losetup` turns that file into a kernel block device on which a real
//! file system (XFS, ext4) and real applications run. This is the only crate that knows
//! FUSE (through the `fuser` crate, without libfuse).
//!
//! What it must never do: touch the device's bytes other than through the user-space driver
//! (`QueuePair::read_at` / `write_at` / `flush`), since that is where the timing model
//! applies; let the page cache answer for the device (the file is opened for direct I/O, so
//! every read and write reaches the device and a write is on it when acknowledged); change
//! the file's size; panic on anything the kernel sends. Requests at any offset and length are
//! turned into whole-block commands (`disk`), reads are clipped at the end of the file and a
//! write that starts beyond it fails with `ENOSPC`.

pub mod disk;
pub mod error;
mod fs;
mod mount;
pub mod mounts;

pub use disk::{DiskIo, DiskStats, IO_BYTES_MAX};
pub use error::{FuseError, IoError};
pub use fs::DISK_NAME;
pub use mount::{mount, preflight, Mounted};
