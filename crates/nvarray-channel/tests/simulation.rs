//! The channel daemon under a deterministic simulation (issue 58, in the manner of
//! TigerBeetle's VOPR): one thread runs the daemon (`SimulatedDaemon`: no threads, no
//! listening socket), several simulated clients of two users, and a device (the `null`
//! preset, which completes every command at once, so wall time changes nothing) on a durable
//! file whose reads, writes, msyncs and fsyncs fail at random, all drawn from one seed.
//! Clients connect, submit reads, writes and flushes (some outside their grants), push
//! malformed entries, poll, and crash with commands in flight, at random points between the
//! daemon's passes.
//!
//! Invariants, checked as the run goes and when it has drained:
//! - every command submitted completes exactly once, and nothing else does: each malformed
//!   entry gets one refusal, which the client counts as a stray completion, and no other
//!   completion is stray;
//! - a command the client's grants or the device's limits forbid is refused with its status;
//! - a command that may run fails only where a fault was injected: each read or write is one
//!   backing operation, so the I/O errors clients see on reads and writes are the read and
//!   write faults injected, less at most those of commands whose client crashed first; and no
//!   flush succeeds after one failed;
//! - every acknowledged write reads back until overwritten (a failed one may show, sector by
//!   sector, the old or the new data; so may one whose client crashed before its completion).
//!
//! `NVARRAY_SIM_SEEDS` seeds from `NVARRAY_SIM_FIRST_SEED` (the test command runs 40;
//! `scripts/campaign.sh channel-sim` a million), each `NVARRAY_SIM_STEPS` steps. A failure
//! prints its seed and step and the command that replays it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use nvarray_channel::layout::{SqEntry, SQ_HEAD, SQ_TAIL};
use nvarray_channel::{Channel, ChannelError, ChannelStatus, Grant, Op, SimulatedDaemon};
use nvarray_host::options::{BackingFaults, BackingOp};
use nvarray_host::simulation::{pattern, Seeds, SimulatedDevice};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SIZE_BYTES: u64 = 1 << 20;
const SECTOR: u64 = 512;
const SECTORS: u64 = SIZE_BYTES / SECTOR;
/// The second user may read the first half only.
const HALF: u64 = SIZE_BYTES / 2;
const UID_ALL: u32 = 5001;
const UID_HALF: u32 = 5002;
const CLIENTS_MAX: usize = 4;
/// Commands a client keeps in flight at most (its queue depth).
const DEPTH: u32 = 8;
/// Sectors in one command at most (a DMA slot of the region).
const COMMAND_SECTORS_MAX: u64 = 16;

/// Sector `s` as write `id` leaves it (zeroes: never written).
fn content(id: u32, s: u64) -> Vec<u8> {
    pattern(id, s, SECTOR)
}

/// What a command in flight was, to judge its completion.
#[derive(Clone, Debug)]
struct Expect {
    op: Op,
    first: u64,
    n: u64,
    /// The write's id, or 0.
    id: u32,
    /// The DMA slot its data is in.
    slot: u64,
    /// The status it must get if not `Ok`/`IoError` (a refusal).
    refused: Option<ChannelStatus>,
    /// A flush had been seen failing when this was submitted (a flush then must fail too;
    /// one submitted before may have run before the failure, and succeeded).
    after_failed_flush: bool,
}

struct Client {
    channel: Channel,
    uid: u32,
    in_flight: HashMap<u64, Expect>,
    free_slots: Vec<u64>,
    /// Malformed entries it pushed: each must come back as one stray completion.
    malformed: u64,
}

struct Sim {
    seed: u64,
    step: u64,
    rng: SmallRng,
    daemon: SimulatedDaemon,
    faults: Arc<BackingFaults>,
    clients: Vec<Client>,
    /// Which writes each sector may show.
    may_show: Vec<Vec<u32>>,
    /// Sectors a command in flight touches: no other command takes them meanwhile, so what a
    /// read shows is defined.
    busy: Vec<bool>,
    next_id: u32,
    next_user_data: u64,
    next_pid: u32,
    io_errors: u64,
    /// Reads and writes in flight when their client crashed: a fault on one is an error
    /// nobody sees.
    unobserved: u64,
    flush_failed: bool,
    counts: BTreeMap<&'static str, u64>,
}

impl Sim {
    fn fail(&self, what: String) -> ! {
        let message = Seeds::failure(self.seed, self.step, &what, "nvarray-channel", "simulation");
        panic!("{message}")
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    fn read_write_faults(&self) -> u64 {
        self.faults.injected(BackingOp::Read) + self.faults.injected(BackingOp::Write)
    }

    fn connect(&mut self) {
        let uid = if self.rng.gen_bool(0.7) {
            UID_ALL
        } else {
            UID_HALF
        };
        self.next_pid += 1;
        let full = self.daemon.channels() >= CLIENTS_MAX;
        let buffer = DEPTH as u64 * COMMAND_SECTORS_MAX * SECTOR;
        match self.daemon.connect(self.next_pid, uid, DEPTH, buffer) {
            Ok(channel) if !full => {
                self.count("client connected");
                self.clients.push(Client {
                    channel,
                    uid,
                    in_flight: HashMap::new(),
                    free_slots: (0..u64::from(DEPTH)).collect(),
                    malformed: 0,
                });
            }
            Err(ChannelError::Refused { errno, .. }) if full && errno == libc::EBUSY => {
                self.count("client refused: daemon full");
            }
            Ok(_) => self.fail("a channel past the daemon's most".into()),
            Err(e) => self.fail(format!("connect: {e}")),
        }
    }

    /// A free extent of up to `COMMAND_SECTORS_MAX` sectors, if one turns up.
    fn extent(&mut self) -> Option<(u64, u64)> {
        for _ in 0..8 {
            let n = self.rng.gen_range(1..=COMMAND_SECTORS_MAX);
            let first = self.rng.gen_range(0..=SECTORS - n);
            if !self.busy[first as usize..(first + n) as usize]
                .iter()
                .any(|&b| b)
            {
                return Some((first, n));
            }
        }
        None
    }

    /// Whether client `c`'s submission ring has a free entry: `submit` counts only ids, and a
    /// malformed entry takes a ring entry without one (pushing into a full ring overwrites
    /// what the daemon has not taken yet, the client's own fault).
    fn ring_has_room(&self, c: usize) -> bool {
        let channel = &self.clients[c].channel;
        let region = channel.region();
        let waiting = region
            .word(SQ_TAIL)
            .load(Ordering::Acquire)
            .wrapping_sub(region.word(SQ_HEAD).load(Ordering::Acquire));
        waiting < channel.geometry().ring_entries
    }

    fn submit(&mut self, c: usize) {
        if self.clients[c].free_slots.is_empty() || !self.ring_has_room(c) {
            return;
        }
        let op = match self.rng.gen_range(0..10) {
            0..=3 => Op::Read,
            4..=8 => Op::Write,
            _ => Op::Flush,
        };
        let (first, n) = if op == Op::Flush {
            (0, 0)
        } else {
            match self.extent() {
                Some(e) => e,
                None => return,
            }
        };
        let uid = self.clients[c].uid;
        let end = (first + n) * SECTOR;
        let refused = match op {
            Op::Write if uid == UID_HALF => Some(ChannelStatus::PermissionDenied),
            Op::Read if uid == UID_HALF && end > HALF => Some(ChannelStatus::PermissionDenied),
            _ => None,
        };
        let slot = self.clients[c].free_slots.pop().expect("checked");
        let buf = slot * COMMAND_SECTORS_MAX * SECTOR;
        let mut id = 0;
        if op == Op::Write {
            self.next_id += 1;
            id = self.next_id;
            let data: Vec<u8> = (first..first + n).flat_map(|s| content(id, s)).collect();
            self.clients[c].channel.fill(buf, &data);
        }
        self.next_user_data += 1;
        let user_data = self.next_user_data;
        let submitted =
            self.clients[c]
                .channel
                .submit(op, first * SECTOR, (n * SECTOR) as u32, buf, user_data);
        if let Err(e) = submitted {
            self.fail(format!("submit with a free slot: {e:?}"));
        }
        for s in first..first + n {
            self.busy[s as usize] = true;
        }
        self.count(match op {
            Op::Read => "read",
            Op::Write => "write",
            _ => "flush",
        });
        self.clients[c].in_flight.insert(
            user_data,
            Expect {
                op,
                first,
                n,
                id,
                slot,
                refused,
                after_failed_flush: self.flush_failed,
            },
        );
    }

    /// A malformed entry: an id past the queue depth (so it can be no command's), any
    /// fields. The daemon must refuse it alone; the client counts the refusal as a stray.
    fn push_garbage(&mut self, c: usize) {
        if !self.ring_has_room(c) {
            return;
        }
        let entry = SqEntry {
            op: self.rng.gen_range(0..20),
            id: self.rng.gen_range(DEPTH..u32::MAX),
            offset: self.rng.gen(),
            len: self.rng.gen(),
            reserved: self.rng.gen(),
            buf: self.rng.gen(),
        };
        self.clients[c].channel.push_raw(entry);
        self.clients[c].malformed += 1;
        self.count("malformed entry");
    }

    /// Client `c` collects its completions and judges each; returns how many.
    fn poll(&mut self, c: usize) -> usize {
        let mut done = Vec::new();
        let n = self.clients[c].channel.poll(|d| done.push(d));
        for d in done {
            let Some(e) = self.clients[c].in_flight.remove(&d.user_data) else {
                self.fail(format!(
                    "a completion for request {} never made",
                    d.user_data
                ));
            };
            self.judge(c, &e, d.status);
            self.clients[c].free_slots.push(e.slot);
            for s in e.first..e.first + e.n {
                self.busy[s as usize] = false;
            }
        }
        n
    }

    fn judge(&mut self, c: usize, e: &Expect, status: ChannelStatus) {
        if let Some(want) = e.refused {
            if status != want {
                self.fail(format!("{:?} expected {want:?}, got {status:?}", e.op));
            }
            self.count("refused as expected");
            return;
        }
        match (e.op, status) {
            (Op::Flush, ChannelStatus::Ok) if e.after_failed_flush => {
                self.fail("a flush succeeded after one failed".into())
            }
            (Op::Flush, ChannelStatus::Ok) => {}
            (Op::Flush, ChannelStatus::IoError)
                if self.faults.injected(BackingOp::Msync)
                    + self.faults.injected(BackingOp::Fsync)
                    == 0 =>
            {
                self.fail("a flush failed with no fault injected".into())
            }
            (Op::Flush, ChannelStatus::IoError) => {
                self.flush_failed = true;
                self.count("flush failed");
            }
            (Op::Read, ChannelStatus::Ok) => {
                let mut data = vec![0u8; (e.n * SECTOR) as usize];
                let buf = e.slot * COMMAND_SECTORS_MAX * SECTOR;
                self.clients[c].channel.copy_from_region(buf, &mut data);
                for (s, got) in (e.first..).zip(data.chunks(SECTOR as usize)) {
                    let may = &self.may_show[s as usize];
                    if !may.iter().any(|&id| got == content(id, s)) {
                        self.fail(format!("read: sector {s} may show writes {may:?}"));
                    }
                }
            }
            (Op::Write, ChannelStatus::Ok) => {
                for s in e.first..e.first + e.n {
                    self.may_show[s as usize] = vec![e.id];
                }
            }
            (Op::Write, ChannelStatus::IoError) => {
                self.io_errors += 1;
                self.maybe_written(e);
            }
            (Op::Read, ChannelStatus::IoError) => self.io_errors += 1,
            (op, status) => self.fail(format!("{op:?} got {status:?}")),
        }
    }

    fn maybe_written(&mut self, e: &Expect) {
        for s in e.first..e.first + e.n {
            self.may_show[s as usize].push(e.id);
        }
    }

    /// A client dies with commands in flight: its writes may or may not land.
    fn crash(&mut self, c: usize) {
        let client = self.clients.swap_remove(c);
        for e in client.in_flight.values() {
            if e.op == Op::Write && e.refused.is_none() {
                self.maybe_written(e);
            }
            if e.op != Op::Flush && e.refused.is_none() {
                self.unobserved += 1;
            }
            for s in e.first..e.first + e.n {
                self.busy[s as usize] = false;
            }
        }
        drop(client);
        self.count("client crashed");
        // The sectors it had in flight are free to others only once the daemon has finished
        // its commands: step until it has retired the channel.
        let before = self.daemon.channels();
        for _ in 0..1000 {
            self.daemon.step();
            if self.daemon.channels() < before {
                return;
            }
        }
        self.fail("a crashed client's channel was never retired".into());
    }

    fn run_step(&mut self) {
        if self.clients.is_empty() {
            self.connect();
        }
        let c = self.rng.gen_range(0..self.clients.len());
        match self.rng.gen_range(0..100) {
            0..=34 => self.submit(c),
            35..=36 => self.push_garbage(c),
            37..=69 => {
                self.daemon.step();
            }
            70..=96 => {
                self.poll(c);
            }
            97 => self.crash(c),
            _ => self.connect(),
        }
        self.step += 1;
    }

    /// Steps the daemon and polls every client until nothing is in flight; then the
    /// bookkeeping must balance.
    fn drain(&mut self) {
        // Until a pass finds nothing to do and no client anything to collect (malformed
        // entries may wait in a ring whose completions the clients had not yet made room for).
        for _ in 0..1000 {
            let work = self.daemon.step();
            let collected: usize = (0..self.clients.len()).map(|c| self.poll(c)).sum();
            let idle = self.clients.iter().all(|c| c.in_flight.is_empty());
            if work == 0 && collected == 0 && idle && self.daemon.in_flight() == 0 {
                break;
            }
        }
        if let Some(c) = self.clients.iter().find(|c| !c.in_flight.is_empty()) {
            self.fail(format!("{} commands never completed", c.in_flight.len()));
        }
        for c in &self.clients {
            if c.channel.stray_completions != c.malformed {
                self.fail(format!(
                    "a client got {} completions for no command of its own, having pushed {} \
                     malformed entries",
                    c.channel.stray_completions, c.malformed
                ));
            }
        }
        // Each read or write makes one backing operation, so each fault fails exactly one
        // command: the errors clients saw, plus those of crashed clients they could not.
        let faults = self.read_write_faults();
        if self.io_errors > faults || faults > self.io_errors + self.unobserved {
            self.fail(format!(
                "{} reads and writes failed (and {} were in flight when their client crashed), \
                 {faults} read and write faults injected",
                self.io_errors, self.unobserved
            ));
        }
    }
}

fn simulate(seed: u64, steps: u64) -> BTreeMap<&'static str, u64> {
    // In memory (tmpfs) where there is one: a seed's device opens in a fraction of the time.
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let plan = format!("one-in=40,seed={seed},ops=read+write+msync+fsync");
    let faults = Arc::new(BackingFaults::parse(&plan).unwrap());
    let device = SimulatedDevice {
        size_bytes: SIZE_BYTES,
        tags: None,
        command_bytes: (COMMAND_SECTORS_MAX * SECTOR) as u32,
    };
    let device = Arc::new(device.open(&dir.path().join("image"), &faults).unwrap());
    let grants: Vec<Grant> = vec![
        format!("all:0:{SIZE_BYTES}:rw:{UID_ALL}").parse().unwrap(),
        format!("half:0:{HALF}:r:{UID_HALF}").parse().unwrap(),
    ];
    let daemon = SimulatedDaemon::new(device, grants, CLIENTS_MAX).unwrap();
    let mut sim = Sim {
        seed,
        step: 0,
        rng: SmallRng::seed_from_u64(seed),
        daemon,
        faults,
        clients: Vec::new(),
        may_show: vec![vec![0]; SECTORS as usize],
        busy: vec![false; SECTORS as usize],
        next_id: 0,
        next_user_data: 0,
        next_pid: 1000,
        io_errors: 0,
        unobserved: 0,
        flush_failed: false,
        counts: BTreeMap::new(),
    };
    while sim.step < steps {
        sim.run_step();
    }
    sim.drain();
    let counts = std::mem::take(&mut sim.counts);
    let Sim {
        daemon, clients, ..
    } = sim;
    drop(clients);
    // Its last flush fails exactly where a flush failed before or a fault hits it.
    let _ = daemon.shutdown();
    counts
}

#[test]
fn the_channel_daemon_keeps_its_invariants_under_a_seeded_simulation() {
    Seeds::from_env(40, 2000).run("channel simulation", simulate);
}
