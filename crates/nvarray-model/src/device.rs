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

use std::collections::VecDeque;

use crate::breakdown::{Breakdown, Component};
use crate::config::{ControllerMode, DeviceConfig, Policy, Protocol};
use crate::error::CommandError;
use crate::events::{Event, EventKind, EventQueue};
use crate::link::{
    bytes_to_ns, fs_per_byte, wire_bytes, Carries, Direction, DirectionTraffic, DmaTransfer, Link,
    Transfer,
};
use crate::memory::{Access, FtlStats, Memory, WearStats};
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
    /// A write's placement handle (NVMe Flexible Data Placement): which of the FTL's reclaim
    /// unit handles its pages go to (`ftl.placement_handles`). 0 without placement; a handle
    /// the FTL does not have goes to its last (the front ends refuse such commands first).
    pub placement: u16,
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
    /// The network to a remote device (`[fabric]`), each direction of its wire; 0 without one.
    pub fabric_to_device_ns: u64,
    pub fabric_to_host_ns: u64,
    /// The remote CPU's cores on a TCP fabric, summed over them.
    pub remote_cpu_ns: u64,
    pub remote_cpu_cores: u32,
}

impl ResourceBusy {
    /// The busy time since `earlier` (a reading of the same device): what a window of a run
    /// kept each resource busy. The counts of resources are the device's (either reading's;
    /// an empty `ResourceBusy::default()` has none).
    pub fn since(&self, earlier: &ResourceBusy) -> ResourceBusy {
        self.zip(earlier, u64::saturating_sub)
    }

    /// Two windows' busy time together (readings of the same device).
    pub fn plus(&self, other: &ResourceBusy) -> ResourceBusy {
        self.zip(other, u64::saturating_add)
    }

    fn zip(&self, other: &ResourceBusy, f: impl Fn(u64, u64) -> u64) -> ResourceBusy {
        ResourceBusy {
            link_to_device_ns: f(self.link_to_device_ns, other.link_to_device_ns),
            link_to_host_ns: f(self.link_to_host_ns, other.link_to_host_ns),
            controller_ns: f(self.controller_ns, other.controller_ns),
            ring_ns: f(self.ring_ns, other.ring_ns),
            banks_ns: f(self.banks_ns, other.banks_ns),
            buffers_ns: f(self.buffers_ns, other.buffers_ns),
            tags_ns: f(self.tags_ns, other.tags_ns),
            fabric_to_device_ns: f(self.fabric_to_device_ns, other.fabric_to_device_ns),
            fabric_to_host_ns: f(self.fabric_to_host_ns, other.fabric_to_host_ns),
            remote_cpu_ns: f(self.remote_cpu_ns, other.remote_cpu_ns),
            remote_cpu_cores: self.remote_cpu_cores.max(other.remote_cpu_cores),
            controller_engines: self.controller_engines.max(other.controller_engines),
            banks: self.banks.max(other.banks),
            buffers: self.buffers.max(other.buffers),
            tags: self.tags.max(other.tags),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    cmd_id: u64,
    op_is_read: bool,
    placement: u16,
    offset_bytes: u64,
    len_bytes: u32,
    submit_ns: u64,
    admitted_ns: u64,
    /// Bytes not yet granted a buffer.
    unscheduled_bytes: u32,
    pieces_in_flight: u32,
    /// Where the command's time went up to `attributed_ns` (see `Slot::attribute`).
    breakdown: Breakdown,
    attributed_ns: u64,
}

impl Slot {
    /// Attributes the time from `attributed_ns` to the end of the last stage to the stages,
    /// in time order; a stretch between two stages (waiting for a resource that something
    /// else holds) is queueing. Exact for a command that moves in one piece, and for the
    /// stretches before and after a command's pieces.
    ///
    /// Without a branch per stage: a stage that ended by `t` adds nothing to either part
    /// (its start and end both clamp to `t`), which is what skipping it did.
    #[inline]
    fn attribute(&mut self, stages: &[Stage]) {
        let mut t = self.attributed_ns;
        let mut queueing = 0;
        for stage in stages {
            debug_assert!(stage.start_ns <= stage.end_ns);
            let start = stage.start_ns.max(t);
            let end = stage.end_ns.max(start);
            queueing += start - t;
            self.breakdown.ns[stage.component as usize] += end - start;
            t = end;
        }
        self.breakdown.ns[Component::Queueing as usize] += queueing;
        self.attributed_ns = t;
    }
}

fn stage(component: Component, start_ns: u64, end_ns: u64) -> Stage {
    Stage {
        component,
        start_ns,
        end_ns,
    }
}

/// One stage of a piece's path: the interval in which `component` held it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stage {
    component: Component,
    start_ns: u64,
    end_ns: u64,
}

/// Stages of one piece, in time order: DMA set-up, then media, ring, link for a read (DMA
/// read request and answer, data over the link, ring, media for a write; a read starts with
/// an empty stage). The last one ends when the piece releases its buffer.
const PIECE_STAGES: usize = 5;
type PieceStages = [Stage; PIECE_STAGES];

/// Attributes the time from `ready_ns` (the controller handed the command to the buffers) to
/// the end of its last piece along the command's critical path, and returns that end.
///
/// The walk starts at the piece that ended last and goes back in time. Within a piece, each
/// stage's interval goes to its component. Where a stage started later than the one before
/// it ended, the piece waited: if another piece of the same command held that kind of stage
/// just then (a pipelined transfer waiting behind its own earlier piece), the walk continues
/// in that piece, so the time goes to the stage that held the command rather than to
/// queueing; if none did, the wait was for something outside the command (another command's
/// booking) and is queueing. A piece granted after `ready_ns` waited for a buffer: the walk
/// continues in the piece whose stage covers that moment (usually the one whose release gave
/// the buffer), else it is queueing back to the latest earlier end of one of its pieces.
/// Every step moves back in time, and the walk ends at `ready_ns`, so the components cover
/// `[ready_ns, end]` exactly once.
fn attribute_critical_path(pieces: &[PieceStages], ready_ns: u64, b: &mut Breakdown) -> u64 {
    let queueing = Component::Queueing as usize;
    let last = (0..pieces.len())
        .max_by_key(|&i| (pieces[i][PIECE_STAGES - 1].end_ns, i))
        .expect("a command has at least one piece");
    let end = pieces[last][PIECE_STAGES - 1].end_ns;
    let (mut p, mut i, mut t) = (last, PIECE_STAGES - 1, end);
    // Each step moves `t` back or steps to an earlier stage; the bound is a backstop.
    let steps_max = 4 * PIECE_STAGES * pieces.len() + 16;
    for _ in 0..steps_max {
        let st = pieces[p][i];
        debug_assert!(st.start_ns <= t && t <= st.end_ns, "{st:?} at {t}");
        b.ns[st.component as usize] += t - st.start_ns;
        t = st.start_ns;
        if i > 0 {
            let before = pieces[p][i - 1].end_ns;
            if before < t {
                if let Some((q, j)) = holder(pieces, p, Some(st.component), t) {
                    (p, i) = (q, j);
                    continue;
                }
                b.ns[queueing] += t - before;
                t = before;
            }
            i -= 1;
            continue;
        }
        if t <= ready_ns {
            return end;
        }
        if let Some((q, j)) = holder(pieces, p, None, t) {
            (p, i) = (q, j);
            continue;
        }
        let earlier = (0..pieces.len())
            .map(|q| (pieces[q][PIECE_STAGES - 1].end_ns, q))
            .filter(|&(e, _)| e < t && e > ready_ns)
            .max();
        match earlier {
            Some((e, q)) => {
                b.ns[queueing] += t - e;
                (p, i, t) = (q, PIECE_STAGES - 1, e);
            }
            None => {
                b.ns[queueing] += t - ready_ns;
                return end;
            }
        }
    }
    debug_assert!(false, "critical path walk did not end");
    b.ns[queueing] += t - ready_ns;
    end
}

/// The piece and stage of the command, other than piece `p`, in a stage of `component` (any,
/// if `None`) just before `t`, searched from the most recently granted, since the holder is
/// usually a close one. For a buffer (`None`), the piece whose release at `t` gave it comes
/// first.
#[inline]
fn holder(
    pieces: &[PieceStages],
    p: usize,
    component: Option<Component>,
    t: u64,
) -> Option<(usize, usize)> {
    let released = || {
        (0..pieces.len()).rev().find_map(|q| {
            let st = pieces[q][PIECE_STAGES - 1];
            (q != p && st.end_ns == t && st.start_ns < t).then_some((q, PIECE_STAGES - 1))
        })
    };
    let released = if component.is_none() {
        released()
    } else {
        None
    };
    released.or_else(|| {
        (0..pieces.len()).rev().filter(|&q| q != p).find_map(|q| {
            (0..PIECE_STAGES).rev().find_map(|j| {
                let st = pieces[q][j];
                let kind = component.is_none_or(|c| c == st.component);
                (kind && st.start_ns < t && t <= st.end_ns).then_some((q, j))
            })
        })
    })
}

/// The contract of a device's `submit`, checked before it changes anything: the command fits
/// the geometry (`check_command`, refused with an error), and time neither goes back past the
/// device's `now_ns` nor skips an event due before it (a caller's bug: a panic).
#[inline]
pub(crate) fn check_submit(
    cfg: &DeviceConfig,
    cmd: &Command,
    now_ns: u64,
    device_now_ns: u64,
    next_event_ns: Option<u64>,
) -> Result<(), CommandError> {
    check_command(cfg, cmd.offset_bytes, cmd.len_bytes)?;
    assert!(
        now_ns >= device_now_ns,
        "time went backwards: {now_ns} < {device_now_ns}"
    );
    if let Some(t) = next_event_ns {
        assert!(
            t >= now_ns,
            "submit at {now_ns} with an event due at {t} not yet advanced"
        );
    }
    Ok(())
}

/// Checks a command against the device's geometry: a length from one block to the largest
/// transfer, block-aligned, inside the capacity.
pub fn check_command(
    cfg: &DeviceConfig,
    offset_bytes: u64,
    len_bytes: u32,
) -> Result<(), CommandError> {
    let c = &cfg.controller;
    if len_bytes == 0 || len_bytes > c.max_transfer_bytes {
        return Err(CommandError::BadLength {
            len_bytes,
            max_transfer_bytes: c.max_transfer_bytes,
        });
    }
    // The block size is a power of two (`DeviceConfig::validate`): a mask, not two divisions,
    // on every command.
    debug_assert!(c.block_bytes.is_power_of_two());
    let block_mask = u64::from(c.block_bytes) - 1;
    if (offset_bytes | u64::from(len_bytes)) & block_mask != 0 {
        return Err(CommandError::Misaligned {
            offset_bytes,
            len_bytes,
            block_bytes: c.block_bytes,
        });
    }
    let size_bytes = cfg.memory.capacity_bytes;
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

#[derive(Clone, Copy, Debug)]
struct Waiting {
    cmd: Command,
    submit_ns: u64,
    arrived_ns: u64,
}

/// The controller's hardware stage costs at its clock, in ns (fixed part plus cycles).
#[derive(Clone, Copy, Debug)]
struct StageNs {
    command: u64,
    page: u64,
    completion: u64,
    dma_setup: u64,
    /// What delays a command past the controller's work without occupying it: the hardware
    /// pipeline's latency, plus the permission check of a device serving channels.
    pipeline: u64,
}

/// The link cost of each fixed-size protocol message, computed when the device is built.
#[derive(Clone, Copy, Debug)]
struct Messages {
    /// A 4-byte posted write: an NVMe doorbell, an MSI, Moneta's interrupt.
    word: Transfer,
    /// Moneta's and DC Express's command, one programmed-I/O write of `command_bytes`.
    command: Transfer,
    /// The device fetching a 64-byte NVMe submission queue entry.
    sqe: DmaTransfer,
    /// A 16-byte NVMe completion queue entry.
    cqe: Transfer,
    /// A header-only read request (Moneta's status read).
    request: Transfer,
    /// An 8-byte status word: Moneta's status answer, DC Express's write status.
    status: Transfer,
}

/// What one piece of a given size costs on the ring and the link, kept for the last size
/// seen (a workload of one transfer size computes it once).
#[derive(Clone, Copy, Debug, Default)]
struct PieceCosts {
    len_bytes: u32,
    ring_ns: u64,
    /// A read's data to the host.
    to_host: Transfer,
    /// A write's data, read from the host by DMA.
    from_host: DmaTransfer,
}

/// The modelled array. See the module docs for the life of a command.
#[derive(Clone, Debug)]
pub struct ArrayModel {
    cfg: DeviceConfig,
    stage_ns: StageNs,
    page_bytes: u32,
    now_ns: u64,
    link: Link,
    messages: Messages,
    piece_costs: PieceCosts,
    memory: Memory,
    ring: Timeline,
    ring_fs_per_byte: u64,
    /// One engine in hardware mode, `firmware_cores` in firmware mode.
    engines: Vec<Timeline>,
    slots: Vec<Slot>,
    /// Per tag, the stages of each piece of a command that moves in several (kept until it
    /// completes, for `attribute_critical_path`; the vectors keep their capacity).
    pieces: Vec<Vec<PieceStages>>,
    free_tags: Vec<u32>,
    waiting_for_tag: VecDeque<Waiting>,
    queue: VecDeque<u32>,
    write_queue: VecDeque<u32>,
    prefer_read: bool,
    buffers_free: u32,
    events: EventQueue,
    buffers_busy_ns: u64,
    tags_busy_ns: u64,
    commands_done: u64,
}

impl ArrayModel {
    /// Builds the device; the config must already be valid (`DeviceConfig::validate`).
    pub fn new(cfg: &DeviceConfig) -> Self {
        debug_assert!(cfg.validate().is_ok());
        let c = &cfg.controller;
        let engines = match c.mode {
            ControllerMode::Hardware => 1,
            ControllerMode::Firmware => c.firmware_cores,
        };
        let link = Link::new(&cfg.link);
        let messages = Messages {
            word: link.transfer(4),
            command: link.transfer(u64::from(cfg.interface.command_bytes)),
            sqe: link.dma_transfer(64),
            cqe: link.transfer(16),
            request: link.transfer(0),
            status: link.transfer(8),
        };
        ArrayModel {
            stage_ns: StageNs {
                command: c.hardware_command_ns + c.cycles_ns(c.hardware_command_cycles),
                page: c.cycles_ns(c.hardware_page_cycles),
                completion: c.hardware_completion_ns + c.cycles_ns(c.hardware_completion_cycles),
                dma_setup: c.dma_setup_ns + c.cycles_ns(c.dma_setup_cycles),
                pipeline: match c.mode {
                    ControllerMode::Hardware => c.pipeline_latency_ns,
                    ControllerMode::Firmware => 0,
                } + c.permission_check_ns,
            },
            page_bytes: cfg.interface.page_bytes,
            now_ns: 0,
            link,
            messages,
            piece_costs: PieceCosts::default(),
            memory: Memory::new(&cfg.memory, &cfg.wear, &cfg.ftl),
            ring: Timeline::new(),
            // The raw rate: packet headers are counted once, in the wire bytes of each transfer.
            ring_fs_per_byte: fs_per_byte(cfg.ring.bandwidth_bytes_per_s as f64),
            engines: vec![Timeline::new(); engines as usize],
            slots: vec![Slot::default(); c.tags as usize],
            pieces: vec![Vec::new(); c.tags as usize],
            free_tags: (0..c.tags).rev().collect(),
            waiting_for_tag: VecDeque::new(),
            queue: VecDeque::with_capacity(c.tags as usize),
            write_queue: VecDeque::with_capacity(c.tags as usize),
            prefer_read: true,
            buffers_free: c.buffer_count,
            events: EventQueue::with_capacity(c.tags as usize * 2),
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
        check_command(&self.cfg, offset_bytes, len_bytes)
    }

    /// Issues `cmd` at `now_ns` (not before the last call's time, and after `advance` has
    /// done every event due before `now_ns`: the command must find the device as it is at
    /// `now_ns`). A refused command changes nothing.
    pub fn submit(&mut self, cmd: Command, now_ns: u64) -> Result<(), CommandError> {
        check_submit(&self.cfg, &cmd, now_ns, self.now_ns, self.next_event_ns())?;
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
        self.events.peek().map(Event::time)
    }

    /// Commands issued and not yet reported as complete.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free_tags.len() + self.waiting_for_tag.len()
    }

    /// Does everything due at or before `now_ns`, reporting each finished command.
    ///
    /// Always inlined into its few callers (the simulator's event loop, the emulator's visit
    /// to the model, `model_cost`): left to the inliner, it was taken or not as the caller's
    /// function changed shape, 50 instructions per simulated request either way (issue 39).
    #[inline(always)]
    pub fn advance(&mut self, now_ns: u64, mut on_complete: impl FnMut(Completion)) {
        while let Some(event) = self.events.pop_due(now_ns) {
            let (t, kind, tag) = (event.time(), event.kind(), event.tag());
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
        self.events.push(t, kind, tag);
    }

    /// The command travels to the device; returns when the controller has it.
    fn deliver_command(&mut self, now: u64, len_bytes: u32) -> u64 {
        match self.cfg.interface.protocol {
            // "Reduce command word to 64 bits: allows a single PIO write to issue a request"
            // (Moneta MICRO'10 slides); DC Express too sends the whole command in one
            // programmed-I/O write, so the device fetches nothing.
            Protocol::Moneta | Protocol::DcExpress => {
                self.link
                    .send_transfer(
                        Direction::ToDevice,
                        Carries::Protocol,
                        now,
                        now,
                        self.messages.command,
                    )
                    .1
            }
            Protocol::Nvme => {
                let m = &self.messages;
                let doorbell = self
                    .link
                    .send_transfer(Direction::ToDevice, Carries::Protocol, now, now, m.word)
                    .1;
                let sqe = self
                    .link
                    .dma_read(Carries::Protocol, now, doorbell, m.sqe)
                    .arrival_ns;
                let pages = self.pages(len_bytes);
                if pages > 2 {
                    // PRP1 is in the SQ entry; PRP2 points to a list of the remaining entries.
                    self.link
                        .device_reads_host(Carries::Protocol, now, sqe, 8 * (pages - 1))
                        .arrival_ns
                } else {
                    sqe
                }
            }
        }
    }

    /// Host memory pages `len_bytes` spans from a page boundary. The page size is a power of
    /// two (`DeviceConfig::validate`): a shift rather than a 64-bit division.
    #[inline]
    fn pages(&self, len_bytes: u32) -> u64 {
        let shift = self.page_bytes.trailing_zeros();
        (u64::from(len_bytes) + u64::from(self.page_bytes) - 1) >> shift
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
            ControllerMode::Hardware => {
                let pages = self.pages(w.cmd.len_bytes);
                self.stage_ns.command + pages * self.stage_ns.page
            }
            ControllerMode::Firmware => {
                c.firmware_fetch_ns + c.firmware_prp_ns + c.firmware_translation_ns
            }
        };
        let admitted = self.now_ns;
        let pipeline_ns = self.stage_ns.pipeline;
        let worked = self.engine_work(w.arrived_ns.max(admitted), work_ns);
        let ready = worked + pipeline_ns;
        let slot = &mut self.slots[tag as usize];
        *slot = Slot {
            cmd_id: w.cmd.id,
            op_is_read: w.cmd.op == Op::Read,
            placement: w.cmd.placement,
            offset_bytes: w.cmd.offset_bytes,
            len_bytes: w.cmd.len_bytes,
            submit_ns: w.submit_ns,
            admitted_ns: admitted,
            unscheduled_bytes: w.cmd.len_bytes,
            pieces_in_flight: 0,
            breakdown: Breakdown::default(),
            attributed_ns: w.submit_ns,
        };
        // Waiting for a tag or for the controller's engine is queueing.
        slot.attribute(&[
            stage(Component::CommandFetch, w.submit_ns, w.arrived_ns),
            stage(Component::Controller, worked - work_ns, ready),
        ]);
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
        let slot = &self.slots[tag as usize];
        let (op_is_read, whole_len, placement) = (slot.op_is_read, slot.len_bytes, slot.placement);
        let len = slot.unscheduled_bytes.min(buffer_bytes);
        let offset = slot.offset_bytes + u64::from(slot.len_bytes - slot.unscheduled_bytes);
        let start = now + self.stage_ns.dma_setup;
        let costs = self.piece_costs(len);
        let (release, stages) = if op_is_read {
            self.book_read_piece(start, (offset, len), &costs)
        } else {
            self.book_write_piece(start, (offset, len), &costs, placement)
        };
        self.buffers_free -= 1;
        self.buffers_busy_ns += release - now;
        let slot = &mut self.slots[tag as usize];
        let one_piece = whole_len == len;
        slot.unscheduled_bytes -= len;
        slot.pieces_in_flight += 1;
        if one_piece {
            slot.attribute(&stages);
        } else {
            self.pieces[tag as usize].push(stages);
        }
        self.push_event(release, EventKind::PieceDone, tag);
    }

    /// Books a read piece of `len` bytes at `offset` whose buffer is set up by `start`: media,
    /// ring, then the link to the host. Returns when its buffer is free, and its stages.
    #[inline]
    fn book_read_piece(
        &mut self,
        start: u64,
        (offset, len): (u64, u32),
        costs: &PieceCosts,
    ) -> (u64, PieceStages) {
        let now = self.now_ns;
        let (ring_ns, ring_latency) = (costs.ring_ns, self.cfg.ring.latency_ns);
        let setup = stage(Component::Controller, now, start);
        let (media_start, media_end) =
            self.memory
                .access(now, start, Access::Read, offset, u64::from(len));
        let ring_start = self.ring.reserve(now, media_end, ring_ns);
        let ring_end = ring_start + ring_ns + ring_latency;
        let (link_start, arrival) = self.link.send_transfer(
            Direction::ToHost,
            Carries::Data,
            now,
            ring_end,
            costs.to_host,
        );
        // The buffer is free once the last byte has left; the data lands one propagation
        // later, while the completion is already on its way behind it (so the breakdown
        // counts that propagation once, in the completion).
        let sent = arrival - self.link.propagation_ns;
        (
            sent,
            [
                // A read has one stage fewer than a write: an empty one keeps the shape.
                stage(Component::Controller, now, now),
                setup,
                stage(Component::Media, media_start, media_end),
                stage(Component::Ring, ring_start, ring_end),
                stage(Component::Link, link_start, sent),
            ],
        )
    }

    /// Books a write piece of `len` bytes at `offset` whose buffer is set up by `start`: the
    /// host's data by DMA over the link, ring, then media through `placement`. Returns when
    /// its buffer is free, and its stages.
    #[inline]
    fn book_write_piece(
        &mut self,
        start: u64,
        (offset, len): (u64, u32),
        costs: &PieceCosts,
        placement: u16,
    ) -> (u64, PieceStages) {
        let now = self.now_ns;
        let (ring_ns, ring_latency) = (costs.ring_ns, self.cfg.ring.latency_ns);
        let setup = stage(Component::Controller, now, start);
        let dma = self
            .link
            .dma_read(Carries::Data, now, start, costs.from_host);
        let ring_start = self.ring.reserve(now, dma.arrival_ns, ring_ns);
        let ring_end = ring_start + ring_ns + ring_latency;
        let (media_start, media_end) = self.memory.access_placed(
            now,
            ring_end,
            Access::Write,
            (offset, u64::from(len)),
            placement,
        );
        // A write is done only when it is in the media (no write coalescing: Moneta,
        // "storage must guarantee durability by closing row").
        (
            media_end,
            [
                setup,
                // The read requests and the host's answer, then the data, which may wait
                // for the link to the device between the two.
                stage(Component::Link, dma.start_ns, dma.data_ready_ns),
                stage(Component::Link, dma.data_start_ns, dma.arrival_ns),
                stage(Component::Ring, ring_start, ring_end),
                stage(Component::Media, media_start, media_end),
            ],
        )
    }

    /// The ring and link costs of a piece of `len_bytes` (computed again only when the size
    /// changes).
    #[inline]
    fn piece_costs(&mut self, len_bytes: u32) -> PieceCosts {
        if self.piece_costs.len_bytes != len_bytes {
            let len = u64::from(len_bytes);
            let ring = &self.cfg.ring;
            self.piece_costs = PieceCosts {
                len_bytes,
                ring_ns: bytes_to_ns(
                    wire_bytes(len, ring.packet_payload_bytes, ring.packet_header_bytes),
                    self.ring_fs_per_byte,
                ),
                to_host: self.link.transfer(len),
                from_host: self.link.dma_transfer(len),
            };
        }
        self.piece_costs
    }

    /// Posts the completion of `tag`'s command and frees the tag.
    fn complete(&mut self, tag: u32) -> Completion {
        let now = self.now_ns;
        let protocol = self.cfg.interface.protocol;
        let c = &self.cfg.controller;
        // A DC Express read completes in its data: nothing is left to post.
        let in_data = protocol == Protocol::DcExpress && self.slots[tag as usize].op_is_read;
        let work_ns = match c.mode {
            _ if in_data => 0,
            ControllerMode::Hardware => self.stage_ns.completion,
            ControllerMode::Firmware => c.firmware_completion_ns,
        };
        let posted = self.engine_work(now, work_ns);
        let visible = self.post_completion(protocol, posted, in_data);
        let slot = &mut self.slots[tag as usize];
        let pieces = &mut self.pieces[tag as usize];
        if !pieces.is_empty() {
            slot.attributed_ns =
                attribute_critical_path(pieces, slot.attributed_ns, &mut slot.breakdown);
            pieces.clear();
        }
        debug_assert_eq!(slot.attributed_ns, now, "the last piece ends the data path");
        slot.attribute(&[
            stage(Component::Controller, posted - work_ns, posted),
            stage(Component::Completion, posted, visible),
        ]);
        debug_assert_eq!(slot.breakdown.total_ns(), visible - slot.submit_ns);
        self.tags_busy_ns += now - slot.admitted_ns;
        let done = Completion {
            id: slot.cmd_id,
            op: if slot.op_is_read { Op::Read } else { Op::Write },
            len_bytes: slot.len_bytes,
            submit_ns: slot.submit_ns,
            visible_ns: visible,
            breakdown: slot.breakdown,
        };
        self.commands_done += 1;
        self.free_tags.push(tag);
        if let Some(w) = self.waiting_for_tag.pop_front() {
            let tag = self.free_tags.pop().expect("just freed");
            self.admit(tag, w);
        }
        done
    }

    /// Posts a command's completion, its status ready at `posted`, over the link as
    /// `protocol` says (nothing for a DC Express read completed `in_data`); returns when the
    /// host sees it.
    #[inline]
    fn post_completion(&mut self, protocol: Protocol, posted: u64, in_data: bool) -> u64 {
        let now = self.now_ns;
        let m = &self.messages;
        let (to_host, to_device, protocol_bytes) =
            (Direction::ToHost, Direction::ToDevice, Carries::Protocol);
        match protocol {
            Protocol::Nvme => {
                // CQ entry, then the MSI behind it; a polling host sees the entry itself, then
                // writes the CQ head doorbell (OpenExpress's step 9; drivers may batch it,
                // this charges one per command).
                let link = &mut self.link;
                let (cqe, _) =
                    link.send_back_to_back(to_host, protocol_bytes, now, posted, (m.cqe, m.word));
                link.send_transfer(to_device, protocol_bytes, now, cqe, m.word);
                cqe
            }
            Protocol::Moneta => {
                // "It sets some status registers and then raises an interrupt so that the host
                // can come back and check the status" (Moneta talk).
                let link = &mut self.link;
                let (_, interrupt) =
                    link.send_transfer(to_host, protocol_bytes, now, posted, m.word);
                let (_, request) =
                    link.send_transfer(to_device, protocol_bytes, now, interrupt, m.request);
                let answer = request + self.cfg.interface.status_read_ns;
                link.send_transfer(to_host, protocol_bytes, now, answer, m.status)
                    .1
            }
            // The last byte of data lands one propagation after it left, and with it the tag
            // the host is watching ("how to know it's done without an explicit signal", DC
            // Express slides).
            Protocol::DcExpress if in_data => now + self.link.propagation_ns,
            // The seed describes only reads' completion. A write's is modelled as the device
            // writing an 8-byte status word into host memory, which the polling host watches:
            // one posted write, no interrupt, no status read.
            Protocol::DcExpress => {
                self.link
                    .send_transfer(to_host, protocol_bytes, now, posted, m.status)
                    .1
            }
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
            // The fabric's, if any: `DeviceModel::resource_busy`.
            ..ResourceBusy::default()
        }
    }

    pub fn wear_stats(&self) -> Option<WearStats> {
        self.memory.wear_stats()
    }

    /// Flash erases performed.
    pub fn erases(&self) -> u64 {
        self.memory.erases()
    }

    /// When a flush issued at `now_ns` is done (`Memory::drained_ns`).
    pub fn drained_ns(&self, now_ns: u64) -> u64 {
        self.memory.drained_ns(now_ns)
    }

    /// Deallocates a checked range (`check_command`) at once: see `Memory::deallocate`.
    /// Returns the flash pages unmapped (0 for a memory without an FTL).
    pub fn deallocate(&mut self, offset_bytes: u64, len_bytes: u32) -> u64 {
        self.memory.deallocate(offset_bytes, u64::from(len_bytes))
    }

    /// Whether the model has untimed work left over (`Memory::has_deferred`).
    pub fn has_deferred(&self) -> bool {
        self.memory.has_deferred()
    }

    /// Pages whose map entries the FTL has moved so far (`Memory::map_moves`).
    pub fn map_moves(&self) -> u64 {
        self.memory.map_moves()
    }

    /// Runs up to `pages` of that work; returns whether any is left.
    pub fn run_deferred(&mut self, pages: u32) -> bool {
        self.memory.run_deferred(pages)
    }

    /// What the FTL did, for flash behind one (`[ftl]`).
    pub fn ftl_stats(&self) -> Option<FtlStats> {
        self.memory.ftl_stats()
    }

    /// `Memory::check_ftl_map_budget`.
    pub fn check_ftl_map_budget(&self) -> Result<(), String> {
        self.memory.check_ftl_map_budget()
    }

    /// What each direction of the link has carried so far: `(to device, to host)`.
    pub fn link_traffic(&self) -> (DirectionTraffic, DirectionTraffic) {
        (
            self.link.traffic(Direction::ToDevice),
            self.link.traffic(Direction::ToHost),
        )
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

    /// Windows of busy time subtract and add field by field, and keep the device's counts
    /// of pooled resources, which the utilisation divides by, even against an empty reading.
    #[test]
    fn busy_windows_keep_the_counts_of_resources() {
        let reading = |ns: u64| ResourceBusy {
            link_to_device_ns: ns,
            link_to_host_ns: 2 * ns,
            controller_ns: 3 * ns,
            controller_engines: 4,
            ring_ns: 5 * ns,
            banks_ns: 6 * ns,
            banks: 64,
            buffers_ns: 7 * ns,
            buffers: 8,
            tags_ns: 9 * ns,
            tags: 256,
            fabric_to_device_ns: 10 * ns,
            fabric_to_host_ns: 11 * ns,
            remote_cpu_ns: 12 * ns,
            remote_cpu_cores: 2,
        };
        assert_eq!(reading(30).since(&reading(10)), reading(20));
        assert_eq!(ResourceBusy::default().plus(&reading(5)), reading(5));
        assert_eq!(reading(5).plus(&ResourceBusy::default()), reading(5));
        assert_eq!(reading(5).since(&ResourceBusy::default()), reading(5));
    }
}
