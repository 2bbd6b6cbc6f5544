//! The trace's own summary, counted as it is read: requests, read fraction, sizes, footprint,
//! and what the replay did to it.

use crate::spec::{Direction, Request};
use crate::trace::fit::{AddressMode, Fitted};
use crate::trace::formats::{RawRequest, Skipped, TraceFormat};
use crate::trace::{ReplayMode, TraceSpec};

/// Lines passed over, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SkippedCounts {
    /// Trims and discards.
    pub trim: u64,
    /// Flushes, syncs, datasyncs.
    pub flush: u64,
    /// Requests of length 0.
    pub empty: u64,
    /// File actions, block-layer events other than a queued request.
    pub other: u64,
}

impl SkippedCounts {
    pub(crate) fn count(&mut self, kind: Skipped) {
        match kind {
            Skipped::Trim => self.trim += 1,
            Skipped::Flush => self.flush += 1,
            Skipped::Empty => self.empty += 1,
            Skipped::Other => self.other += 1,
        }
    }

    /// ", skipped 3 trims, 1 flush" (empty when nothing was skipped).
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.trim, "trim"),
            (self.flush, "flush/sync"),
            (self.empty, "zero-length"),
            (self.other, "non-request line"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!(", skipped {}", parts.join(", "))
        }
    }
}

/// Requests of the trace whose length is at most `up_to_bytes` (and more than the previous
/// bucket's); the last bucket has no bound (`up_to_bytes` 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[allow(missing_docs)] // Said above.
pub struct SizeBucket {
    pub up_to_bytes: u64,
    pub requests: u64,
}

/// Bucket bounds: powers of two from 512 B to 1 MiB, then the rest.
const SIZE_BOUNDS: [u64; 12] = [
    512,
    1 << 10,
    2 << 10,
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
];

/// Distinct device bytes touched, counted in granules on a bitmap of the device: 4 KiB
/// granules, coarser on a device so large that the bitmap would pass 8 MiB (2^26 granules).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Footprint {
    granule_shift: u32,
    bits: Vec<u64>,
    granules: u64,
}

/// Granules the footprint bitmap holds at most.
const FOOTPRINT_GRANULES_MAX: u64 = 1 << 26;

impl Footprint {
    fn new(capacity_bytes: u64) -> Footprint {
        let mut shift = 12;
        while capacity_bytes.div_ceil(1 << shift) > FOOTPRINT_GRANULES_MAX {
            shift += 1;
        }
        Footprint {
            granule_shift: shift,
            bits: Vec::new(),
            granules: 0,
        }
    }

    fn granule_bytes(&self) -> u64 {
        1 << self.granule_shift
    }

    fn add(&mut self, offset_bytes: u64, len_bytes: u64) {
        if len_bytes == 0 {
            return;
        }
        let first = offset_bytes >> self.granule_shift;
        let last = (offset_bytes + len_bytes - 1) >> self.granule_shift;
        let words = (last / 64 + 1) as usize;
        if self.bits.len() < words {
            // Grows with the highest address touched, never past the device's bitmap.
            self.bits.resize(words, 0);
        }
        for g in first..=last {
            let (word, bit) = ((g / 64) as usize, g % 64);
            if self.bits[word] & (1 << bit) == 0 {
                self.bits[word] |= 1 << bit;
                self.granules += 1;
            }
        }
    }
}

/// The trace's summary and what the replay did to it (in the run's report, `trace`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TraceReport {
    /// The trace file, and how it was read and replayed.
    pub path: String,
    #[allow(missing_docs)]
    pub format: TraceFormat,
    #[allow(missing_docs)]
    pub replay_mode: ReplayMode,
    #[allow(missing_docs)]
    pub replay_speed: f64,
    #[allow(missing_docs)]
    pub address_mode: AddressMode,
    /// Lines read (the whole trace, unless the run stopped first).
    pub lines: u64,
    /// Requests read from the trace, and of them reads and writes, with their bytes.
    pub requests: u64,
    #[allow(missing_docs)]
    pub reads: u64,
    #[allow(missing_docs)]
    pub writes: u64,
    #[allow(missing_docs)]
    pub read_bytes: u64,
    #[allow(missing_docs)]
    pub write_bytes: u64,
    /// Reads / requests (0 when there were none).
    pub read_fraction: f64,
    /// The trace's request sizes.
    pub size_histogram: Vec<SizeBucket>,
    /// The trace's own time from its first request to its last.
    pub duration_ns: u64,
    /// Requests dated before the request before them (issued at that one's time).
    pub out_of_order: u64,
    /// Requests handed to the device after fitting (more than `requests` when some split).
    pub replayed: u64,
    /// Distinct device bytes the replayed requests touched, in granules of this size.
    pub footprint_bytes: u64,
    #[allow(missing_docs)]
    pub footprint_granule_bytes: u64,
    /// Lines that were not requests, by kind.
    pub skipped: SkippedCounts,
    /// What fitting the requests to the device did.
    pub fitted: Fitted,
    /// Timestamps mode: requests that found every queue slot (`iodepth`) taken at their time
    /// and waited for one, their latency counting the wait (in the emulator, a wait of more
    /// than 1 µs). A host thread's own lateness in issuing is not counted here: the emulator
    /// reports it apart (`RunReport::issue_lateness_ns`) and leaves it out of the latency.
    pub issued_late: u64,
    /// The run ended (runtime, number_ios) before the trace did.
    pub stopped_early: bool,
    #[serde(skip)]
    footprint: Footprint,
    #[serde(skip)]
    sizes: [u64; SIZE_BOUNDS.len() + 1],
}

impl TraceReport {
    pub(crate) fn new(
        path: &str,
        format: TraceFormat,
        spec: &TraceSpec,
        capacity_bytes: u64,
    ) -> TraceReport {
        let footprint = Footprint::new(capacity_bytes);
        TraceReport {
            path: path.to_string(),
            format,
            replay_mode: spec.mode,
            replay_speed: spec.speed,
            address_mode: spec.address,
            lines: 0,
            requests: 0,
            reads: 0,
            writes: 0,
            read_bytes: 0,
            write_bytes: 0,
            read_fraction: 0.0,
            size_histogram: Vec::new(),
            duration_ns: 0,
            out_of_order: 0,
            replayed: 0,
            footprint_bytes: 0,
            footprint_granule_bytes: footprint.granule_bytes(),
            skipped: SkippedCounts::default(),
            fitted: Fitted::default(),
            issued_late: 0,
            stopped_early: false,
            footprint,
            sizes: [0; SIZE_BOUNDS.len() + 1],
        }
    }

    /// A request as the trace gave it, `elapsed_ns` after the trace's first.
    pub(crate) fn count_trace(&mut self, r: &RawRequest, elapsed_ns: u64) {
        self.requests += 1;
        match r.op {
            Direction::Read => {
                self.reads += 1;
                self.read_bytes += r.len_bytes;
            }
            Direction::Write => {
                self.writes += 1;
                self.write_bytes += r.len_bytes;
            }
        }
        let bucket = SIZE_BOUNDS
            .iter()
            .position(|&b| r.len_bytes <= b)
            .unwrap_or(SIZE_BOUNDS.len());
        self.sizes[bucket] += 1;
        self.duration_ns = self.duration_ns.max(elapsed_ns);
    }

    /// A request handed to the device.
    pub(crate) fn count_replayed(&mut self, r: &Request) {
        self.replayed += 1;
        self.footprint.add(r.offset_bytes, u64::from(r.len_bytes));
    }

    pub(crate) fn finish(&mut self) {
        self.read_fraction = if self.requests == 0 {
            0.0
        } else {
            self.reads as f64 / self.requests as f64
        };
        self.footprint_bytes = self.footprint.granules * self.footprint.granule_bytes();
        self.size_histogram = self
            .sizes
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| SizeBucket {
                up_to_bytes: SIZE_BOUNDS.get(i).copied().unwrap_or(0),
                requests: n,
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footprint_counts_each_granule_once_and_stays_under_8_mib() {
        let mut f = Footprint::new(1 << 30);
        assert_eq!(f.granule_bytes(), 4096);
        f.add(0, 512);
        f.add(100, 512);
        f.add(4095, 2);
        assert_eq!(f.granules, 2);
        f.add(1 << 20, 1 << 20);
        assert_eq!(f.granules, 2 + 256);
        let huge = Footprint::new(1 << 50);
        assert!(
            (1u64 << 50) / huge.granule_bytes() <= FOOTPRINT_GRANULES_MAX,
            "granule {}",
            huge.granule_bytes()
        );
        let mut max = Footprint::new(u64::MAX);
        max.add(u64::MAX - 10, 10);
        assert_eq!(max.granules, 1);
    }
}
