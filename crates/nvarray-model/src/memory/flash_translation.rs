//! Flash behind a page-mapping FTL (`[ftl]`, `nvarray-ftl`): where each page of an access
//! lives, and the collection a write causes, booked on the dies.
//!
//! A read books its mapped pages on their dies (a never-written or trimmed page touches no
//! flash: it reads as zeros from the controller, as NVMe's deallocated blocks do). A write
//! programs each page where the FTL puts it; a write of part of a page first reads the page
//! it replaces (read-modify-write). Collection that had to finish before the write could be
//! programmed (forced) holds the write's program until the last die is done; background
//! collection is booked on the dies after the write, so it delays what comes next there.
//! Each die's share of a collection (its copies' reads and programs, its erase) is booked
//! back to back.
//!
//! With a mapping-table cache (`ftl.map_cache_bytes`, `nvarray_ftl`'s `map_cache.rs`), each
//! page's map lookup comes first: a miss reads the translation page on its die before the
//! page is read or programmed, and a changed page it evicts is written back in the background.
//!
//! With a DRAM write buffer (`ftl.write_buffer_bytes`, `write_buffer.rs`) a write's media time
//! ends when its pages are in the buffer; their programs, and any collection they force, are
//! booked on the dies all the same but the write does not wait for them.

use nvarray_ftl::{
    precondition, Ftl, FtlConfig, FtlCounters, GcWork, Geometry, MapCounters, MapLookup,
};
use serde::{Deserialize, Serialize};

use super::booking::{Access, Booking};
use super::write_buffer::WriteBuffer;
use crate::link::bytes_to_ns;
use crate::timeline::Timeline;

/// Samples kept for the intervals' write amplification; past this, every other one is dropped
/// and the step doubles.
const SAMPLES_MAX: usize = 512;

/// The FTL and what booking its work needs.
#[derive(Clone, Debug)]
pub(crate) struct FlashTranslation {
    ftl: Ftl,
    work: GcWork,
    config: FtlConfig,
    page_shift: u32,
    /// Bank index of each die: die `d` is on channel `d mod controllers`, so consecutive
    /// pages of a line spread over the channels first.
    die_bank: Vec<u32>,
    samples: Vec<FtlSample>,
    sample_every_pages: u64,
    preconditioned: nvarray_ftl::Preconditioned,
    costs: FlashCosts,
    buffer: Option<WriteBuffer>,
}

/// What the flash's operations cost a die.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlashCosts {
    pub read_latency_ns: u64,
    pub erase_ns: u64,
    pub bank_fs_per_byte: u64,
    /// One whole FTL page read and programmed: latency plus transfer.
    pub read_page_ns: u64,
    pub program_page_ns: u64,
}

/// The FTL's counts at one moment of the run (device time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FtlSample {
    pub device_ns: u64,
    pub host_pages_written: u64,
    pub flash_pages_programmed: u64,
    pub free_lines: u32,
}

/// What the FTL did over a run, for the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FtlStats {
    pub victim: &'static str,
    pub page_bytes: u32,
    /// `(physical - logical) / logical`, as laid out (`ftl.over_provisioning` rounded up to
    /// whole lines).
    pub over_provisioning: f64,
    /// `(physical - logical) / physical`, as laid out.
    pub spare_factor: f64,
    pub logical_pages: u64,
    pub physical_pages: u64,
    /// The DRAM write buffer (`ftl.write_buffer_bytes`; 0 without one).
    pub write_buffer_bytes: u64,
    /// Host pages written through each placement handle (`ftl.placement_handles` entries).
    pub host_pages_by_handle: Vec<u64>,
    pub lines: u32,
    pub pages_per_line: u32,
    pub free_lines: u32,
    /// What was written before the run (`none`, `fill`, `random:N`) and its amplification
    /// (absent for `none`).
    pub precondition: String,
    pub precondition_write_amplification: Option<f64>,
    #[serde(flatten)]
    pub counters: FtlCounters,
    pub flash_pages_programmed: u64,
    /// Flash pages programmed per host page written; absent when the host wrote nothing.
    pub write_amplification: Option<f64>,
    pub erases_per_block: nvarray_ftl::EraseSpread,
    /// The counts every so many host pages, for write amplification and free lines over time.
    pub samples: Vec<FtlSample>,
    /// Host memory the simulator's maps of this FTL take at the end (they only grow), and the
    /// budget they must stay within (`ftl.map_budget_bytes`).
    pub host_map_bytes: u64,
    pub map_budget_bytes: u64,
    /// Whether preconditioning's random part ran on the lines' counts, not page by page
    /// (its maps would not have fit the budget): the pages it left are pooled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub precondition_in_bulk: bool,
    /// The mapping-table cache (`ftl.map_cache_bytes`); absent when the whole map is in DRAM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_cache: Option<MapCacheStats>,
}

/// What the mapping-table cache held and did over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MapCacheStats {
    pub bytes: u64,
    /// Translation pages it holds, and the whole map's.
    pub pages: u64,
    pub map_pages: u64,
    /// Map entries per translation page.
    pub entries_per_page: u32,
    /// Hits per lookup; absent before any lookup.
    pub hit_ratio: Option<f64>,
    #[serde(flatten)]
    pub counters: MapCounters,
}

impl FlashTranslation {
    /// The FTL over `geometry` (validated with the config), preconditioned as configured.
    pub(crate) fn new(
        config: &FtlConfig,
        geometry: Geometry,
        (controllers, banks): (u32, u32),
        costs: FlashCosts,
    ) -> Self {
        let mut ftl = Ftl::new(config, geometry)
            .unwrap_or_else(|e| panic!("an FTL from a validated config: {e}"));
        let preconditioned = precondition(&mut ftl, config.precondition, config.seed, |_| {});
        let die_bank = (0..geometry.dies)
            .map(|d| (d % controllers) * banks + d / controllers)
            .collect();
        FlashTranslation {
            work: GcWork::new(geometry.dies),
            config: config.clone(),
            page_shift: config.page_bytes.trailing_zeros(),
            die_bank,
            samples: Vec::new(),
            sample_every_pages: (geometry.logical_pages / 256).max(64),
            preconditioned,
            costs,
            buffer: (config.write_buffer_bytes > 0).then(|| {
                WriteBuffer::new(
                    (config.write_buffer_bytes / u64::from(config.page_bytes)) as usize,
                )
            }),
            ftl,
        }
    }

    /// `Ftl::check_map_budget`, as text.
    pub(crate) fn check_map_budget(&self) -> Result<(), String> {
        self.ftl.check_map_budget().map_err(|e| e.to_string())
    }

    pub(crate) fn stats(&self) -> FtlStats {
        let c = self.ftl.counters();
        let physical = self.ftl.physical_pages();
        let logical = self.ftl.logical_pages();
        FtlStats {
            victim: self.config.victim.name(),
            page_bytes: self.config.page_bytes,
            over_provisioning: (physical - logical) as f64 / logical as f64,
            spare_factor: (physical - logical) as f64 / physical as f64,
            logical_pages: logical,
            physical_pages: physical,
            write_buffer_bytes: self.config.write_buffer_bytes,
            host_pages_by_handle: self.ftl.host_pages_by_handle().to_vec(),
            lines: self.ftl.lines(),
            pages_per_line: self.ftl.pages_per_line(),
            free_lines: self.ftl.free_lines(),
            precondition: self.config.precondition.to_string(),
            precondition_write_amplification: (self.config.precondition
                != nvarray_ftl::Precondition::None)
                .then_some(self.preconditioned.write_amplification),
            counters: c,
            flash_pages_programmed: c.flash_pages_programmed(),
            write_amplification: (c.host_pages_written > 0).then(|| c.write_amplification()),
            erases_per_block: self.ftl.erase_spread(),
            samples: self.samples.clone(),
            host_map_bytes: self.ftl.map_bytes(),
            map_budget_bytes: self.ftl.map_budget_bytes(),
            precondition_in_bulk: self.preconditioned.in_bulk,
            map_cache: self
                .ftl
                .map_cache_pages()
                .map(|(pages, map_pages)| MapCacheStats {
                    bytes: self.config.map_cache_bytes,
                    pages,
                    map_pages,
                    entries_per_page: self.config.page_bytes / nvarray_ftl::MAP_ENTRY_BYTES,
                    hit_ratio: c.map.hit_ratio(),
                    counters: c.map,
                }),
        }
    }

    /// Records a sample if the host has written another step of pages since the last (the
    /// first write also records the counts before it, so the first interval counts too).
    fn sample(&mut self, device_ns: u64) {
        let c = self.ftl.counters();
        if self.samples.is_empty() {
            self.samples.push(FtlSample {
                device_ns,
                free_lines: self.ftl.free_lines(),
                ..FtlSample::default()
            });
        }
        let last = self.samples.last().map_or(0, |s| s.host_pages_written);
        if c.host_pages_written < last + self.sample_every_pages {
            return;
        }
        if self.samples.len() == SAMPLES_MAX {
            let kept: Vec<FtlSample> = self.samples.iter().copied().step_by(2).collect();
            self.samples = kept;
            self.sample_every_pages *= 2;
        }
        self.samples.push(FtlSample {
            device_ns,
            host_pages_written: c.host_pages_written,
            flash_pages_programmed: c.flash_pages_programmed(),
            free_lines: self.ftl.free_lines(),
        });
    }
}

impl FlashTranslation {
    /// Books `access` of `[offset, offset + len)` on `banks`, the span in `booking` (set up
    /// by the caller with the access's now and ready time); block erases are added to
    /// `erases`. A write's pages go through reclaim unit handle `placement` (the FTL's last
    /// if it has fewer).
    pub(crate) fn access(
        &mut self,
        (banks, booking): (&mut [Timeline], &mut Booking),
        erases: &mut u64,
        access: Access,
        (offset_bytes, len_bytes): (u64, u64),
        placement: u16,
    ) {
        let (ready_ns, now_ns) = (booking.ready_ns, booking.now_ns);
        let page = 1u64 << self.page_shift;
        let c = self.costs;
        let end = offset_bytes + len_bytes;
        for lpn in offset_bytes >> self.page_shift..=(end - 1) >> self.page_shift {
            let lo = offset_bytes.max(lpn << self.page_shift);
            let bytes = end.min((lpn + 1) << self.page_shift) - lo;
            if access == Access::Read {
                let map = self.ftl.look_up(lpn, false);
                let found = self.book_lookup((banks, booking), map, ready_ns, true);
                if let Some(bank) = self.bank_of(lpn) {
                    let ns = c.read_latency_ns + bytes_to_ns(bytes, c.bank_fs_per_byte);
                    booking.book(&mut banks[bank], found, ns, true);
                }
                continue;
            }
            // With a write buffer, the write is done once the page is in it: nothing after
            // counts in its media time but the wait for a free slot.
            let mut program_ready = ready_ns;
            if let Some(buffer) = self.buffer.as_mut() {
                program_ready = buffer.admit(ready_ns);
                booking.waited(ready_ns, program_ready);
            }
            let span = self.buffer.is_none();
            let map = self.ftl.look_up(lpn, true);
            program_ready = self.book_lookup((banks, booking), map, program_ready, span);
            // Read-modify-write: the rest of a part-page write comes from its old copy (a
            // whole-page write replaces the page without looking it up).
            if let Some(bank) = (bytes < page).then(|| self.bank_of(lpn)).flatten() {
                program_ready = booking.book(&mut banks[bank], program_ready, c.read_page_ns, span);
            }
            let die = self.ftl.write(lpn, u32::from(placement), &mut self.work);
            if self.work.forced.any {
                let done = self.book_collection(banks, booking, erases, true, span);
                program_ready = program_ready.max(done);
            }
            let bank = self.die_bank[die as usize] as usize;
            let programmed = booking.book(&mut banks[bank], program_ready, c.program_page_ns, span);
            if let Some(buffer) = self.buffer.as_mut() {
                buffer.programmed(programmed);
            }
            if self.work.background.any {
                self.book_collection(banks, booking, erases, false, false);
            }
            self.work.clear();
            self.sample(now_ns);
        }
    }

    /// Deallocates the pages wholly inside `[offset, offset + len)` (NVMe Dataset Management,
    /// NBD trim): they are unmapped, so the collector no longer copies them and a read of them
    /// touches no flash. A page only partly inside keeps its data. Returns the pages that were
    /// mapped and are no longer. Untimed: a drive updates its map in firmware, no flash
    /// operation is involved.
    pub(crate) fn deallocate(&mut self, offset_bytes: u64, len_bytes: u64) -> u64 {
        let page = 1u64 << self.page_shift;
        let first = offset_bytes.div_ceil(page);
        let end = (offset_bytes + len_bytes) >> self.page_shift;
        let before = self.ftl.counters().pages_trimmed;
        for lpn in first..end.min(self.ftl.logical_pages()) {
            self.ftl.trim(lpn);
        }
        self.ftl.counters().pages_trimmed - before
    }

    /// Whether the FTL has map moves left to run (`Ftl::run_deferred`).
    pub(crate) fn has_deferred(&self) -> bool {
        self.ftl.has_deferred()
    }

    /// Pages whose map entries the FTL's collector has moved so far (`Ftl::map_moves`).
    pub(crate) fn map_moves(&self) -> u64 {
        self.ftl.map_moves()
    }

    /// Runs up to `pages` of the FTL's deferred map moves; returns whether any are left.
    /// Untimed: the moves' flash work was booked when the collection was made.
    pub(crate) fn run_deferred(&mut self, pages: u32) -> bool {
        self.ftl.run_deferred(pages)
    }

    /// When a flush issued at `now_ns` is done: every page in the write buffer programmed
    /// (at once without a buffer).
    pub(crate) fn drained_ns(&self, now_ns: u64) -> u64 {
        self.buffer
            .as_ref()
            .map_or(now_ns, |b| b.drained_ns(now_ns))
    }

    /// The bank holding logical page `lpn`, if it is mapped.
    #[inline]
    fn bank_of(&mut self, lpn: u64) -> Option<usize> {
        self.ftl
            .read(lpn)
            .map(|die| self.die_bank[die as usize] as usize)
    }

    /// Books what a map lookup from `ready_ns` costs (`Ftl::look_up`): a miss's read of the
    /// translation page, in the access's media time if `span`, and the write-back of the
    /// changed page it evicted, in the background. Returns when the entry is known.
    #[inline]
    fn book_lookup(
        &self,
        (banks, booking): (&mut [Timeline], &mut Booking),
        map: MapLookup,
        ready_ns: u64,
        span: bool,
    ) -> u64 {
        let c = self.costs;
        if let Some(die) = map.write_back_die {
            let bank = self.die_bank[die as usize] as usize;
            booking.book(&mut banks[bank], ready_ns, c.program_page_ns, false);
        }
        match map.read_die {
            Some(die) => {
                let bank = self.die_bank[die as usize] as usize;
                booking.book(&mut banks[bank], ready_ns, c.read_page_ns, span)
            }
            None => ready_ns,
        }
    }

    /// Books each die's share of the forced (or background) collection back to back from
    /// the access's ready time, in the access's media time if `span`; returns when the last
    /// die is done.
    fn book_collection(
        &self,
        banks: &mut [Timeline],
        booking: &mut Booking,
        erases: &mut u64,
        forced: bool,
        span: bool,
    ) -> u64 {
        let work = if forced {
            &self.work.forced
        } else {
            &self.work.background
        };
        let c = self.costs;
        let ready_ns = booking.ready_ns;
        let mut done = ready_ns;
        for &die in &work.touched {
            let d = die as usize;
            let (reads, programs, erased) = (work.reads[d], work.programs[d], work.erases[d]);
            let ns = u64::from(reads) * c.read_page_ns
                + u64::from(programs) * c.program_page_ns
                + u64::from(erased) * c.erase_ns;
            *erases += u64::from(erased);
            if ns > 0 {
                let bank = self.die_bank[d] as usize;
                done = done.max(booking.book(&mut banks[bank], ready_ns, ns, span));
            }
        }
        done
    }
}
