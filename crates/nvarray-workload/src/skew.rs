//! Offsets of fio's `zipf`, `pareto`, `normal` and `zoned` / `zoned_abs` distributions, as
//! block indices (multiples of the job's `blockalign`) over a region.
//!
//! `zipf`, `pareto` and `normal` are fio's own, draw for draw (`fio_rand.rs` for why): a rank drawn
//! from a [`Taus88`] stream, scattered by fio's golden-ratio hash and shifted by the stream's
//! first draw (or the `center`), modulo the region's ranges. `zoned` splits the region as
//! fio does (integer percent arithmetic on the region's blocks) and draws with the job's own
//! generator: its histogram is the zone table's whatever the generator, so it matches fio's
//! bucket by bucket without fio's seeds.

use rand::rngs::SmallRng;
use rand::RngCore;

use crate::fio_rand::{scatter, Taus88};
use crate::spec::ZoneSplit;

/// fio's `FRAND32_MAX`: pareto and zipf divide by it, not by 2^32.
const FRAND32_MAX: f64 = 4_294_967_295.0;

/// A skewed offset stream as fio draws it.
#[derive(Clone, Debug)]
pub(crate) struct FioSkew {
    taus: Taus88,
    /// Ranges of the region (fio's `nranges`: region / smallest request, rounded up).
    ranges: u64,
    /// Added to every scattered rank (the stream's first draw, or `ranges x center`).
    offset: u64,
    kind: Kind,
}

/// fio's `ZIPF_MAX_GEN`: `zetan` sums at most this many terms (fio 3.33, lib/zipf.c: "just
/// cap it at 10M max ... precision will take a slight hit").
const ZIPF_TERMS_MAX: u64 = 10_000_000;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `zipf:theta`: Gray et al.'s approximation ("Quickly generating billion-record
    /// synthetic databases", SIGMOD 1994), as fio's `zipf_next` computes it.
    Zipf {
        theta: f64,
        /// `1 / (1 - theta)`.
        alpha: f64,
        /// The first `ZIPF_TERMS_MAX` terms of `sum 1/k^theta` (fio's `zetan`).
        zetan: f64,
        /// fio's `eta`, from `zeta2 = 1 + 0.5^theta` and `zetan`.
        eta: f64,
    },
    /// `pareto:h`: `pow` of a uniform draw by `ln h / ln(1 - h)`.
    Pareto { power: f64 },
    /// `normal:dev`: the mean of 12 uniform draws, plus a uniform jitter of `stddev` ranges.
    Normal { stddev: u64 },
}

impl FioSkew {
    /// `zipf:theta[:center]` over `ranges` ranges, seeded with `seed`. `theta` is not 1
    /// (fio refuses it: its `alpha` divides by `1 - theta`).
    pub(crate) fn zipf(ranges: u64, theta: f64, center: Option<f64>, seed: u64) -> FioSkew {
        assert!(ranges >= 1, "zipf over no ranges");
        assert!(theta > 0.0 && theta != 1.0, "zipf theta {theta}");
        let mut taus = Taus88::new(seed);
        let first = u64::from(taus.next_u32());
        // fio sums in this order, from the largest term: the same rounding.
        let zetan: f64 = (0..ranges.min(ZIPF_TERMS_MAX))
            .map(|i| (1.0 / (i + 1) as f64).powf(theta))
            .sum();
        let zeta2 = 1.0f64.powf(theta) + 0.5f64.powf(theta);
        let eta = (1.0 - (2.0 / ranges as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        FioSkew {
            taus,
            ranges,
            offset: center.map_or(first, |c| (ranges as f64 * c) as u64),
            kind: Kind::Zipf {
                theta,
                alpha: 1.0 / (1.0 - theta),
                zetan,
                eta,
            },
        }
    }

    /// `pareto:h[:center]` over `ranges` ranges, seeded with `seed`.
    pub(crate) fn pareto(ranges: u64, h: f64, center: Option<f64>, seed: u64) -> FioSkew {
        assert!(ranges >= 1, "pareto over no ranges");
        let mut taus = Taus88::new(seed);
        let first = u64::from(taus.next_u32());
        FioSkew {
            taus,
            ranges,
            offset: center.map_or(first, |c| (ranges as f64 * c) as u64),
            kind: Kind::Pareto {
                power: h.ln() / (1.0 - h).ln(),
            },
        }
    }

    /// `normal:dev[:center]` (`dev` a percentage of the ranges) over `ranges` ranges.
    pub(crate) fn normal(ranges: u64, dev_percent: f64, center: Option<f64>, seed: u64) -> FioSkew {
        assert!(ranges >= 1, "normal over no ranges");
        let stddev = if dev_percent == 0.0 {
            0
        } else {
            ((ranges as f64 * dev_percent / 100.0).ceil() as u64).min(ranges / 2)
        };
        FioSkew {
            taus: Taus88::new(seed),
            ranges,
            // fio converts a negative shift through a 32-bit integer, as x86 does here.
            offset: center.map_or(0, |c| u64::from((ranges as f64 * (c - 0.5)) as i64 as u32)),
            kind: Kind::Normal { stddev },
        }
    }

    /// The next range index, `0..ranges`.
    #[inline]
    pub(crate) fn next_range(&mut self) -> u64 {
        let n = self.ranges;
        let rank = match self.kind {
            Kind::Zipf {
                theta,
                alpha,
                zetan,
                eta,
            } => {
                let u = f64::from(self.taus.next_u32()) / FRAND32_MAX;
                let z = u * zetan;
                let value = if z < 1.0 {
                    1
                } else if z < 1.0 + 0.5f64.powf(theta) {
                    2
                } else {
                    1 + (n as f64 * (eta * u - eta + 1.0).powf(alpha)) as u64
                };
                value - 1
            }
            Kind::Pareto { power } => {
                let u = f64::from(self.taus.next_u32()) / FRAND32_MAX;
                ((n - 1) as f64 * u.powf(power)) as u64
            }
            Kind::Normal { stddev } => {
                let mut sum = 0u64;
                for _ in 0..12 {
                    sum += u64::from(self.taus.next_u32()) % (n + 1);
                }
                let mut value = sum.div_ceil(12);
                if stddev > 0 {
                    let draw = f64::from(self.taus.next_u32()) / 4_294_967_296.0;
                    let mut delta = (stddev as f64 * draw) as i64 - (stddev / 2) as i64;
                    while value.wrapping_add_signed(delta) >= n {
                        delta /= 2;
                    }
                    value = value.wrapping_add_signed(delta);
                }
                value
            }
        };
        scatter(rank).wrapping_add(self.offset) % n
    }
}

/// fio's zone table: for each access percent, the zone's first block and block count.
#[derive(Clone, Debug)]
pub(crate) struct ZoneTable {
    by_percent: Box<[(u64, u64); 100]>,
}

impl ZoneTable {
    /// The table of `split` over a region of `blocks` blocks of `align_bytes`, or why it does
    /// not fit (a `zoned_abs` zone past the region's end, which fio finds at its first draw
    /// there and ends the job with).
    pub(crate) fn new(
        split: &ZoneSplit,
        blocks: u64,
        align_bytes: u64,
    ) -> Result<ZoneTable, String> {
        assert!(align_bytes > 0, "zones of blocks of 0 bytes");
        let mut by_percent = Box::new([(0u64, 0u64); 100]);
        let mut percent = 0usize;
        let mut start = 0u64; // percent of the region (zoned) or bytes (zoned_abs)
        for &(access, size) in &split.zones {
            let end = start + size;
            let (first, count) = if split.absolute {
                let (first, last) = (start / align_bytes, end / align_bytes);
                if last > blocks {
                    return Err(format!(
                        "zoned_abs zones end at {end} bytes, past the job's region of {} bytes",
                        blocks * align_bytes
                    ));
                }
                (first, last - first)
            } else {
                // fio's integer arithmetic on percents of the region's blocks.
                (start * blocks / 100, blocks * (end - start) / 100)
            };
            let access = usize::from(access);
            by_percent[percent..percent + access].fill((first, count));
            percent += access;
            start = end;
        }
        debug_assert_eq!(
            percent, 100,
            "access percentages sum to 100 (checked when parsed)"
        );
        Ok(ZoneTable { by_percent })
    }

    /// The next block: a zone by its access percent, then a block inside it.
    #[inline]
    pub(crate) fn next_block(&self, rng: &mut SmallRng) -> u64 {
        let (first, count) = self.by_percent[below(rng.next_u64(), 100) as usize];
        first + below(rng.next_u64(), count)
    }
}

/// `bits` mapped to `0..n` by multiply-shift (0 when `n` is 0).
#[inline]
fn below(bits: u64, n: u64) -> u64 {
    ((u128::from(bits) * u128::from(n)) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn zones_take_their_share_of_draws_and_of_the_region() {
        // 50 % of draws in the first 5 %, 30 % in the next 15 %, 20 % in the remaining 80 %.
        let split = ZoneSplit {
            absolute: false,
            zones: vec![(50, 5), (30, 15), (20, 80)],
        };
        let table = ZoneTable::new(&split, 1000, 4096).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut hits = [0u32; 3];
        for _ in 0..100_000 {
            let b = table.next_block(&mut rng);
            assert!(b < 1000);
            hits[match b {
                0..=49 => 0,
                50..=199 => 1,
                _ => 2,
            }] += 1;
        }
        for (got, want) in hits.iter().zip([50_000, 30_000, 20_000]) {
            assert!((*got as i64 - want).abs() < 1_000, "{hits:?}");
        }
    }

    #[test]
    fn an_absolute_zone_past_the_region_is_refused() {
        let split = ZoneSplit {
            absolute: true,
            zones: vec![(100, 8 << 20)],
        };
        let e = ZoneTable::new(&split, 1024, 4096).unwrap_err();
        assert!(e.contains("past the job's region"), "{e}");
        assert!(ZoneTable::new(&split, 2048, 4096).is_ok());
    }

    #[test]
    fn skewed_ranges_stay_in_range_and_concentrate() {
        let mut p = FioSkew::pareto(1 << 16, 0.2, None, 12345);
        let mut n = FioSkew::normal(1 << 16, 5.0, Some(0.2), 12345);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let r = p.next_range();
            assert!(r < 1 << 16);
            *counts.entry(r).or_insert(0u32) += 1;
            assert!(n.next_range() < 1 << 16);
        }
        // pareto:0.2 gives its hottest range a fifth of the draws or so.
        let hottest = counts.values().max().unwrap();
        assert!(*hottest > 10_000, "{hottest}");
    }
}
