//! `nvarray sweep merge DIR...`: the JSON lines of a sweep's shards (`--shard I/N`, run on
//! other machines or as a cluster's array tasks) joined into the table, JSON and plot the
//! whole sweep writes. Lines of different sweeps are refused; missing points are named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::present::{self, Outputs, PlotFormat};
use super::record::Metric;
use super::record::{check_grid, read_lines, refusal, PointLine};
use nvarray_sys::input::input_error;

#[derive(Args)]
pub struct SweepArgs {
    #[command(subcommand)]
    command: SweepCommand,
}

#[derive(Subcommand)]
enum SweepCommand {
    /// Join the JSON lines of a sweep's shards (`nvarray sim sweep --shard I/N`) into the
    /// whole sweep's table, JSON and plot, exactly as the unsharded sweep writes them.
    ///
    /// Reads every `.jsonl` file in each DIR (or each file named). Refuses lines of different
    /// sweeps (another grid, device, workload, trace content, engine, or nvarray binary),
    /// saying which of these differ, and names the points no shard ran, with the shard that
    /// holds each.
    Merge(MergeArgs),
}

#[derive(Args)]
pub struct MergeArgs {
    /// Directories holding the shards' `.jsonl` files, or the files themselves.
    #[arg(required = true, value_name = "DIR")]
    inputs: Vec<PathBuf>,
    /// Output path without extension: writes PATH.json and PATH.svg (or .png) [default:
    /// sweep-PARAM+PARAM in the current directory, as the sweep itself].
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Plot format.
    #[arg(long, value_enum, default_value_t = PlotFormat::Svg)]
    plot: PlotFormat,
    /// What the two-parameter table and the plot show [default: the sweep's own --metric].
    #[arg(long, value_enum)]
    metric: Option<Metric>,
    /// Print the merged sweep as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: SweepArgs) -> Result<()> {
    match args.command {
        SweepCommand::Merge(m) => merge(&m),
    }
}

/// How many missing points a message lists before it says "and N more".
const MISSING_LISTED: usize = 10;

fn merge(args: &MergeArgs) -> Result<()> {
    let files = jsonl_files(&args.inputs)?;
    let (reference, points) = read_points(&files)?;
    let grid = &reference.grid;
    check_none_missing(&reference, &points)?;
    let lines: Vec<PointLine> = points.into_values().map(|(line, _)| line).collect();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(grid.file_stem()));
    let outputs = Outputs::new(&out, args.plot)?;
    let metric = args.metric.unwrap_or(reference.metric);
    present::write_sweep(
        &reference.sweep,
        grid,
        metric,
        &lines,
        &outputs,
        None,
        args.json,
    )
}

/// Every point once, by its index, with the file it came from.
type Points<'a> = BTreeMap<usize, (PointLine, &'a Path)>;

/// Reads the points of `files`, each line checked on its own and against the first line
/// read, which is returned as the sweep's reference. A point in two files is kept from the
/// first, with a note.
fn read_points(files: &[PathBuf]) -> Result<(PointLine, Points<'_>)> {
    let mut points: Points<'_> = BTreeMap::new();
    let mut first: Option<(PointLine, &Path)> = None;
    for file in files {
        for line in read_lines(file)? {
            check_identity(&line, file)?;
            let reference = first.get_or_insert_with(|| (line.clone(), file.as_path()));
            check_same_sweep(&reference.0, reference.1, &line, file)?;
            check_grid(&line, file)?;
            match points.get(&line.point) {
                Some((_, earlier)) => eprintln!(
                    "note: point {} ({}) is in both {} and {}; kept the first",
                    line.point,
                    line.grid.describe(line.point),
                    earlier.display(),
                    file.display()
                ),
                None => {
                    points.insert(line.point, (line, file.as_path()));
                }
            }
        }
    }
    let Some((reference, _)) = first else {
        return Err(input_error(format!(
            "no sweep points in {}",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    // The reference is the first line read, and the first line of a merge is always kept.
    assert!(!points.is_empty(), "a reference line without points");
    Ok((reference, points))
}

/// Refuses a line whose sweep identity is not the hash of its recorded parts.
fn check_identity(line: &PointLine, file: &Path) -> Result<()> {
    // A line's identity is a hash of its recorded parts: one that does not match them
    // was edited, and its parts cannot be trusted to explain anything.
    if let Some(parts) = &line.identity {
        if parts.sweep(&line.grid) != line.sweep {
            return Err(input_error(format!(
                "{}: point {}'s sweep identity {} is not the hash of its recorded parts; \
                 was the file edited?",
                file.display(),
                line.point,
                line.sweep
            )));
        }
    }
    Ok(())
}

/// Refuses a line of another sweep than the reference line, saying what differs.
fn check_same_sweep(
    reference: &PointLine,
    reference_file: &Path,
    line: &PointLine,
    file: &Path,
) -> Result<()> {
    let (reference_from, line_from) = (
        reference_file.display().to_string(),
        file.display().to_string(),
    );
    if let Some(why) = refusal(reference, &reference_from, line, &line_from) {
        return Err(input_error(format!(
            "{line_from} holds points of another sweep than {reference_from}: {why}\n\
             merge the shards of one sweep only (same grid, device, workload, trace, \
             engine and nvarray binary)"
        )));
    }
    Ok(())
}

/// Refuses a merge that lacks points of the sweep, naming the first `MISSING_LISTED` of them
/// and the shard that holds each.
fn check_none_missing(reference: &PointLine, points: &Points<'_>) -> Result<()> {
    let grid = &reference.grid;
    let missing: Vec<usize> = (0..reference.points)
        .filter(|i| !points.contains_key(i))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let count = reference
        .shard
        .split_once('/')
        .and_then(|(_, n)| n.parse::<usize>().ok());
    let listed: Vec<String> = missing
        .iter()
        .take(MISSING_LISTED)
        .map(|&i| match count {
            Some(n) if n > 1 => format!("{i} ({}, shard {}/{n})", grid.describe(i), i % n),
            _ => format!("{i} ({})", grid.describe(i)),
        })
        .collect();
    Err(input_error(format!(
        "missing {} of the sweep's {} points: {}{}; run the shards that hold them, then merge \
         again",
        missing.len(),
        reference.points,
        listed.join(", "),
        if missing.len() > MISSING_LISTED {
            format!(" and {} more", missing.len() - MISSING_LISTED)
        } else {
            String::new()
        }
    )))
}

/// The `.jsonl` files of the inputs: each directory's, sorted by name, and each file named.
fn jsonl_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("cannot read {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
                .collect();
            if found.is_empty() {
                return Err(input_error(format!(
                    "no .jsonl files in {}: give the directories the shards wrote to (their --out)",
                    input.display()
                )));
            }
            found.sort();
            files.extend(found);
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(input_error(format!(
                "{}: no such file or directory",
                input.display()
            )));
        }
    }
    Ok(files)
}
