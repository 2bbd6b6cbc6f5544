//! `nvarray`: the command-line tool.
//!
//! It owns argument parsing and printing: every number it prints comes from the engine
//! crates, laid out by `nvarray-present` (the report table, fio's layouts, charts). Errors in
//! user input exit with status 2 and one line naming the field and the accepted range.

mod args;
mod channel_args;
mod cmd_bench;
mod cmd_fit;
mod cmd_mount;
mod cmd_pm;
mod cmd_pm_bench;
mod cmd_presets;
mod cmd_repro;
mod cmd_serve;
mod cmd_sim;
mod emu_args;
mod fio_globals;
mod fit_report;
mod ftl_plot;
mod heap;
mod progress;
mod run_args;
mod sweep_run;

use std::process::ExitCode;

use nvarray_sys::input::InputError;

use clap::{CommandFactory, Parser, Subcommand};

/// Simulate, emulate and benchmark storage arrays built from fast non-volatile memories
/// (PCM, STT-MRAM, 3D XPoint, Z-NAND, flash), after Moneta, OpenExpress and DC Express.
#[derive(Parser)]
#[command(name = "nvarray", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: run fio-like workloads against the emulated device in real time (default)
    /// or through the simulator (`--engine sim`), and report the same table or JSON for both.
    ///
    /// The emulator runs the timing model against the wall clock with real data, in RAM or a
    /// file (`--backing`, `--size`), reached through nvarray's user-space polled driver
    /// (`--stack`, `--completion`, `--device-threads`). Its report adds the CPU cost per GB
    /// moved and how late completions were posted against the model; when the machine could
    /// not keep up it says NOT FAITHFUL and why. The simulator answers in virtual time,
    /// deterministically and faster than real time. `--compare-sim` runs both side by side;
    /// `nvarray bench sweep` varies a parameter, like `nvarray sim sweep`. Workload flags use
    /// fio's names and meanings, except `--size`, which sizes the device.
    Bench(Box<cmd_bench::BenchArgs>),
    /// Run a fio job file unchanged against the emulated device and print fio's layout, to
    /// diff against fio's output of the same job on a real device.
    ///
    /// fio's rules for how a job ends: without `time_based` it ends after moving its `size`
    /// (or `io_size`), or at its `runtime` if that comes first. Options that mean nothing
    /// for a modelled array (`ioengine`, `filename`, `direct=1`, ...) are accepted and noted
    /// on stderr. Device flags as `nvarray bench` (`--preset`, `--set`, `--size`). Any other
    /// fio job key may be given as fio takes it, `--KEY=VALUE` (`--latency_window=50ms`): a
    /// global, which the job file's sections may set again; the flags listed below apply to
    /// every job over the file.
    /// `--output-format json|json+` prints fio's JSON. docs/fio.md lists fio's own example job
    /// files and how each runs here.
    Fio(Box<cmd_bench::FioCompatArgs>),
    /// Run a workload through the discrete-event simulator (virtual time, deterministic).
    ///
    /// Workload flags use fio's names and meanings; `nvarray sim JOBFILE` reads a fio job file
    /// with one section per concurrent stream. Latencies are the device's unless
    /// `--set host.software_ns=N` adds a host cost per request. The device has its preset's
    /// capacity (moneta: 64 GiB), where `nvarray bench` makes it 1 GiB unless told (the
    /// emulator holds it in memory): `--set memory.capacity_bytes=1g` gives the simulator
    /// the same device.
    Sim(Box<cmd_sim::SimArgs>),
    /// A model of your own drive: `nvarray fit collect DEVICE --out DIR` runs real fio over
    /// a grid of jobs on it; `nvarray fit DIR --base PRESET --out my-drive.toml` fits the
    /// preset's parameters to what it measured (the simulator against every training job),
    /// prints each with its confidence range and says which the grid cannot identify, the
    /// error per job and on held-out jobs, and writes the preset and a plot.
    Fit(Box<cmd_fit::FitArgs>),
    /// Export the emulated device over NBD, so unmodified software (fio's nbd engine,
    /// qemu-io, qemu-img, nbdcopy, nbdinfo, the kernel's nbd-client) runs against it, and/or
    /// to user-space channels (`--channels unix:PATH`: libnvarray and fio's external engine,
    /// no system call per command, every command checked against `--grant`s, as Moneta-D),
    /// and/or as a virtio disk for a virtual machine (`--vhost-user-blk unix:PATH`: QEMU's
    /// vhost-user-blk-pci; QEMU's NVMe controller reaches the NBD export).
    ///
    /// Same device flags as `nvarray bench` (`--preset`, `--set`, `--size`, `--backing`).
    /// Several connections share the device, each on its own queue pair. Prints how to
    /// connect; SIGUSR1 prints the device report (IOPS, latency percentiles, lateness,
    /// faithfulness), SIGHUP re-reads `--grants-file`, SIGINT/SIGTERM stop the server after
    /// in-flight requests finish and the device is flushed.
    Serve(Box<cmd_serve::ServeArgs>),
    /// Present the emulated device as the file DIR/disk (FUSE), for a loop device and a real
    /// file system on top: `losetup --find --show DIR/disk`, `mkfs.xfs`, `mount`.
    ///
    /// Same device flags as `nvarray bench` (`--preset`, `--set`, `--size`, `--backing`).
    /// Every read and write of the file goes through nvarray's driver to the emulated device
    /// and its timing model (no page cache in between); fsync flushes the device. With
    /// `--backing file:PATH`, acknowledged writes survive a crash of this process and a later
    /// `nvarray mount` with the same file sees them. The file's size is fixed. Prints how to
    /// use it; SIGUSR1 prints the device report, SIGINT/SIGTERM unmount (once nothing uses
    /// the file: detach the loop device first) and print it. DIR must exist.
    Mount(Box<cmd_mount::MountArgs>),
    /// List the built-in device presets, or print one as TOML.
    Presets(cmd_presets::PresetsArgs),
    /// Redraw the seed papers' figures beside their published numbers: Moneta, OpenExpress,
    /// DC Express, vNVML and the Moneta slides' "Future of Storage" table.
    ///
    /// Device figures run in the simulator (seconds); the software ladder, user space against
    /// the kernel and the NVM library's figures run on this machine (the emulator, fio on a
    /// loop device as root, pm-bench, PMDK when installed). Writes DIR/report.md (every row:
    /// the published value and where it is quoted from, nvarray's value, the ratio, the
    /// verdict and the exact command), DIR/results.json, one SVG and one PNG per figure and
    /// the job files it used; prints one line per figure, and a progress bar. `all` takes about two
    /// minutes; the long studies (`vnvml-sqlite`, `apps`) run only when named.
    Repro(cmd_repro::ReproArgs),
    /// Benchmark the transactional NVM library (`nvarray-pm`): transactions per second,
    /// vNVML's page-write microbenchmark, and a YCSB-style key-value workload normalised to
    /// unlogged writes. JSON lines on stdout, shaped like the PMDK peer's
    /// (`crates/nvarray-pm/peer/pmdk_peer.c`), so `scripts/perf_pm.py` can put them side by side.
    PmBench(cmd_pm_bench::PmBenchArgs),
    /// The NVM-tier state files of `nvarray-pm` pools (`/dev/shm/nvarray-pm-*.nvm`): `list`
    /// says what each is for, `clean` removes those no pool needs (a pool's whose last
    /// process died and whose file was then removed or replaced).
    Pm(cmd_pm::PmArgs),
    /// Work on sweeps' results: `nvarray sweep merge DIR...` joins the shards of a sweep run
    /// with `--shard I/N` (on other machines, or as a cluster's array tasks) into its table,
    /// JSON and plot.
    Sweep(nvarray_sweep::merge::SweepArgs),
}

fn main() -> ExitCode {
    // A reader that goes away (`nvarray presets show moneta --protocol-cost | head`) ends the
    // process quietly, as it does any Unix filter, instead of a panic on the failed print.
    // SAFETY: setting a signal's disposition to the default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let command = Cli::command();
    let fio_flags: Vec<String> = command
        .find_subcommand("fio")
        .into_iter()
        .flat_map(|fio| fio.get_arguments())
        .flat_map(|a| a.get_long_and_visible_aliases().unwrap_or_default())
        .map(str::to_string)
        .collect();
    let cli = Cli::parse_from(fio_globals::rewrite(
        std::env::args_os().collect(),
        &fio_flags,
    ));
    if matches!(cli.command, Command::Sim(_) | Command::Fit(_)) {
        heap::keep_freed_memory();
    }
    let result = match cli.command {
        Command::Bench(a) => cmd_bench::run(*a),
        Command::Sim(a) => cmd_sim::run(*a),
        Command::Fit(a) => cmd_fit::run(*a),
        Command::Fio(a) => cmd_bench::run_fio(*a),
        Command::Serve(a) => cmd_serve::run(*a),
        Command::Mount(a) => cmd_mount::run(*a),
        Command::Presets(a) => cmd_presets::run(a),
        Command::Repro(a) => cmd_repro::run(a),
        Command::PmBench(a) => cmd_pm_bench::run(a),
        Command::Pm(a) => cmd_pm::run(a),
        Command::Sweep(a) => nvarray_sweep::merge::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.chain().any(|c| c.downcast_ref::<InputError>().is_some()) {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
