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
//! faster than a wake-up keeps its thread spinning, and yielding, while the host keeps it
//! busy). The same rule decides whether it may sleep with commands in flight.
//!
//! A wake-up later than the margin the thread chose is the machine's (the kernel did not run
//! it when asked): the completions due in between are *wake-late* (`pauses::Held::WokeLate`), counted
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
/// device is faster than a wake-up: an idle device must not hold a core. The first command
/// after it waits for the wake-up, the emulator's own lateness (it chose to park), so the wait
/// is long: an application's pauses between bursts (milliseconds) do not reach it, a server
/// left idle does.
pub const IDLE_PARK_NS: u64 = 100_000_000;

// `rest` yields a while before it parks: a bound past the park's would never be reached.
const _: () = assert!(IDLE_YIELD_NS < IDLE_PARK_NS);

/// The margin before any sleep has been measured: above the p99 of a timed sleep's overshoot
/// on the project's 2-core VMs (120-140 µs; docs/perf.md, issue 56), replaced by the
/// measured p99 after `RECOMPUTE_EVERY` wake-ups.
pub const MARGIN_START_NS: u64 = 200_000;

/// The least margin: a futex wake-up takes some microseconds on any machine.
pub const MARGIN_MIN_NS: u64 = 5_000;

/// Wake-ups remembered for the running p99 (the third latest of 256).
const SAMPLES: usize = 256;

/// Wake-ups between two computations of the margin.
const RECOMPUTE_EVERY: usize = 32;

// Each computation sees every wake-up since the one before: none is overwritten unseen.
const _: () = assert!(RECOMPUTE_EVERY <= SAMPLES);

/// A margin not confirmed by a wake-up for this long is forgotten: a margin made large by a
/// burst of slow wake-ups would otherwise stop the thread from sleeping at all, and so from
/// ever measuring a faster one (seen here: 486 µs after two outliers, with 459 µs reads, kept
/// the device thread spinning at 68 % of a core for the rest of the run; forgotten after 1 s,
/// half of each 2 s run was still spent so).
pub const MARGIN_FORGET_NS: u64 = 100_000_000;

/// A device thread's wake margin: the p99 of how late its last `SAMPLES` wake-ups came after
/// the time it asked for (`MARGIN_START_NS` until that many are known).
#[derive(Debug)]
pub struct WakeMargin {
    samples: [u64; SAMPLES],
    recorded: usize,
    margin_ns: u64,
    /// When the last wake-up was recorded.
    last_ns: u64,
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
            last_ns: 0,
        }
    }

    /// Starts over from `MARGIN_START_NS` when no wake-up was recorded for
    /// `MARGIN_FORGET_NS` before `now_ns`.
    pub fn forget_if_stale(&mut self, now_ns: u64) {
        if self.recorded > 0 && now_ns.saturating_sub(self.last_ns) > MARGIN_FORGET_NS {
            *self = WakeMargin::new();
        }
    }

    pub fn margin_ns(&self) -> u64 {
        self.margin_ns
    }

    /// A wake-up `late_ns` after the time asked for (a timeout's end, or the doorbell's ring),
    /// at `now_ns`.
    pub fn record(&mut self, late_ns: u64, now_ns: u64) {
        self.samples[self.recorded % SAMPLES] = late_ns;
        self.recorded += 1;
        self.last_ns = now_ns;
        // Every 32 wake-ups, from the first 32: the p99 of those known (the greatest while
        // fewer than 100 are), so a margin is measured within a few dozen commands.
        if self.recorded.is_multiple_of(RECOMPUTE_EVERY) {
            let known = self.recorded.min(SAMPLES);
            let mut sorted = self.samples;
            let sorted = &mut sorted[..known];
            sorted.sort_unstable();
            // The p99: the sample with 1 % of them above it, rounded up.
            let at = (known * 99).div_ceil(100) - 1;
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
    // A command rung while the thread sleeps is taken a wake-up later: only a device whose
    // every command outlasts one may sleep while the host may submit.
    let slow_device = least_latency_ns.is_some_and(|l| l > margin_ns + SLEEP_MIN_NS);
    match next_ns {
        Some(next) => {
            let wake = next.saturating_sub(margin_ns);
            // Without a slow device, only after a long while without work: the commands in
            // flight are long ones, and the host is not submitting.
            let may_sleep = slow_device || quiet_ns >= IDLE_PARK_NS;
            if may_sleep && wake > now_ns && wake - now_ns >= SLEEP_MIN_NS {
                Rest::Until(wake)
            } else {
                Rest::Spin
            }
        }
        None => {
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
        let mut t = 0;
        let mut record = |m: &mut WakeMargin, late| {
            t += 1_000;
            m.record(late, t);
        };
        for _ in 0..RECOMPUTE_EVERY - 1 {
            record(&mut m, 10_000);
        }
        assert_eq!(m.margin_ns(), MARGIN_START_NS, "too few wake-ups to tell");
        record(&mut m, 12_000);
        assert_eq!(m.margin_ns(), 12_000, "the greatest of 32");
        for _ in 0..SAMPLES - RECOMPUTE_EVERY {
            record(&mut m, 10_000);
        }
        assert_eq!(m.margin_ns(), 10_000);
        // Recomputed every 32: two slow wake-ups in 256 are the 1 % above the p99.
        record(&mut m, 900_000);
        record(&mut m, 900_000);
        for _ in 0..30 {
            record(&mut m, 10_000);
        }
        assert_eq!(m.margin_ns(), 10_000);
        for _ in 0..32 {
            record(&mut m, 800_000);
        }
        assert_eq!(m.margin_ns(), 800_000);
        for _ in 0..SAMPLES {
            record(&mut m, 100);
        }
        assert_eq!(m.margin_ns(), MARGIN_MIN_NS, "the floor");
    }

    /// A margin no wake-up has confirmed for a second is forgotten, so a burst of slow
    /// wake-ups cannot keep the thread from sleeping (and measuring) for good.
    #[test]
    fn a_stale_margin_is_forgotten() {
        let mut m = WakeMargin::new();
        for i in 0..SAMPLES as u64 {
            m.record(500_000, i);
        }
        assert_eq!(m.margin_ns(), 500_000);
        let last = SAMPLES as u64 - 1;
        m.forget_if_stale(last + MARGIN_FORGET_NS);
        assert_eq!(m.margin_ns(), 500_000, "not yet stale");
        m.forget_if_stale(last + MARGIN_FORGET_NS + 1);
        assert_eq!(m.margin_ns(), MARGIN_START_NS);
    }

    #[test]
    fn a_thread_sleeps_only_when_it_can_wake_in_time() {
        let m = WakeMargin::new(); // MARGIN_START_NS
        let slow = Some(MARGIN_START_NS + SLEEP_MIN_NS + 1);
        let near = 1_000 + MARGIN_START_NS + SLEEP_MIN_NS - 1;
        assert_eq!(rest(1_000, Some(near), 0, slow, &m), Rest::Spin);
        let far = 1_000 + MARGIN_START_NS + SLEEP_MIN_NS;
        assert_eq!(
            rest(1_000, Some(far), 0, slow, &m),
            Rest::Until(far - MARGIN_START_NS)
        );
        // A device with a command faster than a wake-up: a command rung meanwhile would be
        // late, so it spins, unless nothing new came for `IDLE_PARK_NS`.
        let fast = Some(1_000);
        assert_eq!(rest(1_000, Some(far), 0, fast, &m), Rest::Spin);
        assert_eq!(rest(1_000, Some(far), 0, None, &m), Rest::Spin);
        assert_eq!(
            rest(1_000, Some(far), IDLE_PARK_NS, fast, &m),
            Rest::Until(far - MARGIN_START_NS)
        );
        // Nothing in flight: a device slower than a wake-up parks at once; a faster one
        // spins, then yields, then parks.
        assert_eq!(rest(0, None, 0, slow, &m), Rest::Park);
        assert_eq!(rest(0, None, 0, fast, &m), Rest::Spin);
        assert_eq!(rest(0, None, IDLE_YIELD_NS, fast, &m), Rest::Yield);
        assert_eq!(rest(0, None, IDLE_PARK_NS, fast, &m), Rest::Park);
        assert_eq!(rest(0, None, IDLE_PARK_NS, None, &m), Rest::Park);
    }
}
