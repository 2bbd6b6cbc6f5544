//! Pooled pages: what a bulk precondition (`bulk.rs`) leaves. The FTL knows how many valid
//! pages each line holds on each die, not which logical page each one is: after uniform
//! random writes every valid page is equally likely to be any logical page, so the FTL draws
//! that when the run first touches the page, and keeps no map entry for the rest.
//!
//! A pooled logical page `lpn` lives on die `lpn mod dies` (as a sequential fill lays pages
//! out), so a read of it is booked there every time. Overwriting or trimming it takes one
//! pooled page of that die from a line drawn in proportion to the pooled pages that line
//! holds there (a Fenwick tree per die over the lines), which is where a uniformly random page
//! of that die is. The collector moves a victim's pooled pages as counts, each staying on its
//! die. Counts per die always equal the pooled logical pages of that die.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The map entry of a pooled logical page.
pub(crate) const POOLED: u64 = u64::MAX - 1;

#[derive(Clone, Debug)]
pub(crate) struct Pool {
    dies: u32,
    lines: u32,
    /// Pooled pages per line and die (`line * dies + die`).
    on_die: Vec<u32>,
    /// Pooled pages per line.
    in_line: Vec<u32>,
    /// Per die, a Fenwick tree over the lines of their pooled pages there (`die * (lines + 1)`
    /// onwards, 1-based).
    trees: Vec<u64>,
    /// Pooled pages per die.
    per_die: Vec<u64>,
    rng: SmallRng,
}

impl Pool {
    /// A pool with `on_die[line * dies + die]` pooled pages.
    pub(crate) fn new(dies: u32, lines: u32, on_die: Vec<u32>, seed: u64) -> Pool {
        assert_eq!(on_die.len(), lines as usize * dies as usize);
        let mut pool = Pool {
            dies,
            lines,
            in_line: vec![0; lines as usize],
            trees: vec![0; dies as usize * (lines as usize + 1)],
            per_die: vec![0; dies as usize],
            on_die: vec![0; on_die.len()],
            rng: SmallRng::seed_from_u64(seed ^ 0x706f_6f6c),
        };
        for (i, &n) in on_die.iter().enumerate() {
            let (line, die) = ((i / dies as usize) as u32, (i % dies as usize) as u32);
            pool.add(line, die, i64::from(n));
        }
        pool
    }

    /// Host memory the pool takes.
    pub(crate) fn bytes(&self) -> u64 {
        (self.on_die.len() * 4 + self.in_line.len() * 4 + self.trees.len() * 8) as u64
    }

    pub(crate) fn in_line(&self, line: u32) -> u32 {
        self.in_line[line as usize]
    }

    pub(crate) fn on_die(&self, line: u32, die: u32) -> u32 {
        self.on_die[(line * self.dies + die) as usize]
    }

    /// Pooled pages on `die`, all lines.
    pub(crate) fn per_die(&self, die: u32) -> u64 {
        self.per_die[die as usize]
    }

    fn add(&mut self, line: u32, die: u32, n: i64) {
        if n == 0 {
            return;
        }
        let at = (line * self.dies + die) as usize;
        self.on_die[at] = (i64::from(self.on_die[at]) + n) as u32;
        self.in_line[line as usize] = (i64::from(self.in_line[line as usize]) + n) as u32;
        self.per_die[die as usize] = (self.per_die[die as usize] as i64 + n) as u64;
        let base = die as usize * (self.lines as usize + 1);
        let mut i = line as usize + 1;
        while i <= self.lines as usize {
            self.trees[base + i] = (self.trees[base + i] as i64 + n) as u64;
            i += i & i.wrapping_neg();
        }
    }

    /// Takes the pooled page a write or trim of `lpn` replaces: returns its line and die.
    pub(crate) fn take(&mut self, lpn: u64) -> (u32, u32) {
        let die = (lpn % u64::from(self.dies)) as u32;
        let total = self.per_die[die as usize];
        assert!(
            total > 0,
            "logical page {lpn} is pooled but die {die} holds no pooled page"
        );
        let mut rank = self.rng.gen_range(0..total);
        // The line holding the pooled page of rank `rank` on this die: a Fenwick descent.
        let base = die as usize * (self.lines as usize + 1);
        let mut at = 0usize;
        let mut step = (self.lines as usize + 1).next_power_of_two();
        while step > 0 {
            let next = at + step;
            if next <= self.lines as usize && self.trees[base + next] <= rank {
                rank -= self.trees[base + next];
                at = next;
            }
            step >>= 1;
        }
        let line = at as u32;
        self.add(line, die, -1);
        (line, die)
    }

    /// Moves up to `n` of `from`'s pooled pages to `to`, each staying on its die, die by die
    /// from `die_from` on; calls `moved(die, count)` for each die's share. Returns the pages
    /// moved.
    pub(crate) fn move_pages(
        &mut self,
        (from, to): (u32, u32),
        n: u32,
        mut moved: impl FnMut(u32, u32),
    ) -> u32 {
        let mut left = n.min(self.in_line(from));
        let total = left;
        let mut die = 0;
        while left > 0 {
            let k = self.on_die(from, die).min(left);
            if k > 0 {
                self.add(from, die, -i64::from(k));
                self.add(to, die, i64::from(k));
                moved(die, k);
                left -= k;
            }
            die += 1;
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_page_comes_from_a_line_in_proportion_to_its_pooled_pages_on_that_die() {
        // Three lines, two dies: die 0 holds 1, 0, 3 pages in lines 0..3; die 1 holds 2, 2, 0.
        let mut pool = Pool::new(2, 3, vec![1, 2, 0, 2, 3, 0], 5);
        assert_eq!((pool.per_die(0), pool.per_die(1)), (4, 4));
        let mut seen = [0u32; 3];
        for _ in 0..4 {
            let (line, die) = pool.take(10);
            assert_eq!(die, 0, "an even page is on die 0");
            seen[line as usize] += 1;
        }
        assert_eq!(seen, [1, 0, 3], "every pooled page of die 0 taken once");
        assert_eq!(pool.per_die(0), 0);
        // Moving line 0's pooled pages (die 1's two) to line 2.
        let mut shares = Vec::new();
        assert_eq!(pool.move_pages((0, 2), 5, |d, k| shares.push((d, k))), 2);
        assert_eq!(shares, vec![(1, 2)]);
        assert_eq!((pool.in_line(0), pool.on_die(2, 1)), (0, 2));
    }

    #[test]
    fn draws_follow_the_counts() {
        let mut pool = Pool::new(1, 2, vec![9000, 1000], 1);
        let mut from_first = 0;
        for lpn in 0..2000 {
            from_first += u32::from(pool.take(lpn).0 == 0);
        }
        // 90 % expected at first, drifting as the counts fall: within a few percent.
        assert!((1750..=1850).contains(&from_first), "{from_first}");
    }
}
