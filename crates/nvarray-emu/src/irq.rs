//! The interrupt of one queue pair: how a sleeping host thread is woken by a completion.
//!
//! A futex word with two states. The host arms it, re-checks its completion queue, and sleeps
//! on the word while it stays armed; the device, after posting a completion, disarms it and
//! wakes the sleepers if it was armed. Both sides put a SeqCst fence between their store and
//! their load (host: arm, then look at the queue; device: post, then look at the word), so at
//! least one of them sees the other's store: either the host finds the entry, or the device
//! finds the word armed and wakes it. No wake-up is lost and none is paid for while the host
//! spins (the device's check is a plain load).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const IDLE: u32 = 0;
const ARMED: u32 = 1;

#[derive(Debug, Default)]
pub struct Irq {
    word: AtomicU32,
    raised: AtomicU64,
}

impl Irq {
    pub fn new() -> Self {
        Self::default()
    }

    /// Host: announce the intention to sleep. Check for completions after this and before
    /// `wait`.
    pub fn arm(&self) {
        self.word.store(ARMED, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Host: give up the intention to sleep (a completion was found after arming). Only for
    /// an interrupt with one sleeper: with several, this would hide the others from the next
    /// `raise` and leave them asleep.
    pub fn disarm(&self) {
        self.word.store(IDLE, Ordering::SeqCst);
    }

    /// Host: sleep while armed. Returns after a `raise`, or spuriously; callers re-check.
    pub fn wait(&self) {
        atomic_wait::wait(&self.word, ARMED);
    }

    /// Device (or a host thread that drained another thread's completion): wake the sleepers
    /// if any armed the interrupt. Call after the completion is visible.
    pub fn raise(&self) {
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::Relaxed) == ARMED
            && self.word.swap(IDLE, Ordering::SeqCst) == ARMED
        {
            self.raised.fetch_add(1, Ordering::Relaxed);
            atomic_wait::wake_all(&self.word);
        }
    }

    /// Interrupts that woke someone (for statistics).
    pub fn raised(&self) -> u64 {
        self.raised.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::thread;

    use super::*;

    /// A sleeper that arms, checks a flag and waits is always woken by a setter that sets the
    /// flag and raises: a lost wake-up hangs the test.
    #[test]
    fn no_lost_wakeups() {
        let irq = Irq::new();
        let flag = AtomicBool::new(false);
        let rounds = 20_000;
        thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..rounds {
                    while flag.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    flag.store(true, Ordering::Release);
                    irq.raise();
                }
            });
            for _ in 0..rounds {
                loop {
                    irq.arm();
                    if flag.load(Ordering::Acquire) {
                        irq.disarm();
                        break;
                    }
                    irq.wait();
                }
                flag.store(false, Ordering::Release);
            }
        });
    }
}
