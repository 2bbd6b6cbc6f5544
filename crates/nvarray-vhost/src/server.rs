//! `VhostServer`: the vhost-user socket, one VMM at a time (vhost-user pairs a socket with one
//! front end), a `vhost-user-backend` daemon per connection, and the report.
//!
//! Each connection gets a fresh daemon: its vring workers (one per virtqueue), a `BlkBackend`
//! with a `QueueWorker` per virtqueue and a session of its own in the statistics. When the
//! VMM leaves (or is killed) the daemon's workers finish what they have in flight and stop,
//! the queue pairs detach from the device, the session closes, and the socket takes the next
//! VMM. Shutdown ends the connection (the guest loses its disk, as when a storage daemon
//! stops), waits for the same, flushes the device and removes the socket file.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvarray_host::tag_share::TagShare;
use nvarray_host::Device;
use nvarray_report::RunReport;
use nvarray_run::served::ServedStats;
use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

use crate::backend::BlkBackend;
use crate::guest::{Guest, Log};
use crate::virtio_blk::DiskGeometry;
use crate::VhostError;

/// Default virtqueues offered: QEMU's `vhost-user-blk-pci` asks for one per vCPU unless told
/// (`num-queues`), and refuses a back end that offers fewer.
pub const QUEUES_DEFAULT: u16 = 8;
/// Most virtqueues: one vring worker thread each, named by a bit of a 64-bit mask.
pub const QUEUES_MAX: u16 = 64;

/// What the guest's GET_ID returns by default.
pub const SERIAL_DEFAULT: &str = "nvarray";

// `queues_per_thread` gives each virtqueue one bit of a u64; the defaults pass
// `check_options`.
const _: () = assert!(QUEUES_MAX as u32 <= u64::BITS);
const _: () = assert!(QUEUES_DEFAULT <= QUEUES_MAX);
const _: () = assert!(SERIAL_DEFAULT.len() <= crate::virtio_blk::ID_BYTES);

/// What a guest stream's active time is, for the report.
pub const ACTIVE_TIME: &str =
    "each guest from its first request to its disconnection, its idle time included";

#[derive(Clone, Debug)]
pub struct VhostOptions {
    pub socket: PathBuf,
    pub read_only: bool,
    pub queues: u16,
    /// The disk's serial number (GET_ID), at most 20 bytes.
    pub serial: String,
}

/// Stops a running `VhostServer` from any thread.
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Stop>);

struct Stop {
    requested: AtomicBool,
    /// Wakes the accept loop.
    wake: OwnedFd,
    /// The live connection's, to end it.
    connection: Mutex<Option<vhost_user_backend::ShutdownHandle>>,
}

impl ShutdownHandle {
    pub fn shutdown(&self) {
        self.0.requested.store(true, Ordering::SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd; a full counter leaves it
        // readable, which is all the accept loop needs.
        unsafe {
            libc::write(
                self.0.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if let Some(c) = self
            .0
            .connection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            c.shutdown();
        }
    }
}

pub struct VhostServer {
    device: Arc<Device>,
    options: VhostOptions,
    listener: Listener,
    served: ServedStats,
    tags: Arc<TagShare>,
    stop: Arc<Stop>,
    guests: AtomicU64,
    log: Log,
}

impl VhostServer {
    /// Binds the socket (mode 0600: whoever reaches it maps the disk into a VM). A socket
    /// left behind by a server that is gone is replaced; one a live server answers on is an
    /// error.
    pub fn bind(
        device: Arc<Device>,
        options: VhostOptions,
        log: Log,
    ) -> Result<VhostServer, VhostError> {
        check_options(&options)?;
        let listener = bind_socket(&options.socket)?;
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1 (checked).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(VhostError::Io(io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a new descriptor no one else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        let tags = Arc::new(TagShare::new(device.tags()));
        Ok(VhostServer {
            device,
            options,
            listener: Listener::from(listener),
            served: ServedStats::new(),
            tags,
            stop: Arc::new(Stop {
                requested: AtomicBool::new(false),
                wake,
                connection: Mutex::new(None),
            }),
            guests: AtomicU64::new(0),
            log,
        })
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    pub fn socket(&self) -> &Path {
        &self.options.socket
    }

    pub fn options(&self) -> &VhostOptions {
        &self.options
    }

    /// The disk the guest sees.
    pub fn disk(&self) -> DiskGeometry {
        DiskGeometry {
            capacity_bytes: self.device.size_bytes(),
            block_bytes: self.device.block_bytes(),
            read_only: self.options.read_only,
            queues: self.options.queues,
        }
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(Arc::clone(&self.stop))
    }

    /// The device report so far: one stream per guest (connection) served.
    pub fn report(&self) -> RunReport {
        self.served.report(&self.device, "no guest yet")
    }

    /// Serves VMMs one after the other until `shutdown`; then flushes the device and removes
    /// the socket file.
    pub fn run(&self) -> Result<(), VhostError> {
        let result = self.serve_guests();
        let flushed = self
            .device
            .queue_pair(self.device.completion())
            .flush(&self.device);
        let _ = std::fs::remove_file(&self.options.socket);
        result?;
        flushed.map_err(|e| VhostError::Io(io::Error::other(e.to_string())))
    }

    fn serve_guests(&self) -> Result<(), VhostError> {
        loop {
            if !self.wait_for_a_guest()? {
                return Ok(());
            }
            self.serve_one_guest();
        }
    }

    /// Waits until a VMM connects (true) or shutdown is asked for (false).
    fn wait_for_a_guest(&self) -> Result<bool, VhostError> {
        loop {
            if self.stop.requested.load(Ordering::SeqCst) {
                return Ok(false);
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a live array of two pollfds, its length given.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(VhostError::Io(e));
            }
            if fds[1].revents != 0 {
                return Ok(false);
            }
            if fds[0].revents != 0 {
                return Ok(true);
            }
        }
    }

    /// Serves one VMM, from its connection to its disconnection. Nothing that goes wrong
    /// with one VMM stops the server: it is logged, and the socket takes the next.
    fn serve_one_guest(&self) {
        let n = self.guests.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("guest {n}");
        let guest = Arc::new(Guest::new(
            name.clone(),
            self.options.read_only,
            self.served.open(&name),
            &self.options.serial,
            Arc::clone(&self.log),
        ));
        let ram = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let backend = BlkBackend::new(&self.device, self.disk(), &guest, &self.tags, ram.clone());
        let result = match VhostUserDaemon::new(format!("nvarray-vhost-{n}"), backend.clone(), ram)
        {
            Ok(mut daemon) => {
                let result = self.run_daemon(&mut daemon, &name);
                // The workers take nothing more; each leaves its loop after its last pass, so
                // nothing is left in flight, and is joined when the daemon goes.
                backend.stop();
                for handler in daemon.get_epoll_handlers() {
                    handler.send_exit_event();
                }
                drop(daemon);
                result.map_err(|e| e.to_string())
            }
            Err(e) => {
                // No daemon (out of descriptors, say): the VMM waiting is turned away.
                if let Ok(Some(stream)) = self.listener.accept() {
                    drop(stream);
                }
                std::thread::sleep(Duration::from_millis(100));
                Err(format!("cannot serve it: {e}"))
            }
        };
        drop(backend.into_queue_pairs());
        let ended = Arc::try_unwrap(guest)
            .unwrap_or_else(|_| panic!("a guest outlived its vring workers"))
            .end();
        let how = match result {
            Ok(()) => "disconnected".to_string(),
            Err(e) => format!("disconnected ({e})"),
        };
        (self.log)(&format!(
            "{name} {how}: {} requests, {} refused, {} failed",
            ended
                .session
                .stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .totals(1)
                .requests,
            ended.refused,
            ended.failed
        ));
        if ended.begun {
            self.served.close(ended.session);
        } else {
            self.served.discard(ended.session);
        }
    }

    /// Accepts the VMM waiting on the socket and serves it until it leaves or shutdown ends
    /// the connection.
    fn run_daemon(
        &self,
        daemon: &mut VhostUserDaemon<BlkBackend>,
        name: &str,
    ) -> Result<(), vhost_user_backend::Error> {
        let mut listener = self
            .listener_for_daemon()
            .map_err(vhost_user_backend::Error::StartDaemon)?;
        // The listener is readable: the accept inside `start` does not wait.
        daemon.start(&mut listener)?;
        *self
            .stop
            .connection
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
        if self.stop.requested.load(Ordering::SeqCst) {
            daemon.request_shutdown();
        }
        (self.log)(&format!(
            "{name} connected on {}",
            self.options.socket.display()
        ));
        let result = daemon.wait();
        *self
            .stop
            .connection
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        match result {
            // A VMM that quits or is killed hangs up between messages, or in one.
            Err(vhost_user_backend::Error::HandleRequest(
                vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage,
            )) => Ok(()),
            other => other,
        }
    }

    /// The server's listener as the daemon takes it (the same socket, so no file is removed
    /// when the daemon's copy goes).
    fn listener_for_daemon(&self) -> io::Result<Listener> {
        // SAFETY: `dup` of our own live listening descriptor; returns a new one or -1.
        let copy = unsafe { libc::fcntl(self.listener.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if copy < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `copy` is a new descriptor of a listening Unix socket that no one else owns;
        // the Listener closes it (and only it) when dropped.
        Ok(unsafe { Listener::from_raw_fd(copy) })
    }
}

fn check_options(options: &VhostOptions) -> Result<(), VhostError> {
    if options.queues == 0 || options.queues > QUEUES_MAX {
        return Err(VhostError::Config(format!(
            "--vhost-queues {}: a disk offers 1 to {QUEUES_MAX} virtqueues",
            options.queues
        )));
    }
    if options.serial.len() > crate::virtio_blk::ID_BYTES {
        return Err(VhostError::Config(format!(
            "serial {:?} is longer than virtio-blk's 20 bytes",
            options.serial
        )));
    }
    Ok(())
}

fn bind_socket(path: &Path) -> Result<UnixListener, VhostError> {
    let bound = |source| VhostError::Bind {
        path: path.to_path_buf(),
        source,
    };
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Err(VhostError::SocketInUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(bound)?;
            UnixListener::bind(path).map_err(bound)?
        }
        Err(e) => return Err(bound(e)),
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bound)?;
    Ok(listener)
}
