//! `nvarray serve` against the real NBD clients users point at it: nbdinfo, qemu-io, nbdcopy
//! and fio's nbd engine (Debian `libnbd-bin`, `qemu-utils`, `fio`, installed by
//! `scripts/setup.sh`). A missing client is reported as `SKIPPED (not passed)`, never as a pass.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::serve::Serve;
use common::{campaign_env, run, run_for, run_ok, KillOnDrop};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nvarray-nbd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether every tool is installed; says loudly which one is not.
fn have(tools: &[&str]) -> bool {
    for t in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            eprintln!("SKIPPED (not passed): {t} is not installed (scripts/setup.sh installs it)");
            return false;
        }
    }
    true
}

impl Serve {
    /// Starts the server on a Unix socket in `dir` and waits until it is ready.
    fn start(dir: &Path, extra: &[&str]) -> Serve {
        let socket = dir.join("nbd.sock");
        let listen = format!("unix:{}", socket.display());
        let mut args: Vec<String> = [
            "serve", "--preset", "dram", "--size", "64M", "--listen", &listen,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        Serve::start_with(&args, socket)
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///nvarray?socket={}", self.socket.display())
    }
}

#[test]
fn nbdinfo_reports_the_configured_size_block_sizes_and_flags() {
    if !have(&["nbdinfo"]) {
        return;
    }
    let dir = scratch("info");
    for read_only in [false, true] {
        let serve = Serve::start(&dir, if read_only { &["--read-only"] } else { &[] });
        let info: serde_json::Value =
            serde_json::from_str(&run_ok("nbdinfo", &["--json", &serve.uri()])).expect("JSON");
        let e = &info["exports"][0];
        assert_eq!(e["export-name"], "nvarray", "{info}");
        assert_eq!(e["export-size"], 64 << 20, "{info}");
        assert_eq!(e["block_size_minimum"], 512, "{info}");
        assert_eq!(e["block_size_preferred"], 4096, "{info}");
        assert_eq!(e["block_size_maximum"], 32 << 20, "{info}");
        assert_eq!(e["is_read_only"], read_only, "{info}");
        for flag in ["can_flush", "can_multi_conn"] {
            assert_eq!(e[flag], true, "{flag} in {info}");
        }
        // A read-only export offers nothing that changes data.
        for flag in ["can_fua", "can_trim", "can_zero"] {
            assert_eq!(e[flag], !read_only, "{flag} in {info}");
        }
        assert_eq!(info["protocol"], "newstyle-fixed", "{info}");
        assert_eq!(info["structured"], true, "{info}");
        let (status, _) = serve.stop("-INT");
        assert!(status.success(), "{status}");
    }
}

#[test]
fn qemu_io_writes_and_verifies_patterns_at_odd_offsets() {
    if !have(&["qemu-io"]) {
        return;
    }
    let dir = scratch("qemu");
    let serve = Serve::start(&dir, &[]);
    let uri = serve.uri();
    // qemu reads the 512-byte minimum block size and does read-modify-write itself for the
    // unaligned requests; every byte still goes through the server.
    let out = run_ok(
        "qemu-io",
        &[
            "-f",
            "raw",
            &uri,
            "-c",
            "write -P 0xab 1 3",
            "-c",
            "write -P 0x5c 4095 10000",
            "-c",
            "write -P 0x17 33554431 70000",
            "-c",
            "read -P 0xab 1 3",
            "-c",
            "read -P 0 0 1",
            "-c",
            "read -P 0 4 4091",
            "-c",
            "read -P 0x5c 4095 10000",
            "-c",
            "read -P 0 14095 100",
            "-c",
            "read -P 0x17 33554431 70000",
        ],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    // A pattern that is not there must be caught (the check can fail).
    let wrong = run(
        "qemu-io",
        &["-f", "raw", &uri, "-c", "read -P 0xab 4095 512"],
    );
    let text = String::from_utf8_lossy(&wrong.stdout).into_owned()
        + &String::from_utf8_lossy(&wrong.stderr);
    assert!(text.contains("Pattern verification failed"), "{text}");
    // Past the end: an error, and the server keeps serving.
    let past = run(
        "qemu-io",
        &["-f", "raw", &uri, "-c", "write -P 1 67108860 8"],
    );
    let text =
        String::from_utf8_lossy(&past.stdout).into_owned() + &String::from_utf8_lossy(&past.stderr);
    assert!(text.contains("write failed"), "{text}");
    run_ok("qemu-io", &["-f", "raw", &uri, "-c", "read -P 0xab 1 3"]);
    let (status, report) = serve.stop("-TERM");
    assert!(status.success(), "{status}");
    assert!(report.contains("NBD clients"), "{report}");
}

/// NBD's trim reaches flash behind the FTL as a deallocate (issue 41): qemu-io's `discard`
/// of a filled drive unmaps exactly the 4 KiB pages wholly inside each range, once.
#[test]
fn qemu_io_discard_unmaps_whole_flash_pages_in_the_ftl() {
    if !have(&["qemu-io"]) {
        return;
    }
    let dir = scratch("discard");
    let socket = dir.join("nbd.sock");
    let listen = format!("unix:{}", socket.display());
    let args: Vec<String> = [
        "serve",
        "--preset",
        "tlc",
        "--size",
        "1G",
        "--set",
        "memory.erase_block_bytes=64k",
        "--precondition",
        "fill",
        "--json",
        "--listen",
        &listen,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let serve = Serve::start_with(&args, socket);
    let uri = serve.uri();
    run_ok(
        "qemu-io",
        &[
            "-f",
            "raw",
            &uri,
            // 64 MiB: 16384 whole pages.
            "-c",
            "discard 0 64M",
            // Again: nothing left to unmap.
            "-c",
            "discard 0 64M",
            // Part of two pages and all of none: unmaps nothing.
            "-c",
            "discard 1049088 4096",
            // [1 GiB - 12 KiB + 512, end): the last two pages, and part of the one before.
            "-c",
            "discard 1073729024 11776",
            // Trimmed data is undefined, but reading it is no error.
            "-c",
            "read 0 64k",
        ],
    );
    let (status, report) = serve.stop("-TERM");
    assert!(status.success(), "{status}");
    let json = &report[report.find("\n{").expect("a JSON report at exit") + 1..];
    let r: serde_json::Value = serde_json::from_str(json).expect("JSON report");
    assert_eq!(r["ftl"]["pages_trimmed"], 16384 + 2, "{}", r["ftl"]);
    // Nothing was written by the host, and trims move no data.
    assert_eq!(r["ftl"]["host_pages_written"], 0, "{}", r["ftl"]);
    assert_eq!(r["write_bytes"], 0, "{r}");
}

#[test]
fn nbdcopy_round_trips_64_mib_of_random_data() {
    if !have(&["nbdcopy"]) {
        return;
    }
    let dir = scratch("copy");
    let input = dir.join("in.img");
    let output = dir.join("out.img");
    let mut data = vec![0u8; 64 << 20];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut data)
        .unwrap();
    std::fs::write(&input, &data).unwrap();
    let serve = Serve::start(&dir, &[]);
    run_ok("nbdcopy", &[input.to_str().unwrap(), &serve.uri()]);
    run_ok("nbdcopy", &[&serve.uri(), output.to_str().unwrap()]);
    let back = std::fs::read(&output).unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "data read back differs from data written");
    let (status, report) = serve.stop("-INT");
    assert!(status.success());
    // 64 MiB in and out went through the device.
    assert!(report.contains("all "), "{report}");
}

/// fio's nbd engine, four jobs on four connections (multi-conn), each writing its own 8 MiB
/// with crc32c verification headers and reading them back.
#[test]
fn fio_nbd_engine_random_writes_verify_over_four_connections() {
    if !have(&["fio"]) {
        return;
    }
    let dir = scratch("fio");
    let serve = Serve::start(&dir, &[]);
    let uri = format!("--uri={}", serve.uri());
    // fio keeps verify state files in its working directory: keep them in the scratch one.
    let out = Command::new("fio")
        .current_dir(&dir)
        .args([
            "--name=verify",
            "--ioengine=nbd",
            &uri,
            "--rw=randwrite",
            "--bs=4k",
            "--size=8M",
            "--offset_increment=8M",
            "--numjobs=4",
            "--iodepth=8",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--group_reporting",
            "--output-format=json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before its JSON.
    let start = out.find('{').expect("fio printed JSON");
    let json: serde_json::Value = serde_json::from_str(&out[start..]).expect("fio JSON");
    let job = &json["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    // Every block written was read back and verified: 4 jobs x 8 MiB.
    assert_eq!(job["write"]["io_bytes"], 32 << 20, "{job}");
    assert_eq!(job["read"]["io_bytes"], 32 << 20, "{job}");
    let (status, _) = serve.stop("-INT");
    assert!(status.success());
}

/// kill -9 of the server in the middle of a stream of writes (file backing): after a restart
/// every write the server acknowledged reads back intact. The writer is nvarray-nbd's own
/// minimal client, which knows exactly which replies it received (fio's saved verify state
/// also counts the writes that failed when the connection died, so it cannot tell).
#[test]
fn acknowledged_writes_survive_kill_9_of_the_server() {
    use nvarray_nbd::client::{Client, Reply};
    use nvarray_nbd::io::Stream;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let dir = scratch("crash");
    let disk = dir.join("disk.img");
    let backing = format!("file:{}", disk.display());
    let serve = Serve::start(&dir, &["--backing", &backing]);
    let socket = serve.socket.clone();
    const BLOCK: usize = 4096;
    let block_of = |i: u64| -> Vec<u8> {
        (0..BLOCK)
            .map(|b| (i as u8) ^ (b as u8) ^ ((i >> 8) as u8))
            .collect()
    };
    let acked = Arc::new(AtomicUsize::new(0));
    let writer = {
        let acked = Arc::clone(&acked);
        std::thread::spawn(move || {
            let stream = Stream::Unix(UnixStream::connect(&socket).unwrap());
            let mut c = Client::connect(stream, "", true).unwrap();
            // Blocks 0, 1, 2, ... in order until the server dies; a reply is an acknowledgement.
            for i in 0..(64u64 << 20) / BLOCK as u64 {
                match c.write(i * BLOCK as u64, &block_of(i), false) {
                    Ok(Reply::Ok(_)) => acked.store(i as usize + 1, Ordering::SeqCst),
                    Ok(r) => panic!("write {i} refused: {r:?}"),
                    Err(_) => return,
                }
            }
        })
    };
    let until = Instant::now() + Duration::from_secs(60);
    while acked.load(Ordering::SeqCst) < 2000 {
        assert!(Instant::now() < until, "the writer stalled");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (status, _) = serve.stop("-KILL");
    assert!(!status.success());
    writer.join().unwrap();
    let acked = acked.load(Ordering::SeqCst) as u64;
    let serve = Serve::start(&dir, &["--backing", &backing]);
    let stream = Stream::Unix(UnixStream::connect(&serve.socket).unwrap());
    let mut c = Client::connect(stream, "", true).unwrap();
    for i in 0..acked {
        let got = c.read(i * BLOCK as u64, BLOCK as u32).unwrap();
        assert!(
            got == Reply::Ok(block_of(i)),
            "acknowledged block {i} of {acked} lost after kill -9"
        );
    }
    drop(c);
    let (status, _) = serve.stop("-INT");
    assert!(status.success());
}

/// A backing file truncated under a running server (issue 58: it died of SIGBUS, every client
/// lost its connection without a reply): the read of a lost block gets EIO, the device has
/// failed from then on (a read of a block still there, a write and a flush get EIO too, never
/// success), the connection stays, a new one is served, and SIGINT ends the server by its own
/// exit, a failure since its last flush failed (not by a signal).
#[test]
fn a_backing_file_truncated_under_the_server_fails_commands_not_the_server() {
    use nvarray_nbd::client::{Client, Reply};
    use nvarray_nbd::io::Stream;
    use std::os::unix::net::UnixStream;

    let dir = scratch("truncated");
    let disk = dir.join("disk.img");
    let backing = format!("file:{}", disk.display());
    let serve = Serve::start(&dir, &["--backing", &backing]);
    let connect = || {
        let stream = Stream::Unix(UnixStream::connect(&serve.socket).unwrap());
        Client::connect(stream, "", true).unwrap()
    };
    let mut c = connect();
    assert_eq!(c.write(0, &[9u8; 4096], false).unwrap(), Reply::Ok(vec![]));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&disk)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let eio = |r: Reply| matches!(r, Reply::Error { errno, .. } if errno == 5);
    let lost = c.read(32 << 20, 4096).unwrap();
    assert!(eio(lost.clone()), "the lost block's read: {lost:?}");
    for (what, r) in [
        ("a block still in the file", c.read(0, 4096).unwrap()),
        ("a write", c.write(8192, &[1u8; 4096], false).unwrap()),
        ("a flush", c.flush().unwrap()),
        (
            "a read on a new connection",
            connect().read(0, 4096).unwrap(),
        ),
    ] {
        assert!(eio(r.clone()), "{what} after the device failed: {r:?}");
    }
    drop(c);
    let (status, _) = serve.stop("-INT");
    assert!(
        status.code().is_some_and(|code| code != 0),
        "the server exits, failing: {status:?}"
    );
}

/// Two devices on one backing file would overwrite each other's data unseen. While `serve`
/// holds the file, a second `serve` and a `bench` on it exit 2 naming the holder's pid and
/// command, and write nothing; once the holder dies by SIGKILL (which unlocks nothing itself)
/// the file serves again, with the holder's data.
#[test]
fn a_backing_file_in_use_is_refused_naming_its_holder_until_the_holder_dies() {
    use nvarray_nbd::client::{Client, Reply};
    use nvarray_nbd::io::Stream;
    use std::os::unix::net::UnixStream;

    let dir = scratch("in-use");
    let disk = dir.join("disk.img");
    let backing = format!("file:{}", disk.display());
    let first = Serve::start(&dir, &["--backing", &backing]);
    let holder = first.child.id();
    let block = vec![0x5au8; 4096];
    let mut c = Client::connect(
        Stream::Unix(UnixStream::connect(&first.socket).unwrap()),
        "",
        true,
    )
    .unwrap();
    assert_eq!(c.write(0, &block, true).unwrap(), Reply::Ok(vec![]));
    drop(c);
    let second_listen = format!("unix:{}", dir.join("second.sock").display());
    let nvarray = env!("CARGO_BIN_EXE_nvarray");
    let attempts: [&[&str]; 2] = [
        &[
            "serve",
            "--preset",
            "dram",
            "--size",
            "64M",
            "--listen",
            &second_listen,
            "--backing",
            &backing,
        ],
        &[
            "bench",
            "--preset",
            "dram",
            "--size",
            "64M",
            "--backing",
            &backing,
            "--rw",
            "write",
            "--bs",
            "4k",
            "--number_ios",
            "16",
        ],
    ];
    for args in attempts {
        let (out, killed) = run_for(nvarray, args, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!killed, "{args:?} ran beside the holder:\n{err}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("process {holder} (")) && err.contains("serve"),
            "{args:?} does not name the holder: {err}"
        );
    }
    let (status, _) = first.stop("-KILL");
    assert!(!status.success());
    let again = Serve::start(&dir, &["--backing", &backing]);
    let mut c = Client::connect(
        Stream::Unix(UnixStream::connect(&again.socket).unwrap()),
        "",
        true,
    )
    .unwrap();
    assert_eq!(
        c.read(0, 4096).unwrap(),
        Reply::Ok(block),
        "the refused bench wrote"
    );
    drop(c);
    let (status, _) = again.stop("-INT");
    assert!(status.success());
}

#[test]
fn connections_over_the_limit_are_refused_with_a_message() {
    if !have(&["nbdinfo"]) {
        return;
    }
    let dir = scratch("limit");
    let serve = Serve::start(&dir, &["--connections", "1"]);
    // Hold the one serving slot: a client past the handshake, in transmission. (A connection
    // still in its handshake holds no serving slot.)
    let held = nvarray_nbd::client::Client::connect(
        nvarray_nbd::io::Stream::Unix(
            std::os::unix::net::UnixStream::connect(&serve.socket).unwrap(),
        ),
        "",
        true,
    )
    .unwrap();
    // libnbd logs the server's message only in debug mode.
    let out = Command::new("nbdinfo")
        .arg(serve.uri())
        .env("LIBNBD_DEBUG", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("too many connections"), "{err}");
    drop(held);
    let (status, _) = serve.stop("-INT");
    assert!(status.success());
}

#[test]
fn bad_listen_addresses_are_input_errors() {
    for addr in [
        "tcp::10809",
        "udp:1.2.3.4:5",
        "unix:",
        "tcp:127.0.0.1:notaport",
    ] {
        let out = run(env!("CARGO_BIN_EXE_nvarray"), &["serve", "--listen", addr]);
        assert_eq!(out.status.code(), Some(2), "{addr}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--listen"), "{addr}: {err}");
    }
}

/// `serve` listens before it prepares the device (seconds for a large one): a client that
/// connects as soon as the socket exists waits in the backlog and is served, instead of
/// failing because nothing listens yet.
#[test]
fn serve_listens_before_it_prepares_a_large_device() {
    let dir = scratch("listen-first");
    let socket = dir.join("nbd.sock");
    // Killed if the test fails half way: a 2 GiB server must not outlive it.
    let mut child = KillOnDrop::new(
        Command::new(env!("CARGO_BIN_EXE_nvarray"))
            .args(["serve", "--preset", "dram", "--size", "2G", "--listen"])
            .arg(format!("unix:{}", socket.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no socket");
        assert!(child.child().try_wait().unwrap().is_none(), "serve exited");
        std::thread::yield_now();
    }
    // The socket's file appears at bind, a moment before the server listens on it.
    let stream = loop {
        match std::os::unix::net::UnixStream::connect(&socket) {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                assert!(Instant::now() < deadline, "never listened: {e}");
                std::thread::yield_now();
            }
            Err(e) => panic!("connect to {}: {e}", socket.display()),
        }
    };
    let mut c =
        nvarray_nbd::client::Client::connect(nvarray_nbd::io::Stream::Unix(stream), "", true)
            .expect("served once the device is ready");
    assert_eq!(c.info.size_bytes, 2 << 30);
    assert_eq!(
        c.read(0, 4096).unwrap(),
        nvarray_nbd::client::Reply::Ok(vec![0; 4096])
    );
    drop(c);
    let _ = Command::new("kill")
        .args(["-INT", &child.child().id().to_string()])
        .status();
    let out = child.into_inner().wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("preparing the device"), "{err}");
}

/// Bytes of one device block (the export's minimum block size, the `dram` preset's 512): the
/// unit a write is promised not to tear in.
const SECTOR: usize = 512;

/// A 4 KiB block whose every 512-byte sector is stamped with the block's number, the sector's
/// index and the version, the rest a stream derived from the three, so that a read can tell
/// whole sectors of one write from a torn one.
fn stamped(block: u64, version: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    for sector in 0..(4096 / SECTOR) as u64 {
        let start = out.len();
        out.extend_from_slice(&block.to_le_bytes());
        out.extend_from_slice(&sector.to_le_bytes());
        out.extend_from_slice(&version.to_le_bytes());
        let mut x = (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ version.wrapping_add(1))
            .wrapping_add(sector)
            | 1;
        while out.len() < start + SECTOR {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out
}

/// kill -9 of a file-backed `nvarray serve` at a random moment while three connections write
/// stamped 4 KiB blocks (some with FUA, flushes mixed in); after each kill the server restarts
/// on the same file and every 512-byte sector (the device block) is checked: it holds a whole
/// sector of one write (never a torn one), at least as new as the last one acknowledged and no
/// newer than the last one sent.
///
/// The test command runs `NVARRAY_KILL_TRIALS` trials (default 3); `scripts/campaign.sh
/// nbd-kill` runs 1,000.
#[test]
fn acknowledged_writes_survive_kill_9_at_random_moments_under_concurrent_writers() {
    use nvarray_nbd::client::{Client, Reply};
    use nvarray_nbd::io::Stream;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::os::unix::net::UnixStream;

    const WRITERS: u64 = 3;
    const BLOCKS_PER_WRITER: u64 = 1024;
    const BLOCK: u64 = 4096;
    let trials = campaign_env("NVARRAY_KILL_TRIALS", 3);
    let seed = campaign_env("NVARRAY_KILL_SEED", 0x6b69_6c6c);
    let dir = scratch("kill-campaign");
    let disk = dir.join("disk.img");
    let backing = format!("file:{}", disk.display());
    // Per block: the last version acknowledged and the last one sent (0: none).
    let blocks = (WRITERS * BLOCKS_PER_WRITER) as usize;
    let mut acked = vec![0u64; blocks];
    let mut sent = vec![0u64; blocks];
    let mut rng = SmallRng::seed_from_u64(seed);
    let (mut total_acked, mut total_fua, mut total_flushes) = (0u64, 0u64, 0u64);
    // Blocks found holding sectors of two writes (one cut off by the kill).
    let mut mixed_blocks = 0u64;
    let started = Instant::now();
    for trial in 1..=trials {
        let replay = format!(
            "replay: NVARRAY_KILL_SEED={seed} NVARRAY_KILL_TRIALS={trial} cargo test --release \
             -p nvarray --test nbd -- acknowledged_writes_survive_kill_9_at_random"
        );
        let serve = Serve::start(&dir, &["--backing", &backing]);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let socket = serve.socket.clone();
                let mut wrng = SmallRng::seed_from_u64(rng.gen());
                let first = (w * BLOCKS_PER_WRITER) as usize;
                let mut next_version: Vec<u64> =
                    sent[first..first + BLOCKS_PER_WRITER as usize].to_vec();
                std::thread::spawn(move || {
                    // (block, version) acknowledged, in order; the versions sent.
                    let mut acks = Vec::new();
                    let (mut fua_count, mut flushes) = (0u64, 0u64);
                    let stream = match UnixStream::connect(&socket) {
                        Ok(s) => Stream::Unix(s),
                        Err(_) => return (acks, next_version, fua_count, flushes),
                    };
                    let Ok(mut c) = Client::connect(stream, "", wrng.gen_bool(0.5)) else {
                        return (acks, next_version, fua_count, flushes);
                    };
                    loop {
                        if wrng.gen_bool(0.05) {
                            match c.flush() {
                                Ok(Reply::Ok(_)) => flushes += 1,
                                _ => break,
                            }
                            continue;
                        }
                        let i = wrng.gen_range(0..BLOCKS_PER_WRITER as usize);
                        let block = first as u64 + i as u64;
                        next_version[i] += 1;
                        let v = next_version[i];
                        let fua = wrng.gen_bool(0.3);
                        match c.write(block * BLOCK, &stamped(block, v), fua) {
                            Ok(Reply::Ok(_)) => {
                                acks.push((block as usize, v));
                                fua_count += u64::from(fua);
                            }
                            Ok(r) => panic!("write of block {block} refused: {r:?}"),
                            Err(_) => break,
                        }
                    }
                    (acks, next_version, fua_count, flushes)
                })
            })
            .collect();
        // The random moment: anywhere from the handshakes to well into the writing.
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..300_000)));
        let (status, _) = serve.stop("-KILL");
        assert!(!status.success(), "{replay}");
        for (w, t) in writers.into_iter().enumerate() {
            let (acks, versions, fua, flushes) = t.join().unwrap();
            let first = w * BLOCKS_PER_WRITER as usize;
            sent[first..first + BLOCKS_PER_WRITER as usize].copy_from_slice(&versions);
            total_acked += acks.len() as u64;
            total_fua += fua;
            total_flushes += flushes;
            for (block, v) in acks {
                acked[block] = acked[block].max(v);
            }
        }
        let serve = Serve::start(&dir, &["--backing", &backing]);
        let stream = Stream::Unix(UnixStream::connect(&serve.socket).unwrap());
        let mut c = Client::connect(stream, "", true).unwrap();
        let per_read = 256u64;
        for start in (0..blocks as u64).step_by(per_read as usize) {
            let Reply::Ok(data) = c.read(start * BLOCK, (per_read * BLOCK) as u32).unwrap() else {
                panic!("trial {trial}: read after restart failed; {replay}");
            };
            for (k, got) in data.chunks(BLOCK as usize).enumerate() {
                let block = start as usize + k;
                if got.iter().all(|&b| b == 0) {
                    assert_eq!(
                        acked[block], 0,
                        "trial {trial}: block {block} is empty but version {} was acknowledged; {replay}",
                        acked[block]
                    );
                    continue;
                }
                // Each sector holds one whole write, at least as new as the last one
                // acknowledged and no newer than the last one sent; sectors of one block may
                // come from different writes if the server died in the middle of one (NBD
                // promises nothing about a write it did not acknowledge).
                let versions: Vec<u64> = got
                    .chunks(SECTOR)
                    .enumerate()
                    .map(|(i, sector)| {
                        if sector.iter().all(|&b| b == 0) {
                            assert_eq!(
                                acked[block], 0,
                                "trial {trial}: block {block} sector {i} is empty but version \
                                 {} was acknowledged; {replay}",
                                acked[block]
                            );
                            return 0; // never written
                        }
                        let v = u64::from_le_bytes(sector[16..24].try_into().unwrap());
                        let want = stamped(block as u64, v);
                        assert!(
                            sector == &want[i * SECTOR..(i + 1) * SECTOR],
                            "trial {trial}: block {block} sector {i} is torn or foreign \
                             (claims version {v}); {replay}"
                        );
                        assert!(
                            (acked[block]..=sent[block]).contains(&v),
                            "trial {trial}: block {block} sector {i} holds version {v}, \
                             acknowledged {}, sent {}; {replay}",
                            acked[block],
                            sent[block]
                        );
                        v
                    })
                    .collect();
                if versions.iter().any(|&v| v != versions[0]) {
                    mixed_blocks += 1;
                }
            }
        }
        drop(c);
        let (status, _) = serve.stop("-INT");
        assert!(
            status.success(),
            "trial {trial}: clean stop failed; {replay}"
        );
    }
    println!(
        "nbd kill -9 campaign: seed {seed:#x}, {trials} trials, {total_acked} acknowledged \
         4 KiB writes ({total_fua} FUA), {total_flushes} flushes, 0 lost, 0 torn sectors, \
         {mixed_blocks} blocks with sectors of two writes (the write cut off by the kill), \
         {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
