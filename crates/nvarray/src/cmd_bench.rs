//! `nvarray bench`: fio-like workloads on the emulated device in real time (`--engine emu`) or
//! through the simulator (`--engine sim`), in one report shape; `--compare-sim` runs both, and
//! `nvarray bench sweep` varies a parameter. The engines live in `nvarray-run` (its
//! `emu` and `sim`); this module only turns flags into their inputs and prints what they return.

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use nvarray_host::options::CpuList;
use nvarray_host::{waits_by_spinning_alone, CompletionMode, Options, Stack};
use nvarray_model::DeviceConfig;
use nvarray_present::table;
use nvarray_report::RunReport;
use nvarray_run::EmuRunError;
use nvarray_workload::{format_size, parse_size, Workload};
use serde::Serialize;

use crate::cmd_sim::simulate;
use crate::emu_args::{
    backing_kind, capacity_set, device_with_size, injected_backing_faults, parse_backing,
    parse_cpus, parse_device_threads, parse_size_u32, parse_time_ns, Backing, DeviceThreads,
    CAPACITY_KEY, CPUS_HELP, SIZE_DEFAULT,
};
use crate::progress::Progress;
use crate::run_args::RunArgs;
use nvarray_sys::input::input_error;

/// Shown first in `nvarray bench --help`.
const EXAMPLES: &str = "\
Examples:
  nvarray bench                                                   Moneta, fio's default job (sequential 4 KiB reads, QD 1)
  nvarray bench --preset optane --rw randread --bs 4k --iodepth 32 --runtime 2s
  nvarray bench --compare-sim --preset dram --rw randrw --rwmixwrite 30 --json";

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, before_help = EXAMPLES)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: BenchRunArgs,
    /// Run the workload through the simulator and the emulator and print them side by side,
    /// with the ratio emulated / model (JSON: `{"sim": .., "emu": .., "ratio": ..}`).
    #[arg(long, conflicts_with = "engine")]
    compare_sim: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// As `nvarray sim sweep` (a grid over parameters' values; a JSON line per point, table,
    /// JSON and plot; `--shard I/N` for `nvarray sweep merge`), each point run by the chosen
    /// engine: the emulator's one at a time, the simulator's side by side (`--jobs`).
    Sweep(SweepArgs),
}

#[derive(Args)]
struct SweepArgs {
    #[command(flatten)]
    run: BenchRunArgs,
    #[command(flatten)]
    sweep: nvarray_sweep::SweepSpec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// The real-time emulator: real data, the wall clock, nvarray's user-space driver.
    Emu,
    /// The discrete-event simulator: virtual time, deterministic, faster than real time.
    Sim,
}

/// The options for one workload: `--device-threads auto` becomes a count for its threads.
/// One host thread that keeps one request in flight and only spins for it runs the device
/// inline (`nvarray_host::waits_by_spinning_alone`); otherwise the count comes from the cores.
fn options_for(
    options: &Options,
    threads: DeviceThreads,
    device: &DeviceConfig,
    workload: &Workload,
) -> Options {
    let host_threads: usize = workload.jobs.iter().map(|j| j.numjobs as usize).sum();
    let one_in_flight_spun_for = host_threads == 1
        && workload.jobs.iter().all(|job| {
            let read_fraction = job.read_fraction();
            job.iodepth == 1
                && waits_by_spinning_alone(
                    device,
                    options,
                    read_fraction > 0.0,
                    read_fraction < 1.0,
                    job.bs.lens_bytes(),
                )
        });
    let device_threads = match threads {
        DeviceThreads::Auto if one_in_flight_spun_for => 0,
        _ => threads.resolve(host_threads),
    };
    // A workload that only reads never needs its image writable: one on a read-only file
    // system, or one this user may only read, is served too.
    let only_reads =
        workload.trace.is_none() && workload.jobs.iter().all(|job| job.read_fraction() == 1.0);
    let backing = if only_reads {
        options.backing.clone().read_only()
    } else {
        options.backing.clone()
    };
    Options {
        device_threads,
        backing,
        ..options.clone()
    }
}

/// Everything one benchmark run needs: device, workload, output and engine settings.
#[derive(Args, Clone, Debug)]
// fio's `--size` (the region a job touches) becomes the device's size here: the emulator
// allocates the whole device, and a job touches all of it unless its job file says otherwise.
#[command(mut_arg("size", |a| a
    .value_name("SIZE")
    .help("Size of the device, e.g. 4G (k/m/g binary; sets memory.capacity_bytes, over any \
           --set). Default 1G, for both engines, unless --set memory.capacity_bytes gives one: \
           the emulator holds the whole device in memory. Jobs touch the whole device; a job \
           file's size= still limits one")))]
pub struct BenchRunArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Which engine runs the workload.
    #[arg(long, value_enum, default_value_t = Engine::Emu)]
    engine: Engine,
    /// Where the emulated device's bytes live: `ram`, `none` (no data kept: writes are
    /// discarded and reads return zeroes, so a device larger than the machine costs nothing;
    /// for timing studies, not with --verify), or `file:PATH` (mapped shared, so acknowledged
    /// writes survive the process; an existing file must have the device's size;
    /// `file:PATH,sparse` takes blocks on first write, so the device may outgrow free disk).
    #[arg(long, value_name = "ram|none|file:PATH[,sparse]", default_value = "ram", value_parser = parse_backing)]
    backing: Backing,
    /// With `--backing file:PATH`: make flushes reach stable storage (msync + fdatasync).
    #[arg(long)]
    durable: bool,
    /// Threads that run the emulated device; 0 runs it inline, each host thread doing its
    /// own queue pairs' device work while it polls, in parallel with the others (only the
    /// timing model is serial). N > 0 share the queue pairs out (pair k on thread k mod N).
    /// `auto` runs it inline when one host thread keeps one request in flight (iodepth 1) and
    /// spins for it (a device thread would only add two crossings between cores); otherwise
    /// it gives the device a thread only when the machine has a core for it besides one per
    /// host thread (numjobs), so spinning threads never outnumber cores.
    #[arg(long, value_name = "N|auto", default_value_t = DeviceThreads::Auto,
          value_parser = parse_device_threads)]
    device_threads: DeviceThreads,
    /// Host software stack, the Moneta ladder: baseline (scheduler thread, shared locked queue,
    /// sleep) | nosched | atomic (own queue, one atomic store) | spin.
    #[arg(long, value_name = "STACK", default_value_t = Stack::Spin)]
    stack: Stack,
    /// How a thread waits for a completion with `--stack spin`: spin | sleep | adaptive (spin
    /// unless the command takes --adaptive-threshold or longer, and while the commands in
    /// flight complete on average closer together than that) | in-data (the DC Express
    /// protocol's: reads complete in their data). Default: in-data for a dc-express device, adaptive for the others.
    #[arg(long, value_name = "MODE")]
    completion: Option<CompletionMode>,
    /// Modelled latency from which `--completion adaptive` lets a thread sleep: it spins for
    /// a command that the device, idle, would finish sooner (a wake-up costs 12-28 µs on the
    /// project's 2-core VMs, so from 100 µs a sleep costs at most about a fifth of it).
    #[arg(long, value_name = "TIME", default_value = "100us", value_parser = parse_time_ns)]
    adaptive_threshold: u64,
    /// Size of each tag's DMA buffer, the largest single command; larger requests are split.
    /// Default: the device's maximum transfer, capped to keep the buffers small.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    buffer_size: Option<u32>,
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, help = CPUS_HELP)]
    cpus: Option<CpuList>,
}

impl BenchRunArgs {
    /// The device and workload flags with `--size` (or its default) turned into a device
    /// override.
    fn run_args(&self) -> Result<RunArgs> {
        let mut run = self.run.clone();
        let size = run.fio.size.take();
        run.device = device_with_size(&run.device, size.as_deref())?;
        Ok(run)
    }

    /// Whether the user gave the device's size (`--size` or `--set memory.capacity_bytes`).
    fn capacity_given(&self) -> bool {
        self.run.fio.size.is_some() || capacity_set(&self.run.device)
    }

    fn options(&self) -> Result<Options> {
        Ok(Options {
            backing: backing_kind(&self.backing, self.durable)?,
            // Decided per workload by `options_for`.
            device_threads: 0,
            stack: self.stack,
            completion: self.completion,
            adaptive_threshold_ns: self.adaptive_threshold,
            buffer_bytes: self.buffer_size,
            cpus: self.cpus.clone().unwrap_or_default(),
            backing_faults: injected_backing_faults()?,
        })
    }
}

/// Runs one workload on `engine`.
fn run_engine(
    engine: Engine,
    device: &DeviceConfig,
    workload: &Workload,
    options: &Options,
    threads: DeviceThreads,
    progress: &mut dyn FnMut(f64),
) -> Result<RunReport> {
    match engine {
        Engine::Sim => simulate(device, workload, progress),
        Engine::Emu => {
            let options = options_for(options, threads, device, workload);
            nvarray_run::emu::run(device, workload, &options, progress).map_err(|e: EmuRunError| {
                if e.is_input_error() {
                    input_error(e)
                } else {
                    anyhow::Error::new(e)
                }
            })
        }
    }
}

pub fn run(args: BenchArgs) -> Result<()> {
    if let Some(BenchCommand::Sweep(s)) = args.command {
        let run = s.run.run_args()?;
        run.refuse_fio_layout("a sweep")?;
        let options = s.run.options()?;
        let (engine, threads) = (s.run.engine, s.run.device_threads);
        let run_point = |device: &_, workload: &_, progress: &mut dyn FnMut(f64)| {
            run_engine(engine, device, workload, &options, threads, progress)
        };
        return crate::sweep_run::run(
            &s.sweep,
            &run,
            &nvarray_sweep::Engine {
                identity: format!("{engine:?} {options:?} device_threads={threads:?}"),
                parallel: matches!(engine, Engine::Sim),
                run: &run_point,
            },
        );
    }
    let run = args.run.run_args()?;
    if args.compare_sim {
        run.refuse_fio_layout("--compare-sim")?;
    }
    run.check_output()?;
    let options = args.run.options()?;
    let device = run.device.load()?;
    let workload = run.fio.workload(&[])?;
    if args.compare_sim {
        if let Some(trace) = &workload.trace {
            // Each engine reads the trace from its start: a pipe would be empty the second time.
            if std::fs::metadata(&trace.path).is_ok_and(|m| !m.is_file()) {
                return Err(input_error(format!(
                    "--trace {} is not a regular file (a pipe?) and can be read only once, but \
                     --compare-sim replays it in both engines: save the trace to a file first",
                    trace.path.display()
                )));
            }
        }
        return compare(&run, &device, &workload, &options, args.run.device_threads);
    }
    let engine = args.run.engine;
    let bar = Progress::new(
        match engine {
            Engine::Emu => "emulating",
            Engine::Sim => "simulating",
        },
        1,
    );
    let threads = args.run.device_threads;
    let report = run_engine(engine, &device, &workload, &options, threads, &mut |f| {
        bar.set(0, f)
    });
    bar.finish();
    let report = report?;
    run.print(&device, &workload, &report, false)
}

/// `nvarray fio`: a fio job file (or command line) run unchanged on the emulated device, with
/// fio's rules for how a job ends and fio's report layout.
#[derive(Args)]
pub struct FioCompatArgs {
    #[command(flatten)]
    run: BenchRunArgs,
    /// A fio job key given as fio takes it (`--latency_window=50ms`), which `main` hands over
    /// as `KEY=VALUE` (`fio_globals`): a global, which the job file's sections may set again.
    #[arg(long = crate::fio_globals::FIO_GLOBAL_FLAG, value_name = "KEY=VALUE", hide = true)]
    globals: Vec<String>,
}

pub fn run_fio(args: FioCompatArgs) -> Result<()> {
    let mut run = args.run.run_args()?;
    run.fio.globals = args
        .globals
        .iter()
        .map(|g| crate::fio_globals::pair(g))
        .collect();
    run.fio_compat = true;
    run.check_output()?;
    let options = args.run.options()?;
    let mut workload = run.fio.workload(&[])?;
    if !args.run.capacity_given() {
        size_device_to_jobs(&mut run, &workload)?;
    }
    let device = run.device.load()?;
    for note in workload.end_jobs_as_fio() {
        eprintln!("note: {note}");
    }
    let engine = args.run.engine;
    let bar = Progress::new("running the fio job", 1);
    let report = run_engine(
        engine,
        &device,
        &workload,
        &options,
        args.run.device_threads,
        &mut |f| bar.set(0, f),
    );
    bar.finish();
    run.print(&device, &workload, &report?, true)
}

/// fio creates a file of each job's `size`; nvarray's device has a size of its own. When the
/// user gave none (`--size`, `--set memory.capacity_bytes`) and a job's region runs past the
/// default, the device is made as large as the furthest region (to a whole MiB), and a note
/// says so.
fn size_device_to_jobs(run: &mut RunArgs, workload: &Workload) -> Result<()> {
    let default_bytes = parse_size(SIZE_DEFAULT).expect("the default size parses");
    let Some(span) = workload.span_bytes().filter(|&span| span > default_bytes) else {
        return Ok(());
    };
    let bytes = span.div_ceil(1 << 20).saturating_mul(1 << 20);
    run.device.set.push(format!("{CAPACITY_KEY}={bytes}"));
    eprintln!(
        "note: the device is sized to {} to hold the largest job region, as fio would create \
         the file (give --size to choose the device's size)",
        format_size(bytes)
    );
    Ok(())
}

#[derive(Serialize)]
struct Comparison<'a> {
    sim: &'a RunReport,
    emu: &'a RunReport,
    /// emu / sim for each of `table::COMPARED`, null where the model's value is 0.
    ratio: serde_json::Map<String, serde_json::Value>,
    /// Where the mean latencies differ, in ns (null when either run completed no request).
    difference_ns: Option<table::Difference>,
}

fn compare(
    run: &RunArgs,
    device: &DeviceConfig,
    workload: &Workload,
    options: &Options,
    threads: DeviceThreads,
) -> Result<()> {
    // The simulator first: it is quick, and it rejects a bad workload before the emulator
    // allocates the device.
    let bar = Progress::new("simulating", 1);
    let sim = simulate(device, workload, &mut |f| bar.set(0, f));
    bar.finish();
    let sim = sim?;
    let bar = Progress::new("emulating", 1);
    let emu = run_engine(Engine::Emu, device, workload, options, threads, &mut |f| {
        bar.set(0, f)
    });
    bar.finish();
    let emu = emu?;
    if run.json {
        let ratio = table::COMPARED
            .iter()
            .map(|c| {
                let r = table::ratio((c.of)(&emu.totals), (c.of)(&sim.totals));
                (c.key.to_string(), serde_json::json!(r))
            })
            .collect();
        let comparison = Comparison {
            sim: &sim,
            emu: &emu,
            ratio,
            difference_ns: table::difference(&sim, &emu),
        };
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", table::comparison(device, workload, &sim, &emu));
    }
    Ok(())
}
