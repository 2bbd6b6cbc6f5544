//! The mapping-table cache: the part of the logical-to-physical map a drive keeps in its DRAM,
//! as DFTL's cached mapping table (Gupta, Kim and Urgaonkar, ASPLOS 2009) and MQSim's CMT
//! (Tavakkol et al., FAST 2018) do; the rest of the map lives in flash.
//!
//! The map is cut into translation pages of `page_bytes / 4` entries (4-byte entries, one FTL
//! page each); translation page `t` lives on die `t mod dies`. The cache holds whole
//! translation pages, least recently used out first:
//! - a host access looks its page's entry up: a hit costs nothing; a miss reads the
//!   translation page from flash first (booked like any read), unless it has never been
//!   written there (the drive's directory of translation pages knows it maps nothing yet);
//! - the page a miss evicts is written back if it was changed (a map write, counted in the
//!   write amplification); a host write changes its entry's page;
//! - the collector's moves change the entries of the pages it copies: a cached translation
//!   page is changed in place, and every other one a victim's moves touch is read, changed and
//!   written once, when the victim is freed (DFTL's batched update), with the victim's work.
//!
//! Deallocation changes entries without map traffic (it is untimed, as in the rest of the
//! model).

use std::num::NonZeroUsize;

use lru::LruCache;

use crate::counters::MapCounters;
use crate::work::DieWork;

/// Bytes of one map entry (a physical page number), as DFTL and MQSim count them.
pub const MAP_ENTRY_BYTES: u32 = 4;

/// What one lookup costs on the flash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapLookup {
    /// The die to read the entry's translation page from before the access (a miss).
    pub read_die: Option<u32>,
    /// The die a changed translation page the miss evicted is written back to.
    pub write_back_die: Option<u32>,
}

/// The cached translation pages and the directory of those written to flash.
#[derive(Clone, Debug)]
pub(crate) struct MapCache {
    /// Translation page -> whether it was changed since it was read (dirty).
    pages: LruCache<u64, bool>,
    capacity: NonZeroUsize,
    translation_pages: u64,
    /// log2 of the entries per translation page.
    entries_shift: u32,
    dies: u32,
    /// One bit per translation page: whether it has a copy in flash.
    on_flash: Vec<u64>,
    /// Translation pages (not cached) the victim being collected changed, to be updated once
    /// each when it is freed.
    batch: Vec<u64>,
    counters: MapCounters,
    /// Draws the pages behind the collector's moves of pooled pages (`moved_on_die`).
    rng: rand::rngs::SmallRng,
}

impl MapCache {
    /// A cold cache of `pages` translation pages of `entries` entries (a power of two) over
    /// `logical_pages`, on `dies` dies.
    pub(crate) fn new(pages: NonZeroUsize, entries: u32, logical_pages: u64, dies: u32) -> Self {
        assert!(
            entries.is_power_of_two(),
            "entries per translation page must be a power of two, found {entries}"
        );
        let entries_shift = entries.trailing_zeros();
        let translation_pages = logical_pages.div_ceil(u64::from(entries));
        MapCache {
            pages: LruCache::unbounded(),
            capacity: pages,
            translation_pages,
            entries_shift,
            dies,
            on_flash: vec![0; translation_pages.div_ceil(64) as usize],
            batch: Vec::new(),
            counters: MapCounters::default(),
            rng: rand::SeedableRng::seed_from_u64(translation_pages),
        }
    }

    /// Translation pages the whole map takes.
    pub(crate) fn translation_pages(&self) -> u64 {
        self.translation_pages
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity.get()
    }

    pub(crate) fn counters(&self) -> MapCounters {
        self.counters
    }

    pub(crate) fn reset_counters(&mut self) {
        self.counters = MapCounters::default();
    }

    /// Marks every translation page as written to flash.
    #[cfg(test)]
    pub(crate) fn all_on_flash(&mut self) {
        self.on_flash.fill(u64::MAX);
    }

    /// What a sequential fill through `look_up` leaves, laid down at once: every translation
    /// page in flash, the last ones written held clean, the latest most recently used.
    pub(crate) fn after_sequential_fill(&mut self) {
        self.on_flash.fill(u64::MAX);
        self.pages.clear();
        let held = self.translation_pages.min(self.capacity.get() as u64);
        for page in self.translation_pages - held..self.translation_pages {
            self.pages.put(page, false);
        }
    }

    /// What uniform random writes leave, laid down at once: every translation page in flash,
    /// the cache full of pages drawn at random, clean.
    pub(crate) fn after_random_writes(&mut self) {
        use rand::{Rng, SeedableRng};
        self.on_flash.fill(u64::MAX);
        self.pages.clear();
        let held = self.translation_pages.min(self.capacity.get() as u64);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(self.translation_pages);
        // Floyd's sampling of `held` distinct pages.
        for j in self.translation_pages - held..self.translation_pages {
            let t = rng.gen_range(0..=j);
            let page = if self.pages.contains(&t) { j } else { t };
            self.pages.put(page, false);
        }
    }

    /// Writes every changed cached page back, untimed (a drive settling its map when idle).
    pub(crate) fn write_back_all(&mut self) {
        let mut dirty = Vec::new();
        for (&page, changed) in self.pages.iter_mut().filter(|(_, d)| **d) {
            *changed = false;
            dirty.push(page);
        }
        for page in dirty {
            self.written(page);
        }
    }

    #[inline]
    fn die_of(&self, page: u64) -> u32 {
        (page % u64::from(self.dies)) as u32
    }

    #[inline]
    fn is_on_flash(&self, page: u64) -> bool {
        self.on_flash[(page / 64) as usize] & (1 << (page % 64)) != 0
    }

    /// Counts a translation page written to flash.
    fn written(&mut self, page: u64) {
        self.on_flash[(page / 64) as usize] |= 1 << (page % 64);
        self.counters.pages_written += 1;
    }

    /// Looks up the entry of logical page `lpn`, changing it if `update` (a write).
    #[inline]
    pub(crate) fn look_up(&mut self, lpn: u64, update: bool) -> MapLookup {
        let page = lpn >> self.entries_shift;
        self.counters.lookups += 1;
        if let Some(dirty) = self.pages.get_mut(&page) {
            *dirty |= update;
            self.counters.hits += 1;
            return MapLookup::default();
        }
        let mut lookup = MapLookup::default();
        if self.is_on_flash(page) {
            self.counters.pages_read += 1;
            lookup.read_die = Some(self.die_of(page));
        }
        if self.pages.len() == self.capacity.get() {
            if let Some((evicted, true)) = self.pages.pop_lru() {
                self.written(evicted);
                lookup.write_back_die = Some(self.die_of(evicted));
            }
        }
        self.pages.put(page, update);
        lookup
    }

    /// The collector moved logical page `lpn`: its entry changes.
    #[inline]
    pub(crate) fn moved(&mut self, lpn: u64) {
        let page = lpn >> self.entries_shift;
        match self.pages.peek_mut(&page) {
            Some(dirty) => *dirty = true,
            None => self.batch.push(page),
        }
    }

    /// The collector moved `k` pooled pages on `die` (`pool.rs`): pages whose logical pages
    /// are not kept, so each entry changed is one drawn uniformly from the `logical` pages on
    /// that die (`lpn mod dies == die`), as a uniformly random pooled page's would be.
    pub(crate) fn moved_on_die(&mut self, die: u32, dies: u32, logical: u64, k: u32) {
        use rand::Rng;
        let dies = u64::from(dies);
        let on_die = (logical - u64::from(die)).div_ceil(dies).max(1);
        for _ in 0..k {
            let lpn = u64::from(die) + dies * self.rng.gen_range(0..on_die);
            self.moved(lpn);
        }
    }

    /// The victim is freed: each translation page its moves changed that is not cached is
    /// read and written back once, on `work`.
    pub(crate) fn update_batch(&mut self, work: &mut DieWork) {
        if self.batch.is_empty() {
            return;
        }
        let mut batch = std::mem::take(&mut self.batch);
        batch.sort_unstable();
        batch.dedup();
        for &page in &batch {
            let die = self.die_of(page);
            // A page the collector moves is mapped, so its translation page is cached or in
            // flash.
            debug_assert!(
                self.is_on_flash(page),
                "translation page {page} holds a moved entry but is neither cached nor in flash"
            );
            self.counters.pages_read += 1;
            work.add_read(die);
            work.add_program(die);
            self.written(page);
        }
        batch.clear();
        self.batch = batch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pages: usize) -> MapCache {
        MapCache::new(NonZeroUsize::new(pages).unwrap(), 1024, 1 << 20, 8)
    }

    #[test]
    fn a_miss_of_a_page_never_written_reads_nothing_and_a_dirty_eviction_writes_it_back() {
        let mut c = cache(2);
        assert_eq!(c.look_up(0, true), MapLookup::default());
        assert_eq!(c.look_up(1024, false), MapLookup::default());
        // Page 2 evicts page 0 (least recently used, dirty): written back on die 0.
        let l = c.look_up(2 * 1024, false);
        assert_eq!(l.read_die, None);
        assert_eq!(l.write_back_die, Some(0));
        // Page 0 is now in flash: a miss reads it; page 1 (clean) goes without a write.
        let l = c.look_up(5, false);
        assert_eq!(l.read_die, Some(0));
        assert_eq!(l.write_back_die, None);
        let m = c.counters();
        assert_eq!(
            (m.lookups, m.hits, m.pages_read, m.pages_written),
            (4, 0, 1, 1)
        );
    }

    #[test]
    fn a_hit_promotes_its_page() {
        let mut c = cache(2);
        c.all_on_flash();
        c.look_up(0, false);
        c.look_up(1024, false);
        assert_eq!(c.look_up(3, false), MapLookup::default());
        // Page 1 is now the least recently used: page 2 evicts it, so page 0 still hits.
        c.look_up(2048, false);
        assert_eq!(c.look_up(7, false), MapLookup::default());
        assert_eq!(c.look_up(1025, false).read_die, Some(1));
        assert_eq!(c.counters().hits, 2);
    }

    #[test]
    fn the_collectors_changes_dirty_cached_pages_and_batch_the_others_once_each() {
        let mut c = cache(1);
        c.all_on_flash();
        c.look_up(0, false);
        for lpn in [1, 2, 1024 * 9, 1024 * 9 + 1, 1024 * 10] {
            c.moved(lpn);
        }
        let mut work = DieWork::new(8);
        c.update_batch(&mut work);
        // Pages 9 and 10: one read and one program each, on dies 1 and 2.
        assert_eq!(work.reads, vec![0, 1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(work.programs, work.reads);
        // Page 0 was changed in the cache: its eviction writes it back.
        assert_eq!(c.look_up(4096, false).write_back_die, Some(0));
        assert_eq!(c.counters().pages_written, 3);
    }
}
