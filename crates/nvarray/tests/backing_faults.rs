//! Faults in nvarray's own storage reach every front end's clients as errors (issue 58; the
//! promise is docs/reliability.md's "When the storage under nvarray fails"): user-space
//! channels, the FUSE mount through the kernel, and `bench --verify`, each over a backing whose
//! operations fail at random (`BackingFaults`). NBD's is nvarray-nbd's stateful fuzzer
//! (`backing_faults_reach_clients_as_errors_and_lose_no_acknowledged_write`).
//!
//! For channels and FUSE a seeded stream of reads, writes and flushes runs on a durable file
//! backing whose reads, writes, msyncs and fsyncs fail one in `NVARRAY_FAULTS_ONE_IN`, and
//! each reply is judged:
//! - a request during which a fault was injected fails, never succeeds;
//! - no request fails without a fault, except a flush after a flush failed;
//! - no flush succeeds after one failed (the device then restarts on the same file);
//! - every acknowledged write reads back until overwritten (a failed one may or may not have
//!   landed, sector by sector).
//!
//! The test command runs each briefly; `scripts/campaign.sh faults` runs ≥ 10,000 faults each.
//! A failure names its seed and step and the command that replays it.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use nvarray_channel::{Channel, ChannelError, Daemon, DaemonOptions, ShutdownHandle};
use nvarray_host::options::{BackingFaults, BackingKind, BackingOp};
use nvarray_host::{Device, Options};
use nvarray_model::presets;
use nvarray_run::{emu, EmuRunError};
use nvarray_workload::{JobSpec, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const SIZE_BYTES: u64 = 16 << 20;
const SECTOR_BYTES: u64 = 512;
/// Largest request, in sectors (several device commands: the tags hold 64 KiB).
const REQUEST_SECTORS_MAX: u64 = 256;

/// A count or seed from the environment (`scripts/campaign.sh` sets them), else `default`.
fn campaign_env(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| {
        v.replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
    })
}

/// A `dram` device of `SIZE_BYTES` on `backing` with `faults`, run inline.
fn device(backing: BackingKind, faults: &Arc<BackingFaults>) -> Arc<Device> {
    let mut config = presets::preset("dram").unwrap().load(&[]).unwrap();
    config.memory.capacity_bytes = SIZE_BYTES;
    let options = Options {
        backing,
        backing_faults: Some(Arc::clone(faults)),
        device_threads: 0,
        buffer_bytes: Some(64 * 1024),
        ..Options::default()
    };
    Arc::new(Device::open(&config, &options).unwrap())
}

fn durable(image: &Path) -> BackingKind {
    BackingKind::File {
        path: image.to_path_buf(),
        durable: true,
        read_only: false,
        sparse: false,
    }
}

/// What one front end does with a request: whether it succeeded.
trait FrontEnd {
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> bool;
    fn write(&mut self, offset: u64, data: &[u8]) -> bool;
    fn flush(&mut self) -> bool;
    /// Stops the device and starts a new one on the same image (an operator's restart after
    /// a failed flush). Returns whether the old one's last flush, at its stop, succeeded
    /// (None where stopping does not flush).
    fn restart(&mut self) -> Option<bool>;
}

/// Each sector's content is the id of the write that put it there (zeroes: none yet), in
/// every 8-byte word with the sector's number, so a read tells which write it shows.
fn content(id: u32, sector: u64) -> [u8; SECTOR_BYTES as usize] {
    let mut s = [0u8; SECTOR_BYTES as usize];
    if id != 0 {
        let word = (u64::from(id) << 40 | sector).to_le_bytes();
        for w in s.chunks_mut(8) {
            w.copy_from_slice(&word);
        }
    }
    s
}

/// Which writes each sector may show: one after an acknowledged write, more after failed ones.
struct Sectors {
    may_show: Vec<Vec<u32>>,
}

impl Sectors {
    fn new() -> Self {
        Sectors {
            may_show: vec![vec![0]; (SIZE_BYTES / SECTOR_BYTES) as usize],
        }
    }

    fn written(&mut self, first: u64, n: u64, id: u32) {
        for s in first..first + n {
            self.may_show[s as usize] = vec![id];
        }
    }

    fn maybe_written(&mut self, first: u64, n: u64, id: u32) {
        for s in first..first + n {
            self.may_show[s as usize].push(id);
        }
    }

    /// The first sector of `data` (read from sector `first`) that shows a write it may not.
    fn wrong(&self, first: u64, data: &[u8]) -> Option<(u64, String)> {
        data.chunks(SECTOR_BYTES as usize)
            .zip(first..)
            .find_map(|(got, s)| {
                let ok = self.may_show[s as usize]
                    .iter()
                    .any(|&id| got == content(id, s));
                (!ok).then(|| {
                    (
                        s,
                        format!("may show writes {:?}", self.may_show[s as usize]),
                    )
                })
            })
    }
}

/// A seeded stream of requests on one front end, each reply judged against the faults
/// injected while it ran.
struct Campaign<'a> {
    name: &'static str,
    front: &'a mut dyn FrontEnd,
    faults: Arc<BackingFaults>,
    rng: SmallRng,
    seed: u64,
    step: u64,
    sectors: Sectors,
    next_id: u32,
    /// A flush failed on the running device: none may succeed after.
    flush_failed: bool,
    sync_faults_seen: u64,
    counts: BTreeMap<&'static str, u64>,
}

impl Campaign<'_> {
    fn fail(&self, what: String) -> ! {
        panic!(
            "{} seed {}, step {}: {what}\nreplay: NVARRAY_FAULTS_SEED={} NVARRAY_FAULTS_STEPS={} \
             cargo test --release -p nvarray --test backing_faults {}",
            self.name,
            self.seed,
            self.step,
            self.seed,
            self.step + 1,
            self.name
        )
    }

    fn count(&mut self, what: &'static str) {
        *self.counts.entry(what).or_default() += 1;
    }

    /// A fault in an msync or fsync failed a flush: none may succeed from now on.
    fn note_sync_faults(&mut self) {
        let n = self.faults.injected(BackingOp::Msync) + self.faults.injected(BackingOp::Fsync);
        if n > self.sync_faults_seen {
            self.sync_faults_seen = n;
            self.flush_failed = true;
        }
    }

    /// Runs `request` and judges whether it may have succeeded or failed; returns whether it
    /// succeeded.
    fn judged(&mut self, what: &str, request: impl FnOnce(&mut dyn FrontEnd) -> bool) -> bool {
        let before = self.faults.injected_total();
        let latched = what == "flush" && self.flush_failed;
        let ok = request(&mut *self.front);
        let hit = self.faults.injected_total() - before;
        self.note_sync_faults();
        match (ok, hit) {
            (true, 0) if latched => {
                self.fail("a flush succeeded after an earlier flush failed".into())
            }
            (true, 0) => {}
            (true, _) => self.fail(format!("{what} succeeded although {hit} faults hit it")),
            (false, 0) if latched => self.count("failed: a flush failed before"),
            (false, 0) => self.fail(format!("{what} failed with no fault injected")),
            (false, _) => self.count("failed: a fault hit it"),
        }
        ok
    }

    fn extent(&mut self) -> (u64, u64) {
        let sectors = SIZE_BYTES / SECTOR_BYTES;
        let n = self.rng.gen_range(1..=REQUEST_SECTORS_MAX);
        (self.rng.gen_range(0..=sectors - n), n)
    }

    fn step(&mut self) {
        self.note_sync_faults();
        match self.rng.gen_range(0..100) {
            0..=44 => {
                self.count("read");
                let (first, n) = self.extent();
                let mut buf = vec![0u8; (n * SECTOR_BYTES) as usize];
                if self.judged("read", |f| f.read(first * SECTOR_BYTES, &mut buf)) {
                    if let Some((s, why)) = self.sectors.wrong(first, &buf) {
                        self.fail(format!("read of sectors {first}+{n}: sector {s} {why}"));
                    }
                }
            }
            45..=89 => {
                self.count("write");
                let (first, n) = self.extent();
                self.next_id += 1;
                let id = self.next_id;
                let data: Vec<u8> = (first..first + n).flat_map(|s| content(id, s)).collect();
                if self.judged("write", |f| f.write(first * SECTOR_BYTES, &data)) {
                    self.sectors.written(first, n, id);
                } else {
                    self.sectors.maybe_written(first, n, id);
                }
            }
            _ => {
                self.count("flush");
                let latched = self.flush_failed;
                if !self.judged("flush", |f| f.flush()) && latched {
                    // Failed twice: the promise held; start the device again on its file.
                    self.restart();
                }
            }
        }
        self.step += 1;
    }

    fn restart(&mut self) {
        let flushed = self.front.restart();
        self.note_sync_faults();
        if flushed == Some(true) && self.flush_failed {
            self.fail("the device's last flush, at its stop, succeeded after one failed".into());
        }
        self.flush_failed = false;
        self.count("restarted after a failed flush");
    }

    /// Every sector reads back as the model allows (a read a fault hit, which changes
    /// nothing, is asked again).
    fn read_everything(&mut self) {
        let chunk = REQUEST_SECTORS_MAX;
        for first in (0..SIZE_BYTES / SECTOR_BYTES).step_by(chunk as usize) {
            let mut buf = vec![0u8; (chunk * SECTOR_BYTES) as usize];
            while !self.judged("read", |f| f.read(first * SECTOR_BYTES, &mut buf)) {}
            if let Some((s, why)) = self.sectors.wrong(first, &buf) {
                self.fail(format!("final read: sector {s} {why}"));
            }
        }
    }
}

/// Runs `NVARRAY_FAULTS_STEPS` requests on the front end `start` makes over a backing with
/// `random_faults` (seeded by `NVARRAY_FAULTS_SEED`, else `default_seed`) and prints the
/// summary.
fn campaign<F: FrontEnd>(
    name: &'static str,
    default_seed: u64,
    start: fn(Arc<BackingFaults>) -> F,
) {
    let seed = campaign_env("NVARRAY_FAULTS_SEED", default_seed);
    let faults = random_faults(seed);
    let front = &mut start(Arc::clone(&faults));
    let steps = campaign_env("NVARRAY_FAULTS_STEPS", 3000);
    let started = Instant::now();
    let mut c = Campaign {
        name,
        front,
        faults,
        rng: SmallRng::seed_from_u64(seed),
        seed,
        step: 0,
        sectors: Sectors::new(),
        next_id: 0,
        flush_failed: false,
        sync_faults_seen: 0,
        counts: BTreeMap::new(),
    };
    while c.step < steps {
        c.step();
    }
    c.read_everything();
    let injected = c.faults.injected_total();
    println!(
        "{name} backing faults: {injected} faults injected in {steps} requests, 0 wrong \
         replies, 0 acknowledged writes lost (seed {seed}, {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    for (what, n) in &c.counts {
        println!("  {what}: {n}");
    }
    assert!(injected > 0, "no fault was injected");
}

/// The plan of the random campaigns: one in `NVARRAY_FAULTS_ONE_IN` of each kind fails.
fn random_faults(seed: u64) -> Arc<BackingFaults> {
    let one_in = campaign_env("NVARRAY_FAULTS_ONE_IN", 20);
    let plan = format!("one-in={one_in},seed={seed},ops=read+write+msync+fsync");
    Arc::new(BackingFaults::parse(&plan).unwrap())
}

// ---- channels

/// The channel daemon in this process and one channel to it.
struct Channels {
    dir: tempfile::TempDir,
    image: PathBuf,
    faults: Arc<BackingFaults>,
    daemon: Option<(ShutdownHandle, JoinHandle<Result<(), ChannelError>>)>,
    channel: Option<Channel>,
}

impl Channels {
    fn start(faults: Arc<BackingFaults>) -> Channels {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image");
        let mut c = Channels {
            dir,
            image,
            faults,
            daemon: None,
            channel: None,
        };
        c.start_daemon();
        c
    }

    fn start_daemon(&mut self) {
        let socket = self.dir.path().join("channels.sock");
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let grant = format!("all:0:{SIZE_BYTES}:rw:{uid}").parse().unwrap();
        let daemon = Daemon::bind(
            device(durable(&self.image), &self.faults),
            DaemonOptions {
                socket: socket.clone(),
                grants: vec![grant],
                channels_max: 2,
            },
        )
        .unwrap();
        let shutdown = daemon.shutdown_handle();
        let thread = std::thread::spawn(move || daemon.run());
        self.daemon = Some((shutdown, thread));
        self.channel = Some(Channel::open(&socket).unwrap());
    }

    fn channel(&mut self) -> &mut Channel {
        self.channel.as_mut().expect("a channel")
    }
}

/// A channel's answer: a command's error status is a failed request; anything else (the
/// daemon gone, a protocol error) is not a backing fault's doing and fails the test.
fn channel_ok(r: Result<(), ChannelError>) -> bool {
    match r {
        Ok(()) => true,
        Err(ChannelError::Command { .. }) => false,
        Err(e) => panic!("the channel failed, not a command: {e}"),
    }
}

impl FrontEnd for Channels {
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> bool {
        channel_ok(self.channel().read(buf, offset))
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> bool {
        channel_ok(self.channel().write(data, offset))
    }

    fn flush(&mut self) -> bool {
        channel_ok(self.channel().flush())
    }

    fn restart(&mut self) -> Option<bool> {
        self.channel = None;
        let (shutdown, thread) = self.daemon.take().expect("a daemon");
        shutdown.shutdown();
        let flushed = match thread.join().unwrap() {
            Ok(()) => true,
            Err(ChannelError::Flush(_)) => false,
            Err(e) => panic!("the daemon's run ended in {e}"),
        };
        self.start_daemon();
        Some(flushed)
    }
}

impl Drop for Channels {
    fn drop(&mut self) {
        self.channel = None;
        if let Some((shutdown, thread)) = self.daemon.take() {
            shutdown.shutdown();
            let _ = thread.join();
        }
    }
}

#[test]
fn channels() {
    campaign("channels", 0x6368_616e, Channels::start);
}

// ---- FUSE

/// `nvarray mount`'s file system in this process, its disk file opened through the kernel.
struct Fuse {
    dir: tempfile::TempDir,
    image: PathBuf,
    faults: Arc<BackingFaults>,
    mounted: Option<nvarray_fuse::Mounted>,
    disk: Option<std::fs::File>,
}

impl Fuse {
    fn start(faults: Arc<BackingFaults>) -> Fuse {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("mnt")).unwrap();
        let image = dir.path().join("image");
        let mut f = Fuse {
            dir,
            image,
            faults,
            mounted: None,
            disk: None,
        };
        f.mount();
        f
    }

    fn mount(&mut self) {
        let device = device(durable(&self.image), &self.faults);
        let mounted = nvarray_fuse::mount(device, &self.dir.path().join("mnt"), || {}).unwrap();
        let disk = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(mounted.disk_path())
            .unwrap();
        self.disk = Some(disk);
        self.mounted = Some(mounted);
    }

    fn disk(&self) -> &std::fs::File {
        self.disk.as_ref().expect("mounted")
    }
}

/// The kernel's answer: EIO is a failed request; any other error fails the test.
fn kernel_ok(r: std::io::Result<bool>) -> bool {
    match r {
        Ok(whole) => whole,
        Err(e) if e.raw_os_error() == Some(libc::EIO) => false,
        Err(e) => panic!("expected success or EIO, got {e}"),
    }
}

impl FrontEnd for Fuse {
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> bool {
        let len = buf.len();
        kernel_ok(self.disk().read_at(buf, offset).map(|n| n == len))
    }

    /// One `pwrite`: a short count (the kernel split the write and a later part failed) is a
    /// failed request too.
    fn write(&mut self, offset: u64, data: &[u8]) -> bool {
        kernel_ok(self.disk().write_at(data, offset).map(|n| n == data.len()))
    }

    fn flush(&mut self) -> bool {
        kernel_ok(self.disk().sync_data().map(|()| true))
    }

    /// Unmounting does not flush (every acknowledged write is on the device already).
    fn restart(&mut self) -> Option<bool> {
        self.disk = None;
        self.mounted.take().expect("mounted").join().unwrap();
        self.mount();
        None
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        self.disk = None;
        if let Some(mut m) = self.mounted.take() {
            let _ = m.unmount();
        }
    }
}

#[test]
fn fuse_mount() {
    campaign("fuse_mount", 0x6675_7365, Fuse::start);
}

// ---- bench --verify

/// `bench --verify` (the runner behind it) on a fresh device per run whose reads and writes
/// fail one in 150: a run a fault hit must end in the device's error (never pass, never blame
/// the data), and one without must pass with its reads checked.
#[test]
fn bench_verify() {
    let first_seed = campaign_env("NVARRAY_FAULTS_SEED", 0x6265_6e63);
    let runs = campaign_env("NVARRAY_FAULTS_RUNS", 100);
    let started = Instant::now();
    let mut job = JobSpec::default();
    for (k, v) in [
        ("rw", "randrw"),
        ("bssplit", "512/40:4k/40:64k/20"),
        ("iodepth", "4"),
        ("size", "1m"),
        ("number_ios", "300"),
        ("verify", "crc32c"),
    ] {
        job.set(k, v).unwrap();
    }
    let workload = Workload {
        jobs: vec![job],
        trace: None,
    };
    let (mut injected, mut failed, mut verified) = (0, 0, 0);
    for seed in first_seed..first_seed + runs {
        let plan = format!("one-in=150,seed={seed},ops=read+write,faults=eio+enospc+edquot+short");
        let faults = Arc::new(BackingFaults::parse(&plan).unwrap());
        let device = device(BackingKind::Ram, &faults);
        let result = emu::run_on(&device, &workload, &mut |_| {});
        let hit = faults.injected_total();
        let replay = format!(
            "replay: NVARRAY_FAULTS_SEED={seed} NVARRAY_FAULTS_RUNS=1 cargo test --release -p \
             nvarray --test backing_faults bench_verify"
        );
        match (result, hit) {
            (Ok(report), 0) => verified += report.emulator.map_or(0, |e| e.verified_blocks),
            (Ok(_), _) => {
                panic!("seed {seed}: the run passed although {hit} faults hit it\n{replay}")
            }
            (Err(EmuRunError::Host(_)), 1..) => failed += 1,
            (Err(e), _) => panic!("seed {seed}: {hit} faults, the run ended in {e}\n{replay}"),
        }
        injected += hit;
    }
    println!(
        "bench_verify backing faults: {injected} faults injected in {runs} runs, {failed} runs \
         ended in the device's error, the others passed with {verified} blocks verified, 0 \
         wrong outcomes (seeds {first_seed}.., {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed > 0 && failed < runs,
        "{failed} of {runs} runs failed: no contrast"
    );
}
