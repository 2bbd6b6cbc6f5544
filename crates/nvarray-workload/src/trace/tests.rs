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
            assert_eq!(report.footprint_bytes, 4096 + 4096 + 65_536, "{name}");
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
    let span = trace_span("t", reader, None).unwrap();
    assert_eq!(span, 4 << 30);
    let mut s = spec(None, ReplayMode::AsFast, 1.0);
    s.address = AddressMode::Scale;
    let reader = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
    let mut f = TraceFeed::new("t", reader, &s, GEOMETRY, span).unwrap();
    f.next_request().unwrap();
    let last = f.next_request().unwrap().unwrap();
    assert_eq!(last.request.offset_bytes, (1 << 30) - 4096);
}
