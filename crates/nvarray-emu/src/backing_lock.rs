//! The exclusive lock a file-backed device holds on its backing file, so that two devices
//! never share one file. Two of them (two `serve`, two `mount`, or a `bench` beside either)
//! would each keep their own idea of what the file holds and overwrite the other's writes
//! unseen: ext4 through two loop devices over two mounts of one file lost every file written
//! through one side.
//!
//! It is an open file description lock (`F_OFD_SETLK`, a write lock over the whole file): it
//! belongs to the open file, so it lasts exactly as long as the device's `File` and mapping,
//! and the kernel drops it when the process dies, `kill -9` included. A second open of the
//! same file conflicts with it whether it is in another process or in this one.
//!
//! The kernel does not say who holds an OFD lock (`F_OFD_GETLK` and `/proc/locks` give pid
//! -1), so the holder is looked up in `/proc/PID/fdinfo/FD`, whose `lock:` lines list the locks
//! held through each open file, under the PID that holds it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// Longest command line quoted in a message about the holder.
const COMMAND_CHARS_MAX: usize = 200;

/// Takes the exclusive lock on `file`, without waiting. `Ok(false)` when another open file
/// holds a lock on it.
pub(crate) fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: an all-zero `flock` is a valid value of this plain C struct.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    // Start 0, length 0: the whole file, however it grows. `l_pid` must be 0 for OFD locks.
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

/// Who holds a lock on `file`, in words: "process PID (COMMAND LINE)", or what can be said
/// when no visible process holds it (one in another PID namespace, or one whose `/proc`
/// entries this user may not read).
pub(crate) fn holder(file: &File) -> String {
    match file.metadata() {
        Ok(meta) => holder_of(meta.dev(), meta.ino()),
        Err(_) => None,
    }
    .map_or_else(
        || "another process (not one this process can see in /proc)".to_string(),
        |(pid, command)| {
            if pid == std::process::id() {
                format!("this process (pid {pid}: {command}), through another open of the file")
            } else {
                format!("process {pid} ({command})")
            }
        },
    )
}

/// The first process with an open file on `(dev, ino)` that holds a lock through it: its pid
/// and command line.
fn holder_of(dev: u64, ino: u64) -> Option<(u32, String)> {
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
            if std::fs::read_to_string(info).is_ok_and(|info| holds_lock(&info)) {
                return Some((pid, command_line(pid)));
            }
        }
    }
    None
}

/// Whether an open file's fdinfo lists a lock: it shows only the locks held through that
/// open file, e.g. `lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:884743 0 EOF`.
fn holds_lock(fdinfo: &str) -> bool {
    fdinfo.lines().any(|l| l.starts_with("lock:"))
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

/// Held by the tests that start a child process and by those that count on a dropped
/// backing's lock being free at once: a child between its fork and its exec shares the
/// parent's open file descriptions, so it holds every OFD lock the parent held at the fork
/// until its exec closes them (CI once saw a reopen after a drop refused for that reason).
#[cfg(test)]
pub(crate) static SPAWN_OR_RELOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_file_with_a_lock_line_holds_a_lock() {
        let locked = "pos:\t0\nflags:\t0100002\nmnt_id:\t31\nino:\t884743\n\
                      lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:884743 0 EOF\n";
        assert!(holds_lock(locked));
        assert!(!holds_lock("pos:\t0\nflags:\t0100002\nino:\t884743\n"));
    }

    #[test]
    fn a_second_open_is_refused_naming_this_process_and_the_lock_goes_with_the_first() {
        let dir = tempfile_dir();
        let path = dir.join("image");
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap()
        };
        let first = open();
        assert!(try_lock_exclusive(&first).unwrap());
        let second = open();
        assert!(!try_lock_exclusive(&second).unwrap());
        let who = holder(&second);
        assert!(
            who.contains(&format!("pid {}", std::process::id())),
            "{who}"
        );
        drop(first);
        assert!(try_lock_exclusive(&second).unwrap());
        drop(second);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "nvarray-backing-lock-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
