//! The simulator's steady-state watches of a phase's jobs (`control::SteadyWatch`), sampled
//! by events on its virtual clock.

use nvarray_report::StreamStats;
use nvarray_workload::SteadyState;

use crate::control::{SteadyCounts, SteadyWatch};

/// The steady-state watches of a phase's jobs, and each job's totals for them (empty when no
/// job of the phase watches, so a completion costs nothing more).
pub(crate) struct SteadyWatches {
    watches: Vec<Option<SteadyWatch>>,
    pub(crate) counts: Vec<SteadyCounts>,
}

/// What a steady-state sample found.
pub(crate) enum Sampled {
    /// The job is steady: it stops.
    Steady,
    /// Sample again then.
    Next(u64),
}

impl SteadyWatches {
    /// Watches for the jobs (streams) with a steady state, `specs[stream]`, from `start_ns`.
    pub(crate) fn of(specs: Vec<Option<SteadyState>>, start_ns: u64) -> SteadyWatches {
        let any = specs.iter().any(Option::is_some);
        SteadyWatches {
            counts: if any {
                vec![SteadyCounts::default(); specs.len()]
            } else {
                Vec::new()
            },
            watches: specs
                .into_iter()
                .map(|s| s.map(|s| SteadyWatch::new(&s, start_ns)))
                .collect(),
        }
    }

    /// Each watched stream and its first sample's time.
    pub(crate) fn first_samples(&self) -> Vec<(usize, u64)> {
        self.watches
            .iter()
            .enumerate()
            .filter_map(|(s, w)| w.as_ref().map(|w| (s, w.next_sample_ns())))
            .collect()
    }

    /// Samples `stream` at `t`.
    pub(crate) fn sample(&mut self, stream: usize, t: u64) -> Sampled {
        let watch = self.watches[stream]
            .as_mut()
            .expect("sampled streams are watched");
        assert!(
            t >= watch.next_sample_ns(),
            "stream {stream} sampled at {t} ns, before its sample is due at {} ns",
            watch.next_sample_ns()
        );
        if watch.sample(t, self.counts[stream]) {
            Sampled::Steady
        } else {
            Sampled::Next(watch.next_sample_ns())
        }
    }

    /// Writes each watch's findings into its stream.
    pub(crate) fn report_into(&self, streams: &mut [StreamStats]) {
        assert_eq!(
            self.watches.len(),
            streams.len(),
            "watches for {} streams reported into {}",
            self.watches.len(),
            streams.len()
        );
        for (stream, watch) in self.watches.iter().enumerate() {
            if let Some(w) = watch {
                streams[stream].control.steadystate = Some(w.report());
            }
        }
    }
}
