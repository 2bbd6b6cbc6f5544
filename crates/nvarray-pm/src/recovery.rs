//! Recovery after a crash, run by the first process to attach when the pool was not closed
//! cleanly: dirty cache pages go to the backing file, then every committed log record from the
//! head on is applied in commit order, the backing file is synced and the log emptied.
//! Uncommitted transactions never reached the log, and a record torn by the crash fails its
//! checksums and ends the log; it was never acknowledged, and neither were the records after
//! it, which were in flight with it (`append.rs`).
//!
//! Records after the end that could *not* all have been in flight (two from one transaction
//! slot) mean the end is damage, not a torn tail: dropping them would lose acknowledged
//! commits silently, so recovery refuses with an error naming the file and the position.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cache::{decode_dir, is_dirty, line_runs};
use crate::error::{PmError, Result};
use crate::layout::{self, PAGE, TX_SLOTS};
use crate::log::{self, Ring, KIND_PAD};
use crate::media::LINE;
use crate::pool_state::PoolState;
use crate::reports::RecoveryReport;

pub(crate) fn recover(inner: &PoolState) -> Result<RecoveryReport> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let l = &inner.layout;
    write_back_dirty_pages(inner, &mut report)?;
    let ring = inner.ring();
    let head = inner.nvm.load_word(layout::H_LOG_HEAD);
    let mut lsn = head;
    while lsn - head < ring.size {
        let Some(h) = ring.header(lsn) else { break };
        if h.kind == KIND_PAD {
            lsn += h.len;
            continue;
        }
        if !ring.body_intact(&h) {
            break;
        }
        let writes = log::entries(ring.body(&h), &h, l.pool_size_bytes)
            .map_err(|what| corrupt(inner, what))?;
        for (off, data) in writes {
            inner.storage.write(off as usize, data);
            report.bytes += data.len() as u64;
        }
        report.records += 1;
        lsn += h.len;
    }
    let leftovers = check_in_flight(inner, &ring, head, lsn, &mut report)?;
    // Erase what was discarded: the log restarts at `lsn`, and a leftover header naming a
    // position the new log will reach would look whole to a committer waiting there.
    for &at in &leftovers {
        let off = inner.layout.log + ring.pos(at);
        inner.nvm.write(off, &[0u8; log::HEADER]);
        inner.nvm.flush(off, log::HEADER);
    }
    inner.nvm.fence();
    inner.storage.sync_all()?;
    inner.reset_cache();
    inner.nvm.store_word(layout::H_LOG_HEAD, lsn);
    inner.nvm.persist(layout::H_LOG_HEAD, 8);
    report.duration = started.elapsed();
    Ok(report)
}

/// The error for damage found in the pool's NVM file: `what`, naming the file.
fn corrupt(inner: &PoolState, what: String) -> PmError {
    PmError::Corrupt {
        path: inner.nvm_path.clone(),
        what,
    }
}

/// Writes the lines every dirty cache page holds to the backing file, counting the pages in
/// `report`; a directory entry naming a page outside the pool is damage.
fn write_back_dirty_pages(inner: &PoolState, report: &mut RecoveryReport) -> Result<()> {
    let l = &inner.layout;
    for slot in 0..l.cache_pages {
        let entry = inner.dir(slot);
        if !is_dirty(entry) {
            continue;
        }
        let (page, _) = decode_dir(entry).expect("dirty entries decode");
        let at = page
            .checked_mul(PAGE as u64)
            .filter(|&a| a < l.pool_size_bytes)
            .ok_or_else(|| {
                corrupt(
                    inner,
                    format!(
                        "write-cache directory entry {slot} names page {page}, outside the pool"
                    ),
                )
            })?;
        // The lines the slot holds, one run of consecutive lines at a time.
        for (first, run) in line_runs(inner.lines(slot)) {
            let from = at + first * LINE as u64;
            if from >= l.pool_size_bytes {
                break;
            }
            let n = (run * LINE as u64).min(l.pool_size_bytes - from) as usize;
            let mut buf = vec![0u8; n];
            inner
                .nvm
                .read(inner.cache_off(slot) + (first as usize) * LINE, &mut buf);
            inner.storage.write(from as usize, &buf);
        }
        report.cache_pages += 1;
    }
    Ok(())
}

/// The positions of the record headers left in the ring past `lsn`, the first incomplete
/// record of the log that starts at `head`, counting them in `report.discarded`; an error if
/// they could not all have been in flight at the crash.
fn check_in_flight(
    inner: &PoolState,
    ring: &Ring<'_>,
    head: u64,
    lsn: u64,
    report: &mut RecoveryReport,
) -> Result<Vec<u64>> {
    // Past the first incomplete record lie only records that were in flight at the crash:
    // reserved, perhaps written, never published, so never acknowledged (`append.rs`). A
    // transaction slot has one reservation at a time, so no slot owns two of them; if one
    // does, the incomplete record is damage to acknowledged data, not a torn tail.
    let mut in_flight: Vec<u32> = Vec::new();
    let mut leftovers: Vec<u64> = Vec::new();
    let mut probe = lsn;
    while probe < head + ring.size {
        if let Some(h) = ring.header(probe) {
            leftovers.push(probe);
            if h.kind != KIND_PAD {
                if in_flight.contains(&h.owner) || h.owner as usize >= TX_SLOTS {
                    let what = format!(
                        "log record at position {lsn} is damaged but the records after it were \
                         not all in flight at the crash (transaction slot {} owns two; the \
                         latest is {} bytes at {}); refusing to drop committed transactions",
                        h.owner, h.len, h.lsn
                    );
                    return Err(corrupt(inner, what));
                }
                in_flight.push(h.owner);
            }
        }
        probe += LINE as u64;
    }
    report.discarded = in_flight.len() as u64;
    Ok(leftovers)
}

/// Resets the shared volatile area for a first process: no locks, no slots, tail at head.
pub(crate) fn reset_shared(inner: &PoolState) {
    let head = inner.nvm.load_word(layout::H_LOG_HEAD);
    for off in (layout::V_LOG_LOCK..layout::V_LOCKS + layout::LOCK_WORDS * 8).step_by(8) {
        inner.nvm.word(off).store(0, Ordering::Relaxed);
    }
    inner.tail().store(head, Ordering::Release);
    inner.durable().store(head, Ordering::Release);
    inner.reset_cache();
}
