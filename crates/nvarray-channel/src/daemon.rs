//! The device daemon: accepts client processes on a Unix socket, identifies each by the
//! kernel's credentials, gives it a channel (its rings and DMA region in a sealed memfd,
//! passed with `SCM_RIGHTS`), and serves every channel from one serving thread that polls
//! their rings, so neither side makes a system call per command.
//!
//! The serving thread spins while any channel is busy. After `SPIN_BEFORE_SLEEP` with nothing
//! to do and nothing in flight it marks every channel `sleeping`, checks their rings once
//! more, and sleeps in `poll` on the channels' sockets: a client that finds `sleeping` set
//! after making a command visible writes one byte to its socket (both sides fence between
//! their store and their load, so one of them sees the other's). A client's socket closing
//! (exit, `kill -9`) ends its channel: no more commands are taken, those in flight finish on
//! the device (an acknowledged write is on the device already), and its tags, queue pair and
//! memory are freed.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvarray_host::tag_share::{Seat, TagShare};
use nvarray_host::{CompletionMode, Device};
use nvarray_report::{ChannelCounts, RunReport};
use nvarray_run::served::ServedStats;

use crate::counts::Counts;
use crate::device_side::DeviceSide;
use crate::grants::{Grant, GrantTable};
use crate::greeting::{CloseLog, Closed, Greeted, Greeter};
use crate::hello::{Hello, Reply};
use crate::layout::{Geometry, Region, BUFFER_BYTES_MAX, QUEUE_DEPTH_DEFAULT, QUEUE_DEPTH_MAX};
use crate::layout::{SLEEPING, VERSION};
use crate::sys;
use crate::ChannelError;

/// Idle time the serving thread spins before it sleeps (a client's next command after a
/// longer pause pays one socket write and a wake-up).
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_millis(1);
/// Most channels open at once, by default.
pub const CHANNELS_DEFAULT: usize = 64;
/// The largest default DMA region (a client may ask for more, up to `BUFFER_BYTES_MAX`).
const BUFFER_BYTES_DEFAULT_MAX: u64 = 64 << 20;

/// How the daemon serves.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    /// The Unix socket clients connect to (created; an existing socket file is replaced only
    /// if nothing listens on it).
    pub socket: PathBuf,
    /// Who may touch which extents.
    pub grants: Vec<Grant>,
    /// Most channels open at once.
    pub channels_max: usize,
}

pub(crate) struct Shared {
    shutdown: AtomicBool,
    grants: GrantTable,
    served: ServedStats,
    pub(crate) counts: Arc<Counts>,
    /// The channels' fair shares of the device's tags.
    tags: Arc<TagShare>,
    incoming: Mutex<Vec<DeviceSide>>,
    has_incoming: AtomicBool,
    /// An eventfd that wakes a sleeping serving thread: a new channel, or shutdown.
    wake: OwnedFd,
}

impl Shared {
    /// The state the accepting and the serving side share, for `device` under `grants`.
    pub(crate) fn new(device: &Device, grants: &[Grant]) -> Result<Shared, ChannelError> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1 (checked).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(ChannelError::Io(io::Error::last_os_error()));
        }
        Ok(Shared {
            shutdown: AtomicBool::new(false),
            grants: GrantTable::new(grants.to_vec()),
            served: ServedStats::new(),
            counts: Arc::new(Counts::default()),
            tags: Arc::new(TagShare::new(device.tags())),
            incoming: Mutex::new(Vec::new()),
            has_incoming: AtomicBool::new(false),
            // SAFETY: `fd` is a fresh descriptor nothing else owns.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd; a full counter still leaves
        // it readable, which is all a sleeper needs.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn drain_wake(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Stops a running daemon from another thread.
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Shared>);

impl ShutdownHandle {
    /// Stops accepting; every channel's commands in flight finish, then `Daemon::run` flushes
    /// the device and returns.
    pub fn shutdown(&self) {
        self.0.shutdown.store(true, Ordering::SeqCst);
        self.0.wake();
    }
}

/// A channel daemon over one emulated device.
pub struct Daemon {
    device: Arc<Device>,
    listener: UnixListener,
    options: DaemonOptions,
    shared: Arc<Shared>,
}

impl Daemon {
    /// Binds the socket and checks the grants against the device.
    pub fn bind(device: Arc<Device>, options: DaemonOptions) -> Result<Daemon, ChannelError> {
        if let Some(g) = crate::grants::past_device(&options.grants, device.size_bytes()) {
            return Err(ChannelError::GrantPastDevice {
                grant: g.to_string(),
                size_bytes: device.size_bytes(),
            });
        }
        if options.channels_max == 0 {
            return Err(ChannelError::NoChannels);
        }
        let listener = bind_socket(&options.socket)?;
        Ok(Daemon {
            shared: Arc::new(Shared::new(&device, &options.grants)?),
            device,
            listener,
            options,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.options.socket
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(Arc::clone(&self.shared))
    }

    /// Replaces every grant; no channel takes another command under the old ones once this
    /// returns (a revoked extent fails the next command that touches it).
    pub fn set_grants(&self, grants: Vec<Grant>) -> Result<(), ChannelError> {
        if let Some(g) = crate::grants::past_device(&grants, self.device.size_bytes()) {
            return Err(ChannelError::GrantPastDevice {
                grant: g.to_string(),
                size_bytes: self.device.size_bytes(),
            });
        }
        self.shared.grants.replace(grants);
        Ok(())
    }

    pub fn grants(&self) -> Vec<Grant> {
        self.shared.grants.list()
    }

    pub fn counts(&self) -> ChannelCounts {
        self.shared.counts.snapshot()
    }

    /// The device report so far: one stream per client process (`pid N (name)`), and the
    /// channels' counts.
    pub fn report(&self) -> RunReport {
        let mut report = self.shared.served.report(&self.device, "channels");
        report.channels = Some(self.counts());
        report
    }

    /// Accepts and serves channels until `shutdown`; then lets every channel's commands in
    /// flight finish, flushes the device and removes the socket file.
    pub fn run(&self) -> Result<(), ChannelError> {
        let serving = {
            let (shared, device) = (Arc::clone(&self.shared), Arc::clone(&self.device));
            std::thread::Builder::new()
                .name("nvarray-channels".into())
                .spawn(move || serve(&shared, &device))?
        };
        self.listener.set_nonblocking(true)?;
        let result = self.accept_until_shutdown();
        // A failed accept loop still stops the serving thread.
        ShutdownHandle(Arc::clone(&self.shared)).shutdown();
        if serving.join().is_err() {
            // A serving-thread panic is a bug; a process serving others must not go on
            // pretending (as the emulator's device threads do).
            eprintln!("nvarray channels: the serving thread panicked; stopping");
            std::process::abort();
        }
        // A channel the accept loop made after the serving thread had stopped never served:
        // its session ends here.
        let late: Vec<DeviceSide> = std::mem::take(
            &mut *self
                .shared
                .incoming
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        retire_all(&self.shared, late);
        let _ = std::fs::remove_file(&self.options.socket);
        result?;
        let mut qp = self.device.queue_pair(CompletionMode::Spin);
        qp.flush(&self.device).map_err(ChannelError::Flush)
    }

    /// Accepts connections and reads their hellos, all at once (`greeting.rs`): a
    /// connection that stays silent, or trickles, holds up nobody else.
    fn accept_until_shutdown(&self) -> Result<(), ChannelError> {
        let mut greeter = Greeter::default();
        let mut log = CloseLog::default();
        let mut note = |who: &sys::Credentials, why: &Closed, now: Instant| {
            Counts::add(&self.shared.counts.refused);
            if let Some(line) = log.line(who, why, now) {
                eprintln!("nvarray channels: {line}");
            }
        };
        while !self.shared.shutdown.load(Ordering::SeqCst) {
            let mut fds = vec![self.listener.as_raw_fd(), self.shared.wake.as_raw_fd()];
            fds.extend(greeter.fds());
            let wait_ms = greeter.next_deadline().map_or(1000, |d| {
                let left = d.saturating_duration_since(Instant::now());
                (left.as_millis() as i32 + 1).min(1000)
            });
            let ready = sys::poll_readable(&fds, wait_ms)?;
            let now = Instant::now();
            if ready.first() == Some(&0) {
                loop {
                    match self.listener.accept() {
                        Ok((stream, _)) => {
                            for (who, why) in greeter.add(stream, now) {
                                note(&who, &why, now);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            // Waiting connections are at 2.. in `fds`; the ones added just now come after
            // those polled, and are read next round.
            let waiting: Vec<usize> = ready.iter().filter(|&&i| i >= 2).map(|&i| i - 2).collect();
            let round = greeter.round(&waiting, now);
            for (who, why) in round.closed {
                note(&who, &why, now);
            }
            for greeted in round.greeted {
                let who = greeted.who;
                if let Err(e) = self.admit(greeted) {
                    Counts::add(&self.shared.counts.refused);
                    eprintln!(
                        "nvarray channels: refused a channel to pid {} (uid {}): {e}",
                        who.pid, who.uid
                    );
                }
            }
        }
        Ok(())
    }

    /// One client's whole hello, checked; its channel made and handed to the serving thread,
    /// or a reply saying why not.
    fn admit(&self, greeted: Greeted) -> io::Result<()> {
        let Greeted {
            stream,
            who,
            hello: b,
        } = greeted;
        // The reply and the channel's descriptor go out with the socket blocking; a peer that
        // never reads cannot stall the loop on so little, and this bounds it anyway.
        stream.set_write_timeout(Some(Duration::from_millis(100)))?;
        let opened = Hello::decode(&b)
            .ok_or_else(|| (libc::EPROTO, "not an nvarray channel hello".to_string()))
            .and_then(|hello| {
                let limits = (&*self.shared, &*self.device, self.options.channels_max);
                open_channel(limits, stream.try_clone().map_err(io_refusal)?, who, &hello)
            });
        match opened {
            Ok((side, file, reply)) => {
                sys::send_with_fd(&stream, &reply.encode(), &file)?;
                // The device side's clone of the socket shares these settings.
                stream.set_write_timeout(None)?;
                stream.set_nonblocking(true)?;
                hand_over(&self.shared, side);
                Ok(())
            }
            Err((errno, message)) => {
                use std::io::Write;
                (&stream).write_all(
                    &Reply {
                        errno,
                        message: message.clone(),
                    }
                    .encode(),
                )?;
                Err(io::Error::other(message))
            }
        }
    }
}

/// A refusal of a channel: the errno and message the client's reply carries.
pub(crate) type Refusal = (i32, String);

fn io_refusal(e: io::Error) -> Refusal {
    (e.raw_os_error().unwrap_or(libc::EIO), e.to_string())
}

/// Makes the channel `hello` asks for over `stream`, for the client `who`: its device side
/// (for the serving thread), the memory file to send the client and the reply with it; or
/// why not. `limits` are the daemon's shared state, its device and its most channels. The
/// caller sends the reply and makes the socket non-blocking.
pub(crate) fn open_channel(
    (shared, device, channels_max): (&Shared, &Device, usize),
    stream: UnixStream,
    who: sys::Credentials,
    hello: &Hello,
) -> Result<(DeviceSide, std::fs::File, Reply), Refusal> {
    if hello.version != VERSION {
        return Err((
            libc::EPROTO,
            format!("client speaks version {}, daemon {VERSION}", hello.version),
        ));
    }
    let live = shared.counts.live.load(Ordering::SeqCst);
    if live as usize >= channels_max {
        return Err((
            libc::EBUSY,
            format!("{live} channels open, the most this daemon serves"),
        ));
    }
    if shared.grants.extents(who.uid).1.is_empty() {
        return Err((libc::EACCES, format!("no grant for uid {}", who.uid)));
    }
    let geometry = geometry(device, hello);
    let file = sys::sealed_memfd("nvarray-channel", geometry.map_bytes).map_err(io_refusal)?;
    let region = Region::map(&file, geometry).map_err(io_refusal)?;
    region.write_geometry();
    // A new channel starts asleep: its first command wakes the serving thread, which may
    // be sleeping without it in its poll set.
    region.word(SLEEPING).store(1, Ordering::SeqCst);
    let reply = Reply {
        errno: 0,
        message: format!("channel for pid {}", who.pid),
    };
    let session = shared
        .served
        .open(&format!("pid {} ({})", who.pid, sys::process_name(who.pid)));
    let side = DeviceSide::new(
        region,
        stream,
        who,
        device.queue_pair(CompletionMode::Spin),
        session,
        Arc::clone(&shared.counts),
        Seat::new(Arc::clone(&shared.tags)),
    );
    Counts::add(&shared.counts.opened);
    Counts::add(&shared.counts.live);
    Ok((side, file, reply))
}

/// Gives a new channel's device side to the serving thread.
fn hand_over(shared: &Shared, side: DeviceSide) {
    shared
        .incoming
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(side);
    shared.has_incoming.store(true, Ordering::SeqCst);
    shared.wake();
}

/// The channel a hello gets: its queue depth (default 64, at most 1024) and a DMA region
/// for that many of the device's largest commands (at most 64 MiB unless asked).
fn geometry(d: &Device, hello: &Hello) -> Geometry {
    let queue_depth = match hello.queue_depth {
        0 => QUEUE_DEPTH_DEFAULT,
        n => n.min(QUEUE_DEPTH_MAX),
    };
    let command = u64::from(d.command_bytes_max());
    let buffer_bytes = match hello.buffer_bytes {
        0 => (u64::from(queue_depth) * command).min(BUFFER_BYTES_DEFAULT_MAX),
        n => n.min(BUFFER_BYTES_MAX),
    }
    .max(command);
    let mut geometry = Geometry::new(
        queue_depth,
        buffer_bytes,
        d.block_bytes(),
        d.command_bytes_max(),
        d.size_bytes(),
    );
    if let Some(zones) = d.zone_layout() {
        let block = u64::from(d.block_bytes());
        geometry.zone_bytes = zones.zone_blocks * block;
        geometry.zone_capacity_bytes = zones.capacity_blocks * block;
        geometry.max_open_zones = zones.max_open;
        geometry.max_active_zones = zones.max_active;
    }
    debug_assert!(
        geometry.is_valid(geometry.map_bytes),
        "a geometry clients refuse: {geometry:?}"
    );
    geometry
}

/// Binds `path`, replacing a socket file nobody listens on (a daemon that was killed), and
/// refusing one somebody does.
///
/// Every user may connect (mode 0666): who may touch what is the grants' business, and a user
/// with none is refused a channel with a message saying so.
fn bind_socket(path: &Path) -> Result<UnixListener, ChannelError> {
    let listener = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Err(ChannelError::SocketInUse(path.to_path_buf()));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path)?
        }
        Err(source) => {
            return Err(ChannelError::Bind {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// The serving thread: passes over every channel until shutdown and the last one closes.
fn serve(shared: &Shared, device: &Device) {
    let mut sides: Vec<DeviceSide> = Vec::new();
    let mut idle_since = Instant::now();
    let mut passes: u64 = 0;
    loop {
        let work = pass_all(shared, device, &mut sides);
        passes += 1;
        let stopping = shared.shutdown.load(Ordering::Relaxed);
        let idle = work == 0;
        // The sockets (a client gone, wake bytes) are looked at every 256 passes, and at once
        // when stopping: a system call per pass would cost more than the pass.
        if passes.is_multiple_of(256) || stopping {
            look_at_sockets(&mut sides, stopping);
            retire(shared, &mut sides);
            if stopping && sides.is_empty() && !shared.has_incoming.load(Ordering::SeqCst) {
                return;
            }
        }
        if !idle {
            idle_since = Instant::now();
        } else if passes.is_multiple_of(64)
            && sides.iter().all(|s| s.in_flight() == 0)
            && idle_since.elapsed() >= SPIN_BEFORE_SLEEP
        {
            sleep(shared, &sides);
            look_at_sockets(&mut sides, false);
            idle_since = Instant::now();
        }
    }
}

/// One pass of the serving thread: the channels handed over since the last join, then one
/// pass over each channel. Returns the commands and completions it handled.
pub(crate) fn pass_all(shared: &Shared, device: &Device, sides: &mut Vec<DeviceSide>) -> u32 {
    if shared.has_incoming.swap(false, Ordering::SeqCst) {
        let mut incoming = shared.incoming.lock().unwrap_or_else(|e| e.into_inner());
        for side in incoming.drain(..) {
            side.awake();
            sides.push(side);
        }
    }
    let mut work = 0;
    for side in sides.iter_mut() {
        work += side.pass(device, &shared.grants);
    }
    work
}

/// Closes the channels whose client went away (or all, when stopping), and drains wake bytes.
pub(crate) fn look_at_sockets(sides: &mut [DeviceSide], stopping: bool) {
    for side in sides.iter_mut() {
        if side.closing {
            continue;
        }
        let (readable, hung_up) = sys::poll_peer(&side.socket);
        let mut gone = hung_up;
        if readable {
            let mut b = [0u8; 64];
            // Wake bytes carry nothing; 0 bytes is the client's end of stream.
            gone |= matches!((&side.socket).read(&mut b), Ok(0));
        }
        if gone || stopping {
            side.close(gone);
        }
    }
}

/// Ends the closed channels whose commands have all finished.
pub(crate) fn retire(shared: &Shared, sides: &mut Vec<DeviceSide>) {
    let (done, open): (Vec<DeviceSide>, Vec<DeviceSide>) = std::mem::take(sides)
        .into_iter()
        .partition(|s| s.closing && s.in_flight() == 0);
    *sides = open;
    retire_all(shared, done);
}

/// Ends channels with nothing in flight: their statistics kept (or forgotten, for one that
/// sent nothing) and the live count lowered.
pub(crate) fn retire_all(shared: &Shared, sides: Vec<DeviceSide>) {
    for side in sides {
        match side.finish() {
            (session, true) => shared.served.close(session),
            (session, false) => shared.served.discard(session),
        }
        let live = shared.counts.live.fetch_sub(1, Ordering::SeqCst);
        // Every channel retired was counted live when `open_channel` made it.
        debug_assert!(live > 0, "a channel retired with none live");
    }
}

/// Sleeps until a client writes to its socket (or goes away), a new channel arrives, or
/// shutdown; at most a second.
fn sleep(shared: &Shared, sides: &[DeviceSide]) {
    // Each channel marked, then looked at once more (`wakeups::announce_sleep`).
    let mut work_came = false;
    for side in sides {
        work_came |= side.announce_sleep();
    }
    let work_came = work_came
        || shared.has_incoming.load(Ordering::SeqCst)
        || shared.shutdown.load(Ordering::SeqCst);
    if !work_came {
        let mut fds: Vec<RawFd> = sides.iter().map(|s| s.socket.as_raw_fd()).collect();
        fds.push(shared.wake.as_raw_fd());
        sys::wait_any(&fds, 1000);
        shared.drain_wake();
    }
    for side in sides {
        side.awake();
    }
}
