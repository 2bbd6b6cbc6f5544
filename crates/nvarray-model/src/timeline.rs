//! A resource that serves one thing at a time, booked in advance.
//!
//! The model computes a request piece's whole path (media, ring, link) when the piece is
//! granted a buffer, so a resource can be booked for a time in the future. A plain
//! "busy until" register would then make an earlier-ready piece wait behind a later booking;
//! `Timeline` keeps the booked intervals and lets a new booking fill a gap before them
//! (first-come, first-served by readiness as far as the gaps allow). Intervals that ended
//! before `now_ns` are forgotten, so the list stays as short as the number of pieces in flight.

use std::collections::VecDeque;

/// Bookings kept at most; beyond this a booking goes after the last one (never earlier than
/// a correct schedule would allow, only possibly later). Bounded so a pathological workload
/// cannot make every booking a long scan.
pub const INTERVALS_MAX: usize = 256;

/// The fast path prunes ended bookings once the list is this long.
const PRUNE_AT: usize = 16;

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The latest booking, kept inline: the fast path (a booking after everything booked so
    /// far) touches only this, not the heap memory of `earlier`. Empty when `last.1 == 0`.
    last: (u64, u64),
    /// Earlier bookings: sorted, disjoint, non-touching `[start, end)`, all before `last`.
    earlier: VecDeque<(u64, u64)>,
    busy_ns_total: u64,
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Books `duration_ns` at the earliest start `>= ready_ns` that is free, and returns the
    /// start. `now_ns` is the engine's current time: nothing can be booked before it.
    #[inline]
    pub fn reserve(&mut self, now_ns: u64, ready_ns: u64, duration_ns: u64) -> u64 {
        debug_assert!(
            ready_ns >= now_ns,
            "booking in the past: ready={ready_ns} now={now_ns}"
        );
        if duration_ns == 0 {
            return ready_ns;
        }
        self.busy_ns_total += duration_ns;
        let end = ready_ns + duration_ns;

        // Fast path: free from `ready_ns` on (the common case in a pipeline).
        if ready_ns >= self.last.1 {
            if self.last.1 <= now_ns {
                // Every booking has ended: forget them all at once.
                if !self.earlier.is_empty() {
                    self.earlier.clear();
                }
                self.last = (ready_ns, end);
            } else if ready_ns == self.last.1 {
                self.last.1 = end;
            } else {
                self.earlier.push_back(self.last);
                self.last = (ready_ns, end);
                if self.earlier.len() > PRUNE_AT {
                    self.prune(now_ns);
                }
            }
            return ready_ns;
        }
        self.prune(now_ns);

        if self.earlier.len() >= INTERVALS_MAX {
            let start = self.last.1;
            self.last.1 += duration_ns;
            return start;
        }

        // Find the first gap that fits, looking at `earlier` and then `last`. Bookings that
        // end by `ready_ns` cannot hold it: skip them by binary search (the list is sorted),
        // since a scan from the front over every booking in flight was the model's largest
        // cost at queue depth 32 (`benches/model_cost.rs`).
        let mut start = ready_ns;
        let mut index = self.earlier.partition_point(|&(_, e)| e <= ready_ns);
        while index < self.earlier.len() {
            let (s, e) = self.earlier[index];
            if e <= start {
                index += 1;
                continue;
            }
            if s >= start + duration_ns {
                break;
            }
            start = e;
            index += 1;
        }
        if index == self.earlier.len() && start + duration_ns > self.last.0 {
            // No gap before `last`: go after it.
            let start = self.last.1.max(start);
            if start == self.last.1 {
                self.last.1 += duration_ns;
            } else {
                self.earlier.push_back(self.last);
                self.last = (start, start + duration_ns);
            }
            return start;
        }
        self.insert(index, start, start + duration_ns);
        start
    }

    /// Forgets bookings that ended by `now_ns`.
    fn prune(&mut self, now_ns: u64) {
        while let Some(&(_, end)) = self.earlier.front() {
            if end > now_ns {
                break;
            }
            self.earlier.pop_front();
        }
    }

    /// Inserts `[start, end)` into `earlier` at `index` (it ends at or before `last` starts),
    /// merging with touching neighbours.
    fn insert(&mut self, index: usize, start: u64, end: u64) {
        let touches_prev = index > 0 && self.earlier[index - 1].1 == start;
        let next = if index < self.earlier.len() {
            Some(self.earlier[index].0)
        } else {
            None
        };
        if next.is_none() && end == self.last.0 {
            if touches_prev {
                let (s, _) = self.earlier.remove(index - 1).expect("exists");
                self.last.0 = s;
            } else {
                self.last.0 = start;
            }
            return;
        }
        let touches_next = next == Some(end);
        match (touches_prev, touches_next) {
            (true, true) => {
                let next_end = self.earlier[index].1;
                self.earlier[index - 1].1 = next_end;
                self.earlier.remove(index);
            }
            (true, false) => self.earlier[index - 1].1 = end,
            (false, true) => self.earlier[index].0 = start,
            (false, false) => self.earlier.insert(index, (start, end)),
        }
    }

    /// A timeline with the same future bookings and no busy time of its own (used to split a
    /// group of resources that were booked in lockstep).
    pub fn schedule_copy(&self) -> Timeline {
        Timeline {
            last: self.last,
            earlier: self.earlier.clone(),
            busy_ns_total: 0,
        }
    }

    /// Total time booked since creation (for utilisation).
    pub fn busy_ns_total(&self) -> u64 {
        self.busy_ns_total
    }

    /// End of the last booking, or 0.
    #[inline]
    pub fn busy_until_ns(&self) -> u64 {
        self.last.1
    }

    #[cfg(test)]
    fn intervals(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.earlier.iter().copied().collect();
        if self.last.1 > 0 {
            v.push(self.last);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn back_to_back_bookings_queue() {
        let mut t = Timeline::new();
        assert_eq!(t.reserve(0, 0, 10), 0);
        assert_eq!(t.reserve(0, 0, 10), 10);
        assert_eq!(t.reserve(0, 5, 10), 20);
        assert_eq!(t.intervals(), vec![(0, 30)]);
    }

    #[test]
    fn an_earlier_ready_booking_fills_a_gap() {
        let mut t = Timeline::new();
        assert_eq!(t.reserve(0, 100, 10), 100);
        assert_eq!(t.reserve(0, 0, 50), 0);
        assert_eq!(t.reserve(0, 40, 60), 110, "does not fit in [50,100)");
        assert_eq!(t.reserve(0, 50, 50), 50, "fits exactly");
        assert_eq!(t.intervals(), vec![(0, 170)]);
    }

    #[test]
    fn past_intervals_are_forgotten() {
        let mut t = Timeline::new();
        t.reserve(0, 0, 10);
        t.reserve(0, 20, 10);
        // A booking that needs a gap search prunes first.
        t.reserve(25, 25, 5);
        assert_eq!(t.intervals(), vec![(20, 35)]);
        assert_eq!(t.busy_ns_total(), 25);
        // A booking after everything has ended starts a fresh list.
        t.reserve(100, 100, 5);
        assert_eq!(t.intervals(), vec![(100, 105)]);
    }

    /// The earliest start `>= ready` of length `dur` that overlaps none of `booked`.
    fn reference_start(booked: &[(u64, u64)], ready: u64, dur: u64) -> u64 {
        let mut start = ready;
        loop {
            match booked.iter().find(|&&(s, e)| start < e && s < start + dur) {
                Some(&(_, e)) => start = e,
                None => return start,
            }
        }
    }

    proptest! {
        /// The timeline books exactly where a plain list of every booking says it should.
        #[test]
        fn matches_a_reference_list(reqs in proptest::collection::vec((0u64..300, 0u64..200, 1u64..60), 1..200)) {
            let mut t = Timeline::new();
            let mut now = 0;
            let mut booked: Vec<(u64, u64)> = Vec::new();
            for (advance, delay, dur) in reqs {
                now += advance / 20;
                let ready = now + delay;
                let expected = reference_start(&booked, ready, dur);
                prop_assert_eq!(t.reserve(now, ready, dur), expected);
                booked.push((expected, expected + dur));
            }
        }

        /// Bookings never overlap, never start before they are ready, and keep their length.
        #[test]
        fn bookings_are_disjoint(reqs in proptest::collection::vec((0u64..1000, 0u64..100, 1u64..50), 1..60)) {
            let mut t = Timeline::new();
            let mut now = 0;
            let mut booked: Vec<(u64, u64)> = Vec::new();
            for (advance, delay, dur) in reqs {
                now += advance / 10;
                let ready = now + delay;
                let start = t.reserve(now, ready, dur);
                prop_assert!(start >= ready);
                for &(s, e) in &booked {
                    prop_assert!(start + dur <= s || start >= e, "overlap [{start},{}) with [{s},{e})", start + dur);
                }
                booked.push((start, start + dur));
            }
        }
    }
}
