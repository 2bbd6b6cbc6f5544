//! The feed over small traces generated in each format (no trace is downloaded).

use super::*;
use crate::spec::Direction;

const GEOMETRY: Geometry = Geometry {
    capacity_bytes: 1 << 30,
    block_bytes: 512,
    max_transfer_bytes: 128 << 10,
};

fn spec(format: Option<TraceFormat>, mode: ReplayMode, speed: f64) -> TraceSpec {
    TraceSpec {
        path: "t".into(),
        format,
        mode,
        speed,
        address: AddressMode::Wrap,
        device: None,
    }
}

fn feed(text: &str, spec: &TraceSpec) -> Result<TraceFeed, TraceError> {
    let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    TraceFeed::new("t", reader, spec, GEOMETRY, 0)
}

/// A replayed request: due, op, offset, len.
type Replayed = (u64, Direction, u64, u32);

/// Every request of `text`, and the feed's report.
fn replay(text: &str, spec: &TraceSpec) -> Result<(Vec<Replayed>, TraceReport), TraceError> {
    let mut f = feed(text, spec)?;
    let mut out = Vec::new();
    while let Some(t) = f.next_request()? {
        out.push((
            t.due_ns,
            t.request.op,
            t.request.offset_bytes,
            t.request.len_bytes,
        ));
    }
    Ok((out, f.finish(0)?))
}

const R: Direction = Direction::Read;
const W: Direction = Direction::Write;

/// The same three requests in every format: a 4 KiB read at 8 KiB at time 1 s, a 512 B
/// write at 0 at 1.5 s, a 64 KiB read at 1 MiB at 3 s.
fn the_same_trace_in(format: TraceFormat) -> String {
    match format {
        TraceFormat::Blkparse => "\
  8,0    0        1     1.000000000   697  Q   R 16 + 8 [app]
  8,0    0        2     1.000000500   697  G   R 16 + 8 [app]
  8,0    0        3     1.000001000   697  D   R 16 + 8 [app]
  8,0    1        4     1.500000000   698  Q  WS 0 + 1 [app]
  8,0    1        5     2.000000000   698  Q  FN [kworker]
  8,0    0        6     3.000000000   697  Q   R 2048 + 128 [app]
  8,0    0        7     3.000100000     0  C   R 2048 + 128 [0]
CPU0 (8,0):
 Reads Queued:           2,       68KiB\n"
            .to_string(),
        TraceFormat::IologV2 => "\
fio version 2 iolog
/dev/sdb add
/dev/sdb open
/dev/sdb wait 1000000 0
/dev/sdb read 8192 4096
/dev/sdb wait 500000 0
/dev/sdb write 0 512
/dev/sdb wait 1500000 0
/dev/sdb read 1048576 65536
/dev/sdb close\n"
            .to_string(),
        TraceFormat::IologV3 => "\
fio version 3 iolog
10 /dev/sdb add
20 /dev/sdb open
1000000 /dev/sdb read 8192 4096
1500000 /dev/sdb write 0 512
3000000 /dev/sdb trim 0 4096
3000000 /dev/sdb read 1048576 65536
3000010 /dev/sdb close\n"
            .to_string(),
        TraceFormat::Msr => "\
128166372010000000,hm,1,Read,8192,4096,100
128166372015000000,hm,1,Write,0,512,100
128166372030000000,hm,1,Read,1048576,65536,100\n"
            .to_string(),
        TraceFormat::Fiu => "\
1000000000 4838 nfsd 16 8 R 6 0 c1cba2e6
1500000000 4838 nfsd 0 1 W 6 0 deadbeef
3000000000 4838 nfsd 2048 128 R 6 0\n"
            .to_string(),
        TraceFormat::Csv => format!(
            "{CSV_HEADER}\n# a comment\n1000000000,R,8192,4096\n\n1500000000,W,0,512\n3000000000,read,1048576,65536\n"
        ),
    }
}

#[test]
fn every_format_gives_the_same_requests_at_the_same_times() {
    for (name, format) in TraceFormat::ALL {
        let text = the_same_trace_in(format);
        for given in [Some(format), None] {
            let (requests, report) = replay(&text, &spec(given, ReplayMode::Timestamps, 1.0))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                requests,
                [
                    (0, R, 8192, 4096),
                    (500_000_000, W, 0, 512),
                    (2_000_000_000, R, 1 << 20, 65_536)
                ],
                "{name} (format given: {})",
                given.is_some()
            );
            assert_eq!(report.format, format, "{name} guessed");
            assert_eq!(
                (report.requests, report.reads, report.writes),
                (3, 2, 1),
                "{name}"
            );
            assert_eq!(report.duration_ns, 2_000_000_000, "{name}");
            assert!((report.read_fraction - 2.0 / 3.0).abs() < 1e-12);
            // Exactly the bytes touched: the 512-byte write counts 512 bytes, not a granule.
            assert_eq!(report.footprint_bytes, 4096 + 512 + 65_536, "{name}");
            assert!(report.footprint_exact, "{name}");
            assert!(!report.stopped_early);
        }
    }
}

#[test]
fn what_is_not_a_request_is_skipped_and_counted() {
    let (_, b) = replay(
        &the_same_trace_in(TraceFormat::Blkparse),
        &spec(None, ReplayMode::AsFast, 1.0),
    )
    .unwrap();
    assert_eq!(
        (b.skipped.flush, b.skipped.other),
        (1, 3),
        "G, D and C events; the flush"
    );
    let (_, v3) = replay(
        &the_same_trace_in(TraceFormat::IologV3),
        &spec(None, ReplayMode::AsFast, 1.0),
    )
    .unwrap();
    assert_eq!((v3.skipped.trim, v3.skipped.other), (1, 3));
    assert_eq!(v3.lines, 8);
}

#[test]
fn replay_speed_divides_the_trace_time() {
    let text = the_same_trace_in(TraceFormat::Csv);
    let (fast, _) = replay(&text, &spec(None, ReplayMode::Timestamps, 4.0)).unwrap();
    assert_eq!(
        fast.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 125_000_000, 500_000_000]
    );
    let (slow, _) = replay(&text, &spec(None, ReplayMode::Timestamps, 0.5)).unwrap();
    assert_eq!(slow[2].0, 4_000_000_000);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e9] {
        let e = feed(&text, &spec(None, ReplayMode::AsFast, bad))
            .err()
            .unwrap();
        assert!(e.to_string().contains("--replay-speed"), "{e}");
    }
}

#[test]
fn a_malformed_line_is_an_error_naming_its_number_and_the_layout() {
    let text = format!("{CSV_HEADER}\n0,R,0,512\n1,R,oops,512\n");
    let mut f = feed(&text, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
    assert!(f.next_request().unwrap().is_some());
    let e = f.next_request().unwrap_err().to_string();
    assert!(e.starts_with("t line 3: offset_bytes 'oops'"), "{e}");
    assert!(e.contains("time_ns,op,offset_bytes,len_bytes"), "{e}");
    // A wrong format given by hand fails on the first line (here the header), saying which
    // format it read the line as.
    let e = feed(
        &text,
        &spec(Some(TraceFormat::Msr), ReplayMode::AsFast, 1.0),
    )
    .unwrap()
    .next_request()
    .unwrap_err()
    .to_string();
    assert!(e.contains("t line 1") && e.contains("as msr"), "{e}");
}

#[test]
fn an_unknown_an_empty_and_a_binary_trace_are_refused_clearly() {
    let e = feed("hello there\n", &spec(None, ReplayMode::AsFast, 1.0))
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("cannot tell the format")
            && e.to_string().contains("--trace-format")
    );
    let e = feed("\n# nothing\n", &spec(None, ReplayMode::AsFast, 1.0))
        .err()
        .unwrap();
    assert!(matches!(e, TraceError::Empty { lines: 2, .. }), "{e}");
    let e = replay(
        "fio version 3 iolog\n1 /f add\n2 /f open\n",
        &spec(None, ReplayMode::AsFast, 1.0),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("no requests") && e.to_string().contains("2 non-request line"),
        "{e}"
    );
    let binary = [0xffu8, 0xfe, 0x00, b'\n'];
    let reader = Box::new(std::io::Cursor::new(binary.to_vec()));
    let e = TraceFeed::new(
        "t",
        reader,
        &spec(None, ReplayMode::AsFast, 1.0),
        GEOMETRY,
        0,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("line 1: not UTF-8"), "{e}");
    let long = "1".repeat(LINE_BYTES_MAX + 10);
    let e = feed(&long, &spec(None, ReplayMode::AsFast, 1.0))
        .err()
        .unwrap();
    assert!(e.to_string().contains("longer than"), "{e}");
}

#[test]
fn out_of_order_requests_are_due_with_the_one_before_them() {
    let text = format!("{CSV_HEADER}\n100,R,0,512\n300,R,0,512\n200,R,0,512\n400,R,0,512\n");
    let (r, report) = replay(&text, &spec(None, ReplayMode::Timestamps, 1.0)).unwrap();
    assert_eq!(
        r.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 200, 200, 300]
    );
    assert_eq!(report.out_of_order, 1);
}

#[test]
fn fitting_is_counted_and_split_pieces_share_their_time() {
    let text = format!(
        "{CSV_HEADER}\n0,W,100,100\n10,R,{},4096\n20,R,0,{}\n",
        (1u64 << 30) + 4096,
        300 << 10
    );
    let (r, report) = replay(&text, &spec(None, ReplayMode::Timestamps, 1.0)).unwrap();
    assert_eq!(
        r,
        [
            (0, W, 0, 512),
            (10, R, 4096, 4096),
            (20, R, 0, 128 << 10),
            (20, R, 128 << 10, 128 << 10),
            (20, R, 256 << 10, 44 << 10)
        ]
    );
    assert_eq!((report.requests, report.replayed), (3, 5));
    let f = report.fitted;
    assert_eq!((f.aligned, f.moved, f.split, f.split_added), (1, 1, 1, 2));
}

#[test]
fn a_run_that_stops_first_says_so() {
    let mut f = feed(
        &the_same_trace_in(TraceFormat::Csv),
        &spec(None, ReplayMode::AsFast, 1.0),
    )
    .unwrap();
    f.next_request().unwrap();
    let report = f.finish(7).unwrap();
    assert!(report.stopped_early);
    assert_eq!((report.requests, report.issued_late), (1, 7));
}

#[test]
fn the_span_is_the_largest_end_and_scaling_uses_it() {
    let text = format!(
        "{CSV_HEADER}\n0,R,0,4096\n1,R,{},4096\n",
        (4u64 << 30) - 4096
    );
    let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    let span = trace_span("t", reader, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
    assert_eq!(span, 4 << 30);
    let mut s = spec(None, ReplayMode::AsFast, 1.0);
    s.address = AddressMode::Scale;
    let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    let mut f = TraceFeed::new("t", reader, &s, GEOMETRY, span).unwrap();
    f.next_request().unwrap();
    let last = f.next_request().unwrap().unwrap();
    assert_eq!(last.request.offset_bytes, (1 << 30) - 4096);
}

/// Every request of `text` replayed `loops` times (reopening the text for each pass), and
/// the feed's report.
fn replay_loops(
    text: &str,
    spec: &TraceSpec,
    loops: Loops,
) -> Result<(Vec<Replayed>, TraceReport), TraceError> {
    let bytes = text.as_bytes().to_vec();
    let again = bytes.clone();
    let reopen: Reopen = Box::new(move || {
        Ok(Box::new(std::io::Cursor::new(again.clone())) as Box<dyn BufRead + Send>)
    });
    let mut f = TraceFeed::new(
        "t",
        Box::new(std::io::Cursor::new(bytes)),
        spec,
        GEOMETRY,
        0,
    )?
    .with_loops(loops, reopen);
    let mut out = Vec::new();
    // Bounded, for `UntilStopped`: the caller's runtime would stop it.
    while let Some(t) = f.next_request()? {
        out.push((
            t.due_ns,
            t.request.op,
            t.request.offset_bytes,
            t.request.len_bytes,
        ));
        if out.len() == 100 {
            break;
        }
    }
    Ok((out, f.finish(0)?))
}

#[test]
fn loops_replay_the_trace_from_its_start_with_times_continuing() {
    let text = format!("{CSV_HEADER}\n1000,R,0,512\n1500,W,4096,512\n3000,R,8192,512\n");
    let (r, report) = replay_loops(
        &text,
        &spec(None, ReplayMode::Timestamps, 1.0),
        Loops::Count(3),
    )
    .unwrap();
    assert_eq!(
        r.iter().map(|r| (r.0, r.2)).collect::<Vec<_>>(),
        [
            (0, 0),
            (500, 4096),
            (2000, 8192),
            // The second pass starts where the first ended, at its last due time.
            (2000, 0),
            (2500, 4096),
            (4000, 8192),
            (4000, 0),
            (4500, 4096),
            (6000, 8192)
        ]
    );
    // The trace's own counts are of one pass; the replay's of all three.
    assert_eq!((report.requests, report.lines, report.replayed), (3, 4, 9));
    assert_eq!((report.loops, report.passes), (Some(3), 3));
    assert_eq!(report.duration_ns, 2000);
    assert!(!report.stopped_early);
    // Twice as fast, the passes too.
    let (fast, _) = replay_loops(
        &text,
        &spec(None, ReplayMode::Timestamps, 2.0),
        Loops::Count(2),
    )
    .unwrap();
    assert_eq!(
        fast.iter().map(|r| r.0).collect::<Vec<_>>(),
        [0, 250, 1000, 1000, 1250, 2000]
    );
    // Until stopped: pass after pass (the caller stops at 100 here).
    let (endless, report) = replay_loops(
        &text,
        &spec(None, ReplayMode::AsFast, 1.0),
        Loops::UntilStopped,
    )
    .unwrap();
    assert_eq!(endless.len(), 100);
    assert_eq!((report.loops, report.passes), (None, 34));
    assert!(report.stopped_early);
    // A trace whose passes replay nothing ends (no endless loop) and is refused as empty.
    let none = format!("{CSV_HEADER}\n0,R,0,0\n");
    let e = replay_loops(
        &none,
        &spec(None, ReplayMode::AsFast, 1.0),
        Loops::UntilStopped,
    )
    .unwrap_err();
    assert!(e.to_string().contains("no requests"), "{e}");
}

/// The same four requests of two devices, in each format that names devices: the first and
/// third of device `a`, the second and fourth of device `b`.
fn two_devices() -> [(TraceFormat, String, &'static str, &'static str); 4] {
    [
        (
            TraceFormat::Blkparse,
            "8,0 0 1 0.000001 1 Q R 0 + 8\n8,16 0 2 0.000002 1 Q W 8 + 8\n\
             8,0 0 3 0.000003 1 Q R 16 + 8\n8,16 0 4 0.000004 1 Q W 24 + 8\n"
                .to_string(),
            "8,0",
            "8,16",
        ),
        (
            TraceFormat::IologV3,
            "fio version 3 iolog\n1 /f.0 add\n1 /f.1 add\n1 /f.0 read 0 4096\n\
             2 /f.1 write 4096 4096\n3 /f.0 read 8192 4096\n4 /f.1 write 12288 4096\n"
                .to_string(),
            "/f.0",
            "/f.1",
        ),
        (
            TraceFormat::Msr,
            "10,hm,0,Read,0,4096,1\n20,hm,1,Write,4096,4096,1\n\
             30,hm,0,Read,8192,4096,1\n40,hm,1,Write,12288,4096,1\n"
                .to_string(),
            "hm,0",
            "hm,1",
        ),
        (
            TraceFormat::Fiu,
            "1000 1 p 0 8 R 8 0\n2000 1 p 8 8 W 8 16\n3000 1 p 16 8 R 8 0\n4000 1 p 24 8 W 8 16\n"
                .to_string(),
            "8,0",
            "8,16",
        ),
    ]
}

#[test]
fn the_devices_of_a_trace_are_counted_and_one_can_be_picked() {
    for (format, text, a, b) in two_devices() {
        let (all, report) = replay(&text, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
        assert_eq!(all.len(), 4, "{format:?}");
        assert_eq!(
            report
                .devices
                .iter()
                .map(|d| (d.name.as_str(), d.requests))
                .collect::<Vec<_>>(),
            [(a, 2), (b, 2)],
            "{format:?}"
        );
        assert_eq!(report.device, None);
        let mut only_b = spec(None, ReplayMode::AsFast, 1.0);
        only_b.device = Some(b.to_string());
        let (picked, report) = replay(&text, &only_b).unwrap();
        assert_eq!(
            picked.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
            [(W, 4096), (W, 12288)],
            "{format:?}"
        );
        assert_eq!(
            (report.requests, report.writes, report.skipped.other_device),
            (2, 2, 2 + u64::from(format == TraceFormat::IologV3)),
            "{format:?}: the other file's add line too"
        );
        assert_eq!(report.devices.len(), 2, "{format:?}: all still listed");
        // For --trace-address scale, the span is the picked device's.
        let span = |spec: &TraceSpec| {
            let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
            trace_span("t", reader, spec).unwrap()
        };
        let mut only_a = spec(None, ReplayMode::AsFast, 1.0);
        only_a.device = Some(a.to_string());
        assert_eq!(
            (span(&only_a), span(&only_b)),
            (12_288, 16_384),
            "{format:?}"
        );
        let mut missing = spec(None, ReplayMode::AsFast, 1.0);
        missing.device = Some("9,9".to_string());
        let e = replay(&text, &missing).unwrap_err().to_string();
        assert!(
            e.contains("no requests of --trace-device 9,9")
                && e.contains(&format!("{a} (2 requests), {b} (2 requests)")),
            "{format:?}: {e}"
        );
    }
    // A format without device names lists none.
    let (_, csv) = replay(
        &the_same_trace_in(TraceFormat::Csv),
        &spec(None, ReplayMode::AsFast, 1.0),
    )
    .unwrap();
    assert!(csv.devices.is_empty());
}

#[test]
fn devices_past_the_listed_bound_are_counted_together() {
    let mut text = String::from("fio version 3 iolog\n");
    for i in 0..DEVICES_LISTED_MAX + 10 {
        text += &format!("{i} /f.{i} read 0 512\n");
    }
    let (_, report) = replay(&text, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
    assert_eq!(report.devices.len(), DEVICES_LISTED_MAX);
    assert_eq!(report.unlisted_device_requests, 10);
    assert_eq!(report.requests, DEVICES_LISTED_MAX as u64 + 10);
}

#[test]
fn overflowing_lengths_and_times_are_counted_skips_or_errors_naming_the_line() {
    let max = u64::MAX;
    // (trace lines after the header, Ok(requests replayed, skipped longer than the device)
    // or Err(what the error says)), replayed at the timestamps.
    type Case = (String, Result<(usize, u64), &'static str>);
    let cases: [Case; 5] = [
        // The case: a length near 2^64, once a 512-byte request and 18 EB read.
        (format!("0,R,0,{}\n1,R,0,4096\n", max - 616), Ok((1, 1))),
        (format!("0,W,{},1\n", max - 1), Ok((1, 0))),
        (
            format!("0,R,0,512\n{max},R,0,512\n"),
            Err("t line 3: due 18446744073709551615 ns after the trace's first request"),
        ),
        (
            format!("0,R,0,512\n{},R,0,512\n", (1u64 << 62) + 1),
            Err("past the latest a request may be due"),
        ),
        (format!("0,R,0,{max}\n"), Err("no requests in it")),
    ];
    for (lines, expected) in cases {
        let text = format!("{CSV_HEADER}\n{lines}");
        let got = replay(&text, &spec(None, ReplayMode::Timestamps, 1.0));
        match (got, expected) {
            (Ok((r, report)), Ok((replayed, too_long))) => {
                assert_eq!(
                    (r.len(), report.skipped.longer_than_device),
                    (replayed, too_long),
                    "{lines}"
                );
                assert!(report.read_bytes + report.write_bytes <= 1 << 30, "{lines}");
            }
            (Err(e), Err(says)) => assert!(e.to_string().contains(says), "{lines}: {e}"),
            (got, _) => panic!("{lines}: {:?}", got.map(|(r, _)| r)),
        }
    }
    // As fast as possible, the times are not used: no error.
    let text = format!("{CSV_HEADER}\n0,R,0,512\n{max},R,0,512\n");
    assert!(replay(&text, &spec(None, ReplayMode::AsFast, 1.0)).is_ok());
    // A slow replay speed multiplies the times past the bound.
    let text = format!("{CSV_HEADER}\n0,R,0,512\n{},R,0,512\n", 1u64 << 60);
    let e = replay(&text, &spec(None, ReplayMode::Timestamps, 0.01)).unwrap_err();
    assert!(e.to_string().contains("at --replay-speed 0.01"), "{e}");
}

#[test]
fn the_footprint_is_exact_distinct_bytes() {
    // 512-byte requests 64 KiB apart, one repeated, and two overlapping 4 KiB ones.
    let mut text = format!("{CSV_HEADER}\n");
    for i in 0..100u64 {
        text += &format!("{i},R,{},512\n", i << 16);
    }
    text += "200,W,0,512\n300,W,1048576,4096\n301,W,1050624,4096\n";
    let (_, report) = replay(&text, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
    // 100 x 512, and 6 KiB from the two 4 KiB writes (the first overlaps request 16's block).
    assert_eq!(report.footprint_bytes, 100 * 512 + 6144 - 512);
    assert!(report.footprint_exact);
    assert_eq!(report.footprint_granule_bytes, 512);
}

#[test]
fn a_byte_order_mark_is_skipped_and_invisible_characters_are_shown_escaped() {
    let bom = format!("\u{feff}{CSV_HEADER}\n0,R,0,512\n");
    let (r, report) = replay(&bom, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
    assert_eq!((r.len(), report.format), (1, TraceFormat::Csv));
    let bom_msr = "\u{feff}10,hm,0,Read,0,4096,1\n";
    let (_, report) = replay(bom_msr, &spec(None, ReplayMode::AsFast, 1.0)).unwrap();
    assert_eq!(report.format, TraceFormat::Msr);
    // (text, what its error shows)
    let cases = [
        ("\u{200b}hello\tthere\n", "'\\u{200b}hello\\tthere'"),
        (
            "time_ns,op,offset_bytes,len_bytes\n0,\u{feff}R,0,512\n",
            "op '\\u{feff}R' is not R or W",
        ),
        (
            "time_ns,op,offset_bytes,len_bytes\n0,R\u{1b}[31m,0,512\n",
            "op 'R\\u{1b}[31m'",
        ),
    ];
    for (text, shows) in cases {
        let e = replay(text, &spec(None, ReplayMode::AsFast, 1.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains(shows), "{text:?}: {e}");
        assert!(
            !e.chars()
                .any(|c| c.is_control() || c == '\u{feff}' || c == '\u{200b}'),
            "{e:?}"
        );
    }
    assert_eq!(shown("plain 'quoted' \\ text"), "plain 'quoted' \\ text");
}

#[test]
fn keys_a_trace_would_ignore_are_named_with_why() {
    let check = |pairs: &[(&str, &str)], expected: Option<&str>| {
        let mut job = JobSpec::default();
        for (k, v) in pairs {
            job.set(k, v).unwrap();
        }
        assert_eq!(refused_job_key(&job).map(|(k, _)| k), expected, "{pairs:?}");
    };
    check(&[], None);
    check(
        &[("iodepth", "8"), ("loops", "3"), ("number_ios", "5")],
        None,
    );
    check(&[("rate_iops", "1000")], Some("rate_iops"));
    check(&[("rate", "1m")], Some("rate"));
    check(&[("rate_process", "poisson")], Some("rate_process"));
    check(&[("offset_increment", "1m")], Some("offset_increment"));
    check(&[("rwmixwrite", "30")], Some("rwmixread"));
    check(&[("randseed", "7")], Some("randseed"));
    check(&[("norandommap", "1")], Some("norandommap"));
    for (key, why) in KEYS_REFUSED {
        assert_eq!(refused_key(key), Some(why));
    }
    assert!(refused_key("iodepth").is_none());
}
