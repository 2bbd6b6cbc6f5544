//! Where a connection reads the time: the wall clock, or a simulation's, which moves only
//! when the simulation moves it. The connection loop's decisions that depend on time (when to
//! look at the socket again, `transmission::TICK`) then come out the same at every run of a
//! seed, and its latencies are in the simulation's time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection's clock.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    #[default]
    Wall,
    Simulated(Arc<SimulatedTime>),
}

impl Clock {
    #[inline]
    pub fn now(&self) -> Instant {
        match self {
            Clock::Wall => Instant::now(),
            Clock::Simulated(time) => time.now(),
        }
    }
}

/// A simulation's time: an instant fixed when it began, plus what the simulation has
/// advanced it by.
#[derive(Debug)]
pub struct SimulatedTime {
    start: Instant,
    elapsed_ns: AtomicU64,
}

impl Default for SimulatedTime {
    fn default() -> Self {
        SimulatedTime {
            start: Instant::now(),
            elapsed_ns: AtomicU64::new(0),
        }
    }
}

impl SimulatedTime {
    pub fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.elapsed_ns.load(Ordering::Relaxed))
    }

    /// Moves the time on by `by`.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Time since the simulation began.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_time_moves_only_when_advanced() {
        let time = Arc::new(SimulatedTime::default());
        let clock = Clock::Simulated(Arc::clone(&time));
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        time.advance(Duration::from_micros(7));
        assert_eq!(clock.now() - t0, Duration::from_micros(7));
        assert_eq!(time.elapsed(), Duration::from_micros(7));
    }
}
