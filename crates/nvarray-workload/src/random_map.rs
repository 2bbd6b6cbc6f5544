//! fio's random map: which aligned positions of a thread's region a uniform random job has
//! used in this pass over it, so that each is used once before any is used again.
//!
//! fio keeps one per file unless `norandommap` is set (its `axmap`, `lib/axmap.c`): a random
//! offset whose block is taken moves to the next free block, a request is cut short where it
//! would run into a taken block, and when every block is taken a time-based job starts a new
//! pass with an empty map. (Checked against fio 3.33 with `ioengine=null` and
//! `write_iolog`: `rw=randwrite bs=4k size=4m` writes each of the 1,024 blocks once;
//! `bssplit=4k/50:16k/50` writes every block once with some requests cut to 8k and 12k.)
//!
//! A job whose every request takes one position (one block size, no larger than the
//! alignment: the usual `bs=4k` random job) needs no map: [`Shuffle`] walks a keyed
//! pseudo-random permutation of the positions, a new key per pass, which uses each position
//! once per pass in O(1) memory, however large the device (fio's `random_generator=lfsr`
//! gives its jobs the same guarantee without a map). Jobs of several sizes keep the map.
//!
//! The map is a bitmap in levels: level 0 has a bit per position, set when used; each level
//! above has a bit per word of the one below, set when that word is full. Finding the next
//! free position climbs only as far as the first word with room, so the simulator's hot path
//! stays a few word operations per request even when the pass is nearly done. Bits past the
//! end of a level are set at the start of each pass, so they are never free.

/// Positions a map may track: 2^30 positions is 128 MiB of bits per thread (a 4 TiB region of
/// 4 KiB blocks). Only jobs of several request sizes keep a map; fio would allocate a larger
/// one, nvarray asks for `norandommap` or a larger `blockalign` instead.
pub const RANDOM_MAP_POSITIONS_MAX: u64 = 1 << 30;

const WORD_BITS: u64 = 64;

#[derive(Clone, Debug)]
pub(crate) struct RandomMap {
    /// `levels[0]`: a bit per position; `levels[i + 1]`: a bit per word of `levels[i]`, set
    /// when that word is full. The last level is a single word.
    levels: Vec<Vec<u64>>,
    positions: u64,
}

impl RandomMap {
    /// A map of `positions` positions, all free. `positions` is 1 to
    /// [`RANDOM_MAP_POSITIONS_MAX`] (the generator checks it first).
    pub(crate) fn new(positions: u64) -> Self {
        assert!((1..=RANDOM_MAP_POSITIONS_MAX).contains(&positions));
        let mut levels = Vec::new();
        let mut bits = positions;
        loop {
            let words = bits.div_ceil(WORD_BITS);
            // Zeroed memory comes from the kernel untouched: a large map costs pages only as
            // its positions are used.
            levels.push(vec![0u64; words as usize]);
            if words == 1 {
                break;
            }
            bits = words;
        }
        let mut map = RandomMap { levels, positions };
        map.pad();
        map
    }

    /// Starts a new pass: every position free again.
    pub(crate) fn clear(&mut self) {
        for level in &mut self.levels {
            level.fill(0);
        }
        self.pad();
    }

    /// Sets the bits past the end of each level, so they are never found free.
    fn pad(&mut self) {
        let mut bits = self.positions;
        for index in 0..self.levels.len() {
            let used = bits % WORD_BITS;
            if used != 0 {
                let last = self.levels[index].len() - 1;
                self.levels[index][last] |= !0u64 << used;
                if self.levels[index][last] == !0 {
                    self.mark_word_full(index + 1, last as u64);
                }
            }
            bits = self.levels[index].len() as u64;
        }
    }

    /// Records that word `word` of level `level - 1` is full, climbing while words fill.
    fn mark_word_full(&mut self, mut level: usize, mut word: u64) {
        while level < self.levels.len() {
            let w = &mut self.levels[level][(word / WORD_BITS) as usize];
            *w |= 1 << (word % WORD_BITS);
            if *w != !0 {
                return;
            }
            word /= WORD_BITS;
            level += 1;
        }
    }

    /// The first free position at or after `from`, if any.
    fn next_free_from(&self, from: u64) -> Option<u64> {
        self.next_free_at(0, from)
    }

    /// The first clear bit of `level` at or after `from`.
    fn next_free_at(&self, level: usize, from: u64) -> Option<u64> {
        let words = &self.levels[level];
        let word = from / WORD_BITS;
        if word >= words.len() as u64 {
            return None;
        }
        let free = !words[word as usize] & (!0u64 << (from % WORD_BITS));
        if free != 0 {
            return Some(word * WORD_BITS + u64::from(free.trailing_zeros()));
        }
        if level + 1 == self.levels.len() {
            return None;
        }
        // The next word of this level with room: the level above knows which are full.
        let next_word = self.next_free_at(level + 1, word + 1)?;
        let free = !words[next_word as usize];
        debug_assert_ne!(free, 0, "the level above called word {next_word} not full");
        Some(next_word * WORD_BITS + u64::from(free.trailing_zeros()))
    }

    /// The free position a draw of `drawn` lands on: `drawn` itself when free, else the next
    /// free one after it, wrapping to the start (fio's `axmap_next_free`). A full map starts
    /// a new pass first.
    pub(crate) fn land(&mut self, drawn: u64) -> u64 {
        debug_assert!(drawn < self.positions);
        if let Some(at) = self
            .next_free_from(drawn)
            .or_else(|| self.next_free_from(0))
        {
            // The padding bits past the end are set, so never found free.
            debug_assert!(at < self.positions);
            return at;
        }
        self.clear();
        drawn
    }

    /// Takes up to `count` positions from the free position `at` on, stopping at the first
    /// taken one or the end; returns how many it took (at least 1).
    pub(crate) fn take(&mut self, at: u64, count: u64) -> u64 {
        let mut taken = 0;
        while taken < count && at + taken < self.positions {
            let position = at + taken;
            let word = &mut self.levels[0][(position / WORD_BITS) as usize];
            let bit = 1u64 << (position % WORD_BITS);
            if *word & bit != 0 {
                break;
            }
            *word |= bit;
            if *word == !0 {
                self.mark_word_full(1, position / WORD_BITS);
            }
            taken += 1;
        }
        assert!(taken > 0, "position {at} was not free");
        taken
    }
}

/// A pass over `0..n` in a keyed pseudo-random order: a bijection of the smallest power of
/// two that holds `n`, walked until it lands below `n` (the domain is under 2 n, so under 2
/// steps on average). The bijection is three keyed rounds of add, multiply by an odd number
/// and xor with the value shifted right, each a bijection of `bits`-bit numbers (an odd
/// multiplier has an inverse modulo 2^bits; the shift brings high bits down so the next
/// multiply carries them up again). So a pass of `n` steps visits each position exactly once.
///
/// About 40 instructions a step. The Feistel network it replaced (four SplitMix64 rounds over
/// an even number of bits, a domain up to 4 n) cost 225 a request in the simulator and the
/// emulator (issue 38, docs/perf.md).
#[derive(Clone, Debug)]
pub(crate) struct Shuffle {
    n: u64,
    mask: u64,
    shift: u32,
    /// Per round: what is added, and the odd multiplier.
    keys: [(u64, u64); 3],
    /// Steps taken in this pass.
    step: u64,
}

impl Shuffle {
    /// A permutation of `0..n` (`n` at least 1) keyed by `seed`.
    pub(crate) fn new(n: u64, seed: u64) -> Self {
        assert!(n >= 1);
        let bits = (64 - (n - 1).leading_zeros()).max(1);
        let mut shuffle = Shuffle {
            n,
            mask: u64::MAX >> (64 - bits),
            shift: bits.div_ceil(2),
            keys: [(0, 1); 3],
            step: 0,
        };
        assert!(
            shuffle.mask >= n - 1,
            "a domain of {} misses positions",
            shuffle.mask
        );
        // Under 2 n, so a walk takes under 2 steps on average.
        assert!(
            u128::from(shuffle.mask) < 2 * u128::from(n),
            "a domain of {} for {n} positions",
            shuffle.mask
        );
        shuffle.rekey(seed);
        shuffle
    }

    fn rekey(&mut self, seed: u64) {
        for (i, key) in self.keys.iter_mut().enumerate() {
            let k = splitmix64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            *key = (k, splitmix64(k) | 1);
        }
        self.step = 0;
    }

    /// The next position of the pass; a pass that has used every position starts again in
    /// an order keyed by `next_seed`.
    #[inline]
    pub(crate) fn next(&mut self, next_seed: impl FnOnce() -> u64) -> u64 {
        if self.step == self.n {
            self.rekey(next_seed());
        }
        let mut x = self.step;
        self.step += 1;
        loop {
            x = self.permute(x);
            if x < self.n {
                return x;
            }
        }
    }

    #[inline]
    fn permute(&self, mut x: u64) -> u64 {
        for (add, odd) in self.keys {
            x = (x.wrapping_add(add).wrapping_mul(odd)) & self.mask;
            x ^= x >> self.shift;
        }
        x
    }
}

/// SplitMix64's finalizer (Steele, Lea and Flood, OOPSLA 2014): the round function.
#[inline]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// The map against a set of taken positions: every landing is the first free position at
    /// or after the draw (wrapping), every take stops at a taken position or the end, and a
    /// full map starts over.
    fn check_against_set(positions: u64, ops: &[(u64, u64)]) {
        let mut map = RandomMap::new(positions);
        let mut taken = BTreeSet::new();
        for &(draw, count) in ops {
            let draw = draw % positions;
            let count = count % 40 + 1;
            if taken.len() as u64 == positions {
                taken.clear();
            }
            let expected = (draw..positions)
                .chain(0..draw)
                .find(|p| !taken.contains(p))
                .unwrap();
            let at = map.land(draw);
            assert_eq!(at, expected, "draw {draw} of {positions}");
            let got = map.take(at, count);
            let mut want = 0;
            while want < count && at + want < positions && !taken.contains(&(at + want)) {
                taken.insert(at + want);
                want += 1;
            }
            assert_eq!(got, want, "take {count} at {at}");
        }
    }

    proptest! {
        #[test]
        fn behaves_as_a_set_of_taken_positions(
            positions in 1u64..5_000,
            ops in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..600),
        ) {
            check_against_set(positions, &ops);
        }
    }

    /// Sizes at the edges of each level: one word, one word and a bit, a full second level.
    #[test]
    fn level_edges() {
        for positions in [1u64, 63, 64, 65, 4095, 4096, 4097, 262_144 + 3] {
            let ops: Vec<(u64, u64)> = (0..positions * 2)
                .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7, 1))
                .collect();
            check_against_set(positions, &ops);
        }
    }

    /// A shuffle's pass visits each position once, for sizes at the edges of its bit widths,
    /// and the next pass is in another order.
    #[test]
    fn a_shuffle_pass_visits_each_position_once() {
        for n in [1u64, 2, 3, 4, 5, 63, 64, 65, 1000, 4096, 4097, 100_003] {
            let mut shuffle = Shuffle::new(n, 7);
            let mut seen = vec![false; n as usize];
            let first: Vec<u64> = (0..n).map(|_| shuffle.next(|| 8)).collect();
            for &p in &first {
                assert!(!seen[p as usize], "{p} twice in a pass of {n}");
                seen[p as usize] = true;
            }
            let second: Vec<u64> = (0..n).map(|_| shuffle.next(|| 9)).collect();
            let mut sorted = second.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "second pass of {n}");
            if n > 10 {
                assert_ne!(first, second, "a new order each pass");
            }
        }
    }

    /// A pass is spread over the region: each tenth of a pass lands about a tenth of its
    /// positions in each tenth of the region (no sweep from one end to the other).
    #[test]
    fn a_shuffle_spreads_every_part_of_a_pass() {
        let n = 100_000u64;
        let mut shuffle = Shuffle::new(n, 1);
        for part in 0..10 {
            let mut tenths = [0u64; 10];
            for _ in 0..n / 10 {
                tenths[(shuffle.next(|| 2) * 10 / n) as usize] += 1;
            }
            for count in tenths {
                assert!((800..1200).contains(&count), "part {part}: {tenths:?}");
            }
        }
    }

    /// Consecutive steps of a pass land far apart: as many consecutive pairs fall in the same
    /// sixty-fourth of the region as independent draws would (1 in 64), not the many a
    /// permutation that keeps nearby steps nearby would give.
    #[test]
    fn consecutive_steps_of_a_pass_are_unrelated() {
        for n in [4096u64, 100_000, 1 << 20] {
            let mut shuffle = Shuffle::new(n, 3);
            let part = |p: u64| p * 64 / n;
            let mut previous = part(shuffle.next(|| 4));
            let mut same = 0u64;
            let steps = n.min(65_536);
            for _ in 1..steps {
                let now = part(shuffle.next(|| 4));
                same += u64::from(now == previous);
                previous = now;
            }
            let expected = steps / 64;
            assert!(
                same < expected * 3 / 2 && same > expected / 2,
                "{same} of {steps} consecutive pairs in one sixty-fourth of {n} (expected about {expected})"
            );
        }
    }

    /// One pass uses every position exactly once, whatever the draws.
    #[test]
    fn a_pass_uses_each_position_once() {
        let positions = 10_000;
        let mut map = RandomMap::new(positions);
        let mut seen = vec![false; positions as usize];
        for i in 0..positions {
            let at = map.land((i * 7919) % positions / 3);
            assert_eq!(map.take(at, 1), 1);
            assert!(!seen[at as usize], "position {at} twice in one pass");
            seen[at as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
