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

use nvarray_nbd::client::{Client, Reply};
use nvarray_nbd::io::Stream;
use nvarray_nbd::proto::*;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

mod common;
use common::{campaign_env, Running, SIZE_BYTES};

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
    running: Running,
    rng: SmallRng,
    seed: u64,
    step: u64,
    clients: Vec<Client>,
    model: Model,
    counts: HashMap<&'static str, u64>,
}

impl Fuzzer {
    fn fail(&self, what: String) -> ! {
        panic!(
            "seed {}, request {}: {what}\nreplay: NVARRAY_FUZZ_SEED={} NVARRAY_FUZZ_REQUESTS={} \
             cargo test --release -p nvarray-nbd --test stateful_fuzz",
            self.seed,
            self.step,
            self.seed,
            self.step + 1
        )
    }

    fn connect(&mut self) {
        let structured = self.rng.gen_bool(0.5);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = UnixStream::connect(&self.running.socket).unwrap();
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
        while self.running.server.connections() > self.clients.len() {
            if Instant::now() > deadline {
                self.fail(format!(
                    "{} connection threads still run for {} clients",
                    self.running.server.connections(),
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

    fn expect_ok(&self, what: &str, r: std::io::Result<Reply>) -> Vec<u8> {
        match r {
            Ok(Reply::Ok(data)) => data,
            other => self.fail(format!("{what}: expected success, got {other:?}")),
        }
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
                let r = self.clients[c].request(CMD_READ, fua, off as u64, len as u32, &[]);
                let data = self.expect_ok("read", r);
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
                let r = self.clients[c].request(CMD_WRITE, fua, off as u64, len as u32, &data);
                self.expect_ok("write", r);
                self.model.write(off, &data);
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
                let r =
                    self.clients[c].request(CMD_WRITE_ZEROES, flags, off as u64, len as u32, &[]);
                self.expect_ok("write zeroes", r);
                self.model.write(off, &vec![0u8; len]);
            }
            650..=679 => {
                self.count("trim");
                let (off, len) = self.extent(64);
                let r = self.clients[c].request(CMD_TRIM, fua, off as u64, len as u32, &[]);
                self.expect_ok("trim", r);
                self.model.trim(off, len);
            }
            680..=729 => {
                self.count("flush");
                let r = self.clients[c].request(CMD_FLUSH, fua, 0, 0, &[]);
                self.expect_ok("flush", r);
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
                let mut s = UnixStream::connect(&self.running.socket).unwrap();
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
    // The server's messages (one per refused handshake or dropped connection) are counted,
    // not printed: ten million requests make a million of them.
    let messages = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&messages);
    let running = Running::start_logging(
        false,
        &[],
        Arc::new(move |_: &str| {
            counter.fetch_add(1, Ordering::Relaxed);
        }),
    );
    let mut f = Fuzzer {
        running,
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
    // Everything the model knows exactly reads back, over a fresh connection.
    f.clients.clear();
    f.settle();
    f.connect();
    let chunk = 1 << 20;
    for off in (0..SIZE_BYTES as usize).step_by(chunk) {
        let r = f.clients[0].read(off as u64, chunk as u32);
        let data = f.expect_ok("final read", r);
        if let Some(b) = f.model.mismatch(off, &data) {
            f.fail(format!("final read: block {b} differs"));
        }
    }
    let mut counts: Vec<_> = f.counts.iter().collect();
    counts.sort();
    println!(
        "stateful fuzz: seed {seed:#x}, {requests} requests in {:.1} s, 0 failures",
        started.elapsed().as_secs_f64()
    );
    for (what, n) in counts {
        println!("  {what}: {n}");
    }
    println!("  server messages: {}", messages.load(Ordering::Relaxed));
    f.clients.clear();
    f.running.stop();
}
