//! Published closed forms for write amplification, which the FTL's measured write
//! amplification is checked against.
//!
//! Throughout, `alpha` (α) is the ratio of physical to logical pages, `T / U` with `T`
//! physical and `U` logical pages, so α > 1 whenever there is any spare area. Traffic is
//! uniform random single-page overwrites of a full logical space unless a function says
//! otherwise. All results count flash page programs per host page write (so 1.0 means no
//! garbage-collection copies at all).
//!
//! nvarray states over-provisioning as `(physical - logical) / logical` ([`over_provisioning_of`])
//! and prints the spare factor `(physical - logical) / physical` ([`spare_factor_of`]) beside
//! it; the papers cited below mostly use α or the spare factor.

use std::f64::consts::E;

/// The branch point of the Lambert W function, `-1/e`.
const BRANCH_POINT: f64 = -1.0 / E;

/// Arguments this far below `-1/e` are taken as rounding error and clamped to the branch
/// point; anything further below is outside the function's domain.
const BRANCH_TOLERANCE: f64 = 1e-15;

/// Below this argument the initial guess comes from the series about the branch point.
const SERIES_LIMIT: f64 = -0.3;

/// Halley iterations stop once a step is this small relative to the iterate (4 ulp).
const HALLEY_TOLERANCE: f64 = 4.0 * f64::EPSILON;

/// A cap on Halley iterations; from the initial guesses used here 3 or 4 suffice.
const HALLEY_MAX_ITERATIONS: usize = 64;

/// How far the traffic-class fractions may be from summing to 1.
const FRACTION_SUM_TOLERANCE: f64 = 1e-9;

/// A cap on bisection steps; halving down to adjacent floats takes far fewer.
const BISECTION_MAX_ITERATIONS: usize = 400;

/// The principal branch `W₀` of the Lambert W function: the `w >= -1` with `w·e^w = x`,
/// defined for `x` in `[-1/e, +inf)`.
///
/// The initial guess is the series about the branch point,
/// `w ≈ -1 + p - p²/3 + 11p³/72 - 43p⁴/540` with `p = sqrt(2(e·x + 1))`, for
/// `x < -0.3`; `ln(1 + x)` for `-0.3 <= x < e`; and `ln x - ln ln x` for `x >= e`. It is
/// then refined by Halley's method (cubically convergent) to about 1e-15 relative: on
/// `f(w) = w·e^w - x` for `x < e`, and on the overflow-free `f(w) = w + ln w - ln x` for
/// `x >= e`. Iteration stops when a step is below 4 ulp of the iterate or stops shrinking
/// (near `-1/e` the function is ill-conditioned and the last steps are rounding noise).
///
/// Reference: R. M. Corless, G. H. Gonnet, D. E. G. Hare, D. J. Jeffrey and D. E. Knuth,
/// "On the Lambert W function", Advances in Computational Mathematics 5 (1996), 329–359
/// (the series about the branch point is theirs).
///
/// `W₀(-1/e) = -1`, `W₀(0) = 0`, `W₀(e) = 1`, `W₀(+inf) = +inf`.
///
/// # Panics
///
/// If `x` is NaN or below `-1/e` by more than `1e-15`. Arguments within `1e-15` below
/// `-1/e` are clamped to `-1/e` (and give `-1`).
pub fn lambert_w0(x: f64) -> f64 {
    assert!(
        x >= BRANCH_POINT - BRANCH_TOLERANCE,
        "lambert_w0: x = {x} is outside the principal branch's domain [-1/e, +inf) \
         (-1/e = {BRANCH_POINT})"
    );
    if x <= BRANCH_POINT {
        return -1.0;
    }
    if x == 0.0 || x == f64::INFINITY {
        return x;
    }
    if x >= E {
        return halley_on_log_form(x);
    }
    let guess = if x < SERIES_LIMIT {
        // e·x + 1 with one rounding; it is the small quantity the series is in.
        let distance = E.mul_add(x, 1.0);
        if distance <= 0.0 {
            return -1.0;
        }
        let p = (2.0 * distance).sqrt();
        -1.0 + p * (1.0 + p * (-1.0 / 3.0 + p * (11.0 / 72.0 - p * (43.0 / 540.0))))
    } else {
        x.ln_1p()
    };
    halley_on_product_form(x, guess)
}

/// Halley's method on `f(w) = w·e^w - x`, with `f' = e^w (w + 1)` and
/// `f'' = e^w (w + 2)`, from `w`; for `-1/e < x < e`.
fn halley_on_product_form(x: f64, w: f64) -> f64 {
    let w = halley(w, |w| {
        let w_plus_1 = w + 1.0;
        if w_plus_1 <= 0.0 {
            // Only reachable within rounding of the branch point.
            return None;
        }
        let ew = w.exp();
        let f = w * ew - x;
        Some(f / (ew * w_plus_1 - (w + 2.0) * f / (2.0 * w_plus_1)))
    });
    w.unwrap_or(-1.0)
}

/// Halley's method on `g(w) = w + ln w - ln x`, with `g' = 1 + 1/w` and `g'' = -1/w²`; for
/// `x >= e`, where `w >= 1` and `w·e^w` could overflow near `f64::MAX`.
fn halley_on_log_form(x: f64) -> f64 {
    let ln_x = x.ln();
    let w = halley(ln_x - ln_x.ln(), |w| {
        let g = w + w.ln() - ln_x;
        let g1 = 1.0 + 1.0 / w;
        let g2 = -1.0 / (w * w);
        Some(g / (g1 - g * g2 / (2.0 * g1)))
    });
    w.expect("the log form never leaves its domain")
}

/// Steps `w` by `step(w)` until the step is within `HALLEY_TOLERANCE` of `w`, stops
/// shrinking (rounding noise), or `HALLEY_MAX_ITERATIONS` pass; `None` if `step` says the
/// iteration left its domain.
fn halley(mut w: f64, step: impl Fn(f64) -> Option<f64>) -> Option<f64> {
    let mut previous_step = f64::INFINITY;
    for _ in 0..HALLEY_MAX_ITERATIONS {
        let s = step(w)?;
        if s.is_nan() || s.abs() >= previous_step {
            break;
        }
        w -= s;
        previous_step = s.abs();
        if previous_step <= HALLEY_TOLERANCE * w.abs() {
            break;
        }
    }
    Some(w)
}

/// Write amplification of FIFO (equivalently LRU) victim selection under uniform random
/// single-page writes, at `alpha` = physical pages / logical pages:
///
/// `A = α / (α + W₀(-α·e^(-α)))`.
///
/// Why: FIFO erases the oldest block, whose pages were all written one full log cycle ago;
/// a fraction `v` of them is still valid and must be copied, so `A = 1 / (1 - v)`. Solving
/// the mean-field balance gives `x = α(1 - v)` as the nonzero root of `α(1 - e^(-x)) = x`,
/// which is `x = α + W₀(-α·e^(-α))`, and `A = α / x`. The same value is the one-class case
/// of [`fifo_hot_cold_write_amplification`].
///
/// Sources: P. Desnoyers, "Analytic Modeling of SSD Write Performance", SYSTOR 2012
/// (LRU/FIFO model); X. Luojie and B. M. Kurkoski, "An improved analytic expression for
/// write amplification in NAND flash", ICNC 2012 (the Lambert W closed form).
///
/// Precision: the argument of `W₀` approaches the branch point `-1/e` as α → 1, where `W₀`
/// is ill-conditioned; the result is good to about 1e-11 relative at α = 1.001 and to
/// rounding for α >= 1.05.
///
/// # Panics
///
/// If `alpha` is not a finite number greater than 1 (with no spare area the FIFO
/// collector can never free a page, and the write amplification is unbounded).
pub fn fifo_write_amplification(alpha: f64) -> f64 {
    assert_alpha_above_one("fifo_write_amplification", alpha);
    let x = alpha + lambert_w0(-alpha * (-alpha).exp());
    alpha / x
}

/// Write amplification of random victim selection (the victim block chosen uniformly among
/// full blocks) under uniform random single-page writes: `A = 1 / S_f`, with the spare
/// factor `S_f = (T - U) / T` for `T` physical and `U` logical pages, i.e.
/// `A = α / (α - 1)`.
///
/// Why: a randomly chosen block is a sample of all physical pages, of which the fraction
/// `U / T` is valid in steady state, so each freed page costs `1 / (1 - U/T)` programs.
///
/// Sources: X.-Y. Hu, E. Eleftheriou, R. Haas, I. Iliadis and R. Pletka, "Write
/// Amplification Analysis in Flash-Based Solid State Drives", SYSTOR 2009 (the spare
/// factor); P. Desnoyers, "Analytic Modeling of SSD Write Performance", SYSTOR 2012 (the
/// random-selection model).
///
/// # Panics
///
/// If `alpha` is not a finite number greater than 1.
pub fn random_write_amplification(alpha: f64) -> f64 {
    assert_alpha_above_one("random_write_amplification", alpha);
    alpha / (alpha - 1.0)
}

/// One traffic class for [`fifo_hot_cold_write_amplification`]: the class takes
/// `write_fraction` of the host writes, spread uniformly at random over its own
/// `space_fraction` of the logical pages.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrafficClass {
    /// This class's share `f_i` of host writes, in (0, 1]; the classes' shares sum to 1.
    pub write_fraction: f64,
    /// This class's share `s_i` of the logical space, in (0, 1]; the classes' shares sum
    /// to 1.
    pub space_fraction: f64,
}

/// The two classes of hot/cold traffic: `hot_writes` of the writes (0 to 1) to `hot_space`
/// of the pages, the rest of the writes to the rest.
pub fn hot_cold(hot_writes: f64, hot_space: f64) -> [TrafficClass; 2] {
    [
        TrafficClass {
            write_fraction: hot_writes,
            space_fraction: hot_space,
        },
        TrafficClass {
            write_fraction: 1.0 - hot_writes,
            space_fraction: 1.0 - hot_space,
        },
    ]
}

/// Mean-field write amplification of FIFO victim selection with several traffic classes,
/// each written uniformly at random inside its own share of the logical space (hot/cold
/// traffic), at `alpha` = physical pages / logical pages.
///
/// Derivation (in the style of Desnoyers, SYSTOR 2012): measure time in host writes. A page
/// of class `i` is overwritten at rate `λ_i = f_i / (s_i·L)` per host write, where `f_i` is
/// the class's share of writes and `s_i` its share of the `L` logical pages. FIFO erases a
/// block once the log has advanced through all `P = α·L` physical pages since the block was
/// written, which takes `τ = P / A` host writes at write amplification `A`. A page written
/// (by the host or copied by GC) survives one such cycle with probability
/// `p_i = exp(-λ_i·τ) = exp(-f_i·α / (s_i·A))`, and a surviving page is copied and exposed
/// again, so each host write of class `i` costs `1 / (1 - p_i)` programs:
///
/// `A = Σ_i f_i / (1 - exp(-f_i·α / (s_i·A)))`.
///
/// Solving the fixed point: divide by `A` and write `c_i = f_i·α / s_i`,
/// `φ(t) = t / (1 - e^(-t))`:
///
/// `k(A) = Σ_i (s_i/α)·φ(c_i/A) - 1 = 0`.
///
/// `φ` is increasing, so `k` is strictly decreasing in `A` and the root is unique (the
/// trivial solution of the one-class equation sits at `A = ∞`, out of reach). `k(1) > 0`
/// because each term `f_i / (1 - p_i)` exceeds `f_i`; and since `φ(t) < 1 + t` for `t > 0`,
/// `k(α/(α-1)) < 1/α + (α-1)/α - 1 = 0`. So the root lies in `(1, α/(α-1))`, i.e. below the
/// random-policy value, and is found by bisection on that bracket. With one class this is
/// `α(1 - e^(-x)) = x` for `x = α/A`, the equation behind [`fifo_write_amplification`],
/// whose value it reproduces.
///
/// Direction of skew: `φ` is convex and `Σ s_i·c_i = α`, so by Jensen's inequality
/// `k(A) >= (1/α)·φ(α/A) - 1`, the uniform case, with equality only when every
/// `f_i = s_i`. In this model skew therefore never lowers FIFO's write amplification: FIFO
/// does not pick victims by validity, and cold pages that survive a cycle are copied again
/// and again. (For 80 % of writes to 20 % of the space at α = 1.28 it gives 2.8196, against
/// 2.4814 uniform.)
///
/// # Panics
///
/// If `alpha` is not a finite number greater than 1; if `classes` is empty; if any
/// fraction is not in (0, 1]; or if the write fractions or the space fractions do not sum
/// to 1 within 1e-9.
pub fn fifo_hot_cold_write_amplification(alpha: f64, classes: &[TrafficClass]) -> f64 {
    assert_alpha_above_one("fifo_hot_cold_write_amplification", alpha);
    validate_classes(classes);
    let excess = |a: f64| -> f64 {
        classes
            .iter()
            .map(|class| {
                let t = class.write_fraction * alpha / (class.space_fraction * a);
                class.space_fraction / alpha * (t / -(-t).exp_m1())
            })
            .sum::<f64>()
            - 1.0
    };
    // k(1) can round to 0 for very large α, where the answer is 1 to machine precision;
    // the bisection then closes onto the lower end.
    bisect_decreasing(excess, 1.0, random_write_amplification(alpha))
}

/// Checks the traffic classes [`fifo_hot_cold_write_amplification`] is given.
fn validate_classes(classes: &[TrafficClass]) {
    assert!(
        !classes.is_empty(),
        "fifo_hot_cold_write_amplification: at least one traffic class is needed"
    );
    for (index, class) in classes.iter().enumerate() {
        for (name, value) in [
            ("write_fraction", class.write_fraction),
            ("space_fraction", class.space_fraction),
        ] {
            assert!(
                value > 0.0 && value <= 1.0,
                "fifo_hot_cold_write_amplification: class {index} has {name} = {value}, \
                 which is not in (0, 1]"
            );
        }
    }
    let write_sum: f64 = classes.iter().map(|class| class.write_fraction).sum();
    let space_sum: f64 = classes.iter().map(|class| class.space_fraction).sum();
    assert!(
        (write_sum - 1.0).abs() <= FRACTION_SUM_TOLERANCE,
        "fifo_hot_cold_write_amplification: write fractions sum to {write_sum}, not 1"
    );
    assert!(
        (space_sum - 1.0).abs() <= FRACTION_SUM_TOLERANCE,
        "fifo_hot_cold_write_amplification: space fractions sum to {space_sum}, not 1"
    );
}

/// The root of a decreasing function on `[low, high]` (positive to its left, not positive
/// to its right), by bisection down to adjacent floats.
fn bisect_decreasing(function: impl Fn(f64) -> f64, mut low: f64, mut high: f64) -> f64 {
    for _ in 0..BISECTION_MAX_ITERATIONS {
        let middle = 0.5 * (low + high);
        if middle <= low || middle >= high {
            break;
        }
        if function(middle) > 0.0 {
            low = middle;
        } else {
            high = middle;
        }
    }
    0.5 * (low + high)
}

/// Over-provisioning as nvarray states it, `(physical - logical) / logical = α - 1`: 0.07
/// is 7 % spare area over the logical capacity. nvarray prints the spare factor
/// ([`spare_factor_of`]) beside it, since papers use either.
///
/// # Panics
///
/// If `alpha` is not a finite number of at least 1.
pub fn over_provisioning_of(alpha: f64) -> f64 {
    assert_alpha_at_least_one("over_provisioning_of", alpha);
    alpha - 1.0
}

/// The spare factor `S_f = (physical - logical) / physical = (α - 1) / α` (Hu et al.,
/// SYSTOR 2009), the fraction of physical pages that is spare; random victim selection's
/// write amplification is `1 / S_f`. nvarray states over-provisioning as
/// `(physical - logical) / logical` ([`over_provisioning_of`]) and prints this spare factor
/// beside it.
///
/// # Panics
///
/// If `alpha` is not a finite number of at least 1.
pub fn spare_factor_of(alpha: f64) -> f64 {
    assert_alpha_at_least_one("spare_factor_of", alpha);
    (alpha - 1.0) / alpha
}

fn assert_alpha_above_one(function: &str, alpha: f64) {
    assert!(
        alpha.is_finite() && alpha > 1.0,
        "{function}: alpha (physical pages / logical pages) must be a finite number greater \
         than 1, got {alpha}"
    );
}

fn assert_alpha_at_least_one(function: &str, alpha: f64) {
    assert!(
        alpha.is_finite() && alpha >= 1.0,
        "{function}: alpha (physical pages / logical pages) must be a finite number of at \
         least 1, got {alpha}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(actual: f64, expected: f64, relative: f64) {
        let scale = expected.abs().max(f64::MIN_POSITIVE);
        assert!(
            (actual - expected).abs() <= relative * scale,
            "{actual} is not within {relative:e} (relative) of {expected}"
        );
    }

    fn class(write_fraction: f64, space_fraction: f64) -> TrafficClass {
        TrafficClass {
            write_fraction,
            space_fraction,
        }
    }

    /// 80 % of writes to 20 % of the space, the rest to the rest.
    fn eighty_twenty() -> [TrafficClass; 2] {
        [class(0.8, 0.2), class(0.2, 0.8)]
    }

    #[test]
    fn lambert_w0_known_values() {
        assert_close(lambert_w0(1.0), 0.567_143_290_409_783_8, 1e-14);
        assert_close(lambert_w0(-1.0 / E), -1.0, 1e-14);
        assert_close(lambert_w0(E), 1.0, 1e-14);
        assert_close(lambert_w0(-0.2), -0.259_171_101_819_073_8, 1e-14);
        assert_close(lambert_w0(10.0), 1.745_528_002_740_699_4, 1e-14);
        assert_eq!(lambert_w0(0.0), 0.0);
    }

    #[test]
    fn lambert_w0_round_trips_on_a_grid() {
        let mut xs: Vec<f64> = (0..=2000_i32)
            .map(|k| -1.0 / E + f64::from(k) * 0.005)
            .collect();
        xs.extend((-300..=300).map(|k| 10f64.powi(k)));
        xs.extend((-300..=0).map(|k| -0.367 * 10f64.powi(k)));
        xs.extend([-1.0 / E + 1e-15, -1.0 / E + 1e-12, -0.3, 1e-310, f64::MAX]);
        for x in xs {
            let w = lambert_w0(x);
            assert!(w >= -1.0, "W0({x}) = {w} is below -1");
            // Far out, compare in logarithms (w·e^w overflows), where one ulp of w is
            // about w ulps of x.
            if w < 1.0 {
                assert_close(w * w.exp(), x, 1e-14);
            } else {
                assert_close(w + w.ln(), x.ln(), 1e-15);
            }
        }
    }

    #[test]
    fn lambert_w0_clamps_rounding_below_the_branch_point() {
        assert_eq!(lambert_w0(-1.0 / E - 5e-16), -1.0);
    }

    #[test]
    #[should_panic(expected = "outside the principal branch's domain")]
    fn lambert_w0_panics_below_the_branch_point() {
        lambert_w0(-0.37);
    }

    #[test]
    #[should_panic(expected = "outside the principal branch's domain")]
    fn lambert_w0_panics_on_nan() {
        lambert_w0(f64::NAN);
    }

    /// Solves α(1 − e^(−x)) = x for its nonzero root by bisection and returns A = α/x,
    /// independently of the Lambert W route.
    fn fifo_by_bisection(alpha: f64) -> f64 {
        let (mut low, mut high) = (0.0_f64, alpha);
        for _ in 0..200 {
            let middle = 0.5 * (low + high);
            if alpha * (1.0 - (-middle).exp()) - middle > 0.0 {
                low = middle;
            } else {
                high = middle;
            }
        }
        alpha / (0.5 * (low + high))
    }

    #[test]
    fn fifo_matches_an_independent_bisection() {
        assert_close(
            fifo_write_amplification(1.07),
            fifo_by_bisection(1.07),
            1e-12,
        );
        for alpha in [1.01, 1.1, 1.2, 1.28, 1.5, 2.0, 5.0] {
            assert_close(
                fifo_write_amplification(alpha),
                fifo_by_bisection(alpha),
                1e-11,
            );
        }
    }

    #[test]
    fn fifo_known_figures() {
        assert_close(fifo_write_amplification(1.07), 7.817_159_681_236_4, 1e-12);
        assert_close(fifo_write_amplification(1.28), 2.481_360_987_046_53, 1e-12);
        // No spare pressure left: nothing is copied.
        assert_close(fifo_write_amplification(1000.0), 1.0, 1e-15);
    }

    #[test]
    fn fifo_lies_between_one_and_random() {
        for alpha in [1.001, 1.07, 1.1, 1.2, 1.28, 1.5, 3.0] {
            let fifo = fifo_write_amplification(alpha);
            assert!(fifo > 1.0 && fifo < random_write_amplification(alpha));
        }
    }

    #[test]
    #[should_panic(expected = "must be a finite number greater than 1")]
    fn fifo_panics_at_alpha_one() {
        fifo_write_amplification(1.0);
    }

    #[test]
    #[should_panic(expected = "must be a finite number greater than 1")]
    fn fifo_panics_below_alpha_one() {
        fifo_write_amplification(0.9);
    }

    #[test]
    fn random_known_figures() {
        assert_eq!(random_write_amplification(1.25), 5.0);
        assert_close(
            random_write_amplification(1.28),
            1.0 / spare_factor_of(1.28),
            1e-15,
        );
    }

    #[test]
    #[should_panic(expected = "must be a finite number greater than 1")]
    fn random_panics_at_alpha_one() {
        random_write_amplification(1.0);
    }

    #[test]
    fn one_class_reproduces_fifo() {
        for alpha in [1.001, 1.01, 1.07, 1.1, 1.2, 1.28, 1.5, 2.0, 5.0, 50.0] {
            let hot_cold = fifo_hot_cold_write_amplification(alpha, &[class(1.0, 1.0)]);
            assert_close(hot_cold, fifo_write_amplification(alpha), 1e-9);
        }
    }

    #[test]
    fn unskewed_classes_reproduce_fifo() {
        let classes = [class(0.3, 0.3), class(0.7, 0.7)];
        for alpha in [1.07, 1.28, 2.0] {
            let hot_cold = fifo_hot_cold_write_amplification(alpha, &classes);
            assert_close(hot_cold, fifo_write_amplification(alpha), 1e-9);
        }
    }

    #[test]
    fn hot_cold_solves_its_fixed_point() {
        let alpha = 1.28;
        let a = fifo_hot_cold_write_amplification(alpha, &eighty_twenty());
        let right: f64 = eighty_twenty()
            .iter()
            .map(|c| {
                let exponent = c.write_fraction * alpha / (c.space_fraction * a);
                c.write_fraction / (1.0 - (-exponent).exp())
            })
            .sum();
        assert_close(a, right, 1e-12);
    }

    /// In the mean-field model skew raises FIFO's write amplification (Jensen, see the
    /// function's documentation); it stays below the random-policy value.
    #[test]
    fn eighty_twenty_lies_above_uniform_fifo_and_below_random() {
        let alpha = 1.28;
        let skewed = fifo_hot_cold_write_amplification(alpha, &eighty_twenty());
        assert_close(skewed, 2.819_563_780_121_886, 1e-9);
        assert!(skewed > 1.0);
        assert!(skewed > fifo_write_amplification(alpha));
        assert!(skewed < random_write_amplification(alpha));
    }

    #[test]
    #[should_panic(expected = "must be a finite number greater than 1")]
    fn hot_cold_panics_at_alpha_one() {
        fifo_hot_cold_write_amplification(1.0, &eighty_twenty());
    }

    #[test]
    #[should_panic(expected = "write fractions sum to")]
    fn hot_cold_panics_when_write_fractions_do_not_sum_to_one() {
        fifo_hot_cold_write_amplification(1.28, &[class(0.8, 0.2), class(0.3, 0.8)]);
    }

    #[test]
    #[should_panic(expected = "space fractions sum to")]
    fn hot_cold_panics_when_space_fractions_do_not_sum_to_one() {
        fifo_hot_cold_write_amplification(1.28, &[class(0.8, 0.2), class(0.2, 0.7)]);
    }

    #[test]
    #[should_panic(expected = "which is not in (0, 1]")]
    fn hot_cold_panics_on_a_zero_fraction() {
        fifo_hot_cold_write_amplification(1.28, &[class(1.0, 0.0), class(0.0, 1.0)]);
    }

    #[test]
    #[should_panic(expected = "at least one traffic class")]
    fn hot_cold_panics_without_classes() {
        fifo_hot_cold_write_amplification(1.28, &[]);
    }

    #[test]
    fn over_provisioning_and_spare_factor() {
        assert_close(over_provisioning_of(1.28), 0.28, 1e-12);
        assert_close(spare_factor_of(1.28), 0.218_75, 1e-12);
        assert_eq!(over_provisioning_of(1.0), 0.0);
        assert_eq!(spare_factor_of(1.0), 0.0);
        let op = over_provisioning_of(1.07);
        assert_close(spare_factor_of(1.07), op / (1.0 + op), 1e-15);
    }

    #[test]
    #[should_panic(expected = "at least 1")]
    fn spare_factor_panics_below_one() {
        spare_factor_of(0.5);
    }
}
