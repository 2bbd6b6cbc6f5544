//! The emulator's wall clock: nanoseconds since the device started, from the monotonic clock
//! (`Instant`, which reads `CLOCK_MONOTONIC` through the vDSO: tens of nanoseconds, no syscall).

use std::time::Instant;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since this clock started.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Spins until `deadline_ns` and returns the time it saw then (never earlier than the
    /// deadline). The loop is bounded by the deadline itself.
    #[inline]
    pub fn spin_until(&self, deadline_ns: u64) -> u64 {
        loop {
            let now = self.now_ns();
            if now >= deadline_ns {
                return now;
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_until_never_returns_early_and_time_never_goes_back() {
        let c = Clock::new();
        let mut last = c.now_ns();
        for step in [0u64, 1, 100, 1_000, 20_000] {
            let deadline = c.now_ns() + step;
            let t = c.spin_until(deadline);
            assert!(t >= deadline, "returned {t} before deadline {deadline}");
            assert!(t >= last);
            last = t;
        }
    }
}
