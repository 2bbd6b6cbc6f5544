//! The back end's errors.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum VhostError {
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {}: {source}", path.display())]
    Bind {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is in use: another vhost-user back end answers on it (stop it, or choose another \
         path)",
        .0.display()
    )]
    SocketInUse(PathBuf),
    #[error("vhost-user daemon: {0}")]
    Daemon(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
