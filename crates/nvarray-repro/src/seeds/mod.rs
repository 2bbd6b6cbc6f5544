//! The catalogue: one module per seed paper, each a list of figures.

mod dc_express;
mod moneta;
mod openexpress;
mod storage_future;
mod vnvml;

use crate::spec::{Figure, Seed};

/// The figures of one seed.
pub fn figures(seed: Seed) -> Vec<Figure> {
    match seed {
        Seed::Moneta => moneta::figures(),
        Seed::OpenExpress => openexpress::figures(),
        Seed::DcExpress => dc_express::figures(),
        Seed::Vnvml => vnvml::figures(),
        Seed::StorageFuture => storage_future::figures(),
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
    match name {
        "vnvml-sqlite" => Some(vec![vnvml::sqlite_figure()]),
        _ => None,
    }
}

/// Every figure, seed by seed, and the studies'.
pub fn all() -> Vec<Figure> {
    Seed::ALL
        .into_iter()
        .flat_map(figures)
        .chain(
            STUDIES
                .iter()
                .flat_map(|(name, _)| study(name).unwrap_or_default()),
        )
        .collect()
}
