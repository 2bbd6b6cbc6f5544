//! The page-mapping FTL: every logical page maps to one physical page slot; writes go to the
//! open line of their placement handle; the collector reclaims whole lines.
//!
//! A line is a superblock, one erase block on every die, as NVMeVirt's `conv_ftl` and FEMU's
//! `bbssd` lay flash out: its page slot `s` is on die `s mod dies`, so consecutive writes
//! spread over every die. A line is free (erased), open (being written), or full (a victim
//! candidate). Hosts and the collector write through separate open lines, one of each per
//! placement handle.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::config::{FtlConfig, Precondition, VictimPolicy};
use crate::counters::{EraseSpread, FtlCounters};
use crate::error::FtlError;
use crate::map_cache::{MapCache, MapLookup, MAP_ENTRY_BYTES};
use crate::moves::{prefetch_ahead, Maps, Move, Moves, UNMAPPED};
use crate::paged_map::{Fill, PagedMap};
use crate::pool::{Pool, POOLED};
use crate::victims::{LineView, Victims};
use crate::work::{DieWork, GcWork};

mod bulk;

const NO_LINE: u32 = u32::MAX;

/// The flash an FTL lays its lines over, and the logical space it exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Dies (every channel's dies; a line has one block on each).
    pub dies: u32,
    /// FTL pages per erase block.
    pub pages_per_block: u32,
    /// Logical pages exported.
    pub logical_pages: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LineState {
    Free,
    Open,
    Full,
    /// The victim whose pages the collector is copying out.
    Collecting,
}

/// The victim being collected a few pages per host write, and how far its scan has come.
#[derive(Clone, Copy, Debug)]
struct Collecting {
    line: u32,
    slot: u32,
    /// Valid pages copied per host write.
    quota: u32,
}

/// A line being written, and its next free slot.
#[derive(Clone, Copy, Debug)]
struct OpenLine {
    line: u32,
    next: u32,
}

impl OpenLine {
    const NONE: OpenLine = OpenLine {
        line: NO_LINE,
        next: 0,
    };
}

/// Which open line a write goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Host,
    Collector,
}

/// How many lines a geometry gives, checked.
struct Layout {
    pages_per_line: u32,
    lines: u32,
    physical: u64,
}

/// What both maps take once every page has been written through them: a page-by-page
/// precondition's.
fn page_by_page_map_bytes(logical: u64, physical: u64) -> u64 {
    PagedMap::dense_bytes(logical, physical) + PagedMap::dense_bytes(physical, logical)
}

/// Checks the `[ftl]` settings that stand alone: over-provisioning, the collector's
/// thresholds, the placement handles and the map cache's size.
fn check_settings(cfg: &FtlConfig) -> Result<(), FtlError> {
    let op = cfg.over_provisioning;
    if !(0.0..=10.0).contains(&op) {
        return Err(FtlError::OverProvisioning(op));
    }
    let (forced, background) = (cfg.gc_forced_free_lines, cfg.gc_background_free_lines);
    if forced == 0 || forced > background {
        return Err(FtlError::Thresholds { forced, background });
    }
    if !(1..=64).contains(&cfg.placement_handles) {
        return Err(FtlError::PlacementHandles(cfg.placement_handles));
    }
    if !cfg
        .map_cache_bytes
        .is_multiple_of(u64::from(cfg.page_bytes.max(1)))
    {
        return Err(FtlError::MapCache {
            bytes: cfg.map_cache_bytes,
            page_bytes: cfg.page_bytes,
        });
    }
    Ok(())
}

/// Checks that what the FTL takes of host memory (before anything is written, plus a bulk
/// precondition's pool) fits `ftl.map_budget_bytes`, and that a random precondition too
/// large for page by page has a policy the bulk model knows.
fn check_map_memory(
    cfg: &FtlConfig,
    geometry: Geometry,
    lines: u64,
    physical: u64,
) -> Result<(), FtlError> {
    let logical = geometry.logical_pages;
    // What the FTL takes before anything is written: the maps' directories and the counts
    // per line and die.
    let bytes = PagedMap::directory_bytes(logical)
        + PagedMap::directory_bytes(physical)
        + lines * u64::from(geometry.dies) * 4;
    let random = matches!(cfg.precondition, Precondition::Random { .. });
    let dense = page_by_page_map_bytes(logical, physical);
    if random && cfg.victim == VictimPolicy::CostBenefit && dense > cfg.map_budget_bytes {
        return Err(FtlError::BulkCostBenefit {
            needed: dense,
            budget: cfg.map_budget_bytes,
        });
    }
    // A bulk precondition adds the pool's counts (`pool.rs`).
    let dies = u64::from(geometry.dies);
    let pool = lines * dies * 4 + lines * 4 + dies * (lines + 1) * 8;
    let bytes = bytes
        + if random && dense > cfg.map_budget_bytes {
            pool
        } else {
            0
        };
    if bytes > cfg.map_budget_bytes || lines > u64::from(NO_LINE) {
        return Err(FtlError::TooLarge {
            pages: physical,
            bytes,
            limit: cfg.map_budget_bytes,
        });
    }
    Ok(())
}

/// The lines `cfg` lays over `geometry`, or the error naming the setting that refuses it.
fn layout(cfg: &FtlConfig, geometry: Geometry) -> Result<Layout, FtlError> {
    check_settings(cfg)?;
    let op = cfg.over_provisioning;
    let (forced, background) = (cfg.gc_forced_free_lines, cfg.gc_background_free_lines);
    let pages_per_line = geometry.dies * geometry.pages_per_block;
    let per_line = u64::from(pages_per_line);
    let logical = geometry.logical_pages;
    let wanted = (logical as f64 * (1.0 + op)).ceil() as u64;
    let lines = wanted.div_ceil(per_line);
    let data_lines = logical.div_ceil(per_line);
    let needed = 2 * u64::from(cfg.placement_handles) + u64::from(forced) + 1;
    let spare = lines.saturating_sub(data_lines);
    if spare < needed {
        return Err(FtlError::TooFewSpareLines {
            over_provisioning: op,
            spare,
            needed,
            pages_per_line,
        });
    }
    // The lines the collector keeps free and the open ones are spare area the data cannot
    // use: past a third of it, the write amplification is the thresholds', not the device's.
    let reserve = u64::from(background) + 2 * u64::from(cfg.placement_handles);
    if 3 * reserve > spare {
        return Err(FtlError::TooCoarse {
            over_provisioning: op,
            spare,
            reserve,
            line_bytes: per_line * u64::from(cfg.page_bytes),
            dies: geometry.dies,
        });
    }
    let physical = lines * per_line;
    assert!(
        physical >= logical,
        "{lines} lines of {per_line} pages hold fewer than the {logical} logical pages"
    );
    check_map_memory(cfg, geometry, lines, physical)?;
    Ok(Layout {
        pages_per_line,
        lines: lines as u32,
        physical,
    })
}

#[derive(Clone)]
pub struct Ftl {
    dies: u32,
    pages_per_line: u32,
    lines: u32,
    logical_pages: u64,
    gc_background_free_lines: u32,
    gc_forced_free_lines: u32,
    l2p: PagedMap,
    p2l: PagedMap,
    valid: Vec<u32>,
    /// Valid pages per line and die (`line * dies + die`): a victim's reads per die without
    /// a scan of its slots.
    valid_on_die: Vec<u32>,
    state: Vec<LineState>,
    filled_at: Vec<u64>,
    erases: Vec<u32>,
    handle_of: Vec<u16>,
    free: VecDeque<u32>,
    host_open: Vec<OpenLine>,
    collector_open: Vec<OpenLine>,
    victims: Victims,
    collecting: Option<Collecting>,
    /// Map moves of collections made but not yet run (`moves.rs`).
    moves: Moves,
    /// Whether a collection that empties its victim defers its map moves (`moves.rs`).
    defer_moves: bool,
    /// Pages whose map entries the collector has moved so far (`map_moves`).
    map_moves: u64,
    rng: SmallRng,
    /// Host writes so far (cost-benefit's clock).
    clock: u64,
    /// Host pages written through each placement handle.
    host_pages_by_handle: Vec<u64>,
    counters: FtlCounters,
    /// The mapping-table cache (`ftl.map_cache_bytes`; none: the whole map in DRAM).
    map_cache: Option<MapCache>,
    /// Valid pages whose logical pages are drawn when first touched (after a bulk
    /// precondition, `pool.rs`); none until then.
    pool: Option<Pool>,
    /// The most host memory the maps may take (`ftl.map_budget_bytes`).
    map_budget_bytes: u64,
    /// The victim policy, its d-choices and the seed (for a bulk precondition's model).
    policy: (VictimPolicy, u32, u64),
}

impl Ftl {
    /// Whether `cfg` can lay an FTL over `geometry` (what `new` checks, without the maps).
    pub fn validate(cfg: &FtlConfig, geometry: Geometry) -> Result<(), FtlError> {
        layout(cfg, geometry).map(|_| ())
    }

    /// An FTL over `geometry` with every page unmapped and every line free.
    pub fn new(cfg: &FtlConfig, geometry: Geometry) -> Result<Ftl, FtlError> {
        let Layout {
            pages_per_line,
            lines,
            physical,
        } = layout(cfg, geometry)?;
        let logical = geometry.logical_pages;
        let (forced, background) = (cfg.gc_forced_free_lines, cfg.gc_background_free_lines);
        let handles = cfg.placement_handles as usize;
        // Maps that would fit the budget written densely go straight to arrays.
        let sparse = page_by_page_map_bytes(logical, physical) > cfg.map_budget_bytes / 2;
        Ok(Ftl {
            dies: geometry.dies,
            pages_per_line,
            lines,
            logical_pages: logical,
            gc_background_free_lines: background,
            gc_forced_free_lines: forced,
            l2p: PagedMap::new(logical, physical, Fill::Value(UNMAPPED)).sparse_first(sparse),
            p2l: PagedMap::new(physical, logical, Fill::Value(UNMAPPED)).sparse_first(sparse),
            valid: vec![0; lines as usize],
            valid_on_die: vec![0; lines as usize * geometry.dies as usize],
            state: vec![LineState::Free; lines as usize],
            filled_at: vec![0; lines as usize],
            erases: vec![0; lines as usize],
            handle_of: vec![0; lines as usize],
            free: (0..lines).collect(),
            host_open: vec![OpenLine::NONE; handles],
            collector_open: vec![OpenLine::NONE; handles],
            victims: Victims::new(cfg.victim, cfg.d_choices, lines, pages_per_line),
            collecting: None,
            moves: Moves::default(),
            defer_moves: true,
            map_moves: 0,
            host_pages_by_handle: vec![0; handles],
            rng: SmallRng::seed_from_u64(cfg.seed),
            clock: 0,
            counters: FtlCounters {
                free_lines_min: lines,
                ..FtlCounters::default()
            },
            map_cache: std::num::NonZeroUsize::new(cfg.map_cache_pages() as usize).map(|pages| {
                let entries = cfg.page_bytes / MAP_ENTRY_BYTES;
                MapCache::new(pages, entries, logical, geometry.dies)
            }),
            pool: None,
            map_budget_bytes: cfg.map_budget_bytes,
            policy: (cfg.victim, cfg.d_choices, cfg.seed),
        })
    }

    /// Host memory the maps take now: both directions, the valid pages per line and die,
    /// and the pool's counts.
    pub fn map_bytes(&self) -> u64 {
        let on_die = (self.valid_on_die.len() * 4) as u64;
        self.l2p.bytes() + self.p2l.bytes() + on_die + self.pool.as_ref().map_or(0, Pool::bytes)
    }

    /// Whether the maps have grown past `ftl.map_budget_bytes`: the error naming it if so.
    pub fn check_map_budget(&self) -> Result<(), FtlError> {
        let bytes = self.map_bytes();
        if bytes > self.map_budget_bytes {
            return Err(FtlError::MapBudget {
                bytes,
                budget: self.map_budget_bytes,
                written: self.counters.host_pages_written,
            });
        }
        Ok(())
    }

    /// What the maps would take written page by page (every entry of both): past
    /// `ftl.map_budget_bytes`, preconditioning goes in bulk.
    pub fn page_by_page_map_bytes(&self) -> u64 {
        page_by_page_map_bytes(self.logical_pages, self.physical_pages())
    }

    pub fn map_budget_bytes(&self) -> u64 {
        self.map_budget_bytes
    }

    /// Whether some valid pages are pooled (a bulk precondition's): their logical pages are
    /// drawn when first touched.
    pub fn has_pooled_pages(&self) -> bool {
        self.pool.is_some()
    }

    /// The mapping-table cache's size and the map's, in translation pages: `(cached, all)`;
    /// `None` without a cache.
    pub fn map_cache_pages(&self) -> Option<(u64, u64)> {
        self.map_cache
            .as_ref()
            .map(|c| (c.capacity() as u64, c.translation_pages()))
    }

    /// Looks up logical page `lpn`'s map entry before a host access (changing it if
    /// `update`, a write): what the mapping-table cache costs on the flash, nothing without
    /// one.
    #[inline]
    pub fn look_up(&mut self, lpn: u64, update: bool) -> MapLookup {
        match self.map_cache.as_mut() {
            Some(cache) => cache.look_up(lpn, update),
            None => MapLookup::default(),
        }
    }

    pub fn logical_pages(&self) -> u64 {
        self.logical_pages
    }

    pub fn physical_pages(&self) -> u64 {
        u64::from(self.lines) * u64::from(self.pages_per_line)
    }

    /// Physical pages per logical page (α in the write-amplification analyses): `1 +` the
    /// over-provisioning, rounded up to whole lines.
    pub fn alpha(&self) -> f64 {
        self.physical_pages() as f64 / self.logical_pages as f64
    }

    pub fn dies(&self) -> u32 {
        self.dies
    }

    pub fn lines(&self) -> u32 {
        self.lines
    }

    /// Host pages written through each placement handle (one entry without placement).
    pub fn host_pages_by_handle(&self) -> &[u64] {
        &self.host_pages_by_handle
    }

    pub fn pages_per_line(&self) -> u32 {
        self.pages_per_line
    }

    pub fn free_lines(&self) -> u32 {
        self.free.len() as u32
    }

    pub fn placement_handles(&self) -> u32 {
        self.host_open.len() as u32
    }

    pub fn counters(&self) -> FtlCounters {
        FtlCounters {
            map: self
                .map_cache
                .as_ref()
                .map_or_else(Default::default, MapCache::counters),
            ..self.counters
        }
    }

    /// Starts the counts afresh (erases per block are kept: they are the device's life).
    pub fn reset_counters(&mut self) {
        self.counters = FtlCounters {
            free_lines_min: self.free_lines(),
            ..FtlCounters::default()
        };
        self.host_pages_by_handle.fill(0);
        if let Some(cache) = self.map_cache.as_mut() {
            cache.reset_counters();
        }
    }

    /// Erases per block over the device's life.
    pub fn erase_spread(&self) -> EraseSpread {
        let sum: u64 = self.erases.iter().map(|&e| u64::from(e)).sum();
        let spread = EraseSpread {
            min: self.erases.iter().copied().min().unwrap_or(0),
            mean: sum as f64 / f64::from(self.lines),
            max: self.erases.iter().copied().max().unwrap_or(0),
        };
        assert!(
            f64::from(spread.min) <= spread.mean && spread.mean <= f64::from(spread.max),
            "mean erases {} outside [{}, {}]",
            spread.mean,
            spread.min,
            spread.max
        );
        spread
    }

    /// The die that holds logical page `lpn`, or `None` if it was never written or was
    /// trimmed (a read of it touches no flash). A page a deferred move has yet to move is
    /// moved first.
    #[inline]
    pub fn read(&mut self, lpn: u64) -> Option<u32> {
        match self.slot_of(lpn) {
            UNMAPPED => None,
            POOLED => Some((lpn % u64::from(self.dies)) as u32),
            ppn => Some(self.die_of(ppn)),
        }
    }

    /// Whether collections have map moves still to run (`moves.rs`).
    pub fn has_deferred(&self) -> bool {
        !self.moves.is_empty()
    }

    /// Runs up to `pages` page moves of the collections made so far (`moves.rs`), oldest
    /// first: what an emulator does between its passes. Returns whether any are left.
    pub fn run_deferred(&mut self, pages: u32) -> bool {
        let (moves, mut maps) = self.moves_and_maps();
        let moved = moves.run(pages, &mut maps);
        self.map_moves += u64::from(moved);
        !self.moves.is_empty()
    }

    /// Pages whose map entries the collector has moved so far, at once or deferred: its work
    /// in real time, about 30 ns a page, which a caller that times itself allows for.
    pub fn map_moves(&self) -> u64 {
        self.map_moves
    }

    /// Runs every deferred map move.
    pub fn finish_deferred(&mut self) {
        while !self.moves.is_empty() {
            self.finish_move(0);
        }
    }

    /// Writes every changed translation page in the mapping-table cache back, untimed (a
    /// drive settling its map when idle); nothing without a cache.
    pub fn write_back_map(&mut self) {
        if let Some(cache) = self.map_cache.as_mut() {
            cache.write_back_all();
        }
    }

    /// Whether a collection that empties its victim defers its map moves (the default; the
    /// results are the same either way, which the tests hold it to).
    pub fn set_deferred_moves(&mut self, defer: bool) {
        self.defer_moves = defer;
        if !defer {
            self.finish_deferred();
        }
    }

    fn moves_and_maps(&mut self) -> (&mut Moves, Maps<'_>) {
        (
            &mut self.moves,
            Maps {
                l2p: &mut self.l2p,
                p2l: &mut self.p2l,
                pages_per_line: self.pages_per_line,
            },
        )
    }

    fn finish_move(&mut self, k: usize) {
        let (moves, mut maps) = self.moves_and_maps();
        self.map_moves += u64::from(moves.finish(k, &mut maps));
    }

    /// The slot of logical page `lpn` (`UNMAPPED` if none), moved first if it is in the
    /// victim of a deferred move.
    #[inline]
    fn slot_of(&mut self, lpn: u64) -> u64 {
        let ppn = self.l2p.get(lpn);
        if ppn >= POOLED || self.moves.is_empty() {
            return ppn;
        }
        match self.moves.of_victim(self.line_of(ppn)) {
            Some(k) => {
                self.finish_move(k);
                self.l2p.get(lpn)
            }
            None => ppn,
        }
    }

    /// Writes logical page `lpn` through placement handle `handle` (0 without placement) and
    /// returns the die it is programmed on; the collection it caused is added to `work`.
    #[inline]
    pub fn write(&mut self, lpn: u64, handle: u32, work: &mut GcWork) -> u32 {
        debug_assert!(
            lpn < self.logical_pages,
            "write past the logical space: expected page < {}, found {lpn}",
            self.logical_pages
        );
        let handle = (handle as usize).min(self.host_open.len() - 1);
        self.clock += 1;
        self.counters.host_pages_written += 1;
        self.host_pages_by_handle[handle] += 1;
        self.invalidate(lpn);
        if self.collecting.is_some() || self.free_lines() <= self.gc_background_free_lines {
            self.collect_step(&mut work.background);
        }
        let ppn = self.next_slot(Stream::Host, handle, &mut work.forced);
        self.map(lpn, ppn);
        self.die_of(ppn)
    }

    /// Deallocates logical page `lpn` (TRIM, NVMe Deallocate, NBD's trim and write-zeroes):
    /// its slot becomes invalid, so the collector no longer copies it.
    pub fn trim(&mut self, lpn: u64) {
        if self.l2p.get(lpn) != UNMAPPED {
            self.invalidate(lpn);
            self.l2p.set(lpn, UNMAPPED);
            self.counters.pages_trimmed += 1;
        }
    }

    #[inline]
    fn die_of(&self, ppn: u64) -> u32 {
        self.slot_in_line(ppn) % self.dies
    }

    /// Slot `ppn`'s place in its line (a mask when lines are a power of two pages, as most
    /// are: a 64-bit division costs several times a 32-bit one on many cores).
    #[inline]
    fn slot_in_line(&self, ppn: u64) -> u32 {
        let ppl = self.pages_per_line;
        if ppl.is_power_of_two() {
            (ppn & u64::from(ppl - 1)) as u32
        } else {
            (ppn % u64::from(ppl)) as u32
        }
    }

    /// The line slot `ppn` is in.
    #[inline]
    fn line_of(&self, ppn: u64) -> u32 {
        let ppl = self.pages_per_line;
        if ppl.is_power_of_two() {
            (ppn >> ppl.trailing_zeros()) as u32
        } else {
            (ppn / u64::from(ppl)) as u32
        }
    }

    /// Line `line`'s first slot.
    #[inline]
    fn first_slot(&self, line: u32) -> u64 {
        u64::from(line) * u64::from(self.pages_per_line)
    }

    #[inline]
    fn invalidate(&mut self, lpn: u64) {
        let old = self.slot_of(lpn);
        let (line, die) = match old {
            UNMAPPED => return,
            POOLED => self
                .pool
                .as_mut()
                .expect("a pool holds pooled pages")
                .take(lpn),
            _ => {
                self.p2l.set(old, UNMAPPED);
                (self.line_of(old), self.die_of(old))
            }
        };
        let was = self.valid[line as usize];
        self.valid[line as usize] = was - 1;
        self.valid_on_die[(line * self.dies + die) as usize] -= 1;
        if self.state[line as usize] == LineState::Full {
            self.victims.invalidated(line, was);
        }
    }

    #[inline]
    fn map(&mut self, lpn: u64, ppn: u64) {
        self.l2p.set(lpn, ppn);
        self.p2l.set(ppn, lpn);
        let line = self.line_of(ppn);
        self.valid[line as usize] += 1;
        let on_die = (line * self.dies + self.die_of(ppn)) as usize;
        self.valid_on_die[on_die] += 1;
    }

    /// The next slot of `stream`'s open line for `handle`, opening a line when it is full
    /// (after forced collection, for the host, if too few lines are free).
    #[inline]
    fn next_slot(&mut self, stream: Stream, handle: usize, forced: &mut DieWork) -> u64 {
        self.next_slots(stream, handle, 1, forced).0
    }

    /// The next up to `wanted` slots of `stream`'s open line for `handle`, as `(first, n)`:
    /// `next_slot` `n` times, the pages to be mapped into them counted valid if they fill the
    /// line.
    #[inline]
    fn next_slots(
        &mut self,
        stream: Stream,
        handle: usize,
        wanted: u32,
        forced: &mut DieWork,
    ) -> (u64, u32) {
        let open = match stream {
            Stream::Host => self.host_open[handle],
            Stream::Collector => self.collector_open[handle],
        };
        let open = if open.line == NO_LINE || open.next == self.pages_per_line {
            if stream == Stream::Host {
                // Ends: the spare lines (checked in `new`) leave more slots in full lines
                // than valid pages, so some full line holds an invalid slot; a victim never
                // costs more than the one line it frees, greedy and cost-benefit pick a line
                // with an invalid slot at once, FIFO within one pass over the full lines, and
                // the random draws with probability 1.
                while self.free_lines() <= self.gc_forced_free_lines {
                    self.collect(forced, true);
                }
            }
            let line = self.free.pop_front().unwrap_or_else(|| {
                panic!(
                    "no free line for the {stream:?} stream: the forced threshold ({}) keeps \
                     one for the collector",
                    self.gc_forced_free_lines
                )
            });
            // A line freed by a deferred move is written only once its pages are out.
            if let Some(k) = self.moves.of_victim(line) {
                self.finish_move(k);
            }
            debug_assert_eq!(
                self.valid[line as usize], 0,
                "free line {line} opened for the {stream:?} stream still counts valid pages"
            );
            self.state[line as usize] = LineState::Open;
            self.handle_of[line as usize] = handle as u16;
            self.counters.free_lines_min = self.counters.free_lines_min.min(self.free_lines());
            OpenLine { line, next: 0 }
        } else {
            open
        };
        let ppn = self.first_slot(open.line) + u64::from(open.next);
        let n = wanted.min(self.pages_per_line - open.next);
        let next = OpenLine {
            line: open.line,
            next: open.next + n,
        };
        if next.next == self.pages_per_line {
            let line = open.line as usize;
            self.state[line] = LineState::Full;
            self.filled_at[line] = self.clock;
            // The pages about to be mapped into it count as valid already.
            self.victims.insert(open.line, self.valid[line] + n);
        }
        match stream {
            Stream::Host => self.host_open[handle] = next,
            Stream::Collector => self.collector_open[handle] = next,
        }
        (ppn, n)
    }

    /// Reclaims a whole victim (the one in progress, else a new one): copies its valid
    /// pages out, erases it, frees it. `work` gets the flash operations.
    fn collect(&mut self, work: &mut DieWork, forced: bool) {
        if self.collecting.is_some() || self.start_victim() {
            self.copy_out(work, u32::MAX, forced);
        }
    }

    /// Background collection's share of one host write: a victim's valid pages are copied
    /// a few per host write, `v / (pages per line - v)` of them (rounded up) for a victim of
    /// `v` valid pages, so the line it frees is ready about when the host has filled the
    /// space it gave back: collection keeps pace with the host instead of stopping it for a
    /// whole line.
    fn collect_step(&mut self, work: &mut DieWork) {
        if self.collecting.is_some() || self.start_victim() {
            let quota = self.collecting.map_or(1, |c| c.quota);
            self.copy_out(work, quota, false);
        }
    }

    /// Picks the next victim; false if no line is full.
    fn start_victim(&mut self) -> bool {
        let view = LineView {
            valid: &self.valid,
            filled_at: &self.filled_at,
            clock: self.clock,
            pages_per_line: self.pages_per_line,
        };
        let Some(line) = self.victims.pick(&view, &mut self.rng) else {
            return false;
        };
        debug_assert_eq!(
            self.state[line as usize],
            LineState::Full,
            "victim line {line} is not full"
        );
        // A line deferred moves still have pages to put into is scanned only once they are
        // all in (several moves may fill one collector line).
        while let Some(k) = self.moves.of_destination(line, self.pages_per_line) {
            self.finish_move(k);
        }
        let valid = self.valid[line as usize];
        #[cfg(debug_assertions)]
        self.check_greedy_pick(line, valid);
        let invalid = (self.pages_per_line - valid).max(1);
        self.state[line as usize] = LineState::Collecting;
        self.collecting = Some(Collecting {
            line,
            slot: 0,
            quota: valid.div_ceil(invalid).max(1),
        });
        true
    }

    /// What greedy's buckets must give (debug builds): no full line with fewer valid pages
    /// than the victim.
    #[cfg(debug_assertions)]
    fn check_greedy_pick(&self, line: u32, valid: u32) {
        if !matches!(self.victims, Victims::Greedy(_)) {
            return;
        }
        let fewest = (0..self.lines as usize)
            .filter(|&l| self.state[l] == LineState::Full && l != line as usize)
            .map(|l| self.valid[l])
            .min();
        assert!(
            fewest.is_none_or(|f| f >= valid),
            "greedy picked line {line} with {valid} valid pages while a full line has {fewest:?}"
        );
    }

    /// Copies up to `pages` valid pages of the victim in progress to the collector's open
    /// line of its handle; once it holds none, erases and frees it.
    fn copy_out(&mut self, work: &mut DieWork, pages: u32, forced: bool) {
        let Some(mut c) = self.collecting else {
            return;
        };
        let victim = c.line as usize;
        let handle = self.handle_of[victim] as usize;
        let pages = pages - self.move_pooled(c.line, pages, handle, work);
        if pages == 0 && self.valid[victim] > 0 {
            self.collecting = Some(c);
            return;
        }
        if self.defer_moves && pages >= self.valid[victim] {
            self.defer_rest(c, handle, work);
            self.retire(c.line, work, forced);
            return;
        }
        let first = self.first_slot(c.line);
        let mut copied = 0;
        while copied < pages && self.valid[victim] > 0 {
            let ppn = first + u64::from(c.slot);
            prefetch_ahead(
                &self.l2p,
                &self.p2l,
                ppn,
                first + u64::from(self.pages_per_line),
            );
            let lpn = self.p2l.get(ppn);
            c.slot += 1;
            if lpn == UNMAPPED {
                continue;
            }
            copied += 1;
            work.add_read(self.die_of(ppn));
            if let Some(cache) = self.map_cache.as_mut() {
                cache.moved(lpn);
            }
            self.p2l.set(ppn, UNMAPPED);
            self.valid[victim] -= 1;
            let on_die = victim * self.dies as usize + self.die_of(ppn) as usize;
            self.valid_on_die[on_die] -= 1;
            let to = self.next_slot(Stream::Collector, handle, work);
            self.map(lpn, to);
            work.add_program(self.die_of(to));
            self.counters.gc_pages_copied += 1;
        }
        self.map_moves += u64::from(copied);
        if self.valid[victim] > 0 {
            self.collecting = Some(c);
            return;
        }
        self.retire(c.line, work, forced);
    }

    /// Moves up to `pages` of `line`'s pooled pages to the collector's open line of
    /// `handle`, each staying on its die (`pool.rs`); returns how many.
    fn move_pooled(&mut self, line: u32, pages: u32, handle: usize, work: &mut DieWork) -> u32 {
        let Some(pool) = self.pool.as_ref() else {
            return 0;
        };
        let total = pool.in_line(line).min(pages);
        let mut left = total;
        while left > 0 {
            let (first, n) = self.next_slots(Stream::Collector, handle, left, work);
            let to = self.line_of(first);
            let (dies, logical) = (self.dies, self.logical_pages);
            let (on_die, cache) = (&mut self.valid_on_die, &mut self.map_cache);
            let pool = self.pool.as_mut().expect("checked");
            pool.move_pages((line, to), n, |die, k| {
                on_die[(line * dies + die) as usize] -= k;
                on_die[(to * dies + die) as usize] += k;
                work.add_reads(die, k);
                work.add_programs(die, k);
                if let Some(cache) = cache.as_mut() {
                    cache.moved_on_die(die, dies, logical, k);
                }
            });
            self.valid[line as usize] -= n;
            self.valid[to as usize] += n;
            left -= n;
        }
        self.counters.gc_pages_copied += u64::from(total);
        total
    }

    /// The rest of the victim in progress (`c`) copied out as `copy_out` would, its map moves
    /// deferred (`moves.rs`): its reads per die from the victim's valid counts, the collector's
    /// slots taken a run at a time, and every count moved to where the pages go.
    fn defer_rest(&mut self, c: Collecting, handle: usize, work: &mut DieWork) {
        let pages = self.valid[c.line as usize];
        if pages == 0 {
            return;
        }
        if self.moves.len() == Moves::MAX {
            self.finish_move(0);
        }
        let dies = self.dies as usize;
        let on_die = c.line as usize * dies;
        debug_assert_eq!(
            self.valid_on_die[on_die..on_die + dies].iter().sum::<u32>(),
            pages,
            "victim line {}'s valid pages per die do not add up to its valid count",
            c.line
        );
        for (die, valid) in self.valid_on_die[on_die..on_die + dies]
            .iter_mut()
            .enumerate()
        {
            work.add_reads(die as u32, *valid);
            *valid = 0;
        }
        self.valid[c.line as usize] = 0;
        if let Some(cache) = self.map_cache.as_mut() {
            // The moves are deferred, not their map updates: the victim's slots still name
            // the pages they hold.
            let first = u64::from(c.line) * u64::from(self.pages_per_line);
            for slot in c.slot..self.pages_per_line {
                let lpn = self.p2l.get(first + u64::from(slot));
                if lpn != UNMAPPED {
                    cache.moved(lpn);
                }
            }
        }
        let mut runs = Vec::new();
        let mut left = pages;
        while left > 0 {
            let (first, n) = self.next_slots(Stream::Collector, handle, left, work);
            let line = self.line_of(first);
            self.valid[line as usize] += n;
            let on_die = line as usize * dies;
            for i in 0..self.dies.min(n) {
                // Slot `first + i` is on die `(first + i) mod dies`: each die gets every
                // `dies`-th slot of the run.
                let d = (self.die_of(first) + i) % self.dies;
                let count = n / self.dies + u32::from(i < n % self.dies);
                self.valid_on_die[on_die + d as usize] += count;
                work.add_programs(d, count);
            }
            runs.push((first, n));
            left -= n;
        }
        self.counters.gc_pages_copied += u64::from(pages);
        self.moves.push(Move {
            victim: c.line,
            slot: c.slot,
            left: pages,
            runs,
            run: 0,
        });
    }

    /// Erases and frees the victim in progress, `line`, once it holds no valid page.
    fn retire(&mut self, line: u32, work: &mut DieWork, forced: bool) {
        let victim = line as usize;
        debug_assert_eq!(
            self.valid[victim], 0,
            "line {line} erased while it holds valid pages"
        );
        self.collecting = None;
        if let Some(cache) = self.map_cache.as_mut() {
            cache.update_batch(work);
        }
        work.add_erase_everywhere();
        self.erases[victim] += 1;
        self.state[victim] = LineState::Free;
        self.free.push_back(line);
        self.counters.gc_victims += 1;
        self.counters.gc_victims_forced += u64::from(forced);
        self.counters.block_erases += u64::from(self.dies);
    }

    /// Checks every structure against the others (tests): each mapped logical page's slot
    /// maps back to it, each line's valid count is its mapped slots, free lines hold nothing.
    /// Runs the deferred map moves first.
    pub fn check_consistency(&mut self) -> Result<(), String> {
        self.finish_deferred();
        let mut valid = vec![0u32; self.lines as usize];
        let mut on_die = vec![0u32; self.valid_on_die.len()];
        let mut pooled = vec![0u64; self.dies as usize];
        for (lpn, ppn) in self.l2p.iter().enumerate() {
            if ppn == UNMAPPED {
                continue;
            }
            if ppn == POOLED {
                pooled[lpn % self.dies as usize] += 1;
                continue;
            }
            if self.p2l.get(ppn) != lpn as u64 {
                return Err(format!(
                    "logical page {lpn} maps to slot {ppn}, which maps back to {}",
                    self.p2l.get(ppn)
                ));
            }
            let line = self.line_of(ppn);
            valid[line as usize] += 1;
            on_die[(line * self.dies + self.die_of(ppn)) as usize] += 1;
        }
        if let Some(pool) = &self.pool {
            for (die, &n) in pooled.iter().enumerate() {
                if pool.per_die(die as u32) != n {
                    return Err(format!(
                        "{n} logical pages on die {die} are pooled, the pool holds {}",
                        pool.per_die(die as u32)
                    ));
                }
            }
            for (i, n) in on_die.iter_mut().enumerate() {
                let (line, die) = (i / self.dies as usize, i % self.dies as usize);
                *n += pool.on_die(line as u32, die as u32);
            }
            for (line, n) in valid.iter_mut().enumerate() {
                *n += pool.in_line(line as u32);
            }
        }
        if let Some(i) = (0..on_die.len()).find(|&i| on_die[i] != self.valid_on_die[i]) {
            let (line, die) = (i / self.dies as usize, i % self.dies as usize);
            return Err(format!(
                "line {line} counts {} valid pages on die {die}, holds {}",
                self.valid_on_die[i], on_die[i]
            ));
        }
        let mapped_slots = self.p2l.iter().filter(|&l| l != UNMAPPED).count();
        let mapped_pages = self.l2p.iter().filter(|&p| p < POOLED).count();
        if mapped_slots != mapped_pages {
            return Err(format!(
                "{mapped_slots} slots hold a page but {mapped_pages} pages are mapped"
            ));
        }
        for (line, (&holds, &counted)) in valid.iter().zip(&self.valid).enumerate() {
            if holds != counted {
                return Err(format!(
                    "line {line} counts {counted} valid pages, holds {holds}"
                ));
            }
            if self.state[line] == LineState::Free && holds != 0 {
                return Err(format!("free line {line} holds {holds} pages"));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for Ftl {
    /// A summary: the maps are millions of entries.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ftl")
            .field("dies", &self.dies)
            .field("pages_per_line", &self.pages_per_line)
            .field("lines", &self.lines)
            .field("logical_pages", &self.logical_pages)
            .field("free_lines", &self.free.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}
