//! SNIA's steady-state rule (Solid State Storage Performance Test Specification, PTS 2.0.2,
//! "Steady State"): over a measurement window of the last 5 rounds, the tracked figure stays
//! within 20 % of the window's mean, and the best-fit line across the window moves by at most
//! 10 % of that mean. At most 25 rounds are run.

/// Rounds in the measurement window.
pub const WINDOW: usize = 5;
/// Rounds before giving up on steady state.
pub const ROUNDS_MAX: usize = 25;
/// Largest distance of a round from the window's mean, as a fraction of the mean.
const EXCURSION_MAX: f64 = 0.20;
/// Largest change of the best-fit line over the window, as a fraction of the mean.
const SLOPE_MAX: f64 = 0.10;
// The slope's denominator, Σ(x−x̄)², is zero for a window of one round.
const _: () = assert!(WINDOW >= 2);
// A run that gives up before a whole window can never be found steady.
const _: () = assert!(ROUNDS_MAX >= WINDOW);

/// The window's mean when the last `WINDOW` rounds are steady, else `None`.
pub fn steady_mean(rounds: &[f64]) -> Option<f64> {
    if rounds.len() < WINDOW {
        return None;
    }
    let w = &rounds[rounds.len() - WINDOW..];
    let n = WINDOW as f64;
    let mean = w.iter().sum::<f64>() / n;
    if mean.is_nan() || mean <= 0.0 {
        return None;
    }
    let excursion = w.iter().map(|y| (y - mean).abs()).fold(0.0, f64::max);
    // Least squares over x = 0..WINDOW: slope = Σ(x−x̄)(y−ȳ) / Σ(x−x̄)².
    let x_mean = (n - 1.0) / 2.0;
    let sxy: f64 = w
        .iter()
        .enumerate()
        .map(|(x, y)| (x as f64 - x_mean) * (y - mean))
        .sum();
    let sxx: f64 = (0..WINDOW).map(|x| (x as f64 - x_mean).powi(2)).sum();
    let change = (sxy / sxx * (n - 1.0)).abs();
    (excursion <= EXCURSION_MAX * mean && change <= SLOPE_MAX * mean).then_some(mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_rounds_are_steady_and_falling_ones_are_not() {
        assert_eq!(
            steady_mean(&[9.0, 100.0, 101.0, 99.0, 100.0, 100.0]),
            Some(100.0)
        );
        assert_eq!(steady_mean(&[100.0, 100.0, 100.0, 100.0]), None, "too few");
        // Falls 4 % a round: 16 % over the window, more than the 10 % the line may move.
        assert_eq!(steady_mean(&[100.0, 96.0, 92.0, 88.0, 84.0]), None);
        // One round 25 % off the mean.
        assert_eq!(steady_mean(&[100.0, 100.0, 130.0, 90.0, 100.0]), None);
        assert_eq!(steady_mean(&[0.0; 5]), None);
    }
}
