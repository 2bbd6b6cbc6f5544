//! The timing model's own cost per command, called the way the emulator calls it.
//!
//! The emulator's device thread runs one `DeviceModel` against the wall clock; at QD 32 with the
//! `dram` preset its per-command budget for the ≥ 3 M IOPS target (issue 3) is 333 ns, and the
//! model is the largest single share of it. This bench drives the model as the emulator's
//! passes do — submit the commands that arrived since the last pass at one `now`, then
//! `advance(now)` — with a virtual clock moving a fixed step per command, so the figure is
//! the model alone: no rings, no data, no clock reads.
//!
//! Run with `cargo bench -p nvarray-model --bench model_cost`. It prints the median ns per
//! command over several runs and a digest of every completion's time and breakdown: a
//! change meant to make the model faster, not different, must leave the digest unchanged.
//! `model_cost digests [COMMANDS]` prints the digest of every preset under three workloads
//! (4 KiB random reads, 4 KiB random writes, a 30 % write mix of 4–64 KiB), which is the
//! wider check that such a change is exact: pieces, erases, wear levelling, disks, firmware
//! controllers and every protocol.

use std::hint::black_box;
use std::time::Instant;

use nvarray_model::presets::{preset, PRESETS};
use nvarray_model::{Command, DeviceModel, Op};

const RUNS: usize = 7;
const COMMANDS: u64 = 2_000_000;

/// `model_cost [COMMANDS [RUNS [CASE]]]` (cargo's own `--bench` flag is skipped): a shorter
/// run of one case (names containing CASE) suits `valgrind --tool=callgrind`, whose
/// instruction counts do not drift with the shared host.
fn arguments() -> (u64, usize, String) {
    if std::env::var_os("NVARRAY_BENCH_SMOKE").is_some() {
        // The test command's smoke run: one short run of every case, no timing read.
        return (2_000, 1, String::new());
    }
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let commands = args.next().and_then(|a| a.parse().ok()).unwrap_or(COMMANDS);
    let runs = args.next().and_then(|a| a.parse().ok()).unwrap_or(RUNS);
    let case = args.next().unwrap_or_default();
    (commands, runs.max(1), case)
}

/// One case: name, preset, overrides, transfer size, queue depth, commands per pass, virtual
/// nanoseconds per command (how fast the emulated host turns a completion around).
struct Case {
    name: &'static str,
    preset: &'static str,
    overrides: &'static [(&'static str, &'static str)],
    /// Transfer sizes, drawn uniformly per command.
    lens_bytes: &'static [u32],
    /// Share of writes, in percent.
    write_percent: u64,
    queue_depth: usize,
    step_ns: u64,
}

/// xorshift64*: a fixed, dependency-free sequence of offsets.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Runs `commands` commands; returns (wall ns, digest).
fn run(case: &Case, commands: u64) -> (u64, u64) {
    let overrides: Vec<(String, String)> = case
        .overrides
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cfg = preset(case.preset)
        .expect("known preset")
        .load(&overrides)
        .expect("valid preset");
    let mut device = DeviceModel::new(&cfg);
    // Offsets are multiples of the largest size, so every command is aligned and inside.
    let largest = u64::from(*case.lens_bytes.iter().max().expect("a size"));
    let blocks = cfg.memory.capacity_bytes / largest;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut digest = 0u64;
    let mut now = 0u64;
    let mut issued = 0u64;
    let mut done = 0u64;
    let mut ready = case.queue_depth;
    let start = Instant::now();
    while done < commands {
        // One pass of the emulator's device thread: first what was due by `now`, then the
        // commands that arrived since the last pass, all dated `now` (the model asserts this
        // order: a command must find the device as it is at its date).
        device.advance(now, |c| {
            digest = digest
                .rotate_left(5)
                .wrapping_add(c.visible_ns ^ c.id.wrapping_mul(0x9e37))
                .wrapping_add(c.breakdown.total_ns());
            done += 1;
            ready += 1;
        });
        while ready > 0 && issued < commands {
            let offset_bytes = next_random(&mut rng) % blocks * largest;
            let (op, len_bytes) = if case.lens_bytes.len() == 1 && case.write_percent == 0 {
                // The timed cases draw one number per command, as they always have.
                (Op::Read, case.lens_bytes[0])
            } else {
                let draw = next_random(&mut rng);
                let op = if draw % 100 < case.write_percent {
                    Op::Write
                } else {
                    Op::Read
                };
                let len = case.lens_bytes[(draw / 100) as usize % case.lens_bytes.len()];
                (op, len)
            };
            let cmd = Command {
                id: issued,
                op,
                offset_bytes,
                len_bytes,
                placement: 0,
            };
            device.submit(cmd, now).expect("valid command");
            issued += 1;
            ready -= 1;
        }
        // The next pass: a host turnaround later, or at the next event if the device is
        // idle until then.
        now = match device.next_event_ns() {
            Some(t) => t.max(now + case.step_ns),
            None => now + case.step_ns,
        };
    }
    (start.elapsed().as_nanos() as u64, black_box(digest))
}

fn main() {
    let cases = [
        Case {
            name: "dram nvme 512 B randread qd32",
            preset: "dram",
            overrides: &[("memory.capacity_bytes", "1g")],
            lens_bytes: &[512],
            write_percent: 0,
            queue_depth: 32,
            step_ns: 300,
        },
        Case {
            name: "moneta 4 KiB randread qd16",
            preset: "moneta",
            overrides: &[],
            lens_bytes: &[4096],
            write_percent: 0,
            queue_depth: 16,
            step_ns: 300,
        },
        // The seed device's case the emulator cannot keep up with (2.48 M IOPS, issue 38).
        Case {
            name: "moneta 512 B randread qd16",
            preset: "moneta",
            overrides: &[],
            lens_bytes: &[512],
            write_percent: 0,
            queue_depth: 16,
            step_ns: 300,
        },
    ];
    if std::env::args().nth(1).as_deref() == Some("digests") {
        let commands = std::env::args()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(20_000);
        print_digests(commands);
        return;
    }
    println!(
        "{:<34} {:>10} {:>16} {:>18}  raw runs (ns/command)",
        "case", "commands", "median ns/cmd", "digest"
    );
    let (commands, runs, only) = arguments();
    for case in cases.iter().filter(|c| c.name.contains(&only)) {
        let mut per_command = Vec::with_capacity(runs);
        let mut digests = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (ns, digest) = run(case, commands);
            per_command.push(ns as f64 / commands as f64);
            digests.push(digest);
        }
        assert!(
            digests.windows(2).all(|w| w[0] == w[1]),
            "the model is not deterministic: {digests:x?}"
        );
        let raw: Vec<String> = per_command.iter().map(|x| format!("{x:.0}")).collect();
        let mut sorted = per_command.clone();
        sorted.sort_by(f64::total_cmp);
        println!(
            "{:<34} {:>10} {:>16.0} {:>18x}  {}",
            case.name,
            commands,
            sorted[runs / 2],
            digests[0],
            raw.join(" ")
        );
    }
}

/// Every preset under three workloads, one digest each (see the module docs).
fn print_digests(commands: u64) {
    let workloads: [(&str, &'static [u32], u64, usize); 3] = [
        ("4k randread qd16", &[4096], 0, 16),
        ("4k randwrite qd16", &[4096], 100, 16),
        ("4k-64k 30% writes qd32", &[4096, 16384, 65536], 30, 32),
    ];
    println!("{:<20} {:<24} {:>18}", "preset", "workload", "digest");
    for p in PRESETS {
        for &(workload, lens_bytes, write_percent, queue_depth) in &workloads {
            let case = Case {
                name: workload,
                preset: p.name,
                overrides: &[],
                lens_bytes,
                write_percent,
                queue_depth,
                step_ns: 300,
            };
            let (_, digest) = run(&case, commands);
            println!("{:<20} {:<24} {:>18x}", p.name, workload, digest);
        }
    }
}
