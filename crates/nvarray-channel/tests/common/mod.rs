//! A channel daemon over a small `dram` device in a temporary directory, stopped when dropped.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use nvarray_channel::{ChannelError, Daemon, DaemonOptions, Grant, ShutdownHandle};
use nvarray_host::{Device, Options};
use nvarray_model::presets;

pub const SIZE_BYTES: u64 = 64 << 20;

pub struct Running {
    pub socket: PathBuf,
    pub daemon: Arc<Daemon>,
    pub device: Arc<Device>,
    shutdown: ShutdownHandle,
    thread: Option<JoinHandle<Result<(), ChannelError>>>,
    _dir: tempfile::TempDir,
}

/// This process's user id (the one the daemon sees on its socket).
pub fn my_uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The whole device, read-write, for this user.
pub fn whole_device() -> Vec<Grant> {
    vec![format!("all:0:{SIZE_BYTES}:rw:{}", my_uid())
        .parse()
        .unwrap()]
}

impl Running {
    pub fn start(grants: Vec<Grant>) -> Running {
        Running::start_on("dram", grants)
    }

    pub fn start_on(preset: &str, grants: Vec<Grant>) -> Running {
        let dir = tempfile::tempdir().unwrap();
        let mut config = presets::preset(preset).unwrap().load(&[]).unwrap();
        config.memory.capacity_bytes = SIZE_BYTES;
        let options = Options {
            device_threads: 0,
            buffer_bytes: Some(64 * 1024),
            ..Options::default()
        };
        let device = Arc::new(Device::open(&config, &options).unwrap());
        let socket = dir.path().join("nvarray.sock");
        let daemon = Arc::new(
            Daemon::bind(
                Arc::clone(&device),
                DaemonOptions {
                    socket: socket.clone(),
                    grants,
                    channels_max: 16,
                },
            )
            .unwrap(),
        );
        let shutdown = daemon.shutdown_handle();
        let running = Arc::clone(&daemon);
        let thread = std::thread::spawn(move || running.run());
        Running {
            socket,
            daemon,
            device,
            shutdown,
            thread: Some(thread),
            _dir: dir,
        }
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
