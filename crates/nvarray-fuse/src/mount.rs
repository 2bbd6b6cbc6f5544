//! Mounting the file system on a directory, and taking it down again.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use fuser::{BackgroundSession, MountOption};
use nvarray_host::Device;

use crate::disk::{DiskIo, DiskStats, IO_BYTES_MAX};
use crate::error::FuseError;
use crate::fs::{DiskFs, DISK_NAME};
use crate::mounts::{self, dead_fuse_mount};

/// The kernel's FUSE device.
const DEV_FUSE: &str = "/dev/fuse";

/// The helper that mounts and unmounts FUSE file systems for users other than root.
const FUSERMOUNT: &str = "fusermount3";

/// Checks `dir` and the machine before a device is opened for it, so that a mistake costs
/// nothing; returns the directory's canonical path. The directory must be empty: a mount
/// hides what a directory holds (a live `nvarray mount` on it included) until it is unmounted.
pub fn preflight(dir: &Path) -> Result<PathBuf, FuseError> {
    // What stat says under a FUSE mount whose server died (e.g. after kill -9): ENOTCONN.
    let dir_error = |error: std::io::Error| match dead_fuse_mount(dir, &error) {
        Some(mount) => FuseError::DeadMount {
            dir: dir.to_path_buf(),
            mount,
        },
        None => FuseError::Dir {
            dir: dir.to_path_buf(),
            error,
        },
    };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(FuseError::NotADirectory {
                dir: dir.to_path_buf(),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FuseError::DirMissing {
                dir: dir.to_path_buf(),
            })
        }
        Err(e) => return Err(dir_error(e)),
    }
    let canonical = dir.canonicalize().map_err(dir_error)?;
    // Reading the directory asks its file system: a dead FUSE mount answers `stat` from its
    // attribute cache for a while, but never this.
    let mut entries = std::fs::read_dir(&canonical).map_err(dir_error)?;
    let dir = canonical;
    let table = mounts::mount_table();
    let on_top = table.iter().rev().find(|m| m.dir == dir);
    if on_top.is_some_and(mounts::MountEntry::is_nvarray) {
        return Err(FuseError::AlreadyMounted { dir });
    }
    if let Some(first) = entries.next() {
        let first = first.map_or_else(
            |_| "an entry".to_string(),
            |e| format!("{:?}", e.file_name()),
        );
        return Err(FuseError::NotEmpty {
            dir,
            first,
            more: entries.count(),
        });
    }
    if !Path::new(DEV_FUSE).exists() {
        return Err(FuseError::NoFuseDevice);
    }
    // Root mounts with the mount system call; anyone else needs the setuid helper.
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && !on_path(FUSERMOUNT) {
        return Err(FuseError::NoFusermount);
    }
    Ok(dir)
}

/// Whether an executable called `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.is_file()))
    })
}

/// A mounted device: the file `dir/disk`, served by a background thread until unmounted.
pub struct Mounted {
    session: Option<BackgroundSession>,
    dir: PathBuf,
    io: Arc<Mutex<DiskIo>>,
}

/// Mounts the file system presenting `device` as `dir/disk` (run `preflight` on `dir`
/// first). `on_end` is called from the serving thread once the session is over, whoever
/// unmounted it (this process, or `umount` from outside).
pub fn mount(
    device: Arc<Device>,
    dir: &Path,
    on_end: impl FnOnce() + Send + 'static,
) -> Result<Mounted, FuseError> {
    let completion = device.completion();
    let io = Arc::new(Mutex::new(DiskIo::new(device, completion)));
    let fs = DiskFs::new(Arc::clone(&io), Box::new(on_end));
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("nvarray".into()),
        MountOption::Subtype("nvarray".into()),
        // The kernel checks permissions against the modes we report (the directory is 0555).
        MountOption::DefaultPermissions,
        MountOption::NoExec,
        MountOption::NoAtime,
        // Reads never larger than the scratch buffer (see `disk::IO_BYTES_MAX`).
        MountOption::CUSTOM(format!("max_read={IO_BYTES_MAX}")),
    ];
    // One serving thread: the device model is one serial machine anyway, and one thread keeps
    // the read-modify-write of edge blocks free of races without a lock being contended.
    let session = fuser::spawn_mount(fs, dir, &config).map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound && !Path::new(DEV_FUSE).exists() {
            FuseError::NoFuseDevice
        } else if error.kind() == std::io::ErrorKind::NotFound && !on_path(FUSERMOUNT) {
            FuseError::NoFusermount
        } else if let Some(mount) = dead_fuse_mount(dir, &error) {
            // The mount died between `preflight` and now.
            FuseError::DeadMount {
                dir: dir.to_path_buf(),
                mount,
            }
        } else {
            FuseError::Mount {
                dir: dir.to_path_buf(),
                error,
            }
        }
    })?;
    Ok(Mounted {
        session: Some(session),
        dir: dir.to_path_buf(),
        io,
    })
}

impl Mounted {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the file that holds the device's bytes.
    pub fn disk_path(&self) -> PathBuf {
        self.dir.join(DISK_NAME)
    }

    pub fn size_bytes(&self) -> u64 {
        lock_stats(&self.io, |io| io.size_bytes())
    }

    /// What the file system has counted so far.
    pub fn stats(&self) -> DiskStats {
        lock_stats(&self.io, |io| io.stats().clone())
    }

    /// Whether the session is over (unmounted, by us or from outside).
    pub fn ended(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmounts the directory, unless something still uses the file (a loop device, an open
    /// descriptor): then `FuseError::Busy`, and the file system keeps serving, so nothing
    /// that relies on it loses data. Unmounting an already unmounted directory is fine.
    pub fn unmount(&mut self) -> Result<(), FuseError> {
        if self.ended() {
            return Ok(());
        }
        let path = CString::new(self.dir.as_os_str().as_bytes()).map_err(|_| FuseError::Dir {
            dir: self.dir.clone(),
            error: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
        let rc = unsafe { libc::umount2(path.as_ptr(), 0) };
        if rc == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EBUSY) => Err(FuseError::Busy {
                dir: self.dir.clone(),
            }),
            // Not a mount point any more: someone unmounted it (perhaps lazily) already.
            Some(libc::EINVAL) => Ok(()),
            // Not root: the setuid helper may unmount what the user mounted.
            Some(libc::EPERM) => self.unmount_with_helper(),
            _ => Err(FuseError::Unmount {
                dir: self.dir.clone(),
                error,
            }),
        }
    }

    fn unmount_with_helper(&self) -> Result<(), FuseError> {
        let out = Command::new(FUSERMOUNT)
            .arg("-u")
            .arg("--")
            .arg(&self.dir)
            .output()
            .map_err(|error| FuseError::Unmount {
                dir: self.dir.clone(),
                error,
            })?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("busy") {
            return Err(FuseError::Busy {
                dir: self.dir.clone(),
            });
        }
        Err(FuseError::Unmount {
            dir: self.dir.clone(),
            error: std::io::Error::other(stderr.trim().to_string()),
        })
    }

    /// Unmounts the directory (see `unmount`: `Busy` while the file is in use), waits for
    /// the serving thread to finish, and returns the final statistics.
    pub fn join(mut self) -> Result<DiskStats, FuseError> {
        self.unmount()?;
        if let Some(session) = self.session.take() {
            // Not fuser's own unmount-and-join: the directory is unmounted already, and
            // unmounting it again races with the kernel tearing the connection down.
            session.join().map_err(|error| FuseError::Session {
                dir: self.dir.clone(),
                error,
            })?;
        }
        Ok(self.stats())
    }
}

fn lock_stats<R>(io: &Mutex<DiskIo>, f: impl FnOnce(&DiskIo) -> R) -> R {
    f(&io.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}
