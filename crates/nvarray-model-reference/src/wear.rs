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
