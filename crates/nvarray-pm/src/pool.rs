//! A pool: the backing file as one byte array, read through a shared mapping and changed by
//! transactions. Opening attaches this process to the pool's NVM-tier file, recovering it
//! first if the last process to use it did not close it cleanly. The state that the pool's
//! handles and background threads share, and what they do with it, is in `pool_state.rs`.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use std::os::fd::AsRawFd as _;

use crate::coord::{self, Liveness, OpenLock};
use crate::error::{io_err, PmError, Result};
use crate::file_identity;
use crate::identity::Identity;
use crate::layout::{self, Layout, ATTACHER, PROCS};
use crate::media::Media;
use crate::options::PoolOptions;
use crate::pool_state::PoolState;
use crate::recovery;
use crate::reports::{RecoveryReport, Stats};
use crate::sim::{SimWorld, Tier};
use crate::space;
use crate::state_key;

/// Largest pool: page numbers must fit the cache index, which keeps `page + 1` in 36 bits, so
/// the last page is 2^36 - 2 (at 2^48 bytes the last page's `page + 1` wrapped to 0, an empty
/// index word).
pub const MAX_POOL: u64 = (1 << 48) - crate::layout::PAGE as u64;

/// An open pool. Share it between threads by reference (it is `Sync`); every thread may run
/// its own transactions.
///
/// Isolation is **read committed** (as in the seed, slide 15): reads through the mapping see
/// only committed data, never another transaction's uncommitted writes; a transaction reads
/// its own writes through `Tx::read`. Writers of the same 4 KiB page are serialised by page
/// locks held to commit (wait-die: an older transaction waits, a younger one gets
/// `PmError::Conflict` and should abort and retry), so the first writer commits first. A read
/// that races a commit may see some of that commit's writes and not yet others.
pub struct Pool {
    inner: Arc<PoolState>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("backing", &self.inner.backing_path)
            .field("nvm", &self.inner.nvm_path)
            .field("size", &self.inner.layout.pool_size_bytes)
            .finish()
    }
}

const BACKING_WHAT: &str = "the pool's file";
const BACKING_HINT: &str = "free space there, or make the pool smaller or put it elsewhere";

/// The NVM-tier file that belongs to the backing file whose key is `key` (`state_key.rs`).
pub fn nvm_file_path(nvm_dir: &Path, key: &str) -> PathBuf {
    nvm_dir.join(format!("nvarray-pm-{:016x}.nvm", layout::backing_id(key)))
}

/// Where the state of the backing file at `canonical` is, and the key it was made for: named
/// by the file's key, or by its canonical path if a state made before keys (by this library's
/// earlier versions, which named states by path) is there and none by key, so a crashed
/// pool's commits are found across the upgrade.
fn state_location(nvm_dir: &Path, canonical: &Path) -> (PathBuf, String) {
    let key = state_key::of(canonical);
    let named = nvm_file_path(nvm_dir, &key);
    let by_path = canonical.to_string_lossy().into_owned();
    let legacy = nvm_file_path(nvm_dir, &by_path);
    if legacy != named && !named.exists() && legacy.exists() {
        (legacy, by_path)
    } else {
        (named, key)
    }
}

/// Opens the backing file; with `create`, makes it if it does not exist. Also says whether
/// this call made it.
pub(crate) fn open_backing(path: &Path, create: bool) -> Result<(File, bool)> {
    let existing = OpenOptions::new().read(true).write(true).open(path);
    match existing {
        Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(f) => Ok((f, true)),
                // Another process made it between the two calls: open theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    open_backing(path, false)
                }
                Err(e) => Err(io_err(path)(e)),
            }
        }
        other => other.map(|f| (f, false)).map_err(io_err(path)),
    }
}

/// How often `attach_state` may find the state file gone or replaced between opening and
/// locking it. Each time needs another process to close the pool (or replace a stale state)
/// at that instant, so a thousand in a row is a bug, not bad luck.
const STATE_ATTEMPTS_MAX: u32 = 1000;

const NVM_WHAT: &str = "the NVM tier (log + cache + header)";
const NVM_HINT: &str = "lower the log or cache size, or choose another NVM directory";

/// What an open does with the state file found at a backing file's path.
enum Verdict {
    /// It is this file's: attach to it (its mapping and layout).
    Use(Media, Layout),
    /// It holds nothing its file lacks (closed cleanly, or empty) and is not in use, but it
    /// is not this file's, or not of this version; or it is this file's but superseded (its
    /// generation is below the file's: the file was written through a newer state since, so
    /// its commits must never be replayed). Remove it and make a new one.
    Replace,
    /// It is another file's, a crashed pool's that needs recovering, and that file is now at
    /// this path (renamed within its directory): move the state to that file's name, as an
    /// open of it would, so this path can have a state of its own.
    Relocate(PathBuf),
}

/// Process ids of the processes attached to the state in `file` (alive by their locks).
pub(crate) fn attached_pids(file: &File, nvm: Option<&Media>) -> Vec<u64> {
    let live = Liveness::new(Some(file), usize::MAX);
    (0..PROCS)
        .filter(|&p| live.alive(p))
        .map(|p| {
            nvm.map_or(0, |m| {
                m.load_word(layout::V_PROCS + p * layout::PROC_BYTES + 8)
            })
        })
        .collect()
}

/// The backing file an open is for: its canonical path, key
/// (`state_key.rs`), identity (`identity.rs`) and state generation (`file_identity.rs`).
struct Backing<'a> {
    canonical: &'a Path,
    key: &'a str,
    identity: Identity,
    generation: u64,
}

/// Decides what to do with the state in `file` (locked, and still at `nvm_path`) for the
/// backing file `b`, whose pool is `size_bytes`. The rules and why are in
/// `file_identity.rs`; a state is the file's by its identity, whatever path or key it was
/// made under (a renamed pool's state follows it: `attach_state`).
fn examine(file: &File, nvm_path: &Path, b: &Backing, size_bytes: u64) -> Result<Verdict> {
    let len = file.metadata().map_err(io_err(nvm_path))?.len();
    if len == 0 {
        // Made and never formatted by an older version that was killed in between.
        return if attached_pids(file, None).is_empty() {
            Ok(Verdict::Replace)
        } else {
            Err(PmError::Corrupt {
                path: nvm_path.to_path_buf(),
                what: "empty, yet processes hold its locks".into(),
            })
        };
    }
    let nvm = Media::nvm(file, nvm_path)?;
    let l = match Layout::from_header(&nvm, nvm_path) {
        Ok(l) => l,
        // An older version's state closed cleanly holds nothing: the file has it all.
        Err(PmError::WrongVersion { found: version, .. })
            if version < layout::VERSION
                && is_clean(&nvm)
                && attached_pids(file, None).is_empty() =>
        {
            return Ok(Verdict::Replace)
        }
        Err(e) => return Err(e),
    };
    let recorded = layout::identity(&nvm);
    if recorded != b.identity {
        return examine_state_of_another_file(file, nvm_path, b, &nvm, recorded);
    }
    let made_at = nvm.load_word(layout::H_GENERATION);
    if made_at != 0 && made_at < b.generation {
        let pids = attached_pids(file, Some(&nvm));
        if !pids.is_empty() {
            let pids: Vec<String> = pids.iter().map(u64::to_string).collect();
            return Err(PmError::Superseded {
                state: nvm_path.to_path_buf(),
                backing: b.canonical.to_path_buf(),
                state_generation: made_at,
                file_generation: b.generation,
                pids: pids.join(", "),
            });
        }
        return Ok(Verdict::Replace);
    }
    if l.pool_size_bytes != size_bytes {
        return Err(PmError::Mismatch {
            path: nvm_path.to_path_buf(),
            what: format!(
                "records a pool of {} bytes but {} is {size_bytes} bytes",
                l.pool_size_bytes,
                b.canonical.display()
            ),
        });
    }
    Ok(Verdict::Use(nvm, l))
}

/// Whether the state mapped in `nvm` was closed cleanly (so it holds nothing its file lacks).
fn is_clean(nvm: &Media) -> bool {
    nvm.len() >= 2 * layout::PAGE && nvm.load_word(layout::H_CLEAN) == 1
}

/// Decides what to do with the state mapped in `nvm` (`examine`'s `file` at `nvm_path`),
/// whose header records another file's identity, `recorded`, than the backing file `b`'s: an
/// error if it is in use or holds commits for a file not found, else replace it, or move it
/// to its renamed file's name.
fn examine_state_of_another_file(
    file: &File,
    nvm_path: &Path,
    b: &Backing,
    nvm: &Media,
    recorded: Identity,
) -> Result<Verdict> {
    let pids = attached_pids(file, Some(nvm));
    if !pids.is_empty() {
        let pids: Vec<String> = pids.iter().map(u64::to_string).collect();
        return Err(PmError::InUseForAnotherFile {
            state: nvm_path.to_path_buf(),
            backing: b.canonical.to_path_buf(),
            pids: pids.join(", "),
        });
    }
    if is_clean(nvm) {
        return Ok(Verdict::Replace);
    }
    let recorded_path = PathBuf::from(layout::backing_path(nvm));
    if let Some(moved) = recorded_path
        .parent()
        .and_then(|dir| file_identity::find_in_directory(dir, &recorded))
    {
        return Ok(Verdict::Relocate(moved));
    }
    // Made for a file of another key whose name hashes alike (the recorded path is the
    // one its maker used, which another mount namespace may not share).
    if nvm.load_word(layout::H_BACKING_ID) != layout::backing_id(b.key) {
        return Err(PmError::Mismatch {
            path: nvm_path.to_path_buf(),
            what: format!(
                "belongs to backing file {}, not {}, and holds commits never written \
                 back",
                recorded_path.display(),
                b.canonical.display()
            ),
        });
    }
    Err(PmError::NotThisPool {
        state: nvm_path.to_path_buf(),
        backing: b.canonical.to_path_buf(),
        recorded,
        found: b.identity,
    })
}

/// Renames the state `from` (whose open lock the caller holds, and which is still there) to
/// `to`, unless something is at `to` already. Atomic: a crash leaves it under one name or the
/// other. Its header keeps the path it was made for; it is found by its identity.
fn rename_state(from: &Path, to: &Path) -> Result<()> {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| PmError::BadOption(format!("{}: NUL in path", p.display())))
    };
    let (from_c, to_c) = (c(from)?, c(to)?);
    // SAFETY: NUL-terminated paths; renameat2 reads them only.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from_c.as_ptr(),
            libc::AT_FDCWD,
            to_c.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        // Another state took that name meanwhile; the caller looks again.
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(io_err(from)(e));
        }
    }
    Ok(())
}

/// Where a state found by its file's identity under another name goes (`attach_state`).
enum Adopted {
    /// Renamed to this file's state name (it was not in use): look there again.
    Renamed,
    /// In use by processes that opened the file under its earlier name: attach to it there.
    InUse(PathBuf),
}

/// Takes over the state at `other`, made for this file under another path (the file was
/// renamed, or is reached through another hard link), for the state name `to`.
fn adopt(other: &Path, to: &Path) -> Result<Adopted> {
    let file = match OpenOptions::new().read(true).write(true).open(other) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Adopted::Renamed),
        Err(e) => return Err(io_err(other)(e)),
    };
    let _lock = OpenLock::take(&file).map_err(io_err(other))?;
    if !file_identity::is_at(&file, other)? {
        return Ok(Adopted::Renamed); // removed or moved meanwhile: look again
    }
    if !attached_pids(&file, None).is_empty() {
        return Ok(Adopted::InUse(other.to_path_buf()));
    }
    rename_state(other, to)?;
    Ok(Adopted::Renamed)
}

/// Makes the state of a new pool at `nvm_path`, whole or not at all: it is formatted in an
/// unnamed file (`O_TMPFILE`) and linked into place only when complete, so a process killed
/// while making it leaves nothing, and no opener ever sees half a header. Another process
/// that links its own first wins; this one then uses theirs.
fn create_state(
    options: &PoolOptions,
    nvm_path: &Path,
    (canonical, key): (&Path, &str),
    layout: &Layout,
    identity: &Identity,
    generation: u64,
) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let nvm_dir = &options.nvm_dir;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(nvm_dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) => PmError::BadOption(format!(
                "{}: its file system cannot make unnamed files (O_TMPFILE), which the NVM \
                 tier needs; use /dev/shm or a DAX-mounted ext4 or XFS",
                nvm_dir.display()
            )),
            _ => io_err(nvm_dir)(e),
        })?;
    space::allocate(
        &file,
        layout.file_len as u64,
        nvm_dir,
        NVM_WHAT,
        NVM_HINT,
        options.faults.as_deref(),
    )?;
    let nvm = Media::nvm(&file, nvm_path)?;
    layout.format(&nvm, canonical, key, identity, generation)?;
    nvm.store_word(layout::H_CLEAN, 1);
    nvm.persist(layout::H_CLEAN, 8);
    drop(nvm);
    let c_path = std::ffi::CString::new(nvm_path.as_os_str().as_encoded_bytes())
        .map_err(|_| PmError::BadOption(format!("{}: NUL in path", nvm_path.display())))?;
    let fd_path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .expect("no NUL in a number");
    // SAFETY: valid fd and NUL-terminated paths. Linking an unnamed file by its /proc entry
    // (AT_SYMLINK_FOLLOW) needs no privilege, unlike AT_EMPTY_PATH.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            fd_path.as_ptr(),
            libc::AT_FDCWD,
            c_path.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(io_err(nvm_path)(e));
        }
    }
    // The new name must be durable before commits go into the file it names (a DAX NVM tier
    // keeps the state across a power cut only if its directory entry survives too).
    File::open(nvm_dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(nvm_dir))
}

/// Removes the state at `nvm_path` if `file` (whose open lock the caller holds) is still the
/// file there. Only a process holding that lock removes a state, and only when none is
/// attached and nothing in it is needed; openers waiting for the lock then find the name
/// gone and make a new state (`attach_state`).
pub(crate) fn remove_state(file: &File, nvm_path: &Path) -> Result<()> {
    if file_identity::is_at(file, nvm_path)? {
        match std::fs::remove_file(nvm_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(nvm_path)(e)),
            _ => {}
        }
    }
    Ok(())
}

/// A state found and locked for attaching: its path, file, open lock, mapping and layout.
/// Gives the backing file `path` (open as `backing`) its pool id and next generation, and
/// makes its state at `nvm_path`, named for `canonical` and `key`, laid out for a pool of
/// `size_bytes`.
fn make_state(
    backing: &File,
    path: &Path,
    nvm_path: &Path,
    (canonical, key): (&Path, &str),
    size_bytes: u64,
    options: &PoolOptions,
) -> Result<()> {
    let id = file_identity::establish(backing, path)?;
    let generation = file_identity::next_generation(backing, path)?;
    let fresh = options.layout_for(size_bytes);
    create_state(options, nvm_path, (canonical, key), &fresh, &id, generation)
}

/// Moves the crashed pool's state in `file` at `nvm_path` to the name of `moved`, the file it
/// was made for, now renamed: refused, as for any crashed pool's state that is not the
/// backing file `b`'s, if that name has a state already.
fn relocate_state(
    file: &File,
    nvm_path: &Path,
    moved: &Path,
    b: &Backing,
    nvm_dir: &Path,
) -> Result<()> {
    let moved_key = state_key::of(&moved.canonicalize().map_err(io_err(moved))?);
    let to = nvm_file_path(nvm_dir, &moved_key);
    if to.exists() {
        // That file has a state already; this one cannot go there. Refuse, as
        // for any crashed pool's state that is not this file's.
        return Err(PmError::NotThisPool {
            state: nvm_path.to_path_buf(),
            backing: b.canonical.to_path_buf(),
            recorded: layout::identity(&Media::nvm(file, nvm_path)?),
            found: b.identity,
        });
    }
    rename_state(nvm_path, &to)
}

/// The size of the pool over the backing file `path` of `len` bytes when `size_bytes` is asked
/// for (0: the file's size): the one that is not 0, or both when they agree.
fn pool_size(path: &Path, len: u64, size_bytes: u64) -> Result<u64> {
    match (len, size_bytes) {
        (0, 0) => Err(PmError::Mismatch {
            path: path.to_path_buf(),
            what: "empty file and no size given".into(),
        }),
        (0, s) => Ok(s),
        (l, 0) => Ok(l),
        (l, s) if l == s => Ok(s),
        (l, s) => Err(PmError::Mismatch {
            path: path.to_path_buf(),
            what: format!("the backing file is {l} bytes, not the {s} bytes asked for"),
        }),
    }
}

type AttachedState = (PathBuf, File, OpenLock, Media, Layout);

/// Finds, or makes, the NVM-tier state of the backing file `backing` (at `path`, canonically
/// `canonical`) and locks it for attaching. A state made for another file is never used, nor
/// one superseded by a newer state of this file (`examine`); one made for this file under
/// another path (renamed, or reached through another hard link) is found by the file's
/// identity and used (`adopt`), so a renamed pool recovers the commits of its last crash.
fn attach_state(
    backing: &File,
    path: &Path,
    canonical: &Path,
    size_bytes: u64,
    options: &PoolOptions,
) -> Result<AttachedState> {
    let (mut nvm_path, key) = state_location(&options.nvm_dir, canonical);
    for _ in 0..STATE_ATTEMPTS_MAX {
        let file = match OpenOptions::new().read(true).write(true).open(&nvm_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // One opener of this file at a time from here (through whichever name): the
                // others then find its state, by name or by identity.
                let _making = coord::MakingLock::take(backing).map_err(io_err(path))?;
                if nvm_path.exists() {
                    continue;
                }
                let found = file_identity::observe(backing, path)?;
                let known = crate::state_names::state_of(&options.nvm_dir, &found, &nvm_path);
                if let Some(other) = known {
                    if let Adopted::InUse(there) = adopt(&other, &nvm_path)? {
                        nvm_path = there;
                    }
                    continue;
                }
                make_state(
                    backing,
                    path,
                    &nvm_path,
                    (canonical, &key),
                    size_bytes,
                    options,
                )?;
                continue;
            }
            Err(e) => return Err(io_err(&nvm_path)(e)),
        };
        let lock = OpenLock::take(&file).map_err(io_err(&nvm_path))?;
        if !file_identity::is_at(&file, &nvm_path)? {
            continue; // removed by the last process to close the pool, after we opened it
        }
        // Looked at only now: a state names a pool id only after the file was given it, so
        // a file that another opener gave its id meanwhile is seen with it.
        let b = Backing {
            canonical,
            key: &key,
            identity: file_identity::observe(backing, path)?,
            generation: file_identity::generation(backing, path)?,
        };
        match examine(&file, &nvm_path, &b, size_bytes)? {
            Verdict::Use(nvm, layout) => return Ok((nvm_path, file, lock, nvm, layout)),
            Verdict::Replace => remove_state(&file, &nvm_path)?,
            Verdict::Relocate(moved) => {
                relocate_state(&file, &nvm_path, &moved, &b, &options.nvm_dir)?;
            }
        }
        // The state at this file's own name was dealt with: look there again.
        (nvm_path, _) = state_location(&options.nvm_dir, canonical);
    }
    Err(PmError::Corrupt {
        path: nvm_path,
        what: format!(
            "removed or replaced by other processes {STATE_ATTEMPTS_MAX} times while this one \
             was opening it"
        ),
    })
}

impl Pool {
    /// Opens the pool over the backing file `path` of `size` bytes, creating the file if
    /// `options.create` and it does not exist (`size` 0 opens an existing file at its size).
    /// Virtual capacity is the backing file's size, which may far exceed the NVM tier's.
    ///
    /// A backing file this call created is removed again if the open fails, so a refused
    /// `nv_allocate(..., NV_CREATE)` leaves nothing behind.
    ///
    /// The NVM-tier state found for the path must have been made for this very file
    /// (`identity.rs`): one left by a crashed pool whose file was since removed, replaced or
    /// copied is `PmError::NotThisPool`, and the file is not written. Every block of the
    /// backing file is reserved (`space.rs`): a file system without room is
    /// `PmError::NoSpace`. The log and cache are cut to what the pool can use
    /// (`PoolOptions::layout_for`).
    pub fn open(path: impl AsRef<Path>, size_bytes: u64, options: &PoolOptions) -> Result<Pool> {
        options.validate()?;
        let path = path.as_ref();
        let (backing, created) = open_backing(path, options.create)?;
        let opened = Pool::open_over(backing, path, size_bytes, options);
        if opened.is_err() && created {
            let _ = std::fs::remove_file(path);
        }
        opened
    }

    fn open_over(
        backing: File,
        path: &Path,
        size_bytes: u64,
        options: &PoolOptions,
    ) -> Result<Pool> {
        // Before anything reads or sizes the file: a device on it would overwrite the pool and
        // the pool the device (`nvarray-owner`); the pool's own processes share it. The lock
        // lasts as long as `backing`, which the storage mapping keeps.
        nvarray_owner::claim(&backing, nvarray_owner::Role::Pool).map_err(|refused| {
            PmError::Owned {
                path: path.to_path_buf(),
                why: refused.to_string(),
            }
        })?;
        let len = backing.metadata().map_err(io_err(path))?.len();
        let size_bytes = pool_size(path, len, size_bytes)?;
        check_pool_size(path, size_bytes)?;
        let canonical = path.canonicalize().map_err(io_err(path))?;
        let (nvm_path, nvm_file, open_lock, nvm, layout) =
            attach_state(&backing, path, &canonical, size_bytes, options)?;
        // The state is this file's: only now may the file change. Its blocks are reserved
        // (`space.rs`), so a full file system is an error here, not a SIGBUS later.
        let faults = options.faults.as_deref();
        if let Err(e) = space::allocate(
            &backing,
            size_bytes,
            path,
            BACKING_WHAT,
            BACKING_HINT,
            faults,
        ) {
            if len == 0 {
                let _ = backing.set_len(0);
            }
            if attached_pids(&nvm_file, None).is_empty() && nvm.load_word(layout::H_CLEAN) == 1 {
                let _ = remove_state(&nvm_file, &nvm_path);
            }
            return Err(e);
        }
        let storage = Media::storage(backing, path, options.faults.clone())?;
        let first = !(0..PROCS).any(|p| Liveness::new(Some(&nvm_file), usize::MAX).alive(p));
        let live = Liveness::attaching(&nvm_file);
        let mut inner = PoolState {
            live,
            nvm,
            storage,
            layout,
            nvm_path,
            backing_path: canonical,
            nvm_file: Some(nvm_file),
            persist_ns: options.persist_cost_ns()?,
            opts: options.clone(),
            recovery: None,
        };
        let me = Pool::claim_process_slot(&mut inner, first)?;
        let pool = Pool::attach(inner, first, me);
        drop(open_lock);
        pool
    }

    /// Takes a process slot: one no process left state in if there is one (the usual case),
    /// else the slot of a dead process, reaped first. Called under the open lock, so no other
    /// process attaches meanwhile.
    ///
    /// The reaping is done under the attacher's own number (`layout::ATTACHER`, whose
    /// liveness byte this process holds meanwhile), never under the dead slot's: a reaper
    /// acting as the dead process holds the maintenance lock as the dead process, every other
    /// process sees that holder dead and takes the lock from it, and two processes change the
    /// cache at once (issue 55; `coord.rs`, the test
    /// `a_lock_held_by_the_attacher_is_not_taken_from_it`).
    fn claim_process_slot(inner: &mut PoolState, first: bool) -> Result<usize> {
        let file = inner
            .nvm_file
            .as_ref()
            .expect("a pool over files")
            .try_clone()
            .map_err(io_err(&inner.nvm_path))?;
        for p in 0..PROCS {
            let clean = first || inner.proc_state(p).load(Ordering::Acquire) == 0;
            if clean && coord::claim_liveness(&file, p) {
                inner.live.hold(p);
                inner.take_over_locks_of_dead(p);
                return Ok(p);
            }
        }
        if !coord::claim_liveness(&file, ATTACHER) {
            return Err(PmError::Corrupt {
                path: inner.nvm_path.clone(),
                what: "another process holds the attacher's liveness lock, though this one \
                       holds the open lock"
                    .into(),
            });
        }
        inner.live.hold(ATTACHER);
        inner.take_over_locks_of_dead(ATTACHER);
        let taken = (|| {
            for p in 0..PROCS {
                if inner.live.alive(p) {
                    continue;
                }
                inner.reap(p)?;
                if coord::claim_liveness(&file, p) {
                    return Ok(Some(p));
                }
            }
            Ok(None)
        })();
        coord::release_liveness(&file, ATTACHER);
        match taken? {
            Some(p) => {
                inner.live.hold(p);
                inner.take_over_locks_of_dead(p);
                Ok(p)
            }
            None => Err(PmError::NoProcessSlot(PROCS)),
        }
    }

    /// A pool over simulated tiers (crash tests). `world` holds both tiers' bytes; a fresh
    /// world (all zeros) is formatted, anything else is recovered like a crashed pool.
    pub fn open_simulated(
        world: Arc<SimWorld>,
        size_bytes: u64,
        options: &PoolOptions,
    ) -> Result<Pool> {
        options.validate()?;
        let nvm = Media::simulated(world.clone(), Tier::Nvm);
        let storage = Media::simulated(world, Tier::Storage);
        let path = PathBuf::from("<simulated nvm>");
        let layout = if nvm.load_word(0) == 0 {
            let l = options.layout_for(size_bytes);
            let storage = "<simulated storage>";
            l.format(&nvm, Path::new(storage), storage, &Identity::default(), 0)?;
            nvm.store_word(layout::H_CLEAN, 1);
            nvm.persist(layout::H_CLEAN, 8);
            l
        } else {
            Layout::from_header(&nvm, &path)?
        };
        let inner = PoolState {
            live: Liveness::new(None, 0),
            nvm,
            storage,
            layout,
            nvm_path: path,
            backing_path: PathBuf::from("<simulated storage>"),
            nvm_file: None,
            persist_ns: 0,
            opts: PoolOptions {
                background: false,
                ..options.clone()
            },
            recovery: None,
        };
        Pool::attach(inner, true, 0)
    }

    /// Sizes of both simulated tiers for a pool of `size_bytes` bytes with these options.
    pub fn simulated_sizes(size_bytes: u64, options: &PoolOptions) -> (usize, usize) {
        let l = options.layout_for(size_bytes);
        (l.file_len, size_bytes as usize)
    }

    /// Second half of opening: recovery if first, the process slot, the background threads.
    fn attach(mut inner: PoolState, first: bool, me: usize) -> Result<Pool> {
        if first {
            if inner.nvm.load_word(layout::H_CLEAN) == 0 {
                inner.recovery = Some(recovery::recover(&inner)?);
            }
            recovery::reset_shared(&inner);
            inner.nvm.store_word(layout::H_CLEAN, 0);
            inner.nvm.persist(layout::H_CLEAN, 8);
        }
        inner.proc_state(me).store(1, Ordering::Release);
        inner
            .proc_pid(me)
            .store(std::process::id() as u64, Ordering::Relaxed);
        let inner = Arc::new(inner);
        if !first {
            // Slots of processes that died while others stayed attached.
            for p in (0..PROCS).filter(|&p| p != me) {
                if inner.proc_state(p).load(Ordering::Acquire) != 0 && !inner.live.alive(p) {
                    inner.reap(p)?;
                }
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let threads = if inner.opts.background {
            crate::background::spawn(&inner, &stop)
        } else {
            Vec::new()
        };
        Ok(Pool {
            inner,
            stop,
            threads,
            closed: false,
        })
    }

    /// Virtual capacity in bytes.
    pub fn size(&self) -> u64 {
        self.inner.layout.pool_size_bytes
    }

    /// The start of the mapping. Bytes `[0, size)` may be read through it (committed data,
    /// read-committed); never write through it — write in a transaction.
    pub fn as_ptr(&self) -> *const u8 {
        self.inner.storage.base()
    }

    /// Faults both tiers in, writable, without changing a byte (`MADV_POPULATE_WRITE`, Linux
    /// 5.14+; older kernels fault the backing mapping in readable only). Benchmarks call it so
    /// they time transactions, not first-touch page faults, which NVM does not have.
    pub fn prefault(&self) {
        for m in [&self.inner.nvm, &self.inner.storage] {
            // SAFETY: the range is exactly the tier's mapping, alive as long as `self`.
            unsafe { crate::media::prefault(m.base(), m.len()) };
        }
    }

    /// Copies committed bytes at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        self.inner.storage.read(offset as usize, buf);
        Ok(())
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(PmError::OutOfRange {
                offset,
                len,
                size: self.size(),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<PoolState> {
        &self.inner
    }

    /// Counters shared by every process attached to the pool.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// What recovery did when this process opened the pool, if it ran.
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.inner.recovery.as_ref()
    }

    /// The NVM-tier file of this pool.
    pub fn nvm_path(&self) -> &Path {
        &self.inner.nvm_path
    }

    /// Cost of one persist barrier in nanoseconds.
    pub fn persist_cost_ns(&self) -> u64 {
        self.inner.persist_ns
    }

    /// Does the background threads' work now: applies the whole log to the cache and writes
    /// back if the dirty fraction is over the threshold.
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain(false)
    }

    /// Applies the whole log and writes every dirty page back: the backing file alone then
    /// holds every committed byte.
    pub fn sync(&self) -> Result<()> {
        self.inner.maintain(true)
    }

    /// Detaches. The last process to detach applies the log, writes everything back and marks
    /// the pool clean, so the next open needs no recovery.
    pub fn close(mut self) -> Result<()> {
        self.detach()
    }

    fn detach(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
        let inner = &self.inner;
        let me = inner.live.me();
        let Some(file) = inner.nvm_file.as_ref() else {
            // A simulated pool: one process, the last.
            return inner.maintain(true).map(|_| mark_clean(inner));
        };
        let _open = OpenLock::take(file).map_err(io_err(&inner.nvm_path))?;
        let last = !(0..PROCS).any(|p| p != me && inner.live.alive(p));
        let result = if last {
            inner.maintain(true).map(|_| mark_clean(inner))
        } else {
            Ok(())
        };
        inner.proc_state(me).store(0, Ordering::Release);
        coord::release_liveness(file, me);
        // Closed cleanly, the state holds nothing the backing file lacks: remove it, so that
        // NVM-tier files live only while their pool is open or needs recovery. (The next
        // open makes a fresh one; one already waiting for the lock sees the name gone.)
        // Failing to remove it is no failure of the close: a clean state left behind is
        // replaced by the next open, or removed by `nvarray pm clean`.
        if last && result.is_ok() {
            let _ = remove_state(file, &inner.nvm_path);
        }
        result
    }
}

/// Marks the pool clean after `maintain(true)`.
fn mark_clean(inner: &PoolState) {
    // Clean means the backing file alone holds every commit: the next open skips
    // recovery, so a record left in the log or a dirty cache page would be lost.
    debug_assert_eq!(
        inner.nvm.load_word(layout::H_LOG_HEAD),
        inner.tail().load(Ordering::Acquire),
        "marking the pool clean: expected the log applied (head at the tail), found \
         head {} and tail {}",
        inner.nvm.load_word(layout::H_LOG_HEAD),
        inner.tail().load(Ordering::Acquire)
    );
    debug_assert!(
        (0..inner.layout.cache_pages).all(|s| !crate::cache::is_dirty(inner.dir(s))),
        "marking the pool clean: expected no dirty cache page, found slot {:?} dirty",
        (0..inner.layout.cache_pages).find(|&s| crate::cache::is_dirty(inner.dir(s)))
    );
    inner.nvm.store_word(layout::H_CLEAN, 1);
    inner.nvm.persist(layout::H_CLEAN, 8);
}

fn check_pool_size(path: &Path, size: u64) -> Result<()> {
    if size > MAX_POOL {
        return Err(PmError::Mismatch {
            path: path.to_path_buf(),
            what: format!("{size} bytes is more than the largest pool ({MAX_POOL} bytes)"),
        });
    }
    Ok(())
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            eprintln!(
                "nvarray-pm: closing {}: {e}",
                self.inner.backing_path.display()
            );
        }
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;
    use std::time::Duration;

    /// A process that died holding the log lock leaves the lock word with its slot's number
    /// (+1), and reaping its slot frees the slot but not that word. The next process to
    /// take the slot holds its liveness lock, so before issue 55 that word read as its own,
    /// held by a live process: its first commit waited on itself until the timeout. Now a
    /// slot's taker takes over what its dead predecessor held (`take_over_locks_of_dead`).
    #[test]
    fn a_slot_whose_dead_holder_kept_the_log_lock_is_taken_over_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pool");
        let options = PoolOptions {
            nvm_dir: dir.path().to_path_buf(),
            log_size_bytes: 64 << 10,
            cache_size_bytes: 64 << 10,
            persist_ns: Some(0),
            timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let a = Pool::open(
            &path,
            1 << 20,
            &PoolOptions {
                create: true,
                ..options.clone()
            },
        )
        .unwrap();
        // A process in slot 1 died holding the log lock: its marks, without its liveness lock.
        a.inner().proc_state(1).store(1, Ordering::Release);
        a.inner()
            .nvm
            .word(layout::V_LOG_LOCK)
            .store(2, Ordering::Release);
        // The next process takes slot 2 and reaps slot 1; the one after takes slot 1.
        let b = Pool::open(&path, 0, &options).unwrap();
        assert_eq!(b.inner().live.me(), 2);
        assert_eq!(a.inner().proc_state(1).load(Ordering::Acquire), 0);
        let c = Pool::open(&path, 0, &options).unwrap();
        assert_eq!(c.inner().live.me(), 1);
        let mut tx = c.begin().unwrap();
        tx.write(0, b"taken over").unwrap();
        tx.commit().expect("a commit in the taken-over slot");
        let mut buf = [0u8; 10];
        a.read(0, &mut buf).unwrap();
        assert_eq!(&buf, b"taken over");
        for p in [c, b, a] {
            p.close().unwrap();
        }
    }
}
