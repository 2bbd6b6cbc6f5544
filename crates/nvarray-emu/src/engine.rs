//! The running emulator: the device side of every queue pair, the DMA memory the host shares
//! with the device, and the thread(s) that run the device.
//!
//! `service` is one pass of the device: take new commands from every submission queue,
//! validate and decode them, hand them to `DeviceCore` (which drives the model and moves the
//! data), and post the completions that are due. Device threads call it in a loop; in inline
//! mode (`device_threads = 0`) the host threads call it while they wait, so the device runs on
//! whichever thread polls. A lock serialises passes: the model is one serial device.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;

use nvarray_model::{Breakdown, DeviceConfig, Protocol};

use crate::arena::Arena;
use crate::backing::{BackingKind, BackingPages};
use crate::cpus::{pin_this_thread, CpuList};
use crate::device_core::{DeviceCore, Posted, Submission};
use crate::error::EmuError;
use crate::irq::Irq;
use crate::jitter::{this_runner, JitterProbe, JitterReport};
use crate::lateness::LatenessReport;
use crate::nvme_cq::{CqDevice, Cqe};
use crate::protocol::{moneta, nvme};
use crate::protocol::{Opcode, Status};
use crate::ring::Consumer;
use crate::tag_pool::Tag;
use crate::word_ring::{WordConsumer, WordProducer};

/// Commands taken from one submission queue per pass, so one busy queue cannot starve the
/// others or delay due completions.
const SQ_BATCH_MAX: usize = 32;
/// A device thread with nothing in flight for this long yields the CPU between passes.
const IDLE_YIELD_NS: u64 = 200_000;

/// With one command in flight, a pass that ends this close to the device's next deadline
/// waits for it on the clock alone (27 ns a reading here) instead of running whole passes
/// (about 100 ns each), so the completion is posted within a clock reading of its deadline
/// rather than within a pass: at dram's QD 1 the lateness p50 went from 86 to 66 ns
/// (docs/perf.md, issue 17's third session). It is about two passes, so a command that
/// arrives meanwhile waits no longer than it could behind two passes. With more in flight
/// the passes are busy anyway, and waiting would hold back the commands arriving behind
/// (the null device at QD 32 lost about 4 % of its IOPS when every pass waited).
const NEAR_DEADLINE_NS: u64 = 250;

/// The memory host and device share: per-tag data buffers (Moneta: "static buffer address for
/// each tag"), per-tag PRP list pages for NVMe, and per-tag in-data completion words.
pub struct DmaMemory {
    pub data: Arena,
    /// NVMe only: PRP list pages, `list_bytes` per tag.
    pub lists: Option<Arena>,
    /// DC Express in-data completion: the word the device writes after a read's data. 0 while
    /// the read is pending; `IN_DATA_DONE | status` once the data is in place.
    pub in_data: Box<[AtomicU64]>,
    pub page_bytes: usize,
}

/// Set in an in-data completion word when the device has written it.
pub const IN_DATA_DONE: u64 = 1 << 63;

impl DmaMemory {
    pub fn tags(&self) -> usize {
        self.data.buffers()
    }

    pub fn buffer_bytes(&self) -> usize {
        self.data.buffer_bytes()
    }

    /// PRP list bytes per tag: enough pages for one entry per data page after the first, plus
    /// a chain pointer in the last entry of each full list page (NVMe §4.3).
    pub fn list_bytes_for(buffer_bytes: usize, page_bytes: usize) -> usize {
        let entries = buffer_bytes.div_ceil(page_bytes).saturating_sub(1);
        let per_page = page_bytes / 8 - 1;
        entries.div_ceil(per_page).max(1) * page_bytes
    }
}

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

struct QueueSlot {
    queue: DeviceQueue,
    irq: Arc<Irq>,
    /// Whether the host side may sleep, so the device must raise the interrupt.
    may_sleep: bool,
    /// Completions the completion queue had no room for (only a misbehaving host, which
    /// submits more than the queue holds, fills it); posted first on the next pass.
    backlog: Vec<Posted>,
    /// Submission queue entries taken so far (NVMe reports it as the SQ head).
    sq_taken: u64,
}

struct State {
    core: DeviceCore,
    /// Attached queue pairs by id; `None` where one was detached (its id is given to the next
    /// queue pair attached).
    queues: Vec<Option<QueueSlot>>,
    /// Per tag: a command is in flight (a second command on a busy tag is refused: its buffer
    /// is in use) and whether its completion goes into the data.
    tag_busy: Vec<bool>,
    tag_in_data: Vec<bool>,
    last_busy_ns: u64,
    /// The machine's own jitter, sampled in the passes that find nothing to do.
    jitter: JitterProbe,
    /// Commands taken from one submission queue in one pass, before they are dated (kept to
    /// reuse its allocation).
    batch: Vec<Decoded>,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    dma: Arc<DmaMemory>,
    protocol: Protocol,
    block_bytes: u64,
    commands: AtomicU64,
    backing_pages: BackingPages,
}

/// A running emulated device.
pub struct Emulator {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Everything `Emulator::start` needs besides the device description.
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    pub backing: BackingKind,
    pub device_threads: usize,
    /// Tags the host may use (each with its own DMA buffer).
    pub tags: usize,
    /// Bytes per tag buffer: the largest command.
    pub buffer_bytes: usize,
    /// CPUs to pin threads to: device thread `i` runs on `cpus.nth(i)`; the host threads take
    /// the ones after (`CpuList`). Empty: nothing is pinned.
    pub cpus: CpuList,
}

impl Emulator {
    pub fn start(config: &DeviceConfig, options: &EmulatorOptions) -> Result<Self, EmuError> {
        options.cpus.check_allowed().map_err(EmuError::Cpus)?;
        let core = DeviceCore::open(config, &options.backing)?;
        let backing_pages = core.backing_pages();
        let page_bytes = config.interface.page_bytes as usize;
        let data = Arena::new(options.tags, options.buffer_bytes).ok_or(EmuError::Arena {
            tags: options.tags,
            buffer_bytes: options.buffer_bytes,
        })?;
        let lists = match config.interface.protocol {
            Protocol::Moneta | Protocol::DcExpress => None,
            Protocol::Nvme => {
                let list_bytes = DmaMemory::list_bytes_for(options.buffer_bytes, page_bytes);
                Some(Arena::new(options.tags, list_bytes).ok_or(EmuError::Arena {
                    tags: options.tags,
                    buffer_bytes: list_bytes,
                })?)
            }
        };
        let dma = Arc::new(DmaMemory {
            data,
            lists,
            in_data: (0..options.tags).map(|_| AtomicU64::new(0)).collect(),
            page_bytes,
        });
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                core,
                queues: Vec::new(),
                tag_busy: vec![false; options.tags],
                tag_in_data: vec![false; options.tags],
                last_busy_ns: 0,
                jitter: JitterProbe::new(),
                batch: Vec::with_capacity(SQ_BATCH_MAX),
            }),
            stop: AtomicBool::new(false),
            dma,
            protocol: config.interface.protocol,
            block_bytes: u64::from(config.controller.block_bytes),
            commands: AtomicU64::new(0),
            backing_pages,
        });
        let mut emulator = Emulator {
            shared,
            threads: Vec::new(),
        };
        for i in 0..options.device_threads {
            let shared = Arc::clone(&emulator.shared);
            let cpu = options.cpus.nth(i);
            let (pinned_tx, pinned) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("nvarray-device-{i}"))
                .spawn(move || {
                    let _stop_process_if_this_panics = AbortOnPanic;
                    let pinned = cpu.map_or(Ok(()), pin_this_thread);
                    let ok = pinned.is_ok();
                    let _ = pinned_tx.send(pinned);
                    if ok {
                        device_thread(&shared)
                    }
                })
                .map_err(|source| EmuError::Thread { source })?;
            // Dropping `emulator` on an error stops the threads already started.
            emulator.threads.push(thread);
            let pinned = pinned.recv().unwrap_or(Ok(()));
            if let (Err(e), Some(cpu)) = (pinned, cpu) {
                return Err(EmuError::Cpus(format!(
                    "cannot pin device thread {i} to CPU {cpu}: {e}"
                )));
            }
        }
        Ok(emulator)
    }

    pub fn dma(&self) -> &Arc<DmaMemory> {
        &self.shared.dma
    }

    /// The pages behind the device's bytes (explicit huge pages when reserved).
    pub fn backing_pages(&self) -> BackingPages {
        self.shared.backing_pages
    }

    pub fn protocol(&self) -> Protocol {
        self.shared.protocol
    }

    /// Whether device threads run the device (otherwise callers must `service` it).
    pub fn has_device_threads(&self) -> bool {
        !self.threads.is_empty()
    }

    /// Connects the device's ends of a new queue pair; returns its queue id (a detached
    /// pair's id is reused, so ids stay below the most pairs ever attached at once).
    pub fn attach(&self, queue: DeviceQueue, irq: Arc<Irq>, may_sleep: bool) -> u16 {
        let mut state = self.lock();
        let id = state
            .queues
            .iter()
            .position(Option::is_none)
            .unwrap_or(state.queues.len());
        assert!(
            id < usize::from(u16::MAX),
            "queue ids are 16-bit: 65,535 queue pairs attached at once"
        );
        let matches = matches!(
            (&queue, self.shared.protocol),
            (
                DeviceQueue::Word { .. },
                Protocol::Moneta | Protocol::DcExpress
            ) | (DeviceQueue::Nvme { .. }, Protocol::Nvme)
        );
        assert!(matches, "queue pair protocol differs from the device's");
        let slot = Some(QueueSlot {
            queue,
            irq,
            may_sleep,
            backlog: Vec::with_capacity(16),
            sq_taken: 0,
        });
        if id == state.queues.len() {
            state.queues.push(slot);
        } else {
            state.queues[id] = slot;
        }
        id as u16
    }

    /// Disconnects queue pair `id`, freeing its rings. The host must have collected every
    /// completion of its commands first (`QueuePair`'s drop does); anything the device still
    /// had for it is dropped. Trailing free ids are trimmed so the table shrinks too.
    pub fn detach(&self, id: u16) {
        let mut state = self.lock();
        if let Some(slot) = state.queues.get_mut(usize::from(id)) {
            *slot = None;
        }
        while state.queues.last().is_some_and(Option::is_none) {
            state.queues.pop();
        }
    }

    /// Queue pairs attached now.
    pub fn queue_pairs(&self) -> usize {
        self.lock().queues.iter().flatten().count()
    }

    /// One pass of the device, if no other thread is running one (inline mode). Returns
    /// whether this thread ran it. `spinning`: the calling thread has done nothing but spin
    /// since its previous call (no sleep, no other work), so the time between the two passes
    /// measures the machine's jitter when both were idle (`jitter`).
    pub fn try_service(&self, spinning: bool) -> bool {
        match self.shared.state.try_lock() {
            Ok(mut state) => {
                service(&self.shared, &mut state, spinning);
                true
            }
            Err(TryLockError::WouldBlock) => false,
            Err(TryLockError::Poisoned(e)) => panic!("device state poisoned: {e}"),
        }
    }

    /// The earliest completion deadline the model knows, in the device clock's nanoseconds.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.lock().core.next_deadline_ns()
    }

    pub fn now_ns(&self) -> u64 {
        self.lock().core.clock().now_ns()
    }

    /// Lateness percentiles and the faithfulness verdict so far.
    /// When the run was late, the verdict says whether the machine's own jitter in the same
    /// run was too (`Lateness::machine_hint`).
    pub fn lateness(&self) -> LatenessReport {
        let state = self.lock();
        let lateness = state.core.lateness();
        let hint = state
            .jitter
            .report()
            .and_then(|j| lateness.machine_hint(j.p99_ns));
        lateness.report(hint.as_deref())
    }

    /// The machine's own jitter as the device's spinning threads saw it so far (`None` if
    /// they never spun idle; see `jitter`).
    pub fn jitter(&self) -> Option<JitterReport> {
        self.lock().jitter.report()
    }

    /// Reads the timing model (its utilisation and wear) together with the sum of the
    /// breakdowns of every command it completed and their count, under one lock so the three
    /// agree.
    pub fn with_model<R>(
        &self,
        f: impl FnOnce(&nvarray_model::DeviceModel, &Breakdown, u64) -> R,
    ) -> R {
        let state = self.lock();
        let (sum, count) = state.core.modelled();
        f(state.core.model(), sum, count)
    }

    /// Commands the device has taken from submission queues.
    pub fn commands(&self) -> u64 {
        self.shared.commands.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().expect("device state poisoned")
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            // A device thread that panicked already reported it; nothing more to do here.
            let _ = t.join();
        }
    }
}

/// Ends the process if a device thread panics (a bug in the emulator): every host thread waits
/// on the device, spinning or asleep, and would otherwise wait forever without a word. The
/// panic's message is already printed when this runs.
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "nvarray: the emulated device's thread panicked (see above); stopping, since every queue pair waits on it"
            );
            std::process::abort();
        }
    }
}

/// Passes a device thread runs per hold of the state lock. Taking an uncontended lock costs
/// two atomic read-modify-writes, a noticeable part of a ~100 ns pass; statistics readers and
/// `attach` wait for at most one burst (tens of microseconds).
const PASSES_PER_LOCK: usize = 256;

fn device_thread(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let mut state = shared.state.lock().expect("device state poisoned");
        let mut idle = false;
        for pass in 0..PASSES_PER_LOCK {
            // The first pass after taking the lock follows a lock hand-over or a yield: the
            // time since the previous one is not a spin loop's.
            idle = service(shared, &mut state, pass > 0);
            if idle {
                break;
            }
            std::hint::spin_loop();
        }
        drop(state);
        if idle {
            std::thread::yield_now();
        }
    }
}

/// One pass: take commands, post due completions. Returns whether the device has been idle
/// for `IDLE_YIELD_NS` (nothing in flight, nothing new). `spinning`: the calling thread did
/// nothing but spin since its previous pass (for the jitter probe).
fn service(shared: &Shared, state: &mut State, spinning: bool) -> bool {
    let State {
        core,
        queues,
        tag_busy,
        tag_in_data,
        last_busy_ns,
        jitter,
        batch,
    } = state;
    let dma = &*shared.dma;
    // SAFETY: `DeviceCore` asks only for the buffers of commands in flight, which the device
    // owns until their completions are posted (after the buffer's use).
    let buffers = |_, tag: Tag| unsafe { dma.data.buffer(tag.index()) };
    // The clock is read once per queue that had commands, after taking them, and once more
    // only if none had any: one reading per pass in the common single-queue case.
    let mut last_reading = None;
    let mut taken = 0u64;
    let mut backlog_posted = false;
    for (qid, slot) in queues.iter_mut().enumerate() {
        let Some(slot) = slot else { continue };
        let qid = qid as u16;
        for posted in std::mem::take(&mut slot.backlog) {
            post(slot, dma, posted, false);
            backlog_posted = true;
        }
        batch.clear();
        while batch.len() < SQ_BATCH_MAX {
            let decoded = match &mut slot.queue {
                DeviceQueue::Word { sq, .. } => match sq.pop() {
                    Some(word) => decode_word(word, qid, shared),
                    None => break,
                },
                DeviceQueue::Nvme { sq, .. } => match sq.pop() {
                    Some(sqe) => decode_nvme(&sqe, qid, shared.block_bytes, dma, tag_busy),
                    None => break,
                },
            };
            batch.push(decoded);
        }
        if batch.is_empty() {
            continue;
        }
        slot.sq_taken += batch.len() as u64;
        taken += batch.len() as u64;
        // The clock is read after the commands were taken, so each was in the queue by the
        // time it is dated: its deadline is never earlier than the model's latency after the
        // host's submission. And the model first does what was due before they arrived.
        let now = core.clock().now_ns();
        last_reading = Some(now);
        core.advance(now, buffers);
        for decoded in batch.drain(..) {
            let (submission, in_data) = match decoded {
                Ok(d) => d,
                Err(refused) => {
                    post(slot, dma, refused, false);
                    continue;
                }
            };
            let tag = submission.tag.index();
            if tag >= tag_busy.len() || tag_busy[tag] {
                // A tag the host does not have, or one already in flight: its buffer is not
                // the device's to touch. The second gets a status of its own, so the driver
                // cannot take the refusal for the completion of the command in flight.
                let status = if tag < tag_busy.len() {
                    Status::TagConflict
                } else {
                    Status::BadField
                };
                let refused = immediate(submission.queue, submission.tag, status);
                post(slot, dma, refused, false);
                continue;
            }
            tag_busy[tag] = true;
            tag_in_data[tag] = in_data;
            if in_data {
                // Cleared before the data moves; the host cleared it too, before submitting.
                dma.in_data[tag].store(0, Ordering::Relaxed);
            }
            // SAFETY: `tag_busy` makes this command the buffer's only user on the device side,
            // and the host hands the buffer over with the command (the queue's Release/Acquire)
            // and does not touch it until the completion is posted.
            let buffer = unsafe { dma.data.buffer(tag) };
            core.submit(submission, buffer, now);
        }
    }
    if taken > 0 {
        shared.commands.fetch_add(taken, Ordering::Relaxed);
    }
    let now = last_reading.unwrap_or_else(|| core.clock().now_ns());
    if taken == 0 && !backlog_posted {
        jitter.idle_reading(now, this_runner(), spinning);
    }
    let mut post_one = |posted: Posted| {
        let tag = posted.tag.index();
        let in_data = tag < tag_busy.len() && tag_busy[tag] && tag_in_data[tag];
        if tag < tag_busy.len() {
            tag_busy[tag] = false;
        }
        // A queue pair detached with this command in flight is gone: nothing to tell it.
        if let Some(Some(slot)) = queues.get_mut(usize::from(posted.queue)) {
            post(slot, dma, posted, in_data);
        }
    };
    let mut advanced = core.advance(now, buffers);
    let mut posted = core.post_due(now, &mut post_one);
    // The model's own events (a piece done, the completion computed) come first, then the
    // completion's deadline: each is waited for while it is within `NEAR_DEADLINE_NS` of
    // this pass's reading, so the wait as a whole is bounded by it.
    while let Some(next) = core
        .next_deadline_ns()
        .filter(|&next| next > now && next - now <= NEAR_DEADLINE_NS && core.in_flight() <= 1)
    {
        let then = core.clock().spin_until(next);
        advanced |= core.advance(then, buffers);
        posted += core.post_due(then, &mut post_one);
    }
    if taken > 0 || backlog_posted || advanced || posted > 0 {
        jitter.worked();
    }
    if taken > 0 || core.in_flight() > 0 {
        *last_busy_ns = now;
        false
    } else {
        now.saturating_sub(*last_busy_ns) > IDLE_YIELD_NS
    }
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

/// Delivers a completion: into the data for an in-data read, else as a completion queue entry
/// (raising the interrupt if the host may sleep).
fn post(slot: &mut QueueSlot, dma: &DmaMemory, posted: Posted, in_data: bool) {
    if in_data {
        // Release publishes the read data written into the buffer before this word.
        dma.in_data[posted.tag.index()].store(
            IN_DATA_DONE | u64::from(posted.status.code()),
            Ordering::Release,
        );
        return;
    }
    let delivered = match &mut slot.queue {
        DeviceQueue::Word { cq, .. } => cq
            .push(moneta::completion(posted.tag.raw(), posted.status))
            .is_ok(),
        DeviceQueue::Nvme { cq, .. } => cq
            .post(Cqe {
                result: u32::from(posted.status.code()),
                sq_head: slot.sq_taken as u16,
                sq_id: posted.queue,
                cid: posted.tag.raw(),
                status: nvme::status_code(posted.status),
            })
            .is_ok(),
    };
    if !delivered {
        slot.backlog.push(posted);
        return;
    }
    if slot.may_sleep {
        slot.irq.raise();
    }
}

type Decoded = Result<(Submission, bool), Posted>;

/// A command word: Moneta's, or DC Express's, whose reads complete in their data.
fn decode_word(word: u64, queue: u16, shared: &Shared) -> Decoded {
    let c = moneta::CommandWord::decode(word);
    let Some(op) = c.op() else {
        return Err(immediate(queue, Tag::new(c.tag), Status::BadOpcode));
    };
    let block_bytes = shared.block_bytes;
    Ok((
        Submission {
            queue,
            tag: Tag::new(c.tag),
            op,
            offset_bytes: c.offset_blocks * block_bytes,
            len_bytes: u32::try_from(c.len_blocks * block_bytes).unwrap_or(u32::MAX),
        },
        op == Opcode::Read && shared.protocol == Protocol::DcExpress,
    ))
}

/// `tag_busy` says which tags have a command in flight: a busy tag's PRP list pages are the
/// host's to rewrite for its next command, so they are not read (the command is refused).
fn decode_nvme(
    sqe: &nvme::Sqe,
    queue: u16,
    block_bytes: u64,
    dma: &DmaMemory,
    tag_busy: &[bool],
) -> Decoded {
    let refuse = |status| Err(immediate(queue, Tag::new(sqe.cid), status));
    let op = match sqe.opcode {
        nvme::OPCODE_READ => Opcode::Read,
        nvme::OPCODE_WRITE => Opcode::Write,
        nvme::OPCODE_FLUSH => Opcode::Flush,
        _ => return refuse(Status::BadOpcode),
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
    };
    if op == Opcode::Flush {
        return Ok((s, false));
    }
    let blocks = u64::from(sqe.cdw12 & 0xffff) + 1;
    let Some(offset) = sqe.slba.checked_mul(block_bytes) else {
        return refuse(Status::OutOfRange);
    };
    s.offset_bytes = offset;
    s.len_bytes = u32::try_from(blocks * block_bytes).unwrap_or(u32::MAX);
    if usize::from(sqe.cid) >= dma.tags() || tag_busy[usize::from(sqe.cid)] {
        return refuse(Status::BadField);
    }
    if s.len_bytes as usize > dma.buffer_bytes() {
        return refuse(Status::BadLength);
    }
    if !prps_cover_tag_buffer(sqe, s.len_bytes as usize, dma) {
        return refuse(Status::BadField);
    }
    Ok((s, false))
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

    /// 64-byte pages make a PRP list chain with few bytes: 7 entries and a chain pointer per
    /// list page.
    const PAGE: usize = 64;
    const PAGES: usize = 20;

    fn dma() -> DmaMemory {
        let buffer_bytes = PAGE * PAGES;
        let list_bytes = DmaMemory::list_bytes_for(buffer_bytes, PAGE);
        DmaMemory {
            data: Arena::new(2, buffer_bytes).expect("arena"),
            lists: Some(Arena::new(2, list_bytes).expect("lists")),
            in_data: (0..2).map(|_| AtomicU64::new(0)).collect(),
            page_bytes: PAGE,
        }
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
