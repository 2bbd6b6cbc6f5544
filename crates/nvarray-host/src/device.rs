//! The driver: an opened device, and the commands threads prepare and finish on it.
//!
//! Ownership of a tag's DMA buffer is carried by values that cannot be copied: a thread that
//! `prepare`s a command holds a `Prepared`; issuing it on a `QueuePair` turns it into an
//! in-flight command the device owns; the completion comes back as a `Done`, and
//! `Device::finish` consumes the `Done` (copying a read's data out) and returns the tag to the
//! pool. No buffer is reachable from safe code while the device owns it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use nvarray_emu::dma_copy;
use nvarray_emu::protocol::{moneta, nvme};
use nvarray_emu::tag_pool::{thread_hint, TagPool, TAGS_MAX};
use nvarray_emu::{Emulator, EmulatorOptions, JitterReport, LatenessReport, Opcode, Status};
use nvarray_model::{Breakdown, DeviceConfig, Protocol};

use crate::command::{Done, Prepared};
use crate::nap::AdaptiveRule;
use crate::options::{CompletionMode, Options, Stack, BUFFER_BYTES_DEFAULT, DEVICE_THREADS_MAX};
use crate::queue_pair::QueuePair;
use crate::HostError;

/// An opened emulated device.
pub struct Device {
    emu: Arc<Emulator>,
    tags: Arc<TagPool>,
    config: DeviceConfig,
    options: Options,
    command_bytes_max: u32,
}

/// The bytes of each tag's buffer (the largest command): the size asked for or the default,
/// at most the controller's largest transfer, checked to be whole blocks that one command of
/// the protocol can carry.
fn tag_buffer_bytes(config: &DeviceConfig, options: &Options) -> Result<u32, HostError> {
    let block = config.controller.block_bytes;
    let buffer_bytes = options
        .buffer_bytes
        .unwrap_or(BUFFER_BYTES_DEFAULT)
        .min(config.controller.max_transfer_bytes);
    if buffer_bytes < block || !buffer_bytes.is_multiple_of(block) {
        return Err(HostError::BufferSize {
            buffer_bytes,
            block_bytes: block,
            max_transfer_bytes: config.controller.max_transfer_bytes,
        });
    }
    if config.interface.protocol == Protocol::Nvme
        && u64::from(buffer_bytes / block) > nvme::BLOCKS_PER_COMMAND_MAX
    {
        return Err(HostError::BufferBeyondNvmeCommand {
            buffer_bytes,
            block_bytes: block,
        });
    }
    Ok(buffer_bytes)
}

/// The completion mode asked for or `protocol`'s default, refused where the protocol or the
/// stack cannot honour it (in-data: DC Express only, and only spinning).
fn completion_mode(protocol: Protocol, options: &Options) -> Result<CompletionMode, HostError> {
    let completion = options
        .completion
        .unwrap_or(CompletionMode::default_for(protocol));
    let dc_express = protocol == Protocol::DcExpress;
    if dc_express && completion != CompletionMode::InData {
        return Err(HostError::DcExpressNeedsInData { mode: completion });
    }
    if !dc_express && completion == CompletionMode::InData {
        return Err(HostError::InDataNeedsDcExpress {
            protocol: protocol.name(),
        });
    }
    if completion == CompletionMode::InData && options.stack != Stack::Spin {
        return Err(HostError::InDataNeedsSpin {
            stack: options.stack,
        });
    }
    Ok(completion)
}

/// Checks that a command word (Moneta, DC Express) can name every block of the device and
/// a command of `buffer_bytes`; NVMe has no such limit.
fn fits_command_word(config: &DeviceConfig, buffer_bytes: u32) -> Result<(), HostError> {
    if config.interface.protocol == Protocol::Nvme {
        return Ok(());
    }
    let block = config.controller.block_bytes;
    let blocks = config.memory.capacity_bytes / u64::from(block);
    if blocks > moneta::OFFSET_BLOCKS_MAX + 1 {
        return Err(HostError::CapacityBeyondCommandWord {
            capacity_bytes: config.memory.capacity_bytes,
            block_bytes: block,
        });
    }
    if u64::from(buffer_bytes / block) > moneta::LEN_BLOCKS_MAX {
        return Err(HostError::BufferBeyondCommandWord { buffer_bytes });
    }
    Ok(())
}

impl Device {
    pub fn open(config: &DeviceConfig, options: &Options) -> Result<Device, HostError> {
        config.validate()?;
        if options.device_threads > DEVICE_THREADS_MAX {
            return Err(HostError::DeviceThreads {
                requested: options.device_threads,
            });
        }
        if config.controller.tags as usize > TAGS_MAX {
            return Err(HostError::Tags {
                tags: config.controller.tags,
            });
        }
        let tags = config.controller.tags as usize;
        let buffer_bytes = tag_buffer_bytes(config, options)?;
        let completion = completion_mode(config.interface.protocol, options)?;
        fits_command_word(config, buffer_bytes)?;
        let emu = Emulator::start(
            config,
            &EmulatorOptions {
                backing: options.backing.clone(),
                device_threads: options.device_threads,
                tags,
                buffer_bytes: buffer_bytes as usize,
                cpus: options.cpus.clone(),
                backing_faults: options.backing_faults.clone(),
            },
        )?;
        // The driver's tag pool and `command_bytes_max` are the emulator's tags and buffers:
        // a tag past its buffers, or a command longer than one, would reach another's memory.
        assert_eq!(
            emu.dma().tags(),
            tags,
            "the emulator started with another number of tag buffers than asked"
        );
        assert_eq!(
            emu.dma().buffer_bytes(),
            buffer_bytes as usize,
            "the emulator's tag buffers are not the size asked"
        );
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

    /// The pages behind the device's bytes (explicit huge pages when the administrator
    /// reserved enough for the device, else transparent ones, or a file's page cache).
    pub fn backing_pages(&self) -> nvarray_emu::BackingPages {
        self.emu.backing_pages()
    }

    /// How the device's queue pairs wait, the protocol's default applied.
    pub fn completion(&self) -> CompletionMode {
        self.options
            .completion
            .expect("open resolves the completion mode")
    }

    /// Reads the timing model (its utilisation and wear figures) together with the sum of
    /// the modelled breakdowns of every command it completed and their count, consistently.
    pub fn with_model<R>(
        &self,
        f: impl FnOnce(&nvarray_model::DeviceModel, &Breakdown, u64) -> R,
    ) -> R {
        self.emu.with_model(f)
    }

    /// The device's serial part per command so far (`Emulator::serial_ns_per_command`).
    pub fn serial_ns_per_command(&self) -> Option<f64> {
        self.emu.serial_ns_per_command()
    }

    /// CPU time the device threads have used so far, in ns (`Emulator::device_cpu_ns`).
    pub fn device_cpu_ns(&self) -> u64 {
        self.emu.device_cpu_ns()
    }

    /// Tests only: `Emulator::slow_wakeups_by`.
    #[doc(hidden)]
    pub fn slow_wakeups_by(&self, ns: u64) {
        self.emu.slow_wakeups_by(ns);
    }

    /// Tests only: `Emulator::stall_next_visit_by`.
    #[doc(hidden)]
    pub fn stall_next_visit_by(&self, ns: u64) {
        self.emu.stall_next_visit_by(ns);
    }

    /// Whether a device thread sleeps on the doorbell now (`Emulator::device_asleep`).
    pub fn device_asleep(&self) -> bool {
        self.emu.device_asleep()
    }

    /// Wall time the device threads spent in rounds that found work (`Emulator::device_busy_ns`).
    pub fn device_busy_ns(&self) -> u64 {
        self.emu.device_busy_ns()
    }

    /// Sleeping device threads the host's doorbell woke so far.
    pub fn doorbell_wakeups(&self) -> u64 {
        self.emu.doorbell_wakeups()
    }

    /// How the device's work is split among threads (`Emulator::work_split`).
    pub fn work_split(&self) -> String {
        self.emu.work_split()
    }

    /// The emulator's clock (ns since the device started, `nvarray_emu::Clock`): what
    /// `Done::deadline_ns` is on.
    pub fn now_ns(&self) -> u64 {
        self.emu.now_ns()
    }

    /// How late the emulator posted completions so far, and its faithfulness verdict.
    pub fn lateness(&self) -> LatenessReport {
        self.emu.lateness()
    }

    /// The machine's own jitter as the device's spinning threads saw it so far (`None` when
    /// they never spun idle).
    pub fn jitter(&self) -> Option<JitterReport> {
        self.emu.jitter()
    }

    /// The CPU `--cpus` gives the `i`-th host thread: the list's next after the device
    /// threads', wrapping around (`CpuList`); `None` when nothing is pinned.
    pub fn host_cpu(&self, i: usize) -> Option<usize> {
        self.options.cpus.nth(self.options.device_threads + i)
    }

    /// Commands the device has taken from its submission queues so far.
    pub fn commands_taken(&self) -> u64 {
        self.emu.commands()
    }

    /// Queue pairs attached now.
    pub fn queue_pairs(&self) -> usize {
        self.emu.queue_pairs()
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
    pub fn queue_pair(&self, completion: CompletionMode) -> QueuePair {
        let completion = match (self.config.interface.protocol, completion) {
            (Protocol::DcExpress, _) => CompletionMode::InData,
            (_, CompletionMode::InData) => CompletionMode::Spin,
            (_, other) => other,
        };
        let adaptive = (completion == CompletionMode::Adaptive).then(|| {
            Box::new(AdaptiveRule::new(
                &self.config,
                self.options.adaptive_threshold_ns,
            ))
        });
        QueuePair::attach(
            &self.emu,
            &self.tags,
            completion,
            adaptive,
            u64::from(self.block_bytes()),
        )
    }

    /// Checks a request against the device before anything is touched: offset and length
    /// inside the device, aligned to the block size, length from one block to the largest
    /// command.
    pub fn check(&self, op: Opcode, offset_bytes: u64, len_bytes: u64) -> Result<(), HostError> {
        if op == Opcode::Flush {
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
        op: Opcode,
        offset_bytes: u64,
        len_bytes: u32,
        data: Option<&[u8]>,
    ) -> Result<Prepared, HostError> {
        self.check(op, offset_bytes, u64::from(len_bytes))?;
        self.prepare_unchecked(op, offset_bytes, len_bytes, data)
    }

    /// Gives a prepared write a placement handle (NVMe Flexible Data Placement): its pages go
    /// to that reclaim unit handle of the FTL (`ftl.placement_handles`), so data written under
    /// different handles never shares an erase block. Refused, with the tag freed, unless the
    /// command is a write on an NVMe device whose FTL has the handle.
    pub fn place(&self, mut p: Prepared, handle: u16) -> Result<Prepared, HostError> {
        let ftl = &self.config.ftl;
        let why = if p.op != Opcode::Write {
            Some("only writes carry a placement handle")
        } else if self.config.interface.protocol != Protocol::Nvme {
            Some("only NVMe commands carry one (the command word has no room)")
        } else if !ftl.enabled || u32::from(handle) >= ftl.placement_handles {
            Some("the device's FTL has no such reclaim unit handle (ftl.placement_handles)")
        } else {
            None
        };
        if let Some(why) = why {
            self.tags
                .release(p.tag)
                .expect("a Prepared holds a taken tag");
            return Err(HostError::Placement {
                handle,
                handles: if ftl.enabled {
                    ftl.placement_handles
                } else {
                    0
                },
                why,
            });
        }
        p.placement = Some(handle);
        Ok(p)
    }

    /// `prepare` without the driver's checks, so tests can show the device's own validation.
    /// A write's `data` must still fit the tag buffer.
    pub fn prepare_unchecked(
        &self,
        op: Opcode,
        offset_bytes: u64,
        len_bytes: u32,
        data: Option<&[u8]>,
    ) -> Result<Prepared, HostError> {
        let tag = self
            .tags
            .acquire(thread_hint())
            .ok_or_else(|| HostError::NoTag {
                tags: self.tags.tags(),
            })?;
        let dma = self.emu.dma();
        if let Some(data) = data {
            // SAFETY: we hold `tag`, so no command uses its buffer until we issue one.
            let buffer = unsafe { dma.data.buffer(tag.index()) };
            let n = data.len().min(buffer.len());
            dma_copy::copy(&mut buffer[..n], &data[..n]);
        }
        // A DC Express read completes in its data: the host clears the word it will watch.
        let in_data = op == Opcode::Read && self.config.interface.protocol == Protocol::DcExpress;
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
            placement: None,
        })
    }

    /// Frees a completed command's tag, first copying a read's data into `out` (as much as
    /// fits). Returns the command's error when its status is not ok.
    pub fn finish(&self, done: Done, out: Option<&mut [u8]>) -> Result<(), HostError> {
        if let (Some(out), Opcode::Read, true) = (out, done.op, done.status.is_ok()) {
            // SAFETY: the completion hands the buffer back to us, and we still hold the tag.
            let buffer = unsafe { self.emu.dma().data.buffer(done.tag.index()) };
            let n = out.len().min(done.len_bytes as usize);
            dma_copy::copy(&mut out[..n], &buffer[..n]);
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

    /// A completed read's data (or zone report), still in its tag buffer (no copy); `finish`
    /// the `Done` afterwards to free the tag. Empty unless `done` is a successful read or
    /// report.
    pub fn read_data<'d>(&'d self, done: &'d Done) -> &'d [u8] {
        if !done.op.fills_buffer() || !done.status.is_ok() {
            return &[];
        }
        // SAFETY: the completion handed the buffer back to the host and `done` still holds the
        // tag; the borrow of `done` keeps it from being finished (and the tag reused) while
        // the slice lives, and no `&mut` slice of it can be made from a `&Done`. Nothing writes
        // a tag buffer the device has completed.
        let buffer = unsafe { self.emu.dma().data.buffer_to_read(done.tag.index()) };
        &buffer[..done.len_bytes as usize]
    }

    /// The memory the device reaches by DMA (for the zoned commands' results).
    pub(crate) fn dma(&self) -> &nvarray_emu::DmaMemory {
        self.emu.dma()
    }

    /// Returns a prepared command's tag without issuing it.
    pub fn cancel(&self, prepared: Prepared) {
        self.tags
            .release(prepared.tag)
            .expect("a Prepared holds a taken tag");
    }
}

pub(crate) fn command_error(
    op: Opcode,
    offset_bytes: u64,
    len_bytes: u64,
    status: Status,
) -> HostError {
    HostError::Command {
        op: match op {
            Opcode::Read => "read",
            Opcode::Write => "write",
            Opcode::Flush => "flush",
            Opcode::Deallocate => "deallocate",
            Opcode::ZoneAppend => "zone append",
            Opcode::ZoneManage { .. } => "zone management",
            Opcode::ZoneReport { .. } => "report zones",
        },
        offset_bytes,
        len_bytes,
        status,
    }
}
