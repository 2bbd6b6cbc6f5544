//! The NBD server under a deterministic simulation (issue 58, in the manner of TigerBeetle's
//! VOPR): one thread runs the server (`SimulatedServer`: the server's own handshake and
//! connection turns, no threads, no sockets), several simulated clients on in-memory streams,
//! and a device (the `null` preset, which completes every command at once, so wall time
//! changes nothing; 8 tags and 8 KiB commands, so requests split) on a durable file whose reads, writes, msyncs and fsyncs fail at random, all drawn
//! from one seed. Clients connect (some with garbage or silence instead of a handshake, some
//! past the connection limit), pipeline reads, writes, write-zeroes, trims and flushes, with
//! and without FUA and simple or structured replies, send requests the server must refuse,
//! and leave: politely (`NBD_CMD_DISC`), by crashing with requests in flight, by stalling or
//! hanging up half way through a write's payload, or by sending a bad magic; at random points
//! between the server's steps. The server's clock is the simulation's, moved on by up to
//! 10 µs a step, so the connection loop's choices that depend on time are the seed's too.
//!
//! Invariants, checked as the run goes and when it has drained:
//! - no reply for a request never made, and none answered twice (a reply part whose cookie is
//!   not in flight);
//! - every request of a client that is still there is answered; a refused request gets its
//!   errno;
//! - a request fails only where a fault was injected while it was in flight (or, for a flush
//!   or a FUA request, where a flush failed before it), and no flush succeeds after one
//!   failed;
//! - every fault surfaces: of the requests in flight when a step injected one, at least one
//!   failed or was left unanswered (its client gone);
//! - every acknowledged write reads back until overwritten (a failed one may show, block by
//!   block, the old or the new data; so may one whose client left before its reply).
//!
//! `NVARRAY_SIM_SEEDS` seeds from `NVARRAY_SIM_FIRST_SEED` (the test command runs 40;
//! `scripts/campaign.sh nbd-sim` a million), each `NVARRAY_SIM_STEPS` steps. A failure prints
//! its seed and step and the command that replays it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nvarray_host::options::{BackingFaults, BackingOp};
use nvarray_host::simulation::{pattern, Seeds, SimulatedDevice};
use nvarray_nbd::client::{handshake_request, read_handshake_replies, read_reply_part, Part};
use nvarray_nbd::io::Stream;
use nvarray_nbd::proto::*;
use nvarray_nbd::SimulatedServer;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

const SIZE_BYTES: u64 = 1 << 20;
const BLOCK: u64 = 512;
const BLOCKS: u64 = SIZE_BYTES / BLOCK;
/// The device's largest command: a request over it is split.
const COMMAND_BYTES: u64 = 8 * 1024;
const TAGS: u32 = 8;
/// Clients at most; the server serves one fewer, so some are refused.
const CLIENTS_MAX: usize = 4;
const CONNECTIONS_MAX: usize = 3;
/// Requests a client keeps in flight at most.
const DEPTH: usize = 8;
/// Blocks in one request at most (up to four commands).
const REQUEST_BLOCKS_MAX: u64 = 4 * COMMAND_BYTES / BLOCK;
/// What a block may hold besides writes: anything (trimmed).
const ANY: u32 = u32::MAX;

const EIO: u32 = 5;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

/// Block `b` as write `id` leaves it (zeroes: id 0, never written or written with zeroes).
fn content(id: u32, b: u64) -> Vec<u8> {
    pattern(id, b, BLOCK)
}

/// A request in flight, to judge its reply.
#[derive(Clone, Debug)]
struct Expect {
    kind: u16,
    first: u64,
    n: u64,
    /// The write's id (0 for write-zeroes and the rest).
    id: u32,
    fua: bool,
    /// The errno it must get, for a request the server must refuse.
    refused: Option<u32>,
    /// Faults injected when it was sent.
    faults_before: u64,
    /// A flush had failed when it was sent: a flush, or a FUA request, must fail too.
    after_failed_flush: bool,
    /// Whether it holds its blocks in `busy`.
    holds_blocks: bool,
    /// A read's data, as structured chunks bring it.
    data: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Its handshake sent; the replies not read yet. `may_be_refused`: the server was full
    /// when it connected.
    Handshaking {
        structured: bool,
        may_be_refused: bool,
    },
    Ready,
    /// It said goodbye (`NBD_CMD_DISC`): the server answers what is in flight, then closes.
    Leaving,
    /// It broke the protocol or stalled: the server closes; what was in flight may stay
    /// unanswered.
    Dropped,
    /// It sent nothing, not even its handshake: the server closes.
    Silent,
}

struct Client {
    id: u64,
    /// The server's id for its connection.
    connection: u64,
    stream: Stream,
    state: State,
    structured: bool,
    input: Vec<u8>,
    in_flight: HashMap<u64, Expect>,
    next_cookie: u64,
}

/// The requests in flight when a step injected faults: one of them must fail or be left
/// unanswered.
struct FaultGroup {
    step: u64,
    pending: HashSet<(u64, u64)>,
}

struct Sim {
    seed: u64,
    step: u64,
    rng: SmallRng,
    server: Option<SimulatedServer>,
    faults: Arc<BackingFaults>,
    /// Faults injected before the simulation began (opening the device).
    faults_at_start: u64,
    clients: Vec<Client>,
    next_client: u64,
    /// Which writes each block may show (`ANY`: anything).
    may_show: Vec<Vec<u32>>,
    /// Blocks a request in flight touches: no other request takes them meanwhile, so what a
    /// read shows is defined.
    busy: Vec<bool>,
    next_write: u32,
    flush_failed: bool,
    fault_groups: Vec<FaultGroup>,
    /// Requests of a client that left, while the server finishes its connection.
    orphans: Vec<(u64, u64)>,
    /// The servers' messages (a refused or dropped connection), counted, not printed.
    messages: Arc<AtomicU64>,
    /// The file the servers' devices open.
    image: PathBuf,
    counts: BTreeMap<&'static str, u64>,
}

impl Sim {
    fn fail(&self, what: String) -> ! {
        let message = Seeds::failure(self.seed, self.step, &what, "nvarray-nbd", "simulation");
        panic!("{message}")
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    fn server(&mut self) -> &mut SimulatedServer {
        self.server.as_mut().expect("a server")
    }

    fn injected(&self) -> u64 {
        self.faults.injected_total() - self.faults_at_start
    }

    fn sync_faults(&self) -> u64 {
        self.faults.injected(BackingOp::Msync) + self.faults.injected(BackingOp::Fsync)
    }

    /// One step of the server; the requests in flight when it injects faults form a group.
    fn server_step(&mut self) -> usize {
        let before = self.injected();
        let sync_before = self.sync_faults();
        // The server's time moves on by up to twice its 5 µs tick between steps, so a step
        // with commands in flight sometimes looks at its clients and sometimes not.
        let by = Duration::from_nanos(self.rng.gen_range(0..=10_000));
        self.server().time().advance(by);
        let progressed = self.server().step();
        // A failed msync or fsync fails a flush (or a FUA request's): from now on no flush
        // may succeed.
        if self.sync_faults() > sync_before {
            self.flush_failed = true;
        }
        if self.injected() > before {
            let pending: HashSet<(u64, u64)> = self
                .clients
                .iter()
                .flat_map(|c| {
                    c.in_flight
                        .iter()
                        .filter(|(_, e)| e.refused.is_none())
                        .map(|(&cookie, _)| (c.id, cookie))
                })
                .chain(self.orphans.iter().copied())
                .collect();
            if pending.is_empty() {
                self.fail(format!(
                    "{} faults injected with no request in flight",
                    self.injected() - before
                ));
            }
            self.fault_groups.push(FaultGroup {
                step: self.step,
                pending,
            });
        }
        progressed
    }

    /// Request (`client`, `cookie`) has its outcome: a failure or no reply satisfies every
    /// fault group it is in; a success leaves the groups to their other requests.
    fn resolved(&mut self, client: u64, cookie: u64, failed_or_unanswered: bool) {
        let key = (client, cookie);
        if failed_or_unanswered {
            self.fault_groups.retain(|g| !g.pending.contains(&key));
            return;
        }
        for g in &mut self.fault_groups {
            g.pending.remove(&key);
        }
        if let Some(g) = self.fault_groups.iter().find(|g| g.pending.is_empty()) {
            self.fail(format!(
                "a fault injected at step {} surfaced nowhere: every request in flight then \
                 succeeded",
                g.step
            ));
        }
    }

    fn connect(&mut self) {
        if self.clients.len() >= CLIENTS_MAX {
            return;
        }
        // Every client still here may hold a serving slot (over-counting only lets a refusal
        // through; a connection the server has closed is no longer a client).
        let serving = self.clients.len();
        let (connection, stream) = self.server().connect();
        self.next_client += 1;
        let mut client = Client {
            id: self.next_client,
            connection,
            stream,
            state: State::Ready,
            structured: false,
            input: Vec::new(),
            in_flight: HashMap::new(),
            next_cookie: 0,
        };
        match self.rng.gen_range(0..20) {
            0 => {
                self.count("handshake: garbage, then hang up");
                let mut junk = vec![0u8; self.rng.gen_range(0..64)];
                self.rng.fill_bytes(&mut junk);
                if self.rng.gen_bool(0.5) {
                    junk.splice(0..0, FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
                }
                let _ = client.stream.write_all(&junk);
                drop(client);
                self.await_close(connection, "a garbage handshake");
            }
            1 => {
                self.count("handshake: silence");
                // Nothing sent by the server's next step: a client silent for the handshake's
                // whole idle time, closed.
                client.state = State::Silent;
                self.clients.push(client);
            }
            _ => {
                let structured = self.rng.gen_bool(0.5);
                let request = handshake_request("", structured);
                client.stream.write_all(&request).unwrap();
                client.state = State::Handshaking {
                    structured,
                    may_be_refused: serving >= CONNECTIONS_MAX,
                };
                self.clients.push(client);
            }
        }
    }

    /// Steps the server until connection `connection` has closed.
    fn await_close(&mut self, connection: u64, what: &str) {
        for _ in 0..1000 {
            if !self.server().serves(connection) {
                return;
            }
            self.server_step();
        }
        self.fail(format!("the server never closed {what}"));
    }

    /// A free extent of 1 to `max` blocks, if one turns up.
    fn extent(&mut self, max: u64) -> Option<(u64, u64)> {
        for _ in 0..8 {
            let n = self.rng.gen_range(1..=max);
            let first = self.rng.gen_range(0..=BLOCKS - n);
            if !self.busy[first as usize..(first + n) as usize]
                .iter()
                .any(|&b| b)
            {
                return Some((first, n));
            }
        }
        None
    }

    fn send(&mut self, c: usize, header: RequestHeader, payload: &[u8]) {
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(payload);
        if let Err(e) = self.clients[c].stream.write_all(&bytes) {
            self.fail(format!("sending a request to a connection still open: {e}"));
        }
    }

    /// Client `c` sends a request the server must carry out.
    fn submit(&mut self, c: usize) {
        let kind = match self.rng.gen_range(0..20) {
            0..=6 => CMD_READ,
            7..=13 => CMD_WRITE,
            14..=15 => CMD_WRITE_ZEROES,
            16 => CMD_TRIM,
            _ => CMD_FLUSH,
        };
        let (first, n) = if kind == CMD_FLUSH {
            (0, 0)
        } else {
            match self.extent(REQUEST_BLOCKS_MAX) {
                Some(e) => e,
                None => return,
            }
        };
        let fua = kind != CMD_READ && kind != CMD_FLUSH && self.rng.gen_bool(0.3);
        let mut id = 0;
        let mut payload = Vec::new();
        if kind == CMD_WRITE {
            self.next_write += 1;
            id = self.next_write;
            payload = (first..first + n).flat_map(|b| content(id, b)).collect();
        }
        let client = &mut self.clients[c];
        client.next_cookie += 1;
        let cookie = client.next_cookie;
        let header = RequestHeader {
            magic: REQUEST_MAGIC,
            flags: if fua { CMD_FLAG_FUA } else { 0 },
            kind,
            cookie,
            offset_bytes: first * BLOCK,
            len_bytes: (n * BLOCK) as u32,
        };
        self.send(c, header, &payload);
        for b in first..first + n {
            self.busy[b as usize] = true;
        }
        let expect = Expect {
            kind,
            first,
            n,
            id,
            fua,
            refused: None,
            faults_before: self.injected(),
            after_failed_flush: self.flush_failed,
            holds_blocks: true,
            data: vec![
                0u8;
                if kind == CMD_READ {
                    (n * BLOCK) as usize
                } else {
                    0
                }
            ],
        };
        self.clients[c].in_flight.insert(cookie, expect);
        self.count(match kind {
            CMD_READ => "read",
            CMD_WRITE if fua => "write, FUA",
            CMD_WRITE => "write",
            CMD_WRITE_ZEROES => "write zeroes",
            CMD_TRIM => "trim",
            _ => "flush",
        });
    }

    /// Client `c` sends a request the server must refuse (touching nothing).
    fn submit_refused(&mut self, c: usize) {
        let kind = [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES][self.rng.gen_range(0..4)];
        let (what, offset_bytes, len_bytes, errno) = match self.rng.gen_range(0..3) {
            0 => {
                let n = self.rng.gen_range(1..8);
                let off = self.rng.gen_range(0..BLOCKS - n) * BLOCK + self.rng.gen_range(1..BLOCK);
                ("refused: unaligned", off, n * BLOCK, EINVAL)
            }
            1 => {
                let off = SIZE_BYTES - BLOCK * self.rng.gen_range(0..4);
                let errno = if matches!(kind, CMD_WRITE | CMD_WRITE_ZEROES) {
                    ENOSPC
                } else {
                    EINVAL
                };
                (
                    "refused: beyond the end",
                    off,
                    BLOCK * self.rng.gen_range(5..16),
                    errno,
                )
            }
            _ => ("refused: unknown command", 0, BLOCK, EINVAL),
        };
        let kind = if what == "refused: unknown command" {
            self.rng.gen_range(7..=u16::MAX)
        } else {
            kind
        };
        let client = &mut self.clients[c];
        client.next_cookie += 1;
        let cookie = client.next_cookie;
        let header = RequestHeader {
            magic: REQUEST_MAGIC,
            flags: 0,
            kind,
            cookie,
            offset_bytes,
            len_bytes: len_bytes as u32,
        };
        let payload = vec![
            7u8;
            if kind == CMD_WRITE {
                len_bytes as usize
            } else {
                0
            }
        ];
        self.send(c, header, &payload);
        let expect = Expect {
            kind,
            first: 0,
            n: 0,
            id: 0,
            fua: false,
            refused: Some(errno),
            faults_before: self.injected(),
            after_failed_flush: self.flush_failed,
            holds_blocks: false,
            data: Vec::new(),
        };
        self.clients[c].in_flight.insert(cookie, expect);
        self.count(what);
    }

    /// Client `c` reads what the server has sent and judges every whole reply part. Returns
    /// whether the server has closed the connection.
    fn poll(&mut self, c: usize) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        let closed = loop {
            match self.clients[c].stream.read(&mut chunk) {
                Ok(0) => break true,
                Ok(n) => self.clients[c].input.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                Err(e) => self.fail(format!("reading replies: {e}")),
            }
        };
        if self.clients[c].state == State::Silent {
            return closed;
        }
        if let State::Handshaking {
            structured,
            may_be_refused,
        } = self.clients[c].state
        {
            let mut cursor = &self.clients[c].input[..];
            match read_handshake_replies(&mut cursor, structured) {
                Ok(info) => {
                    if info.size_bytes != SIZE_BYTES || info.block_bytes_min as u64 > BLOCK {
                        self.fail(format!("the export described as {info:?}"));
                    }
                    let used = self.clients[c].input.len() - cursor.len();
                    let client = &mut self.clients[c];
                    client.input.drain(..used);
                    client.state = State::Ready;
                    client.structured = structured;
                    self.count("client connected");
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !closed => return false,
                Err(e) if may_be_refused && e.to_string().contains("too many connections") => {
                    self.count("client refused: server full");
                    self.clients[c].state = State::Dropped;
                    return closed;
                }
                Err(e) => self.fail(format!("a well-formed handshake failed: {e}")),
            }
        }
        loop {
            let client = &self.clients[c];
            if client.state == State::Dropped && client.input.is_empty() {
                break;
            }
            let mut cursor = &client.input[..];
            let in_flight = &client.in_flight;
            let part = read_reply_part(&mut cursor, client.structured, |cookie| {
                in_flight.get(&cookie).map(|e| {
                    if e.refused.is_none() {
                        e.data.len() as u32
                    } else {
                        0
                    }
                })
            });
            let part = match part {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => self.fail(format!(
                    "a reply no request explains (none in flight, or answered twice): {e}"
                )),
            };
            let used = client.input.len() - cursor.len();
            self.clients[c].input.drain(..used);
            self.take_part(c, part);
        }
        closed
    }

    /// A reply part for client `c`: data joins its read; a final part judges the request.
    fn take_part(&mut self, c: usize, part: nvarray_nbd::client::ReplyPart) {
        let cookie = part.cookie;
        let outcome = match part.kind {
            Part::Ok(data) => {
                let e = self.clients[c].in_flight.get_mut(&cookie).expect("parsed");
                if e.kind == CMD_READ {
                    e.data = data;
                }
                Ok(())
            }
            Part::Data {
                offset_bytes,
                bytes,
            } => {
                let e = &self.clients[c].in_flight[&cookie];
                let start = offset_bytes
                    .checked_sub(e.first * BLOCK)
                    .map(|s| s as usize)
                    .filter(|&s| e.kind == CMD_READ && s + bytes.len() <= e.data.len());
                let Some(start) = start else {
                    self.fail(format!("read data at {offset_bytes} outside its request"))
                };
                let e = self.clients[c].in_flight.get_mut(&cookie).expect("parsed");
                e.data[start..start + bytes.len()].copy_from_slice(&bytes);
                Ok(())
            }
            Part::None => Ok(()),
            Part::Error { errno, .. } => Err(errno),
        };
        if !part.done {
            if outcome.is_err() {
                self.fail("an error part not the reply's last".into());
            }
            return;
        }
        let e = self.clients[c]
            .in_flight
            .remove(&cookie)
            .expect("in flight");
        if e.holds_blocks {
            for b in e.first..e.first + e.n {
                self.busy[b as usize] = false;
            }
        }
        let client_id = self.clients[c].id;
        let failed = self.judge(&e, outcome);
        if e.refused.is_none() {
            self.resolved(client_id, cookie, failed);
        }
    }

    /// Judges a request's outcome; returns whether it failed.
    fn judge(&mut self, e: &Expect, outcome: Result<(), u32>) -> bool {
        if let Some(want) = e.refused {
            if outcome != Err(want) {
                self.fail(format!(
                    "a request to refuse with {want} got {outcome:?}: {e:?}"
                ));
            }
            self.count("refused as expected");
            return true;
        }
        let faulted = self.injected() > e.faults_before;
        let latched = (e.kind == CMD_FLUSH || e.fua) && e.after_failed_flush;
        match outcome {
            Ok(()) if e.kind == CMD_FLUSH && e.after_failed_flush => {
                self.fail("a flush succeeded after one failed (its data may be lost)".into())
            }
            Ok(()) => {
                match e.kind {
                    CMD_READ => {
                        for (b, got) in (e.first..).zip(e.data.chunks(BLOCK as usize)) {
                            let may = &self.may_show[b as usize];
                            if !may.iter().any(|&id| id == ANY || got == content(id, b)) {
                                self.fail(format!("read: block {b} may show writes {may:?}"));
                            }
                        }
                    }
                    CMD_WRITE | CMD_WRITE_ZEROES => {
                        for b in e.first..e.first + e.n {
                            self.may_show[b as usize] = vec![e.id];
                        }
                    }
                    CMD_TRIM => self.trimmed(e),
                    _ => {}
                }
                false
            }
            Err(EIO) if faulted || latched => {
                self.count(if faulted {
                    "failed: EIO, a fault injected while in flight"
                } else {
                    "failed: EIO, a flush failed before"
                });
                self.maybe_done(e);
                true
            }
            Err(errno) => self.fail(format!(
                "{e:?} failed with errno {errno} with no fault injected while it was in flight \
                 (flush failed before: {})",
                e.after_failed_flush
            )),
        }
    }

    /// A request whose outcome is unknown: a write's blocks may show its data or not.
    fn maybe_done(&mut self, e: &Expect) {
        match e.kind {
            CMD_WRITE | CMD_WRITE_ZEROES => {
                for b in e.first..e.first + e.n {
                    let may = &mut self.may_show[b as usize];
                    if !may.contains(&e.id) {
                        may.push(e.id);
                    }
                }
            }
            CMD_TRIM => self.trimmed(e),
            _ => {}
        }
    }

    fn trimmed(&mut self, e: &Expect) {
        for b in e.first..e.first + e.n {
            self.may_show[b as usize] = vec![ANY];
        }
    }

    /// Client `c` is gone (or dropped by the server): what it had in flight stays unanswered,
    /// and its blocks are free once the server has closed its connection.
    fn forget(&mut self, c: usize, what: &str) {
        let client = self.clients.swap_remove(c);
        let connection = client.connection;
        let id = client.id;
        let in_flight: Vec<(u64, Expect)> = client.in_flight.into_iter().collect();
        drop(client.stream);
        self.orphans = in_flight
            .iter()
            .filter(|(_, e)| e.refused.is_none())
            .map(|&(cookie, _)| (id, cookie))
            .collect();
        self.await_close(connection, what);
        self.orphans.clear();
        for (cookie, e) in in_flight {
            if e.refused.is_none() {
                self.maybe_done(&e);
                self.resolved(id, cookie, true);
            }
            if e.holds_blocks {
                for b in e.first..e.first + e.n {
                    self.busy[b as usize] = false;
                }
            }
        }
    }

    /// Client `c` leaves in one of the ways a client does.
    fn leave(&mut self, c: usize) {
        let disc = |cookie| RequestHeader {
            magic: REQUEST_MAGIC,
            flags: 0,
            kind: CMD_DISC,
            cookie,
            offset_bytes: 0,
            len_bytes: 0,
        };
        match self.rng.gen_range(0..5) {
            0 | 1 => {
                self.count("leave: NBD_CMD_DISC");
                self.send(c, disc(0), &[]);
                self.clients[c].state = State::Leaving;
            }
            2 => {
                self.count("leave: crash with requests in flight");
                self.forget(c, "a crashed client's connection");
            }
            3 => {
                self.count("leave: bad magic");
                let mut junk = disc(0).encode();
                junk[0] ^= 0x80;
                self.clients[c].stream.write_all(&junk).unwrap();
                self.clients[c].state = State::Dropped;
            }
            _ => {
                // A write cut off in its payload: stalled (the server gives up on it) or
                // hung up; each block of it may or may not land.
                let Some((first, n)) = self.extent(REQUEST_BLOCKS_MAX) else {
                    return;
                };
                self.next_write += 1;
                let id = self.next_write;
                let data: Vec<u8> = (first..first + n).flat_map(|b| content(id, b)).collect();
                let header = RequestHeader {
                    magic: REQUEST_MAGIC,
                    flags: 0,
                    kind: CMD_WRITE,
                    cookie: 0,
                    offset_bytes: first * BLOCK,
                    len_bytes: (n * BLOCK) as u32,
                };
                let mut bytes = header.encode().to_vec();
                bytes.extend_from_slice(&data[..self.rng.gen_range(0..data.len())]);
                let stall = self.rng.gen_bool(0.5);
                // A stalled client sends its whole header (the rest of a header is waited for
                // like the next request); one that hangs up may stop anywhere.
                let least = if stall { REQUEST_HEADER_BYTES } else { 0 };
                let cut = self.rng.gen_range(least..=bytes.len());
                self.clients[c].stream.write_all(&bytes[..cut]).unwrap();
                let e = Expect {
                    kind: CMD_WRITE,
                    first,
                    n,
                    id,
                    fua: false,
                    refused: None,
                    faults_before: self.injected(),
                    after_failed_flush: self.flush_failed,
                    holds_blocks: true,
                    data: Vec::new(),
                };
                for b in first..first + n {
                    self.busy[b as usize] = true;
                }
                self.clients[c].in_flight.insert(0, e);
                if stall {
                    self.count("leave: stall in a write's payload");
                    self.clients[c].state = State::Dropped;
                } else {
                    self.count("leave: hang up in a write's payload");
                    self.forget(c, "a connection cut in a payload");
                }
            }
        }
    }

    /// An operator restarts the server after a flush failed: every client leaves, the server
    /// stops (its last flush fails, as every flush since), and a new one starts on the same
    /// file, whose flushes may succeed again. The data stays.
    fn restart(&mut self) {
        while !self.clients.is_empty() {
            self.forget(0, "a connection at restart");
        }
        // The old device lets go of its file as it stops (a device never shares its file).
        let server = self.server.take().expect("a server");
        if server.shutdown().is_ok() {
            self.fail("a server whose flush failed stopped with a successful flush".into());
        }
        self.server = Some(start_server(&self.image, &self.faults, &self.messages));
        self.flush_failed = false;
        self.count("server restarted after a failed flush");
    }

    fn run_step(&mut self) {
        if self.clients.is_empty() {
            self.connect();
        }
        if self.clients.is_empty() {
            // It hung up after garbage.
            self.step += 1;
            return;
        }
        let c = self.rng.gen_range(0..self.clients.len());
        let ready = self.clients[c].state == State::Ready;
        let room = self.clients[c].in_flight.len() < DEPTH;
        match self.rng.gen_range(0..100) {
            0..=34 if ready && room => self.submit(c),
            35..=37 if ready && room => self.submit_refused(c),
            38..=69 => {
                self.server_step();
            }
            70..=95 => self.poll_and_tidy(c),
            96 if ready => self.leave(c),
            97 if self.flush_failed => self.restart(),
            97.. => self.connect(),
            _ => {}
        }
        self.step += 1;
    }

    /// Client `c` polls; one whose connection the server closed is checked and removed.
    fn poll_and_tidy(&mut self, c: usize) {
        if !self.poll(c) {
            return;
        }
        let client = &self.clients[c];
        match client.state {
            State::Leaving if !client.in_flight.is_empty() => self.fail(format!(
                "the server closed a connection that said goodbye with {} requests unanswered",
                client.in_flight.len()
            )),
            State::Ready => {
                self.fail("the server closed a well-behaved client's connection".into())
            }
            State::Handshaking { .. } => self.fail("the server closed a handshake".into()),
            _ => {}
        }
        self.forget(c, "a closed connection");
    }

    /// Steps the server and polls every client until nothing is in flight.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            let work = self.server_step();
            for c in (0..self.clients.len()).rev() {
                self.poll_and_tidy(c);
            }
            let waiting = self
                .clients
                .iter()
                .any(|c| !c.in_flight.is_empty() || matches!(c.state, State::Handshaking { .. }));
            if work == 0 && !waiting {
                return;
            }
        }
        self.fail("requests never answered".into());
    }

    /// Every block reads back as the model says, over a fresh connection (a read a fault hit
    /// is asked again).
    fn read_everything(&mut self) {
        self.clients.clear();
        for _ in 0..1000 {
            if self.server().connections() == 0 {
                break;
            }
            self.server_step();
        }
        let (connection, stream) = self.server().connect();
        self.next_client += 1;
        self.clients.push(Client {
            id: self.next_client,
            connection,
            stream,
            state: State::Handshaking {
                structured: false,
                may_be_refused: false,
            },
            structured: false,
            input: Vec::new(),
            in_flight: HashMap::new(),
            next_cookie: 0,
        });
        let request = handshake_request("", false);
        self.clients[0].stream.write_all(&request).unwrap();
        self.drain();
        let step_blocks = REQUEST_BLOCKS_MAX;
        let mut first = 0;
        while first < BLOCKS {
            let cookie = first + 1;
            let header = RequestHeader {
                magic: REQUEST_MAGIC,
                flags: 0,
                kind: CMD_READ,
                cookie,
                offset_bytes: first * BLOCK,
                len_bytes: (step_blocks * BLOCK) as u32,
            };
            self.send(0, header, &[]);
            let expect = Expect {
                kind: CMD_READ,
                first,
                n: step_blocks,
                id: 0,
                fua: false,
                refused: None,
                faults_before: self.injected(),
                after_failed_flush: self.flush_failed,
                holds_blocks: false,
                data: vec![0u8; (step_blocks * BLOCK) as usize],
            };
            self.clients[0].in_flight.insert(cookie, expect);
            let failed = "failed: EIO, a fault injected while in flight";
            let failed_before = self.counts.get(failed).copied();
            self.drain();
            if self.counts.get(failed).copied() == failed_before {
                first += step_blocks;
            }
        }
    }
}

/// The device each seed's servers open, on the same file each time.
const DEVICE: SimulatedDevice = SimulatedDevice {
    size_bytes: SIZE_BYTES,
    tags: Some(TAGS),
    command_bytes: COMMAND_BYTES as u32,
};

/// A server over the device on `image`, `faults` injected, its messages counted in
/// `messages`.
fn start_server(
    image: &Path,
    faults: &Arc<BackingFaults>,
    messages: &Arc<AtomicU64>,
) -> SimulatedServer {
    let device = Arc::new(DEVICE.open(image, faults).unwrap());
    let counter = Arc::clone(messages);
    let log = Arc::new(move |_: &str| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    SimulatedServer::new(device, "", false, CONNECTIONS_MAX, log)
}

fn simulate(seed: u64, steps: u64) -> BTreeMap<&'static str, u64> {
    // In memory (tmpfs) where there is one: a seed's device opens in a fraction of the time.
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let image = dir.path().join("image");
    let plan = format!("one-in=40,seed={seed},ops=read+write+msync+fsync");
    let faults = Arc::new(BackingFaults::parse(&plan).unwrap());
    let messages = Arc::new(AtomicU64::new(0));
    let server = start_server(&image, &faults, &messages);
    let mut sim = Sim {
        seed,
        step: 0,
        rng: SmallRng::seed_from_u64(seed),
        server: Some(server),
        faults_at_start: faults.injected_total(),
        faults,
        clients: Vec::new(),
        next_client: 0,
        may_show: vec![vec![0]; BLOCKS as usize],
        busy: vec![false; BLOCKS as usize],
        next_write: 0,
        flush_failed: false,
        fault_groups: Vec::new(),
        orphans: Vec::new(),
        messages: Arc::clone(&messages),
        image,
        counts: BTreeMap::new(),
    };
    while sim.step < steps {
        sim.run_step();
    }
    sim.drain();
    sim.read_everything();
    if let Some(g) = sim.fault_groups.first() {
        sim.fail(format!(
            "a fault injected at step {} is still unaccounted for after the drain ({} requests)",
            g.step,
            g.pending.len()
        ));
    }
    sim.clients.clear();
    let faults_before = sim.injected();
    let flush_failed = sim.flush_failed;
    let ended = sim.server.take().expect("a server").shutdown();
    if let Err(e) = ended {
        if !flush_failed && sim.injected() == faults_before {
            sim.fail(format!(
                "the server's shutdown failed with no fault to explain it: {e}"
            ));
        }
    }
    let mut counts = std::mem::take(&mut sim.counts);
    counts.insert("faults injected", sim.injected());
    counts.insert("server messages", messages.load(Ordering::Relaxed));
    counts
}

#[test]
fn the_nbd_server_keeps_its_invariants_under_a_seeded_simulation() {
    let seeds = Seeds::from_env(40, 2000);
    let counts = seeds.run("nbd simulation", simulate);
    let get = |what: &str| counts.get(what).copied().unwrap_or(0);
    // The simulation reaches what it is for (none of these is rare at 40 seeds).
    for what in [
        "failed: EIO, a fault injected while in flight",
        "failed: EIO, a flush failed before",
        "server restarted after a failed flush",
        "client refused: server full",
        "leave: stall in a write's payload",
        "refused as expected",
    ] {
        assert!(
            seeds.count < 40 || get(what) > 0,
            "the simulation never reached `{what}`"
        );
    }
}
