//! Transactions: writes are buffered in DRAM under page locks and logged at commit.
//!
//! Logging at commit rather than at each write is deliberate: an aborted transaction costs the
//! NVM nothing (the seed's PCM-lifetime concern, slide 7), and a commit writes one contiguous
//! record with one persist barrier. The commit sequence:
//! 1. build the record (header, entry table, data) in DRAM;
//! 2. reserve room at the log tail (waiting for the applier if the log is full), write the
//!    record, flush and fence it, and publish it once every earlier record is durable — the
//!    commit point (`append.rs`);
//! 3. wait out the technology's write latency (the barrier's modelled cost);
//! 4. copy the writes into the shared mapping, where every process sees them;
//! 5. mark the record visible (the applier may now take it) and release the page locks.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::coord::{page_lock_index, Waiter};
use crate::error::{PmError, Result};
use crate::layout::{H_LOG_HEAD, PAGE, TX_OWNER, TX_SEQ, TX_SLOTS};
use crate::log::{self, STATE_COMMITTED, STATE_VISIBLE};
use crate::pool::Pool;
use crate::pool_state::{mono_ns, Counter, PoolState};

/// A finished transaction's buffers, kept for the thread's next one: small transactions then
/// allocate nothing (allocation was a tenth of a 256-byte commit's time).
#[derive(Default)]
struct Buffers {
    writes: Vec<(u64, usize, usize)>,
    data: Vec<u8>,
    locks: Vec<u32>,
    record: Vec<u8>,
    rewrites: HashMap<(u64, usize), usize>,
}

thread_local! {
    static SPARE: Cell<Option<Buffers>> = const { Cell::new(None) };
    static SLOT_HINT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Threads of this process that have begun a transaction (spreads their first slot searches).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// Largest buffer kept for reuse.
const KEEP_BUFFER: usize = 1 << 20;

/// Writes of one transaction looked through one by one for a rewrite of the same range; past
/// this many, a hash map finds it.
const REWRITE_SCAN_MAX: usize = 8;

/// A transaction's state, independent of how the pool is held (Rust borrow or C handle).
pub(crate) struct TxCore {
    slot: usize,
    seq: u64,
    /// (pool offset, start in `data`, length), in write order.
    writes: Vec<(u64, usize, usize)>,
    data: Vec<u8>,
    /// Page-lock words held, sorted.
    locks: Vec<u32>,
    /// Pages the writes span (bounds what applying the record needs of the cache).
    pages: u64,
    /// Set when a write failed with a conflict: the transaction can only abort.
    doomed: Option<u64>,
    record: Vec<u8>,
    /// Each (offset, length) written, to its entry in `writes`: writing the same range again
    /// replaces the bytes in place rather than logging them twice. (SQLite with a small page
    /// cache spills one page many times in a transaction; appended, each spill counted
    /// against the record's limit, and a transaction of a few dozen pages was refused.)
    rewrites: HashMap<(u64, usize), usize>,
}

impl TxCore {
    pub fn begin(inner: &PoolState) -> Result<TxCore> {
        let me = inner.live.me() as u64 + 1;
        // Start where this thread found a slot last time: usually free again, and its line is
        // already in this core's cache. A thread's first search starts at its own spot.
        let start = SLOT_HINT
            .get()
            .unwrap_or_else(|| inner.live.me() * 4 + THREADS.fetch_add(1, Ordering::Relaxed) * 17)
            % TX_SLOTS;
        let slot = (0..TX_SLOTS)
            .map(|i| (start + i) % TX_SLOTS)
            .find(|&s| {
                inner
                    .tx_word(s, TX_OWNER)
                    .compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(PmError::NoTxSlot(TX_SLOTS))?;
        SLOT_HINT.set(Some(slot));
        // A slot is freed only after its record is visible or forgotten: a stale position would
        // make a reaper apply a record that is not this transaction's.
        debug_assert_eq!(
            inner.tx_lsn(slot),
            None,
            "free transaction slot {slot}: expected no record being committed, found one at {:?}",
            inner.tx_lsn(slot)
        );
        // The age is a clock reading, not a shared counter: one cache line fewer bouncing
        // between committers.
        let seq = mono_ns();
        inner.tx_word(slot, TX_SEQ).store(seq, Ordering::Release);
        let b = SPARE.take().unwrap_or_default();
        Ok(TxCore {
            slot,
            seq,
            writes: b.writes,
            data: b.data,
            locks: b.locks,
            pages: 0,
            doomed: None,
            record: b.record,
            rewrites: b.rewrites,
        })
    }

    /// Largest record a transaction may log: a quarter of the log.
    fn limit(inner: &PoolState) -> u64 {
        inner.layout.log_size_bytes / 4
    }

    pub fn write(&mut self, inner: &PoolState, offset: u64, bytes: &[u8]) -> Result<()> {
        let len = bytes.len() as u64;
        if len == 0 {
            return Err(PmError::ZeroLength(offset));
        }
        let size = inner.layout.pool_size_bytes;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or(PmError::OutOfRange { offset, len, size })?;
        if let Some(page) = self.doomed {
            return Err(PmError::Conflict { page });
        }
        // The same range again: its pages are locked already, and its bytes are replaced
        // where they are, unless a later write overlaps it (the record applies writes in
        // order, so this one must then come after that one: it is appended).
        if let Some(i) = self.written_before(offset, bytes.len()) {
            let overlapped = self.writes[i + 1..]
                .iter()
                .any(|&(o, _, l)| o < end && offset < o + l as u64);
            if !overlapped {
                let (_, at, _) = self.writes[i];
                self.data[at..at + bytes.len()].copy_from_slice(bytes);
                return Ok(());
            }
        }
        let pages = end.div_ceil(PAGE as u64) - offset / PAGE as u64;
        let logged = log::record_len(self.writes.len() + 1, self.data.len() + bytes.len()) as u64;
        let limit = Self::limit(inner);
        if logged > limit || (self.pages + pages) * 2 > inner.layout.cache_pages {
            return Err(PmError::TooLarge {
                bytes: logged.max(len),
                limit: limit.min(inner.layout.cache_pages / 2 * PAGE as u64),
            });
        }
        for page in offset / PAGE as u64..end.div_ceil(PAGE as u64) {
            if let Err(e) = self.lock_page(inner, page) {
                if let PmError::Conflict { page } = e {
                    self.doomed = Some(page);
                    inner.count(Counter::Conflicts, 1);
                }
                return Err(e);
            }
        }
        self.pages += pages;
        self.writes.push((offset, self.data.len(), bytes.len()));
        self.index_last_write();
        self.data.extend_from_slice(bytes);
        Ok(())
    }

    /// The last write of exactly `[offset, offset + len)` in this transaction, if any. A few
    /// writes are scanned (no hashing on a small transaction's path); from
    /// `REWRITE_SCAN_MAX` on, `rewrites` indexes them.
    fn written_before(&mut self, offset: u64, len: usize) -> Option<usize> {
        if self.writes.len() <= REWRITE_SCAN_MAX {
            return self
                .writes
                .iter()
                .rposition(|&(o, _, l)| o == offset && l == len);
        }
        self.rewrites.get(&(offset, len)).copied()
    }

    /// Indexes the write just pushed (`written_before`): every write once the transaction
    /// outgrows the scan, each new one after that.
    fn index_last_write(&mut self) {
        let n = self.writes.len();
        if n <= REWRITE_SCAN_MAX {
            return;
        }
        let first = if n == REWRITE_SCAN_MAX + 1 { 0 } else { n - 1 };
        for (i, &(o, _, l)) in self.writes.iter().enumerate().skip(first) {
            self.rewrites.insert((o, l), i);
        }
    }

    /// Takes the lock of `page` for this transaction (wait-die against older holders).
    fn lock_page(&mut self, inner: &PoolState, page: u64) -> Result<()> {
        let idx = page_lock_index(page) as u32;
        let Err(at) = self.locks.binary_search(&idx) else {
            return Ok(());
        };
        let word = inner.lock_word(idx as usize);
        let me = self.slot as u64 + 1;
        let mut waiter = Waiter::new(inner.opts.timeout);
        loop {
            match word.compare_exchange_weak(0, me, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(0) => continue,
                Err(holder) => {
                    // A lock word this transaction holds is in its list, found above; waiting
                    // on itself would end only in a timeout.
                    debug_assert_ne!(
                        holder, me,
                        "page {page}'s lock word {idx}: expected another holder than this \
                         transaction ({me}), found this one though it is not in its list"
                    );
                    let h = holder as usize - 1;
                    let owner = inner.tx_word(h, TX_OWNER).load(Ordering::Acquire);
                    if owner != 0 && !inner.live.alive(owner as usize - 1) {
                        inner.reap(owner as usize - 1)?;
                        continue;
                    }
                    let holder_seq = inner.tx_word(h, TX_SEQ).load(Ordering::Acquire);
                    if (self.seq, self.slot) > (holder_seq, h) {
                        return Err(PmError::Conflict { page });
                    }
                    waiter.pause("a page lock")?;
                }
            }
        }
        self.locks.insert(at, idx);
        Ok(())
    }

    /// Locks `[offset, offset + len)` for this transaction without writing (read for update).
    pub fn lock_range(&mut self, inner: &PoolState, offset: u64, len: u64) -> Result<()> {
        let size = inner.layout.pool_size_bytes;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or(PmError::OutOfRange { offset, len, size })?;
        for page in offset / PAGE as u64..end.div_ceil(PAGE as u64) {
            self.lock_page(inner, page)?;
        }
        Ok(())
    }

    /// Committed bytes overlaid with this transaction's own writes.
    pub fn read(&self, inner: &PoolState, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        let size = inner.layout.pool_size_bytes;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or(PmError::OutOfRange { offset, len, size })?;
        inner.storage.read(offset as usize, buf);
        for &(w_off, at, w_len) in &self.writes {
            let w_end = w_off + w_len as u64;
            let lo = w_off.max(offset);
            let hi = w_end.min(end);
            if lo < hi {
                let src = &self.data[at + (lo - w_off) as usize..at + (hi - w_off) as usize];
                buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
            }
        }
        Ok(())
    }

    fn write_slices(&self) -> impl Iterator<Item = (u64, &[u8])> + Clone {
        self.writes
            .iter()
            .map(|&(off, at, len)| (off, &self.data[at..at + len]))
    }

    /// Makes the writes durable and visible; returns the record's log position (0 if the
    /// transaction wrote nothing).
    pub fn commit(&mut self, inner: &PoolState) -> Result<u64> {
        if let Some(page) = self.doomed {
            self.abort(inner);
            return Err(PmError::Conflict { page });
        }
        if self.writes.is_empty() {
            self.release(inner);
            return Ok(0);
        }
        let mut record = std::mem::take(&mut self.record);
        log::build(&mut record, self.write_slices());
        // `write` bounded the record, so the log always has room for it beside others.
        debug_assert!(
            record.len() as u64 <= Self::limit(inner),
            "record larger than a transaction may log: expected at most {} bytes, found {}",
            Self::limit(inner),
            record.len()
        );
        let result = self.append(inner, &mut record);
        self.record = record;
        let lsn = match result {
            Ok(lsn) => lsn,
            Err(e) => {
                self.abort(inner);
                return Err(e);
            }
        };
        // Page locks are held until the writes are visible: another writer of these pages
        // would otherwise interleave its bytes with these.
        debug_assert_eq!(
            self.page_not_held(inner),
            None,
            "commit at lsn {lsn}: expected every written page locked by transaction slot {}, \
             found (page, lock holder) {:?}",
            self.slot,
            self.page_not_held(inner)
        );
        // Rule 1 of `cache.rs`: the applier takes a record only once it is visible in the
        // mapping, so until this committer has copied it in, nobody has made it visible and
        // the log head has not passed it.
        debug_assert_eq!(
            inner.nvm.load_word(inner.ring().state_offset(lsn)),
            STATE_COMMITTED,
            "record at lsn {lsn} before its writes were copied: expected committed \
             ({STATE_COMMITTED}), found state {}",
            inner.nvm.load_word(inner.ring().state_offset(lsn))
        );
        for (off, bytes) in self.write_slices() {
            inner.storage.write(off as usize, bytes);
        }
        debug_assert!(
            inner.nvm.load_word(H_LOG_HEAD) <= lsn,
            "log head passed a record not yet visible: expected head <= {lsn}, found {}",
            inner.nvm.load_word(H_LOG_HEAD)
        );
        inner
            .nvm
            .store_word(inner.ring().state_offset(lsn), STATE_VISIBLE);
        inner.set_tx_lsn(self.slot, None);
        inner.count_commit(self.slot, self.record.len() as u64);
        self.release(inner);
        Ok(lsn)
    }

    /// The first page this transaction wrote whose lock it does not hold, with the lock word's
    /// holder (the debug check of `commit`).
    fn page_not_held(&self, inner: &PoolState) -> Option<(u64, u64)> {
        let me = self.slot as u64 + 1;
        self.writes.iter().find_map(|&(off, _, len)| {
            (off / PAGE as u64..(off + len as u64).div_ceil(PAGE as u64)).find_map(|page| {
                let holder = inner
                    .lock_word(page_lock_index(page))
                    .load(Ordering::Acquire);
                (holder != me).then_some((page, holder))
            })
        })
    }

    /// Writes the record into the log, durable and published (`append.rs`). Returns its lsn.
    fn append(&self, inner: &PoolState, record: &mut [u8]) -> Result<u64> {
        let r = inner.reserve(self.slot, record.len() as u64)?;
        log::seal(record, r.lsn, self.slot as u32);
        inner.write_reserved(self.slot, &r, record)?;
        let deadline = inner.barrier_deadline();
        inner.publish(self.slot, &r);
        // The commit point: acknowledged only with its record, and every one before it, below
        // the durable prefix (`append.rs`).
        debug_assert!(
            inner.durable().load(Ordering::Acquire) >= r.end,
            "commit acknowledged before its record is durable: expected the durable prefix at \
             or past {}, found {}",
            r.end,
            inner.durable().load(Ordering::Acquire)
        );
        inner.wait_persisted(deadline);
        Ok(r.lsn)
    }

    /// Drops the writes and releases the locks.
    pub fn abort(&mut self, inner: &PoolState) {
        if !self.writes.is_empty() || self.doomed.is_some() {
            inner.count(Counter::Aborts, 1);
        }
        self.release(inner);
    }

    fn release(&mut self, inner: &PoolState) {
        let me = self.slot as u64 + 1;
        for &idx in &self.locks {
            let released = inner.lock_word(idx as usize).compare_exchange(
                me,
                0,
                Ordering::Release,
                Ordering::Relaxed,
            );
            // Only a reaper frees another transaction's locks, and only a dead process's.
            debug_assert!(
                released.is_ok(),
                "releasing page lock {idx}: expected it held by transaction slot {} ({me}), \
                 found holder {:?}",
                self.slot,
                released
            );
        }
        self.locks.clear();
        self.writes.clear();
        self.rewrites.clear();
        self.data.clear();
        self.pages = 0;
        self.doomed = None;
    }

    /// Gives the transaction slot back (after commit or abort).
    pub fn end(mut self, inner: &PoolState) {
        self.release(inner);
        inner
            .tx_word(self.slot, TX_OWNER)
            .store(0, Ordering::Release);
        let spare = Buffers {
            writes: self.writes,
            data: self.data,
            locks: self.locks,
            record: self.record,
            rewrites: self.rewrites,
        };
        if spare.data.capacity() <= KEEP_BUFFER && spare.record.capacity() <= KEEP_BUFFER {
            SPARE.set(Some(spare));
        }
    }
}

impl Pool {
    /// Starts a transaction. (Here rather than in `pool.rs`: a pool's transactions are this
    /// file's, and the pool itself needs nothing of them.)
    pub fn begin(&self) -> Result<Tx<'_>> {
        Tx::begin(self)
    }
}

/// A transaction on a `Pool`. Dropping it without `commit` aborts it.
pub struct Tx<'p> {
    pool: &'p Pool,
    core: Option<TxCore>,
}

impl<'p> Tx<'p> {
    fn begin(pool: &'p Pool) -> Result<Tx<'p>> {
        Ok(Tx {
            core: Some(TxCore::begin(pool.inner())?),
            pool,
        })
    }

    fn parts(&mut self) -> (&PoolState, &mut TxCore) {
        (
            self.pool.inner(),
            self.core.as_mut().expect("a live transaction has its core"),
        )
    }

    /// Writes `bytes` at `offset` within this transaction (not visible to others until commit).
    /// On `PmError::Conflict` the transaction can only be aborted.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let (inner, core) = self.parts();
        core.write(inner, offset, bytes)
    }

    /// Reads committed bytes overlaid with this transaction's own writes.
    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (inner, core) = self.parts();
        core.read(inner, offset, buf)
    }

    /// Locks the range's pages and then reads it, so a read-modify-write is serialised with
    /// every other writer of those bytes.
    pub fn read_for_update(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (inner, core) = self.parts();
        core.lock_range(inner, offset, buf.len() as u64)?;
        core.read(inner, offset, buf)
    }

    /// Makes the transaction's writes durable and visible. Returns its log position.
    pub fn commit(mut self) -> Result<u64> {
        let (inner, core) = self.parts();
        let r = core.commit(inner);
        let core = self.core.take().expect("core");
        core.end(self.pool.inner());
        r
    }

    /// Discards the transaction's writes.
    pub fn abort(mut self) {
        let (inner, core) = self.parts();
        core.abort(inner);
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if let Some(mut core) = self.core.take() {
            core.abort(self.pool.inner());
            core.end(self.pool.inner());
        }
    }
}
