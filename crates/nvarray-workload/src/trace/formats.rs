//! One line of each trace format, parsed. Each parser reads a line into a [`Line`]: a request
//! (time, direction, byte offset and length as the trace gives them), something the replay
//! skips and counts (a trim, a flush, a file action, a block-layer event other than a queued
//! request), or the end of the requests (blkparse's closing summary); and the device or file
//! the line is about, when the format names one ([`DeviceName`]). A line that fits none is an
//! error whose text says what the format expects there. A number the line gives that would
//! overflow 64 bits once in bytes or nanoseconds is such an error too, never a wrapped or
//! saturated value.

use crate::spec::Direction;
use crate::trace::names::by_name;

/// The formats a trace may be in. See each variant for the layout accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// `blkparse` text in its default format (`blkparse -i DEV`, no `-f`):
    /// `MAJ,MIN CPU SEQ SECONDS.NANOSECONDS PID ACTION RWBS SECTOR + SECTORS [PROCESS]`.
    /// Only `Q` (queued) events are requests, as in fio's own blktrace replay: the request as
    /// the application asked for it, before merging and splitting. Other actions are skipped
    /// and counted; the per-CPU summary blkparse prints at the end closes the trace.
    Blkparse,
    /// fio's iolog version 2 (`fio version 2 iolog` first): `FILENAME ACTION [OFFSET LENGTH]`,
    /// times from `wait` actions (microseconds since the previous wait).
    #[serde(rename = "iolog2")]
    IologV2,
    /// fio's iolog version 3 (`fio version 3 iolog` first, what `fio --write_iolog` writes):
    /// `MICROSECONDS FILENAME ACTION [OFFSET LENGTH]`.
    #[serde(rename = "iolog3")]
    IologV3,
    /// MSR-Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, the
    /// timestamp in Windows filetime (100 ns units), `Type` `Read` or `Write`, offset and
    /// size in bytes.
    Msr,
    /// SNIA / FIU-style text (the FIU SRCMap and IODedup traces): whitespace-separated
    /// `NANOSECONDS PID PROCESS LBA SECTORS R|W [MAJOR MINOR [HASH]]`, LBA and size in 512-byte
    /// sectors. The trailing fields are optional and not read.
    Fiu,
    /// nvarray's own CSV: a header line `time_ns,op,offset_bytes,len_bytes`, then one request
    /// per line, `op` `R`/`W` (or `read`/`write`). The simplest way to bring a trace of your
    /// own: convert it to this.
    Csv,
}

impl TraceFormat {
    /// Every format, by the name `--trace-format` takes.
    pub const ALL: [(&'static str, TraceFormat); 6] = [
        ("blkparse", TraceFormat::Blkparse),
        ("iolog2", TraceFormat::IologV2),
        ("iolog3", TraceFormat::IologV3),
        ("msr", TraceFormat::Msr),
        ("fiu", TraceFormat::Fiu),
        ("csv", TraceFormat::Csv),
    ];

    /// The format named `name` (one of [`TraceFormat::ALL`]).
    pub fn from_name(name: &str) -> Option<TraceFormat> {
        by_name(&Self::ALL, name)
    }

    /// The name `--trace-format` takes for this format.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|&&(_, f)| f == self)
            .map(|&(n, _)| n)
            .expect("every format is in ALL")
    }

    /// The format a trace is in, judged from its first line that is not blank or a comment:
    /// a version line, a header, or a line that parses in exactly one format's layout.
    pub fn guess(first: &str) -> Option<TraceFormat> {
        let line = first.trim();
        if line == IOLOG_V2_HEADER {
            return Some(TraceFormat::IologV2);
        }
        if line == IOLOG_V3_HEADER {
            return Some(TraceFormat::IologV3);
        }
        if line.eq_ignore_ascii_case(CSV_HEADER) {
            return Some(TraceFormat::Csv);
        }
        // MSR's published files have no header; some copies carry one.
        if line
            .to_ascii_lowercase()
            .starts_with("timestamp,hostname,disknumber")
        {
            return Some(TraceFormat::Msr);
        }
        [TraceFormat::Blkparse, TraceFormat::Msr, TraceFormat::Fiu]
            .into_iter()
            .find(|&f| {
                matches!(
                    parse_line(f, line, &mut LineState::default()),
                    Ok((Line::Request(_), _))
                )
            })
    }
}

/// The first line of a fio iolog of version 2.
pub const IOLOG_V2_HEADER: &str = "fio version 2 iolog";
/// The first line of a fio iolog of version 3.
pub const IOLOG_V3_HEADER: &str = "fio version 3 iolog";
/// The header line of nvarray's own CSV.
pub const CSV_HEADER: &str = "time_ns,op,offset_bytes,len_bytes";

/// What one line of a trace holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Request(RawRequest),
    Skip(Skipped),
    /// Blank, a comment, or a header: nothing to count.
    Nothing,
    /// blkparse's summary began: no request follows.
    End,
}

/// A request as the trace gives it, before it is fitted to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawRequest {
    /// The trace's own clock, in nanoseconds (absolute, or from the trace's start).
    pub(crate) time_ns: u64,
    pub(crate) op: Direction,
    pub(crate) offset_bytes: u64,
    pub(crate) len_bytes: u64,
}

/// Lines the replay passes over, by kind (counted in the trace report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Skipped {
    /// A trim or discard.
    Trim,
    /// A flush, sync or datasync.
    Flush,
    /// A request of length 0.
    Empty,
    /// Not a request: a file action (add, open, close), or a block-layer event other than a
    /// queued request (issue, complete, merge, remap, plug, a message).
    Other,
    /// A line of a device or file other than the one replayed (`--trace-device`).
    OtherDevice,
    /// A request longer than the whole device once aligned to its blocks.
    LongerThanDevice,
}

/// The device or file a line of the trace is about, as the trace names it: blkparse's
/// `MAJ,MIN`, an iolog's file name, MSR-Cambridge's `Hostname,DiskNumber`, the FIU traces'
/// `MAJOR,MINOR` (when the line has them). Borrowed from the line: a trace has millions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceName<'a> {
    first: &'a str,
    /// The second part of a name in two fields (MSR's disk number, FIU's minor), or "".
    second: &'a str,
}

impl<'a> DeviceName<'a> {
    fn one(name: &'a str) -> Option<DeviceName<'a>> {
        Some(DeviceName {
            first: name,
            second: "",
        })
    }

    fn two(first: &'a str, second: &'a str) -> Option<DeviceName<'a>> {
        Some(DeviceName { first, second })
    }

    /// Whether this is the device `name` (as [`DeviceName::to_string`] spells it).
    pub(crate) fn is(&self, name: &str) -> bool {
        if self.second.is_empty() {
            return name == self.first;
        }
        name.len() == self.first.len() + 1 + self.second.len()
            && name.starts_with(self.first)
            && name[self.first.len()..].starts_with(',')
            && name.ends_with(self.second)
    }
}

impl std::fmt::Display for DeviceName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.second.is_empty() {
            f.write_str(self.first)
        } else {
            write!(f, "{},{}", self.first, self.second)
        }
    }
}

/// A parsed line and the device it names, if any.
pub(crate) type Parsed<'a> = (Line, Option<DeviceName<'a>>);

/// What a parser carries from one line to the next (fio iolog v2's clock is the sum of its
/// waits).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LineState {
    pub(crate) iolog_v2_clock_ns: u64,
}

/// Bytes in a sector of blkparse and the FIU traces.
const SECTOR_BYTES: u64 = 512;

/// Parses one line of `format`. `Err` says what the format expects, without the line number
/// (the reader adds it).
pub(crate) fn parse_line<'a>(
    format: TraceFormat,
    line: &'a str,
    state: &mut LineState,
) -> Result<Parsed<'a>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok((Line::Nothing, None));
    }
    match format {
        TraceFormat::Blkparse => blkparse(line),
        TraceFormat::IologV2 => iolog(line, false, state),
        TraceFormat::IologV3 => iolog(line, true, state),
        TraceFormat::Msr => msr(line),
        TraceFormat::Fiu => fiu(line),
        TraceFormat::Csv => csv(line),
    }
}

/// The first `N` fields of `line` split by `split`, trimmed, without allocating (a trace has
/// millions of lines), and how many fields there were in all (at most `N + 1` counted).
fn fields<'a, const N: usize>(parts: impl Iterator<Item = &'a str>) -> ([&'a str; N], usize) {
    let mut out = [""; N];
    let mut count = 0;
    for part in parts {
        if count < N {
            out[count] = part.trim();
        }
        count += 1;
        if count > N {
            break;
        }
    }
    (out, count)
}

/// A whole number field; the error names the field and ends with the format's `layout`.
fn number(field: Option<&str>, what: &str, layout: &str) -> Result<u64, String> {
    let text = field.ok_or_else(|| format!("missing {what}; {layout}"))?;
    text.parse()
        .map_err(|_| format!("{what} '{text}' is not a whole number; {layout}"))
}

/// Refuses a line of `count` fields outside `expected`.
fn check_fields(
    count: usize,
    expected: std::ops::RangeInclusive<usize>,
    layout: &str,
) -> Result<(), String> {
    if expected.contains(&count) {
        return Ok(());
    }
    let (lo, hi) = (*expected.start(), *expected.end());
    let wanted = if lo == hi {
        lo.to_string()
    } else {
        format!("{lo} to {hi}")
    };
    let found = if count > hi {
        format!("more than {hi}")
    } else {
        count.to_string()
    };
    Err(format!("{found} fields, not {wanted}; {layout}"))
}

fn blkparse(line: &str) -> Result<Parsed<'_>, String> {
    const LAYOUT: &str = "expected blkparse's default layout: MAJ,MIN CPU SEQ SECONDS.NANOSECONDS \
                          PID ACTION RWBS SECTOR + SECTORS [PROCESS]";
    // The summary blkparse prints after the events: "CPU0 (8,0):", "Total (8,0):".
    if line.starts_with("CPU") || line.starts_with("Total (") {
        return Ok((Line::End, None));
    }
    let mut f = line.split_whitespace();
    let device = f.next().unwrap_or_default();
    if !device
        .split_once(',')
        .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok())
    {
        return Err(format!("device '{device}' is not MAJ,MIN; {LAYOUT}"));
    }
    let name = DeviceName::one(device);
    number(f.next(), "CPU", LAYOUT)?;
    number(f.next(), "sequence number", LAYOUT)?;
    let time = f.next().ok_or_else(|| format!("missing time; {LAYOUT}"))?;
    let time_ns = seconds_to_ns(time)
        .ok_or_else(|| format!("time '{time}' is not SECONDS.NANOSECONDS; {LAYOUT}"))?;
    number(f.next(), "PID", LAYOUT)?;
    let action = f
        .next()
        .ok_or_else(|| format!("missing action; {LAYOUT}"))?;
    if action != "Q" {
        return Ok((Line::Skip(Skipped::Other), name));
    }
    let rwbs = f.next().ok_or_else(|| format!("missing RWBS; {LAYOUT}"))?;
    if rwbs.contains('D') {
        return Ok((Line::Skip(Skipped::Trim), name));
    }
    let op = if rwbs.contains('W') {
        Direction::Write
    } else if rwbs.contains('R') {
        Direction::Read
    } else if rwbs.contains('F') || rwbs.contains('N') {
        // A flush alone ("F", "FN") or a request without data ("N").
        return Ok((Line::Skip(Skipped::Flush), name));
    } else {
        return Err(format!("RWBS '{rwbs}' has none of R, W, D, F, N; {LAYOUT}"));
    };
    let sector = number(f.next(), "sector", LAYOUT)?;
    if f.next() != Some("+") {
        return Err(format!("expected '+' after the sector; {LAYOUT}"));
    }
    let sectors = number(f.next(), "sector count", LAYOUT)?;
    Ok((request(time_ns, op, sector, sectors, SECTOR_BYTES)?, name))
}

/// `SECONDS.FRACTION` (up to nine digits) to nanoseconds.
fn seconds_to_ns(text: &str) -> Option<u64> {
    let (s, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let s: u64 = s.parse().ok()?;
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    s.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// A request in `unit`-byte units, its length 0 skipped, its end checked against `u64`.
fn request(time_ns: u64, op: Direction, at: u64, len: u64, unit: u64) -> Result<Line, String> {
    if len == 0 {
        return Ok(Line::Skip(Skipped::Empty));
    }
    let (offset_bytes, len_bytes) = match (at.checked_mul(unit), len.checked_mul(unit)) {
        (Some(o), Some(l)) if o.checked_add(l).is_some() => (o, l),
        _ => {
            return Err(format!(
                "offset {at} + length {len} (x {unit} bytes) overflows 64 bits"
            ))
        }
    };
    Ok(Line::Request(RawRequest {
        time_ns,
        op,
        offset_bytes,
        len_bytes,
    }))
}

fn iolog<'a>(line: &'a str, v3: bool, state: &mut LineState) -> Result<Parsed<'a>, String> {
    let layout = if v3 {
        "expected fio iolog v3: MICROSECONDS FILENAME ACTION [OFFSET LENGTH]"
    } else {
        "expected fio iolog v2: FILENAME ACTION [OFFSET LENGTH]"
    };
    if line == IOLOG_V2_HEADER || line == IOLOG_V3_HEADER {
        return Ok((Line::Nothing, None));
    }
    let mut f = line.split_whitespace();
    let time_ns = if v3 {
        let us = number(f.next(), "timestamp", layout)?;
        us.checked_mul(1_000)
            .ok_or_else(|| format!("timestamp {us} us overflows; {layout}"))?
    } else {
        state.iolog_v2_clock_ns
    };
    let file = f
        .next()
        .ok_or_else(|| format!("missing file name; {layout}"))?;
    let name = DeviceName::one(file);
    let action = f
        .next()
        .ok_or_else(|| format!("missing action; {layout}"))?;
    let op = match action {
        "read" => Direction::Read,
        "write" => Direction::Write,
        "add" | "open" | "close" => return Ok((Line::Skip(Skipped::Other), name)),
        "sync" | "datasync" => return Ok((Line::Skip(Skipped::Flush), name)),
        "trim" => return Ok((Line::Skip(Skipped::Trim), name)),
        "wait" if !v3 => {
            // "Wait for OFFSET microseconds. Everything below 100 is discarded" (fio's HOWTO).
            let us = number(f.next(), "wait time", layout)?;
            if us >= 100 {
                state.iolog_v2_clock_ns = us
                    .checked_mul(1_000)
                    .and_then(|ns| state.iolog_v2_clock_ns.checked_add(ns))
                    .ok_or_else(|| {
                        format!(
                            "wait {us} us takes the trace's clock past 2^64 ns (584 years) \
                             after {} ns of waits; {layout}",
                            state.iolog_v2_clock_ns
                        )
                    })?;
            }
            return Ok((Line::Nothing, name));
        }
        other => {
            return Err(format!(
                "unknown action '{other}' (read, write, trim, sync, datasync, add, open, close{}); {layout}",
                if v3 { "" } else { ", wait" }
            ))
        }
    };
    let offset = number(f.next(), "offset", layout)?;
    let len = number(f.next(), "length", layout)?;
    Ok((request(time_ns, op, offset, len, 1)?, name))
}

fn msr(line: &str) -> Result<Parsed<'_>, String> {
    const LAYOUT: &str =
        "expected MSR-Cambridge CSV: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";
    if line
        .get(..10)
        .is_some_and(|head| head.eq_ignore_ascii_case("timestamp,"))
    {
        return Ok((Line::Nothing, None));
    }
    let (f, count) = fields::<7>(line.split(','));
    check_fields(count, 7..=7, LAYOUT)?;
    let ticks = number(Some(f[0]), "timestamp", LAYOUT)?;
    let op = match f[3].to_ascii_lowercase().as_str() {
        "read" => Direction::Read,
        "write" => Direction::Write,
        _ => return Err(format!("type '{}' is not Read or Write; {LAYOUT}", f[3])),
    };
    let offset = number(Some(f[4]), "offset", LAYOUT)?;
    let len = number(Some(f[5]), "size", LAYOUT)?;
    // Windows filetime: 100 ns units.
    let time_ns = ticks
        .checked_mul(100)
        .ok_or_else(|| format!("timestamp {ticks} x 100 ns overflows 64 bits; {LAYOUT}"))?;
    Ok((
        request(time_ns, op, offset, len, 1)?,
        DeviceName::two(f[1], f[2]),
    ))
}

fn fiu(line: &str) -> Result<Parsed<'_>, String> {
    const LAYOUT: &str = "expected SNIA/FIU text: NANOSECONDS PID PROCESS LBA SECTORS R|W \
                          [MAJOR MINOR [HASH]]";
    let (f, count) = fields::<9>(line.split_whitespace());
    check_fields(count, 6..=9, LAYOUT)?;
    let time_ns = number(Some(f[0]), "timestamp", LAYOUT)?;
    number(Some(f[1]), "PID", LAYOUT)?;
    let lba = number(Some(f[3]), "LBA", LAYOUT)?;
    let sectors = number(Some(f[4]), "size", LAYOUT)?;
    let op = match f[5] {
        "R" | "r" => Direction::Read,
        "W" | "w" => Direction::Write,
        other => return Err(format!("direction '{other}' is not R or W; {LAYOUT}")),
    };
    // MAJOR MINOR, when the line has them, name the device.
    let name = if count >= 8 {
        DeviceName::two(f[6], f[7])
    } else {
        None
    };
    Ok((request(time_ns, op, lba, sectors, SECTOR_BYTES)?, name))
}

fn csv(line: &str) -> Result<Parsed<'_>, String> {
    const LAYOUT: &str = "expected nvarray CSV: time_ns,op,offset_bytes,len_bytes (op R or W)";
    if line.eq_ignore_ascii_case(CSV_HEADER) {
        return Ok((Line::Nothing, None));
    }
    let (f, count) = fields::<4>(line.split(','));
    check_fields(count, 4..=4, LAYOUT)?;
    let time_ns = number(Some(f[0]), "time_ns", LAYOUT)?;
    let op = match f[1].to_ascii_lowercase().as_str() {
        "r" | "read" => Direction::Read,
        "w" | "write" => Direction::Write,
        _ => return Err(format!("op '{}' is not R or W; {LAYOUT}", f[1])),
    };
    let offset = number(Some(f[2]), "offset_bytes", LAYOUT)?;
    let len = number(Some(f[3]), "len_bytes", LAYOUT)?;
    // The format names no device: every request is of the one device.
    Ok((request(time_ns, op, offset, len, 1)?, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(format: TraceFormat, line: &str) -> Result<Line, String> {
        parse_line(format, line, &mut LineState::default()).map(|(l, _)| l)
    }

    fn req(time_ns: u64, op: Direction, offset_bytes: u64, len_bytes: u64) -> Line {
        Line::Request(RawRequest {
            time_ns,
            op,
            offset_bytes,
            len_bytes,
        })
    }

    #[test]
    fn blkparse_reads_queued_requests_in_sectors_and_skips_the_rest() {
        let b = TraceFormat::Blkparse;
        assert_eq!(
            one(
                b,
                "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]"
            ),
            Ok(req(0, Direction::Write, 223_490 * 512, 4096))
        );
        assert_eq!(
            one(
                b,
                "  8,16   0       12     1.250000001  4162  Q  RS 16 + 256 [fio]"
            ),
            Ok(req(1_250_000_001, Direction::Read, 8192, 131_072))
        );
        assert_eq!(
            one(
                b,
                "  8,0    3        2     0.000001000   697  D   W 223490 + 8 [kjournald]"
            ),
            Ok(Line::Skip(Skipped::Other))
        );
        assert_eq!(
            one(
                b,
                "  8,0    1        5     0.5   100  Q  DS 0 + 2048 [fstrim]"
            ),
            Ok(Line::Skip(Skipped::Trim))
        );
        assert_eq!(
            one(b, "  8,0    1        6     0.6   100  Q  FN [kworker]"),
            Ok(Line::Skip(Skipped::Flush))
        );
        assert_eq!(
            one(
                b,
                "  8,0    0        0     0.000000000     0  m   N cfq697 alloced"
            ),
            Ok(Line::Skip(Skipped::Other))
        );
        assert_eq!(one(b, "CPU0 (8,0):"), Ok(Line::End));
        let e = one(b, "  8,0    3        1     0.0000000001   697  Q   W 1 + 8").unwrap_err();
        assert!(e.contains("SECONDS.NANOSECONDS"), "{e}");
        let e = one(b, "  8,0    3        1     0.1   697  Q   W 1 - 8").unwrap_err();
        assert!(e.contains("'+'"), "{e}");
        let e = one(b, "hello world").unwrap_err();
        assert!(e.contains("MAJ,MIN"), "{e}");
    }

    #[test]
    fn iolog_v2_times_are_the_sum_of_its_waits_and_v3_times_are_microseconds() {
        let mut state = LineState::default();
        let v2 = TraceFormat::IologV2;
        let mut line = |l: &str| parse_line(v2, l, &mut state).map(|(l, _)| l);
        assert_eq!(line(IOLOG_V2_HEADER), Ok(Line::Nothing));
        assert_eq!(line("/dev/sda add"), Ok(Line::Skip(Skipped::Other)));
        assert_eq!(
            line("/dev/sda read 4096 512"),
            Ok(req(0, Direction::Read, 4096, 512))
        );
        assert_eq!(
            line("/dev/sda wait 50 0"),
            Ok(Line::Nothing),
            "below 100 us: discarded"
        );
        assert_eq!(line("/dev/sda wait 250 0"), Ok(Line::Nothing));
        assert_eq!(
            line("/dev/sda write 0 8192"),
            Ok(req(250_000, Direction::Write, 0, 8192))
        );
        assert_eq!(line("/dev/sda trim 0 8192"), Ok(Line::Skip(Skipped::Trim)));
        assert_eq!(line("/dev/sda sync 0 0"), Ok(Line::Skip(Skipped::Flush)));
        let e = line("/dev/sda jump 0 1").unwrap_err();
        assert!(e.contains("unknown action 'jump'"), "{e}");
        let v3 = TraceFormat::IologV3;
        assert_eq!(
            one(v3, "125 /tmp/f read 61440 4096"),
            Ok(req(125_000, Direction::Read, 61_440, 4096))
        );
        assert_eq!(one(v3, "21 /tmp/f add"), Ok(Line::Skip(Skipped::Other)));
        assert!(one(v3, "125 /tmp/f wait 100 0").is_err(), "v3 has no wait");
        assert!(one(v3, "x /tmp/f read 0 1")
            .unwrap_err()
            .contains("timestamp 'x'"));
    }

    #[test]
    fn msr_fiu_and_csv_read_their_units() {
        assert_eq!(
            one(
                TraceFormat::Msr,
                "128166372003061629,hm,1,Read,3154152960,4096,1061"
            ),
            Ok(req(
                12_816_637_200_306_162_900,
                Direction::Read,
                3_154_152_960,
                4096
            ))
        );
        assert!(one(TraceFormat::Msr, "1,hm,1,Erase,0,4096,1")
            .unwrap_err()
            .contains("'Erase'"));
        assert!(one(TraceFormat::Msr, "1,hm,1,Read,0,4096")
            .unwrap_err()
            .contains("6 fields"));
        assert_eq!(
            one(
                TraceFormat::Fiu,
                "89966527446031 4838 nfsd 1052928 8 W 6 0 c1cba2e6"
            ),
            Ok(req(
                89_966_527_446_031,
                Direction::Write,
                1_052_928 * 512,
                4096
            ))
        );
        assert_eq!(
            one(TraceFormat::Fiu, "5 1 cat 2 1 R"),
            Ok(req(5, Direction::Read, 1024, 512))
        );
        assert!(one(TraceFormat::Fiu, "5 1 cat 2 1 X")
            .unwrap_err()
            .contains("'X'"));
        assert_eq!(one(TraceFormat::Csv, CSV_HEADER), Ok(Line::Nothing));
        assert_eq!(
            one(TraceFormat::Csv, "1000,W,4096,512"),
            Ok(req(1000, Direction::Write, 4096, 512))
        );
        assert_eq!(
            one(TraceFormat::Csv, "0,read,0,0"),
            Ok(Line::Skip(Skipped::Empty))
        );
        assert!(one(TraceFormat::Csv, "0,R,-1,512")
            .unwrap_err()
            .contains("offset_bytes '-1'"));
        assert!(one(TraceFormat::Csv, "0,R,18446744073709551615,512")
            .unwrap_err()
            .contains("overflows"));
    }

    #[test]
    fn the_format_is_guessed_from_the_first_line() {
        let g = TraceFormat::guess;
        assert_eq!(g(IOLOG_V2_HEADER), Some(TraceFormat::IologV2));
        assert_eq!(g(IOLOG_V3_HEADER), Some(TraceFormat::IologV3));
        assert_eq!(
            g("TIME_NS,OP,OFFSET_BYTES,LEN_BYTES"),
            Some(TraceFormat::Csv)
        );
        assert_eq!(
            g("  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]"),
            Some(TraceFormat::Blkparse)
        );
        assert_eq!(
            g("128166372003061629,hm,1,Read,3154152960,4096,1061"),
            Some(TraceFormat::Msr)
        );
        assert_eq!(
            g("89966527446031 4838 nfsd 1052928 8 W 6 0"),
            Some(TraceFormat::Fiu)
        );
        assert_eq!(g("something else entirely"), None);
        for (name, f) in TraceFormat::ALL {
            assert_eq!(TraceFormat::from_name(name), Some(f));
            assert_eq!(f.name(), name);
        }
    }

    /// Checks, line by line, the device each format's line names (`None`: none).
    fn check_devices(format: TraceFormat, cases: &[(&str, Option<&str>)]) {
        for &(line, expected) in cases {
            let (_, device) = parse_line(format, line, &mut LineState::default())
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(
                device.map(|d| d.to_string()).as_deref(),
                expected,
                "{format:?}: {line}"
            );
            if let (Some(d), Some(name)) = (device, expected) {
                assert!(d.is(name), "{name}");
                assert!(!d.is(&format!("{name}0")) && !d.is("8,1"), "{name}");
            }
        }
    }

    #[test]
    fn each_line_names_the_device_or_file_it_is_about() {
        check_devices(
            TraceFormat::Blkparse,
            &[
                (
                    "  8,16   0   12   1.25  4162  Q  RS 16 + 256 [fio]",
                    Some("8,16"),
                ),
                ("  8,0    1    6   0.6    100  Q  FN [kworker]", Some("8,0")),
                ("CPU0 (8,0):", None),
            ],
        );
        check_devices(
            TraceFormat::IologV2,
            &[
                ("/tmp/j.0.1 read 0 4096", Some("/tmp/j.0.1")),
                ("/tmp/j.0.0 wait 250 0", Some("/tmp/j.0.0")),
                (IOLOG_V2_HEADER, None),
            ],
        );
        check_devices(
            TraceFormat::IologV3,
            &[("5 /dev/sdb write 0 512", Some("/dev/sdb"))],
        );
        check_devices(
            TraceFormat::Msr,
            &[
                ("128166372003061629,hm,1,Read,0,4096,1061", Some("hm,1")),
                (
                    "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
                    None,
                ),
            ],
        );
        check_devices(
            TraceFormat::Fiu,
            &[
                ("5 1 cat 2 1 R 8 16 c1cba2e6", Some("8,16")),
                ("5 1 cat 2 1 R", None),
            ],
        );
        check_devices(TraceFormat::Csv, &[("0,R,0,512", None)]);
    }

    /// Checks that each line is refused with an error containing `expected`.
    fn check_refused(format: TraceFormat, cases: &[(&str, &str)]) {
        let mut state = LineState::default();
        for &(line, expected) in cases {
            let e = parse_line(format, line, &mut state).unwrap_err();
            assert!(e.contains(expected), "{line}: {e}");
        }
    }

    #[test]
    fn times_and_offsets_past_64_bits_are_errors_not_wrapped_or_saturated() {
        check_refused(
            TraceFormat::Msr,
            &[(
                "184467440737095517,hm,0,Read,0,4096,1",
                "timestamp 184467440737095517 x 100 ns overflows",
            )],
        );
        // The second wait takes the clock past 2^64 ns.
        let mut state = LineState::default();
        let v2 = TraceFormat::IologV2;
        assert!(parse_line(v2, "/f wait 18446744073709551 0", &mut state).is_ok());
        let e = parse_line(v2, "/f wait 18446744073709551 0", &mut state).unwrap_err();
        assert!(e.contains("past 2^64 ns"), "{e}");
        check_refused(
            TraceFormat::IologV3,
            &[("18446744073709552 /f read 0 1", "overflows")],
        );
        check_refused(
            TraceFormat::Blkparse,
            &[(
                "8,0 0 1 18446744074.0 1 Q R 0 + 8",
                "not SECONDS.NANOSECONDS",
            )],
        );
        check_refused(
            TraceFormat::Fiu,
            &[("0 1 p 36028797018963968 1 R", "overflows 64 bits")],
        );
        check_refused(
            TraceFormat::Csv,
            &[("0,R,18446744073709551615,1", "overflows 64 bits")],
        );
    }
}
