//! The two sleep-and-wake handshakes between a client and the serving thread, the only places
//! a channel's two sides must not miss each other:
//!
//! - the serving thread, idle, marks itself `sleeping` and looks at the submission tail once
//!   more; a client, having made commands visible, looks at `sleeping` and writes a wake byte
//!   to its socket if it is set (`publish_commands`, `announce_sleep`);
//! - a client that waited long marks itself `waiting` and looks at the completion tail once
//!   more before a futex wait on it; the serving thread, having posted completions, looks at
//!   `waiting` and wakes it if it is set (`publish_completions`, `announce_wait`).
//!
//! Each side stores, then a SeqCst fence, then loads what the other side stored, so at least
//! one side sees the other's store: either the sleeper sees the work, or the worker sees the
//! sleeper. (Fences rather than SeqCst accesses: loom models SeqCst fences exactly, SeqCst
//! accesses only as acquire/release, and it found the accesses-only version unprovable.)
//! `tests/loom_wakeups.rs` checks both under every interleaving, on these very functions
//! (generic over the word, so loom's atomics stand in for the shared memory's).

use crate::sync::{fence, Ordering};

/// A 32-bit atomic word: the shared memory's (`std`) or loom's.
pub trait Word {
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, value: u32, order: Ordering);
    fn swap(&self, value: u32, order: Ordering) -> u32;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            fn load(&self, order: Ordering) -> u32 {
                <$t>::load(self, order)
            }
            fn store(&self, value: u32, order: Ordering) {
                <$t>::store(self, value, order)
            }
            fn swap(&self, value: u32, order: Ordering) -> u32 {
                <$t>::swap(self, value, order)
            }
        }
    };
}

word!(std::sync::atomic::AtomicU32);
#[cfg(loom)]
word!(loom::sync::atomic::AtomicU32);

/// Client: makes its commands visible (`sq_tail`); true when the serving thread may be asleep
/// and must be woken.
pub fn publish_commands(sq_tail: &impl Word, new_tail: u32, sleeping: &impl Word) -> bool {
    sq_tail.store(new_tail, Ordering::Release);
    fence(Ordering::SeqCst);
    sleeping.load(Ordering::Relaxed) != 0
}

/// Serving thread, about to sleep: marks itself asleep; true when commands came meanwhile
/// (the tail moved past `sq_head`), so it must not sleep.
pub fn announce_sleep(sleeping: &impl Word, sq_tail: &impl Word, sq_head: u32) -> bool {
    sleeping.store(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    sq_tail.load(Ordering::Acquire) != sq_head
}

/// Serving thread: posts completions up to `new_tail`; true when the client sleeps on the
/// tail and must be woken.
pub fn publish_completions(cq_tail: &impl Word, new_tail: u32, waiting: &impl Word) -> bool {
    let before = cq_tail.swap(new_tail, Ordering::Release);
    fence(Ordering::SeqCst);
    before != new_tail && waiting.load(Ordering::Relaxed) != 0
}

/// Client, about to sleep for completions: marks itself waiting; the tail to sleep on while
/// it still equals `cq_head`, or `None` when completions came meanwhile.
pub fn announce_wait(waiting: &impl Word, cq_tail: &impl Word, cq_head: u32) -> Option<u32> {
    waiting.store(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    let tail = cq_tail.load(Ordering::Acquire);
    (tail == cq_head).then_some(tail)
}
