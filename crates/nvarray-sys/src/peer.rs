//! Who is at the other end of a Unix socket.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The kernel's record of the process that connected a Unix socket, taken when it connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The credentials of the process that connected `stream` (`SO_PEERCRED`).
pub fn peer_credentials(stream: &UnixStream) -> io::Result<Credentials> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`, a live `ucred` of exactly
    // that size, and the new length into `len`; the descriptor is open for the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    assert_eq!(
        len as usize,
        std::mem::size_of::<libc::ucred>(),
        "SO_PEERCRED filled part of a ucred"
    );
    Ok(Credentials {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_pair_names_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_credentials(&a).unwrap();
        assert_eq!(c.pid, std::process::id());
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!((c.uid, c.gid), (uid, gid));
    }
}
