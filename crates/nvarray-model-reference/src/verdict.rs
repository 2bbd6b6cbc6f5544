//! Whether a run's timing is the model's: the verdict, in three words, that every engine and
//! every front end (`bench`, `--compare-sim`, `serve`, `mount`, sweeps, `repro`) prints
//! first. Pure data, here beside the model whose timing it judges, so the emulator that
//! reaches it and the report that carries it share one type.

use serde::{Deserialize, Serialize};

/// Ordered from best to worst: a run takes the worst of the verdicts of its parts
/// ([`Verdict::worst`]).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every completion kept the model's time within the lateness bound.
    #[default]
    Faithful,
    /// The emulator kept its deadlines except where the machine paused its threads (an
    /// interrupt, the scheduler, the hypervisor): the figures hold those pauses, and a quieter
    /// machine (`--cpus` on isolated CPUs) gives the model's own.
    MachineLimited,
    /// The emulator itself fell behind its model (or the run measured too little to say).
    NotFaithful,
}

impl Verdict {
    /// The words a report prints.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Faithful => "faithful",
            Verdict::MachineLimited => "machine-limited",
            Verdict::NotFaithful => "NOT FAITHFUL",
        }
    }

    pub fn worst(self, other: Verdict) -> Verdict {
        self.max(other)
    }
}
