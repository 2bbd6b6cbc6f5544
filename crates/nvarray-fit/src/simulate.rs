//! A grid job in the simulator: the fio job as nvarray's workload, run in virtual time long
//! enough to hold about `SIM_IOS` requests at the measured rate, after a ramp of a few
//! measured latencies (fio's `ramp_time`, so the queue is full when counting starts and no
//! drain at the end biases the rate), and the same three figures read from its report.

use nvarray_model::DeviceConfig;
use nvarray_report::RunReport;
use nvarray_workload::Workload;

use crate::grid::{Job, Pattern};
use crate::measured::{quantile, Figures};

/// Requests each simulated job counts, at the measured rate.
pub const SIM_IOS: f64 = 600.0;
/// The most a job counts however fast a candidate device is (a bound on the search's cost).
const SIM_IOS_MAX: u64 = 2400;

/// `job` as the simulator's workload, sized from what the device measured.
pub fn workload(job: &Job, measured: &Figures, span_bytes: u64) -> Workload {
    let runtime_ns = (SIM_IOS / measured.iops * 1e9).max(1000.0) as u64;
    let ramp_ns = (4.0 * measured.mean_ns).max(1000.0) as u64;
    let mix = if job.pattern == Pattern::RandMix70 {
        "rwmixread=70\n"
    } else {
        ""
    };
    let text = format!(
        "[{name}]\nrw={rw}\nbs={bs}\niodepth={qd}\nsize={span}\n{mix}norandommap=1\n\
         time_based=1\nruntime={runtime_ns}ns\nramp_time={ramp_ns}ns\nnumber_ios={SIM_IOS_MAX}\n",
        name = job.name(),
        rw = job.pattern.rw(),
        bs = job.bs,
        qd = job.iodepth,
        span = span_bytes,
    );
    nvarray_workload::parse_job_file(&text).expect("a grid job is a valid job file")
}

/// The three figures of a simulated run.
pub fn figures(report: &RunReport) -> Figures {
    let t = &report.totals;
    let mut bins: Vec<(f64, f64)> = [&t.read, &t.write]
        .iter()
        .flat_map(|d| d.bins())
        .map(|(at, n)| (at as f64, n as f64))
        .collect();
    Figures {
        iops: t.iops,
        mean_ns: t.latency_ns.mean,
        p99_ns: quantile(&mut bins, 0.99),
    }
}

/// Each workload's figures on `device`, run on `jobs` threads; `None` for a run the device
/// cannot make (it stopped with an error, or completed nothing).
pub fn predict(device: &DeviceConfig, workloads: &[Workload], jobs: usize) -> Vec<Option<Figures>> {
    let mut out = vec![None; workloads.len()];
    let run = |i: usize, _: &mut dyn FnMut(f64)| -> Result<Option<Figures>, ()> {
        Ok(nvarray_run::sim::run(device, &workloads[i])
            .ok()
            .map(|r| figures(&r))
            .filter(|f| f.iops > 0.0 && f.mean_ns > 0.0))
    };
    let result =
        nvarray_run::parallel::run_points(workloads.len(), jobs, &run, &|_| {}, &mut |i, f| {
            out[i] = f
        });
    debug_assert!(result.is_ok(), "runs never fail here: a failed run is None");
    out
}

/// `job` on `device` over `span_bytes` when nothing was measured (a collection from the
/// simulator, `fit simulate`): a first run sized by `guess` measures the device, and a second
/// sized by that one is the run, as a job sized by the real device's figures would be. The
/// workload run and its report.
pub fn sized_run(
    device: &DeviceConfig,
    job: &Job,
    guess: &Figures,
    span_bytes: u64,
) -> Result<(Workload, RunReport), nvarray_run::SimError> {
    let first = nvarray_run::sim::run(device, &workload(job, guess, span_bytes))?;
    let sized = workload(job, &figures(&first), span_bytes);
    let report = nvarray_run::sim::run(device, &sized)?;
    Ok((sized, report))
}
