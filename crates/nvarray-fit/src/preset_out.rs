//! The fitted preset: the base preset's TOML, its comments kept, each fitted key replaced and
//! marked with where it came from, and a header saying what it was fitted to and how well.

use toml_edit::{DocumentMut, Item, Value};

use crate::fit::FitReport;
use crate::manifest::Manifest;
use crate::steady_fit::SteadyFit;

#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    #[error("the base preset is not TOML: {0}")]
    Toml(#[from] toml_edit::TomlError),
    #[error("the base preset's {0} is not a table")]
    NoTable(String),
}

/// The preset text: `base_toml` with the fit's values, named `name`; `dir` is the collection
/// and `date` today's date (RFC 3339), for the source notes.
pub fn write(
    base_toml: &str,
    name: &str,
    fit: &FitReport,
    manifest: &Manifest,
    dir: &str,
    date: &str,
) -> Result<String, PresetError> {
    let mut doc: DocumentMut = base_toml.parse()?;
    let held = fit.error_words();
    let source = format!("fitted to {dir} on {date}, {held}");
    set_fitted_keys(&mut doc, fit, &source)?;
    if let Some(st) = &fit.steady {
        set_steady_over_provisioning(&mut doc, st, dir, date);
    }
    doc["name"] = toml_edit::value(name);
    doc["description"] = toml_edit::value(format!(
        "fitted to {} ({}) from the {} preset: {held}",
        manifest.target, manifest.fio_version, fit.base
    ));
    Ok(header(fit, manifest, dir, date, &held) + &doc.to_string())
}

/// Sets each fitted key in `doc` (making its table when the base has none), marked with
/// `source`, its range and the parameter it belongs to.
fn set_fitted_keys(
    doc: &mut DocumentMut,
    fit: &FitReport,
    source: &str,
) -> Result<(), PresetError> {
    for p in &fit.params {
        let range = if p.range.identified {
            format!(
                "95 % range {} to {}",
                short(p.range.low),
                short(p.range.high)
            )
        } else {
            "NOT identified by the jobs: the fit holds only with the others as fitted".into()
        };
        for (key, text) in &p.assignments {
            let (table, field) = key.split_once('.').expect("config keys are table.field");
            if doc.get(table).is_none() {
                doc[table] = toml_edit::table();
            }
            let t = doc
                .get_mut(table)
                .and_then(Item::as_table_mut)
                .ok_or_else(|| PresetError::NoTable(table.to_string()))?;
            let mut v: Value = match text.parse::<i64>() {
                Ok(i) => i.into(),
                Err(_) => text
                    .parse::<f64>()
                    .map_or(text.as_str().into(), Value::from),
            };
            v.decor_mut()
                .set_suffix(format!("   # {source}; {range} ({})", p.name));
            t[field] = Item::Value(v);
        }
    }
    Ok(())
}

/// Sets `ftl.over_provisioning` to the value fitted to the steady-state writes, marked with
/// where it came from.
fn set_steady_over_provisioning(doc: &mut DocumentMut, st: &SteadyFit, dir: &str, date: &str) {
    if doc.get("ftl").is_none() {
        doc["ftl"] = toml_edit::table();
    }
    let mut v = Value::from((st.over_provisioning * 1000.0).round() / 1000.0);
    v.decor_mut().set_suffix(format!(
        "   # fitted to {dir}'s steady-state writes ({:.0} IOPS measured, {:.0} fitted) on {date}; applies with ftl.enabled = true",
        st.measured_iops, st.fitted_iops
    ));
    doc["ftl"]["over_provisioning"] = Item::Value(v);
}

/// The comment lines above the preset: what it was fitted to, from which base, and how well.
fn header(fit: &FitReport, manifest: &Manifest, dir: &str, date: &str, held: &str) -> String {
    let p99 = if fit.held_out.jobs > 0 {
        format!("; p99 {:.1} % held out", fit.held_out.p99)
    } else {
        String::new()
    };
    let measured = if manifest.fio_version == "published" {
        format!("published points ({})", manifest.target)
    } else {
        format!(
            "{} measured with {} on {}",
            manifest.target, manifest.fio_version, manifest.date
        )
    };
    format!(
        "# Fitted by `nvarray fit` to {dir}: {measured}, {n} jobs\n\
         # ({train} for the fit, {held_n} held out), starting from the {base} preset on {date}.\n\
         # {held}{p99}. Training: {ti:.1} %, {tm:.1} %, {tp:.1} % (IOPS, mean, p99).\n\
         # Keys marked \"fitted\" come from the fit; the rest are the base's.\n",
        n = fit.jobs.len(),
        train = fit.training.jobs,
        held_n = fit.held_out.jobs,
        base = fit.base,
        ti = fit.training.iops,
        tm = fit.training.mean_latency,
        tp = fit.training.p99,
    )
}

/// A figure as a whole number from 100 up, else to three decimals.
fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{:.0}", v)
    } else {
        format!("{}", (v * 1000.0).round() / 1000.0)
    }
}
