//! The server in-process, spoken to byte by byte: data against a reference array over several
//! connections, every kind of bad request, shutdown.

use std::os::unix::net::UnixStream;

use nvarray_nbd::client::{Client, Reply};
use nvarray_nbd::io::Stream;
use nvarray_nbd::proto::*;

mod common;
use common::{read_burst, Running, SIZE_BYTES};

/// xorshift64*: a seeded sequence without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn errno(reply: Reply) -> u32 {
    match reply {
        Reply::Error { errno, .. } => errno,
        Reply::Ok(_) => 0,
    }
}

#[test]
fn random_requests_over_two_connections_match_a_reference_array() {
    random_requests_match_a_reference_array("nvme");
}

/// The same over a DC Express device, whose reads complete in their data: every queue pair
/// polls, the shutdown's flush included.
#[test]
fn random_requests_over_a_dc_express_device_match_a_reference_array() {
    random_requests_match_a_reference_array("dc-express");
}

fn random_requests_match_a_reference_array(protocol: &str) {
    let seed = std::env::var("NBD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_u64);
    let server = Running::start_speaking(false, protocol);
    let mut clients = [server.client(true), server.client(false)];
    assert_eq!(clients[0].info.size_bytes, SIZE_BYTES);
    assert_eq!(clients[0].info.block_bytes_min, 512);
    let mut reference = vec![0u8; SIZE_BYTES as usize];
    let mut rng = Rng(seed | 1);
    for step in 0..1500 {
        let c = &mut clients[rng.below(2) as usize];
        // Up to 300 KiB: several 64 KiB commands per request.
        let blocks = 1 + rng.below(600);
        let len = (blocks * 512).min(SIZE_BYTES) as u32;
        let offset = rng.below((SIZE_BYTES - u64::from(len)) / 512 + 1) * 512;
        let at = offset as usize..offset as usize + len as usize;
        let context = format!("seed {seed} (rerun with NBD_SEED={seed}), step {step}");
        match rng.below(10) {
            0..=3 => {
                let fill = rng.next() as u8;
                let data: Vec<u8> = (0..len).map(|i| fill ^ (i as u8)).collect();
                let fua = rng.below(4) == 0;
                assert_eq!(
                    c.write(offset, &data, fua).unwrap(),
                    Reply::Ok(vec![]),
                    "{context}"
                );
                reference[at].copy_from_slice(&data);
            }
            4 => {
                let r = c.request(CMD_WRITE_ZEROES, 0, offset, len, &[]).unwrap();
                assert_eq!(r, Reply::Ok(vec![]), "{context}");
                reference[at].fill(0);
            }
            5 => assert_eq!(c.flush().unwrap(), Reply::Ok(vec![]), "{context}"),
            _ => {
                let got = c.read(offset, len).unwrap();
                assert!(
                    got == Reply::Ok(reference[at].to_vec()),
                    "{context}: read differs"
                );
            }
        }
    }
    drop(clients);
    server.stop();
}

#[test]
fn bad_requests_get_the_specs_errors_and_the_connection_goes_on() {
    let server = Running::start(false);
    for structured in [true, false] {
        let mut c = server.client(structured);
        let cases: [(u16, u16, u64, u32, u32); 8] = [
            (CMD_READ, 0, SIZE_BYTES, 512, NbdErrno::Inval as u32),
            (CMD_READ, 0, SIZE_BYTES - 512, 1024, NbdErrno::Inval as u32),
            (CMD_READ, 0, u64::MAX - 511, 512, NbdErrno::Inval as u32),
            (CMD_READ, 0, 100, 512, NbdErrno::Inval as u32),
            // Over the largest payload: EOVERFLOW with structured replies (the client may
            // retry smaller), EINVAL with simple ones (the client must never ask).
            (
                CMD_READ,
                0,
                0,
                64 << 20,
                if structured {
                    NbdErrno::Overflow as u32
                } else {
                    NbdErrno::Inval as u32
                },
            ),
            (CMD_READ, 1 << 1, 0, 512, NbdErrno::Inval as u32),
            (7, 0, 0, 512, NbdErrno::Inval as u32),
            (CMD_WRITE_ZEROES, 0, SIZE_BYTES, 512, NbdErrno::NoSpc as u32),
        ];
        for (kind, flags, offset, len, expected) in cases {
            let r = c.request(kind, flags, offset, len, &[]).unwrap();
            assert_eq!(errno(r), expected, "{kind} {flags} {offset} {len}");
        }
        // FUA is accepted on every command the spec allows it on, read and flush included
        // (older qemu sets it on FLUSH).
        for (kind, len) in [(CMD_READ, 512), (CMD_FLUSH, 0)] {
            let r = c.request(kind, CMD_FLAG_FUA, 0, len, &[]).unwrap();
            assert_eq!(errno(r), 0, "command {kind} with FUA");
        }
        // A refused write's payload is skipped, so the next request is read in step.
        let payload = vec![0xeeu8; 4096];
        assert_eq!(
            errno(c.write(SIZE_BYTES - 1024, &payload, false).unwrap()),
            28
        );
        assert_eq!(errno(c.write(512 + 3, &payload[..512], false).unwrap()), 22);
        // Nothing was written by any of them.
        assert_eq!(
            c.read(SIZE_BYTES - 4096, 4096).unwrap(),
            Reply::Ok(vec![0; 4096])
        );
        assert_eq!(c.read(0, 4096).unwrap(), Reply::Ok(vec![0; 4096]));
        // Zero-length requests are harmless.
        assert_eq!(c.read(0, 0).unwrap(), Reply::Ok(vec![]));
        // Trim is accepted.
        assert_eq!(
            c.request(CMD_TRIM, CMD_FLAG_FUA, 0, 4096, &[]).unwrap(),
            Reply::Ok(vec![])
        );
    }
    // A structured error carries a message for the user.
    let mut c = server.client(true);
    match c.read(SIZE_BYTES, 512).unwrap() {
        Reply::Error { message, .. } => assert!(message.contains("beyond the end"), "{message}"),
        r => panic!("{r:?}"),
    }
    // Bad magic: the stream is out of step, the server hangs up; others are unaffected.
    let mut bad = RequestHeader {
        magic: 0xdead_beef,
        flags: 0,
        kind: CMD_READ,
        cookie: 1,
        offset_bytes: 0,
        len_bytes: 512,
    }
    .encode()
    .to_vec();
    c.send_raw(&bad).unwrap();
    assert!(
        c.read(0, 512).is_err(),
        "connection still open after bad magic"
    );
    // An oversize write payload cannot be skipped safely either.
    let mut c = server.client(false);
    bad = RequestHeader {
        magic: REQUEST_MAGIC,
        flags: 0,
        kind: CMD_WRITE,
        cookie: 1,
        offset_bytes: 0,
        len_bytes: u32::MAX,
    }
    .encode()
    .to_vec();
    c.send_raw(&bad).unwrap();
    assert!(
        c.read(0, 512).is_err(),
        "connection still open after a 4 GiB write"
    );
    let mut c = server.client(true);
    assert_eq!(c.read(0, 512).unwrap(), Reply::Ok(vec![0; 512]));
    drop(c);
    server.stop();
}

#[test]
fn a_read_only_export_refuses_every_write() {
    let server = Running::start(true);
    let mut c = server.client(true);
    assert_ne!(c.info.transmission_flags & TFLAG_READ_ONLY, 0);
    // Nothing that changes data is advertised, so clients do not offer it.
    for (flag, name) in [
        (TFLAG_SEND_TRIM, "trim"),
        (TFLAG_SEND_WRITE_ZEROES, "write zeroes"),
        (TFLAG_SEND_FUA, "FUA"),
    ] {
        assert_eq!(c.info.transmission_flags & flag, 0, "{name} advertised");
    }
    assert_ne!(c.info.transmission_flags & TFLAG_SEND_FLUSH, 0);
    assert_eq!(errno(c.write(0, &[1u8; 512], false).unwrap()), 1);
    assert_eq!(errno(c.request(CMD_TRIM, 0, 0, 512, &[]).unwrap()), 1);
    assert_eq!(
        errno(c.request(CMD_WRITE_ZEROES, 0, 0, 512, &[]).unwrap()),
        1
    );
    assert_eq!(c.read(0, 512).unwrap(), Reply::Ok(vec![0; 512]));
    assert_eq!(c.flush().unwrap(), Reply::Ok(vec![]));
    drop(c);
    server.stop();
}

/// The client flags, then `NBD_OPT_GO` naming `name` with no information requests.
fn go_option(name: &[u8]) -> Vec<u8> {
    let mut go = vec![0, 0, 0, 1];
    go.extend_from_slice(&IHAVEOPT.to_be_bytes());
    go.extend_from_slice(&OPT_GO.to_be_bytes());
    go.extend_from_slice(&(4 + name.len() as u32 + 2).to_be_bytes());
    go.extend_from_slice(&(name.len() as u32).to_be_bytes());
    go.extend_from_slice(name);
    go.extend_from_slice(&0u16.to_be_bytes());
    go
}

#[test]
fn malformed_handshakes_are_closed_without_harm() {
    use std::io::{Read, Write};
    let server = Running::start(false);
    let cases: [&[u8]; 4] = [
        // Unknown client flags.
        &[0, 0, 0, 0x80],
        // A bad option magic.
        &[0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 7, 0, 0, 0, 0],
        // An option longer than the server reads.
        &[
            0, 0, 0, 1, 0x49, 0x48, 0x41, 0x56, 0x45, 0x4f, 0x50, 0x54, 0, 0, 0, 7, 0xff, 0xff,
            0xff, 0xff,
        ],
        // EXPORT_NAME of an unknown export.
        &[
            0, 0, 0, 1, 0x49, 0x48, 0x41, 0x56, 0x45, 0x4f, 0x50, 0x54, 0, 0, 0, 1, 0, 0, 0, 1,
            b'x',
        ],
    ];
    for bytes in cases {
        let mut s = UnixStream::connect(&server.socket).unwrap();
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).unwrap();
        s.write_all(bytes).unwrap();
        let mut rest = Vec::new();
        // The server closes: end of file, not a hang.
        s.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "{bytes:?} got {rest:?}");
    }
    // GO for an unknown export: an error reply naming the export, and the connection stays.
    let mut s = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    s.write_all(&go_option(b"abc")).unwrap();
    let mut header = [0u8; 20];
    s.read_exact(&mut header).unwrap();
    assert_eq!(
        u32::from_be_bytes(header[12..16].try_into().unwrap()),
        REP_ERR_UNKNOWN
    );
    let mut message = vec![0u8; u32::from_be_bytes(header[16..20].try_into().unwrap()) as usize];
    s.read_exact(&mut message).unwrap();
    assert!(String::from_utf8_lossy(&message).contains("\"abc\""));
    drop(s);
    // The server still serves.
    let mut c = server.client(true);
    assert_eq!(c.read(0, 512).unwrap(), Reply::Ok(vec![0; 512]));
    drop(c);
    server.stop();
}

/// Strings past the protocol's rules (proto.md: UTF-8, no NUL, at most 4,096 bytes) are
/// refused wherever the handshake takes one: an `EXPORT_NAME` of 5,000 bytes is closed (it
/// has no error reply; before issue 55 it was taken, and matched a 5,000-byte
/// `--export-name`), a `GO` naming 5,000 bytes or a name with a NUL gets
/// `NBD_REP_ERR_INVALID` saying which rule, and a server is not even configured with such a
/// name.
#[test]
fn strings_past_the_protocols_limits_are_refused() {
    use std::io::{Read, Write};
    let server = Running::start(false);
    let long = vec![b'a'; 5000];
    let mut s = UnixStream::connect(&server.socket).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    let mut export_name = vec![0, 0, 0, 1];
    export_name.extend_from_slice(&IHAVEOPT.to_be_bytes());
    export_name.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    export_name.extend_from_slice(&(long.len() as u32).to_be_bytes());
    export_name.extend_from_slice(&long);
    s.write_all(&export_name).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "an over-long EXPORT_NAME got {} bytes",
        rest.len()
    );
    for (name, rule) in [
        (&long[..], "longer than the protocol's 4096"),
        (b"a\0b", "NUL"),
    ] {
        let mut s = UnixStream::connect(&server.socket).unwrap();
        s.read_exact(&mut greeting).unwrap();
        s.write_all(&go_option(name)).unwrap();
        let mut header = [0u8; 20];
        s.read_exact(&mut header).unwrap();
        assert_eq!(
            u32::from_be_bytes(header[12..16].try_into().unwrap()),
            REP_ERR_INVALID
        );
        let len = u32::from_be_bytes(header[16..20].try_into().unwrap()) as usize;
        let mut message = vec![0u8; len];
        s.read_exact(&mut message).unwrap();
        let message = String::from_utf8_lossy(&message);
        assert!(message.contains(rule), "{message}");
    }
    server.stop();
    let options = nvarray_nbd::ServerOptions {
        listen: nvarray_nbd::Listen::Unix("/nonexistent/x.sock".into()),
        export_name: "a".repeat(5000),
        read_only: false,
        connections_max: 4,
    };
    let refused = nvarray_nbd::server::check_options(&options)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("--export-name"), "{refused}");
}

/// The most memory this process has held so far, in bytes.
fn peak_rss_bytes() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut u = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    usage.ru_maxrss as u64 * 1024
}

/// A client that sends a burst of the largest reads before taking any reply gets every reply,
/// and the server holds a bounded amount of reply data meanwhile. Before, a connection read
/// every header the socket held and assembled every reply before sending any: 128 reads of
/// 8 MiB, 3.5 KB on the wire, made it hold 1 GiB.
#[test]
fn a_burst_of_large_reads_is_answered_in_bounded_memory() {
    let server = Running::start(false);
    let mut c = server.client(false);
    c.write(0, &vec![0xa5u8; SIZE_BYTES as usize], false)
        .unwrap();
    let requests = 128u64;
    let burst = read_burst(1..=requests, SIZE_BYTES as u32);
    let before = peak_rss_bytes();
    c.send_raw(&burst).unwrap();
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..requests {
        let (cookie, error, data) = c.read_pipelined_reply(SIZE_BYTES as u32).unwrap();
        assert_eq!(error, 0, "cookie {cookie}");
        assert!(data.iter().all(|&b| b == 0xa5), "cookie {cookie}");
        assert!(answered.insert(cookie), "cookie {cookie} answered twice");
    }
    assert_eq!(answered.len() as u64, requests);
    let grown = peak_rss_bytes().saturating_sub(before);
    assert!(
        grown < 512 << 20,
        "the process grew by {} MiB while answering the burst",
        grown >> 20
    );
    server.stop();
}

/// Connections that never speak hold handshake slots, not serving slots, and are closed after
/// `HANDSHAKE_IDLE`: a real client is served at once beside 15 silent ones (the serving limit
/// is 4 here; 15 and the client are within one peer's handshake budget). Before, every
/// accepted connection took a serving slot for up to 30 s.
#[test]
fn silent_connections_neither_lock_out_clients_nor_stay_long() {
    use std::io::Read;
    let server = Running::start(false);
    let silent: Vec<UnixStream> = (0..nvarray_nbd::gate::HANDSHAKES_PER_PEER_MAX - 1)
        .map(|_| {
            let mut s = UnixStream::connect(&server.socket).unwrap();
            let mut greeting = [0u8; 18];
            s.read_exact(&mut greeting).unwrap();
            s
        })
        .collect();
    let mut c = server.client(true);
    assert_eq!(c.read(0, 512).unwrap(), Reply::Ok(vec![0; 512]));
    // The server closes a silent handshake itself: end of file, well before the old 30 s.
    let started = std::time::Instant::now();
    for mut s in silent {
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)
            .expect("closed by the server, not timed out");
    }
    assert!(
        started.elapsed() < nvarray_nbd::handshake::HANDSHAKE_IDLE * 3,
        "silent handshakes were closed after {:?}",
        started.elapsed()
    );
    drop(c);
    server.stop();
}

/// Serving slots are still bounded: with 4 serving, a fifth client's GO is refused with a
/// message naming the limit; once one ends, the next is served.
#[test]
fn serving_connections_over_the_limit_are_refused_with_a_message() {
    let server = Running::start(false);
    let held: Vec<Client> = (0..4).map(|_| server.client(true)).collect();
    let s = UnixStream::connect(&server.socket).unwrap();
    let Err(e) = Client::connect(Stream::Unix(s), "", true) else {
        panic!("a fifth client was served beside 4 with the limit at 4");
    };
    assert!(e.to_string().contains("too many connections"), "{e}");
    drop(held);
    // The slots come back as each connection ends; its thread may still be finishing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut c = loop {
        let s = UnixStream::connect(&server.socket).unwrap();
        match Client::connect(Stream::Unix(s), "", true) {
            Ok(c) => break c,
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
    };
    assert_eq!(c.read(0, 512).unwrap(), Reply::Ok(vec![0; 512]));
    drop(c);
    server.stop();
}

/// A client that sends requests and stops taking replies does not hold shutdown for the
/// 30 s stall limit: after `SHUTDOWN_GRACE` its socket is closed and the server exits.
#[test]
fn shutdown_does_not_wait_for_a_client_that_takes_no_replies() {
    let server = Running::start(false);
    let mut c = server.client(false);
    let burst = read_burst(0..64, 4 << 20);
    c.send_raw(&burst).unwrap();
    // Wait until the server is stuck sending: it has answered some, and no more fit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.server.report().totals.requests == 0 {
        assert!(std::time::Instant::now() < deadline, "no request answered");
        std::thread::yield_now();
    }
    let started = std::time::Instant::now();
    server.stop();
    assert!(
        started.elapsed() < nvarray_nbd::server::SHUTDOWN_GRACE + std::time::Duration::from_secs(8),
        "shutdown took {:?}",
        started.elapsed()
    );
    drop(c);
}

/// Waits (at most 20 s) until the server has no connection left: its last one's session is
/// over.
fn wait_until_no_connections(server: &Running) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.server.connections() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a connection never ended"
        );
        std::thread::yield_now();
    }
}

/// The report's rates are over the active time, not the uptime: the requests of a session,
/// then idle time, leave IOPS at requests / active time.
#[test]
fn the_report_divides_by_busy_time_and_gives_the_uptime_too() {
    let server = Running::start(false);
    let mut c = server.client(true);
    for i in 0..200u64 {
        c.read((i % 64) * 4096, 4096).unwrap();
    }
    drop(c);
    wait_until_no_connections(&server);
    let r = server.server.report();
    let uptime = r.uptime_ns.expect("a server reports its uptime");
    assert_eq!(r.totals.requests, 200);
    assert!(
        r.elapsed_ns > 0 && r.elapsed_ns <= uptime,
        "{} of {uptime}",
        r.elapsed_ns
    );
    let expected = 200.0 / (r.elapsed_ns as f64 / 1e9);
    assert!(
        (r.totals.iops - expected).abs() <= expected * 1e-9,
        "{} vs {expected}",
        r.totals.iops
    );
    // Idle time does not move the busy time.
    let later = server.server.report();
    assert_eq!(later.elapsed_ns, r.elapsed_ns);
    assert!(later.uptime_ns.unwrap() > uptime);
    server.stop();
}

/// The server's log lines, and a logger that collects them.
type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;
type Logger = std::sync::Arc<dyn Fn(&str) + Send + Sync>;
fn collected_log() -> (Log, Logger) {
    let lines: Log = Default::default();
    let sink = std::sync::Arc::clone(&lines);
    let log = std::sync::Arc::new(move |m: &str| {
        eprintln!("server: {m}");
        sink.lock().unwrap().push(m.to_string());
    });
    (lines, log)
}

/// A real client from `from`: handshake, one read. A read timeout keeps a server that never
/// answers from hanging the test.
fn served_from(server: &Running, from: std::net::Ipv4Addr) -> Result<(), String> {
    let s = server.connect_from(from).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut c = Client::connect(Stream::Tcp(s), "", true).map_err(|e| e.to_string())?;
    match c.read(0, 4096) {
        Ok(Reply::Ok(data)) if data == vec![0; 4096] => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

const FLOODER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 1);
const OTHER: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// 100 silent connections from one address, past every handshake limit, do not shut out a
/// client from another address: it is served at once, and the log says why the flood's
/// excess was closed. Before, 64 silent connections held every handshake slot, so every new
/// client was closed without a word for as long as they stayed.
#[test]
fn a_flood_of_silent_connections_from_one_address_does_not_shut_out_another() {
    use std::io::Read;
    let (lines, log) = collected_log();
    let server = Running::start_tcp(log);
    let flood: Vec<std::net::TcpStream> = (0..100)
        .map(|_| server.connect_from(FLOODER).unwrap())
        .collect();
    // The accept loop takes connections in order: once the last has its answer (a greeting,
    // or end of file when it is closed at once), every one before it has had its own.
    let mut last = flood.last().unwrap();
    last.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut answer = [0u8; 18];
    let _ = last
        .read(&mut answer)
        .expect("the server answered the flood's last connection");
    served_from(&server, OTHER).expect("a client beside the flood is served");
    let said = lines.lock().unwrap().join("\n");
    assert!(
        said.contains("closed before its handshake: 127.0.0.1 already has"),
        "the log does not say why the flood was closed:\n{said}"
    );
    drop(flood);
    server.stop();
}

/// One address opening connection after connection without end (at 22 a second this kept
/// every client out) does not keep a client from another address out: each of several is
/// served while the storm goes on.
#[test]
fn a_reconnect_storm_from_one_address_does_not_keep_another_out() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (_lines, log) = collected_log();
    let server = Running::start_tcp(log);
    let port = server.port();
    let stop = AtomicBool::new(false);
    let opened = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let storm = s.spawn(|| {
            // It holds its last 100 connections, silent, and opens the next as fast as it can.
            let mut held = std::collections::VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(c) = common::connect_from(FLOODER, port) {
                    held.push_back(c);
                    opened.fetch_add(1, Ordering::Relaxed);
                }
                if held.len() > 100 {
                    held.pop_front();
                }
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while opened.load(Ordering::Relaxed) < 300 {
            assert!(
                std::time::Instant::now() < deadline,
                "the storm did not start"
            );
            std::thread::yield_now();
        }
        let results: Vec<Result<(), String>> =
            (0..5).map(|_| served_from(&server, OTHER)).collect();
        stop.store(true, Ordering::Relaxed);
        storm.join().unwrap();
        for r in results {
            r.expect("a client is served during the storm");
        }
    });
    server.stop();
}

/// `requests` QD 1 reads of 4 KiB from `from` on one connection, `gap` apart; returns the
/// time from before the first to after the server saw the connection end (which contains
/// the server's own view of the session).
fn session_from(
    server: &Running,
    from: std::net::Ipv4Addr,
    requests: u64,
    gap: std::time::Duration,
) -> std::time::Duration {
    let s = server.connect_from(from).unwrap();
    let mut c = Client::connect(Stream::Tcp(s), "", true).unwrap();
    let began = std::time::Instant::now();
    for i in 0..requests {
        if i > 0 {
            // The client's own pace (what fio's thinktime or rate_iops does), not a wait for
            // the server.
            std::thread::sleep(gap);
        }
        assert_eq!(c.read(i * 4096, 4096).unwrap(), Reply::Ok(vec![0; 4096]));
    }
    drop(c);
    wait_until_no_connections(server);
    began.elapsed()
}

/// The seconds a stream's rate is over: its requests / its IOPS.
fn seconds_of(t: &nvarray_report::Totals) -> f64 {
    t.requests as f64 / t.iops
}

/// Two hosts served one after the other each report their own rate, over their own active
/// time, while the whole's rate is over both: the hosts' times add up to the whole's (the
/// idle time between them, longer than `ACTIVE_GAP_MAX`, counts for nobody). Before, each
/// host's rate was over the server's whole active time: half its real IOPS each.
#[test]
fn hosts_served_one_after_the_other_each_report_their_own_rate() {
    let (_lines, log) = collected_log();
    let server = Running::start_tcp(log);
    let first = session_from(&server, FLOODER, 200, std::time::Duration::ZERO);
    // Idle time between two programs (longer than the gaps a session's clock bridges).
    std::thread::sleep(nvarray_report::ACTIVE_GAP_MAX * 2);
    let second = session_from(&server, OTHER, 200, std::time::Duration::ZERO);
    let r = server.server.report();
    assert_eq!(r.streams.len(), 2, "{:?}", r.streams);
    let whole_s = r.elapsed_ns as f64 / 1e9;
    assert!((seconds_of(&r.totals) - whole_s).abs() <= whole_s * 1e-9);
    let hosts_s: Vec<f64> = r.streams.iter().map(|s| seconds_of(&s.totals)).collect();
    for ((s, host_s), outside) in r.streams.iter().zip(&hosts_s).zip([first, second]) {
        assert_eq!(s.totals.requests, 200, "{}", s.name);
        // Each host's time is within what its client saw from outside.
        assert!(
            *host_s <= outside.as_secs_f64(),
            "{}: {host_s} s of rate time, {outside:?} seen by the client",
            s.name
        );
    }
    // (Each clock reads the time of a session's end itself: they differ by microseconds.
    // Charging each host the whole's time would make the sum twice the whole's.)
    let sum_s: f64 = hosts_s.iter().sum();
    assert!(
        (sum_s - whole_s).abs() <= whole_s * 0.01,
        "hosts' times {hosts_s:?} do not add up to the whole's {whole_s} s"
    );
    server.stop();
}

/// A client that paces itself (ten QD 1 reads 200 ms apart) reports the rate it ran at,
/// about 5 IOPS: its session's time holds its own pauses. Before, the rate was over the
/// time requests were in flight only (the pauses, over 100 ms, were dropped as idle):
/// 19,628 IOPS, the inverse of one read's latency.
#[test]
fn a_paced_client_reports_the_rate_it_ran_at() {
    let (_lines, log) = collected_log();
    let server = Running::start_tcp(log);
    let gap = std::time::Duration::from_millis(200);
    let outside = session_from(&server, OTHER, 10, gap);
    let r = server.server.report();
    let iops = r.streams[0].totals.iops;
    // Between 10 requests over what the client saw and 10 over the 9 pauses alone.
    let (low, high) = (
        10.0 / outside.as_secs_f64(),
        10.0 / (9.0 * gap.as_secs_f64()),
    );
    assert!(
        (low..=high).contains(&iops),
        "{iops} IOPS, expected {low:.2} to {high:.2}"
    );
    // The whole (one host) agrees, but for the microseconds between its clock's reading of
    // the session's end and the host's.
    assert!(
        (r.totals.iops - iops).abs() <= iops * 0.01,
        "whole {} IOPS, host {iops}",
        r.totals.iops
    );
    server.stop();
}

/// A connection thread that panics closes its socket (the client reads the end instead of
/// waiting for ever; issue 39 saw the protocol tests hang), is counted and logged, and the
/// server serves the next connection and shuts down cleanly (issue 55).
#[test]
fn a_connection_that_panics_is_closed_counted_and_the_server_serves_on() {
    use std::io::Read;
    let (log, logger) = collected_log();
    let server = Running::start_logging(false, &[], logger);
    server.server.inject_panic_in_connection(0);
    let read_all = |mut s: UnixStream| {
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return Ok(got),
                Ok(n) if got.len() < 8 => got.extend_from_slice(&buf[..n]),
                Ok(_) => return Ok(got), // the greeting: enough
                Err(e) => return Err(e),
            }
        }
    };
    let first = UnixStream::connect(&server.socket).unwrap();
    let got = read_all(first).expect("the panicking connection's socket was closed");
    assert!(got.is_empty(), "{got:?}");
    let greeting = read_all(UnixStream::connect(&server.socket).unwrap()).unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    assert_eq!(server.server.connection_panics(), 1);
    let mut c = server.client(true);
    assert_eq!(c.read(0, 512).unwrap(), Reply::Ok(vec![0; 512]));
    drop(c);
    server.stop();
    let logged = log.lock().unwrap();
    assert!(
        logged
            .iter()
            .any(|l| l.contains("connection 0: internal error")),
        "{logged:?}"
    );
}
