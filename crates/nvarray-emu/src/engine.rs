//! The running emulator: the device side of every queue pair, the DMA memory the host shares
//! with the device, and the thread(s) that run the device.
//!
//! Each queue pair is served by one thread at a time, in parallel with the others, as SPDK
//! serves its queues: run to completion, sharing nothing on the per-command path but the
//! timing model. `serve` is one pass over one pair (`queue_work`: take and validate commands,
//! move their data, post the completions that are due). Only the model is serial
//! (`DeviceCore`, one device): a pass visits it under a short lock to hand over the commands
//! it took and advance it to the clock, and the completions it finishes for other pairs go to
//! their owners' mailboxes (`mailbox`). Device threads (`device_threads > 0`) share the pairs
//! out among themselves; in inline mode (`device_threads = 0`) each host thread serves its
//! own pairs while it polls.
//!
//! Ordering: a pass posts a completion only at or before the time up to which the model has
//! nothing left to finish (`Published::settled_ns`: the later of the time it was last advanced
//! to and its next event, since a command still in the model completes no sooner than its
//! next event), and everything the model finished by then is already in the pair's mailbox, so
//! each pair's completions leave in deadline order, never early.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;

use crossbeam_utils::CachePadded;
use nvarray_model::zones::Zones;
use nvarray_model::{Breakdown, DeviceConfig, Protocol};

use crate::arena::Arena;
use crate::backing::{Backing, BackingKind, BackingPages};
use crate::clock::{ticks, Clock};
use crate::cpus::{pin_this_thread, CpuList};
use crate::device_core::{DeviceCore, Finished, Submission};
use crate::device_sleep::{fine_timer_slack, rest, Rest, WakeMargin};
use crate::dma_memory::DmaMemory;
use crate::error::EmuError;
use crate::irq::Irq;
use crate::jitter::{JitterProbe, JitterReport};
use crate::lateness::{Lateness, LatenessReport};
use crate::mailbox::Mailbox;
use crate::pauses::{self, HolderPauses, PAUSE_NS};
use crate::protocol::Status;
use crate::queue_work::{DataPath, DeviceQueue, QueueWork, TagStates};
use nvarray_faults::BackingFaults;

/// With one command in flight, a pass that ends this close to the device's next deadline
/// waits for it on the clock alone (22-31 ns a reading here) instead of running whole passes
/// (about 100 ns each), so the completion is posted within a clock reading of its deadline
/// rather than within a pass: at dram's QD 1 the lateness p50 went from 86 to 66 ns
/// (docs/perf.md, issue 17's third session). It is about two passes, so a command that
/// arrives meanwhile waits no longer than it could behind two passes. With more in flight
/// the passes are busy anyway, and waiting would hold back the commands arriving behind
/// (the null device at QD 32 lost about 4 % of its IOPS when every pass waited).
const NEAR_DEADLINE_NS: u64 = 250;

/// Rounds after which a device thread also tries the queue pairs of the other device threads
/// (only those nobody is serving at that moment): rare enough that threads which all run
/// rarely touch each other's pairs, often enough that a preempted thread's pairs wait a few
/// microseconds, not a time slice.
const STEAL_EVERY: u32 = 16;

/// Passes in a row that may find the model's lock taken and go on without handing their
/// commands over; the next one waits for it. A visit with a batch of 32 dram commands holds the
/// lock for about 6 µs, and a thread that blocks on it sleeps in the kernel (futex) for longer
/// than that; going on instead posts its due completions meanwhile. The bound keeps a pair
/// from being passed over indefinitely.
const VISIT_TRIES: u32 = 8;

/// `Published::next_ns` when the model has no event.
const NEVER: u64 = u64::MAX;

/// Page moves of the model's untimed work one slice runs (`run_deferred_slice`): about 1 µs at
/// 30 ns a page, the cost of a map write that misses the caches.
const DEFERRED_SLICE_PAGES: u32 = 32;

/// A slice runs only if nothing is due sooner than this: three times its cost, so it ends
/// before the next deadline even in a debug build.
const DEFERRED_SLICE_ROOM_NS: u64 = 3_000;

/// One queue pair as the engine holds it: its work, owned by whichever thread serves it, and
/// what the model's visitors hand it.
struct QueueCell {
    id: u16,
    work: Mutex<QueueWork>,
    mailbox: Mailbox<Finished>,
    /// Commands taken so far, and the earliest deadline waiting (`NEVER`: none), published by
    /// the owner after each pass for readers that must not wait for its lock.
    commands: AtomicU64,
    due_next_ns: AtomicU64,
    detached: AtomicBool,
}

/// A queue pair attached to the emulator: the host's handle for serving it in inline mode
/// and for detaching it.
pub struct QueueHandle(Arc<CachePadded<QueueCell>>);

impl QueueHandle {
    pub fn id(&self) -> u16 {
        self.0.id
    }
}

/// The serial device and the table of queue pairs, under one lock.
struct ModelState {
    core: DeviceCore,
    /// Attached queue pairs by id; `None` where one was detached (its id is given to the next
    /// queue pair attached).
    cells: Vec<Option<Arc<CachePadded<QueueCell>>>>,
    /// Per queue id: what the current visit finished for that pair (kept to reuse the
    /// allocations).
    outgoing: Vec<Vec<Finished>>,
    /// The serial part's cost: `clock::ticks` the lock was held by visits, and the commands
    /// they handed the model.
    held_ticks: u64,
    handed: u64,
    /// The model's `map_moves` when last looked at: the moves since are a visit's (or a
    /// slice's) declared work.
    map_moves_seen: u64,
    /// Whether the model has a flash FTL, the one part that moves map entries or defers work
    /// (checked once: a visit to any other device skips both questions).
    has_ftl: bool,
}

/// What the model's last visitor left for the passes that do not take the lock: written only
/// under the model lock, read by every pass.
#[derive(Default)]
struct Published {
    /// The model's next event (`NEVER`: none).
    next_ns: AtomicU64,
    /// The clock reading the model was last advanced to.
    advanced_ns: AtomicU64,
    /// No command still in the model completes at or before this time: the later of
    /// `advanced_ns` and the model's next event (every command's deadline is at or after its
    /// last event; `NEVER` when the model is empty). Stored with Release after the visit's
    /// mailbox deliveries: a pass that reads it with Acquire finds in its mailbox every command
    /// of its pair due by then, so it may post everything due up to it. A command the pass's
    /// own thread hands the model later is dated after its own previous posting, so its
    /// deadline is later too.
    settled_ns: AtomicU64,
    /// Commands in the model, not yet finished.
    in_flight: AtomicUsize,
    /// The model has untimed work left over (`DeviceModel::has_deferred`: a flash
    /// collection's map moves), for passes with nothing due to run a slice of
    /// (`run_deferred_slice`).
    deferred: AtomicBool,
}

/// What detached queue pairs recorded, kept for the reports.
#[derive(Default)]
struct Retired {
    lateness: Lateness,
    jitter: JitterProbe,
    commands: u64,
}

struct Shared {
    model: CachePadded<Mutex<ModelState>>,
    published: CachePadded<Published>,
    /// Bumped on every attach and detach: device threads re-read their share of the pairs.
    generation: CachePadded<AtomicU64>,
    path: DataPath,
    backing_pages: BackingPages,
    stop: AtomicBool,
    retired: Mutex<Retired>,
    /// The device threads' doorbell: armed by one that sleeps (`device_sleep`), raised by the
    /// host after each submission, by `attach`/`detach` and by the stop.
    doorbell: CachePadded<Irq>,
    /// Tests only (`slow_wakeups_by`): spun after each wake-up, as a kernel slow to wake.
    wake_delay_ns: AtomicU64,
    /// Tests only (`stall_next_visit_by`): the next visit that hands the model commands or
    /// takes completions from it sleeps this long holding its lock, as a thread the machine
    /// paused there.
    visit_stall_ns: AtomicU64,
    /// The latest pause of a thread holding the model's lock, for the others.
    holder_pauses: HolderPauses,
    /// Wall time the device threads spent in rounds that found work, in ns (summed over the
    /// threads; added at each rest): how near the device threads are to their limit.
    busy_ns: AtomicU64,
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
    /// Faults to inject into the backing (tests and campaigns; `BackingFaults`).
    pub backing_faults: Option<Arc<BackingFaults>>,
}

impl Emulator {
    pub fn start(config: &DeviceConfig, options: &EmulatorOptions) -> Result<Self, EmuError> {
        options.cpus.check_allowed().map_err(EmuError::Cpus)?;
        let backing = Backing::open_with_faults(
            &options.backing,
            config.memory.capacity_bytes,
            options.backing_faults.clone(),
        )?;
        let dma = Arc::new(dma_memory(config, options)?);
        let zones = zone_table(config)?;
        let mut emulator = Emulator {
            shared: Arc::new(Shared::new(config, options.tags, backing, dma, zones)),
            threads: Vec::new(),
        };
        emulator.spawn_device_threads(&options.cpus, options.device_threads)?;
        Ok(emulator)
    }

    /// Starts the `count` device threads, each pinned to its CPU of `cpus` if it names one.
    /// On an error the threads already started are in `self.threads`, so dropping `self`
    /// stops them.
    fn spawn_device_threads(&mut self, cpus: &CpuList, count: usize) -> Result<(), EmuError> {
        for i in 0..count {
            let shared = Arc::clone(&self.shared);
            let cpu = cpus.nth(i);
            let (pinned_tx, pinned) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("nvarray-device-{i}"))
                .spawn(move || {
                    let _stop_process_if_this_panics = AbortOnPanic;
                    let pinned = cpu.map_or(Ok(()), pin_this_thread);
                    let ok = pinned.is_ok();
                    let _ = pinned_tx.send(pinned);
                    if ok {
                        device_thread(&shared, i, count)
                    }
                })
                .map_err(|error| EmuError::Thread { error })?;
            // Dropping the emulator on an error stops the threads already started.
            self.threads.push(thread);
            let pinned = pinned.recv().unwrap_or(Ok(()));
            if let (Err(e), Some(cpu)) = (pinned, cpu) {
                return Err(EmuError::Cpus(format!(
                    "cannot pin device thread {i} to CPU {cpu}: {e}"
                )));
            }
        }
        Ok(())
    }

    pub fn dma(&self) -> &Arc<DmaMemory> {
        &self.shared.path.dma
    }

    /// The pages behind the device's bytes (explicit huge pages when reserved).
    pub fn backing_pages(&self) -> BackingPages {
        self.shared.backing_pages
    }

    pub fn protocol(&self) -> Protocol {
        self.shared.path.protocol
    }

    /// Whether device threads run the device (otherwise callers must `service` it).
    pub fn has_device_threads(&self) -> bool {
        !self.threads.is_empty()
    }

    /// How the device's work is split among threads, for the engine line.
    pub fn work_split(&self) -> String {
        match self.threads.len() {
            0 => "device inline (each host thread runs its own queue pairs)".to_string(),
            1 => "1 device thread runs every queue pair".to_string(),
            n => format!("{n} device threads (queue pair k on thread k mod {n})"),
        }
    }

    /// Connects the device's ends of a new queue pair; returns its handle (a detached
    /// pair's id is reused, so ids stay below the most pairs ever attached at once).
    pub fn attach(&self, queue: DeviceQueue, irq: Arc<Irq>, may_sleep: bool) -> QueueHandle {
        let matches = matches!(
            (&queue, self.shared.path.protocol),
            (
                DeviceQueue::Word { .. },
                Protocol::Moneta | Protocol::DcExpress
            ) | (DeviceQueue::Nvme { .. }, Protocol::Nvme)
        );
        assert!(matches, "queue pair protocol differs from the device's");
        let mut state = self.lock_model();
        let id = state
            .cells
            .iter()
            .position(Option::is_none)
            .unwrap_or(state.cells.len());
        assert!(
            id < usize::from(u16::MAX),
            "queue ids are 16-bit: 65,535 queue pairs attached at once"
        );
        let cell = Arc::new(CachePadded::new(QueueCell {
            id: id as u16,
            work: Mutex::new(QueueWork::new(id as u16, queue, irq, may_sleep)),
            mailbox: Mailbox::default(),
            commands: AtomicU64::new(0),
            due_next_ns: AtomicU64::new(NEVER),
            detached: AtomicBool::new(false),
        }));
        if id == state.cells.len() {
            state.cells.push(Some(Arc::clone(&cell)));
            state.outgoing.push(Vec::new());
        } else {
            state.cells[id] = Some(Arc::clone(&cell));
        }
        // A visit delivers `outgoing[id]` to `cells[id]`: one list per queue id.
        assert_eq!(
            state.cells.len(),
            state.outgoing.len(),
            "queue pairs and their outgoing lists"
        );
        drop(state);
        self.shared.generation.fetch_add(1, Ordering::Release);
        self.shared.doorbell.raise();
        QueueHandle(cell)
    }

    /// Disconnects a queue pair, freeing its rings once no thread serves it. The host must
    /// have collected every completion of its commands first (`QueuePair`'s drop does);
    /// anything the device still had for it is dropped, its tags freed. What it recorded
    /// (lateness, jitter, commands) is kept for the reports.
    pub fn detach(&self, queue: &QueueHandle) {
        let cell = &queue.0;
        {
            let mut state = self.lock_model();
            if let Some(slot) = state.cells.get_mut(usize::from(cell.id)) {
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, cell)) {
                    *slot = None;
                }
            }
            while state.cells.last().is_some_and(Option::is_none) {
                state.cells.pop();
                state.outgoing.pop();
            }
            assert_eq!(
                state.cells.len(),
                state.outgoing.len(),
                "queue pairs and their outgoing lists"
            );
        }
        self.shared.generation.fetch_add(1, Ordering::Release);
        self.shared.doorbell.raise();
        // The model's lock is not held here: a pass holds its pair's lock while it visits the
        // model, so taking them the other way round could wait forever.
        let (lateness, jitter, commands) = {
            let work = lock(&cell.work);
            let mut mail = Vec::new();
            cell.mailbox.take_into(&mut mail);
            for f in mail {
                self.shared.path.tags.release(f.tag.index());
            }
            (work.lateness.clone(), work.jitter.clone(), work.commands)
        };
        // Folded and marked under the same lock `recorded` holds, so a report counts the pair
        // exactly once.
        let mut retired = lock(&self.shared.retired);
        retired.lateness.merge(&lateness);
        retired.jitter.merge(&jitter);
        retired.commands += commands;
        cell.detached.store(true, Ordering::Release);
    }

    /// Queue pairs attached now.
    pub fn queue_pairs(&self) -> usize {
        self.lock_model().cells.iter().flatten().count()
    }

    /// One pass of the device over `queue`, unless another thread is serving it (inline
    /// mode: the host thread that owns the pair calls this while it waits). Returns whether
    /// this thread ran it. `since`: what the calling thread did since its previous call.
    pub fn service(&self, queue: &QueueHandle, since: Polled) -> bool {
        let cell = &queue.0;
        match cell.work.try_lock() {
            Ok(mut work) => {
                let since = match since {
                    Polled::AfterHostCode => Since::HostCode,
                    Polled::AfterSpin => Since::Spun,
                    Polled::AfterWait => Since::Rested,
                };
                serve(&self.shared, cell, &mut work, since, true);
                true
            }
            Err(TryLockError::WouldBlock) => false,
            Err(TryLockError::Poisoned(e)) => panic!("queue pair state poisoned: {e}"),
        }
    }

    /// The earliest completion deadline the device knows (the model's next event, or a
    /// completion waiting on any queue pair), in the device clock's nanoseconds.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        let model_next = self.shared.published.next_ns.load(Ordering::Acquire);
        let next = self
            .lock_model()
            .cells
            .iter()
            .flatten()
            .map(|c| c.due_next_ns.load(Ordering::Acquire))
            .fold(model_next, u64::min);
        (next != NEVER).then_some(next)
    }

    pub fn now_ns(&self) -> u64 {
        self.shared.path.clock.now_ns()
    }

    /// Host: a command was just put in a submission queue (stamped `DmaMemory::doorbell_ns`):
    /// wakes the device threads if one sleeps. While they are awake it costs a fence and a
    /// load, as an MMIO doorbell write costs the host on real hardware.
    #[inline]
    pub fn doorbell(&self) {
        self.shared.doorbell.raise();
    }

    /// Tests only: every wake-up of a device thread from now on comes `ns` later, as on a
    /// machine whose kernel is slow to run it, so its accounting can be shown.
    #[doc(hidden)]
    pub fn slow_wakeups_by(&self, ns: u64) {
        self.shared.wake_delay_ns.store(ns, Ordering::Relaxed);
    }

    /// Tests only: the next visit of the model that hands it commands or takes completions
    /// from it sleeps `ns` while it holds the model's lock (after its work), as a thread the
    /// machine paused there, so the accounting of such a pause can be shown.
    #[doc(hidden)]
    pub fn stall_next_visit_by(&self, ns: u64) {
        self.shared.visit_stall_ns.store(ns, Ordering::Relaxed);
    }

    /// Wall time the device threads have spent in rounds that found work so far, in ns,
    /// summed over them (up to their last rest).
    pub fn device_busy_ns(&self) -> u64 {
        self.shared.busy_ns.load(Ordering::Relaxed)
    }

    /// Whether a device thread is asleep on the doorbell (or about to be).
    pub fn device_asleep(&self) -> bool {
        self.shared.doorbell.armed()
    }

    /// Wake-ups of sleeping device threads by the doorbell so far.
    pub fn doorbell_wakeups(&self) -> u64 {
        self.shared.doorbell.raised()
    }

    /// CPU time the device threads have used so far, in ns (0 inline: the host threads run the
    /// device then, and their time is the host's).
    pub fn device_cpu_ns(&self) -> u64 {
        self.threads.iter().map(thread_cpu_ns).sum()
    }

    /// Lateness percentiles and the faithfulness verdict so far, over every queue pair.
    /// When the run was late, the verdict says whether the machine's own jitter in the same
    /// run was too (`Lateness::machine_hint`).
    pub fn lateness(&self) -> LatenessReport {
        let (lateness, jitter, _) = self.recorded();
        let hint = jitter
            .report()
            .and_then(|j| lateness.machine_hint(j.p99_ns));
        lateness.report(hint.as_deref())
    }

    /// The machine's own jitter as the device's spinning threads saw it so far (`None` if
    /// they never spun idle; see `jitter`).
    pub fn jitter(&self) -> Option<JitterReport> {
        self.recorded().1.report()
    }

    /// Reads the timing model (its utilisation and wear) together with the sum of the
    /// breakdowns of every command it completed and their count, under one lock so the three
    /// agree.
    pub fn with_model<R>(
        &self,
        f: impl FnOnce(&nvarray_model::DeviceModel, &Breakdown, u64) -> R,
    ) -> R {
        let state = self.lock_model();
        let (sum, count) = state.core.modelled();
        f(state.core.model(), sum, count)
    }

    /// The serial part of the device's work per command, in nanoseconds: the time the timing
    /// model's lock was held (the model's work and the hand-off of commands and completions)
    /// over the commands handed to it. What no number of threads can run in parallel, so
    /// 1 / this is the device's ceiling in commands per second under the same load (a visit
    /// carries a batch at deep queues, one command's event at QD 1). `None` before any
    /// command, or in the clock's first millisecond.
    pub fn serial_ns_per_command(&self) -> Option<f64> {
        let (held, handed) = {
            let state = self.lock_model();
            (state.held_ticks, state.handed)
        };
        let rate = self.shared.path.clock.ticks_per_ns()?;
        (handed > 0).then(|| held as f64 / rate / handed as f64)
    }

    /// Commands the device has taken from submission queues.
    pub fn commands(&self) -> u64 {
        let live: u64 = self
            .cells()
            .iter()
            .map(|c| c.commands.load(Ordering::Relaxed))
            .sum();
        lock(&self.shared.retired).commands + live
    }

    /// Every queue pair's lateness and jitter, joined with the detached pairs', and the
    /// commands taken.
    fn recorded(&self) -> (Lateness, JitterProbe, u64) {
        let cells = self.cells();
        // Held throughout: `detach` folds a pair into `retired` and marks it under this lock.
        let retired = lock(&self.shared.retired);
        let (mut lateness, mut jitter, mut commands) = (
            retired.lateness.clone(),
            retired.jitter.clone(),
            retired.commands,
        );
        for cell in cells {
            if cell.detached.load(Ordering::Acquire) {
                continue; // already in `retired`
            }
            let work = lock(&cell.work);
            lateness.merge(&work.lateness);
            jitter.merge(&work.jitter);
            commands += work.commands;
        }
        (lateness, jitter, commands)
    }

    fn cells(&self) -> Vec<Arc<CachePadded<QueueCell>>> {
        attached_cells(&self.shared)
    }

    fn lock_model(&self) -> MutexGuard<'_, ModelState> {
        lock(&self.shared.model)
    }
}

/// The DMA memory the host shares with the device: a buffer per tag, and on NVMe a PRP list
/// per tag too.
fn dma_memory(config: &DeviceConfig, options: &EmulatorOptions) -> Result<DmaMemory, EmuError> {
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
    Ok(DmaMemory::new(data, lists, page_bytes))
}

/// The zones of a zoned namespace, under their lock (`None`: the device is not zoned).
fn zone_table(config: &DeviceConfig) -> Result<Option<parking_lot::Mutex<Zones>>, EmuError> {
    let zones = config
        .zone_layout()?
        .map(|layout| Zones::new(layout).map(parking_lot::Mutex::new))
        .transpose()
        .map_err(|e| nvarray_model::ConfigError::Zns {
            field: "zns",
            expected: e,
        })?;
    Ok(zones)
}

impl ModelState {
    /// The model of a fresh device described by `config`, with no queue pair attached.
    fn new(config: &DeviceConfig) -> Self {
        let core = DeviceCore::new(config);
        let has_ftl = core.model().ftl_stats().is_some();
        ModelState {
            core,
            cells: Vec::new(),
            outgoing: Vec::new(),
            held_ticks: 0,
            handed: 0,
            map_moves_seen: 0,
            has_ftl,
        }
    }
}

impl Shared {
    /// The state every thread running the device shares: the model of `config`, the data
    /// path over `backing`, `dma` (`tags` tags) and `zones`, nothing attached or running yet.
    fn new(
        config: &DeviceConfig,
        tags: usize,
        backing: Backing,
        dma: Arc<DmaMemory>,
        zones: Option<parking_lot::Mutex<Zones>>,
    ) -> Self {
        let backing_pages = backing.pages();
        let published = Published::default();
        published.next_ns.store(NEVER, Ordering::Relaxed);
        Shared {
            model: CachePadded::new(Mutex::new(ModelState::new(config))),
            published: CachePadded::new(published),
            generation: CachePadded::new(AtomicU64::new(0)),
            path: DataPath {
                dma,
                backing,
                config: config.clone(),
                protocol: config.interface.protocol,
                block_bytes: u64::from(config.controller.block_bytes),
                tags: TagStates::new(tags),
                clock: Clock::new(),
                zones,
            },
            backing_pages,
            stop: AtomicBool::new(false),
            retired: Mutex::new(Retired::default()),
            doorbell: CachePadded::new(Irq::new()),
            wake_delay_ns: AtomicU64::new(0),
            visit_stall_ns: AtomicU64::new(0),
            holder_pauses: HolderPauses::default(),
            busy_ns: AtomicU64::new(0),
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.doorbell.raise();
        for t in self.threads.drain(..) {
            // A device thread that panicked already reported it; nothing more to do here.
            let _ = t.join();
        }
    }
}

/// Locks a mutex of the engine. A panic while one was held is a bug in the emulator, and the
/// device threads abort the process on one (`AbortOnPanic`); a host thread that panicked
/// while serving its pair inline leaves state that is consistent between passes.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// CPU time a device thread has used so far, in ns (0 if the kernel cannot tell).
fn thread_cpu_ns(thread: &JoinHandle<()>) -> u64 {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the handle's thread has not been joined (the handle is borrowed), so its pthread
    // id is valid; both calls only write the locals they are given.
    let ok = unsafe {
        libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    if ok {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// Serves device thread `index` of `count`: its share of the queue pairs (every `count`-th
/// in attachment order, from `index`), one pass each in turn, and every `STEAL_EVERY`-th round
/// the others' too, where their thread is not serving them. A pair's lock is held for one pass
/// only, so a thread the scheduler preempts (more spinning threads than cores) holds up no
/// pair: another device thread serves it meanwhile. Before, each thread held its pairs for
/// bursts of 256 passes, and a preempted one stalled them for a time slice: 2 host threads and
/// 2 device threads on 2 cores fell from 2.2 M IOPS to 0.05 M (docs/perf.md, issue 22).
///
/// A round that finds no work ends in a rest (`device_sleep::rest`): the thread sleeps on the
/// doorbell until its next action minus its wake margin, or parks with nothing in flight, so
/// an idle or lightly loaded device holds no core (issue 56).
fn device_thread(shared: &Shared, index: usize, count: usize) {
    // A thread past the count would serve no pair of its own.
    assert!(index < count, "device thread {index} of {count}");
    fine_timer_slack();
    let clock = &shared.path.clock;
    let mut cells: Vec<Arc<CachePadded<QueueCell>>> = Vec::new();
    let mut seen = u64::MAX;
    let mut round: u32 = 0;
    let mut since = Since::Other;
    let mut margin = WakeMargin::new();
    // The shortest command the pairs this thread served have posted, kept across pairs that
    // come and go (a front end's connections).
    let mut least_modelled_ns = u64::MAX;
    let mut last_work_ns = clock.now_ns();
    // Rounds with work since the last rest, from the end of the round before the first.
    let mut busy_since: Option<u64> = None;
    let mut round_end_ns = last_work_ns;
    while !shared.stop.load(Ordering::Relaxed) {
        let generation = shared.generation.load(Ordering::Acquire);
        if generation != seen {
            seen = generation;
            cells = attached_cells(shared);
            since = Since::Other;
        }
        let steal = count > 1 && round.is_multiple_of(STEAL_EVERY);
        round = round.wrapping_add(1);
        let (worked, least_ns) = serve_round(shared, &cells, index, count, steal, since);
        least_modelled_ns = least_modelled_ns.min(least_ns);
        if worked {
            let from = *busy_since.get_or_insert(round_end_ns);
            last_work_ns = clock.now_ns();
            round_end_ns = last_work_ns;
            if round.is_multiple_of(4096) {
                // A thread that never rests still tells how busy it is.
                shared
                    .busy_ns
                    .fetch_add(last_work_ns - from, Ordering::Relaxed);
                busy_since = Some(last_work_ns);
            }
            std::hint::spin_loop();
            since = Since::Spun;
            continue;
        }
        let now = clock.now_ns();
        if let Some(from) = busy_since.take() {
            shared
                .busy_ns
                .fetch_add(last_work_ns - from, Ordering::Relaxed);
        }
        round_end_ns = now;
        let next = next_action_ns(shared, &cells, index, count);
        let least = (least_modelled_ns != u64::MAX).then_some(least_modelled_ns);
        margin.forget_if_stale(now);
        let decided = rest(now, next, now.saturating_sub(last_work_ns), least, &margin);
        since = take_rest(shared, &cells, index, count, decided, &mut margin);
    }
}

/// The queue pairs attached now, in attachment order.
fn attached_cells(shared: &Shared) -> Vec<Arc<CachePadded<QueueCell>>> {
    lock(&shared.model)
        .cells
        .iter()
        .flatten()
        .cloned()
        .collect()
}

/// One round of device thread `index` of `count`: a pass over each of its pairs (with
/// `steal`, over the others' too) that no other thread is serving. Returns whether the round
/// found work (a pair another thread serves counts as work) and the shortest command the
/// pairs it served have posted (`u64::MAX`: none).
#[inline]
fn serve_round(
    shared: &Shared,
    cells: &[Arc<CachePadded<QueueCell>>],
    index: usize,
    count: usize,
    steal: bool,
    since: Since,
) -> (bool, u64) {
    let mut worked = false;
    let mut least_modelled_ns = u64::MAX;
    for (k, cell) in cells.iter().enumerate() {
        if k % count != index && !steal {
            continue;
        }
        let mut work = match cell.work.try_lock() {
            Ok(work) => work,
            Err(TryLockError::WouldBlock) => {
                worked = true; // another thread serves it: not idle
                continue;
            }
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
        };
        worked |= serve(shared, cell, &mut work, since, false);
        least_modelled_ns = least_modelled_ns.min(work.least_modelled_ns);
    }
    (worked, least_modelled_ns)
}

/// Rests device thread `index` of `count` as `decided` (`device_sleep::rest`); returns what
/// the thread did, for its next pass.
fn take_rest(
    shared: &Shared,
    cells: &[Arc<CachePadded<QueueCell>>],
    index: usize,
    count: usize,
    decided: Rest,
    margin: &mut WakeMargin,
) -> Since {
    match decided {
        Rest::Spin => {
            std::hint::spin_loop();
            Since::Spun
        }
        Rest::Yield => {
            // The thread stays runnable: the time the kernel gives others is like a
            // preemption of a spinning thread, a pause of the machine when long (the
            // chain goes on across it). Restarted instead, a command rung meanwhile and
            // dated by its doorbell would count the kernel's time as the emulator's.
            std::thread::yield_now();
            Since::Rested
        }
        Rest::Until(wake_ns) => {
            sleep_on_doorbell(shared, cells, index, count, Some(wake_ns), margin);
            Since::Rested
        }
        Rest::Park => {
            sleep_on_doorbell(shared, cells, index, count, None, margin);
            Since::Rested
        }
    }
}

/// The next time device thread `index` of `count` must act: the model's next event or the
/// earliest completion waiting on one of its pairs (`None`: nothing in flight at all).
fn next_action_ns(
    shared: &Shared,
    cells: &[Arc<CachePadded<QueueCell>>],
    index: usize,
    count: usize,
) -> Option<u64> {
    let published = &shared.published;
    let next = cells
        .iter()
        .enumerate()
        .filter(|(k, _)| k % count == index)
        .map(|(_, c)| c.due_next_ns.load(Ordering::Acquire))
        .fold(published.next_ns.load(Ordering::Acquire), u64::min);
    if next != NEVER {
        Some(next)
    } else if published.in_flight.load(Ordering::Relaxed) > 0 {
        // In the model with no event yet (cannot happen today; waking soon is safe).
        Some(shared.path.clock.now_ns())
    } else {
        None
    }
}

/// Sleeps on the doorbell until `wake_ns` (`None`: until rung), unless, once armed, one of the
/// thread's pairs has commands, the pairs changed or the emulator stops. Measures a timed
/// wake-up against the timeout's end into `margin`, and marks what fell due after the thread
/// had to be back as wake-late (`pauses::PauseWatch::woke`).
fn sleep_on_doorbell(
    shared: &Shared,
    cells: &[Arc<CachePadded<QueueCell>>],
    index: usize,
    count: usize,
    wake_ns: Option<u64>,
    margin: &mut WakeMargin,
) {
    let clock = &shared.path.clock;
    let doorbell = &shared.doorbell;
    let seen = shared.generation.load(Ordering::Acquire);
    doorbell.arm();
    let commands_waiting = cells.iter().enumerate().any(|(k, c)| {
        k % count == index
            && match c.work.try_lock() {
                Ok(work) => work.has_commands(),
                Err(_) => true,
            }
    });
    if commands_waiting
        || shared.stop.load(Ordering::Relaxed)
        || shared.generation.load(Ordering::Acquire) != seen
    {
        doorbell.disarm();
        return;
    }
    let margin_ns = margin.margin_ns();
    let asleep_ns = clock.now_ns();
    match wake_ns {
        Some(wake) => doorbell.wait_for(std::time::Duration::from_nanos(
            wake.saturating_sub(asleep_ns),
        )),
        None => doorbell.wait(),
    }
    let delay = shared.wake_delay_ns.load(Ordering::Relaxed);
    if delay > 0 {
        clock.spin_until(clock.now_ns() + delay);
    }
    let woke = clock.now_ns();
    // The margin is for timed sleeps: their overshoot is the wake-up's own lateness. A
    // sleep ended early (a ring, the pairs changed, the stop) measures nothing.
    if let Some(wake) = wake_ns.filter(|&w| woke >= w) {
        margin.record(woke - wake, woke);
    }
    // The timeout's end plus the margin is when the thread had to act; a command rung
    // meanwhile is held to its ring plus the margin when taken (`PauseWatch::taken`).
    let expected = wake_ns.map(|w| w + margin_ns);
    pauses::this_thread(|w| w.woke(asleep_ns, expected, woke, margin_ns));
}

/// What an inline host thread did since its previous poll (`Emulator::service`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// Ran its own code: what fell due meanwhile counts as late from this poll on, the first
    /// time the host could have seen it from any device (`pauses::PauseWatch::host_code`).
    AfterHostCode,
    /// Only spun waiting for a completion: the time between the two polls measures the
    /// machine's jitter when both were idle (`jitter`).
    AfterSpin,
    /// Waited for a completion otherwise (a nap, which accounts for itself, or the wait loop's
    /// own bounded code): the chain of clock readings goes on across it.
    AfterWait,
}

/// What the thread serving a pair did since its previous pass over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Since {
    /// Only spun: the pass continues the chain of clock readings (`pauses`) and may sample the
    /// machine's jitter.
    Spun,
    /// Slept on the doorbell (which restarted the chain at the wake-up,
    /// `pauses::PauseWatch::woke`) or yielded (the chain goes on across it): the pass
    /// continues the chain, but the time since is no spin loop's.
    Rested,
    /// Something unbounded (a re-share of the pairs): a new chain.
    Other,
    /// Inline: the host thread ran its own code since its previous poll. A new chain, and
    /// what fell due meanwhile counts as late only from this pass (`PauseWatch::host_code`).
    HostCode,
}

/// One pass over one queue pair: take its commands, hand them to the model, post its due
/// completions. Returns whether it did any of these (or has commands the model's lock kept it
/// from handing over, so it must come back at once). `since`: what the calling thread did
/// since its previous pass.
fn serve(
    shared: &Shared,
    cell: &QueueCell,
    work: &mut QueueWork,
    since: Since,
    inline: bool,
) -> bool {
    let path = &shared.path;
    let spinning = since == Since::Spun;
    // With completions waiting, the clock is read before the new commands are taken: one
    // already due goes out first (taking commands moves their data, a 4 KiB read's copy
    // each, and a deadline behind a batch of them was late by the whole batch), and taking
    // them posts those that fall due meanwhile, up to what the model has settled (read here:
    // it only grows).
    let mut look = first_look(shared, cell, work, since);
    // Inline, what fell due in the model goes out before the host's new commands are taken and
    // handed to it: at QD 16 over NBD, taking them and the model's work on them delayed every
    // completion due behind them by about 5 µs. The model is advanced to the pass's first
    // reading only, so the commands taken next still arrive after it.
    let mut visited = false;
    if let Some(look) = look.as_mut().filter(|_| inline && work.to_model.is_empty()) {
        visited = visit_before_taking(shared, cell, work, look);
    }
    let early = look.map(|l| l.now_ns);
    let mut posted = look.is_some_and(|l| l.posted);
    let (taken, posted_taking) = work.take_commands(path, look.map(|l| l.settled_ns));
    posted |= posted_taking;
    // The commands are dated inside the visit, by a clock reading taken after they were taken
    // from the queue: each deadline is at least the model's latency after the host's
    // submission. A pass that finds another thread visiting goes on to post what is due and
    // hands its commands over on a later pass (dated then, as they would be after waiting),
    // waiting for the lock only after `VISIT_TRIES` passes in a row found it taken. Without
    // commands, the model is visited only when something in it is due, and only if no other
    // thread is visiting it (that one does the work).
    // Read again only if commands were taken since (the visit dates them by its own reading).
    let mut now = match early {
        Some(now) if taken == 0 => now,
        _ => {
            let now = path.clock.now_ns();
            chain(since, now, early.is_none());
            now
        }
    };
    // The jitter probe samples from this reading when nothing was taken or posted before it,
    // whatever the pass does next: a pause that swallowed a deadline ends at this reading, and
    // the pass that follows it posts (issue 37: recorded only for a pass that did nothing at
    // all, the probe missed exactly the pauses that make completions late).
    if taken == 0 && !posted {
        work.idle_reading(now, spinning);
    }
    visited |= visit_for_pass(shared, work, now);
    posted |= settle(shared, cell, work, &mut now) > 0;
    let (visited_waiting, posted_waiting) = wait_near_deadline(shared, cell, work, &mut now);
    visited |= visited_waiting;
    posted |= posted_waiting;
    cell.due_next_ns
        .store(work.next_due_ns().unwrap_or(NEVER), Ordering::Release);
    if taken > 0 {
        cell.commands.store(work.commands, Ordering::Relaxed);
    }
    let worked = taken > 0 || posted || visited || run_deferred_slice(shared, work, now);
    if worked {
        work.jitter.worked();
    }
    worked || !work.to_model.is_empty()
}

/// A pass's look before it takes commands (`first_look`).
#[derive(Clone, Copy)]
struct Look {
    /// The pass's first clock reading.
    now_ns: u64,
    /// `Published::settled_ns` as read after what was due was posted.
    settled_ns: u64,
    /// Whether it posted any completion.
    posted: bool,
}

/// Feeds one of the pass's clock readings to the thread's chain of readings (`pauses`): the
/// pass's first (`first`) continues the chain unless the thread did something unbounded since
/// its previous pass (`since`). After a sleep the chain was restarted at the wake-up, so a
/// pause between the wake-up and this pass is still the machine's (issue 56).
#[inline(always)]
fn chain(since: Since, now: u64, first: bool) {
    pauses::this_thread(|w| match since {
        _ if !first => w.reading(now),
        Since::Spun | Since::Rested => w.reading(now),
        Since::Other => w.restart(now),
        Since::HostCode => w.host_code(now),
    })
}

/// The pass's look before it takes the new commands, when it has completions waiting (those
/// already due are posted) or, inline, after the host's own code. `None` otherwise: the pass
/// reads the clock after taking them.
#[inline(always)]
fn first_look(
    shared: &Shared,
    cell: &QueueCell,
    work: &mut QueueWork,
    since: Since,
) -> Option<Look> {
    let path = &shared.path;
    if let Some(due) = work.next_due_ns() {
        let mut now = path.clock.now_ns();
        chain(since, now, true);
        let mut posted = false;
        if due <= now {
            posted = settle(shared, cell, work, &mut now) > 0;
        }
        let settled_ns = shared.published.settled_ns.load(Ordering::Acquire);
        Some(Look {
            now_ns: now,
            settled_ns,
            posted,
        })
    } else if since == Since::HostCode {
        // Inline, this poll is the host's look (`PauseWatch::host_code`): read before the
        // commands are taken, whose taking is the emulator's work.
        let now = path.clock.now_ns();
        chain(since, now, true);
        let settled_ns = shared.published.settled_ns.load(Ordering::Acquire);
        Some(Look {
            now_ns: now,
            settled_ns,
            posted: false,
        })
    } else {
        None
    }
}

/// Inline, before the pass takes new commands: if something in the model fell due by the
/// pass's first reading, visits the model up to that reading only and posts what is due, in
/// `look` (`settled_ns` read again). Returns whether it visited.
#[inline(always)]
fn visit_before_taking(
    shared: &Shared,
    cell: &QueueCell,
    work: &mut QueueWork,
    look: &mut Look,
) -> bool {
    if shared.published.next_ns.load(Ordering::Acquire) > look.now_ns {
        return false;
    }
    let visited = visit(shared, work, Visit::IfFree, Some(look.now_ns));
    let mut now = look.now_ns;
    look.posted |= settle(shared, cell, work, &mut now) > 0;
    look.settled_ns = shared.published.settled_ns.load(Ordering::Acquire);
    visited
}

/// In a pass that did nothing else, runs a slice of the model's untimed work
/// (`DeviceModel::run_deferred`: a flash collection's map moves, 0.3 ms for a line of 10,000
/// pages, which a write used to do inside the model's lock while every completion due waited),
/// if it has any, the pass has no commands waiting for the model, nothing of this pair or the
/// model falls due within `DEFERRED_SLICE_ROOM_NS` of `now`, and no other thread holds the
/// model. Returns whether it ran one. The slice is declared as the pages it moved
/// (`pauses::ALLOW_NS_PER_MAP_MOVE`), so a pause of the machine in it is still found.
fn run_deferred_slice(shared: &Shared, work: &QueueWork, now: u64) -> bool {
    let published = &shared.published;
    if !published.deferred.load(Ordering::Relaxed) || !work.to_model.is_empty() {
        return false;
    }
    let next = published
        .next_ns
        .load(Ordering::Acquire)
        .min(work.next_due_ns().unwrap_or(NEVER));
    if next.saturating_sub(now) < DEFERRED_SLICE_ROOM_NS {
        return false;
    }
    let mut state = match shared.model.try_lock() {
        Ok(state) => state,
        Err(TryLockError::WouldBlock) => return false,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
    };
    let ModelState {
        core,
        map_moves_seen,
        ..
    } = &mut *state;
    let left = core.run_deferred(DEFERRED_SLICE_PAGES);
    published.deferred.store(left, Ordering::Relaxed);
    let allowed_ns = map_moves_allowance_ns(core, map_moves_seen);
    drop(state);
    pauses::this_thread(|w| w.allow_ns(allowed_ns));
    true
}

/// The time the flash collector's map moves since the last look (`seen`, moved on) may take
/// (`pauses::ALLOW_NS_PER_MAP_MOVE`): 0 on a device without an FTL.
#[inline]
fn map_moves_allowance_ns(core: &DeviceCore, seen: &mut u64) -> u64 {
    let moves = core.model().map_moves();
    let moved = moves - *seen;
    *seen = moves;
    moved * pauses::ALLOW_NS_PER_MAP_MOVE
}

/// The pass's visit to the model: with commands to hand over, one that waits for the lock
/// after `VISIT_TRIES` passes in a row found it taken; without, only when the model is behind
/// (`model_behind`) and nobody else is visiting. Returns whether it visited.
#[inline(always)]
fn visit_for_pass(shared: &Shared, work: &mut QueueWork, now: u64) -> bool {
    if !work.to_model.is_empty() {
        let how = if work.visit_misses + 1 >= VISIT_TRIES {
            Visit::Wait
        } else {
            Visit::IfFree
        };
        let done = visit(shared, work, how, None);
        work.visit_misses = if done { 0 } else { work.visit_misses + 1 };
        done
    } else if model_behind(shared, work, now) {
        visit(shared, work, Visit::IfFree, None)
    } else {
        false
    }
}

/// Waits on the clock for what is near, alone in flight: the model's own events (a piece
/// done, the completion computed) come first, then the completion's deadline; each is waited
/// for while it is within `NEAR_DEADLINE_NS` of this pass's reading (`now`, moved on), so the
/// wait as a whole is bounded by it. Returns whether it visited the model and posted.
#[inline(always)]
fn wait_near_deadline(
    shared: &Shared,
    cell: &QueueCell,
    work: &mut QueueWork,
    now: &mut u64,
) -> (bool, bool) {
    let published = &shared.published;
    let (mut visited, mut posted) = (false, false);
    loop {
        let next = published
            .next_ns
            .load(Ordering::Acquire)
            .min(work.next_due_ns().unwrap_or(NEVER));
        let alone = published.in_flight.load(Ordering::Relaxed) + work.due_len() <= 1;
        if !(next > *now && next - *now <= NEAR_DEADLINE_NS && alone) {
            break;
        }
        *now = shared.path.clock.spin_until(next);
        let reading = *now;
        pauses::this_thread(|w| w.reading(reading));
        if model_behind(shared, work, *now) {
            visited |= visit(shared, work, Visit::IfFree, None);
        }
        posted |= settle(shared, cell, work, now) > 0;
    }
    (visited, posted)
}

/// Whether the model must be visited before this pair can go on: an event of the model is
/// due, or a completion of the pair is due but the model has not settled up to its deadline
/// (`Published::settled_ns`: it may yet finish one of the pair's commands due earlier).
/// Without the second, a completion due after the last visit, with nothing due in the model
/// since, would wait for a visit nobody makes.
fn model_behind(shared: &Shared, work: &QueueWork, now: u64) -> bool {
    let published = &shared.published;
    published.next_ns.load(Ordering::Acquire) <= now
        || work
            .next_due_ns()
            .is_some_and(|due| due <= now && published.settled_ns.load(Ordering::Acquire) < due)
}

/// When the model takes a command: at its doorbell, but no earlier than the time the model
/// was last advanced to (`floor`: its time never goes back; a command that reached its queue
/// after that, stamped before, was held up between its stamp and its doorbell) and no later
/// than the visit's reading `now` (a stamp from the future is not the host's clock's). The
/// stamp is the host's, or the time the command was taken where the host gives none
/// (`queue_work::accept`); 0 (a command taken in the clock's first nanosecond) arrives at `now`.
#[inline]
fn arrival(s: &Submission, floor: u64, now: u64) -> u64 {
    if s.doorbell_ns == 0 {
        now
    } else {
        s.doorbell_ns.clamp(floor.min(now), now)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    /// The pass has commands to hand over: it waits for the lock (one visit at most).
    Wait,
    /// The pass only found something due: if another thread is visiting, that one does it.
    IfFree,
}

/// One visit to the serial model: advance it to the clock, hand it the pass's commands, and
/// deliver what it finished (this pair's to `work.arrived`, others' to their mailboxes), then
/// publish how far it got. Returns whether it visited.
fn visit(shared: &Shared, work: &mut QueueWork, how: Visit, until: Option<u64>) -> bool {
    let Some(mut state) = lock_for_visit(shared, how) else {
        return false;
    };
    let entered = ticks();
    let path = &shared.path;
    // Read inside the lock, so the model's time never goes back from one visitor to the next.
    let now = path.clock.now_ns();
    // A wait for the lock is another thread's visit (or its pause): not measured as this
    // thread's. What the visit hands over and finishes is declared work.
    pauses::this_thread(|w| match how {
        Visit::Wait => w.restart(now),
        Visit::IfFree => w.reading(now),
    });
    let (commands, refused) = hand_over_and_advance(shared, &mut state, work, now, until);
    let ModelState {
        core,
        held_ticks,
        map_moves_seen,
        has_ftl,
        ..
    } = &mut *state;
    // Declared per command and per page the flash collector moved, not as the visit's wall
    // time: that would declare a preemption inside the visit as work too (tried in issue 56:
    // the application study's inline dram sessions lost their machine-late share to the
    // emulator's own, 0.8 → 2-8 µs at p99).
    let mut allowed_ns = pauses::allowance_ns(commands, 0);
    if *has_ftl {
        allowed_ns += map_moves_allowance_ns(core, map_moves_seen);
    }
    *held_ticks += hold_ends(shared, now, entered, commands, allowed_ns);
    drop(state);
    pauses::this_thread(|w| w.allow_ns(allowed_ns));
    for (s, status) in refused {
        work.refuse(path, s, status);
    }
    true
}

/// The model's lock for a visit: waited for (`Visit::Wait`), or `None` if another thread holds
/// it (`Visit::IfFree`).
#[inline(always)]
fn lock_for_visit(shared: &Shared, how: Visit) -> Option<MutexGuard<'_, ModelState>> {
    match how {
        Visit::Wait => Some(lock(&shared.model)),
        Visit::IfFree => match shared.model.try_lock() {
            Ok(state) => Some(state),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        },
    }
}

/// The model's work in a visit that read the clock at `now`, under its lock (`state`): hands
/// it the pass's commands, advances it (to `until` if given), delivers what it finished (this
/// pair's to `work.arrived`, others' to their mailboxes) and publishes how far it got.
/// Returns the commands handed over and finished, and those the model refused.
#[inline(always)]
fn hand_over_and_advance(
    shared: &Shared,
    state: &mut ModelState,
    work: &mut QueueWork,
    now: u64,
    until: Option<u64>,
) -> (u64, Vec<(Submission, Status)>) {
    let path = &shared.path;
    let mut finished = 0u64;
    let ModelState {
        core,
        cells,
        outgoing,
        handed,
        has_ftl,
        ..
    } = state;
    let own = work.id();
    let (arrived, to_model) = (&mut work.arrived, &mut work.to_model);
    let mut deliver = |f: Finished| {
        finished += 1;
        let queue = usize::from(f.queue);
        if f.queue == own {
            arrived.push(f);
        } else if let Some(out) = outgoing.get_mut(queue).filter(|_| cells[queue].is_some()) {
            out.push(f);
        } else {
            // Its queue pair was detached: nobody to tell, and the tag is free again.
            path.tags.release(f.tag.index());
        }
    };
    let mut refused = Vec::new();
    let handed_now = to_model.len() as u64;
    *handed += handed_now;
    // Each command goes to the model at its doorbell (`arrival`), in doorbell order, the model
    // advanced to each in turn: taken late by a thread that was not running, it is still the
    // command the device saw then (issue 56). Usually in order already.
    let floor = shared.published.advanced_ns.load(Ordering::Relaxed);
    if to_model.len() > 1 {
        to_model.sort_by_key(|s| arrival(s, floor, now));
    }
    for s in to_model.drain(..) {
        let at = arrival(&s, floor, now);
        core.advance(at, &mut deliver);
        if let Err(status) = core.submit(s, at) {
            refused.push((s, status));
        }
    }
    // To the clock (or to `until`, a pass's earlier reading, so the commands it took and hands
    // over next can still arrive then): for what fell due since, and what the new commands
    // finished at once (a `null` device's with no latency), whose completions go out in this
    // pass rather than wait for the next visit. A compare when nothing is due.
    let advanced = until.map_or(now, |u| u.clamp(floor.min(now), now));
    core.advance(advanced, &mut deliver);
    for (cell, out) in cells.iter().zip(outgoing.iter_mut()) {
        if let Some(cell) = cell {
            cell.mailbox.put_all(out);
        }
    }
    publish(&shared.published, core, advanced, *has_ftl);
    (finished + handed_now, refused)
}

/// Publishes how far the model got (`Published`), after a visit advanced it to `advanced`
/// and delivered what it finished, with its lock still held.
fn publish(published: &Published, core: &DeviceCore, advanced: u64, has_ftl: bool) {
    published
        .in_flight
        .store(core.in_flight(), Ordering::Relaxed);
    published
        .next_ns
        .store(core.next_event_ns().unwrap_or(NEVER), Ordering::Release);
    published.advanced_ns.store(advanced, Ordering::Relaxed);
    if has_ftl {
        published
            .deferred
            .store(core.model().has_deferred(), Ordering::Relaxed);
    }
    // After the deliveries (see `Published::settled_ns`).
    let next = core.next_event_ns().unwrap_or(NEVER);
    published
        .settled_ns
        .store(next.max(advanced), Ordering::Release);
}

/// The end of a visit that entered at `entered` (`clock::ticks`), read the clock at `now_ns`
/// and did `commands` commands' work, allowed `work_ns` in all, with the model's lock still
/// held: returns the ticks it held the lock. A visit longer than its work allows was paused: the threads waiting for the
/// lock meanwhile take the pause in (`HolderPauses`), published before the lock is let go. The
/// tick count sorts out the short visits without a clock reading (22-31 ns, inside the lock): a
/// time-stamp counter runs at half a tick per nanosecond or faster, and `ticks` elsewhere is
/// the clock.
fn hold_ends(shared: &Shared, now_ns: u64, entered: u64, commands: u64, work_ns: u64) -> u64 {
    if commands > 0 && shared.visit_stall_ns.load(Ordering::Relaxed) > 0 {
        let ns = shared.visit_stall_ns.swap(0, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_nanos(ns));
    }
    let held = ticks().wrapping_sub(entered);
    let allowed_ns = PAUSE_NS + work_ns;
    if held > allowed_ns / 2 {
        let left = shared.path.clock.now_ns();
        if left - now_ns > allowed_ns {
            shared.holder_pauses.publish(now_ns, left);
        }
    }
    held
}

/// Takes what the model finished for this pair (from its own visits and its mailbox), copies
/// the small reads' data, and posts, in deadline order, every completion whose deadline has
/// passed and up to which the model has settled. `now` is refreshed if it was behind the
/// model. Returns how many it posted.
fn settle(shared: &Shared, cell: &QueueCell, work: &mut QueueWork, now: &mut u64) -> usize {
    let path = &shared.path;
    // Read before the mailbox: everything of this pair due by this time is in it (Acquire).
    let settled = shared.published.settled_ns.load(Ordering::Acquire);
    let advanced = shared.published.advanced_ns.load(Ordering::Relaxed);
    // What fell due while another thread held the model's lock paused is held by its pause.
    pauses::this_thread(|w| shared.holder_pauses.import(w));
    cell.mailbox.take_into(&mut work.arrived);
    *now = (*now).max(advanced);
    let mut arrived = std::mem::take(&mut work.arrived);
    let posted = work.settle(path, &mut arrived, settled.min(*now));
    work.arrived = arrived;
    posted
}
