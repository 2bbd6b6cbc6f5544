//! Preconditioning: bringing a fresh FTL to the state a measured run should start from, a
//! sequential fill and then drive-writes of uniform random writes, untimed.
//!
//! The fill is laid down at once, exactly (`Ftl::fill_in_bulk`). Each random write goes
//! through the same `Ftl::look_up` and `Ftl::write` a timed run's does, only without booking
//! time, so the state reached (the map, every line's valid count, the free lines, erases
//! per block) is exactly the one timing each write would reach: there is no fast-forward
//! to check against. It costs about 70 ns a page written on a 64 MiB device and 390 ns on
//! 64 GiB, where the maps no longer fit in cache (`cargo bench -p nvarray-ftl`, docs/perf.md).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::Precondition;
use crate::ftl::Ftl;
use crate::work::GcWork;

/// What preconditioning did, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Preconditioned {
    pub pages_written: u64,
    /// Its write amplification over the random part (1 for a fill).
    pub write_amplification: f64,
    /// Whether the random part ran on the lines' counts (`fluid.rs`) rather than page by
    /// page, because the page-by-page maps would not fit `ftl.map_budget_bytes`.
    pub in_bulk: bool,
}

/// Writes `how` into `ftl` with `seed` for the random part, then resets its counters so the
/// measured run's are its own. `progress` is called with the fraction done now and then.
///
/// The fill is always laid down at once (`Ftl::fill_in_bulk`, exactly what writing each page
/// would leave). The random part runs page by page through `Ftl::write` when both maps, every
/// entry written, fit `ftl.map_budget_bytes`, and in bulk on the lines' counts otherwise.
pub fn precondition(
    ftl: &mut Ftl,
    how: Precondition,
    seed: u64,
    mut progress: impl FnMut(f64),
) -> Preconditioned {
    let logical = ftl.logical_pages();
    let random = match how {
        Precondition::None => return Preconditioned::default(),
        Precondition::Fill => 0,
        Precondition::Random { drive_writes } => (logical as f64 * drive_writes).round() as u64,
    };
    let total = logical + random;
    let in_bulk = random > 0 && ftl.page_by_page_map_bytes() > ftl.map_budget_bytes();
    let write_amplification = if in_bulk {
        let Precondition::Random { drive_writes } = how else {
            unreachable!("only a random part goes in bulk")
        };
        ftl.random_in_bulk(drive_writes, &mut progress)
    } else {
        ftl.fill_in_bulk();
        ftl.reset_counters();
        random_page_by_page(ftl, random, seed, |f| {
            progress((logical as f64 + f * random as f64) / total as f64)
        })
    };
    ftl.reset_counters();
    // Set-up time: the run starts with the map settled, in DRAM and in flash.
    ftl.finish_deferred();
    ftl.write_back_map();
    ftl.reset_counters();
    progress(1.0);
    Preconditioned {
        pages_written: total,
        write_amplification,
        in_bulk,
    }
}

/// `writes` uniform random 1-page writes through `Ftl::look_up` and `Ftl::write`; returns
/// their write amplification (1 for none).
fn random_page_by_page(
    ftl: &mut Ftl,
    writes: u64,
    seed: u64,
    mut progress: impl FnMut(f64),
) -> f64 {
    let logical = ftl.logical_pages();
    let step = (writes / 100).max(1);
    let mut work = GcWork::new(ftl.dies());
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in 0..writes {
        let lpn = rng.gen_range(0..logical);
        ftl.look_up(lpn, true);
        ftl.write(lpn, 0, &mut work);
        work.clear();
        if i.is_multiple_of(step) {
            progress(i as f64 / writes as f64);
        }
    }
    assert_eq!(
        ftl.counters().host_pages_written,
        writes,
        "host pages counted since the fill against random writes made"
    );
    if writes == 0 {
        1.0
    } else {
        ftl.counters().write_amplification()
    }
}
