//! Over-provisioning from the steady-state write rounds (`collect --steady-state`), for a
//! flash base: with every other parameter as the grid fitted them, the FTL's spare share is
//! searched (golden section on a log scale) until 4 KiB random writes at depth 32, on a device
//! of the collection's span preconditioned with random writes to steady state (SNIA's), give
//! the measured steady IOPS. Only the collector's work depends on it, so it is fitted alone,
//! after the grid.

use nvarray_model::overrides::apply_overrides;

use crate::grid::{Job, Pattern};
use crate::measured::Figures;
use crate::simulate;

/// The search's bounds on `ftl.over_provisioning`.
const OP_MIN: f64 = 0.02;
const OP_MAX: f64 = 1.0;
/// Golden-section steps: the bracket shrinks to 0.618^N of its log width (about 0.3 % here).
const STEPS: usize = 14;

/// What the steady-state fit found.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SteadyFit {
    pub over_provisioning: f64,
    pub measured_iops: f64,
    pub fitted_iops: f64,
}

/// The overrides that run the steady-state job on a device of `span_bytes`.
pub fn steady_overrides(span_bytes: u64, op: f64) -> Vec<(String, String)> {
    vec![
        ("ftl.enabled".into(), "true".into()),
        ("ftl.precondition".into(), "random:1".into()),
        ("memory.capacity_bytes".into(), span_bytes.to_string()),
        ("ftl.over_provisioning".into(), format!("{op}")),
    ]
}

/// The job the steady rounds ran.
pub const STEADY_JOB: Job = Job {
    pattern: Pattern::RandWrite,
    bs: 4096,
    iodepth: 32,
};

/// Fits over-provisioning to `steady_iops` on `base_toml` with `fitted` overrides; `None`
/// when the device cannot run the job at any share.
pub fn fit(
    base_toml: &str,
    fitted: &[(String, String)],
    span_bytes: u64,
    steady_iops: f64,
) -> Option<SteadyFit> {
    let measured = Figures {
        iops: steady_iops,
        mean_ns: f64::from(STEADY_JOB.iodepth) / steady_iops * 1e9,
        p99_ns: 0.0,
    };
    let workload = simulate::workload(&STEADY_JOB, &measured, span_bytes);
    let iops_at = |op: f64| -> Option<f64> {
        let mut o = fitted.to_vec();
        o.extend(steady_overrides(span_bytes, op));
        let device = apply_overrides(base_toml, &o).ok()?;
        let report = nvarray_run::sim::run(&device, &workload).ok()?;
        Some(report.totals.iops).filter(|i| *i > 0.0)
    };
    let miss = |op: f64| iops_at(op).map_or(f64::INFINITY, |i| (i / steady_iops).ln().powi(2));
    let golden = 0.618_033_988_749_894_9;
    let (mut lo, mut hi) = (OP_MIN.ln(), OP_MAX.ln());
    let mut a = hi - golden * (hi - lo);
    let mut b = lo + golden * (hi - lo);
    let (mut fa, mut fb) = (miss(a.exp()), miss(b.exp()));
    for _ in 0..STEPS {
        if fa <= fb {
            hi = b;
            (b, fb) = (a, fa);
            a = hi - golden * (hi - lo);
            fa = miss(a.exp());
        } else {
            lo = a;
            (a, fa) = (b, fb);
            b = lo + golden * (hi - lo);
            fb = miss(b.exp());
        }
        assert!(
            lo <= a && a <= b && b <= hi,
            "golden-section probes {a} and {b} outside their bracket {lo} to {hi}"
        );
    }
    let op = ((lo + hi) / 2.0).exp();
    assert!(
        (OP_MIN..=OP_MAX).contains(&op),
        "fitted over-provisioning {op} outside the search's bounds"
    );
    Some(SteadyFit {
        over_provisioning: op,
        measured_iops: steady_iops,
        fitted_iops: iops_at(op)?,
    })
}
