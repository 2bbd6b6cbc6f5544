//! The minimiser, in two phases on the parameters' logarithms. First CMA-ES (Hansen's
//! covariance matrix adaptation evolution strategy, the `cmaes` crate): a population sampled
//! from a normal distribution whose shape learns the valleys, where parameters trade off
//! (the firmware's time against the media's latency, a bank count against a rate); a local
//! search started at the base preset stops in the first such valley it meets. Then a compass
//! (pattern) search polishes its best point, as in Hooke and Jeeves (1961) and Kolda, Lewis and
//! Torczon, "Optimization by Direct Search" (SIAM Review, 2003): each parameter a step up and a
//! step down (a factor), a better point taken at once, a pattern move after a sweep that
//! improved, every step halved after one that did not, until the steps are under 1 %; then it
//! begins again from its first steps while that still improves (at most `RESTARTS` times).
//! Whole numbers (lanes, cores, dies, tags) are rounded in the objective, which memoises each
//! point it is given; the compass steps them by at least one.

use std::collections::HashMap;

use crate::params::Param;

/// The first step: a factor of 4 each way.
const FIRST_STEP: f64 = 1.386_294_361_119_890_6; // ln 4
/// Searches begun again from the first steps after one ends (see `compass`).
const RESTARTS: usize = 3;
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

/// The share of the budget the global phase (CMA-ES) may take.
const GLOBAL_SHARE: f64 = 0.7;
/// CMA-ES's first spread, in natural log units: a factor of about 2 either way.
const GLOBAL_SIGMA: f64 = 0.7;
/// The compass's first step after the global phase: a factor of 1.25.
const POLISH_STEP: f64 = 0.223_143_551_314_209_7; // ln 1.25

/// Minimises `objective` from `start`: CMA-ES, then the compass from its best point, together
/// computing it at most about `budget` times.
pub fn minimise(objective: &mut Objective, start: &[f64], budget: usize) -> Outcome {
    let x0 = objective.legal(start);
    let global = (budget as f64 * GLOBAL_SHARE) as usize;
    let best = if global >= 20 && !x0.is_empty() {
        let logs: Vec<f64> = x0.iter().map(|v| v.max(1e-300).ln()).collect();
        let mut f = |z: &cmaes::DVector<f64>| -> f64 {
            let x: Vec<f64> = z.iter().map(|v| v.exp()).collect();
            let x = objective.legal(&x);
            // CMA-ES stops on a value that is not finite; a device that cannot run is just bad.
            objective.at(&x).min(1e6)
        };
        let state = cmaes::CMAESOptions::new(logs, GLOBAL_SIGMA)
            .max_function_evals(global)
            .seed(61)
            .build(&mut f);
        state
            .ok()
            .and_then(|mut s| s.run().overall_best)
            .map(|b| b.point.iter().map(|v| v.exp()).collect::<Vec<f64>>())
    } else {
        None
    };
    let from = best.map_or(x0.clone(), |b| objective.legal(&b));
    // Keep the start if the global phase found nothing better.
    let from = if objective.at(&from) <= objective.at(&x0) {
        from
    } else {
        x0
    };
    let step = if global >= 20 {
        POLISH_STEP
    } else {
        FIRST_STEP
    };
    compass(objective, &from, budget, step)
}

/// Minimises `objective` from `start` by the compass alone, with first steps `first_step` (a
/// natural log), computing it at most `budget` times in all.
pub fn compass(
    objective: &mut Objective,
    start: &[f64],
    budget: usize,
    first_step: f64,
) -> Outcome {
    let n = start.len();
    let mut x = objective.legal(start);
    let mut f = objective.at(&x);
    let mut step = vec![first_step; n];
    let spent = |o: &Objective| o.evaluations() >= budget;
    // Where the last restart began: a search that ends better than it started restarts with
    // the first steps (a valley the small steps crawl along, or a plateau of whole numbers,
    // can stop it short), up to `RESTARTS` times.
    let mut restarted_at = f;
    let mut restarts = 0;
    loop {
        if step.iter().all(|&s| s < LAST_STEP) {
            if restarts == RESTARTS || f >= restarted_at * (1.0 - 1e-3) {
                break;
            }
            restarts += 1;
            restarted_at = f;
            step = vec![first_step; n];
        }
        if spent(objective) {
            break;
        }
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
        let out = minimise(&mut o, &[1.0, 1.0], 10_000);
        assert!(
            (out.values[0] / 300.0 - 1.0).abs() < 0.02,
            "{:?}",
            out.values
        );
        assert_eq!(out.values[1], 7.0);
        assert!(!out.budget_spent);
    }

    #[test]
    fn the_budget_stops_it() {
        let params = [param("a", false)];
        let mut loss = |v: &[f64]| (v[0] / 300.0).ln().powi(2);
        let mut o = Objective::new(&params, &mut loss);
        let out = compass(&mut o, &[1.0], 3, FIRST_STEP);
        assert!(out.budget_spent && out.evaluations == 3);
    }
}
