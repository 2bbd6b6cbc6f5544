//! Preconditioning in bulk: the state a sequential fill reaches, laid down at once (exact),
//! and the state uniform random writes after it reach, from the line-level model
//! (`fluid.rs`) with every valid page pooled (`pool.rs`). Memory and time grow with the
//! lines, not the pages: a 64 TiB tlc drive's 70,000 lines instead of its 16 G pages.

use std::collections::VecDeque;

use super::{Ftl, LineState, OpenLine, UNMAPPED};
use crate::fluid::{self, Kind, Setup};
use crate::paged_map::Fill;
use crate::pool::{Pool, POOLED};

impl Ftl {
    /// Lays down on a new FTL exactly what writing every logical page once, in order,
    /// through `write` would leave: page `i` in slot `i` (both maps the identity, kept as
    /// their fill rather than entries), lines filled in order, the last one open.
    pub(crate) fn fill_in_bulk(&mut self) {
        assert!(
            self.counters.host_pages_written == 0 && self.free_lines() == self.lines,
            "a bulk fill starts from a new FTL"
        );
        let logical = self.logical_pages;
        let ppl = u64::from(self.pages_per_line);
        let identity = Fill::Identity {
            below: logical,
            above: UNMAPPED,
        };
        self.l2p.reset(identity);
        self.p2l.reset(identity);
        let used = logical.div_ceil(ppl) as u32;
        for line in 0..used {
            let first = u64::from(line) * ppl;
            let written = (logical - first).min(ppl) as u32;
            self.lay_line(line, written);
            if written == self.pages_per_line {
                self.state[line as usize] = LineState::Full;
                self.filled_at[line as usize] = first + ppl;
                self.victims.insert(line, written);
            } else {
                self.state[line as usize] = LineState::Open;
            }
        }
        self.host_open[0] = match used {
            0 => OpenLine::NONE,
            _ => OpenLine {
                line: used - 1,
                next: (logical - u64::from(used - 1) * ppl) as u32,
            },
        };
        self.free = (used..self.lines).collect();
        self.clock = logical;
        self.counters.host_pages_written = logical;
        self.host_pages_by_handle[0] = logical;
        self.counters.free_lines_min = self.free_lines();
        if let Some(cache) = self.map_cache.as_mut() {
            cache.after_sequential_fill();
        }
    }

    /// Line `line`'s first `written` slots hold valid pages, slot `s` on die `s mod dies`.
    fn lay_line(&mut self, line: u32, written: u32) {
        self.valid[line as usize] = written;
        let dies = self.dies;
        for die in 0..dies {
            let on_die = written / dies + u32::from(die < written % dies);
            self.valid_on_die[(line * dies + die) as usize] = on_die;
        }
    }

    /// Brings a new FTL to a fill and `drive_writes` of uniform random writes, in bulk:
    /// the lines from the line-level model, every valid page pooled. Returns the random
    /// part's write amplification.
    pub(crate) fn random_in_bulk(&mut self, drive_writes: f64, progress: impl FnMut(f64)) -> f64 {
        assert!(
            self.counters.host_pages_written == 0 && self.free_lines() == self.lines,
            "a bulk precondition starts from a new FTL"
        );
        let setup = Setup {
            lines: self.lines,
            pages_per_line: self.pages_per_line,
            logical_pages: self.logical_pages,
            victim: self.policy.0,
            d_choices: self.policy.1,
            gc_background_free_lines: self.gc_background_free_lines,
            gc_forced_free_lines: self.gc_forced_free_lines,
            seed: self.policy.2,
        };
        let lines = fluid::precondition(&setup, drive_writes, progress);
        self.l2p.reset(Fill::Value(POOLED));
        self.p2l.reset(Fill::Value(UNMAPPED));
        let on_die = self.spread_over_dies(&lines.valid);
        self.valid_on_die.copy_from_slice(&on_die);
        self.pool = Some(Pool::new(self.dies, self.lines, on_die, self.policy.2));
        self.valid.copy_from_slice(&lines.valid);
        self.erases.copy_from_slice(&lines.erases);
        self.filled_at.copy_from_slice(&lines.filled_at);
        let mut full: Vec<u32> = (0..self.lines)
            .filter(|&l| lines.kind[l as usize] == Kind::Full)
            .collect();
        full.sort_by_key(|&l| lines.filled_at[l as usize]);
        for (l, kind) in lines.kind.iter().enumerate() {
            self.state[l] = match kind {
                Kind::Free => LineState::Free,
                Kind::Open => LineState::Open,
                Kind::Full => LineState::Full,
            };
        }
        for &l in &full {
            self.victims.insert(l, self.valid[l as usize]);
        }
        let open = |line: Option<u32>| {
            line.map_or(OpenLine::NONE, |line| OpenLine {
                line,
                next: lines.written[line as usize],
            })
        };
        self.host_open[0] = open(lines.host_open);
        self.collector_open[0] = open(lines.collector_open);
        self.free = lines.free.iter().copied().collect::<VecDeque<u32>>();
        self.clock = lines.clock;
        self.counters.host_pages_written = lines.random_writes;
        self.counters.gc_pages_copied = lines.copied;
        self.host_pages_by_handle[0] = lines.random_writes;
        self.counters.free_lines_min = self.free_lines();
        if let Some(cache) = self.map_cache.as_mut() {
            cache.after_random_writes();
        }
        self.counters.write_amplification()
    }

    /// Each line's valid pages spread over the dies as evenly as whole pages allow, the odd
    /// ones handed round the dies in turn across lines, so each die ends with as many as
    /// the logical pages it holds when pooled (`lpn mod dies`).
    fn spread_over_dies(&self, valid: &[u32]) -> Vec<u32> {
        let dies = self.dies;
        let mut on_die = vec![0u32; valid.len() * dies as usize];
        let mut turn = 0u32;
        for (line, &v) in valid.iter().enumerate() {
            let at = line * dies as usize;
            for die in 0..dies {
                on_die[at + die as usize] = v / dies;
            }
            for k in 0..v % dies {
                on_die[at + ((turn + k) % dies) as usize] += 1;
            }
            turn = (turn + v % dies) % dies;
        }
        let logical = self.logical_pages;
        for die in 0..dies {
            let held: u64 = (0..valid.len())
                .map(|line| u64::from(on_die[line * dies as usize + die as usize]))
                .sum();
            let pooled =
                logical / u64::from(dies) + u64::from(u64::from(die) < logical % u64::from(dies));
            assert_eq!(
                held, pooled,
                "die {die} holds {held} valid pages, its pooled logical pages are {pooled}"
            );
        }
        on_die
    }
}
