//! The minimiser: a compass (pattern) search on a log scale, as in Hooke and Jeeves (1961)
//! and Kolda, Lewis and Torczon, "Optimization by Direct Search" (SIAM Review, 2003). Each
//! parameter is tried a step up and a step down (a factor), a better point is taken at once,
//! a sweep that improved is followed by a pattern move along the last sweep's direction, and a
//! sweep that did not halves every step, until the steps are under 1 %.
//!
//! Written here rather than taken from a crate (argmin's Nelder–Mead was tried on paper):
//! half the parameters are whole numbers (lanes, cores, channels, dies, tags) and all have
//! bounds, which a simplex method handles only by rounding inside the objective, where its
//! simplex then collapses on the plateaus; the compass search steps whole numbers by at least
//! one and needs no derivative of an objective that is a simulation.

use std::collections::HashMap;

use crate::params::Param;

/// The first step: a factor of 4 each way.
const FIRST_STEP: f64 = 1.386_294_361_119_890_6; // ln 4
/// Steps below a factor of 1.01 end the search.
const LAST_STEP: f64 = 0.009_950_330_853_168_083; // ln 1.01

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

/// Memoises the objective on legal points (whole numbers make points repeat) and counts.
pub struct Objective<'a> {
    params: &'a [Param],
    loss: &'a mut dyn FnMut(&[f64]) -> f64,
    seen: HashMap<Vec<u64>, f64>,
}

impl<'a> Objective<'a> {
    pub fn new(params: &'a [Param], loss: &'a mut dyn FnMut(&[f64]) -> f64) -> Self {
        Objective {
            params,
            loss,
            seen: HashMap::new(),
        }
    }

    pub fn evaluations(&self) -> usize {
        self.seen.len()
    }

    pub fn legal(&self, values: &[f64]) -> Vec<f64> {
        self.params
            .iter()
            .zip(values)
            .map(|(p, &v)| p.legal(v))
            .collect()
    }

    pub fn at(&mut self, values: &[f64]) -> f64 {
        let key: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
        if let Some(&f) = self.seen.get(&key) {
            return f;
        }
        let f = (self.loss)(values);
        let f = if f.is_nan() { f64::INFINITY } else { f };
        self.seen.insert(key, f);
        f
    }
}

/// Minimises `objective` from `start`, computing it at most `budget` times.
pub fn compass(objective: &mut Objective, start: &[f64], budget: usize) -> Outcome {
    let n = start.len();
    let mut x = objective.legal(start);
    let mut f = objective.at(&x);
    let mut step = vec![FIRST_STEP; n];
    let spent = |o: &Objective| o.evaluations() >= budget;
    while step.iter().any(|&s| s >= LAST_STEP) && !spent(objective) {
        let before = x.clone();
        for i in 0..n {
            if spent(objective) {
                break;
            }
            for dir in [1.0, -1.0] {
                let y = neighbour(objective.params, &x, i, dir * step[i]);
                if y[i] == x[i] {
                    continue;
                }
                let fy = objective.at(&y);
                if fy < f {
                    (x, f) = (y, fy);
                    break;
                }
            }
        }
        if x == before {
            for s in &mut step {
                *s *= 0.5;
            }
            continue;
        }
        // Pattern move: the same change again, kept only if it helps.
        let moved: Vec<f64> = x
            .iter()
            .zip(&before)
            .map(|(&a, &b)| (2.0 * a.ln() - b.ln()).exp())
            .collect();
        let moved = objective.legal(&moved);
        if moved != x && !spent(objective) {
            let fm = objective.at(&moved);
            if fm < f {
                (x, f) = (moved, fm);
            }
        }
    }
    Outcome {
        values: x,
        loss: f,
        evaluations: objective.evaluations(),
        budget_spent: spent(objective),
    }
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

    fn param(name: &'static str, integer: bool) -> Param {
        Param {
            name,
            keys: vec![name],
            base: vec![1.0],
            meaning: "",
            integer,
            min: 1.0,
            max: 1e6,
        }
    }

    #[test]
    fn finds_the_minimum_of_a_bowl_in_log_space_with_a_whole_number() {
        let params = [param("a", false), param("b", true)];
        // Minimum at a = 300, b = 7.
        let mut loss = |v: &[f64]| (v[0] / 300.0).ln().powi(2) + (v[1] / 7.0).ln().powi(2);
        let mut o = Objective::new(&params, &mut loss);
        let out = compass(&mut o, &[1.0, 1.0], 10_000);
        assert!((out.values[0] / 300.0 - 1.0).abs() < 0.02, "{:?}", out.values);
        assert_eq!(out.values[1], 7.0);
        assert!(!out.budget_spent);
    }

    #[test]
    fn the_budget_stops_it() {
        let params = [param("a", false)];
        let mut loss = |v: &[f64]| (v[0] / 300.0).ln().powi(2);
        let mut o = Objective::new(&params, &mut loss);
        let out = compass(&mut o, &[1.0], 3);
        assert!(out.budget_spent && out.evaluations == 3);
    }
}
