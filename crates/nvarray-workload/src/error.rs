//! The one error type of this crate.
//!
//! Every message is a single line that names the offending key or field and says what would
//! have been accepted, so the binary can print it as is and the user knows what to change.

/// Everything that can go wrong while parsing or validating a workload.
///
/// Input from outside (job files, command lines) only ever produces one of these; nothing in
/// this crate panics on bad input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A size string such as `4k` could not be parsed by [`parse_size`](crate::parse_size).
    #[error("size '{input}': {reason}")]
    Size {
        /// The text as given.
        input: String,
        /// What is wrong and what is accepted.
        reason: &'static str,
    },

    /// A duration string such as `10s` could not be parsed by
    /// [`parse_duration_ns`](crate::parse_duration_ns).
    #[error("duration '{input}': {reason}")]
    Duration {
        /// The text as given.
        input: String,
        /// What is wrong and what is accepted.
        reason: &'static str,
    },

    /// A known key was given a value it does not accept.
    #[error("{key}: {reason}, got '{value}'")]
    Value {
        /// The key, as spelled by the user.
        key: String,
        /// The value as given.
        value: String,
        /// What would have been accepted, e.g. "must be an integer in 1..=4096".
        reason: String,
    },

    /// A known key that needs a value was given none (a bare `iodepth` line, or `iodepth=`).
    #[error("{key}: needs a value, write {key}=VALUE")]
    MissingValue {
        /// The key, as spelled by the user.
        key: String,
    },

    /// A key that is neither supported nor on the ignore list (made by `unknown_key`).
    #[error("unknown key '{key}'{known}")]
    UnknownKey {
        /// The key, as spelled by the user.
        key: String,
        /// What it could have been: the closest known key, then the keys supported and the
        /// keys accepted and ignored.
        known: String,
    },

    /// A line of a job file that is not a section header, a `key=value` pair, a bare key,
    /// a comment or blank.
    #[error("{reason}")]
    Syntax {
        /// What is wrong with the line and how it should look.
        reason: String,
    },

    /// An error found on a given line of a job file.
    ///
    /// The inner error is part of this message rather than a `source()`, so that error
    /// reporters that print the whole chain do not print it twice.
    #[error("line {line}: {inner}")]
    AtLine {
        /// 1-based line number in the job file.
        line: usize,
        /// What went wrong on that line.
        inner: Box<WorkloadError>,
    },

    /// A job file larger than [`JOB_FILE_BYTES_MAX`](crate::JOB_FILE_BYTES_MAX).
    #[error("job file: {len_bytes} bytes is larger than the limit of {len_bytes_max} bytes")]
    InputTooLarge {
        /// Size of the text given.
        len_bytes: usize,
        /// The limit.
        len_bytes_max: usize,
    },

    /// A workload without any job section.
    #[error("workload: defines no jobs; add a section such as [job1] after [global]")]
    NoJobs,

    /// A workload with more than [`JOBS_MAX`](crate::JOBS_MAX) jobs.
    #[error("workload: more than {jobs_max} jobs")]
    TooManyJobs {
        /// The limit.
        jobs_max: usize,
    },

    /// Two jobs with the same name.
    ///
    /// Names must be unique because they seed the request streams: two jobs with the same
    /// name and seed would issue identical requests, which is almost never what was meant.
    #[error("workload: job name '{name}' is used twice; give each job section its own name")]
    DuplicateJob {
        /// The repeated name.
        name: String,
    },

    /// The device geometry handed to `validate` or `RequestGen::new` is itself unusable.
    #[error("device: {reason}")]
    Device {
        /// What is wrong, with the numbers.
        reason: String,
    },

    /// A request longer than the device's largest command.
    #[error(
        "{key}: request length {len_bytes} exceeds the device's maximum transfer of {max_bytes} \
         bytes"
    )]
    TransferTooLarge {
        /// The job key that sets the length (`bs`, `bsrange`, `bssplit`).
        key: &'static str,
        /// The request's length.
        len_bytes: u32,
        /// The device's largest command.
        max_bytes: u32,
    },

    /// A job that does not fit the device it is meant to run on.
    #[error("{key}: {reason}")]
    Invalid {
        /// The job key that has to change.
        key: &'static str,
        /// What is wrong, with the numbers.
        reason: String,
    },

    /// A uniform random job whose random map would be too large (fio's default
    /// `norandommap=0` keeps a bit per aligned position of the region).
    #[error("job '{job}': its random map would track {positions} positions (region / blockalign), more than {positions_max}; set norandommap=1 (offsets drawn independently), a larger blockalign, or a smaller size")]
    RandomMapTooLarge {
        /// The job's name.
        job: String,
        /// Aligned positions in the job's region.
        positions: u64,
        /// The most a map tracks.
        positions_max: u64,
    },

    /// A thread index outside `0..numjobs`.
    #[error("thread_index: must be in 0..{numjobs} (numjobs), got {thread_index}")]
    ThreadIndex {
        /// The index asked for.
        thread_index: u32,
        /// The job's `numjobs`.
        numjobs: u32,
    },

    /// An error in one job of a workload.
    #[error("job '{name}': {inner}")]
    Job {
        /// The job's name.
        name: String,
        /// What is wrong with it.
        inner: Box<WorkloadError>,
    },
}

impl WorkloadError {
    /// Attaches a job-file line number.
    pub(crate) fn at_line(self, line: usize) -> Self {
        WorkloadError::AtLine {
            line,
            inner: Box::new(self),
        }
    }
}

/// A [`WorkloadError::Value`]: `key` was given `value`, and `reason` says what it accepts.
pub(crate) fn value_error(key: &str, value: &str, reason: &str) -> WorkloadError {
    WorkloadError::Value {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}
