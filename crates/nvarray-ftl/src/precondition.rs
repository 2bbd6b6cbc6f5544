//! Preconditioning: bringing a fresh FTL to the state a measured run should start from, a
//! sequential fill and then drive-writes of uniform random writes, untimed.
//!
//! Each write goes through the same `Ftl::write` a timed run's does, only without booking
//! time, so the state reached (the map, every line's valid count, the free lines, erases
//! per block) is exactly the one timing each write would reach: there is no fast-forward
//! to check against. It costs tens of nanoseconds a page (`cargo bench -p nvarray-ftl`).

use std::fmt;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::ftl::Ftl;
use crate::work::GcWork;

/// What to write before the measured run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Precondition {
    /// Nothing: every page unmapped, every line free (a new drive).
    #[default]
    None,
    /// Every logical page written once, in order.
    Fill,
    /// The fill, then `drive_writes` times the logical space in uniform random 1-page writes.
    Random { drive_writes: f64 },
}

impl FromStr for Precondition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Precondition::None),
            "fill" => Ok(Precondition::Fill),
            _ => {
                let n = s.strip_prefix("random:").ok_or_else(|| {
                    format!("expected `none`, `fill` or `random:N` (N drive-writes), found `{s}`")
                })?;
                let drive_writes: f64 = n.parse().map_err(|_| {
                    format!("expected a number of drive-writes after `random:`, found `{n}`")
                })?;
                if !(0.0..=1000.0).contains(&drive_writes) {
                    return Err(format!(
                        "expected from 0 to 1000 drive-writes in `random:N`, found {n}"
                    ));
                }
                Ok(Precondition::Random { drive_writes })
            }
        }
    }
}

impl fmt::Display for Precondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Precondition::None => write!(f, "none"),
            Precondition::Fill => write!(f, "fill"),
            Precondition::Random { drive_writes } => write!(f, "random:{drive_writes}"),
        }
    }
}

impl serde::Serialize for Precondition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Precondition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What preconditioning did, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Preconditioned {
    pub pages_written: u64,
    /// Its write amplification over the random part (1 for a fill).
    pub write_amplification: f64,
}

/// Writes `how` into `ftl` with `seed` for the random part, then resets its counters so the
/// measured run's are its own. `progress` is called with the fraction done now and then.
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
    let step = (total / 100).max(1);
    let mut work = GcWork::new(ftl.dies());
    for lpn in 0..logical {
        ftl.write(lpn, 0, &mut work);
        work.clear();
        if lpn.is_multiple_of(step) {
            progress(lpn as f64 / total as f64);
        }
    }
    ftl.reset_counters();
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in 0..random {
        ftl.write(rng.gen_range(0..logical), 0, &mut work);
        work.clear();
        if (logical + i).is_multiple_of(step) {
            progress((logical + i) as f64 / total as f64);
        }
    }
    let done = Preconditioned {
        pages_written: total,
        write_amplification: if random == 0 {
            1.0
        } else {
            ftl.counters().write_amplification()
        },
    };
    ftl.reset_counters();
    progress(1.0);
    done
}
