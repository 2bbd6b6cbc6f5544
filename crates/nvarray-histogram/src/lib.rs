//! Latency histograms of nanoseconds for the hot paths: a record is an index computation and
//! one increment, and every question is answered by an `hdrhistogram::Histogram` built from
//! the counts when asked, with the same answers as one that recorded every value itself.
//!
//! Why not record into `hdrhistogram` directly: its `record` also keeps the least and greatest
//! value, the total count and an auto-resize check, 60 to 70 instructions a value, and the
//! emulator records two or three values per request (its latency, its completion's lateness,
//! a timed request's issue delay; 2,400 instructions per request in all, issue 38). Here the
//! counts are laid out exactly as `hdrhistogram`'s are for the same bounds (1 ns to one hour,
//! 3 significant digits), so building the `Histogram` is a `record_n` per bucket in use, and
//! every percentile, minimum, maximum and mean it gives is the one direct recording gives (a
//! property test checks it).

use hdrhistogram::Histogram;

/// The histogram's highest trackable value: one hour. Its counts reach on to the end of the
/// bucket that holds it (2^42 ns, about 73 minutes); a value past those counts as this one (a
/// saturating record, as `Histogram::saturating_record`).
pub const HIGHEST_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits kept.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// `hdrhistogram`'s layout for lowest 1, `SIGNIFICANT_DIGITS` 3: 2 * 10^3 values need 2^11
/// sub-buckets, half of them per bucket after the first; the unit is 1 ns (magnitude 0).
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 10;
const SUB_BUCKET_HALF_COUNT: u64 = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (1 << (SUB_BUCKET_HALF_MAGNITUDE + 1)) - 1;
const LEADING_ZERO_BASE: u32 = u64::BITS - SUB_BUCKET_HALF_MAGNITUDE - 1;
/// Counts kept: every sub-bucket of the buckets up to the one that holds `HIGHEST_NS`, as
/// `hdrhistogram` allocates them (`buckets_to_cover` plus one half bucket).
const COUNTS: usize = ((buckets_to_cover(HIGHEST_NS) + 1) << SUB_BUCKET_HALF_MAGNITUDE) as usize;
// A value past the counts is recorded at `HIGHEST_NS`'s index, which must be one of them.
const _: () = assert!(index_of(HIGHEST_NS) < COUNTS);

/// Buckets needed so that the last one holds `highest`: the first covers 0 to 2^11 - 1, each
/// next one twice the range.
const fn buckets_to_cover(highest: u64) -> u64 {
    let mut untrackable = SUB_BUCKET_MASK + 1;
    let mut buckets = 1;
    while untrackable <= highest {
        untrackable <<= 1;
        buckets += 1;
    }
    buckets
}

/// The count a value goes to (`hdrhistogram`'s `index_for`, with unit magnitude 0).
#[inline(always)]
const fn index_of(value: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (value | SUB_BUCKET_MASK).leading_zeros();
    let sub_bucket = value >> bucket;
    (((bucket as u64 + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub_bucket - SUB_BUCKET_HALF_COUNT)
        as usize
}

/// The least value whose count is `index` (the inverse of `index_of` on a bucket's least).
fn value_of(index: usize) -> u64 {
    let index = index as u64;
    let bucket = (index >> SUB_BUCKET_HALF_MAGNITUDE) as i64 - 1;
    let sub_bucket = (index & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
    let value = if bucket < 0 {
        sub_bucket - SUB_BUCKET_HALF_COUNT
    } else {
        sub_bucket << bucket
    };
    debug_assert_eq!(
        index_of(value),
        index as usize,
        "value_of({index}) = {value} is not in that count"
    );
    value
}

/// A histogram of nanoseconds, 0 to `HIGHEST_NS` at 3 significant digits.
#[derive(Clone, PartialEq, Eq)]
pub struct NsHistogram {
    counts: Box<[u64]>,
    len: u64,
}

impl Default for NsHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for NsHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NsHistogram")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl NsHistogram {
    pub fn new() -> Self {
        NsHistogram {
            counts: vec![0; COUNTS].into_boxed_slice(),
            len: 0,
        }
    }

    /// Counts `value` (past the counts: as `HIGHEST_NS`).
    #[inline]
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// Counts `value` `n` times.
    #[inline]
    pub fn record_n(&mut self, value: u64, n: u64) {
        let index = index_of(value);
        let index = if index < COUNTS {
            index
        } else {
            index_of(HIGHEST_NS)
        };
        self.counts[index] += n;
        self.len += n;
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &NsHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.len += other.len;
    }

    /// `shifted_quantile` at each of `qs` (values recorded plus 1, kept inside `[min, max]`),
    /// from one `to_histogram`; 0s when empty.
    pub fn shifted_quantiles<const N: usize>(&self, qs: [f64; N], min: u64, max: u64) -> [u64; N] {
        if self.is_empty() {
            return [0; N];
        }
        let h = self.to_histogram();
        qs.map(|q| shifted_quantile(&h, q, min, max))
    }

    /// The `hdrhistogram::Histogram` that recorded the same values (bounds 1 to `HIGHEST_NS`,
    /// 3 significant digits): its answers are the ones to report.
    pub fn to_histogram(&self) -> Histogram<u64> {
        let mut h = empty_histogram();
        for (index, &count) in self.counts.iter().enumerate() {
            if count > 0 {
                h.record_n(value_of(index), count)
                    .expect("a value inside the histogram's bounds");
            }
        }
        assert_eq!(
            h.len(),
            self.len,
            "the built histogram holds another number of values than were recorded"
        );
        h
    }
}

/// For a histogram that recorded each value plus 1 (so that 0 has a bucket of its own, the
/// least value a histogram takes being 1): the value at quantile `q`, kept inside the exact
/// least and greatest values recorded, `[min, max]` (a histogram answers with the top of a
/// value's bucket). `h` must not be empty.
pub fn shifted_quantile(h: &Histogram<u64>, q: f64, min: u64, max: u64) -> u64 {
    assert!(!h.is_empty(), "shifted_quantile of an empty histogram");
    (h.value_at_quantile(q) - 1).clamp(min, max)
}

/// An empty `hdrhistogram::Histogram` with `NsHistogram`'s bounds.
pub fn empty_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS).expect("valid bounds")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Count, least, greatest, (value, count) of every bucket in use, quantiles, mean and
    /// standard deviation.
    type Answers = (u64, u64, u64, Vec<(u64, u64)>, Vec<u64>, String);

    /// Everything a report asks a histogram, from one that recorded directly and one built.
    fn answers(h: &Histogram<u64>) -> Answers {
        let quantiles = [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0]
            .iter()
            .map(|&q| h.value_at_quantile(q))
            .collect();
        let recorded = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        (
            h.len(),
            h.min_nz(),
            h.max(),
            recorded,
            quantiles,
            format!("{:.6} {:.6}", h.mean(), h.stdev()),
        )
    }

    fn check(values: &[u64]) {
        let mut direct = empty_histogram();
        let mut fast = NsHistogram::new();
        for &v in values {
            direct.saturating_record(v);
            fast.record(v);
        }
        assert_eq!(fast.len(), values.len() as u64);
        assert_eq!(
            answers(&fast.to_histogram()),
            answers(&direct),
            "{values:?}"
        );
    }

    #[test]
    fn the_layout_is_hdrhistograms() {
        assert_eq!(COUNTS, 33 * 1024, "32 buckets reach past one hour");
        // The first bucket holds 0 to 2,047 one by one; the next ones halve their precision.
        for v in [
            0, 1, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, HIGHEST_NS,
        ] {
            assert_eq!(
                value_of(index_of(v)),
                empty_histogram().lowest_equivalent(v),
                "{v}"
            );
        }
    }

    #[test]
    fn edges_answer_as_hdrhistogram() {
        check(&[]);
        check(&[0]);
        check(&[1]);
        check(&[HIGHEST_NS]);
        check(&[HIGHEST_NS + 1, u64::MAX, 5]);
        let top = (SUB_BUCKET_MASK + 1) << 31;
        check(&[top - 1, top, top + 1, HIGHEST_NS - 1]);
        check(&[2047, 2048, 2049, 4095, 4096, 1 << 40]);
    }

    proptest! {
        #[test]
        fn any_values_answer_as_hdrhistogram(
            small in proptest::collection::vec(0u64..10_000, 0..200),
            large in proptest::collection::vec(0u64..=HIGHEST_NS + 10, 0..200),
            shifts in proptest::collection::vec((1u64..1_000, 0u32..43), 0..200),
        ) {
            let mut values = small;
            values.extend(large);
            values.extend(shifts.into_iter().map(|(v, s)| v << s));
            check(&values);
        }

        #[test]
        fn adding_is_recording_both(
            a in proptest::collection::vec(0u64..=HIGHEST_NS, 0..100),
            b in proptest::collection::vec(0u64..=HIGHEST_NS, 0..100),
        ) {
            let (mut x, mut y, mut both) = (NsHistogram::new(), NsHistogram::new(), NsHistogram::new());
            a.iter().for_each(|&v| { x.record(v); both.record(v) });
            b.iter().for_each(|&v| { y.record(v); both.record_n(v, 1) });
            x.add(&y);
            prop_assert!(x == both);
        }
    }
}
