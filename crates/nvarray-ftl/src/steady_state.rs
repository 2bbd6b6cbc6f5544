//! Write amplification at steady state, measured the way the analyses state it: a full
//! device (a sequential fill), warm-up drive-writes, then measured drive-writes of 1-page
//! writes drawn uniformly, or hot and cold (a share of the writes to a share of the space).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::Precondition;
use crate::config::{FtlConfig, VictimPolicy};
use crate::ftl::{Ftl, Geometry};
use crate::precondition::precondition;
use crate::work::GcWork;

/// Where the measured writes go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Workload {
    /// Every logical page alike.
    Uniform,
    /// `hot_writes` of the writes (0 to 1) to the first `hot_space` of the pages, the rest to
    /// the others, each uniformly.
    HotCold { hot_writes: f64, hot_space: f64 },
}

impl Workload {
    fn page(self, rng: &mut SmallRng, logical: u64) -> u64 {
        match self {
            Workload::Uniform => rng.gen_range(0..logical),
            Workload::HotCold {
                hot_writes,
                hot_space,
            } => {
                let hot = ((logical as f64 * hot_space) as u64).clamp(1, logical - 1);
                if rng.gen_bool(hot_writes) {
                    rng.gen_range(0..hot)
                } else {
                    rng.gen_range(hot..logical)
                }
            }
        }
    }
}

/// Fills `ftl`, writes `warm_up` drive-writes of `workload`, and returns the write
/// amplification over `measured` more.
pub fn steady_write_amplification(
    ftl: &mut Ftl,
    workload: Workload,
    warm_up: u64,
    measured: u64,
    seed: u64,
) -> f64 {
    precondition(ftl, Precondition::Fill, seed, |_| {});
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut work = GcWork::new(ftl.dies());
    let logical = ftl.logical_pages();
    for _ in 0..warm_up * logical {
        ftl.write(workload.page(&mut rng, logical), 0, &mut work);
        work.clear();
    }
    ftl.reset_counters();
    for _ in 0..measured * logical {
        ftl.write(workload.page(&mut rng, logical), 0, &mut work);
        work.clear();
    }
    ftl.counters().write_amplification()
}

/// An FTL on one die, so a line is one erase block (the analyses' unit of collection), with
/// `victim`, `over_provisioning` and the other settings at their defaults.
pub fn one_die_ftl(
    victim: VictimPolicy,
    over_provisioning: f64,
    pages_per_block: u32,
    logical_pages: u64,
) -> Ftl {
    let cfg = FtlConfig {
        enabled: true,
        over_provisioning,
        victim,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 1,
        pages_per_block,
        logical_pages,
    };
    Ftl::new(&cfg, geometry).unwrap_or_else(|e| panic!("an FTL for the analyses: {e}"))
}
