//! Flags shared by every command that builds a device or a workload.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use nvarray_model::{apply_overrides, parse_assignment, presets, DeviceConfig};
use nvarray_workload::trace::{refused_key, AddressMode, ReplayMode, TraceFormat, TraceSpec};
use nvarray_workload::{ignored_reason, parse_job_file_from, JobFileEnv, JobSpec, Workload};

use nvarray_sys::input::input_error;

/// Which device to model.
#[derive(Args, Clone, Debug)]
pub struct DeviceArgs {
    /// Built-in device preset (see `nvarray presets`).
    #[arg(long, default_value = "moneta", conflicts_with = "device")]
    pub preset: String,
    /// Device description as a TOML file (start from `nvarray presets show NAME`) [default:
    /// none, the --preset].
    #[arg(long, value_name = "FILE")]
    pub device: Option<PathBuf>,
    /// Override one device parameter by its dotted TOML path, e.g. `controller.policy=round-robin`,
    /// `memory.controllers=8`, `memory.read_latency_ns=1us`. Sizes take k/m/g (binary), times
    /// take ns/us/ms/s. Repeatable [default: none, the preset's or file's values].
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Flash behind a page-mapping FTL: what the device holds before the run, written
    /// untimed: `fill` (every page once, in order) or `random:N` (the fill, then N
    /// drive-writes of uniform random pages: steady state for random writes). Turns the FTL
    /// on, as `--set ftl.enabled=true --set ftl.precondition=...` (docs/flash.md) [default:
    /// none, a new drive, and the FTL only if the device enables it].
    #[arg(long, value_name = "fill|random:N")]
    pub precondition: Option<String>,
}

impl DeviceArgs {
    /// The base TOML text and the parsed `--set` overrides.
    pub fn base(&self) -> Result<(String, Vec<(String, String)>)> {
        let text = match &self.device {
            Some(path) => read_text_file(path, "device file")?,
            None => presets::preset(&self.preset)
                .map_err(input_error)?
                .toml
                .to_string(),
        };
        let mut overrides = self
            .set
            .iter()
            .map(|s| parse_assignment(s).map_err(input_error))
            .collect::<Result<Vec<_>>>()?;
        if let Some(how) = &self.precondition {
            how.parse::<nvarray_ftl::Precondition>()
                .map_err(|e| input_error(format!("--precondition {how}: {e}")))?;
            overrides.push(("ftl.enabled".to_string(), "true".to_string()));
            overrides.push(("ftl.precondition".to_string(), how.clone()));
        }
        Ok((text, overrides))
    }

    pub fn load(&self) -> Result<DeviceConfig> {
        let (text, overrides) = self.base()?;
        let source = match &self.device {
            Some(p) => p.display().to_string(),
            None => format!("preset {}", self.preset),
        };
        let device = apply_overrides(&text, &overrides)
            .map_err(|e| input_error(format!("{source}: {e}")))?;
        if let Some(how) = &self.precondition {
            // Written when the model is built, untimed but not instant (20 s for 64 GiB to
            // random:2, docs/perf.md): say so before the silence.
            let gib = device.memory.capacity_bytes as f64 / f64::from(1 << 30);
            eprintln!("nvarray: preconditioning the FTL ({how}) over {gib:.1} GiB before the run");
        }
        Ok(device)
    }
}

/// The workload, in fio's vocabulary. Each flag given applies to every job of a job file too.
#[derive(Args, Clone, Debug, Default)]
pub struct FioArgs {
    /// fio job file: a `[global]` section and one section per concurrent stream, same keys as
    /// these flags.
    #[arg(value_name = "JOBFILE")]
    pub jobfile: Option<PathBuf>,
    /// Job name (for the command-line job) [default: job0; trace with --trace].
    #[arg(long)]
    pub name: Option<String>,
    /// Access pattern: read | write | randread | randwrite | rw | randrw [default: read].
    #[arg(long, visible_alias = "readwrite")]
    pub rw: Option<String>,
    /// Request size in bytes (fio units: 512, 4k, 1m; k = 1024) [default: 4k].
    #[arg(long, visible_alias = "blocksize")]
    pub bs: Option<String>,
    /// Request size mix, e.g. `4k/50:64k/50` (size/percent pairs summing to 100) [default:
    /// none, every request --bs].
    #[arg(long)]
    pub bssplit: Option<String>,
    /// Request sizes MIN-MAX, e.g. `4k-64k`: every multiple of MIN up to MAX, equally likely
    /// (MAX a multiple of MIN) [default: none, every request --bs].
    #[arg(long, conflicts_with_all = ["bs", "bssplit"])]
    pub bsrange: Option<String>,
    /// Percent of reads in rw/randrw workloads (0-100) [default: 50].
    #[arg(long, conflicts_with = "rwmixwrite")]
    pub rwmixread: Option<String>,
    /// Percent of writes in rw/randrw workloads (0-100): rwmixread = 100 - this [default: 50].
    #[arg(long)]
    pub rwmixwrite: Option<String>,
    /// Requests each thread keeps outstanding [default: 1].
    #[arg(long)]
    pub iodepth: Option<String>,
    /// Threads per job, each with its own queue [default: 1].
    #[arg(long)]
    pub numjobs: Option<String>,
    /// Run time: device time in the simulator, wall-clock time in the emulator (seconds by
    /// default; 100ms, 2s, 500us also accepted). 0: no time limit, as in fio (the job then
    /// ends by --number_ios, --io_size, or after moving its region once) [default: 100ms
    /// when nothing else ends the job].
    #[arg(long)]
    pub runtime: Option<String>,
    /// Warm-up before measuring, as fio's ramp_time: the job runs this long first and what
    /// completes meanwhile is not counted; --runtime starts after it (seconds by default)
    /// [default: 0].
    #[arg(long = "ramp_time")]
    pub ramp_time: Option<String>,
    /// Requests per thread (instead of, or as well as, --runtime; k/m suffixes) [default: no
    /// limit].
    #[arg(long = "number_ios")]
    pub number_ios: Option<String>,
    /// Bytes per thread, then it stops (fio units: 1g) [default: no limit].
    #[arg(long = "io_size", visible_alias = "io_limit")]
    pub io_size: Option<String>,
    /// Each thread's region starts this far after the previous thread's (fio units); thread
    /// t touches --offset + t x this [default: 0, all threads share the region].
    #[arg(long = "offset_increment")]
    pub offset_increment: Option<String>,
    /// Run the job this many times over: its --number_ios, --io_size and --runtime are
    /// multiplied [default: 1].
    #[arg(long)]
    pub loops: Option<String>,
    /// Cap each thread's requests per second; requests are issued at their paced times and
    /// their latency counts from then, so a device that cannot keep the rate shows queueing
    /// [default: no cap].
    #[arg(long = "rate_iops")]
    pub rate_iops: Option<String>,
    /// Cap each thread's bytes per second (fio units: 100m = 100 MiB/s), paced as --rate_iops
    /// [default: no cap].
    #[arg(long)]
    pub rate: Option<String>,
    /// How capped requests are spaced: linear (evenly) | poisson (exponential gaps)
    /// [default: linear].
    #[arg(long = "rate_process")]
    pub rate_process: Option<String>,
    /// Offset distribution for random workloads: random (uniform) | zipf:THETA (THETA in
    /// (0, 100]; 1.2 is a common skew) [default: random].
    #[arg(long = "random_distribution")]
    pub random_distribution: Option<String>,
    /// Seed of the request generators, decimal or 0x hex; same seed, same run [default: 0x89].
    #[arg(long)]
    pub randseed: Option<String>,
    /// Start of the region the job touches (bytes, fio units: 1g) [default: 0].
    #[arg(long)]
    pub offset: Option<String>,
    /// Length of the region the job touches (bytes, fio units) [default: from --offset to the
    /// device's end].
    #[arg(long)]
    pub size: Option<String>,
    /// Boundary random offsets are aligned to, in bytes (fio's blockalign; e.g. 512 for
    /// sector-aligned random I/O) [default: the smallest request size, as in fio].
    #[arg(long, visible_alias = "ba")]
    pub blockalign: Option<String>,
    /// fio's think time: after each completed request the thread waits for all of its
    /// requests, then pauses this long before issuing again (microseconds by default, as in
    /// fio; 10us, 1ms also accepted; a job file's thinktime_blocks thinks every N) [default:
    /// 0].
    #[arg(long)]
    pub thinktime: Option<String>,
    /// Data verification: crc32c (every block written carries its offset and a CRC-32C that
    /// every read checks; a mismatch stops the run with an error) | none. The simulator moves
    /// no data, so there it changes nothing [default: none].
    #[arg(long)]
    pub verify: Option<String>,
    /// Replay a block trace instead of generating requests: blkparse text, fio iolog v2/v3,
    /// MSR-Cambridge CSV, SNIA/FIU text or nvarray CSV (docs/traces.md). Read as it goes, so
    /// any size replays in bounded memory. The trace gives each request's direction, offset,
    /// size and time; --iodepth, --runtime, --number_ios, --io_size, --thinktime, --ramp_time
    /// and --name still apply, --loops replays it that many times (--time_based: until
    /// --runtime); flags that would mean nothing for a trace are refused [default: none,
    /// requests generated from the job].
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "jobfile", "rw", "bs", "bssplit", "bsrange", "rwmixread", "numjobs", "random_distribution",
        "offset", "blockalign", "verify",
    ])]
    pub trace: Option<PathBuf>,
    /// The trace's format: blkparse | iolog2 | iolog3 | msr | fiu | csv [default: guessed
    /// from the first line].
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    pub trace_format: Option<String>,
    /// as-fast: the next request as soon as one of --iodepth slots is free (closed loop);
    /// timestamps: each request at its recorded time (open loop, at most --iodepth in flight;
    /// latency counts from the recorded time, so a slow device shows queueing) [default:
    /// as-fast].
    #[arg(long, value_name = "MODE", requires = "trace")]
    pub replay_mode: Option<String>,
    /// Trace time divided by this in timestamps mode: 2 replays twice as fast [default: 1].
    #[arg(long, value_name = "X", requires = "trace")]
    pub replay_speed: Option<f64>,
    /// Offsets past the device's end: wrap (modulo the capacity) | scale (the trace's span
    /// shrunk onto the device; reads the trace once first) [default: wrap]. Sizes are always
    /// aligned to the device block and split at its largest transfer; the report counts each.
    #[arg(long, value_name = "MODE", requires = "trace")]
    pub trace_address: Option<String>,
    /// Replay only this device or file of a trace that holds several, named as the trace
    /// names it: blkparse `8,16`, an iolog's file name, MSR `Hostname,DiskNumber` (`hm,1`),
    /// FIU `MAJOR,MINOR`. The report lists the trace's devices [default: all of them, laid
    /// over the one device].
    #[arg(long, value_name = "NAME", requires = "trace")]
    pub trace_device: Option<String>,
    /// fio options that change nothing for a modelled array (ioengine, filename, direct=1,
    /// buffered=0, thread, group_reporting, randrepeat=1, random_generator, invalidate,
    /// iodepth_batch*): accepted so a fio command line runs unchanged, each noted on stderr
    /// with why. Two of fio's switches here do change the run: --norandommap (uniform random
    /// offsets drawn independently, instead of each block once per pass) and --time_based.
    #[command(flatten)]
    pub ignored: IgnoredFioArgs,
    /// fio job keys given as globals (`nvarray fio --KEY=VALUE`, `fio_globals`): the jobs
    /// start from them, and a job file may set them again.
    #[arg(skip)]
    pub globals: Vec<(String, String)>,
}

/// fio options accepted so a fio command line runs unchanged: most ignored (see
/// `nvarray_workload::ignored_reason` for each why); `norandommap` and `time_based` are
/// fio's switches and are applied.
#[derive(Args, Clone, Debug, Default)]
pub struct IgnoredFioArgs {
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "")]
    pub ioengine: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "")]
    pub filename: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub direct: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "0")]
    pub buffered: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub norandommap: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub thread: Option<String>,
    #[arg(long = "group_reporting", hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub group_reporting: Option<String>,
    #[arg(long = "time_based", hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub time_based: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub randrepeat: Option<String>,
    #[arg(long = "random_generator", hide = true, num_args = 0..=1, default_missing_value = "")]
    pub random_generator: Option<String>,
    #[arg(long, hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub invalidate: Option<String>,
    #[arg(long = "iodepth_batch", hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub iodepth_batch: Option<String>,
    #[arg(long = "iodepth_batch_complete", hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub iodepth_batch_complete: Option<String>,
    #[arg(long = "iodepth_low", hide = true, num_args = 0..=1, default_missing_value = "1")]
    pub iodepth_low: Option<String>,
}

impl IgnoredFioArgs {
    /// The options given, as fio key/value pairs.
    fn pairs(&self) -> Vec<(&'static str, String)> {
        let fields: [(&'static str, &Option<String>); 14] = [
            ("ioengine", &self.ioengine),
            ("filename", &self.filename),
            ("direct", &self.direct),
            ("buffered", &self.buffered),
            ("norandommap", &self.norandommap),
            ("thread", &self.thread),
            ("group_reporting", &self.group_reporting),
            ("time_based", &self.time_based),
            ("randrepeat", &self.randrepeat),
            ("random_generator", &self.random_generator),
            ("invalidate", &self.invalidate),
            ("iodepth_batch", &self.iodepth_batch),
            ("iodepth_batch_complete", &self.iodepth_batch_complete),
            ("iodepth_low", &self.iodepth_low),
        ];
        fields
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
            .collect()
    }
}

impl FioArgs {
    /// The flags given, as fio key/value pairs in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let fields: [(&'static str, &Option<String>); 25] = [
            ("name", &self.name),
            ("rw", &self.rw),
            ("bs", &self.bs),
            ("bssplit", &self.bssplit),
            ("bsrange", &self.bsrange),
            ("ramp_time", &self.ramp_time),
            ("rwmixread", &self.rwmixread),
            ("rwmixwrite", &self.rwmixwrite),
            ("iodepth", &self.iodepth),
            ("numjobs", &self.numjobs),
            ("runtime", &self.runtime),
            ("number_ios", &self.number_ios),
            ("io_size", &self.io_size),
            ("rate_iops", &self.rate_iops),
            ("rate", &self.rate),
            ("rate_process", &self.rate_process),
            ("offset_increment", &self.offset_increment),
            ("loops", &self.loops),
            ("random_distribution", &self.random_distribution),
            ("randseed", &self.randseed),
            ("offset", &self.offset),
            ("size", &self.size),
            ("blockalign", &self.blockalign),
            ("thinktime", &self.thinktime),
            ("verify", &self.verify),
        ];
        fields
            .into_iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
            .chain(self.ignored.pairs())
            .collect()
    }

    /// The trace replay the flags ask for, if any.
    fn trace_spec(&self) -> Result<Option<TraceSpec>> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        // (`nvarray bench` has taken its `--size`, the device's size, by now.)
        if self.size.is_some() {
            return Err(input_error(
                "--size limits a generated job's region; a trace's offsets are its own (fit them with --trace-address, size the device with --set memory.capacity_bytes=)",
            ));
        }
        let format = match &self.trace_format {
            None => None,
            Some(f) => Some(TraceFormat::from_name(f).ok_or_else(|| {
                input_error(format!(
                    "--trace-format {f}: not a trace format; one of {}",
                    names(TraceFormat::ALL.map(|(n, _)| n))
                ))
            })?),
        };
        let mode = match &self.replay_mode {
            None => ReplayMode::AsFast,
            Some(m) => ReplayMode::from_name(m).ok_or_else(|| {
                input_error(format!(
                    "--replay-mode {m}: one of {}",
                    names(ReplayMode::ALL.map(|(n, _)| n))
                ))
            })?,
        };
        let address = match &self.trace_address {
            None => AddressMode::Wrap,
            Some(m) => AddressMode::from_name(m).ok_or_else(|| {
                input_error(format!(
                    "--trace-address {m}: one of {}",
                    names(AddressMode::ALL.map(|(n, _)| n))
                ))
            })?,
        };
        // A flag the replay would not use is refused, never silently ignored.
        for (key, _) in self.pairs() {
            if let Some(why) = refused_key(key) {
                return Err(input_error(format!(
                    "--{key} cannot be used with --trace: {why}"
                )));
            }
        }
        if self.replay_speed.is_some() && mode != ReplayMode::Timestamps {
            return Err(input_error(
                "--replay-speed scales the trace's times: it needs --replay-mode timestamps",
            ));
        }
        let spec = TraceSpec {
            path: path.clone(),
            format,
            mode,
            speed: self.replay_speed.unwrap_or(1.0),
            address,
            device: self.trace_device.clone(),
        };
        spec.validate().map_err(input_error)?;
        Ok(Some(spec))
    }

    /// The workload: the job file's jobs (or one default job), with the flags applied to each.
    pub fn workload(&self, extra: &[(String, String)]) -> Result<Workload> {
        let mut global = JobSpec::default();
        for (k, v) in &self.globals {
            set_flag(&mut global, k, v)?;
        }
        let mut workload = match &self.jobfile {
            Some(path) => {
                let text = read_text_file(path, "job file")?;
                let mut notes = Vec::new();
                let env = MachineEnv {
                    dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
                };
                let workload = parse_job_file_from(&text, global, &env, &mut notes)
                    .map_err(|e| input_error(format!("{}: {e}", path.display())))?;
                for note in notes {
                    eprintln!("note: {}: {note}", path.display());
                }
                workload
            }
            None => Workload {
                jobs: vec![global],
                trace: self.trace_spec()?,
            },
        };
        if workload.trace.is_some() && self.name.is_none() {
            workload.jobs[0].name = "trace".to_string();
        }
        let pairs = self.pairs();
        for job in &mut workload.jobs {
            for (k, v) in pairs
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .chain(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            {
                if k == "name" && self.jobfile.is_some() {
                    continue;
                }
                set_flag(job, k, v)?;
            }
        }
        // After every value was accepted (`direct=0` is refused, not ignored).
        let globals = self.globals.iter().map(|(k, _)| k.as_str());
        for k in pairs.iter().map(|(k, _)| *k).chain(globals) {
            if let Some(why) = ignored_reason(k) {
                eprintln!("note: --{k} ignored: {why}");
            }
        }
        Ok(workload)
    }
}

/// Sets the fio key of flag `--k` on `job`; a refusal names the flag.
fn set_flag(job: &mut JobSpec, k: &str, v: &str) -> Result<()> {
    job.set(k, v).map_err(|e| {
        let text = e.to_string();
        // The workload error usually names the key already.
        input_error(if text.starts_with(k) {
            text
        } else {
            format!("--{k}: {text}")
        })
    })
}

/// What a job file on this machine may use: the environment, fio's `$ncpus`, `$pagesize`
/// and `$mb_memory`, and files beside it to include.
struct MachineEnv {
    dir: PathBuf,
}

impl JobFileEnv for MachineEnv {
    fn var(&self, name: &str) -> Option<String> {
        match name {
            "ncpus" => std::thread::available_parallelism()
                .ok()
                .map(|n| n.to_string()),
            // SAFETY: sysconf reads a constant of the system.
            "pagesize" => Some(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.to_string()),
            "mb_memory" => std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
                let kib: u64 = m
                    .lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()?;
                Some((kib / 1024).to_string())
            }),
            _ => std::env::var(name).ok(),
        }
    }

    fn include(&self, path: &str) -> Result<String, String> {
        let path = self.dir.join(path);
        read_text_file(&path, "included job file").map_err(|e| e.to_string())
    }
}

/// Names joined for a message: "a, b, c".
fn names<const N: usize>(all: [&str; N]) -> String {
    all.join(", ")
}

/// Reads a device or job file of at most `JOB_FILE_BYTES_MAX` bytes. Only that much (and one
/// byte more) is read, so a path such as `/dev/zero` is an error, not unbounded memory.
pub(crate) fn read_text_file(path: &std::path::Path, what: &str) -> Result<String> {
    use std::io::Read;
    let limit = nvarray_workload::JOB_FILE_BYTES_MAX;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit as u64 + 1).read_to_string(&mut text))
        .with_context(|| format!("cannot read {what} {}", path.display()))
        .map_err(|e| input_error(format!("{e:#}")))?;
    if text.len() > limit {
        return Err(input_error(format!(
            "{what} {} is larger than {limit} bytes",
            path.display()
        )));
    }
    Ok(text)
}
