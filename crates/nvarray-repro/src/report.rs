//! Judging a figure's rows against the published values, and the report: markdown for
//! people, JSON for scripts, and the data of each plot for the caller to draw.

use std::collections::HashMap;
use std::fmt::Write as _;

use nvarray_model::Verdict as EmulationVerdict;
use serde::Serialize;
use serde_json::Value;

use crate::spec::{Expect, Figure, Plot, Row, Seed, Source};

/// How a row came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Within the tolerance (or on the right side of a published bound).
    Within,
    /// Outside it.
    Outside,
    /// A known difference, with its reason.
    Differs,
    /// A measurement of this machine, reported and not judged.
    Measured,
    /// Could not be measured here (the reason is in `reason`).
    NotRun,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Within => "within",
            Verdict::Outside => "OUTSIDE",
            Verdict::Differs => "differs",
            Verdict::Measured => "measured",
            Verdict::NotRun => "not run",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RowResult {
    pub id: String,
    pub what: String,
    pub unit: &'static str,
    /// `None` when the seed states no number (the rule reads its words).
    pub published: Option<f64>,
    pub published_text: &'static str,
    /// Where the published value is stated, as the report prints it.
    pub source: String,
    /// The same, for scripts: the document, the place in it and the words.
    pub cited: Source,
    /// nvarray's value; `None` when it could not be measured.
    pub value: Option<f64>,
    /// nvarray / published; `None` when either is not a number.
    pub ratio: Option<f64>,
    /// The rule: "±10 %", "≥ 20000000", "differs", "measured".
    pub rule: String,
    pub verdict: Verdict,
    /// Why it differs, or why it was not run.
    pub reason: Option<String>,
    pub note: Option<&'static str>,
    pub commands: Vec<String>,
    /// When a run behind the value was emulated and not faithful: the worst verdict of its
    /// reports (`machine-limited`, `NOT FAITHFUL`) and its reason, so the value is read with
    /// it.
    pub emulation: Option<String>,
}

/// The worst verdict of the run reports anywhere in `outcomes` (a report, an array of them,
/// `--compare-sim`'s pair), with its reason; `None` when every one was faithful.
fn emulation_verdict(outcomes: &[&Value]) -> Option<String> {
    fn walk(v: &Value, worst: &mut Option<(EmulationVerdict, String)>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| walk(i, worst)),
            Value::Object(map) => {
                let verdict = map
                    .get("verdict")
                    .and_then(|x| serde_json::from_value::<EmulationVerdict>(x.clone()).ok());
                if let Some(verdict) = verdict.filter(|v| *v != EmulationVerdict::Faithful) {
                    if worst.as_ref().is_none_or(|(w, _)| verdict > *w) {
                        let why = map
                            .get("unfaithful_reason")
                            .and_then(Value::as_str)
                            .unwrap_or("no reason given");
                        *worst = Some((verdict, why.to_string()));
                    }
                }
                map.values().for_each(|x| walk(x, worst));
            }
            _ => {}
        }
    }
    let mut worst = None;
    outcomes.iter().for_each(|o| walk(o, &mut worst));
    worst.map(|(v, why)| format!("the emulated run was {}: {why}", v.words()))
}

/// A plot's data, measured, for the caller to draw.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PlotData {
    Lines {
        x_label: &'static str,
        y_label: &'static str,
        log_x: bool,
        log_y: bool,
        /// (label, points); a point that could not be measured is left out.
        series: Vec<(String, Vec<(f64, f64)>)>,
        published: Vec<(f64, f64)>,
    },
    StackedBars {
        y_label: &'static str,
        /// (bar label, parts (name, value)).
        bars: Vec<(String, Vec<(String, f64)>)>,
    },
    RowBars {
        y_label: &'static str,
        log_y: bool,
        /// (row, published (`None` when the seed gives words, not a number), nvarray).
        rows: Vec<(String, Option<f64>, f64)>,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct FigureResult {
    pub id: &'static str,
    pub seed: Seed,
    pub title: &'static str,
    pub source: &'static str,
    pub rows: Vec<RowResult>,
    pub plot: Option<PlotData>,
}

impl FigureResult {
    /// Rows per verdict, in `Verdict` order.
    pub fn counts(&self) -> [(Verdict, usize); 5] {
        let n = |v| self.rows.iter().filter(|r| r.verdict == v).count();
        let counts = [
            (Verdict::Within, n(Verdict::Within)),
            (Verdict::Outside, n(Verdict::Outside)),
            (Verdict::Differs, n(Verdict::Differs)),
            (Verdict::Measured, n(Verdict::Measured)),
            (Verdict::NotRun, n(Verdict::NotRun)),
        ];
        // Every row has exactly one verdict: a verdict left out here would drop rows from the
        // report's summary.
        assert_eq!(
            counts.iter().map(|(_, c)| c).sum::<usize>(),
            self.rows.len(),
            "figure {}: the verdict counts do not add up to its rows",
            self.id
        );
        counts
    }
}

type Outcomes = HashMap<String, Result<Value, String>>;

/// The outcomes of `experiments`, or the first reason one is missing.
fn outcomes_of<'a>(
    experiments: &[crate::spec::Experiment],
    outcomes: &'a Outcomes,
) -> Result<Vec<&'a Value>, String> {
    experiments
        .iter()
        .map(|e| match outcomes.get(&e.command()) {
            Some(Ok(v)) => Ok(v),
            Some(Err(reason)) => Err(reason.clone()),
            None => Err("not run".to_string()),
        })
        .collect()
}

fn judge_row(row: &Row, outcomes: &Outcomes) -> RowResult {
    assert!(
        !row.experiments.is_empty(),
        "row {} has no experiment to measure it",
        row.id
    );
    let found = outcomes_of(&row.experiments, outcomes);
    let emulation = found.as_ref().ok().and_then(|o| emulation_verdict(o));
    let measured = found.map(|o| (row.measure)(&o));
    let (value, mut reason) = match measured {
        Ok(Some(v)) if v.is_finite() => (Some(v), None),
        Ok(_) => (None, Some("the outcome lacks the number".to_string())),
        Err(e) => (None, Some(e)),
    };
    let rule = rule_text(row);
    let verdict = match (value, &row.expect) {
        (None, _) => Verdict::NotRun,
        (Some(v), Expect::Within(t)) => match row.published {
            Some(published) if (v / published - 1.0).abs() <= *t => Verdict::Within,
            Some(_) => Verdict::Outside,
            // A tolerance around words is a catalogue mistake (`seeds::tests` rules it out).
            None => {
                reason = Some("the row has no published number to be within".to_string());
                Verdict::NotRun
            }
        },
        (Some(v), Expect::AtLeast(b)) if v >= *b => Verdict::Within,
        (Some(v), Expect::AtMost(b)) if v <= *b => Verdict::Within,
        (Some(_), Expect::AtLeast(_) | Expect::AtMost(_)) => Verdict::Outside,
        (Some(_), Expect::Differs { reason: why, .. }) => {
            reason = Some(why.to_string());
            Verdict::Differs
        }
        (Some(_), Expect::Measured) => Verdict::Measured,
    };
    // The report prints why a row differs or was not run: neither may come without a reason.
    assert!(
        reason.is_some() || !matches!(verdict, Verdict::NotRun | Verdict::Differs),
        "row {}: {} without a reason",
        row.id,
        verdict.name()
    );
    RowResult {
        id: row.id.clone(),
        what: row.what.clone(),
        unit: row.unit,
        published: row.published,
        published_text: row.published_text,
        source: row.source.to_string(),
        cited: row.source,
        value,
        ratio: ratio(value, row.published),
        rule,
        verdict,
        reason,
        note: row.note,
        commands: row.experiments.iter().map(|e| e.command()).collect(),
        emulation,
    }
}

/// How a row's value is judged, as the report's rule column shows it (`±10 %`, `≥ 0.9`, ...).
fn rule_text(row: &Row) -> String {
    match &row.expect {
        Expect::Within(t) => {
            assert!(
                *t > 0.0 && *t < 1.0,
                "row {}: tolerance {t} is not a fraction of the published value",
                row.id
            );
            format!("±{:.0} %", t * 100.0)
        }
        Expect::AtLeast(b) => format!("≥ {}", number(*b)),
        Expect::AtMost(b) => format!("≤ {}", number(*b)),
        Expect::Differs { .. } => "differs".to_string(),
        Expect::Measured => "measured".to_string(),
    }
}

/// nvarray's value over the published one, when both are numbers: a row whose seed states
/// words ("collapses") has no ratio, rather than one over a number the seed never gave.
fn ratio(value: Option<f64>, published: Option<f64>) -> Option<f64> {
    let (value, published) = (value?, published?);
    (published != 0.0).then(|| value / published)
}

/// Judges every row of `figure` and gathers its plot's data.
pub fn judge(figure: &Figure, outcomes: &Outcomes) -> FigureResult {
    let rows: Vec<RowResult> = figure.rows.iter().map(|r| judge_row(r, outcomes)).collect();
    let one = |e: &crate::spec::Experiment| match outcomes.get(&e.command()) {
        Some(Ok(v)) => Some(v),
        _ => None,
    };
    if let Some(Plot::Lines { series, .. }) = &figure.plot {
        // A curve is drawn through its points in order: the catalogue lists them by x.
        for s in series {
            assert!(
                s.points.windows(2).all(|w| w[0].x < w[1].x),
                "figure {}, series {}: the x values do not increase",
                figure.id,
                s.label
            );
        }
    }
    let plot = figure.plot.as_ref().map(|p| match p {
        Plot::Lines {
            x_label,
            y_label,
            log_x,
            log_y,
            series,
            published,
        } => PlotData::Lines {
            x_label,
            y_label,
            log_x: *log_x,
            log_y: *log_y,
            series: series
                .iter()
                .map(|s| {
                    let points = s
                        .points
                        .iter()
                        .filter_map(|p| Some((p.x, (p.measure)(&[one(&p.experiment)?])?)))
                        .collect();
                    (s.label.clone(), points)
                })
                .collect(),
            published: published.clone(),
        },
        Plot::StackedBars { y_label, bars } => PlotData::StackedBars {
            y_label,
            bars: bars
                .iter()
                .filter_map(|b| Some((b.label.clone(), (b.parts)(one(&b.experiment)?))))
                .collect(),
        },
        Plot::RowBars { y_label, log_y } => PlotData::RowBars {
            y_label,
            log_y: *log_y,
            rows: rows
                .iter()
                .filter_map(|r| Some((r.what.clone(), r.published, r.value?)))
                .collect(),
        },
    });
    FigureResult {
        id: figure.id,
        seed: figure.seed,
        title: figure.title,
        source: figure.source,
        rows,
        plot,
    }
}

/// A number with three significant digits, without a trail of zeros, in plain notation up
/// to the billions.
pub fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).clamp(0, 6) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// Who made the report and when, for its header.
pub struct Header {
    pub version: String,
    pub commit: String,
    pub date: String,
    pub seeds: Vec<Seed>,
    pub machine: String,
}

/// The whole report as markdown: a summary, then one section per figure with its table, its
/// plot (`<id>.svg`) and the commands.
pub fn markdown(results: &[FigureResult], header: &Header) -> String {
    let mut out = String::new();
    write_summary(&mut out, results, header);
    for f in results {
        write_figure(&mut out, f);
    }
    out
}

/// The report's title, who made it, what the verdicts mean and each figure's count of rows
/// per verdict.
fn write_summary(out: &mut String, results: &[FigureResult], header: &Header) {
    let _ = writeln!(out, "# nvarray repro: the seeds' figures, redrawn\n");
    let _ = writeln!(
        out,
        "nvarray {} (commit {}), {}, on {}. Seeds: {}. Written by `nvarray repro`; every \
         number has the command that made it (job files are in `jobs/`).\n",
        header.version,
        header.commit,
        header.date,
        header.machine,
        header
            .seeds
            .iter()
            .map(|s| s.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        out,
        "Verdicts: **within** the tolerance (or on the published side of a stated bound); \
         **OUTSIDE** it; **differs**, a known difference with its reason; **measured**, a \
         measurement of this machine (emulator, NVM library, kernel), shown beside the \
         published value but not judged, since the seeds' machines were not this one; \
         **not run**, with the reason.\n"
    );
    let _ = writeln!(
        out,
        "| figure | within | OUTSIDE | differs | measured | not run |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for f in results {
        let c = f.counts();
        let _ = writeln!(
            out,
            "| [{}](#{}) | {} | {} | {} | {} | {} |",
            f.title, f.id, c[0].1, c[1].1, c[2].1, c[3].1, c[4].1
        );
    }
}

/// One figure's section: its heading, source and plot, then its table of rows and their
/// notes.
fn write_figure(out: &mut String, f: &FigureResult) {
    let _ = writeln!(
        out,
        "\n<a id=\"{}\"></a>\n## {} ({})\n",
        f.id, f.title, f.seed
    );
    let _ = writeln!(out, "Source: {}\n", f.source);
    if f.plot.is_some() {
        let _ = writeln!(out, "![{}]({}.svg)\n", f.title, f.id);
    }
    if f.rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "| row | published | nvarray | ratio | rule | verdict | command |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    for r in &f.rows {
        write_row(out, r);
    }
    let notes: Vec<String> = f.rows.iter().filter_map(row_note).collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "\n{}", notes.join("\n"));
    }
}

/// One row of a figure's table.
fn write_row(out: &mut String, r: &RowResult) {
    let value = r
        .value
        .map_or("—".to_string(), |v| format!("{} {}", number(v), r.unit));
    // The ratio in the same digits as the values beside it (three significant), so a
    // value of 0.0081 is not shown beside a ratio rounded to 0.08 or 0.01.
    let ratio = r.ratio.map_or("—".to_string(), number);
    let commands = r
        .commands
        .iter()
        .map(|c| format!("`{}`", c.replace('|', "\\|")))
        .collect::<Vec<_>>()
        .join("<br>");
    let _ = writeln!(
        out,
        "| {} | {} ({}) | {} | {} | {} | {} | {} |",
        r.what,
        r.published_text,
        r.source.replace('|', "\\|"),
        value,
        ratio,
        r.rule,
        r.verdict.name(),
        commands
    );
}

/// A row's note under the table: its reason, its note and its emulated run's verdict, in
/// that order; `None` when it has none of them.
fn row_note(r: &RowResult) -> Option<String> {
    let mut text = String::new();
    if let Some(reason) = &r.reason {
        text.push_str(reason);
    }
    for extra in [r.note, r.emulation.as_deref()].into_iter().flatten() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(extra);
    }
    (!text.is_empty()).then(|| format!("- *{}*: {text}", r.what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{at, of, sim, Source};

    /// A one-row figure whose row reads `x` off a simulator run that `outcomes` answers.
    fn one_row(published: Option<f64>, published_text: &'static str) -> (Figure, Outcomes) {
        let experiment = sim("moneta", &[], &[("rw", "randread")]);
        let outcomes =
            HashMap::from([(experiment.command(), Ok(serde_json::json!({ "x": 0.0081 })))]);
        let row = Row {
            id: "f.r".into(),
            what: "bandwidth at 128 us / at 4 ns".into(),
            unit: "x",
            published,
            published_text,
            source: Source::Outside { reference: "r" },
            experiments: vec![experiment],
            measure: of(|v| at(v, "x")),
            expect: Expect::AtMost(0.2),
            note: None,
        };
        let figure = Figure {
            id: "f",
            seed: Seed::Moneta,
            title: "t",
            source: "s",
            rows: vec![row],
            plot: Some(Plot::RowBars {
                y_label: "x",
                log_y: false,
            }),
        };
        (figure, outcomes)
    }

    fn table_line(result: &FigureResult) -> String {
        let header = Header {
            version: "0".into(),
            commit: "c".into(),
            date: "d".into(),
            seeds: vec![Seed::Moneta],
            machine: "m".into(),
        };
        let text = markdown(std::slice::from_ref(result), &header);
        text.lines()
            .find(|l| l.starts_with("| bandwidth at 128 us"))
            .expect("the row's line")
            .to_string()
    }

    /// A value measured on an emulated run that was not faithful says so beside it: the worst
    /// verdict among its reports (here inside `--compare-sim`'s pair), with the reason.
    #[test]
    fn a_value_from_an_unfaithful_emulated_run_says_so() {
        let (figure, mut outcomes) = one_row(None, "collapses");
        let judged = |outcomes: &Outcomes| judge(&figure, outcomes).rows[0].emulation.clone();
        assert_eq!(
            judged(&outcomes),
            None,
            "a simulation has no verdict to tell"
        );
        for v in outcomes.values_mut() {
            *v = Ok(serde_json::json!({
                "x": 0.0081,
                "sim": { "verdict": "faithful", "unfaithful_reason": null },
                "emu": [
                    { "verdict": "machine-limited", "unfaithful_reason": "paused" },
                    { "verdict": "faithful", "unfaithful_reason": null },
                ],
            }));
        }
        let said = judged(&outcomes).expect("told");
        assert_eq!(said, "the emulated run was machine-limited: paused");
        let header = Header {
            version: "v".into(),
            commit: "c".into(),
            date: "d".into(),
            seeds: Vec::new(),
            machine: "m".into(),
        };
        let text = markdown(&[judge(&figure, &outcomes)], &header);
        assert!(text.contains("machine-limited: paused"), "{text}");
        for v in outcomes.values_mut() {
            if let Ok(Value::Object(map)) = v {
                map.insert(
                    "late".into(),
                    serde_json::json!({ "verdict": "not-faithful", "unfaithful_reason": "own" }),
                );
            }
        }
        assert_eq!(
            judged(&outcomes).as_deref(),
            Some("the emulated run was NOT FAITHFUL: own")
        );
    }

    #[test]
    fn a_row_of_words_has_no_ratio_and_no_published_bar() {
        let (figure, outcomes) = one_row(None, "collapses");
        let result = judge(&figure, &outcomes);
        let row = &result.rows[0];
        assert_eq!(row.value, Some(0.0081));
        assert_eq!(row.ratio, None);
        assert_eq!(row.verdict, Verdict::Within);
        let line = table_line(&result);
        assert!(line.contains("| 0.0081 x | — | ≤ 0.2 |"), "{line}");
        let Some(PlotData::RowBars { rows, .. }) = &result.plot else {
            panic!("a row-bar plot")
        };
        assert_eq!(rows[0].1, None);
    }

    #[test]
    fn a_ratio_is_printed_in_the_digits_of_the_value_beside_it() {
        let (figure, outcomes) = one_row(Some(0.1), "0.1");
        let result = judge(&figure, &outcomes);
        let line = table_line(&result);
        // 0.0081 / 0.1: shown as 0.081, not rounded to two decimals (0.08).
        assert!(line.contains("| 0.0081 x | 0.081 | ≤ 0.2 |"), "{line}");
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        for (x, text) in [
            (8.2154, "8.22"),
            (1.0, "1"),
            (541_234.0, "541234"),
            (0.012345, "0.0123"),
            (25_000_000.0, "25000000"),
            (72.0, "72"),
        ] {
            assert_eq!(number(x), text, "{x}");
        }
    }
}
