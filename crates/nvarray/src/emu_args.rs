//! Flags of an emulated device that real software reaches: where its bytes live, who runs it,
//! how the driver waits. `nvarray bench` reads them beside the workload flags; `nvarray serve`
//! and `nvarray mount` read them as `EmuDeviceArgs`, with the device flags and `--size`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use nvarray_host::options::{
    device_threads_auto, device_threads_for_front_end, BackingFaults, BackingKind, CpuList,
    DEVICE_THREADS_MAX,
};
use nvarray_host::{CompletionMode, Device, Options, Stack};
use nvarray_model::DeviceConfig;
use nvarray_workload::{parse_duration_ns, parse_size, NS_PER_US};

use crate::args::DeviceArgs;
use nvarray_sys::input::input_error;

/// The device key `--size` sets.
pub const CAPACITY_KEY: &str = "memory.capacity_bytes";

/// Device size when neither `--size` nor `--set memory.capacity_bytes` gives one. The presets'
/// capacities (16 GiB to 2 TiB) do not fit in memory, and the emulator holds and prefaults the
/// whole device; every command uses it so that the same flags model the same device.
pub const SIZE_DEFAULT: &str = "1G";

/// `--backing` before `--durable` is folded in.
#[derive(Clone, Debug)]
pub enum Backing {
    Ram,
    /// A file, and whether it is sparse (`file:PATH,sparse`: blocks taken on first write).
    File(PathBuf, bool),
    /// No data kept (timing studies of devices larger than the machine).
    None,
}

/// How `--backing none` is described where a run says where its data lives.
pub const NO_DATA_KEPT: &str = "none (no data kept: writes are discarded, reads return zeroes)";

/// Where a served or mounted device's bytes live, for the lines `serve` and `mount` print.
pub fn backing_line(backing: &BackingKind) -> String {
    match backing {
        BackingKind::Ram => "RAM (lost at exit)".to_string(),
        BackingKind::None => NO_DATA_KEPT.to_string(),
        BackingKind::File {
            path,
            durable,
            sparse,
            ..
        } => format!(
            "file {}{}{}",
            path.display(),
            if *sparse { " (sparse)" } else { "" },
            if *durable { ", durable flushes" } else { "" }
        ),
    }
}

pub fn parse_backing(text: &str) -> Result<Backing, String> {
    match text {
        "ram" => Ok(Backing::Ram),
        "none" => Ok(Backing::None),
        _ => match text.strip_prefix("file:") {
            Some(path) => {
                let (path, sparse) = match path.strip_suffix(",sparse") {
                    Some(path) => (path, true),
                    None => (path, false),
                };
                if path.is_empty() {
                    return Err(format!("{text:?} names no file: expected file:PATH"));
                }
                Ok(Backing::File(PathBuf::from(path), sparse))
            }
            _ => Err(format!(
                "expected ram, none, file:PATH or file:PATH,sparse, got {text:?}"
            )),
        },
    }
}

/// `--backing` and `--durable` as the driver's `BackingKind`.
pub fn backing_kind(backing: &Backing, durable: bool) -> Result<BackingKind> {
    match (backing, durable) {
        (Backing::Ram, true) => Err(input_error(
            "--durable needs a file to make durable: add --backing file:PATH",
        )),
        (Backing::Ram, false) => Ok(BackingKind::Ram),
        (Backing::None, true) => Err(input_error(
            "--durable with --backing none: nothing is kept to make durable",
        )),
        (Backing::None, false) => Ok(BackingKind::None),
        (Backing::File(path, sparse), durable) => {
            refuse_dead_mount(path, "--backing file:")?;
            Ok(BackingKind::File {
                path: path.clone(),
                durable,
                read_only: false,
                sparse: *sparse,
            })
        }
    }
}

/// Refuses a path under a FUSE mount whose server has gone away (a killed `nvarray mount`),
/// saying which mount and how to remove it: every use of the path would fail with a bare
/// "Transport endpoint is not connected". `flag` names where the path came from.
pub fn refuse_dead_mount(path: &std::path::Path, flag: &str) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) => match nvarray_fuse::mounts::dead_mount_advice(path, &e) {
            Some(advice) => Err(input_error(format!("{flag}{}: {advice}", path.display()))),
            None => Ok(()),
        },
        Ok(_) => Ok(()),
    }
}

/// The faults `NVARRAY_INJECT_FAULTS` asks for, if it is set: said on stderr, so a run with
/// faults never passes for a clean one; a plan that cannot be read is an input error.
pub fn injected_backing_faults() -> Result<Option<Arc<BackingFaults>>> {
    let faults = BackingFaults::from_env("nvarray", "the backing store").map_err(input_error)?;
    Ok(faults.map(Arc::new))
}

/// `--device-threads`: a count, or `auto` (decided by who else needs the cores).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceThreads {
    Auto,
    Fixed(usize),
}

impl DeviceThreads {
    /// The count for `host_threads` threads that poll the device on this machine.
    pub fn resolve(self, host_threads: usize) -> usize {
        self.fixed_or(|cores| device_threads_auto(host_threads, cores))
    }

    /// The count for a front end whose `host_threads` serving threads wait on their clients
    /// (`serve`, `mount`): `auto` also gives a slow `device` a thread of its own
    /// (`device_threads_for_front_end`).
    pub fn resolve_for_front_end(self, host_threads: usize, device: &DeviceConfig) -> usize {
        self.fixed_or(|cores| {
            let idle_read_ns = nvarray_host::idle_latency_ns(device, true, 4096);
            device_threads_for_front_end(host_threads, cores, idle_read_ns)
        })
    }

    /// A fixed count, or what `auto` makes of this machine's cores.
    fn fixed_or(self, auto: impl FnOnce(usize) -> usize) -> usize {
        let threads = match self {
            DeviceThreads::Fixed(n) => n,
            DeviceThreads::Auto => {
                auto(std::thread::available_parallelism().map_or(1, |n| n.get()))
            }
        };
        // `parse_device_threads` bounds a count; `auto` picks 0 or 1.
        assert!(
            threads <= DEVICE_THREADS_MAX,
            "{threads} device threads ({self})"
        );
        threads
    }
}

impl std::fmt::Display for DeviceThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceThreads::Auto => f.write_str("auto"),
            DeviceThreads::Fixed(n) => write!(f, "{n}"),
        }
    }
}

pub fn parse_device_threads(text: &str) -> Result<DeviceThreads, String> {
    if text == "auto" {
        return Ok(DeviceThreads::Auto);
    }
    match text.parse::<usize>() {
        Ok(n) if n <= DEVICE_THREADS_MAX => Ok(DeviceThreads::Fixed(n)),
        _ => Err(format!(
            "expected auto or a count from 0 to {DEVICE_THREADS_MAX}, got {text:?}"
        )),
    }
}

/// A size in fio's units (4k, 1m; k = 1024) that must fit a 32-bit field.
pub fn parse_size_u32(text: &str) -> Result<u32, String> {
    let bytes = parse_size(text).map_err(|e| e.to_string())?;
    u32::try_from(bytes).map_err(|_| format!("{text} is more than {} bytes", u32::MAX))
}

/// A time in fio's units (`100us`, `2ms`); a bare number is microseconds.
pub fn parse_time_ns(text: &str) -> Result<u64, String> {
    parse_duration_ns(text, NS_PER_US).map_err(|e| e.to_string())
}

/// `--cpus`: a CPU list in the kernel's syntax (`2-3`, `0,2`).
pub fn parse_cpus(text: &str) -> Result<CpuList, String> {
    CpuList::parse(text)
}

/// What `--cpus` says, for both `nvarray bench` and the front ends.
pub const CPUS_HELP: &str = "Pin the emulator's threads to these CPUs (kernel list syntax: 2-3 or 2,3): the device threads take the first, the threads that serve requests the next ones, wrapping around when there are more threads than CPUs. Default: not pinned. For tail latency, set these CPUs aside first (isolcpus=, nohz_full=; see the README)";

/// Whether a `--set` override gives the device's capacity.
pub fn capacity_set(device: &DeviceArgs) -> bool {
    device.set.iter().any(|s| {
        s.split_once('=')
            .is_some_and(|(k, _)| k.trim() == CAPACITY_KEY)
    })
}

/// `--set` overrides plus `--size` (or its default) as the last override, so it wins.
pub fn device_with_size(device: &DeviceArgs, size: Option<&str>) -> Result<DeviceArgs> {
    let mut device = device.clone();
    let size = match size {
        Some(size) => size,
        None if capacity_set(&device) => return Ok(device),
        None => SIZE_DEFAULT,
    };
    let bytes = parse_size(size).map_err(|e| input_error(format!("--size: {e}")))?;
    device.set.push(format!("{CAPACITY_KEY}={bytes}"));
    debug_assert!(
        capacity_set(&device),
        "--size not read back as the capacity"
    );
    Ok(device)
}

/// An emulated device for software outside nvarray to use (`nvarray serve`, `nvarray mount`).
#[derive(Args, Clone, Debug)]
pub struct EmuDeviceArgs {
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Size of the device, e.g. 4G (k/m/g binary; sets memory.capacity_bytes, over any --set).
    /// Default 1G unless --set memory.capacity_bytes gives one: the emulator holds the whole
    /// device in memory (or maps the whole backing file).
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// Where the device's bytes live: `ram` (lost at exit), `none` (no data kept: writes are
    /// discarded and reads return zeroes, so a device larger than the machine costs nothing;
    /// for timing studies only), or `file:PATH` (mapped shared, so acknowledged writes survive
    /// a crash of this process; an existing file must have the device's size, a missing one
    /// is created with all its blocks; `file:PATH,sparse` takes blocks as they are first
    /// written instead, so a device may be larger than the free disk, and a write the file
    /// system has no room for fails alone with an I/O error).
    #[arg(long, value_name = "ram|none|file:PATH[,sparse]", default_value = "ram", value_parser = parse_backing)]
    pub backing: Backing,
    /// With `--backing file:PATH`: make flushes reach stable storage (msync + fdatasync), so
    /// acknowledged-and-flushed writes also survive a crash of the machine.
    #[arg(long)]
    pub durable: bool,
    /// Threads that run the emulated device; 0 runs it inline on the threads that serve
    /// requests. `auto` gives it a thread when the machine has a core for it besides the
    /// serving thread and a client, or when the device is slow (a 4 KiB read idle takes 20 µs
    /// or more: its thread waits out most of each command and sleeps when nothing is due);
    /// so on 2 cores a flash device gets a thread and a DRAM one runs inline.
    #[arg(long, value_name = "N|auto", default_value_t = DeviceThreads::Auto,
          value_parser = parse_device_threads)]
    pub device_threads: DeviceThreads,
    /// How a serving thread waits for the device: spin | sleep | adaptive (spin unless the
    /// command takes --adaptive-threshold or longer, and while the commands in flight complete
    /// on average closer together than that) | in-data (the DC Express protocol's: reads complete in
    /// their data). Default: in-data for a dc-express device, adaptive for the others.
    #[arg(long, value_name = "MODE")]
    pub completion: Option<CompletionMode>,
    /// Modelled latency from which `--completion adaptive` lets a thread sleep: it spins for
    /// a command that the device, idle, would finish sooner (a wake-up costs 12-28 µs on the
    /// project's 2-core VMs, so from 100 µs a sleep costs at most about a fifth of it).
    #[arg(long, value_name = "TIME", default_value = "100us", value_parser = parse_time_ns)]
    pub adaptive_threshold: u64,
    /// Size of each tag's DMA buffer, the largest single device command; larger requests are
    /// split into several commands (bytes; k/m suffixes). Default: the device's maximum
    /// transfer, capped to keep the buffers small.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u32)]
    pub buffer_size: Option<u32>,
    #[arg(long, value_name = "LIST", value_parser = parse_cpus, help = CPUS_HELP)]
    pub cpus: Option<CpuList>,
}

impl EmuDeviceArgs {
    /// The device description (preset or file, `--set`, `--size`) and the driver's options,
    /// for `host_threads` threads polling the device besides the client's.
    pub fn load(&self, host_threads: usize) -> Result<(DeviceConfig, Options)> {
        let device = device_with_size(&self.device, self.size.as_deref())?.load()?;
        let options = Options {
            backing: backing_kind(&self.backing, self.durable)?,
            device_threads: self
                .device_threads
                .resolve_for_front_end(host_threads, &device),
            stack: Stack::Spin,
            completion: self.completion,
            adaptive_threshold_ns: self.adaptive_threshold,
            buffer_bytes: self.buffer_size,
            cpus: self.cpus.clone().unwrap_or_default(),
            backing_faults: injected_backing_faults()?,
        };
        Ok((device, options))
    }
}

/// RAM devices from this size up show a progress bar while their pages are allocated.
const PREPARE_PROGRESS_BYTES: u64 = 1 << 30;

/// Opens the emulated device for a front end; a bad setting is an input error (exit 2). A
/// large RAM device says so on stderr and shows the allocation's progress (4 GiB take ~3 s).
pub fn open_device(config: &DeviceConfig, options: &Options) -> Result<Arc<Device>> {
    let size = config.memory.capacity_bytes;
    let progress = (matches!(options.backing, BackingKind::Ram) && size >= PREPARE_PROGRESS_BYTES)
        .then(|| {
            eprintln!(
                "preparing the device: allocating {} MiB of RAM...",
                size >> 20
            );
            PrepareProgress::start(size)
        });
    let opened = Device::open(config, options);
    drop(progress);
    let device = opened.map_err(|e| {
        if e.is_input_error() {
            input_error(e)
        } else {
            anyhow::Error::new(e).context("cannot open the emulated device")
        }
    })?;
    Ok(Arc::new(device))
}

/// A bar that follows the process's resident memory while a RAM device's pages are
/// allocated (the allocation is one `madvise` call, which reports nothing itself).
struct PrepareProgress {
    done: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PrepareProgress {
    fn start(size_bytes: u64) -> PrepareProgress {
        use std::sync::atomic::{AtomicBool, Ordering};
        // The bar divides by it.
        assert!(size_bytes > 0, "a device of no bytes to prepare");
        let done = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&done);
        let base = resident_bytes();
        let thread = std::thread::spawn(move || {
            let bar = crate::progress::Progress::new("preparing the device", 1);
            while !seen.load(Ordering::Acquire) {
                let grown = resident_bytes().saturating_sub(base);
                bar.set(0, grown as f64 / size_bytes as f64);
                // A display refresh, woken early when the device is ready.
                std::thread::park_timeout(std::time::Duration::from_millis(100));
            }
            bar.finish();
        });
        PrepareProgress {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for PrepareProgress {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// This process's resident memory, from `/proc/self/statm` (0 where it cannot be read).
fn resident_bytes() -> u64 {
    let pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Option<&str>) {
        let got = parse_backing(input).ok().map(|b| match b {
            Backing::Ram => "ram".to_string(),
            Backing::None => "none".to_string(),
            Backing::File(p, sparse) => format!(
                "file {}{}",
                p.display(),
                if sparse { " sparse" } else { "" }
            ),
        });
        assert_eq!(got.as_deref(), expected, "parse_backing({input:?})");
    }

    #[test]
    fn backing_is_ram_none_or_a_file() {
        check("ram", Some("ram"));
        check("none", Some("none"));
        check("None", None);
        check("file:/tmp/x.img", Some("file /tmp/x.img"));
        check("file:rel/x", Some("file rel/x"));
        check("file:", None);
        check("file:/big.img,sparse", Some("file /big.img sparse"));
        check("file:,sparse", None);
        check("RAM", None);
        check("bogus", None);
        check("", None);
    }

    #[test]
    fn device_threads_are_auto_or_a_bounded_count() {
        assert_eq!(parse_device_threads("auto"), Ok(DeviceThreads::Auto));
        assert_eq!(parse_device_threads("0"), Ok(DeviceThreads::Fixed(0)));
        assert!(parse_device_threads("9").is_err());
        assert!(parse_device_threads("-1").is_err());
        assert_eq!(DeviceThreads::Fixed(3).resolve(100), 3);
    }

    /// The flag's default, written for people, is the driver's default.
    #[test]
    fn the_adaptive_threshold_flag_defaults_to_the_drivers_threshold() {
        use nvarray_host::options::ADAPTIVE_THRESHOLD_NS_DEFAULT;
        assert_eq!(parse_time_ns("100us"), Ok(ADAPTIVE_THRESHOLD_NS_DEFAULT));
        assert_eq!(
            parse_time_ns("250"),
            Ok(250_000),
            "a bare number is microseconds"
        );
        assert!(parse_time_ns("4k").is_err());
    }
}
