//! The client's end of a channel: connect, then submit commands and poll completions through
//! shared memory alone. `libnvarray` (the C library) is this, behind a C ABI.
//!
//! Asynchronous commands name buffers inside the channel's DMA region (`Channel::buffer`);
//! the synchronous `read` / `write` stage any memory through it. A channel is used by one
//! thread at a time (`Send`, not `Sync`).

use std::fs::File;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::hello::{Hello, Reply, REPLY_BYTES};
use crate::layout::{
    CqEntry, Geometry, Region, SqEntry, CLOSED, CQ_HEAD, CQ_TAIL, SLEEPING, WAITING,
};
use crate::layout::{OP_FLUSH, OP_READ, OP_TRIM, OP_WRITE, SQ_HEAD, SQ_TAIL, VERSION};
use crate::layout::{OP_ZONE_CLOSE, OP_ZONE_FINISH, OP_ZONE_OPEN, OP_ZONE_REPORT, OP_ZONE_RESET};
use crate::status::ChannelStatus;
use crate::{sys, wakeups, ChannelError};

/// Spins of an empty wait before the client sleeps on the completion tail (about 20 µs: a
/// completion that late means the device is slow or the daemon's thread is not running, and a
/// spinning client is in its way; the daemon wakes a sleeper after posting).
const SPINS_BEFORE_SLEEP: u32 = 4096;
/// Longest sleep before the client looks at whether the daemon is still there.
const SLEEP_MAX: std::time::Duration = std::time::Duration::from_millis(10);
/// Spins between looks at whether the daemon is still there.
const SPINS_PER_LIVENESS_CHECK: u32 = 1 << 14;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    /// Deallocate a range (no data).
    Trim,
    /// A zoned namespace's report zones into the buffer (`Channel::report_zones`).
    ZoneReport,
    /// Zone management on the zone starting at the offset (no data).
    ZoneReset,
    ZoneFinish,
    ZoneOpen,
    ZoneClose,
}

impl Op {
    fn code(self) -> u32 {
        match self {
            Op::Read => OP_READ,
            Op::Write => OP_WRITE,
            Op::Flush => OP_FLUSH,
            Op::Trim => OP_TRIM,
            Op::ZoneReport => OP_ZONE_REPORT,
            Op::ZoneReset => OP_ZONE_RESET,
            Op::ZoneFinish => OP_ZONE_FINISH,
            Op::ZoneOpen => OP_ZONE_OPEN,
            Op::ZoneClose => OP_ZONE_CLOSE,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::ZoneReport => "report zones",
            Op::ZoneReset => "zone reset",
            Op::ZoneFinish => "zone finish",
            Op::ZoneOpen => "zone open",
            Op::ZoneClose => "zone close",
        }
    }

    /// Whether the command moves bytes to or from its buffer.
    fn moves_data(self) -> bool {
        matches!(self, Op::Read | Op::Write | Op::ZoneReport)
    }
}

/// A finished asynchronous command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub user_data: u64,
    pub status: ChannelStatus,
}

/// Why `submit` did not queue a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// `queue_depth` commands are in flight: poll first.
    Full,
    /// The buffer lies outside the DMA region.
    OutsideRegion,
}

/// An open channel.
pub struct Channel {
    socket: UnixStream,
    region: Region,
    geometry: Geometry,
    sq_tail: u32,
    cq_head: u32,
    free_ids: Vec<u32>,
    /// Per id: the caller's value, while a command with that id is in flight.
    user_data: Box<[Option<u64>]>,
    in_flight: u32,
    /// Commands the daemon answered with an id this channel has not in flight (only a
    /// corrupted ring can cause them).
    pub stray_completions: u64,
}

impl Channel {
    /// Connects to the daemon at `socket` with its default queue depth and DMA region.
    pub fn open(socket: &Path) -> Result<Channel, ChannelError> {
        Channel::open_with(socket, 0, 0)
    }

    /// Connects, asking for `queue_depth` commands in flight and `buffer_bytes` of DMA
    /// region (0: the daemon's default of each).
    pub fn open_with(
        socket: &Path,
        queue_depth: u32,
        buffer_bytes: u64,
    ) -> Result<Channel, ChannelError> {
        let stream = UnixStream::connect(socket).map_err(|source| ChannelError::Connect {
            path: socket.to_path_buf(),
            source,
        })?;
        let hello = Hello {
            version: VERSION,
            queue_depth,
            buffer_bytes,
        };
        (&stream).write_all(&hello.encode())?;
        let mut b = [0u8; REPLY_BYTES];
        let (n, fd) = sys::recv_with_fd(&stream, &mut b)?;
        let reply = Reply::decode(&b[..n]).ok_or(ChannelError::Protocol)?;
        if reply.errno != 0 {
            return Err(ChannelError::Refused {
                errno: reply.errno,
                message: reply.message,
            });
        }
        let file = File::from(fd.ok_or(ChannelError::Protocol)?);
        Channel::over(stream, &file)
    }

    /// The channel whose memory is `file`, its daemon at the other end of `stream`: what a
    /// daemon's reply hands over (`open_with`; the simulated daemon, `SimulatedDaemon`).
    pub(crate) fn over(stream: UnixStream, file: &File) -> Result<Channel, ChannelError> {
        let geometry = Region::read_geometry(file).map_err(|_| ChannelError::Protocol)?;
        let region = Region::map(file, geometry)?;
        stream.set_nonblocking(true)?;
        let depth = geometry.queue_depth;
        Ok(Channel {
            socket: stream,
            region,
            geometry,
            sq_tail: 0,
            cq_head: 0,
            free_ids: (0..depth).rev().collect(),
            user_data: vec![None; depth as usize].into_boxed_slice(),
            in_flight: 0,
            stray_completions: 0,
        })
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The DMA region's first byte (`geometry().buffer_bytes` long).
    pub fn buffer(&self) -> *mut u8 {
        self.region.data()
    }

    /// Copies `src` into the DMA region at `at` (panics outside it).
    pub fn fill(&self, at: u64, src: &[u8]) {
        self.region.copy_in(at, src);
    }

    /// Copies from the DMA region at `at` into `dst` (panics outside it).
    pub fn copy_from_region(&self, at: u64, dst: &mut [u8]) {
        self.region.copy_out(at, dst);
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Queues one command whose data is at `buf` in the DMA region and makes it visible to
    /// the device at once.
    pub fn submit(
        &mut self,
        op: Op,
        offset: u64,
        len: u32,
        buf: u64,
        user_data: u64,
    ) -> Result<(), SubmitError> {
        if op.moves_data() && !self.region.holds(buf, u64::from(len)) {
            return Err(SubmitError::OutsideRegion);
        }
        let id = self.free_ids.pop().ok_or(SubmitError::Full)?;
        debug_assert!(
            self.user_data[id as usize].is_none(),
            "free id {id} in flight"
        );
        self.user_data[id as usize] = Some(user_data);
        self.in_flight += 1;
        debug_assert_eq!(
            self.in_flight as usize + self.free_ids.len(),
            self.user_data.len(),
            "ids in flight and free do not add up"
        );
        self.push(SqEntry {
            op: op.code(),
            id,
            offset,
            len,
            reserved: 0,
            buf,
        });
        Ok(())
    }

    /// Writes an entry as it is, unchecked, and makes it visible: for tests that show what
    /// the device does with entries this client would never write. Its completion, if any,
    /// is counted in `stray_completions` unless its id is one in flight.
    pub fn push_raw(&mut self, entry: SqEntry) {
        self.push(entry);
    }

    fn push(&mut self, entry: SqEntry) {
        self.region.write_sq(self.sq_tail, entry);
        self.sq_tail = self.sq_tail.wrapping_add(1);
        let (tail, sleeping) = (self.region.word(SQ_TAIL), self.region.word(SLEEPING));
        if wakeups::publish_commands(tail, self.sq_tail, sleeping) {
            // A full socket buffer means wake bytes are waiting already.
            let _ = (&self.socket).write(&[1]);
        }
    }

    /// Takes the daemon's published counters as the truth again after this process scribbled
    /// on its own rings (a fault the daemon stalls the channel for): every command in flight
    /// is forgotten, and a completion of one that still comes counts as a stray.
    pub fn resynchronise(&mut self) {
        self.sq_tail = self.region.word(SQ_HEAD).load(Ordering::Acquire);
        self.region
            .word(SQ_TAIL)
            .store(self.sq_tail, Ordering::Release);
        self.cq_head = self.region.word(CQ_TAIL).load(Ordering::Acquire);
        self.region
            .word(CQ_HEAD)
            .store(self.cq_head, Ordering::Release);
        self.free_ids = (0..self.geometry.queue_depth).rev().collect();
        self.user_data.iter_mut().for_each(|u| *u = None);
        self.in_flight = 0;
    }

    /// The channel's shared memory, for tests that scribble on it as a faulty client would.
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Collects finished commands without blocking, handing each to `f`. Returns how many.
    pub fn poll(&mut self, mut f: impl FnMut(Completion)) -> usize {
        let tail = self.region.word(CQ_TAIL).load(Ordering::Acquire);
        if tail.wrapping_sub(self.cq_head) > self.geometry.ring_entries {
            // Only a scribble on this process's own memory moves the tail that far: nothing
            // readable is there.
            return 0;
        }
        let mut n = 0;
        let consumed = self.cq_head != tail;
        while self.cq_head != tail {
            let CqEntry { id, status } = self.region.read_cq(self.cq_head);
            self.cq_head = self.cq_head.wrapping_add(1);
            match self.user_data.get_mut(id as usize).and_then(Option::take) {
                Some(user_data) => {
                    self.free_ids.push(id);
                    self.in_flight -= 1;
                    f(Completion {
                        user_data,
                        status: ChannelStatus::from_code(status),
                    });
                    n += 1;
                }
                None => self.stray_completions += 1,
            }
        }
        if consumed {
            self.region
                .word(CQ_HEAD)
                .store(self.cq_head, Ordering::Release);
        }
        debug_assert_eq!(
            self.in_flight as usize + self.free_ids.len(),
            self.user_data.len(),
            "ids in flight and free do not add up"
        );
        n
    }

    /// Polls until at least `min` commands (at most those in flight) have finished.
    pub fn wait(
        &mut self,
        min: usize,
        mut f: impl FnMut(Completion),
    ) -> Result<usize, ChannelError> {
        let min = min.min(self.in_flight as usize);
        let mut n = self.poll(&mut f);
        let mut spins: u32 = 0;
        while n < min {
            n += self.poll(&mut f);
            spins = spins.wrapping_add(1);
            if spins >= SPINS_BEFORE_SLEEP && n < min {
                self.sleep_for_completion();
                if !self.alive() {
                    return Err(ChannelError::Closed);
                }
            } else {
                std::hint::spin_loop();
            }
            if spins.is_multiple_of(SPINS_PER_LIVENESS_CHECK) && !self.alive() {
                return Err(ChannelError::Closed);
            }
        }
        Ok(n)
    }

    /// Sleeps until the daemon posts a completion (or `SLEEP_MAX`): flag, look once more,
    /// then a futex wait on the tail as last seen (`wakeups::announce_wait`).
    fn sleep_for_completion(&self) {
        let waiting = self.region.word(WAITING);
        if let Some(tail) = wakeups::announce_wait(waiting, self.region.word(CQ_TAIL), self.cq_head)
        {
            self.region.sleep_while(CQ_TAIL, tail, SLEEP_MAX);
        }
        waiting.store(0, Ordering::Relaxed);
    }

    /// Whether the daemon has dropped this channel (stopping, or it found the client gone):
    /// one load of shared memory, no system call. A daemon killed outright does not say so;
    /// `alive` also asks the socket.
    pub fn closed(&self) -> bool {
        self.region.word(CLOSED).load(Ordering::Acquire) != 0
    }

    /// Whether the daemon still serves this channel.
    pub fn alive(&self) -> bool {
        !self.closed() && !sys::poll_peer(&self.socket).1
    }

    /// Reads `buf.len()` bytes at `offset`, staged through the DMA region.
    pub fn read(&mut self, buf: &mut [u8], offset: u64) -> Result<(), ChannelError> {
        self.transfer(Op::Read, offset, Staged::Read(buf))
    }

    /// Writes `buf` at `offset` (acknowledged when this returns).
    pub fn write(&mut self, buf: &[u8], offset: u64) -> Result<(), ChannelError> {
        self.transfer(Op::Write, offset, Staged::Write(buf))
    }

    /// Makes every acknowledged write durable (with a durable file backing).
    pub fn flush(&mut self) -> Result<(), ChannelError> {
        self.idle()?;
        self.submit(Op::Flush, 0, 0, 0, 0)
            .expect("an idle channel has room");
        let mut status = ChannelStatus::Ok;
        self.wait(1, |c| status = c.status)?;
        command_result(Op::Flush, 0, 0, status)
    }

    pub(crate) fn idle(&self) -> Result<(), ChannelError> {
        match self.in_flight {
            0 => Ok(()),
            n => Err(ChannelError::Busy(n)),
        }
    }

    /// Splits the request into commands of the device's largest size, each staged in its own
    /// slot of the DMA region, as many in flight as there are slots; keeps the first error.
    fn transfer(&mut self, op: Op, offset: u64, mut data: Staged<'_>) -> Result<(), ChannelError> {
        self.idle()?;
        let len = data.len();
        if len >= 1 << 40 {
            return Err(ChannelError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "one synchronous request of 1 TiB or more",
            )));
        }
        let step = self.geometry.command_bytes_max as u64;
        let slots =
            (self.geometry.buffer_bytes / step).clamp(1, u64::from(self.geometry.queue_depth));
        let mut free_slots: Vec<u64> = (0..slots).rev().collect();
        let mut first_error = Ok(());
        let mut at = 0u64;
        while at < len || self.in_flight > 0 {
            while at < len && first_error.is_ok() {
                let Some(slot) = free_slots.pop() else { break };
                let n = step.min(len - at);
                let buf = slot * step;
                if let Staged::Write(src) = &data {
                    self.region
                        .copy_in(buf, &src[at as usize..(at + n) as usize]);
                }
                self.submit(op, offset + at, n as u32, buf, (slot << 40) | at)
                    .expect("a free slot means a free id");
                at += n;
            }
            if first_error.is_err() && self.in_flight == 0 {
                break;
            }
            let mut done = Vec::new();
            self.wait(1, |c| done.push(c))?;
            let region = &self.region;
            for c in done {
                let (slot, at) = (c.user_data >> 40, c.user_data & ((1 << 40) - 1));
                let n = step.min(len - at);
                if c.status != ChannelStatus::Ok {
                    if first_error.is_ok() {
                        first_error = command_result(op, offset + at, n, c.status);
                    }
                } else if let Staged::Read(dst) = &mut data {
                    region.copy_out(slot * step, &mut dst[at as usize..(at + n) as usize]);
                }
                free_slots.push(slot);
            }
            if first_error.is_err() {
                at = len;
            }
        }
        // Every byte was staged (or given up after an error), and every slot came back.
        debug_assert_eq!(at, len, "staged {at} of {len} bytes");
        debug_assert_eq!(free_slots.len() as u64, slots, "slots still out");
        first_error
    }
}

pub(crate) fn command_result(
    op: Op,
    offset: u64,
    len: u64,
    status: ChannelStatus,
) -> Result<(), ChannelError> {
    match status {
        ChannelStatus::Ok => Ok(()),
        status => Err(ChannelError::Command {
            op: op.name(),
            offset,
            len,
            status,
        }),
    }
}

enum Staged<'b> {
    Read(&'b mut [u8]),
    Write(&'b [u8]),
}

impl Staged<'_> {
    fn len(&self) -> u64 {
        match self {
            Staged::Read(b) => b.len() as u64,
            Staged::Write(b) => b.len() as u64,
        }
    }
}
