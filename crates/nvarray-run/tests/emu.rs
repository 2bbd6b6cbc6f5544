//! The bench runner's workload options that change what happens on the wire: `verify` checks
//! every block read (`verify_interval`: a header every so many bytes; `do_verify=0`: reads
//! unchecked), `thinktime` spaces a thread's requests.

use std::time::Instant;

mod common;

use common::one_job as workload;
use nvarray_host::BackingKind;
use nvarray_host::{Device, Options};
use nvarray_model::presets::preset;
use nvarray_model::DeviceConfig;
use nvarray_run::{emu, EmuRunError};

const SIZE: u64 = 4 << 20;

fn config() -> DeviceConfig {
    common::device_of("dram", &SIZE.to_string())
}

#[test]
fn verify_checks_what_several_threads_wrote() {
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let device = Device::open(&config(), &options).unwrap();
    // A small region, so reads often land on blocks another thread wrote.
    let w = workload(&[
        ("rw", "randrw"),
        ("bssplit", "512/50:4k/30:16k/20"),
        ("iodepth", "4"),
        ("numjobs", "2"),
        ("size", "256k"),
        ("number_ios", "3000"),
        ("verify", "crc32c"),
    ]);
    let report = emu::run_on(&device, &w, &mut |_| {}).unwrap();
    let verified = report.emulator.unwrap().verified_blocks;
    assert!(
        verified > 1000,
        "only {verified} written blocks were read back and checked"
    );
}

#[test]
fn verify_stops_the_run_on_data_the_run_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.img");
    // Neither zeroes nor a verify header: what a device returning wrong data looks like.
    std::fs::write(&path, vec![0xa5u8; SIZE as usize]).unwrap();
    let options = Options {
        backing: BackingKind::File {
            path: path.clone(),
            durable: false,
            read_only: false,
            sparse: false,
        },
        device_threads: 0,
        ..Options::default()
    };
    let device = Device::open(&config(), &options).unwrap();
    let w = workload(&[("rw", "randread"), ("number_ios", "10"), ("verify", "1")]);
    match emu::run_on(&device, &w, &mut |_| {}) {
        Err(EmuRunError::Verify(reason)) => assert!(reason.contains("neither zeroes"), "{reason}"),
        other => panic!("expected a verification error, got {other:?}"),
    }
    // Without verify the same run passes: the check is what failed it.
    let w = workload(&[("rw", "randread"), ("number_ios", "10")]);
    emu::run_on(&device, &w, &mut |_| {}).unwrap();
}

#[test]
fn thinktime_spaces_each_threads_requests() {
    let device = Device::open(&config(), &Options::default()).unwrap();
    let ios = 20u64;
    let think_us = 500u64;
    let w = workload(&[
        ("rw", "randread"),
        ("number_ios", &ios.to_string()),
        ("thinktime", &think_us.to_string()),
    ]);
    let t0 = Instant::now();
    let report = emu::run_on(&device, &w, &mut |_| {}).unwrap();
    let elapsed_us = t0.elapsed().as_micros() as u64;
    assert_eq!(report.totals.requests, ios);
    // Each request after the first waits a full think time after the previous completion.
    assert!(
        elapsed_us >= (ios - 1) * think_us,
        "{ios} requests with {think_us} µs think time took only {elapsed_us} µs"
    );
}

/// A workload asking for more real threads than the emulator starts is refused before any
/// starts, naming the limit and the simulator as the way out.
#[test]
fn too_many_threads_are_refused_before_any_starts() {
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let device = Device::open(&config(), &options).unwrap();
    let mut w = workload(&[("rw", "randread"), ("numjobs", "1024"), ("number_ios", "1")]);
    w.jobs.push(w.jobs[0].clone());
    let Err(EmuRunError::Workload(message)) = emu::run_on(&device, &w, &mut |_| {}) else {
        panic!("2048 threads were not refused");
    };
    assert!(message.contains("2048 threads"), "{message}");
    assert!(message.contains("--engine sim"), "{message}");
}

/// The null device through the whole emulator: no request is seen before its fixed latency
/// has passed, and the model's share of every request is exactly that latency (what is left
/// is the emulator's and the host's own time).
#[test]
fn the_null_device_completes_every_request_its_latency_after_submission() {
    let latency_ns = 20_000;
    let cfg = preset("null")
        .unwrap()
        .load(&[
            ("memory.capacity_bytes".into(), SIZE.to_string()),
            ("model.null_latency_ns".into(), latency_ns.to_string()),
        ])
        .unwrap();
    for device_threads in [0, 1] {
        let options = Options {
            device_threads,
            ..Options::default()
        };
        let device = Device::open(&cfg, &options).unwrap();
        let w = workload(&[
            ("rw", "randrw"),
            ("bssplit", "512/50:16k/50"),
            ("iodepth", "4"),
            ("number_ios", "2000"),
        ]);
        let report = emu::run_on(&device, &w, &mut |_| {}).unwrap();
        let totals = &report.totals;
        assert_eq!(totals.requests, 2000);
        assert!(
            totals.latency_ns.min >= latency_ns,
            "a request was seen {} ns after submission, before the null device's {latency_ns} ns \
             ({device_threads} device threads)",
            totals.latency_ns.min
        );
        let media = totals
            .breakdown_ns
            .0
            .iter()
            .find(|(name, _)| *name == "media")
            .unwrap()
            .1;
        assert_eq!(
            media, latency_ns as f64,
            "the model's share of each request"
        );
    }
}

/// A remote device (`[fabric]`) in the emulator: real requests wait for both messages' trips
/// (no request is seen sooner than the network allows), and the breakdown gives the network
/// the same share as the simulator does.
#[test]
fn a_remote_device_makes_real_requests_wait_for_the_network() {
    // 20 us each way: far above the machine's own noise.
    let cfg = preset("dram")
        .unwrap()
        .load(&[
            ("memory.capacity_bytes".into(), SIZE.to_string()),
            ("fabric.kind".into(), "tcp".into()),
            ("fabric.bandwidth_bytes_per_s".into(), "1000000000".into()),
            ("fabric.hop_latency_ns".into(), "15000".into()),
            ("fabric.remote_cpu_ns".into(), "5000".into()),
        ])
        .unwrap();
    let w = workload(&[("rw", "randread"), ("bs", "4k"), ("number_ios", "500")]);
    let sim = nvarray_run::sim::run(&cfg, &w).unwrap();
    let fabric = |r: &nvarray_run::RunReport| {
        r.totals
            .breakdown_ns
            .0
            .iter()
            .find(|(name, _)| *name == "fabric")
            .unwrap()
            .1
    };
    // Request 64 B and response 64 B + 4 KiB at a byte a nanosecond, 15 us and 5 us each way.
    let expected = (64 + 64 + 4096 + 2 * (15_000 + 5_000)) as f64;
    assert_eq!(fabric(&sim), expected);
    let device = Device::open(&cfg, &Options::default()).unwrap();
    let emu = emu::run_on(&device, &w, &mut |_| {}).unwrap();
    assert_eq!(emu.totals.requests, 500);
    assert!(
        emu.totals.latency_ns.min as f64 >= expected,
        "a request was seen {} ns after issue, sooner than the network's {expected} ns",
        emu.totals.latency_ns.min
    );
    assert_eq!(fabric(&emu), expected, "the model's share of each request");
    let u = &emu.utilisation;
    assert!(
        u.fabric_to_host.is_some() && u.remote_cpu.is_some(),
        "{u:?}"
    );
}

/// A run bounded by its request count ends when its last request does: the run's time is
/// the threads' own (not rounded up to the next look of the thread that watches them), so
/// requests over `elapsed_ns` is the reported IOPS and utilisation is over the time the
/// device was used. (It was taken at a 50 ms progress tick: a 5,000-request run on the null
/// device, a few milliseconds of work, reported at least 50 ms.)
#[test]
fn a_counted_run_ends_when_its_last_request_does() {
    let cfg = preset("null")
        .unwrap()
        .load(&[("memory.capacity_bytes".into(), SIZE.to_string())])
        .unwrap();
    let device = Device::open(&cfg, &Options::default()).unwrap();
    let w = workload(&[
        ("rw", "randread"),
        ("bs", "512"),
        ("iodepth", "4"),
        ("number_ios", "5000"),
    ]);
    let report = emu::run_on(&device, &w, &mut |_| {}).unwrap();
    assert_eq!(report.totals.requests, 5000);
    let iops_over_elapsed = report.totals.requests as f64 / (report.elapsed_ns as f64 / 1e9);
    let ratio = report.totals.iops / iops_over_elapsed;
    // The run's time also holds starting the thread, which is nobody's I/O: a little over
    // the thread's own, never several times it.
    assert!(
        (1.0..1.5).contains(&ratio),
        "IOPS {:.0} against {} requests in {} ns ({iops_over_elapsed:.0} per second)",
        report.totals.iops,
        report.totals.requests,
        report.elapsed_ns
    );
}

/// `verify_interval` puts a header every so many bytes inside a device block, and
/// `do_verify=0` writes checkable data without checking reads (fio's surface-scan: a write
/// phase, then a read phase that checks): the read phase checks every block the write phase
/// wrote, a read job with `do_verify=0` none, and a corrupted interval inside a block fails.
#[test]
fn verify_interval_and_do_verify_split_writing_from_checking() {
    let cfg = preset("dram")
        .unwrap()
        .load(&[
            ("memory.capacity_bytes".into(), "1m".into()),
            ("controller.block_bytes".into(), "4096".into()),
        ])
        .unwrap();
    let device = Device::open(&cfg, &Options::default()).unwrap();
    let job = |rw: &str, do_verify: &str| {
        nvarray_workload::parse_job_file(&format!(
            "[j]\nrw={rw}\nbs=64k\nverify=meta\nverify_pattern=0xaa555aa5\nverify_interval=512\n\
             fill_device=1\nsize=64k\nruntime=0\ndo_verify={do_verify}\n"
        ))
        .unwrap()
    };
    let wrote = emu::run_on(&device, &job("write", "0"), &mut |_| {}).unwrap();
    assert_eq!(
        wrote.totals.write_bytes,
        1 << 20,
        "fill_device: the whole device"
    );
    let unchecked = emu::run_on(&device, &job("read", "0"), &mut |_| {}).unwrap();
    assert_eq!(unchecked.emulator.unwrap().verified_blocks, 0);
    let checked = emu::run_on(&device, &job("read", "1"), &mut |_| {}).unwrap();
    assert_eq!(
        checked.emulator.unwrap().verified_blocks,
        256,
        "1 MiB of 4 KiB blocks"
    );
    // A block overwritten with plain data fails the check, named by its offset.
    let plain = workload(&[
        ("rw", "write"),
        ("bs", "4k"),
        ("size", "4k"),
        ("offset", "8k"),
    ]);
    emu::run_on(&device, &plain, &mut |_| {}).unwrap();
    match emu::run_on(&device, &job("read", "1"), &mut |_| {}) {
        Err(EmuRunError::Verify(reason)) => assert!(reason.contains("8192"), "{reason}"),
        other => panic!("expected a verification error, got {other:?}"),
    }
}

/// A verify_interval the device's blocks do not split into is refused, naming both.
#[test]
fn a_verify_interval_that_does_not_divide_a_block_is_refused() {
    let device = Device::open(&config(), &Options::default()).unwrap();
    let w = workload(&[
        ("rw", "write"),
        ("verify", "crc32c"),
        ("verify_interval", "768"),
        ("number_ios", "1"),
    ]);
    let Err(EmuRunError::Workload(message)) = emu::run_on(&device, &w, &mut |_| {}) else {
        panic!("verify_interval=768 was not refused");
    };
    assert!(message.contains("verify_interval=768"), "{message}");
}

/// `verify_backlog=N`: after every N writes the thread drains and reads them back, and the
/// emulator checks each; fio's byte budget doubles for the reads, so the job writes its size
/// and reads all of it back.
#[test]
fn verify_backlog_reads_back_every_write_as_it_goes() {
    let device = Device::open(&config(), &Options::default()).unwrap();
    let w = workload(&[
        ("rw", "randwrite"),
        ("iodepth", "4"),
        ("verify", "crc32c"),
        ("verify_backlog", "8"),
        ("size", "256k"),
        ("io_size", "256k"),
        ("runtime", "0"),
    ]);
    let r = emu::run_on(&device, &w, &mut |_| {}).unwrap();
    assert_eq!(r.totals.write_bytes, 256 << 10);
    assert_eq!(r.totals.read_bytes, 256 << 10, "every write read back");
    let blocks = (256u64 << 10) / u64::from(device.block_bytes());
    assert_eq!(r.emulator.unwrap().verified_blocks, blocks);
}

/// A paced request due before the run's end that finds its only slot taken until after the
/// end is issued by neither engine, as fio 3.33 (`plan::issues_before_end`; issue 55: the
/// emulator issued it, the simulator did not). A device that takes exactly 1 ms a command,
/// one slot, requests due every 0.5 ms, a 10 ms run: ten go, at 0, 1, ..., 9 ms; the
/// eleventh, due at 5 ms, finds the slot at 10 ms, the end. The emulator, on wall time, may
/// issue fewer on a busy machine, never the eleventh.
#[test]
fn a_paced_request_that_waits_past_the_end_is_issued_by_neither_engine() {
    let mut config = common::device_of("null", &SIZE.to_string());
    config.model.null_latency_ns = 1_000_000;
    let w = workload(&[
        ("rw", "randread"),
        ("iodepth", "1"),
        ("rate_iops", "2000"),
        ("runtime", "10ms"),
    ]);
    let simulated = nvarray_run::sim::run(&config, &w).unwrap();
    assert_eq!(simulated.totals.requests, 10);
    let device = Device::open(
        &config,
        &Options {
            device_threads: 0,
            ..Options::default()
        },
    )
    .unwrap();
    let emulated = emu::run_on(&device, &w, &mut |_| {}).unwrap();
    // The emulator keeps wall time: a busy machine may delay its thread so that fewer than ten
    // go before the end, never more (before the fix it issued the eleventh).
    assert!(
        (1..=10).contains(&emulated.totals.requests),
        "{} requests emulated, the simulator's ten at most",
        emulated.totals.requests
    );
}
