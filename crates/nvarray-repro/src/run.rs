//! Running a catalogue: every distinct experiment once (rows and plots share them), then each
//! row's number read off the outcomes.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use nvarray_model::presets::preset;
use nvarray_model::protocol_cost::protocol_table;
use nvarray_workload::{parse_job_file, JobSpec, Workload};
use serde_json::Value;

use crate::report::{self, FigureResult};
use crate::spec::{Experiment, Figure, Plot, SimRun};

/// Runs the experiments this crate cannot: the emulator, the NVM library's benchmarks, fio on
/// a kernel loop device, PMDK. `Err` says why one could not run (shown in the report).
pub trait Runner {
    fn run_external(&mut self, experiment: &Experiment) -> Result<Value, String>;
}

/// A runner for the simulator rows alone (the tests): everything else is left out, saying so.
pub struct SimOnly;

impl Runner for SimOnly {
    fn run_external(&mut self, _: &Experiment) -> Result<Value, String> {
        Err("not run here: a measurement of this machine, run by `nvarray repro`".to_string())
    }
}

/// Runs an experiment that needs no machine of its own (`Sim`, `ProtocolCost`) in process;
/// `None` for the others.
pub fn run_sim_experiment(experiment: &Experiment) -> Option<Result<Value, String>> {
    match experiment {
        Experiment::Sim(run) => Some(run_sim(run)),
        Experiment::ProtocolCost { preset: name } => Some(
            preset(name)
                .and_then(|p| p.load(&[]))
                .map_err(|e| e.to_string())
                .and_then(|cfg| {
                    serde_json::to_value(protocol_table(&cfg)).map_err(|e| e.to_string())
                }),
        ),
        _ => None,
    }
}

/// The simulator exactly as `nvarray sim` runs the same command: the preset with its `--set`
/// overrides, then one job from the flags or the jobs of the job file, through the same
/// parser.
fn run_sim(run: &SimRun) -> Result<Value, String> {
    let cfg = preset(&run.preset)
        .and_then(|p| p.load(&run.sets))
        .map_err(|e| e.to_string())?;
    let workload = match &run.job_file {
        Some(_) => parse_job_file(&run.job_file_text()).map_err(|e| e.to_string())?,
        None => {
            // `spec::sim` makes one job; several need a job file (`spec::sim_jobs`), and the
            // command printed for this run shows the one job's keys only.
            assert_eq!(
                run.jobs.len(),
                1,
                "a run without a job file has {} jobs",
                run.jobs.len()
            );
            let mut job = JobSpec::default();
            for (name, keys) in &run.jobs {
                debug_assert_eq!(name, "job0");
                for (k, v) in keys {
                    job.set(k, v).map_err(|e| e.to_string())?;
                }
            }
            Workload {
                jobs: vec![job],
                trace: None,
            }
        }
    };
    let report = nvarray_run::sim::run(&cfg, &workload).map_err(|e| e.to_string())?;
    serde_json::to_value(report).map_err(|e| e.to_string())
}

/// Every experiment of `figures`, each once, in the order first named.
pub fn experiments(figures: &[Figure]) -> Vec<&Experiment> {
    let mut named: Vec<&Experiment> = Vec::new();
    for f in figures {
        named.extend(f.rows.iter().flat_map(|row| &row.experiments));
        match &f.plot {
            Some(Plot::Lines { series, .. }) => {
                named.extend(series.iter().flat_map(|s| &s.points).map(|p| &p.experiment));
            }
            Some(Plot::StackedBars { bars, .. }) => {
                named.extend(bars.iter().map(|b| &b.experiment))
            }
            Some(Plot::RowBars { .. }) | None => {}
        }
    }
    // Outcomes are keyed by command: two different experiments that print the same command
    // (a job file's name reused for other jobs) would share one outcome.
    let mut seen: HashMap<String, &Experiment> = HashMap::new();
    named.retain(|e| match seen.entry(e.command()) {
        Entry::Occupied(first) => {
            assert!(
                *first.get() == *e,
                "two different experiments print the command {}",
                first.key()
            );
            false
        }
        Entry::Vacant(slot) => {
            slot.insert(e);
            true
        }
    });
    named
}

/// Runs every experiment of `figures` (in process or through `runner`), telling `progress`
/// (done, total, command) before each, and judges every row.
pub fn evaluate(
    figures: &[Figure],
    runner: &mut dyn Runner,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Vec<FigureResult> {
    let all = experiments(figures);
    let mut outcomes: HashMap<String, Result<Value, String>> = HashMap::new();
    for (i, e) in all.iter().enumerate() {
        let command = e.command();
        progress(i, all.len(), &command);
        let outcome = run_sim_experiment(e).unwrap_or_else(|| runner.run_external(e));
        outcomes.insert(command, outcome);
    }
    progress(all.len(), all.len(), "");
    figures
        .iter()
        .map(|f| report::judge(f, &outcomes))
        .collect()
}
