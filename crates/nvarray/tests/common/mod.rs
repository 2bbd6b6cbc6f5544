//! Helpers the end-to-end tests of the front ends share: running a real program and failing
//! with everything it printed.

#![allow(dead_code)]

pub mod serve;

/// A 1 GiB TLC drive of 64 KiB erase blocks (274 lines of 4 MiB over 64 dies): the flash
/// tests' small drive, `--preset` and `--set` arguments of `nvarray bench` and `nvarray fio`.
pub const SMALL_TLC: &[&str] = &[
    "--preset",
    "tlc",
    "--set",
    "memory.capacity_bytes=1g",
    "--set",
    "memory.erase_block_bytes=64k",
];

use std::process::{Command, Output};

pub fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

/// Runs `program` for at most `limit`: one that should have refused to start but is still
/// running then (a server, say) is killed, so a failing test leaves nothing behind. Returns
/// its output and whether it had to be killed. (Its output must fit in the pipes, as a
/// refusal's or a server's first lines do: nothing reads them while it runs.)
#[allow(dead_code)]
pub fn run_for(program: &str, args: &[&str], limit: std::time::Duration) -> (Output, bool) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let until = std::time::Instant::now() + limit;
    let mut killed = false;
    while child.try_wait().expect("wait for the child").is_none() {
        if std::time::Instant::now() >= until {
            let _ = child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (
        child.wait_with_output().expect("collect the output"),
        killed,
    )
}

/// A child process killed (and reaped) when dropped, so a test that fails half way leaves no
/// server behind; `into_inner` takes it back to stop it gracefully.
#[allow(dead_code)]
pub struct KillOnDrop(Option<std::process::Child>);

#[allow(dead_code)]
impl KillOnDrop {
    pub fn new(child: std::process::Child) -> KillOnDrop {
        KillOnDrop(Some(child))
    }

    pub fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("child taken")
    }

    pub fn into_inner(mut self) -> std::process::Child {
        self.0.take().expect("child taken")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `program` and returns its standard output; panics with both outputs when it fails.
pub fn run_ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A count or seed from the environment (`scripts/campaign.sh` sets them), else `default`.
#[allow(dead_code)]
pub fn campaign_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        })
        .unwrap_or(default)
}
