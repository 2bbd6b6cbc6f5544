//! A host thread's time: waiting for a due time (`Pacer`: sleep, then spin, telling the
//! thread's pause watch what the kernel did) and the device's clock seen at the thread's edges
//! (`DeviceClock`).

use std::time::{Duration, Instant};

use nvarray_host::{fine_timer_slack, pauses, Device};

/// How a host thread waits for a time (a think time, a paced or timestamped request's due
/// time): it sleeps for all but a margin and spins the rest, so that it wakes on time though
/// the kernel ends sleeps late. The margin follows how late this thread's sleeps have ended
/// (on the VMs of docs/perf.md, half of all `nanosleep`s overshoot by more than 50 µs and
/// the p99 is about 200 µs): it rises at once to a late wake-up's overshoot and decays slowly,
/// so a thread spins longer only on a machine that needs it. Times are the device's clock's
/// nanoseconds (`Device::now_ns`), as everywhere in a host thread's loop.
pub(crate) struct Pacer {
    margin_ns: u64,
}

impl Pacer {
    /// The least margin: naps shorter than this are spun, never slept (a kernel sleep
    /// overshoots by tens of microseconds; see `nvarray_host`'s `NAP_WAKE_MARGIN_NS`).
    const MARGIN_MIN_NS: u64 = 50_000;
    /// The greatest margin: a thread spins at most this long before a due time.
    const MARGIN_MAX_NS: u64 = 2_000_000;
    /// Room over the latest overshoot, so the next one like it still wakes in time.
    const MARGIN_SLACK_NS: u64 = 20_000;

    pub(crate) fn new() -> Self {
        Pacer {
            margin_ns: Self::MARGIN_MIN_NS,
        }
    }

    /// Waits until `until_ns` on the clock `now_ns` reads, telling this thread's pause watch
    /// (`nvarray_emu::pauses`) what it saw: a sleep the kernel ended after `until_ns`, and
    /// gaps in the spin that follows, are the machine's, so a timed request due in them is
    /// issued late by the machine, not by this thread's own work.
    pub(crate) fn wait_until(&mut self, until_ns: u64, now_ns: impl Fn() -> u64) {
        let now = now_ns();
        if until_ns <= now {
            return;
        }
        if until_ns - now > self.margin_ns {
            fine_timer_slack();
            let wake_at = until_ns - self.margin_ns;
            std::thread::sleep(Duration::from_nanos(wake_at - now));
            let woke = now_ns();
            let overshoot = woke.saturating_sub(wake_at);
            // Rise to the overshoot at once; otherwise decay by 1/64 a sleep.
            let decayed = self.margin_ns - self.margin_ns / 64;
            self.margin_ns = (overshoot + Self::MARGIN_SLACK_NS)
                .max(decayed)
                .clamp(Self::MARGIN_MIN_NS, Self::MARGIN_MAX_NS);
            pauses::this_thread(|w| {
                if woke > until_ns {
                    // Not running from when the sleep was to end until the kernel ended it.
                    w.overslept(wake_at, woke);
                } else {
                    w.restart(woke);
                }
            });
        } else {
            // Too near to sleep: the margin decays here too, or one long overshoot (a pause of
            // the machine) would leave a margin past the job's period and the thread spinning
            // for the rest of the run.
            self.margin_ns = (self.margin_ns - self.margin_ns / 64).max(Self::MARGIN_MIN_NS);
            pauses::this_thread(|w| w.restart(now));
        }
        loop {
            let now = now_ns();
            pauses::this_thread(|w| w.reading(now));
            if now >= until_ns {
                break;
            }
            std::hint::spin_loop();
        }
    }
}

// `Pacer::wait_until`'s `clamp` needs the least margin under the greatest.
const _: () = assert!(Pacer::MARGIN_MIN_NS < Pacer::MARGIN_MAX_NS);

/// The device clock's reading (`Device::now_ns`, which completions' model times and a host
/// thread's loop are on) at `instant`, a moment of the past: the two clocks are related now,
/// across no more than the time since `instant`, as the device's clock counts ticks at a rate
/// measured to a few parts per million (`nvarray_emu::Clock`). Never before `instant`: the
/// device clock is read after the `Instant` clock, so a window opened here lies inside the
/// `Instant`s' window (the phase's elapsed time holds its threads' active times).
pub(crate) fn device_ns_at(device: &Device, instant: Instant) -> u64 {
    let ago = instant.elapsed().as_nanos() as u64;
    device.now_ns().saturating_sub(ago)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> u64 {
        n * 1_000
    }

    /// A margin raised to its greatest by one long overshoot (a pause of the machine) comes
    /// back down while the thread's waits are too short to sleep: it used to decay only at a
    /// sleep, so a job whose period was under 2 ms spun through the rest of its run.
    #[test]
    fn the_pacing_margin_decays_when_the_thread_does_not_sleep() {
        let origin = Instant::now();
        let now_ns = || origin.elapsed().as_nanos() as u64;
        let mut pacer = Pacer::new();
        pacer.margin_ns = Pacer::MARGIN_MAX_NS;
        for _ in 0..300 {
            pacer.wait_until(now_ns() + us(1), now_ns);
        }
        assert_eq!(pacer.margin_ns, Pacer::MARGIN_MIN_NS);
    }
}
