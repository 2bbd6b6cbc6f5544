//! Levenberg–Marquardt on the parameters' logarithms (Levenberg 1944, Marquardt 1963; as in
//! Nocedal and Wright, "Numerical Optimization", ch. 10): the fit is a least-squares problem
//! (log residuals, two a job), so each step solves `(JᵀWJ + λ diag JᵀWJ) δ = −JᵀWr` from the
//! Jacobian `J` of the residuals, `W` the Cauchy loss's weights (iteratively reweighted least
//! squares). Where parameters trade off along a curved valley (the media's latency against
//! the link's delay and the bank count, each pinned by a different set of jobs) a step moves
//! them all together along it, which coordinate steps and a sampled population reach only
//! slowly: from where CMA-ES stopped on a hidden device, loss 0.0006 where the device's own is
//! 0.00033 (docs/fit.md).
//!
//! The Jacobian is by central differences of ±10 % (±1 for a whole number): the simulator's
//! figures move in small jumps (whole requests in a window), which steps that wide average out.

use crate::objective::{cauchy_loss, cauchy_weight, neighbour, Objective, Outcome};

/// The Jacobian's step: 10 % each way (natural log).
pub const JACOBIAN_STEP: f64 = 0.095_310_179_804_324_87; // ln 1.1
/// Steps tried at one Jacobian, λ growing fourfold after each that did not lower the loss.
const TRIES: usize = 6;
/// An accepted step that lowers the loss by less than this share ends the search.
const CONVERGED: f64 = 1e-4;

/// The Jacobian of the residuals at `x` in the log parameters (one row a residual), by
/// central differences, and the residuals at `x`.
pub fn jacobian(objective: &mut Objective, x: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
    let at_x = objective.residuals(x);
    let params = objective.params;
    let mut columns = Vec::with_capacity(x.len());
    for i in 0..x.len() {
        let up = neighbour(params, x, i, JACOBIAN_STEP);
        let down = neighbour(params, x, i, -JACOBIAN_STEP);
        let span = (up[i] / down[i]).ln();
        columns.push(if span > 0.0 {
            let (ru, rd) = (objective.residuals(&up), objective.residuals(&down));
            assert!(
                ru.len() == at_x.len() && rd.len() == at_x.len(),
                "parameter {i}'s neighbours give {} and {} residuals, the point {}",
                ru.len(),
                rd.len(),
                at_x.len()
            );
            ru.iter().zip(&rd).map(|(a, b)| (a - b) / span).collect()
        } else {
            vec![0.0; at_x.len()]
        });
    }
    let rows = (0..at_x.len())
        .map(|r| columns.iter().map(|c: &Vec<f64>| c[r]).collect())
        .collect();
    (rows, at_x)
}

/// Minimises `objective` from `start` by Levenberg–Marquardt until a step gains less than
/// `CONVERGED` or about `budget` points have been computed in all.
pub fn levenberg_marquardt(objective: &mut Objective, start: &[f64], budget: usize) -> Outcome {
    let mut x = objective.legal(start);
    let mut f = objective.at(&x);
    let mut lambda = 1e-2;
    while objective.evaluations() + 2 * x.len() < budget {
        let (j, r) = jacobian(objective, &x);
        let (a, g) = normal_equations(&j, &r);
        let mut accepted = None;
        for _ in 0..TRIES {
            if objective.evaluations() >= budget {
                break;
            }
            let mut damped = a.clone();
            for (i, row) in damped.iter_mut().enumerate() {
                row[i] += lambda * a[i][i] + 1e-12;
            }
            let minus_g: Vec<f64> = g.iter().map(|v| -v).collect();
            let Some(delta) = solve(damped, minus_g) else {
                lambda *= 4.0;
                continue;
            };
            let y: Vec<f64> = x.iter().zip(&delta).map(|(v, d)| v * d.exp()).collect();
            let y = objective.legal(&y);
            let fy = if y == x { f } else { objective.at(&y) };
            if fy < f {
                accepted = Some((y, fy));
                lambda = (lambda / 3.0).max(1e-7);
                break;
            }
            lambda *= 4.0;
        }
        match accepted {
            Some((y, fy)) => {
                let gain = (f - fy) / f.max(1e-300);
                (x, f) = (y, fy);
                if gain < CONVERGED {
                    break;
                }
            }
            None => break,
        }
    }
    debug_assert!(f == cauchy_loss(&objective.residuals(&x)) || f.is_infinite());
    Outcome {
        values: x,
        loss: f,
        evaluations: objective.evaluations(),
        budget_spent: objective.evaluations() >= budget,
    }
}

/// `JᵀWJ` and `JᵀWr`, `W` the Cauchy weights of `r`.
fn normal_equations(j: &[Vec<f64>], r: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
    assert_eq!(j.len(), r.len(), "one Jacobian row per residual");
    let p = j.first().map_or(0, Vec::len);
    let mut a = vec![vec![0.0; p]; p];
    let mut g = vec![0.0; p];
    for (row, &ri) in j.iter().zip(r) {
        let w = cauchy_weight(ri);
        for x in 0..p {
            g[x] += w * row[x] * ri;
            for y in 0..p {
                a[x][y] += w * row[x] * row[y];
            }
        }
    }
    (a, g)
}

/// The solution of `a x = b` by Gaussian elimination with partial pivoting; `None` when `a`
/// is singular. The systems here are at most a dozen unknowns.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    assert_eq!(a.len(), n, "a system of {n} unknowns has {} rows", a.len());
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &k| a[i][col].abs().total_cmp(&a[k][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..n {
            let m = a[row][col] / a[col][col];
            if m == 0.0 {
                continue;
            }
            let pivot_row = a[col].clone();
            for (v, p) in a[row][col..].iter_mut().zip(&pivot_row[col..]) {
                *v -= m * p;
            }
            b[row] -= m * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Param;

    fn param(name: &'static str) -> Param {
        Param {
            name,
            keys: vec![name],
            base: vec![1.0],
            meaning: "",
            integer: false,
            min: 1e-3,
            max: 1e9,
        }
    }

    #[test]
    fn solves_a_small_system() {
        let x = solve(vec![vec![0.0, 2.0], vec![3.0, 1.0]], vec![4.0, 5.0]).unwrap();
        assert!(
            (x[0] - 1.0).abs() < 1e-12 && (x[1] - 2.0).abs() < 1e-12,
            "{x:?}"
        );
        assert!(solve(vec![vec![1.0, 2.0], vec![2.0, 4.0]], vec![1.0, 1.0]).is_none());
    }

    #[test]
    fn follows_a_curved_valley_to_the_minimum() {
        // A latency that is the sum of two delays, and a rate that depends on one of them:
        // from far off, both recovered.
        let params = [param("a"), param("b")];
        let (a0, b0) = (900.0_f64, 800.0_f64);
        let mut r = |v: &[f64]| -> Vec<f64> {
            (1..=6)
                .flat_map(|k| {
                    let k = f64::from(k);
                    [
                        ((v[0] + v[1] * k) / (a0 + b0 * k)).ln(),
                        ((v[0] * k + 100.0) / (a0 * k + 100.0)).ln(),
                    ]
                })
                .collect()
        };
        let mut o = Objective::new(&params, &mut r);
        let out = levenberg_marquardt(&mut o, &[300.0, 2000.0], 500);
        assert!((out.values[0] / a0 - 1.0).abs() < 0.01, "{out:?}");
        assert!((out.values[1] / b0 - 1.0).abs() < 0.01, "{out:?}");
        assert!(out.loss < 1e-8);
    }
}
