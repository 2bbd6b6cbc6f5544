//! The interrupt of one queue pair: how a sleeping host thread is woken by a completion. The
//! same in the other direction is the device's doorbell (`Emulator::doorbell`): a device thread
//! with nothing to do until a time arms it and sleeps, and the host's submission raises it.
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

    /// Sleep while armed, for at most `timeout`. Returns after a `raise`, the timeout, or
    /// spuriously; callers re-check.
    pub fn wait_for(&self, timeout: std::time::Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: FUTEX_WAIT on a live, aligned 32-bit atomic of this process (private, as
        // `atomic_wait` uses for `wake_all`): the kernel compares it with ARMED and sleeps
        // until woken or `ts` (relative) passes; it reads `ts` and writes nothing.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                ARMED,
                &ts as *const libc::timespec,
            );
        }
    }

    /// Device (or a host thread that drained another thread's completion): wake the sleepers
    /// if any armed the interrupt. Call after the completion is visible.
    #[inline]
    pub fn raise(&self) {
        fence(Ordering::SeqCst);
        if self.word.load(Ordering::Relaxed) == ARMED
            && self.word.swap(IDLE, Ordering::SeqCst) == ARMED
        {
            self.raised.fetch_add(1, Ordering::Relaxed);
            atomic_wait::wake_all(&self.word);
        }
    }

    /// Whether someone has armed it and not been raised since (a sleeper, or one about to).
    pub fn armed(&self) -> bool {
        self.word.load(Ordering::Relaxed) == ARMED
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

    /// The device's side: a timed sleep is ended by a raise long before its timeout, or by
    /// the timeout alone.
    #[test]
    fn a_timed_sleep_is_ended_by_a_raise_or_its_timeout() {
        let irq = Irq::new();
        let start = std::time::Instant::now();
        thread::scope(|s| {
            irq.arm();
            s.spawn(|| {
                while !irq.armed() {
                    std::hint::spin_loop();
                }
                irq.raise();
            });
            while irq.armed() {
                irq.wait_for(std::time::Duration::from_secs(30));
            }
        });
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
        assert_eq!(irq.raised(), 1);
        irq.arm();
        let start = std::time::Instant::now();
        irq.wait_for(std::time::Duration::from_millis(5));
        assert!(start.elapsed() >= std::time::Duration::from_millis(5));
        assert!(irq.armed(), "a timeout is not a raise");
    }
}
