//! fio's I/O depth distributions, counted by both engines as fio counts them.

use serde::Serialize;

/// fio's I/O depth distributions (its `IO depths`, `submit` and `complete` lines, and
/// `iodepth_level`, `iodepth_submit`, `iodepth_complete` in its JSON), as counts per bucket.
/// Both engines count them as fio does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct IoDepths {
    /// Requests by how many of their thread's were in flight once each was issued (itself
    /// included), in fio's buckets: 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64 and more
    /// ([`IoDepths::LEVEL_LABELS`]).
    pub at_issue: [u64; 7],
    /// Calls that handed requests to the device, by how many each handed: 0, 1-4, 5-8, 9-16,
    /// 17-32, 33-64, more ([`IoDepths::BATCH_LABELS`]). nvarray issues one at a time.
    pub submitted: [u64; 7],
    /// Calls that collected completions, by how many each collected (same buckets): the
    /// simulator's host takes each completion alone; the emulator's thread takes what it
    /// finds when it looks.
    pub completed: [u64; 7],
}

impl IoDepths {
    /// fio's labels of the `at_issue` buckets.
    pub const LEVEL_LABELS: [&'static str; 7] = ["1", "2", "4", "8", "16", "32", ">=64"];
    /// fio's labels of the `submitted` and `completed` buckets.
    pub const BATCH_LABELS: [&'static str; 7] = ["0", "4", "8", "16", "32", "64", ">=64"];

    /// A request issued with `depth` of its thread's in flight (itself included), handed over
    /// alone.
    pub fn record_issue(&mut self, depth: u32) {
        let level = match depth {
            0 | 1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            16..=31 => 4,
            32..=63 => 5,
            _ => 6,
        };
        self.at_issue[level] += 1;
        self.submitted[Self::batch(1)] += 1;
    }

    /// A look for completions that collected `count`.
    pub fn record_collected(&mut self, count: usize) {
        self.completed[Self::batch(count)] += 1;
    }

    fn batch(count: usize) -> usize {
        match count {
            0 => 0,
            1..=4 => 1,
            5..=8 => 2,
            9..=16 => 3,
            17..=32 => 4,
            33..=64 => 5,
            _ => 6,
        }
    }

    pub fn merge(&mut self, other: &IoDepths) {
        for (mine, theirs) in [
            (&mut self.at_issue, &other.at_issue),
            (&mut self.submitted, &other.submitted),
            (&mut self.completed, &other.completed),
        ] {
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
        // `record_issue` counts each request once at issue and once handed over alone.
        let (issued, handed): (u64, u64) =
            (self.at_issue.iter().sum(), self.submitted.iter().sum());
        assert_eq!(
            issued, handed,
            "{issued} requests counted at issue, {handed} handed over"
        );
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == IoDepths::default()
    }

    /// Each bucket's share of its counts in percent, as fio prints them (all 0 when empty).
    pub fn percents(counts: &[u64; 7]) -> [f64; 7] {
        let all: u64 = counts.iter().sum();
        let percents = counts.map(|c| {
            if all == 0 {
                0.0
            } else {
                100.0 * c as f64 / all as f64
            }
        });
        let sum: f64 = percents.iter().sum();
        assert!(
            all == 0 || (sum - 100.0).abs() < 1e-9,
            "the buckets' shares add up to {sum} %"
        );
        percents
    }
}
