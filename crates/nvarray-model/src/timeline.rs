//! A resource that serves one thing at a time, booked in advance.
//!
//! The model computes a request piece's whole path (media, ring, link) when the piece is
//! granted a buffer, so a resource can be booked for a time in the future. A plain
//! "busy until" register would then make an earlier-ready piece wait behind a later booking;
//! `Timeline` keeps the booked intervals and lets a new booking fill a gap before them
//! (first-come, first-served by readiness as far as the gaps allow). Intervals that ended
//! before `now_ns` are forgotten, so the list stays as short as the number of pieces in flight.

/// Bookings a gap search looks through at most: with this many kept, a booking that would
/// need a gap goes after the last one instead (never earlier than a correct schedule would
/// allow, only possibly later). Bounded so a pathological workload cannot make every booking
/// a long scan. It bounds the search, not the list: the fast path appends without a limit
/// (a booking after all others never scans), so more can be kept
/// (`a_full_list_books_after_the_last_booking`).
pub const INTERVALS_MAX: usize = 256;

/// The forgotten prefix of the kept bookings is dropped once it is longer than this (and
/// than what is kept), and a list that must grow first grows by at least this.
const PRUNE_AT: usize = 16;

#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The latest booking, kept inline: the fast path (a booking after everything booked so
    /// far) touches only this, not the heap memory of `earlier`. Empty when `last.1 == 0`.
    last: (u64, u64),
    /// Earlier bookings from index `head` on: sorted, disjoint, non-touching `[start, end)`,
    /// all before `last`. Entries before `head` are forgotten; forgetting moves `head` rather
    /// than the entries, and the vector is compacted only once that prefix is long, so a
    /// booking in a gap costs a binary search and a short move of the entries after it.
    earlier: Vec<(u64, u64)>,
    head: usize,
    busy_ns_total: u64,
    /// The latest `now_ns` a booking was made at (debug builds only): bookings that ended
    /// by then may have been forgotten, so a booking dated earlier could land on one.
    #[cfg(debug_assertions)]
    now_ns_max: u64,
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Books `duration_ns` at the earliest start `>= ready_ns` that is free, and returns the
    /// start. `now_ns` is the engine's current time: nothing can be booked before it, and it
    /// never goes back from one booking to the next.
    ///
    /// Debug builds check the contract around the booking itself (`book`): the booking
    /// starts no earlier than it was ready, overlaps nothing booked before it and loses none
    /// (the booked time from `now_ns` on grows by exactly `duration_ns`), the end of the last
    /// booking never moves back, and the interval list keeps its shape (`check_invariants`).
    /// The checks are two passes over the bookings kept, which are about as many as the
    /// pieces in flight (20 on average at queue depth 32 in `benches/model_cost.rs`).
    #[inline]
    pub fn reserve(&mut self, now_ns: u64, ready_ns: u64, duration_ns: u64) -> u64 {
        debug_assert!(
            ready_ns >= now_ns,
            "booking in the past: expected ready >= now, found ready={ready_ns} now={now_ns}"
        );
        debug_assert!(
            ready_ns.checked_add(duration_ns).is_some(),
            "booking past the end of time: expected ready + duration <= u64::MAX, found \
             ready={ready_ns} duration={duration_ns}"
        );
        #[cfg(debug_assertions)]
        let (booked_ns_before, busy_until_before) = {
            assert!(
                now_ns >= self.now_ns_max,
                "time went backwards on a timeline: expected now >= {}, found now={now_ns}",
                self.now_ns_max
            );
            self.now_ns_max = now_ns;
            (self.booked_ns_from(now_ns), self.last.1)
        };

        let start = self.book(now_ns, ready_ns, duration_ns);

        #[cfg(debug_assertions)]
        {
            assert!(
                start >= ready_ns,
                "booking starts before it was ready: expected start >= {ready_ns}, found \
                 start={start} (duration {duration_ns}, now {now_ns})"
            );
            // Pruning forgets only bookings that ended by `now_ns`, which hold no time from
            // `now_ns` on: the booked time from there grows by exactly the new booking.
            let booked_ns_after =
                self.check_invariants(now_ns, (start, start.saturating_add(duration_ns)));
            assert_eq!(
                booked_ns_after,
                booked_ns_before + duration_ns,
                "booking [{start}, {}) overlaps an earlier one or lost one: booked time from \
                 now={now_ns} expected to grow by {duration_ns}, found {booked_ns_before} -> \
                 {booked_ns_after}",
                start + duration_ns
            );
            assert!(
                self.last.1 >= busy_until_before,
                "end of the last booking moved back: expected >= {busy_until_before}, found {}",
                self.last.1
            );
        }
        start
    }

    /// Two bookings ready at the same time, the second sent right behind the first (NVMe's
    /// MSI behind its CQ entry): returns both starts, exactly as two `reserve` calls would
    /// give them. When the timeline is free from `ready_ns` on, the pair is one booking of
    /// both durations (issue 57's one booking per protocol phase): the first starts at
    /// `ready_ns` and the second, queued behind it, right after. Otherwise a message of
    /// another command could sit between them, or a gap too short for the first could hold
    /// the second, so they are booked one by one.
    #[inline]
    pub fn reserve_back_to_back(
        &mut self,
        now_ns: u64,
        ready_ns: u64,
        first_ns: u64,
        second_ns: u64,
    ) -> (u64, u64) {
        // A message of no time is not booked (`reserve`): it starts when it is ready.
        if ready_ns >= self.last.1 && second_ns > 0 {
            let start = self.reserve(now_ns, ready_ns, first_ns + second_ns);
            return (start, start + first_ns);
        }
        let first = self.reserve(now_ns, ready_ns, first_ns);
        (first, self.reserve(now_ns, ready_ns, second_ns))
    }

    /// The booking itself (see `reserve`, which checks its contract in debug builds).
    ///
    /// Shaped for its cost (issue 38): the cases that touch only `last` are here, and every
    /// other case is a call in tail position (`append`, `book_in_gap`), so this function
    /// calls nothing on its common paths and saves no registers. With the gap search part of
    /// it, each of a command's 11 bookings paid 16 instructions of register saving and
    /// restoring; out of line rather than inlined, because inlined into the device's
    /// functions it made them heavier than the call it saved (callgrind, `model_cost`).
    #[inline(never)]
    fn book(&mut self, now_ns: u64, ready_ns: u64, duration_ns: u64) -> u64 {
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
                    self.head = 0;
                }
                self.last = (ready_ns, end);
            } else if ready_ns == self.last.1 {
                self.last.1 = end;
            } else {
                return self.append(now_ns, ready_ns, end);
            }
            return ready_ns;
        }
        // Queued behind the last booking: every earlier one ended by `ready_ns` (the latest
        // of them, kept or forgotten, tells) and the gap before `last` is too short. A
        // controller engine's bookings and a message sent right behind another (NVMe's MSI
        // behind its CQ entry) take this path. The result is `book_in_gap`'s for this case.
        if end > self.last.0 && self.earlier.last().is_none_or(|&(_, e)| e <= ready_ns) {
            let start = self.last.1;
            self.last.1 += duration_ns;
            return start;
        }
        self.book_in_gap(now_ns, ready_ns, duration_ns)
    }

    /// A booking `[start, end)` after a gap behind the last one: the last moves into
    /// `earlier`. Returns `start`.
    #[inline(never)]
    fn append(&mut self, now_ns: u64, start: u64, end: u64) -> u64 {
        if self.earlier.len() == self.earlier.capacity() {
            self.make_room(now_ns);
        }
        self.earlier.push(self.last);
        self.last = (start, end);
        start
    }

    /// Before `earlier` would grow: forgets what ended and drops the forgotten prefix, and
    /// grows only if the kept bookings fill more than half of it.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, now_ns: u64) {
        self.forget_ended(now_ns);
        if self.head > 0 {
            self.earlier.drain(..self.head);
            self.head = 0;
        }
        if 2 * self.earlier.len() >= self.earlier.capacity() {
            self.earlier.reserve(self.earlier.capacity().max(PRUNE_AT));
        }
    }

    /// The rest of `book`: a booking ready before the last one ends that may fill a gap
    /// between earlier bookings.
    #[inline(never)]
    fn book_in_gap(&mut self, now_ns: u64, ready_ns: u64, duration_ns: u64) -> u64 {
        let end = ready_ns + duration_ns;
        // Forget what ended (compacting is left to `insert_moving` and `make_room`, which
        // move bookings anyway: like `book`, this function calls nothing but in tail
        // position).
        self.forget_ended(now_ns);
        let len = self.earlier.len();
        if len - self.head >= INTERVALS_MAX {
            let start = self.last.1;
            self.last.1 += duration_ns;
            return start;
        }

        // Every earlier booking ended by `ready_ns`: the only gap to try is the one right
        // before `last`, and `book` has seen that it holds the booking.
        if self.earlier.last().is_none_or(|&(_, e)| e <= ready_ns) {
            debug_assert!(
                end <= self.last.0,
                "`book` queues this case behind the last"
            );
            return self.insert(len, ready_ns, end);
        }

        // Find the first gap that fits, looking at `earlier` and then `last`. A scan from the
        // oldest booking kept: a booking lands a few bookings in (7.9 on average at queue
        // depth 32 in `benches/model_cost.rs`, of 30 kept), where a scan is shorter than a
        // binary search (tried: 120 instructions more per command). Bookings that end by the
        // candidate start cannot hold it.
        let mut start = ready_ns;
        let mut index = len;
        for (i, &(s, e)) in self.earlier[self.head..].iter().enumerate() {
            if e <= start {
                continue;
            }
            if s >= start + duration_ns {
                index = self.head + i;
                break;
            }
            start = e;
        }
        if index == len && start + duration_ns > self.last.0 {
            // No gap before `last`: go after it.
            let start = self.last.1.max(start);
            if start == self.last.1 {
                self.last.1 += duration_ns;
                return start;
            }
            return self.append(now_ns, start, start + duration_ns);
        }
        self.insert(index, start, start + duration_ns)
    }

    /// Booked time at or after `t`, over the bookings still kept (debug checks only: bookings
    /// ending by the current `now` may have been forgotten, later ones never are). Plain
    /// loops: a debug build runs these on every booking, and iterator chains over a
    /// `VecDeque` once made a simulation 4x slower there.
    #[cfg(debug_assertions)]
    fn booked_ns_from(&self, t: u64) -> u64 {
        let mut booked_ns = 0;
        for &(start, end) in &self.earlier[self.head..] {
            if end > t {
                booked_ns += end - start.max(t);
            }
        }
        if self.last.1 > t {
            booked_ns += self.last.1 - self.last.0.max(t);
        }
        booked_ns
    }

    /// Checks the shape `book` relies on, in one pass, and returns the booked time at or after
    /// `t`: `earlier` is sorted, each booking non-empty, apart from and not touching the next
    /// (touching ones are merged), all of it before `last`; an empty `last` means nothing is
    /// booked; and one kept booking holds `booking`, the interval just booked (if not empty).
    #[cfg(debug_assertions)]
    fn check_invariants(&self, t: u64, booking: (u64, u64)) -> u64 {
        if self.last.1 == 0 {
            assert!(
                self.earlier.len() == self.head,
                "bookings kept with an empty last booking: expected none, found {:?}",
                &self.earlier[self.head..]
            );
            assert!(
                booking.0 == booking.1,
                "booking {booking:?} is not in the timeline after booking it: expected a kept \
                 booking to hold it, found none"
            );
            return 0;
        }
        let mut booked_ns = 0;
        let mut held = booking.0 == booking.1;
        let mut previous_end: Option<u64> = None;
        let mut visit = |(start, end): (u64, u64)| {
            assert!(
                start < end,
                "empty or reversed booking: expected start < end, found [{start}, {end})"
            );
            if let Some(previous_end) = previous_end {
                assert!(
                    previous_end < start,
                    "bookings out of order, overlapping or unmerged: expected the previous end \
                     {previous_end} < start, found [{start}, {end})"
                );
            }
            previous_end = Some(end);
            if end > t {
                booked_ns += end - start.max(t);
            }
            held |= start <= booking.0 && booking.1 <= end;
        };
        for &interval in &self.earlier[self.head..] {
            visit(interval);
        }
        visit(self.last);
        assert!(
            held,
            "booking {booking:?} is not in the timeline after booking it: expected a kept \
             booking to hold it, found {:?} then {:?}",
            &self.earlier[self.head..],
            self.last
        );
        booked_ns
    }

    /// Forgets bookings that ended by `now_ns`: moves `head` past them.
    #[inline]
    fn forget_ended(&mut self, now_ns: u64) {
        // A scan, not a binary search: usually none or one has ended since the last call.
        while self
            .earlier
            .get(self.head)
            .is_some_and(|&(_, e)| e <= now_ns)
        {
            self.head += 1;
        }
    }

    /// Drops the forgotten prefix of `earlier` once it is longer than what is kept.
    #[inline]
    fn compact(&mut self) {
        if self.head > PRUNE_AT && self.head * 2 > self.earlier.len() {
            self.earlier.drain(..self.head);
            self.head = 0;
        }
    }

    /// Inserts `[start, end)` into `earlier` at `index` (it ends at or before `last` starts,
    /// and after every kept booking before `index`), merging with touching neighbours.
    /// Returns `start`. The cases that move no booking are done in place (merging into a
    /// neighbour or `last`, or taking the free place in front of the first kept booking, as
    /// an NVMe doorbell does); only the others call out, to `insert_moving`.
    #[inline(always)]
    fn insert(&mut self, index: usize, start: u64, end: u64) -> u64 {
        let touches_prev = index > self.head && self.earlier[index - 1].1 == start;
        let next = self.earlier.get(index).map(|&(s, _)| s);
        if next.is_none() && end == self.last.0 {
            if touches_prev {
                let (s, _) = self.earlier.pop().expect("exists");
                self.last.0 = s;
            } else {
                self.last.0 = start;
            }
            return start;
        }
        let touches_next = next == Some(end);
        match (touches_prev, touches_next) {
            (true, true) => return self.insert_moving(index, start, end),
            (true, false) => self.earlier[index - 1].1 = end,
            (false, true) => self.earlier[index].0 = start,
            (false, false) if index == self.head && self.head > 0 => {
                self.head -= 1;
                self.earlier[self.head] = (start, end);
            }
            (false, false) => return self.insert_moving(index, start, end),
        }
        start
    }

    /// The cases of `insert` that move bookings: a booking that joins its two neighbours
    /// into one, or one that needs a place between two. Returns `start`.
    #[inline(never)]
    fn insert_moving(&mut self, index: usize, start: u64, end: u64) -> u64 {
        let len = self.earlier.len();
        if index > self.head && self.earlier[index - 1].1 == start {
            // Joins the bookings on both sides.
            let next_end = self.earlier[index].1;
            self.earlier[index - 1].1 = next_end;
            self.earlier.remove(index);
        } else if self.head > 0 && index - self.head < len - index {
            // Closer to the front, where forgotten bookings left room: move the bookings
            // before it one place towards the front instead.
            self.earlier.copy_within(self.head..index, self.head - 1);
            self.head -= 1;
            self.earlier[index - 1] = (start, end);
        } else {
            self.earlier.insert(index, (start, end));
        }
        self.compact();
        start
    }

    /// A timeline with the same future bookings and no busy time of its own (used to split a
    /// group of resources that were booked in lockstep).
    pub fn schedule_copy(&self) -> Timeline {
        Timeline {
            last: self.last,
            earlier: self.earlier[self.head..].to_vec(),
            head: 0,
            busy_ns_total: 0,
            #[cfg(debug_assertions)]
            now_ns_max: self.now_ns_max,
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
    pub(crate) fn intervals(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.earlier[self.head..].to_vec();
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
        // PRUNE_AT + 2 bookings with gaps between them, then one far ahead.
        let count = PRUNE_AT as u64 + 2;
        for i in 0..count {
            t.reserve(0, 20 * i, 10);
        }
        t.reserve(0, 5000, 10);
        // A booking in a gap once the list is long forgets the bookings that ended by now:
        // at 335, those up to [320, 330); the new one touches [340, 350) and merges with it.
        t.reserve(335, 335, 5);
        assert_eq!(t.intervals(), vec![(335, 350), (5000, 5010)]);
        assert_eq!(t.busy_ns_total(), count * 10 + 10 + 5);
        // A booking after everything has ended starts a fresh list.
        t.reserve(6000, 6000, 5);
        assert_eq!(t.intervals(), vec![(6000, 6005)]);
    }

    #[test]
    fn a_full_list_books_after_the_last_booking() {
        // More future bookings than the gap search may scan: a booking that would fit in a
        // gap goes after the last one instead (later than necessary, never overlapping).
        let mut t = Timeline::new();
        let count = INTERVALS_MAX as u64 + 10;
        for i in 0..count {
            assert_eq!(t.reserve(0, 100 + 20 * i, 10), 100 + 20 * i);
        }
        let last_end = 100 + 20 * (count - 1) + 10;
        assert_eq!(t.busy_until_ns(), last_end);
        assert_eq!(
            t.reserve(0, 0, 5),
            last_end,
            "the list is full: no gap search"
        );
        assert_eq!(t.busy_until_ns(), last_end + 5);
        assert_eq!(t.busy_ns_total(), count * 10 + 5);
    }

    /// A timeline whose bookings overlap (which `reserve` never makes) is caught by the next
    /// booking, next to them ...
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "bookings out of order, overlapping or unmerged")]
    fn overlapping_bookings_next_to_a_new_one_are_caught() {
        let mut t = Timeline::new();
        t.earlier = vec![(0, 10), (25, 45)];
        t.last = (40, 50);
        // Fast path: the last booking moves into `earlier`, behind one it overlaps.
        t.reserve(0, 60, 5);
    }

    /// ... or anywhere else.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "bookings out of order, overlapping or unmerged")]
    fn overlapping_bookings_anywhere_are_caught() {
        let mut t = Timeline::new();
        t.earlier = vec![(0, 10), (5, 20), (100, 110)];
        t.last = (300, 400);
        t.reserve(0, 200, 5);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(
        expected = "time went backwards on a timeline: expected now >= 100, found now=50"
    )]
    fn time_going_back_is_caught() {
        let mut t = Timeline::new();
        t.reserve(100, 100, 10);
        t.reserve(50, 60, 10);
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "booking in the past: expected ready >= now, found ready=5 now=10")]
    fn booking_in_the_past_is_caught() {
        Timeline::new().reserve(10, 5, 1);
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

        /// A pair booked back to back lands where two bookings one after the other would, and
        /// leaves the same bookings behind, whether the timeline is free at their ready time
        /// (one booking) or not (a gap before the last booking may hold the second alone).
        #[test]
        fn a_pair_back_to_back_books_as_two_bookings_would(
            reqs in proptest::collection::vec((0u64..300, 0u64..200, 1u64..60, 0u64..12, 0u64..12, any::<bool>()), 1..200)
        ) {
            let mut pairs = Timeline::new();
            let mut singles = Timeline::new();
            let mut now = 0;
            for (advance, delay, dur, first, second, pair) in reqs {
                now += advance / 20;
                let ready = now + delay;
                if pair {
                    let expected = (
                        singles.reserve(now, ready, first),
                        singles.reserve(now, ready, second),
                    );
                    prop_assert_eq!(pairs.reserve_back_to_back(now, ready, first, second), expected);
                } else {
                    prop_assert_eq!(pairs.reserve(now, ready, dur), singles.reserve(now, ready, dur));
                }
                prop_assert_eq!(pairs.intervals(), singles.intervals());
                prop_assert_eq!(pairs.busy_ns_total(), singles.busy_ns_total());
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
