//! `nvarray presets`: list the built-in devices or print one.

use anyhow::Result;
use clap::{Args, Subcommand};
use nvarray_model::presets::{preset, PRESETS};

use crate::input_error;

#[derive(Args)]
pub struct PresetsArgs {
    #[command(subcommand)]
    command: Option<PresetsCommand>,
}

#[derive(Subcommand)]
enum PresetsCommand {
    /// Print a preset's TOML, with the comments that say where each figure comes from.
    Show {
        /// Preset name, as listed by `nvarray presets`.
        name: String,
    },
}

pub fn run(args: PresetsArgs) -> Result<()> {
    match args.command {
        None => {
            let width = PRESETS.iter().map(|p| p.name.len()).max().unwrap_or(0);
            for p in PRESETS {
                println!("{:width$}  {}", p.name, p.description());
            }
            println!("\n`nvarray presets show NAME` prints one as TOML; edit it and pass it with --device FILE.");
        }
        Some(PresetsCommand::Show { name }) => {
            print!("{}", preset(&name).map_err(input_error)?.toml)
        }
    }
    Ok(())
}
