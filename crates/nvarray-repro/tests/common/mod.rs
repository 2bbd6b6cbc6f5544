//! Runs every simulator row of one seed, together, and checks each against its rule: within
//! its tolerance, on the published side of a bound, or, where the row says nvarray differs,
//! at the value it documents (±2 %, so a model change that moves it is seen and the reason
//! re-read). Rows measured on a machine (emulator, NVM library, kernel) are benchmarks, not
//! tests: `nvarray repro` runs them.

use nvarray_repro::{evaluate, seeds, Expect, Seed, SimOnly, Verdict};

pub fn check_seed(seed: Seed) {
    let figures = seeds::figures(seed);
    let results = evaluate(&figures, &mut SimOnly, &mut |_, _, _| {});
    let mut failures = Vec::new();
    let mut checked = 0;
    for (figure, result) in figures.iter().zip(&results) {
        for (row, r) in figure.rows.iter().zip(&result.rows) {
            let machine = row.experiments.iter().any(|e| {
                !matches!(
                    e,
                    nvarray_repro::Experiment::Sim(_)
                        | nvarray_repro::Experiment::ProtocolCost { .. }
                )
            });
            if machine {
                assert_eq!(
                    r.verdict,
                    Verdict::NotRun,
                    "{}: a machine row ran in a test",
                    r.id
                );
                continue;
            }
            checked += 1;
            let got = r.value.unwrap_or(f64::NAN);
            let ok = match &row.expect {
                Expect::Differs { nvarray, .. } => (got / nvarray - 1.0).abs() <= 0.02,
                _ => r.verdict == Verdict::Within,
            };
            if !ok {
                failures.push(format!(
                    "{}: {} = {got:.4} {} against published {} ({:?}), rule {} {:?}",
                    r.id, r.what, r.unit, r.published_text, r.published, r.rule, row.expect
                ));
            }
        }
    }
    assert!(checked > 0, "{seed}: no simulator row");
    assert!(failures.is_empty(), "{seed}:\n{}", failures.join("\n"));
}
