//! Which file a pool's NVM-tier state belongs to: reading a backing file's identity
//! (`Identity`, `identity.rs`) and recording a new one.
//!
//! The state file is found by the backing file's path (`pool::nvm_file_path`; the path inside
//! its file system, `state_key.rs`, so that every mount namespace finds the same one), but a
//! path is not a file: a pool removed after a crash, or replaced by an unrelated file, leaves a state
//! full of commits that were never written back, and replaying them into whatever file now
//! has that path destroys it. So the state's header records the identity of the file it was
//! made for, and every open compares it with the file in hand before writing a byte.
//!
//! Where the identity lives. The backing file is the user's byte array, all of it data from
//! offset 0, so nothing can be written inside it. A sidecar file beside it can be lost, left
//! behind or copied apart from it. What the file itself carries, and keeps across `kill -9`,
//! `rename` and reboots, is its metadata:
//!
//! * a random 128-bit **pool id** in the extended attribute `user.nvarray-pm.pool-id`,
//!   written once (with `XATTR_CREATE`, so concurrent openers agree) and made durable with
//!   `fsync` before any state names it. A new file at the path does not have it.
//! * its **inode number and birth time** (`statx`). A new file may reuse the inode number but
//!   not also its birth time to the nanosecond; a copy (`cp -a` carries the attribute) is
//!   another inode. Both are kept by `rename` within a file system and by reboots.
//!
//! A state matches a file only if all three agree. File systems without user extended
//! attributes (no pool id: 0) or without birth times (0) leave the other parts to decide;
//! the device number is left out on purpose, since it can change at a reboot while the
//! state on a DAX file system survives it.
//!
//! What an open does with a state that does not match (`pool.rs`, `Pool::open_over`): one
//! that was closed cleanly holds nothing its file lacks and is replaced; one still in use, or
//! holding commits never written back, is refused with an error that names it and the way to
//! discard it (`nvarray pm clean`). Refusing rather than discarding by itself means a
//! mismatch never loses an acknowledged commit, even on a file system whose inode numbers are
//! unstable: the user decides, and a file that is not the pool is never written.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{io_err, PmError, Result};
use crate::identity::Identity;

/// The extended attribute that carries a backing file's pool id (by which a device also
/// recognises a pool's file: `nvarray-owner`).
const XATTR: &CStr = nvarray_owner::POOL_ID_XATTR;

/// The extended attribute that carries a backing file's state generation: how many NVM-tier
/// states have been made for it. Each new state takes the next number and records it in its
/// header (`layout::H_GENERATION`); a state whose number is below the file's was superseded:
/// the file has been written through a newer state since, so its commits are older than the
/// file's bytes and are never replayed (`pool.rs`, `examine`).
const GENERATION_XATTR: &CStr = c"user.nvarray-pm.generation";

/// The identity `file` has now. Reads only: a file that turns out not to be the pool is left
/// exactly as it was.
pub(crate) fn observe(file: &File, path: &Path) -> Result<Identity> {
    let (inode, birth_ns) = inode_and_birth(file, path)?;
    let pool_id = match read_pool_id(file, path)? {
        Attr::Present(id) => id,
        Attr::Absent | Attr::Unsupported => 0,
    };
    Ok(Identity {
        pool_id,
        inode,
        birth_ns,
    })
}

/// The identity of `file`, giving it a pool id first if its file system has extended
/// attributes and it has none yet. Called only when no state exists for the file's path, so
/// no other pool's state can be attached to it afterwards by mistake.
pub(crate) fn establish(file: &File, path: &Path) -> Result<Identity> {
    if let Attr::Absent = read_pool_id(file, path)? {
        let id = random_id(path)?;
        let bytes = id.to_le_bytes();
        // SAFETY: valid fd, NUL-terminated name, `bytes` is 16 readable bytes.
        let rc = unsafe {
            libc::fsetxattr(
                file.as_raw_fd(),
                XATTR.as_ptr(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::XATTR_CREATE,
            )
        };
        let mut set = rc == 0;
        if !set {
            let e = std::io::Error::last_os_error();
            // Another opener gave it its id first; `observe` reads theirs. A file system that
            // refuses user attributes leaves the inode and birth time to identify the file.
            set = e.raw_os_error() == Some(libc::EEXIST);
            if !set && !unsupported(&e) {
                return Err(attr_error(path, "set", e));
            }
        }
        // The id must be durable before a state records it: a state that outlives its id (a
        // power cut with the NVM tier on real persistent memory) would never match again.
        // (Also when another opener set it: this one's state may be the one linked first.)
        if set {
            file.sync_all().map_err(io_err(path))?;
        }
    }
    observe(file, path)
}

enum Attr {
    Present(u128),
    Absent,
    Unsupported,
}

fn unsupported(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTSUP) | Some(libc::EPERM))
}

fn attr_error(path: &Path, what: &str, e: std::io::Error) -> PmError {
    PmError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            e.kind(),
            format!("cannot {what} extended attribute {XATTR:?}: {e}"),
        ),
    }
}

fn read_pool_id(file: &File, path: &Path) -> Result<Attr> {
    Ok(
        match read_attr::<16>(file, path, XATTR, "a 16-byte pool id")? {
            Some(Some(bytes)) => Attr::Present(u128::from_le_bytes(bytes)),
            Some(None) => Attr::Absent,
            None => Attr::Unsupported,
        },
    )
}

/// The `N`-byte value of `file`'s extended attribute `name`: `Some(Some(bytes))`, or
/// `Some(None)` when it has none, or `None` when its file system has no user attributes. A
/// value of another length is an error saying something else wrote it (`what`: what it
/// should hold).
fn read_attr<const N: usize>(
    file: &File,
    path: &Path,
    name: &CStr,
    what: &str,
) -> Result<Option<Option<[u8; N]>>> {
    let mut bytes = [0u8; N];
    // SAFETY: valid fd, NUL-terminated name, `bytes` is N writable bytes.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            bytes.as_mut_ptr().cast(),
            bytes.len(),
        )
    };
    let foreign = |held: String| PmError::Mismatch {
        path: path.to_path_buf(),
        what: format!(
            "its extended attribute {name:?} holds {held}, not {what}; something other than \
             nvarray-pm wrote it"
        ),
    };
    if n == N as isize {
        return Ok(Some(Some(bytes)));
    }
    if n >= 0 {
        return Err(foreign(format!("{n} bytes")));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) => Ok(Some(None)),
        Some(libc::ERANGE) => Err(foreign(format!("more than {N} bytes"))),
        _ if unsupported(&e) => Ok(None),
        _ => Err(attr_error(path, "read", e)),
    }
}

fn inode_and_birth(file: &File, path: &Path) -> Result<(u64, u64)> {
    // SAFETY: statx is plain data; zeroed is a valid value for it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, an empty NUL-terminated path with AT_EMPTY_PATH, valid out-pointer.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_INO | libc::STATX_BTIME,
            &mut st,
        )
    };
    if rc != 0 {
        return Err(io_err(path)(std::io::Error::last_os_error()));
    }
    let birth_ns = if st.stx_mask & libc::STATX_BTIME != 0 {
        (st.stx_btime.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(st.stx_btime.tv_nsec as u64)
    } else {
        0
    };
    Ok((st.stx_ino, birth_ns))
}

/// A nonzero random id from the kernel.
fn random_id(path: &Path) -> Result<u128> {
    let mut bytes = [0u8; 16];
    loop {
        // SAFETY: `bytes` is 16 writable bytes.
        let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        if n == bytes.len() as isize {
            let id = u128::from_le_bytes(bytes);
            if id != 0 {
                return Ok(id);
            }
            continue;
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.kind() != std::io::ErrorKind::Interrupted {
            return Err(io_err(path)(e));
        }
    }
}

/// Whether `file` is the file now at `path` (the same inode): a state file unlinked by the
/// last process to close its pool, or replaced, after this one opened it, is not.
pub(crate) fn is_at(file: &File, path: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let held = file.metadata().map_err(io_err(path))?;
    match std::fs::metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// The state generation `file` carries (`GENERATION_XATTR`): 0 when it has none yet or its
/// file system has no user extended attributes.
pub(crate) fn generation(file: &File, path: &Path) -> Result<u64> {
    let value = read_attr::<8>(file, path, GENERATION_XATTR, "an 8-byte generation")?;
    Ok(value.flatten().map_or(0, u64::from_le_bytes))
}

/// Gives `file` the next state generation and returns it (durable before it returns: a state
/// is made with it only afterwards). 0 where the file system has no user extended
/// attributes: its states then carry no generation and are never judged superseded.
pub(crate) fn next_generation(file: &File, path: &Path) -> Result<u64> {
    let next = generation(file, path)?.wrapping_add(1).max(1);
    let bytes = next.to_le_bytes();
    // SAFETY: valid fd, NUL-terminated name, `bytes` is 8 readable bytes.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            GENERATION_XATTR.as_ptr(),
            bytes.as_ptr().cast(),
            bytes.len(),
            0,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if unsupported(&e) {
            return Ok(0);
        }
        return Err(attr_error(path, "set", e));
    }
    file.sync_all().map_err(io_err(path))?;
    Ok(next)
}

/// Whether an identity says enough to find its file among others: a pool id, or a birth time
/// beside the inode number (an inode number alone is reused by the next file made).
pub(crate) fn is_distinctive(identity: &Identity) -> bool {
    identity.pool_id != 0 || identity.birth_ns != 0
}

/// The file in `dir` (not looking into subdirectories) whose identity is `wanted`: where a
/// pool's file went when it was renamed within its directory. Reads only.
pub(crate) fn find_in_directory(dir: &Path, wanted: &Identity) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::{DirEntryExt as _, OpenOptionsExt as _};
    if !is_distinctive(wanted) {
        return None;
    }
    let entries = std::fs::read_dir(dir).ok()?;
    entries.flatten().find_map(|entry| {
        // The inode number is in the directory entry: only a match is opened.
        if entry.ino() != wanted.inode || !entry.file_type().is_ok_and(|t| t.is_file()) {
            return None;
        }
        let path = entry.path();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .ok()?;
        (observe(&file, &path).ok()? == *wanted).then_some(path)
    })
}
