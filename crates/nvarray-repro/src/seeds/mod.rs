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

/// Every figure, seed by seed.
pub fn all() -> Vec<Figure> {
    Seed::ALL.into_iter().flat_map(figures).collect()
}
