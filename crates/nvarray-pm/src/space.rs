//! Room on disk (or in memory, for tmpfs) for the files a pool maps.
//!
//! Both tiers are shared mappings of files. A store through a mapping into a part of the file
//! that has no blocks yet (a hole: `set_len` makes files of holes) needs the file system to
//! find a block there and then; when it has none, the kernel's only answer is SIGBUS, which
//! kills the program with no message (`pm-bench pages --array-bytes 64m` on a 16 MiB tmpfs
//! exited 135). So every file a pool maps has all its blocks reserved when it is opened
//! (`fallocate`), and a file system without room is a clear error then, not a crash later.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use nvarray_faults::{BackingFaults, BackingOp};

use crate::error::{io_err, PmError, Result};

/// Makes `file` at least `len` bytes long with every block of `[0, len)` allocated; its data
/// is unchanged. `what` and `hint` word the error when the file system has no room. `faults`
/// may fail the `fallocate` instead (tests and campaigns).
pub(crate) fn allocate(
    file: &File,
    len: u64,
    path: &Path,
    what: &'static str,
    hint: &'static str,
    faults: Option<&BackingFaults>,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let injected = faults.and_then(|f| f.next(BackingOp::Fallocate));
    let no_space = |path: &Path| -> Result<()> {
        Err(PmError::NoSpace {
            path: path.to_path_buf(),
            what,
            need_bytes: len,
            free_bytes: free_bytes(file).unwrap_or(0),
            hint,
        })
    };
    // Asked first, so that a file far larger than the room left fails at once: tmpfs would
    // allocate memory up to its limit before giving up, pressing the whole machine.
    use std::os::unix::fs::MetadataExt as _;
    let allocated = file
        .metadata()
        .map_err(io_err(path))?
        .blocks()
        .saturating_mul(512);
    if len.saturating_sub(allocated) > free_bytes(file).map_err(io_err(path))? {
        return no_space(path);
    }
    loop {
        let e = match injected {
            Some(fault) => crate::media::injected_error(fault),
            None => {
                // SAFETY: valid fd; mode 0 allocates blocks (and extends the file) without
                // changing any byte of data.
                let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len as libc::off_t) };
                if rc == 0 {
                    return Ok(());
                }
                std::io::Error::last_os_error()
            }
        };
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => return no_space(path),
            // A file system that cannot reserve blocks (some network and FUSE file systems):
            // the free-space check above is the best it allows.
            Some(libc::EOPNOTSUPP) => {
                if file.metadata().map_err(io_err(path))?.len() < len {
                    file.set_len(len).map_err(io_err(path))?;
                }
                return Ok(());
            }
            _ => return Err(io_err(path)(e)),
        }
    }
}

/// Bytes an unprivileged user may still allocate on `file`'s file system.
fn free_bytes(file: &File) -> std::io::Result<u64> {
    // SAFETY: statvfs is plain data; zeroed is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and out-pointer.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}
