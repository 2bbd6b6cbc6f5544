//! Appending records to the redo log from many threads and processes at once.
//!
//! A commit
//! 1. *reserves* its record's bytes at the log tail under the log lock, held only for a few
//!    loads and stores;
//! 2. *writes* the record, flushes and fences it outside the lock, in parallel with other
//!    committers;
//! 3. *publishes* it: waits until every earlier reservation is durable, then moves the
//!    *durable prefix* (`V_LOG_DURABLE`) past its own bytes.
//!
//! A commit is acknowledged only after step 3, so an acknowledged record has only durable
//! records before it, and recovery, which replays from the log head to the first incomplete
//! record, never loses one. Records after that first incomplete one were all in flight at the
//! crash (reserved, not published), at most one per transaction slot, which is how recovery
//! tells them from damage (`recovery.rs`). The applier only takes records below the prefix.
//!
//! Why: when the whole write-flush-fence ran under the log lock, a holder descheduled in the
//! middle of its flush stalled every other committer; four committing threads on two cores
//! reached 0.42× PMDK's throughput (docs/perf.md, issue 5).
//!
//! A reservation is kept in its transaction slot (`TX_RES_START`, `TX_RES_END`), written under
//! the log lock before the tail moves, so one whose committer dies is always found. When the
//! prefix reaches it, survivors *settle* it: keep the record if it is whole, otherwise fill
//! the rest with padding records; then the prefix passes it. The reaper of a dead process
//! waits for that before it makes the process's records visible and releases its page locks.
//!
//! Publishing needs no timeout of its own: each earlier record is whole (passed by any
//! waiter), abandoned by a dead process (settled), being written by a live committer (a copy
//! of a few hundred bytes, waited for), or not yet begun by a live committer. That last one
//! may never begin, if its process was stopped (`SIGSTOP`, a debugger) between reserving and
//! writing, so after `PoolOptions::stall_timeout` a waiter *fences* it. The reservation's
//! state word (`TX_RES_STATE`) decides who owns the bytes: the committer moves it from
//! reserved to writing before it writes a byte, a fencer from reserved to fenced before it
//! pads; one compare-and-swap wins. A fenced reservation is padded and passed like an
//! abandoned one, and its committer, when it runs again, writes nothing and fails with
//! `PmError::Fenced`: the transaction is not committed and can be retried. A committer
//! stopped *inside* the copy of its own record (the writing state) is waited for: those bytes
//! are its own until it is done, and no store can be taken back.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::coord::{self, Acquired, Waiter};
use std::time::{Duration, Instant};

use crate::error::{PmError, Result};
use crate::layout::{self, TX_OWNER, TX_RES_END, TX_RES_START, TX_RES_STATE, TX_SLOTS};
use crate::log::{self, KIND_TX};
use crate::media::LINE;
use crate::pool_state::{Counter, PoolState};

/// `TX_RES_STATE`: no reservation, or it is reserved and not yet written.
pub(crate) const RES_RESERVED: u64 = 0;
/// Its committer is copying its record in: the bytes are the committer's.
pub(crate) const RES_WRITING: u64 = 1;
/// A waiter fenced it: the bytes are padding, its committer must not write.
pub(crate) const RES_FENCED: u64 = 2;

/// Log bytes reserved for one record: `[start, lsn)` is padding up to the ring's end (usually
/// empty), `[lsn, end)` the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub start: u64,
    pub lsn: u64,
    pub end: u64,
}

impl PoolState {
    /// Every log record below this position is durable.
    pub(crate) fn durable(&self) -> &AtomicU64 {
        self.nvm.word(layout::V_LOG_DURABLE)
    }

    /// Reserves `len` bytes at the log tail for the transaction in `slot`, waiting for the
    /// applier if the log is full.
    pub(crate) fn reserve(&self, slot: usize, len: u64) -> Result<Reservation> {
        let ring = self.ring();
        debug_assert_eq!(
            len % LINE as u64,
            0,
            "reservation not whole lines: expected a multiple of {LINE}, found {len} bytes"
        );
        debug_assert!(
            len <= ring.size,
            "record larger than the log, which it never fits: expected at most {} bytes, found {len}",
            ring.size
        );
        // One reservation per transaction slot at a time: recovery tells the records that were
        // in flight at a crash from damage by it (`recovery.rs`).
        debug_assert_eq!(
            self.tx_word(slot, TX_RES_END).load(Ordering::Acquire),
            0,
            "transaction slot {slot} reserving again: expected no reservation held, found one \
             ending at {}",
            self.tx_word(slot, TX_RES_END).load(Ordering::Acquire)
        );
        let mut waiter = Waiter::new(self.opts.timeout);
        let mut waited = false;
        loop {
            let log = self.lock_log()?;
            let tail = self.tail().load(Ordering::Acquire);
            let head = self.nvm.load_word(layout::H_LOG_HEAD);
            #[cfg(debug_assertions)]
            self.debug_check_log_bounds(head, tail, ring.size);
            let pos = ring.pos(tail) as u64;
            let pad = if pos + len > ring.size {
                ring.size - pos
            } else {
                0
            };
            if tail + pad + len - head <= ring.size {
                let r = Reservation {
                    start: tail,
                    lsn: tail + pad,
                    end: tail + pad + len,
                };
                self.take_reservation(slot, &r);
                return Ok(r);
            }
            drop(log);
            if !waited {
                self.count(Counter::LogFullWaits, 1);
                waited = true;
            }
            self.try_digest()?;
            if waiter.pause("log space")? {
                self.pass_abandoned()?;
            }
        }
    }

    /// What the log's positions keep (debug builds), read under the log lock: head <= durable
    /// prefix <= tail, and the log never holds more than the ring's `ring_bytes`.
    #[cfg(debug_assertions)]
    fn debug_check_log_bounds(&self, head: u64, tail: u64, ring_bytes: u64) {
        // The tail moves only under the log lock; the head and the prefix only grow, and are
        // read in that order.
        let durable = self.durable().load(Ordering::Acquire);
        assert!(
            head <= durable,
            "log head past the durable prefix: expected head <= {durable}, found {head}"
        );
        assert!(
            durable <= tail,
            "durable prefix past the log tail: expected <= {tail}, found {durable}"
        );
        assert!(
            tail - head <= ring_bytes,
            "log holds more than its ring: expected tail - head <= {ring_bytes}, found {tail} - \
             {head} = {}",
            tail - head
        );
    }

    /// Records `r` in transaction slot `slot` (reserved, not yet written) and moves the log
    /// tail past it. Called under the log lock.
    fn take_reservation(&self, slot: usize, r: &Reservation) {
        self.set_tx_lsn(slot, Some(r.lsn));
        self.tx_word(slot, TX_RES_STATE)
            .store(RES_RESERVED, Ordering::Relaxed);
        self.tx_word(slot, TX_RES_START)
            .store(r.start, Ordering::Relaxed);
        self.tx_word(slot, TX_RES_END)
            .store(r.end, Ordering::Release);
        self.tail().store(r.end, Ordering::Release);
    }

    /// Writes `record` (sealed for `r.lsn`) and the padding before it into slot `slot`'s
    /// reservation, flushes and fences: the record is durable when this returns. Fails with
    /// `Fenced`, writing nothing, if a waiter fenced the reservation first (see the module
    /// comment); the reservation is then passed and released before this returns.
    pub(crate) fn write_reserved(&self, slot: usize, r: &Reservation, record: &[u8]) -> Result<()> {
        let state = self.tx_word(slot, TX_RES_STATE);
        if state
            .compare_exchange(
                RES_RESERVED,
                RES_WRITING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            self.pass_reservation_of(slot)?;
            self.set_tx_lsn(slot, None);
            state.store(RES_RESERVED, Ordering::Release);
            return Err(PmError::Fenced {
                stalled_ms: self.opts.stall_timeout.as_millis() as u64,
            });
        }
        // The record fills its reservation exactly and names its own position: `settle` keeps a
        // record only if it ends at the reservation's end, and `Ring::header` finds one only at
        // the position it names.
        debug_assert_eq!(
            record.len() as u64,
            r.end - r.lsn,
            "record does not fill its reservation [{}, {}): expected {} bytes, found {}",
            r.lsn,
            r.end,
            r.end - r.lsn,
            record.len()
        );
        debug_assert_eq!(
            log::sealed_lsn(record),
            r.lsn,
            "record sealed for another position: expected lsn {}, found {}",
            r.lsn,
            log::sealed_lsn(record)
        );
        let ring = self.ring();
        if r.lsn > r.start {
            self.write_pads(r.start, r.lsn);
        }
        let at = ring.base + ring.pos(r.lsn);
        self.nvm.write(at, record);
        self.nvm.flush(at, record.len());
        self.nvm.fence();
        Ok(())
    }

    /// Padding records over `[start, end)` (flushed, not fenced), split at the ring's end.
    fn write_pads(&self, start: u64, end: u64) {
        let ring = self.ring();
        let mut at = start;
        while at < end {
            let n = (end - at).min(ring.size - ring.pos(at) as u64);
            let off = ring.base + ring.pos(at);
            self.nvm.write(off, &log::pad(at, n));
            self.nvm.flush(off, log::HEADER);
            at += n;
        }
    }

    /// Waits for every reservation before `r` to be durable, then moves the durable prefix
    /// past `r`. While waiting it *helps*: an earlier record that is already whole in the log
    /// is flushed, fenced and passed by whoever sees it first, so a committer descheduled
    /// between writing its record and publishing it holds nobody up.
    ///
    /// It cannot fail: the record is durable and will be passed whatever happens, so the
    /// commit must not report failure (errors while settling others are retried).
    pub(crate) fn publish(&self, slot: usize, r: &Reservation) {
        // Only a record its committer wrote is published: a fenced reservation is padding, and
        // acknowledging it would lose the commit.
        debug_assert_eq!(
            self.tx_word(slot, TX_RES_STATE).load(Ordering::Acquire),
            RES_WRITING,
            "publishing slot {slot}'s record at {}: expected its reservation written \
             ({RES_WRITING}), found state {}",
            r.lsn,
            self.tx_word(slot, TX_RES_STATE).load(Ordering::Acquire)
        );
        let durable = self.durable();
        let mut waiter = Waiter::new(self.opts.timeout);
        let mut stall = StallClock::default();
        loop {
            let d = durable.load(Ordering::Acquire);
            if d >= r.end {
                break; // another committer passed our record for us
            }
            if (d == r.start || d == r.lsn)
                && durable
                    .compare_exchange(d, r.end, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break;
            }
            if d < r.start && self.help(d) {
                continue;
            }
            if waiter.pause_forever() {
                let _ = self.pass_blocking(stall.stalled(d, self.opts.stall_timeout));
            }
        }
        self.tx_word(slot, TX_RES_END).store(0, Ordering::Release);
        self.tx_word(slot, TX_RES_STATE)
            .store(RES_RESERVED, Ordering::Release);
    }

    /// Passes the record or padding at durable position `d` if it is whole: flushes and fences
    /// it (its writer may not have yet) and moves the prefix past it. True if the prefix moved.
    fn help(&self, d: u64) -> bool {
        let ring = self.ring();
        let Some(h) = ring.header(d) else {
            return false;
        };
        if h.kind == KIND_TX {
            if !ring.body_intact(&h) {
                return false;
            }
            self.nvm.flush(ring.base + ring.pos(d), h.len as usize);
        } else {
            self.nvm.flush(ring.base + ring.pos(d), log::HEADER);
        }
        self.nvm.fence();
        let passed = self
            .durable()
            .compare_exchange(d, d + h.len, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        // A header that names position `d` belongs to a reservation below the tail (recovery
        // erases leftover ones the new log would reach), so passing it never passes the tail.
        debug_assert!(
            !passed || d + h.len <= self.tail().load(Ordering::Acquire),
            "durable prefix passed the log tail: expected {d} + {} <= {}, found it past",
            h.len,
            self.tail().load(Ordering::Acquire)
        );
        passed
    }

    /// Moves the durable prefix past reservations of dead processes, and fenced ones, that it
    /// has reached. Cheap when there are none.
    pub(crate) fn pass_abandoned(&self) -> Result<()> {
        self.pass_blocking(false)
    }

    /// `pass_abandoned`; with `fence`, first fences the unwritten reservation of a live
    /// committer that the prefix has been stuck at for `stall_timeout`.
    fn pass_blocking(&self, fence: bool) -> Result<()> {
        let mut fence = fence;
        loop {
            let d = self.durable().load(Ordering::Acquire);
            if d >= self.tail().load(Ordering::Acquire) {
                return Ok(());
            }
            let Some(s) = self.reservation_at(d) else {
                return Ok(()); // its committer is publishing it right now
            };
            let passable = self.abandoned(s) || self.fenced(s);
            if !(passable || fence) || !self.settle_now(s, std::mem::take(&mut fence))? {
                return Ok(());
            }
        }
    }

    /// The slot whose reservation holds log position `d`.
    fn reservation_at(&self, d: u64) -> Option<usize> {
        let holds = |s: usize| {
            let end = self.tx_word(s, TX_RES_END).load(Ordering::Acquire);
            end != 0 && (self.tx_word(s, TX_RES_START).load(Ordering::Acquire)..end).contains(&d)
        };
        // Reservations are cut one after another from the tail, so they never overlap: two
        // holding `d` would be two committers owning the same log bytes.
        debug_assert!(
            (0..TX_SLOTS).filter(|&s| holds(s)).count() <= 1,
            "log position {d} reserved twice: expected at most one slot holding it, found slots \
             {:?}",
            (0..TX_SLOTS).filter(|&s| holds(s)).collect::<Vec<_>>()
        );
        (0..TX_SLOTS).find(|&s| holds(s))
    }

    fn fenced(&self, s: usize) -> bool {
        self.tx_word(s, TX_RES_STATE).load(Ordering::Acquire) == RES_FENCED
    }

    /// Whether slot `s`'s transaction belongs to a process that has died.
    fn abandoned(&self, s: usize) -> bool {
        match self.tx_word(s, TX_OWNER).load(Ordering::Acquire) {
            0 => false,
            owner => !self.live.alive(owner as usize - 1),
        }
    }

    /// `settle` under the log lock; with `fence`, first fences slot `s`'s reservation if the
    /// durable prefix is at it and its committer has not begun writing.
    fn settle_now(&self, s: usize, fence: bool) -> Result<bool> {
        let _log = self.lock_log()?;
        if fence && self.at_prefix(s).is_some() {
            let fenced = self
                .tx_word(s, TX_RES_STATE)
                .compare_exchange(
                    RES_RESERVED,
                    RES_FENCED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok();
            if fenced {
                self.count(Counter::Fenced, 1);
            }
        }
        self.settle(s)
    }

    /// Slot `s`'s reservation `(start, lsn, end)` if the durable prefix is at it: at its start
    /// or, past its wrap padding, its record.
    fn at_prefix(&self, s: usize) -> Option<(u64, u64, u64)> {
        let end = self.tx_word(s, TX_RES_END).load(Ordering::Acquire);
        let start = self.tx_word(s, TX_RES_START).load(Ordering::Acquire);
        let lsn = self.tx_lsn(s)?;
        let d = self.durable().load(Ordering::Acquire);
        (end != 0 && (d == start || d == lsn) && d < end).then_some((start, lsn, end))
    }

    /// If slot `s` holds a dead process's reservation that the durable prefix has reached,
    /// makes the rest of it whole (its record if intact, else padding) and moves the prefix
    /// past it; a fenced reservation is padded whole. Returns whether the prefix moved.
    /// Caller holds the log lock, under which the slot is checked again (it may have been
    /// settled, freed and reused meanwhile).
    ///
    /// A kept record is not made visible here: like any record of a dead committer, the
    /// applier or the reaper does that under the maintenance lock, then the reaper releases
    /// its page locks.
    fn settle(&self, s: usize) -> Result<bool> {
        debug_assert_eq!(
            self.nvm.load_word(layout::V_LOG_LOCK),
            self.live.me() as u64 + 1,
            "settling slot {s} without the log lock: expected holder {} (this process), found {}",
            self.live.me() + 1,
            self.nvm.load_word(layout::V_LOG_LOCK)
        );
        let Some((_, lsn, end)) = self.at_prefix(s) else {
            return Ok(false);
        };
        debug_assert!(
            end <= self.tail().load(Ordering::Acquire),
            "reservation of slot {s} ends past the log tail: expected {end} <= {}",
            self.tail().load(Ordering::Acquire)
        );
        let d = self.durable().load(Ordering::Acquire);
        let fenced = self.fenced(s);
        if !fenced && !self.abandoned(s) {
            return Ok(false);
        }
        let ring = self.ring();
        let whole = ring.header(lsn).filter(|h| {
            !fenced
                && h.kind == KIND_TX
                && h.owner as usize == s
                && h.lsn + h.len == end
                && ring.body_intact(h)
        });
        match whole {
            Some(h) => {
                self.write_pads(d, lsn);
                self.nvm.flush(ring.base + ring.pos(lsn), h.len as usize);
            }
            None => self.write_pads(d, end),
        }
        self.nvm.fence();
        Ok(self
            .durable()
            .compare_exchange(d, end, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok())
    }

    /// Waits until the durable prefix has passed slot `s`'s reservation (if any), settling
    /// abandoned ones and helping whole ones on the way, then clears it. The reaper calls it
    /// before it makes a dead committer's record visible and releases its page locks: a record
    /// must be durable, with everything before it, before anyone can see it.
    pub(crate) fn pass_reservation_of(&self, s: usize) -> Result<()> {
        let mut waiter = Waiter::new(self.opts.timeout);
        loop {
            let end = self.tx_word(s, TX_RES_END).load(Ordering::Acquire);
            if end == 0 {
                return Ok(());
            }
            let d = self.durable().load(Ordering::Acquire);
            if d >= end {
                self.tx_word(s, TX_RES_END).store(0, Ordering::Release);
                return Ok(());
            }
            if !self.help(d) {
                self.pass_abandoned()?;
                waiter.pause("earlier commits to become durable")?;
            }
        }
    }

    /// After taking the log lock from dead process `p`: reservations it recorded but never
    /// made (the tail did not move past them) are forgotten.
    pub(crate) fn forget_unmade_reservations(&self, p: usize, tail: u64) {
        for s in 0..TX_SLOTS {
            if self.tx_word(s, TX_OWNER).load(Ordering::Acquire) == p as u64 + 1
                && self.tx_word(s, TX_RES_END).load(Ordering::Acquire) != 0
                && self.tx_word(s, TX_RES_START).load(Ordering::Acquire) >= tail
            {
                self.set_tx_lsn(s, None);
                self.tx_word(s, TX_RES_END).store(0, Ordering::Release);
            }
        }
    }

    /// Takes the log lock (held for reservations and settling).
    fn lock_log(&self) -> Result<LogGuard<'_>> {
        let lock = self.nvm.word(layout::V_LOG_LOCK);
        let how = coord::lock_robust(lock, &self.live, self.opts.timeout, "the log lock")?;
        if let Acquired::FromDead(p) = how {
            self.forget_unmade_reservations(p, self.tail().load(Ordering::Acquire));
        }
        Ok(LogGuard(lock, self.live.me() as u64 + 1))
    }
}

/// How long a waiter has seen the durable prefix stuck at one position (read only every
/// 256 pauses, like `Waiter`'s clock).
#[derive(Default)]
struct StallClock {
    at: Option<(u64, Instant)>,
}

impl StallClock {
    /// Whether the prefix has been at `d` for longer than `limit`.
    fn stalled(&mut self, d: u64, limit: Duration) -> bool {
        match self.at {
            Some((at, since)) if at == d => since.elapsed() > limit,
            _ => {
                self.at = Some((d, Instant::now()));
                false
            }
        }
    }
}

/// The log lock, held; the second field is the holder's lock word (process slot + 1).
struct LogGuard<'a>(&'a AtomicU64, u64);

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        // Taken from this process only if it were dead: a live holder's stores under the lock
        // would have raced the taker's.
        debug_assert_eq!(
            self.0.load(Ordering::Relaxed),
            self.1,
            "releasing the log lock: expected it still held by this process ({}), found {}",
            self.1,
            self.0.load(Ordering::Relaxed)
        );
        coord::unlock_robust(self.0, self.1);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use std::time::Duration;

    use super::{Reservation, RES_WRITING};
    use crate::error::PmError;
    use crate::layout::{TX_OWNER, TX_RES_END, TX_RES_STATE};
    use crate::log::{self, KIND_PAD, KIND_TX};
    use crate::pool_state::PoolState;
    use crate::sim::SimWorld;
    use crate::{Pool, PoolOptions};

    const SIZE: u64 = 1 << 20;

    fn options() -> PoolOptions {
        PoolOptions {
            log_size_bytes: 64 << 10,
            cache_size_bytes: 64 << 10,
            persist_ns: Some(0),
            background: false,
            ..Default::default()
        }
    }

    /// A pool over simulated tiers: every process counts as alive.
    fn simulated() -> Pool {
        let (n, s) = Pool::simulated_sizes(SIZE, &options());
        let world = Arc::new(SimWorld::new(&vec![0; n], &vec![0; s], None, 0));
        Pool::open_simulated(world, SIZE, &options()).unwrap()
    }

    /// A pool over real files, where liveness is real: a process slot nobody holds is dead.
    fn real(dir: &tempfile::TempDir) -> Pool {
        let opts = PoolOptions {
            nvm_dir: dir.path().to_path_buf(),
            ..options()
        };
        Pool::open(dir.path().join("pool.data"), SIZE, &opts).unwrap()
    }

    /// A process slot that no process holds, so liveness calls it dead.
    const DEAD: usize = 9;

    /// A sealed record for transaction slot `slot`, owned by process `owner`, writing
    /// `byte` × 100 at `offset`, and its reservation.
    fn reserve(
        inner: &PoolState,
        slot: usize,
        owner: usize,
        offset: u64,
        byte: u8,
    ) -> (Reservation, Vec<u8>) {
        let data = [byte; 100];
        let mut record = Vec::new();
        log::build(&mut record, [(offset, &data[..])].into_iter());
        inner
            .tx_word(slot, TX_OWNER)
            .store(owner as u64 + 1, Ordering::Release);
        let r = inner.reserve(slot, record.len() as u64).unwrap();
        log::seal(&mut record, r.lsn, slot as u32);
        (r, record)
    }

    #[test]
    fn reservations_are_published_in_log_order_and_a_waiter_passes_a_whole_predecessor() {
        let pool = simulated();
        let inner = pool.inner();
        let (r1, rec1) = reserve(inner, 3, 0, 0, 1);
        let (r2, rec2) = reserve(inner, 4, 0, 4096, 2);
        assert_eq!(r2.start, r1.end, "reservations are contiguous");
        // Nothing written at the prefix yet: a waiter cannot pass it.
        assert!(!inner.help(r1.start));
        assert_eq!(inner.durable().load(Ordering::Acquire), r1.start);
        // The first committer wrote its record but was "descheduled" before publishing: the
        // second passes it, then publishes itself.
        inner.write_reserved(3, &r1, &rec1).unwrap();
        inner.write_reserved(4, &r2, &rec2).unwrap();
        inner.publish(4, &r2);
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        assert_eq!(inner.tx_word(4, TX_RES_END).load(Ordering::Acquire), 0);
        // The first then finds itself passed and returns at once.
        assert_eq!(inner.tx_word(3, TX_RES_END).load(Ordering::Acquire), r1.end);
        inner.publish(3, &r1);
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        assert_eq!(inner.tx_word(3, TX_RES_END).load(Ordering::Acquire), 0);
        for r in [r1, r2] {
            inner
                .make_visible(&inner.ring().header(r.lsn).unwrap())
                .unwrap();
        }
    }

    #[test]
    fn a_dead_process_unwritten_reservation_is_padded_and_passed_then_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let pool = real(&dir);
        let inner = pool.inner();
        let me = inner.live.me();
        let (r1, _never_written) = reserve(inner, 5, DEAD, 0, 1);
        let (r2, rec2) = reserve(inner, 6, me, 4096, 2);
        inner.write_reserved(6, &r2, &rec2).unwrap();
        // Blocks on the dead reservation until it settles it (no timeout: it must end).
        inner.publish(6, &r2);
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        let ring = inner.ring();
        let pad = ring
            .header(r1.start)
            .expect("the hole is a padding record now");
        assert_eq!((pad.kind, pad.len), (KIND_PAD, r1.end - r1.start));
        assert_eq!(ring.header(r2.lsn).map(|h| h.kind), Some(KIND_TX));
        // Reaping the dead process frees its slot.
        inner.proc_state(DEAD).store(1, Ordering::Release);
        inner.reap(DEAD).unwrap();
        assert_eq!(inner.tx_word(5, TX_OWNER).load(Ordering::Acquire), 0);
        assert_eq!(inner.tx_word(5, TX_RES_END).load(Ordering::Acquire), 0);
        // The padded hole writes nothing; the published record (made visible as its commit
        // would) applies.
        inner.make_visible(&ring.header(r2.lsn).unwrap()).unwrap();
        pool.maintain().unwrap();
        assert_eq!(inner.nvm.load_word(crate::layout::H_LOG_HEAD), r2.end);
        let mut b = [0u8; 2];
        pool.read(0, &mut b[..1]).unwrap();
        pool.read(4096, &mut b[1..]).unwrap();
        assert_eq!(b, [0, 2]);
    }

    #[test]
    fn reaping_a_dead_committer_passes_its_whole_record_before_making_it_visible() {
        let dir = tempfile::tempdir().unwrap();
        let pool = real(&dir);
        let inner = pool.inner();
        let (r1, rec1) = reserve(inner, 7, DEAD, 8192, 9);
        inner.write_reserved(7, &r1, &rec1).unwrap();
        inner.proc_state(DEAD).store(1, Ordering::Release);
        inner.reap(DEAD).unwrap();
        assert_eq!(inner.durable().load(Ordering::Acquire), r1.end);
        assert_eq!(inner.tx_lsn(7), None);
        let mut b = [0u8; 100];
        pool.read(8192, &mut b).unwrap();
        assert_eq!(b, [9u8; 100]);
    }

    #[test]
    fn a_reused_slot_is_not_settled_by_a_stale_look() {
        // A settler that saw slot 5 abandoned must check again under the lock: here the slot
        // belongs to a live transaction by the time it settles.
        let dir = tempfile::tempdir().unwrap();
        let pool = real(&dir);
        let inner = pool.inner();
        let (r1, _) = reserve(inner, 5, inner.live.me(), 0, 1);
        assert!(!inner.settle_now(5, false).unwrap());
        assert!(inner.ring().header(r1.start).is_none(), "nothing padded");
        assert_eq!(inner.durable().load(Ordering::Acquire), r1.start);
        inner.tx_word(5, TX_RES_END).store(0, Ordering::Release);
        inner.tx_word(5, TX_OWNER).store(0, Ordering::Release);
        inner.tail().store(r1.start, Ordering::Release);
    }

    #[test]
    fn a_stopped_committer_is_fenced_so_later_commits_pass_it_and_it_writes_nothing() {
        // Transaction slot 5 reserved log space and its (live) process stopped before writing
        // a byte, as under SIGSTOP; slot 6 reserved after it, wrote its record and publishes.
        let dir = tempfile::tempdir().unwrap();
        let opts = PoolOptions {
            nvm_dir: dir.path().to_path_buf(),
            stall_timeout: Duration::from_millis(50),
            ..options()
        };
        let pool = Pool::open(dir.path().join("pool.data"), SIZE, &opts).unwrap();
        let inner = pool.inner();
        let me = inner.live.me();
        let (r1, rec1) = reserve(inner, 5, me, 0, 1);
        let (r2, rec2) = reserve(inner, 6, me, 4096, 2);
        inner.write_reserved(6, &r2, &rec2).unwrap();
        let (done_tx, done) = std::sync::mpsc::channel();
        let late = std::thread::scope(|scope| {
            scope.spawn(|| {
                inner.publish(6, &r2);
                done_tx.send(()).unwrap();
            });
            let passed = done.recv_timeout(Duration::from_secs(30)).is_ok();
            // The stopped committer runs again. Had nobody passed it, its write unblocks the
            // publisher so that this test fails instead of hanging.
            let late = inner.write_reserved(5, &r1, &rec1);
            if !passed {
                inner.publish(5, &r1);
            }
            assert!(
                passed,
                "a live committer that never writes held the later commit"
            );
            late
        });
        assert!(matches!(late, Err(PmError::Fenced { .. })), "{late:?}");
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        let pad = inner
            .ring()
            .header(r1.start)
            .expect("the fenced bytes are padding");
        assert_eq!((pad.kind, pad.len), (KIND_PAD, r1.end - r1.start));
        assert_eq!(inner.tx_word(5, TX_RES_END).load(Ordering::Acquire), 0);
        assert_eq!(inner.tx_lsn(5), None);
        assert_eq!(pool.stats().fenced, 1);
        // The later commit applies; the fenced one never does.
        inner
            .make_visible(&inner.ring().header(r2.lsn).unwrap())
            .unwrap();
        pool.maintain().unwrap();
        let mut b = [0u8; 2];
        pool.read(0, &mut b[..1]).unwrap();
        pool.read(4096, &mut b[1..]).unwrap();
        assert_eq!(b, [0, 2]);
    }

    #[test]
    fn a_committer_stopped_while_copying_its_record_is_not_fenced() {
        // Its bytes are its own until it is done: padding them under it would tear the log.
        let dir = tempfile::tempdir().unwrap();
        let pool = real(&dir);
        let inner = pool.inner();
        let (r1, _) = reserve(inner, 5, inner.live.me(), 0, 1);
        inner
            .tx_word(5, TX_RES_STATE)
            .store(RES_WRITING, Ordering::Release);
        assert!(!inner.settle_now(5, true).unwrap());
        assert!(inner.ring().header(r1.start).is_none(), "nothing padded");
        assert_eq!(inner.durable().load(Ordering::Acquire), r1.start);
        assert_eq!(pool.stats().fenced, 0);
        inner.tx_word(5, TX_RES_END).store(0, Ordering::Release);
        inner.tx_word(5, TX_OWNER).store(0, Ordering::Release);
        inner.tail().store(r1.start, Ordering::Release);
    }

    #[test]
    fn a_process_that_must_take_a_dead_process_slot_reaps_it_first() {
        // Process slot 1 belongs to a dead process that left a torn log reservation (tx slot
        // 9) and a page lock; every other process slot but ours (0) is taken by dead ones
        // too, so a second opener has to take one of theirs.
        let dir = tempfile::tempdir().unwrap();
        let pool = real(&dir);
        let inner = pool.inner();
        assert_eq!(inner.live.me(), 0);
        for p in 1..crate::layout::PROCS {
            inner.proc_state(p).store(1, Ordering::Release);
        }
        let (r, _never_written) = reserve(inner, 9, 1, 0, 1);
        inner.lock_word(7).store(9 + 1, Ordering::Release);
        let opts = PoolOptions {
            nvm_dir: dir.path().to_path_buf(),
            timeout: std::time::Duration::from_secs(2),
            ..options()
        };
        let second = Pool::open(dir.path().join("pool.data"), SIZE, &opts)
            .expect("opens after reaping the dead slot it takes");
        assert_eq!(second.inner().live.me(), 1);
        assert_eq!(inner.durable().load(Ordering::Acquire), r.end);
        assert_eq!(inner.tx_word(9, TX_OWNER).load(Ordering::Acquire), 0);
        assert_eq!(inner.lock_word(7).load(Ordering::Acquire), 0);
        // Both keep committing.
        for p in [&pool, &second] {
            let mut tx = p.begin().unwrap();
            tx.write(4096, b"on").unwrap();
            tx.commit().unwrap();
        }
    }
}
