//! Faults injected into nvarray's own storage, for tests and campaigns: the storage under
//! nvarray failing the way a real file system's does (full, an I/O error, over quota, a write
//! cut short, a flush that fails once and succeeds after, a mapping that loses its pages).
//! A device's backing (`nvarray-emu`) and a pool's files (`nvarray-pm`) both take a plan.
//!
//! Off unless a `BackingFaults` is handed over (the driver's `Options::backing_faults`, the
//! pool's `PoolOptions::faults`; the CLI and the pool's C library read `NVARRAY_INJECT_FAULTS`):
//! storage without one pays one untaken branch per operation. Every injected fault is
//! counted, so a campaign can say how many it made.
//!
//! A plan is a comma-separated list of:
//! - `OP#N=FAULT`: the Nth `OP` (from 1) gets `FAULT`;
//! - `one-in=K`: every `OP` gets a fault with probability 1/K, drawn from `seed` and the
//!   operation's count, so the same sequence of operations gets the same faults;
//! - `seed=S`, `ops=OP+OP..` (default `read+write+fsync`), `faults=FAULT+FAULT..` (default
//!   `eio+enospc+edquot+short`) for `one-in`.
//!
//! `OP` is `read`, `write`, `msync`, `fsync` or `fallocate`; `FAULT` is `eio`, `enospc`,
//! `edquot` (the operation fails and changes nothing), `short` (a write copies the first half
//! of its whole 512-byte sectors, then fails with EIO; on any other operation it is `eio`) or `lost` (the
//! mapping lost the range: the command fails and the device with it, as a SIGBUS on a file
//! truncated under the mapping does).

use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable the command line and the pool's C library read a plan from.
pub const INJECT_FAULTS_VAR: &str = "NVARRAY_INJECT_FAULTS";

/// An operation on nvarray's storage that can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackingOp {
    /// A copy out of the store (a read command).
    Read,
    /// A copy into the store (a write command).
    Write,
    /// `msync` of the mapping (a durable device file's flush, first half).
    Msync,
    /// `fdatasync` of the file (a durable device file's flush, second half; a pool's write-back
    /// of its cache to its backing file).
    Fsync,
    /// `fallocate` of a device's image when it opens, or of a pool's file or state file.
    Fallocate,
}

const OPS: [BackingOp; 5] = [
    BackingOp::Read,
    BackingOp::Write,
    BackingOp::Msync,
    BackingOp::Fsync,
    BackingOp::Fallocate,
];

// `index` is the discriminant, and `injected_total` walks `OPS`: each kind at its own index.
const _: () = {
    let mut i = 0;
    while i < OPS.len() {
        assert!(OPS[i] as usize == i, "OPS out of discriminant order");
        i += 1;
    }
};

impl BackingOp {
    pub fn name(self) -> &'static str {
        match self {
            BackingOp::Read => "read",
            BackingOp::Write => "write",
            BackingOp::Msync => "msync",
            BackingOp::Fsync => "fsync",
            BackingOp::Fallocate => "fallocate",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn parse(text: &str) -> Result<Self, String> {
        OPS.into_iter().find(|op| op.name() == text).ok_or_else(|| {
            format!("unknown operation {text:?}: expected read, write, msync, fsync or fallocate")
        })
    }
}

impl std::fmt::Display for BackingOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The operation fails with this `errno` (EIO, ENOSPC or EDQUOT) and changes nothing.
    Errno(i32),
    /// A write copies the first half of its whole 512-byte sectors, then fails with EIO.
    ShortWrite,
    /// The mapping lost the range: the command fails and the device has failed.
    MappingLost,
}

impl Fault {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "eio" => Fault::Errno(libc::EIO),
            "enospc" => Fault::Errno(libc::ENOSPC),
            "edquot" => Fault::Errno(libc::EDQUOT),
            "short" => Fault::ShortWrite,
            "lost" => Fault::MappingLost,
            _ => {
                return Err(format!(
                    "unknown fault {text:?}: expected eio, enospc, edquot, short or lost"
                ))
            }
        })
    }

    /// The fault as `op` can take it: a short copy is only a write's.
    fn for_op(self, op: BackingOp) -> Fault {
        match (self, op) {
            (Fault::ShortWrite, BackingOp::Write) => Fault::ShortWrite,
            (Fault::ShortWrite, _) => Fault::Errno(libc::EIO),
            (Fault::MappingLost, BackingOp::Read | BackingOp::Write) => Fault::MappingLost,
            (Fault::MappingLost, _) => Fault::Errno(libc::EIO),
            (other, _) => other,
        }
    }

    /// The error the failed operation returns.
    pub fn error(self) -> std::io::Error {
        match self {
            Fault::Errno(errno) => std::io::Error::from_raw_os_error(errno),
            Fault::ShortWrite | Fault::MappingLost => std::io::Error::from_raw_os_error(libc::EIO),
        }
    }
}

#[derive(Clone, Debug)]
struct Rule {
    op: BackingOp,
    nth: u64,
    fault: Fault,
}

impl Rule {
    /// Reads one `OP#N=FAULT` item, split at its `=` into `key` and `value`.
    fn parse(item: &str, key: &str, value: &str) -> Result<Self, String> {
        let (op, nth) = key.split_once('#').ok_or_else(|| {
            format!("{item:?}: expected OP#N=FAULT, seed=, one-in=, ops= or faults=")
        })?;
        let nth = nth
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{item:?}: N counts from 1"))?;
        let op = BackingOp::parse(op)?;
        Ok(Rule {
            op,
            nth,
            fault: Fault::parse(value)?.for_op(op),
        })
    }
}

#[derive(Clone, Debug)]
struct Random {
    seed: u64,
    one_in: u64,
    ops: Vec<BackingOp>,
    faults: Vec<Fault>,
}

/// A plan of faults and the counts of what it injected. Shared by every thread that touches
/// the backing.
#[derive(Debug)]
pub struct BackingFaults {
    spec: String,
    rules: Vec<Rule>,
    random: Option<Random>,
    /// Operations of each kind seen so far (the `N` of `OP#N`).
    seen: [AtomicU64; OPS.len()],
    /// Faults injected into each kind of operation.
    injected: [AtomicU64; OPS.len()],
}

impl BackingFaults {
    /// Reads a plan (see the module's documentation); the error names the part at fault.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut rules = Vec::new();
        let mut one_in = None;
        let mut seed = 0;
        let mut ops = vec![BackingOp::Read, BackingOp::Write, BackingOp::Fsync];
        let mut faults = ["eio", "enospc", "edquot", "short"]
            .map(|f| Fault::parse(f).expect("known"))
            .to_vec();
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected KEY=VALUE"))?;
            let number = |what: &str| {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("{item:?}: {what} must be a whole number"))
            };
            match key {
                "seed" => seed = number("the seed")?,
                "one-in" => {
                    let k = number("one-in")?;
                    if k == 0 {
                        return Err(format!("{item:?}: one-in must be 1 or more"));
                    }
                    one_in = Some(k);
                }
                "ops" => {
                    ops = value
                        .split('+')
                        .map(BackingOp::parse)
                        .collect::<Result<_, _>>()?;
                }
                "faults" => {
                    faults = value
                        .split('+')
                        .map(Fault::parse)
                        .collect::<Result<_, _>>()?;
                }
                _ => rules.push(Rule::parse(item, key, value)?),
            }
        }
        // `split` yields at least one part and each part names an op or a fault, so a plan
        // never leaves `one-in` with nothing to draw from.
        assert!(!ops.is_empty(), "{spec:?}: no operations for one-in");
        assert!(!faults.is_empty(), "{spec:?}: no faults for one-in");
        Ok(BackingFaults {
            spec: spec.to_string(),
            rules,
            random: one_in.map(|one_in| Random {
                seed,
                one_in,
                ops,
                faults,
            }),
            seen: Default::default(),
            injected: Default::default(),
        })
    }

    /// The plan in `NVARRAY_INJECT_FAULTS`, if it is set (the error names the variable). Says
    /// on stderr, as `who`, that faults go into `into`, so a run with faults never passes for
    /// a clean one.
    pub fn from_env(who: &str, into: &str) -> Result<Option<BackingFaults>, String> {
        let Some(spec) = std::env::var_os(INJECT_FAULTS_VAR) else {
            return Ok(None);
        };
        let spec = spec.to_string_lossy();
        let faults =
            BackingFaults::parse(&spec).map_err(|e| format!("{INJECT_FAULTS_VAR}: {e}"))?;
        eprintln!("{who}: {INJECT_FAULTS_VAR}={spec}: injecting faults into {into}");
        Ok(Some(faults))
    }

    /// The plan as it was given.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Counts one `op` and says which fault, if any, it gets.
    pub fn next(&self, op: BackingOp) -> Option<Fault> {
        let n = self.seen[op.index()].fetch_add(1, Ordering::Relaxed) + 1;
        let fault = self
            .rules
            .iter()
            .find(|r| r.op == op && r.nth == n)
            .map(|r| r.fault)
            .or_else(|| self.random.as_ref().and_then(|r| r.draw(op, n)))?;
        self.injected[op.index()].fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }

    /// Faults injected so far into `op`.
    pub fn injected(&self, op: BackingOp) -> u64 {
        self.injected[op.index()].load(Ordering::Relaxed)
    }

    /// Faults injected so far, all operations.
    pub fn injected_total(&self) -> u64 {
        OPS.iter().map(|&op| self.injected(op)).sum()
    }
}

impl Random {
    /// The fault of the `n`th `op`, if it gets one: a hash of (seed, op, n), so the faults
    /// depend only on the order of each kind of operation, not on threads or time.
    fn draw(&self, op: BackingOp, n: u64) -> Option<Fault> {
        if !self.ops.contains(&op) || self.faults.is_empty() {
            return None;
        }
        // `parse` refuses one-in=0; with 0, `is_multiple_of` would quietly draw no fault.
        debug_assert!(self.one_in > 0, "one-in of 0");
        let h = mix(self.seed ^ mix((op.index() as u64) << 56 ^ n));
        if !h.is_multiple_of(self.one_in) {
            return None;
        }
        let pick = mix(h) % self.faults.len() as u64;
        Some(self.faults[pick as usize].for_op(op))
    }
}

/// SplitMix64's finaliser: a good 64-bit mix of a counter.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_operation_of_its_kind_gets_the_fault_and_no_other() {
        let f = BackingFaults::parse("write#3=enospc, fsync#1=eio").unwrap();
        let writes: Vec<_> = (0..5).map(|_| f.next(BackingOp::Write)).collect();
        assert_eq!(
            writes,
            [None, None, Some(Fault::Errno(libc::ENOSPC)), None, None]
        );
        assert_eq!(f.next(BackingOp::Read), None);
        assert_eq!(f.next(BackingOp::Fsync), Some(Fault::Errno(libc::EIO)));
        assert_eq!(f.next(BackingOp::Fsync), None, "fails once, succeeds after");
        assert_eq!(f.injected(BackingOp::Write), 1);
        assert_eq!(f.injected_total(), 2);
    }

    #[test]
    fn a_short_or_lost_fault_on_an_operation_that_moves_no_data_is_an_io_error() {
        let f = BackingFaults::parse("fsync#1=short,msync#1=lost,write#1=short").unwrap();
        assert_eq!(f.next(BackingOp::Fsync), Some(Fault::Errno(libc::EIO)));
        assert_eq!(f.next(BackingOp::Msync), Some(Fault::Errno(libc::EIO)));
        assert_eq!(f.next(BackingOp::Write), Some(Fault::ShortWrite));
    }

    #[test]
    fn random_faults_come_at_about_their_rate_on_the_chosen_operations_and_repeat_by_seed() {
        let plan = "one-in=50,seed=9,ops=write,faults=eio+enospc";
        let draw = |f: &BackingFaults| -> Vec<Option<Fault>> {
            (0..20_000).map(|_| f.next(BackingOp::Write)).collect()
        };
        let (a, b) = (
            BackingFaults::parse(plan).unwrap(),
            BackingFaults::parse(plan).unwrap(),
        );
        let first = draw(&a);
        assert_eq!(first, draw(&b), "the same seed gives the same faults");
        let n = a.injected(BackingOp::Write);
        assert!((300..500).contains(&n), "{n} faults in 20,000 at 1 in 50");
        assert!(first.contains(&Some(Fault::Errno(libc::ENOSPC))));
        assert!(first.contains(&Some(Fault::Errno(libc::EIO))));
        assert!(
            (0..1000).all(|_| a.next(BackingOp::Read).is_none()),
            "reads not chosen"
        );
        let other = BackingFaults::parse("one-in=50,seed=10,ops=write").unwrap();
        assert_ne!(first, draw(&other), "another seed, other faults");
    }

    #[test]
    fn a_bad_plan_is_refused_naming_the_part() {
        for (spec, part) in [
            ("write#0=eio", "write#0"),
            ("write#x=eio", "write#x"),
            ("erase#1=eio", "erase"),
            ("write#1=boom", "boom"),
            ("one-in=0", "one-in"),
            ("one-in", "one-in"),
            ("ops=read+trim", "trim"),
        ] {
            let e = BackingFaults::parse(spec).unwrap_err();
            assert!(e.contains(part), "{spec}: {e}");
        }
        assert_eq!(
            BackingFaults::parse("").unwrap().next(BackingOp::Write),
            None
        );
    }
}
