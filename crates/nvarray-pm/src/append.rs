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
//! the log lock before the tail moves, so one whose committer dies is always found. Survivors
//! *settle* it: keep the record if it is whole, otherwise fill its bytes with padding records;
//! then the prefix can pass it. Waiting for earlier records has no timeout: each is either
//! being written by a live committer, whole (and then passed by any waiter), or abandoned by a
//! dead process (and then settled).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::coord::{self, Acquired, Waiter};
use crate::error::Result;
use crate::layout::{self, TX_LSN, TX_ORPHAN, TX_OWNER, TX_RES_END, TX_RES_START, TX_SLOTS};
use crate::log::{self, KIND_TX};
use crate::pool::{Counter, Inner};

/// Log bytes reserved for one record: `[start, lsn)` is padding up to the ring's end (usually
/// empty), `[lsn, end)` the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub start: u64,
    pub lsn: u64,
    pub end: u64,
}

impl Inner {
    /// Every log record below this position is durable.
    pub(crate) fn durable(&self) -> &AtomicU64 {
        self.nvm.word(layout::V_LOG_DURABLE)
    }

    /// Reserves `len` bytes at the log tail for the transaction in `slot`, waiting for the
    /// applier if the log is full.
    pub(crate) fn reserve(&self, slot: usize, len: u64) -> Result<Reservation> {
        let ring = self.ring();
        let mut waiter = Waiter::new(self.opts.timeout);
        let mut waited = false;
        loop {
            let log = self.lock_log()?;
            let tail = self.tail().load(Ordering::Acquire);
            let head = self.nvm.load_word(layout::H_LOG_HEAD);
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
                self.tx_word(slot, TX_LSN).store(r.lsn, Ordering::Relaxed);
                self.tx_word(slot, TX_RES_START)
                    .store(r.start, Ordering::Relaxed);
                self.tx_word(slot, TX_RES_END)
                    .store(r.end, Ordering::Release);
                self.tail().store(r.end, Ordering::Release);
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

    /// Writes `record` (sealed for `r.lsn`) and the padding before it into the reservation,
    /// flushes and fences: the record is durable when this returns.
    pub(crate) fn write_reserved(&self, r: &Reservation, record: &[u8]) {
        let ring = self.ring();
        if r.lsn > r.start {
            self.write_pads(r.start, r.lsn);
        }
        let at = ring.base + ring.pos(r.lsn);
        self.nvm.write(at, record);
        self.nvm.flush(at, record.len());
        self.nvm.fence();
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
    pub(crate) fn publish(&self, slot: usize, r: &Reservation) -> Result<()> {
        let durable = self.durable();
        let mut waiter = Waiter::new(self.opts.timeout);
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
                self.pass_abandoned()?;
            }
        }
        self.tx_word(slot, TX_RES_END).store(0, Ordering::Release);
        Ok(())
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
        self.durable()
            .compare_exchange(d, d + h.len, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Moves the durable prefix past reservations nobody will publish: those of dead
    /// processes and orphaned slots. Cheap when there are none.
    pub(crate) fn pass_abandoned(&self) -> Result<()> {
        loop {
            let d = self.durable().load(Ordering::Acquire);
            if d >= self.tail().load(Ordering::Acquire) {
                return Ok(());
            }
            let Some(s) = (0..TX_SLOTS).find(|&s| {
                self.tx_word(s, TX_RES_END).load(Ordering::Acquire) != 0
                    && self.tx_word(s, TX_RES_START).load(Ordering::Acquire) == d
            }) else {
                return Ok(()); // its committer is publishing it right now
            };
            if !self.abandoned(s) || !self.settle_now(s)? {
                return Ok(());
            }
        }
    }

    /// Whether slot `s`'s reservation will never be published by its owner.
    fn abandoned(&self, s: usize) -> bool {
        match self.tx_word(s, TX_OWNER).load(Ordering::Acquire) {
            0 => false,
            TX_ORPHAN => true,
            owner => !self.live.alive(owner as usize - 1),
        }
    }

    /// `settle` under the log lock.
    pub(crate) fn settle_now(&self, s: usize) -> Result<bool> {
        let _log = self.lock_log()?;
        self.settle(s)
    }

    /// Makes an abandoned reservation of slot `s` whole (its record if intact and made
    /// visible, else padding) and, if the durable prefix has reached it, moves the prefix past
    /// it and frees an orphaned slot. Returns whether the prefix moved. Caller holds the log
    /// lock; settling twice is harmless.
    fn settle(&self, s: usize) -> Result<bool> {
        let end = self.tx_word(s, TX_RES_END).load(Ordering::Acquire);
        let start = self.tx_word(s, TX_RES_START).load(Ordering::Acquire);
        let d = self.durable().load(Ordering::Acquire);
        if end == 0 || d > start {
            return Ok(false);
        }
        let ring = self.ring();
        let lsn = self.tx_word(s, TX_LSN).load(Ordering::Acquire);
        let whole = (start..end)
            .contains(&lsn)
            .then(|| ring.header(lsn))
            .flatten()
            .filter(|h| {
                h.kind == KIND_TX
                    && h.owner as usize == s
                    && h.lsn + h.len == end
                    && ring.body_intact(h)
            });
        match whole {
            Some(h) => {
                self.write_pads(start, lsn);
                let at = ring.base + ring.pos(lsn);
                self.nvm.flush(at, h.len as usize);
                self.nvm.fence();
                self.make_visible(&h)?;
            }
            None => {
                self.write_pads(start, end);
                self.nvm.fence();
            }
        }
        if d != start {
            return Ok(false);
        }
        self.durable().store(end, Ordering::Release);
        self.tx_word(s, TX_LSN).store(0, Ordering::Relaxed);
        self.tx_word(s, TX_RES_END).store(0, Ordering::Release);
        let _ = self.tx_word(s, TX_OWNER).compare_exchange(
            TX_ORPHAN,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        Ok(true)
    }

    /// After taking the log lock from dead process `p`: reservations it recorded but never
    /// made (the tail did not move past them) are forgotten.
    fn forget_unmade_reservations(&self, p: usize, tail: u64) {
        for s in 0..TX_SLOTS {
            if self.tx_word(s, TX_OWNER).load(Ordering::Acquire) == p as u64 + 1
                && self.tx_word(s, TX_RES_END).load(Ordering::Acquire) != 0
                && self.tx_word(s, TX_RES_START).load(Ordering::Acquire) >= tail
            {
                self.tx_word(s, TX_LSN).store(0, Ordering::Relaxed);
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
        Ok(LogGuard(lock))
    }
}

struct LogGuard<'a>(&'a AtomicU64);

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        coord::unlock_robust(self.0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::Reservation;
    use crate::layout::{TX_ORPHAN, TX_OWNER, TX_RES_END};
    use crate::log::{self, KIND_PAD, KIND_TX};
    use crate::pool::Inner;
    use crate::sim::SimWorld;
    use crate::{Pool, PoolOptions};

    const SIZE: u64 = 1 << 20;

    fn pool() -> Pool {
        let opts = PoolOptions {
            log_size: 64 << 10,
            cache_size: 64 << 10,
            persist_ns: Some(0),
            background: false,
            ..Default::default()
        };
        let (n, s) = Pool::simulated_sizes(SIZE, &opts);
        let world = Arc::new(SimWorld::new(&vec![0; n], &vec![0; s], None, 0));
        Pool::open_simulated(world, SIZE, &opts).unwrap()
    }

    /// A sealed record for `slot` writing `byte` × 100 at `offset`, and its reservation.
    fn reserve(inner: &Inner, slot: usize, offset: u64, byte: u8) -> (Reservation, Vec<u8>) {
        let data = [byte; 100];
        let mut record = Vec::new();
        log::build(&mut record, [(offset, &data[..])].into_iter());
        inner.tx_word(slot, TX_OWNER).store(1, Ordering::Release);
        let r = inner.reserve(slot, record.len() as u64).unwrap();
        log::seal(&mut record, r.lsn, slot as u32);
        (r, record)
    }

    #[test]
    fn reservations_are_published_in_log_order_and_a_waiter_passes_a_whole_predecessor() {
        let pool = pool();
        let inner = pool.inner();
        let (r1, rec1) = reserve(inner, 3, 0, 1);
        let (r2, rec2) = reserve(inner, 4, 4096, 2);
        assert_eq!(r2.start, r1.end, "reservations are contiguous");
        // Nothing written at the prefix yet: a waiter cannot pass it.
        assert!(!inner.help(r1.start));
        assert_eq!(inner.durable().load(Ordering::Acquire), r1.start);
        // The first committer wrote its record but was "descheduled" before publishing: the
        // second passes it, then publishes itself.
        inner.write_reserved(&r1, &rec1);
        inner.write_reserved(&r2, &rec2);
        inner.publish(4, &r2).unwrap();
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        assert_eq!(inner.tx_word(4, TX_RES_END).load(Ordering::Acquire), 0);
        // The first then finds itself passed and returns at once.
        assert_eq!(inner.tx_word(3, TX_RES_END).load(Ordering::Acquire), r1.end);
        inner.publish(3, &r1).unwrap();
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        assert_eq!(inner.tx_word(3, TX_RES_END).load(Ordering::Acquire), 0);
        for r in [r1, r2] {
            inner
                .make_visible(&inner.ring().header(r.lsn).unwrap())
                .unwrap();
        }
    }

    #[test]
    fn an_abandoned_reservation_is_padded_and_passed_and_its_slot_freed() {
        let pool = pool();
        let inner = pool.inner();
        let (r1, _never_written) = reserve(inner, 5, 0, 1);
        inner
            .tx_word(5, TX_OWNER)
            .store(TX_ORPHAN, Ordering::Release);
        let (r2, rec2) = reserve(inner, 6, 4096, 2);
        inner.write_reserved(&r2, &rec2);
        inner.publish(6, &r2).unwrap();
        assert_eq!(inner.durable().load(Ordering::Acquire), r2.end);
        let ring = inner.ring();
        let pad = ring
            .header(r1.start)
            .expect("the hole is a padding record now");
        assert_eq!((pad.kind, pad.len), (KIND_PAD, r1.end - r1.start));
        assert_eq!(ring.header(r2.lsn).map(|h| h.kind), Some(KIND_TX));
        assert_eq!(inner.tx_word(5, TX_OWNER).load(Ordering::Acquire), 0);
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
    fn an_abandoned_whole_record_is_kept_and_made_visible() {
        let pool = pool();
        let inner = pool.inner();
        let (r1, rec1) = reserve(inner, 7, 8192, 9);
        inner.write_reserved(&r1, &rec1);
        inner
            .tx_word(7, TX_OWNER)
            .store(TX_ORPHAN, Ordering::Release);
        inner.pass_abandoned().unwrap();
        assert_eq!(inner.durable().load(Ordering::Acquire), r1.end);
        let mut b = [0u8; 100];
        pool.read(8192, &mut b).unwrap();
        assert_eq!(b, [9u8; 100]);
    }
}
