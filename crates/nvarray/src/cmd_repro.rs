//! `nvarray repro`: redraws the seed papers' figures beside their published numbers.
//!
//! The catalogue, the simulator runs and the report's text come from `nvarray-repro`; this
//! module runs what needs this machine (the emulator and the NVM library's benchmarks as
//! child `nvarray` processes, fio on a kernel loop device, PMDK's peer), measures busy CPU
//! time for the per-core rows, and writes the report, the results as JSON, the job files and
//! one SVG and one PNG plot per figure.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use nvarray_present::plot::{write_bars, write_chart, Bars, Chart, ChartError, Series};
use nvarray_repro::machine::{self, MachineRunner};
use nvarray_repro::report::{self, FigureResult, Header, PlotData};
use nvarray_repro::spec::Experiment;
use nvarray_repro::{evaluate, seeds, Seed, Verdict};

use crate::progress::Progress;
use nvarray_sys::input::input_error;

#[derive(Args, Debug)]
pub struct ReproArgs {
    /// Which seeds to reproduce: moneta, openexpress, dc-express, vnvml, storage-future, or
    /// all (about two minutes). Several may be given. The long studies run only when named, not
    /// by `all`: `vnvml-sqlite` is vNVML's database study on SQLite (several minutes); `apps`
    /// (on its own) runs Moneta's application study instead: real programs (fio over NBD and
    /// XFS, Berkeley DB, SQLite, PostgreSQL, paging) on five emulated technologies, as root,
    /// about 10 minutes (scripts/apps.py, written to DIR and run with python3); it writes
    /// DIR/apps.md, apps.json and apps.svg.
    #[arg(value_name = "SEED", default_value = "all")]
    seeds: Vec<String>,
    /// With `apps`: a smoke run of about a minute (two devices, 1 s measurements, small
    /// tables).
    #[arg(long)]
    quick: bool,
    /// Directory for report.md, results.json, the plots (SVG and PNG) and the job files.
    #[arg(long, value_name = "DIR", default_value = "repro")]
    out: PathBuf,
    /// Only the rows the simulator answers (seconds): leave out the emulator, the NVM
    /// library's benchmarks, fio on a loop device and PMDK.
    #[arg(long)]
    sim_only: bool,
    /// Print every row as JSON on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

/// The application study's script, compiled in so the binary runs it from anywhere.
const APPS_SCRIPT: &str = include_str!("../../../scripts/apps.py");

/// `nvarray repro apps`: writes the application study's script into the output directory and
/// runs it with Debian's python3 (where python3-bsddb3 is installed), this binary as the
/// nvarray it drives.
fn run_apps(args: &ReproArgs) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(input_error(
            "`nvarray repro apps` needs root: it makes loop devices, mounts XFS, sets memory cgroups and runs PostgreSQL as its own user",
        ));
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| input_error(format!("--out: cannot create {}: {e}", args.out.display())))?;
    let script = args.out.join("apps.py");
    std::fs::write(&script, APPS_SCRIPT)
        .with_context(|| format!("cannot write {}", script.display()))?;
    let python = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .ok_or_else(|| input_error("python3 is not installed (apt-get install python3)"))?;
    let exe = std::env::current_exe().context("cannot find this nvarray binary")?;
    let mut command = format!("nvarray repro apps --out {}", args.out.display());
    if args.quick {
        command += " --quick";
    }
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg("--nvarray")
        .arg(&exe)
        .arg("--out")
        .arg(&args.out)
        .arg("--command")
        .arg(&command);
    if args.quick {
        cmd.arg("--quick");
    }
    // Ctrl-C reaches the study too, which undoes its mounts, loop devices and cluster before
    // it exits: this process waits for that instead of dying first.
    // SAFETY: in the child, between fork and exec, only `signal` (async-signal-safe) runs, to
    // give it back the default SIGINT this process ignores.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    // SAFETY: setting SIGINT's disposition to "ignore" has no preconditions.
    let previous = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let status = cmd.status();
    // SAFETY: as above; `previous` is the disposition `signal` returned.
    unsafe { libc::signal(libc::SIGINT, previous) };
    let status = status.context("cannot run the application study")?;
    match status.code() {
        Some(0) => {}
        // The script's own code for an interrupted run, after its cleanup.
        Some(130) => {
            anyhow::bail!("the application study was interrupted; nothing it made is left")
        }
        _ => anyhow::bail!("the application study failed ({status}); its messages are above"),
    }
    println!(
        "apps: {} (tables, the figure and the commands), apps.json, apps.svg",
        args.out.join("apps.md").display()
    );
    Ok(())
}

/// The figures the names choose: seeds (`all` for every seed), and the long studies
/// (`seeds::STUDIES`), which only their own name runs.
fn parse_seeds(names: &[String]) -> anyhow::Result<Vec<nvarray_repro::Figure>> {
    let mut chosen: Vec<Seed> = Vec::new();
    let mut studies = Vec::new();
    for name in names {
        if name == "all" {
            chosen = Seed::ALL.to_vec();
            continue;
        }
        if let Some(figures) = seeds::study(name) {
            if !studies.iter().any(|(n, _)| n == name) {
                studies.push((name.clone(), figures));
            }
            continue;
        }
        let seed = Seed::from_name(name).ok_or_else(|| {
            let choices: Vec<&str> = Seed::ALL
                .iter()
                .map(|s| s.name())
                .chain(seeds::STUDIES.iter().map(|(n, _)| *n))
                .collect();
            input_error(format!(
                "unknown seed {name:?}: choose from {}, or all",
                choices.join(", ")
            ))
        })?;
        if !chosen.contains(&seed) {
            chosen.push(seed);
        }
    }
    let figures: Vec<nvarray_repro::Figure> = chosen
        .into_iter()
        .flat_map(seeds::figures)
        .chain(studies.into_iter().flat_map(|(_, f)| f))
        .collect();
    // Each figure once: its plots are files named by its id.
    let mut ids = std::collections::HashSet::new();
    assert!(
        figures.iter().all(|f| ids.insert(f.id)),
        "a figure chosen twice"
    );
    Ok(figures)
}

pub fn run(args: ReproArgs) -> anyhow::Result<()> {
    if args.seeds.iter().any(|s| s == "apps") {
        if args.seeds.len() > 1 {
            return Err(input_error(
                "`apps` runs on its own: give `nvarray repro apps`, then the other seeds separately",
            ));
        }
        return run_apps(&args);
    }
    if args.quick {
        return Err(input_error("--quick is for `nvarray repro apps`"));
    }
    let figures = parse_seeds(&args.seeds)?;
    // The directory is the user's choice: one that cannot be made is their mistake (exit 2),
    // found before any figure runs.
    std::fs::create_dir_all(args.out.join("jobs"))
        .map_err(|e| input_error(format!("--out: cannot create {}: {e}", args.out.display())))?;
    write_job_files(&figures, &args.out)?;
    let started = Instant::now();
    let exe = std::env::current_exe().context("cannot find the nvarray binary")?;
    let mut runner = MachineRunner::new(&exe, &args.out, args.sim_only);
    let total = nvarray_repro::run::experiments(&figures).len() as u64;
    let bar = Progress::new("reproducing", total.max(1));
    let results = evaluate(&figures, &mut runner, &mut |done, of, command| {
        assert_eq!(of as u64, total, "experiments the bar counts");
        assert!(done <= of, "experiment {done} of {of}");
        bar.set(done as u64, 0.0);
        bar.set_message(shorten(command, 60));
    });
    bar.finish();
    assert_eq!(results.len(), figures.len(), "a result for every figure");
    let header = report_header(&figures, &exe);
    write_report_files(&args.out, &results, &header)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!(
            "{}",
            summary(&results, &args.out, started.elapsed().as_secs_f64())
        );
    }
    Ok(())
}

/// Writes the fio job file of every simulated experiment of `figures` that has one into
/// `out`'s `jobs/`.
fn write_job_files(figures: &[nvarray_repro::Figure], out: &Path) -> anyhow::Result<()> {
    for e in nvarray_repro::run::experiments(figures) {
        if let Experiment::Sim(run) = e {
            if let Some(name) = &run.job_file {
                let path = out.join("jobs").join(format!("{name}.fio"));
                std::fs::write(&path, run.job_file_text())
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// The report's header: this binary (`exe`), the date, the seeds of `figures` and the machine.
fn report_header(figures: &[nvarray_repro::Figure], exe: &Path) -> Header {
    Header {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: machine::commit(exe),
        date: machine::today(),
        seeds: figures.iter().fold(Vec::new(), |mut seeds, f| {
            if !seeds.contains(&f.seed) {
                seeds.push(f.seed);
            }
            seeds
        }),
        machine: machine::machine(),
    }
}

/// Writes the report (`report.md`), the results as JSON and each figure's plot into `out`.
fn write_report_files(out: &Path, results: &[FigureResult], header: &Header) -> anyhow::Result<()> {
    std::fs::write(out.join("report.md"), report::markdown(results, header))
        .context("cannot write report.md")?;
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(results)?,
    )
    .context("cannot write results.json")?;
    for f in results {
        if let Some(plot) = &f.plot {
            for ext in ["svg", "png"] {
                draw(&out.join(format!("{}.{ext}", f.id)), f, plot)?;
            }
        }
    }
    Ok(())
}

fn shorten(text: &str, max: usize) -> String {
    assert!(max > 0, "no room for the ellipsis");
    let short = if text.chars().count() <= max {
        text.to_string()
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("{cut}…")
    };
    debug_assert!(short.chars().count() <= max, "{short:?} over {max}");
    short
}

/// One line per figure, then the totals and where the report is.
fn summary(results: &[FigureResult], out: &Path, seconds: f64) -> String {
    let mut text = String::new();
    let width = results.iter().map(|f| f.id.len()).max().unwrap_or(0);
    let mut totals = [0usize; 5];
    for f in results {
        let counts = f.counts();
        let parts: Vec<String> = counts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(v, n)| format!("{n} {}", v.name()))
            .collect();
        for (i, (_, n)) in counts.iter().enumerate() {
            totals[i] += n;
        }
        let parts = if parts.is_empty() {
            "plot only".to_string()
        } else {
            parts.join(", ")
        };
        text.push_str(&format!("{:width$}  {parts}\n", f.id));
        for r in f.rows.iter().filter(|r| r.verdict == Verdict::Outside) {
            text.push_str(&format!(
                "{:width$}    OUTSIDE: {} = {} {} (published {})\n",
                "",
                r.what,
                r.value.map_or("—".into(), report::number),
                r.unit,
                r.published_text
            ));
        }
    }
    // Every row has one verdict, so the totals count every row.
    assert_eq!(
        totals.iter().sum::<usize>(),
        results.iter().map(|f| f.rows.len()).sum::<usize>(),
        "rows in the totals"
    );
    let names = ["within", "OUTSIDE", "differs", "measured", "not run"];
    let totals: Vec<String> = totals
        .iter()
        .zip(names)
        .map(|(n, name)| format!("{n} {name}"))
        .collect();
    text.push_str(&format!(
        "\nrows: {}. {:.0} s. Report: {} (plots and results.json beside it)\n",
        totals.join(", "),
        seconds,
        out.join("report.md").display()
    ));
    text
}

/// Draws a figure's plot into `path`, SVG or PNG by its extension.
fn draw(path: &Path, figure: &FigureResult, plot: &PlotData) -> Result<(), ChartError> {
    match plot {
        PlotData::Lines {
            x_label,
            y_label,
            log_x,
            log_y,
            series,
            published,
        } => {
            let series = line_series(series);
            let reference = Series {
                label: "published".to_string(),
                points: published.clone(),
            };
            write_chart(
                path,
                &Chart {
                    title: figure.title,
                    x_label,
                    y_label,
                    log_x: *log_x,
                    log_y: *log_y,
                    series: &series,
                    reference: (!published.is_empty()).then_some(&reference),
                    guide_then_points: false,
                },
            )
        }
        PlotData::StackedBars { y_label, bars } => {
            let (categories, groups) = stacked_groups(bars);
            write_bars(
                path,
                &Bars {
                    title: figure.title,
                    y_label,
                    log_y: false,
                    categories: &categories,
                    groups: &groups,
                    stacked: true,
                },
            )
        }
        PlotData::RowBars {
            y_label,
            log_y,
            rows,
        } => {
            let (categories, groups) = row_groups(rows);
            write_bars(
                path,
                &Bars {
                    title: figure.title,
                    y_label,
                    log_y: *log_y,
                    categories: &categories,
                    groups: &groups,
                    stacked: false,
                },
            )
        }
    }
}

/// A bar chart's legend labels, each with one value per category.
type BarGroups = Vec<(String, Vec<f64>)>;

/// The plot's (label, points) pairs as the chart's lines.
fn line_series(series: &[(String, Vec<(f64, f64)>)]) -> Vec<Series> {
    series
        .iter()
        .map(|(label, points)| Series {
            label: label.clone(),
            points: points.clone(),
        })
        .collect()
}

/// Stacked bars as categories (the bar labels) and one group per part name, in the order the
/// names first appear, with 0 in each bar that lacks that part.
fn stacked_groups(bars: &[(String, Vec<(String, f64)>)]) -> (Vec<String>, BarGroups) {
    let categories: Vec<String> = bars.iter().map(|(label, _)| label.clone()).collect();
    let mut names: Vec<String> = Vec::new();
    for (_, parts) in bars {
        for (name, _) in parts {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    let groups: BarGroups = names
        .iter()
        .map(|name| {
            let values = bars
                .iter()
                .map(|(_, parts)| {
                    parts
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or(0.0, |(_, v)| *v)
                })
                .collect();
            (name.clone(), values)
        })
        .collect();
    debug_assert!(
        groups.iter().all(|(_, v)| v.len() == categories.len()),
        "a group without one value per bar"
    );
    (categories, groups)
}

/// Rows as categories (their names, shortened) and two groups: the published values and
/// nvarray's.
fn row_groups(rows: &[(String, Option<f64>, f64)]) -> (Vec<String>, BarGroups) {
    let categories: Vec<String> = rows.iter().map(|(what, _, _)| shorten(what, 30)).collect();
    let groups = vec![
        (
            "published".to_string(),
            // A row whose seed gives words, not a number, has no published bar (NaN
            // is not drawn).
            rows.iter()
                .map(|r| r.1.unwrap_or(f64::NAN))
                .collect::<Vec<f64>>(),
        ),
        ("nvarray".to_string(), rows.iter().map(|r| r.2).collect()),
    ];
    (categories, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_and_errors_list_the_choices() {
        let ids = |names: &[&str]| -> Vec<String> {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            parse_seeds(&names)
                .unwrap()
                .into_iter()
                .map(|f| f.id.to_string())
                .collect()
        };
        let every_seed: Vec<String> = Seed::ALL
            .into_iter()
            .flat_map(seeds::figures)
            .map(|f| f.id.to_string())
            .collect();
        assert_eq!(ids(&["all"]), every_seed);
        // The long study is in neither `all` nor its seed's name: only its own.
        assert!(!ids(&["all"]).iter().any(|id| id == "vnvml-sqlite"));
        assert!(!ids(&["vnvml"]).iter().any(|id| id == "vnvml-sqlite"));
        assert_eq!(ids(&["vnvml-sqlite"]), ["vnvml-sqlite"]);
        let named: Vec<String> = [Seed::Moneta, Seed::DcExpress]
            .into_iter()
            .flat_map(seeds::figures)
            .map(|f| f.id.to_string())
            .collect();
        assert_eq!(ids(&["moneta", "dc-express", "moneta"]), named);
        let Err(e) = parse_seeds(&["nope".into()]) else {
            panic!("an unknown seed was taken");
        };
        let e = e.to_string();
        assert!(
            e.contains("storage-future") && e.contains("vnvml-sqlite"),
            "{e}"
        );
    }
}
