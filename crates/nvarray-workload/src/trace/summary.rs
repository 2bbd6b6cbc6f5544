//! The trace's own summary, counted as it is read: requests, read fraction, sizes, the
//! devices or files it held, footprint, and what the replay did to it.

use crate::spec::{Direction, Request};
use crate::trace::fit::{AddressMode, Fitted};
use crate::trace::formats::{DeviceName, RawRequest, Skipped, TraceFormat};
use crate::trace::names::shown;
use crate::trace::spec::{ReplayMode, TraceSpec};

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
    /// Lines of a device or file of the trace other than the one `--trace-device` picked.
    pub other_device: u64,
    /// Requests longer than the whole device once aligned to its blocks: not replayed.
    pub longer_than_device: u64,
}

impl SkippedCounts {
    pub(crate) fn count(&mut self, kind: Skipped) {
        match kind {
            Skipped::Trim => self.trim += 1,
            Skipped::Flush => self.flush += 1,
            Skipped::Empty => self.empty += 1,
            Skipped::Other => self.other += 1,
            Skipped::OtherDevice => self.other_device += 1,
            Skipped::LongerThanDevice => self.longer_than_device += 1,
        }
    }

    /// ", skipped 3 trims, 1 flush" (empty when nothing was skipped).
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            (self.trim, "trim"),
            (self.flush, "flush/sync"),
            (self.empty, "zero-length"),
            (self.other, "non-request line"),
            (self.other_device, "line of other devices"),
            (self.longer_than_device, "longer than the device"),
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

/// Distinct device bytes touched, counted in granules of the device's block: every replayed
/// request is whole blocks, so at that granule the count is exact. Two forms, both bounded:
///
/// Requests gather in a buffer of `PENDING_MAX` extents (a run of adjacent requests extends
/// one), sorted when it fills and then added in address order: to a random trace's bitmap
/// this is a sweep, not a cache miss per request.
///
/// - **Extents** while the replay touches few separate ranges (a sequential trace is one):
///   the buffer is merged into disjoint extents, at most `EXTENTS_MAX`.
/// - **A bitmap** of the device once there would be more: a bit per block, exact, when the
///   device has at most `BITMAP_BITS_MAX` blocks (32 GiB of 512-byte blocks, 256 GiB of
///   4 KiB); on a larger device a bit per granule, the smallest power of two that keeps the
///   bitmap to that many bits, and the count an upper bound (each granule touched counts
///   whole), which the report says with the granule.
///
/// Memory: the buffer (1 MiB) and at most `EXTENTS_MAX + PENDING_MAX` extents of 16 bytes
/// (5 MiB) or the bitmap (8 MiB), both for a moment while the one becomes the other.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Footprint {
    set: Touched,
    /// Extents added since the last merge, in arrival order.
    pending: Vec<(u64, u64)>,
    granule_shift: u32,
    /// The device block's shift: the granule at which the count is exact.
    block_shift: u32,
    capacity_bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
enum Touched {
    /// Disjoint extents `[first, last]` in granules, sorted, none adjacent to the next.
    Extents(Vec<(u64, u64)>),
    /// A bit per granule, grown to the highest granule touched.
    Bitmap(Vec<u64>),
}

/// Extents added before they are merged.
const PENDING_MAX: usize = 1 << 16;
/// Disjoint extents kept before the footprint becomes a bitmap.
const EXTENTS_MAX: usize = 1 << 18;
/// Bits the bitmap has at most (8 MiB).
const BITMAP_BITS_MAX: u64 = 1 << 26;

impl Footprint {
    fn new(capacity_bytes: u64, block_bytes: u32) -> Footprint {
        debug_assert!(block_bytes.is_power_of_two());
        let block_shift = block_bytes.trailing_zeros();
        Footprint {
            set: Touched::Extents(Vec::new()),
            pending: Vec::new(),
            granule_shift: block_shift,
            block_shift,
            capacity_bytes,
        }
    }

    fn granule_bytes(&self) -> u64 {
        1 << self.granule_shift
    }

    /// Whether the count is exact: counted in the device's blocks.
    fn exact(&self) -> bool {
        self.granule_shift == self.block_shift
    }

    fn add(&mut self, offset_bytes: u64, len_bytes: u64) {
        if len_bytes == 0 {
            return;
        }
        let first = offset_bytes >> self.granule_shift;
        let last = offset_bytes.saturating_add(len_bytes - 1) >> self.granule_shift;
        // Sequential requests, and the pieces of a split one, extend the last extent.
        if let Some(e) = self.pending.last_mut() {
            if first <= e.1.saturating_add(1) && e.0 <= last.saturating_add(1) {
                *e = (e.0.min(first), e.1.max(last));
                return;
            }
        }
        self.pending.push((first, last));
        if self.pending.len() >= PENDING_MAX {
            self.merge();
        }
    }

    /// Merges the pending extents into the disjoint ones; past `EXTENTS_MAX`, turns them into
    /// the bitmap.
    fn merge(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = &mut self.pending;
        pending.sort_unstable();
        let merged = match &mut self.set {
            Touched::Bitmap(words) => {
                for &(first, last) in pending.iter() {
                    set_bits(words, first, last);
                }
                pending.clear();
                return;
            }
            Touched::Extents(merged) => merged,
        };
        // Merge the two sorted lists from the back, in place: no second copy of `merged`.
        let (n, m) = (merged.len(), pending.len());
        merged.reserve_exact(m);
        merged.resize(n + m, (0, 0));
        let (mut i, mut j) = (n, m);
        for k in (0..n + m).rev() {
            if j == 0 {
                break;
            }
            if i > 0 && merged[i - 1] > pending[j - 1] {
                merged[k] = merged[i - 1];
                i -= 1;
            } else {
                merged[k] = pending[j - 1];
                j -= 1;
            }
        }
        debug_assert_eq!(j, 0, "{j} pending extents left out of the merge");
        pending.clear();
        coalesce(merged);
        if merged.len() > EXTENTS_MAX {
            let extents = std::mem::take(merged);
            self.become_bitmap(&extents);
        }
    }

    /// Replaces the extents by a bitmap of the finest granule (from the block up) that keeps
    /// a bitmap of the whole device within `BITMAP_BITS_MAX` bits.
    fn become_bitmap(&mut self, extents: &[(u64, u64)]) {
        assert_eq!(
            self.granule_shift, self.block_shift,
            "the extents becoming a bitmap are counted in blocks"
        );
        let mut shift = self.block_shift;
        while shift < 63 && self.capacity_bytes.div_ceil(1 << shift) > BITMAP_BITS_MAX {
            shift += 1;
        }
        let coarser = shift - self.granule_shift;
        self.granule_shift = shift;
        let mut words = Vec::new();
        for &(first, last) in extents {
            set_bits(&mut words, first >> coarser, last >> coarser);
        }
        self.set = Touched::Bitmap(words);
    }

    /// Distinct bytes touched (an upper bound when not `exact`, never past the capacity).
    fn bytes(&mut self) -> u64 {
        self.merge();
        let granules: u128 = match &self.set {
            Touched::Extents(merged) => merged
                .iter()
                .map(|&(first, last)| u128::from(last - first) + 1)
                .sum(),
            Touched::Bitmap(words) => words.iter().map(|w| u128::from(w.count_ones())).sum(),
        };
        (granules << self.granule_shift).min(u128::from(self.capacity_bytes)) as u64
    }
}

/// Sets bits `first..=last` of `words`, growing it to hold `last` (the callers keep `last`
/// under `BITMAP_BITS_MAX`).
fn set_bits(words: &mut Vec<u64>, first: u64, last: u64) {
    debug_assert!(first <= last, "bits {first}..={last} run backwards");
    debug_assert!(
        last < BITMAP_BITS_MAX,
        "bit {last} past the bitmap's {BITMAP_BITS_MAX}"
    );
    let (fw, lw) = ((first / 64) as usize, (last / 64) as usize);
    if words.len() <= lw {
        words.resize(lw + 1, 0);
    }
    // Bits `from..=to` of one word.
    let mask = |from: u64, to: u64| (u64::MAX >> (63 - to)) & (u64::MAX << from);
    if fw == lw {
        words[fw] |= mask(first % 64, last % 64);
        return;
    }
    words[fw] |= mask(first % 64, 63);
    for w in &mut words[fw + 1..lw] {
        *w = u64::MAX;
    }
    words[lw] |= mask(0, last % 64);
}

/// Joins the overlapping and adjacent extents of a sorted list.
fn coalesce(extents: &mut Vec<(u64, u64)>) {
    let mut kept = 0;
    for i in 0..extents.len() {
        let e = extents[i];
        if kept > 0 && e.0 <= extents[kept - 1].1.saturating_add(1) {
            extents[kept - 1].1 = extents[kept - 1].1.max(e.1);
        } else {
            extents[kept] = e;
            kept += 1;
        }
    }
    extents.truncate(kept);
    debug_assert!(
        extents
            .windows(2)
            .all(|w| w[0].1.saturating_add(1) < w[1].0),
        "coalesced extents overlap or touch"
    );
}

/// A device or file the trace held requests for, and how many.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceDevice {
    /// As the trace names it (shown with control and invisible characters escaped, see
    /// `trace::shown`).
    pub name: String,
    /// Its requests in the trace (read or write).
    pub requests: u64,
}

/// Devices the report names one by one; requests of others are counted together.
pub const DEVICES_LISTED_MAX: usize = 64;

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
    /// Distinct device bytes the replayed requests touched.
    pub footprint_bytes: u64,
    /// The granule the footprint was counted in: the device's block, unless the replay
    /// scattered over too many separate ranges on a device too large for a bitmap of its
    /// blocks in 8 MiB (then `footprint_exact` is false and `footprint_bytes` an upper bound,
    /// each granule touched counted whole).
    pub footprint_granule_bytes: u64,
    /// Whether `footprint_bytes` is exact.
    pub footprint_exact: bool,
    /// The devices or files the trace held requests for, in the order they first appear (at
    /// most `DEVICES_LISTED_MAX`; empty when the format names none). Without
    /// `--trace-device`, all are laid over the one device.
    pub devices: Vec<TraceDevice>,
    /// Requests of devices past the first `DEVICES_LISTED_MAX`, not told apart.
    pub unlisted_device_requests: u64,
    /// The device or file replayed (`--trace-device`), `None`: all of them.
    pub device: Option<String>,
    /// How many times the trace is replayed, from its start each time (`--loops`); `None`:
    /// until the run stops it (`--time_based` with `--runtime`).
    pub loops: Option<u32>,
    /// Passes over the trace begun (the trace's counts above are of its first).
    pub passes: u32,
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
    /// The index in `devices` of the last device counted (most lines repeat the last).
    #[serde(skip)]
    last_device: usize,
    #[serde(skip)]
    sizes: [u64; SIZE_BOUNDS.len() + 1],
}

impl TraceReport {
    pub(crate) fn new(
        path: &str,
        format: TraceFormat,
        spec: &TraceSpec,
        capacity_bytes: u64,
        block_bytes: u32,
    ) -> TraceReport {
        let footprint = Footprint::new(capacity_bytes, block_bytes);
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
            footprint_exact: true,
            devices: Vec::new(),
            unlisted_device_requests: 0,
            device: spec.device.clone(),
            loops: Some(1),
            passes: 1,
            skipped: SkippedCounts::default(),
            fitted: Fitted::default(),
            issued_late: 0,
            stopped_early: false,
            footprint,
            last_device: 0,
            sizes: [0; SIZE_BOUNDS.len() + 1],
        }
    }

    /// The devices for a message: "8,0 (1000 requests), 8,16 (998 requests)".
    pub fn devices_described(&self) -> String {
        if self.devices.is_empty() {
            return "none named (this format names no device, or the trace held no request)"
                .to_string();
        }
        let mut text = self
            .devices
            .iter()
            .map(|d| format!("{} ({} requests)", shown(&d.name), d.requests))
            .collect::<Vec<_>>()
            .join(", ");
        if self.unlisted_device_requests > 0 {
            text += &format!(
                ", and {} requests of devices past the first {DEVICES_LISTED_MAX}",
                self.unlisted_device_requests
            );
        }
        text
    }

    /// A request of the trace's device `name` (whether or not it is replayed).
    pub(crate) fn count_device(&mut self, name: DeviceName<'_>) {
        if let Some(d) = self.devices.get_mut(self.last_device) {
            if name.is(&d.name) {
                d.requests += 1;
                return;
            }
        }
        if let Some(i) = self.devices.iter().position(|d| name.is(&d.name)) {
            self.devices[i].requests += 1;
            self.last_device = i;
        } else if self.devices.len() < DEVICES_LISTED_MAX {
            self.last_device = self.devices.len();
            self.devices.push(TraceDevice {
                name: name.to_string(),
                requests: 1,
            });
        } else {
            self.unlisted_device_requests += 1;
        }
        debug_assert!(self.devices.len() <= DEVICES_LISTED_MAX);
    }

    /// A request as the trace gave it, `elapsed_ns` after the trace's first. `Err` when the
    /// trace's bytes pass 2^64 (only a device of exabytes takes requests that large).
    pub(crate) fn count_trace(&mut self, r: &RawRequest, elapsed_ns: u64) -> Result<(), String> {
        let (count, total) = match r.op {
            Direction::Read => (&mut self.reads, &mut self.read_bytes),
            Direction::Write => (&mut self.writes, &mut self.write_bytes),
        };
        *total = total.checked_add(r.len_bytes).ok_or_else(|| {
            format!(
                "the trace's {} bytes pass 2^64 (16 EiB) with this request",
                if r.op == Direction::Read {
                    "read"
                } else {
                    "written"
                }
            )
        })?;
        *count += 1;
        self.requests += 1;
        let bucket = SIZE_BOUNDS
            .iter()
            .position(|&b| r.len_bytes <= b)
            .unwrap_or(SIZE_BOUNDS.len());
        self.sizes[bucket] += 1;
        self.duration_ns = self.duration_ns.max(elapsed_ns);
        Ok(())
    }

    /// A request handed to the device.
    pub(crate) fn count_replayed(&mut self, r: &Request) {
        self.replayed += 1;
        self.footprint.add(r.offset_bytes, u64::from(r.len_bytes));
    }

    pub(crate) fn finish(&mut self) {
        assert_eq!(
            self.reads + self.writes,
            self.requests,
            "reads and writes do not add up to the requests"
        );
        assert_eq!(
            self.sizes.iter().sum::<u64>(),
            self.requests,
            "the size histogram does not count every request"
        );
        self.read_fraction = if self.requests == 0 {
            0.0
        } else {
            self.reads as f64 / self.requests as f64
        };
        self.footprint_bytes = self.footprint.bytes();
        self.footprint_granule_bytes = self.footprint.granule_bytes();
        self.footprint_exact = self.footprint.exact();
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

    /// Adds `extents` (offset, length) to a footprint of a 1 TiB device of 512-byte blocks and
    /// checks the bytes counted, whether exact, and the granule.
    fn check(extents: &[(u64, u64)], bytes: u64, exact: bool, granule_bytes: u64) {
        let mut f = Footprint::new(1 << 40, 512);
        for &(offset, len) in extents {
            f.add(offset, len);
        }
        assert_eq!(
            (f.bytes(), f.exact(), f.granule_bytes()),
            (bytes, exact, granule_bytes),
            "{extents:?}"
        );
    }

    #[test]
    fn the_footprint_counts_each_block_once_exactly() {
        check(&[], 0, true, 512);
        check(&[(0, 512), (0, 512), (512, 512)], 1024, true, 512);
        // Out of order, overlapping, adjacent, apart.
        check(
            &[(8192, 4096), (0, 512), (4096, 8192), (1 << 30, 512)],
            512 + (12_288 - 4096) + 512,
            true,
            512,
        );
        // The case: 512-byte requests 64 KiB apart count 512 bytes each, not 64 KiB.
        let apart: Vec<(u64, u64)> = (0..2000).map(|i| (i << 16, 512)).collect();
        check(&apart, 2000 * 512, true, 512);
        // Far more requests than one merge holds, each its own extent, still exact.
        let many: Vec<(u64, u64)> = (0..(3 * PENDING_MAX as u64))
            .rev()
            .map(|i| (i * 4096, 512))
            .collect();
        check(&many, 3 * PENDING_MAX as u64 * 512, true, 512);
        // A request ending at the last byte of the address space.
        let mut top = Footprint::new(u64::MAX, 512);
        top.add(u64::MAX - 511, 512);
        assert_eq!(top.bytes(), 512);
    }

    /// Scatters `n` 512-byte requests 4 KiB apart over a device of `capacity_bytes` with
    /// 512-byte blocks; the footprint's bytes, whether exact, and its granule.
    fn scattered(capacity_bytes: u64, n: u64) -> (u64, bool, u64) {
        let mut f = Footprint::new(capacity_bytes, 512);
        for i in 0..n {
            // In a scrambled order (an odd multiplier, a permutation when `n` is a power of
            // two or prime to it), so no two neighbours arrive together.
            let at = (i * 0x9e37_79b9) % n;
            f.add(at * 4096, 512);
        }
        let bytes = f.bytes();
        if let Touched::Extents(merged) = &f.set {
            assert!(merged.len() <= EXTENTS_MAX, "{}", merged.len());
            assert!(merged.capacity() <= EXTENTS_MAX + PENDING_MAX);
        }
        (bytes, f.exact(), f.granule_bytes())
    }

    #[test]
    fn too_many_extents_become_a_bitmap_exact_on_a_device_of_few_blocks() {
        let n = 2 * EXTENTS_MAX as u64;
        // 16 GiB of 512-byte blocks: 2^25 bits, exact.
        assert_eq!(scattered(16 << 30, n), (n * 512, true, 512));
        // 1 PiB: a bit per 16 MiB granule, an upper bound that says so; never past the device.
        let (bytes, exact, granule) = scattered(1 << 50, n);
        assert_eq!((exact, granule), (false, 16 << 20));
        assert!(bytes >= n * 512, "{bytes}");
        assert_eq!(bytes, (n * 4096).div_ceil(granule) * granule);
        // Few extents stay exact on any device.
        assert_eq!(scattered(u64::MAX, 1000), (1000 * 512, true, 512));
    }

    #[test]
    fn bits_are_set_across_word_boundaries() {
        // (first, last) -> the words.
        let cases: [((u64, u64), Vec<u64>); 4] = [
            ((0, 0), vec![1]),
            ((63, 64), vec![1 << 63, 1]),
            ((1, 130), vec![u64::MAX - 1, u64::MAX, 0b111]),
            ((64, 127), vec![0, u64::MAX]),
        ];
        for ((first, last), words) in cases {
            let mut w = Vec::new();
            set_bits(&mut w, first, last);
            assert_eq!(w, words, "{first}..={last}");
        }
    }
}
