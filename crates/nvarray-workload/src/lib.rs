//! Workload descriptions in fio's vocabulary, and deterministic request generators.
//!
//! # What this crate owns
//!
//! - [`JobSpec`]: one job (fio section) — access pattern, request lengths, mix, queue depth,
//!   thread count, limits, seed, region and think time — and [`JobSpec::set`], the one place
//!   where a `key=value` pair is parsed and range-checked, for job files and command lines
//!   alike.
//! - [`parse_job_file`]: fio's INI job files into a [`Workload`].
//! - [`parse_size`] and [`parse_duration_ns`]: fio's size and time syntax, read by
//!   `nvarray-units` (the workspace's one size and time parser) and reported as a
//!   [`WorkloadError`].
//! - [`RequestGen`]: the request stream of one thread of one job, a pure function of the
//!   job, the thread index and the device geometry.
//! - [`trace`]: block traces (blkparse, fio iologs, MSR-Cambridge, SNIA/FIU, nvarray CSV)
//!   read incrementally, fitted to the device and timed for replay ([`trace::TraceFeed`]).
//!
//! The discrete-event simulator and the real-time emulator (`nvarray-run`) both take their
//! requests from here, so a workload means the same thing in both.
//!
//! # What it must never do
//!
//! - Depend on another nvarray crate except `nvarray-units`, the bottom of the graph: the
//!   device model, the simulator and the emulator depend on this crate, never the reverse.
//! - Read a clock, start a thread, or open a file: it parses only strings and readers it is
//!   handed (a trace is read from the `BufRead` its caller opened), and time appears only as
//!   durations in a job (`runtime_ns`, `thinktime_ns`) and a trace's own times.
//! - Panic on input from outside: every bad key or value is a [`WorkloadError`] that names
//!   the key and the accepted range.
//! - Allocate in [`RequestGen::next_request`], which the simulator calls millions of times
//!   per second.
//!
//! # Example
//!
//! ```
//! use nvarray_workload::{parse_job_file, Direction, RequestGen};
//!
//! let workload = parse_job_file(
//!     "[global]\n\
//!      bs=4k\n\
//!      [writer]\n\
//!      rw=randwrite\n\
//!      iodepth=32\n",
//! )
//! .unwrap();
//! let device_size_bytes = 1 << 30;
//! workload.validate(device_size_bytes, 4096, 128 * 1024).unwrap();
//! let mut gen = RequestGen::new(&workload.jobs[0], 0, device_size_bytes, 4096).unwrap();
//! let request = gen.next_request();
//! assert_eq!(request.op, Direction::Write);
//! assert_eq!(request.offset_bytes % 4096, 0);
//! ```

#![warn(missing_docs)]

mod arith;
mod backlog;
mod error;
mod fio_end;
mod fio_rand;
mod gen;
mod jobfile;
mod random_map;
mod skew;
mod spec;
pub mod trace;
mod units;
mod zipf;

pub use error::WorkloadError;
pub use gen::RequestGen;
pub use jobfile::{
    parse_job_file, parse_job_file_from, parse_job_file_noting, parse_job_file_with, JobFileEnv,
    NoEnv, Workload, JOBS_MAX, JOB_FILE_BYTES_MAX,
};
pub use spec::key_names::{ignored_keys, ignored_reason};
pub use spec::key_table::supported_keys;
pub use spec::{
    BlockSize, DataPlacement, Direction, Distribution, ExitWhat, Flow, JobSpec, LatencyTarget,
    PlacementPicker, PlacementSelect, RateProcess, Request, RwMode, RwSequencer, SteadyMetric,
    SteadyState, StridedZones, ThinkPolicy, Verify, ZoneMode, ZoneSplit, BSSPLIT_ENTRIES_MAX,
    BS_BYTES_MAX, FLOW_WEIGHT_MAX, IODEPTH_MAX, NAME_BYTES_MAX, NUMBER_IOS_MAX, NUMJOBS_MAX,
    PLACEMENT_IDS_MAX, RANDSEED_DEFAULT, RUNTIME_NS_MAX, SEQUENCE_MAX, THINKTIME_NS_MAX,
    ZIPF_THETA_MAX, ZONES_MAX,
};
pub use units::{
    format_duration_ns, format_size, parse_duration_ns, parse_size, NS_PER_MS, NS_PER_S, NS_PER_US,
};
pub use zipf::ZipfSampler;
