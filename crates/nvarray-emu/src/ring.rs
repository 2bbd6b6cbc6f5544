//! A bounded single-producer single-consumer ring: the submission or completion queue of one
//! queue pair.
//!
//! `split(capacity)` returns the two ends of one ring. `Producer` and `Consumer` are `Send`
//! but not `Clone`, and `push`/`pop` take `&mut self`, so the type system enforces the one rule
//! an SPSC ring depends on: at most one thread pushes and at most one thread pops at any time.
//! Everything after `split` is allocation-free, lock-free and syscall-free, as the polled hot
//! path requires.
//!
//! The protocol is rigtorp's `SPSCQueue`: two monotonically increasing `u64` counters, `tail`
//! (entries pushed, written only by the producer) and `head` (entries popped, written only by
//! the consumer), each on its own cache line. A slot belongs to the producer while
//! `tail - head < capacity` says it is free and to the consumer while `head < tail` says it is
//! full; the counter store that hands a slot over is a `Release` and the load that receives it
//! is an `Acquire`, so the slot's contents (and anything the entry refers to, such as a DMA
//! buffer) travel with it. Each end keeps a private copy of the other end's counter and reloads
//! it only when that copy says the ring is full (producer) or empty (consumer), so in steady
//! state neither end reads the other's cache line on every operation.
//!
//! Counters are 64-bit and wrap with `wrapping_*` arithmetic; because the capacity is a power of
//! two it divides 2^64, so the slot index `counter & mask` and the difference `tail - head`
//! stay correct across the wrap (which at one entry per nanosecond takes 584 years anyway).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::fmt;

use thiserror::Error;

use crate::sync::{Arc, AtomicU64, Ordering};

/// Smallest ring: with one slot the producer and consumer would hand the same slot back and
/// forth and never overlap, which defeats the point of a queue.
pub const RING_ENTRIES_MIN: usize = 2;
/// Largest ring (64 Ki entries, NVMe's largest queue). Bounds the slot array's allocation.
pub const RING_ENTRIES_MAX: usize = 1 << 16;

const _: () = assert!(RING_ENTRIES_MIN.is_power_of_two());
const _: () = assert!(RING_ENTRIES_MAX.is_power_of_two());
const _: () = assert!(RING_ENTRIES_MIN <= RING_ENTRIES_MAX);
// The counters are u64 and the capacity must divide 2^64 for wrapping arithmetic to be exact.
const _: () = assert!((RING_ENTRIES_MAX as u128) <= (u64::MAX as u128));

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RingError {
    #[error("ring capacity {capacity} is out of range: expected a power of two from {RING_ENTRIES_MIN} to {RING_ENTRIES_MAX}")]
    Capacity { capacity: usize },
}

/// Creates a ring of `capacity` entries, all `T::default()`, and returns its two ends.
///
/// This is the ring's only allocation (the slot array and the shared counters).
pub fn split<T: Copy + Default>(capacity: usize) -> Result<(Producer<T>, Consumer<T>), RingError> {
    let shared = Arc::new(Shared::new(capacity)?);
    let producer = Producer {
        shared: Arc::clone(&shared),
        tail: 0,
        head_cached: 0,
    };
    let consumer = Consumer {
        shared,
        head: 0,
        tail_cached: 0,
    };
    Ok((producer, consumer))
}

/// The producing end of a ring. One exists per ring; it is `Send` (hand it to the thread that
/// submits) and deliberately not `Clone`.
///
/// ```compile_fail
/// let (producer, _consumer) = nvarray_emu::ring::split::<u64>(4).unwrap();
/// let second = producer.clone(); // Two producers would race on the same slot.
/// ```
pub struct Producer<T: Copy + Default> {
    shared: Arc<Shared<T>>,
    /// Entries pushed so far. The producer is the only writer of `shared.tail`, so this copy is
    /// always exact and the producer never has to load its own counter.
    tail: u64,
    /// The consumer's `head` as last loaded. It can only lag the real value, which makes the
    /// ring look fuller than it is, never emptier, so a stale copy is safe.
    head_cached: u64,
}

/// The consuming end of a ring. One exists per ring; it is `Send` and deliberately not `Clone`.
pub struct Consumer<T: Copy + Default> {
    shared: Arc<Shared<T>>,
    /// Entries popped so far; exact, for the same reason as `Producer::tail`.
    head: u64,
    /// The producer's `tail` as last loaded. It can only lag, which makes the ring look emptier
    /// than it is, never fuller, so a stale copy is safe.
    tail_cached: u64,
}

impl<T: Copy + Default> Producer<T> {
    /// Appends `entry`, or hands it back as `Err(entry)` when the ring is full.
    pub fn push(&mut self, entry: T) -> Result<(), T> {
        let capacity = self.shared.capacity_u64();
        let mut used = self.tail.wrapping_sub(self.head_cached);
        assert!(used <= capacity);
        if used == capacity {
            // Acquire pairs with the consumer's Release store of `head`: the consumer's read of
            // the slot we are about to overwrite happens before our write to it.
            self.head_cached = self.shared.head.0.load(Ordering::Acquire);
            used = self.tail.wrapping_sub(self.head_cached);
            assert!(used <= capacity);
            if used == capacity {
                return Err(entry);
            }
        }
        let slot = self.shared.slot(self.tail);
        // SAFETY: `used < capacity`, so the slot at `tail` is free: the consumer has popped
        // every entry up to `head_cached` (Acquire above, or on an earlier call) and does not
        // touch a slot again until our Release store of `tail` below hands it over. We are the
        // only producer (`&mut self` on the only `Producer`).
        unsafe { slot.write(entry) };
        self.tail = self.tail.wrapping_add(1);
        // Release publishes the slot write to the consumer's Acquire load of `tail`.
        self.shared.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Entries in the ring now: a snapshot, exact when the consumer is idle.
    pub fn len(&self) -> usize {
        // Relaxed is enough for a count: no slot is read on the strength of it. Coherence keeps
        // this load no older than any earlier one, so the result never exceeds the capacity.
        let head = self.shared.head.0.load(Ordering::Relaxed);
        self.shared.len(head, self.tail)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }
}

impl<T: Copy + Default> Consumer<T> {
    /// Removes and returns the oldest entry, or `None` when the ring is empty.
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.tail_cached {
            // Acquire pairs with the producer's Release store of `tail`: the producer's write of
            // the slot happens before our read of it.
            self.tail_cached = self.shared.tail.0.load(Ordering::Acquire);
            if self.head == self.tail_cached {
                return None;
            }
        }
        assert!(self.tail_cached.wrapping_sub(self.head) <= self.shared.capacity_u64());
        let slot = self.shared.slot(self.head);
        // SAFETY: `head < tail_cached`, so the slot at `head` holds an entry the producer has
        // published (Acquire above, or on an earlier call) and will not overwrite until our
        // Release store of `head` below frees it. We are the only consumer (`&mut self` on the
        // only `Consumer`).
        let entry = unsafe { slot.read() };
        self.head = self.head.wrapping_add(1);
        // Release orders our read of the slot before the producer's reuse of it.
        self.shared.head.0.store(self.head, Ordering::Release);
        Some(entry)
    }

    /// Entries in the ring now: a snapshot, exact when the producer is idle.
    pub fn len(&self) -> usize {
        // Relaxed is enough for a count, as in `Producer::len`.
        let tail = self.shared.tail.0.load(Ordering::Relaxed);
        self.shared.len(self.head, tail)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }
}

impl<T: Copy + Default> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

impl<T: Copy + Default> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

/// Keeps a value on cache lines of its own so that the producer's and consumer's counters do
/// not false-share. 128 bytes rather than 64 because Intel's spatial prefetcher pulls lines in
/// adjacent pairs and Apple's cores have 128-byte lines (the same choice as crossbeam-utils'
/// `CachePadded`); the cost is a few hundred bytes per ring.
#[repr(align(128))]
struct CachePadded<T>(T);

/// The state both ends share. The padded counters fill whole 128-byte blocks, so the read-only
/// fields (`slots`, `mask`) land in a block of their own and are never invalidated by a push or
/// pop.
struct Shared<T> {
    /// Entries popped; written only by the consumer.
    head: CachePadded<AtomicU64>,
    /// Entries pushed; written only by the producer.
    tail: CachePadded<AtomicU64>,
    slots: Box<[Slot<T>]>,
    /// `capacity - 1`; `counter & mask` is the slot index.
    mask: u64,
}

// SAFETY: the only non-`Sync` part is the slots' `UnsafeCell`s. The head/tail protocol gives
// each slot exactly one owner at a time (the producer while free, the consumer while full) and
// hands it over with a Release store / Acquire load, so no slot is accessed from two threads
// without a happens-before edge. Entries move between threads, hence `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T: Copy + Default> Shared<T> {
    fn new(capacity: usize) -> Result<Self, RingError> {
        if !(RING_ENTRIES_MIN..=RING_ENTRIES_MAX).contains(&capacity) || !capacity.is_power_of_two()
        {
            return Err(RingError::Capacity { capacity });
        }
        let slots: Box<[Slot<T>]> = (0..capacity).map(|_| Slot::new(T::default())).collect();
        assert!(slots.len() == capacity);
        Ok(Shared {
            head: CachePadded(AtomicU64::new(0)),
            tail: CachePadded(AtomicU64::new(0)),
            slots,
            mask: (capacity - 1) as u64,
        })
    }
}

impl<T> Shared<T> {
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn capacity_u64(&self) -> u64 {
        self.mask + 1
    }

    fn slot(&self, counter: u64) -> &Slot<T> {
        // The mask keeps the index below the capacity, which is at most RING_ENTRIES_MAX, so the
        // cast cannot truncate.
        &self.slots[(counter & self.mask) as usize]
    }

    fn len(&self, head: u64, tail: u64) -> usize {
        let used = tail.wrapping_sub(head);
        assert!(used <= self.capacity_u64());
        used as usize
    }
}

/// One ring slot. The cell has loom's `with`/`with_mut` API under both cfgs (see
/// `UnsafeCell` below), so this code is the same for the real build and the loom model.
struct Slot<T>(UnsafeCell<T>);

impl<T: Copy> Slot<T> {
    fn new(value: T) -> Self {
        Slot(UnsafeCell::new(value))
    }

    /// # Safety
    ///
    /// No write to this slot may happen concurrently with the read: the caller must own the
    /// slot under the head/tail protocol.
    unsafe fn read(&self) -> T {
        // SAFETY: the caller owns the slot, so nothing writes it while we copy it out; the
        // pointer comes from a live cell and `T: Copy` needs no drop.
        self.0.with(|p| unsafe { *p })
    }

    /// # Safety
    ///
    /// No other access to this slot may happen concurrently with the write: the caller must own
    /// the slot under the head/tail protocol.
    unsafe fn write(&self, value: T) {
        // SAFETY: the caller owns the slot, so nothing else reads or writes it meanwhile; the
        // old value is `Copy` and needs no drop.
        self.0.with_mut(|p| unsafe { *p = value });
    }
}

/// Under loom, the checked cell: every access is compared against the happens-before order the
/// atomics build, which is what lets the loom tests catch a too-weak ordering.
#[cfg(loom)]
use loom::cell::UnsafeCell;

/// Under std, a zero-cost stand-in with loom's API, so `Slot` has one body for both cfgs.
#[cfg(not(loom))]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;
    use std::thread;

    use proptest::prelude::*;

    use super::*;

    fn assert_send<S: Send>() {}

    #[test]
    fn ends_are_send() {
        assert_send::<Producer<u64>>();
        assert_send::<Consumer<u64>>();
    }

    fn check_capacity(capacity: usize, expected_ok: bool) {
        let result = split::<u32>(capacity);
        match (result, expected_ok) {
            (Ok((p, c)), true) => {
                assert_eq!(p.capacity(), capacity);
                assert_eq!(c.capacity(), capacity);
                assert!(p.is_empty());
                assert!(c.is_empty());
            }
            (Err(e), false) => assert_eq!(e, RingError::Capacity { capacity }),
            (r, _) => panic!(
                "capacity {capacity}: got {:?}, expected ok={expected_ok}",
                r.err()
            ),
        }
    }

    #[test]
    fn capacity_limits() {
        check_capacity(0, false);
        check_capacity(1, false);
        check_capacity(2, true);
        check_capacity(3, false);
        check_capacity(4, true);
        check_capacity(1000, false);
        check_capacity(1024, true);
        check_capacity(RING_ENTRIES_MAX - 1, false);
        check_capacity(RING_ENTRIES_MAX + 1, false);
        check_capacity(RING_ENTRIES_MAX * 2, false);
        check_capacity(usize::MAX, false);
        if !cfg!(miri) {
            // 64 Ki slots is slow to allocate under miri; the bound itself is covered above.
            check_capacity(RING_ENTRIES_MAX, true);
        }
    }

    #[test]
    fn error_message_names_value_and_range() {
        let e = split::<u8>(3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ring capacity 3 is out of range: expected a power of two from 2 to 65536"
        );
    }

    #[test]
    fn fifo_order_and_edges() {
        let (mut p, mut c) = split::<u32>(4).unwrap();
        assert_eq!(c.pop(), None);
        for v in 1..=4 {
            assert_eq!(p.len(), (v - 1) as usize);
            assert_eq!(p.push(v), Ok(()));
            assert_eq!(c.len(), v as usize);
        }
        // Full: the entry comes back untouched and nothing changes.
        assert_eq!(p.push(5), Err(5));
        assert_eq!(p.len(), 4);
        assert_eq!(c.pop(), Some(1));
        // One slot free again.
        assert_eq!(p.push(5), Ok(()));
        assert_eq!(p.push(6), Err(6));
        for v in 2..=5 {
            assert_eq!(c.pop(), Some(v));
        }
        assert_eq!(c.pop(), None);
        assert!(c.is_empty());
        assert!(p.is_empty());
    }

    #[test]
    fn wraps_around_many_times() {
        let rounds = if cfg!(miri) { 40 } else { 100_000 };
        let (mut p, mut c) = split::<u64>(4).unwrap();
        let mut next_push = 0u64;
        let mut next_pop = 0u64;
        for round in 0..rounds {
            // Batches of 1..=4 so the full edge lands on every slot index in turn.
            let batch = round % 4 + 1;
            for _ in 0..batch {
                assert_eq!(p.push(next_push), Ok(()));
                next_push += 1;
            }
            for _ in 0..batch {
                assert_eq!(c.pop(), Some(next_pop));
                next_pop += 1;
            }
            assert_eq!(c.pop(), None);
        }
        assert_eq!(next_pop, next_push);
    }

    #[test]
    fn counters_wrap_past_u64_max() {
        // Start both ends just below the wrap to check the `wrapping_*` arithmetic directly.
        let (mut p, mut c) = split::<u64>(2).unwrap();
        let start = u64::MAX - 2;
        p.tail = start;
        p.head_cached = start;
        p.shared.tail.0.store(start, Ordering::Relaxed);
        p.shared.head.0.store(start, Ordering::Relaxed);
        c.head = start;
        c.tail_cached = start;
        for v in 0..10u64 {
            assert_eq!(p.push(v), Ok(()));
            assert_eq!(p.push(v + 100), Ok(()));
            assert_eq!(p.push(0), Err(0));
            assert_eq!(c.len(), 2);
            assert_eq!(c.pop(), Some(v));
            assert_eq!(c.pop(), Some(v + 100));
            assert_eq!(c.pop(), None);
        }
    }

    /// A bound on retries of one push or pop in the stress test, so a lost-wakeup bug fails the
    /// test instead of hanging it. The other thread may be descheduled for a while on 2 cores,
    /// so the loop yields and the bound is generous.
    const RETRIES_MAX: u64 = 1 << 32;

    #[test]
    fn two_threads_preserve_order() {
        // Each entry carries its complement so that a torn or stale slot read shows up.
        let entries: u64 = if cfg!(miri) { 300 } else { 1_000_000 };
        let (mut p, mut c) = split::<(u64, u64)>(64).unwrap();
        let producer = thread::spawn(move || {
            for v in 1..=entries {
                let mut entry = (v, !v);
                let mut retries = 0u64;
                while let Err(back) = p.push(entry) {
                    entry = back;
                    retries += 1;
                    assert!(retries < RETRIES_MAX, "push of {v} never found room");
                    thread::yield_now();
                }
            }
        });
        let mut expected = 1u64;
        let mut retries = 0u64;
        while expected <= entries {
            match c.pop() {
                Some((v, check)) => {
                    assert_eq!(v, expected);
                    assert_eq!(check, !v);
                    expected += 1;
                    retries = 0;
                }
                None => {
                    retries += 1;
                    assert!(retries < RETRIES_MAX, "entry {expected} never arrived");
                    thread::yield_now();
                }
            }
        }
        producer.join().unwrap();
        assert_eq!(c.pop(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![any::<u32>().prop_map(Op::Push), Just(Op::Pop)]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 3 } else { 256 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn matches_vecdeque(
            capacity_log2 in 1u32..=5,
            ops in proptest::collection::vec(op(), 0..if cfg!(miri) { 40 } else { 400 }),
        ) {
            let capacity = 1usize << capacity_log2;
            let (mut p, mut c) = split::<u32>(capacity).unwrap();
            let mut model: VecDeque<u32> = VecDeque::with_capacity(capacity);
            for op in ops {
                match op {
                    Op::Push(v) => {
                        let expected = if model.len() < capacity {
                            model.push_back(v);
                            Ok(())
                        } else {
                            Err(v)
                        };
                        prop_assert_eq!(p.push(v), expected);
                    }
                    Op::Pop => prop_assert_eq!(c.pop(), model.pop_front()),
                }
                prop_assert_eq!(p.len(), model.len());
                prop_assert_eq!(c.len(), model.len());
                prop_assert_eq!(c.is_empty(), model.is_empty());
            }
        }
    }
}
