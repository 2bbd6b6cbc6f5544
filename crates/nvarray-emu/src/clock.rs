//! The emulator's wall clock: nanoseconds since the device started, counted on the CPU's
//! time-stamp counter where the kernel counts `CLOCK_MONOTONIC` on it too, and on
//! `CLOCK_MONOTONIC` itself elsewhere.
//!
//! A reading is on every pass of every thread that serves or waits for the device (3.2 a
//! request for `null` 512 B at QD 32 inline), so its cost is the emulator's: `clock_gettime`
//! through the vDSO takes 31 ns on the project's VMs and `rdtsc` 11.6 ns. Counting the ticks
//! made the main job's emulated p50 0.2-0.3 µs nearer the model's, a third of the host's
//! share (docs/perf.md, issue 57). Read directly rather than through `Instant`:
//! `Instant::elapsed` subtracts two `timespec`s with carries and checks (about 110
//! instructions) and widens to `u128` (issue 17's third session).
//!
//! The counter's rate is measured once a process against `CLOCK_MONOTONIC` (`calibration`,
//! 10 ms at the first clock), to within a few parts per million: every reader of the device's
//! time reads this clock, and where an `Instant` is related to it (a phase's start), the
//! relation is made at the moment, never across a run.

use std::sync::OnceLock;
use std::time::Duration;

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

/// Nanoseconds per tick of the time-stamp counter, in 32.32 fixed point.
type NsPerTick = u64;

/// How long the counter's rate is measured: 30 ns of uncertainty at each end makes 3 parts
/// per million, 3 ps on a 1 µs interval.
const CALIBRATION: Duration = Duration::from_millis(10);

/// The time-stamp counter's rate, measured once for the process; `None` where the kernel does
/// not count time on it (another architecture, or a clock source other than `tsc`: the kernel
/// found the counter unstable or not synchronised between CPUs).
fn calibration() -> Option<NsPerTick> {
    static RATE: OnceLock<Option<NsPerTick>> = OnceLock::new();
    *RATE.get_or_init(|| {
        if !kernel_counts_on_tsc() {
            return None;
        }
        let (t0, n0) = paired_reading();
        std::thread::sleep(CALIBRATION);
        let (t1, n1) = paired_reading();
        let ticks = t1.checked_sub(t0).filter(|&t| t > 0)?;
        let rate = (u128::from(n1 - n0) << 32) / u128::from(ticks);
        u64::try_from(rate).ok().filter(|&r| r > 0)
    })
}

/// Whether the kernel's clock source is the time-stamp counter: then it has checked the
/// counter runs at a constant rate, through sleep states, and in step on every CPU.
fn kernel_counts_on_tsc() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// A tick count and the `CLOCK_MONOTONIC` reading at it: the monotonic reading between two
/// tick readings, the narrowest of a few tries (a try the thread was preempted in is wide).
fn paired_reading() -> (u64, u64) {
    (0..16)
        .map(|_| {
            let before = ticks();
            let ns = monotonic_ns();
            let after = ticks();
            (after.wrapping_sub(before), before / 2 + after / 2, ns)
        })
        .min_by_key(|&(width, ..)| width)
        .map(|(_, at, ns)| (at, ns))
        .expect("sixteen tries")
}

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `ticks` and `monotonic_ns` when the clock started.
    origin_ticks: u64,
    origin_ns: u64,
    /// Counted in ticks at this rate, or on `CLOCK_MONOTONIC` (`None`).
    ns_per_tick: Option<NsPerTick>,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Self::counting(calibration())
    }

    fn counting(ns_per_tick: Option<NsPerTick>) -> Self {
        let (origin_ticks, origin_ns) = paired_reading();
        Clock {
            origin_ticks,
            origin_ns,
            ns_per_tick,
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
        match self.ns_per_tick {
            // Saturating: the counters of two CPUs agree to within the kernel's check, and a
            // reading on another CPU right after the start may be a few ticks behind it.
            Some(rate) => {
                let elapsed = ordered_ticks().saturating_sub(self.origin_ticks);
                ((u128::from(elapsed) * u128::from(rate)) >> 32) as u64
            }
            None => monotonic_ns() - self.origin_ns,
        }
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

/// A cheap, fast-moving counter: what `Clock` counts where the kernel does, and the timer of
/// short sections (the model's critical section) everywhere: the CPU's time-stamp counter on
/// x86-64 (constant-rate on every CPU since 2008; 11.6 ns a reading on the project's VMs), the
/// monotonic clock elsewhere. `Clock::ticks_per_ns` converts.
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

/// `ticks`, read after everything before it: `rdtsc` alone may run ahead of earlier loads, so
/// a reading made inside a lock could be taken before the lock was, and be earlier than the
/// previous holder's (the model's time went back with two inline threads). The fence makes it
/// the kernel's ordered reading (`rdtsc_ordered`, what `clock_gettime` does).
#[inline]
fn ordered_ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `lfence` and `rdtsc` exist on every x86-64 CPU and have no side effects.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        ticks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock counts the nanoseconds `Instant` counts: an interval of 20 ms measured by
    /// both agrees to within 0.01 % (the counter's rate is measured to a few parts per million;
    /// the readings around the clock's are 31 ns each), and the clock's reading is at least
    /// the sleep's length.
    #[test]
    fn readings_are_nanoseconds_as_instant_measures_them() {
        let c = Clock::new();
        let outer = std::time::Instant::now();
        let first = c.now_ns();
        std::thread::sleep(Duration::from_millis(20));
        let second = c.now_ns();
        let outer_ns = outer.elapsed().as_nanos() as u64;
        let inner_ns = second - first;
        assert!(
            inner_ns >= 20_000_000,
            "slept 20 ms, measured {inner_ns} ns"
        );
        assert!(
            inner_ns <= outer_ns + outer_ns / 10_000,
            "{inner_ns} ns inside {outer_ns} ns"
        );
        assert!(
            inner_ns + outer_ns / 10_000 + 10_000 >= outer_ns,
            "{inner_ns} ns by the clock, {outer_ns} ns by Instant"
        );
    }

    /// Where the kernel counts on the time-stamp counter, the clock does too (the cheap
    /// reading is the point); elsewhere it reads `CLOCK_MONOTONIC`. Both count the same time:
    /// two clocks of one origin, one of each kind, agree to within 20 parts per million after
    /// 20 ms (the rate is measured to about 3), read one between two readings of the other.
    #[test]
    fn the_counter_is_used_where_the_kernel_trusts_it_and_agrees_with_the_monotonic_clock() {
        let counted = Clock::new();
        assert_eq!(counted.ns_per_tick.is_some(), kernel_counts_on_tsc());
        let monotonic = Clock {
            ns_per_tick: None,
            ..counted
        };
        std::thread::sleep(Duration::from_millis(20));
        let (before, at, after) = (monotonic.now_ns(), counted.now_ns(), monotonic.now_ns());
        let slack = at / 50_000 + 100;
        assert!(
            before <= at + slack && at <= after + slack,
            "{at} ns by the counter, {before}..{after} ns by the monotonic clock"
        );
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

    /// A reading made inside a lock is never earlier than the previous holder's, on any CPU:
    /// the model's time is read so, and went back with an unordered counter read (two inline
    /// host threads, `time went backwards` in the model).
    #[test]
    fn readings_inside_a_lock_never_go_back_between_holders() {
        let c = Clock::new();
        let last = std::sync::Mutex::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..200_000 {
                        let mut held = last.lock().unwrap();
                        let now = c.now_ns();
                        assert!(
                            now >= *held,
                            "read {now} ns after a holder read {} ns",
                            *held
                        );
                        *held = now;
                    }
                });
            }
        });
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
