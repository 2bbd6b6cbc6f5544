//! Coordination between the processes (and threads) that share a pool: which processes are
//! alive, robust locks that a dead holder cannot keep forever, transaction slots, and the
//! page locks that serialise writers of the same bytes.
//!
//! Liveness is the kernel's, not a guess from a pid: each process holds an open-file-description
//! lock (`F_OFD_SETLK`) on one byte of the NVM file per process slot, far past its end. The
//! kernel drops it when the process dies however it dies, so `F_OFD_GETLK` on that byte tells
//! another process whether the slot's owner is still there (pids can be reused; these locks
//! cannot outlive their owner).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{PmError, Result};
use crate::layout::ATTACHER;

/// Byte offset of process slot 0's liveness lock in the NVM file (`nvarray-owner` reads it
/// to name a state's holder).
const LIVENESS_BASE: i64 = nvarray_owner::STATE_LIVENESS_BASE;

/// Who is alive, seen from one attached process.
pub(crate) struct Liveness {
    fd: Option<i32>,
    me: usize,
    /// Whether this process holds slot `me`'s lock yet (a process attaching holds none until
    /// it takes the attacher's or a slot's).
    holds: bool,
}

impl Liveness {
    /// Liveness through `file`'s locks, for the process that holds slot `me`.
    pub fn new(file: Option<&File>, me: usize) -> Liveness {
        Liveness {
            fd: file.map(|f| f.as_raw_fd()),
            me,
            holds: true,
        }
    }

    /// A process not attached yet: it acts under no number any lock word holds.
    pub fn attaching(file: &File) -> Liveness {
        Liveness {
            fd: Some(file.as_raw_fd()),
            me: usize::MAX,
            holds: false,
        }
    }

    /// This process now holds slot `me`'s lock (taken with `claim_liveness`).
    pub fn hold(&mut self, me: usize) {
        self.me = me;
        self.holds = true;
    }

    pub fn me(&self) -> usize {
        self.me
    }

    /// Whether the process in slot `slot` is alive. Without a file (simulated pools, one
    /// process) everyone is.
    pub fn alive(&self, slot: usize) -> bool {
        // Slots come from lock and owner words (holder + 1); one out of range means a
        // damaged shared word, whose liveness byte nobody ever locks.
        debug_assert!(
            slot <= ATTACHER,
            "process slot out of range: expected at most {ATTACHER} (the attacher's), found \
             {slot}"
        );
        let Some(fd) = self.fd else { return true };
        if slot == self.me && self.holds {
            return true; // our own lock: F_OFD_GETLK would not report it
        }
        let mut fl = flock(libc::F_WRLCK as i16, slot);
        // SAFETY: `fd` is the pool's open NVM file; `fl` is a valid flock.
        let rc = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) };
        // If we cannot ask, assume alive: waiting is safe, stealing from the living is not.
        rc != 0 || fl.l_type != libc::F_UNLCK as i16
    }
}

fn flock(kind: i16, slot: usize) -> libc::flock {
    byte_lock(kind, LIVENESS_BASE + slot as i64)
}

/// Takes the liveness lock of `slot` without waiting; false if another process holds it.
pub(crate) fn claim_liveness(file: &File, slot: usize) -> bool {
    let fl = flock(libc::F_WRLCK as i16, slot);
    // SAFETY: valid fd and flock.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) == 0 }
}

pub(crate) fn release_liveness(file: &File, slot: usize) {
    let fl = flock(libc::F_UNLCK as i16, slot);
    // SAFETY: valid fd and flock. Failure leaves the lock to be dropped at close.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
}

/// `flock(2)` on the NVM file: held exclusively while a process attaches or detaches, and
/// by whoever removes the file (`pool.rs`). Holds its own handle on the file's open file
/// description, so the file it was taken through may move on.
pub(crate) struct OpenLock(File);

impl OpenLock {
    pub fn take(file: &File) -> std::io::Result<OpenLock> {
        let file = file.try_clone()?;
        loop {
            // SAFETY: valid fd.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(OpenLock(file));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for OpenLock {
    fn drop(&mut self) {
        // SAFETY: valid fd.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A write lock on one byte of a pool's file (`nvarray_owner::POOL_MAKING_BYTE`), held while
/// its opener makes the file's state: openers of one file through any of its names take turns
/// there, so only one makes a state and takes a generation for it (`pool.rs`). Waits for the
/// lock; released when dropped.
pub(crate) struct MakingLock<'a>(&'a File);

impl<'a> MakingLock<'a> {
    pub fn take(file: &'a File) -> std::io::Result<MakingLock<'a>> {
        let fl = byte_lock(libc::F_WRLCK as i16, nvarray_owner::POOL_MAKING_BYTE);
        loop {
            // SAFETY: valid fd and flock; F_OFD_SETLKW waits for the lock.
            if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &fl) } == 0 {
                return Ok(MakingLock(file));
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for MakingLock<'_> {
    fn drop(&mut self) {
        let fl = byte_lock(libc::F_UNLCK as i16, nvarray_owner::POOL_MAKING_BYTE);
        // SAFETY: valid fd and flock. Failure leaves the lock to be dropped at close.
        unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    }
}

fn byte_lock(kind: i16, byte: i64) -> libc::flock {
    // SAFETY: flock is plain old data; zero is a valid value for every field.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = byte;
    fl.l_len = 1;
    fl
}

/// Backs off while waiting: spins first (hand-offs between cores take ~0.1 µs), then yields.
/// The clock is read only once waiting outlasts the spins: most waits end before that, and a
/// clock read per lock taken was a measurable share of a small commit.
pub(crate) struct Waiter {
    spins: u32,
    started: Option<Instant>,
    timeout: Duration,
}

impl Waiter {
    pub fn new(timeout: Duration) -> Waiter {
        Waiter {
            spins: 0,
            started: None,
            timeout,
        }
    }

    /// Waits a little. Returns true every 256 calls, when a caller should check liveness.
    pub fn pause(&mut self, what: &'static str) -> Result<bool> {
        if !self.pause_forever() {
            return Ok(false);
        }
        let started = *self.started.get_or_insert_with(Instant::now);
        if started.elapsed() > self.timeout {
            return Err(PmError::Timeout {
                what,
                waited_ms: started.elapsed().as_millis() as u64,
            });
        }
        Ok(true)
    }

    /// Waits a little, with no time limit. Returns true every 256 calls.
    pub fn pause_forever(&mut self) -> bool {
        self.spins = self.spins.wrapping_add(1);
        if self.spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        self.spins.is_multiple_of(256)
    }
}

/// How a robust lock was obtained.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    Free,
    /// Taken from a dead process: what it protected may be half done.
    FromDead(usize),
}

/// A lock word shared by processes: 0 free, else the holder's process slot + 1.
pub(crate) fn lock_robust(
    word: &AtomicU64,
    live: &Liveness,
    timeout: Duration,
    what: &'static str,
) -> Result<Acquired> {
    let me = live.me() as u64 + 1;
    let mut w = Waiter::new(timeout);
    loop {
        match word.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Ok(Acquired::Free),
            Err(0) => continue,
            Err(holder) => {
                if w.pause(what)? && !live.alive(holder as usize - 1) {
                    let stolen = word
                        .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok();
                    if stolen {
                        return Ok(Acquired::FromDead(holder as usize - 1));
                    }
                }
            }
        }
    }
}

/// Takes the lock if it is free (or its holder is dead) without waiting.
pub(crate) fn try_lock_robust(word: &AtomicU64, live: &Liveness) -> Option<Acquired> {
    let me = live.me() as u64 + 1;
    match word.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
        Ok(_) => Some(Acquired::Free),
        Err(holder) if holder != me && !live.alive(holder as usize - 1) => word
            .compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Acquired::FromDead(holder as usize - 1)),
        Err(_) => None,
    }
}

/// Releases a robust lock held as `me` (holder + 1). Only if it is still `me`'s: a lock taken
/// from a holder thought dead belongs to its taker now, and must not be freed under it.
pub(crate) fn unlock_robust(word: &AtomicU64, me: u64) {
    let _ = word.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
}

/// The lock word a page hashes to.
pub(crate) fn page_lock_index(page: u64) -> usize {
    (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - 16)) as usize
}

#[cfg(test)]
mod tests {
    //! The slot protocol's interleavings, step by step. Two opens of one file are two open
    //! file descriptions, whose OFD locks exclude each other as two processes' do, so one
    //! test process plays every process.

    use super::*;

    fn opened(path: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    }

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// Issue 55's suspicion, shown: a process that acts under a dead slot's number without
    /// holding that slot's liveness lock (as `claim_process_slot` reaped, before the fix)
    /// holds a robust lock that any other process may take "from the dead" at once, so two
    /// processes hold it; and its release then frees the other's.
    #[test]
    fn a_lock_held_under_a_number_nobody_holds_is_taken_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        std::fs::write(&path, b"").unwrap();
        let (reaper_file, other_file) = (opened(&path), opened(&path));
        let word = AtomicU64::new(0);
        // The reaper acts as dead slot 3 without its liveness lock.
        let mut reaper = Liveness::attaching(&reaper_file);
        reaper.me = 3;
        assert_eq!(
            lock_robust(&word, &reaper, TIMEOUT, "test").unwrap(),
            Acquired::Free
        );
        // Another attached process, slot 5.
        assert!(claim_liveness(&other_file, 5));
        let mut other = Liveness::new(Some(&other_file), 5);
        other.hold(5);
        assert_eq!(try_lock_robust(&word, &other), Some(Acquired::FromDead(3)));
        assert_eq!(word.load(Ordering::SeqCst), 6, "the other holds it too now");
        // (A release stores 0 only over its own number, so the reaper's leaves the other's.)
        unlock_robust(&word, 4);
        assert_eq!(word.load(Ordering::SeqCst), 6);
    }

    /// The fix: the process attaching reaps under the attacher's number, whose liveness lock
    /// it holds; no other process takes a lock it holds, and once it is gone (its lock
    /// dropped, as the kernel drops a dead process's) one does, from the dead.
    #[test]
    fn a_lock_held_by_the_attacher_is_not_taken_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        std::fs::write(&path, b"").unwrap();
        let (attacher_file, other_file) = (opened(&path), opened(&path));
        let word = AtomicU64::new(0);
        assert!(claim_liveness(&attacher_file, ATTACHER));
        let mut attacher = Liveness::attaching(&attacher_file);
        attacher.hold(ATTACHER);
        assert_eq!(
            lock_robust(&word, &attacher, TIMEOUT, "test").unwrap(),
            Acquired::Free
        );
        assert!(claim_liveness(&other_file, 5));
        let mut other = Liveness::new(Some(&other_file), 5);
        other.hold(5);
        assert_eq!(try_lock_robust(&word, &other), None);
        assert_eq!(word.load(Ordering::SeqCst), ATTACHER as u64 + 1);
        // The attacher dies holding it.
        drop(attacher_file);
        assert_eq!(
            try_lock_robust(&word, &other),
            Some(Acquired::FromDead(ATTACHER))
        );
    }
}
