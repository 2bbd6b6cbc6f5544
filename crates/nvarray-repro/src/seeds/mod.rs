//! The catalogue: one module per seed paper, each a list of figures.

mod dc_express;
mod moneta;
mod openexpress;
mod storage_future;
mod vnvml;

use crate::spec::{Figure, Seed};

/// The figures of one seed.
pub fn figures(seed: Seed) -> Vec<Figure> {
    let figures = match seed {
        Seed::Moneta => moneta::figures(),
        Seed::OpenExpress => openexpress::figures(),
        Seed::DcExpress => dc_express::figures(),
        Seed::Vnvml => vnvml::figures(),
        Seed::StorageFuture => storage_future::figures(),
    };
    for f in &figures {
        assert_eq!(f.seed, seed, "figure {} is filed under {seed}", f.id);
        check_row_ids(f);
    }
    figures
}

/// Every row's id is `<figure>.<row>` (`spec::Row::id`), so scripts can find a row's figure.
fn check_row_ids(figure: &Figure) {
    for row in &figure.rows {
        assert!(
            row.id
                .strip_prefix(figure.id)
                .is_some_and(|rest| rest.starts_with('.')),
            "row {} is not under its figure {}",
            row.id,
            figure.id
        );
    }
}

/// The studies that take minutes, each run only when named (`nvarray repro vnvml-sqlite`),
/// never by `all` or by its seed's name: `all` stays about a minute. Each: its name, what it
/// is, and its figures.
pub const STUDIES: [(&str, &str); 1] = [(
    "vnvml-sqlite",
    "vNVML's database study redone with SQLite on the library (several minutes)",
)];

/// The figures of the study named `name` (`STUDIES`).
pub fn study(name: &str) -> Option<Vec<Figure>> {
    let figures = match name {
        "vnvml-sqlite" => vec![vnvml::sqlite_figure()],
        _ => return None,
    };
    figures.iter().for_each(check_row_ids);
    Some(figures)
}

/// Every figure, seed by seed, and the studies'.
pub fn all() -> Vec<Figure> {
    let all: Vec<Figure> = Seed::ALL
        .into_iter()
        .flat_map(figures)
        .chain(
            STUDIES
                .iter()
                .flat_map(|(name, _)| study(name).unwrap_or_default()),
        )
        .collect();
    // A figure's id is its anchor in the report and the name of its plot (`<id>.svg`), a
    // row's id what scripts look it up by: each must be one of a kind.
    let mut figure_ids = std::collections::HashSet::new();
    let mut row_ids = std::collections::HashSet::new();
    for f in &all {
        assert!(figure_ids.insert(f.id), "two figures are named {}", f.id);
        for row in &f.rows {
            assert!(
                row_ids.insert(row.id.as_str()),
                "two rows are named {}",
                row.id
            );
        }
    }
    all
}
