//! A pool: the backing file as one byte array, read through a shared mapping and changed by
//! transactions. Opening attaches this process to the pool's NVM-tier file, recovering it
//! first if the last process to use it did not close it cleanly.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::coord::{self, Acquired, Liveness, OpenLock};
use crate::error::{io_err, PmError, Result};
use crate::layout::{
    self, Layout, PROCS, PROC_BYTES, TX_BYTES, TX_BYTES_LOGGED, TX_COMMITS, TX_LSN, TX_OWNER,
    TX_SLOTS,
};
use crate::log::{Ring, STATE_COMMITTED};
use crate::media::Media;
use crate::options::PoolOptions;
use crate::recovery::{self, RecoveryReport};
use crate::sim::{SimWorld, Tier};
use crate::tx::Tx;

/// Largest pool: page numbers must fit the cache index (36 bits of 4 KiB pages).
pub const MAX_POOL: u64 = 1 << 48;

/// Pool-wide counters, shared by every attached process.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Aborts,
    Conflicts,
    RecordsDigested,
    PagesWrittenBack,
    WritebackRounds,
    LogFullWaits,
    CacheEvictions,
    ProcessesReaped,
    Fenced,
}

const _: () = assert!((Counter::Fenced as usize) < layout::COUNTERS);
const _: () = assert!(
    layout::LOCK_WORDS == 1 << 16,
    "coord::page_lock_index hashes to 16 bits"
);

/// What the pool has done since the first process attached to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub commits: u64,
    pub aborts: u64,
    /// Writes refused because an older transaction held the page (wait-die).
    pub conflicts: u64,
    pub bytes_logged: u64,
    /// Log records applied to the write cache.
    pub records_digested: u64,
    pub pages_written_back: u64,
    pub writeback_rounds: u64,
    /// Commits that had to wait for log space.
    pub log_full_waits: u64,
    pub cache_evictions: u64,
    /// Dead processes whose transactions another process cleaned up.
    pub processes_reaped: u64,
    /// Reservations of stalled live committers that later commits fenced and passed
    /// (`PoolOptions::stall_timeout`); each one's commit failed with `Fenced`.
    pub fenced: u64,
    pub dirty_pages: u64,
    pub cache_pages: u64,
    /// Log bytes not yet applied to the cache.
    pub log_used: u64,
    pub log_size: u64,
}

impl Stats {
    /// (name, value) of every field, for tables and JSON.
    pub fn fields(&self) -> [(&'static str, u64); 15] {
        [
            ("commits", self.commits),
            ("aborts", self.aborts),
            ("conflicts", self.conflicts),
            ("bytes_logged", self.bytes_logged),
            ("records_digested", self.records_digested),
            ("pages_written_back", self.pages_written_back),
            ("writeback_rounds", self.writeback_rounds),
            ("log_full_waits", self.log_full_waits),
            ("cache_evictions", self.cache_evictions),
            ("processes_reaped", self.processes_reaped),
            ("fenced", self.fenced),
            ("dirty_pages", self.dirty_pages),
            ("cache_pages", self.cache_pages),
            ("log_used", self.log_used),
            ("log_size", self.log_size),
        ]
    }
}

/// The state every handle and background thread of one attached process shares.
pub(crate) struct Inner {
    pub nvm: Media,
    pub storage: Media,
    pub layout: Layout,
    pub nvm_path: PathBuf,
    pub backing_path: PathBuf,
    pub nvm_file: Option<File>,
    pub live: Liveness,
    pub persist_ns: u64,
    pub opts: PoolOptions,
    pub recovery: Option<RecoveryReport>,
}

/// An open pool. Share it between threads by reference (it is `Sync`); every thread may run
/// its own transactions.
///
/// Isolation is **read committed** (as in the seed, slide 15): reads through the mapping see
/// only committed data, never another transaction's uncommitted writes; a transaction reads
/// its own writes through `Tx::read`. Writers of the same 4 KiB page are serialised by page
/// locks held to commit (wait-die: an older transaction waits, a younger one gets
/// `PmError::Conflict` and should abort and retry), so the first writer commits first. A read
/// that races a commit may see some of that commit's writes and not yet others.
pub struct Pool {
    inner: Arc<Inner>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("backing", &self.inner.backing_path)
            .field("nvm", &self.inner.nvm_path)
            .field("size", &self.inner.layout.pool_size)
            .finish()
    }
}

pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux. It is one
    // clock for every process, which transaction ages compared across processes need.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Inner {
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            nvm: &self.nvm,
            base: self.layout.log,
            size: self.layout.log_size,
        }
    }

    pub(crate) fn tail(&self) -> &AtomicU64 {
        self.nvm.word(layout::V_LOG_TAIL)
    }

    pub(crate) fn count(&self, c: Counter, n: u64) {
        if n > 0 {
            self.nvm
                .word(layout::V_COUNTERS + c as usize * 8)
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    fn counter(&self, c: Counter) -> u64 {
        self.nvm
            .word(layout::V_COUNTERS + c as usize * 8)
            .load(Ordering::Relaxed)
    }

    /// Counts a commit of `bytes` log bytes in the committer's own slot, off the shared lines.
    pub(crate) fn count_commit(&self, slot: usize, bytes: u64) {
        self.tx_word(slot, TX_COMMITS)
            .fetch_add(1, Ordering::Relaxed);
        self.tx_word(slot, TX_BYTES_LOGGED)
            .fetch_add(bytes, Ordering::Relaxed);
    }

    fn slot_counter(&self, field: usize) -> u64 {
        (0..TX_SLOTS)
            .map(|s| self.tx_word(s, field).load(Ordering::Relaxed))
            .sum()
    }

    /// The time a persist barrier issued now completes on the modelled NVM (0: no cost).
    /// Barriers need not complete in order: the log orders its records itself (`append.rs`).
    pub(crate) fn barrier_deadline(&self) -> u64 {
        if self.persist_ns == 0 {
            return 0;
        }
        mono_ns() + self.persist_ns
    }

    /// Spins until a barrier's deadline: the modelled write latency of the NVM technology.
    pub(crate) fn wait_persisted(&self, deadline: u64) {
        while deadline != 0 && mono_ns() < deadline {
            std::hint::spin_loop();
        }
    }

    /// Fence the flushed lines and pay the technology's write latency.
    pub(crate) fn persist_barrier(&self) {
        self.nvm.fence();
        self.wait_persisted(self.barrier_deadline());
    }

    pub(crate) fn proc_state(&self, p: usize) -> &AtomicU64 {
        self.nvm.word(layout::V_PROCS + p * PROC_BYTES)
    }

    fn proc_pid(&self, p: usize) -> &AtomicU64 {
        self.nvm.word(layout::V_PROCS + p * PROC_BYTES + 8)
    }

    /// Word `field` (`layout::TX_*`) of transaction slot `slot`.
    pub(crate) fn tx_word(&self, slot: usize, field: usize) -> &AtomicU64 {
        self.nvm.word(layout::V_TX + slot * TX_BYTES + field * 8)
    }

    /// The log position of the record slot `slot` is committing, if any (stored plus one, as
    /// 0 is a valid position).
    pub(crate) fn tx_lsn(&self, slot: usize) -> Option<u64> {
        self.tx_word(slot, TX_LSN)
            .load(Ordering::Acquire)
            .checked_sub(1)
    }

    pub(crate) fn set_tx_lsn(&self, slot: usize, lsn: Option<u64>) {
        self.tx_word(slot, TX_LSN)
            .store(lsn.map_or(0, |l| l + 1), Ordering::Release);
    }

    pub(crate) fn lock_word(&self, i: usize) -> &AtomicU64 {
        self.nvm.word(layout::V_LOCKS + i * 8)
    }

    /// Whether the transaction in slot `tx` belongs to a live process.
    pub(crate) fn owner_alive(&self, tx: u32) -> bool {
        let owner = self
            .tx_word(tx as usize % TX_SLOTS, TX_OWNER)
            .load(Ordering::Acquire);
        owner != 0 && self.live.alive(owner as usize - 1)
    }

    /// Takes the maintenance lock (cache and log head); repairs after a dead holder.
    pub(crate) fn lock_maintenance(&self) -> Result<MaintenanceGuard<'_>> {
        let word = self.nvm.word(layout::V_MAINT_LOCK);
        let how = coord::lock_robust(word, &self.live, self.opts.timeout, "the maintenance lock")?;
        if let Acquired::FromDead(_) = how {
            self.recount_dirty();
        }
        Ok(MaintenanceGuard(self))
    }

    pub(crate) fn try_lock_maintenance(&self) -> Option<MaintenanceGuard<'_>> {
        let how = coord::try_lock_robust(self.nvm.word(layout::V_MAINT_LOCK), &self.live)?;
        if let Acquired::FromDead(_) = how {
            self.recount_dirty();
        }
        Some(MaintenanceGuard(self))
    }

    /// Applies what it can of the log without waiting for the lock (a committer short of log
    /// space helps the applier).
    pub(crate) fn try_digest(&self) -> Result<usize> {
        match self.try_lock_maintenance() {
            Some(_g) => self.digest(DIGEST_BATCH),
            None => Ok(0),
        }
    }

    /// Cleans up after a dead process: waits for the durable prefix to pass its unpublished
    /// log reservations (`append.rs`), finishes making its committed transactions visible,
    /// releases its page locks and frees its slots.
    pub(crate) fn reap(&self, p: usize) -> Result<()> {
        let _g = self.lock_maintenance()?;
        if self.proc_state(p).load(Ordering::Acquire) == 0 || self.live.alive(p) {
            return Ok(());
        }
        self.reap_locked(p)
    }

    /// `reap` of a process known to be dead; the caller holds the maintenance lock.
    fn reap_locked(&self, p: usize) -> Result<()> {
        let ring = self.ring();
        for s in 0..TX_SLOTS {
            if self.tx_word(s, TX_OWNER).load(Ordering::Acquire) != p as u64 + 1 {
                continue;
            }
            // Durable first (with everything before it), then visible, then unlocked.
            self.pass_reservation_of(s)?;
            let head = self.nvm.load_word(layout::H_LOG_HEAD);
            if let Some(lsn) = self.tx_lsn(s).filter(|&l| l >= head) {
                if let Some(h) = ring.header(lsn).filter(|h| h.owner as usize == s) {
                    if self.nvm.load_word(ring.state_offset(lsn)) == STATE_COMMITTED
                        && ring.body_intact(&h)
                    {
                        self.make_visible(&h)?;
                    }
                }
            }
            self.release_locks_of(s);
            self.set_tx_lsn(s, None);
            self.tx_word(s, TX_OWNER).store(0, Ordering::Release);
        }
        self.proc_state(p).store(0, Ordering::Release);
        self.count(Counter::ProcessesReaped, 1);
        Ok(())
    }

    fn release_locks_of(&self, tx: usize) {
        let me = tx as u64 + 1;
        for i in 0..layout::LOCK_WORDS {
            let w = self.lock_word(i);
            if w.load(Ordering::Relaxed) == me {
                let _ = w.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
            }
        }
    }

    fn stats(&self) -> Stats {
        let head = self.nvm.load_word(layout::H_LOG_HEAD);
        let tail = self.tail().load(Ordering::Relaxed);
        Stats {
            commits: self.slot_counter(TX_COMMITS),
            aborts: self.counter(Counter::Aborts),
            conflicts: self.counter(Counter::Conflicts),
            bytes_logged: self.slot_counter(TX_BYTES_LOGGED),
            records_digested: self.counter(Counter::RecordsDigested),
            pages_written_back: self.counter(Counter::PagesWrittenBack),
            writeback_rounds: self.counter(Counter::WritebackRounds),
            log_full_waits: self.counter(Counter::LogFullWaits),
            cache_evictions: self.counter(Counter::CacheEvictions),
            processes_reaped: self.counter(Counter::ProcessesReaped),
            fenced: self.counter(Counter::Fenced),
            dirty_pages: self.dirty_pages(),
            cache_pages: self.layout.cache_pages,
            log_used: tail.saturating_sub(head),
            log_size: self.layout.log_size,
        }
    }

    /// Applies the whole log and, if `write_back_all` or over the threshold, writes back.
    fn maintain(&self, write_back_all: bool) -> Result<()> {
        let mut waiter = coord::Waiter::new(self.opts.timeout);
        loop {
            let tail = self.tail().load(Ordering::Acquire);
            {
                let _g = self.lock_maintenance()?;
                while self.digest(DIGEST_BATCH)? > 0 {}
                let head = self.nvm.load_word(layout::H_LOG_HEAD);
                if head >= tail {
                    if write_back_all || self.over_threshold() {
                        self.write_back()?;
                    }
                    return Ok(());
                }
            }
            // A record at the head is still being written, published or made visible by its
            // committer, or was abandoned by a dead one.
            if waiter.pause("a committer to finish")? {
                self.pass_abandoned()?;
            }
        }
    }
}

/// Records applied per hold of the maintenance lock.
const DIGEST_BATCH: usize = 256;

pub(crate) struct MaintenanceGuard<'a>(&'a Inner);

impl Drop for MaintenanceGuard<'_> {
    fn drop(&mut self) {
        coord::unlock_robust(self.0.nvm.word(layout::V_MAINT_LOCK));
    }
}

/// The NVM-tier file that belongs to a backing file.
pub fn nvm_file_path(nvm_dir: &Path, backing_canonical: &Path) -> PathBuf {
    nvm_dir.join(format!(
        "nvarray-pm-{:016x}.nvm",
        layout::backing_id(backing_canonical)
    ))
}

/// Opens the backing file; with `create`, makes it if it does not exist. Also says whether
/// this call made it.
fn open_backing(path: &Path, create: bool) -> Result<(File, bool)> {
    let existing = OpenOptions::new().read(true).write(true).open(path);
    match existing {
        Err(e) if create && e.kind() == std::io::ErrorKind::NotFound => {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(f) => Ok((f, true)),
                // Another process made it between the two calls: open theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    open_backing(path, false)
                }
                Err(e) => Err(io_err(path)(e)),
            }
        }
        other => other.map(|f| (f, false)).map_err(io_err(path)),
    }
}

/// Refuses a fresh NVM tier file of `need` bytes that the file system of `dir` has no room
/// for: a tmpfs such as /dev/shm takes a sparse file of any size, then the machine runs out
/// of memory as the cache fills (`--cache-size 1t`).
fn check_free_space(dir: &Path, need: u64) -> Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| PmError::BadOption(format!("{}: NUL in path", dir.display())))?;
    // SAFETY: statvfs is plain data; zeroed is a valid value for it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_dir` is NUL-terminated and `st` is a valid out-pointer for the call.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut st) } != 0 {
        return Err(io_err(dir)(std::io::Error::last_os_error()));
    }
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if need > free {
        return Err(PmError::BadOption(format!(
            "the NVM tier needs {need} bytes (log + cache + header) but {} has {free} bytes \
             free: lower the log or cache size, or choose another NVM directory",
            dir.display()
        )));
    }
    Ok(())
}

impl Pool {
    /// Opens the pool over the backing file `path` of `size` bytes, creating the file if
    /// `options.create` and it does not exist (`size` 0 opens an existing file at its size).
    /// Virtual capacity is the backing file's size, which may far exceed the NVM tier's.
    ///
    /// A backing file this call created is removed again if the open fails, so a refused
    /// `nv_allocate(..., NV_CREATE)` leaves nothing behind.
    pub fn open(path: impl AsRef<Path>, size: u64, options: &PoolOptions) -> Result<Pool> {
        options.validate()?;
        let path = path.as_ref();
        let (backing, created) = open_backing(path, options.create)?;
        let opened = Pool::open_over(backing, path, size, options);
        if opened.is_err() && created {
            let _ = std::fs::remove_file(path);
        }
        opened
    }

    fn open_over(backing: File, path: &Path, size: u64, options: &PoolOptions) -> Result<Pool> {
        let len = backing.metadata().map_err(io_err(path))?.len();
        let size = match (len, size) {
            (0, 0) => {
                return Err(PmError::Mismatch {
                    path: path.to_path_buf(),
                    what: "empty file and no size given".into(),
                })
            }
            (0, s) => {
                check_pool_size(path, s)?;
                backing.set_len(s).map_err(io_err(path))?;
                s
            }
            (l, 0) => l,
            (l, s) if l == s => s,
            (l, s) => {
                return Err(PmError::Mismatch {
                    path: path.to_path_buf(),
                    what: format!("the backing file is {l} bytes, not the {s} bytes asked for"),
                })
            }
        };
        check_pool_size(path, size)?;
        let canonical = path.canonicalize().map_err(io_err(path))?;
        let nvm_path = nvm_file_path(&options.nvm_dir, &canonical);
        let nvm_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&nvm_path)
            .map_err(io_err(&nvm_path))?;
        let lock_file = nvm_file.try_clone().map_err(io_err(&nvm_path))?;
        let _open = OpenLock::take(&lock_file).map_err(io_err(&nvm_path))?;
        let fresh = nvm_file.metadata().map_err(io_err(&nvm_path))?.len() == 0;
        if fresh {
            let l = Layout::new(size, options.log_size, options.cache_size);
            if let Err(e) = check_free_space(&options.nvm_dir, l.file_len as u64) {
                // Nobody else can be using a file that was empty under the open lock.
                let _ = std::fs::remove_file(&nvm_path);
                return Err(e);
            }
            nvm_file
                .set_len(l.file_len as u64)
                .map_err(io_err(&nvm_path))?;
        }
        let nvm = Media::nvm(&nvm_file, &nvm_path)?;
        let layout = if fresh {
            let l = Layout::new(size, options.log_size, options.cache_size);
            l.format(&nvm, &canonical)?;
            nvm.store_word(layout::H_CLEAN, 1);
            nvm.persist(layout::H_CLEAN, 8);
            l
        } else {
            let l = Layout::from_header(&nvm, &nvm_path)?;
            let recorded = layout::backing_path(&nvm);
            if recorded != canonical.to_string_lossy() {
                return Err(PmError::Mismatch {
                    path: nvm_path,
                    what: format!(
                        "belongs to backing file {recorded}, not {}",
                        canonical.display()
                    ),
                });
            }
            if l.pool_size != size {
                return Err(PmError::Mismatch {
                    path: nvm_path,
                    what: format!(
                        "records a pool of {} bytes but {} is {size} bytes",
                        l.pool_size,
                        canonical.display()
                    ),
                });
            }
            l
        };
        let storage = Media::storage(backing, path)?;
        let first = !(0..PROCS).any(|p| Liveness::new(Some(&nvm_file), usize::MAX).alive(p));
        let mut live = Liveness::new(Some(&nvm_file), 0);
        live.act_as_outsider(0);
        let mut inner = Inner {
            live,
            nvm,
            storage,
            layout,
            nvm_path,
            backing_path: canonical,
            nvm_file: Some(nvm_file),
            persist_ns: options.persist_cost_ns()?,
            opts: options.clone(),
            recovery: None,
        };
        let me = Pool::claim_process_slot(&mut inner, first)?;
        Pool::attach(inner, first, me)
    }

    /// Takes a process slot: one no process left state in if there is one (the usual case),
    /// else the slot of a dead process not yet reaped, reaped first as an outsider so its
    /// transactions, log reservations and locks are cleaned up before this process takes its
    /// number. Called under the open lock, so no other process attaches meanwhile.
    fn claim_process_slot(inner: &mut Inner, first: bool) -> Result<usize> {
        let file = inner.nvm_file.as_ref().expect("a pool over files");
        for p in 0..PROCS {
            let clean = first || inner.proc_state(p).load(Ordering::Acquire) == 0;
            if clean && coord::claim_liveness(file, p) {
                inner.live.hold(p);
                return Ok(p);
            }
        }
        for p in 0..PROCS {
            inner.live.act_as_outsider(p);
            if inner.live.alive(p) {
                continue;
            }
            inner.reap(p)?;
            if coord::claim_liveness(inner.nvm_file.as_ref().expect("file"), p) {
                inner.live.hold(p);
                return Ok(p);
            }
        }
        Err(PmError::NoProcessSlot(PROCS))
    }

    /// A pool over simulated tiers (crash tests). `world` holds both tiers' bytes; a fresh
    /// world (all zeros) is formatted, anything else is recovered like a crashed pool.
    pub fn open_simulated(world: Arc<SimWorld>, size: u64, options: &PoolOptions) -> Result<Pool> {
        options.validate()?;
        let nvm = Media::simulated(world.clone(), Tier::Nvm);
        let storage = Media::simulated(world, Tier::Storage);
        let path = PathBuf::from("<simulated nvm>");
        let layout = if nvm.load_word(0) == 0 {
            let l = Layout::new(size, options.log_size, options.cache_size);
            l.format(&nvm, Path::new("<simulated storage>"))?;
            nvm.store_word(layout::H_CLEAN, 1);
            nvm.persist(layout::H_CLEAN, 8);
            l
        } else {
            Layout::from_header(&nvm, &path)?
        };
        let inner = Inner {
            live: Liveness::new(None, 0),
            nvm,
            storage,
            layout,
            nvm_path: path,
            backing_path: PathBuf::from("<simulated storage>"),
            nvm_file: None,
            persist_ns: 0,
            opts: PoolOptions {
                background: false,
                ..options.clone()
            },
            recovery: None,
        };
        Pool::attach(inner, true, 0)
    }

    /// Sizes of both simulated tiers for a pool of `size` bytes with these options.
    pub fn simulated_sizes(size: u64, options: &PoolOptions) -> (usize, usize) {
        let l = Layout::new(size, options.log_size, options.cache_size);
        (l.file_len, size as usize)
    }

    /// Second half of opening: recovery if first, the process slot, the background threads.
    fn attach(mut inner: Inner, first: bool, me: usize) -> Result<Pool> {
        if first {
            if inner.nvm.load_word(layout::H_CLEAN) == 0 {
                inner.recovery = Some(recovery::recover(&inner)?);
            }
            recovery::reset_shared(&inner);
            inner.nvm.store_word(layout::H_CLEAN, 0);
            inner.nvm.persist(layout::H_CLEAN, 8);
        }
        inner.proc_state(me).store(1, Ordering::Release);
        inner
            .proc_pid(me)
            .store(std::process::id() as u64, Ordering::Relaxed);
        let inner = Arc::new(inner);
        if !first {
            // Slots of processes that died while others stayed attached.
            for p in (0..PROCS).filter(|&p| p != me) {
                if inner.proc_state(p).load(Ordering::Acquire) != 0 && !inner.live.alive(p) {
                    inner.reap(p)?;
                }
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let threads = if inner.opts.background {
            crate::background::spawn(&inner, &stop)
        } else {
            Vec::new()
        };
        Ok(Pool {
            inner,
            stop,
            threads,
            closed: false,
        })
    }

    /// Virtual capacity in bytes.
    pub fn size(&self) -> u64 {
        self.inner.layout.pool_size
    }

    /// The start of the mapping. Bytes `[0, size)` may be read through it (committed data,
    /// read-committed); never write through it — write in a transaction.
    pub fn as_ptr(&self) -> *const u8 {
        self.inner.storage.base()
    }

    /// Faults both tiers in, writable, without changing a byte (`MADV_POPULATE_WRITE`, Linux
    /// 5.14+; older kernels fault the backing mapping in readable only). Benchmarks call it so
    /// they time transactions, not first-touch page faults, which NVM does not have.
    pub fn prefault(&self) {
        let populate = |m: &Media| {
            // SAFETY: the range is exactly the mapping; the advice changes no data.
            unsafe {
                libc::madvise(
                    m.base() as *mut libc::c_void,
                    m.len(),
                    libc::MADV_POPULATE_WRITE,
                )
            }
        };
        populate(&self.inner.nvm);
        if populate(&self.inner.storage) != 0 {
            let mut buf = vec![0u8; 1 << 20];
            for off in (0..self.size()).step_by(buf.len()) {
                let n = buf.len().min((self.size() - off) as usize);
                self.inner.storage.read(off as usize, &mut buf[..n]);
            }
        }
    }

    /// Copies committed bytes at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        self.inner.storage.read(offset as usize, buf);
        Ok(())
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(PmError::OutOfRange {
                offset,
                len,
                size: self.size(),
            }),
        }
    }

    /// Starts a transaction.
    pub fn begin(&self) -> Result<Tx<'_>> {
        Tx::begin(self)
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Counters shared by every process attached to the pool.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// What recovery did when this process opened the pool, if it ran.
    pub fn recovery(&self) -> Option<&RecoveryReport> {
        self.inner.recovery.as_ref()
    }

    /// The NVM-tier file of this pool.
    pub fn nvm_path(&self) -> &Path {
        &self.inner.nvm_path
    }

    /// Cost of one persist barrier in nanoseconds.
    pub fn persist_cost_ns(&self) -> u64 {
        self.inner.persist_ns
    }

    /// Does the background threads' work now: applies the whole log to the cache and writes
    /// back if the dirty fraction is over the threshold.
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain(false)
    }

    /// Applies the whole log and writes every dirty page back: the backing file alone then
    /// holds every committed byte.
    pub fn sync(&self) -> Result<()> {
        self.inner.maintain(true)
    }

    /// Detaches. The last process to detach applies the log, writes everything back and marks
    /// the pool clean, so the next open needs no recovery.
    pub fn close(mut self) -> Result<()> {
        self.detach()
    }

    fn detach(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
        let inner = &self.inner;
        let me = inner.live.me();
        let Some(file) = inner.nvm_file.as_ref() else {
            return inner.maintain(true);
        };
        let lock_file = file.try_clone().map_err(io_err(&inner.nvm_path))?;
        let _open = OpenLock::take(&lock_file).map_err(io_err(&inner.nvm_path))?;
        let last = !(0..PROCS).any(|p| p != me && inner.live.alive(p));
        let result = if last {
            inner.maintain(true).map(|_| {
                inner.nvm.store_word(layout::H_CLEAN, 1);
                inner.nvm.persist(layout::H_CLEAN, 8);
            })
        } else {
            Ok(())
        };
        inner.proc_state(me).store(0, Ordering::Release);
        coord::release_liveness(file, me);
        result
    }
}

fn check_pool_size(path: &Path, size: u64) -> Result<()> {
    if size > MAX_POOL {
        return Err(PmError::Mismatch {
            path: path.to_path_buf(),
            what: format!("{size} bytes is more than the largest pool ({MAX_POOL} bytes)"),
        });
    }
    Ok(())
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            eprintln!(
                "nvarray-pm: closing {}: {e}",
                self.inner.backing_path.display()
            );
        }
    }
}

/// How long background threads sleep when they have nothing to do.
pub(crate) const IDLE: Duration = Duration::from_micros(500);
