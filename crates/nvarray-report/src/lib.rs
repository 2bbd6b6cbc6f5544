//! `nvarray-report`: the result of a run, in the one shape every engine reports.
//!
//! The simulator and the emulator fill the same types, so `nvarray sim`, `nvarray bench
//! --engine sim` and `nvarray bench --engine emu` print the same table and JSON fields. It also
//! owns the one measurement both engines take the same way, the process's CPU time
//! (`process_cpu_seconds`); it never runs anything itself, and never lays a report out
//! (that is `nvarray-present`'s).
//!
//! One module per concern: the report's shapes (`run_report`, `totals`, `io_depths`), what
//! accumulates them (`stream_stats`, `issue_delays`) and builds a run's report from the model
//! (`from_model`), and the two clocks (`busy_clock`, `cpu_time`). Every item is re-exported
//! here, so callers name `nvarray_report::X` whichever file holds it.

mod busy_clock;
mod control;
mod cpu_time;
mod enough;
mod from_model;
mod io_depths;
mod issue_delays;
mod run_report;
mod stream_stats;
mod totals;

pub use busy_clock::{BusyClock, ACTIVE_GAP_MAX};
pub use control::{SteadyReport, StreamControl};
pub use cpu_time::{process_cpu_seconds, thread_cpu_seconds};
pub use enough::{cpu_seconds_per_gb, BYTES_FEW};
pub use io_depths::IoDepths;
pub use issue_delays::{IssueDelays, ISSUED_LATE_NS};
pub use nvarray_model::Verdict;
pub use run_report::{
    ChannelCounts, EmulatorSetup, GroupReport, IssueLatenessNs, LatenessNs, MachineJitterNs,
    RunReport, StreamReport, Utilisation, WearReport, REQUESTS_FEW,
};
pub use stream_stats::StreamStats;
pub use totals::{BreakdownNs, DirectionTotals, LatencySummary, Totals};
