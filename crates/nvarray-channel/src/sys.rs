//! The system calls a channel's set-up needs and std does not offer on stable: a sealed memfd,
//! a Unix socket peer's credentials (`SO_PEERCRED`, from `nvarray-sys`, which the NBD server
//! asks too), and a descriptor passed with `SCM_RIGHTS`. None of them is on the I/O path.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Who is at the other end of a Unix socket, as the kernel says (not as the client claims).
pub use nvarray_sys::peer::{peer_credentials, Credentials};

/// A memfd of `len` bytes whose size is sealed: a client holding it can neither shrink it
/// (which would make the daemon's next access to its mapping a SIGBUS) nor grow it.
pub fn sealed_memfd(name: &str, len: u64) -> io::Result<File> {
    let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `name` is a valid NUL-terminated string; the flags are constants.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS on our own memfd with constant flags.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// The command name of process `pid` (`/proc/PID/comm`), or `?` once it has gone.
pub fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// Room for one descriptor's control message.
fn fd_space() -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize }
}

/// A message header over one buffer and a control buffer (`fd_space` long); both must outlive
/// its use.
fn message(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: a zeroed msghdr is a valid empty header; the pointers set are the caller's.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    msg
}

/// Sends `bytes` with `fd` attached (`SCM_RIGHTS`), in one message.
pub fn send_with_fd(stream: &UnixStream, bytes: &[u8], fd: &impl AsRawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut control = vec![0u8; fd_space()];
    let msg = message(&mut iov, &mut control);
    // SAFETY: `control` is CMSG_SPACE(int) bytes, so the first header and its int fit.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
    }
    // SAFETY: `msg` describes live buffers; MSG_NOSIGNAL turns a closed peer into EPIPE.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
    }
    Ok(())
}

/// Receives one message into `buf`, with the descriptor it carries if any. Returns the bytes
/// read (0 at end of stream).
pub fn recv_with_fd(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = vec![0u8; fd_space()];
    let mut msg = message(&mut iov, &mut control);
    // SAFETY: `msg` describes live buffers; MSG_CMSG_CLOEXEC keeps the descriptor out of
    // children.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: the kernel filled `control` and `msg_controllen`; the macros walk inside it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, fd))
}

/// Whether the peer of `fd` has hung up or sent bytes (without blocking): `(readable,
/// hung_up)`.
pub fn poll_peer(fd: &impl AsRawFd) -> (bool, bool) {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, timeout 0.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n <= 0 {
        return (false, false);
    }
    let hung = p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0;
    (p.revents & libc::POLLIN != 0, hung)
}

/// Waits up to `timeout_ms` for any of `fds` to be readable (or hung up); returns the indices
/// of those that are, in order (none on a timeout or an interrupted wait).
pub fn poll_readable(fds: &[std::os::fd::RawFd], timeout_ms: i32) -> io::Result<Vec<usize>> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        })
        .collect();
    // SAFETY: `polls` is a live array of that many pollfds.
    let rc = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    Ok(polls
        .iter()
        .enumerate()
        .filter(|(_, p)| p.revents != 0)
        .map(|(i, _)| i)
        .collect())
}

/// Waits until one of `fds` is readable or hung up, or `timeout_ms` passes (a failed wait
/// returns at once: the caller looks again).
pub fn wait_any(fds: &[std::os::fd::RawFd], timeout_ms: i32) {
    let _ = poll_readable(fds, timeout_ms);
}
