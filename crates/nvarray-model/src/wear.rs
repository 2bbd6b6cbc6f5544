//! Start-gap wear levelling (Qureshi et al., "Enhancing lifetime and security of PCM-based
//! main memory with start-gap wear leveling", MICRO'09), as used by Moneta's memory
//! controllers ("Simple wear leveling: Start Gap [Micro 2009]", Moneta MICRO'10 slides).
//!
//! `lines` logical lines live in `lines + 1` physical lines; one physical line, the gap, is
//! empty. Every `gap_interval_writes` writes the line next to the gap moves into it, so over
//! time every logical line visits every physical line. Two registers describe the mapping:
//! `physical = (logical + start) mod lines`, plus one if that is at or beyond the gap.

/// A line copy caused by a gap move: the controller reads `from` and writes `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapMove {
    pub from: u32,
    pub to: u32,
}

#[derive(Clone, Debug)]
pub struct StartGap {
    lines: u32,
    start: u32,
    gap: u32,
    interval_writes: u32,
    writes_since_move: u32,
    /// Writes per physical line (`lines + 1` entries), gap moves included.
    write_counts: Vec<u32>,
    writes_total: u64,
    write_count_max: u32,
    gap_moves: u64,
}

impl StartGap {
    /// `lines` logical lines (at least 1, below `u32::MAX`).
    pub fn new(lines: u32, interval_writes: u32) -> Self {
        assert!(lines >= 1);
        assert!(lines < u32::MAX);
        assert!(interval_writes >= 1);
        StartGap {
            lines,
            start: 0,
            gap: lines,
            interval_writes,
            writes_since_move: 0,
            write_counts: vec![0; lines as usize + 1],
            writes_total: 0,
            write_count_max: 0,
            gap_moves: 0,
        }
    }

    /// Physical line holding logical line `logical`.
    #[inline]
    pub fn physical(&self, logical: u32) -> u32 {
        debug_assert!(
            logical < self.lines,
            "logical line out of range: expected < {}, found {logical}",
            self.lines
        );
        let mut p = logical + self.start;
        if p >= self.lines {
            p -= self.lines;
        }
        let physical = if p >= self.gap { p + 1 } else { p };
        // Every logical line has a home other than the gap, among `lines + 1`.
        debug_assert!(
            physical <= self.lines,
            "line {logical} mapped out of range: expected <= {}, found {physical}",
            self.lines
        );
        debug_assert!(
            physical != self.gap,
            "line {logical} mapped onto the gap {physical}: expected any other line"
        );
        physical
    }

    /// Records one write to `logical` and returns the gap move it triggered, if any. The
    /// returned copy happens after the write, so the mapping used for the write stays valid.
    #[inline]
    pub fn record_write(&mut self, logical: u32) -> Option<GapMove> {
        let p = self.physical(logical);
        self.bump(p);
        self.writes_since_move += 1;
        if self.writes_since_move < self.interval_writes {
            return None;
        }
        self.writes_since_move = 0;
        self.gap_moves += 1;
        let mv = if self.gap == 0 {
            // Line `lines` (the top) wraps into slot 0; every logical line has now shifted by one.
            self.gap = self.lines;
            self.start = if self.start + 1 == self.lines {
                0
            } else {
                self.start + 1
            };
            GapMove {
                from: self.lines,
                to: 0,
            }
        } else {
            self.gap -= 1;
            GapMove {
                from: self.gap,
                to: self.gap + 1,
            }
        };
        // The line next to the gap moved into it, and its old place is the new gap.
        debug_assert_eq!(
            mv.from, self.gap,
            "gap move left the gap elsewhere: expected the gap at the source {mv:?}, found {}",
            self.gap
        );
        debug_assert!(
            self.gap <= self.lines,
            "gap out of range: expected <= {}, found {}",
            self.lines,
            self.gap
        );
        debug_assert!(
            self.start < self.lines,
            "start out of range: expected < {}, found {}",
            self.lines,
            self.start
        );
        self.bump(mv.to);
        Some(mv)
    }

    fn bump(&mut self, physical: u32) {
        let c = &mut self.write_counts[physical as usize];
        *c += 1;
        self.write_count_max = self.write_count_max.max(*c);
        self.writes_total += 1;
    }

    pub fn lines(&self) -> u32 {
        self.lines
    }

    pub fn write_count_max(&self) -> u32 {
        self.write_count_max
    }

    /// Line writes recorded, gap-move copies included.
    pub fn writes_total(&self) -> u64 {
        self.writes_total
    }

    pub fn physical_lines(&self) -> u64 {
        u64::from(self.lines) + 1
    }

    pub fn gap_moves(&self) -> u64 {
        self.gap_moves
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn is_bijection(sg: &StartGap) -> bool {
        let mut seen = vec![false; sg.lines as usize + 1];
        for l in 0..sg.lines {
            let p = sg.physical(l) as usize;
            if p > sg.lines as usize || seen[p] {
                return false;
            }
            seen[p] = true;
        }
        // Exactly the gap is left over.
        seen.iter().filter(|s| !**s).count() == 1 && !seen[sg.gap as usize]
    }

    #[test]
    fn gap_walks_down_then_start_advances() {
        let mut sg = StartGap::new(4, 1);
        assert_eq!(
            (0..4).map(|l| sg.physical(l)).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(sg.record_write(0), Some(GapMove { from: 3, to: 4 }));
        assert_eq!(
            (0..4).map(|l| sg.physical(l)).collect::<Vec<_>>(),
            vec![0, 1, 2, 4]
        );
        for _ in 0..3 {
            sg.record_write(0);
        }
        assert_eq!(sg.gap, 0);
        assert_eq!(
            (0..4).map(|l| sg.physical(l)).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(sg.record_write(0), Some(GapMove { from: 4, to: 0 }));
        assert_eq!(sg.start, 1);
        // Logical 3 moved from physical 4 into slot 0 by the copy above.
        assert_eq!(
            (0..4).map(|l| sg.physical(l)).collect::<Vec<_>>(),
            vec![1, 2, 3, 0]
        );
    }

    #[test]
    fn data_follows_the_mapping() {
        // Keep a physical array of logical-line ids and apply every gap move as a copy: the
        // mapping must always point at the line holding the right id.
        let lines = 7;
        let mut sg = StartGap::new(lines, 3);
        let mut physical: Vec<Option<u32>> = (0..lines).map(Some).chain([None]).collect();
        for i in 0..500u32 {
            if let Some(mv) = sg.record_write(i % lines) {
                physical[mv.to as usize] = physical[mv.from as usize];
                physical[mv.from as usize] = None;
            }
            for l in 0..lines {
                assert_eq!(
                    physical[sg.physical(l) as usize],
                    Some(l),
                    "after {i} writes"
                );
            }
        }
    }

    #[test]
    fn hot_line_wear_is_spread() {
        let lines = 64;
        let mut sg = StartGap::new(lines, 4);
        for _ in 0..200_000 {
            sg.record_write(0);
        }
        let mean = sg.writes_total() as f64 / sg.physical_lines() as f64;
        // Without levelling one line would take all 200k writes.
        assert!(
            f64::from(sg.write_count_max()) < 4.0 * mean,
            "max {} mean {mean}",
            sg.write_count_max()
        );
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "logical line out of range: expected < 4, found 4")]
    fn a_line_past_the_end_is_caught() {
        StartGap::new(4, 1).physical(4);
    }

    proptest! {
        #[test]
        fn mapping_stays_a_bijection(lines in 1u32..200, interval in 1u32..10, writes in proptest::collection::vec(0u32..1000, 0..400)) {
            let mut sg = StartGap::new(lines, interval);
            for w in writes {
                sg.record_write(w % lines);
                prop_assert!(is_bijection(&sg));
            }
        }
    }
}
