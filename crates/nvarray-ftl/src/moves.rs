//! Deferred map moves (issue 56): a collection that empties its victim at once (forced, or a
//! background step whose quota covers the rest) settles everything the timing model and the
//! victim policies see when the write causes it (the flash work per die, the valid counts, the
//! lines opened, filled and freed, the counters), but leaves the pages' map entries where they
//! are. Moving them is a random write into the logical-to-physical map per page, about 30 ns
//! each: a line of 10,000 pages held the emulator's model lock for 0.3 ms, and every
//! completion due meanwhile waited. The moves run later, a slice at a time between the
//! emulator's passes (`Ftl::run_deferred`), or at once before anything depends on them
//! (`Ftl` finishes a move before it looks up or invalidates a page still in its victim,
//! reuses its victim, or collects one of its destination lines).
//!
//! The results are those of moving at once: each move's destinations are fixed when it is
//! made (the collector's slots, in the order its scan of the victim reaches the pages), and
//! until it runs, no page it moves is looked at, written or trimmed.

use std::collections::VecDeque;

use crate::paged_map::PagedMap;

/// A slot or map entry with nothing in it.
pub(crate) const UNMAPPED: u64 = u64::MAX;

/// Victim slots ahead of the one being moved whose map entries are prefetched.
const PREFETCH_AHEAD: u32 = 8;

/// Slots a slice may look at per page it may move: a sparse victim's empty slots cost a
/// sequential read each, a moved page a random write.
const SLOTS_PER_PAGE: u32 = 4;

/// The map entry a copy of slot `ppn` will store is a random line of the map (a cache miss):
/// asks for the one `PREFETCH_AHEAD` slots on, so its miss overlaps the copies before it.
#[inline(always)]
pub(crate) fn prefetch_ahead(l2p: &PagedMap, p2l: &PagedMap, ppn: u64, line_end: u64) {
    let at = ppn + u64::from(PREFETCH_AHEAD);
    if at < line_end {
        let ahead = p2l.get(at);
        if ahead != UNMAPPED {
            l2p.prefetch(ahead);
        }
    }
}

/// The maps a move rewrites, and the line size that places a slot.
pub(crate) struct Maps<'a> {
    pub l2p: &'a mut PagedMap,
    pub p2l: &'a mut PagedMap,
    pub pages_per_line: u32,
}

/// One victim's pages still to move, and where each goes.
#[derive(Clone, Debug)]
pub(crate) struct Move {
    pub victim: u32,
    /// The victim's next slot to look at.
    pub slot: u32,
    /// Pages still to move.
    pub left: u32,
    /// Runs of destination slots `(first physical page, pages)`, filled in order; the runs
    /// before `run` are used up.
    pub runs: Vec<(u64, u32)>,
    pub run: usize,
}

impl Move {
    /// Moves up to `pages` pages; returns how many it moved (all are moved once `left` is 0).
    fn step(&mut self, pages: u32, maps: &mut Maps) -> u32 {
        let first = u64::from(self.victim) * u64::from(maps.pages_per_line);
        let end = first + u64::from(maps.pages_per_line);
        let (mut moved, mut looked) = (0, 0);
        while self.left > 0 && moved < pages && looked < pages.saturating_mul(SLOTS_PER_PAGE) {
            assert!(
                self.slot < maps.pages_per_line,
                "line {} ran out of slots with {} pages still to move",
                self.victim,
                self.left
            );
            let ppn = first + u64::from(self.slot);
            prefetch_ahead(maps.l2p, maps.p2l, ppn, end);
            self.slot += 1;
            looked += 1;
            let lpn = maps.p2l.get(ppn);
            if lpn == UNMAPPED {
                continue;
            }
            maps.p2l.set(ppn, UNMAPPED);
            let (to, n) = &mut self.runs[self.run];
            let dest = *to;
            (*to, *n) = (dest + 1, *n - 1);
            if *n == 0 {
                self.run += 1;
            }
            maps.l2p.set(lpn, dest);
            maps.p2l.set(dest, lpn);
            self.left -= 1;
            moved += 1;
        }
        moved
    }

    fn has_destination(&self, line: u32, pages_per_line: u32) -> bool {
        self.runs[self.run..]
            .iter()
            .any(|&(first, n)| n > 0 && first / u64::from(pages_per_line) == u64::from(line))
    }
}

/// The moves not yet run, oldest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Moves {
    pending: VecDeque<Move>,
}

impl Moves {
    /// Moves kept pending at most: a new one past this runs the oldest at once.
    pub const MAX: usize = 8;

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn push(&mut self, m: Move) {
        debug_assert!(m.left > 0, "a move with nothing to move");
        self.pending.push_back(m);
    }

    /// The pending move out of `line`, if any.
    #[inline]
    pub fn of_victim(&self, line: u32) -> Option<usize> {
        self.pending.iter().position(|m| m.victim == line)
    }

    /// A pending move with a page still to go into `line`, if any (there may be several).
    pub fn of_destination(&self, line: u32, pages_per_line: u32) -> Option<usize> {
        self.pending
            .iter()
            .position(|m| m.has_destination(line, pages_per_line))
    }

    /// Runs the `k`-th move (oldest first) to its end; returns the pages moved. The others
    /// wait: pending moves touch none of each other's slots, since `Ftl` finishes one before
    /// its victim is reused or one of its destination lines becomes a victim.
    pub fn finish(&mut self, k: usize, maps: &mut Maps) -> u32 {
        self.pending
            .remove(k)
            .map_or(0, |mut m| m.step(u32::MAX, maps))
    }

    /// Runs up to `pages` pages of the oldest moves; returns the pages moved.
    pub fn run(&mut self, pages: u32, maps: &mut Maps) -> u32 {
        let mut moved = 0;
        while moved < pages {
            let Some(m) = self.pending.front_mut() else {
                break;
            };
            moved += m.step(pages - moved, maps);
            if m.left > 0 {
                break; // the slice's pages or slots are used up: the next goes on from here
            }
            self.pending.pop_front();
        }
        debug_assert!(moved <= pages, "moved {moved} pages of the {pages} allowed");
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paged_map::Fill;

    fn maps_of(len: u64) -> (PagedMap, PagedMap) {
        (
            PagedMap::new(len, len, Fill::Value(UNMAPPED)),
            PagedMap::new(len, len, Fill::Value(UNMAPPED)),
        )
    }

    /// Two lines of 8 slots: line 0 holds pages at slots 1, 4 and 6; they go to slots 8..11.
    fn one_move(len: u64) -> (PagedMap, PagedMap, Move) {
        let (mut l2p, mut p2l) = maps_of(len);
        for (lpn, slot) in [(5, 1), (2, 4), (9, 6)] {
            l2p.set(lpn, slot);
            p2l.set(slot, lpn);
        }
        let m = Move {
            victim: 0,
            slot: 0,
            left: 3,
            runs: vec![(8, 2), (10, 1)],
            run: 0,
        };
        (l2p, p2l, m)
    }

    #[test]
    fn a_move_fills_its_runs_in_the_order_of_the_victims_slots() {
        let (mut l2p, mut p2l, m) = one_move(16);
        let mut moves = Moves::default();
        moves.push(m);
        let mut maps = Maps {
            l2p: &mut l2p,
            p2l: &mut p2l,
            pages_per_line: 8,
        };
        assert_eq!(moves.run(1, &mut maps), 1);
        assert!(!moves.is_empty(), "two pages are left after one");
        assert_eq!(
            moves.run(5, &mut maps),
            2,
            "the rest fit in the second slice"
        );
        assert!(moves.is_empty());
        assert_eq!((l2p.get(5), l2p.get(2), l2p.get(9)), (8, 9, 10));
        assert_eq!((p2l.get(8), p2l.get(9), p2l.get(10)), (5, 2, 9));
        assert!(
            p2l.iter().take(8).all(|l| l == UNMAPPED),
            "the victim is empty"
        );
    }

    #[test]
    fn a_slice_looks_at_a_bounded_number_of_slots() {
        let (mut l2p, mut p2l, mut m) = one_move(16);
        let mut maps = Maps {
            l2p: &mut l2p,
            p2l: &mut p2l,
            pages_per_line: 8,
        };
        // One page's slice may look at SLOTS_PER_PAGE slots: slots 0..4, moving slot 1's page.
        assert_eq!(m.step(1, &mut maps), 1);
        assert_eq!((m.slot, m.left), (2, 2));
        assert!(m.has_destination(1, 8));
        assert!(!m.has_destination(0, 8));
    }

    #[test]
    fn finishing_one_move_leaves_the_others_pending() {
        let (mut l2p, mut p2l, m) = one_move(24);
        // A second victim, line 2 (slots 16..24), whose one page goes to line 1's slot 11.
        l2p.set(7, 18);
        p2l.set(18, 7);
        let mut moves = Moves::default();
        moves.push(m);
        moves.push(Move {
            victim: 2,
            slot: 0,
            left: 1,
            runs: vec![(11, 1)],
            run: 0,
        });
        assert_eq!(moves.of_victim(2), Some(1));
        assert_eq!(moves.of_destination(1, 8), Some(0), "both go into line 1");
        let mut maps = Maps {
            l2p: &mut l2p,
            p2l: &mut p2l,
            pages_per_line: 8,
        };
        assert_eq!(moves.finish(1, &mut maps), 1);
        assert_eq!((l2p.get(7), p2l.get(11), p2l.get(18)), (11, 7, UNMAPPED));
        assert_eq!(l2p.get(5), 1, "the first move has not run");
        assert_eq!((moves.len(), moves.of_victim(0)), (1, Some(0)));
        assert_eq!(
            moves.of_destination(1, 8),
            Some(0),
            "the first still goes into line 1"
        );
    }
}
