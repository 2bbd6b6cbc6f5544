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
    /// `monotonic_ns` and `ticks` when the clock started.
    origin_ns: u64,
    origin_ticks: u64,
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
            origin_ticks: ticks(),
        }
    }

    /// `ticks` per nanosecond, measured over the clock's life so far (`None` in its first
    /// millisecond, too short to tell).
    pub fn ticks_per_ns(&self) -> Option<f64> {
        let (ns, t) = (self.now_ns(), ticks().wrapping_sub(self.origin_ticks));
        (ns >= 1_000_000).then(|| t as f64 / ns as f64)
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

/// A cheap, fast-moving counter for timing short sections (the model's critical section),
/// where a clock reading (27 ns here) would cost as much as what it measures: the CPU's
/// time-stamp counter on x86-64 (constant-rate on every CPU since 2008; about 8 ns a reading on
/// the project's VMs), the monotonic clock elsewhere. `Clock::ticks_per_ns` converts.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` exists on every x86-64 CPU and has no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
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

    /// The tick rate converts tick intervals to the clock's nanoseconds: a 5 ms sleep measured
    /// in ticks comes out within 20 % of the clock's measure of it.
    #[test]
    fn ticks_convert_to_the_clocks_nanoseconds() {
        let c = Clock::new();
        assert!(c.ticks_per_ns().is_none(), "too early to tell");
        let (t0, n0) = (ticks(), c.now_ns());
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (t1, n1) = (ticks(), c.now_ns());
        let rate = c.ticks_per_ns().expect("5 ms in");
        let by_ticks = (t1 - t0) as f64 / rate;
        let by_clock = (n1 - n0) as f64;
        assert!(
            (by_ticks / by_clock - 1.0).abs() < 0.2,
            "{by_ticks} ns by ticks, {by_clock} ns by the clock"
        );
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
