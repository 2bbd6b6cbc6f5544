//! `cargo bench -p nvarray-channel --bench channel_speed`: what a channel costs.
//!
//! 1. The permission check (`Extents::allows`) per command, with 1, 16 and 256 extents
//!    granted to the user: ns per check, median of 5 runs of 10^6 checks of varied ranges.
//! 2. A channel's round trip on the `null` device (every command completes 1 ns after
//!    submission, so what is measured is the channel path itself: the client's ring write,
//!    the daemon's take, check, copy and post, the client's poll): 4 KiB reads at QD 1, p50
//!    and p99 µs as the client sees them, and IOPS at QD 16; an in-process daemon and client
//!    on the machine's 2 cores.
//!
//! With `NVARRAY_BENCH_SMOKE` set (the test command's smoke run): one short run of each,
//! nothing compared.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvarray_channel::grants::{parse_grants, Extents};
use nvarray_channel::{Channel, Daemon, DaemonOptions, Op};
use nvarray_host::{Device, Options};

fn smoke() -> bool {
    std::env::var_os("NVARRAY_BENCH_SMOKE").is_some()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn permission_check(extents: usize) -> f64 {
    let text: String = (0..extents)
        .map(|i| format!("g{i}:{}:4k:rw:1\n", (i as u64) * 8192))
        .collect();
    let e = Extents::for_uid(&parse_grants(&text).unwrap(), 1);
    let checks = if smoke() { 1_000 } else { 1_000_000u64 };
    let runs = if smoke() { 1 } else { 5 };
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                let mut allowed = 0u64;
                for i in 0..checks {
                    // Ranges over every extent and the gaps between them.
                    let offset = (i * 4096) % (extents as u64 * 8192);
                    allowed += u64::from(black_box(&e).allows(i & 1 == 0, black_box(offset), 4096));
                }
                black_box(allowed);
                t.elapsed().as_nanos() as f64 / checks as f64
            })
            .collect(),
    )
}

fn round_trips(socket: &std::path::Path) {
    let mut ch = Channel::open_with(socket, 16, 16 * 4096).unwrap();
    let run = if smoke() {
        Duration::from_millis(50)
    } else {
        Duration::from_secs(2)
    };
    // QD 1: one command at a time, each timed.
    let mut lat = Vec::with_capacity(1 << 20);
    let t = Instant::now();
    let mut i = 0u64;
    while t.elapsed() < run {
        let s = Instant::now();
        ch.submit(Op::Read, (i % 4096) * 4096, 4096, 0, i).unwrap();
        ch.wait(1, |_| {}).unwrap();
        lat.push(s.elapsed().as_nanos() as f64 / 1e3);
        i += 1;
    }
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    println!(
        "channel round trip, null device, 4 KiB reads QD 1: p50 {:.2} us, p99 {:.2} us ({} commands)",
        p(0.5),
        p(0.99),
        lat.len()
    );
    // QD 16: keep 16 in flight.
    let t = Instant::now();
    let mut done = 0u64;
    let mut issued = 0u64;
    while t.elapsed() < run {
        while ch.in_flight() < 16 {
            let slot = issued % 16;
            ch.submit(Op::Read, (issued % 4096) * 4096, 4096, slot * 4096, slot)
                .unwrap();
            issued += 1;
        }
        done += ch.wait(1, |_| {}).unwrap() as u64;
    }
    println!(
        "channel IOPS, null device, 4 KiB reads QD 16: {:.0}",
        done as f64 / t.elapsed().as_secs_f64()
    );
}

fn main() {
    for n in [1, 16, 256] {
        println!(
            "permission check, {n} extents: {:.2} ns per command (median of 5 x 10^6)",
            permission_check(n)
        );
    }
    let mut config = nvarray_model::presets::preset("null")
        .unwrap()
        .load(&[])
        .unwrap();
    config.memory.capacity_bytes = 64 << 20;
    let device = Arc::new(
        Device::open(
            &config,
            &Options {
                device_threads: 0,
                ..Options::default()
            },
        )
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("bench.sock");
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let daemon = Arc::new(
        Daemon::bind(
            Arc::clone(&device),
            DaemonOptions {
                socket: socket.clone(),
                grants: parse_grants(&format!("all:0:64m:rw:{uid}")).unwrap(),
                channels_max: 4,
            },
        )
        .unwrap(),
    );
    let stop = daemon.shutdown_handle();
    let running = Arc::clone(&daemon);
    let thread = std::thread::spawn(move || running.run());
    round_trips(&socket);
    stop.shutdown();
    thread.join().unwrap().unwrap();
}
