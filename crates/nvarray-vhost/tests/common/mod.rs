//! A vhost-user-blk back end over a small `moneta` device in a temporary directory, in this
//! process, stopped by `stop`; its log lines kept for the tests to wait on.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nvarray_host::{Device, Options};
use nvarray_model::presets;
use nvarray_vhost::{ShutdownHandle, VhostError, VhostOptions, VhostServer};

pub const SIZE: u64 = 16 << 20;
pub const BLOCK: u64 = 512;

pub struct Running {
    pub socket: PathBuf,
    pub server: Arc<VhostServer>,
    shutdown: ShutdownHandle,
    thread: Option<JoinHandle<Result<(), VhostError>>>,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub fn start(read_only: bool, queues: u16) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let mut config = presets::preset("moneta").unwrap().load(&[]).unwrap();
        config.memory.capacity_bytes = SIZE;
        let options = Options {
            device_threads: 0,
            // Small buffers: a 64 KiB request becomes several device commands.
            buffer_bytes: Some(16 * 1024),
            ..Options::default()
        };
        let device = Arc::new(Device::open(&config, &options).unwrap());
        let socket = dir.path().join("vhost.sock");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let server = Arc::new(
            VhostServer::bind(
                device,
                VhostOptions {
                    socket: socket.clone(),
                    read_only,
                    queues,
                    serial: "nvarray-test".into(),
                },
                Arc::new(move |m: &str| sink.lock().unwrap().push(m.to_string())),
            )
            .unwrap(),
        );
        let shutdown = server.shutdown_handle();
        let running = Arc::clone(&server);
        let thread = std::thread::spawn(move || running.run());
        Running {
            socket,
            server,
            shutdown,
            thread: Some(thread),
            log,
            _dir: dir,
        }
    }

    pub fn stop(mut self) {
        self.shutdown.shutdown();
        self.thread.take().unwrap().join().unwrap().unwrap();
    }

    /// Waits until the server has logged a line containing `what` (a guest's disconnection).
    pub fn wait_for_log(&self, what: &str) -> String {
        for _ in 0..1000 {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no log line with {what:?}: {:?}", self.log.lock().unwrap());
    }
}
