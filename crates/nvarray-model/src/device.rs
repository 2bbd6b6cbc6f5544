//! The device as a state machine driven by the caller's clock.
//!
//! `submit` hands a command to the device at `now_ns`; `next_event_ns` says when the device
//! next has something to do; `advance(now_ns, ..)` does everything due by then and reports
//! each finished command with the time the host can see its completion (never earlier than the
//! moment `advance` reports it). The discrete-event simulator calls these with a virtual
//! clock; the emulator calls them with the wall clock. Nothing here reads a clock.
//!
//! A command's life: delivery over the link (`interface`), a tag in the scoreboard, the
//! controller's per-command work, then pieces of at most one transfer buffer each, granted in
//! the order the scheduling policy says; each piece books media, ring and link when it is
//! granted (see `timeline` for why booking ahead is safe); when the last piece is done the
//! controller posts the completion.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::breakdown::{Breakdown, Component};
use crate::config::{ControllerMode, DeviceConfig, Policy, Protocol};
use crate::error::CommandError;
use crate::link::{bytes_to_ns, fs_per_byte, wire_bytes, Direction, Link};
use crate::memory::{Access, Memory, WearStats};
use crate::timeline::Timeline;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
}

/// A command as the host issues it. `id` is the host's cookie, returned in the completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub id: u64,
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u32,
}

/// A finished command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub id: u64,
    pub op: Op,
    pub len_bytes: u32,
    pub submit_ns: u64,
    /// When the host can see the completion. The emulator must not post it earlier.
    pub visible_ns: u64,
    /// Where the time went; the parts add up to `visible_ns - submit_ns`.
    pub breakdown: Breakdown,
}

/// Busy time of each resource since the device was created.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ResourceBusy {
    pub link_to_device_ns: u64,
    pub link_to_host_ns: u64,
    /// Summed over the controller's engines (one in hardware mode, the cores in firmware mode).
    pub controller_ns: u64,
    pub controller_engines: u32,
    pub ring_ns: u64,
    /// Summed over all banks.
    pub banks_ns: u64,
    pub banks: u32,
    /// Buffer-nanoseconds held, summed over all buffers.
    pub buffers_ns: u64,
    pub buffers: u32,
    /// Tag-nanoseconds held, summed over all tags.
    pub tags_ns: u64,
    pub tags: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    /// Controller finished the command's work: it may now be granted buffers.
    Ready,
    /// One piece finished and released its transfer buffer.
    PieceDone,
}

/// An entry of the device's event queue, ordered by time, then by the order events were
/// scheduled in (so events at equal times replay deterministically). Packed into one `u128` —
/// the time in the high 64 bits, then the sequence number (47 bits), the kind (1 bit) and the
/// tag (16 bits, `config::limits::TAGS_MAX`) — so the heap compares single integers: with a
/// tuple key the heap was a seventh of the model's time (`benches/model_cost.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event(u128);

impl Event {
    const TAG_BITS: u32 = 16;
    const SEQ_MAX: u64 = 1 << 47;

    fn new(t: u64, seq: u64, kind: EventKind, tag: u32) -> Self {
        debug_assert!(tag < 1 << Self::TAG_BITS);
        let low = (seq << (Self::TAG_BITS + 1))
            | (u64::from(kind == EventKind::PieceDone) << Self::TAG_BITS)
            | u64::from(tag);
        Event((u128::from(t) << 64) | u128::from(low))
    }

    fn time(self) -> u64 {
        (self.0 >> 64) as u64
    }

    fn kind(self) -> EventKind {
        if (self.0 >> Self::TAG_BITS) & 1 == 1 {
            EventKind::PieceDone
        } else {
            EventKind::Ready
        }
    }

    fn tag(self) -> u32 {
        (self.0 as u32) & ((1 << Self::TAG_BITS) - 1)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    cmd_id: u64,
    op_is_read: bool,
    offset_bytes: u64,
    len_bytes: u32,
    submit_ns: u64,
    arrived_ns: u64,
    admitted_ns: u64,
    /// Bytes not yet granted a buffer.
    unscheduled_bytes: u32,
    pieces_in_flight: u32,
    controller_ns: u64,
    // Stages of the most recently granted piece (the last one when the command finishes).
    ring_ns: u64,
    media_ns: u64,
    link_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Waiting {
    cmd: Command,
    submit_ns: u64,
    arrived_ns: u64,
}

/// The modelled array. See the module docs for the life of a command.
#[derive(Clone, Debug)]
pub struct Device {
    cfg: DeviceConfig,
    now_ns: u64,
    link: Link,
    memory: Memory,
    ring: Timeline,
    ring_fs_per_byte: u64,
    /// One engine in hardware mode, `firmware_cores` in firmware mode.
    engines: Vec<Timeline>,
    slots: Vec<Slot>,
    free_tags: Vec<u32>,
    waiting_for_tag: VecDeque<Waiting>,
    queue: VecDeque<u32>,
    write_queue: VecDeque<u32>,
    prefer_read: bool,
    buffers_free: u32,
    events: BinaryHeap<Reverse<Event>>,
    event_seq: u64,
    buffers_busy_ns: u64,
    tags_busy_ns: u64,
    commands_done: u64,
}

impl Device {
    /// Builds the device; the config must already be valid (`DeviceConfig::validate`).
    pub fn new(cfg: &DeviceConfig) -> Self {
        debug_assert!(cfg.validate().is_ok());
        let c = &cfg.controller;
        let engines = match c.mode {
            ControllerMode::Hardware => 1,
            ControllerMode::Firmware => c.firmware_cores,
        };
        let ring_payload = f64::from(cfg.ring.packet_payload_bytes);
        let ring_efficiency =
            ring_payload / (ring_payload + f64::from(cfg.ring.packet_header_bytes));
        Device {
            now_ns: 0,
            link: Link::new(&cfg.link),
            memory: Memory::new(&cfg.memory, &cfg.wear),
            ring: Timeline::new(),
            ring_fs_per_byte: fs_per_byte(cfg.ring.bandwidth_bytes_per_s as f64 * ring_efficiency),
            engines: vec![Timeline::new(); engines as usize],
            slots: vec![Slot::default(); c.tags as usize],
            free_tags: (0..c.tags).rev().collect(),
            waiting_for_tag: VecDeque::new(),
            queue: VecDeque::with_capacity(c.tags as usize),
            write_queue: VecDeque::with_capacity(c.tags as usize),
            prefer_read: true,
            buffers_free: c.buffer_count,
            events: BinaryHeap::with_capacity(c.tags as usize * 2),
            event_seq: 0,
            buffers_busy_ns: 0,
            tags_busy_ns: 0,
            commands_done: 0,
            cfg: cfg.clone(),
        }
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.cfg.memory.capacity_bytes
    }

    /// Checks a command against the device's geometry without changing anything.
    pub fn check(&self, offset_bytes: u64, len_bytes: u32) -> Result<(), CommandError> {
        let c = &self.cfg.controller;
        if len_bytes == 0 || len_bytes > c.max_transfer_bytes {
            return Err(CommandError::BadLength {
                len_bytes,
                max_transfer_bytes: c.max_transfer_bytes,
            });
        }
        let block = u64::from(c.block_bytes);
        if !offset_bytes.is_multiple_of(block) || u64::from(len_bytes) % block != 0 {
            return Err(CommandError::Misaligned {
                offset_bytes,
                len_bytes,
                block_bytes: c.block_bytes,
            });
        }
        let size_bytes = self.capacity_bytes();
        if offset_bytes
            .checked_add(u64::from(len_bytes))
            .is_none_or(|end| end > size_bytes)
        {
            return Err(CommandError::OutOfRange {
                offset_bytes,
                len_bytes,
                size_bytes,
            });
        }
        Ok(())
    }

    /// Issues `cmd` at `now_ns` (not before the last call's time, and after `advance` has
    /// done every event due before `now_ns`: the command must find the device as it is at
    /// `now_ns`). A refused command changes nothing.
    pub fn submit(&mut self, cmd: Command, now_ns: u64) -> Result<(), CommandError> {
        self.check(cmd.offset_bytes, cmd.len_bytes)?;
        assert!(
            now_ns >= self.now_ns,
            "time went backwards: {now_ns} < {}",
            self.now_ns
        );
        if let Some(t) = self.next_event_ns() {
            assert!(
                t >= now_ns,
                "submit at {now_ns} with an event due at {t} not yet advanced"
            );
        }
        self.now_ns = now_ns;
        let arrived_ns = self.deliver_command(now_ns, cmd.len_bytes);
        let waiting = Waiting {
            cmd,
            submit_ns: now_ns,
            arrived_ns,
        };
        match self.free_tags.pop() {
            Some(tag) => self.admit(tag, waiting),
            None => self.waiting_for_tag.push_back(waiting),
        }
        Ok(())
    }

    /// Time of the device's next internal event, if any.
    #[inline]
    pub fn next_event_ns(&self) -> Option<u64> {
        self.events.peek().map(|Reverse(e)| e.time())
    }

    /// Commands issued and not yet reported as complete.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free_tags.len() + self.waiting_for_tag.len()
    }

    /// Does everything due at or before `now_ns`, reporting each finished command.
    pub fn advance(&mut self, now_ns: u64, mut on_complete: impl FnMut(Completion)) {
        while let Some(&Reverse(event)) = self.events.peek() {
            let (t, kind, tag) = (event.time(), event.kind(), event.tag());
            if t > now_ns {
                break;
            }
            self.events.pop();
            debug_assert!(t >= self.now_ns);
            self.now_ns = t;
            match kind {
                EventKind::Ready => {
                    let slot = &self.slots[tag as usize];
                    if self.cfg.controller.policy == Policy::SplitRw && !slot.op_is_read {
                        self.write_queue.push_back(tag);
                    } else {
                        self.queue.push_back(tag);
                    }
                    self.grant_buffers();
                }
                EventKind::PieceDone => {
                    self.buffers_free += 1;
                    let slot = &mut self.slots[tag as usize];
                    slot.pieces_in_flight -= 1;
                    if slot.pieces_in_flight == 0 && slot.unscheduled_bytes == 0 {
                        let done = self.complete(tag);
                        on_complete(done);
                    }
                    self.grant_buffers();
                }
            }
        }
        self.now_ns = self.now_ns.max(now_ns);
    }

    fn push_event(&mut self, t: u64, kind: EventKind, tag: u32) {
        self.event_seq += 1;
        // At 10 M events per second, 2^47 events take 160 days.
        assert!(self.event_seq < Event::SEQ_MAX, "event sequence exhausted");
        self.events
            .push(Reverse(Event::new(t, self.event_seq, kind, tag)));
    }

    /// The command travels to the device; returns when the controller has it.
    fn deliver_command(&mut self, now: u64, len_bytes: u32) -> u64 {
        match self.cfg.interface.protocol {
            // "Reduce command word to 64 bits: allows a single PIO write to issue a request"
            // (Moneta MICRO'10 slides).
            Protocol::Moneta => self.link.send(Direction::ToDevice, now, now, 8).1,
            Protocol::Nvme => {
                let doorbell = self.link.send(Direction::ToDevice, now, now, 4).1;
                let (_, sqe) = self.link.device_reads_host(now, doorbell, 64);
                let page = u64::from(self.cfg.interface.page_bytes);
                let pages = u64::from(len_bytes).div_ceil(page);
                if pages > 2 {
                    // PRP1 is in the SQ entry; PRP2 points to a list of the remaining entries.
                    self.link.device_reads_host(now, sqe, 8 * (pages - 1)).1
                } else {
                    sqe
                }
            }
        }
    }

    /// The least busy controller engine does `ns` of work once `ready`; returns when it ends.
    fn engine_work(&mut self, ready: u64, ns: u64) -> u64 {
        let now = self.now_ns;
        let engine = self
            .engines
            .iter_mut()
            .min_by_key(|e| e.busy_until_ns())
            .expect("at least one engine");
        engine.reserve(now, ready, ns) + ns
    }

    fn admit(&mut self, tag: u32, w: Waiting) {
        let c = &self.cfg.controller;
        let work_ns = match c.mode {
            ControllerMode::Hardware => c.hardware_command_ns,
            ControllerMode::Firmware => {
                c.firmware_fetch_ns + c.firmware_prp_ns + c.firmware_translation_ns
            }
        };
        let admitted = self.now_ns;
        let ready = self.engine_work(w.arrived_ns.max(admitted), work_ns);
        self.slots[tag as usize] = Slot {
            cmd_id: w.cmd.id,
            op_is_read: w.cmd.op == Op::Read,
            offset_bytes: w.cmd.offset_bytes,
            len_bytes: w.cmd.len_bytes,
            submit_ns: w.submit_ns,
            arrived_ns: w.arrived_ns,
            admitted_ns: admitted,
            unscheduled_bytes: w.cmd.len_bytes,
            pieces_in_flight: 0,
            controller_ns: work_ns,
            ring_ns: 0,
            media_ns: 0,
            link_ns: 0,
        };
        self.push_event(ready, EventKind::Ready, tag);
    }

    /// Hands free transfer buffers to waiting commands in the policy's order.
    fn grant_buffers(&mut self) {
        while self.buffers_free > 0 {
            let tag = match self.cfg.controller.policy {
                Policy::Fifo => match self.queue.front() {
                    Some(&t) => t,
                    None => return,
                },
                Policy::RoundRobin => match self.queue.pop_front() {
                    Some(t) => t,
                    None => return,
                },
                Policy::SplitRw => {
                    let (first, second) = if self.prefer_read {
                        (&self.queue, &self.write_queue)
                    } else {
                        (&self.write_queue, &self.queue)
                    };
                    match first.front().or(second.front()) {
                        Some(&t) => t,
                        None => return,
                    }
                }
            };
            self.grant_piece(tag);
            let unfinished = self.slots[tag as usize].unscheduled_bytes > 0;
            let is_read = self.slots[tag as usize].op_is_read;
            match self.cfg.controller.policy {
                Policy::Fifo => {
                    if !unfinished {
                        self.queue.pop_front();
                    }
                }
                Policy::RoundRobin => {
                    if unfinished {
                        self.queue.push_back(tag);
                    }
                }
                Policy::SplitRw => {
                    if !unfinished {
                        if is_read {
                            self.queue.pop_front();
                        } else {
                            self.write_queue.pop_front();
                        }
                    }
                    // "Alternate between Qs on each buffer allocation" (Moneta MICRO'10 slides).
                    self.prefer_read = !is_read;
                }
            }
        }
    }

    /// Gives the next piece of `tag` a buffer and books its path through the array.
    fn grant_piece(&mut self, tag: u32) {
        let now = self.now_ns;
        let buffer_bytes = self.cfg.controller.buffer_bytes;
        let slot = self.slots[tag as usize];
        let len = slot.unscheduled_bytes.min(buffer_bytes);
        let offset = slot.offset_bytes + u64::from(slot.len_bytes - slot.unscheduled_bytes);
        let start = now + self.cfg.controller.dma_setup_ns;
        let ring_ns = bytes_to_ns(
            wire_bytes(
                u64::from(len),
                self.cfg.ring.packet_payload_bytes,
                self.cfg.ring.packet_header_bytes,
            ),
            self.ring_fs_per_byte,
        );
        let ring_latency = self.cfg.ring.latency_ns;
        let (release, media_ns, link_ns) = if slot.op_is_read {
            let (media_start, media_end) =
                self.memory
                    .access(now, start, Access::Read, offset, u64::from(len));
            let ring_start = self.ring.reserve(now, media_end, ring_ns);
            let ring_end = ring_start + ring_ns + ring_latency;
            let (link_start, arrival) =
                self.link
                    .send(Direction::ToHost, now, ring_end, u64::from(len));
            // The buffer is free once the last byte has left; the data lands one propagation
            // later, while the completion is already on its way behind it (so the breakdown
            // counts that propagation once, in the completion).
            let sent = arrival - self.link.propagation_ns;
            (sent, media_end - media_start, sent - link_start)
        } else {
            let (link_start, arrival) = self.link.device_reads_host(now, start, u64::from(len));
            let ring_start = self.ring.reserve(now, arrival, ring_ns);
            let ring_end = ring_start + ring_ns + ring_latency;
            let (media_start, media_end) =
                self.memory
                    .access(now, ring_end, Access::Write, offset, u64::from(len));
            // A write is done only when it is in the media (no write coalescing: Moneta,
            // "storage must guarantee durability by closing row").
            (media_end, media_end - media_start, arrival - link_start)
        };
        self.buffers_free -= 1;
        self.buffers_busy_ns += release - now;
        let slot = &mut self.slots[tag as usize];
        slot.unscheduled_bytes -= len;
        slot.pieces_in_flight += 1;
        slot.ring_ns = ring_ns + ring_latency;
        slot.media_ns = media_ns;
        slot.link_ns = link_ns;
        self.push_event(release, EventKind::PieceDone, tag);
    }

    /// Posts the completion of `tag`'s command and frees the tag.
    fn complete(&mut self, tag: u32) -> Completion {
        let now = self.now_ns;
        let c = &self.cfg.controller;
        let work_ns = match c.mode {
            ControllerMode::Hardware => c.hardware_completion_ns,
            ControllerMode::Firmware => c.firmware_completion_ns,
        };
        let posted = self.engine_work(now, work_ns);
        let visible = match self.cfg.interface.protocol {
            Protocol::Nvme => {
                // CQ entry, then the MSI behind it; a polling host sees the entry itself.
                let (_, cqe) = self.link.send(Direction::ToHost, now, posted, 16);
                self.link.send(Direction::ToHost, now, posted, 4);
                cqe
            }
            Protocol::Moneta => {
                // "It sets some status registers and then raises an interrupt so that the host
                // can come back and check the status" (Moneta talk).
                let (_, interrupt) = self.link.send(Direction::ToHost, now, posted, 4);
                let (_, request) = self.link.send(Direction::ToDevice, now, interrupt, 0);
                let answer = request + self.cfg.interface.status_read_ns;
                self.link.send(Direction::ToHost, now, answer, 8).1
            }
        };
        let slot = self.slots[tag as usize];
        self.tags_busy_ns += now - slot.admitted_ns;
        self.commands_done += 1;
        self.free_tags.push(tag);
        if let Some(w) = self.waiting_for_tag.pop_front() {
            let tag = self.free_tags.pop().expect("just freed");
            self.admit(tag, w);
        }

        let mut b = Breakdown::default();
        b.set(Component::CommandFetch, slot.arrived_ns - slot.submit_ns);
        // DMA set-up of the last piece is controller work on the critical path.
        b.set(
            Component::Controller,
            slot.controller_ns + work_ns + self.cfg.controller.dma_setup_ns,
        );
        b.set(Component::Ring, slot.ring_ns);
        b.set(Component::Media, slot.media_ns);
        b.set(Component::Link, slot.link_ns);
        b.set(Component::Completion, visible - posted);
        let total = visible - slot.submit_ns;
        b.set(Component::Queueing, total.saturating_sub(b.total_ns()));
        debug_assert_eq!(b.total_ns(), total, "breakdown must add up: {b:?}");
        Completion {
            id: slot.cmd_id,
            op: if slot.op_is_read { Op::Read } else { Op::Write },
            len_bytes: slot.len_bytes,
            submit_ns: slot.submit_ns,
            visible_ns: visible,
            breakdown: b,
        }
    }

    /// Busy time of every resource so far.
    pub fn resource_busy(&self) -> ResourceBusy {
        let (banks_ns, banks) = self.memory.bank_busy_ns_total();
        ResourceBusy {
            link_to_device_ns: self.link.busy_ns_total(Direction::ToDevice),
            link_to_host_ns: self.link.busy_ns_total(Direction::ToHost),
            controller_ns: self.engines.iter().map(Timeline::busy_ns_total).sum(),
            controller_engines: self.engines.len() as u32,
            ring_ns: self.ring.busy_ns_total(),
            banks_ns,
            banks: banks as u32,
            buffers_ns: self.buffers_busy_ns,
            buffers: self.cfg.controller.buffer_count,
            tags_ns: self.tags_busy_ns,
            tags: self.cfg.controller.tags,
        }
    }

    pub fn wear_stats(&self) -> Option<WearStats> {
        self.memory.wear_stats()
    }

    /// Flash erases performed.
    pub fn erases(&self) -> u64 {
        self.memory.erases()
    }

    /// Payload bandwidth of one link direction (for reports).
    pub fn link_usable_bytes_per_s(&self) -> f64 {
        self.link.usable_bytes_per_s()
    }

    pub fn commands_done(&self) -> u64 {
        self.commands_done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind(piece_done: bool) -> EventKind {
        if piece_done {
            EventKind::PieceDone
        } else {
            EventKind::Ready
        }
    }

    proptest! {
        /// A packed event gives back what it was built from, and two events order as their
        /// (time, sequence) pairs do, whatever their kinds and tags.
        #[test]
        fn packed_events_order_by_time_then_sequence(
            a in (any::<u64>(), 0..Event::SEQ_MAX, any::<bool>(), 0u32..1 << Event::TAG_BITS),
            b in (any::<u64>(), 0..Event::SEQ_MAX, any::<bool>(), 0u32..1 << Event::TAG_BITS),
        ) {
            let ea = Event::new(a.0, a.1, kind(a.2), a.3);
            let eb = Event::new(b.0, b.1, kind(b.2), b.3);
            prop_assert_eq!((ea.time(), ea.kind(), ea.tag()), (a.0, kind(a.2), a.3));
            prop_assert_eq!((eb.time(), eb.kind(), eb.tag()), (b.0, kind(b.2), b.3));
            if (a.0, a.1) != (b.0, b.1) {
                prop_assert_eq!(ea.cmp(&eb), (a.0, a.1).cmp(&(b.0, b.1)));
            }
        }
    }
}
