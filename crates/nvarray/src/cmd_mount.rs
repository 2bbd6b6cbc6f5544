//! `nvarray mount DIR`: the emulated device as the file `DIR/disk` (`nvarray-fuse`), which
//! `losetup` turns into a kernel block device for a real file system. Prints what is mounted
//! and how to use it, the device report on SIGUSR1 and at exit; SIGINT or SIGTERM unmount it
//! once nothing uses the file any more.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use nvarray_fuse::{DiskStats, FuseError};
use nvarray_host::options::BackingKind;
use nvarray_model::DeviceConfig;
use nvarray_present::table;
use nvarray_report::process_cpu_seconds;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::emu_args::{open_device, EmuDeviceArgs};
use nvarray_sys::input::input_error;

#[derive(Args)]
pub struct MountArgs {
    /// An existing directory to mount on; the device appears in it as the file `disk`.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    #[command(flatten)]
    device: EmuDeviceArgs,
    /// Print the report at exit (and on SIGUSR1) as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// What the main thread waits for.
enum Event {
    Signal(i32),
    /// The session is over: unmounted by us, or from outside (`umount DIR`).
    Ended,
}

fn fuse_error(e: FuseError) -> anyhow::Error {
    if e.is_input_error() {
        input_error(e)
    } else {
        anyhow::Error::new(e)
    }
}

pub fn run(args: MountArgs) -> Result<()> {
    // Check the directory and the machine before the device takes its memory.
    let dir = nvarray_fuse::preflight(&args.dir).map_err(fuse_error)?;
    // The serving thread and the application behind the loop device share the machine:
    // `auto` gives the device a thread of its own if a core is left after those two, or if
    // the device is slow enough that its thread mostly waits (`resolve_for_front_end`).
    let (config, options) = args.device.load(2)?;
    let backing = backing_description(&options.backing);
    let device = open_device(&config, &options)?;
    // Installed before mounting, so that a signal during the mount is not the default
    // "terminate", which would leave a dead mount behind.
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGUSR1]).context("cannot install signal handlers")?;
    let (events, received) = mpsc::channel();
    let on_end = events.clone();
    let mut mounted = nvarray_fuse::mount(Arc::clone(&device), &dir, move || {
        let _ = on_end.send(Event::Ended);
    })
    .map_err(fuse_error)?;
    let start = Instant::now();
    let cpu_start = process_cpu_seconds();
    show_usage(&config, &mounted, &backing, args.json)?;

    let signals_handle = signals.handle();
    let signal_thread = std::thread::spawn(move || {
        for signal in signals.forever() {
            if events.send(Event::Signal(signal)).is_err() {
                break;
            }
        }
    });
    let source = format!("FUSE file {}", mounted.disk_path().display());
    let report = |stats: &DiskStats| {
        let report = session_report(&device, stats, start, cpu_start);
        print_report(&config, &source, stats, &report, args.json);
    };
    serve_until_ended(&mut mounted, &received, &dir, &report)?;
    let stats = mounted.join().map_err(fuse_error)?;
    signals_handle.close();
    let _ = signal_thread.join();
    report(&stats);
    Ok(())
}

/// Prints what is mounted and how to use it: on stdout, or on stderr with `json` (stdout
/// then carries only the reports, so scripts can parse it).
fn show_usage(
    config: &DeviceConfig,
    mounted: &nvarray_fuse::Mounted,
    backing: &str,
    json: bool,
) -> Result<()> {
    let usage = print_usage(config, &mounted.disk_path(), mounted.size_bytes(), backing);
    if json {
        eprint!("{usage}");
    } else {
        print!("{usage}");
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// Handles `received` events until the session is over: a report on SIGUSR1, an unmount on
/// SIGINT or SIGTERM (a stop request while the file is in use only says so).
fn serve_until_ended(
    mounted: &mut nvarray_fuse::Mounted,
    received: &mpsc::Receiver<Event>,
    dir: &Path,
    report: &dyn Fn(&DiskStats),
) -> Result<()> {
    while let Ok(event) = received.recv() {
        match event {
            Event::Signal(SIGUSR1) => report(&mounted.stats()),
            Event::Signal(_) => match mounted.unmount() {
                Ok(()) => {
                    eprintln!("nvarray mount: unmounted {}", dir.display());
                    break;
                }
                Err(e @ FuseError::Busy { .. }) => {
                    eprintln!("nvarray mount: still serving: {e}; then stop it again");
                }
                Err(e) => return Err(fuse_error(e)),
            },
            Event::Ended => break,
        }
    }
    Ok(())
}

/// The device's report over the session so far (`stats`), from `start` and the process's
/// CPU time at `cpu_start`.
fn session_report(
    device: &nvarray_host::Device,
    stats: &DiskStats,
    start: Instant,
    cpu_start: f64,
) -> nvarray_report::RunReport {
    let cpu_seconds = process_cpu_seconds() - cpu_start;
    // Rates over the busy time, not the uptime (idle time between programs included).
    let mut report = nvarray_run::device_report(
        device,
        std::slice::from_ref(&stats.io),
        stats.busy_ns,
        cpu_seconds,
    );
    report.uptime_ns = Some(start.elapsed().as_nanos() as u64);
    report.require_enough_served();
    if let Some(setup) = report.emulator.as_mut() {
        setup.host_cpus = device.host_cpu(0).into_iter().collect();
    }
    report
}

/// What is mounted and how to use it.
fn print_usage(config: &DeviceConfig, disk: &Path, size_bytes: u64, backing: &str) -> String {
    // The file is the device, cut to whole blocks.
    assert!(
        size_bytes <= config.memory.capacity_bytes,
        "a file of {size_bytes} bytes on a device of {}",
        config.memory.capacity_bytes
    );
    let disk = disk.display();
    let mut s = String::new();
    let _ = writeln!(s, "device   {}", table::device_line(config));
    let _ = writeln!(
        s,
        "mounted  {disk}: {size_bytes} bytes ({}), block {} B, {backing}",
        nvarray_workload::format_size(size_bytes),
        config.controller.block_bytes,
    );
    let _ = writeln!(s, "use it as a block device (as root):");
    let _ = writeln!(s, "  LOOP=$(losetup --find --show {disk})");
    let _ = writeln!(
        s,
        "  mkfs.xfs $LOOP                  # or mkfs.ext4 $LOOP (XFS needs at least 300 MiB)"
    );
    let _ = writeln!(s, "  mkdir -p /mnt/nvarray && mount $LOOP /mnt/nvarray");
    let _ = writeln!(s, "  umount /mnt/nvarray && losetup -d $LOOP   # when done");
    let _ = writeln!(
        s,
        "or as a file: fio --name=nvarray --filename={disk} --rw=randread --bs=4k --direct=1"
    );
    let _ = writeln!(
        s,
        "SIGUSR1 (kill -USR1 {}) prints the device report; SIGINT or SIGTERM unmounts (once the \
         loop device is detached) and exits.",
        std::process::id()
    );
    s
}

fn print_report(
    config: &DeviceConfig,
    source: &str,
    stats: &DiskStats,
    report: &nvarray_report::RunReport,
    json: bool,
) {
    let fuse_line = format!(
        "fuse: {} fsyncs (device flushes), {} requests refused{}",
        stats.fsyncs,
        stats.errors,
        stats
            .last_error
            .as_deref()
            .map(|e| format!(" (last: {e})"))
            .unwrap_or_default()
    );
    let text = if json {
        eprintln!("{fuse_line}");
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
            + "\n"
    } else {
        table::served_report(config, source, "requests in flight", report) + &fuse_line + "\n"
    };
    let mut out = std::io::stdout().lock();
    // Nobody reading stdout any more is no reason to fail.
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Where the mounted device's bytes live, for its usage lines.
fn backing_description(backing: &BackingKind) -> String {
    let line = crate::emu_args::backing_line(backing);
    match backing {
        BackingKind::File { durable, .. } => format!(
            "{line} (acknowledged writes survive a crash of this process{})",
            if *durable {
                "; fsync makes them durable on disk"
            } else {
                ""
            }
        ),
        _ => line,
    }
}
