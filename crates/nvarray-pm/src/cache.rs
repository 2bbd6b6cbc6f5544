//! The NVM write cache and the two jobs that keep it: applying committed log records to it
//! (which frees log space) and writing its dirty pages back to the backing file.
//!
//! A cache slot belongs to one 4 KiB page but holds only the 64-byte lines that committed
//! transactions wrote: applying a 64-byte write costs one line, not a 4 KiB page fill (which
//! made the seed's page-by-page microbenchmark 2–3× slower than PMDK). Its directory entry
//! (persistent: a state word with page number and clean/dirty, and a mask of the lines held)
//! says which lines recovery must copy to the backing file; an index in the shared volatile
//! area finds a page's slot. Both jobs run under the pool's maintenance lock, so at most one
//! process changes the cache at a time (slide 17's dirty, clean and free lists are the
//! directory states; the victim is found by a clock hand).
//!
//! Ordering, which is what makes a crash at any instant safe:
//! 1. a record is applied to the cache only once it is visible in the backing mapping, so a
//!    write-back (`fdatasync`) always carries everything the cache holds; the lines it touches
//!    are copied *from the mapping* (whole lines, a superset of the record's bytes);
//! 2. cache lines are persistent before the line mask that names them (a dirty page's mask is
//!    read by recovery, so it may never name a line not yet written), the mask before the
//!    directory calls the page dirty, and the directory before the log head moves past the
//!    record;
//! 3. a slot is reused only when clean, and a page marked clean only after `fdatasync`; a
//!    clean slot's mask means nothing and is replaced when it turns dirty again.
//!
//! Replaying the log from the head over (backing file + dirty cache pages) therefore yields
//! every committed byte: records are applied in commit order and re-applying one is harmless.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use crate::error::{PmError, Result};
use crate::layout::{DIR_BYTES, PAGE, V_CLOCK_HAND, V_DIRTY};
use crate::log::{self, Header, Ring, KIND_PAD, STATE_COMMITTED, STATE_VISIBLE};
use crate::media::LINE;
use crate::options::MAX_CACHE;
use crate::pool_state::{Counter, PoolState};

/// Directory entry states.
const CLEAN: u64 = 1;
const DIRTY: u64 = 2;

fn dir_entry(page: u64, state: u64) -> u64 {
    ((page + 1) << 2) | state
}

/// (page, state) of a directory entry, or `None` for a free slot.
pub(crate) fn decode_dir(entry: u64) -> Option<(u64, u64)> {
    (entry != 0).then(|| ((entry >> 2) - 1, entry & 3))
}

pub(crate) fn is_dirty(entry: u64) -> bool {
    decode_dir(entry).is_some_and(|(_, s)| s == DIRTY)
}

const SLOT_BITS: u32 = 28;
const _: () = assert!(
    MAX_CACHE / PAGE as u64 <= 1 << SLOT_BITS,
    "every cache slot number fits the index word's slot bits"
);

/// The runs of consecutive set bits of a line mask: (first line, number of lines).
pub(crate) fn line_runs(mask: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut rest = mask;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let first = rest.trailing_zeros() as u64;
        let run = (rest >> first).trailing_ones() as u64;
        rest &= !(((1u128 << (first + run)) - 1) as u64);
        Some((first, run))
    })
}

/// The slots one digest batch writes lines into, found by page and by slot.
#[derive(Default)]
struct Batch {
    marks: Vec<Mark>,
    by_page: HashMap<u64, usize>,
    slots: HashSet<u64>,
}

impl Batch {
    fn get_mut(&mut self, page: u64) -> Option<&mut Mark> {
        let i = *self.by_page.get(&page)?;
        Some(&mut self.marks[i])
    }

    fn push(&mut self, m: Mark) {
        // One slot per page and one page per slot in a batch: two pages sharing a slot would
        // write their lines over each other's under one directory entry.
        debug_assert!(
            !self.by_page.contains_key(&m.page),
            "page {} marked twice in one batch: expected one mark per page, found a second in \
             slot {}",
            m.page,
            m.slot
        );
        debug_assert!(
            !self.slots.contains(&m.slot),
            "slot {} taken twice in one batch: expected one page per slot, found page {} too",
            m.slot,
            m.page
        );
        self.by_page.insert(m.page, self.marks.len());
        self.slots.insert(m.slot);
        self.marks.push(m);
    }

    /// Adds the lines `writes` touch to their pages' marks (every page marked already).
    fn mark_lines(&mut self, writes: &[(u64, &[u8])]) {
        for &(off, data) in writes {
            let end = off + data.len() as u64;
            for page in off / PAGE as u64..end.div_ceil(PAGE as u64) {
                let page_start = page * PAGE as u64;
                let lo = (off.max(page_start) - page_start) / LINE as u64;
                let hi = (end.min(page_start + PAGE as u64) - page_start).div_ceil(LINE as u64);
                let bits = ((1u128 << hi) - (1u128 << lo)) as u64;
                self.get_mut(page).expect("marked above").lines |= bits;
            }
        }
    }

    /// Removes and returns the marks from index `from` on.
    fn drop_from(&mut self, from: usize) -> Vec<Mark> {
        let dropped = self.marks.split_off(from);
        for m in &dropped {
            self.by_page.remove(&m.page);
            self.slots.remove(&m.slot);
        }
        dropped
    }
}

/// A cache slot a digest batch writes lines into.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    slot: u64,
    page: u64,
    /// Lines of the page this batch's records touch.
    lines: u64,
    /// Whether the slot already held dirty lines of this page (its mask grows) or not (its
    /// mask is replaced and its entry turns dirty).
    was_dirty: bool,
    /// Whether this batch took the slot for the page (undone if the record does not fit).
    fresh: bool,
}

impl PoolState {
    fn dir_off(&self, slot: u64) -> usize {
        self.layout.directory + slot as usize * DIR_BYTES
    }

    fn mask_off(&self, slot: u64) -> usize {
        self.dir_off(slot) + 8
    }

    /// The 64-byte lines of its page that slot `slot` holds (meaningful while dirty).
    pub(crate) fn lines(&self, slot: u64) -> u64 {
        self.nvm.load_word(self.mask_off(slot))
    }

    pub(crate) fn cache_off(&self, slot: u64) -> usize {
        self.layout.cache + slot as usize * PAGE
    }

    pub(crate) fn dir(&self, slot: u64) -> u64 {
        self.nvm.load_word(self.dir_off(slot))
    }

    // --- the page → slot index (volatile, open addressing, changed only under the lock) ---

    fn index_home(&self, page: u64) -> u64 {
        let bits = self.layout.index_slots.trailing_zeros();
        (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) & (self.layout.index_slots - 1)
    }

    fn index_word(&self, i: u64) -> &std::sync::atomic::AtomicU64 {
        self.nvm.word(self.layout.index + i as usize * 8)
    }

    fn index_get(&self, page: u64) -> Option<u64> {
        let mask = self.layout.index_slots - 1;
        let mut i = self.index_home(page);
        loop {
            let v = self.index_word(i).load(Ordering::Relaxed);
            if v == 0 {
                return None;
            }
            if v >> SLOT_BITS == page + 1 {
                return Some(v & ((1 << SLOT_BITS) - 1));
            }
            i = (i + 1) & mask;
        }
    }

    fn index_put(&self, page: u64, slot: u64) {
        debug_assert!(
            slot < self.layout.cache_pages,
            "cache slot out of range: expected < {}, found {slot}",
            self.layout.cache_pages
        );
        debug_assert!(
            page < (1 << (64 - SLOT_BITS)) - 1,
            "page number does not fit the index word: expected page + 1 < 2^{}, found page {page}",
            64 - SLOT_BITS
        );
        debug_assert_eq!(
            self.index_get(page),
            None,
            "page {page} indexed twice: expected no slot yet, found slot {:?}",
            self.index_get(page)
        );
        let mask = self.layout.index_slots - 1;
        let mut i = self.index_home(page);
        while self.index_word(i).load(Ordering::Relaxed) != 0 {
            i = (i + 1) & mask;
        }
        self.index_word(i)
            .store(((page + 1) << SLOT_BITS) | slot, Ordering::Relaxed);
        debug_assert_eq!(
            self.index_get(page),
            Some(slot),
            "index lookup after putting page {page} in slot {slot}: expected Some({slot}), found \
             {:?}",
            self.index_get(page)
        );
    }

    /// Removes `page`, shifting later members of its probe run back (no tombstones).
    fn index_remove(&self, page: u64) {
        let mask = self.layout.index_slots - 1;
        let mut i = self.index_home(page);
        loop {
            let v = self.index_word(i).load(Ordering::Relaxed);
            if v == 0 {
                return;
            }
            if v >> SLOT_BITS == page + 1 {
                break;
            }
            i = (i + 1) & mask;
        }
        let mut hole = i;
        let mut j = (i + 1) & mask;
        loop {
            let v = self.index_word(j).load(Ordering::Relaxed);
            if v == 0 {
                break;
            }
            let home = self.index_home((v >> SLOT_BITS) - 1);
            // Move `v` into the hole if its home is not in (hole, j] cyclically.
            let between = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !between {
                self.index_word(hole).store(v, Ordering::Relaxed);
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.index_word(hole).store(0, Ordering::Relaxed);
        // Backward shifting must leave every other member of the probe run reachable and
        // this page gone (`index_matches_a_map` tests the same against a map).
        debug_assert_eq!(
            self.index_get(page),
            None,
            "index lookup after removing page {page}: expected None, found {:?}",
            self.index_get(page)
        );
    }

    /// Empties the index and the directory (first process to attach, after recovery).
    pub(crate) fn reset_cache(&self) {
        for i in 0..self.layout.index_slots {
            self.index_word(i).store(0, Ordering::Relaxed);
        }
        for slot in 0..self.layout.cache_pages {
            if self.dir(slot) != 0 {
                self.nvm.store_word(self.dir_off(slot), 0);
            }
        }
        self.nvm.persist(
            self.layout.directory,
            self.layout.cache_pages as usize * DIR_BYTES,
        );
        self.nvm.word(V_DIRTY).store(0, Ordering::Relaxed);
    }

    /// A free or clean slot not already taken by this batch, evicting its clean page.
    fn victim(&self, taken: &Batch) -> Option<u64> {
        let k = self.layout.cache_pages;
        let hand = self.nvm.word(V_CLOCK_HAND);
        for _ in 0..k {
            let slot = hand.fetch_add(1, Ordering::Relaxed) % k;
            let entry = self.dir(slot);
            if is_dirty(entry) || taken.slots.contains(&slot) {
                continue;
            }
            if let Some((old, _)) = decode_dir(entry) {
                if self.index_get(old) == Some(slot) {
                    self.index_remove(old);
                }
                self.count(Counter::CacheEvictions, 1);
            }
            return Some(slot);
        }
        None
    }

    /// Applies up to `max_records` durable, visible records from the log head to the cache,
    /// then moves the head past them. Caller holds the maintenance lock. Returns the records
    /// applied.
    pub(crate) fn digest(&self, max_records: usize) -> Result<usize> {
        self.debug_assert_maintenance_held("applying the log");
        let start = self.nvm.load_word(crate::layout::H_LOG_HEAD);
        let mut batch = Batch::default();
        match self.collect(start, max_records, &mut batch) {
            Ok((head, done)) => self.finish_batch(start, head, done, &batch.marks),
            Err(e) => {
                // Nothing of the batch is persistent; the slots it took must not stay indexed.
                for m in batch.marks.iter().filter(|m| m.fresh) {
                    self.index_remove(m.page);
                }
                Err(e)
            }
        }
    }

    /// The first half of `digest`: finds the records to apply from `start` and the cache
    /// slots and lines they need. Returns the new head and the records taken.
    fn collect(&self, start: u64, max_records: usize, batch: &mut Batch) -> Result<(u64, usize)> {
        let ring = self.ring();
        let tail = self.durable().load(Ordering::Acquire);
        let mut head = start;
        let mut done = 0;
        let mut wrote_back = false;
        while head < tail && done < max_records {
            let h = ring.header(head).ok_or_else(|| PmError::Corrupt {
                path: self.nvm_path.clone(),
                what: format!("log record at lsn {head} is damaged while the pool is in use"),
            })?;
            // The applier takes only records below the durable prefix (`append.rs`): the prefix
            // passes whole reservations, so one that starts below it ends within it.
            debug_assert!(
                head + h.len <= tail,
                "record at lsn {head} ends past the durable prefix: expected {head} + {} <= {tail}",
                h.len
            );
            if h.kind == KIND_PAD {
                head += h.len;
                continue;
            }
            if !self.settle_visible(&ring, &h)? {
                break; // its committer is still copying it into the mapping
            }
            let body = ring.body(&h);
            let writes = log::entries(body, &h, self.layout.pool_size_bytes).map_err(|what| {
                PmError::Corrupt {
                    path: self.nvm_path.clone(),
                    what,
                }
            })?;
            // Find every page's slot first, so a record is applied whole or not at all.
            let before = batch.marks.len();
            if !self.mark_pages(&writes, batch) {
                for m in batch.drop_from(before).into_iter().filter(|m| m.fresh) {
                    self.index_remove(m.page);
                }
                if done > 0 {
                    break; // persist what this batch did; the next one starts here
                }
                // Nothing clean to reuse: write back, retry.
                if wrote_back {
                    return Err(PmError::Corrupt {
                        path: self.nvm_path.clone(),
                        what: format!(
                            "log record at lsn {head} touches more pages than the write cache holds"
                        ),
                    });
                }
                self.write_back()?;
                wrote_back = true;
                continue;
            }
            batch.mark_lines(&writes);
            head += h.len;
            done += 1;
        }
        Ok((head, done))
    }

    /// Whether the record `h` is visible (in the mapping) or made so now, its committer dead;
    /// false if its committer is still copying it into the mapping.
    fn settle_visible(&self, ring: &Ring<'_>, h: &Header) -> Result<bool> {
        let head = h.lsn;
        match self.nvm.load_word(ring.state_offset(head)) {
            STATE_VISIBLE => {}
            STATE_COMMITTED if !self.owner_alive(h.owner) => self.make_visible(h)?,
            _ => return Ok(false),
        }
        // Rule 1: the mapping holds the record before the cache takes its lines from there.
        debug_assert_eq!(
            self.nvm.load_word(ring.state_offset(head)),
            STATE_VISIBLE,
            "applying the record at lsn {head}: expected it visible ({STATE_VISIBLE}), found \
             state {}",
            self.nvm.load_word(ring.state_offset(head))
        );
        Ok(true)
    }

    /// Gives every page `writes` touch a slot in `marks`, reusing clean slots; false if the
    /// cache has too few clean ones (`marks` may then hold some of the pages: the caller
    /// drops them).
    fn mark_pages(&self, writes: &[(u64, &[u8])], batch: &mut Batch) -> bool {
        for &(off, data) in writes {
            for page in off / PAGE as u64..(off + data.len() as u64).div_ceil(PAGE as u64) {
                if batch.get_mut(page).is_some() {
                    continue;
                }
                let (slot, was_dirty, fresh) = match self.index_get(page) {
                    Some(slot) => {
                        // A dirty slot holds the lines of the page its entry names; the index
                        // must not lead another page's lines into it.
                        debug_assert!(
                            !is_dirty(self.dir(slot))
                                || decode_dir(self.dir(slot)).map(|(p, _)| p) == Some(page),
                            "index maps page {page} to slot {slot}: expected that slot clean, \
                             free or dirty with page {page}, found entry {:?}",
                            decode_dir(self.dir(slot))
                        );
                        (slot, is_dirty(self.dir(slot)), false)
                    }
                    None => {
                        let Some(slot) = self.victim(batch) else {
                            return false;
                        };
                        self.index_put(page, slot);
                        (slot, false, true)
                    }
                };
                batch.push(Mark {
                    slot,
                    page,
                    lines: 0,
                    was_dirty,
                    fresh,
                });
            }
        }
        true
    }

    /// Persists a batch: the marked lines (copied from the mapping, which holds every visible
    /// commit), then the line masks, then directory entries of newly dirty pages, then the new
    /// log head, each durable before the next.
    fn finish_batch(&self, start: u64, head: u64, records: usize, marks: &[Mark]) -> Result<usize> {
        if marks.is_empty() && head == start {
            return Ok(0);
        }
        let mut order = StepOrder::default();
        self.copy_marked_lines(marks, &mut order);
        // The lines must be durable before a mask names them: with one barrier for both, a
        // power cut could keep a new mask and drop a line it names, and recovery would copy
        // that line's stale bytes (another page's) over the page (found by the power-cut
        // campaign, seed 1039 at operation 429).
        if !marks.is_empty() {
            self.persist_barrier();
        }
        for m in marks {
            let held = if m.was_dirty { self.lines(m.slot) } else { 0 };
            order.store(Step::Masks);
            self.nvm.store_word(self.mask_off(m.slot), held | m.lines);
            self.nvm.flush(self.mask_off(m.slot), 8);
        }
        if !marks.is_empty() {
            self.persist_barrier();
        }
        self.mark_newly_dirty(marks, &mut order);
        if head != start {
            // Once the head passes a record its log space may be reused: everything below the
            // head must be durable (`append.rs`), and applied to the cache (above).
            debug_assert!(
                head <= self.durable().load(Ordering::Acquire),
                "log head moving past the durable prefix: expected {head} <= {}",
                self.durable().load(Ordering::Acquire)
            );
            order.store(Step::Head);
            self.nvm.store_word(crate::layout::H_LOG_HEAD, head);
            self.nvm.flush(crate::layout::H_LOG_HEAD, 8);
            self.persist_barrier();
        }
        order.finish();
        self.count(Counter::RecordsDigested, records as u64);
        Ok(records)
    }

    /// Copies each mark's lines from the mapping into its slot and flushes them (no fence).
    fn copy_marked_lines(&self, marks: &[Mark], order: &mut StepOrder) {
        let pool = self.layout.pool_size_bytes;
        for m in marks {
            // Nothing changed the slot since it was marked (the maintenance lock is held).
            if m.was_dirty {
                debug_assert_eq!(
                    decode_dir(self.dir(m.slot)),
                    Some((m.page, DIRTY)),
                    "slot {} grows page {}'s lines: expected its entry dirty with that page, \
                     found {:?}",
                    m.slot,
                    m.page,
                    decode_dir(self.dir(m.slot))
                );
            } else {
                // Rule 3: only a clean or free slot is given to another page.
                debug_assert!(
                    !is_dirty(self.dir(m.slot)),
                    "slot {} taken for page {}: expected it clean or free, found {:?}",
                    m.slot,
                    m.page,
                    decode_dir(self.dir(m.slot))
                );
            }
            for (first, run) in line_runs(m.lines) {
                let at = m.page * PAGE as u64 + first * LINE as u64;
                let n = (run * LINE as u64).min(pool - at) as usize;
                let mut buf = [0u8; PAGE];
                self.storage.read(at as usize, &mut buf[..n]);
                let dst = self.cache_off(m.slot) + (first as usize) * LINE;
                order.store(Step::Lines);
                self.nvm.write(dst, &buf[..n]);
                self.nvm.flush(dst, n);
            }
        }
    }

    /// Points the directory entry of each mark's slot that was not dirty at its page, dirty;
    /// fences them and adds them to the dirty page count.
    fn mark_newly_dirty(&self, marks: &[Mark], order: &mut StepOrder) {
        let mut newly_dirty = 0;
        for m in marks.iter().filter(|m| !m.was_dirty) {
            order.store(Step::Directory);
            self.nvm
                .store_word(self.dir_off(m.slot), dir_entry(m.page, DIRTY));
            self.nvm.flush(self.dir_off(m.slot), 8);
            newly_dirty += 1;
        }
        if newly_dirty > 0 {
            self.persist_barrier();
            self.nvm
                .word(V_DIRTY)
                .fetch_add(newly_dirty, Ordering::Relaxed);
            debug_assert!(
                self.dirty_pages() <= self.layout.cache_pages,
                "dirty page count over the cache: expected at most {}, found {}",
                self.layout.cache_pages,
                self.dirty_pages()
            );
        }
    }

    /// Writes every dirty cache page back (one `fdatasync` of the backing file, which carries
    /// them all), then marks them clean. Caller holds the maintenance lock.
    pub(crate) fn write_back(&self) -> Result<u64> {
        self.debug_assert_maintenance_held("writing the cache back");
        self.storage.sync_all()?;
        let mut cleaned = 0;
        for slot in 0..self.layout.cache_pages {
            let entry = self.dir(slot);
            if let Some((page, DIRTY)) = decode_dir(entry) {
                self.nvm
                    .store_word(self.dir_off(slot), dir_entry(page, CLEAN));
                self.nvm.flush(self.dir_off(slot), 8);
                cleaned += 1;
            }
        }
        if cleaned > 0 {
            self.persist_barrier();
        }
        self.nvm.word(V_DIRTY).store(0, Ordering::Relaxed);
        self.count(Counter::PagesWrittenBack, cleaned);
        self.count(Counter::WritebackRounds, 1);
        Ok(cleaned)
    }

    pub(crate) fn dirty_pages(&self) -> u64 {
        self.nvm.word(V_DIRTY).load(Ordering::Relaxed)
    }

    /// Whether the dirty fraction is over the write-back threshold.
    pub(crate) fn over_threshold(&self) -> bool {
        self.dirty_pages() as f64 > self.opts.writeback_threshold * self.layout.cache_pages as f64
    }

    /// Repairs what a maintenance-lock holder that died mid-batch may have left: the page
    /// index, then the dirty count, both rebuilt from the directory (the persistent truth).
    pub(crate) fn repair_after_dead_holder(&self) {
        self.rebuild_index();
        self.recount_dirty();
    }

    /// Rebuilds the page index from the directory. A holder that died between indexing a
    /// batch's pages (`mark_pages`) and writing their directory entries (`finish_batch`)
    /// left pages indexed to slots whose entries name another page or none; kept, a later
    /// batch gave such a slot to a second page and the index led both pages' lines into it
    /// (recovery then gave one page the other's bytes). If the directory names a page twice,
    /// the dirty slot wins: it holds lines the backing file lacks.
    fn rebuild_index(&self) {
        self.debug_assert_maintenance_held("rebuilding the page index");
        for i in 0..self.layout.index_slots {
            self.index_word(i).store(0, Ordering::Relaxed);
        }
        for slot in 0..self.layout.cache_pages {
            let entry = self.dir(slot);
            let Some((page, _)) = decode_dir(entry) else {
                continue;
            };
            match self.index_get(page) {
                None => self.index_put(page, slot),
                Some(other) if is_dirty(entry) && !is_dirty(self.dir(other)) => {
                    self.index_remove(page);
                    self.index_put(page, slot);
                }
                Some(_) => {}
            }
        }
    }

    /// Recomputes the dirty count from the directory (after taking the lock from a dead holder).
    pub(crate) fn recount_dirty(&self) {
        self.debug_assert_maintenance_held("recounting dirty pages");
        let n = (0..self.layout.cache_pages)
            .filter(|&s| is_dirty(self.dir(s)))
            .count();
        self.nvm.word(V_DIRTY).store(n as u64, Ordering::Relaxed);
    }

    /// Copies a committed record's writes into the mapping and marks it visible (its committer
    /// died before doing so).
    pub(crate) fn make_visible(&self, h: &log::Header) -> Result<()> {
        let ring = self.ring();
        if self.nvm.load_word(ring.state_offset(h.lsn)) != STATE_COMMITTED {
            return Ok(());
        }
        // Durable (with every record before it) before anyone can see it (`append.rs`).
        debug_assert!(
            h.lsn + h.len <= self.durable().load(Ordering::Acquire),
            "making the record at lsn {} visible: expected it below the durable prefix, found \
             {} + {} > {}",
            h.lsn,
            h.lsn,
            h.len,
            self.durable().load(Ordering::Acquire)
        );
        let writes =
            log::entries(ring.body(h), h, self.layout.pool_size_bytes).map_err(|what| {
                PmError::Corrupt {
                    path: self.nvm_path.clone(),
                    what,
                }
            })?;
        for (off, data) in writes {
            self.storage.write(off as usize, data);
        }
        self.nvm.store_word(ring.state_offset(h.lsn), STATE_VISIBLE);
        Ok(())
    }
}

/// The persistence steps of a digest batch, in the order rule 2 requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Lines,
    Masks,
    Directory,
    Head,
}

/// Checks rule 2 as `finish_batch` persists a batch (debug builds; empty in release): the steps
/// come in order, every store of one step is fenced by this thread before the first store of
/// the next, and the last before the batch returns. A power cut between two steps then finds
/// every earlier step durable.
#[derive(Default)]
struct StepOrder {
    /// The step of the last store, and this thread's NVM fence count just before it.
    #[cfg(debug_assertions)]
    last: Option<(Step, u64)>,
}

impl StepOrder {
    /// A store of `step` is about to be made.
    fn store(&mut self, step: Step) {
        #[cfg(debug_assertions)]
        {
            let fences = crate::media::nvm_fences_here();
            if let Some((prev, before)) = self.last {
                assert!(
                    prev <= step,
                    "digest steps out of order: expected no {step:?} store after a {prev:?} \
                     store, found one"
                );
                assert!(
                    prev == step || fences > before,
                    "{prev:?} not fenced before the first {step:?} store: expected a fence since \
                     (count above {before}), found count {fences}"
                );
            }
            self.last = Some((step, fences));
        }
        #[cfg(not(debug_assertions))]
        let _ = step;
    }

    /// The batch is done: its last step must be durable.
    fn finish(&self) {
        #[cfg(debug_assertions)]
        if let Some((prev, before)) = self.last {
            let fences = crate::media::nvm_fences_here();
            assert!(
                fences > before,
                "digest batch returns with {prev:?} not fenced: expected a fence count above \
                 {before}, found {fences}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use crate::sim::SimWorld;
    use crate::{Pool, PoolOptions};

    /// A fence on an NVM tier by this thread, as `persist_barrier` makes.
    #[cfg(debug_assertions)]
    fn fence() {
        let world = Arc::new(SimWorld::new(&[0u8; 64], &[0u8; 1], None, 0));
        crate::media::Media::simulated(world, crate::sim::Tier::Nvm).fence();
    }

    #[cfg(debug_assertions)]
    #[test]
    fn digest_steps_fenced_in_order_pass() {
        let mut order = super::StepOrder::default();
        order.store(super::Step::Lines);
        order.store(super::Step::Lines);
        fence();
        order.store(super::Step::Masks);
        fence();
        order.store(super::Step::Head);
        fence();
        order.finish();
    }

    /// The power-cut campaign's seed 1039 (`finish_batch`): one barrier for lines and masks.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "Lines not fenced before the first Masks store")]
    fn a_mask_stored_before_its_lines_are_fenced_is_caught() {
        let mut order = super::StepOrder::default();
        order.store(super::Step::Lines);
        order.store(super::Step::Masks);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(
        expected = "digest steps out of order: expected no Directory store after a Head"
    )]
    fn a_directory_entry_stored_after_the_head_is_caught() {
        let mut order = super::StepOrder::default();
        order.store(super::Step::Head);
        fence();
        order.store(super::Step::Directory);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "digest batch returns with Head not fenced")]
    fn a_batch_returning_before_its_head_is_fenced_is_caught() {
        let mut order = super::StepOrder::default();
        order.store(super::Step::Head);
        order.finish();
    }

    #[test]
    fn line_runs_split_a_mask_into_runs() {
        let runs: Vec<_> = super::line_runs(0b1110_0110_0000_0001).collect();
        assert_eq!(runs, vec![(0, 1), (9, 2), (13, 3)]);
        assert_eq!(
            super::line_runs(u64::MAX).collect::<Vec<_>>(),
            vec![(0, 64)]
        );
        assert_eq!(super::line_runs(1 << 63).collect::<Vec<_>>(), vec![(63, 1)]);
        assert_eq!(super::line_runs(0).count(), 0);
    }

    /// A maintenance-lock holder that dies between indexing a batch's pages and writing their
    /// directory entries leaves the index naming a slot the directory does not give that page:
    /// the repair rebuilds the index from the directory, so the page is no longer led into the
    /// slot (a later batch would give the slot to a second page) and cached pages stay found.
    #[test]
    fn the_index_is_rebuilt_from_the_directory_after_a_dead_holder() {
        let opts = PoolOptions {
            log_size_bytes: 64 << 10,
            cache_size_bytes: 64 << 10,
            background: false,
            ..Default::default()
        };
        let (n, s) = Pool::simulated_sizes(1 << 20, &opts);
        let world = Arc::new(SimWorld::new(&vec![0; n], &vec![0; s], None, 0));
        let pool = Pool::open_simulated(world, 1 << 20, &opts).unwrap();
        let mut tx = pool.begin().unwrap();
        tx.write(crate::layout::PAGE as u64, &[1u8; 64]).unwrap();
        tx.commit().unwrap();
        pool.maintain().unwrap();
        let inner = pool.inner();
        let cached = inner
            .index_get(1)
            .expect("page 1 in the cache after maintain");
        let free = (0..inner.layout.cache_pages)
            .find(|&s| inner.dir(s) == 0)
            .expect("a free slot");
        let _held = inner.lock_maintenance().unwrap();
        // What the dead holder left: page 5 indexed to a slot its directory entry never named.
        inner.index_put(5, free);
        inner.repair_after_dead_holder();
        assert_eq!(
            inner.index_get(5),
            None,
            "the dead batch's page stays indexed"
        );
        assert_eq!(
            inner.index_get(1),
            Some(cached),
            "a cached page is lost from the index"
        );
    }

    proptest! {
        /// The page index (open addressing, backward-shift deletion) agrees with a map.
        #[test]
        fn index_matches_a_map(ops in proptest::collection::vec((any::<bool>(), 0u64..200), 1..400)) {
            let opts = PoolOptions { log_size_bytes: 64 << 10, cache_size_bytes: 64 << 10, ..Default::default() };
            let (n, s) = Pool::simulated_sizes(1 << 20, &opts);
            let world = Arc::new(SimWorld::new(&vec![0; n], &vec![0; s], None, 0));
            let pool = Pool::open_simulated(world, 1 << 20, &opts).unwrap();
            let inner = pool.inner();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for (i, (insert, page)) in ops.into_iter().enumerate() {
                // Keep the load under half so probing always ends.
                if insert && !model.contains_key(&page) && model.len() < 16 {
                    inner.index_put(page, i as u64 % 16);
                    model.insert(page, i as u64 % 16);
                } else if !insert {
                    inner.index_remove(page);
                    model.remove(&page);
                }
                for p in 0..200 {
                    prop_assert_eq!(inner.index_get(p), model.get(&p).copied());
                }
            }
        }
    }
}
