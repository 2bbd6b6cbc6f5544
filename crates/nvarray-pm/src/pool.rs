//! A pool: the backing file as one byte array, read through a shared mapping and changed by
//! transactions. Opening attaches this process to the pool's NVM-tier file, recovering it
//! first if the last process to use it did not close it cleanly. The state that the pool's
//! handles and background threads share, and what they do with it, is in `pool_state.rs`.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::coord::{self, Liveness, OpenLock};
use crate::error::{io_err, PmError, Result};
use crate::layout::{self, Layout, PROCS};
use crate::media::Media;
use crate::options::PoolOptions;
use crate::pool_state::PoolState;
use crate::recovery::{self, RecoveryReport};
use crate::sim::{SimWorld, Tier};
use crate::tx::Tx;

/// Largest pool: page numbers must fit the cache index (36 bits of 4 KiB pages).
pub const MAX_POOL: u64 = 1 << 48;

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
    pub log_used_bytes: u64,
    pub log_size_bytes: u64,
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
            ("log_used", self.log_used_bytes),
            ("log_size", self.log_size_bytes),
        ]
    }
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
    inner: Arc<PoolState>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("backing", &self.inner.backing_path)
            .field("nvm", &self.inner.nvm_path)
            .field("size", &self.inner.layout.pool_size_bytes)
            .finish()
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
    pub fn open(path: impl AsRef<Path>, size_bytes: u64, options: &PoolOptions) -> Result<Pool> {
        options.validate()?;
        let path = path.as_ref();
        let (backing, created) = open_backing(path, options.create)?;
        let opened = Pool::open_over(backing, path, size_bytes, options);
        if opened.is_err() && created {
            let _ = std::fs::remove_file(path);
        }
        opened
    }

    fn open_over(
        backing: File,
        path: &Path,
        size_bytes: u64,
        options: &PoolOptions,
    ) -> Result<Pool> {
        let len = backing.metadata().map_err(io_err(path))?.len();
        let size_bytes = match (len, size_bytes) {
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
        check_pool_size(path, size_bytes)?;
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
            let l = Layout::new(size_bytes, options.log_size_bytes, options.cache_size_bytes);
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
            let l = Layout::new(size_bytes, options.log_size_bytes, options.cache_size_bytes);
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
            if l.pool_size_bytes != size_bytes {
                return Err(PmError::Mismatch {
                    path: nvm_path,
                    what: format!(
                        "records a pool of {} bytes but {} is {size_bytes} bytes",
                        l.pool_size_bytes,
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
        let mut inner = PoolState {
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
    fn claim_process_slot(inner: &mut PoolState, first: bool) -> Result<usize> {
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
    pub fn open_simulated(
        world: Arc<SimWorld>,
        size_bytes: u64,
        options: &PoolOptions,
    ) -> Result<Pool> {
        options.validate()?;
        let nvm = Media::simulated(world.clone(), Tier::Nvm);
        let storage = Media::simulated(world, Tier::Storage);
        let path = PathBuf::from("<simulated nvm>");
        let layout = if nvm.load_word(0) == 0 {
            let l = Layout::new(size_bytes, options.log_size_bytes, options.cache_size_bytes);
            l.format(&nvm, Path::new("<simulated storage>"))?;
            nvm.store_word(layout::H_CLEAN, 1);
            nvm.persist(layout::H_CLEAN, 8);
            l
        } else {
            Layout::from_header(&nvm, &path)?
        };
        let inner = PoolState {
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

    /// Sizes of both simulated tiers for a pool of `size_bytes` bytes with these options.
    pub fn simulated_sizes(size_bytes: u64, options: &PoolOptions) -> (usize, usize) {
        let l = Layout::new(size_bytes, options.log_size_bytes, options.cache_size_bytes);
        (l.file_len, size_bytes as usize)
    }

    /// Second half of opening: recovery if first, the process slot, the background threads.
    fn attach(mut inner: PoolState, first: bool, me: usize) -> Result<Pool> {
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
        self.inner.layout.pool_size_bytes
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

    pub(crate) fn inner(&self) -> &Arc<PoolState> {
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
