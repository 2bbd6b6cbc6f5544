//! The device's event queue: what happens next inside the array, in time order.
//!
//! Events are ordered by time, then by the order they were scheduled in (so events at equal
//! times replay deterministically). Most are scheduled in that order already (a command's
//! `Ready` after the controller's fixed pipeline, behind the last command's), which is what
//! `MinQueue` is fast for.

use crate::min_queue::MinQueue;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum EventKind {
    /// Controller finished the command's work: it may now be granted buffers.
    Ready,
    /// One piece finished and released its transfer buffer.
    PieceDone,
}

/// An entry of the device's event queue, ordered by time, then by the order events were
/// scheduled in (so events at equal times replay deterministically). Packed into one `u128` —
/// the time in the high 64 bits, then the sequence number (47 bits), the kind (1 bit) and the
/// tag (16 bits, `config::limits::TAGS_MAX`) — so the heap compares single integers: with a
/// tuple key the heap was a seventh of the model's time (`benches/model_cost.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Event(u128);

impl Event {
    const TAG_BITS: u32 = 16;
    const SEQ_MAX: u64 = 1 << 47;

    pub(crate) fn new(t: u64, seq: u64, kind: EventKind, tag: u32) -> Self {
        debug_assert!(tag < 1 << Self::TAG_BITS);
        let low = (seq << (Self::TAG_BITS + 1))
            | (u64::from(kind == EventKind::PieceDone) << Self::TAG_BITS)
            | u64::from(tag);
        Event((u128::from(t) << 64) | u128::from(low))
    }

    pub(crate) fn time(self) -> u64 {
        (self.0 >> 64) as u64
    }

    pub(crate) fn kind(self) -> EventKind {
        if (self.0 >> Self::TAG_BITS) & 1 == 1 {
            EventKind::PieceDone
        } else {
            EventKind::Ready
        }
    }

    pub(crate) fn tag(self) -> u32 {
        (self.0 as u32) & ((1 << Self::TAG_BITS) - 1)
    }
}

/// The events not yet due, numbered in the order they were scheduled.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventQueue {
    events: MinQueue<Event>,
    seq: u64,
}

impl EventQueue {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        EventQueue {
            events: MinQueue::with_capacity(capacity),
            seq: 0,
        }
    }

    /// Schedules `kind` for `tag` at `t`.
    #[inline]
    pub(crate) fn push(&mut self, t: u64, kind: EventKind, tag: u32) {
        self.seq += 1;
        // At 10 M events per second, 2^47 events take 160 days.
        assert!(self.seq < Event::SEQ_MAX, "event sequence exhausted");
        self.events.push(Event::new(t, self.seq, kind, tag));
    }

    /// The next event, if any.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Event> {
        self.events.peek()
    }

    /// Removes and returns the next event if it is due by `now_ns`. Always inlined into the
    /// device's event loop: left to the inliner, it was kept out of line after changes
    /// elsewhere in the binary (thin LTO over 4 codegen units), 80 instructions more per
    /// simulated dram request (issue 38).
    #[inline(always)]
    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<Event> {
        self.events.pop_if(|e| e.time() <= now_ns)
    }

    /// Removes the next event (the one `peek` returns).
    #[cfg(test)]
    pub(crate) fn pop(&mut self) -> Option<Event> {
        self.events.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    fn kind(piece_done: bool) -> EventKind {
        if piece_done {
            EventKind::PieceDone
        } else {
            EventKind::Ready
        }
    }

    proptest! {
        /// A packed event gives back what it was built from, and two events order as their
        /// (time, sequence) pairs do, whatever their kinds and tags.
        #[test]
        fn packed_events_order_by_time_then_sequence(
            a in (any::<u64>(), 0..Event::SEQ_MAX, any::<bool>(), 0u32..1 << Event::TAG_BITS),
            b in (any::<u64>(), 0..Event::SEQ_MAX, any::<bool>(), 0u32..1 << Event::TAG_BITS),
        ) {
            let ea = Event::new(a.0, a.1, kind(a.2), a.3);
            let eb = Event::new(b.0, b.1, kind(b.2), b.3);
            prop_assert_eq!((ea.time(), ea.kind(), ea.tag()), (a.0, kind(a.2), a.3));
            prop_assert_eq!((eb.time(), eb.kind(), eb.tag()), (b.0, kind(b.2), b.3));
            if (a.0, a.1) != (b.0, b.1) {
                prop_assert_eq!(ea.cmp(&eb), (a.0, a.1).cmp(&(b.0, b.1)));
            }
        }
    }

    proptest! {
        /// The queue gives events back in exactly the order one heap of all of them would,
        /// whatever mix of pushes (in order, out of order, at equal times) and pops.
        #[test]
        fn events_come_out_as_from_one_heap(
            ops in proptest::collection::vec((any::<bool>(), 0u64..50, any::<bool>(), 0u32..8), 1..300),
        ) {
            let mut queue = EventQueue::default();
            let mut heap = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (pop, delay, piece_done, tag) in ops {
                if pop {
                    let expected = heap.pop().map(|Reverse(e)| e);
                    prop_assert_eq!(queue.peek(), expected);
                    if let Some(e) = expected {
                        // Not yet due just before its time, due at it.
                        prop_assert_eq!(e.time().checked_sub(1).and_then(|t| queue.pop_due(t)), None);
                    }
                    prop_assert_eq!(queue.pop_due(expected.map_or(0, Event::time)), expected);
                    if let Some(e) = expected {
                        now = e.time();
                    }
                } else {
                    seq += 1;
                    let kind = kind(piece_done);
                    queue.push(now + delay, kind, tag);
                    heap.push(Reverse(Event::new(now + delay, seq, kind, tag)));
                }
            }
            while let Some(Reverse(e)) = heap.pop() {
                prop_assert_eq!(queue.pop(), Some(e));
            }
            prop_assert_eq!(queue.pop(), None);
        }
    }
}
