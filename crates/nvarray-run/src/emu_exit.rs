//! fio's `exitall` in the emulator: a phase's threads share which of them must stop (a
//! reporting group's, or the whole phase's), and whether the later phases run. A thread that
//! ends raises what its job's `exit_what` names (libfio.c:241-278); every thread reads it
//! before it issues, and a thread waiting for a paced request's time looks now and then.

use std::sync::atomic::{AtomicBool, Ordering};

use nvarray_workload::ExitWhat;

/// The stop flags of one phase.
pub(crate) struct PhaseExit {
    /// By reporting group.
    groups: Vec<AtomicBool>,
    phase: AtomicBool,
    all: AtomicBool,
}

impl PhaseExit {
    /// The flags of a phase whose jobs report in groups below `groups`.
    pub(crate) fn new(groups: usize) -> PhaseExit {
        PhaseExit {
            groups: (0..groups).map(|_| AtomicBool::new(false)).collect(),
            phase: AtomicBool::new(false),
            all: AtomicBool::new(false),
        }
    }

    /// A thread of `group` ended: what its `exit_what` names stops.
    pub(crate) fn ended(&self, what: ExitWhat, group: usize) {
        match what {
            ExitWhat::Group => {
                assert!(
                    group < self.groups.len(),
                    "group {group} ended in a phase of {} groups",
                    self.groups.len()
                );
                if let Some(g) = self.groups.get(group) {
                    g.store(true, Ordering::Relaxed);
                }
            }
            ExitWhat::Stonewall => self.phase.store(true, Ordering::Relaxed),
            ExitWhat::All => {
                self.phase.store(true, Ordering::Relaxed);
                self.all.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Whether a thread of `group` must stop.
    #[inline]
    pub(crate) fn stops(&self, group: usize) -> bool {
        self.phase.load(Ordering::Relaxed)
            || self
                .groups
                .get(group)
                .is_some_and(|g| g.load(Ordering::Relaxed))
    }

    /// Whether the later phases are not to run.
    pub(crate) fn ends_the_run(&self) -> bool {
        self.all.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_stops_what_it_names() {
        let e = PhaseExit::new(2);
        e.ended(ExitWhat::Group, 1);
        assert!(e.stops(1) && !e.stops(0) && !e.ends_the_run());
        e.ended(ExitWhat::Stonewall, 1);
        assert!(e.stops(0) && !e.ends_the_run());
        let e = PhaseExit::new(1);
        e.ended(ExitWhat::All, 0);
        assert!(e.stops(0) && e.ends_the_run());
    }
}
