//! Zipf ranks by rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to
//! generate variates from monotone discrete distributions", ACM TOMACS 6(3), 1996), in the
//! formulation of Apache Commons RNG's `RejectionInversionZipfSampler`.
//!
//! `rand_distr::Zipf` 0.4 was measured first: 170-200 ns per sample for theta in 0.8..1.2,
//! on any number of blocks, which alone is twice the simulator's whole per-request budget.
//! This sampler needs one `log1p` and one `exp` for most samples and no table, so it costs
//! tens of nanoseconds and constant memory whatever the region size.
//!
//! Notation: `h(x) = x^-theta` is the unnormalised probability of rank `x`, and
//! `H(x) = (x^(1-theta) - 1) / (1 - theta)` an antiderivative of it (`ln x` when theta is 1).
//! A uniform draw between `H(1.5) - h(1)` and `H(n + 0.5)` is inverted through `H` and rounded
//! to a rank `k`; `k` is accepted when the draw falls inside the part of `k`'s column that
//! `h(k)` covers. That holds for almost every draw, and the cheap `squeeze` test decides most
//! of them without evaluating `H` again.

use rand::rngs::SmallRng;
use rand::RngCore;

/// Draws before a sample gives up and returns its last candidate.
///
/// Each draw is accepted with probability well above one half for every theta, so reaching
/// this bound has probability below 2^-64; it exists so that a numerical surprise (a NaN)
/// cannot hang the simulator.
const DRAWS_MAX: u32 = 64;

/// Samples ranks `1..=n` with probability proportional to `1 / rank^theta`. `new` panics on
/// `n == 0` or `theta <= 0`: validate before.
#[derive(Clone, Copy, Debug)]
pub struct ZipfSampler {
    n: u64,
    theta: f64,
    /// `H(1.5) - h(1)`: the low end of the uniform draw.
    h_integral_x1: f64,
    /// `H(n + 0.5)`: the high end of the uniform draw.
    h_integral_n: f64,
    /// Candidates with `k - x <= squeeze` are accepted without evaluating `H(k + 0.5)`.
    squeeze: f64,
}

impl ZipfSampler {
    /// A sampler over `1..=n`; `n >= 1` and `theta > 0` (checked by the caller's validation).
    pub fn new(n: u64, theta: f64) -> Self {
        assert!(n >= 1);
        assert!(theta > 0.0);
        let mut sampler = ZipfSampler {
            n,
            theta,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        sampler.h_integral_x1 = sampler.h_integral(1.5) - 1.0;
        sampler.h_integral_n = sampler.h_integral(n as f64 + 0.5);
        sampler.squeeze =
            2.0 - sampler.h_integral_inverse(sampler.h_integral(2.5) - sampler.h(2.0));
        // The uniform draw's interval is not empty: `H` increases and `h(1)` is 1.
        assert!(
            sampler.h_integral_x1 < sampler.h_integral_n,
            "zipf over {n} ranks with theta {theta}: an empty draw interval"
        );
        sampler
    }

    /// A rank in `1..=n`; rank 1 is the most likely.
    #[inline]
    pub fn sample(&self, rng: &mut SmallRng) -> u64 {
        let mut k = 1;
        for _ in 0..DRAWS_MAX {
            // 53 random bits as a float in [0, 1).
            let unit = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            // u is uniform in (h_integral_x1, h_integral_n].
            let u = self.h_integral_n + unit * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            // `as` saturates and maps NaN to 0, which the clamp turns into rank 1.
            k = ((x + 0.5) as u64).clamp(1, self.n);
            let k_f64 = k as f64;
            if k_f64 - x <= self.squeeze || u >= self.h_integral(k_f64 + 0.5) - self.h(k_f64) {
                return k;
            }
        }
        k
    }

    /// `H(x)`, written through `expm1` so it stays accurate as theta approaches 1.
    #[inline]
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.theta) * log_x) * log_x
    }

    /// `h(x) = x^-theta`.
    #[inline]
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// The inverse of `H`, written through `log1p` for the same reason.
    #[inline]
    fn h_integral_inverse(&self, x: f64) -> f64 {
        // Rounding can push t just below -1, outside the domain of log1p.
        let t = (x * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `log1p(x) / x`, with its Taylor series near 0 where the division loses precision.
#[inline]
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `expm1(x) / x`, with its Taylor series near 0.
#[inline]
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// Compares sampled rank frequencies with the exact probabilities `k^-theta / sum`.
    ///
    /// Checks the first ranks one by one and the rest in a handful of buckets, each within
    /// five standard deviations of its binomial count plus a small absolute slack, so the
    /// test fails on a wrong distribution and not on noise.
    fn check_distribution(n: u64, theta: f64) {
        let samples = 400_000u64;
        let sampler = ZipfSampler::new(n, theta);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut counts = vec![0u64; n as usize + 1];
        for _ in 0..samples {
            let k = sampler.sample(&mut rng);
            assert!((1..=n).contains(&k), "rank {k} outside 1..={n}");
            counts[k as usize] += 1;
        }
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-theta)).collect();
        let total: f64 = weights.iter().sum();
        // Buckets: ranks 1..=10 alone, then the rest of the ranks split into 4 ranges.
        let mut buckets: Vec<(u64, u64)> = (1..=10.min(n)).map(|k| (k, k)).collect();
        if n > 10 {
            let rest = n - 10;
            for i in 0..4 {
                let lo = 11 + rest * i / 4;
                let hi = 10 + rest * (i + 1) / 4;
                if lo <= hi {
                    buckets.push((lo, hi));
                }
            }
        }
        for (lo, hi) in buckets {
            let p: f64 = weights[(lo - 1) as usize..hi as usize].iter().sum::<f64>() / total;
            let expected = p * samples as f64;
            let observed: u64 = counts[lo as usize..=hi as usize].iter().sum();
            let tolerance = 5.0 * (samples as f64 * p * (1.0 - p)).sqrt() + 5.0;
            assert!(
                (observed as f64 - expected).abs() <= tolerance,
                "n={n} theta={theta} ranks {lo}..={hi}: observed {observed}, expected \
                 {expected:.0} +- {tolerance:.0}"
            );
        }
    }

    #[test]
    fn matches_the_exact_distribution() {
        for theta in [0.01, 0.5, 0.8, 0.99, 1.0, 1.0 + 1e-9, 1.2, 2.0, 5.0] {
            for n in [1, 2, 3, 10, 1000] {
                check_distribution(n, theta);
            }
        }
    }

    #[test]
    fn extreme_parameters_stay_in_range() {
        let mut rng = SmallRng::seed_from_u64(3);
        for (n, theta) in [
            (1u64 << 40, 0.01),
            (1 << 40, 1.0),
            (u64::MAX, 1.2),
            (1 << 30, 100.0),
        ] {
            let sampler = ZipfSampler::new(n, theta);
            for _ in 0..10_000 {
                let k = sampler.sample(&mut rng);
                assert!((1..=n).contains(&k), "n={n} theta={theta}: rank {k}");
            }
        }
        let sampler = ZipfSampler::new(1 << 30, 100.0);
        assert!((0..1000).all(|_| sampler.sample(&mut rng) == 1));
    }
}
