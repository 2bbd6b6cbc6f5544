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

use nvarray_ftl::{precondition, DieWork, Ftl, FtlConfig, FtlCounters, GcWork, Geometry};
use serde::Serialize;

use super::{Access, Booking, Memory};
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
}

/// The FTL's counts at one moment of the run (device time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
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
    pub lines: u32,
    pub pages_per_line: u32,
    pub free_lines: u32,
    /// What was written before the run (`none`, `fill`, `random:N`) and its amplification.
    pub precondition: String,
    pub precondition_write_amplification: f64,
    #[serde(flatten)]
    pub counters: FtlCounters,
    pub flash_pages_programmed: u64,
    /// Flash pages programmed per host page written; absent when the host wrote nothing.
    pub write_amplification: Option<f64>,
    pub erases_per_block: nvarray_ftl::EraseSpread,
    /// The counts every so many host pages, for write amplification and free lines over time.
    pub samples: Vec<FtlSample>,
}

impl FlashTranslation {
    /// The FTL over `geometry` (validated with the config), preconditioned as configured.
    pub(crate) fn new(
        config: &FtlConfig,
        geometry: Geometry,
        controllers: u32,
        banks: u32,
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
            ftl,
        }
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
            lines: self.ftl.lines(),
            pages_per_line: self.ftl.pages_per_line(),
            free_lines: self.ftl.free_lines(),
            precondition: self.config.precondition.to_string(),
            precondition_write_amplification: self.preconditioned.write_amplification,
            counters: c,
            flash_pages_programmed: c.flash_pages_programmed(),
            write_amplification: (c.host_pages_written > 0).then(|| c.write_amplification()),
            erases_per_block: self.ftl.erase_spread(),
            samples: self.samples.clone(),
        }
    }

    /// Records a sample if the host has written another step of pages since the last.
    fn sample(&mut self, device_ns: u64) {
        let c = self.ftl.counters();
        let last = self.samples.last().map_or(0, |s| s.host_pages_written);
        if c.host_pages_written < last + self.sample_every_pages {
            return;
        }
        if self.samples.len() == SAMPLES_MAX {
            let kept: Vec<FtlSample> = self.samples.iter().copied().skip(1).step_by(2).collect();
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

/// The cost of one page access of `bytes` on a die.
#[inline]
fn page_ns(memory: &Memory, access: Access, bytes: u64) -> u64 {
    let latency = match access {
        Access::Read => memory.read_latency_ns,
        Access::Write => memory.write_latency_ns,
    };
    latency + bytes_to_ns(bytes, memory.bank_fs_per_byte)
}

/// Books `ns` on bank `bank` from `ready_ns`; a `span` booking counts in the access's media
/// time. Returns its end.
#[inline]
fn book(
    banks: &mut [Timeline],
    b: &mut Booking,
    bank: u32,
    ready_ns: u64,
    ns: u64,
    span: bool,
) -> u64 {
    let start = banks[bank as usize].reserve(b.now_ns, ready_ns, ns);
    if span {
        b.first_start_ns = b.first_start_ns.min(start);
        b.last_end_ns = b.last_end_ns.max(start + ns);
    }
    start + ns
}

impl Memory {
    /// `Memory::access` for flash behind an FTL.
    pub(super) fn access_ftl(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        access: Access,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> (u64, u64) {
        let mut t = self.ftl.take().expect("flash behind an FTL");
        let page = 1u64 << t.page_shift;
        let (read_page_ns, write_page_ns) = (
            page_ns(self, Access::Read, page),
            page_ns(self, Access::Write, page),
        );
        self.booking = Booking {
            now_ns,
            ready_ns,
            first_start_ns: u64::MAX,
            last_end_ns: ready_ns,
        };
        let end = offset_bytes + len_bytes;
        for lpn in offset_bytes >> t.page_shift..=(end - 1) >> t.page_shift {
            let lo = offset_bytes.max(lpn << t.page_shift);
            let bytes = end.min((lpn + 1) << t.page_shift) - lo;
            let mapped = t.ftl.read(lpn);
            if access == Access::Read {
                if let Some(die) = mapped {
                    let ns = page_ns(self, Access::Read, bytes);
                    book(
                        &mut self.banks,
                        &mut self.booking,
                        t.die_bank[die as usize],
                        ready_ns,
                        ns,
                        true,
                    );
                }
                continue;
            }
            let mut program_ready = ready_ns;
            if let (Some(die), true) = (mapped, bytes < page) {
                let bank = t.die_bank[die as usize];
                program_ready = book(
                    &mut self.banks,
                    &mut self.booking,
                    bank,
                    ready_ns,
                    read_page_ns,
                    true,
                );
            }
            let die = t.ftl.write(lpn, 0, &mut t.work);
            if t.work.forced.any {
                let done = self.book_collection(&t, &t.work.forced, ready_ns, true);
                program_ready = program_ready.max(done);
            }
            let bank = t.die_bank[die as usize];
            book(
                &mut self.banks,
                &mut self.booking,
                bank,
                program_ready,
                write_page_ns,
                true,
            );
            if t.work.background.any {
                self.book_collection(&t, &t.work.background, ready_ns, false);
            }
            t.work.clear();
            t.sample(now_ns);
        }
        self.ftl = Some(t);
        let b = self.booking;
        // A read of nothing but unmapped pages touched no flash: its media time is nil.
        (b.first_start_ns.min(b.last_end_ns), b.last_end_ns)
    }

    /// Books each die's share of a collection back to back from `ready_ns`; returns when the
    /// last die is done.
    fn book_collection(
        &mut self,
        t: &FlashTranslation,
        work: &DieWork,
        ready_ns: u64,
        span: bool,
    ) -> u64 {
        let page = 1u64 << t.page_shift;
        let (read_ns, program_ns) = (
            page_ns(self, Access::Read, page),
            page_ns(self, Access::Write, page),
        );
        let mut done = ready_ns;
        for (die, bank) in t.die_bank.iter().enumerate() {
            let (reads, programs, erases) = (work.reads[die], work.programs[die], work.erases[die]);
            let ns = u64::from(reads) * read_ns
                + u64::from(programs) * program_ns
                + u64::from(erases) * self.erase_latency_ns;
            self.erases += u64::from(erases);
            if ns > 0 {
                done = done.max(book(
                    &mut self.banks,
                    &mut self.booking,
                    *bank,
                    ready_ns,
                    ns,
                    span,
                ));
            }
        }
        done
    }

    /// What the FTL did, if the memory has one.
    pub fn ftl_stats(&self) -> Option<FtlStats> {
        self.ftl.as_ref().map(|t| t.stats())
    }
}
