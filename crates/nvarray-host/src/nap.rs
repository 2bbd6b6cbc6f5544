//! Napping: how a thread with commands in flight and nothing else to do gives the CPU away
//! without making a completion late. The one place the driver's waiting policy lives; front
//! ends ask `QueuePair::nap_time` instead of reading the device's clock.

use std::time::Duration;

use nvarray_emu::Emulator;

use crate::queue_pair::QueuePair;

/// How long before the model's next deadline an inline nap ends. A nap is a real kernel sleep
/// (`nanosleep`), which on the test VMs overshoots by ~5–15 µs even with a 1 µs timer slack;
/// ending it this early and polling the rest keeps the completion on time.
pub(crate) const NAP_WAKE_MARGIN_NS: u64 = 25_000;

/// Naps shorter than this are not taken: the thread polls instead. A nap costs a system call
/// or two on top of its overshoot, and the front ends send their pending replies before one.
/// (The NBD server used 60 µs before the deadline, i.e. 35 µs of nap after the margin.)
pub(crate) const NAP_MIN_NS: u64 = 35_000;

impl QueuePair {
    /// How long the calling thread may sleep now without making one of this queue pair's
    /// completions late: `None` when it should keep polling instead, because nothing is in
    /// flight, device threads run the device (they raise the interrupt; see
    /// `CompletionMode::Sleep`), or the model's next deadline is too close for a nap to pay.
    ///
    /// For callers that wait on something else as well (the NBD server sleeps in `ppoll` on
    /// its socket for this long, woken early by new requests). The driver's own sleeping
    /// completion modes follow the same rule.
    pub fn nap_time(&self) -> Option<Duration> {
        if self.in_flight() == 0 || self.emulator().has_device_threads() {
            return None;
        }
        inline_nap_time(self.emulator())
    }
}

/// In inline mode no device thread will raise an interrupt and the device runs only when a
/// host thread polls, so a sleeper sleeps until shortly before the model's next deadline
/// (`NAP_WAKE_MARGIN_NS`) and polls from there; a nap shorter than `NAP_MIN_NS` is not taken.
/// Inline mode therefore gives the CPU away during long commands (flash) without making
/// completions late; the cost of an interrupt and a wake-up itself is only paid, and
/// measured, with device threads.
fn inline_nap_time(emu: &Emulator) -> Option<Duration> {
    let deadline = emu.next_deadline_ns()?;
    let nap_ns = deadline
        .saturating_sub(NAP_WAKE_MARGIN_NS)
        .saturating_sub(emu.now_ns());
    (nap_ns >= NAP_MIN_NS).then(|| Duration::from_nanos(nap_ns))
}

/// Inline mode's sleep (`inline_nap_time`); with no deadline at all (nothing in the model),
/// it yields the CPU once.
pub(crate) fn inline_nap(emu: &Emulator) {
    if emu.next_deadline_ns().is_none() {
        std::thread::yield_now();
    } else if let Some(nap) = inline_nap_time(emu) {
        fine_timer_slack();
        std::thread::sleep(nap);
    }
}

/// Sets this thread's timer slack to 1 µs (once per thread): Linux lets a normal thread's
/// sleeps overshoot by 50 µs by default, which would swamp the margin above. Public for
/// runners that sleep precisely for other reasons (think time).
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
                libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong)
            };
        }
    });
}
