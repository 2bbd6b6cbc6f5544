//! `nvarray presets`: list the built-in devices or print one.

use anyhow::Result;
use clap::{Args, Subcommand};
use nvarray_model::presets::{preset, PRESETS};
use nvarray_model::protocol_cost::protocol_table;
use nvarray_present::table;

use nvarray_sys::input::input_error;

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
        /// Instead of the TOML: the link traffic of one command (packets and bytes each way,
        /// data and protocol) for every command protocol on this preset's link, reads and
        /// writes of 512 B and 4 KiB: DC Express's "fewer packets per command" argument.
        #[arg(long)]
        protocol_cost: bool,
        /// With --protocol-cost: print the rows as JSON.
        #[arg(long, requires = "protocol_cost")]
        json: bool,
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
        Some(PresetsCommand::Show {
            name,
            protocol_cost,
            json,
        }) => {
            let p = preset(&name).map_err(input_error)?;
            if !protocol_cost {
                print!("{}", p.toml);
                return Ok(());
            }
            let cfg = p.load(&[]).map_err(input_error)?;
            let rows = protocol_table(&cfg);
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", table::protocol_cost(&cfg, &rows));
            }
        }
    }
    Ok(())
}
