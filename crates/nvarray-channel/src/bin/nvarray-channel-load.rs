//! `nvarray-channel-load`: a Rust client process on a channel, for tests and measurements:
//! keeps `--qd` commands of `--bs` bytes in flight over its extent for `--seconds` (or until
//! killed), every block it writes stamped with its offset and a sequence number, and every
//! block it reads checked against what this process last had acknowledged there. Prints one
//! JSON line: commands, errors, verified blocks, IOPS.
//!
//! `nvarray-channel-load SOCKET [--offset 0] [--len 1m] [--bs 4k] [--qd 16] [--seconds 1]
//!  [--rw randrw|randwrite|randread] [--seed 1] [--fuzz N] [--start-at UNIX_MS]`
//!
//! `--start-at` connects first, then waits for that wall-clock instant (ms since the epoch),
//! so several clients measure the same window.
//!
//! `--fuzz N` instead plays a faulty client: N times it writes random bytes into its own
//! channel's counters, ring entries or DMA region, or makes a random entry visible, and
//! polls whatever comes back. The daemon must fail its commands and nothing else.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvarray_channel::{Channel, ChannelStatus, Completion, Op};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

struct Args {
    socket: PathBuf,
    offset: u64,
    len: u64,
    bs: u64,
    qd: u32,
    seconds: f64,
    rw: String,
    seed: u64,
    fuzz: u64,
    start_at_ms: u64,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let socket = it.next().ok_or("usage: nvarray-channel-load SOCKET [--offset O] [--len L] [--bs B] [--qd N] [--seconds S] [--rw randrw|randwrite|randread] [--seed N]")?;
    let mut a = Args {
        socket: socket.into(),
        offset: 0,
        len: 1 << 20,
        bs: 4096,
        qd: 16,
        seconds: 1.0,
        rw: "randrw".into(),
        seed: 1,
        fuzz: 0,
        start_at_ms: 0,
    };
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let size = |v: &str| nvarray_units::parse_size(v).map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--offset" => a.offset = size(&v)?,
            "--len" => a.len = size(&v)?,
            "--bs" => a.bs = size(&v)?,
            "--qd" => a.qd = v.parse().map_err(|_| format!("--qd {v:?}"))?,
            "--seconds" => a.seconds = v.parse().map_err(|_| format!("--seconds {v:?}"))?,
            "--rw" => a.rw = v,
            "--seed" => a.seed = v.parse().map_err(|_| format!("--seed {v:?}"))?,
            "--fuzz" => a.fuzz = v.parse().map_err(|_| format!("--fuzz {v:?}"))?,
            "--start-at" => a.start_at_ms = v.parse().map_err(|_| format!("--start-at {v:?}"))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.bs == 0 || a.len < a.bs || a.qd == 0 {
        return Err("--bs must be positive, --len at least --bs, --qd at least 1".into());
    }
    Ok(a)
}

/// The next pseudo-random number of the client's generator.
fn next(rng: &mut SmallRng) -> u64 {
    rng.next_u64()
}

/// The block's stamp: its offset, then the sequence number, repeated.
fn stamp(block: &mut [u8], offset: u64, seq: u64) {
    for (i, chunk) in block.chunks_exact_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&offset.to_le_bytes());
        chunk[8..].copy_from_slice(&(seq ^ i as u64).to_le_bytes());
    }
}

/// Sleeps until `at_ms` on the Unix clock (processes started apart begin together); returns at
/// once when that has passed.
fn sleep_until_ms(at_ms: u64) {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    if at_ms > now_ms {
        std::thread::sleep(Duration::from_millis(at_ms - now_ms));
    }
}

/// Whether `block` holds what `stamp` wrote for `offset` and `seq`.
fn holds_stamp(block: &[u8], offset: u64, seq: u64) -> bool {
    let mut want = vec![0u8; block.len()];
    stamp(&mut want, offset, seq);
    block == want.as_slice()
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nvarray-channel-load: {e}");
            std::process::exit(2);
        }
    };
    let mut ch = match Channel::open_with(&a.socket, a.qd, a.bs * u64::from(a.qd)) {
        Ok(ch) => ch,
        Err(e) => {
            eprintln!("nvarray-channel-load: {e}");
            std::process::exit(1);
        }
    };
    if a.fuzz > 0 {
        fuzz(&mut ch, a.fuzz, a.seed);
        return;
    }
    sleep_until_ms(a.start_at_ms);
    let mut load = Load::new(&a);
    let started = Instant::now();
    let until = Duration::from_secs_f64(a.seconds);
    loop {
        if started.elapsed() < until {
            load.issue(&a, &mut ch);
        }
        if ch.in_flight() == 0 {
            break;
        }
        let mut done = Vec::new();
        if ch.wait(1, |c| done.push(c)).is_err() {
            eprintln!("nvarray-channel-load: the daemon went away");
            std::process::exit(1);
        }
        for c in done {
            load.complete(&a, &ch, c);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let Load {
        commands,
        errors,
        verified,
        mismatches,
        ..
    } = load;
    println!(
        "{{\"pid\": {}, \"commands\": {commands}, \"errors\": {errors}, \"verified\": {verified}, \"mismatches\": {mismatches}, \"iops\": {:.0}}}",
        std::process::id(),
        commands as f64 / secs
    );
    if mismatches > 0 || errors > 0 {
        std::process::exit(1);
    }
}

/// The verified load's state: what is in flight on which slot, what each block last had
/// acknowledged, and the counts it prints.
struct Load {
    /// Per block: the sequence number last acknowledged (0: never written by this process).
    acked: Vec<u64>,
    in_flight_block: Vec<bool>,
    free_slots: Vec<u64>,
    /// Per slot: the command on it, its block and its sequence number.
    issued: Vec<Option<(Op, u64, u64)>>,
    rng: SmallRng,
    /// A block's bytes, stamped for a write or copied out of a read.
    buf: Vec<u8>,
    seq: u64,
    commands: u64,
    errors: u64,
    verified: u64,
    mismatches: u64,
}

impl Load {
    /// A load over `a`'s extent with nothing in flight yet.
    fn new(a: &Args) -> Self {
        let blocks = a.len / a.bs;
        Load {
            acked: vec![0u64; blocks as usize],
            in_flight_block: vec![false; blocks as usize],
            free_slots: (0..u64::from(a.qd)).collect(),
            issued: vec![None; a.qd as usize],
            rng: SmallRng::seed_from_u64(a.seed),
            buf: vec![0u8; a.bs as usize],
            seq: 0,
            commands: 0,
            errors: 0,
            verified: 0,
            mismatches: 0,
        }
    }

    /// Submits a command on each free slot, each on a random block not in flight (a write
    /// stamped with the next sequence number), until the slots run out or the block drawn is
    /// in flight.
    fn issue(&mut self, a: &Args, ch: &mut Channel) {
        let blocks = self.acked.len() as u64;
        while !self.free_slots.is_empty() {
            let block = next(&mut self.rng) % blocks;
            if self.in_flight_block[block as usize] {
                break;
            }
            let slot = self.free_slots.pop().expect("checked");
            let write = match a.rw.as_str() {
                "randwrite" => true,
                "randread" => false,
                _ => next(&mut self.rng) & 1 == 0,
            };
            let offset = a.offset + block * a.bs;
            let op = if write {
                self.seq += 1;
                stamp(&mut self.buf, offset, self.seq);
                ch.fill(slot * a.bs, &self.buf);
                Op::Write
            } else {
                Op::Read
            };
            self.in_flight_block[block as usize] = true;
            self.issued[slot as usize] = Some((op, block, self.seq));
            ch.submit(op, offset, a.bs as u32, slot * a.bs, slot)
                .expect("one command per free slot");
        }
    }

    /// Takes completion `c`: frees its slot and block, counts it, records a write's sequence
    /// number as acknowledged and checks a read's data against the block's last one.
    fn complete(&mut self, a: &Args, ch: &Channel, c: Completion) {
        let slot = c.user_data;
        let (op, block, s) = self.issued[slot as usize].take().expect("issued");
        self.in_flight_block[block as usize] = false;
        self.free_slots.push(slot);
        self.commands += 1;
        if c.status != ChannelStatus::Ok {
            self.errors += 1;
            return;
        }
        let acked = self.acked[block as usize];
        if op == Op::Write {
            self.acked[block as usize] = s;
        } else if acked != 0 {
            ch.copy_from_region(slot * a.bs, &mut self.buf);
            if holds_stamp(&self.buf, a.offset + block * a.bs, acked) {
                self.verified += 1;
            } else {
                self.mismatches += 1;
            }
        }
    }
}

/// Scribbles on the channel's own memory `iterations` times (see the module doc). Prints how
/// many completions came back.
fn fuzz(ch: &mut Channel, iterations: u64, seed: u64) {
    use nvarray_channel::layout::{CLOSED, CQ_HEAD, SLEEPING, SQ_TAIL};
    let mut rng = SmallRng::seed_from_u64(seed);
    let g = *ch.geometry();
    // The words the daemon reads, and the ones it only writes whose value it never trusts
    // back. (Its own head and tail it never reads, so scribbling there would only keep this
    // client from mending its rings.)
    let words = [SQ_TAIL, CQ_HEAD, SLEEPING, CLOSED];
    let mut completions = 0u64;
    for i in 0..iterations {
        let r = next(&mut rng);
        match r % 8 {
            // A counter, often a near one (so the rings keep moving), sometimes any value.
            0 | 1 => {
                let w = ch.region().word(words[(r >> 8) as usize % words.len()]);
                let v = if r & (1 << 40) != 0 {
                    next(&mut rng) as u32
                } else {
                    w.load(std::sync::atomic::Ordering::Relaxed)
                        .wrapping_add((r >> 16) as u32 % 4)
                };
                w.store(v, std::sync::atomic::Ordering::Release);
            }
            // A ring entry, in place, without making it visible.
            2 | 3 => {
                let e = random_entry(&mut rng, &g);
                ch.region().write_sq(next(&mut rng) as u32, e);
            }
            // Bytes in the DMA region.
            4 => {
                let at = next(&mut rng) % g.buffer_bytes.saturating_sub(64).max(1);
                ch.fill(at, &next(&mut rng).to_le_bytes());
            }
            // An entry made visible as a client would.
            _ => {
                let e = random_entry(&mut rng, &g);
                ch.push_raw(e);
            }
        }
        if i % 16 == 0 {
            completions += ch.poll(|_| {}) as u64;
        }
        if i % 64 == 63 {
            // Mend the rings now and then, so the entries written meanwhile reach the checks.
            ch.resynchronise();
        }
    }
    println!(
        "{{\"pid\": {}, \"fuzz_iterations\": {iterations}, \"completions\": {completions}, \"stray\": {}}}",
        std::process::id(),
        ch.stray_completions
    );
}

/// An entry with each field either plausible or anything.
fn random_entry(
    rng: &mut SmallRng,
    g: &nvarray_channel::layout::Geometry,
) -> nvarray_channel::layout::SqEntry {
    let r = next(rng);
    let pick =
        |bit: u32, plausible: u64, any: u64| if r & (1 << bit) != 0 { plausible } else { any };
    nvarray_channel::layout::SqEntry {
        op: pick(0, r % 3, next(rng)) as u32,
        id: pick(1, r % u64::from(g.queue_depth), next(rng)) as u32,
        offset: pick(2, (next(rng) % (g.size_bytes / 4096)) * 4096, next(rng)),
        len: pick(3, 4096, next(rng)) as u32,
        reserved: next(rng) as u32,
        buf: pick(4, (next(rng) % (g.buffer_bytes / 4096)) * 4096, next(rng)),
    }
}
