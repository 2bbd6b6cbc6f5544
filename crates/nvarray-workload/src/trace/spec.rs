//! A trace replay as the user asks for it: the file, its format, how requests are timed,
//! and how they are fitted to the device.

use super::fit::AddressMode;
use super::formats::TraceFormat;
use super::names::by_name;

/// How requests are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplayMode {
    /// Closed loop: the next request goes as soon as a queue slot (`iodepth`) is free; the
    /// trace's times are not used.
    AsFast,
    /// Open loop: each request is due at its recorded time (divided by the replay speed)
    /// from the replay's start; latency is measured from that time, so a device slower than
    /// the trace shows as queueing, not as a slowed trace. `iodepth` bounds the requests in
    /// flight; one that finds every slot taken waits (counted in `issued_late`).
    Timestamps,
}

impl ReplayMode {
    /// `--replay-mode` names.
    pub const ALL: [(&'static str, ReplayMode); 2] = [
        ("as-fast", ReplayMode::AsFast),
        ("timestamps", ReplayMode::Timestamps),
    ];

    /// The mode `--replay-mode` names `name`.
    pub fn from_name(name: &str) -> Option<ReplayMode> {
        by_name(&Self::ALL, name)
    }
}

/// A trace replay as the user asked for it (the file is opened by whoever runs it).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TraceSpec {
    /// The trace file.
    pub path: std::path::PathBuf,
    /// `None`: guessed from the first line.
    pub format: Option<TraceFormat>,
    /// How requests are timed.
    pub mode: ReplayMode,
    /// Trace time is divided by this (2 replays twice as fast). Finite and positive.
    pub speed: f64,
    /// How offsets past the device's end are brought inside it.
    pub address: AddressMode,
    /// Replay only this device or file of the trace, named as the trace names it (blkparse
    /// `8,16`, an iolog's file name, MSR `Hostname,DiskNumber`, FIU `MAJOR,MINOR`); `None`:
    /// every request, the trace's devices laid over the one device (and counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}
