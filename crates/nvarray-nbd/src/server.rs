//! The server: a listener, one thread per connection, one queue pair per connection (reused by
//! the next), shutdown that lets in-flight requests finish, and the device report.
//!
//! Connections are bounded in two phases: in the handshake, by budgets per peer (`gate`: no
//! peer can hold every handshake slot, some are kept for new peers, each closed after
//! `HANDSHAKE_IDLE` of silence), and at most `connections_max` serving, a slot taken only when
//! the client chooses the export. Silent or slow clients, or one address flooding the server
//! with connections, therefore cannot lock real ones out. What the server keeps of a
//! connection after it ends is its statistics, merged into one record: memory does not grow
//! with the number of connections ever served.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nvarray_host::options::pin_this_thread;
use nvarray_host::Device;
use nvarray_report::RunReport;

use crate::clock::Clock;
use crate::gate::{Admission, Gate, Peer, HANDSHAKE_WAIT};
use crate::handshake::{Export, Outcome, HANDSHAKE_IDLE};
use crate::io::Stream;
use crate::proto::REP_ERR_SHUTDOWN;
use crate::serving::{connection_log, Log, Serving};
use crate::NbdError;

/// Default listening address: loopback only. Any other address must be given explicitly.
pub const LISTEN_DEFAULT: &str = "tcp:127.0.0.1:10809";

/// Default and largest connection limit.
pub const CONNECTIONS_DEFAULT: usize = 16;
pub const CONNECTIONS_MAX: usize = 256;

/// A client is dropped if its handshake takes longer than this in all (and sooner, after
/// `HANDSHAKE_IDLE` of silence), so it cannot hold a handshake slot for ever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::gate::HANDSHAKES_MAX;

/// At shutdown, how long connections have to answer the requests they have read before
/// their sockets are closed both ways (a client that stopped taking replies would otherwise
/// hold the exit for `io::STALL_MAX`).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What the server's active time is, for its report (per host, and for all hosts together).
pub const ACTIVE_TIME: &str =
    "each connection from its first request to its close, the client's pauses included";

/// How long the server waits before accepting again after `accept` failed.
const ACCEPT_RETRY_AFTER: Duration = Duration::from_millis(100);

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    /// `host:port` as given (resolved when binding).
    Tcp(String),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Listen, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/tmp/nvarray.sock".into());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = s.strip_prefix("tcp:") {
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| format!("tcp:{addr} needs HOST:PORT, e.g. tcp:127.0.0.1:10809"))?;
            if host.is_empty() {
                return Err(format!(
                    "tcp:{addr} has no host; give one explicitly (127.0.0.1 for loopback, \
                     0.0.0.0 for every interface)"
                ));
            }
            port.parse::<u16>().map_err(|_| {
                format!("tcp:{addr}: port {port:?} is not a number from 0 to 65535")
            })?;
            return Ok(Listen::Tcp(addr.to_string()));
        }
        Err(format!("expected unix:PATH or tcp:HOST:PORT, got {s:?}"))
    }
}

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub listen: Listen,
    pub export_name: String,
    pub read_only: bool,
    pub connections_max: usize,
}

enum Listener {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

/// A listening socket, bound before the device exists: preparing a large device takes
/// seconds (every page is allocated up front), and a client that connects meanwhile waits in
/// the kernel's backlog until the server accepts, instead of being refused.
pub struct Bound {
    listener: Listener,
}

impl Bound {
    /// Binds `listen`. A Unix socket path left behind by a server that is gone is replaced;
    /// one a live server answers on is an error.
    pub fn listen(listen: &Listen) -> Result<Bound, NbdError> {
        let listener = match listen {
            Listen::Unix(path) => Listener::Unix(bind_unix(path)?, path.clone()),
            Listen::Tcp(addr) => {
                let addrs: Vec<SocketAddr> = addr
                    .to_socket_addrs()
                    .map_err(|e| NbdError::Config(format!("cannot resolve {addr}: {e}")))?
                    .collect();
                let l = TcpListener::bind(&addrs[..]).map_err(|source| NbdError::Bind {
                    addr: format!("tcp:{addr}"),
                    source,
                })?;
                Listener::Tcp(l)
            }
        };
        Ok(Bound { listener })
    }

    /// Where clients connect: `unix:PATH` or `tcp:IP:PORT` (the bound port, if 0 was asked).
    pub fn address(&self) -> String {
        match &self.listener {
            Listener::Unix(_, path) => format!("unix:{}", path.display()),
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "tcp:?".into(), |a| format!("tcp:{a}")),
        }
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = &self.listener {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A connection's entry while it runs.
struct Live {
    id: u64,
    /// A clone of its socket, for shutting the reading side down.
    stream: Stream,
}

struct Shared {
    shutdown: AtomicBool,
    /// Written by `ShutdownHandle::shutdown` to wake the accept loop.
    wake_fd: OwnedFd,
    live: Mutex<Vec<Live>>,
    /// Connection threads running (handshaking or serving), and the condition a shutdown
    /// waits on for them to end.
    threads: Mutex<usize>,
    thread_ended: Condvar,
    /// The handshake budgets (`gate`).
    gate: Gate,
    accepted: AtomicUsize,
    /// Connection threads that panicked (a bug): each closed its socket and was logged, and
    /// the server went on serving the others.
    panicked: AtomicUsize,
    /// Fault injection for the tests: the connection id + 1 whose thread panics at its start
    /// (`Server::inject_panic_in_connection`); 0, as always outside them, for none.
    panic_in: AtomicU64,
}

/// Stops a running server from another thread (a signal handler thread, a test).
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Shared>);

impl ShutdownHandle {
    /// Stops accepting; connections finish the requests they have read, send their replies
    /// and close; `Server::run` then flushes the device and returns.
    pub fn shutdown(&self) {
        self.0.shutdown.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd we own; failure (counter full)
        // still leaves it readable, which is all the accept loop needs.
        unsafe { libc::write(self.0.wake_fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        self.0.gate.close();
        for live in self.0.live.lock().expect("live lock poisoned").iter() {
            live.stream.shutdown_read();
        }
    }
}

/// An NBD server over one emulated device.
pub struct Server {
    bound: Bound,
    options: ServerOptions,
    /// The device, its export, and what its connections share.
    serving: Serving,
    shared: Arc<Shared>,
    log: Log,
}

impl Server {
    /// Binds the listening socket (`Bound::listen`) and makes the server over `device`.
    pub fn bind(device: Arc<Device>, options: ServerOptions, log: Log) -> Result<Server, NbdError> {
        check_options(&options)?;
        let bound = Bound::listen(&options.listen)?;
        Server::over(device, bound, options, log)
    }

    /// The server over `device`, accepting on `bound` (bound to `options.listen`).
    pub fn over(
        device: Arc<Device>,
        bound: Bound,
        options: ServerOptions,
        log: Log,
    ) -> Result<Server, NbdError> {
        check_options(&options)?;
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1 (checked).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(NbdError::Io(io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let wake_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let serving = Serving::new(
            device,
            &options.export_name,
            options.read_only,
            options.connections_max,
            Clock::Wall,
        );
        Ok(Server {
            bound,
            options,
            serving,
            shared: Arc::new(Shared {
                shutdown: AtomicBool::new(false),
                wake_fd,
                live: Mutex::new(Vec::new()),
                threads: Mutex::new(0),
                thread_ended: Condvar::new(),
                gate: Gate::default(),
                accepted: AtomicUsize::new(0),
                panicked: AtomicUsize::new(0),
                panic_in: AtomicU64::new(0),
            }),
            log,
        })
    }

    /// Where clients connect: `unix:PATH` or `tcp:IP:PORT` (the bound port, if 0 was asked).
    pub fn address(&self) -> String {
        self.bound.address()
    }

    /// The NBD URI of the export (libnbd's form, as nbdinfo, nbdcopy and qemu take it).
    pub fn uri(&self) -> String {
        let name = &self.options.export_name;
        match &self.bound.listener {
            Listener::Unix(_, path) => format!("nbd+unix:///{name}?socket={}", path.display()),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(SocketAddr::V6(a)) => format!("nbd://[{}]:{}/{name}", a.ip(), a.port()),
                Ok(a) => format!("nbd://{a}/{name}"),
                Err(_) => "nbd://?".into(),
            },
        }
    }

    /// Connection threads that panicked so far (each closed its socket and was logged).
    pub fn connection_panics(&self) -> usize {
        self.shared.panicked.load(Ordering::SeqCst)
    }

    /// Fault injection for the tests (`tests/protocol.rs`): the thread of the `id`th
    /// connection accepted (from 0) panics at its start, as a bug would.
    #[doc(hidden)]
    pub fn inject_panic_in_connection(&self, id: u64) {
        self.shared.panic_in.store(id + 1, Ordering::SeqCst);
    }

    /// Connections whose thread still runs (handshaking, serving, or finishing the commands
    /// of a client that went away).
    pub fn connections(&self) -> usize {
        *self.shared.threads.lock().expect("threads lock poisoned")
    }

    pub fn export(&self) -> &Export {
        &self.serving.export
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(Arc::clone(&self.shared))
    }

    /// The device report so far: every request answered on every connection, with one stream
    /// per client host (its address without the port; `unix` for Unix-socket clients), so
    /// several machines sharing the device each see their own figures. A server no client has
    /// used has one empty stream, `nbd`.
    ///
    /// Rates are over active time (`Shared::busy`): the whole's over the server's, each
    /// host's over its own, so two hosts served one after the other each show their own rate,
    /// not half of it.
    pub fn report(&self) -> RunReport {
        let device = &self.serving.device;
        let mut report = self.serving.served.report(device, "nbd");
        if let Some(setup) = report.emulator.as_mut() {
            // The CPUs of the connections so far, up to one per CPU of the list.
            let connections = self.shared.accepted.load(Ordering::Relaxed);
            let listed = device.options().cpus.len();
            setup.host_cpus = (0..connections.min(listed))
                .filter_map(|i| device.host_cpu(i))
                .collect();
        }
        report
    }

    /// Accepts and serves connections until `shutdown`; then waits for every connection to
    /// finish and flushes the device.
    pub fn run(&self) -> Result<(), NbdError> {
        let listen_fd = self.listen_nonblocking()?;
        let result = std::thread::scope(|scope| -> Result<(), NbdError> {
            while !self.shared.shutdown.load(Ordering::SeqCst) {
                if !wait_two(listen_fd, self.shared.wake_fd.as_raw_fd())? {
                    continue;
                }
                let stream = match self.accept() {
                    Ok(Some(s)) => s,
                    Ok(None) => continue,
                    Err(e) => {
                        // Out of descriptors and the like: say so, keep serving the others.
                        // The listener stays readable, so wait a little before trying again
                        // rather than spin (and log) at full speed until a descriptor frees.
                        (self.log)(&format!("accept failed: {e}"));
                        std::thread::sleep(ACCEPT_RETRY_AFTER);
                        continue;
                    }
                };
                let id = self.shared.accepted.fetch_add(1, Ordering::Relaxed) as u64;
                let peer = Peer::of(&stream);
                let admission = self.shared.gate.admit(&peer);
                if let Admission::Refuse(why) = admission {
                    // Not even a polite refusal for a flood: close at once, and say why (once
                    // a second at most, counting the rest).
                    self.log_refusal(id, &stream, &why);
                    continue;
                }
                let waits = admission == Admission::Wait;
                *self.shared.threads.lock().expect("threads lock poisoned") += 1;
                scope.spawn(move || self.connection_thread(id, stream, peer, waits));
            }
            self.close_stalled_after_grace();
            Ok(())
        });
        // Every connection thread has ended (the scope joined them).
        let flush = self.serving.flush();
        if let Listener::Unix(_, path) = &self.bound.listener {
            let _ = std::fs::remove_file(path);
        }
        result?;
        flush.map_err(NbdError::Device)
    }

    /// Sets the listener non-blocking (the accept loop waits in `wait_two`); returns its
    /// descriptor.
    fn listen_nonblocking(&self) -> io::Result<RawFd> {
        Ok(match &self.bound.listener {
            Listener::Unix(l, _) => {
                l.set_nonblocking(true)?;
                l.as_raw_fd()
            }
            Listener::Tcp(l) => {
                l.set_nonblocking(true)?;
                l.as_raw_fd()
            }
        })
    }

    /// Logs connection `id`, from `stream`, closed before its handshake for `why`: once a
    /// second at most, with the count of those closed since.
    fn log_refusal(&self, id: u64, stream: &Stream, why: &str) {
        if let Some(count) = self.shared.gate.refusal_to_log(Instant::now()) {
            let others = match count {
                1 => String::new(),
                n => format!(" ({} more closed since the last such line)", n - 1),
            };
            (self.log)(&format!(
                "connection {id} ({}) closed before its handshake: {why}{others}",
                stream.peer()
            ));
        }
    }

    /// The thread of connection `id` (see `connection`): a panic in it is caught, counted
    /// and logged, and however it ends its socket is closed and its count given back.
    fn connection_thread(&self, id: u64, stream: Stream, peer: Peer, waits: bool) {
        // However the thread ends: its socket closed, its count given back.
        let _ended = ThreadEnded {
            shared: &self.shared,
            id,
        };
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.connection(id, stream, peer, waits)
        }));
        if let Err(panic) = served {
            self.shared.panicked.fetch_add(1, Ordering::SeqCst);
            (self.log)(&format!(
                "connection {id}: internal error (a panic: {}); its socket is \
                 closed, the other connections are served on",
                panic_message(&panic)
            ));
        }
    }

    fn accept(&self) -> io::Result<Option<Stream>> {
        let r = match &self.bound.listener {
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                // Replies are batched already; Nagle would only delay the last one.
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
        };
        match r {
            Ok(s) => {
                s.set_nonblocking(false)?;
                Ok(Some(s))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `SHUTDOWN_GRACE` for the connections to end by themselves, then closes the
    /// sockets of those left (clients that take no replies) so they end now.
    fn close_stalled_after_grace(&self) {
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        let mut threads = self.shared.threads.lock().expect("threads lock poisoned");
        while *threads > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            threads = self
                .shared
                .thread_ended
                .wait_timeout(threads, left)
                .expect("threads lock poisoned")
                .0;
        }
        if *threads > 0 {
            drop(threads);
            for live in self.shared.live.lock().expect("live lock poisoned").iter() {
                (self.log)(&format!(
                    "connection {}: closed at shutdown after {} s (its client took no replies)",
                    live.id,
                    SHUTDOWN_GRACE.as_secs()
                ));
                live.stream.shutdown_both();
            }
        }
    }

    /// One connection, from handshake to close. `waits`: its peer was over its handshake
    /// budget when it arrived, so it waits for a slot first.
    fn connection(&self, id: u64, mut stream: Stream, peer: Peer, waits: bool) {
        if self.shared.panic_in.load(Ordering::Relaxed) == id + 1 {
            panic!("connection {id}: the injected panic (Server::inject_panic_in_connection)");
        }
        let log = connection_log(&self.log, id, &stream);
        if waits {
            if let Err(why) = self
                .shared
                .gate
                .wait_turn(&peer, Instant::now() + HANDSHAKE_WAIT)
            {
                log(&format!("closed before its handshake: {why}"));
                return;
            }
        }
        // The slot goes back however the handshake ends.
        let handshaking = HandshakeSlot {
            gate: &self.shared.gate,
            peer: &peer,
        };
        self.pin_connection_thread(id, &log);
        let registered = self.register_live(id, &stream);
        // A shutdown that began before registration would not have reached this socket.
        let shutting_down = self.shared.shutdown.load(Ordering::SeqCst) || registered.is_err();
        let refuse = if shutting_down {
            Some((
                REP_ERR_SHUTDOWN,
                "nvarray serve is shutting down".to_string(),
            ))
        } else {
            None
        };
        let _ = stream.set_write_timeout(Some(HANDSHAKE_IDLE));
        let (outcome, slot) = self.serving.handshake(
            &mut stream,
            refuse.as_ref().map(|(k, m)| (*k, m.as_str())),
            Instant::now() + HANDSHAKE_TIMEOUT,
            &*log,
        );
        drop(handshaking);
        match outcome {
            Ok(Outcome::Transmission { structured }) => {
                let _ = stream.set_read_timeout(None);
                let _ = stream.set_write_timeout(None);
                let t = self
                    .serving
                    .transmission(stream, structured, Arc::clone(&log));
                self.serving.transmission_ended(t.run(), &*log);
            }
            Ok(Outcome::Closed) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
            Err(e) => log(&format!("handshake failed: {e}")),
        }
        // The serving slot goes back before the socket's last descriptor (the live list's
        // clone) closes, so a client that saw the close may connect again at once.
        drop(slot);
        self.shared
            .live
            .lock()
            .expect("live lock poisoned")
            .retain(|l| l.id != id);
    }

    /// Pins connection `id`'s thread to its CPU of `--cpus`, if the list gives one; a
    /// failure is logged to `log`.
    fn pin_connection_thread(&self, id: u64, log: &Log) {
        if let Some(cpu) = self.serving.device.host_cpu(id as usize) {
            // The list was checked when the device opened; a failure here (the process's CPUs
            // narrowed since) leaves the thread where the scheduler puts it.
            if let Err(e) = pin_this_thread(cpu) {
                log(&format!(
                    "--cpus: cannot pin this connection's thread to CPU {cpu}: {e}"
                ));
            }
        }
    }

    /// Registers connection `id`'s `stream` among the live ones, so a shutdown reaches it;
    /// an error if its socket could not be cloned for that.
    fn register_live(&self, id: u64, stream: &Stream) -> io::Result<()> {
        stream.try_clone().map(|clone| {
            self.shared
                .live
                .lock()
                .expect("live lock poisoned")
                .push(Live { id, stream: clone });
        })
    }
}

/// A connection thread's end, whether it returned or panicked: a socket still registered
/// (a panic skipped its close) is shut down, so the client sees the connection end instead of
/// waiting for ever, and the thread count a shutdown waits on goes down.
struct ThreadEnded<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for ThreadEnded<'_> {
    fn drop(&mut self) {
        let mut live = self.shared.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = live.iter().position(|l| l.id == self.id) {
            live.swap_remove(i).stream.shutdown_both();
        }
        drop(live);
        *self
            .shared
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner()) -= 1;
        self.shared.thread_ended.notify_all();
    }
}

/// A panic's message, for the log.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// A handshake slot of the gate, given back when dropped.
struct HandshakeSlot<'a> {
    gate: &'a Gate,
    peer: &'a Peer,
}

impl Drop for HandshakeSlot<'_> {
    fn drop(&mut self) {
        self.gate.done(self.peer);
    }
}

/// The connection limit is in range.
pub fn check_options(options: &ServerOptions) -> Result<(), NbdError> {
    if options.connections_max == 0 || options.connections_max > CONNECTIONS_MAX {
        return Err(NbdError::Config(format!(
            "connection limit {} is out of range: expected 1 to {CONNECTIONS_MAX}",
            options.connections_max
        )));
    }
    crate::proto::parse_string(options.export_name.as_bytes(), "the export name")
        .map_err(|why| NbdError::Config(format!("--export-name: {why}")))?;
    Ok(())
}

/// Waits until the listener or the wake-up descriptor is readable. Returns whether the
/// listener is.
fn wait_two(listen_fd: RawFd, wake_fd: RawFd) -> io::Result<bool> {
    let mut fds = [
        libc::pollfd {
            fd: listen_fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake_fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is an array of two valid pollfds; poll writes only their `revents`.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc >= 0 {
            return Ok(fds[0].revents != 0 && fds[1].revents == 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn bind_unix(path: &Path) -> Result<UnixListener, NbdError> {
    let bind_error = |source| NbdError::Bind {
        addr: format!("unix:{}", path.display()),
        source,
    };
    match UnixListener::bind(path) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(NbdError::Config(format!(
                    "unix:{}: another server is listening on this socket",
                    path.display()
                )));
            }
            // Left behind by a server that is gone (killed, say): replace it.
            let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_socket()
            });
            if !is_socket {
                return Err(bind_error(e));
            }
            std::fs::remove_file(path).map_err(bind_error)?;
            UnixListener::bind(path).map_err(bind_error)
        }
        Err(e) => Err(bind_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<Listen, ()>) {
        assert_eq!(
            input.parse::<Listen>().map_err(|_| ()),
            expected,
            "{input:?}"
        );
    }

    #[test]
    fn listen_addresses_are_unix_paths_or_explicit_tcp_hosts() {
        check("unix:/tmp/a.sock", Ok(Listen::Unix("/tmp/a.sock".into())));
        check(
            "tcp:127.0.0.1:10809",
            Ok(Listen::Tcp("127.0.0.1:10809".into())),
        );
        check("tcp:[::1]:10809", Ok(Listen::Tcp("[::1]:10809".into())));
        check("tcp:0.0.0.0:0", Ok(Listen::Tcp("0.0.0.0:0".into())));
        check("tcp::10809", Err(()));
        check("tcp:127.0.0.1", Err(()));
        check("tcp:127.0.0.1:99999", Err(()));
        check("unix:", Err(()));
        check("/tmp/a.sock", Err(()));
        check("", Err(()));
    }
}
