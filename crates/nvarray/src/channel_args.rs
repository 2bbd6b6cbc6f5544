//! `nvarray serve`'s channel flags (`--channels`, `--grant`, `--grants-file`,
//! `--channels-max`) and the daemon's grants they make.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use nvarray_channel::grants::parse_grants;
use nvarray_channel::{Grant, CHANNELS_DEFAULT};

use nvarray_sys::input::input_error;

#[derive(Args)]
pub struct ChannelArgs {
    /// Serve user-space channels on this Unix socket (`unix:PATH`): each client process
    /// (libnvarray, fio's external engine) gets its own rings and DMA region in shared memory
    /// and issues commands with no system call, checked against its grants (Moneta-D). Without
    /// --listen, only channels are served.
    #[arg(long, value_name = "unix:PATH")]
    pub channels: Option<String>,
    /// Grant an extent: NAME:OFFSET:LEN:MODE:UID, e.g. `db:0:1g:rw:1000` (MODE r, w or rw;
    /// UID a number or * for every user). Repeatable [default: the whole device, read-write,
    /// to the user running the daemon].
    #[arg(
        long = "grant",
        value_name = "NAME:OFFSET:LEN:MODE:UID",
        requires = "channels"
    )]
    pub grants: Vec<Grant>,
    /// Read grants from FILE, one per line (`#` comments), added to --grant; read again on
    /// SIGHUP, so a revoked grant fails the next command that touches it.
    #[arg(long, value_name = "FILE", requires = "channels")]
    pub grants_file: Option<PathBuf>,
    /// Most channels open at once; more are refused with a message.
    #[arg(long, value_name = "N", default_value_t = CHANNELS_DEFAULT, requires = "channels")]
    pub channels_max: usize,
}

impl ChannelArgs {
    /// The socket path of `--channels unix:PATH`, if given.
    pub fn socket(&self) -> Result<Option<PathBuf>> {
        let Some(text) = &self.channels else {
            return Ok(None);
        };
        match text.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(Some(PathBuf::from(path))),
            _ => Err(input_error(format!(
                "--channels {text:?}: expected unix:PATH (channels are local: shared memory)"
            ))),
        }
    }

    /// Every grant: the flags', then the file's; the whole device for this user when neither
    /// gives any; read-only ones only with `read_only`.
    pub fn grants(&self, size_bytes: u64, read_only: bool) -> Result<Vec<Grant>> {
        let mut grants = self.grants.clone();
        if let Some(path) = &self.grants_file {
            grants.extend(read_grants_file(path)?);
        }
        if grants.is_empty() && self.grants_file.is_none() {
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            grants.push(Grant {
                name: "device".into(),
                offset: 0,
                len: size_bytes,
                read: true,
                write: true,
                uid: Some(uid),
            });
        }
        let grants = read_only_if(read_only, grants);
        debug_assert!(
            !read_only || grants.iter().all(|g| !g.write),
            "a write grant on a read-only device"
        );
        Ok(grants)
    }
}

/// `--read-only`: every grant without its write permission (a write-only one, left with
/// nothing, is dropped).
pub fn read_only_if(read_only: bool, grants: Vec<Grant>) -> Vec<Grant> {
    if !read_only {
        return grants;
    }
    grants
        .into_iter()
        .filter(|g| g.read)
        .map(|g| Grant { write: false, ..g })
        .collect()
}

/// The grants in a grants file, the error naming the file and line.
pub fn read_grants_file(path: &std::path::Path) -> Result<Vec<Grant>> {
    let text = crate::args::read_text_file(path, "grants file")?;
    parse_grants(&text).map_err(|e| input_error(format!("{}: {e}", path.display())))
}
