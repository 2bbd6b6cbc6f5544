//! A single-producer single-consumer ring of 64-bit words where one atomic store hands an
//! entry over: Moneta's command interface, where "one 64-bit write" to the device issues a
//! command with no lock (Moneta slides, "atomic operations"), and the completion words the
//! device sends back.
//!
//! Unlike `ring`, there are no shared head and tail counters: a slot holding 0 is free and a
//! slot holding anything else is full (every word the protocols encode has a valid bit, so it
//! is never 0). The producer writes a word into its next slot if it sees 0 there; the consumer
//! takes the word from its next slot if it sees a non-zero value and writes 0 back. Each side
//! keeps its own position privately. The store that fills a slot is a Release and the load
//! that sees it an Acquire, so whatever the word refers to (a DMA buffer) travels with it; the
//! same holds for the store of 0 that frees it.
//!
//! Everything is safe code on `AtomicU64` slots.

use std::fmt;

use crate::sync::{Arc, AtomicU64, Ordering};

use crate::ring::{RingError, RING_ENTRIES_MAX, RING_ENTRIES_MIN};

/// Creates a ring of `capacity` word slots and returns its two ends.
pub fn split(capacity: usize) -> Result<(WordProducer, WordConsumer), RingError> {
    if !(RING_ENTRIES_MIN..=RING_ENTRIES_MAX).contains(&capacity) || !capacity.is_power_of_two() {
        return Err(RingError::Capacity { capacity });
    }
    let slots: Arc<Box<[AtomicU64]>> = Arc::new((0..capacity).map(|_| AtomicU64::new(0)).collect());
    let mask = capacity - 1;
    Ok((
        WordProducer {
            slots: Arc::clone(&slots),
            mask,
            tail: 0,
        },
        WordConsumer {
            slots,
            mask,
            head: 0,
        },
    ))
}

/// The producing end; one per ring, `Send`, not `Clone`.
pub struct WordProducer {
    slots: Arc<Box<[AtomicU64]>>,
    mask: usize,
    tail: usize,
}

/// The consuming end; one per ring, `Send`, not `Clone`.
pub struct WordConsumer {
    slots: Arc<Box<[AtomicU64]>>,
    mask: usize,
    head: usize,
}

impl WordProducer {
    /// Stores `word` (which must not be 0) in the next slot, or hands it back when the ring is
    /// full.
    #[inline]
    pub fn push(&mut self, word: u64) -> Result<(), u64> {
        assert!(word != 0, "0 marks a free slot and cannot be sent");
        let slot = &self.slots[self.tail & self.mask];
        // Acquire pairs with the consumer's Release store of 0: its reads of whatever the old
        // word referred to happen before our reuse.
        if slot.load(Ordering::Acquire) != 0 {
            return Err(word);
        }
        // The one store that issues the entry. Release publishes everything written before it
        // (the DMA buffer's data) to the consumer's Acquire load.
        slot.store(word, Ordering::Release);
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

impl WordConsumer {
    /// Takes the next word, or `None` when the ring is empty.
    #[inline]
    pub fn pop(&mut self) -> Option<u64> {
        let slot = &self.slots[self.head & self.mask];
        // Acquire pairs with the producer's Release store of the word.
        let word = slot.load(Ordering::Acquire);
        if word == 0 {
            return None;
        }
        // Release orders our use of the entry before the producer's reuse of the slot.
        slot.store(0, Ordering::Release);
        self.head = self.head.wrapping_add(1);
        Some(word)
    }

    /// Whether the next slot holds a word (a peek that takes nothing).
    #[inline]
    pub fn has_next(&self) -> bool {
        self.slots[self.head & self.mask].load(Ordering::Acquire) != 0
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

impl fmt::Debug for WordProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordProducer")
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl fmt::Debug for WordConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordConsumer")
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;
    use std::thread;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn capacity_limits() {
        assert!(split(1).is_err());
        assert!(split(3).is_err());
        assert!(split(RING_ENTRIES_MAX * 2).is_err());
        assert_eq!(split(4).unwrap().0.capacity(), 4);
    }

    #[test]
    #[should_panic(expected = "0 marks a free slot")]
    fn zero_word_is_refused() {
        let (mut p, _c) = split(2).unwrap();
        let _ = p.push(0);
    }

    #[test]
    fn two_threads_preserve_order() {
        let (mut p, mut c) = split(8).unwrap();
        let n: u64 = if cfg!(miri) { 200 } else { 500_000 };
        thread::scope(|s| {
            s.spawn(move || {
                for w in 1..=n {
                    while p.push(w).is_err() {
                        std::hint::spin_loop();
                    }
                }
            });
            let mut expected = 1;
            while expected <= n {
                if let Some(w) = c.pop() {
                    assert_eq!(w, expected);
                    expected += 1;
                }
            }
            assert_eq!(c.pop(), None);
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 3 } else { 256 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn matches_vecdeque(log2 in 1u32..=4, ops in proptest::collection::vec(any::<Option<u64>>(), 0..if cfg!(miri) { 40 } else { 300 })) {
            let capacity = 1usize << log2;
            let (mut p, mut c) = split(capacity).unwrap();
            let mut reference = VecDeque::new();
            for op in ops {
                match op {
                    Some(w) => {
                        let w = w | 1;
                        let full = reference.len() == capacity;
                        prop_assert_eq!(p.push(w).is_err(), full);
                        if !full { reference.push_back(w); }
                    }
                    None => {
                        prop_assert_eq!(c.has_next(), !reference.is_empty());
                        prop_assert_eq!(c.pop(), reference.pop_front());
                    }
                }
            }
        }
    }
}
