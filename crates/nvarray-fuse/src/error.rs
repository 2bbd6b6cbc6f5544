//! Errors of the FUSE front end: one line each, saying what to do next.

use std::path::PathBuf;

use nvarray_host::HostError;
use thiserror::Error;

/// Why a mount could not be made, or ended badly.
///
/// A message that quotes the system's error carries it as text (`error`), not as a `source`:
/// the binary prints an error with its chain of sources, which would say it twice.
#[derive(Debug, Error)]
pub enum FuseError {
    #[error("{dir} does not exist: create it first (mkdir -p {dir})", dir = .dir.display())]
    DirMissing { dir: PathBuf },
    #[error("{dir} is not a directory: give an empty directory to mount on", dir = .dir.display())]
    NotADirectory { dir: PathBuf },
    #[error(
        "{dir} is not empty (it holds {first}{more}): a mount would hide what is there until \
         it is unmounted; give an empty directory (mkdir DIR) to mount on",
        dir = .dir.display(),
        more = if *.more == 0 { String::new() } else { format!(" and {} more", .more) }
    )]
    NotEmpty {
        dir: PathBuf,
        /// The first name found in it, and how many more there are.
        first: String,
        more: usize,
    },
    #[error("{dir} already has an nvarray mount on it: stop that `nvarray mount` first (SIGINT), or give another empty directory", dir = .dir.display())]
    AlreadyMounted { dir: PathBuf },
    #[error("{}", dead_mount_message(.dir, .mount))]
    DeadMount {
        dir: PathBuf,
        /// The dead mount: `dir` itself or the mount it lies in.
        mount: PathBuf,
    },
    #[error("{dir}: {error}", dir = .dir.display())]
    Dir { dir: PathBuf, error: std::io::Error },
    #[error("/dev/fuse is missing: load the fuse module (modprobe fuse), or give the container the device (--device /dev/fuse)")]
    NoFuseDevice,
    #[error("fusermount3 is not on PATH, and only root can mount without it: install Debian's fuse3 (apt-get install fuse3) or run as root")]
    NoFusermount,
    #[error("cannot mount on {dir}: {error}", dir = .dir.display())]
    Mount { dir: PathBuf, error: std::io::Error },
    #[error("{dir} is busy: something still uses {dir}/disk — detach its loop device first (losetup -j {dir}/disk shows it, losetup -d /dev/loopN detaches it) and unmount what is mounted on it", dir = .dir.display())]
    Busy { dir: PathBuf },
    #[error("cannot unmount {dir}: {error}", dir = .dir.display())]
    Unmount { dir: PathBuf, error: std::io::Error },
    #[error("the FUSE session on {dir} ended with an error: {error}", dir = .dir.display())]
    Session { dir: PathBuf, error: std::io::Error },
    #[error("the device cannot be presented as a file: {0}")]
    Device(String),
}

fn dead_mount_message(dir: &std::path::Path, mount: &std::path::Path) -> String {
    let advice = format!(
        "a FUSE mount whose server has gone away (a killed `nvarray mount`?): unmount it first \
         (fusermount3 -u -z {mount}, or umount -l {mount})",
        mount = mount.display()
    );
    if dir == mount {
        format!("{} is {advice}", dir.display())
    } else {
        format!("{} is inside {}, {advice}", dir.display(), mount.display())
    }
}

impl FuseError {
    /// Whether the error is in what the user gave or must set up (a directory, the FUSE
    /// device, the mount helper) rather than a failure of the machine.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            FuseError::DirMissing { .. }
                | FuseError::NotADirectory { .. }
                | FuseError::NotEmpty { .. }
                | FuseError::AlreadyMounted { .. }
                | FuseError::DeadMount { .. }
                | FuseError::NoFuseDevice
                | FuseError::NoFusermount
                | FuseError::Busy { .. }
        )
    }
}

/// Why one FUSE read, write or fsync failed; `errno` is what the application sees.
#[derive(Debug, Error)]
pub enum IoError {
    /// A write that starts at or beyond the end of the fixed-size file.
    #[error(
        "write at offset {offset_bytes} is at or beyond the end of the device ({size_bytes} bytes)"
    )]
    NoSpace { offset_bytes: u64, size_bytes: u64 },
    /// A read larger than the largest the mount negotiated with the kernel (`max_read`);
    /// the kernel never sends one.
    #[error(
        "read of {len_bytes} bytes is larger than the {max_bytes} bytes negotiated with the kernel"
    )]
    TooLarge { len_bytes: u64, max_bytes: u64 },
    /// The driver or the device failed the command.
    #[error(transparent)]
    Device(#[from] HostError),
}

impl IoError {
    pub fn errno(&self) -> i32 {
        match self {
            IoError::NoSpace { .. } => libc::ENOSPC,
            IoError::TooLarge { .. } => libc::EINVAL,
            IoError::Device(_) => libc::EIO,
        }
    }
}
