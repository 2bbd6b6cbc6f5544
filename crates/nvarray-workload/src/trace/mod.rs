//! Trace replay: requests read from a block trace, fitted to the device, and timed.
//!
//! A [`TraceFeed`] reads a trace line by line from any `BufRead` (the caller opens the file),
//! so a multi-gigabyte trace replays in bounded memory: one line, the request being split
//! (its pieces made one at a time), the footprint's extents (at most about 9 MiB, see
//! `summary::Footprint`) and the names of at most [`DEVICES_LISTED_MAX`] devices. Each
//! request is parsed in its format (`formats`), fitted to the device (`fit`), and given the
//! time it should be issued at, from the trace's first request and scaled by the replay
//! speed. The feed counts as it goes what the replay summary reports ([`TraceReport`]). With
//! [`Loops`] it reads the trace again from its start, through a [`Reopen`] the caller gives.
//!
//! Both engines take their requests from here, so a trace means the same thing in the
//! simulator and the emulator.

mod fit;
mod formats;
mod names;
mod spec;
mod summary;

use std::io::BufRead;

pub use fit::{AddressMode, Fitted, Geometry};
pub use formats::{TraceFormat, CSV_HEADER, IOLOG_V2_HEADER, IOLOG_V3_HEADER};
pub use names::shown;
pub use spec::{ReplayMode, TraceSpec};
pub use summary::{SizeBucket, SkippedCounts, TraceDevice, TraceReport, DEVICES_LISTED_MAX};

use fit::{Fit, Fitter, Pieces};
use formats::{parse_line, Line, LineState, RawRequest, Skipped};

use crate::spec::{JobSpec, Request};

/// Longest line a trace may have: bounds the memory a malformed file can take.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// How many times a trace is replayed, each time from its start (fio's `loops`; with
/// `time_based`, until the runtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loops {
    /// This many passes (at least 1).
    Count(u32),
    /// Pass after pass until the run stops (fio's `time_based`: its `runtime` ends it).
    UntilStopped,
}

impl Loops {
    /// The passes `job` asks for: `time_based` repeats the trace until the runtime, as fio's
    /// time-based job repeats its workload; otherwise `loops` passes.
    pub fn of(job: &JobSpec) -> Loops {
        if job.time_based {
            Loops::UntilStopped
        } else {
            Loops::Count(job.loops.max(1))
        }
    }

    /// Whether the trace is read more than once.
    pub fn repeats(self) -> bool {
        self != Loops::Count(1)
    }
}

/// Opens the trace from its start again, for the next pass of [`Loops`].
pub type Reopen = Box<dyn FnMut() -> Result<Box<dyn BufRead + Send>, TraceError> + Send>;

/// Latest a request may be due, from the replay's start: 2^62 ns, about 146 years. Later
/// would be a trace's clock gone wrong, and it keeps the engines' clocks (a due time added to
/// a phase's start) far from overflowing.
pub const DUE_NS_MAX: u64 = 1 << 62;

/// fio keys that mean nothing for a trace replay, and why: refused with `--trace` rather
/// than silently ignored. (`numjobs` is refused on its own: see the runner's plan.)
pub const KEYS_REFUSED: [(&str, &str); 15] = [
    ("rw", "the trace gives each request's direction"),
    (
        "size",
        "it limits a generated job's region, and a trace's offsets are its own (fit them with \
         --trace-address; size the device with --set memory.capacity_bytes=)",
    ),
    (
        "verify",
        "a trace's reads need not read what its own writes wrote: there is nothing to check \
         them against",
    ),
    ("bs", "the trace gives each request's size"),
    ("rwmixread", "the trace gives each request's direction"),
    ("rwmixwrite", "the trace gives each request's direction"),
    (
        "random_distribution",
        "the trace gives each request's offset",
    ),
    (
        "offset",
        "the trace gives each request's offset (fit them to the device with --trace-address)",
    ),
    (
        "blockalign",
        "the trace gives each request's offset; the device block aligns them",
    ),
    (
        "norandommap",
        "the trace gives each request's offset: there is no random map",
    ),
    ("randseed", "no request of a trace is drawn at random"),
    (
        "offset_increment",
        "it shifts each thread's region, and a trace replays on one thread at its own offsets",
    ),
    (
        "rate_iops",
        "a trace's pace is its own: --replay-mode timestamps replays it at its times, \
         --replay-speed faster or slower",
    ),
    (
        "rate",
        "a trace's pace is its own: --replay-mode timestamps replays it at its times, \
         --replay-speed faster or slower",
    ),
    (
        "rate_process",
        "a trace's pace is its own: --replay-mode timestamps replays it at its times, \
         --replay-speed faster or slower",
    ),
];

/// Why `key` is refused with a trace, if it is.
pub fn refused_key(key: &str) -> Option<&'static str> {
    KEYS_REFUSED
        .iter()
        .find(|(k, _)| *k == key)
        .map(|&(_, why)| why)
}

/// The first key of `job` set away from its default that a trace replay would ignore, and
/// why (a job set by a sweep's parameter, or built in code, rather than by flags).
pub fn refused_job_key(job: &JobSpec) -> Option<(&'static str, &'static str)> {
    let d = JobSpec::default();
    let set = [
        ("rw", job.rw != d.rw),
        ("bs", job.bs != d.bs),
        ("rwmixread", job.rwmixread != d.rwmixread),
        ("size", job.size_bytes != d.size_bytes),
        ("verify", job.verify != d.verify),
        (
            "random_distribution",
            job.random_distribution != d.random_distribution,
        ),
        ("offset", job.offset_bytes != d.offset_bytes),
        ("blockalign", job.blockalign_bytes != d.blockalign_bytes),
        ("norandommap", job.norandommap != d.norandommap),
        ("randseed", job.randseed != d.randseed),
        (
            "offset_increment",
            job.offset_increment_bytes != d.offset_increment_bytes,
        ),
        ("rate_iops", job.rate_iops != d.rate_iops),
        ("rate", job.rate_bytes_per_s != d.rate_bytes_per_s),
        ("rate_process", job.rate_process != d.rate_process),
    ];
    assert!(
        set.iter().all(|&(key, _)| refused_key(key).is_some()),
        "a key checked here is missing from KEYS_REFUSED"
    );
    set.into_iter()
        .find(|&(_, differs)| differs)
        .and_then(|(key, _)| refused_key(key).map(|why| (key, why)))
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
        if self.device.as_deref().is_some_and(|d| d.trim().is_empty()) {
            return Err(TraceError::Setup(
                "--trace-device is empty: give a device or file as the trace names it \
                 (blkparse 8,16; an iolog's file name; MSR Hostname,DiskNumber)"
                    .to_string(),
            ));
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
    #[error("{trace}: no requests in it (read {lines} lines{skipped}){hint}")]
    Empty {
        trace: String,
        lines: u64,
        skipped: String,
        hint: String,
    },
    /// `--trace-device` names no device of the trace.
    #[error("{trace}: no requests of --trace-device {device}; the trace's devices: {devices}")]
    NoSuchDevice {
        trace: String,
        device: String,
        devices: String,
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
        debug_assert!(
            self.buf.len() <= LINE_BYTES_MAX + 1,
            "a line of {} bytes read past the bound",
            self.buf.len()
        );
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
        let mut text = std::str::from_utf8(&self.buf)
            .map_err(|_| line_error("not UTF-8 text: a binary file?".to_string()))?;
        if self.number == 1 {
            // A byte-order mark, as some Windows tools write (MSR's traces came from Windows).
            text = text.strip_prefix('\u{feff}').unwrap_or(text);
        }
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
    /// Only this device's lines are replayed (`--trace-device`).
    device: Option<String>,
    fitter: Fitter,
    /// The request being handed out piece by piece, and its due time.
    current: Option<(Pieces, u64)>,
    /// The trace's time of its first request, and the latest time seen, in this pass.
    origin_ns: Option<u64>,
    latest_ns: u64,
    report: TraceReport,
    ended: bool,
    /// The trace's length in bytes, when known: how far through it the replay is.
    len_bytes: Option<u64>,
    loops: Loops,
    reopen: Option<Reopen>,
    /// The pass being read, from 0: the report counts the trace's lines in the first only.
    pass: u32,
    /// Requests read in this pass: a pass with none ends the replay (no endless empty loop).
    pass_requests: u64,
    /// Due times of this pass start here: the last due time of the pass before.
    pass_base_ns: u64,
    last_due_ns: u64,
    /// What fitting did in the first pass (the report's `fitted`), once that pass is over.
    first_pass_fitted: Option<Fitted>,
}

/// The first line of `lines` that is not blank or a comment; [`TraceError::Empty`] when
/// there is none.
fn first_said(lines: &mut Lines, name: &str) -> Result<String, TraceError> {
    let mut blank = 0;
    while let Some((_, line)) = lines.next(name)? {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            blank += 1;
            continue;
        }
        return Ok(line.to_string());
    }
    Err(TraceError::Empty {
        trace: name.to_string(),
        lines: lines.number,
        skipped: if blank > 0 {
            format!(", {blank} blank or comments")
        } else {
            String::new()
        },
        hint: String::new(),
    })
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
        let name = shown(name).into_owned();
        let mut lines = Lines {
            reader,
            buf: Vec::new(),
            number: 0,
            bytes: 0,
        };
        // The first line that says something decides the format (when not given); it is kept
        // and parsed as the trace's first line.
        let first = first_said(&mut lines, &name)?;
        let format = match spec.format {
            Some(f) => f,
            None => TraceFormat::guess(&first).ok_or_else(|| TraceError::UnknownFormat {
                trace: name.clone(),
                first: shown(&first.chars().take(120).collect::<String>()).into_owned(),
            })?,
        };
        // The first line is parsed again by `next`, as line `number` of the file.
        lines.number -= 1;
        Ok(TraceFeed {
            report: TraceReport::new(
                &name,
                format,
                spec,
                geometry.capacity_bytes,
                geometry.block_bytes,
            ),
            name,
            lines,
            format,
            state: LineState::default(),
            first: Some(first),
            mode: spec.mode,
            speed: spec.speed,
            device: spec.device.clone(),
            fitter: Fitter::new(geometry, spec.address, span_bytes),
            current: None,
            origin_ns: None,
            latest_ns: 0,
            ended: false,
            len_bytes: None,
            loops: Loops::Count(1),
            reopen: None,
            pass: 0,
            pass_requests: 0,
            pass_base_ns: 0,
            last_due_ns: 0,
            first_pass_fitted: None,
        })
    }

    /// Replays the trace `loops` times, reading it again from its start through `reopen` at
    /// each pass after the first. In timestamps mode each pass's times continue from the
    /// last due time of the pass before.
    pub fn with_loops(mut self, loops: Loops, reopen: Reopen) -> TraceFeed {
        self.loops = loops;
        self.reopen = Some(reopen);
        self.report.loops = match loops {
            Loops::Count(n) => Some(n.max(1)),
            Loops::UntilStopped => None,
        };
        self
    }

    /// The format being read (given, or guessed).
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// How requests are timed.
    pub fn mode(&self) -> ReplayMode {
        self.mode
    }

    /// The next request, or `None` at the trace's end (its last pass's).
    pub fn next_request(&mut self) -> Result<Option<TimedRequest>, TraceError> {
        loop {
            if let Some((pieces, due_ns)) = &mut self.current {
                if let Some(p) = self.fitter.next_piece(pieces) {
                    let request = Request {
                        op: p.op,
                        offset_bytes: p.offset_bytes,
                        len_bytes: p.len_bytes,
                    };
                    self.report.count_replayed(&request);
                    return Ok(Some(TimedRequest {
                        due_ns: *due_ns,
                        request,
                    }));
                }
                self.current = None;
            }
            if self.ended {
                return Ok(None);
            }
            match self.read_request()? {
                Some((number, raw)) => self.start(number, raw)?,
                None => {
                    if !self.next_pass()? {
                        self.ended = true;
                    }
                }
            }
        }
    }

    /// Times, counts and fits the request on line `number`, to hand out its pieces.
    fn start(&mut self, number: u64, raw: RawRequest) -> Result<(), TraceError> {
        let first_pass = self.pass == 0;
        let origin = *self.origin_ns.get_or_insert(raw.time_ns);
        let time = if raw.time_ns < self.latest_ns {
            // Traces from several CPUs can be out of order by a little: due no earlier
            // than the request before it.
            self.report.out_of_order += u64::from(first_pass);
            self.latest_ns
        } else {
            raw.time_ns
        };
        self.latest_ns = time;
        // `time >= latest >= origin`: the first request set both.
        debug_assert!(
            time >= origin,
            "request at {time} ns before the origin {origin} ns"
        );
        let since_ns = time - origin;
        let due_ns = self
            .due_ns(since_ns)
            .map_err(|reason| self.line_error(number, reason))?;
        debug_assert!(
            due_ns >= self.last_due_ns,
            "line {number} due at {due_ns} ns, before the request before it at {} ns",
            self.last_due_ns
        );
        self.last_due_ns = due_ns;
        let fit = self.fitter.fit(&raw);
        if first_pass {
            if fit == Fit::LongerThanDevice {
                self.report.skipped.count(Skipped::LongerThanDevice);
            } else {
                self.report
                    .count_trace(&raw, since_ns)
                    .map_err(|reason| self.line_error(number, reason))?;
            }
        }
        if let Fit::Pieces(pieces) = fit {
            self.current = Some((pieces, due_ns));
            self.pass_requests += 1;
        }
        Ok(())
    }

    /// When a request `since_ns` after the trace's first (in trace time) is due, from the
    /// replay's start: scaled by the speed, after the passes before. Only timestamps mode
    /// uses it, so only there is a time past [`DUE_NS_MAX`] an error.
    fn due_ns(&self, since_ns: u64) -> Result<u64, String> {
        let scaled = if self.speed == 1.0 {
            since_ns
        } else {
            // Saturating: a time past 2^64 ns becomes u64::MAX, refused below.
            (since_ns as f64 / self.speed) as u64
        };
        let due = self.pass_base_ns.saturating_add(scaled);
        if self.mode == ReplayMode::Timestamps && due > DUE_NS_MAX {
            return Err(format!(
                "due {since_ns} ns after the trace's first request{}{}: past the latest a \
                 request may be due, 2^62 ns (146 years); is the trace's clock right? \
                 (--replay-mode as-fast ignores the times)",
                if self.speed == 1.0 {
                    String::new()
                } else {
                    format!(" at --replay-speed {}", self.speed)
                },
                if self.pass > 0 {
                    format!(", in pass {} after {} ns", self.pass + 1, self.pass_base_ns)
                } else {
                    String::new()
                },
            ));
        }
        Ok(due)
    }

    fn line_error(&self, number: u64, reason: String) -> TraceError {
        TraceError::Line {
            trace: self.name.clone(),
            line: number,
            reason: shown(&reason).into_owned(),
        }
    }

    /// Begins the next pass over the trace, if the loops ask for one; `false` at the end.
    fn next_pass(&mut self) -> Result<bool, TraceError> {
        let more = match self.loops {
            Loops::Count(n) => self.pass + 1 < n,
            Loops::UntilStopped => true,
        };
        // A pass without a request would repeat forever without replaying anything.
        if !more || self.pass_requests == 0 {
            return Ok(false);
        }
        let Some(reopen) = &mut self.reopen else {
            return Ok(false);
        };
        let reader = reopen()?;
        if self.pass == 0 {
            self.first_pass_fitted = Some(self.fitter.counts);
        }
        self.lines = Lines {
            reader,
            buf: std::mem::take(&mut self.lines.buf),
            number: 0,
            bytes: 0,
        };
        self.state = LineState::default();
        self.origin_ns = None;
        self.latest_ns = 0;
        self.pass += 1;
        self.pass_requests = 0;
        self.pass_base_ns = self.last_due_ns;
        self.report.passes = self.pass + 1;
        Ok(true)
    }

    /// The next request line of the trace and its number, counting what it skips (in the
    /// first pass: later passes read the same lines again).
    fn read_request(&mut self) -> Result<Option<(u64, RawRequest)>, TraceError> {
        let first_pass = self.pass == 0;
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
            if first_pass {
                self.report.lines = number;
            }
            let (parsed, device) =
                parse_line(self.format, line, &mut self.state).map_err(|reason| {
                    TraceError::Line {
                        trace: self.name.clone(),
                        line: number,
                        reason: shown(&format!("{reason} (reading it as {})", self.format.name()))
                            .into_owned(),
                    }
                })?;
            if let Line::Request(_) | Line::Skip(_) = parsed {
                if let (true, Line::Request(_), Some(device)) = (first_pass, parsed, device) {
                    self.report.count_device(device);
                }
                // With a device picked, a line that names another, or none, is not its.
                if let Some(picked) = self.device.as_deref() {
                    if !device.is_some_and(|d| d.is(picked)) {
                        if first_pass {
                            self.report.skipped.count(Skipped::OtherDevice);
                        }
                        continue;
                    }
                }
            }
            match parsed {
                Line::Request(r) => return Ok(Some((number, r))),
                Line::Skip(kind) => {
                    if first_pass {
                        self.report.skipped.count(kind);
                    }
                }
                Line::Nothing => {}
                Line::End => return Ok(None),
            }
        }
    }

    /// Tells the feed the trace's length in bytes, so it can say how far through it is.
    pub fn set_len_bytes(&mut self, len_bytes: u64) {
        self.len_bytes = Some(len_bytes);
    }

    /// The fraction of the replay read so far (0.0 to 1.0), when the trace's length is known
    /// and the passes are counted.
    pub fn fraction_read(&self) -> Option<f64> {
        let Loops::Count(passes) = self.loops else {
            return None;
        };
        self.len_bytes.map(|len| {
            let this_pass = (self.lines.bytes as f64 / len.max(1) as f64).min(1.0);
            ((f64::from(self.pass) + this_pass) / f64::from(passes.max(1))).min(1.0)
        })
    }

    /// The summary so far; `finish` when the replay is over.
    pub fn report(&self) -> &TraceReport {
        &self.report
    }

    /// The summary of what was replayed: `stopped_early` when the run ended before the trace
    /// did. Fails if the trace held no request at all (of `--trace-device`, if given).
    pub fn finish(mut self, issued_late: u64) -> Result<TraceReport, TraceError> {
        self.report.fitted = self.first_pass_fitted.unwrap_or(self.fitter.counts);
        self.report.issued_late = issued_late;
        self.report.stopped_early = !self.ended || self.current.is_some();
        if self.report.requests == 0 {
            if let Some(device) = &self.device {
                if self.report.skipped.other_device > 0 {
                    return Err(TraceError::NoSuchDevice {
                        trace: self.name,
                        device: shown(device).into_owned(),
                        devices: self.report.devices_described(),
                    });
                }
            }
            return Err(TraceError::Empty {
                trace: self.name,
                lines: self.report.lines,
                skipped: self.report.skipped.describe(),
                hint: if self.len_bytes.is_none() {
                    " (not a regular file: a pipe can be read only once)".to_string()
                } else {
                    String::new()
                },
            });
        }
        self.report.finish();
        Ok(self.report)
    }
}

/// The largest end offset of any request in the trace (for `--trace-address scale`), read in
/// one pass: of `spec.device`'s requests when it names one.
pub fn trace_span(
    name: &str,
    reader: Box<dyn BufRead + Send>,
    spec: &TraceSpec,
) -> Result<u64, TraceError> {
    // A feed over a device as large as can be, so nothing is moved.
    let spec = TraceSpec {
        mode: ReplayMode::AsFast,
        speed: 1.0,
        address: AddressMode::Wrap,
        ..spec.clone()
    };
    let geometry = Geometry {
        capacity_bytes: u64::MAX,
        block_bytes: 1,
        max_transfer_bytes: u32::MAX,
    };
    let mut feed = TraceFeed::new(name, reader, &spec, geometry, 0)?;
    let mut span = 0u64;
    while let Some((_, raw)) = feed.read_request()? {
        // The parsers refuse a request whose end passes 2^64.
        debug_assert!(
            raw.offset_bytes.checked_add(raw.len_bytes).is_some(),
            "a parsed request ends past 2^64"
        );
        span = span.max(raw.offset_bytes + raw.len_bytes);
    }
    Ok(span)
}

#[cfg(test)]
mod tests;
