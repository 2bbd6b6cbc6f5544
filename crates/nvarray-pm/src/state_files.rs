//! The NVM-tier state files in a directory, what each is for, and removing those no pool
//! needs (`nvarray pm list`, `nvarray pm clean`).
//!
//! A state file lives while its pool is open and is removed by the last process to close it
//! cleanly (`Pool::close`). What stays behind is a pool's state whose last process died: the
//! next open of that pool recovers it; but if its file was removed or replaced since, no open
//! ever will, and the state (the NVM tier is memory, with `/dev/shm`) stays until someone
//! removes it. These functions tell those apart and remove only what cannot be needed, under
//! the state's open lock, so no process attaches while it goes.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::coord::OpenLock;
use crate::error::{io_err, PmError, Result};
use crate::file_identity;
use crate::identity::Identity;
use crate::layout::{self, Layout};
use crate::media::Media;
use crate::pool::{attached_pids, remove_state};
use crate::state_names::is_state_name;

/// A state file and what it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFile {
    pub path: PathBuf,
    /// Bytes the file occupies (memory, on tmpfs).
    pub allocated_bytes: u64,
    /// The pool's file it was made for, as its header records it (none if unreadable).
    pub backing: Option<PathBuf>,
    pub pool_size_bytes: Option<u64>,
    pub status: StateStatus,
}

/// What a state file is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateStatus {
    /// Processes (these pids) have its pool open.
    InUse(Vec<u64>),
    /// Its pool's last process died; its pool's file is there, and the next open of the pool
    /// recovers it. Never removed here.
    NeedsRecovery,
    /// Its pool's file was renamed within its directory and is now at `to`; the next open of
    /// it there uses this state (recovering it if `unapplied`). Removed here only if clean.
    Moved { to: PathBuf, unapplied: bool },
    /// Its pool's file has been written through a newer state since (opened with another NVM
    /// directory): what this one holds is older than the file and is never replayed; the
    /// next open of the file discards it.
    Superseded { why: String },
    /// Closed cleanly (or empty) and not in use: it holds nothing its pool's file lacks. Left
    /// by an older version, or by a process killed while closing.
    Clean,
    /// Its pool's file is gone, or another file has its path now: no open will ever use it.
    /// `unapplied`: it was not closed cleanly, so it may hold commits never written back
    /// (lost with the file they belonged to).
    Orphan { why: String, unapplied: bool },
    /// Not understood: a damaged header, another version, a pool's file that cannot be
    /// checked. It may hold anything.
    Unreadable(String),
}

impl StateStatus {
    /// Whether `remove_state_file` removes a state in this status: never one in use or
    /// needing recovery; one that may hold commits only when told to discard them.
    pub fn removable(&self, discard_commits: bool) -> bool {
        match self {
            StateStatus::InUse(_) | StateStatus::NeedsRecovery => false,
            StateStatus::Moved { unapplied, .. } => !unapplied,
            StateStatus::Clean | StateStatus::Superseded { .. } => true,
            StateStatus::Orphan { unapplied, .. } => !unapplied || discard_commits,
            StateStatus::Unreadable(_) => discard_commits,
        }
    }
}

impl std::fmt::Display for StateStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateStatus::InUse(pids) => {
                let pids: Vec<String> = pids.iter().map(u64::to_string).collect();
                write!(f, "in use by process {}", pids.join(", "))
            }
            StateStatus::NeedsRecovery => write!(
                f,
                "its pool's last process died; the next open of the pool recovers it"
            ),
            StateStatus::Moved { to, unapplied } => {
                write!(f, "its pool's file was renamed to {}", to.display())?;
                if *unapplied {
                    write!(f, "; the next open of it there recovers this state")
                } else {
                    write!(f, "; closed cleanly, not needed")
                }
            }
            StateStatus::Superseded { why } => write!(
                f,
                "superseded: {why}; what it holds is older than the file and is never \
                 replayed (the next open of the file discards it)"
            ),
            StateStatus::Clean => write!(f, "closed cleanly, not needed"),
            StateStatus::Orphan { why, unapplied } => {
                write!(f, "orphan: {why}")?;
                if *unapplied {
                    write!(f, "; may hold commits never written back")?;
                }
                Ok(())
            }
            StateStatus::Unreadable(why) => write!(f, "unreadable: {why}"),
        }
    }
}

/// Every state file in `nvm_dir`, in name order.
pub fn list_state_files(nvm_dir: &Path) -> Result<Vec<StateFile>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(nvm_dir)
        .map_err(io_err(nvm_dir))?
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(is_state_name))
        .map(|e| e.path())
        .collect();
    paths.sort();
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        match open_state(&path) {
            Ok(file) => out.push(describe(&file, &path)?),
            // Removed by its pool's last close since the directory was read.
            Err(PmError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => out.push(StateFile {
                path,
                allocated_bytes: 0,
                backing: None,
                pool_size_bytes: None,
                status: StateStatus::Unreadable(e.to_string()),
            }),
        }
    }
    Ok(out)
}

/// The state file at `path` and what it is for.
pub fn state_file(path: &Path) -> Result<StateFile> {
    check_name(path)?;
    describe(&open_state(path)?, path)
}

/// Removes the state file at `path` if its status allows (`StateStatus::removable`), and
/// says what it was. Checked again under the state's open lock, so no process can attach
/// to it meanwhile; a refusal names the status.
pub fn remove_state_file(path: &Path, discard_commits: bool) -> Result<StateFile> {
    check_name(path)?;
    let file = open_state(path)?;
    let _lock = OpenLock::take(&file).map_err(io_err(path))?;
    let state = describe(&file, path)?;
    if !state.status.removable(discard_commits) {
        let advice = match state.status {
            StateStatus::Orphan { .. } | StateStatus::Unreadable(_) => {
                "; remove it anyway with --discard-commits"
            }
            _ => "",
        };
        return Err(PmError::StateKept {
            path: path.to_path_buf(),
            why: format!("{}{advice}", state.status),
        });
    }
    remove_state(&file, path)?;
    Ok(state)
}

fn check_name(path: &Path) -> Result<()> {
    let name_ok = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_state_name);
    if !name_ok {
        return Err(PmError::Mismatch {
            path: path.to_path_buf(),
            what: "not an nvarray-pm state file (they are named nvarray-pm-<16 hex digits>.nvm)"
                .into(),
        });
    }
    Ok(())
}

fn open_state(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err(path))
}

/// What the state in `file` (at `path`) is for. Reads only.
fn describe(file: &File, path: &Path) -> Result<StateFile> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata().map_err(io_err(path))?;
    let mut state = StateFile {
        path: path.to_path_buf(),
        allocated_bytes: meta.blocks().saturating_mul(512),
        backing: None,
        pool_size_bytes: None,
        status: StateStatus::Clean,
    };
    if meta.len() == 0 {
        let pids = attached_pids(file, None);
        if !pids.is_empty() {
            state.status = StateStatus::InUse(pids);
        }
        return Ok(state);
    }
    let nvm = Media::nvm(file, path)?;
    let pids = attached_pids(file, Some(&nvm));
    let clean = nvm.len() >= 2 * layout::PAGE && nvm.load_word(layout::H_CLEAN) == 1;
    state.status = match Layout::from_header(&nvm, path) {
        _ if !pids.is_empty() => StateStatus::InUse(pids),
        Err(PmError::WrongVersion { .. }) if clean => StateStatus::Clean,
        Err(e) => StateStatus::Unreadable(e.to_string()),
        Ok(l) => {
            let backing = PathBuf::from(layout::backing_path(&nvm));
            state.pool_size_bytes = Some(l.pool_size_bytes);
            state.backing = Some(backing.clone());
            let generation = nvm.load_word(layout::H_GENERATION);
            pool_file_status(&backing, &layout::identity(&nvm), generation, clean)
        }
    };
    Ok(state)
}

/// The status of a readable state not in use, from its pool's file: at the path it was made
/// for, or renamed within that directory (found by its identity).
fn pool_file_status(
    backing: &Path,
    recorded: &Identity,
    generation: u64,
    clean: bool,
) -> StateStatus {
    use std::os::unix::fs::OpenOptionsExt as _;
    let open = |path: &Path| {
        // Without waiting: something other than a regular file (a FIFO) may have its path.
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err(path))
    };
    let found = open(backing).and_then(|f| file_identity::observe(&f, backing));
    let gone = match found {
        Err(PmError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            format!("its pool's file {} no longer exists", backing.display())
        }
        Err(e) => return StateStatus::Unreadable(format!("cannot check its pool's file: {e}")),
        Ok(found) if found != *recorded => format!(
            "the file at {} is not its pool any more (removed, replaced or copied)",
            backing.display()
        ),
        Ok(_) => return judged(backing, backing, generation, clean, false),
    };
    match backing
        .parent()
        .and_then(|dir| file_identity::find_in_directory(dir, recorded))
    {
        Some(moved) => judged(backing, &moved, generation, clean, true),
        None => StateStatus::Orphan {
            why: format!("{gone}, nor is it elsewhere in that directory"),
            unapplied: !clean,
        },
    }
}

/// The status of a state whose pool's file (made at `made_for`) is at `now`.
fn judged(made_for: &Path, now: &Path, generation: u64, clean: bool, moved: bool) -> StateStatus {
    let file_generation = File::open(now)
        .ok()
        .and_then(|f| file_identity::generation(&f, now).ok())
        .unwrap_or(0);
    if generation != 0 && generation < file_generation {
        return StateStatus::Superseded {
            why: format!(
                "its pool's file {} has been written through a newer state since (this one \
                 is generation {generation}, the file is at {file_generation})",
                now.display()
            ),
        };
    }
    match (moved, clean) {
        (true, _) => StateStatus::Moved {
            to: now.to_path_buf(),
            unapplied: !clean,
        },
        (false, true) => StateStatus::Clean,
        (false, false) => {
            debug_assert_eq!(made_for, now);
            StateStatus::NeedsRecovery
        }
    }
}
