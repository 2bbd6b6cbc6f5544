//! `nvarray sim`: one simulated run, or a sweep (`nvarray sim sweep`).

use anyhow::Result;
use clap::{Args, Subcommand};
use nvarray_model::DeviceConfig;
use nvarray_workload::Workload;

use crate::progress::Progress;
use crate::run_args::RunArgs;
use nvarray_sys::input::input_error;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    command: Option<SimCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum SimCommand {
    /// Vary parameters over lists of values (a grid over every combination; the first is
    /// the x axis, the others curves), points side by side on every core (`--jobs`); print a
    /// table, write a JSON line per point, the JSON and a plot. `--shard I/N` runs one share
    /// of the points, for `nvarray sweep merge`.
    Sweep(SweepArgs),
}

#[derive(Args)]
struct SweepArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    sweep: nvarray_sweep::SweepSpec,
}

pub fn run(args: SimArgs) -> Result<()> {
    match args.command {
        Some(SimCommand::Sweep(s)) => {
            s.run.refuse_fio_layout("a sweep")?;
            crate::sweep_run::run(
                &s.sweep,
                &s.run,
                &nvarray_sweep::Engine {
                    identity: "sim".into(),
                    parallel: true,
                    run: &simulate,
                },
            )
        }
        None => {
            args.run.check_output()?;
            let device = args.run.device.load()?;
            let workload = args.run.fio.workload(&[])?;
            let bar = Progress::new("simulating", 1);
            let report = simulate(&device, &workload, &mut |f| bar.set(0, f));
            bar.finish();
            let report = report?;
            args.run.print(&device, &workload, &report, false)
        }
    }
}

/// Runs the simulator, classing workload problems as input errors; `progress` is called now
/// and then with the fraction done.
pub fn simulate(
    device: &DeviceConfig,
    workload: &Workload,
    progress: &mut dyn FnMut(f64),
) -> Result<nvarray_report::RunReport> {
    nvarray_run::sim::run_with_progress(device, workload, progress).map_err(sim_error)
}

/// A simulator's error: a command it could not run is the machine's, anything else the
/// input's (exit status 2).
pub fn sim_error(e: nvarray_run::SimError) -> anyhow::Error {
    match e {
        nvarray_run::SimError::Command(_) => anyhow::Error::new(e),
        other => input_error(other),
    }
}
