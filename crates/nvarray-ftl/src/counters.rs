//! What the FTL counts: the pages the host wrote against the pages the flash programmed (their
//! ratio is the write amplification), the collector's work, erases per block, free lines.

use serde::Serialize;

/// Counts since the FTL was made or since `Ftl::reset_counters` (preconditioning resets them,
/// so a run's figures are the run's own); erase counts per block are for the device's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FtlCounters {
    /// Pages the host wrote.
    pub host_pages_written: u64,
    /// Valid pages the collector copied (read and programmed again).
    pub gc_pages_copied: u64,
    /// Lines the collector reclaimed (each one victim: copied out, then erased).
    pub gc_victims: u64,
    /// Of those, reclaimed while a host write waited (forced collection).
    pub gc_victims_forced: u64,
    /// Block erases (a line's erase is one per die).
    pub block_erases: u64,
    /// Pages the host trimmed (deallocated) that were mapped.
    pub pages_trimmed: u64,
    /// Fewest free lines seen.
    pub free_lines_min: u32,
    /// The mapping-table cache's work (all zero without one); reported on its own
    /// (`FtlStats::map_cache`).
    #[serde(skip)]
    pub map: MapCounters,
}

/// What the mapping-table cache did (`map_cache.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MapCounters {
    /// Host accesses' map lookups, one per logical page.
    pub lookups: u64,
    /// Of those, found in the cache.
    pub hits: u64,
    /// Translation pages read from flash: host misses and the collector's batched updates.
    pub pages_read: u64,
    /// Translation pages programmed: changed pages evicted and the collector's batched
    /// updates (in the write amplification).
    pub pages_written: u64,
}

impl MapCounters {
    /// Hits per lookup; `None` before any lookup.
    pub fn hit_ratio(&self) -> Option<f64> {
        (self.lookups > 0).then(|| self.hits as f64 / self.lookups as f64)
    }

    fn since(&self, earlier: &MapCounters) -> MapCounters {
        MapCounters {
            lookups: self.lookups - earlier.lookups,
            hits: self.hits - earlier.hits,
            pages_read: self.pages_read - earlier.pages_read,
            pages_written: self.pages_written - earlier.pages_written,
        }
    }
}

impl FtlCounters {
    /// Flash pages programmed: the host's, the collector's copies and the map's pages.
    pub fn flash_pages_programmed(&self) -> u64 {
        self.host_pages_written + self.gc_pages_copied + self.map.pages_written
    }

    /// Flash pages programmed per page the host wrote (1 before any collection; 0 with no
    /// writes, since nothing was amplified).
    pub fn write_amplification(&self) -> f64 {
        if self.host_pages_written == 0 {
            return 0.0;
        }
        self.flash_pages_programmed() as f64 / self.host_pages_written as f64
    }

    /// The counts from `earlier` to these (one interval's).
    pub fn since(&self, earlier: &FtlCounters) -> FtlCounters {
        FtlCounters {
            host_pages_written: self.host_pages_written - earlier.host_pages_written,
            gc_pages_copied: self.gc_pages_copied - earlier.gc_pages_copied,
            gc_victims: self.gc_victims - earlier.gc_victims,
            gc_victims_forced: self.gc_victims_forced - earlier.gc_victims_forced,
            block_erases: self.block_erases - earlier.block_erases,
            pages_trimmed: self.pages_trimmed - earlier.pages_trimmed,
            free_lines_min: self.free_lines_min,
            map: self.map.since(&earlier.map),
        }
    }
}

/// Erases per block over the device's life: fewest, mean, most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct EraseSpread {
    pub min: u32,
    pub mean: f64,
    pub max: u32,
}
