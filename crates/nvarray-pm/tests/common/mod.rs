//! Shared set-up for the pool tests: a temporary directory holding both tiers.
#![allow(dead_code)]

use std::path::PathBuf;

use nvarray_pm::PoolOptions;

pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub fn backing(&self) -> PathBuf {
        self.dir.path().join("pool.data")
    }

    /// Small log and cache, so tests wrap the log and fill the cache quickly.
    pub fn small(&self) -> PoolOptions {
        PoolOptions {
            nvm_dir: self.dir.path().to_path_buf(),
            log_size_bytes: 64 << 10,
            cache_size_bytes: 64 << 10,
            persist_ns: Some(0),
            ..Default::default()
        }
    }
}

/// Bytes that depend on a seed, so each write is recognisable.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
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

/// A tmpfs of a given size mounted on a temporary directory (the tests run as root), for file
/// systems that run out of room. Unmounted when dropped, a failing test included.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temporary directory");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount a {size} tmpfs (the tests run as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily, so a file a failed test left open cannot keep it mounted.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// The NVM-tier state files in `dir`.
pub fn state_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read the NVM directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "nvm"))
        .collect();
    v.sort();
    v
}
