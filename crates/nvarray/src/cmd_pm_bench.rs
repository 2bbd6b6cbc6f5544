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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use nvarray_pm::{PmError, Pool, PoolOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::input_error;
use crate::plot::{write_chart, Chart, Series};

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
    /// Redo log size.
    #[arg(long, default_value = "64m", value_parser = parse_size)]
    log_size: u64,
    /// NVM write cache size.
    #[arg(long, default_value = "256m", value_parser = parse_size)]
    cache_size: u64,
}

fn parse_size(s: &str) -> Result<u64, String> {
    nvarray_workload::parse_size(s).map_err(|e| e.to_string())
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
            log_size: self.log_size,
            cache_size: self.cache_size,
            ..Default::default()
        }
    }
}

/// A backing file made for one run, removed with its NVM-tier file afterwards.
struct ScratchPool {
    path: PathBuf,
    nvm: Option<PathBuf>,
}

impl ScratchPool {
    fn new(dir: &Path, what: &str) -> ScratchPool {
        ScratchPool {
            path: dir.join(format!("nvarray-pm-{what}-{}.pool", std::process::id())),
            nvm: None,
        }
    }

    /// Opens a fresh pool and unlinks both of its files at once: the pool keeps them open and
    /// mapped, and nothing is left behind however the run ends, `kill -9` included.
    fn open(&mut self, size: u64, options: &PoolOptions) -> anyhow::Result<Pool> {
        let _ = std::fs::remove_file(&self.path);
        let pool = Pool::open(&self.path, size, options).map_err(input_error)?;
        self.nvm = Some(pool.nvm_path().to_path_buf());
        self.remove_files();
        Ok(pool)
    }

    fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(nvm) = &self.nvm {
            let _ = std::fs::remove_file(nvm);
        }
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        self.remove_files();
    }
}

/// Bounds of `pm-bench tx`: a day of running, a thousand threads, a 16 GiB pool.
const TX_SECONDS_MAX: f64 = 86_400.0;
const TX_THREADS_MAX: usize = 1024;
const TX_POOL_BYTES_MAX: u64 = 16 << 30;

#[derive(Args, Debug)]
struct TxArgs {
    #[command(flatten)]
    pool: PoolFlags,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Bytes written per transaction.
    #[arg(long, default_value_t = 256)]
    tx_bytes: usize,
    /// Objects per thread (each transaction rewrites the next one).
    #[arg(long, default_value_t = 1024)]
    objects: usize,
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

#[derive(Serialize)]
struct TxResult {
    peer: &'static str,
    bench: &'static str,
    tech: String,
    persist_ns: u64,
    threads: usize,
    tx_bytes: usize,
    transactions: u64,
    seconds: f64,
    tx_per_s: f64,
    p50_ns: u64,
    p99_ns: u64,
}

fn run_tx(a: TxArgs) -> anyhow::Result<()> {
    if a.threads == 0 || a.tx_bytes == 0 || a.objects == 0 || a.seconds.is_nan() || a.seconds <= 0.0
    {
        return Err(input_error(
            "--threads, --tx-bytes, --objects and --seconds must be > 0",
        ));
    }
    // Every count is bounded before anything is started: `--seconds inf` used to panic, and
    // `--threads 100000` to hang while the threads piled up.
    if a.seconds > TX_SECONDS_MAX {
        return Err(input_error(format!(
            "--seconds {:e} is more than a day ({TX_SECONDS_MAX} s)",
            a.seconds
        )));
    }
    if a.threads > TX_THREADS_MAX {
        return Err(input_error(format!(
            "--threads {} is more than {TX_THREADS_MAX}",
            a.threads
        )));
    }
    // Each thread's objects, then the whole pool.
    let region = (a.tx_bytes as u64).saturating_mul(a.objects as u64);
    let size = region
        .checked_mul(a.threads as u64)
        .filter(|&bytes| bytes <= TX_POOL_BYTES_MAX)
        .ok_or_else(|| {
            input_error(format!(
                "--tx-bytes x --objects x --threads is more than the {} GiB pool this benchmark allows",
                TX_POOL_BYTES_MAX >> 30
            ))
        })?
        .max(1 << 20);
    let mut scratch = ScratchPool::new(&a.pool.data_dir, "tx");
    let pool = scratch.open(size, &a.pool.options())?;
    pool.prefault();
    let run_for = Duration::from_secs_f64(a.seconds);
    let start = Instant::now();
    let per_thread: Vec<(u64, hdrhistogram::Histogram<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..a.threads)
            .map(|t| {
                let pool = &pool;
                s.spawn(move || -> Result<_, PmError> {
                    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
                    let mut data = vec![t as u8; a.tx_bytes];
                    let mut n = 0u64;
                    let base = t as u64 * region;
                    while start.elapsed() < run_for {
                        data[0] = n as u8;
                        let t0 = Instant::now();
                        let mut tx = pool.begin()?;
                        let obj = n % a.objects as u64;
                        tx.write(base + obj * a.tx_bytes as u64, &data)?;
                        tx.commit()?;
                        let _ = hist.record(t0.elapsed().as_nanos() as u64);
                        n += 1;
                    }
                    Ok((n, hist))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let mut transactions = 0;
    for (n, h) in &per_thread {
        transactions += n;
        hist.add(h).expect("same histogram bounds");
    }
    let result = TxResult {
        peer: "nvarray-pm",
        bench: "tx",
        tech: a.pool.tech.clone(),
        persist_ns: pool.persist_cost_ns(),
        threads: a.threads,
        tx_bytes: a.tx_bytes,
        transactions,
        seconds,
        tx_per_s: transactions as f64 / seconds,
        p50_ns: hist.value_at_quantile(0.5),
        p99_ns: hist.value_at_quantile(0.99),
    };
    pool.close().map_err(anyhow::Error::new)?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

#[derive(Args, Debug)]
struct PagesArgs {
    #[command(flatten)]
    pool: PoolFlags,
    /// Array size (the paper: 2 GB).
    #[arg(long, default_value = "2g", value_parser = parse_size)]
    array_bytes: u64,
    /// Bytes written into each 4 KiB page (64 .. 4096).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    write_bytes: u64,
    /// Passes over the whole array (the paper: 1 and 16).
    #[arg(long, default_value_t = 1)]
    passes: u32,
}

#[derive(Serialize)]
struct PagesResult {
    peer: &'static str,
    bench: &'static str,
    tech: String,
    array_bytes: u64,
    write_bytes: u64,
    passes: u32,
    transactions: u64,
    seconds: f64,
    records_digested: u64,
    pages_written_back: u64,
}

fn run_pages(a: PagesArgs) -> anyhow::Result<()> {
    let page = nvarray_pm::PAGE as u64;
    if !(1..=page).contains(&a.write_bytes) || a.array_bytes < page || a.passes == 0 {
        return Err(input_error(
            "--write-bytes must be 1..=4096, --array-bytes at least 4096, --passes > 0",
        ));
    }
    let mut scratch = ScratchPool::new(&a.pool.data_dir, "pages");
    let pool = scratch.open(a.array_bytes, &a.pool.options())?;
    // Fault the mapping in first, as the peers do, so the timing is of the writes.
    pool.prefault();
    let data = vec![0xa5u8; a.write_bytes as usize];
    let pages = a.array_bytes / page;
    let start = Instant::now();
    for _ in 0..a.passes {
        for p in 0..pages {
            let mut tx = pool.begin()?;
            tx.write(p * page, &data)?;
            tx.commit()?;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let st = pool.stats();
    let result = PagesResult {
        peer: "nvarray-pm",
        bench: "pages",
        tech: a.pool.tech.clone(),
        array_bytes: a.array_bytes,
        write_bytes: a.write_bytes,
        passes: a.passes,
        transactions: pages * a.passes as u64,
        seconds,
        records_digested: st.records_digested,
        pages_written_back: st.pages_written_back,
    };
    pool.close().map_err(anyhow::Error::new)?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

#[derive(Clone, Copy, Debug, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Dist {
    Uniform,
    Zipf,
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

#[derive(Serialize)]
struct YcsbResult {
    bench: &'static str,
    tech: String,
    record_bytes: u64,
    records: u64,
    dist: Dist,
    write_pct: u32,
    ops: u64,
    log_size: u64,
    cache_size: u64,
    library_ops_per_s: f64,
    baseline_ops_per_s: f64,
    normalised: f64,
    log_full_waits: u64,
    writeback_rounds: u64,
}

/// The keys and operation kinds of one run, drawn up front so both sides see the same ones.
fn ycsb_ops(a: &YcsbArgs) -> Vec<(u64, bool)> {
    let mut rng = SmallRng::seed_from_u64(a.seed);
    let zipf = nvarray_workload::ZipfSampler::new(a.records, a.theta);
    (0..a.ops)
        .map(|_| {
            let key = match a.dist {
                Dist::Uniform => rng.gen_range(0..a.records),
                // Scatter the popular ranks over the key space, as YCSB's scrambled zipfian.
                Dist::Zipf => {
                    (zipf.sample(&mut rng) - 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) % a.records
                }
            };
            (key, rng.gen_range(0..100) < a.write_pct)
        })
        .collect()
}

fn ycsb_library(
    a: &YcsbArgs,
    opts: &PoolOptions,
    ops: &[(u64, bool)],
) -> anyhow::Result<(f64, nvarray_pm::Stats)> {
    let mut scratch = ScratchPool::new(&a.pool.data_dir, "ycsb");
    let pool = scratch.open(a.records * a.record_bytes, opts)?;
    pool.prefault();
    let mut record = vec![0u8; a.record_bytes as usize];
    let start = Instant::now();
    for (i, &(key, write)) in ops.iter().enumerate() {
        let off = key * a.record_bytes;
        if write {
            record[..8].copy_from_slice(&(i as u64).to_le_bytes());
            let mut tx = pool.begin()?;
            tx.write(off, &record)?;
            tx.commit()?;
        } else {
            pool.read(off, &mut record)?;
        }
    }
    let rate = ops.len() as f64 / start.elapsed().as_secs_f64();
    let stats = pool.stats();
    pool.close()?;
    Ok((rate, stats))
}

/// The same operations as plain loads and stores on a shared mapping of a file in the same
/// directory: no log, no cache, no persistence (the seed's baseline).
fn ycsb_baseline(a: &YcsbArgs, ops: &[(u64, bool)]) -> anyhow::Result<f64> {
    let scratch = ScratchPool::new(&a.pool.data_dir, "ycsb-baseline");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&scratch.path)
        .with_context(|| scratch.path.display().to_string())?;
    file.set_len(a.records * a.record_bytes)?;
    // SAFETY: a file this process just created and no one else maps.
    let mut map = unsafe { memmap2::MmapOptions::new().populate().map_mut(&file) }?;
    // Mapped: the name is no longer needed, and unlinked now it cannot outlive a killed run.
    drop(scratch);
    let mut record = vec![0u8; a.record_bytes as usize];
    let n = record.len();
    let start = Instant::now();
    for (i, &(key, write)) in ops.iter().enumerate() {
        let off = (key * a.record_bytes) as usize;
        if write {
            record[..8].copy_from_slice(&(i as u64).to_le_bytes());
            map[off..off + n].copy_from_slice(&record);
        } else {
            record.copy_from_slice(&map[off..off + n]);
        }
    }
    std::hint::black_box(&record);
    Ok(ops.len() as f64 / start.elapsed().as_secs_f64())
}

fn run_ycsb(a: YcsbArgs) -> anyhow::Result<()> {
    if a.records == 0
        || a.record_bytes == 0
        || a.ops == 0
        || a.write_pct > 100
        || a.theta.is_nan()
        || a.theta <= 0.0
    {
        return Err(input_error(
            "--records, --record-bytes and --ops must be > 0, --write-pct 0..=100, --theta > 0",
        ));
    }
    let ops = ycsb_ops(&a);
    let sizes: Vec<(u64, u64)> = match a.sweep {
        None => vec![(a.pool.log_size, a.pool.cache_size)],
        Some(_) if a.values.is_empty() => return Err(input_error("--sweep needs --values")),
        Some(Sweep::LogSize) => a.values.iter().map(|&v| (v, a.pool.cache_size)).collect(),
        Some(Sweep::CacheSize) => a.values.iter().map(|&v| (a.pool.log_size, v)).collect(),
    };
    if a.sweep.is_some() {
        crate::output::check_writable(&a.plot)?;
    }
    let progress = crate::progress::Progress::new("pm-bench ycsb", sizes.len() as u64);
    let mut results = Vec::new();
    for (step, &(log_size, cache_size)) in sizes.iter().enumerate() {
        progress.set_message(format!("log {log_size} B, cache {cache_size} B"));
        progress.set(step as u64, 0.0);
        let opts = PoolOptions {
            log_size,
            cache_size,
            ..a.pool.options()
        };
        let baseline = ycsb_baseline(&a, &ops)?;
        let (library, stats) = ycsb_library(&a, &opts, &ops)?;
        let r = YcsbResult {
            bench: "ycsb",
            tech: a.pool.tech.clone(),
            record_bytes: a.record_bytes,
            records: a.records,
            dist: a.dist,
            write_pct: a.write_pct,
            ops: a.ops,
            log_size,
            cache_size,
            library_ops_per_s: library,
            baseline_ops_per_s: baseline,
            normalised: library / baseline,
            log_full_waits: stats.log_full_waits,
            writeback_rounds: stats.writeback_rounds,
        };
        println!("{}", serde_json::to_string(&r)?);
        results.push(r);
    }
    progress.finish();
    if let Some(sweep) = a.sweep {
        let name = match sweep {
            Sweep::LogSize => "log size (MiB)",
            Sweep::CacheSize => "cache size (MiB)",
        };
        let x = |r: &YcsbResult| match sweep {
            Sweep::LogSize => r.log_size,
            Sweep::CacheSize => r.cache_size,
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
            },
        )?;
        eprintln!("wrote {}", a.plot.display());
    }
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
