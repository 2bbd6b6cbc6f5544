//! Sockets: one type for Unix and TCP streams, and the buffered input and output a connection
//! uses in the transmission phase.
//!
//! In the transmission phase the socket stays in blocking mode and each call says whether it
//! may wait (`MSG_DONTWAIT` otherwise), so one system call does what took two (`ppoll`, then
//! `recv`): a connection with nothing in flight waits for its next request in `recv` itself.
//! While commands are in flight it never waits in `recv` or `send`: it reads whatever the
//! socket holds, issues it to the device, and goes back to polling the device. It waits (in
//! `poll`, bounded by `STALL_MAX`) only for the rest of a request, or when the client is not
//! taking replies fast enough.
//!
//! A stream may also be in memory (`Stream::Memory`, `pipe`): the deterministic simulation's
//! clients. Nothing waits on one; a wait for its client ends at once, as the longest wait would.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::pipe::MemoryPipe;

/// A client connection: Unix or TCP, or in memory (a simulated client).
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    Memory(MemoryPipe),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Memory(s) => Stream::Memory(s.clone_end()),
        })
    }

    /// (An in-memory stream never blocks, whatever is asked.)
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Memory(_) => Ok(()),
        }
    }

    /// (An in-memory stream's reads never wait: a timeout changes nothing.)
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Memory(_) => Ok(()),
        }
    }

    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Memory(_) => Ok(()),
        }
    }

    /// Ends the reading side: a thread blocked reading this socket (or a clone of it) sees end
    /// of file. This is how shutdown reaches connection threads.
    pub fn shutdown_read(&self) {
        // Already closed by the peer is fine: the reader sees end of file either way.
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Read),
            Stream::Tcp(s) => s.shutdown(Shutdown::Read),
            Stream::Memory(s) => {
                s.shutdown_read();
                Ok(())
            }
        };
    }

    /// Closes both directions: a thread blocked waiting to send to a client that takes no
    /// replies wakes with an error (shutdown's last resort).
    pub fn shutdown_both(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Memory(s) => {
                s.shutdown_read();
                s.shutdown_write();
                Ok(())
            }
        };
    }

    /// Bytes this end has sent that the peer has not read yet, for a Unix socket (`SIOCOUTQ`:
    /// on `AF_UNIX` the sender is charged until the reader takes the data). `None` for TCP,
    /// where the figure counts unacknowledged bytes instead, which a loopback peer
    /// acknowledges on arrival, not when its program reads them. `None` in memory too: the
    /// figure is for pacing a client that runs meanwhile, and a simulated one cannot.
    pub fn unread_by_peer(&self) -> Option<usize> {
        let Stream::Unix(s) = self else {
            return None;
        };
        let mut bytes: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int through the pointer, which points at a
        // live c_int; the descriptor is ours for the call.
        let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut bytes) };
        (rc == 0).then_some(bytes.max(0) as usize)
    }

    /// The client's host, for the report's per-host streams: its address without the port
    /// (`unix` for a Unix-socket client, `memory` for a simulated one).
    pub fn host(&self) -> String {
        match self {
            Stream::Unix(_) => "unix".to_string(),
            Stream::Memory(_) => "memory".to_string(),
            Stream::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "tcp".to_string(), |a| a.ip().to_string()),
        }
    }

    /// Who is connected, for log lines.
    pub fn peer(&self) -> String {
        match self {
            Stream::Unix(_) => "unix client".to_string(),
            Stream::Memory(_) => "simulated client".to_string(),
            Stream::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "tcp client".to_string(), |a| a.to_string()),
        }
    }
}

impl Stream {
    /// Waits until the stream has one of `events` (`POLLIN`, `POLLOUT`; or an error or
    /// hang-up), at most `timeout` (`None`: for ever). Returns whether it is ready. In memory
    /// it answers at once: a simulated client cannot act while the server waits, so a wait
    /// that would need it to ends as a silent client's would.
    pub fn wait_ready(&self, events: i16, timeout: Option<Duration>) -> io::Result<bool> {
        match self {
            Stream::Unix(s) => wait_fd(s.as_raw_fd(), events, timeout),
            Stream::Tcp(s) => wait_fd(s.as_raw_fd(), events, timeout),
            Stream::Memory(s) => Ok(events & libc::POLLOUT != 0 || s.readable()),
        }
    }

    /// Receives into `buf`, waiting for data only when `wait` (never in memory). End of input
    /// is `Ok(0)`.
    fn recv(&self, buf: &mut [u8], wait: bool) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => recv(s.as_raw_fd(), buf, wait),
            Stream::Tcp(s) => recv(s.as_raw_fd(), buf, wait),
            Stream::Memory(s) => s.read(buf),
        }
    }

    /// Sends what the stream takes of `buf` now, without waiting.
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => send(s.as_raw_fd(), buf),
            Stream::Tcp(s) => send(s.as_raw_fd(), buf),
            Stream::Memory(s) => s.write(buf),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
            Stream::Memory(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
            Stream::Memory(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Waits until `fd` has one of `events` (or an error or hang-up), at most `timeout` (`None`:
/// for ever). Returns whether it is ready.
pub fn wait_fd(fd: RawFd, events: i16, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    loop {
        // SAFETY: `pfd` is one valid pollfd and `ts_ptr` is null or points at a live timespec;
        // ppoll reads them and writes only `pfd.revents`.
        let rc = unsafe { libc::ppoll(&mut pfd, 1, ts_ptr, std::ptr::null()) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `recv` on `fd` into `buf`: waits for data only when `wait`. End of input is `Ok(0)`; an
/// interrupted call is retried.
fn recv(fd: RawFd, buf: &mut [u8], wait: bool) -> io::Result<usize> {
    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
    loop {
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the whole call, and
        // recv writes at most that many bytes into it.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// `send` of `buf` on `fd` without waiting, and without `SIGPIPE` when the client has gone
/// (an `EPIPE` error instead, as std's sockets do). An interrupted call is retried.
fn send(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a live buffer of `buf.len()` bytes for the whole call, and send only
        // reads from it.
        let n = unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// How long a client may leave a request half sent, or leave replies untaken, before the
/// connection is dropped. Without a limit such a client would hold its commands' device tags,
/// which all connections share, and keep shutdown waiting, for ever. (An idle client between
/// requests is not stalled and may stay.)
pub const STALL_MAX: Duration = Duration::from_secs(30);

/// Waits until `stream` is ready for `events`; a wait longer than `STALL_MAX` is an error
/// saying what the client was doing (`doing`).
fn wait_for_client(stream: &Stream, events: i16, doing: &str) -> io::Result<()> {
    if stream.wait_ready(events, Some(STALL_MAX))? {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("client {doing} for {} s", STALL_MAX.as_secs()),
    ))
}

/// What a read of the socket found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// This many new bytes are buffered.
    Data(usize),
    /// Nothing to read now.
    Empty,
    /// The client closed its side (or shutdown closed ours).
    Eof,
}

/// Bytes read from the socket and not yet consumed.
pub struct Input {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

/// Input buffer size: many small requests per `read`, and the start of a large write.
pub const INPUT_BYTES: usize = 256 * 1024;

impl Input {
    pub fn new() -> Input {
        Input {
            buf: vec![0u8; INPUT_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        assert!(
            n <= self.end - self.start,
            "consuming input: expected at most the {} bytes buffered, found {n}",
            self.end - self.start
        );
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads what the socket holds, as much as fits, in one `recv`; with `wait`, waits for
    /// something to arrive first (a socket read timeout then shows as `Empty`).
    pub fn fill(&mut self, stream: &Stream, wait: bool) -> io::Result<Fill> {
        if self.end == self.buf.len() {
            if self.start == 0 {
                // Full: the caller consumes before reading more.
                return Ok(Fill::Data(0));
            }
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        match stream.recv(&mut self.buf[self.end..], wait) {
            Ok(0) => Ok(Fill::Eof),
            Ok(n) => {
                debug_assert!(
                    n <= self.buf.len() - self.end,
                    "recv into the input buffer: expected at most the {} bytes of room, found {n}",
                    self.buf.len() - self.end
                );
                self.end += n;
                Ok(Fill::Data(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Fill::Empty),
            Err(e) => Err(e),
        }
    }

    /// Fills `out` completely: buffered bytes first, then straight from the socket (waiting for
    /// them). A client that hangs up half way is an `UnexpectedEof` error.
    pub fn read_exact(&mut self, stream: &Stream, out: &mut [u8]) -> io::Result<()> {
        let have = self.buffered().len().min(out.len());
        out[..have].copy_from_slice(&self.buffered()[..have]);
        self.consume(have);
        let mut at = have;
        while at < out.len() {
            match stream.recv(&mut out[at..], false) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "client closed the connection in the middle of a write payload",
                    ))
                }
                Ok(n) => {
                    debug_assert!(
                        n <= out.len() - at,
                        "recv of a payload: expected at most the {} bytes asked for, found {n}",
                        out.len() - at
                    );
                    at += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_for_client(stream, libc::POLLIN, "sent none of the rest of a request")?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads and drops `n` bytes (the payload of a refused write).
    pub fn skip(&mut self, stream: &Stream, mut n: usize) -> io::Result<()> {
        let mut scratch = [0u8; 4096];
        while n > 0 {
            let step = n.min(scratch.len());
            self.read_exact(stream, &mut scratch[..step])?;
            n -= step;
        }
        Ok(())
    }
}

impl Default for Input {
    fn default() -> Self {
        Input::new()
    }
}

/// Writes all of `out` to the socket, waiting for room when it is full, and empties `out`.
pub fn write_all(stream: &Stream, out: &mut Vec<u8>) -> io::Result<()> {
    while !write_some(stream, out)? {
        wait_for_client(stream, libc::POLLOUT, "took no replies")?;
    }
    Ok(())
}

/// Writes as much of `out` as the socket takes now (without waiting) and removes it from
/// `out`. True when `out` is empty.
pub fn write_some(stream: &Stream, out: &mut Vec<u8>) -> io::Result<bool> {
    let mut at = 0;
    let result = loop {
        if at == out.len() {
            break Ok(true);
        }
        match stream.send(&out[at..]) {
            Ok(0) => {
                break Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "client stopped taking replies",
                ))
            }
            Ok(n) => {
                debug_assert!(
                    n <= out.len() - at,
                    "send of replies: expected at most the {} bytes offered, found {n}",
                    out.len() - at
                );
                at += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(false),
            Err(e) => break Err(e),
        }
    };
    if at == out.len() {
        out.clear();
    } else {
        out.drain(..at);
    }
    result
}
