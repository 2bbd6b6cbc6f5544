//! fio's options that shape a run in time, in both engines: `stonewall` and `wait_for` run
//! jobs one after another on the one device (so a later job reads what an earlier one wrote),
//! `new_group` reports jobs apart while they run together, `ramp_time` leaves a warm-up out of
//! every figure, and a paced job counts the requests it could not issue on time.

mod common;

use common::one_job;
use nvarray_host::{Device, Options};
use nvarray_model::DeviceConfig;
use nvarray_run::{emu, sim};
use nvarray_workload::{parse_job_file, Workload};

fn device(name: &str) -> DeviceConfig {
    common::device_of(name, "64m")
}

/// Two saturating random-read jobs, the second with `between` (a phase or group key) or
/// nothing.
fn two_jobs(between: &str) -> Workload {
    parse_job_file(&format!(
        "[global]\nrw=randread\niodepth=32\nruntime=4ms\n[a]\n[b]\n{between}\n"
    ))
    .unwrap()
}

#[test]
fn stonewall_runs_the_jobs_one_after_another_each_as_fast_as_alone() {
    let cfg = device("optane");
    let alone = sim::run(
        &cfg,
        &one_job(&[("rw", "randread"), ("iodepth", "32"), ("runtime", "4ms")]),
    )
    .unwrap()
    .totals
    .iops;
    let together = sim::run(&cfg, &two_jobs("")).unwrap();
    for walled in ["stonewall", "wait_for_previous", "wait_for=a"] {
        let r = sim::run(&cfg, &two_jobs(walled)).unwrap();
        assert_eq!(
            r.elapsed_ns, 8_000_000,
            "{walled}: 4 ms each, one after the other"
        );
        for s in &r.streams {
            let ratio = s.totals.iops / alone;
            assert!(
                (0.95..1.05).contains(&ratio),
                "{walled}: {} at {ratio} of alone",
                s.name
            );
        }
        assert_eq!(r.groups.len(), 2, "{walled}");
        assert_eq!(r.groups[1].jobs, ["b"]);
        assert_eq!(r.groups[1].totals.requests, r.streams[1].totals.requests);
        // The whole: both jobs' requests over both phases' time.
        let whole = (r.streams[0].totals.requests + r.streams[1].totals.requests) as f64 / 8e-3;
        assert!(
            (r.totals.iops / whole - 1.0).abs() < 1e-9,
            "{} {whole}",
            r.totals.iops
        );
    }
    // Side by side they share the device: each gets about half.
    assert_eq!(together.elapsed_ns, 4_000_000);
    assert!(together.groups.is_empty(), "one group");
    for s in &together.streams {
        assert!(
            s.totals.iops < 0.7 * alone,
            "{}: {} against {alone}",
            s.name,
            s.totals.iops
        );
    }
}

#[test]
fn new_group_reports_apart_jobs_that_run_together() {
    let r = sim::run(&device("optane"), &two_jobs("new_group")).unwrap();
    assert_eq!(r.elapsed_ns, 4_000_000, "side by side");
    assert_eq!(r.groups.len(), 2);
    assert_eq!((r.streams[0].group, r.streams[1].group), (0, 1));
    for (g, s) in r.groups.iter().zip(&r.streams) {
        assert_eq!(g.jobs, std::slice::from_ref(&s.name));
        assert_eq!(g.totals.iops, s.totals.iops);
    }
}

#[test]
fn ramp_time_is_left_out_of_every_figure() {
    let cfg = device("optane");
    // A job whose first requests are fast (an idle device) and later ones queue: thinktime
    // 0 and a deep queue fill the device within microseconds, so compare the same steady
    // state measured with and without a warm-up in front of it.
    let steady = sim::run(
        &cfg,
        &one_job(&[("rw", "randread"), ("iodepth", "64"), ("runtime", "6ms")]),
    )
    .unwrap();
    let ramped = sim::run(
        &cfg,
        &one_job(&[
            ("rw", "randread"),
            ("iodepth", "64"),
            ("runtime", "4ms"),
            ("ramp_time", "2ms"),
        ]),
    )
    .unwrap();
    assert_eq!(
        ramped.elapsed_ns, 4_000_000,
        "the measured window, without the ramp"
    );
    let ratio = ramped.totals.iops / steady.totals.iops;
    assert!((0.97..1.03).contains(&ratio), "{ratio}");
    let (a, b) = (&ramped.utilisation, &steady.utilisation);
    assert!((a.banks - b.banks).abs() < 0.03, "{a:?} {b:?}");
    // About 4 of the 6 ms of requests: the ramp's completions are not counted.
    let share = ramped.totals.requests as f64 / steady.totals.requests as f64;
    assert!((0.64..0.70).contains(&share), "{share}");

    // A paced job with a ramp: exactly the requests due after it.
    let paced = sim::run(
        &device("dram"),
        &one_job(&[
            ("rate_iops", "100000"),
            ("runtime", "10ms"),
            ("ramp_time", "5ms"),
        ]),
    )
    .unwrap();
    assert_eq!(
        paced.totals.requests, 1000,
        "10 ms at 100,000 a second after a 5 ms ramp"
    );
}

#[test]
fn a_paced_job_counts_the_requests_it_issued_late() {
    let cfg = device("optane");
    // Optane's reads take about 10 µs: one slot cannot keep 1,000,000 a second.
    let over = sim::run(
        &cfg,
        &one_job(&[("rate_iops", "1000000"), ("runtime", "2ms")]),
    )
    .unwrap();
    let late = over.paced_issued_late.unwrap();
    assert!(
        late > 100 && late <= over.totals.requests,
        "{late} of {}",
        over.totals.requests
    );
    let under = sim::run(
        &cfg,
        &one_job(&[("rate_iops", "10000"), ("runtime", "2ms")]),
    )
    .unwrap();
    assert_eq!(under.paced_issued_late, Some(0));
    // A light load keeps every resource, pools of them too, mostly idle (a pool's busy
    // time is over its members: 10,000 a second of 10 µs reads is 10 % of one bank).
    let u = &under.utilisation;
    for (name, busy) in [
        ("controller", u.controller),
        ("banks", u.banks),
        ("buffers", u.buffers),
        ("tags", u.tags),
    ] {
        assert!(busy < 0.15, "{name} {busy}: {u:?}");
    }
    let unpaced = sim::run(&cfg, &one_job(&[("runtime", "2ms")])).unwrap();
    assert_eq!(unpaced.paced_issued_late, None);
}

/// `number_ios` counts the requests after the ramp, as in fio 3.33 (`rate_iops=1000
/// number_ios=2000 ramp_time=1` does 2,000 after its one-second ramp), in both engines; a
/// byte limit (`io_size`) counts the ramp's bytes too, as fio's does (measured with fio 3.33
/// and `ioengine=null`: `size=8m ramp_time=1` at 1,000 a second reports 1,047 requests).
#[test]
fn number_ios_counts_after_the_ramp_and_bytes_from_the_start() {
    let cfg = device("dram");
    let counted = one_job(&[
        ("rate_iops", "10000"),
        ("number_ios", "200"),
        ("ramp_time", "10ms"),
    ]);
    let sized = one_job(&[
        ("rate_iops", "10000"),
        ("io_size", "1200k"),
        ("ramp_time", "10ms"),
    ]);
    let r = sim::run(&cfg, &counted).unwrap();
    assert_eq!(r.totals.requests, 200, "sim: 200 after the ramp");
    let r = sim::run(&cfg, &sized).unwrap();
    // 300 requests of 4 KiB in all; the ramp's 100 are not measured.
    assert_eq!(
        r.totals.requests, 200,
        "sim: 300 in all, 100 of them in the ramp"
    );
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let opened = Device::open(&cfg, &options).unwrap();
    // The emulator also counts a request in flight when the ramp ends (at QD 1, at most one),
    // as fio does: on a loaded machine the thread may collect it only after the ramp.
    let r = emu::run_on(&opened, &counted, &mut |_| {}).unwrap();
    assert!(
        (200..=201).contains(&r.totals.requests),
        "emu: 200 after the ramp, got {}",
        r.totals.requests
    );
    let r = emu::run_on(&opened, &sized, &mut |_| {}).unwrap();
    assert!(
        (200..=201).contains(&r.totals.requests),
        "emu: 300 in all, 100 of them in the ramp, got {}",
        r.totals.requests
    );
}

#[test]
fn the_emulator_runs_phases_in_order_on_one_device() {
    let options = Options {
        device_threads: 0,
        ..Options::default()
    };
    let opened = Device::open(&device("dram"), &options).unwrap();
    // The second phase reads back, verifying, what the first wrote: only possible if the
    // writes all finished first, on the same device.
    let w = parse_job_file(
        "[global]\nbs=4k\nsize=1m\nruntime=0\nverify=crc32c\n[fill]\nrw=write\n[check]\nstonewall\nrw=read\n",
    )
    .unwrap();
    let r = emu::run_on(&opened, &w, &mut |_| {}).unwrap();
    assert_eq!(r.streams[0].totals.write_bytes, 1 << 20);
    assert_eq!(r.streams[1].totals.read_bytes, 1 << 20);
    assert_eq!(
        r.emulator.as_ref().unwrap().verified_blocks,
        (1 << 20) / u64::from(opened.block_bytes()),
        "every block read back checked"
    );
    assert_eq!(r.groups.len(), 2);

    // A ramp in the emulator: nothing that completed before it is counted.
    let w = one_job(&[
        ("rw", "randread"),
        ("runtime", "30ms"),
        ("ramp_time", "20ms"),
        ("rate_iops", "10000"),
    ]);
    let mut fractions = Vec::new();
    let r = emu::run_on(&opened, &w, &mut |f| fractions.push(f)).unwrap();
    // 300 due after the ramp (one every 100 µs for 30 ms).
    common::assert_paced_count(&r, 295..=300);
    assert!(
        fractions.windows(2).all(|w| w[0] <= w[1]),
        "progress only grows: {fractions:?}"
    );
    assert_eq!(fractions.last(), Some(&1.0));
}

#[test]
fn the_simulators_progress_grows_through_the_phases_to_one() {
    // Two phases of 300,000 requests each: about four events a request, so the callback
    // (every 2^18 events) is called a few times in each.
    let w = parse_job_file(
        "[global]\nrw=randread\niodepth=8\nnumber_ios=300000\n[a]\n[b]\nstonewall\nrw=write\nio_size=1g\nnumber_ios=0\nbs=4k\n",
    )
    .unwrap();
    let mut fractions = Vec::new();
    let r = sim::run_with_progress(&device("dram"), &w, &mut |f| fractions.push(f)).unwrap();
    assert_eq!(r.streams[1].totals.write_bytes, 1 << 30);
    assert!(fractions.windows(2).all(|w| w[0] <= w[1]), "{fractions:?}");
    assert_eq!(fractions.last(), Some(&1.0));
    let first_half = fractions.iter().filter(|f| (0.0..0.5).contains(*f)).count();
    let second_half = fractions.iter().filter(|f| (0.5..1.0).contains(*f)).count();
    assert!(first_half >= 2 && second_half >= 2, "{fractions:?}");
}
