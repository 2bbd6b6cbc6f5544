//! One virtqueue served on its own queue pair of the device, by the vring worker thread that
//! owns it. A kick starts a pass (`QueueWorker::serve`) that takes every request the guest has
//! made available, turns each into runs of device commands (one per range of the disk, cut
//! at the tag buffer's size as tags allow), collects completions and
//! returns each finished request to the used ring, signalling the guest when it asks to be
//! (event-idx). While commands are in flight the pass keeps looking at the ring itself, so a
//! guest that keeps the queue busy is served without a kick per request; it ends only when
//! nothing is in flight, after notifications are on again and the ring is seen empty. So a
//! stop of the queue (the guest's driver resetting, or the VMM leaving) finds nothing of it
//! on the device once the worker's lock is free.
//!
//! A write's data goes from guest memory straight into the command's DMA buffer, and a read's
//! from the buffer straight into guest memory, through `vm-memory` (`request::gather`,
//! `scatter`), which refuses any address outside the guest's regions.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use nvarray_host::tag_share::{Seat, TagShare};
use nvarray_host::{Device, Done, HostError, Opcode, QueuePair};
use vhost_user_backend::{VringRwLock, VringT};
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK};
use virtio_queue::{DescriptorChain, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::guest::Guest;
use crate::request::{self, BlkRequest, Kind, Limits, Refused, Segment};
use crate::virtio_blk::{ID_BYTES, QUEUE_SIZE_MAX};

/// Guest memory as the back end maps it.
pub type GuestRam = GuestMemoryAtomic<GuestMemoryMmap<()>>;
/// A virtqueue as the vring worker hands it over.
pub type Vring = VringRwLock<GuestRam>;

/// A request on the device: what answering it takes.
struct InFlight {
    head: u16,
    status: GuestAddress,
    data: Vec<Segment>,
    /// Device commands of it not yet completed (issued or waiting for a tag).
    commands_left: u32,
    failed: bool,
    started: Instant,
    /// Bytes written into the guest's buffers (the used ring's length): a read's data plus
    /// the status byte.
    used_len: u32,
    /// For the statistics: (read, bytes moved).
    recorded_as: (bool, u32),
}

/// A run of a request's device commands still to issue: one range of the disk, cut into
/// commands of at most the tag buffer's size as tags allow (so a request naming gigabytes
/// holds a few runs, not a command each).
#[derive(Clone, Copy, Debug)]
struct Run {
    slot: usize,
    op: Opcode,
    offset_bytes: u64,
    len_bytes: u64,
    /// Where its data lies in the request's data (reads and writes).
    data_at: u64,
    zeroes: bool,
}

/// The state of one virtqueue's serving.
pub struct QueueWorker {
    device: Arc<Device>,
    guest: Arc<Guest>,
    /// Made at the first request, so a queue the guest never uses takes no queue pair.
    qp: Option<QueuePair>,
    seat: Seat<Arc<TagShare>>,
    limits: Limits,
    requests: Vec<Option<InFlight>>,
    free_slots: Vec<usize>,
    /// Per device tag: (request slot, where its data lies in the request's data).
    tag_piece: Vec<(usize, u64)>,
    /// Commands waiting for a tag, in order; no request is taken while any waits.
    waiting: VecDeque<Run>,
    commands_in_flight: usize,
    finished: Vec<Done>,
    zeroes: Box<[u8]>,
    /// Requests answered and not yet on the used ring: (head, bytes written).
    used: Vec<(u16, u32)>,
    /// Requests answered and not yet in the statistics: (read, bytes, latency ns).
    unrecorded: Vec<(bool, u32, u64)>,
    /// The ring broke (an avail index past the queue's size, entries that cannot be read): it
    /// is not read again until the VMM stops the queue (`restart`).
    broken: bool,
    /// Passes in a row in which the ring said it held requests and none could be taken.
    empty_rechecks: u32,
    /// The VMM has gone, or shutdown: take no more requests (`BlkBackend::stop`).
    stopping: Arc<AtomicBool>,
}

/// Passes in a row that find the ring announcing requests none of which can be taken before
/// the ring counts as broken (a request made available between a look and the next is taken
/// on the following pass; a thousand in a row is a ring whose entries cannot be read).
const EMPTY_RECHECKS_MAX: u32 = 1000;

impl QueueWorker {
    pub fn new(
        device: Arc<Device>,
        guest: Arc<Guest>,
        tags: Arc<TagShare>,
        stopping: Arc<AtomicBool>,
    ) -> QueueWorker {
        let limits = Limits {
            capacity_bytes: device.size_bytes(),
            block_bytes: device.block_bytes(),
            read_only: guest.read_only,
        };
        // The device's configuration is checked when it opens; `request::check_range`
        // aligns to the block.
        assert!(
            limits.block_bytes.is_power_of_two(),
            "block of {} bytes",
            limits.block_bytes
        );
        let slots = usize::from(QUEUE_SIZE_MAX);
        QueueWorker {
            qp: None,
            seat: Seat::new(tags),
            limits,
            requests: (0..slots).map(|_| None).collect(),
            free_slots: (0..slots).rev().collect(),
            tag_piece: vec![(usize::MAX, 0); device.tags()],
            waiting: VecDeque::new(),
            commands_in_flight: 0,
            finished: Vec::with_capacity(device.tags()),
            zeroes: vec![0u8; device.command_bytes_max() as usize].into_boxed_slice(),
            used: Vec::new(),
            unrecorded: Vec::new(),
            broken: false,
            empty_rechecks: 0,
            stopping,
            guest,
            device,
        }
    }

    /// Serves the queue until nothing of it is on the device and its ring is empty (see the
    /// module's notes).
    pub fn serve(&mut self, vring: &Vring, ram: &GuestRam) {
        if self.qp.is_none() {
            self.qp = Some(self.device.queue_pair(self.device.completion()));
        }
        loop {
            let took = self.take_requests(vring, ram);
            let issued = self.issue_waiting(ram);
            let reaped = self.reap(ram);
            self.answer(vring);
            if self.idle() {
                self.seat.idle();
                if !self.may_take(vring) {
                    return;
                }
                // Notifications on, then one more look: a request made available in between
                // is served now instead of waiting for a kick that will not come.
                match vring.enable_notification() {
                    Ok(true) if took => continue,
                    Ok(true) => {
                        // Announced but not taken: a request made available just now, or an
                        // entry that cannot be read (see `EMPTY_RECHECKS_MAX`).
                        self.empty_rechecks += 1;
                        if self.empty_rechecks >= EMPTY_RECHECKS_MAX {
                            self.break_ring("it announces requests that cannot be read");
                            return;
                        }
                        continue;
                    }
                    Ok(false) => return,
                    Err(e) => {
                        self.break_ring(&format!("cannot enable notifications: {e}"));
                        return;
                    }
                }
            }
            if !(took || issued || reaped) {
                self.wait_a_little();
            }
        }
    }

    /// Whether requests may be taken from the ring: it is not broken, the VMM has not gone,
    /// and the queue is enabled and ready.
    fn may_take(&self, vring: &Vring) -> bool {
        let state = vring.get_ref();
        !self.broken
            && !self.stopping.load(Ordering::Relaxed)
            && state.is_enabled()
            && state.get_queue().ready()
    }

    fn idle(&self) -> bool {
        self.commands_in_flight == 0 && self.waiting.is_empty()
    }

    /// Takes the requests the guest has made available, while none waits for a tag and a
    /// request slot is free. Returns whether it took any.
    fn take_requests(&mut self, vring: &Vring, ram: &GuestRam) -> bool {
        if !self.waiting.is_empty() || !self.may_take(vring) {
            return false;
        }
        let mem = ram.memory();
        let mut chains = Vec::new();
        {
            let mut state = vring.get_mut();
            let queue = state.get_queue_mut();
            // Looked at again under the write lock: the VMM may have stopped it meanwhile.
            if !queue.ready() {
                return false;
            }
            if !queue.is_valid(mem.deref()) {
                drop(state);
                self.break_ring("its rings do not fit in the guest's memory");
                return false;
            }
            if let Err(e) = queue.disable_notification(mem.deref()) {
                drop(state);
                self.break_ring(&format!("cannot disable notifications: {e}"));
                return false;
            }
            let room = self.free_slots.len();
            match queue.iter(mem.clone()) {
                Ok(iter) => chains.extend(iter.take(room)),
                Err(e) => {
                    drop(state);
                    self.break_ring(&format!("its available ring is broken: {e}"));
                    return false;
                }
            }
        }
        let took = !chains.is_empty();
        if took {
            self.empty_rechecks = 0;
        }
        for chain in chains {
            self.start(chain, ram);
        }
        took
    }

    /// The VMM stopped the queue (`GET_VRING_BASE`; nothing is in flight): a ring that broke
    /// may be set up anew.
    pub fn restart(&mut self) {
        debug_assert!(self.idle(), "a queue stopped with commands in flight");
        self.broken = false;
        self.empty_rechecks = 0;
    }

    fn start(
        &mut self,
        chain: DescriptorChain<vm_memory::GuestMemoryLoadGuard<GuestMemoryMmap<()>>>,
        ram: &GuestRam,
    ) {
        let head = chain.head_index();
        let mem = ram.memory();
        let descriptors = request::descriptors_of(chain);
        let now = Instant::now();
        self.guest.begin_at(now);
        let parsed = request::parse(mem.deref(), &descriptors, &self.limits);
        let request = match parsed {
            Ok(r) => r,
            Err(refused) => {
                self.refuse(head, refused, ram);
                return;
            }
        };
        let slot = self
            .free_slots
            .pop()
            .expect("a slot per available descriptor");
        let is_read = request.kind == Kind::Read;
        // As NBD records them: flushes, discards and GET_ID as writes of no bytes.
        let recorded_as = match &request.kind {
            Kind::Read | Kind::Write => (is_read, request.data_bytes as u32),
            Kind::WriteZeroes(ranges) => (
                false,
                ranges
                    .iter()
                    .map(|r| r.1)
                    .sum::<u64>()
                    .min(u64::from(u32::MAX)) as u32,
            ),
            _ => (false, 0),
        };
        self.requests[slot] = Some(InFlight {
            head,
            status: request.status,
            data: request.data.clone(),
            commands_left: 0,
            failed: false,
            started: now,
            used_len: 1 + if is_read {
                request.data_bytes as u32
            } else {
                0
            },
            recorded_as,
        });
        let runs = self.runs(slot, &request);
        let max = u64::from(self.device.command_bytes_max());
        let commands: u64 = runs.iter().map(|r| r.len_bytes.div_ceil(max).max(1)).sum();
        // At most 32 ranges of 1 GiB (`request`): the count fits `commands_left`.
        debug_assert!(commands <= u64::from(u32::MAX), "{commands} commands");
        if let Kind::GetId = request.kind {
            let id = self.guest.id();
            let n = (request.data_bytes as usize).min(ID_BYTES);
            let ok = request::scatter(mem.deref(), &request.data, 0, &id[..n]).is_ok();
            let r = self.requests[slot].as_mut().expect("just made");
            r.used_len = 1 + n as u32;
            r.failed = !ok;
        }
        let r = self.requests[slot].as_mut().expect("just made");
        r.commands_left = commands as u32;
        self.waiting.extend(runs);
        self.maybe_finish(slot, ram);
    }

    /// The runs of device commands a request becomes.
    fn runs(&self, slot: usize, request: &BlkRequest) -> Vec<Run> {
        let run = |op, offset_bytes, len_bytes, zeroes| Run {
            slot,
            op,
            offset_bytes,
            len_bytes,
            data_at: 0,
            zeroes,
        };
        match &request.kind {
            Kind::Read => vec![run(
                Opcode::Read,
                request.offset_bytes,
                request.data_bytes,
                false,
            )],
            Kind::Write => vec![run(
                Opcode::Write,
                request.offset_bytes,
                request.data_bytes,
                false,
            )],
            Kind::Flush => vec![run(Opcode::Flush, 0, 0, false)],
            Kind::GetId => Vec::new(),
            Kind::Discard(ranges) => ranges
                .iter()
                .map(|&(o, l)| run(Opcode::Deallocate, o, l, false))
                .collect(),
            Kind::WriteZeroes(ranges) => ranges
                .iter()
                .map(|&(o, l)| run(Opcode::Write, o, l, true))
                .collect(),
        }
    }

    /// Issues the commands waiting for a tag, in order, as far as tags and the queue's share
    /// allow. Returns whether it issued any.
    fn issue_waiting(&mut self, ram: &GuestRam) -> bool {
        let mut issued = false;
        let max = u64::from(self.device.command_bytes_max());
        while let Some(&run) = self.waiting.front() {
            if !self.seat.may_issue(self.commands_in_flight) {
                break;
            }
            // The run's next command (a flush: the whole run, of no bytes).
            let piece = Run {
                len_bytes: run.len_bytes.min(max),
                ..run
            };
            let len = piece.len_bytes as u32;
            let zeroes = piece.zeroes.then(|| &self.zeroes[..len as usize]);
            let mut prepared = match self
                .device
                .prepare(piece.op, piece.offset_bytes, len, zeroes)
            {
                Ok(p) => p,
                // Every tag is held: this queue's own commands, or other clients'.
                Err(HostError::NoTag { .. }) => break,
                Err(_) => {
                    // The request passed the same checks; a refusal here is a bug,
                    // answered as an I/O error rather than trusted.
                    self.consume_command(len);
                    self.command_done(piece.slot, false, ram);
                    continue;
                }
            };
            self.consume_command(len);
            if piece.op == Opcode::Write && !piece.zeroes {
                let data = &self.requests[piece.slot].as_ref().expect("live").data;
                let buffer = self.device.write_buffer(&mut prepared);
                if request::gather(ram.memory().deref(), data, piece.data_at, buffer).is_err() {
                    // The guest's memory changed under the request.
                    self.device.cancel(prepared);
                    self.command_done(piece.slot, false, ram);
                    continue;
                }
            }
            // A tag the driver just gave is not one of this queue's in flight.
            debug_assert_eq!(self.tag_piece[prepared.tag().index()].0, usize::MAX);
            self.tag_piece[prepared.tag().index()] = (piece.slot, piece.data_at);
            self.commands_in_flight += 1;
            self.qp.as_mut().expect("made in serve").issue(prepared);
            issued = true;
        }
        issued
    }

    /// Runs the device (inline) and keeps what completed in `finished`, to be answered by
    /// `reap`.
    fn collect(&mut self) -> usize {
        if self.commands_in_flight == 0 {
            return 0;
        }
        let finished = &mut self.finished;
        self.qp
            .as_mut()
            .expect("made in serve")
            .poll(|d| finished.push(d))
    }

    /// Takes a command of `len` bytes off the front run.
    fn consume_command(&mut self, len: u32) {
        let front = self.waiting.front_mut().expect("a run to take from");
        let len = u64::from(len);
        front.offset_bytes += len;
        front.data_at += len;
        front.len_bytes -= len;
        if front.len_bytes == 0 {
            self.waiting.pop_front();
        }
    }

    /// Collects completions and answers them. Returns whether any came.
    fn reap(&mut self, ram: &GuestRam) -> bool {
        self.collect();
        let any = !self.finished.is_empty();
        while let Some(done) = self.finished.pop() {
            self.commands_in_flight -= 1;
            let (slot, data_at) =
                std::mem::replace(&mut self.tag_piece[done.tag.index()], (usize::MAX, 0));
            // The driver hands this queue pair only the completions of its own commands.
            debug_assert_ne!(slot, usize::MAX, "a completion of a tag not issued here");
            let mut ok = done.status.is_ok();
            if ok && done.op == Opcode::Read {
                let data = &self.requests[slot].as_ref().expect("live").data;
                let mem = ram.memory();
                ok = request::scatter(mem.deref(), data, data_at, self.device.read_data(&done))
                    .is_ok();
            }
            // The status was read above; the tag goes back either way.
            let _ = self.device.finish(done, None);
            self.command_done(slot, ok, ram);
        }
        any
    }

    fn command_done(&mut self, slot: usize, ok: bool, ram: &GuestRam) {
        let r = self.requests[slot].as_mut().expect("live");
        r.commands_left -= 1;
        r.failed |= !ok;
        self.maybe_finish(slot, ram);
    }

    /// Answers a request whose commands are all done: its status byte, its place on the used
    /// ring (signalled in `answer`).
    fn maybe_finish(&mut self, slot: usize, ram: &GuestRam) {
        if self.requests[slot].as_ref().expect("live").commands_left > 0 {
            return;
        }
        let r = self.requests[slot].take().expect("live");
        self.free_slots.push(slot);
        let code = if r.failed {
            VIRTIO_BLK_S_IOERR
        } else {
            VIRTIO_BLK_S_OK
        } as u8;
        let written = ram.memory().write_obj(code, r.status).is_ok();
        self.used
            .push((r.head, if written { r.used_len } else { 0 }));
        if r.failed {
            // As NBD: a failed request is counted, not timed.
            self.guest.count_failed();
        } else {
            let latency_ns = r.started.elapsed().as_nanos() as u64;
            self.unrecorded
                .push((r.recorded_as.0, r.recorded_as.1, latency_ns));
        }
    }

    /// A request refused by `request::parse`: its status says why, when it has one.
    fn refuse(&mut self, head: u16, refused: Refused, ram: &GuestRam) {
        let used_len = match refused.status {
            Some(at) if ram.memory().write_obj(refused.code, at).is_ok() => 1,
            _ => 0,
        };
        self.used.push((head, used_len));
        self.guest.refused(refused.why);
    }

    /// Puts the answered requests on the used ring, records them, and signals the guest if
    /// it asked to be (event-idx).
    fn answer(&mut self, vring: &Vring) {
        if self.used.is_empty() {
            return;
        }
        for (head, len) in self.used.drain(..) {
            if let Err(e) = vring.add_used(head, len) {
                self.guest.log(&format!("cannot return a request: {e}"));
            }
        }
        self.guest.record(&mut self.unrecorded);
        match vring.needs_notification() {
            Ok(false) => {}
            // When in doubt, signal: a spurious interrupt costs the guest a look.
            _ => {
                if let Err(e) = vring.signal_used_queue() {
                    self.guest.log(&format!("cannot signal the guest: {e}"));
                }
            }
        }
    }

    fn break_ring(&mut self, why: &str) {
        if !self.broken {
            self.broken = true;
            self.guest.log(&format!("a virtqueue stops: {why}"));
        }
    }

    /// Between passes with commands in flight: nap as long as the driver says no completion
    /// can be late (inline, slow commands), else spin; with nothing of its own in flight and
    /// no tag to be had, let the clients holding the tags run.
    fn wait_a_little(&self) {
        let qp = self.qp.as_ref().expect("made in serve");
        if self.commands_in_flight == 0 {
            std::thread::yield_now();
        } else if let Some(nap) = qp.nap_time() {
            std::thread::sleep(nap);
        } else {
            std::hint::spin_loop();
        }
    }

    /// Hands the queue pair back (the guest has gone): nothing of it is in flight.
    pub fn into_queue_pair(self) -> Option<QueuePair> {
        debug_assert!(self.idle(), "a queue handed back with commands in flight");
        self.qp
    }
}
