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
}

impl FtlCounters {
    /// Flash pages programmed: the host's and the collector's copies.
    pub fn flash_pages_programmed(&self) -> u64 {
        self.host_pages_written + self.gc_pages_copied
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
