//! The channel crate's errors: the daemon's (binding, grants) and a client's (connecting,
//! a refused channel, a daemon gone).

use std::path::PathBuf;

use crate::status::ChannelStatus;

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("cannot listen on {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another daemon is listening on {} (stop it, or choose another --channels path)", .0.display())]
    SocketInUse(PathBuf),
    #[error("grant {grant} runs past the device's end ({size_bytes} bytes)")]
    GrantPastDevice { grant: String, size_bytes: u64 },
    #[error("at most 0 channels: nothing could connect (give --channels-max 1 or more)")]
    NoChannels,
    #[error("cannot connect to the channel daemon at {}: {source} (is `nvarray serve --channels unix:{}` running?)", path.display(), path.display())]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the daemon refused a channel: {message}")]
    Refused { errno: i32, message: String },
    #[error("the daemon's answer is not a channel of this version")]
    Protocol,
    #[error("the daemon went away; the channel is closed")]
    Closed,
    #[error("{op} of {len} bytes at {offset}: {}", status.name())]
    Command {
        op: &'static str,
        offset: u64,
        len: u64,
        status: ChannelStatus,
    },
    #[error("synchronous I/O needs no asynchronous command in flight ({0} are)")]
    Busy(u32),
    #[error("flushing the device at shutdown failed: {0}")]
    Flush(nvarray_host::HostError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl ChannelError {
    /// The errno the C library returns (negated) for this error.
    pub fn errno(&self) -> i32 {
        match self {
            ChannelError::Connect { source, .. } => {
                source.raw_os_error().unwrap_or(libc::ECONNREFUSED)
            }
            ChannelError::Refused { errno, .. } => *errno,
            ChannelError::Protocol => libc::EPROTO,
            ChannelError::Closed => libc::EPIPE,
            ChannelError::Command { status, .. } => status.errno(),
            ChannelError::Busy(_) => libc::EBUSY,
            ChannelError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EINVAL,
        }
    }
}
