//! `nvarray fit`'s report: the parameters with their ranges, what the jobs cannot identify, the
//! error per job and over the training and held-out jobs; and its chart, measured against
//! fitted for every job.

use std::fmt::Write;
use std::path::Path;

use nvarray_fit::fit::{FitReport, JobFit, Mape};
use nvarray_fit::manifest::Manifest;

use nvarray_present::plot::{write_chart, Chart, ChartError, Series};

/// The report as text.
pub fn table(fit: &FitReport, manifest: &Manifest, dir: &str) -> String {
    // The MAPE rows count every job of the table, each once.
    assert_eq!(
        fit.training.jobs + fit.held_out.jobs,
        fit.jobs.len(),
        "training and held-out jobs of all jobs"
    );
    let mut s = header_rows(fit, manifest, dir);
    s += &params_rows(fit);
    let loose = fit.not_identified();
    if !loose.is_empty() {
        let _ = writeln!(
            s,
            "not identified by these jobs (95 % range wider than ±10 %): {}. Their fitted values \
             reproduce the jobs only together with the others; a grid with more of the jobs \
             that move them (see docs/fit.md) would pin them.",
            loose.join(", ")
        );
    }
    s += &job_rows(fit);
    let _ = writeln!(s, "\nMAPE       jobs    IOPS   mean latency    p99");
    // Published points carry no distribution: their p99 is their mean, no figure to match.
    let published = manifest.fio_version == "published";
    for (name, m) in [("training", &fit.training), ("held out", &fit.held_out)] {
        s += &mape_row(name, m, published);
    }
    s
}

/// What was fitted to what: the base and the measurements, the jobs and the search, and the
/// jobs skipped.
fn header_rows(fit: &FitReport, manifest: &Manifest, dir: &str) -> String {
    let mut s = String::new();
    if manifest.fio_version == "published" {
        let _ = writeln!(
            s,
            "fit of preset {} to published points: {}",
            fit.base, manifest.target
        );
    } else {
        let _ = writeln!(
            s,
            "fit of preset {} to {dir}: {} ({:?}, {}), {} on {}",
            fit.base,
            manifest.target,
            manifest.kind,
            size(manifest.span_bytes as f64),
            manifest.fio_version,
            manifest.date
        );
    }
    let _ = writeln!(
        s,
        "{} jobs: {} for the fit, {} held out{}; {} simulator evaluations in {:.1} s{}; loss {:.4} at the base, {:.4} fitted",
        fit.jobs.len(),
        fit.training.jobs,
        fit.held_out.jobs,
        if fit.skipped.is_empty() { String::new() } else { format!(", {} skipped", fit.skipped.len()) },
        fit.evaluations,
        fit.seconds,
        if fit.budget_spent { " (the evaluation budget ran out: --evaluations)" } else { "" },
        fit.loss_base,
        fit.loss,
    );
    for k in &fit.skipped {
        let _ = writeln!(s, "  skipped {}: {}", k.job, k.why);
    }
    s
}

/// The error per job: its IOPS, mean and p99 latency, measured against fitted.
fn job_rows(fit: &FitReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<22} {:>4} {:>10} {:>10} {:>6}  {:>10} {:>10} {:>6}  {:>10} {:>10} {:>6}",
        "job",
        "set",
        "IOPS",
        "fitted",
        "err %",
        "mean us",
        "fitted",
        "err %",
        "p99 us",
        "fitted",
        "err %"
    );
    for j in &fit.jobs {
        s += &job_row(j);
    }
    s
}

/// The parameters: base, fitted, range, meaning; over-provisioning when fitted.
fn params_rows(fit: &FitReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<36} {:>12} {:>12}  {:<27} meaning",
        "parameter", "base", "fitted", "95 % range"
    );
    for p in &fit.params {
        let range = if p.range.identified {
            format!(
                "{} .. {}",
                value(p.name, p.range.low),
                value(p.name, p.range.high)
            )
        } else if p.range.high < 100.0 * p.range.low {
            format!(
                "{} .. {} (wide)",
                value(p.name, p.range.low),
                value(p.name, p.range.high)
            )
        } else {
            "not identified".to_string()
        };
        let _ = writeln!(
            s,
            "{:<36} {:>12} {:>12}  {:<27} {}",
            p.name,
            value(p.name, p.base),
            value(p.name, p.value),
            range,
            p.meaning
        );
    }
    if let Some(st) = &fit.steady {
        let _ = writeln!(
            s,
            "{:<36} {:>12} {:>12}  {:<27} fitted alone to the steady-state writes: {:.0} IOPS measured, {:.0} fitted",
            "ftl.over_provisioning", "", format!("{:.3}", st.over_provisioning), "", st.measured_iops, st.fitted_iops
        );
    }
    s
}

fn job_row(j: &JobFit) -> String {
    let m = &j.measured;
    let set = if j.held_out { "held" } else { "fit" };
    match &j.fitted {
        Some(f) => {
            let err = |p: f64, q: f64| 100.0 * (p - q) / q;
            format!(
                "{:<22} {:>4} {:>10.0} {:>10.0} {:>+6.1}  {:>10.1} {:>10.1} {:>+6.1}  {:>10.1} {:>10.1} {:>+6.1}\n",
                j.job,
                set,
                m.iops,
                f.iops,
                err(f.iops, m.iops),
                m.mean_ns / 1e3,
                f.mean_ns / 1e3,
                err(f.mean_ns, m.mean_ns),
                m.p99_ns / 1e3,
                f.p99_ns / 1e3,
                err(f.p99_ns, m.p99_ns)
            )
        }
        None => format!(
            "{:<22} {:>4} {:>10.0} {:>10}\n",
            j.job, set, m.iops, "(no run)"
        ),
    }
}

fn mape_row(name: &str, m: &Mape, published: bool) -> String {
    if m.jobs == 0 {
        return format!("{name:<10} {:>4}    (none)\n", 0);
    }
    let p99 = if published {
        "(not published)".to_string()
    } else {
        format!("{:.1} %", m.p99)
    };
    format!(
        "{name:<10} {:>4} {:>6.1} % {:>10.1} % {:>10}\n",
        m.jobs, m.iops, m.mean_latency, p99
    )
}

/// A parameter's value in its unit.
fn value(name: &str, v: f64) -> String {
    if name.ends_with("_ns") {
        match v {
            v if v >= 1e6 => format!("{:.3} ms", v / 1e6),
            v if v >= 1e3 => format!("{:.3} us", v / 1e3),
            v => format!("{v:.0} ns"),
        }
    } else if name.ends_with("_per_s") {
        format!("{}/s", size(v))
    } else if name.ends_with("_bytes") {
        size(v)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

fn size(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.2} GB", v / 1e9),
        v if v >= 1e6 => format!("{:.1} MB", v / 1e6),
        v if v >= 1e3 => format!("{:.1} kB", v / 1e3),
        v => format!("{v:.0} B"),
    }
}

/// The chart: each job's fitted IOPS and mean latency against the measured, on log axes, the
/// held-out jobs apart from the training ones, and the line where fitted equals measured.
pub fn chart(fit: &FitReport, title: &str, path: &Path) -> Result<(), ChartError> {
    let points =
        |held: bool, metric: fn(&nvarray_fit::measured::Figures) -> f64| -> Vec<(f64, f64)> {
            fit.jobs
                .iter()
                .filter(|j| j.held_out == held)
                .filter_map(|j| j.fitted.as_ref().map(|f| (metric(&j.measured), metric(f))))
                .collect()
        };
    let iops = |f: &nvarray_fit::measured::Figures| f.iops;
    let lat_us = |f: &nvarray_fit::measured::Figures| f.mean_ns / 1e3;
    // IOPS and microseconds share the axes: both span about the same decades here.
    let all: Vec<f64> = fit
        .jobs
        .iter()
        .flat_map(|j| [j.measured.iops, j.measured.mean_ns / 1e3])
        .filter(|v| *v > 0.0)
        .collect();
    let low = all.iter().cloned().fold(f64::INFINITY, f64::min);
    let high = all.iter().cloned().fold(0.0, f64::max);
    let series = [
        Series {
            label: "fitted = measured".into(),
            points: vec![(low, low), (high, high)],
        },
        Series {
            label: "IOPS, fit jobs".into(),
            points: points(false, iops),
        },
        Series {
            label: "IOPS, held-out jobs".into(),
            points: points(true, iops),
        },
        Series {
            label: "mean latency (us), fit jobs".into(),
            points: points(false, lat_us),
        },
        Series {
            label: "mean latency (us), held-out jobs".into(),
            points: points(true, lat_us),
        },
    ];
    write_chart(
        path,
        &Chart {
            title,
            x_label: "measured (IOPS or us)",
            y_label: "fitted (IOPS or us)",
            log_x: true,
            log_y: true,
            series: &series,
            reference: None,
            guide_then_points: true,
        },
    )
}
