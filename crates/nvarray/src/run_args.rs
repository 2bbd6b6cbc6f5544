//! What every run command takes (`RunArgs`: the device, the workload, the report's layout)
//! and how it prints one run's report in the layout asked for.

use anyhow::Result;
use clap::Args;
use nvarray_model::DeviceConfig;
use nvarray_present::{fio_output, table};
use nvarray_report::RunReport;
use nvarray_workload::Workload;

use crate::args::{DeviceArgs, FioArgs};
use nvarray_sys::input::input_error;

/// Everything one run needs: the device, the workload and the output format.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub device: DeviceArgs,
    #[command(flatten)]
    pub fio: FioArgs,
    /// Print the report as JSON instead of a table (nvarray's layout).
    #[arg(long)]
    pub json: bool,
    /// Report layout: normal (nvarray's table) | json (fio's JSON layout, jobs[].read/write
    /// with clat_ns, lat_ns, iops, bw_bytes and percentiles, for fio's own tools; nvarray's
    /// report under "nvarray") | json+ (json with the latency bins) | terse (fio's
    /// semicolon-separated version 3 line per job) [default: normal].
    #[arg(long = "output-format", value_name = "FORMAT", conflicts_with = "json")]
    pub output_format: Option<String>,
    /// Percentiles of fio's JSON and terse output, colon-separated (at most 20 in terse)
    /// [default: fio's,
    /// 1:5:10:20:30:40:50:60:70:80:90:95:99:99.5:99.9:99.95:99.99].
    #[arg(long = "percentile_list", value_name = "LIST")]
    pub percentile_list: Option<String>,
    /// Flash behind an FTL: also write a chart (.png or .svg) of the write amplification in
    /// each interval of the run against device time (docs/flash.md) [default: none].
    #[arg(long = "ftl-plot", value_name = "FILE")]
    pub ftl_plot: Option<std::path::PathBuf>,
    /// Set by `nvarray fio`: its default layout is fio's normal text.
    #[arg(skip)]
    pub fio_compat: bool,
}

/// How a run's report is printed.
enum Layout {
    Table,
    Json,
    Fio { plus: bool, percentiles: Vec<f64> },
    Terse { percentiles: Vec<f64> },
}

impl RunArgs {
    fn layout(&self) -> Result<Layout> {
        let percentiles = match &self.percentile_list {
            Some(list) => fio_output::parse_percentile_list(list).map_err(input_error)?,
            None => fio_output::PERCENTILES_DEFAULT.to_vec(),
        };
        let fio = |plus| Layout::Fio {
            plus,
            percentiles: percentiles.clone(),
        };
        let layout = match self.output_format.as_deref() {
            None if self.json => Layout::Json,
            None | Some("normal") => Layout::Table,
            Some("json") => fio(false),
            Some("json+") => fio(true),
            Some("terse") => Layout::Terse {
                percentiles: percentiles.clone(),
            },
            Some(other) => {
                return Err(input_error(format!(
                    "--output-format {other}: one of normal, json, json+, terse"
                )))
            }
        };
        if self.percentile_list.is_some()
            && !self.fio_compat
            && !matches!(layout, Layout::Fio { .. } | Layout::Terse { .. })
        {
            return Err(input_error(
                "--percentile_list sets the percentiles of fio's layout: add --output-format json",
            ));
        }
        Ok(layout)
    }

    /// Checks the output flags before a run, so a mistake fails at once.
    pub fn check_output(&self) -> Result<()> {
        if let Some(path) = &self.ftl_plot {
            nvarray_present::plot::check_chart_path(path).map_err(input_error)?;
            nvarray_sys::output_files::check_writable(path)?;
            nvarray_sys::output_files::check_writable(&crate::ftl_plot::bandwidth_path(path))?;
        }
        self.layout().map(|_| ())
    }

    /// Refuses fio's layout where a command prints something else (a sweep, a comparison).
    pub fn refuse_fio_layout(&self, what: &str) -> Result<()> {
        match self.layout()? {
            Layout::Fio { .. } | Layout::Terse { .. } => Err(input_error(format!(
                "--output-format json and terse are one run's fio report; {what} has its own (use --json)"
            ))),
            _ => Ok(()),
        }
    }

    /// Prints one run's report in the layout asked for; `fio_compat` (`nvarray fio`) makes
    /// the default layout fio's normal text instead of nvarray's table.
    pub fn print(
        &self,
        device: &DeviceConfig,
        workload: &Workload,
        report: &RunReport,
        fio_compat: bool,
    ) -> Result<()> {
        match self.layout()? {
            Layout::Table if fio_compat => {
                let percentiles = match &self.percentile_list {
                    Some(list) => fio_output::parse_percentile_list(list).map_err(input_error)?,
                    None => fio_output::PERCENTILES_DEFAULT.to_vec(),
                };
                let device_line = table::device_line(device);
                print!(
                    "{}",
                    fio_output::normal(workload, report, &percentiles, &device_line)
                )
            }
            Layout::Table => print!("{}", table::run_report(device, workload, report)),
            Layout::Json => println!("{}", serde_json::to_string_pretty(report)?),
            Layout::Terse { percentiles } => print!("{}", fio_output::terse(report, &percentiles)),
            Layout::Fio { plus, percentiles } => println!(
                "{}",
                serde_json::to_string_pretty(&fio_output::report(
                    workload,
                    report,
                    &percentiles,
                    plus
                ))?
            ),
        }
        if let Some(path) = &self.ftl_plot {
            write_ftl_plot(path, report)?;
        }
        Ok(())
    }
}

/// `--ftl-plot` for one run (`ftl_plot`).
fn write_ftl_plot(path: &std::path::Path, report: &RunReport) -> Result<()> {
    let Some(f) = &report.ftl else {
        return Err(input_error(
            "--ftl-plot: this device has no FTL (add --precondition or --set ftl.enabled=true)",
        ));
    };
    let title = format!(
        "{} ({}, over-provisioning {:.1} %, preconditioned {})",
        report.device,
        f.victim,
        f.over_provisioning * 100.0,
        f.precondition
    );
    let curve = crate::ftl_plot::Curve {
        label: "this run".to_string(),
        page_bytes: f.page_bytes,
        samples: f.samples.clone(),
    };
    crate::ftl_plot::write(path, &title, &[curve])
}
