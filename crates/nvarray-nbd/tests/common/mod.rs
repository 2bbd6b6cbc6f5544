//! The server in-process over a small `dram` device on a Unix socket, for the tests.
#![allow(dead_code)]

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

use nvarray_host::options::{BackingFaults, BackingKind};
use nvarray_host::{Device, Options};
use nvarray_model::presets;
use nvarray_nbd::client::Client;
use nvarray_nbd::io::Stream;
use nvarray_nbd::proto::{RequestHeader, CMD_READ, REQUEST_MAGIC};
use nvarray_nbd::{Listen, Server, ServerOptions, ShutdownHandle};

pub const SIZE_BYTES: u64 = 8 << 20;

pub struct Running {
    pub socket: PathBuf,
    pub server: Arc<Server>,
    shutdown: ShutdownHandle,
    thread: Option<std::thread::JoinHandle<Result<(), nvarray_nbd::NbdError>>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub fn start(read_only: bool) -> Running {
        Running::start_speaking(read_only, "nvme")
    }

    /// The server over the `dram` preset speaking `protocol`.
    pub fn start_speaking(read_only: bool, protocol: &str) -> Running {
        Running::start_with(read_only, &[("interface.protocol", protocol)])
    }

    /// The server over the `dram` preset with `overrides` (`--set` keys and values).
    pub fn start_with(read_only: bool, overrides: &[(&str, &str)]) -> Running {
        Running::start_logging(
            read_only,
            overrides,
            Arc::new(|m: &str| eprintln!("server: {m}")),
        )
    }

    /// `start_with`, the server's messages going to `log`.
    pub fn start_logging(
        read_only: bool,
        overrides: &[(&str, &str)],
        log: Arc<dyn Fn(&str) + Send + Sync>,
    ) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        Running::start_on(read_only, overrides, Listen::Unix(socket), dir, log, None)
    }

    /// The server over the `dram` preset on a durable file backing at `image` (made if
    /// missing, kept across servers), with `faults` injected into it; its messages go to `log`.
    pub fn start_faulty(
        image: &std::path::Path,
        faults: Arc<BackingFaults>,
        log: Arc<dyn Fn(&str) + Send + Sync>,
    ) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let backing = Some((image.to_path_buf(), faults));
        Running::start_on(false, &[], Listen::Unix(socket), dir, log, backing)
    }

    /// The server on TCP loopback (an ephemeral port), its messages going to `log`.
    pub fn start_tcp(log: Arc<dyn Fn(&str) + Send + Sync>) -> Running {
        let dir = tempfile::tempdir().unwrap();
        Running::start_on(
            false,
            &[],
            Listen::Tcp("127.0.0.1:0".into()),
            dir,
            log,
            None,
        )
    }

    fn start_on(
        read_only: bool,
        overrides: &[(&str, &str)],
        listen: Listen,
        dir: tempfile::TempDir,
        log: Arc<dyn Fn(&str) + Send + Sync>,
        faulty_file: Option<(PathBuf, Arc<BackingFaults>)>,
    ) -> Running {
        let overrides: Vec<(String, String)> = overrides
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut config = presets::preset("dram").unwrap().load(&overrides).unwrap();
        config.memory.capacity_bytes = SIZE_BYTES;
        // Small tags so large requests become several commands.
        let (backing, backing_faults) = match faulty_file {
            Some((path, faults)) => (
                BackingKind::File {
                    path,
                    durable: true,
                    read_only: false,
                    sparse: false,
                },
                Some(faults),
            ),
            None => (BackingKind::Ram, None),
        };
        let options = Options {
            device_threads: 0,
            buffer_bytes: Some(64 * 1024),
            backing,
            backing_faults,
            ..Options::default()
        };
        let device = Arc::new(Device::open(&config, &options).unwrap());
        let socket = match &listen {
            Listen::Unix(path) => path.clone(),
            Listen::Tcp(_) => PathBuf::new(),
        };
        let server = Server::bind(
            device,
            ServerOptions {
                listen,
                export_name: "nvarray".into(),
                read_only,
                connections_max: 4,
            },
            log,
        )
        .unwrap();
        let shutdown = server.shutdown_handle();
        let server = Arc::new(server);
        let running = Arc::clone(&server);
        let thread = std::thread::spawn(move || running.run());
        Running {
            socket,
            server,
            shutdown,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// The TCP port of a server started with `start_tcp`.
    pub fn port(&self) -> u16 {
        let address = self.server.address();
        address
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or_else(|| panic!("not a TCP address: {address}"))
    }

    /// A TCP connection to the server (`start_tcp`) from the loopback address `from`
    /// (127.0.0.1, 127.0.0.2, ...: all of 127/8 is this machine, so each is a different peer).
    pub fn connect_from(&self, from: std::net::Ipv4Addr) -> std::io::Result<std::net::TcpStream> {
        connect_from(from, self.port())
    }

    pub fn client(&self, structured: bool) -> Client {
        let s = UnixStream::connect(&self.socket).unwrap();
        Client::connect(Stream::Unix(s), "", structured).unwrap()
    }

    pub fn stop(self) {
        self.stop_returning().unwrap();
    }

    /// Stops the server and returns how its run ended (its last flush may fail).
    pub fn stop_returning(mut self) -> Result<(), nvarray_nbd::NbdError> {
        self.shutdown.shutdown();
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.shutdown.shutdown();
            let _ = t.join();
        }
    }
}

/// A TCP connection to `127.0.0.1:port` whose own end is bound to `from` (which std's
/// `TcpStream::connect` cannot choose).
pub fn connect_from(from: std::net::Ipv4Addr, port: u16) -> std::io::Result<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: socket() takes three integers and returns a new descriptor or -1 (checked).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns; the stream closes it.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let local = sockaddr(from, 0);
    let remote = sockaddr(std::net::Ipv4Addr::LOCALHOST, port);
    // SAFETY: both point at live sockaddr_in values of `len` bytes; the descriptor is open.
    unsafe {
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0
            || libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(stream)
}

/// Read requests of `len_bytes` at offset 0, one per cookie, as one buffer to send at once.
pub fn read_burst(cookies: impl IntoIterator<Item = u64>, len_bytes: u32) -> Vec<u8> {
    cookies
        .into_iter()
        .flat_map(|cookie| {
            RequestHeader {
                magic: REQUEST_MAGIC,
                flags: 0,
                kind: CMD_READ,
                cookie,
                offset_bytes: 0,
                len_bytes,
            }
            .encode()
        })
        .collect()
}

/// A count or seed from the environment (`scripts/campaign.sh` sets them), else `default`.
#[allow(dead_code)]
pub fn campaign_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}
