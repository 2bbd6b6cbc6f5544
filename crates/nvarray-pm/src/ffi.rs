//! The C ABI, with the seed's names (slide 11); declared in `include/nvarray_pm.h`.
//!
//! ```c
//! int64_t *ptr = nv_allocate("/data/counters", 1 << 30, NV_CREATE);
//! nv_tid_t tid = nv_txbegin();
//! int64_t x = ptr[0] + 1;
//! nv_write(tid, &ptr[0], &x, sizeof x);
//! nv_commit(tid);
//! nv_free(ptr);
//! ```
//!
//! A transaction is bound to a pool by its first `nv_write` (the seed's `nv_txbegin` takes no
//! pool), and all of its writes must target that pool (slide 18's limitation 2). A transaction
//! id is a handle, not a thread's property: any thread may write to, commit or abort it, one
//! call at a time (a second call on the same id while one runs gets `NV_EBADTID`). At most
//! [`TX_OPEN_MAX`] transactions are open in a process. Pools are per process: after `fork()`
//! the child's calls on its parent's pools are refused (`NV_ERROR`, "opened before fork()");
//! the child opens the pool again. Options come from the environment:
//! `NVARRAY_PM_NVM_DIR`, `NVARRAY_PM_TECH`, `NVARRAY_PM_LOG_SIZE`, `NVARRAY_PM_CACHE_SIZE`,
//! `NVARRAY_PM_WRITEBACK` (fraction), and for tests and campaigns `NVARRAY_INJECT_FAULTS`
//! (faults in the pools' files, `nvarray_faults`). Every function returns an error code instead of
//! panicking; `nv_last_error` describes the last failure on the calling thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::sync::{Once, OnceLock};

use nvarray_faults::BackingFaults;

use crate::error::PmError;
use crate::options::PoolOptions;
use crate::pool::Pool;
use crate::tx::TxCore;

/// `mode` flag of `nv_allocate`: create the backing file if it does not exist.
pub const NV_CREATE: c_int = 1;

pub const NV_OK: c_int = 0;
/// Any failure; see `nv_last_error`.
pub const NV_ERROR: c_int = -1;
/// Not done, retry: an older transaction holds the bytes (`nv_write`), or the commit stalled
/// and was fenced off (`nv_commit`, `PmError::Fenced`; nothing was committed).
pub const NV_ECONFLICT: c_int = -2;
/// No such transaction id (never begun, or already committed or aborted).
pub const NV_EBADTID: c_int = -3;
/// The write would make the transaction larger than one transaction may be (`PmError::TooLarge`:
/// a quarter of the NVM log, or half the write cache): it was not added; abort the
/// transaction (a larger `NVARRAY_PM_LOG_SIZE` / `NVARRAY_PM_CACHE_SIZE` raises the limit).
pub const NV_EFULL: c_int = -4;

/// Every `mode` bit `nv_allocate` knows; any other is refused.
const NV_MODE_KNOWN: c_int = NV_CREATE;

/// Open transactions a process may hold at once: each costs a few hundred bytes, and a
/// program that begins without ever committing would otherwise grow without bound (1 M
/// `nv_txbegin` calls held 317 MB). 65,536 is 20 MB at most.
pub const TX_OPEN_MAX: usize = 65_536;

struct FfiTx {
    pool: Option<Arc<Pool>>,
    core: Option<TxCore>,
}

static POOLS: Mutex<Vec<Arc<Pool>>> = Mutex::new(Vec::new());
static TXS: Mutex<Option<HashMap<i64, FfiTx>>> = Mutex::new(None);
static NEXT_TID: AtomicI64 = AtomicI64::new(1);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// Inside a `guarded` call: a panic there becomes an error code and a message, not a
    /// backtrace on the host program's stderr.
    static IN_GUARD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Set in the child of a `fork()` (by the `pthread_atfork` handler), cleared once the
/// parent's pools and transactions have been dropped from the child's tables.
static FORKED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Installs, once per process, the fork handler and the panic hook that keeps panics inside
/// the ABI quiet (the previous hook still reports panics anywhere else).
fn install_hooks() {
    INSTALL.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, which is
        // async-signal-safe as the child of a multi-threaded fork requires.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_GUARD.with(|g| g.get()) {
                set_error(format!("internal error in nvarray-pm: {info}"));
            } else {
                previous(info);
            }
        }));
    });
}

/// In the child of a `fork()`: forgets the parent's pools and transactions without closing
/// them (their threads do not exist here, and closing would write back the parent's state).
fn forget_parent_pools() {
    if FORKED.swap(false, Ordering::Relaxed) {
        let pools = std::mem::take(&mut *lock(&POOLS));
        let forgotten = pools.len();
        std::mem::forget(pools);
        std::mem::forget(lock(&TXS).take());
        if forgotten > 0 {
            *lock(&FORGOTTEN) += forgotten;
        }
    }
}

/// Pools dropped from this process's tables by a `fork()`, for the error message.
static FORGOTTEN: Mutex<usize> = Mutex::new(0);

fn not_in_a_pool(what: &str, addr: usize) -> String {
    let forgotten = *lock(&FORGOTTEN);
    if forgotten > 0 {
        format!(
            "{what}: address {addr:#x} is not inside a pool of this process; {forgotten} pool(s) \
             were opened before fork() and belong to the parent: call nv_allocate again in the child"
        )
    } else {
        format!("{what}: address {addr:#x} is not inside an allocated pool")
    }
}

pub(crate) fn set_error(msg: impl std::fmt::Display) {
    let text = CString::new(msg.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn code(e: &PmError) -> c_int {
    match e {
        PmError::Conflict { .. } | PmError::Fenced { .. } => NV_ECONFLICT,
        PmError::TooLarge { .. } => NV_EFULL,
        _ => NV_ERROR,
    }
}

/// Runs `f`, turning a panic into `fallback` and an error message.
pub(crate) fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    install_hooks();
    forget_parent_pools();
    let outer = IN_GUARD.with(|g| g.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_GUARD.with(|g| g.set(outer));
    result.unwrap_or_else(|_| {
        if LAST_ERROR.with(|e| e.borrow().is_empty()) {
            set_error("internal error (panic) in nvarray-pm");
        }
        fallback
    })
}

fn options_from_env() -> Result<PoolOptions, PmError> {
    let mut o = PoolOptions::default();
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let size = |k: &str, v: String| {
        nvarray_workload::parse_size(&v).map_err(|e| PmError::BadOption(format!("{k}: {e}")))
    };
    if let Some(v) = var("NVARRAY_PM_NVM_DIR") {
        o.nvm_dir = PathBuf::from(v);
    }
    if let Some(v) = var("NVARRAY_PM_TECH") {
        o.tech = v;
    }
    if let Some(v) = var("NVARRAY_PM_LOG_SIZE") {
        o.log_size_bytes = size("NVARRAY_PM_LOG_SIZE", v)?;
    }
    if let Some(v) = var("NVARRAY_PM_CACHE_SIZE") {
        o.cache_size_bytes = size("NVARRAY_PM_CACHE_SIZE", v)?;
    }
    if let Some(v) = var("NVARRAY_PM_WRITEBACK") {
        o.writeback_threshold = v.parse().map_err(|_| {
            PmError::BadOption(format!("NVARRAY_PM_WRITEBACK: {v:?} is not a fraction"))
        })?;
    }
    o.faults = injected_faults()?;
    Ok(o)
}

/// The plan `NVARRAY_INJECT_FAULTS` gave this process (read at its first `nv_allocate`).
static INJECTED: OnceLock<Result<Option<Arc<BackingFaults>>, String>> = OnceLock::new();

/// The faults `NVARRAY_INJECT_FAULTS` asks for (tests and campaigns), one plan for every
/// pool this process opens, so its counts and `OP#N` run across them; said on stderr once.
fn injected_faults() -> Result<Option<Arc<BackingFaults>>, PmError> {
    let plan = INJECTED.get_or_init(|| {
        let faults = BackingFaults::from_env("nvarray-pm", "the pools' files")?;
        Ok(faults.map(Arc::new))
    });
    plan.clone().map_err(PmError::BadOption)
}

/// Faults `NVARRAY_INJECT_FAULTS` has injected into this process's pools so far (0 without
/// it): for tests and campaigns, which count them.
#[no_mangle]
pub extern "C" fn nv_injected_faults() -> u64 {
    match INJECTED.get() {
        Some(Ok(Some(f))) => f.injected_total(),
        _ => 0,
    }
}

/// Opens (with `NV_CREATE`, creates) the pool over `path` of `size` bytes (0: the existing
/// file's size) and returns its mapping, or NULL on error: among others a file system without
/// room for the file, and a file at the path of a crashed pool that is not that pool
/// (`Pool::open`).
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nv_allocate(path: *const c_char, size: u64, mode: c_int) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        if path.is_null() {
            set_error("nv_allocate: path is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(path) };
        let path = PathBuf::from(String::from_utf8_lossy(path.to_bytes()).into_owned());
        if mode & !NV_MODE_KNOWN != 0 {
            set_error(format!(
                "nv_allocate: unknown mode bits {:#x} (known: NV_CREATE = {NV_CREATE})",
                mode & !NV_MODE_KNOWN
            ));
            return std::ptr::null_mut();
        }
        let opened = options_from_env().and_then(|mut o| {
            o.create = mode & NV_CREATE != 0;
            crate::sim_session::open(&path, size, o.clone())
                .unwrap_or_else(|| Pool::open(&path, size, &o))
        });
        match opened {
            Ok(pool) => {
                // Benchmarks fault both tiers in first, as `nvarray pm-bench` does, so a timed
                // run pays no first-touch faults a baseline does not.
                if std::env::var("NVARRAY_PM_PREFAULT").is_ok_and(|v| v == "1") {
                    pool.prefault();
                }
                let ptr = pool.as_ptr() as *mut c_void;
                lock(&POOLS).push(Arc::new(pool));
                ptr
            }
            Err(e) => {
                set_error(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// Pools this process has open through `nv_allocate`.
pub(crate) fn open_pools() -> usize {
    lock(&POOLS).len()
}

/// The pool whose mapping contains `addr`, and the offset of `addr` in it. (The write's
/// length is checked against the pool by the write itself.)
fn pool_at(addr: usize) -> Option<(Arc<Pool>, u64)> {
    lock(&POOLS).iter().find_map(|p| {
        let base = p.as_ptr() as usize;
        (addr >= base && addr - base < p.size() as usize).then(|| (p.clone(), (addr - base) as u64))
    })
}

/// Starts a transaction; returns its id (> 0), or -1 on error.
#[no_mangle]
pub extern "C" fn nv_txbegin() -> i64 {
    guarded(-1, || {
        let mut txs = lock(&TXS);
        let txs = txs.get_or_insert_with(HashMap::new);
        if txs.len() >= TX_OPEN_MAX {
            set_error(format!(
                "nv_txbegin: {TX_OPEN_MAX} transactions are already open in this process; \
                 commit or abort some"
            ));
            return -1;
        }
        let tid = NEXT_TID.fetch_add(1, Ordering::Relaxed);
        txs.insert(
            tid,
            FfiTx {
                pool: None,
                core: None,
            },
        );
        tid
    })
}

/// Takes a transaction out of the table for the duration of one call, so no global lock is
/// held while it waits for a page lock or for log space.
fn take(tid: i64) -> Option<FfiTx> {
    lock(&TXS).as_mut()?.remove(&tid)
}

fn put_back(tid: i64, tx: FfiTx) {
    lock(&TXS).get_or_insert_with(HashMap::new).insert(tid, tx);
}

/// Writes `len` bytes from `src` to `dst`, an address inside a pool's mapping, within `tid`.
///
/// # Safety
/// `src` must point to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn nv_write(
    tid: i64,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
) -> c_int {
    guarded(NV_ERROR, || {
        with_tx(tid, "nv_write", |tx| write_in(tx, dst as usize, src, len))
    })
}

/// Runs `f` on transaction `tid`, taken out of the table for the call (`take`).
fn with_tx(tid: i64, what: &str, f: impl FnOnce(&mut FfiTx) -> c_int) -> c_int {
    let Some(mut tx) = take(tid) else {
        set_error(format!("{what}: no transaction {tid}"));
        return NV_EBADTID;
    };
    let rc = f(&mut tx);
    put_back(tid, tx);
    rc
}

fn write_in(tx: &mut FfiTx, dst: usize, src: *const c_void, len: usize) -> c_int {
    if src.is_null() {
        set_error("nv_write: src is NULL");
        return NV_ERROR;
    }
    let Some((pool, offset)) = pool_at(dst) else {
        set_error(not_in_a_pool("nv_write", dst));
        return NV_ERROR;
    };
    if let Some(bound) = &tx.pool {
        if !Arc::ptr_eq(bound, &pool) {
            set_error(PmError::WrongPool);
            return NV_ERROR;
        }
    }
    if tx.core.is_none() {
        match TxCore::begin(pool.inner()) {
            Ok(core) => tx.core = Some(core),
            Err(e) => {
                set_error(&e);
                return code(&e);
            }
        }
        tx.pool = Some(pool.clone());
    }
    // SAFETY: the caller guarantees `src` points to `len` readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
    let core = tx.core.as_mut().expect("bound above");
    match core.write(pool.inner(), offset, bytes) {
        Ok(()) => NV_OK,
        Err(e) => {
            set_error(&e);
            code(&e)
        }
    }
}

/// Reads `len` bytes at `src`, an address inside a pool's mapping, into `dst` as transaction
/// `tid` sees them: committed data with `tid`'s own writes on top (a read through the pointer
/// sees committed data only).
///
/// # Safety
/// `dst` must point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nv_read(
    tid: i64,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
) -> c_int {
    guarded(NV_ERROR, || {
        if dst.is_null() {
            set_error("nv_read: dst is NULL");
            return NV_ERROR;
        }
        let Some((pool, offset)) = pool_at(src as usize) else {
            set_error(not_in_a_pool("nv_read", src as usize));
            return NV_ERROR;
        };
        with_tx(tid, "nv_read", |tx| {
            // SAFETY: the caller guarantees `dst` points to `len` writable bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            let read = match (&tx.pool, &tx.core) {
                (Some(bound), Some(core)) if Arc::ptr_eq(bound, &pool) => {
                    core.read(pool.inner(), offset, buf)
                }
                // Nothing written yet, or to another pool: committed data.
                _ => pool.read(offset, buf),
            };
            match read {
                Ok(()) => NV_OK,
                Err(e) => {
                    set_error(&e);
                    code(&e)
                }
            }
        })
    })
}

/// Ends `tid` by committing (`commit`) or aborting it; the id is then gone.
fn finish(tid: i64, commit: bool) -> c_int {
    let Some(tx) = take(tid) else {
        set_error(format!("no transaction {tid}"));
        return NV_EBADTID;
    };
    let (Some(pool), Some(mut core)) = (tx.pool, tx.core) else {
        return NV_OK; // nothing was written
    };
    let rc = if commit {
        match core.commit(pool.inner()) {
            Ok(_) => NV_OK,
            Err(e) => {
                set_error(&e);
                code(&e)
            }
        }
    } else {
        core.abort(pool.inner());
        NV_OK
    };
    core.end(pool.inner());
    rc
}

/// Commits `tid`: its writes are durable and visible to every process when this returns 0.
#[no_mangle]
pub extern "C" fn nv_commit(tid: i64) -> c_int {
    guarded(NV_ERROR, || finish(tid, true))
}

/// Aborts `tid`, discarding its writes.
#[no_mangle]
pub extern "C" fn nv_abort(tid: i64) -> c_int {
    guarded(NV_ERROR, || finish(tid, false))
}

/// Closes the pool mapped at `ptr` (as returned by `nv_allocate`), aborting its open
/// transactions. The last process to close a pool writes everything back.
///
/// # Safety
/// No pointer into the mapping may be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn nv_free(ptr: *mut c_void) -> c_int {
    guarded(NV_ERROR, || {
        let pool = {
            let mut pools = lock(&POOLS);
            let Some(i) = pools
                .iter()
                .position(|p| std::ptr::eq(p.as_ptr(), ptr as *const u8))
            else {
                drop(pools);
                set_error(not_in_a_pool(
                    "nv_free: not a pointer returned by nv_allocate",
                    ptr as usize,
                ));
                return NV_ERROR;
            };
            pools.swap_remove(i)
        };
        let open: Vec<i64> = lock(&TXS)
            .as_ref()
            .map(|m| {
                m.iter()
                    .filter(|(_, t)| t.pool.as_ref().is_some_and(|p| Arc::ptr_eq(p, &pool)))
                    .map(|(&tid, _)| tid)
                    .collect()
            })
            .unwrap_or_default();
        for tid in open {
            finish(tid, false);
        }
        match Arc::try_unwrap(pool) {
            Ok(pool) => match pool.close() {
                Ok(()) => NV_OK,
                Err(e) => {
                    set_error(e);
                    NV_ERROR
                }
            },
            // A transaction in use on another thread still holds it; it closes with the last.
            Err(_) => NV_OK,
        }
    })
}

/// The message of the last error on this thread (empty if none). The string belongs to the
/// library and stays valid on this thread until its next failing `nv_*` call or its exit;
/// copy it to keep it.
#[no_mangle]
pub extern "C" fn nv_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

thread_local! {
    static HOLDER: RefCell<CString> = RefCell::new(CString::default());
}

/// Who holds a lock on the file at `path` ("" if nobody does, or it cannot be opened): "process
/// PID (COMMAND) holds it as the backing of a device", and the like (`nvarray-owner`). For a
/// program that refuses a file for its own reasons and wants to say who else has it (the
/// SQLite VFS does). Reads only. The string belongs to the library and stays valid on this
/// thread until its next call here.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nv_file_holder(path: *const c_char) -> *const c_char {
    guarded(std::ptr::null(), || {
        let words = if path.is_null() {
            String::new()
        } else {
            // SAFETY: the caller passes a NUL-terminated string.
            let path = unsafe { CStr::from_ptr(path) };
            let path = PathBuf::from(String::from_utf8_lossy(path.to_bytes()).into_owned());
            nvarray_owner::holder_at(&path).map_or_else(String::new, |h| h.to_string())
        };
        let text = CString::new(words.replace('\0', " ")).unwrap_or_default();
        HOLDER.with(|h| {
            *h.borrow_mut() = text;
            h.borrow().as_ptr()
        })
    })
}
