//! `nvarray-owner`: which part of nvarray owns a file, so that no two parts ever write one
//! file each believing it is theirs.
//!
//! nvarray keeps user data in three kinds of file: a device's backing (`nvarray serve`,
//! `bench`, `mount` with `--backing file:`), an nvarray-pm pool's file (the NVM library, and
//! the SQLite VFS over it) and a pool's NVM-tier state. A device that opened a pool's file
//! overwrote the database a process held open through the VFS (issue 55); two devices on one
//! file lost every file written through one of them (issue 41). So every opener of such a
//! file takes a lock here, before it reads or sizes the file, and a refusal names the holder
//! and what it holds the file as.
//!
//! The locks are open file description locks (`F_OFD_SETLK`): they belong to the open file,
//! last exactly as long as it, and the kernel drops them when the process dies, `kill -9`
//! included. A second open conflicts with them whether it is in another process or in this
//! one.
//! - A **device** holds a lock over the whole file: a write lock, or a read lock when it only
//!   reads (`--read-only`), which still keeps every writer out.
//! - A **pool**'s processes each hold a read lock on one byte far past any file's end
//!   (`POOL_BYTE`): they share the file with each other, never with a device.
//! - A pool's **state** is held through the liveness locks its processes keep
//!   (`STATE_LIVENESS_BASE`, taken by nvarray-pm), which a device's lock conflicts with too.
//!
//! A read lock does not conflict with another read lock, so each side also asks, after taking
//! its own, whether the other holds one (`F_OFD_GETLK`); of two openers at once, at least the
//! second sees the first. Files whose owner is not running are recognised by their marks
//! (`mark`): a pool's file carries its pool id in an extended attribute, a state begins with
//! its magic.
//!
//! The kernel does not say who holds an OFD lock (`F_OFD_GETLK` and `/proc/locks` give pid
//! -1), so the holder is looked up in `/proc/PID/fdinfo/FD`, whose `lock:` lines list the
//! locks held through each open file with their byte range, which says what it is held as.
//!
//! Never: block. Every lock here is tried once; a held file is an error, not a wait.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// The byte a pool's processes lock (read) in its file: 2^62, past any file's end and far
/// from SQLite's lock bytes at 1 GiB (`native/sqlite-vfs`), which the VFS locks in the same
/// file.
pub const POOL_BYTE: i64 = 1 << 62;

/// The byte a pool's opener locks (write, waiting) in its file while it makes the file's
/// NVM-tier state, so two openers of one file never make two states (nvarray-pm's
/// `pool.rs`). Held briefly; a holder found on it is named as a pool.
pub const POOL_MAKING_BYTE: i64 = POOL_BYTE + 1;

/// The first of the bytes whose write locks say which processes are attached to a pool's
/// NVM-tier state, one per process slot (nvarray-pm's `coord.rs`).
pub const STATE_LIVENESS_BASE: i64 = 1 << 40;

/// Liveness bytes of a pool's state, from `STATE_LIVENESS_BASE`: one per process slot (64)
/// and one for the process attaching (nvarray-pm's `pool.rs`, `ATTACHER`).
pub const STATE_LIVENESS_SLOTS: i64 = 65;

/// The magic at the start of a pool's NVM-tier state (nvarray-pm's `layout.rs`).
pub const STATE_MAGIC: &[u8; 8] = b"NVPMPOOL";

/// The extended attribute that carries a pool's id on its file (nvarray-pm's
/// `file_identity.rs`).
pub const POOL_ID_XATTR: &std::ffi::CStr = c"user.nvarray-pm.pool-id";

/// SQLite's lock bytes (its unix VFS's, which nvarray's SQLite VFS uses too): pending,
/// reserved and the 510 shared bytes.
const SQLITE_LOCK_FIRST: i64 = 0x4000_0000;
const SQLITE_LOCK_END: i64 = SQLITE_LOCK_FIRST + 2 + 510;

// `HeldAs::of_range` tells the holders apart by where their locks start: SQLite's bytes, a
// state's liveness bytes and a pool's bytes must not overlap.
const _: () = assert!(SQLITE_LOCK_END <= STATE_LIVENESS_BASE);
const _: () = assert!(STATE_LIVENESS_BASE + STATE_LIVENESS_SLOTS <= POOL_BYTE);

/// Longest command line quoted in a message about the holder.
const COMMAND_CHARS_MAX: usize = 200;

/// What an opener takes the file as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A device's backing; `writable` unless it only reads.
    Device { writable: bool },
    /// A pool's file, shared by the pool's processes.
    Pool,
}

/// What a lock, or a mark, says a file is held as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldAs {
    Device,
    Pool,
    PoolState,
    SqliteConnection,
    /// A lock nvarray does not take (another program's).
    Other,
}

impl HeldAs {
    fn of_range(start: i64) -> HeldAs {
        match start {
            0 => HeldAs::Device,
            POOL_BYTE | POOL_MAKING_BYTE => HeldAs::Pool,
            s if (STATE_LIVENESS_BASE..STATE_LIVENESS_BASE + STATE_LIVENESS_SLOTS).contains(&s) => {
                HeldAs::PoolState
            }
            s if (SQLITE_LOCK_FIRST..SQLITE_LOCK_END).contains(&s) => HeldAs::SqliteConnection,
            _ => HeldAs::Other,
        }
    }

    fn words(self) -> &'static str {
        match self {
            HeldAs::Device => "as the backing of a device",
            HeldAs::Pool => "as an nvarray-pm pool",
            HeldAs::PoolState => "as the NVM-tier state of an nvarray-pm pool",
            HeldAs::SqliteConnection => "as a SQLite database (a connection's lock)",
            HeldAs::Other => "with a lock of its own",
        }
    }
}

/// Who holds a file, in words: "process PID (COMMAND LINE) holds it as ...".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub command: String,
    pub held_as: HeldAs,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) if pid == std::process::id() => write!(
                f,
                "this process (pid {pid}: {}), through another open of the file, holds it {}",
                self.command,
                self.held_as.words()
            ),
            Some(pid) => write!(
                f,
                "process {pid} ({}) holds it {}",
                self.command,
                self.held_as.words()
            ),
            None => write!(
                f,
                "another process (not one this process can see in /proc) holds it {}",
                self.held_as.words()
            ),
        }
    }
}

/// Why a claim was refused.
#[derive(Debug)]
pub enum Refused {
    /// Another open file holds a conflicting lock.
    Held(Holder),
    /// Nobody holds it now, but it is marked as another part's (`mark`).
    Marked(Mark),
    /// The lock could not be asked for.
    Io(io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Held(h) => write!(f, "{h}"),
            Refused::Marked(m) => write!(f, "{m}"),
            Refused::Io(e) => write!(f, "cannot lock it: {e}"),
        }
    }
}

/// What a file's own bytes or attributes say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// It carries a pool id: it is (or was) an nvarray-pm pool's file, whose data a device
    /// would overwrite, and whose crashed state may still be replayed into it.
    PoolFile,
    /// It begins with a pool state's magic: a pool's NVM-tier state (its log and cache).
    PoolState,
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mark::PoolFile => write!(
                f,
                "it is an nvarray-pm pool's file (it carries the extended attribute {}); no \
                 process has it open now, but its pool's commits may still be recovered into \
                 it. Use another file; if the pool is gone for good, remove the attribute \
                 (setfattr -x {} FILE) first",
                POOL_ID_XATTR.to_string_lossy(),
                POOL_ID_XATTR.to_string_lossy()
            ),
            Mark::PoolState => write!(
                f,
                "it is the NVM-tier state of an nvarray-pm pool (it begins with {}): its log \
                 and cache, which `nvarray pm list` describes and `nvarray pm clean` removes",
                String::from_utf8_lossy(STATE_MAGIC)
            ),
        }
    }
}

/// What `file` is marked as, by its first bytes or its extended attributes. Reads only.
pub fn mark(file: &File) -> Option<Mark> {
    use std::os::unix::fs::FileExt as _;
    let mut magic = [0u8; 8];
    if file.read_exact_at(&mut magic, 0).is_ok() && &magic == STATE_MAGIC {
        return Some(Mark::PoolState);
    }
    // SAFETY: valid fd, NUL-terminated name; a NULL buffer of size 0 asks only for the size.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            POOL_ID_XATTR.as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    (n >= 0).then_some(Mark::PoolFile)
}

/// Takes `file` for `role`, without waiting: the lock lasts as long as the open file (every
/// handle that shares its description). Refused when another open file holds a conflicting
/// lock (`Refused::Held`, naming it) or, when nobody does, the file is marked as something
/// this role must not write (`Refused::Marked`: a device never takes a pool's file or state;
/// a pool never takes a state). A refused claim leaves no lock behind.
pub fn claim(file: &File, role: Role) -> Result<(), Refused> {
    let (own, other) = match role {
        Role::Device { writable } => {
            let kind = if writable {
                libc::F_WRLCK
            } else {
                libc::F_RDLCK
            };
            ((kind, 0, 0), (POOL_BYTE, 1))
        }
        Role::Pool => ((libc::F_RDLCK, POOL_BYTE, 1), (0, 1)),
    };
    let (kind, start, len) = own;
    if !set_lock(file, kind, start, len).map_err(Refused::Io)? {
        return Err(Refused::Held(holder(file)));
    }
    // Read locks do not exclude each other: a pool and a read-only device would both get
    // theirs. Asked after taking our own, so of two at once the second sees the first. (A
    // read-only device asking at the pool's byte also meets other read-only devices' locks
    // over the whole file, from byte 0: those it shares the file with.)
    let (start, len) = other;
    let conflict = lock_held_at(file, start, len).map_err(Refused::Io)?;
    if conflict.is_some_and(|first| role == Role::Pool || first != 0) {
        let _ = set_lock(file, libc::F_UNLCK, own.1, own.2);
        return Err(Refused::Held(holder(file)));
    }
    // Nobody running holds it as anything else: what the file itself says it is. (Looked at
    // under the lock, so a holder is named as one rather than by its file's marks.)
    if let Some(m) = mark(file) {
        let refused = match role {
            Role::Device { .. } => true,
            Role::Pool => m == Mark::PoolState,
        };
        if refused {
            let _ = set_lock(file, libc::F_UNLCK, own.1, own.2);
            return Err(Refused::Marked(m));
        }
    }
    Ok(())
}

/// Who holds a lock on the file at `path`, if anyone does (a device, a pool's process, a
/// SQLite connection, another program): for messages about a file that an opener refused
/// for other reasons. Reads only.
pub fn holder_at(path: &std::path::Path) -> Option<Holder> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let held = lock_held_at(&file, 0, 0).ok()?.is_some();
    held.then(|| holder(&file))
}

/// Sets a lock on `[start, start + len)` (`len` 0: to the end, however the file grows).
/// `Ok(false)` when another open file holds a conflicting one.
fn set_lock(file: &File, kind: i32, start: i64, len: i64) -> io::Result<bool> {
    let lock = flock(kind, start, len);
    // SAFETY: F_OFD_SETLK reads one `flock` through the pointer, which points at a live one;
    // the descriptor is open for the whole call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// The first byte of a lock another open file holds on `[start, start + len)`, if any (asked
/// as a write lock, which every lock conflicts with).
fn lock_held_at(file: &File, start: i64, len: i64) -> io::Result<Option<i64>> {
    let mut lock = flock(libc::F_WRLCK, start, len);
    // SAFETY: F_OFD_GETLK reads and writes one `flock` through the pointer, a live one.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut lock) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_start))
}

fn flock(kind: i32, start: i64, len: i64) -> libc::flock {
    // Every range here runs forward from a byte of the file (a negative length would reach
    // back before `start`).
    assert!(start >= 0, "lock range starts at {start}");
    assert!(len >= 0, "lock range of {len} bytes");
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = start;
    lock.l_len = len;
    // `l_pid` must be 0 for OFD locks: it is.
    lock
}

/// Who holds a lock on `file` other than through `file` itself, and as what.
pub fn holder(file: &File) -> Holder {
    let own = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()))
        .map(|info| lock_lines(&info))
        .unwrap_or_default();
    file.metadata()
        .ok()
        .and_then(|meta| holder_of(meta.dev(), meta.ino(), &own))
        .unwrap_or(Holder {
            pid: None,
            command: String::new(),
            held_as: HeldAs::Other,
        })
}

/// The first process with an open file on `(dev, ino)` that holds a lock through it (other
/// than the locks in `own`, this open's): its pid, command line and what the lock's range
/// says it holds the file as.
fn holder_of(dev: u64, ino: u64, own: &[String]) -> Option<Holder> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            // `metadata` follows the link to the open file: only this file's descriptors are
            // worth reading the lock lines of.
            let same = std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino);
            if !same {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            let Ok(info) = std::fs::read_to_string(info) else {
                continue;
            };
            let held = lock_lines(&info)
                .into_iter()
                .find(|line| !own.contains(line))
                .and_then(|line| lock_start(&line));
            if let Some(start) = held {
                return Some(Holder {
                    pid: Some(pid),
                    command: command_line(pid),
                    held_as: HeldAs::of_range(start),
                });
            }
        }
    }
    None
}

/// The `lock:` lines of an open file's fdinfo: it shows only the locks held through that
/// open file, e.g. `lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:884743 0 EOF`. (The leading
/// number is dropped: it is the line's position in the kernel's list, not the lock's.)
fn lock_lines(fdinfo: &str) -> Vec<String> {
    fdinfo
        .lines()
        .filter_map(|l| l.strip_prefix("lock:"))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        .collect()
}

/// The first byte of a lock line's range (`OFDLCK ADVISORY WRITE -1 fe:00:884743 0 EOF`).
fn lock_start(line: &str) -> Option<i64> {
    line.split_whitespace().nth(5)?.parse().ok()
}

/// A process's command line with spaces between its arguments, shortened for a message.
fn command_line(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.is_empty() {
        return "command line unknown".to_string();
    }
    let line = words.join(" ");
    if line.chars().count() <= COMMAND_CHARS_MAX {
        return line;
    }
    let cut: String = line.chars().take(COMMAND_CHARS_MAX).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests;
