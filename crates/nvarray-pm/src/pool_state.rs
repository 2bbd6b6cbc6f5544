//! The state every handle and background thread of one attached process shares (`PoolState`,
//! behind the `Pool`'s `Arc`), and what they do with it: the NVM tier's shared words (log
//! tail, counters, process and transaction slots, page locks), persist barriers at the
//! technology's cost, the maintenance lock, reaping dead processes, the pool's statistics and
//! `maintain`. The log append (`append.rs`) and the applier and write-back (`cache.rs`) add
//! their own `impl PoolState` blocks; recovery (`recovery.rs`) works on an `PoolState` before any
//! handle exists. Opening, attaching and closing are `Pool`'s (`pool.rs`).

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::coord::{self, Acquired, Liveness};
use crate::error::Result;
use crate::layout::{
    self, Layout, PROCS, PROC_BYTES, TX_BYTES, TX_BYTES_LOGGED, TX_COMMITS, TX_LSN, TX_OWNER,
    TX_SLOTS,
};
use crate::log::{Ring, STATE_COMMITTED};
use crate::media::Media;
use crate::options::PoolOptions;
use crate::reports::{RecoveryReport, Stats};

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

/// The state every handle and background thread of one attached process shares.
pub(crate) struct PoolState {
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

impl PoolState {
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            nvm: &self.nvm,
            base: self.layout.log,
            size: self.layout.log_size_bytes,
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

    // The shared area is one file region: an index past its table lands on another table's
    // words, which `Media`'s bounds check cannot see.

    pub(crate) fn proc_state(&self, p: usize) -> &AtomicU64 {
        debug_assert!(
            p < PROCS,
            "process slot out of range: expected < {PROCS}, found {p}"
        );
        self.nvm.word(layout::V_PROCS + p * PROC_BYTES)
    }

    pub(crate) fn proc_pid(&self, p: usize) -> &AtomicU64 {
        debug_assert!(
            p < PROCS,
            "process slot out of range: expected < {PROCS}, found {p}"
        );
        self.nvm.word(layout::V_PROCS + p * PROC_BYTES + 8)
    }

    /// Word `field` (`layout::TX_*`) of transaction slot `slot`.
    pub(crate) fn tx_word(&self, slot: usize, field: usize) -> &AtomicU64 {
        debug_assert!(
            slot < TX_SLOTS,
            "transaction slot out of range: expected < {TX_SLOTS}, found {slot}"
        );
        debug_assert!(
            field < TX_BYTES / 8,
            "transaction slot field out of range: expected < {}, found {field}",
            TX_BYTES / 8
        );
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
        debug_assert!(
            i < layout::LOCK_WORDS,
            "page-lock word out of range: expected < {}, found {i}",
            layout::LOCK_WORDS
        );
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
            self.repair_after_dead_holder();
        }
        Ok(MaintenanceGuard(self, self.live.me() as u64 + 1))
    }

    pub(crate) fn try_lock_maintenance(&self) -> Option<MaintenanceGuard<'_>> {
        let how = coord::try_lock_robust(self.nvm.word(layout::V_MAINT_LOCK), &self.live)?;
        if let Acquired::FromDead(_) = how {
            self.repair_after_dead_holder();
        }
        Some(MaintenanceGuard(self, self.live.me() as u64 + 1))
    }

    /// Panics in debug builds unless this process holds the maintenance lock (`doing` says
    /// what needed it).
    pub(crate) fn debug_assert_maintenance_held(&self, doing: &str) {
        debug_assert_eq!(
            self.nvm.load_word(layout::V_MAINT_LOCK),
            self.live.me() as u64 + 1,
            "{doing} without the maintenance lock: expected holder {} (this process), found {}",
            self.live.me() + 1,
            self.nvm.load_word(layout::V_MAINT_LOCK)
        );
    }

    /// Applies what it can of the log without waiting for the lock (a committer short of log
    /// space helps the applier).
    pub(crate) fn try_digest(&self) -> Result<usize> {
        match self.try_lock_maintenance() {
            Some(_g) => self.digest(DIGEST_BATCH),
            None => Ok(0),
        }
    }

    /// Lock words a process that held slot `slot` before this one left holding the slot's
    /// number (it died holding them, and no one took them since): this process now holds the
    /// slot's liveness lock, so they would read as its own and never be freed. Each is
    /// repaired as a lock taken from the dead, then released.
    pub(crate) fn take_over_locks_of_dead(&self, slot: usize) {
        let me = slot as u64 + 1;
        let maintenance = self.nvm.word(layout::V_MAINT_LOCK);
        if maintenance.load(Ordering::Acquire) == me {
            self.repair_after_dead_holder();
            let _ = maintenance.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
        }
        let log = self.nvm.word(layout::V_LOG_LOCK);
        if log.load(Ordering::Acquire) == me {
            self.forget_unmade_reservations(slot, self.tail().load(Ordering::Acquire));
            let _ = log.compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
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
        self.debug_assert_maintenance_held("reaping a dead process");
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

    pub(crate) fn stats(&self) -> Stats {
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
            log_used_bytes: tail.saturating_sub(head),
            log_size_bytes: self.layout.log_size_bytes,
        }
    }

    /// Applies the whole log and, if `write_back_all` or over the threshold, writes back.
    pub(crate) fn maintain(&self, write_back_all: bool) -> Result<()> {
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

/// The maintenance lock, held; the second field is the holder's lock word (process slot + 1).
pub(crate) struct MaintenanceGuard<'a>(&'a PoolState, u64);

impl Drop for MaintenanceGuard<'_> {
    fn drop(&mut self) {
        let word = self.0.nvm.word(layout::V_MAINT_LOCK);
        // Taken from this process only if it were dead: another holder would have changed the
        // cache under this one.
        debug_assert_eq!(
            word.load(Ordering::Relaxed),
            self.1,
            "releasing the maintenance lock: expected it still held by this process ({}), found {}",
            self.1,
            word.load(Ordering::Relaxed)
        );
        coord::unlock_robust(word, self.1);
    }
}
