//! Trace replay: requests read from a block trace, fitted to the device, and timed.
//!
//! A [`TraceFeed`] reads a trace line by line from any `BufRead` (the caller opens the file),
//! so a multi-gigabyte trace replays in bounded memory: one line, the pieces of one split
//! request, and the footprint bitmap (at most 8 MiB, see [`Footprint`]). Each request is
//! parsed in its format (`formats`), fitted to the device (`fit`), and given the time it
//! should be issued at, from the trace's first request and scaled by the replay speed. The
//! feed counts as it goes what the replay summary reports ([`TraceReport`]).
//!
//! Both engines take their requests from here, so a trace means the same thing in the
//! simulator and the emulator.

mod fit;
mod formats;
mod summary;

use std::io::BufRead;

pub use fit::{AddressMode, Fitted, Geometry};
pub use formats::{TraceFormat, CSV_HEADER, IOLOG_V2_HEADER, IOLOG_V3_HEADER};
pub use summary::{SizeBucket, SkippedCounts, TraceReport};

use fit::Fitter;
use formats::{parse_line, Line, LineState, RawRequest};

use crate::spec::Request;

/// Longest line a trace may have: bounds the memory a malformed file can take.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// The value named `name` (any case) in a `--trace-*` flag's table of names.
pub(crate) fn by_name<T: Copy>(all: &[(&str, T)], name: &str) -> Option<T> {
    all.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, v)| v)
}

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
}

/// Fastest and slowest `--replay-speed`.
pub const REPLAY_SPEED_RANGE: (f64, f64) = (1e-6, 1e6);

impl TraceSpec {
    /// Checks what can be checked without the file.
    pub fn validate(&self) -> Result<(), TraceError> {
        let (lo, hi) = REPLAY_SPEED_RANGE;
        if !(self.speed.is_finite() && (lo..=hi).contains(&self.speed)) {
            return Err(TraceError::Setup(format!(
                "--replay-speed {} is outside {lo}..={hi} (1 is the trace's own pace, 2 twice as fast)",
                self.speed
            )));
        }
        Ok(())
    }
}

/// What can go wrong reading a trace. Every message names the trace and, for a bad line, its
/// number and what the format expects.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[allow(missing_docs)] // The messages say what each field is.
pub enum TraceError {
    /// A line that is not in the trace's format.
    #[error("{trace} line {line}: {reason}")]
    Line {
        trace: String,
        line: u64,
        reason: String,
    },
    /// The file could not be read.
    #[error("reading {trace}: {reason}")]
    Read { trace: String, reason: String },
    /// No format given, and the first line fits none.
    #[error(
        "{trace}: cannot tell the format from its first line '{first}'; give --trace-format \
         (blkparse, iolog2, iolog3, msr, fiu or csv)"
    )]
    UnknownFormat { trace: String, first: String },
    /// Nothing to replay.
    #[error("{trace}: no requests in it (read {lines} lines{skipped})")]
    Empty {
        trace: String,
        lines: u64,
        skipped: String,
    },
    /// A replay setting out of range.
    #[error("{0}")]
    Setup(String),
}

/// A request of the trace, fitted to the device, with the time it is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedRequest {
    /// When it is due, from the replay's start (the trace's first request is due at 0).
    pub due_ns: u64,
    /// The request, fitted to the device.
    pub request: Request,
}

/// Reads a trace's lines one at a time, bounded by [`LINE_BYTES_MAX`].
struct Lines {
    reader: Box<dyn BufRead + Send>,
    buf: Vec<u8>,
    number: u64,
    /// Bytes read so far.
    bytes: u64,
}

impl Lines {
    /// The next line (without its end) and its number, or `None` at the end of the file.
    fn next(&mut self, trace: &str) -> Result<Option<(u64, &str)>, TraceError> {
        use std::io::Read;
        self.buf.clear();
        let read = (&mut self.reader)
            .take(LINE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| TraceError::Read {
                trace: trace.to_string(),
                reason: e.to_string(),
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        self.bytes += read as u64;
        let line_error = |reason: String| TraceError::Line {
            trace: trace.to_string(),
            line: self.number,
            reason,
        };
        if self.buf.last() != Some(&b'\n') && self.buf.len() > LINE_BYTES_MAX {
            return Err(line_error(format!(
                "longer than {LINE_BYTES_MAX} bytes: not a trace line"
            )));
        }
        let text = std::str::from_utf8(&self.buf)
            .map_err(|_| line_error("not UTF-8 text: a binary file?".to_string()))?;
        Ok(Some((self.number, text.trim_end_matches(['\n', '\r']))))
    }
}

/// A trace's requests, fitted and timed, read as they are needed.
pub struct TraceFeed {
    name: String,
    lines: Lines,
    format: TraceFormat,
    state: LineState,
    /// The first line, read to guess the format, not yet parsed.
    first: Option<String>,
    mode: ReplayMode,
    speed: f64,
    fitter: Fitter,
    /// Pieces of a split request still to hand out (all due at its time).
    pieces: std::collections::VecDeque<TimedRequest>,
    /// The trace's time of its first request, and the latest time seen.
    origin_ns: Option<u64>,
    latest_ns: u64,
    report: TraceReport,
    ended: bool,
    /// The trace's length in bytes, when known: how far through it the replay is.
    len_bytes: Option<u64>,
}

impl TraceFeed {
    /// A feed over `reader`, named `name` in messages (the path). `span_bytes` is the
    /// trace's largest end offset when `spec.address` is `Scale` ([`trace_span`]), else
    /// ignored.
    pub fn new(
        name: &str,
        reader: Box<dyn BufRead + Send>,
        spec: &TraceSpec,
        geometry: Geometry,
        span_bytes: u64,
    ) -> Result<TraceFeed, TraceError> {
        spec.validate()?;
        let mut lines = Lines {
            reader,
            buf: Vec::new(),
            number: 0,
            bytes: 0,
        };
        // The first line that says something decides the format (when not given); it is kept
        // and parsed as the trace's first line.
        let mut first = None;
        let mut blank = 0;
        while let Some((_, line)) = lines.next(name)? {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                blank += 1;
                continue;
            }
            first = Some(line.to_string());
            break;
        }
        let Some(first) = first else {
            return Err(TraceError::Empty {
                trace: name.to_string(),
                lines: lines.number,
                skipped: if blank > 0 {
                    format!(", {blank} blank or comments")
                } else {
                    String::new()
                },
            });
        };
        let format = match spec.format {
            Some(f) => f,
            None => TraceFormat::guess(&first).ok_or_else(|| TraceError::UnknownFormat {
                trace: name.to_string(),
                first: first.chars().take(120).collect(),
            })?,
        };
        // The first line is parsed again by `next`, as line `number` of the file.
        lines.number -= 1;
        Ok(TraceFeed {
            name: name.to_string(),
            lines,
            format,
            state: LineState::default(),
            first: Some(first),
            mode: spec.mode,
            speed: spec.speed,
            fitter: Fitter::new(geometry, spec.address, span_bytes),
            pieces: std::collections::VecDeque::new(),
            origin_ns: None,
            latest_ns: 0,
            report: TraceReport::new(name, format, spec, geometry.capacity_bytes),
            ended: false,
            len_bytes: None,
        })
    }

    /// The format being read (given, or guessed).
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// How requests are timed.
    pub fn mode(&self) -> ReplayMode {
        self.mode
    }

    /// The next request, or `None` at the trace's end.
    pub fn next_request(&mut self) -> Result<Option<TimedRequest>, TraceError> {
        loop {
            if let Some(p) = self.pieces.pop_front() {
                self.report.count_replayed(&p.request);
                return Ok(Some(p));
            }
            if self.ended {
                return Ok(None);
            }
            let raw = match self.read_request()? {
                Some(raw) => raw,
                None => {
                    self.ended = true;
                    continue;
                }
            };
            let origin = *self.origin_ns.get_or_insert(raw.time_ns);
            let time = if raw.time_ns < self.latest_ns {
                // Traces from several CPUs can be out of order by a little: due no earlier
                // than the request before it.
                self.report.out_of_order += 1;
                self.latest_ns
            } else {
                raw.time_ns
            };
            self.latest_ns = time;
            let due_ns = ((time.saturating_sub(origin)) as f64 / self.speed) as u64;
            self.report.count_trace(&raw, time - origin.min(time));
            let pieces = &mut self.pieces;
            self.fitter.fit(&raw, |p| {
                pieces.push_back(TimedRequest {
                    due_ns,
                    request: Request {
                        op: p.op,
                        offset_bytes: p.offset_bytes,
                        len_bytes: p.len_bytes,
                    },
                })
            });
        }
    }

    /// The next request line of the trace, counting what it skips.
    fn read_request(&mut self) -> Result<Option<RawRequest>, TraceError> {
        loop {
            let owned;
            let (number, line) = match self.first.take() {
                Some(first) => {
                    self.lines.number += 1;
                    owned = first;
                    (self.lines.number, owned.as_str())
                }
                None => match self.lines.next(&self.name)? {
                    Some(numbered) => numbered,
                    None => return Ok(None),
                },
            };
            self.report.lines = number;
            let parsed = parse_line(self.format, line, &mut self.state).map_err(|reason| {
                TraceError::Line {
                    trace: self.name.clone(),
                    line: number,
                    reason: format!("{reason} (reading it as {})", self.format.name()),
                }
            })?;
            match parsed {
                Line::Request(r) => return Ok(Some(r)),
                Line::Skip(kind) => self.report.skipped.count(kind),
                Line::Nothing => {}
                Line::End => return Ok(None),
            }
        }
    }

    /// Tells the feed the trace's length in bytes, so it can say how far through it is.
    pub fn set_len_bytes(&mut self, len_bytes: u64) {
        self.len_bytes = Some(len_bytes);
    }

    /// The fraction of the trace read so far (0.0 to 1.0), when its length is known.
    pub fn fraction_read(&self) -> Option<f64> {
        self.len_bytes
            .map(|len| (self.lines.bytes as f64 / len.max(1) as f64).min(1.0))
    }

    /// The summary so far; `finish` when the replay is over.
    pub fn report(&self) -> &TraceReport {
        &self.report
    }

    /// The summary of what was replayed: `stopped_early` when the run ended before the trace
    /// did. Fails if the trace held no request at all.
    pub fn finish(mut self, issued_late: u64) -> Result<TraceReport, TraceError> {
        self.report.fitted = self.fitter.counts;
        self.report.issued_late = issued_late;
        self.report.stopped_early = !self.ended || !self.pieces.is_empty();
        if self.report.requests == 0 {
            return Err(TraceError::Empty {
                trace: self.name,
                lines: self.report.lines,
                skipped: self.report.skipped.describe(),
            });
        }
        self.report.finish();
        Ok(self.report)
    }
}

/// The largest end offset of any request in the trace (for `--trace-address scale`), read in
/// one pass.
pub fn trace_span(
    name: &str,
    reader: Box<dyn BufRead + Send>,
    format: Option<TraceFormat>,
) -> Result<u64, TraceError> {
    // A feed over a device as large as can be, so nothing is moved.
    let spec = TraceSpec {
        path: name.into(),
        format,
        mode: ReplayMode::AsFast,
        speed: 1.0,
        address: AddressMode::Wrap,
    };
    let geometry = Geometry {
        capacity_bytes: u64::MAX,
        block_bytes: 1,
        max_transfer_bytes: u32::MAX,
    };
    let mut feed = TraceFeed::new(name, reader, &spec, geometry, 0)?;
    let mut span = 0u64;
    while let Some(raw) = feed.read_request()? {
        span = span.max(raw.offset_bytes + raw.len_bytes);
    }
    Ok(span)
}

#[cfg(test)]
mod tests;
