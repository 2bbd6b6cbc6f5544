//! `nvarray pm list|clean`: the NVM-tier state files of `nvarray-pm` pools.
//!
//! A pool's state file (its redo log and write cache, `/dev/shm/nvarray-pm-*.nvm` by default)
//! lives while the pool is open and is removed when the last process closes it. One whose
//! pool's last process died stays for the next open to recover; if that pool's file was then
//! removed or replaced, nothing ever will, and it holds its memory until removed. `list` says
//! what each is for; `clean` removes the ones no pool can need (`nvarray_pm::StateStatus`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use nvarray_pm::{StateFile, StateStatus};

use nvarray_sys::input::input_error;

#[derive(Args, Debug)]
pub struct PmArgs {
    #[command(subcommand)]
    command: PmCommand,
}

#[derive(Subcommand, Debug)]
enum PmCommand {
    /// List the state files in the NVM directory: size, pool file, and what each is for.
    List(ListArgs),
    /// Remove state files no pool needs: closed cleanly, or whose pool's file is gone or
    /// replaced. Never one in use or awaiting recovery. One that may hold commits never
    /// written back (its pool's process died) only with --discard-commits.
    Clean(CleanArgs),
}

#[derive(Args, Debug)]
struct ListArgs {
    /// Directory of the NVM tier (as `nv_allocate`'s NVARRAY_PM_NVM_DIR, pm-bench's --nvm-dir).
    #[arg(long, default_value = "/dev/shm")]
    nvm_dir: PathBuf,
}

#[derive(Args, Debug)]
struct CleanArgs {
    /// Directory of the NVM tier (as `nv_allocate`'s NVARRAY_PM_NVM_DIR, pm-bench's --nvm-dir).
    #[arg(long, default_value = "/dev/shm")]
    nvm_dir: PathBuf,
    /// Also remove orphans that may hold commits never written back (their pool's file is
    /// gone or replaced, so they can never be applied), and unreadable state files.
    #[arg(long)]
    discard_commits: bool,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Only these state files (as `list` prints them); default: every one in --nvm-dir.
    files: Vec<PathBuf>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn line(s: &StateFile) -> String {
    let pool = match (&s.backing, s.pool_size_bytes) {
        (Some(b), Some(size)) => format!("{} ({})", b.display(), mib(size)),
        _ => "?".into(),
    };
    format!(
        "{}  {}  pool {}  {}",
        s.path.display(),
        mib(s.allocated_bytes),
        pool,
        s.status
    )
}

fn check_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Err(input_error(format!(
            "--nvm-dir {}: not an existing directory",
            dir.display()
        )));
    }
    Ok(())
}

fn list(a: ListArgs) -> anyhow::Result<()> {
    check_dir(&a.nvm_dir)?;
    let files = nvarray_pm::list_state_files(&a.nvm_dir)?;
    for s in &files {
        println!("{}", line(s));
    }
    let total: u64 = files.iter().map(|s| s.allocated_bytes).sum();
    let removable = files.iter().filter(|s| s.status.removable(false)).count();
    eprintln!(
        "{} state file(s) in {}, {}; {removable} removable by `nvarray pm clean`",
        files.len(),
        a.nvm_dir.display(),
        mib(total)
    );
    Ok(())
}

fn clean(a: CleanArgs) -> anyhow::Result<()> {
    let named = !a.files.is_empty();
    let candidates: Vec<StateFile> = if named {
        a.files
            .iter()
            .map(|p| nvarray_pm::state_file(p).map_err(input_error))
            .collect::<anyhow::Result<_>>()?
    } else {
        check_dir(&a.nvm_dir)?;
        nvarray_pm::list_state_files(&a.nvm_dir)?
    };
    let (mut removed, mut freed, mut kept) = (0u64, 0u64, 0u64);
    let total = candidates.len() as u64;
    for s in candidates {
        if named && !s.status.removable(a.discard_commits) {
            // The library words the refusal, with what to do about it.
            nvarray_pm::remove_state_file(&s.path, a.discard_commits).map_err(input_error)?;
        }
        if !s.status.removable(a.discard_commits) {
            if !matches!(s.status, StateStatus::InUse(_)) {
                println!("kept {}", line(&s));
            }
            kept += 1;
            continue;
        }
        // `clean` never removes a state file in use or awaiting recovery.
        assert!(
            !matches!(s.status, StateStatus::InUse(_) | StateStatus::NeedsRecovery),
            "{} is removable as {}",
            s.path.display(),
            s.status
        );
        if a.dry_run {
            println!("would remove {}", line(&s));
            continue;
        }
        match nvarray_pm::remove_state_file(&s.path, a.discard_commits) {
            Ok(gone) => {
                println!("removed {}", line(&gone));
                removed += 1;
                freed += gone.allocated_bytes;
            }
            Err(e) if named => return Err(input_error(e)),
            // Its status changed since it was listed (a process opened its pool).
            Err(e) => {
                println!("kept {e}");
                kept += 1;
            }
        }
    }
    assert!(!a.dry_run || removed == 0, "a dry run removed {removed}");
    if !a.dry_run {
        assert_eq!(removed + kept, total, "state files removed or kept");
        eprintln!(
            "removed {removed} state file(s), {}; kept {kept}",
            mib(freed)
        );
    }
    Ok(())
}

pub fn run(a: PmArgs) -> anyhow::Result<()> {
    match a.command {
        PmCommand::List(a) => list(a),
        PmCommand::Clean(a) => clean(a),
    }
}
