//! `nvarray sim`: one simulated run, or a sweep (`nvarray sim sweep`).

use anyhow::Result;
use clap::{Args, Subcommand};
use nvarray_model::DeviceConfig;
use nvarray_workload::Workload;

use crate::args::{DeviceArgs, FioArgs};
use crate::{cmd_sweep, input_error, table};

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
    /// Vary one parameter over a list of values (optionally a second one as separate
    /// curves); print a table, write JSON and a plot.
    Sweep(SweepArgs),
}

#[derive(Args)]
struct SweepArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    sweep: cmd_sweep::SweepSpec,
}

/// Everything one run needs: the device, the workload and the output format.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub fio: FioArgs,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SimArgs) -> Result<()> {
    match args.command {
        Some(SimCommand::Sweep(s)) => {
            cmd_sweep::run(&s.sweep, &s.run, &mut |device, workload, _| {
                simulate(device, workload)
            })
        }
        None => {
            let device = args.run.device.load()?;
            let workload = args.run.fio.workload(&[])?;
            let report = simulate(&device, &workload)?;
            if args.run.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", table::run_report(&device, &workload, &report));
            }
            Ok(())
        }
    }
}

/// Runs the simulator, classing workload problems as input errors.
pub fn simulate(device: &DeviceConfig, workload: &Workload) -> Result<nvarray_report::RunReport> {
    nvarray_run::sim::run(device, workload).map_err(|e| match e {
        nvarray_run::SimError::Command(_) => anyhow::Error::new(e),
        other => input_error(other),
    })
}
