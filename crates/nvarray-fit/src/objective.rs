//! What the search minimises: the log residuals of the simulator against the training jobs
//! (two a job: IOPS and mean latency) at a point of the fitted parameters, and their loss,
//! the mean of a Cauchy (Lorentzian) function of each. Every point computed is memoised (whole
//! numbers make points repeat, and the ranges look again at the points the search met).

use std::collections::HashMap;

use crate::params::Param;

/// The Cauchy loss's scale: a 10 % miss (in log ratio).
pub const CAUCHY_SCALE: f64 = 0.1;

/// The loss of log residuals `r`: the mean of `c² ln(1 + (r/c)²)`, `c` = `CAUCHY_SCALE`: the
/// square for small misses, growing only as the log for large ones, so one job a disturbed
/// measurement put 50 % off (a cloud disk's burst credit running out mid-job) does not bend
/// the fit of all the others.
pub fn cauchy_loss(r: &[f64]) -> f64 {
    const C: f64 = CAUCHY_SCALE;
    r.iter()
        .map(|x| C * C * (1.0 + (x / C).powi(2)).ln())
        .sum::<f64>()
        / r.len().max(1) as f64
}

/// The weight a residual `r` gets in the loss's least-squares form (iteratively reweighted
/// least squares): the Cauchy loss's derivative over the square's.
pub fn cauchy_weight(r: f64) -> f64 {
    1.0 / (1.0 + (r / CAUCHY_SCALE).powi(2))
}

/// The residuals and the loss at each point computed.
pub struct Objective<'a> {
    pub params: &'a [Param],
    residuals: &'a mut dyn FnMut(&[f64]) -> Vec<f64>,
    seen: HashMap<Vec<u64>, (f64, Vec<f64>)>,
}

impl<'a> Objective<'a> {
    /// An objective whose residuals at a point are `residuals(values)`.
    pub fn new(params: &'a [Param], residuals: &'a mut dyn FnMut(&[f64]) -> Vec<f64>) -> Self {
        Objective {
            params,
            residuals,
            seen: HashMap::new(),
        }
    }

    /// Distinct points computed.
    pub fn evaluations(&self) -> usize {
        self.seen.len()
    }

    /// `values` inside each parameter's bounds, whole where it must be.
    pub fn legal(&self, values: &[f64]) -> Vec<f64> {
        assert_eq!(
            values.len(),
            self.params.len(),
            "a point has one value per parameter"
        );
        self.params
            .iter()
            .zip(values)
            .map(|(p, &v)| p.legal(v))
            .collect()
    }

    /// Every point computed whose loss is at most `limit`.
    pub fn within(&self, limit: f64) -> Vec<Vec<f64>> {
        self.seen
            .iter()
            .filter(|(_, (f, _))| *f <= limit)
            .map(|(key, _)| key.iter().map(|&b| f64::from_bits(b)).collect())
            .collect()
    }

    /// The loss at `values` (a legal point); a point that gives no number is infinitely bad.
    pub fn at(&mut self, values: &[f64]) -> f64 {
        self.point(values).0
    }

    /// The residuals at `values` (a legal point).
    pub fn residuals(&mut self, values: &[f64]) -> Vec<f64> {
        self.point(values).1.clone()
    }

    fn point(&mut self, values: &[f64]) -> &(f64, Vec<f64>) {
        let key: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
        let residuals = &mut self.residuals;
        self.seen.entry(key).or_insert_with(|| {
            let r = residuals(values);
            let f = cauchy_loss(&r);
            (if f.is_nan() { f64::INFINITY } else { f }, r)
        })
    }
}

/// Where the search ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub values: Vec<f64>,
    pub loss: f64,
    /// Distinct points the objective was computed at.
    pub evaluations: usize,
    /// Whether it stopped on the evaluation budget rather than on a small step.
    pub budget_spent: bool,
}

/// `x` with parameter `i` moved by `log_step` on a log scale; a whole number that the step
/// would not move moves by one.
pub fn neighbour(params: &[Param], x: &[f64], i: usize, log_step: f64) -> Vec<f64> {
    let mut y = x.to_vec();
    let p = &params[i];
    y[i] = p.legal(x[i] * log_step.exp());
    if p.integer && y[i] == x[i] {
        y[i] = p.legal(x[i] + log_step.signum());
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cauchy_loss_is_the_square_for_small_misses_and_the_log_for_large() {
        let small = cauchy_loss(&[0.001]);
        assert!((small / 1e-6 - 1.0).abs() < 1e-3, "{small}");
        // Ten times the miss at ten times the scale costs far less than a hundred times more.
        assert!(cauchy_loss(&[1.0]) < 10.0 * cauchy_loss(&[0.1]));
        assert!(cauchy_weight(0.0) == 1.0 && cauchy_weight(0.1) == 0.5);
    }

    #[test]
    fn each_point_is_computed_once() {
        let params = [];
        let mut calls = 0;
        let mut r = |_: &[f64]| {
            calls += 1;
            vec![0.1]
        };
        let mut o = Objective::new(&params, &mut r);
        assert_eq!(o.at(&[]), o.at(&[]));
        assert_eq!(o.evaluations(), 1);
        drop(o);
        assert_eq!(calls, 1);
    }
}
