//! The points of a sweep: a grid over any number of parameters, each with its list of values,
//! and the deterministic share of it one shard runs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most points one sweep may have: every point's device and workload are built before any
/// runs, so that a bad value fails at once.
pub const POINTS_MAX: usize = 1_000_000;

/// One parameter of the grid and its values, in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dim {
    pub key: String,
    pub values: Vec<String>,
}

/// Every combination of the dimensions' values. Point `i` takes the first dimension's values
/// fastest (`i % len(dim 0)`), then the next: the first parameter is the x axis of the table
/// and the plot, the others make curves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Grid {
    pub dims: Vec<Dim>,
}

impl Grid {
    /// A grid from `--param` (each `KEY` or `KEY=LIST`) and `--values` (one LIST for each
    /// `--param` without `=`, in order), then `--series KEY --series-values LIST` as one more
    /// dimension.
    pub fn from_flags(
        params: &[String],
        values: &[String],
        series: Option<(&str, &[String])>,
    ) -> Result<Grid, String> {
        let mut dims = param_dims(params, values)?;
        if let Some((key, list)) = series {
            dims.push(Dim {
                key: key.to_string(),
                values: list
                    .iter()
                    .map(|v| non_empty(key, v))
                    .collect::<Result<_, _>>()?,
            });
        }
        check_dims(&dims)?;
        let grid = Grid { dims };
        let points = grid
            .dims
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(d.values.len()));
        match points {
            Some(n) if n <= POINTS_MAX => {
                // Every dimension has a value, so the grid has a point.
                assert!(n > 0, "a grid of no points: {:?}", grid.dims);
                Ok(grid)
            }
            _ => Err(format!(
                "the grid has more than {POINTS_MAX} points ({}): split it into several sweeps",
                grid.dims
                    .iter()
                    .map(|d| format!("{} {}", d.values.len(), d.key))
                    .collect::<Vec<_>>()
                    .join(" x ")
            )),
        }
    }

    /// How many points.
    pub fn len(&self) -> usize {
        self.dims.iter().map(|d| d.values.len()).product()
    }

    /// Whether the grid has no point (a dimension without values; `from_flags` never makes
    /// one, but a grid read from a file may be one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of each dimension at point `i`, in the dimensions' order.
    pub fn settings(&self, mut i: usize) -> Vec<(&str, &str)> {
        assert!(i < self.len(), "point {i} of {}", self.len());
        let settings = self
            .dims
            .iter()
            .map(|d| {
                let v = &d.values[i % d.values.len()];
                i /= d.values.len();
                (d.key.as_str(), v.as_str())
            })
            .collect();
        // A point below `len` is spent by its dimensions' digits exactly.
        debug_assert_eq!(i, 0, "digits left over after every dimension");
        settings
    }

    /// Point `i` as `key=value ...`, for messages.
    pub fn describe(&self, i: usize) -> String {
        self.settings(i)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The keys joined for a file name: `sweep-bs+memory-controllers`.
    pub fn file_stem(&self) -> String {
        let keys: Vec<String> = self.dims.iter().map(|d| d.key.replace('.', "-")).collect();
        format!("sweep-{}", keys.join("+"))
    }
}

/// The dimensions `--param` and `--values` give, in order: each `KEY=LIST`, or `KEY` with
/// the next `--values LIST`; every list is used.
fn param_dims(params: &[String], values: &[String]) -> Result<Vec<Dim>, String> {
    let mut lists = values.iter();
    let mut dims = Vec::new();
    for param in params {
        let (key, list) = match param.split_once('=') {
            Some((key, list)) => (key.trim(), list.to_string()),
            None => {
                let Some(list) = lists.next() else {
                    return Err(format!(
                        "--param {param} has no --values list: give one --values LIST for \
                         each --param KEY, in order, or write --param {param}=LIST"
                    ));
                };
                (param.trim(), list.clone())
            }
        };
        dims.push(Dim {
            key: key.to_string(),
            values: split_list(key, &list)?,
        });
    }
    if lists.next().is_some() {
        return Err(format!(
            "{} --values lists for {} --param without `=`: give one --values LIST per --param KEY",
            values.len(),
            params.iter().filter(|p| !p.contains('=')).count()
        ));
    }
    Ok(dims)
}

/// Refuses a grid of no dimension, or with a dimension without a key, given twice, or
/// without values.
fn check_dims(dims: &[Dim]) -> Result<(), String> {
    if dims.is_empty() {
        return Err("nothing to vary: give --param KEY --values LIST".into());
    }
    for (i, d) in dims.iter().enumerate() {
        if d.key.is_empty() {
            return Err("--param with an empty key".into());
        }
        if dims[..i].iter().any(|e| e.key == d.key) {
            return Err(format!("--param {} is given twice", d.key));
        }
        if d.values.is_empty() {
            return Err(format!("--param {} has no values", d.key));
        }
    }
    Ok(())
}

fn split_list(key: &str, list: &str) -> Result<Vec<String>, String> {
    list.split(',').map(|v| non_empty(key, v)).collect()
}

fn non_empty(key: &str, value: &str) -> Result<String, String> {
    let v = value.trim();
    if v.is_empty() {
        Err(format!("--param {key}: an empty value in its list"))
    } else {
        Ok(v.to_string())
    }
}

/// `--shard I/N`: the points whose index leaves remainder I when divided by N. Interleaved
/// rather than in blocks, so each shard gets a fair mix of cheap and costly points (a grid's
/// later points are often its larger sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    pub fn is_whole(self) -> bool {
        self.count == 1
    }

    pub fn holds(self, point: usize) -> bool {
        debug_assert!(self.index < self.count, "shard {self}");
        point % self.count == self.index
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("`{s}`: a shard is I/N with 0 <= I < N (e.g. 0/4 ... 3/4; Slurm's array task id as I)")
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(params: &[&str], values: &[&str]) -> Result<Grid, String> {
        let p: Vec<String> = params.iter().map(|s| s.to_string()).collect();
        let v: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        Grid::from_flags(&p, &v, None)
    }

    #[test]
    fn points_take_the_first_parameter_fastest() {
        let g = grid(&["bs", "iodepth=1,8", "rw"], &["4k,64k", "read,write"]).unwrap();
        assert_eq!(g.len(), 8);
        assert_eq!(
            g.settings(0),
            [("bs", "4k"), ("iodepth", "1"), ("rw", "read")]
        );
        assert_eq!(
            g.settings(1),
            [("bs", "64k"), ("iodepth", "1"), ("rw", "read")]
        );
        assert_eq!(
            g.settings(2),
            [("bs", "4k"), ("iodepth", "8"), ("rw", "read")]
        );
        assert_eq!(
            g.settings(7),
            [("bs", "64k"), ("iodepth", "8"), ("rw", "write")]
        );
        let all: std::collections::HashSet<String> = (0..8).map(|i| g.describe(i)).collect();
        assert_eq!(all.len(), 8, "every combination once");
    }

    #[test]
    fn series_is_one_more_dimension() {
        let s = vec!["1".to_string(), "8".to_string()];
        let g = Grid::from_flags(
            &["bs".into()],
            &["4k,64k".into()],
            Some(("memory.controllers", &s)),
        )
        .unwrap();
        assert_eq!(g.dims.len(), 2);
        assert_eq!(g.settings(3), [("bs", "64k"), ("memory.controllers", "8")]);
        assert_eq!(g.file_stem(), "sweep-bs+memory-controllers");
    }

    #[test]
    fn bad_grids_say_why() {
        for (params, values, needle) in [
            (&["bs"][..], &[][..], "no --values list"),
            (&["bs"], &["4k", "8k"], "one --values LIST per --param"),
            (&["bs", "bs=8k"], &["4k"], "given twice"),
            (&["bs"], &["4k,,8k"], "empty value"),
            (&[], &[], "nothing to vary"),
            (&["=4k"], &[], "empty key"),
        ] {
            let e = grid(params, values).unwrap_err();
            assert!(e.contains(needle), "{params:?} {values:?}: {e}");
        }
        let big = vec!["1,2,3,4,5,6,7,8,9,10"; 7];
        let params = vec!["a", "b", "c", "d", "e", "f", "g"];
        let e = grid(&params, &big).unwrap_err();
        assert!(e.contains("more than 1000000 points"), "{e}");
    }

    #[test]
    fn shards_split_every_point_exactly_once() {
        for n in 1..6 {
            for point in 0..20 {
                let owners = (0..n)
                    .filter(|&i| Shard { index: i, count: n }.holds(point))
                    .count();
                assert_eq!(owners, 1);
            }
        }
        assert_eq!(
            "2/4".parse::<Shard>().unwrap(),
            Shard { index: 2, count: 4 }
        );
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2", ""] {
            assert!(
                bad.parse::<Shard>().unwrap_err().contains("0 <= I < N"),
                "{bad}"
            );
        }
    }
}
