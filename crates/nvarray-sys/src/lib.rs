//! `nvarray-sys`: the few words nvarray's crates share with the system around them, each
//! written once here because more than one crate speaks it.
//!
//! - `peer`: who is at the other end of a Unix socket (`SO_PEERCRED`), which the channel
//!   daemon's greeting and the NBD server's admission gate both ask;
//! - `mount_fields`: the kernel's octal escapes in `/proc/self/mounts` and `mountinfo`
//!   fields, which the FUSE front end (its own mounts) and the PM library (a pool state's
//!   key) both read;
//! - `shell`: a command line quoted so that a POSIX shell gives back the same words, which
//!   the sweep's records and repro's experiments both print;
//! - `input`: `InputError`, what the user gave was wrong (the process exits with status 2),
//!   which the CLI and the sweep both raise;
//! - `output_files`: files named on the command line, checked writable before a long run and
//!   their siblings named, for the CLI's commands and the sweep.

pub mod input;
pub mod mount_fields;
pub mod output_files;
pub mod peer;
pub mod shell;
