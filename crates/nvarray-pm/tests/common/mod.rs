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
