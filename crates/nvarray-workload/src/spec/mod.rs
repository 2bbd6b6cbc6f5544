//! One job in fio's vocabulary, [`JobSpec`]: its fields, their defaults and limits, and what
//! they imply (the read fraction, the alignment of random offsets).
//!
//! The rest of a job lives beside it, one concern per file:
//!
//! - `vocabulary.rs`: the value types a job is made of (`RwMode`, `BlockSize`, `Verify`) and
//!   the `Request` a generator issues; `distribution.rs`: `Distribution`, fio's
//!   `random_distribution` values.
//! - `key_table.rs`: the one table of the fio keys a job understands (names, how each value
//!   is read and written back, each field's range); `keys.rs`: [`JobSpec::set`],
//!   [`JobSpec::fio_options`] and `check_fields`, which walk it; `parse.rs`: the value
//!   parsers the keys share; `key_names.rs`: the keys accepted and ignored, and the closest
//!   key to a typo.
//! - `control.rs`: the options that steer a running job by what it measures (think time
//!   policy, latency target, flows, steady state).
//! - `limits.rs`: the largest value of each field.
//! - `placement.rs`: fio's data placement options (`fdp`, `fdp_pli`, `fdp_pli_select`) and
//!   the handle each write carries.
//! - `validate.rs`: range checks on every field and [`JobSpec::validate`] against a device.

use serde::Serialize;

mod control;
mod distribution;
pub(crate) mod key_names;
pub(crate) mod key_table;
mod keys;
mod limits;
mod parse;
mod placement;
mod validate;
mod vocabulary;

pub use control::{
    ExitWhat, Flow, LatencyTarget, SteadyMetric, SteadyState, ThinkPolicy, FLOW_WEIGHT_MAX,
};
pub use distribution::{Distribution, ZoneSplit, SEQUENCE_MAX, ZONES_MAX};
pub use limits::{
    BSSPLIT_ENTRIES_MAX, BS_BYTES_MAX, IODEPTH_MAX, NAME_BYTES_MAX, NUMBER_IOS_MAX, NUMJOBS_MAX,
    RANDSEED_DEFAULT, RUNTIME_NS_MAX, THINKTIME_NS_MAX, ZIPF_THETA_MAX,
};
pub use placement::{DataPlacement, PlacementPicker, PlacementSelect, PLACEMENT_IDS_MAX};
pub use vocabulary::{
    BlockSize, Direction, RateProcess, Request, RwMode, RwSequencer, StridedZones, Verify, ZoneMode,
};

/// One job (one section of a fio job file): what `numjobs` identical threads do.
///
/// Build it with [`JobSpec::default`] and [`JobSpec::set`]; check it against a device with
/// [`JobSpec::validate`]. The fields are public for reading and for tests; code that writes
/// them directly must call `validate`, which re-checks every range `set` enforces.
///
/// A job never ends on its own: generators wrap around the region (fio's `time_based`), and
/// the simulator stops a job on `runtime_ns` or `number_ios`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSpec {
    /// Job name: the section name in a job file, `job0` by default.
    pub name: String,
    /// Access pattern; default [`RwMode::Read`], as in fio.
    pub rw: RwMode,
    /// fio's `rw=randread:N` (random modes): a new random offset every `N` requests, counted
    /// over both directions; the requests between continue from the previous one of their
    /// direction (`rw_sequencer`). 1 (default): every request; 0: only continuations.
    pub rw_run: u32,
    /// fio's `rw=read:N` (sequential modes): each request starts `N` bytes after the end of
    /// the previous one of its direction (negative: before, reading backwards); default 0.
    pub rw_gap_bytes: i64,
    /// fio's `rw_sequencer`: whether the requests of an `rw_run` continue sequentially
    /// (default) or repeat the run's first offset.
    pub rw_sequencer: RwSequencer,
    /// Request lengths; default `Fixed(4096)`.
    pub bs: BlockSize,
    /// Percentage of reads for `rw` and `randrw`, `0..=100`; default 50.
    pub rwmixread: u8,
    /// Requests in flight per thread, `1..=IODEPTH_MAX`; default 1.
    pub iodepth: u32,
    /// Identical threads running this job, `1..=NUMJOBS_MAX`; default 1.
    pub numjobs: u32,
    /// Run time limit; `None` (default, or `runtime=0`) means no time limit.
    pub runtime_ns: Option<u64>,
    /// Requests per thread; `None` (default, or `number_ios=0`) means no count limit.
    pub number_ios: Option<u64>,
    /// Offset distribution for random modes; default [`Distribution::Uniform`].
    pub random_distribution: Distribution,
    /// fio's `random_sequence_stride`: a `sequence` moves on by its length after each pass
    /// instead of repeating the same blocks; default off.
    pub random_sequence_stride: bool,
    /// Seed of every random choice; default [`RANDSEED_DEFAULT`] (0x89).
    pub randseed: u64,
    /// Start of the job's region on the device; default 0.
    pub offset_bytes: u64,
    /// Length of the job's region; `None` (default) means from `offset_bytes` to the end of
    /// the device.
    pub size_bytes: Option<u64>,
    /// Boundary random offsets are aligned to (fio's `blockalign`, alias `ba`); `None`
    /// (default) means the smallest request length, as in fio.
    pub blockalign_bytes: Option<u64>,
    /// fio's `thinktime`: after every `think.blocks` requests the thread waits for its
    /// requests to complete, then idles this long; default 0 (never).
    pub thinktime_ns: u64,
    /// The rest of fio's think time options (`control.rs`).
    pub think: ThinkPolicy,
    /// fio's `latency_target` and its window and percentile (`control.rs`).
    pub latency_target: LatencyTarget,
    /// fio's `flow_id`, `flow` and `flow_sleep` (`control.rs`).
    pub flow: Flow,
    /// fio's `steadystate`, `ss_dur`, `ss_ramp` and `ss_interval` (`control.rs`).
    pub steadystate: SteadyState,
    /// fio's `exitall`: when one job ends, others end too (`exit_what` says which). In fio
    /// one job's `exitall` holds for every job of the file; so in nvarray
    /// (`Workload::exits`).
    pub exitall: bool,
    /// fio's `exit_what`.
    pub exit_what: ExitWhat,
    /// Whether writes carry self-checking data that every read verifies; default off.
    pub verify: Verify,
    /// fio's `verify_pattern`: the bytes `verify=pattern` (and `meta` with a pattern) writes
    /// and expects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_pattern: Option<Vec<u8>>,
    /// fio's `verify_interval`: bytes each header covers (`None`: one device block).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_interval_bytes: Option<u64>,
    /// fio's `verify_backlog`: a writing job with `verify` reads back every this many
    /// writes as it goes (`backlog.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_backlog: Option<u64>,
    /// fio's `do_verify`: whether the job's reads are checked (default on); `do_verify=0`
    /// writes self-checking data for a later job to check.
    pub do_verify: bool,
    /// fio's `fill_device`: the job's region runs to the end of the device, whatever `size`
    /// says (fio writes until the device is full; a job that ends by size, as every one
    /// under `nvarray fio` without `time_based`, ends when it has moved it).
    pub fill_device: bool,
    /// Requests per second each thread issues at most (fio's `rate_iops`); `None`: no cap.
    pub rate_iops: Option<u64>,
    /// Bytes per second each thread moves at most (fio's `rate`); `None`: no cap.
    pub rate_bytes_per_s: Option<u64>,
    /// How capped requests are spaced (fio's `rate_process`); default linear.
    pub rate_process: RateProcess,
    /// Bytes each thread moves before it stops (fio's `io_size`, alias `io_limit`); `None`:
    /// no byte limit.
    pub io_size_bytes: Option<u64>,
    /// Each thread's region starts this much after the previous thread's (fio's
    /// `offset_increment`; thread `t` at `offset + t x offset_increment`); 0 (default): every
    /// thread shares the job's region.
    pub offset_increment_bytes: u64,
    /// The job runs this many times over (fio's `loops`): its request count, byte limit and
    /// runtime are multiplied; default 1.
    pub loops: u32,
    /// The job ends after moving its region's size (or `io_size`) once per loop, as a fio job
    /// without `time_based` does: set by `runtime=0` (no time limit, as in fio), and by
    /// `nvarray fio` for every job without `time_based`. A `runtime` still ends it sooner.
    pub ends_by_size: bool,
    /// fio's `norandommap`: uniform random offsets are drawn independently, so a block may
    /// be used again before others are used once. Default off, as in fio: each aligned
    /// position is used once per pass over the region (see `RequestGen`).
    pub norandommap: bool,
    /// fio's `time_based` was given (the job runs for its `runtime`, wrapping around its
    /// region): what `ends_by_size` is not, under `nvarray fio`.
    pub time_based: bool,
    /// Warm-up before measuring (fio's `ramp_time`): the job runs this long first, and what
    /// completes meanwhile is not counted; its `runtime` starts after it. Default 0.
    pub ramp_time_ns: u64,
    /// The job starts once every job before it has finished (fio's `stonewall`, alias
    /// `wait_for_previous`), and begins a new reporting group.
    pub stonewall: bool,
    /// The job begins a new reporting group (fio's `new_group`) while running alongside the
    /// jobs before it.
    pub new_group: bool,
    /// The job starts once the named earlier job has finished (fio's `wait_for`). nvarray
    /// waits for every job before it, as `stonewall` does (see `Workload::phases`).
    pub wait_for: Option<String>,
    /// Writes carry a placement handle (fio's `fdp`, `fdp_pli`, `fdp_pli_select`).
    pub data_placement: DataPlacement,
    /// fio's `zonemode`: `strided` splits the region into zones (`zones`); `zbd` (a zoned
    /// device's own zones) is refused by `nvarray fio` (real fio reaches zoned namespaces
    /// through the channel engine).
    pub zonemode: ZoneMode,
    /// fio's `zonesize`, `zonerange` and `zoneskip`, used with `zonemode=strided`.
    pub zones: StridedZones,
    /// fio's `filename`. The device is not chosen by it, but fio seeds a file's `pareto` and
    /// `normal` offsets with its name, so nvarray does too (`None`: fio's default name,
    /// `JOB.CLONE.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The number fio gives the job's first thread: 1, plus every thread (each `numjobs`
    /// clone) of the jobs before it in its job file. Seeds `pareto` and `normal` as in fio.
    #[serde(skip)]
    pub fio_thread_number: u32,
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            name: "job0".to_string(),
            rw: RwMode::Read,
            rw_run: 1,
            rw_gap_bytes: 0,
            rw_sequencer: RwSequencer::Sequential,
            bs: BlockSize::Fixed(4096),
            rwmixread: 50,
            iodepth: 1,
            numjobs: 1,
            runtime_ns: None,
            number_ios: None,
            random_distribution: Distribution::Uniform,
            random_sequence_stride: false,
            randseed: RANDSEED_DEFAULT,
            offset_bytes: 0,
            size_bytes: None,
            blockalign_bytes: None,
            thinktime_ns: 0,
            think: ThinkPolicy::default(),
            latency_target: LatencyTarget::default(),
            flow: Flow::default(),
            steadystate: SteadyState::default(),
            exitall: false,
            exit_what: ExitWhat::Group,
            verify: Verify::None,
            verify_pattern: None,
            verify_interval_bytes: None,
            verify_backlog: None,
            do_verify: true,
            fill_device: false,
            rate_iops: None,
            rate_bytes_per_s: None,
            rate_process: RateProcess::Linear,
            io_size_bytes: None,
            offset_increment_bytes: 0,
            loops: 1,
            ends_by_size: false,
            norandommap: false,
            time_based: false,
            ramp_time_ns: 0,
            stonewall: false,
            new_group: false,
            wait_for: None,
            data_placement: DataPlacement::default(),
            filename: None,
            fio_thread_number: 1,
            zonemode: ZoneMode::None,
            zones: StridedZones::default(),
        }
    }
}

impl JobSpec {
    /// The spinning part of the think time: fio caps `thinktime_spin` at `thinktime`
    /// (init.c:728-732).
    pub fn think_spin_ns(&self) -> u64 {
        self.think.spin_ns.min(self.thinktime_ns)
    }

    /// Fraction of requests that are reads: 1 for `read`/`randread`, 0 for
    /// `write`/`randwrite`, `rwmixread / 100` for `rw`/`randrw`.
    pub fn read_fraction(&self) -> f64 {
        match self.rw {
            RwMode::Read | RwMode::RandRead => 1.0,
            RwMode::Write | RwMode::RandWrite => 0.0,
            RwMode::Rw | RwMode::RandRw => f64::from(self.rwmixread) / 100.0,
        }
    }

    /// True when offsets are random (`randread`, `randwrite`, `randrw`).
    pub fn is_random(&self) -> bool {
        self.rw.is_random()
    }

    /// Whether the job starts after the jobs before it have finished (`stonewall` or
    /// `wait_for`).
    pub fn waits(&self) -> bool {
        self.stonewall || self.wait_for.is_some()
    }

    /// The boundary random offsets are aligned to: `blockalign`, else the smallest request
    /// length (fio's default, "Default: bs").
    pub fn align_bytes(&self) -> u64 {
        self.blockalign_bytes
            .unwrap_or_else(|| u64::from(self.bs.lens_bytes().min().unwrap_or(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d() -> JobSpec {
        JobSpec::default()
    }

    #[test]
    fn defaults() {
        let job = d();
        assert_eq!(job.name, "job0");
        assert_eq!(job.rw, RwMode::Read);
        assert_eq!(job.bs, BlockSize::Fixed(4096));
        assert_eq!(job.rwmixread, 50);
        assert_eq!(job.iodepth, 1);
        assert_eq!(job.numjobs, 1);
        assert_eq!(job.runtime_ns, None);
        assert_eq!(job.number_ios, None);
        assert_eq!(job.random_distribution, Distribution::Uniform);
        assert_eq!(job.randseed, 0x89);
        assert_eq!(job.offset_bytes, 0);
        assert_eq!(job.size_bytes, None);
        assert_eq!(job.thinktime_ns, 0);
        assert_eq!(job.check_fields(), Ok(()));
    }

    #[test]
    fn read_fraction_and_is_random() {
        for (rw, read_fraction, is_random) in [
            (RwMode::Read, 1.0, false),
            (RwMode::RandRead, 1.0, true),
            (RwMode::Write, 0.0, false),
            (RwMode::RandWrite, 0.0, true),
            (RwMode::Rw, 0.7, false),
            (RwMode::RandRw, 0.7, true),
        ] {
            let job = JobSpec {
                rw,
                rwmixread: 70,
                ..d()
            };
            assert_eq!(job.read_fraction(), read_fraction, "{rw}");
            assert_eq!(job.is_random(), is_random, "{rw}");
        }
    }
}
