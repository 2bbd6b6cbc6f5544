//! `MinQueue`: a min-priority queue for keys that are mostly pushed in ascending order, as
//! the events of a discrete-event engine are (a command's next step is scheduled a fixed time
//! after the last one's).
//!
//! Keys pushed no smaller than the last one in order go on a FIFO; only a key smaller than
//! that goes on a heap. The smallest key is the smaller of the two fronts, so the order is
//! exactly one heap's, at a fraction of its cost when most keys arrive in order: the device's
//! event queue (`events.rs`) and the simulator's host events (`nvarray-run`'s `sim.rs`) use it
//! (issue 38: the device's heap was 180 of Moneta's 1,563 instructions per command).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Debug)]
pub struct MinQueue<T> {
    /// Sorted from front to back.
    in_order: VecDeque<T>,
    /// Keys smaller than the back of `in_order` when they were pushed.
    out_of_order: BinaryHeap<Reverse<T>>,
}

impl<T: Ord + Copy> Default for MinQueue<T> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<T: Ord + Copy> MinQueue<T> {
    pub fn with_capacity(capacity: usize) -> Self {
        MinQueue {
            in_order: VecDeque::with_capacity(capacity),
            out_of_order: BinaryHeap::with_capacity(capacity),
        }
    }

    #[inline]
    pub fn push(&mut self, key: T) {
        match self.in_order.back() {
            Some(last) if key < *last => self.out_of_order.push(Reverse(key)),
            _ => self.in_order.push_back(key),
        }
    }

    /// The smallest key, if any.
    #[inline]
    pub fn peek(&self) -> Option<T> {
        match (self.in_order.front(), self.out_of_order.peek()) {
            (Some(&a), Some(&Reverse(b))) => Some(a.min(b)),
            (a, b) => a.copied().or(b.map(|&Reverse(k)| k)),
        }
    }

    /// Removes and returns the smallest key.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        self.pop_if(|_| true)
    }

    /// Removes and returns the smallest key if `wanted` says so (an event that is due): one
    /// look at the two fronts, where `peek` then `pop` would take two. Always inlined, as
    /// `EventQueue::pop_due`, which is all it is.
    #[inline(always)]
    pub fn pop_if(&mut self, wanted: impl FnOnce(T) -> bool) -> Option<T> {
        match (self.in_order.front(), self.out_of_order.peek()) {
            (Some(&a), Some(&Reverse(b))) if b < a => {
                wanted(b).then(|| self.out_of_order.pop().map(|Reverse(k)| k))?
            }
            (Some(&a), _) => wanted(a).then(|| self.in_order.pop_front())?,
            (None, Some(&Reverse(b))) => {
                wanted(b).then(|| self.out_of_order.pop().map(|Reverse(k)| k))?
            }
            (None, None) => None,
        }
    }

    pub fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Keys come out in exactly the order one heap gives, whatever mix of pushes (in
        /// order, out of order, equal) and pops; a refused `pop_if` takes nothing.
        #[test]
        fn keys_come_out_as_from_one_heap(
            ops in proptest::collection::vec((any::<bool>(), 0u64..50, any::<bool>()), 1..300),
        ) {
            let mut queue = MinQueue::default();
            let mut heap = BinaryHeap::new();
            let mut now = 0u64;
            for (pop, delay, refuse) in ops {
                if pop {
                    let expected = heap.peek().map(|&Reverse(k)| k);
                    prop_assert_eq!(queue.peek(), expected);
                    if refuse {
                        prop_assert_eq!(queue.pop_if(|_| false), None);
                    }
                    prop_assert_eq!(queue.pop(), heap.pop().map(|Reverse(k)| k));
                    if let Some(k) = expected {
                        now = k;
                    }
                } else {
                    queue.push(now + delay);
                    heap.push(Reverse(now + delay));
                }
                prop_assert_eq!(queue.len(), heap.len());
            }
            while let Some(Reverse(k)) = heap.pop() {
                prop_assert_eq!(queue.pop(), Some(k));
            }
            prop_assert!(queue.is_empty());
        }
    }
}
