//! The channel daemon run by one thread, step by step, for deterministic simulation (issue 58):
//! no socket to listen on, no accepting thread, no serving thread. `connect` makes a channel
//! as a client's hello would (`daemon::open_channel`: the same checks, the same memory), over
//! a socket pair; `step` is one pass of the serving thread (`daemon::pass_all`) and its look
//! at the clients' sockets. A test drives clients, faults and steps from a seed, so a failure
//! replays exactly (`tests/simulation.rs`).

use std::os::unix::net::UnixStream;
use std::sync::Arc;

use nvarray_host::Device;
use nvarray_report::ChannelCounts;

use crate::daemon::{self, Shared};
use crate::device_side::DeviceSide;
use crate::grants::Grant;
use crate::hello::Hello;
use crate::layout::VERSION;
use crate::sys::Credentials;
use crate::{Channel, ChannelError};

/// A channel daemon without threads or a listening socket, stepped by its caller.
pub struct SimulatedDaemon {
    device: Arc<Device>,
    shared: Shared,
    sides: Vec<DeviceSide>,
    channels_max: usize,
}

impl SimulatedDaemon {
    /// A daemon over `device` that lets `grants` through and serves at most `channels_max`
    /// channels at once.
    pub fn new(
        device: Arc<Device>,
        grants: Vec<Grant>,
        channels_max: usize,
    ) -> Result<Self, ChannelError> {
        let shared = Shared::new(&device, &grants)?;
        Ok(SimulatedDaemon {
            device,
            shared,
            sides: Vec::new(),
            channels_max,
        })
    }

    /// A channel for the client `pid` of user `uid`, as its hello asking for `queue_depth`
    /// commands and `buffer_bytes` of DMA region (0: the defaults) would get it; the daemon's
    /// refusal as the client would see it.
    pub fn connect(
        &mut self,
        pid: u32,
        uid: u32,
        queue_depth: u32,
        buffer_bytes: u64,
    ) -> Result<Channel, ChannelError> {
        let (client, daemon_end) = UnixStream::pair()?;
        let hello = Hello {
            version: VERSION,
            queue_depth,
            buffer_bytes,
        };
        let who = Credentials { pid, uid, gid: uid };
        let limits = (&self.shared, &*self.device, self.channels_max);
        match daemon::open_channel(limits, daemon_end.try_clone()?, who, &hello) {
            Ok((side, file, _reply)) => {
                daemon_end.set_nonblocking(true)?;
                side.awake();
                self.sides.push(side);
                Channel::over(client, &file)
            }
            Err((errno, message)) => Err(ChannelError::Refused { errno, message }),
        }
    }

    /// One pass over every channel (commands taken, completions posted), then a look at the
    /// clients' sockets: a client gone has its channel closed, and a closed channel with
    /// nothing in flight is retired. Returns the commands and completions handled.
    pub fn step(&mut self) -> u32 {
        let work = daemon::pass_all(&self.shared, &self.device, &mut self.sides);
        daemon::look_at_sockets(&mut self.sides, false);
        daemon::retire(&self.shared, &mut self.sides);
        // One thread, no accept loop: the live count is the channels held here.
        debug_assert_eq!(
            self.shared
                .counts
                .live
                .load(std::sync::atomic::Ordering::SeqCst),
            self.sides.len() as u64,
            "live channels miscounted"
        );
        work
    }

    /// Channels open (retired ones not counted).
    pub fn channels(&self) -> usize {
        self.sides.len()
    }

    /// Commands in flight on the device, over every channel.
    pub fn in_flight(&self) -> u32 {
        self.sides.iter().map(|s| s.in_flight()).sum()
    }

    /// What the daemon let in and kept out.
    pub fn counts(&self) -> ChannelCounts {
        self.shared.counts.snapshot()
    }

    /// Stops as the daemon does: every channel closed once its commands finish, then the
    /// device flushed (the flush's error, as `Daemon::run` returns it).
    pub fn shutdown(mut self) -> Result<(), ChannelError> {
        daemon::look_at_sockets(&mut self.sides, true);
        while !self.sides.is_empty() {
            daemon::pass_all(&self.shared, &self.device, &mut self.sides);
            daemon::retire(&self.shared, &mut self.sides);
        }
        let mut qp = self.device.queue_pair(nvarray_host::CompletionMode::Spin);
        qp.flush(&self.device).map_err(ChannelError::Flush)
    }
}
