//! How well the jobs pin each fitted parameter: the Gauss–Newton (linearised) covariance of
//! the parameters' logarithms at the optimum, `σ² (JᵀJ)⁻¹`, where `J` is how each job's log
//! residuals move with each log parameter (central differences) and `σ²` the residuals'
//! variance. On that quadratic approximation of the loss a parameter's profile (the loss with
//! every other parameter re-fitted) is a parabola whose 95 % range is ±1.96 standard errors:
//! the range reported. A direction the jobs do not move (a near-zero eigenvalue of `JᵀJ`,
//! such as channels against dies when only their product matters) gives the parameters on it
//! no finite range: those the fit names as not identified.

/// A parameter is identified when its 95 % range is within this factor either way.
pub const IDENTIFIED_WITHIN: f64 = 1.10;
/// The 95 % point of the χ² distribution with one degree of freedom.
const CHI2_95: f64 = 3.841_458_820_694_124;

/// The most loss another point may have and still explain the jobs as well as the best, within
/// the measurements' scatter: the profile likelihood's 95 % threshold, `ΔSSR ≤ 3.84 σ²` with
/// `σ²` the residuals' variance at the best (`loss` × count / (count − parameters)), as a loss.
/// On a few hundred residuals it is about 1 % above the best; on the ten of a datasheet's
/// points it is nearly three times it.
pub fn near_limit(loss: f64, residuals: usize, parameters: usize) -> f64 {
    let dof = residuals.saturating_sub(parameters).max(1) as f64;
    loss * (1.0 + CHI2_95 / dof)
}

/// Eigenvalues below this share of the largest count as flat.
const FLAT: f64 = 1e-9;

/// One parameter's range, on the parameter's own scale.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Range {
    pub low: f64,
    pub high: f64,
    /// Standard error of the logarithm (a relative error, for small values).
    pub log_se: f64,
    pub identified: bool,
}

/// Ranges from the Jacobian `j` (one row per residual, one column per log parameter), the
/// residuals at the optimum and the fitted values.
pub fn ranges(j: &[Vec<f64>], residuals: &[f64], values: &[f64]) -> Vec<Range> {
    let p = values.len();
    let n = residuals.len();
    assert_eq!(j.len(), n, "one Jacobian row per residual");
    assert!(
        j.iter().all(|row| row.len() == p),
        "a Jacobian row without one column per parameter ({p})"
    );
    let dof = n.saturating_sub(p).max(1) as f64;
    let sigma2 = residuals.iter().map(|r| r * r).sum::<f64>() / dof;
    // JᵀJ.
    let mut a = vec![vec![0.0; p]; p];
    for row in j {
        for (x, ax) in a.iter_mut().enumerate() {
            for (y, axy) in ax.iter_mut().enumerate() {
                *axy += row[x] * row[y];
            }
        }
    }
    let (eigenvalues, vectors) = symmetric_eigen(a);
    let largest = eigenvalues.iter().cloned().fold(0.0, f64::max);
    (0..p)
        .map(|i| {
            // C_ii = σ² Σ_k v_ik² / λ_k; a flat direction the parameter lies on makes it ∞.
            let mut var = 0.0;
            for (k, &l) in eigenvalues.iter().enumerate() {
                let w = vectors[i][k] * vectors[i][k];
                if w < 1e-6 {
                    continue;
                }
                var += if l > FLAT * largest && l > 0.0 {
                    sigma2 * w / l
                } else {
                    f64::INFINITY
                };
            }
            let log_se = var.sqrt();
            let half = 1.96 * log_se;
            Range {
                low: values[i] * (-half).exp(),
                high: values[i] * half.exp(),
                log_se,
                identified: half.is_finite() && half <= IDENTIFIED_WITHIN.ln(),
            }
        })
        .collect()
}

/// `ranges` (at `values`) widened to hold every point of `near`: other points the search met
/// that explain the jobs as well (`near_limit`). A point under that limit with a parameter at
/// `v` puts `v` inside the parameter's profile-likelihood range, so the range is at least
/// their span. The linearised ranges see only the loss's curvature at the optimum; a valley
/// that bends (the media's latency against the link's delay and the bank count) shows in the
/// points the descents met along it. A parameter one of them puts beyond `IDENTIFIED_WITHIN`
/// is not identified.
pub fn widen(ranges: &mut [Range], values: &[f64], near: &[Vec<f64>]) {
    assert_eq!(ranges.len(), values.len(), "one range per fitted value");
    assert!(
        near.iter().all(|point| point.len() == values.len()),
        "a near point without one value per parameter ({})",
        values.len()
    );
    for (i, r) in ranges.iter_mut().enumerate() {
        for point in near {
            let v = point[i];
            r.low = r.low.min(v);
            r.high = r.high.max(v);
            let off = (v / values[i]).ln().abs();
            if off > IDENTIFIED_WITHIN.ln() {
                r.identified = false;
            }
        }
    }
}

/// Eigenvalues and eigenvectors (as columns: `vectors[i][k]` is component `i` of vector `k`)
/// of a symmetric matrix, by cyclic Jacobi rotations: the matrices here are at most 16 × 16,
/// where Jacobi is accurate and short, and a linear-algebra crate would be a large dependency
/// for one call.
pub fn symmetric_eigen(mut a: Vec<Vec<f64>>) -> (Vec<f64>, Vec<Vec<f64>>) {
    let n = a.len();
    assert!(
        a.iter().all(|row| row.len() == n),
        "the matrix is not square ({n} rows)"
    );
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|k| if i == k { 1.0 } else { 0.0 }).collect())
        .collect();
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&k| k != i).map(move |k| (i, k)))
            .map(|(i, k)| a[i][k] * a[i][k])
            .sum();
        let scale: f64 = (0..n).map(|i| a[i][i] * a[i][i]).sum::<f64>().max(1e-300);
        if off <= 1e-24 * scale {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                if a[p][q].abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for row in a.iter_mut() {
                    let (akp, akq) = (row[p], row[q]);
                    row[p] = c * akp - s * akq;
                    row[q] = s * akp + c * akq;
                }
                let (row_p, row_q) = (a[p].clone(), a[q].clone());
                for (k, (apk, aqk)) in row_p.into_iter().zip(row_q).enumerate() {
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for row in v.iter_mut() {
                    let (vp, vq) = (row[p], row[q]);
                    row[p] = c * vp - s * vq;
                    row[q] = s * vp + c * vq;
                }
            }
        }
    }
    ((0..n).map(|i| a[i][i]).collect(), v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigen_of_a_known_matrix() {
        let (l, v) = symmetric_eigen(vec![vec![2.0, 1.0], vec![1.0, 2.0]]);
        let mut sorted = l.clone();
        sorted.sort_by(f64::total_cmp);
        assert!((sorted[0] - 1.0).abs() < 1e-12 && (sorted[1] - 3.0).abs() < 1e-12);
        // A v = λ v for each column.
        for k in 0..2 {
            let av0 = 2.0 * v[0][k] + v[1][k];
            assert!((av0 - l[k] * v[0][k]).abs() < 1e-12);
        }
    }

    #[test]
    fn a_parameter_the_residuals_ignore_and_two_that_only_count_as_a_product_are_not_identified() {
        // Residuals move with a; b and c only through b + c (log of a product); d never.
        let j: Vec<Vec<f64>> = (0..40)
            .map(|r| {
                let x = r as f64 / 40.0;
                vec![1.0 + x, 0.5 - x, 0.5 - x, 0.0]
            })
            .collect();
        let residuals: Vec<f64> = (0..40)
            .map(|r| if r % 2 == 0 { 0.01 } else { -0.01 })
            .collect();
        let r = ranges(&j, &residuals, &[100.0, 4.0, 8.0, 3.0]);
        assert!(r[0].identified, "{:?}", r[0]);
        assert!(r[0].low < 100.0 && r[0].high > 100.0);
        assert!(!r[1].identified && !r[2].identified, "{r:?}");
        assert!(!r[3].identified && r[3].log_se.is_infinite());
    }
}
