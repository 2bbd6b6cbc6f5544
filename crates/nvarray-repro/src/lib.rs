//! `nvarray-repro`: every figure of the seed papers (`../shared/reference/seeds/`) as an
//! experiment nvarray can run, next to the value the paper published.
//!
//! It owns the catalogue (`seeds/`: one module per paper, each figure with its rows: the
//! published value and where it is quoted from, the experiments that measure it, how the
//! number is read off their output, and what counts as agreement), the simulator runs (in
//! process, deterministic), and the report (`report`: markdown and JSON). Experiments that
//! need a real machine — the emulator, the NVM library's benchmarks, fio on a kernel loop
//! device, PMDK — are described here as the exact commands to run and are run by the caller
//! (`nvarray repro` spawns them), so the command printed beside a number is the one that
//! made it.
//!
//! Only `machine` reads a clock or spawns a process: the runner `nvarray repro` hands to
//! `evaluate` for those experiments (nvarray's own commands, fio on a loop device, the PMDK
//! peer built with gcc, the channel and SQLite scripts). The rest is pure; the device figures
//! it can run alone are tests (`tests/*.rs`, one per paper, every row of a device together).

pub mod machine;
pub mod report;
pub mod run;
pub mod seeds;
pub mod spec;

pub use report::{FigureResult, RowResult, Verdict};
pub use run::{evaluate, run_sim_experiment, Runner, SimOnly};
pub use spec::{Expect, Experiment, Figure, Plot, Row, Seed, SimRun};
