//! The FTL's own cost: preconditioning a 64 GiB device (issue 41: "in seconds, not minutes")
//! and a steady-state page write under each victim policy.
//!
//! Run with `cargo bench -p nvarray-ftl --bench ftl_cost [GIB]` (default 64). It prints the
//! seconds the fill and the random drive-writes took and the median ns per page write over
//! three runs; the test command's smoke run (NVARRAY_BENCH_SMOKE) uses 64 MiB and one run.
//! `ftl_cost table` prints instead the steady-state write amplification of each victim
//! policy at each over-provisioning of issue 41's targets beside its closed form.

use std::time::Instant;

use nvarray_ftl::analysis::{
    fifo_hot_cold_write_amplification, fifo_write_amplification, hot_cold,
    random_write_amplification,
};
use nvarray_ftl::{
    one_die_ftl, precondition, steady_write_amplification, Ftl, FtlConfig, GcWork, Geometry,
    Precondition, VictimPolicy, Workload,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// tlc's 64 dies with 1 MiB erase blocks of 4 KiB mapping pages (docs/flash.md's example:
/// the preset's 16 MiB blocks make lines too coarse for 64 GiB).
fn tlc_like(victim: VictimPolicy, logical_bytes: u64) -> Ftl {
    let cfg = FtlConfig {
        enabled: true,
        victim,
        ..FtlConfig::default()
    };
    let geometry = Geometry {
        dies: 64,
        pages_per_block: 256,
        logical_pages: logical_bytes / 4096,
    };
    Ftl::new(&cfg, geometry).expect("a valid FTL")
}

/// Measured against closed form, 2 drive-writes of warm-up and 5 measured.
fn table(logical: u64) {
    let hot_cold_writes = Workload::HotCold {
        hot_writes: 0.8,
        hot_space: 0.2,
    };
    let classes = hot_cold(0.8, 0.2);
    println!("| OP | α | fifo | closed form | random | 1/S_f | greedy 32 | greedy 256 | fifo 80/20 | mean field |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for op in [0.07, 0.10, 0.20, 0.28, 0.50] {
        let run = |victim, ppb, workload| {
            let mut f = one_die_ftl(victim, op, ppb, logical);
            let wa = steady_write_amplification(&mut f, workload, 2, 5, 7);
            (wa, f.alpha())
        };
        let (fifo, alpha) = run(VictimPolicy::Fifo, 32, Workload::Uniform);
        let (random, _) = run(VictimPolicy::Random, 32, Workload::Uniform);
        let (greedy32, _) = run(VictimPolicy::Greedy, 32, Workload::Uniform);
        let (greedy256, alpha256) = run(VictimPolicy::Greedy, 256, Workload::Uniform);
        let (hc, _) = run(VictimPolicy::Fifo, 32, hot_cold_writes);
        println!(
            "| {:.0} % | {alpha:.4} | {fifo:.3} | {:.3} | {random:.3} | {:.3} | {greedy32:.3} | \
             {greedy256:.3} (form {:.3}) | {hc:.3} | {:.3} |",
            op * 100.0,
            fifo_write_amplification(alpha),
            random_write_amplification(alpha),
            fifo_write_amplification(alpha256),
            fifo_hot_cold_write_amplification(alpha, &classes),
        );
    }
}

fn main() {
    let smoke = std::env::var_os("NVARRAY_BENCH_SMOKE").is_some();
    if smoke {
        table(1 << 16);
    } else if std::env::args().any(|a| a == "table") {
        table(1 << 20);
        return;
    }
    let gib: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--") && a != "table")
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let (bytes, runs) = if smoke { (64 << 20, 1) } else { (gib << 30, 3) };
    // A smaller line for the smoke run's 64 MiB (the spare area must hold a few lines).
    let policy_ftl = |victim| {
        if smoke {
            let cfg = FtlConfig {
                enabled: true,
                victim,
                ..FtlConfig::default()
            };
            let g = Geometry {
                dies: 2,
                pages_per_block: 32,
                logical_pages: bytes / 4096,
            };
            Ftl::new(&cfg, g).expect("a valid FTL")
        } else {
            tlc_like(victim, bytes)
        }
    };
    let mut ftl = policy_ftl(VictimPolicy::Greedy);
    let started = Instant::now();
    let done = precondition(
        &mut ftl,
        Precondition::Random { drive_writes: 2.0 },
        1,
        |_| {},
    );
    let took = started.elapsed().as_secs_f64();
    println!(
        "precondition random:2 of {} logical pages ({:.0} GiB): {took:.2} s, {:.1} ns a page \
         written, write amplification {:.3}",
        ftl.logical_pages(),
        bytes as f64 / f64::from(1 << 30),
        took * 1e9 / done.pages_written as f64,
        done.write_amplification
    );
    for victim in VictimPolicy::ALL {
        let mut ftl = policy_ftl(victim);
        precondition(&mut ftl, Precondition::Fill, 1, |_| {});
        let writes = ftl
            .logical_pages()
            .min(if smoke { 1 << 14 } else { 4 << 20 });
        let mut rng = SmallRng::seed_from_u64(5);
        let mut work = GcWork::new(ftl.dies());
        let mut ns = Vec::new();
        for _ in 0..runs {
            let logical = ftl.logical_pages();
            let started = Instant::now();
            for _ in 0..writes {
                std::hint::black_box(ftl.write(rng.gen_range(0..logical), 0, &mut work));
                work.clear();
            }
            ns.push(started.elapsed().as_nanos() as f64 / writes as f64);
        }
        ns.sort_by(f64::total_cmp);
        println!(
            "{:>12}: {:.1} ns a page write (median of {runs}, {writes} writes each), write \
             amplification {:.3}",
            victim.name(),
            ns[ns.len() / 2],
            ftl.counters().write_amplification()
        );
        largest_collection(&mut ftl, writes);
    }
}

/// Pages of deferred map moves run between two writes, as the emulator's passes run them
/// (`nvarray-emu`'s `DEFERRED_SLICE_PAGES`).
const SLICE_PAGES: u32 = 32;

/// The most collection one host write caused, in pages copied and in real time (issue 56:
/// collection runs on the device thread while it serves, so a write that copies a whole line
/// held every queue's completions for that long; its map moves are now deferred, and run
/// between writes here in slices as the emulator runs them between passes, timed apart). The
/// background collector's quota copies `valid / invalid` pages of its victim per host write,
/// so under greedy no write should copy more than a few dozen; random victims are whole lines.
fn largest_collection(ftl: &mut Ftl, writes: u64) {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut work = GcWork::new(ftl.dies());
    let logical = ftl.logical_pages();
    let (mut most, mut most_ns, mut slowest_ns, mut slice_ns) = (0u64, 0u64, 0u64, 0u64);
    for _ in 0..writes {
        let before = ftl.counters().gc_pages_copied;
        let started = Instant::now();
        std::hint::black_box(ftl.write(rng.gen_range(0..logical), 0, &mut work));
        let ns = started.elapsed().as_nanos() as u64;
        work.clear();
        let copied = ftl.counters().gc_pages_copied - before;
        if copied > most {
            (most, most_ns) = (copied, ns);
        }
        slowest_ns = slowest_ns.max(ns);
        if ftl.has_deferred() {
            let started = Instant::now();
            ftl.run_deferred(SLICE_PAGES);
            slice_ns = slice_ns.max(started.elapsed().as_nanos() as u64);
        }
    }
    println!(
        "{:>12}  the most one write copied: {most} pages ({:.1} µs); the slowest write {:.1} µs, \
         the slowest slice of {SLICE_PAGES} deferred moves {:.1} µs (a pause of the machine, if \
         far above)",
        "",
        most_ns as f64 / 1e3,
        slowest_ns as f64 / 1e3,
        slice_ns as f64 / 1e3
    );
}
