//! Bulk preconditioning's line-level model: a sequential fill, then uniform random writes,
//! computed on the lines' valid counts rather than page by page (issue 60: a 64 TiB drive
//! holds 16 G pages; writing each through the map would take hours and the map itself more
//! memory than the machine has).
//!
//! Each host write invalidates a uniformly random valid page, so every line loses the same
//! share of its valid pages per write: after `h` writes each line keeps `(1 - 1/N)^h` of them
//! (N logical pages, all valid after the fill). That is the fluid limit of the page-level
//! process (Van Houdt, SIGMETRICS 2013, takes the same limit): exact in expectation, and a
//! line of `P` pages strays from it by about `1/sqrt(P)` of its count (0.2 % for the tlc
//! preset's 262,144-page lines). One factor `g` holds the decay of every line, so a step of
//! writes costs O(1) and a victim O(log lines). The host writes a step of `P / 16` pages into
//! its open line at a time (less when the victim in collection is done sooner); the collector
//! paces a victim as the FTL does (`v / (P - v)` pages per host write, rounded up, from the
//! background threshold; whole victims at the forced one). Pacing matters: copying each
//! victim at once picks the next one before the lines have lost as many pages, and the
//! write amplification came out 3 % high (docs/flash.md).
//!
//! Victim policies: greedy (fewest valid pages: with one decay for all, the line with the
//! smallest `u = v / g`), FIFO, random and d-choice. Cost-benefit's score moves with each
//! line's age, which this model cannot order cheaply: a bulk precondition refuses it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::VictimPolicy;

/// What a line is at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Free,
    /// The host's or the collector's open line, `written` slots used.
    Open,
    Full,
}

/// The lines after a bulk precondition.
#[derive(Clone, Debug)]
pub(crate) struct Lines {
    pub kind: Vec<Kind>,
    /// Valid pages per line; they sum to the logical pages.
    pub valid: Vec<u32>,
    /// Slots written per line (`P` for a full one).
    pub written: Vec<u32>,
    pub filled_at: Vec<u64>,
    pub erases: Vec<u32>,
    pub free: VecDeque<u32>,
    pub host_open: Option<u32>,
    pub collector_open: Option<u32>,
    /// Host writes, fill included (cost-benefit's clock).
    pub clock: u64,
    /// Pages the collector copied during the random part.
    pub copied: u64,
    copied_exact: f64,
    pub random_writes: u64,
}

/// The geometry and policy the model runs with.
pub(crate) struct Setup {
    pub lines: u32,
    pub pages_per_line: u32,
    pub logical_pages: u64,
    pub victim: VictimPolicy,
    pub d_choices: u32,
    pub gc_background_free_lines: u32,
    pub gc_forced_free_lines: u32,
    pub seed: u64,
}

/// The full lines a policy picks from.
enum Candidates {
    /// Smallest `u` first (`u` as bits: positive floats order as their bits do).
    Greedy(BinaryHeap<Reverse<(u64, u32)>>),
    Fifo(VecDeque<u32>),
    /// Any order; random and d-choice draw positions.
    Drawn(Vec<u32>, u32),
}

struct Model<'a> {
    s: &'a Setup,
    p: f64,
    /// Valid pages of line `l` are `u[l] * g`.
    u: Vec<f64>,
    g: f64,
    written: Vec<f64>,
    lines: Lines,
    candidates: Candidates,
    rng: SmallRng,
    /// The victim being copied out a few pages per host write, as the FTL's background
    /// collection does (`Ftl::collect_step`), and its pages per host write.
    collecting: Option<(u32, f64)>,
}

/// Runs a fill and then `drive_writes` of uniform random writes; `progress` gets the fraction
/// done now and then.
pub(crate) fn precondition(s: &Setup, drive_writes: f64, mut progress: impl FnMut(f64)) -> Lines {
    assert!(
        s.victim != VictimPolicy::CostBenefit,
        "bulk preconditioning does not model cost-benefit (checked by the caller)"
    );
    let n = s.lines as usize;
    let p = f64::from(s.pages_per_line);
    let mut m = Model {
        s,
        p,
        u: vec![0.0; n],
        g: 1.0,
        written: vec![0.0; n],
        lines: Lines {
            kind: vec![Kind::Free; n],
            valid: vec![0; n],
            written: vec![0; n],
            filled_at: vec![0; n],
            erases: vec![0; n],
            free: (0..s.lines).collect(),
            host_open: None,
            collector_open: None,
            clock: 0,
            copied: 0,
            copied_exact: 0.0,
            random_writes: 0,
        },
        candidates: match s.victim {
            VictimPolicy::Greedy => Candidates::Greedy(BinaryHeap::new()),
            VictimPolicy::Fifo => Candidates::Fifo(VecDeque::new()),
            VictimPolicy::Random => Candidates::Drawn(Vec::new(), 1),
            VictimPolicy::DChoice | VictimPolicy::CostBenefit => {
                Candidates::Drawn(Vec::new(), s.d_choices.max(1))
            }
        },
        rng: SmallRng::seed_from_u64(s.seed),
        collecting: None,
    };
    // The fill: every logical page once, in order; nothing is invalidated.
    let mut left = s.logical_pages;
    while left > 0 {
        let h = m.host_room().min(left);
        m.host_write(h, 1.0);
        left -= h;
    }
    let writes = (s.logical_pages as f64 * drive_writes).round() as u64;
    m.lines.random_writes = writes;
    let decay_per_write = (-1.0 / s.logical_pages as f64).ln_1p();
    let step = u64::from(s.pages_per_line / 16).max(1);
    let mut done = 0;
    let report_every = (writes / 100).max(1);
    let mut next_report = report_every;
    while done < writes {
        let h = m.host_room().min(step).min(writes - done);
        m.host_write(h, (decay_per_write * h as f64).exp());
        done += h;
        if done >= next_report {
            progress(done as f64 / writes as f64);
            next_report += report_every;
        }
    }
    m.finish()
}

impl Model<'_> {
    /// Slots left in the host's open line, opening one (after forced collection) if none.
    fn host_room(&mut self) -> u64 {
        let line = match self.with_room(self.lines.host_open) {
            Some(line) => line,
            None => {
                // Forced collection: whole victims while the host waits.
                while self.lines.free.len() <= self.s.gc_forced_free_lines as usize {
                    if self.collecting.is_none() && !self.start_victim() {
                        break;
                    }
                    self.copy_out(f64::INFINITY);
                }
                self.open_line()
            }
        };
        self.lines.host_open = Some(line);
        let room = (self.p - self.written[line as usize]) as u64;
        debug_assert!(
            room > 0,
            "the host's open line {line} has no whole slot left"
        );
        // A step ends where the victim in collection is done, so the next starts on time.
        match self.collecting {
            Some((victim, quota)) => {
                let left = self.u[victim as usize] * self.g;
                room.min(((left / quota).ceil() as u64).max(1))
            }
            None => room,
        }
    }

    /// `line` if it has a slot left.
    fn with_room(&self, line: Option<u32>) -> Option<u32> {
        line.filter(|&l| self.written[l as usize] < self.p)
    }

    fn open_line(&mut self) -> u32 {
        let line = self
            .lines
            .free
            .pop_front()
            .expect("a free line: the forced threshold keeps one for the collector");
        self.lines.kind[line as usize] = Kind::Open;
        line
    }

    /// `h` host writes into the host's open line, every valid page decaying by `decay`
    /// first; then background collection while too few lines are free.
    fn host_write(&mut self, h: u64, decay: f64) {
        self.g *= decay;
        if self.g < 1e-150 {
            self.renormalise();
        }
        let line = self.lines.host_open.expect("an open host line") as usize;
        self.written[line] += h as f64;
        self.u[line] += h as f64 / self.g;
        self.lines.clock += h;
        if self.written[line] >= self.p {
            self.fill(line as u32);
        }
        if let Some((_, quota)) = self.collecting {
            self.copy_out(quota * h as f64);
        }
        if self.collecting.is_none()
            && self.lines.free.len() <= self.s.gc_background_free_lines as usize
        {
            self.start_victim();
        }
    }

    /// Folds `g` into every line's `u` (before it underflows).
    fn renormalise(&mut self) {
        for u in &mut self.u {
            *u *= self.g;
        }
        self.g = 1.0;
        if let Candidates::Greedy(heap) = &mut self.candidates {
            let lines: Vec<u32> = heap.drain().map(|Reverse((_, l))| l).collect();
            for l in lines {
                heap.push(Reverse((self.u[l as usize].to_bits(), l)));
            }
        }
    }

    /// Line `line` is full: a victim candidate from now on.
    fn fill(&mut self, line: u32) {
        let l = line as usize;
        self.written[l] = self.p;
        self.lines.kind[l] = Kind::Full;
        self.lines.filled_at[l] = self.lines.clock;
        match &mut self.candidates {
            Candidates::Greedy(heap) => heap.push(Reverse((self.u[l].to_bits(), line))),
            Candidates::Fifo(queue) => queue.push_back(line),
            Candidates::Drawn(lines, _) => lines.push(line),
        }
    }

    fn pick(&mut self) -> Option<u32> {
        match &mut self.candidates {
            Candidates::Greedy(heap) => heap.pop().map(|Reverse((_, l))| l),
            Candidates::Fifo(queue) => queue.pop_front(),
            Candidates::Drawn(lines, d) => {
                if lines.is_empty() {
                    return None;
                }
                let mut best = self.rng.gen_range(0..lines.len());
                for _ in 1..*d {
                    let k = self.rng.gen_range(0..lines.len());
                    if self.u[lines[k] as usize] < self.u[lines[best] as usize] {
                        best = k;
                    }
                }
                Some(lines.swap_remove(best))
            }
        }
    }

    /// Picks the next victim and how many of its pages to copy per host write: `v / (P - v)`
    /// rounded up, as the FTL paces it. False if no line is full.
    fn start_victim(&mut self) -> bool {
        let Some(victim) = self.pick() else {
            return false;
        };
        let v = (self.u[victim as usize] * self.g).round();
        let quota = (v / (self.p - v).max(1.0)).ceil().max(1.0);
        self.collecting = Some((victim, quota));
        true
    }

    /// Copies up to `pages` of the victim's valid pages into the collector's open line; frees
    /// the victim once none is left.
    fn copy_out(&mut self, pages: f64) {
        let Some((victim, _)) = self.collecting else {
            return;
        };
        let v = victim as usize;
        let mut left = (self.u[v] * self.g).min(pages);
        self.lines.copied_exact += left;
        self.u[v] -= left / self.g;
        while left > 1e-9 {
            let line = match self.with_room(self.lines.collector_open) {
                Some(line) => line,
                None => self.open_line(),
            };
            self.lines.collector_open = Some(line);
            let l = line as usize;
            let k = left.min(self.p - self.written[l]);
            self.written[l] += k;
            self.u[l] += k / self.g;
            left -= k;
            if self.p - self.written[l] < 1e-9 {
                self.fill(line);
            }
        }
        if self.u[v] * self.g > 1e-6 {
            return;
        }
        self.collecting = None;
        self.u[v] = 0.0;
        self.written[v] = 0.0;
        self.lines.kind[v] = Kind::Free;
        self.lines.erases[v] += 1;
        self.lines.free.push_back(victim);
    }

    /// Whole pages: each line's valid count rounded so they sum to the logical pages
    /// (largest remainders), and its slots written.
    fn finish(mut self) -> Lines {
        let n = self.u.len();
        self.lines.copied = self.lines.copied_exact.round() as u64;
        let exact: Vec<f64> = (0..n).map(|l| self.u[l] * self.g).collect();
        let mut valid: Vec<u32> = exact.iter().map(|&v| v.floor() as u32).collect();
        let sum: u64 = valid.iter().map(|&v| u64::from(v)).sum();
        // Largest remainders first; the sum of the exact counts is the logical pages but for
        // rounding, so the lines rounded up (or, should the floors overshoot, down) are few.
        let mut order: Vec<usize> = (0..n).collect();
        let frac = |l: usize| exact[l] - exact[l].floor();
        order.sort_by(|&a, &b| frac(b).total_cmp(&frac(a)));
        if sum <= self.s.logical_pages {
            for &l in order.iter().take((self.s.logical_pages - sum) as usize) {
                valid[l] += 1;
            }
        } else {
            let over = (sum - self.s.logical_pages) as usize;
            let down: Vec<usize> = order
                .iter()
                .rev()
                .copied()
                .filter(|&l| valid[l] > 0)
                .take(over)
                .collect();
            for l in down {
                valid[l] -= 1;
            }
        }
        assert_eq!(
            valid.iter().map(|&v| u64::from(v)).sum::<u64>(),
            self.s.logical_pages,
            "the lines' rounded valid counts do not sum to the logical pages"
        );
        for ((out, &w), &v) in self.lines.written.iter_mut().zip(&self.written).zip(&valid) {
            *out = (w.round() as u32).max(v);
        }
        self.lines.valid = valid;
        self.lines
    }
}
