//! The whole NBD server under a seeded stateful fuzzer: valid and malformed requests,
//! handshakes good and bad, and disconnects clean and abrupt, over several connections,
//! checked against a reference copy of the device's bytes.
//!
//! The test command runs `NVARRAY_FUZZ_REQUESTS` requests (default 20,000, about a second);
//! `scripts/campaign.sh nbd-fuzz` runs 10 million. A failure names its seed and request, and
//! the command that replays it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvarray_host::options::{BackingFaults, BackingOp};
use nvarray_nbd::client::{Client, Reply};
use nvarray_nbd::io::Stream;
use nvarray_nbd::proto::*;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

mod common;
use common::{campaign_env, Running, SIZE_BYTES};

const EIO: u32 = 5;
const EINVAL: u32 = 22;
const EOVERFLOW: u32 = 75;
const ENOSPC: u32 = 28;
/// Live connections at most (the server under test takes 4).
const CLIENTS_MAX: usize = 3;

/// What a block of the device may hold, where it is not exactly the reference's bytes.
#[derive(Clone, Debug)]
enum Block {
    /// The reference's bytes or these (a write that was cut off may or may not have landed).
    Either(Vec<u8>),
    /// Anything (trimmed).
    Any,
}

struct Model {
    bytes: Vec<u8>,
    block_bytes: usize,
    /// Blocks that may differ from `bytes`; every other block holds exactly its bytes.
    loose: HashMap<usize, Block>,
}

impl Model {
    fn write(&mut self, offset: usize, data: &[u8]) {
        self.bytes[offset..offset + data.len()].copy_from_slice(data);
        for b in offset / self.block_bytes..(offset + data.len()) / self.block_bytes {
            self.loose.remove(&b);
        }
    }

    /// A write whose outcome is unknown: each block is old or new.
    fn maybe_write(&mut self, offset: usize, data: &[u8]) {
        for (i, chunk) in data.chunks(self.block_bytes).enumerate() {
            let b = offset / self.block_bytes + i;
            match self.loose.get(&b) {
                Some(Block::Any) => {}
                // Three possible contents are more than this model keeps: give up on it.
                Some(Block::Either(_)) => {
                    self.loose.insert(b, Block::Any);
                }
                _ => {
                    self.loose.insert(b, Block::Either(chunk.to_vec()));
                }
            }
        }
    }

    fn trim(&mut self, offset: usize, len: usize) {
        for b in offset / self.block_bytes..(offset + len) / self.block_bytes {
            self.loose.insert(b, Block::Any);
        }
    }

    /// The first block of `data` (read at `offset`) that the device may not hold, if any.
    fn mismatch(&self, offset: usize, data: &[u8]) -> Option<usize> {
        let bb = self.block_bytes;
        data.chunks(bb).enumerate().find_map(|(i, got)| {
            let b = offset / bb + i;
            let want = &self.bytes[b * bb..(b + 1) * bb];
            let ok = match self.loose.get(&b) {
                None => got == want,
                Some(Block::Either(alt)) => got == want || got == &alt[..],
                Some(Block::Any) => true,
            };
            (!ok).then_some(b)
        })
    }
}

struct Fuzzer {
    /// The server (None only while it restarts).
    running: Option<Running>,
    rng: SmallRng,
    seed: u64,
    step: u64,
    clients: Vec<Client>,
    model: Model,
    counts: HashMap<&'static str, u64>,
    /// Faults injected into the server's backing, and the image they are injected into (the
    /// server restarts on it after a flush failed).
    faults: Option<(Arc<BackingFaults>, std::path::PathBuf)>,
    /// A flush has failed since the server started: no later flush may succeed.
    flush_failed: bool,
    /// msync and fsync faults injected so far, as last seen.
    sync_faults_seen: u64,
    /// Where the servers' messages go.
    log: Arc<dyn Fn(&str) + Send + Sync>,
}

/// What a request that reaches the backing came to.
enum Outcome {
    /// Succeeded, with no fault injected while it ran: its data (a read's).
    Done(Vec<u8>),
    /// Failed with EIO where a fault explains it.
    Failed,
}

impl Fuzzer {
    fn fail(&self, what: String) -> ! {
        let (prefix, test) = match self.faults {
            Some(_) => ("NVARRAY_FAULTS", "backing_faults"),
            None => ("NVARRAY_FUZZ", "stateful_fuzz"),
        };
        panic!(
            "seed {}, request {}: {what}\nreplay: {prefix}_SEED={} {prefix}_REQUESTS={} \
             cargo test --release -p nvarray-nbd --test stateful_fuzz {test}",
            self.seed,
            self.step,
            self.seed,
            self.step + 1
        )
    }

    /// Stops the server: its final flush may fail only where a flush failed before or a
    /// fault hits it.
    fn stop_server(&mut self) {
        let ended = self.running.take().expect("a server").stop_returning();
        self.note_sync_faults();
        if let Err(e) = ended {
            if !self.flush_failed {
                self.fail(format!(
                    "the server's run ended in {e} with no flush failed"
                ));
            }
        }
    }

    fn server(&self) -> &Running {
        self.running.as_ref().expect("a server")
    }

    /// Faults injected into the backing so far.
    fn injected(&self) -> u64 {
        self.faults.as_ref().map_or(0, |(f, _)| f.injected_total())
    }

    /// Judges the reply `r` to a request that reaches the backing, sent when `before` faults
    /// had been injected. The promise (docs/reliability.md): a request during which a fault
    /// was injected fails with EIO, never succeeds; one without fails only where a flush
    /// failed before it (`latched`: a flush, or a FUA request's flush).
    fn judge(
        &mut self,
        what: &str,
        r: std::io::Result<Reply>,
        before: u64,
        latched: bool,
    ) -> Outcome {
        let injected = self.injected() - before;
        self.note_sync_faults();
        match r {
            Ok(Reply::Ok(data)) if injected == 0 => Outcome::Done(data),
            Ok(Reply::Ok(_)) => {
                self.fail(format!("{what} succeeded although {injected} faults hit the backing under it"))
            }
            Ok(Reply::Error { errno: EIO, .. }) if injected > 0 => {
                self.count("faulted: EIO, a fault hit it");
                Outcome::Failed
            }
            Ok(Reply::Error { errno: EIO, .. }) if latched => {
                self.count("faulted: EIO, a flush failed before");
                Outcome::Failed
            }
            other => self.fail(format!(
                "{what}: expected success (no fault injected; flush failed before: {latched}), got {other:?}"
            )),
        }
    }

    /// A fault injected into an msync or fsync (a flush's, or a FUA request's) failed that
    /// flush: from now on no flush may succeed.
    fn note_sync_faults(&mut self) {
        let Some((faults, _)) = &self.faults else {
            return;
        };
        let n = faults.injected(BackingOp::Msync) + faults.injected(BackingOp::Fsync);
        if n > self.sync_faults_seen {
            self.sync_faults_seen = n;
            self.flush_failed = true;
        }
    }

    /// Starts a new server on the same image after a flush failed (an operator's restart):
    /// the data stays, and the new device's flushes may succeed again.
    fn restart(&mut self) {
        let (faults, image) = self.faults.clone().expect("restarts only with faults");
        self.clients.clear();
        self.settle();
        // The old device holds the image until it is gone (a device never shares its file).
        self.stop_server();
        let log = Arc::clone(&self.log);
        self.running = Some(Running::start_faulty(&image, faults, log));
        self.flush_failed = false;
        self.count("server restarted after a failed flush");
    }

    fn connect(&mut self) {
        let structured = self.rng.gen_bool(0.5);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = UnixStream::connect(&self.server().socket).unwrap();
            match Client::connect(Stream::Unix(s), "", structured) {
                Ok(c) => {
                    self.clients.push(c);
                    return;
                }
                // A connection that just ended may still hold its slot for a moment.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::yield_now();
                }
                Err(e) => self.fail(format!("a well-formed handshake failed: {e}")),
            }
        }
    }

    /// Waits until the server has finished with every connection the fuzzer dropped, so no
    /// command of theirs can land after a later request.
    fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.server().server.connections() > self.clients.len() {
            if Instant::now() > deadline {
                self.fail(format!(
                    "{} connection threads still run for {} clients",
                    self.server().server.connections(),
                    self.clients.len()
                ));
            }
            std::thread::yield_now();
        }
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    /// An aligned request inside the export: (offset, len).
    fn extent(&mut self, blocks_max: usize) -> (usize, usize) {
        let bb = self.model.block_bytes;
        let blocks = SIZE_BYTES as usize / bb;
        let n = self.rng.gen_range(0..=blocks_max.min(blocks));
        let start = self.rng.gen_range(0..=blocks - n);
        (start * bb, n * bb)
    }

    fn expect_errno(&self, what: &str, r: std::io::Result<Reply>, errno: u32) {
        match r {
            Ok(Reply::Error { errno: e, .. }) if e == errno => {}
            other => self.fail(format!("{what}: expected errno {errno}, got {other:?}")),
        }
    }

    fn step(&mut self) {
        if self.clients.is_empty() {
            self.connect();
        }
        self.note_sync_faults();
        let c = self.rng.gen_range(0..self.clients.len());
        let bb = self.model.block_bytes;
        let fua = if self.rng.gen_bool(0.3) {
            CMD_FLAG_FUA
        } else {
            0
        };
        let roll = self.rng.gen_range(0..1000);
        match roll {
            0..=299 => {
                self.count("read");
                let (off, len) = self.extent(160);
                let before = self.injected();
                let r = self.clients[c].request(CMD_READ, fua, off as u64, len as u32, &[]);
                let Outcome::Done(data) = self.judge("read", r, before, false) else {
                    return self.step += 1;
                };
                if data.len() != len {
                    self.fail(format!("read of {len} bytes returned {}", data.len()));
                }
                if let Some(b) = self.model.mismatch(off, &data) {
                    self.fail(format!("read at {off} of {len} bytes: block {b} differs"));
                }
            }
            300..=599 => {
                self.count("write");
                let (off, len) = self.extent(160);
                let mut data = vec![0u8; len];
                self.rng.fill_bytes(&mut data);
                let before = self.injected();
                let r = self.clients[c].request(CMD_WRITE, fua, off as u64, len as u32, &data);
                let latched = fua != 0 && self.flush_failed;
                match self.judge("write", r, before, latched) {
                    Outcome::Done(_) => self.model.write(off, &data),
                    Outcome::Failed => self.model.maybe_write(off, &data),
                }
            }
            600..=649 => {
                self.count("write zeroes");
                let (off, len) = self.extent(512);
                let flags = fua
                    | if self.rng.gen_bool(0.5) {
                        CMD_FLAG_NO_HOLE
                    } else {
                        0
                    };
                let before = self.injected();
                let r =
                    self.clients[c].request(CMD_WRITE_ZEROES, flags, off as u64, len as u32, &[]);
                let latched = fua != 0 && self.flush_failed;
                match self.judge("write zeroes", r, before, latched) {
                    Outcome::Done(_) => self.model.write(off, &vec![0u8; len]),
                    Outcome::Failed => self.model.maybe_write(off, &vec![0u8; len]),
                }
            }
            650..=679 => {
                self.count("trim");
                let (off, len) = self.extent(64);
                let before = self.injected();
                let r = self.clients[c].request(CMD_TRIM, fua, off as u64, len as u32, &[]);
                let latched = fua != 0 && self.flush_failed;
                let _ = self.judge("trim", r, before, latched);
                self.model.trim(off, len);
            }
            680..=729 => {
                self.count("flush");
                let before = self.injected();
                let r = self.clients[c].request(CMD_FLUSH, fua, 0, 0, &[]);
                let latched = self.flush_failed;
                match self.judge("flush", r, before, latched) {
                    Outcome::Done(_) if latched => self.fail(
                        "a flush succeeded after an earlier flush failed (its data may be lost)"
                            .into(),
                    ),
                    Outcome::Done(_) => {}
                    // The promise held twice (this flush failed after an earlier one): restart.
                    Outcome::Failed if latched => self.restart(),
                    Outcome::Failed => self.flush_failed = true,
                }
            }
            730..=769 => {
                self.count("refused: unaligned");
                let (off, len) = self.extent(8);
                let off = off + self.rng.gen_range(1..bb);
                let kind =
                    [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES][self.rng.gen_range(0..4)];
                let payload = if kind == CMD_WRITE {
                    vec![7u8; len]
                } else {
                    vec![]
                };
                let r = self.clients[c].request(kind, 0, off as u64, len as u32, &payload);
                self.expect_errno("unaligned request", r, EINVAL);
            }
            770..=809 => {
                self.count("refused: beyond the end");
                let off = SIZE_BYTES - bb as u64 * self.rng.gen_range(0..4);
                let len = bb * self.rng.gen_range(5..64);
                let kind =
                    [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES][self.rng.gen_range(0..4)];
                let payload = if kind == CMD_WRITE {
                    vec![9u8; len]
                } else {
                    vec![]
                };
                let errno = if matches!(kind, CMD_WRITE | CMD_WRITE_ZEROES) {
                    ENOSPC
                } else {
                    EINVAL
                };
                let r = self.clients[c].request(kind, 0, off, len as u32, &payload);
                self.expect_errno("request beyond the end", r, errno);
            }
            810..=839 => {
                self.count("refused: unknown command or flags");
                // Commands 5 (cache) and 7 on (block status, ...) are not advertised; a read
                // takes no flag but FUA.
                let (kind, flags) = match self.rng.gen_range(0..3) {
                    0 => (5, 0),
                    1 => (self.rng.gen_range(7..=u16::MAX), 0),
                    _ => (CMD_READ, 1 << self.rng.gen_range(1..16)),
                };
                let r = self.clients[c].request(kind, flags, 0, bb as u32, &[]);
                self.expect_errno("unknown command or flag", r, EINVAL);
            }
            840..=859 => {
                self.count("refused: read over the maximum");
                let len = PAYLOAD_BYTES_MAX + bb as u32;
                let r = self.clients[c].request(CMD_READ, 0, 0, len, &[]);
                // EOVERFLOW where structured replies let the client retry smaller.
                let errno = if self.clients[c].structured() {
                    EOVERFLOW
                } else {
                    EINVAL
                };
                self.expect_errno("oversized read", r, errno);
            }
            860..=884 => {
                self.count("disconnect: NBD_CMD_DISC");
                let mut client = self.clients.swap_remove(c);
                let header = RequestHeader {
                    magic: REQUEST_MAGIC,
                    flags: 0,
                    kind: CMD_DISC,
                    cookie: 1,
                    offset_bytes: 0,
                    len_bytes: 0,
                };
                client.send_raw(&header.encode()).unwrap();
                drop(client);
                self.settle();
            }
            885..=909 => {
                self.count("disconnect: bad magic");
                let mut client = self.clients.swap_remove(c);
                let mut junk = [0u8; REQUEST_HEADER_BYTES];
                self.rng.fill_bytes(&mut junk);
                junk[0] ^= 0x80; // never the request magic
                client.send_raw(&junk).unwrap();
                drop(client);
                self.settle();
            }
            910..=939 => {
                self.count("disconnect: mid-write");
                // A write cut off in its payload: each block of it may or may not land.
                let mut client = self.clients.swap_remove(c);
                let (off, len) = self.extent(512);
                let mut data = vec![0u8; len];
                self.rng.fill_bytes(&mut data);
                let header = RequestHeader {
                    magic: REQUEST_MAGIC,
                    flags: fua,
                    kind: CMD_WRITE,
                    cookie: 1,
                    offset_bytes: off as u64,
                    len_bytes: len as u32,
                };
                let sent = self.rng.gen_range(0..=len);
                let mut bytes = header.encode().to_vec();
                bytes.extend_from_slice(&data[..sent]);
                let cut = self.rng.gen_range(0..=bytes.len());
                let _ = client.send_raw(&bytes[..cut]);
                drop(client);
                self.settle();
                if cut > REQUEST_HEADER_BYTES {
                    let landed = cut - REQUEST_HEADER_BYTES;
                    self.model.maybe_write(off, &data[..landed / bb * bb]);
                }
            }
            940..=969 => {
                self.count("handshake: new connection");
                if self.clients.len() < CLIENTS_MAX {
                    self.connect();
                }
            }
            _ => {
                self.count("handshake: garbage");
                let mut s = UnixStream::connect(&self.server().socket).unwrap();
                let mut greeting = [0u8; 18];
                let _ = s.read_exact(&mut greeting);
                let mut junk = vec![0u8; self.rng.gen_range(0..64)];
                self.rng.fill_bytes(&mut junk);
                if self.rng.gen_bool(0.5) {
                    // A plausible start, then nonsense options.
                    junk.splice(0..0, FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
                }
                let _ = s.write_all(&junk);
                drop(s);
                self.settle();
            }
        }
        self.step += 1;
    }
}

#[test]
fn the_server_survives_a_seeded_stream_of_valid_and_malformed_requests() {
    let seed = campaign_env("NVARRAY_FUZZ_SEED", 0x6e62_6466);
    let requests = campaign_env("NVARRAY_FUZZ_REQUESTS", 20_000);
    let f = fuzz(seed, requests, None);
    println!("stateful fuzz: {}", f.summary);
}

/// The same stream with faults injected into the server's backing file (issue 58): one in
/// `NVARRAY_FAULTS_ONE_IN` reads, writes, msyncs and fsyncs fails with EIO, ENOSPC or EDQUOT,
/// or (a write) lands its first half and fails. Every request a fault hit must fail with EIO,
/// no other may fail, no flush may succeed after one failed (the server then restarts on the
/// same file), and every acknowledged write reads back. `scripts/campaign.sh nbd-faults` runs
/// a million requests.
#[test]
fn backing_faults_reach_clients_as_errors_and_lose_no_acknowledged_write() {
    let seed = campaign_env("NVARRAY_FAULTS_SEED", 0x6661_756c);
    let requests = campaign_env("NVARRAY_FAULTS_REQUESTS", 20_000);
    let one_in = campaign_env("NVARRAY_FAULTS_ONE_IN", 20);
    let plan = format!("one-in={one_in},seed={seed},ops=read+write+msync+fsync");
    let faults = Arc::new(BackingFaults::parse(&plan).unwrap());
    let f = fuzz(seed, requests, Some(Arc::clone(&faults)));
    let injected = faults.injected_total();
    println!("nbd backing faults: {injected} faults injected, 0 wrong replies, 0 acknowledged writes lost; {}", f.summary);
    let each: Vec<String> = [
        BackingOp::Read,
        BackingOp::Write,
        BackingOp::Msync,
        BackingOp::Fsync,
    ]
    .iter()
    .map(|&op| format!("{op} {}", faults.injected(op)))
    .collect();
    println!("  faults: {}", each.join(", "));
    assert!(
        injected >= requests / one_in / 4,
        "only {injected} faults in {requests} requests at one in {one_in}"
    );
}

/// What a fuzzing run did, for its summary line.
struct Fuzzed {
    summary: String,
}

/// `requests` requests of the stateful fuzzer from `seed`, with `faults` injected into a
/// durable file backing (a RAM backing without), then every byte read back and checked.
fn fuzz(seed: u64, requests: u64, faults: Option<Arc<BackingFaults>>) -> Fuzzed {
    // The server's messages (one per refused handshake or dropped connection) are counted,
    // not printed: ten million requests make a million of them.
    let messages = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&messages);
    let log: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(move |_: &str| {
        counter.fetch_add(1, Ordering::Relaxed);
    });
    let image_dir = tempfile::tempdir().unwrap();
    let image = image_dir.path().join("image");
    let running = match &faults {
        Some(f) => Running::start_faulty(&image, Arc::clone(f), Arc::clone(&log)),
        None => Running::start_logging(false, &[], Arc::clone(&log)),
    };
    let mut f = Fuzzer {
        running: Some(running),
        rng: SmallRng::seed_from_u64(seed),
        seed,
        step: 0,
        clients: Vec::new(),
        model: Model {
            bytes: vec![0u8; SIZE_BYTES as usize],
            block_bytes: 0,
            loose: HashMap::new(),
        },
        counts: HashMap::new(),
        faults: faults.map(|f| (f, image)),
        flush_failed: false,
        sync_faults_seen: 0,
        log,
    };
    f.connect();
    f.model.block_bytes = f.clients[0].info.block_bytes_min as usize;
    let started = Instant::now();
    let mut last_report = Instant::now();
    while f.step < requests {
        f.step();
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("{} of {requests} requests", f.step);
            last_report = Instant::now();
        }
    }
    // Everything the model knows exactly reads back, over a fresh connection (a read a fault
    // hit, which changes nothing, is asked again).
    f.clients.clear();
    f.settle();
    f.connect();
    let chunk = 1 << 20;
    for off in (0..SIZE_BYTES as usize).step_by(chunk) {
        let data = loop {
            let before = f.injected();
            let r = f.clients[0].read(off as u64, chunk as u32);
            if let Outcome::Done(data) = f.judge("final read", r, before, false) {
                break data;
            }
        };
        if let Some(b) = f.model.mismatch(off, &data) {
            f.fail(format!("final read: block {b} differs"));
        }
    }
    let mut counts: Vec<_> = f.counts.iter().collect();
    counts.sort();
    let mut summary = format!(
        "seed {seed:#x}, {requests} requests in {:.1} s, 0 failures",
        started.elapsed().as_secs_f64()
    );
    for (what, n) in counts {
        summary += &format!("\n  {what}: {n}");
    }
    summary += &format!("\n  server messages: {}", messages.load(Ordering::Relaxed));
    f.clients.clear();
    f.stop_server();
    Fuzzed { summary }
}
