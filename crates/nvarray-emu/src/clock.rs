//! The emulator's wall clock: nanoseconds since the device started, from the monotonic clock
//! (`CLOCK_MONOTONIC` through the vDSO: 27 ns a reading on the project's VMs, no syscall).
//!
//! Read directly rather than through `Instant`: `Instant::elapsed` subtracts two `timespec`s
//! with carries and checks (about 110 instructions) and `as_nanos` widens to `u128`, on every
//! reading of every pass, and three readings sit between a command's deadline and the host
//! seeing it. Here a reading is the call and one multiply-add (docs/perf.md, issue 17's third
//! session).

/// Nanoseconds of `CLOCK_MONOTONIC`: the clock `Instant` reads on Linux.
#[inline]
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable `timespec`; `CLOCK_MONOTONIC` exists on every Linux
    // and cannot fail with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    // Seconds since boot fit u64 nanoseconds for 584 years.
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `monotonic_ns` when the clock started.
    origin_ns: u64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin_ns: monotonic_ns(),
        }
    }

    /// Nanoseconds since this clock started.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        monotonic_ns() - self.origin_ns
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

    /// The clock reads the same clock as `Instant`, in nanoseconds: an interval it measures
    /// inside one `Instant` measures is no longer than that one, and as long as the sleep.
    #[test]
    fn readings_are_monotonic_nanoseconds_as_instant_measures_them() {
        let c = Clock::new();
        let outer = std::time::Instant::now();
        let first = c.now_ns();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let second = c.now_ns();
        let outer_ns = outer.elapsed().as_nanos() as u64;
        let inner_ns = second - first;
        assert!(inner_ns >= 3_000_000, "slept 3 ms, measured {inner_ns} ns");
        assert!(inner_ns <= outer_ns, "{inner_ns} ns inside {outer_ns} ns");
    }

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
