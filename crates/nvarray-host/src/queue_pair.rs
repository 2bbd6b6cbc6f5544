//! A queue pair: one thread's submission and completion queues, and how it waits.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nvarray_emu::irq::Irq;
use nvarray_emu::nvme_cq::{self, CqHost};
use nvarray_emu::protocol::{moneta, nvme};
use nvarray_emu::ring::{self, Producer};
use nvarray_emu::tag_pool::{Tag, TagPool};
use nvarray_emu::word_ring::{self, WordConsumer, WordProducer};
use nvarray_emu::{DeviceQueue, DmaMemory, Emulator, Polled, QueueHandle, Status, IN_DATA_DONE};
use nvarray_model::Protocol;

use crate::command::{Done, Prepared};
use crate::encode;
use crate::nap::{inline_nap, inline_nap_time, AdaptiveRule};
use crate::options::CompletionMode;

pub(crate) enum HostEnds {
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
    /// The device's side of this pair: served by this thread in inline mode.
    handle: QueueHandle,
    completion: CompletionMode,
    /// `CompletionMode::Adaptive`'s rule (None in the other modes; boxed, as it holds the
    /// device's description).
    adaptive: Option<Box<AdaptiveRule>>,
    /// Per tag: the command this queue pair has in flight on it, and whether it is one the
    /// adaptive rule spins for.
    pending: Box<[Option<(Prepared, bool)>]>,
    pending_count: usize,
    /// Commands in flight the adaptive rule spins for (kept as a count so the wait loop does
    /// not scan every tag on each spin).
    spinning_in_flight: usize,
    /// The shortest idle-device latency among the commands issued since the queue pair was
    /// last empty that let the thread sleep (`u64::MAX`: none), for `AdaptiveRule::sleep_pays`.
    least_sleeping_ns: u64,
    /// Tags of in-flight reads that complete in the data.
    in_data: Vec<Tag>,
    block_bytes: u64,
    /// `TagConflict` completions seen: refusals of a second command on a busy tag, which
    /// this driver never sends (its tags come from one pool), so only another writer to the
    /// queue can cause them. They are counted and never taken for the tag's own completion.
    tag_conflicts: u64,
}

impl QueuePair {
    /// The device's clock, in nanoseconds (`Device::now_ns`).
    pub fn now_ns(&self) -> u64 {
        self.emu.now_ns()
    }

    /// Builds the rings of a new queue pair (as large as the device's tags, so they never
    /// fill) and attaches their device ends to the emulator. `completion` is already fitted
    /// to the protocol (`Device::queue_pair`).
    pub(crate) fn attach(
        emu: &Arc<Emulator>,
        tags: &Arc<TagPool>,
        completion: CompletionMode,
        adaptive: Option<Box<AdaptiveRule>>,
        block_bytes: u64,
    ) -> QueuePair {
        // Every in-flight command holds a tag, so rings of at least `tags` entries never fill.
        let entries = tags.tags().next_power_of_two().max(ring::RING_ENTRIES_MIN);
        let irq = Arc::new(Irq::new());
        let may_sleep = matches!(completion, CompletionMode::Sleep | CompletionMode::Adaptive);
        let (ends, device_side) = match emu.protocol() {
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
        let handle = emu.attach(device_side, Arc::clone(&irq), may_sleep);
        QueuePair {
            emu: Arc::clone(emu),
            tags: Arc::clone(tags),
            dma: Arc::clone(emu.dma()),
            ends,
            irq,
            handle,
            completion,
            adaptive,
            pending: (0..tags.tags()).map(|_| None).collect(),
            pending_count: 0,
            spinning_in_flight: 0,
            least_sleeping_ns: u64::MAX,
            in_data: Vec::with_capacity(tags.tags()),
            block_bytes,
            tag_conflicts: 0,
        }
    }

    pub fn id(&self) -> u16 {
        self.handle.id()
    }

    pub fn completion(&self) -> CompletionMode {
        self.completion
    }

    pub fn in_flight(&self) -> usize {
        self.pending_count
    }

    /// Issues a prepared command: one atomic store of the command word (Moneta), or the SQE
    /// and the SQ tail doorbell (NVMe). With device threads it is stamped with the clock just
    /// before (`DmaMemory::doorbell_ns`) and the device is woken if it sleeps
    /// (`Emulator::doorbell`). Inline, the device runs only in this thread's polls, so a
    /// command is dated when a poll takes it: the host's own work between the issue and the
    /// poll is the host's time, not the device's lateness (issue 56).
    pub fn issue(&mut self, p: Prepared) {
        let tag = p.tag.index();
        assert!(self.pending[tag].is_none(), "tag {tag} issued twice");
        let threaded = self.emu.has_device_threads();
        if threaded {
            // Before the push, whose Release hands it over with the command.
            self.dma.doorbell_ns[tag].store(self.emu.now_ns(), Ordering::Relaxed);
        }
        match &mut self.ends {
            HostEnds::Word { sq, .. } => {
                let word = encode::command_word(&p, self.block_bytes);
                sq.push(word).expect("rings hold every tag");
            }
            HostEnds::Nvme { sq, .. } => {
                let sqe = encode::nvme_sqe(&self.dma, self.block_bytes, &p);
                sq.push(sqe).expect("rings hold every tag");
            }
        }
        if threaded {
            self.emu.doorbell();
        }
        if p.in_data {
            // Such a read raises no interrupt: only a pair that polls its data sees it done.
            debug_assert!(
                self.completion == CompletionMode::InData,
                "an in-data read issued on a {} queue pair",
                self.completion
            );
            self.in_data.push(p.tag);
        }
        if self.pending_count == 0 {
            self.least_sleeping_ns = u64::MAX;
        }
        let mut spins = false;
        if let Some(rule) = self.adaptive.as_mut() {
            match rule.sleep_latency_ns(p.op, p.len_bytes) {
                Some(ns) => self.least_sleeping_ns = self.least_sleeping_ns.min(ns),
                None => spins = true,
            }
        }
        self.spinning_in_flight += usize::from(spins);
        self.pending[tag] = Some((p, spins));
        self.pending_count += 1;
        debug_assert!(
            self.pending_count <= self.pending.len(),
            "{} commands in flight on {} tags",
            self.pending_count,
            self.pending.len()
        );
    }

    /// Collects completions without blocking and hands each to `f`. Returns how many. In
    /// inline mode this first runs a pass of the device.
    pub fn poll(&mut self, f: impl FnMut(Done)) -> usize {
        self.poll_after(f, Polled::AfterHostCode)
    }

    /// `poll`; `since` says what the thread did since its previous poll, for an inline pass's
    /// accounting (`Emulator::service`).
    fn poll_after(&mut self, mut f: impl FnMut(Done), since: Polled) -> usize {
        if !self.emu.has_device_threads() {
            self.emu.service(&self.handle, since);
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
        debug_assert!(
            self.in_data.len() <= self.pending_count,
            "{} in-data reads watched, {} commands in flight",
            self.in_data.len(),
            self.pending_count
        );
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
        let (p, spins) = self.pending.get_mut(tag)?.take()?;
        self.pending_count -= 1;
        self.spinning_in_flight -= usize::from(spins);
        debug_assert!(
            self.spinning_in_flight <= self.pending_count,
            "{} commands spun for, {} in flight",
            self.spinning_in_flight,
            self.pending_count
        );
        Some(Done {
            tag: p.tag,
            op: p.op,
            offset_bytes: p.offset_bytes,
            len_bytes: p.len_bytes,
            status,
            // Read after the completion was seen (Acquire), which the device published after
            // writing this (see `DmaMemory::deadlines_ns`).
            deadline_ns: self.dma.deadlines_ns[tag].load(Ordering::Relaxed),
        })
    }

    /// Blocks until at least one completion arrives (spinning or sleeping as the queue pair's
    /// completion mode says) and hands each to `f`. Returns at once with 0 when nothing is in
    /// flight.
    pub fn wait(&mut self, mut f: impl FnMut(Done)) -> usize {
        let mut since = Polled::AfterHostCode;
        loop {
            if self.pending_count == 0 {
                return 0;
            }
            let n = self.poll_after(&mut f, since);
            if n > 0 {
                return n;
            }
            if self.should_sleep() {
                self.sleep();
                since = Polled::AfterWait;
            } else {
                std::hint::spin_loop();
                since = Polled::AfterSpin;
            }
        }
    }

    /// Whether waiting now should sleep: always for `Sleep`, never for `Spin` or in-data, and
    /// for `Adaptive` when no command in flight is one it spins for and their completions are
    /// not expected so close together that a wake-up each would cost more than spinning
    /// (`AdaptiveRule::sleep_pays`).
    fn should_sleep(&self) -> bool {
        match self.completion {
            CompletionMode::Spin | CompletionMode::InData => false,
            CompletionMode::Sleep => true,
            CompletionMode::Adaptive => {
                self.spinning_in_flight == 0
                    && self.adaptive.as_ref().is_some_and(|rule| {
                        rule.sleep_pays(self.least_sleeping_ns, self.pending_count)
                    })
            }
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

/// A dropped queue pair collects its commands still in flight (the model completes every
/// command it took), returning their tags, then detaches from the device, which frees its
/// rings: attaching and dropping queue pairs for ever holds no memory and no queue ids.
impl QueuePair {
    /// How long the calling thread may sleep now without making one of this queue pair's
    /// completions late: `None` when it should keep polling instead, because nothing is in
    /// flight, device threads run the device (they raise the interrupt; see
    /// `CompletionMode::Sleep`), or the model's next deadline is too close for a nap to pay.
    ///
    /// For callers that wait on something else as well (the NBD server sleeps in `ppoll` on
    /// its socket for this long, woken early by new requests). The driver's own sleeping
    /// completion modes follow the same rule.
    pub fn nap_time(&self) -> Option<Duration> {
        if self.in_flight() == 0 || self.emulator().has_device_threads() {
            return None;
        }
        inline_nap_time(self.emulator())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let tags = Arc::clone(&self.tags);
        while self.pending_count > 0 {
            self.wait(|done| {
                let _ = tags.release(done.tag);
            });
        }
        // Nothing in flight: nothing watched, nothing spun for.
        debug_assert!(
            self.in_data.is_empty(),
            "{} in-data reads watched with nothing in flight",
            self.in_data.len()
        );
        debug_assert_eq!(
            self.spinning_in_flight, 0,
            "commands spun for with nothing in flight"
        );
        self.emu.detach(&self.handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, Opcode, Options};
    use nvarray_emu::protocol::moneta;
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

    /// One thread serving its own pair inline sees every command complete, however its passes
    /// fall between the model finishing a command and the command's deadline (the completion
    /// stage lies between them). Before, a pass that visited the model in that gap left the
    /// completion waiting for a visit nobody would make, and the command never completed.
    /// Polled against a wall-clock bound (far above any deadline here) so the bug fails the
    /// test instead of hanging it.
    #[test]
    fn every_command_completes_when_served_inline_one_at_a_time() {
        for protocol in ["moneta", "nvme", "dc-express"] {
            let device = small_device(protocol);
            let mut qp = device.queue_pair(CompletionMode::Spin);
            for i in 0..2_000u64 {
                let p = device
                    .prepare(Opcode::Read, (i * 4096) % (1 << 20), 512, None)
                    .unwrap();
                qp.issue(p);
                let start = std::time::Instant::now();
                let mut done = 0;
                while done == 0 {
                    done = qp.poll(|d| {
                        assert_eq!(d.status, Status::Ok);
                        device.finish(d, None).unwrap();
                    });
                    if start.elapsed() > std::time::Duration::from_secs(2) {
                        // Dropping the pair would wait for the command for ever.
                        std::mem::forget(qp);
                        panic!("{protocol}: command {i} never completed");
                    }
                }
            }
        }
    }

    /// An in-data read the device refuses completes through the completion queue; its tag
    /// leaves the in-data watch list with it, so the tag's next command cannot be taken for
    /// done by the word the refused read left behind.
    #[test]
    fn a_refused_in_data_read_leaves_no_watcher_behind() {
        let device = small_device("dc-express");
        assert_eq!(
            device.completion(),
            CompletionMode::InData,
            "dc-express default"
        );
        let mut qp = device.queue_pair(CompletionMode::InData);
        // An opcode the device does not know: refused at decoding, through the queue.
        let p = device
            .prepare_unchecked(Opcode::Read, 0, 512, None)
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
            let mut qp = device.queue_pair(CompletionMode::Spin);
            let data = vec![0xabu8; 4096];
            let p = device
                .prepare(Opcode::Write, 8192, 4096, Some(&data))
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
                placement: p.placement,
            };
            qp.issue(p);
            match &mut qp.ends {
                HostEnds::Word { sq, .. } => {
                    let word = moneta::CommandWord {
                        opcode: moneta::OPCODE_WRITE,
                        tag: tag as u16,
                        offset_blocks: 8192 / qp.block_bytes,
                        len_blocks: 4096 / qp.block_bytes,
                    }
                    .encode();
                    sq.push(word).unwrap();
                }
                HostEnds::Nvme { sq, .. } => {
                    let sqe = encode::nvme_sqe(&qp.dma, qp.block_bytes, &duplicate);
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

    /// A command on a tag whose command is already in the model (taken in an earlier pass) is
    /// refused with `TagConflict` too, on every protocol. NVMe refused it as a bad field
    /// before, which the driver took for the completion of the command in flight.
    #[test]
    fn a_command_on_a_tag_in_flight_since_an_earlier_pass_is_refused_distinguishably() {
        for protocol in ["moneta", "nvme"] {
            // Writes take 1 ms, so the first is still in the model when the second arrives.
            let config = preset("dram")
                .unwrap()
                .load(&[
                    ("memory.capacity_bytes".into(), "1m".into()),
                    ("memory.write_latency_ns".into(), "1000000".into()),
                    ("interface.protocol".into(), protocol.into()),
                ])
                .unwrap();
            let options = Options {
                buffer_bytes: Some(4096),
                device_threads: 0,
                ..Options::default()
            };
            let device = Device::open(&config, &options).unwrap();
            let mut qp = device.queue_pair(CompletionMode::Spin);
            let data = vec![0x5au8; 4096];
            let p = device.prepare(Opcode::Write, 0, 4096, Some(&data)).unwrap();
            let duplicate = Prepared {
                tag: p.tag,
                op: p.op,
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                in_data: p.in_data,
                raw_opcode: p.raw_opcode,
                placement: p.placement,
            };
            let tag = p.tag.index();
            qp.issue(p);
            // One inline pass: the device takes the write and hands it to the model.
            assert_eq!(qp.poll(|_| panic!("a 1 ms write completed at once")), 0);
            match &mut qp.ends {
                HostEnds::Word { sq, .. } => {
                    let word = moneta::CommandWord {
                        opcode: moneta::OPCODE_WRITE,
                        tag: tag as u16,
                        offset_blocks: 0,
                        len_blocks: 4096 / qp.block_bytes,
                    }
                    .encode();
                    sq.push(word).unwrap();
                }
                HostEnds::Nvme { sq, .. } => {
                    let sqe = encode::nvme_sqe(&qp.dma, qp.block_bytes, &duplicate);
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
            let mut qp = device.queue_pair(CompletionMode::Spin);
            assert_eq!(qp.id(), 0, "cycle {i}: ids are reused");
            if i % 1000 == 0 {
                // A command left in flight: the drop collects it and frees its tag.
                let p = device.prepare(Opcode::Read, 0, 4096, None).unwrap();
                qp.issue(p);
            }
            drop(qp);
            assert_eq!(device.queue_pairs(), 0, "cycle {i}");
        }
        // Every tag is free again: all of them can be taken at once.
        let held: Vec<Prepared> = (0..tags)
            .map(|_| device.prepare(Opcode::Read, 0, 4096, None).unwrap())
            .collect();
        assert_eq!(held.len(), tags);
    }
}
