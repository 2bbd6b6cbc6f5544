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

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Sorted, disjoint, non-touching `[start, end)` intervals.
    intervals: VecDeque<(u64, u64)>,
    busy_ns_total: u64,
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Books `duration_ns` at the earliest start `>= ready_ns` that is free, and returns the
    /// start. `now_ns` is the engine's current time: nothing can be booked before it.
    pub fn reserve(&mut self, now_ns: u64, ready_ns: u64, duration_ns: u64) -> u64 {
        debug_assert!(
            ready_ns >= now_ns,
            "booking in the past: ready={ready_ns} now={now_ns}"
        );
        while let Some(&(_, end)) = self.intervals.front() {
            if end > now_ns {
                break;
            }
            self.intervals.pop_front();
        }
        if duration_ns == 0 {
            return ready_ns;
        }
        self.busy_ns_total += duration_ns;

        // Fast path: free from `ready_ns` on (the common case in a pipeline).
        match self.intervals.back_mut() {
            None => {
                self.intervals.push_back((ready_ns, ready_ns + duration_ns));
                return ready_ns;
            }
            Some(last) if ready_ns >= last.1 => {
                if ready_ns == last.1 {
                    last.1 += duration_ns;
                } else {
                    self.intervals.push_back((ready_ns, ready_ns + duration_ns));
                }
                return ready_ns;
            }
            Some(_) => {}
        }

        if self.intervals.len() >= INTERVALS_MAX {
            let last = self.intervals.back_mut().expect("non-empty");
            let start = last.1;
            last.1 += duration_ns;
            return start;
        }

        // Find the first gap that fits.
        let mut start = ready_ns;
        let mut index = 0;
        while index < self.intervals.len() {
            let (s, e) = self.intervals[index];
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
        self.insert(index, start, start + duration_ns);
        start
    }

    fn insert(&mut self, index: usize, start: u64, end: u64) {
        let touches_prev = index > 0 && self.intervals[index - 1].1 == start;
        let touches_next = index < self.intervals.len() && self.intervals[index].0 == end;
        match (touches_prev, touches_next) {
            (true, true) => {
                let next_end = self.intervals[index].1;
                self.intervals[index - 1].1 = next_end;
                self.intervals.remove(index);
            }
            (true, false) => self.intervals[index - 1].1 = end,
            (false, true) => self.intervals[index].0 = start,
            (false, false) => self.intervals.insert(index, (start, end)),
        }
    }

    /// Total time booked since creation (for utilisation).
    pub fn busy_ns_total(&self) -> u64 {
        self.busy_ns_total
    }

    /// End of the last booking, or 0.
    pub fn busy_until_ns(&self) -> u64 {
        self.intervals.back().map_or(0, |&(_, e)| e)
    }

    #[cfg(test)]
    fn intervals(&self) -> Vec<(u64, u64)> {
        self.intervals.iter().copied().collect()
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
        t.reserve(25, 40, 5);
        assert_eq!(t.intervals(), vec![(20, 30), (40, 45)]);
        assert_eq!(t.busy_ns_total(), 25);
    }

    proptest! {
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
