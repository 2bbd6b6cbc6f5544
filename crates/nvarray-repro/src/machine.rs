//! The experiments that need this machine, run: nvarray's own commands (with the machine's
//! busy cores over their wall time, from `/proc/stat`), fio on a kernel loop device, the PMDK
//! peer built with gcc, and the channel and SQLite scripts (compiled in), each as the exact
//! command the catalogue prints. The one part of the crate that spawns processes and reads
//! the clock; `nvarray repro` hands it to `evaluate`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::spec::Experiment;
use crate::Runner;

/// The channel rung of Moneta's ladder (kernel paths against a user-space channel, real fio).
const CHANNEL_LADDER_SCRIPT: &str = include_str!("../../../scripts/channel_ladder.py");
/// vNVML's database study on SQLite (the VFS against the seed's baseline).
const SQLITE_YCSB_SCRIPT: &str = include_str!("../../../scripts/sqlite_ycsb.py");

/// Runs the experiments that need this machine.
pub struct MachineRunner {
    exe: PathBuf,
    out: PathBuf,
    sim_only: bool,
    /// The PMDK peer once built (or why it cannot be).
    pmdk: Option<Result<PathBuf, String>>,
}

impl MachineRunner {
    /// A runner that drives `exe` (the nvarray binary experiments name), writes what it
    /// builds and the scripts it runs under `out`, and runs nothing when `sim_only`.
    pub fn new(exe: &Path, out: &Path, sim_only: bool) -> Self {
        MachineRunner {
            exe: exe.to_path_buf(),
            out: out.to_path_buf(),
            sim_only,
            pmdk: None,
        }
    }

    fn pmdk_peer(&mut self) -> Result<PathBuf, String> {
        if let Some(built) = &self.pmdk {
            return built.clone();
        }
        let built = build_pmdk_peer(&self.out);
        self.pmdk = Some(built.clone());
        built
    }
}

impl Runner for MachineRunner {
    fn run_external(&mut self, experiment: &Experiment) -> Result<Value, String> {
        if self.sim_only {
            return Err("not run: --sim-only".to_string());
        }
        match experiment {
            Experiment::Nvarray { args, cpu } => {
                let (mut value, busy) = with_busy_cores(|| run_json(&self.exe, args, &[]))?;
                if *cpu {
                    add_busy_cores(&mut value, busy)?;
                }
                Ok(value)
            }
            Experiment::KernelFio {
                device_bytes,
                fio_args,
            } => kernel_fio(*device_bytes, fio_args),
            Experiment::PmdkPeer { args } => {
                let peer = self.pmdk_peer()?;
                // PMDK on a tmpfs: treat it as persistent memory, as perf_pm.py does.
                let result = run_json(&peer, args, &[("PMEM_IS_PMEM_FORCE", "1")]);
                if let Some(i) = args.iter().position(|a| a == "--pool") {
                    if let Some(pool) = args.get(i + 1) {
                        let _ = std::fs::remove_file(pool);
                    }
                }
                result
            }
            Experiment::ChannelLadder { presets } => channel_ladder(&self.exe, &self.out, presets),
            Experiment::SqliteYcsb { args } => sqlite_ycsb(&self.exe, &self.out, args),
            Experiment::Sim(_) | Experiment::ProtocolCost { .. } => {
                unreachable!("run in process by nvarray-repro")
            }
        }
    }
}

/// `scripts/channel_ladder.py` (compiled in, written to `out`), this binary as the nvarray it
/// drives and fio's engine from beside it (`target/native/nvarray-fio.so`, which
/// `scripts/build_native.sh` builds).
fn channel_ladder(exe: &Path, out: &Path, presets: &str) -> Result<Value, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not run: FUSE and loop devices need root".into());
    }
    let engine = native_beside(exe, "nvarray-fio.so")
        .ok_or("not run: fio's nvarray engine is not built (scripts/build_native.sh)")?;
    let script = out.join("channel_ladder.py");
    std::fs::write(&script, CHANNEL_LADDER_SCRIPT)
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    let args = [
        "--presets".to_string(),
        presets.to_string(),
        "--json".into(),
    ];
    let mut words = vec![script.display().to_string()];
    words.extend(args);
    let engine = engine.display().to_string();
    let raw = out.join("channel-ladder").display().to_string();
    let exe = exe.display().to_string();
    run_json(
        Path::new("python3"),
        &words,
        &[
            ("NVARRAY", exe.as_str()),
            ("NVARRAY_FIO_ENGINE", engine.as_str()),
            ("NVARRAY_LADDER_OUT", raw.as_str()),
        ],
    )
}

/// `scripts/sqlite_ycsb.py` (compiled in, written to `out`) with the SQLite VFS from beside
/// this binary (`target/native/nvarray-sqlite.so`, which `scripts/build_native.sh` builds).
fn sqlite_ycsb(exe: &Path, out: &Path, args: &[String]) -> Result<Value, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if args.iter().any(|a| a == "--containers") && unsafe { libc::geteuid() } != 0 {
        return Err("not run: mount namespaces need root".into());
    }
    let vfs = native_beside(exe, "nvarray-sqlite.so")
        .ok_or("not run: the SQLite VFS is not built (scripts/build_native.sh)")?;
    let script = out.join("sqlite_ycsb.py");
    std::fs::write(&script, SQLITE_YCSB_SCRIPT)
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    let mut words = vec![script.display().to_string()];
    words.extend(args.iter().cloned());
    words.extend(["--json".to_string(), "-".to_string()]);
    let vfs = vfs.display().to_string();
    run_json(
        Path::new("python3"),
        &words,
        &[("NVARRAY_SQLITE_VFS", vfs.as_str())],
    )
}

/// `target/native/NAME` for this binary in `target/<profile>/`, if it was built.
fn native_beside(exe: &Path, name: &str) -> Option<PathBuf> {
    exe.parent()
        .and_then(Path::parent)
        .map(|target| target.join("native").join(name))
        .filter(|p| p.exists())
}

/// Runs `program args`, whose standard output is JSON: one object, or one per line (then an
/// array of them).
fn run_json(program: &Path, args: &[String], env: &[(&str, &str)]) -> Result<Value, String> {
    let output = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!(
            "{} failed ({}): {last}",
            program.display(),
            output.status
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    if let Ok(v) = serde_json::from_str::<Value>(&stdout) {
        return Ok(v);
    }
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            format!(
                "{} printed something other than JSON: {e}",
                program.display()
            )
        })?;
    match lines.len() {
        0 => Err(format!("{} printed no JSON", program.display())),
        1 => Ok(lines.into_iter().next().expect("one")),
        _ => Ok(Value::Array(lines)),
    }
}

fn add_busy_cores(value: &mut Value, busy_cores: f64) -> Result<(), String> {
    value
        .as_object_mut()
        .ok_or("the outcome is not a JSON object")?
        .insert("busy_cores".to_string(), busy_cores.into());
    Ok(())
}

/// Busy CPU time of the whole machine, in seconds, from `/proc/stat`'s first line (every
/// state but idle and iowait).
fn busy_seconds() -> Result<f64, String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    if fields.len() < 5 {
        return Err("/proc/stat has no cpu line".to_string());
    }
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields[4];
    // SAFETY: sysconf only reads a constant of the system.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Ok((total - idle) as f64 / ticks_per_s.max(1) as f64)
}

/// Runs `f` and returns its result with the machine's mean busy cores over its wall time.
fn with_busy_cores<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, f64), String> {
    let busy_start = busy_seconds()?;
    let start = Instant::now();
    let value = f()?;
    let wall = start.elapsed().as_secs_f64();
    let busy = busy_seconds()? - busy_start;
    Ok((value, busy / wall.max(1e-9)))
}

/// fio on a loop device over a RAM file: the kernel's block path with no device work.
fn kernel_fio(device_bytes: u64, fio_args: &[String]) -> Result<Value, String> {
    // The loop device and the JSON output are this function's to choose: the catalogue's
    // arguments must not name another file or format.
    assert!(
        !fio_args.iter().any(|a| a.starts_with("--filename")),
        "fio's arguments name a file: {fio_args:?}"
    );
    assert!(
        !fio_args.iter().any(|a| a.starts_with("--output-format")),
        "fio's arguments choose an output format: {fio_args:?}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not run: a loop device needs root".to_string());
    }
    let missing = ["fio", "losetup"].into_iter().find(|p| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .map_or(true, |o| !o.status.success())
    });
    if let Some(p) = missing {
        return Err(format!(
            "not run: {p} is not installed (apt-get install fio util-linux)"
        ));
    }
    let image = PathBuf::from(format!("/dev/shm/nvarray-repro-{}.img", std::process::id()));
    let file = std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
    let loop_device = (|| {
        file.set_len(device_bytes)
            .map_err(|e| format!("{}: {e}", image.display()))?;
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&image)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    })();
    let result = loop_device.clone().and_then(|dev| {
        let mut args = vec![format!("--filename={dev}")];
        args.extend(fio_args.iter().cloned());
        args.push("--output-format=json".to_string());
        let (fio, busy) = with_busy_cores(|| run_json(Path::new("fio"), &args, &[]))?;
        let iops: f64 = fio
            .get("jobs")
            .and_then(Value::as_array)
            .map(|jobs| {
                jobs.iter()
                    .filter_map(|j| j.get("read")?.get("iops")?.as_f64())
                    .sum()
            })
            .ok_or("fio's JSON has no jobs")?;
        Ok(serde_json::json!({ "jobs_read_iops": iops, "busy_cores": busy, "fio": fio }))
    });
    if let Ok(dev) = &loop_device {
        let _ = Command::new("losetup").args(["-d", dev]).status();
    }
    let _ = std::fs::remove_file(&image);
    result
}

/// PMDK's peer, built from its source (compiled into this binary) with gcc and libpmemobj.
fn build_pmdk_peer(out: &Path) -> Result<PathBuf, String> {
    const SOURCE: &str = include_str!("../../nvarray-pm/peer/pmdk_peer.c");
    if !Path::new("/usr/include/libpmemobj.h").exists() {
        return Err("not run: PMDK is not installed (apt-get install libpmemobj-dev)".to_string());
    }
    let dir = out.join("pmdk");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let source = dir.join("pmdk_peer.c");
    std::fs::File::create(&source)
        .and_then(|mut f| f.write_all(SOURCE.as_bytes()))
        .map_err(|e| format!("{}: {e}", source.display()))?;
    let peer = dir.join("pmdk_peer");
    let status = Command::new("gcc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&peer)
        .arg(&source)
        .args(["-lpmemobj", "-lpmem", "-lpthread"])
        .status()
        .map_err(|e| format!("not run: cannot run gcc ({e}); apt-get install gcc"))?;
    if !status.success() {
        return Err(format!("gcc could not build the PMDK peer ({status})"));
    }
    Ok(peer)
}

/// The commit `exe` was built from, when it runs from a checkout's target directory.
pub fn commit(exe: &Path) -> String {
    let root = Some(exe).and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()));
    root.and_then(|root| {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    })
    .unwrap_or_else(|| "unknown".to_string())
}

/// Today's date (UTC), as YYYY-MM-DD.
pub fn today() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    // The algorithm's own ranges (Hinnant, "chrono-Compatible Low-Level Date Algorithms"):
    // year of era [0, 399], day of year [0, 365] from 1 March, month from March [0, 11].
    assert!((0..=399).contains(&yoe), "year of era {yoe} out of range");
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    assert!((0..=365).contains(&doy), "day of year {doy} out of range");
    let mp = (5 * doy + 2) / 153;
    assert!((0..=11).contains(&mp), "month from March {mp} out of range");
    let day = doy - (153 * mp + 2) / 5 + 1;
    assert!((1..=31).contains(&day), "day of month {day} out of range");
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// CPU model and core count.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "an unknown CPU".to_string());
    format!("{cores} cores of {model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"), "{d}");
    }

    #[test]
    fn busy_time_moves_forward() {
        let a = busy_seconds().unwrap();
        let b = busy_seconds().unwrap();
        assert!(b >= a);
    }
}
