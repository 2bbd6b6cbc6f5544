//! When a device thread may give its core back, and for how long (issue 56).
//!
//! A real device never misses a deadline because a CPU was busy elsewhere, and needs no CPU
//! between commands. A device thread comes close: commands carry their doorbell's time
//! (`DmaMemory::doorbell_ns`), so a thread that takes one late still hands the model the
//! time the host rang, and it need only be running again by the next time it must *act*: the
//! model's next event or the next completion's deadline. Between, it sleeps on the doorbell
//! (`Irq`) with a timeout at that time minus its *wake margin*: how late this thread's
//! sleeps have ended here (a running p99), so it wakes in time and spins the rest.
//!
//! With nothing in flight it sleeps on the doorbell alone (*parks*): at once when every
//! command this device has modelled took longer than the margin (a command rung while it
//! sleeps is then still due after it has woken), after `IDLE_PARK_NS` otherwise (a device
//! faster than a wake-up keeps its thread spinning while the host keeps it busy).
//!
//! A wake-up later than the margin the thread chose is the machine's (the kernel did not run
//! it when asked): the completions due in between are *wake-late* (`pauses::WakeLate`), counted
//! apart from the emulator's own lateness and from the machine's pauses. A margin too small is
//! the emulator's choice, so lateness within it stays the emulator's own.

/// Sets this thread's timer slack to 1 ns (once per thread): Linux lets a normal thread's
/// sleeps overshoot by 50 µs by default, which would swamp a wake margin of a few
/// microseconds. For every thread that sleeps until a deadline: device threads, inline naps,
/// pacing, think time.
pub fn fine_timer_slack() {
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    DONE.with(|done| {
        if !done.replace(true) {
            #[cfg(not(miri))] // a hint miri cannot run
            // SAFETY: PR_SET_TIMERSLACK takes an integer and affects only the calling thread;
            // failure leaves the default slack, which is only slower.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong)
            };
        }
    });
}

/// A device thread with nothing in flight that may not park yet (its device is faster than a
/// wake-up) yields the CPU between rounds after this long without work.
pub const IDLE_YIELD_NS: u64 = 200_000;

/// Sleeps shorter than this are not worth the system calls (a futex wait and its wake-up cost
/// some microseconds of CPU): the thread spins instead.
pub const SLEEP_MIN_NS: u64 = 20_000;

/// A device thread with nothing in flight parks after this long without work even when the
/// device is faster than a wake-up: an idle device must not hold a core.
pub const IDLE_PARK_NS: u64 = 1_000_000;

/// The margin before any sleep has been measured: a typical wake-up on a busy 2-core VM
/// (docs/perf.md, issue 56), replaced by the measured p99 once `SAMPLES` wake-ups are known.
pub const MARGIN_START_NS: u64 = 50_000;

/// The least margin: a futex wake-up takes some microseconds on any machine.
pub const MARGIN_MIN_NS: u64 = 5_000;

/// Wake-ups remembered for the running p99 (the second latest of 128).
const SAMPLES: usize = 128;

/// A device thread's wake margin: the p99 of how late its last `SAMPLES` wake-ups came after
/// the time it asked for (`MARGIN_START_NS` until that many are known).
#[derive(Debug)]
pub struct WakeMargin {
    samples: [u64; SAMPLES],
    recorded: usize,
    margin_ns: u64,
}

impl Default for WakeMargin {
    fn default() -> Self {
        Self::new()
    }
}

impl WakeMargin {
    pub fn new() -> Self {
        WakeMargin {
            samples: [0; SAMPLES],
            recorded: 0,
            margin_ns: MARGIN_START_NS,
        }
    }

    pub fn margin_ns(&self) -> u64 {
        self.margin_ns
    }

    /// A wake-up `late_ns` after the time asked for (a timeout's end, or the doorbell's ring).
    pub fn record(&mut self, late_ns: u64) {
        self.samples[self.recorded % SAMPLES] = late_ns;
        self.recorded += 1;
        if self.recorded >= SAMPLES && self.recorded.is_multiple_of(SAMPLES / 8) {
            let mut sorted = self.samples;
            sorted.sort_unstable();
            // The p99 of 128: the sample with 1 % of them above it, rounded up.
            let at = (SAMPLES * 99).div_ceil(100) - 1;
            self.margin_ns = sorted[at].max(MARGIN_MIN_NS);
        }
    }
}

/// What a device thread does after a round that found no work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// Go round again (something is near, or the thread was busy a moment ago).
    Spin,
    /// Go round again after giving the CPU to whoever waits for it (idle a while, but a
    /// wake-up would be late for the device's commands).
    Yield,
    /// Sleep on the doorbell until this time (the next action minus the margin).
    Until(u64),
    /// Sleep on the doorbell alone: nothing is in flight.
    Park,
}

/// What a device thread that found no work does, at `now_ns`: `next_ns` is the next time it
/// must act (`None`: nothing in flight anywhere it serves), `quiet_ns` how long it has found
/// no work, `least_latency_ns` the shortest command the device has modelled so far (`None`:
/// none yet).
pub fn rest(
    now_ns: u64,
    next_ns: Option<u64>,
    quiet_ns: u64,
    least_latency_ns: Option<u64>,
    margin: &WakeMargin,
) -> Rest {
    let margin_ns = margin.margin_ns();
    match next_ns {
        Some(next) => {
            let wake = next.saturating_sub(margin_ns);
            if wake > now_ns && wake - now_ns >= SLEEP_MIN_NS {
                Rest::Until(wake)
            } else {
                Rest::Spin
            }
        }
        None => {
            let slow_device = least_latency_ns.is_some_and(|l| l > margin_ns + SLEEP_MIN_NS);
            if slow_device || quiet_ns >= IDLE_PARK_NS {
                Rest::Park
            } else if quiet_ns >= IDLE_YIELD_NS {
                Rest::Yield
            } else {
                Rest::Spin
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_the_running_p99_of_wake_ups_with_a_floor() {
        let mut m = WakeMargin::new();
        for _ in 0..SAMPLES - 1 {
            m.record(10_000);
        }
        assert_eq!(m.margin_ns(), MARGIN_START_NS, "too few wake-ups to tell");
        m.record(10_000);
        assert_eq!(m.margin_ns(), 10_000);
        // Recomputed every 16: one slow wake-up in 128 is the 1 % above the p99.
        m.record(900_000);
        for _ in 0..15 {
            m.record(10_000);
        }
        assert_eq!(m.margin_ns(), 10_000);
        for late in [800_000; 16] {
            m.record(late);
        }
        assert_eq!(m.margin_ns(), 800_000);
        for _ in 0..SAMPLES {
            m.record(100);
        }
        assert_eq!(m.margin_ns(), MARGIN_MIN_NS, "the floor");
    }

    #[test]
    fn a_thread_sleeps_only_when_it_can_wake_in_time() {
        let m = WakeMargin::new(); // 50 µs
        let near = 1_000 + MARGIN_START_NS + SLEEP_MIN_NS - 1;
        assert_eq!(rest(1_000, Some(near), 0, None, &m), Rest::Spin);
        let far = 1_000 + MARGIN_START_NS + SLEEP_MIN_NS;
        assert_eq!(
            rest(1_000, Some(far), 0, None, &m),
            Rest::Until(far - MARGIN_START_NS)
        );
        // Nothing in flight: a device slower than a wake-up parks at once; a faster one
        // spins, then yields, then parks.
        let slow = Some(MARGIN_START_NS + SLEEP_MIN_NS + 1);
        assert_eq!(rest(0, None, 0, slow, &m), Rest::Park);
        let fast = Some(1_000);
        assert_eq!(rest(0, None, 0, fast, &m), Rest::Spin);
        assert_eq!(rest(0, None, IDLE_YIELD_NS, fast, &m), Rest::Yield);
        assert_eq!(rest(0, None, IDLE_PARK_NS, fast, &m), Rest::Park);
        assert_eq!(rest(0, None, IDLE_PARK_NS, None, &m), Rest::Park);
    }
}
