//! The device's end of one channel: takes the commands a client wrote into its rings, checks
//! each (ring fields, the device's limits, the client's grants) before it touches data, serves
//! the good ones on the channel's own queue pair and posts every completion, good or refused,
//! into the client's completion ring.
//!
//! Nothing the client writes is trusted: the counters are checked against the daemon's own
//! copies (a tail more than a ring ahead, or a completion head that would overwrite unread
//! entries, stops the channel taking commands until the client mends it, and is counted), an
//! entry is read once into a local copy before it is checked, and data moves only inside the
//! channel's DMA region. A bad command fails alone; a bad channel stalls alone.

use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use nvarray_host::tag_share::{Seat, TagShare};
use nvarray_host::{Device, HostError, Opcode, QueuePair, ZoneAction};
use nvarray_run::served::Session;

use crate::counts::Counts;
use crate::grants::{Extents, GrantTable};
use crate::layout::{
    CqEntry, Region, SqEntry, CQ_HEAD, CQ_TAIL, OP_FLUSH, OP_READ, OP_TRIM, OP_WRITE,
};
use crate::layout::{CLOSED, SLEEPING, SQ_HEAD, SQ_TAIL, WAITING};
use crate::layout::{OP_ZONE_CLOSE, OP_ZONE_FINISH, OP_ZONE_OPEN, OP_ZONE_REPORT, OP_ZONE_RESET};
use crate::status::ChannelStatus;
use crate::sys::Credentials;
use crate::wakeups;

/// Most commands one pass takes from a channel, so one busy channel cannot hold the serving
/// thread from the others for long.
pub const TAKE_MAX: u32 = 32;

struct InFlight {
    id: u32,
    op: Opcode,
    buf: u64,
    len: u32,
    taken_ns: u64,
}

pub struct DeviceSide {
    region: Region,
    pub(crate) socket: UnixStream,
    pub(crate) credentials: Credentials,
    qp: QueuePair,
    session: Session,
    begun: bool,
    extents: Extents,
    grants_generation: u64,
    /// The daemon's own counters; the ones in shared memory are published copies.
    sq_head: u32,
    cq_tail: u32,
    ring_entries: u32,
    /// Per id: whether a command with it is in flight.
    id_busy: Box<[bool]>,
    /// Per device tag: the command on it.
    on_tag: Box<[Option<InFlight>]>,
    in_flight: u32,
    /// Client gone or daemon stopping: no more commands are taken; those in flight finish.
    pub(crate) closing: bool,
    /// The client has gone: its completions are not posted, its reads' data not copied.
    client_gone: bool,
    last_bad_counters: Option<(u32, u32)>,
    counts: Arc<Counts>,
    /// This channel's standing in the fair shares of the device's tags among channels.
    seat: Seat<Arc<TagShare>>,
    /// Completed requests of this pass, recorded in the session's statistics under one lock
    /// at its end: (read, bytes, ns).
    unrecorded: Vec<(bool, u32, u64)>,
}

impl DeviceSide {
    pub(crate) fn new(
        region: Region,
        socket: UnixStream,
        credentials: Credentials,
        qp: QueuePair,
        session: Session,
        counts: Arc<Counts>,
        seat: Seat<Arc<TagShare>>,
    ) -> DeviceSide {
        let device_tags = seat_tags(&seat);
        let g = *region.geometry();
        DeviceSide {
            region,
            socket,
            credentials,
            qp,
            session,
            begun: false,
            extents: Extents::default(),
            grants_generation: 0,
            sq_head: 0,
            cq_tail: 0,
            ring_entries: g.ring_entries,
            id_busy: vec![false; g.queue_depth as usize].into_boxed_slice(),
            on_tag: (0..device_tags).map(|_| None).collect(),
            in_flight: 0,
            closing: false,
            client_gone: false,
            last_bad_counters: None,
            counts,
            seat,
            unrecorded: Vec::with_capacity(256),
        }
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// One pass: completions collected and posted, then new commands taken. Returns how many
    /// of either it handled.
    pub(crate) fn pass(&mut self, device: &Device, grants: &GrantTable) -> u32 {
        let mut work = self.collect(device);
        if !self.closing {
            work += self.take(device, grants);
        }
        if work > 0 {
            // Recorded before the client can see the completions, so a report read after a
            // client's last command counts it.
            self.record();
            // A client that waited long sleeps on the tail (`Channel::wait`): woken only then.
            let (tail, waiting) = (self.region.word(CQ_TAIL), self.region.word(WAITING));
            if wakeups::publish_completions(tail, self.cq_tail, waiting) {
                self.region.wake(CQ_TAIL);
            }
        }
        work
    }

    /// Marks the serving thread asleep for this channel's client; true when it has written
    /// commands not yet taken, so the thread must not sleep (`wakeups::announce_sleep`).
    pub(crate) fn announce_sleep(&self) -> bool {
        let (sleeping, tail) = (self.region.word(SLEEPING), self.region.word(SQ_TAIL));
        wakeups::announce_sleep(sleeping, tail, self.sq_head) && !self.closing
    }

    /// The serving thread is awake: the client need not wake it.
    pub(crate) fn awake(&self) {
        self.region.word(SLEEPING).store(0, Ordering::SeqCst);
    }

    /// Stops taking commands. Those in flight finish; while the client is there (the daemon
    /// is stopping) their completions are still posted, and `finish` tells it the channel is
    /// closed after the last.
    pub(crate) fn close(&mut self, client_gone: bool) {
        self.closing = true;
        self.client_gone |= client_gone;
    }

    /// Records what is left, tells the client (if it still looks) that the channel is closed,
    /// and hands the session back, with whether it ever sent a command.
    pub(crate) fn finish(mut self) -> (Session, bool) {
        self.region.word(CLOSED).store(1, Ordering::SeqCst);
        // A client asleep on its tail wakes to see it.
        self.region.wake(CQ_TAIL);
        self.record();
        if self.begun {
            self.session.end();
        }
        (self.session, self.begun)
    }

    fn collect(&mut self, device: &Device) -> u32 {
        if self.in_flight == 0 {
            // Nothing of this channel's on the device: no pass of it to run (in inline mode a
            // poll runs one) and no clock to read.
            return 0;
        }
        let now = device.now_ns();
        let mut n = 0;
        let DeviceSide {
            qp,
            on_tag,
            id_busy,
            region,
            cq_tail,
            client_gone,
            in_flight,
            unrecorded,
            ..
        } = self;
        qp.poll(|done| {
            let Some(f) = on_tag[done.tag.index()].take() else {
                // A completion for a tag this channel has not issued: the driver drops those
                // (`QueuePair::take`), so this cannot happen; finish it to free the tag.
                let _ = device.finish(done, None);
                return;
            };
            if !*client_gone && done.op.fills_buffer() && done.status.is_ok() {
                let data = device.read_data(&done);
                region.copy_in(f.buf, data);
            }
            let status = ChannelStatus::of_device(done.status);
            let _ = device.finish(done, None);
            debug_assert!(id_busy[f.id as usize], "id {} done but not busy", f.id);
            id_busy[f.id as usize] = false;
            *in_flight -= 1;
            if !*client_gone {
                region.write_cq(
                    *cq_tail,
                    CqEntry {
                        id: f.id,
                        status: status as u32,
                    },
                );
                *cq_tail = cq_tail.wrapping_add(1);
            }
            // Zone management and reports are not host I/O.
            if status == ChannelStatus::Ok && f.op != Opcode::Flush && !f.op.is_zoned() {
                // A trim is a request of no bytes: it moves no data.
                let len = if f.op == Opcode::Deallocate { 0 } else { f.len };
                unrecorded.push((f.op == Opcode::Read, len, now.saturating_sub(f.taken_ns)));
            }
            n += 1;
        });
        n as u32
    }

    fn record(&mut self) {
        if self.unrecorded.is_empty() {
            return;
        }
        let mut stats = self.session.stats.lock().unwrap_or_else(|e| e.into_inner());
        for &(read, len, ns) in &self.unrecorded {
            stats.record_host(read, len, ns);
        }
        self.unrecorded.clear();
    }

    /// The commands the client has made visible, as many as the completion ring has room
    /// for, at most `TAKE_MAX`.
    fn take(&mut self, device: &Device, grants: &GrantTable) -> u32 {
        if grants.generation() != self.grants_generation {
            (self.grants_generation, self.extents) = grants.extents(self.credentials.uid);
        }
        let tail = self.region.word(SQ_TAIL).load(Ordering::Acquire);
        let waiting = tail.wrapping_sub(self.sq_head);
        if waiting == 0 {
            if self.in_flight == 0 {
                self.seat.idle();
            }
            return 0;
        }
        let cq_head = self.region.word(CQ_HEAD).load(Ordering::Acquire);
        let unread = self.cq_tail.wrapping_sub(cq_head);
        if waiting > self.ring_entries || unread > self.ring_entries {
            if self.last_bad_counters != Some((tail, cq_head)) {
                self.last_bad_counters = Some((tail, cq_head));
                Counts::add(&self.counts.ring_faults);
            }
            return 0;
        }
        // Every command taken posts one completion: the ring must hold them all. (A client
        // that moved its head back has `unread` past the truth: saturating, it stalls itself.)
        let room = self
            .ring_entries
            .saturating_sub(unread)
            .saturating_sub(self.in_flight);
        let n = waiting.min(room).min(TAKE_MAX);
        if !self.begun && n > 0 {
            self.begun = true;
            self.session.begin_at(Instant::now());
        }
        let now = device.now_ns();
        let mut taken = 0;
        while taken < n {
            // Past this channel's fair share of the device's tags: the rest wait in the ring.
            if !self.seat.may_issue(self.in_flight as usize) {
                break;
            }
            let entry = self.region.read_sq(self.sq_head);
            match self.check(device, &entry) {
                Ok(op) => match self.issue(device, op, &entry, now) {
                    Ok(()) => {}
                    // Every device tag is in flight: take it on a later pass.
                    Err(HostError::NoTag { .. }) => break,
                    Err(HostError::Command { status, .. }) => {
                        self.refuse(entry.id, ChannelStatus::of_device(status))
                    }
                    Err(_) => self.refuse(entry.id, ChannelStatus::BadField),
                },
                Err(status) => self.refuse(entry.id, status),
            }
            self.sq_head = self.sq_head.wrapping_add(1);
            taken += 1;
        }
        // Each command in flight holds its own id (`check` refuses a busy one).
        debug_assert!(
            self.in_flight as usize <= self.id_busy.len(),
            "{} in flight",
            self.in_flight
        );
        self.region
            .word(SQ_HEAD)
            .store(self.sq_head, Ordering::Release);
        taken
    }

    /// The checks before a command touches anything, in order: its id, its opcode, its buffer,
    /// the device's limits, then the client's grants.
    fn check(&self, device: &Device, e: &SqEntry) -> Result<Opcode, ChannelStatus> {
        if e.id as usize >= self.id_busy.len() {
            return Err(ChannelStatus::BadField);
        }
        if self.id_busy[e.id as usize] {
            return Err(ChannelStatus::IdInFlight);
        }
        let manage = |action| Opcode::ZoneManage { action, all: false };
        let op = match e.op {
            OP_READ => Opcode::Read,
            OP_WRITE => Opcode::Write,
            OP_FLUSH => return Ok(Opcode::Flush),
            OP_TRIM => Opcode::Deallocate,
            OP_ZONE_REPORT => Opcode::ZoneReport { partial: true },
            OP_ZONE_RESET => manage(ZoneAction::Reset),
            OP_ZONE_FINISH => manage(ZoneAction::Finish),
            OP_ZONE_OPEN => manage(ZoneAction::Open),
            OP_ZONE_CLOSE => manage(ZoneAction::Close),
            _ => return Err(ChannelStatus::BadOpcode),
        };
        let zone_bytes = device
            .zone_layout()
            .map(|z| z.zone_blocks * u64::from(device.block_bytes()));
        if op.is_zoned() && zone_bytes.is_none() {
            return Err(ChannelStatus::BadOpcode);
        }
        let moves_data = op.fills_buffer() || op == Opcode::Write;
        if moves_data && !self.region.holds(e.buf, u64::from(e.len)) {
            return Err(ChannelStatus::BadField);
        }
        // What the grants must cover: the range, or for zone management the whole zone (it
        // changes what the zone holds), or for a report its first block.
        let (check_len, granted_len) = match op {
            Opcode::ZoneManage { .. } => (u64::from(device.block_bytes()), zone_bytes.unwrap_or(0)),
            Opcode::ZoneReport { .. } => {
                let block = u64::from(device.block_bytes());
                (block, block)
            }
            _ => (u64::from(e.len), u64::from(e.len)),
        };
        if let Err(HostError::Command { status, .. }) = device.check(op, e.offset, check_len) {
            return Err(ChannelStatus::of_device(status));
        }
        if !self
            .extents
            // A trim or a zone's reset changes what the range holds: it needs the grant a write
            // does.
            .allows(!op.fills_buffer(), e.offset, granted_len)
        {
            return Err(ChannelStatus::PermissionDenied);
        }
        Ok(op)
    }

    fn issue(
        &mut self,
        device: &Device,
        op: Opcode,
        e: &SqEntry,
        now: u64,
    ) -> Result<(), HostError> {
        let (offset, len) = if op == Opcode::Flush {
            (0, 0)
        } else {
            (e.offset, e.len)
        };
        // `check` has checked it against the device already (a report's length the driver
        // checks here).
        let mut p = match op {
            Opcode::ZoneReport { partial } => device.prepare_zone_report(offset, len, partial)?,
            Opcode::ZoneManage { .. } => device.prepare_unchecked(op, offset, 0, None)?,
            _ => device.prepare_unchecked(op, offset, len, None)?,
        };
        if op == Opcode::Write {
            self.region.copy_out(e.buf, device.write_buffer(&mut p));
        }
        // A tag the driver just gave is not one of this channel's in flight.
        debug_assert!(self.on_tag[p.tag().index()].is_none(), "tag in use");
        self.on_tag[p.tag().index()] = Some(InFlight {
            id: e.id,
            op,
            buf: e.buf,
            len,
            taken_ns: now,
        });
        self.id_busy[e.id as usize] = true;
        self.in_flight += 1;
        self.qp.issue(p);
        Ok(())
    }

    fn refuse(&mut self, id: u32, status: ChannelStatus) {
        Counts::add(if status == ChannelStatus::PermissionDenied {
            &self.counts.permission_denied
        } else {
            &self.counts.malformed
        });
        self.region.write_cq(
            self.cq_tail,
            CqEntry {
                id,
                status: status as u32,
            },
        );
        self.cq_tail = self.cq_tail.wrapping_add(1);
    }
}

/// The device's tags, as the share counts them.
fn seat_tags(seat: &Seat<Arc<TagShare>>) -> usize {
    seat.share().tags()
}
