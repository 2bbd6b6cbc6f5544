//! The driver: an opened device and the queue pairs threads issue commands on.
//!
//! Ownership of a tag's DMA buffer is carried by values that cannot be copied: a thread that
//! `prepare`s a command holds a `Prepared`; issuing it turns it into an in-flight command the
//! device owns; the completion comes back as a `Done`, and `Device::finish` consumes the `Done`
//! (copying a read's data out) and returns the tag to the pool. No buffer is reachable from
//! safe code while the device owns it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nvarray_emu::device_core::{IoOp, Status};
use nvarray_emu::engine::{DeviceQueue, DmaMemory, Emulator, EmulatorOptions, IN_DATA_DONE};
use nvarray_emu::irq::Irq;
use nvarray_emu::nvme_cq::{self, CqHost};
use nvarray_emu::protocol::{moneta, nvme};
use nvarray_emu::ring::{self, Producer};
use nvarray_emu::tag_pool::{cpu_hint, Tag, TagPool, TAGS_MAX};
use nvarray_emu::word_ring::{self, WordConsumer, WordProducer};
use nvarray_model::{DeviceConfig, Protocol};

use crate::options::{Completion, Options, Stack, DEVICE_THREADS_MAX};
use crate::HostError;

/// Default tag buffer size: large enough for the usual benchmark sizes, small enough that a
/// thousand tags fit the arena.
pub const BUFFER_BYTES_DEFAULT: u32 = 256 * 1024;

/// An opened emulated device.
pub struct Device {
    emu: Arc<Emulator>,
    tags: Arc<TagPool>,
    config: DeviceConfig,
    options: Options,
    command_bytes_max: u32,
}

/// A command ready to issue: its tag is taken and a write's data is in the tag's buffer.
#[derive(Debug)]
pub struct Prepared {
    tag: Tag,
    op: IoOp,
    offset_bytes: u64,
    len_bytes: u32,
    in_data: bool,
    raw_opcode: Option<u8>,
}

impl Prepared {
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// Sends `opcode` in place of the command's own (Moneta: 3 bits; NVMe: 8), so tests can
    /// show how the device answers an opcode it does not know.
    pub fn with_raw_opcode(mut self, opcode: u8) -> Self {
        self.raw_opcode = Some(opcode);
        self
    }
}

/// A completed command. Hand it to `Device::finish` to get a read's data and free the tag.
#[derive(Debug)]
pub struct Done {
    pub tag: Tag,
    pub op: IoOp,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    pub status: Status,
}

impl Device {
    pub fn open(config: &DeviceConfig, options: &Options) -> Result<Device, HostError> {
        config
            .validate()
            .map_err(|e| HostError::Config(e.to_string()))?;
        if options.device_threads > DEVICE_THREADS_MAX {
            return Err(HostError::Config(format!(
                "device threads {} is out of range: expected 0 to {DEVICE_THREADS_MAX}",
                options.device_threads
            )));
        }
        let block = config.controller.block_bytes;
        let buffer_bytes = options
            .buffer_bytes
            .unwrap_or(BUFFER_BYTES_DEFAULT)
            .min(config.controller.max_transfer_bytes);
        if buffer_bytes < block || !buffer_bytes.is_multiple_of(block) {
            return Err(HostError::Config(format!(
                "buffer size {buffer_bytes} is out of range: expected a multiple of the block size ({block}) up to the maximum transfer ({})",
                config.controller.max_transfer_bytes
            )));
        }
        if config.interface.protocol == Protocol::Nvme
            && u64::from(buffer_bytes / block) > nvme::BLOCKS_PER_COMMAND_MAX
        {
            return Err(HostError::Config(format!(
                "buffer size {buffer_bytes} is more than an NVMe command's {} blocks of {block} bytes",
                nvme::BLOCKS_PER_COMMAND_MAX
            )));
        }
        let completion = options
            .completion
            .unwrap_or(Completion::default_for(config.interface.protocol));
        let dc_express = config.interface.protocol == Protocol::DcExpress;
        if dc_express != (completion == Completion::InData) {
            return Err(HostError::Config(if dc_express {
                format!(
                    "completion mode {completion} does not fit a dc-express device: it raises no interrupt and posts no read completion, its reads complete in their data (use --completion in-data, its default)"
                )
            } else {
                format!(
                    "completion mode in-data is the DC Express protocol's, and this device speaks {}: use a dc-express preset or --set interface.protocol=dc-express",
                    config.interface.protocol.name()
                )
            }));
        }
        if completion == Completion::InData && options.stack != Stack::Spin {
            return Err(HostError::Config(format!(
                "completion mode in-data needs stack spin: the host polls the read's data for it, while stack {} sleeps until an interrupt",
                options.stack
            )));
        }
        let tags = (config.controller.tags as usize).min(TAGS_MAX);
        if config.interface.protocol != Protocol::Nvme {
            let blocks = config.memory.capacity_bytes / u64::from(block);
            if blocks > moneta::OFFSET_BLOCKS_MAX + 1 {
                return Err(HostError::Config(format!(
                    "memory.capacity_bytes {} is beyond what the Moneta command word addresses: at most {} blocks of {block} bytes",
                    config.memory.capacity_bytes,
                    moneta::OFFSET_BLOCKS_MAX + 1
                )));
            }
            if u64::from(buffer_bytes / block) > moneta::LEN_BLOCKS_MAX {
                return Err(HostError::Config(format!(
                    "buffer size {buffer_bytes} is more than the Moneta command word's {} blocks",
                    moneta::LEN_BLOCKS_MAX
                )));
            }
        }
        let emu = Emulator::start(
            config,
            &EmulatorOptions {
                backing: options.backing.clone(),
                device_threads: options.device_threads,
                tags,
                buffer_bytes: buffer_bytes as usize,
            },
        )?;
        Ok(Device {
            emu: Arc::new(emu),
            tags: Arc::new(TagPool::new(tags).expect("1..=TAGS_MAX")),
            config: config.clone(),
            options: Options {
                completion: Some(completion),
                ..options.clone()
            },
            command_bytes_max: buffer_bytes,
        })
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    pub fn options(&self) -> &Options {
        &self.options
    }

    /// How the device's queue pairs wait, the protocol's default applied.
    pub fn completion(&self) -> Completion {
        self.options
            .completion
            .expect("open resolves the completion mode")
    }

    pub fn emulator(&self) -> &Emulator {
        &self.emu
    }

    pub fn size_bytes(&self) -> u64 {
        self.config.memory.capacity_bytes
    }

    pub fn block_bytes(&self) -> u32 {
        self.config.controller.block_bytes
    }

    /// Largest single command (the tag buffer size).
    pub fn command_bytes_max(&self) -> u32 {
        self.command_bytes_max
    }

    pub fn tags(&self) -> usize {
        self.tags.tags()
    }

    /// A new queue pair for the calling thread. `completion` is how it waits, as far as the
    /// protocol allows: a DC Express device completes reads only in their data and raises no
    /// interrupt, so its queue pairs always poll (`InData`); on other devices `InData` means
    /// spinning on the completion queue.
    pub fn queue_pair(&self, completion: Completion) -> QueuePair {
        let completion = match (self.config.interface.protocol, completion) {
            (Protocol::DcExpress, _) => Completion::InData,
            (_, Completion::InData) => Completion::Spin,
            (_, other) => other,
        };
        // Every in-flight command holds a tag, so rings of at least `tags` entries never fill.
        let entries = self
            .tags
            .tags()
            .next_power_of_two()
            .max(ring::RING_ENTRIES_MIN);
        let irq = Arc::new(Irq::new());
        let may_sleep = matches!(completion, Completion::Sleep | Completion::Adaptive);
        let (ends, device_side) = match self.emu.protocol() {
            Protocol::Moneta | Protocol::DcExpress => {
                let (sq_p, sq_c) = word_ring::split(entries).expect("power of two in range");
                let (cq_p, cq_c) = word_ring::split(entries).expect("power of two in range");
                (
                    HostEnds::Word { sq: sq_p, cq: cq_c },
                    DeviceQueue::Word { sq: sq_c, cq: cq_p },
                )
            }
            Protocol::Nvme => {
                let (sq_p, sq_c) = ring::split::<nvme::Sqe>(entries).expect("in range");
                let (cq_d, cq_h) = nvme_cq::split(entries).expect("in range");
                (
                    HostEnds::Nvme { sq: sq_p, cq: cq_h },
                    DeviceQueue::Nvme { sq: sq_c, cq: cq_d },
                )
            }
        };
        let id = self.emu.attach(device_side, Arc::clone(&irq), may_sleep);
        QueuePair {
            emu: Arc::clone(&self.emu),
            tags: Arc::clone(&self.tags),
            dma: Arc::clone(self.emu.dma()),
            ends,
            irq,
            id,
            completion,
            adaptive_threshold_bytes: self.options.adaptive_threshold_bytes,
            pending: (0..self.tags.tags()).map(|_| None).collect(),
            pending_count: 0,
            small_in_flight: 0,
            in_data: Vec::with_capacity(self.tags.tags()),
            block_bytes: u64::from(self.block_bytes()),
            tag_conflicts: 0,
        }
    }

    /// Checks a request against the device before anything is touched: offset and length
    /// inside the device, aligned to the block size, length from one block to the largest
    /// command.
    pub fn check(&self, op: IoOp, offset_bytes: u64, len_bytes: u64) -> Result<(), HostError> {
        if op == IoOp::Flush {
            return Ok(());
        }
        let block = u64::from(self.block_bytes());
        let status = if len_bytes == 0 || len_bytes > u64::from(self.command_bytes_max) {
            Status::BadLength
        } else if !offset_bytes.is_multiple_of(block) || !len_bytes.is_multiple_of(block) {
            Status::Misaligned
        } else if offset_bytes
            .checked_add(len_bytes)
            .is_none_or(|end| end > self.size_bytes())
        {
            Status::OutOfRange
        } else {
            return Ok(());
        };
        Err(command_error(op, offset_bytes, len_bytes, status))
    }

    /// Takes a tag and, for a write, copies `data` into its buffer (the driver copies:
    /// Moneta found copying beat pinning user pages). Fails without side effects when the
    /// request is invalid or every tag is in flight.
    pub fn prepare(
        &self,
        op: IoOp,
        offset_bytes: u64,
        len_bytes: u32,
        data: Option<&[u8]>,
    ) -> Result<Prepared, HostError> {
        self.check(op, offset_bytes, u64::from(len_bytes))?;
        self.prepare_unchecked(op, offset_bytes, len_bytes, data)
    }

    /// `prepare` without the driver's checks, so tests can show the device's own validation.
    /// A write's `data` must still fit the tag buffer.
    pub fn prepare_unchecked(
        &self,
        op: IoOp,
        offset_bytes: u64,
        len_bytes: u32,
        data: Option<&[u8]>,
    ) -> Result<Prepared, HostError> {
        let tag = self.tags.acquire(cpu_hint()).ok_or(HostError::NoTag {
            tags: self.tags.tags(),
        })?;
        let dma = self.emu.dma();
        if let Some(data) = data {
            // SAFETY: we hold `tag`, so no command uses its buffer until we issue one.
            let buffer = unsafe { dma.data.buffer(tag.index()) };
            let n = data.len().min(buffer.len());
            buffer[..n].copy_from_slice(&data[..n]);
        }
        // A DC Express read completes in its data: the host clears the word it will watch.
        let in_data = op == IoOp::Read && self.config.interface.protocol == Protocol::DcExpress;
        if in_data {
            dma.in_data[tag.index()].store(0, Ordering::Relaxed);
        }
        Ok(Prepared {
            tag,
            op,
            offset_bytes,
            len_bytes,
            in_data,
            raw_opcode: None,
        })
    }

    /// Frees a completed command's tag, first copying a read's data into `out` (as much as
    /// fits). Returns the command's error when its status is not ok.
    pub fn finish(&self, done: Done, out: Option<&mut [u8]>) -> Result<(), HostError> {
        if let (Some(out), IoOp::Read, true) = (out, done.op, done.status.is_ok()) {
            // SAFETY: the completion hands the buffer back to us, and we still hold the tag.
            let buffer = unsafe { self.emu.dma().data.buffer(done.tag.index()) };
            let n = out.len().min(done.len_bytes as usize);
            out[..n].copy_from_slice(&buffer[..n]);
        }
        self.tags
            .release(done.tag)
            .expect("a Done holds a taken tag");
        if done.status.is_ok() {
            Ok(())
        } else {
            Err(command_error(
                done.op,
                done.offset_bytes,
                u64::from(done.len_bytes),
                done.status,
            ))
        }
    }

    /// The tag buffer of a prepared write, for callers that fill it in place (a server reads
    /// a request's payload from its socket straight into it, saving a copy). `&mut Prepared`
    /// proves the tag is held and not yet issued.
    pub fn write_buffer<'p>(&'p self, prepared: &'p mut Prepared) -> &'p mut [u8] {
        // SAFETY: `prepared` holds the tag and is borrowed mutably for the slice's lifetime, so
        // nothing else reaches this tag's buffer until the command is issued, which consumes
        // the `Prepared`.
        let buffer = unsafe { self.emu.dma().data.buffer(prepared.tag.index()) };
        &mut buffer[..prepared.len_bytes as usize]
    }

    /// A completed read's data, still in its tag buffer (no copy); `finish` the `Done`
    /// afterwards to free the tag. Empty unless `done` is a successful read.
    pub fn read_data<'d>(&'d self, done: &'d Done) -> &'d [u8] {
        if done.op != IoOp::Read || !done.status.is_ok() {
            return &[];
        }
        // SAFETY: the completion handed the buffer back to the host and `done` still holds the
        // tag; the borrow of `done` keeps it from being finished (and the tag reused) while
        // the slice lives, and no `&mut` slice of it can be made from a `&Done`. Nothing writes
        // a tag buffer the device has completed.
        let buffer = unsafe { self.emu.dma().data.buffer_to_read(done.tag.index()) };
        &buffer[..done.len_bytes as usize]
    }

    /// Returns a prepared command's tag without issuing it.
    pub fn cancel(&self, prepared: Prepared) {
        self.tags
            .release(prepared.tag)
            .expect("a Prepared holds a taken tag");
    }
}

pub(crate) fn command_error(
    op: IoOp,
    offset_bytes: u64,
    len_bytes: u64,
    status: Status,
) -> HostError {
    HostError::Command {
        op: match op {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Flush => "flush",
        },
        offset_bytes,
        len_bytes,
        status,
    }
}

enum HostEnds {
    /// Moneta and DC Express: one 64-bit word per command and per completion.
    Word {
        sq: WordProducer,
        cq: WordConsumer,
    },
    Nvme {
        sq: Producer<nvme::Sqe>,
        cq: CqHost,
    },
}

/// A queue pair: one thread's submission and completion queues. `Send`, not shared.
pub struct QueuePair {
    emu: Arc<Emulator>,
    /// The device's tags, for the commands still in flight when the pair is dropped.
    tags: Arc<TagPool>,
    dma: Arc<DmaMemory>,
    ends: HostEnds,
    irq: Arc<Irq>,
    id: u16,
    completion: Completion,
    adaptive_threshold_bytes: u32,
    /// Per tag: the command this queue pair has in flight on it.
    pending: Box<[Option<Prepared>]>,
    pending_count: usize,
    /// Commands in flight below the adaptive threshold (kept as a count so the wait loop does
    /// not scan every tag on each spin).
    small_in_flight: usize,
    /// Tags of in-flight reads that complete in the data.
    in_data: Vec<Tag>,
    block_bytes: u64,
    /// `TagConflict` completions seen: refusals of a second command on a busy tag, which
    /// this driver never sends (its tags come from one pool), so only another writer to the
    /// queue can cause them. They are counted and never taken for the tag's own completion.
    tag_conflicts: u64,
}

impl QueuePair {
    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn completion(&self) -> Completion {
        self.completion
    }

    pub fn in_flight(&self) -> usize {
        self.pending_count
    }

    /// Issues a prepared command: one atomic store of the command word (Moneta), or the SQE
    /// and the SQ tail doorbell (NVMe).
    pub fn issue(&mut self, p: Prepared) {
        let tag = p.tag.index();
        assert!(self.pending[tag].is_none(), "tag {tag} issued twice");
        match &mut self.ends {
            HostEnds::Word { sq, .. } => {
                let opcode = match p.op {
                    IoOp::Read => moneta::OPCODE_READ,
                    IoOp::Write => moneta::OPCODE_WRITE,
                    IoOp::Flush => moneta::OPCODE_FLUSH,
                };
                let opcode = p.raw_opcode.map_or(opcode, |raw| u64::from(raw & 0x7));
                let word = moneta::Command {
                    opcode,
                    tag: tag as u16,
                    offset_blocks: (p.offset_bytes / self.block_bytes)
                        .min(moneta::OFFSET_BLOCKS_MAX),
                    len_blocks: (u64::from(p.len_bytes) / self.block_bytes)
                        .clamp(1, moneta::LEN_BLOCKS_MAX),
                }
                .encode();
                sq.push(word).expect("rings hold every tag");
            }
            HostEnds::Nvme { sq, .. } => {
                let sqe = build_sqe(&self.dma, self.block_bytes, &p);
                sq.push(sqe).expect("rings hold every tag");
            }
        }
        if p.in_data {
            self.in_data.push(p.tag);
        }
        self.small_in_flight += usize::from(p.len_bytes < self.adaptive_threshold_bytes);
        self.pending[tag] = Some(p);
        self.pending_count += 1;
    }

    /// Collects completions without blocking and hands each to `f`. Returns how many. In
    /// inline mode this first runs a pass of the device.
    pub fn poll(&mut self, mut f: impl FnMut(Done)) -> usize {
        if !self.emu.has_device_threads() {
            self.emu.try_service();
        }
        let mut n = 0;
        loop {
            let (tag, status) = match &mut self.ends {
                HostEnds::Word { cq, .. } => match cq.pop() {
                    Some(word) => moneta::decode_completion(word),
                    None => break,
                },
                HostEnds::Nvme { cq, .. } => match cq.pop() {
                    // The emulator keeps the exact status code in dword 0.
                    Some(cqe) => (cqe.cid, Status::from_code(cqe.result as u8)),
                    None => break,
                },
            };
            if let Some(done) = self.take(usize::from(tag), status) {
                if !self.in_data.is_empty() {
                    // An in-data read the device refused completes here instead; its tag must
                    // not stay on the in-data watch list, where a later command on the same
                    // tag could be taken for done by a stale word.
                    if let Some(i) = self
                        .in_data
                        .iter()
                        .position(|t| t.index() == done.tag.index())
                    {
                        self.in_data.swap_remove(i);
                    }
                }
                f(done);
                n += 1;
            }
        }
        let mut i = 0;
        while i < self.in_data.len() {
            let tag = self.in_data[i];
            // Acquire pairs with the device's Release store after the data.
            let word = self.dma.in_data[tag.index()].load(Ordering::Acquire);
            if word & IN_DATA_DONE != 0 {
                self.in_data.swap_remove(i);
                let status = Status::from_code((word & 0xf) as u8);
                if let Some(done) = self.take(tag.index(), status) {
                    f(done);
                    n += 1;
                }
            } else {
                i += 1;
            }
        }
        n
    }

    /// `TagConflict` completions seen so far (see the field).
    pub fn tag_conflicts(&self) -> u64 {
        self.tag_conflicts
    }

    fn take(&mut self, tag: usize, status: Status) -> Option<Done> {
        if status == Status::TagConflict {
            // The refusal of a second command on this tag, not the completion of the one in
            // flight, which comes later.
            self.tag_conflicts += 1;
            return None;
        }
        // A completion for a tag this queue pair has not issued can only come from a device
        // bug; it is dropped rather than trusted.
        let p = self.pending.get_mut(tag)?.take()?;
        self.pending_count -= 1;
        self.small_in_flight -= usize::from(p.len_bytes < self.adaptive_threshold_bytes);
        Some(Done {
            tag: p.tag,
            op: p.op,
            offset_bytes: p.offset_bytes,
            len_bytes: p.len_bytes,
            status,
        })
    }

    /// Blocks until at least one completion arrives (spinning or sleeping as the queue pair's
    /// completion mode says) and hands each to `f`. Returns at once with 0 when nothing is in
    /// flight.
    pub fn wait(&mut self, mut f: impl FnMut(Done)) -> usize {
        loop {
            if self.pending_count == 0 {
                return 0;
            }
            let n = self.poll(&mut f);
            if n > 0 {
                return n;
            }
            if self.should_sleep() {
                self.sleep();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Whether waiting now should sleep: always for `Sleep`, never for `Spin` or in-data, and
    /// for `Adaptive` when no command in flight is smaller than the threshold.
    fn should_sleep(&self) -> bool {
        match self.completion {
            Completion::Spin | Completion::InData => false,
            Completion::Sleep => true,
            Completion::Adaptive => self.small_in_flight == 0,
        }
    }

    /// Sleeps until the device raises this queue pair's interrupt (or, inline, until the
    /// model's next deadline, since no other thread runs the device).
    fn sleep(&mut self) {
        if !self.emu.has_device_threads() {
            inline_nap(&self.emu);
            return;
        }
        self.irq.arm();
        if self.has_completion() {
            self.irq.disarm();
            return;
        }
        self.irq.wait();
    }

    /// Whether a completion entry is waiting (a peek, for the sleep protocol).
    pub fn has_completion(&self) -> bool {
        match &self.ends {
            HostEnds::Word { cq, .. } => cq.has_next(),
            HostEnds::Nvme { cq, .. } => cq.has_next(),
        }
    }

    /// The interrupt other threads raise when they reap this queue pair's completions on a
    /// sleeper's behalf (shared queue pairs of the ladder).
    pub(crate) fn irq(&self) -> &Arc<Irq> {
        &self.irq
    }

    pub(crate) fn emulator(&self) -> &Arc<Emulator> {
        &self.emu
    }
}

/// How long before the model's next deadline an inline nap ends. A nap is a real kernel sleep
/// (`nanosleep`), which on the test VMs overshoots by ~5–15 µs even with a 1 µs timer slack;
/// ending it this early and polling the rest keeps the completion on time.
pub(crate) const NAP_WAKE_MARGIN_NS: u64 = 25_000;

/// Inline mode's sleep: no device thread will raise an interrupt and the device runs only when
/// a host thread polls, so a sleeper sleeps until shortly before the model's next deadline
/// (`NAP_WAKE_MARGIN_NS`) and polls from there. Deadlines closer than the margin are not
/// slept for at all. Inline mode therefore gives the CPU away during long commands (flash)
/// without making completions late; the cost of an interrupt and a wake-up itself is only
/// paid, and measured, with device threads.
pub(crate) fn inline_nap(emu: &Emulator) {
    let Some(deadline) = emu.next_deadline_ns() else {
        std::thread::yield_now();
        return;
    };
    let now = emu.now_ns();
    let wake = deadline.saturating_sub(NAP_WAKE_MARGIN_NS);
    if wake > now {
        fine_timer_slack();
        std::thread::sleep(std::time::Duration::from_nanos(wake - now));
    }
}

/// Sets this thread's timer slack to 1 µs (once per thread): Linux lets a normal thread's
/// sleeps overshoot by 50 µs by default, which would swamp the margin above.
pub(crate) fn fine_timer_slack() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    DONE.with(|done| {
        if !done.replace(true) {
            #[cfg(not(miri))] // a hint miri cannot run
            // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only the calling thread;
            // failure leaves the default slack, which is only slower.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong)
            };
        }
    });
}

/// Synchronous I/O on one queue pair.
impl QueuePair {
    /// Reads `buf.len()` bytes at `offset_bytes`, split into commands of at most the device's
    /// largest command, as many in flight at once as tags allow.
    pub fn read_at(
        &mut self,
        device: &Device,
        buf: &mut [u8],
        offset_bytes: u64,
    ) -> Result<(), HostError> {
        self.transfer(device, offset_bytes, Buf::Read(buf))
    }

    /// Writes `buf` at `offset_bytes` (acknowledged when this returns).
    pub fn write_at(
        &mut self,
        device: &Device,
        buf: &[u8],
        offset_bytes: u64,
    ) -> Result<(), HostError> {
        self.transfer(device, offset_bytes, Buf::Write(buf))
    }

    /// Makes every acknowledged write durable (with a durable file backing).
    pub fn flush(&mut self, device: &Device) -> Result<(), HostError> {
        let p = device.prepare(IoOp::Flush, 0, 0, None)?;
        self.issue(p);
        let mut result = Ok(());
        while self.pending_count > 0 {
            self.finish_some(device, 0, &mut Buf::Write(&[]), &mut result);
        }
        result
    }

    fn transfer(
        &mut self,
        device: &Device,
        offset_bytes: u64,
        mut buf: Buf<'_>,
    ) -> Result<(), HostError> {
        let (op, len) = match &buf {
            Buf::Read(b) => (IoOp::Read, b.len()),
            Buf::Write(b) => (IoOp::Write, b.len()),
        };
        // The whole request is checked first, so a bad one touches nothing. Longer than one
        // command is fine: it is split below.
        let first = len.min(device.command_bytes_max() as usize);
        device.check(op, offset_bytes, first as u64)?;
        device.check(op, offset_bytes + (len - first) as u64, first as u64)?;
        let step = device.command_bytes_max() as usize;
        let mut result = Ok(());
        let mut at = 0;
        while at < len && result.is_ok() {
            let n = step.min(len - at);
            let data = match &buf {
                Buf::Write(b) => Some(&b[at..at + n]),
                Buf::Read(_) => None,
            };
            match device.prepare(op, offset_bytes + at as u64, n as u32, data) {
                Ok(p) => {
                    self.issue(p);
                    at += n;
                }
                // Out of tags: let some commands finish first.
                Err(HostError::NoTag { .. }) if self.pending_count > 0 => {
                    self.finish_some(device, offset_bytes, &mut buf, &mut result);
                }
                Err(e) => result = Err(e),
            }
        }
        while self.pending_count > 0 {
            self.finish_some(device, offset_bytes, &mut buf, &mut result);
        }
        result
    }

    /// Waits for completions and finishes them, copying reads into `buf` (which starts at
    /// device offset `base`); keeps the first error.
    fn finish_some(
        &mut self,
        device: &Device,
        base: u64,
        buf: &mut Buf<'_>,
        result: &mut Result<(), HostError>,
    ) {
        self.wait(|done| {
            let out = match buf {
                Buf::Read(b) => {
                    let at = (done.offset_bytes - base) as usize;
                    Some(&mut b[at..at + done.len_bytes as usize])
                }
                Buf::Write(_) => None,
            };
            if let Err(e) = device.finish(done, out) {
                if result.is_ok() {
                    *result = Err(e);
                }
            }
        });
    }
}

/// The SQE for `p`, writing its PRP list into the tag's list pages when it spans more
/// than two pages.
fn build_sqe(dma: &DmaMemory, block_bytes: u64, p: &Prepared) -> nvme::Sqe {
    let tag = p.tag.index();
    let page = dma.page_bytes as u64;
    let base = nvme::DATA_IOVA + (tag * dma.buffer_bytes()) as u64;
    let mut sqe = nvme::Sqe {
        opcode: match p.op {
            IoOp::Read => nvme::OPCODE_READ,
            IoOp::Write => nvme::OPCODE_WRITE,
            IoOp::Flush => nvme::OPCODE_FLUSH,
        },
        cid: tag as u16,
        nsid: 1,
        ..nvme::Sqe::default()
    };
    if let Some(raw) = p.raw_opcode {
        sqe.opcode = raw;
    }
    if p.op == IoOp::Flush {
        return sqe;
    }
    sqe.slba = p.offset_bytes / block_bytes;
    sqe.cdw12 = ((u64::from(p.len_bytes) / block_bytes).max(1) - 1)
        .min(nvme::BLOCKS_PER_COMMAND_MAX - 1) as u32;
    sqe.prp1 = base;
    let pages = (p.len_bytes as usize).div_ceil(dma.page_bytes);
    if pages == 2 {
        sqe.prp2 = base + page;
    } else if pages > 2 {
        let lists = dma.lists.as_ref().expect("NVMe devices have PRP lists");
        let list_base = nvme::LIST_IOVA + (tag * lists.buffer_bytes()) as u64;
        // SAFETY: we hold the tag, so its list pages are ours until the command is issued.
        let list = unsafe { lists.buffer(tag) };
        let per_page = dma.page_bytes / 8;
        let mut at = 0usize;
        for i in 1..pages {
            if at % per_page == per_page - 1 && i < pages - 1 {
                // Chain to the next list page (NVMe §4.3).
                let next = list_base + ((at + 1) * 8) as u64;
                list[at * 8..at * 8 + 8].copy_from_slice(&next.to_le_bytes());
                at += 1;
            }
            let entry = base + i as u64 * page;
            list[at * 8..at * 8 + 8].copy_from_slice(&entry.to_le_bytes());
            at += 1;
        }
        sqe.prp2 = list_base;
    }
    sqe
}

/// A dropped queue pair collects its commands still in flight (the model completes every
/// command it took), returning their tags, then detaches from the device, which frees its
/// rings: attaching and dropping queue pairs for ever holds no memory and no queue ids.
impl Drop for QueuePair {
    fn drop(&mut self) {
        let tags = Arc::clone(&self.tags);
        while self.pending_count > 0 {
            self.wait(|done| {
                let _ = tags.release(done.tag);
            });
        }
        self.emu.detach(self.id);
    }
}

enum Buf<'b> {
    Read(&'b mut [u8]),
    Write(&'b [u8]),
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvarray_model::presets::preset;

    /// A 1 MiB `dram` device speaking `protocol`, inline (no device thread), 4 KiB commands.
    fn small_device(protocol: &str) -> Device {
        let config = preset("dram")
            .unwrap()
            .load(&[
                ("memory.capacity_bytes".into(), "1m".into()),
                ("interface.protocol".into(), protocol.into()),
            ])
            .unwrap();
        let options = Options {
            buffer_bytes: Some(4096),
            device_threads: 0,
            ..Options::default()
        };
        Device::open(&config, &options).unwrap()
    }

    /// An in-data read the device refuses completes through the completion queue; its tag
    /// leaves the in-data watch list with it, so the tag's next command cannot be taken for
    /// done by the word the refused read left behind.
    #[test]
    fn a_refused_in_data_read_leaves_no_watcher_behind() {
        let device = small_device("dc-express");
        assert_eq!(
            device.completion(),
            Completion::InData,
            "dc-express default"
        );
        let mut qp = device.queue_pair(Completion::InData);
        // An opcode the device does not know: refused at decoding, through the queue.
        let p = device
            .prepare_unchecked(IoOp::Read, 0, 512, None)
            .unwrap()
            .with_raw_opcode(6);
        qp.issue(p);
        let mut statuses = Vec::new();
        while statuses.is_empty() {
            qp.wait(|done| {
                statuses.push(done.status);
                device.finish(done, None).ok();
            });
        }
        assert_eq!(statuses, [Status::BadOpcode]);
        assert!(qp.in_data.is_empty(), "stale in-data watcher");
    }

    /// A second command on a tag already in flight is refused with `TagConflict`, which the
    /// driver never takes for the completion of the command in flight: that one completes
    /// with its own status and data. (The refusal used to be `BadField` on the same tag,
    /// taken for the real command's completion.)
    #[test]
    fn a_command_on_a_busy_tag_is_refused_distinguishably() {
        for protocol in ["moneta", "nvme"] {
            let device = small_device(protocol);
            let mut qp = device.queue_pair(Completion::Spin);
            let data = vec![0xabu8; 4096];
            let p = device
                .prepare(IoOp::Write, 8192, 4096, Some(&data))
                .unwrap();
            let tag = p.tag.index();
            // The same command twice on the ring, as a second writer to the queue would; the
            // device (inline) sees both in one pass.
            let duplicate = Prepared {
                tag: p.tag,
                op: p.op,
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                in_data: p.in_data,
                raw_opcode: p.raw_opcode,
            };
            qp.issue(p);
            match &mut qp.ends {
                HostEnds::Word { sq, .. } => {
                    let word = moneta::Command {
                        opcode: moneta::OPCODE_WRITE,
                        tag: tag as u16,
                        offset_blocks: 8192 / qp.block_bytes,
                        len_blocks: 4096 / qp.block_bytes,
                    }
                    .encode();
                    sq.push(word).unwrap();
                }
                HostEnds::Nvme { sq, .. } => {
                    let sqe = build_sqe(&qp.dma, qp.block_bytes, &duplicate);
                    sq.push(sqe).unwrap();
                }
            }
            let mut statuses = Vec::new();
            while statuses.is_empty() {
                qp.wait(|done| {
                    statuses.push(done.status);
                    device.finish(done, None).unwrap();
                });
            }
            assert_eq!(statuses, [Status::Ok], "{protocol}");
            assert_eq!(qp.tag_conflicts(), 1, "{protocol}");
            let mut back = vec![0u8; 4096];
            qp.read_at(&device, &mut back, 8192).unwrap();
            assert_eq!(back, data, "{protocol}");
        }
    }

    /// Queue pairs detach when dropped: 200,000 attach-and-drop cycles (each with a command
    /// in flight at the drop) leave one pair attached at most and every tag free. Before,
    /// every pair stayed attached for ever, and the 65,536th attach panicked on its 16-bit id.
    #[test]
    fn queue_pairs_attach_and_detach_200_000_times() {
        let device = small_device("nvme");
        let tags = device.tags();
        for i in 0..200_000u64 {
            let mut qp = device.queue_pair(Completion::Spin);
            assert_eq!(qp.id(), 0, "cycle {i}: ids are reused");
            if i % 1000 == 0 {
                // A command left in flight: the drop collects it and frees its tag.
                let p = device.prepare(IoOp::Read, 0, 4096, None).unwrap();
                qp.issue(p);
            }
            drop(qp);
            assert_eq!(device.emulator().queue_pairs(), 0, "cycle {i}");
        }
        // Every tag is free again: all of them can be taken at once.
        let held: Vec<Prepared> = (0..tags)
            .map(|_| device.prepare(IoOp::Read, 0, 4096, None).unwrap())
            .collect();
        assert_eq!(held.len(), tags);
    }
}
