//! The device's work for one queue pair, done by the one thread that serves the pair, in
//! parallel with the other pairs: take commands from the submission queue, decode and
//! validate them, move their data, and post each completion once the clock has reached the
//! model's deadline for it — never earlier — in deadline order.
//!
//! Only the timing model is shared between queue pairs (`device_core`, behind the engine's
//! lock). What every pair reads — the DMA memory, the backing, the device's geometry, the
//! clock, which tags are busy — is `DataPath`, read-only or synchronised on its own (the
//! backing's range locks, an atomic per tag).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use nvarray_model::zones::Zones;
use nvarray_model::{check_command, DeviceConfig, Protocol};
use parking_lot::Mutex;

use crate::backing::Backing;
use crate::clock::Clock;
use crate::device_core::{Finished, Posted, Submission};
use crate::dma_memory::{DmaMemory, IN_DATA_DONE};
use crate::irq::Irq;
use crate::jitter::{this_runner, JitterProbe};
use crate::lateness::{self, Lateness};
use crate::nvme_cq::{CqDevice, Cqe};
use crate::pauses::{self, Held};
use crate::protocol::{moneta, nvme, Opcode, Status};
use crate::ring::Consumer;
use crate::tag_pool::Tag;
use crate::word_ring::{WordConsumer, WordProducer};

/// Commands taken from one submission queue per pass, so one busy queue cannot delay its own
/// due completions for long.
const SQ_BATCH_MAX: usize = 32;

/// Reads up to this size are copied into the host's buffer when the model finishes them (the
/// moment the device learns the completion time, some hundreds of ns before it), from data
/// prefetched into the cache at submission; larger reads are copied at submission.
///
/// A random 512-byte read of a large device is a DRAM and TLB miss (~300 ns on the test VMs,
/// half of the device thread's time per command at QD 32); prefetching it at submission
/// overlaps that miss with the command's modelled time and with other commands, and the late
/// copy then costs a cache hit, done before the deadline rather than after it. A large read's
/// copy takes long enough to make its own and its neighbours' completions late, so it is
/// done at submission instead. From 4 KiB it is large: copying a prefetched 4 KiB block into
/// a tag buffer the host's core touched last takes 0.3-1 µs even with vector moves
/// (`dma_copy`), against the moneta preset's ~2 µs between the model finishing a read and
/// its deadline; moved to submission, moneta's 4 KiB QD 1 lateness p99 went from 1.74-2.32 µs
/// to 1.45-1.70 µs and QD 32's from 6.1-6.9 µs to 4.4-4.9 µs at the same IOPS
/// (`docs/perf.md`, "The 4 KiB lateness tail").
pub const COPY_WHEN_DONE_MAX_BYTES: u32 = 2048;

// A read copied when done was prefetched whole.
const _: () = assert!(COPY_WHEN_DONE_MAX_BYTES as usize <= crate::backing::PREFETCH_MAX_BYTES);

/// The device's ends of one queue pair.
pub enum DeviceQueue {
    /// One 64-bit word per command and per completion (Moneta; DC Express, whose reads
    /// complete in their data instead of the completion ring).
    Word { sq: WordConsumer, cq: WordProducer },
    Nvme {
        sq: Consumer<nvme::Sqe>,
        cq: CqDevice,
    },
}

/// What every queue pair's owner reads: read-only, or synchronised on its own.
pub struct DataPath {
    pub dma: Arc<DmaMemory>,
    pub backing: Backing,
    /// The device's geometry, for validating commands (`check_command`).
    pub config: DeviceConfig,
    pub protocol: Protocol,
    pub block_bytes: u64,
    pub tags: TagStates,
    pub clock: Clock,
    /// A zoned namespace's zones (`[zns]`), checked and moved on when a command is taken,
    /// before its data moves, so a refused write leaves the backing as it was and the lock's
    /// order is the order of the write pointers.
    pub zones: Option<Mutex<Zones>>,
}

/// Per tag: whether a command is in flight on it (its buffer is the device's until the
/// completion) and whether that command completes in its data. Tags are claimed by whichever
/// thread takes a command, so a tag used on two queue pairs at once is refused on the second.
/// One padded line per tag: the tag pool hands neighbouring tags to different threads.
pub struct TagStates {
    slots: Box<[CachePadded<TagSlot>]>,
}

/// One tag's state, on a cache line of its own: whether it is busy, and where the command
/// holding it reads or writes. The offset is written by the claimant and read when the
/// command finishes, by the same pair's owner (the pair's lock orders the two), so it need not
/// cross the model's lock.
#[derive(Default)]
struct TagSlot {
    flags: AtomicU8,
    offset_bytes: AtomicU64,
}

const TAG_BUSY: u8 = 1;
const TAG_IN_DATA: u8 = 2;

impl TagStates {
    pub fn new(tags: usize) -> Self {
        TagStates {
            slots: (0..tags).map(|_| CachePadded::default()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    fn is_busy(&self, tag: usize) -> bool {
        self.slots[tag].flags.load(Ordering::Acquire) & TAG_BUSY != 0
    }

    /// Claims a free tag for a command at `offset_bytes`; false if it is busy. Acquire: the
    /// previous command's use of the tag's buffer, released with the tag, comes before this
    /// one's.
    fn claim(&self, tag: usize, in_data: bool, offset_bytes: u64) -> bool {
        let flags = TAG_BUSY | if in_data { TAG_IN_DATA } else { 0 };
        let slot = &self.slots[tag];
        let claimed = slot
            .flags
            .compare_exchange(0, flags, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if claimed {
            slot.offset_bytes.store(offset_bytes, Ordering::Relaxed);
        }
        claimed
    }

    /// The offset of the command holding `tag` (read by its pair's owner).
    fn offset_bytes(&self, tag: usize) -> u64 {
        self.slots[tag].offset_bytes.load(Ordering::Relaxed)
    }

    /// Frees a tag; returns whether its command completes in its data.
    pub fn release(&self, tag: usize) -> bool {
        self.slots[tag].flags.swap(0, Ordering::Release) & TAG_IN_DATA != 0
    }
}

/// A completion the model has produced, waiting for its deadline. Ordered by deadline, then
/// tag, so a queue's completions are posted in deadline order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    deadline_ns: u64,
    tag: u16,
    submit_ns: u64,
    status: u8,
}

/// One queue pair's device-side state, owned by the thread serving the pair.
pub struct QueueWork {
    id: u16,
    queue: DeviceQueue,
    irq: Arc<Irq>,
    /// Whether the host side may sleep, so the device must raise the interrupt.
    may_sleep: bool,
    /// Completions the completion queue had no room for (only a misbehaving host, which
    /// submits more than the queue holds, fills it); posted first on the next pass.
    backlog: Vec<Posted>,
    /// Submission queue entries taken so far (NVMe reports it as the SQ head).
    sq_taken: u64,
    /// Commands taken in one pass, before they are validated (kept to reuse its allocation).
    batch: Vec<Decoded>,
    /// Commands validated and with their data moved, for the model's next visit.
    pub(crate) to_model: Vec<Submission>,
    /// Commands the model finished, before their late copy (`receive`).
    pub(crate) arrived: Vec<Finished>,
    due: BinaryHeap<Reverse<Due>>,
    pub(crate) lateness: Lateness,
    /// The machine's own jitter, sampled in this pair's passes that find nothing to do.
    pub(crate) jitter: JitterProbe,
    /// Commands taken from the submission queue.
    pub(crate) commands: u64,
    /// Passes in a row that found the model's lock taken with commands to hand over.
    pub(crate) visit_misses: u32,
    /// The shortest modelled latency of a command posted on this pair (`u64::MAX`: none
    /// yet), for whether its device thread may sleep while nothing is in flight
    /// (`device_sleep::rest`).
    pub(crate) least_modelled_ns: u64,
}

impl QueueWork {
    pub fn new(id: u16, queue: DeviceQueue, irq: Arc<Irq>, may_sleep: bool) -> Self {
        QueueWork {
            id,
            queue,
            irq,
            may_sleep,
            backlog: Vec::with_capacity(16),
            sq_taken: 0,
            batch: Vec::with_capacity(SQ_BATCH_MAX),
            to_model: Vec::with_capacity(SQ_BATCH_MAX),
            arrived: Vec::with_capacity(SQ_BATCH_MAX),
            due: BinaryHeap::new(),
            lateness: Lateness::new(),
            jitter: JitterProbe::new(),
            commands: 0,
            visit_misses: 0,
            least_modelled_ns: u64::MAX,
        }
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    /// Posts the backlog, then takes up to `SQ_BATCH_MAX` commands: refusals are posted at
    /// once; valid reads and writes have their tag claimed and their data moved (a write's
    /// data taken, a large read's put in place, a small read's prefetched) and wait in
    /// `to_model`. Returns how many commands were taken and whether anything was posted.
    pub fn take_commands(&mut self, path: &DataPath, settled_ns: Option<u64>) -> (usize, bool) {
        let mut posted = false;
        for p in std::mem::take(&mut self.backlog) {
            self.post(path, p, false);
            posted = true;
        }
        let qid = self.id;
        while self.batch.len() < SQ_BATCH_MAX {
            let decoded = match &mut self.queue {
                DeviceQueue::Word { sq, .. } => match sq.pop() {
                    Some(word) => decode_word(word, qid, path),
                    None => break,
                },
                DeviceQueue::Nvme { sq, .. } => match sq.pop() {
                    Some(sqe) => decode_nvme(&sqe, qid, path),
                    None => break,
                },
            };
            self.batch.push(decoded);
        }
        let taken = self.batch.len();
        // When the batch was taken: the date of a command the host did not stamp (inline, the
        // host's poll takes it right after the issue), so that moving its data is the
        // device's time, as it is for a stamped one, not the host's.
        let taken_ns = if taken > 0 { path.clock.now_ns() } else { 0 };
        self.sq_taken += taken as u64;
        self.commands += taken as u64;
        let mut batch = std::mem::take(&mut self.batch);
        for decoded in batch.drain(..) {
            match decoded.and_then(|(s, in_data)| accept(path, s, in_data, taken_ns)) {
                Ok(Accepted::ToModel(s)) => {
                    // Declared before any clock reading that follows (`pauses`): moving the
                    // data is work.
                    pauses::this_thread(|w| {
                        w.allow(1, u64::from(s.len_bytes));
                        if s.doorbell_ns != 0 {
                            w.taken(s.doorbell_ns);
                        }
                    });
                    self.to_model.push(s);
                    // A completion that fell due while this command's data moved goes now,
                    // not after the whole batch's.
                    if let (Some(settled), Some(due)) = (settled_ns, self.next_due_ns()) {
                        if due <= settled {
                            let now = path.clock.now_ns();
                            if due <= now {
                                posted |= self.post_due(path, settled.min(now)) > 0;
                            }
                        }
                    }
                }
                Ok(Accepted::Done(p)) | Err(p) => {
                    pauses::this_thread(|w| w.allow(1, 0));
                    self.post(path, p, false);
                    posted = true;
                }
            }
        }
        self.batch = batch;
        (taken, posted)
    }

    /// Takes what the model finished for this pair, and posts every completion whose
    /// deadline is at or before `until_ns` and has passed, in deadline order (the rest wait
    /// in `due`). A small read's data is copied from the backing into its buffer first
    /// (prefetched at submission). Each completion that can go is posted as soon as its data
    /// is in place, before the next one's is copied, and without a trip through `due` when
    /// nothing there is due before it. Returns how many it posted.
    pub fn settle(
        &mut self,
        path: &DataPath,
        finished: &mut Vec<Finished>,
        until_ns: u64,
    ) -> usize {
        // Usually in order already (one check of each neighbour then).
        finished.sort_unstable_by_key(|f| f.deadline_ns);
        let mut posted = 0;
        for f in finished.drain(..) {
            let d = self.receive(path, f);
            // What waits in `due` with an earlier deadline goes first.
            posted += self.post_due(path, d.deadline_ns.min(until_ns));
            if d.deadline_ns <= until_ns {
                self.post_one(path, d);
                posted += 1;
            } else {
                self.due.push(Reverse(d));
            }
        }
        posted + self.post_due(path, until_ns)
    }

    /// A finished command's completion: its data copied if it is a small read.
    fn receive(&mut self, path: &DataPath, f: Finished) -> Due {
        let mut status = Status::Ok;
        if f.op == Opcode::Read && f.len_bytes <= COPY_WHEN_DONE_MAX_BYTES {
            let tag = f.tag.index();
            // SAFETY: the tag is busy with this command until its completion is posted, so
            // its buffer is the device's, and only this queue's owner touches it.
            let buffer = unsafe { path.dma.data.buffer(tag) };
            pauses::this_thread(|w| w.allow(0, u64::from(f.len_bytes)));
            if path
                .backing
                .read(
                    path.tags.offset_bytes(tag),
                    &mut buffer[..f.len_bytes as usize],
                )
                .is_err()
            {
                status = Status::IoError;
            }
        }
        Due {
            deadline_ns: f.deadline_ns,
            tag: f.tag.raw(),
            submit_ns: f.submit_ns,
            status: status.code(),
        }
    }

    /// The earliest deadline waiting, if any.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.due.peek().map(|Reverse(d)| d.deadline_ns)
    }

    /// Completions waiting for their deadlines.
    pub fn due_len(&self) -> usize {
        self.due.len()
    }

    /// Posts, in deadline order, every waiting completion whose deadline is at or before
    /// `until_ns` and has passed (`post_one`). Returns how many it posted.
    fn post_due(&mut self, path: &DataPath, until_ns: u64) -> usize {
        let mut posted = 0;
        while let Some(&Reverse(d)) = self.due.peek() {
            if d.deadline_ns > until_ns {
                break;
            }
            self.due.pop();
            self.post_one(path, d);
            posted += 1;
        }
        posted
    }

    /// Posts one completion whose deadline has passed, recording its lateness (the posting
    /// time is read afresh, so the lateness recorded is the true one) and freeing its tag.
    fn post_one(&mut self, path: &DataPath, d: Due) {
        let now = path.clock.now_ns();
        assert!(
            now >= d.deadline_ns,
            "completion posted before its deadline"
        );
        let modelled_ns = d.deadline_ns - d.submit_ns;
        let (held, seen_from) = pauses::this_thread(|w| {
            w.reading(now);
            let seen_from = w.seen_from(d.deadline_ns);
            let held = w.held_at(d.deadline_ns).or_else(|| {
                // Paused after it fell due (or after the host's poll saw it) and before it was
                // posted: the machine's when, without the pauses, it would have been posted
                // within its tolerance (issue 56: an inline pass preempted between its first
                // reading and the post counted the preemption as the emulator's own).
                let late = now - seen_from;
                let paused = w.paused_within(seen_from, now);
                (paused > 0 && late - paused <= lateness::tolerated_ns(modelled_ns))
                    .then_some(Held::Paused)
            });
            if held.is_some() {
                w.catching_up(d.deadline_ns, now);
            }
            (held, seen_from)
        });
        self.least_modelled_ns = self.least_modelled_ns.min(modelled_ns);
        self.lateness
            .record(d.deadline_ns, seen_from, now, modelled_ns, held);
        let tag = Tag::new(d.tag);
        let in_data = path.tags.release(tag.index());
        let p = Posted {
            queue: self.id,
            tag,
            status: Status::from_code(d.status),
            deadline_ns: d.deadline_ns,
            posted_ns: now,
        };
        self.post(path, p, in_data);
    }

    /// A command the model refused after its data moved (a bug in the caller: the geometry
    /// was checked first): its error is posted and its tag freed.
    pub fn refuse(&mut self, path: &DataPath, s: Submission, status: Status) {
        let in_data = path.tags.release(s.tag.index());
        self.post(path, immediate(s.queue, s.tag, status), in_data);
    }

    /// Whether the host has put commands in the submission queue that no pass has taken yet
    /// (a device thread's check before it sleeps, after arming the doorbell).
    pub fn has_commands(&self) -> bool {
        match &self.queue {
            DeviceQueue::Word { sq, .. } => sq.has_next(),
            DeviceQueue::Nvme { sq, .. } => !sq.is_empty(),
        }
    }

    /// Delivers a completion: into the data for an in-data read, else as a completion queue
    /// entry (raising the interrupt if the host may sleep).
    fn post(&mut self, path: &DataPath, posted: Posted, in_data: bool) {
        if posted.status != Status::TagConflict {
            // Before the completion is published (its store is Release): the host reads it
            // after seeing the completion. A refusal of a second command on a tag in flight
            // leaves the first one's alone.
            path.dma.deadlines_ns[posted.tag.index()].store(posted.deadline_ns, Ordering::Relaxed);
        }
        if in_data {
            // Release publishes the read data written into the buffer before this word.
            path.dma.in_data[posted.tag.index()].store(
                IN_DATA_DONE | u64::from(posted.status.code()),
                Ordering::Release,
            );
            return;
        }
        let delivered = match &mut self.queue {
            DeviceQueue::Word { cq, .. } => cq
                .push(moneta::completion(posted.tag.raw(), posted.status))
                .is_ok(),
            DeviceQueue::Nvme { cq, .. } => cq
                .post(Cqe {
                    result: u32::from(posted.status.code()),
                    sq_head: self.sq_taken as u16,
                    sq_id: posted.queue,
                    cid: posted.tag.raw(),
                    status: nvme::status_code(posted.status),
                })
                .is_ok(),
        };
        if !delivered {
            self.backlog.push(posted);
            return;
        }
        if self.may_sleep {
            self.irq.raise();
        }
    }

    /// A pass read the clock at `now_ns` having done nothing (for the jitter probe).
    pub fn idle_reading(&mut self, now_ns: u64, spinning: bool) {
        self.jitter.idle_reading(now_ns, this_runner(), spinning);
    }
}

enum Accepted {
    /// Validated, data moved: for the model.
    ToModel(Submission),
    /// Done without the model (a flush with no write buffer to drain).
    Done(Posted),
}

/// Claims the command's tag, checks it against the device and moves its data. A refusal
/// (returned as the completion to post) changes nothing and leaves the tag as it was.
fn accept(
    path: &DataPath,
    mut s: Submission,
    in_data: bool,
    taken_ns: u64,
) -> Result<Accepted, Posted> {
    let refuse = |status| Err(immediate(s.queue, s.tag, status));
    if s.op == Opcode::Flush && path.backing.flush().is_err() {
        return refuse(Status::IoError);
    }
    // A flush is done at once unless there is a write buffer to drain (the model says when).
    if s.op == Opcode::Flush && !path.config.ftl.write_buffered() {
        return Ok(Accepted::Done(immediate(s.queue, s.tag, Status::Ok)));
    }
    let tag = s.tag.index();
    if tag >= path.tags.len() {
        // A tag the host does not have: no buffer to touch.
        return refuse(Status::BadField);
    }
    if !path.tags.claim(tag, in_data, s.offset_bytes) {
        // A tag already in flight: its buffer is not the device's to touch. The second gets a
        // status of its own, so the driver cannot take the refusal for the completion of the
        // command in flight.
        return refuse(Status::TagConflict);
    }
    // The tag is this command's now: so is the stamp the host left with it (taken, so a
    // later command the host does not stamp is not dated by this one's); without one, the
    // command is dated when it was taken.
    let stamp = path.dma.doorbell_ns[tag].swap(0, Ordering::Relaxed);
    s.doorbell_ns = if stamp != 0 { stamp } else { taken_ns };
    if s.op == Opcode::Flush {
        return Ok(Accepted::ToModel(s));
    }
    let moved = match &path.zones {
        Some(zones) => zone_command(path, zones, s).and_then(|s| move_data(path, s, in_data)),
        None => move_data(path, s, in_data),
    };
    if moved.is_err() {
        path.tags.release(tag);
    }
    moved.map(Accepted::ToModel)
}

/// A claimed command on a zoned namespace, checked against its zones and, if they take it,
/// applied to them: a write or an append moves its zone's write pointer (an append is then a
/// write at the block it was given, which the host learns from `DmaMemory::results`), a zone
/// management command changes states, a report is written into the tag's buffer. A refusal
/// changes no zone.
fn zone_command(
    path: &DataPath,
    zones: &Mutex<Zones>,
    mut s: Submission,
) -> Result<Submission, Posted> {
    let refuse = |status| Err(immediate(s.queue, s.tag, status));
    let block = path.block_bytes;
    let data_op = matches!(s.op, Opcode::Read | Opcode::Write | Opcode::ZoneAppend);
    if data_op {
        if let Err(e) = check_command(&path.config, s.offset_bytes, s.len_bytes) {
            return refuse(Status::from(&e));
        }
    } else if !s.offset_bytes.is_multiple_of(block) {
        return refuse(Status::Misaligned);
    }
    let (start, blocks) = (s.offset_bytes / block, u64::from(s.len_bytes) / block);
    let mut zones = zones.lock();
    let result = match s.op {
        Opcode::Write => zones.write(start, blocks),
        Opcode::Read => zones.read(start, blocks),
        Opcode::ZoneAppend => zones.append(start, blocks).map(|at| {
            s.offset_bytes = at * block;
            // Published by the completion's Release, like the deadline.
            path.dma.results[s.tag.index()].store(at, Ordering::Relaxed);
        }),
        Opcode::ZoneManage { action, all: true } => zones.manage_all(action),
        Opcode::ZoneManage { action, all: false } => zones.manage(start, action),
        Opcode::ZoneReport { partial } => {
            let zone_blocks = zones.layout().zone_blocks;
            let first = start / zone_blocks;
            if first >= u64::from(zones.layout().zones)
                || s.len_bytes as usize > path.dma.buffer_bytes()
            {
                return refuse(Status::OutOfRange);
            }
            let descriptors = zones.report(first as u32);
            // SAFETY: the claimed tag makes this command the buffer's only user on the device
            // side until its completion is posted.
            let buffer = unsafe { path.dma.data.buffer(s.tag.index()) };
            let written = nvme::write_zone_report(
                &mut buffer[..s.len_bytes as usize],
                descriptors.len() as u64,
                &descriptors,
            );
            if partial {
                buffer[..8].copy_from_slice(&(written as u64).to_le_bytes());
            }
            Ok(())
        }
        Opcode::Flush | Opcode::Deallocate => Ok(()),
    };
    result.map_err(|z| immediate(s.queue, s.tag, Status::from(z)))?;
    Ok(s)
}

/// The data of a claimed command: a write's taken from its buffer, a large read's put in it, a
/// small read's prefetched for `QueueWork::receive`.
fn move_data(path: &DataPath, s: Submission, in_data: bool) -> Result<Submission, Posted> {
    let refuse = |status| Err(immediate(s.queue, s.tag, status));
    if matches!(s.op, Opcode::ZoneManage { .. } | Opcode::ZoneReport { .. }) {
        // Done by `zone_command`.
        return Ok(s);
    }
    if let Err(e) = check_command(&path.config, s.offset_bytes, s.len_bytes) {
        return refuse(Status::from(&e));
    }
    if s.op == Opcode::Deallocate {
        // Moves no data: the range is all it carries.
        return Ok(s);
    }
    if s.len_bytes as usize > path.dma.buffer_bytes() {
        return refuse(Status::BadLength);
    }
    let tag = s.tag.index();
    if in_data {
        // Cleared before the data moves; the host cleared it too, before submitting.
        path.dma.in_data[tag].store(0, Ordering::Relaxed);
    }
    // SAFETY: the claimed tag makes this command the buffer's only user on the device side,
    // and the host hands the buffer over with the command (the queue's Release/Acquire) and
    // does not touch it until the completion is posted.
    let buffer = unsafe { path.dma.data.buffer(tag) };
    let len = s.len_bytes as usize;
    let result = match s.op {
        Opcode::Read if s.len_bytes <= COPY_WHEN_DONE_MAX_BYTES => {
            path.backing.prefetch(s.offset_bytes, len);
            Ok(())
        }
        Opcode::Read => path.backing.read(s.offset_bytes, &mut buffer[..len]),
        // Taking the data at submission makes an acknowledged write durable in the backing no
        // matter when the process dies afterwards.
        Opcode::Write | Opcode::ZoneAppend => path.backing.write(s.offset_bytes, &buffer[..len]),
        Opcode::Flush
        | Opcode::Deallocate
        | Opcode::ZoneManage { .. }
        | Opcode::ZoneReport { .. } => {
            unreachable!("moves no data")
        }
    };
    result.map(|()| s).or_else(|_| refuse(Status::IoError))
}

fn immediate(queue: u16, tag: Tag, status: Status) -> Posted {
    Posted {
        queue,
        tag,
        status,
        deadline_ns: 0,
        posted_ns: 0,
    }
}

type Decoded = Result<(Submission, bool), Posted>;

/// A command word: Moneta's, or DC Express's, whose reads complete in their data.
fn decode_word(word: u64, queue: u16, path: &DataPath) -> Decoded {
    let c = moneta::CommandWord::decode(word);
    let Some(op) = c.op().filter(|op| !op.is_zoned() || path.zones.is_some()) else {
        return Err(immediate(queue, Tag::new(c.tag), Status::BadOpcode));
    };
    let block_bytes = path.block_bytes;
    // Zone management's length field is its action.
    let len_blocks = if matches!(op, Opcode::ZoneManage { .. }) {
        0
    } else {
        c.len_blocks
    };
    Ok((
        Submission {
            queue,
            tag: Tag::new(c.tag),
            op,
            offset_bytes: c.offset_blocks * block_bytes,
            len_bytes: u32::try_from(len_blocks * block_bytes).unwrap_or(u32::MAX),
            // The command word has no room for one.
            placement: 0,
            doorbell_ns: 0,
        },
        op == Opcode::Read && path.protocol == Protocol::DcExpress,
    ))
}

/// An NVMe command. A busy tag's PRP list pages are the host's to rewrite for its next
/// command, so they are not read: the command is refused with `TagConflict`, as `accept`
/// refuses a tag claimed in the same pass, so the driver never takes the refusal for the
/// completion of the command in flight.
fn decode_nvme(sqe: &nvme::Sqe, queue: u16, path: &DataPath) -> Decoded {
    let refuse = |status| Err(immediate(queue, Tag::new(sqe.cid), status));
    let op = match nvme_opcode(sqe, path) {
        Ok(op) => op,
        Err(status) => return refuse(status),
    };
    if sqe.nsid != 1 {
        return refuse(Status::BadField);
    }
    let mut s = Submission {
        queue,
        tag: Tag::new(sqe.cid),
        op,
        offset_bytes: 0,
        len_bytes: 0,
        placement: 0,
        doorbell_ns: 0,
    };
    if op == Opcode::Flush {
        return Ok((s, false));
    }
    s.placement = match nvme_placement(sqe, op, path) {
        Ok(handle) => handle,
        Err(status) => return refuse(status),
    };
    let Some(offset) = sqe.slba.checked_mul(path.block_bytes) else {
        return refuse(Status::OutOfRange);
    };
    s.offset_bytes = offset;
    s.len_bytes = nvme_len_bytes(sqe, op, path.block_bytes);
    let dma = &*path.dma;
    if usize::from(sqe.cid) >= dma.tags() {
        return refuse(Status::BadField);
    }
    if path.tags.is_busy(usize::from(sqe.cid)) {
        return refuse(Status::TagConflict);
    }
    if matches!(op, Opcode::Deallocate | Opcode::ZoneManage { .. }) {
        // Its range or zone is in the entry itself: no PRPs.
        return Ok((s, false));
    }
    if s.len_bytes as usize > dma.buffer_bytes() {
        return refuse(Status::BadLength);
    }
    if !prps_cover_tag_buffer(sqe, s.len_bytes as usize, dma) {
        return refuse(Status::BadField);
    }
    Ok((s, false))
}

/// The operation an NVMe entry's opcode (and, for zone management, dword 13) names, or the
/// status refusing it: the zoned command set only on a zoned namespace.
#[inline]
fn nvme_opcode(sqe: &nvme::Sqe, path: &DataPath) -> Result<Opcode, Status> {
    Ok(match sqe.opcode {
        nvme::OPCODE_READ => Opcode::Read,
        nvme::OPCODE_WRITE => Opcode::Write,
        nvme::OPCODE_FLUSH => Opcode::Flush,
        nvme::OPCODE_DATASET_MANAGEMENT => Opcode::Deallocate,
        // The zoned command set, on a zoned namespace only.
        nvme::OPCODE_ZONE_APPEND if path.zones.is_some() => Opcode::ZoneAppend,
        nvme::OPCODE_ZONE_MANAGEMENT_SEND if path.zones.is_some() => {
            match nvme::zone_action(sqe.cdw13 as u8) {
                Some(action) => Opcode::ZoneManage {
                    action,
                    all: sqe.cdw13 & nvme::ZSA_SELECT_ALL != 0,
                },
                None => return Err(Status::BadField),
            }
        }
        nvme::OPCODE_ZONE_MANAGEMENT_RECEIVE if path.zones.is_some() => {
            // Report zones, listing every zone (reporting option 0h).
            if sqe.cdw13 & 0xffff != u32::from(nvme::ZRA_REPORT_ZONES) {
                return Err(Status::BadField);
            }
            Opcode::ZoneReport {
                partial: sqe.cdw13 & nvme::ZRA_PARTIAL != 0,
            }
        }
        _ => return Err(Status::BadOpcode),
    })
}

/// The placement handle an NVMe entry's directive gives command `op` (0 without one), or
/// the status refusing the directive.
#[inline]
fn nvme_placement(sqe: &nvme::Sqe, op: Opcode, path: &DataPath) -> Result<u16, Status> {
    match nvme::directive(sqe) {
        nvme::Directive::Placement(handle) if op == Opcode::Write => {
            if u32::from(handle) >= path.config.ftl.placement_handles || !path.config.ftl.enabled {
                // A handle the device does not have (NVMe FDP: Invalid Field in Command).
                return Err(Status::BadField);
            }
            Ok(handle)
        }
        nvme::Directive::None => Ok(0),
        // A placement on anything but a write, or a directive type the device does not know.
        nvme::Directive::Placement(_) | nvme::Directive::Unsupported(_) => Err(Status::BadField),
    }
}

/// The bytes an NVMe entry for `op` carries: none for zone management, a report's buffer
/// from dword 12, otherwise its block count (dword 12, zero-based) in bytes.
#[inline]
fn nvme_len_bytes(sqe: &nvme::Sqe, op: Opcode, block_bytes: u64) -> u32 {
    match op {
        // Management carries no data; a report's buffer is dword 12's dwords, zero-based.
        Opcode::ZoneManage { .. } => 0,
        Opcode::ZoneReport { .. } => (sqe.cdw12.saturating_add(1)).saturating_mul(4),
        _ => {
            let blocks = u64::from(sqe.cdw12 & 0xffff) + 1;
            u32::try_from(blocks * block_bytes).unwrap_or(u32::MAX)
        }
    }
}

/// Walks the command's PRP entries (PRP1, then PRP2 or the PRP list it points to, following
/// chain pointers) and checks they describe, page by page, the command's tag buffer: the only
/// memory the device may touch for it.
fn prps_cover_tag_buffer(sqe: &nvme::Sqe, len: usize, dma: &DmaMemory) -> bool {
    let page = dma.page_bytes as u64;
    let tag = usize::from(sqe.cid);
    let base = nvme::DATA_IOVA + (tag * dma.buffer_bytes()) as u64;
    if sqe.prp1 != base {
        return false;
    }
    let pages = len.div_ceil(dma.page_bytes);
    if pages == 1 {
        return true;
    }
    if pages == 2 {
        return sqe.prp2 == base + page;
    }
    let Some(lists) = &dma.lists else {
        return false;
    };
    let list_base = nvme::LIST_IOVA + (tag * lists.buffer_bytes()) as u64;
    let list_bytes = lists.buffer_bytes() as u64;
    // Whether an address names a whole entry, aligned to `align`, inside the tag's list pages.
    // The address comes from the host, so no arithmetic on it may overflow.
    let names_an_entry = |iova: u64, align: u64| {
        iova.checked_sub(list_base)
            .is_some_and(|at| at.is_multiple_of(align) && at + 8 <= list_bytes)
    };
    let per_page = dma.page_bytes / 8;
    let mut entry_iova = sqe.prp2;
    for i in 1..pages {
        if !names_an_entry(entry_iova, 8) {
            return false;
        }
        let index_in_page = ((entry_iova % page) / 8) as usize;
        let read = |iova: u64| {
            let at = (iova - list_base) as usize;
            // SAFETY: the tag's command is being decoded, so its PRP list pages are the
            // device's to read (the host wrote them before the submission's Release).
            let list = unsafe { lists.buffer(tag) };
            u64::from_le_bytes(list[at..at + 8].try_into().expect("8 bytes"))
        };
        let mut value = read(entry_iova);
        if index_in_page == per_page - 1 && i < pages - 1 {
            // Last entry of a list page with more to come: a pointer to the next list page.
            entry_iova = value;
            if !names_an_entry(entry_iova, page) {
                return false;
            }
            value = read(entry_iova);
        }
        if value != base + i as u64 * page {
            return false;
        }
        entry_iova += 8;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Arena;

    /// 64-byte pages make a PRP list chain with few bytes: 7 entries and a chain pointer per
    /// list page.
    const PAGE: usize = 64;
    const PAGES: usize = 20;

    fn dma() -> DmaMemory {
        let buffer_bytes = PAGE * PAGES;
        let list_bytes = DmaMemory::list_bytes_for(buffer_bytes, PAGE);
        DmaMemory::new(
            Arena::new(2, buffer_bytes).expect("arena"),
            Some(Arena::new(2, list_bytes).expect("lists")),
            PAGE,
        )
    }

    /// The tag-1 command over all its pages, with its PRP list written as a driver would:
    /// entries for pages 1.., the last entry of each full list page pointing to the next.
    fn valid_command(dma: &DmaMemory) -> nvme::Sqe {
        let (tag, page) = (1usize, PAGE as u64);
        let lists = dma.lists.as_ref().expect("nvme");
        let list_base = nvme::LIST_IOVA + (tag * lists.buffer_bytes()) as u64;
        let base = nvme::DATA_IOVA + (tag * dma.buffer_bytes()) as u64;
        // SAFETY: no command is in flight; the test is the only user of the list pages.
        let list = unsafe { lists.buffer(tag) };
        let (mut at, per_page) = (0usize, PAGE / 8);
        for i in 1..PAGES {
            if at % PAGE == PAGE - 8 {
                let next = list_base + (at + 8) as u64;
                list[at..at + 8].copy_from_slice(&next.to_le_bytes());
                at += 8;
            }
            list[at..at + 8].copy_from_slice(&(base + i as u64 * page).to_le_bytes());
            at += 8;
        }
        assert!(at > per_page * 8, "the list must chain");
        nvme::Sqe {
            cid: tag as u16,
            prp1: base,
            prp2: list_base,
            ..nvme::Sqe::default()
        }
    }

    #[test]
    fn a_prp_list_that_names_the_tag_buffer_is_accepted() {
        let dma = dma();
        assert!(prps_cover_tag_buffer(
            &valid_command(&dma),
            PAGE * PAGES,
            &dma
        ));
    }

    /// Pointers from the host near the top of the address space, below the list or past it,
    /// or misaligned, are refused; before, one of them overflowed and panicked the device.
    #[test]
    fn hostile_prp_pointers_are_refused_without_panicking() {
        let dma = dma();
        let lists = dma.lists.as_ref().expect("nvme");
        let list_base = nvme::LIST_IOVA + lists.buffer_bytes() as u64;
        let list_end = list_base + lists.buffer_bytes() as u64;
        for prp2 in [
            u64::MAX - 7,
            u64::MAX,
            0,
            list_base - 8,
            list_base + 4,
            list_end - 4,
            list_end,
        ] {
            let sqe = nvme::Sqe {
                prp2,
                ..valid_command(&dma)
            };
            assert!(
                !prps_cover_tag_buffer(&sqe, PAGE * PAGES, &dma),
                "prp2 {prp2:#x}"
            );
        }
        // A chain pointer (last entry of the first list page) that points anywhere else.
        for chain in [
            u64::MAX - (PAGE as u64 - 1),
            0u64.wrapping_sub(PAGE as u64),
            list_end,
        ] {
            let sqe = valid_command(&dma);
            // SAFETY: as in `valid_command`.
            let list = unsafe { lists.buffer(1) };
            list[PAGE - 8..PAGE].copy_from_slice(&chain.to_le_bytes());
            assert!(
                !prps_cover_tag_buffer(&sqe, PAGE * PAGES, &dma),
                "chain {chain:#x}"
            );
        }
    }
}
