//! The server in-process over a small `dram` device on a Unix socket, for the tests.
#![allow(dead_code)]

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

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
        let overrides: Vec<(String, String)> = overrides
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut config = presets::preset("dram").unwrap().load(&overrides).unwrap();
        config.memory.capacity_bytes = SIZE_BYTES;
        // Small tags so large requests become several commands.
        let options = Options {
            device_threads: 0,
            buffer_bytes: Some(64 * 1024),
            ..Options::default()
        };
        let device = Arc::new(Device::open(&config, &options).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let server = Server::bind(
            device,
            ServerOptions {
                listen: Listen::Unix(socket.clone()),
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

    pub fn client(&self, structured: bool) -> Client {
        let s = UnixStream::connect(&self.socket).unwrap();
        Client::connect(Stream::Unix(s), "", structured).unwrap()
    }

    pub fn stop(mut self) {
        self.shutdown.shutdown();
        self.thread.take().unwrap().join().unwrap().unwrap();
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
