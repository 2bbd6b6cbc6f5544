//! `nvarray pm-bench`: the benchmarks of the transactional NVM library (`nvarray-pm`).
//!
//! * `tx`: small transactions per second from N threads, the shape of PMDK's published figure;
//!   prints the same JSON line as the PMDK peer (`crates/nvarray-pm/peer/pmdk_peer.c`).
//! * `pages`: the vNVML paper's microbenchmark (slide 32): write N bytes into every 4 KiB page
//!   of an array, once or several passes over, one transaction per page.
//! * `ycsb`: a key-value workload (fixed-size records, uniform or zipfian keys, a write/read
//!   mix) on the library and on unlogged writes to a plain mapping of the same file; the
//!   library's throughput normalised to that baseline (the seed's slides 22–30). `--sweep`
//!   varies the log or cache size and draws the sensitivity curve.
//!
//! The harness (pools, threads, timing, histograms, the unlogged baseline) is
//! `nvarray_pm::bench`; this file parses the flags, calls it, words its refusals in terms of
//! the flags, and prints its results and the sweep's chart.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use nvarray_pm::bench::{
    self, BenchError, Invalid, KeyDist, PagesConfig, TxConfig, Ycsb, YcsbConfig, YcsbResult,
};
use nvarray_pm::PoolOptions;
use nvarray_present::plot::{write_chart, Chart, Series};

use nvarray_sys::input::input_error;

#[derive(Args, Debug)]
pub struct PmBenchArgs {
    #[command(subcommand)]
    bench: PmBench,
}

#[derive(Subcommand, Debug)]
enum PmBench {
    /// Transactions per second: each thread rewrites its own objects, one per transaction.
    Tx(TxArgs),
    /// vNVML's microbenchmark: N bytes written into every 4 KiB page of an array.
    Pages(PagesArgs),
    /// YCSB-style key-value workload, normalised to unlogged writes (`--sweep` for curves).
    Ycsb(YcsbArgs),
}

/// Where the pool lives and what its NVM tier is made of.
#[derive(Args, Debug, Clone)]
struct PoolFlags {
    /// Directory of the NVM tier (log and write cache).
    #[arg(long, default_value = "/dev/shm")]
    nvm_dir: PathBuf,
    /// Directory of the backing file (ordinary storage). A fresh file is made and removed.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    data_dir: PathBuf,
    /// NVM technology (an nvarray-model preset); each persist barrier costs its write latency.
    #[arg(long, default_value = "dram")]
    tech: String,
    /// Redo log size; cut to what the pool can use (eight times its size).
    #[arg(long, default_value = "64m", value_parser = parse_size)]
    log_size: u64,
    /// NVM write cache size; cut to what the pool can use (the size that never writes back
    /// before the pool is closed).
    #[arg(long, default_value = "256m", value_parser = parse_size)]
    cache_size: u64,
}

/// Every size flag of pm-bench reads sizes this one way (`1k`, `64m`, `2g`, plain bytes).
fn parse_size(s: &str) -> Result<u64, String> {
    nvarray_workload::parse_size(s).map_err(|e| e.to_string())
}

/// `parse_size` for a size held in memory at once (`--tx-bytes`).
fn parse_size_usize(s: &str) -> Result<usize, String> {
    let bytes = parse_size(s)?;
    usize::try_from(bytes).map_err(|_| format!("{bytes} bytes does not fit in memory"))
}

impl PoolFlags {
    /// Both directories exist: a mistyped one is the user's mistake (exit 2), found before
    /// any work starts.
    fn check(&self) -> anyhow::Result<()> {
        for (flag, dir) in [("--nvm-dir", &self.nvm_dir), ("--data-dir", &self.data_dir)] {
            if !dir.is_dir() {
                return Err(input_error(format!(
                    "{flag} {}: not an existing directory",
                    dir.display()
                )));
            }
        }
        Ok(())
    }

    fn options(&self) -> PoolOptions {
        PoolOptions {
            nvm_dir: self.nvm_dir.clone(),
            tech: self.tech.clone(),
            log_size_bytes: self.log_size,
            cache_size_bytes: self.cache_size,
            ..Default::default()
        }
    }
}

/// A harness error: a pool that cannot be opened is the user's to fix (exit 2), like a bad
/// flag; anything else is a failure of the run.
fn run_error(e: BenchError) -> anyhow::Error {
    match e {
        BenchError::Open(e) => input_error(e),
        BenchError::Invalid(e) => input_error(e),
        e => anyhow::Error::new(e),
    }
}

#[derive(Args, Debug)]
struct TxArgs {
    #[command(flatten)]
    pool: PoolFlags,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Bytes written per transaction (a size: 256, 1k, ...).
    #[arg(long, default_value = "256", value_parser = parse_size_usize)]
    tx_bytes: usize,
    /// Objects per thread (each transaction rewrites the next one).
    #[arg(long, default_value_t = 1024)]
    objects: usize,
    /// How long to run. Each thread commits at least one transaction, however short.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

fn run_tx(a: TxArgs) -> anyhow::Result<()> {
    let config = TxConfig {
        threads: a.threads,
        tx_bytes: a.tx_bytes,
        objects: a.objects,
        seconds: a.seconds,
    };
    let result =
        bench::run_tx(&a.pool.data_dir, &a.pool.options(), &config).map_err(|e| tx_error(&a, e))?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// `run_error`, with the refusals of `bench::run_tx` in the flags' words.
fn tx_error(a: &TxArgs, e: BenchError) -> anyhow::Error {
    match e {
        BenchError::Invalid(Invalid::NotPositive { .. }) => {
            input_error("--threads, --tx-bytes, --objects and --seconds must be > 0")
        }
        BenchError::Invalid(Invalid::SecondsOverMax { .. }) => input_error(format!(
            "--seconds {:e} is more than a day ({} s)",
            a.seconds,
            bench::TX_SECONDS_MAX
        )),
        BenchError::Invalid(Invalid::ThreadsOverMax { .. }) => input_error(format!(
            "--threads {} is more than {}",
            a.threads,
            bench::TX_THREADS_MAX
        )),
        BenchError::Invalid(Invalid::PoolOverMax) => input_error(format!(
            "--tx-bytes x --objects x --threads is more than the {} GiB pool this benchmark \
             allows",
            bench::TX_POOL_BYTES_MAX >> 30
        )),
        e => run_error(e),
    }
}

#[derive(Args, Debug)]
struct PagesArgs {
    #[command(flatten)]
    pool: PoolFlags,
    /// Array size (the paper: 2 GB).
    #[arg(long, default_value = "2g", value_parser = parse_size)]
    array_bytes: u64,
    /// Bytes written into each 4 KiB page (1 .. 4096).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    write_bytes: u64,
    /// Passes over the whole array (the paper: 1 and 16).
    #[arg(long, default_value_t = 1)]
    passes: u32,
}

fn run_pages(a: PagesArgs) -> anyhow::Result<()> {
    let config = PagesConfig {
        array_bytes: a.array_bytes,
        write_bytes: a.write_bytes,
        passes: a.passes,
    };
    let result =
        bench::run_pages(&a.pool.data_dir, &a.pool.options(), &config).map_err(|e| match e {
            BenchError::Invalid(_) => input_error(
                "--write-bytes must be 1..=4096, --array-bytes at least 4096, --passes > 0",
            ),
            e => run_error(e),
        })?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Dist {
    Uniform,
    Zipf,
}

impl From<Dist> for KeyDist {
    fn from(d: Dist) -> KeyDist {
        match d {
            Dist::Uniform => KeyDist::Uniform,
            Dist::Zipf => KeyDist::Zipf,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Sweep {
    LogSize,
    CacheSize,
}

#[derive(Args, Debug)]
struct YcsbArgs {
    #[command(flatten)]
    pool: PoolFlags,
    /// Record size (the seed: 64 KB).
    #[arg(long, default_value = "1k", value_parser = parse_size)]
    record_bytes: u64,
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    dist: Dist,
    /// Zipf exponent for `--dist zipf` (YCSB's default 0.99).
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// Percentage of operations that write (the seed's mixes: 95, 50, 30, 5, 0).
    #[arg(long, default_value_t = 50)]
    write_pct: u32,
    /// Operations per run.
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    /// Vary the log or the cache size over `--values` and plot the normalised throughput.
    #[arg(long, value_enum)]
    sweep: Option<Sweep>,
    /// Sizes for `--sweep`, comma-separated (e.g. 1m,4m,16m,64m).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    values: Vec<u64>,
    /// Chart for `--sweep` (.svg or .png).
    #[arg(long, default_value = "pm-ycsb-sweep.svg")]
    plot: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Says on stderr when the pool used a smaller log or cache than asked: `nvarray-pm` sizes
/// the NVM tier to the pool, so on a small pool a sweep's larger values all run the same.
fn note_cut_sizes(r: &YcsbResult, log_size: u64, cache_size: u64) {
    for (what, asked, used) in [
        ("log", log_size, r.log_size_bytes),
        ("cache", cache_size, r.cache_size_bytes),
    ] {
        if used < asked {
            eprintln!(
                "note: {what} size {asked} B asked, {used} B used: a pool of {} B can use no \
                 more (the NVM tier is sized to the pool)",
                r.records * r.record_bytes
            );
        }
    }
}

fn run_ycsb(a: YcsbArgs) -> anyhow::Result<()> {
    let ycsb = Ycsb::new(YcsbConfig {
        record_bytes: a.record_bytes,
        records: a.records,
        dist: a.dist.into(),
        theta: a.theta,
        write_pct: a.write_pct,
        ops: a.ops,
        seed: a.seed,
    })
    .map_err(|_| {
        input_error(
            "--records, --record-bytes and --ops must be > 0, --write-pct 0..=100, --theta > 0",
        )
    })?;
    let sizes = sweep_sizes(&a)?;
    // The chart's name is checked before the sweep runs, not after it (minutes of work).
    if a.sweep.is_some() {
        nvarray_present::plot::check_chart_path(&a.plot).map_err(input_error)?;
        nvarray_sys::output_files::check_writable(&a.plot)?;
    }
    let progress = crate::progress::Progress::new("pm-bench ycsb", sizes.len() as u64);
    let mut results = Vec::new();
    for (step, &(log_size, cache_size)) in sizes.iter().enumerate() {
        progress.set_message(format!("log {log_size} B, cache {cache_size} B"));
        progress.set(step as u64, 0.0);
        let opts = PoolOptions {
            log_size_bytes: log_size,
            cache_size_bytes: cache_size,
            ..a.pool.options()
        };
        let r = ycsb.run(&a.pool.data_dir, &opts).map_err(run_error)?;
        note_cut_sizes(&r, log_size, cache_size);
        println!("{}", serde_json::to_string(&r)?);
        results.push(r);
    }
    progress.finish();
    assert_eq!(results.len(), sizes.len(), "a result for every size");
    if let Some(sweep) = a.sweep {
        plot_sweep(&a, sweep, &results)?;
    }
    Ok(())
}

/// The (log, cache) sizes of each run: the pool's, or `--values` for the size `--sweep`
/// varies.
fn sweep_sizes(a: &YcsbArgs) -> anyhow::Result<Vec<(u64, u64)>> {
    Ok(match a.sweep {
        None if !a.values.is_empty() => {
            return Err(input_error(
                "--values is for --sweep log-size|cache-size; without --sweep it would be \
                 ignored (use --log-size or --cache-size for one run)",
            ))
        }
        None => vec![(a.pool.log_size, a.pool.cache_size)],
        Some(_) if a.values.is_empty() => return Err(input_error("--sweep needs --values")),
        Some(Sweep::LogSize) => a.values.iter().map(|&v| (v, a.pool.cache_size)).collect(),
        Some(Sweep::CacheSize) => a.values.iter().map(|&v| (a.pool.log_size, v)).collect(),
    })
}

/// The sweep's chart: normalised throughput against the size `sweep` varied, at `--plot`.
fn plot_sweep(a: &YcsbArgs, sweep: Sweep, results: &[YcsbResult]) -> anyhow::Result<()> {
    let name = match sweep {
        Sweep::LogSize => "log size (MiB)",
        Sweep::CacheSize => "cache size (MiB)",
    };
    let x = |r: &YcsbResult| match sweep {
        Sweep::LogSize => r.log_size_bytes,
        Sweep::CacheSize => r.cache_size_bytes,
    };
    let series = [Series {
        label: format!(
            "{} B records, {:?}, {}% writes",
            a.record_bytes, a.dist, a.write_pct
        ),
        points: results
            .iter()
            .map(|r| (x(r) as f64 / (1 << 20) as f64, r.normalised))
            .collect(),
    }];
    let title = format!("nvarray-pm throughput / unlogged baseline vs {name}");
    write_chart(
        &a.plot,
        &Chart {
            title: &title,
            x_label: name,
            y_label: "normalised throughput",
            log_x: true,
            log_y: false,
            series: &series,
            reference: None,
            guide_then_points: false,
        },
    )?;
    eprintln!("wrote {}", a.plot.display());
    Ok(())
}

pub fn run(a: PmBenchArgs) -> anyhow::Result<()> {
    match &a.bench {
        PmBench::Tx(a) => a.pool.check()?,
        PmBench::Pages(a) => a.pool.check()?,
        PmBench::Ycsb(a) => a.pool.check()?,
    }
    match a.bench {
        PmBench::Tx(a) => run_tx(a),
        PmBench::Pages(a) => run_pages(a),
        PmBench::Ycsb(a) => run_ycsb(a),
    }
}
