//! The full lines the collector may reclaim, kept as each victim policy needs them: greedy in
//! buckets by valid count (its pick is O(1) amortised), FIFO in fill order, the random draws
//! in an array they can index. Open and free lines are never here.

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::Rng;

use crate::config::VictimPolicy;

const NONE: u32 = u32::MAX;

/// What a pick may look at: each line's valid pages and when it filled, and the host-write
/// clock (for cost-benefit's age).
pub(crate) struct LineView<'a> {
    pub valid: &'a [u32],
    pub filled_at: &'a [u64],
    pub clock: u64,
    pub pages_per_line: u32,
}

#[derive(Clone)]
pub(crate) enum Victims {
    Greedy(Buckets),
    Fifo(VecDeque<u32>),
    /// Random, d-choice and cost-benefit: any full line may be picked.
    Pool {
        policy: VictimPolicy,
        d_choices: u32,
        pool: IndexedSet,
    },
}

impl Victims {
    pub fn new(policy: VictimPolicy, d_choices: u32, lines: u32, pages_per_line: u32) -> Self {
        match policy {
            VictimPolicy::Greedy => Victims::Greedy(Buckets::new(lines, pages_per_line)),
            VictimPolicy::Fifo => Victims::Fifo(VecDeque::with_capacity(lines as usize)),
            VictimPolicy::Random | VictimPolicy::DChoice | VictimPolicy::CostBenefit => {
                Victims::Pool {
                    policy,
                    d_choices: d_choices.max(1),
                    pool: IndexedSet::new(lines),
                }
            }
        }
    }

    /// A line that just filled, with `valid` valid pages.
    pub fn insert(&mut self, line: u32, valid: u32) {
        match self {
            Victims::Greedy(b) => b.insert(line, valid),
            Victims::Fifo(q) => q.push_back(line),
            Victims::Pool { pool, .. } => pool.insert(line),
        }
    }

    /// A full line lost a valid page: it had `was` valid pages.
    #[inline]
    pub fn invalidated(&mut self, line: u32, was: u32) {
        if let Victims::Greedy(b) = self {
            b.remove(line, was);
            b.insert(line, was - 1);
        }
    }

    /// Takes the next victim out, or `None` when no line is full.
    pub fn pick(&mut self, view: &LineView, rng: &mut SmallRng) -> Option<u32> {
        match self {
            Victims::Greedy(b) => b.pop_min(),
            Victims::Fifo(q) => q.pop_front(),
            Victims::Pool {
                policy,
                d_choices,
                pool,
            } => {
                if pool.is_empty() {
                    return None;
                }
                let line = match policy {
                    VictimPolicy::Random => pool.get(rng.gen_range(0..pool.len())),
                    VictimPolicy::DChoice => (0..*d_choices)
                        .map(|_| pool.get(rng.gen_range(0..pool.len())))
                        .min_by_key(|&l| view.valid[l as usize])
                        .expect("at least one choice"),
                    _ => pool
                        .iter()
                        .max_by(|&a, &b| benefit(view, a).total_cmp(&benefit(view, b)))
                        .expect("a full line"),
                };
                pool.remove(line);
                Some(line)
            }
        }
    }
}

/// Cost-benefit's score of a line: `(1 - u) * age / (1 + u)`; reading the line costs 1 and
/// writing its valid pages back `u`, and the space it frees, `1 - u`, stays free for `age`.
fn benefit(view: &LineView, line: u32) -> f64 {
    let u = f64::from(view.valid[line as usize]) / f64::from(view.pages_per_line);
    let age = (view.clock - view.filled_at[line as usize]) as f64 + 1.0;
    (1.0 - u) * age / (1.0 + u)
}

/// Full lines in doubly linked lists by valid count, with a cursor at the lowest non-empty
/// one: a greedy pick and every update are O(1) but for the cursor's walk back up, which
/// only goes as far as it came down.
#[derive(Clone)]
pub(crate) struct Buckets {
    head: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    lowest: usize,
}

impl Buckets {
    fn new(lines: u32, pages_per_line: u32) -> Self {
        Buckets {
            head: vec![NONE; pages_per_line as usize + 1],
            next: vec![NONE; lines as usize],
            prev: vec![NONE; lines as usize],
            lowest: pages_per_line as usize + 1,
        }
    }

    fn insert(&mut self, line: u32, valid: u32) {
        let v = valid as usize;
        let old = self.head[v];
        self.next[line as usize] = old;
        self.prev[line as usize] = NONE;
        if old != NONE {
            self.prev[old as usize] = line;
        }
        self.head[v] = line;
        self.lowest = self.lowest.min(v);
    }

    fn remove(&mut self, line: u32, valid: u32) {
        let (n, p) = (self.next[line as usize], self.prev[line as usize]);
        if p == NONE {
            debug_assert_eq!(
                self.head[valid as usize], line,
                "line {line} not at the head of bucket {valid} it should head"
            );
            self.head[valid as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NONE {
            self.prev[n as usize] = p;
        }
    }

    fn pop_min(&mut self) -> Option<u32> {
        while self.lowest < self.head.len() && self.head[self.lowest] == NONE {
            self.lowest += 1;
        }
        let v = self.lowest;
        let line = *self.head.get(v)?;
        self.remove(line, v as u32);
        Some(line)
    }
}

/// A set of lines with O(1) insert, remove and draw by index.
#[derive(Clone)]
pub(crate) struct IndexedSet {
    items: Vec<u32>,
    position: Vec<u32>,
}

impl IndexedSet {
    fn new(lines: u32) -> Self {
        IndexedSet {
            items: Vec::with_capacity(lines as usize),
            position: vec![NONE; lines as usize],
        }
    }
    fn len(&self) -> usize {
        self.items.len()
    }
    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    fn get(&self, index: usize) -> u32 {
        self.items[index]
    }
    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.items.iter().copied()
    }
    fn insert(&mut self, line: u32) {
        debug_assert_eq!(
            self.position[line as usize], NONE,
            "line {line} inserted twice"
        );
        self.position[line as usize] = self.items.len() as u32;
        self.items.push(line);
    }
    fn remove(&mut self, line: u32) {
        let at = self.position[line as usize] as usize;
        debug_assert_eq!(self.items[at], line, "line {line} is not in the set");
        self.items.swap_remove(at);
        if let Some(&moved) = self.items.get(at) {
            self.position[moved as usize] = at as u32;
        }
        self.position[line as usize] = NONE;
    }
}
