//! How a pool is laid out over its tiers and how it behaves. Sizes are in bytes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nvarray_faults::BackingFaults;

use crate::error::{PmError, Result};
use crate::layout::{Layout, PAGE};

/// Options for `Pool::open`. `Default` gives the seed's defaults where it has one.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Directory of the NVM tier (redo log and write cache). /dev/shm by default; a DAX-mounted
    /// file system if you have real persistent memory.
    pub nvm_dir: PathBuf,
    /// Memory technology of the NVM tier: a preset of `nvarray-model` (`dram`, `pcm`,
    /// `stt-mram`, `optane`, ...). Each persist barrier costs its `memory.write_latency_ns`.
    /// Default `dram`: battery-backed DRAM (NVDIMM-N), the kind of NVM the vNVML seed shows
    /// (slide 3, "HPE 8GB NVDIMM") and emulates with DRAM (slide 20).
    pub tech: String,
    /// Overrides the technology's barrier cost, in nanoseconds.
    pub persist_ns: Option<u64>,
    /// Size of the redo log on the NVM tier. A transaction may log at most a quarter of it.
    pub log_size_bytes: u64,
    /// Size of the NVM write cache (4 KiB pages).
    pub cache_size_bytes: u64,
    /// Fraction of cache pages that may be dirty before write-back starts (seed: 30 %).
    pub writeback_threshold: f64,
    /// Run the log applier and the write-back thread. Off, `Pool::maintain` does their work.
    pub background: bool,
    /// How long to wait for a lock, for log space or for a cache page before giving up.
    pub timeout: Duration,
    /// How long later commits wait for a live committer that reserved log space and has not
    /// begun writing its record (stopped with SIGSTOP, or descheduled that long) before they
    /// *fence* its reservation: pad it and pass it. Its commit then fails with
    /// `PmError::Fenced` and writes nothing (`append.rs`).
    pub stall_timeout: Duration,
    /// Create the backing file if it does not exist.
    pub create: bool,
    /// Faults to inject into the pool's files: tests and campaigns only (`nvarray_faults`;
    /// `fsync` is the write-back's `fdatasync` of the backing file, `fallocate` the space of
    /// the backing file and of the NVM-tier state). The C library reads
    /// `NVARRAY_INJECT_FAULTS`.
    pub faults: Option<Arc<BackingFaults>>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            nvm_dir: PathBuf::from("/dev/shm"),
            tech: "dram".into(),
            persist_ns: None,
            log_size_bytes: 64 << 20,
            cache_size_bytes: 256 << 20,
            writeback_threshold: 0.30,
            background: true,
            timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(1),
            create: true,
            faults: None,
        }
    }
}

/// Smallest log and cache the pool accepts (the largest transaction is a quarter of the log).
pub const MIN_LOG: u64 = 64 << 10;
pub const MIN_CACHE: u64 = 16 * PAGE as u64;
/// Largest log and cache (the log's positions and the cache index are 32-bit).
pub const MAX_LOG: u64 = 1 << 32;
pub const MAX_CACHE: u64 = 1 << 40;

impl PoolOptions {
    /// Checks every field, naming the one that is wrong and its accepted range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(PmError::BadOption(m));
        if !(MIN_LOG..=MAX_LOG).contains(&self.log_size_bytes) {
            return bad(format!(
                "log_size {} outside {MIN_LOG}..={MAX_LOG} bytes",
                self.log_size_bytes
            ));
        }
        if !(MIN_CACHE..=MAX_CACHE).contains(&self.cache_size_bytes) {
            return bad(format!(
                "cache_size {} outside {MIN_CACHE}..={MAX_CACHE} bytes",
                self.cache_size_bytes
            ));
        }
        if !(self.writeback_threshold > 0.0 && self.writeback_threshold <= 1.0) {
            return bad(format!(
                "writeback_threshold {} outside (0, 1]",
                self.writeback_threshold
            ));
        }
        self.persist_cost_ns().map(|_| ())
    }

    /// What one persist barrier costs: the override, else the technology's write latency.
    pub fn persist_cost_ns(&self) -> Result<u64> {
        if let Some(ns) = self.persist_ns {
            return Ok(ns);
        }
        let preset = nvarray_model::presets::preset(&self.tech)
            .map_err(|e| PmError::BadOption(format!("tech: {e}")))?;
        let cfg = preset
            .load(&[])
            .map_err(|e| PmError::BadOption(format!("tech {}: {e}", self.tech)))?;
        Ok(cfg.memory.write_latency_ns)
    }

    /// The layout of a new pool of `pool_size_bytes` with these options' log and cache, each cut
    /// to what such a pool can use, so the NVM tier is sized to the pool (the defaults,
    /// 64 MiB + 256 MiB, made a 1 MiB pool's NVM tier 322 MiB; it is 12 MiB). A larger one
    /// would behave exactly the same:
    /// * the cache holds at most one slot per page of the pool, and writes back once more
    ///   than `writeback_threshold` of its slots are dirty, so at `pool pages / threshold`
    ///   slots it never does before the pool is closed, as any larger cache; and at least
    ///   twice the pool's pages, since a transaction may hold half the cache, so one can
    ///   still rewrite the whole pool;
    /// * the log at eight times the pool: a transaction may log a quarter of it, the whole
    ///   pool twice over, and records wait in it only until the applier copies them to the
    ///   cache.
    ///
    /// Each is at least its minimum.
    pub(crate) fn layout_for(&self, pool_size_bytes: u64) -> Layout {
        let page = PAGE as u64;
        let pool_pages = pool_size_bytes.div_ceil(page);
        let log_bytes_max = (pool_pages * page).saturating_mul(8).max(MIN_LOG);
        let never_written_back_pages = (pool_pages as f64 / self.writeback_threshold).ceil();
        let cache_pages_max = (never_written_back_pages as u64).max(pool_pages.saturating_mul(2));
        let cache_bytes_max = cache_pages_max.saturating_mul(page).max(MIN_CACHE);
        let layout = Layout::new(
            pool_size_bytes,
            self.log_size_bytes.min(log_bytes_max),
            self.cache_size_bytes.min(cache_bytes_max),
        );
        // With validated options, each is at least its minimum: a transaction may then hold
        // half the cache and log a quarter of the log.
        debug_assert!(
            layout.log_size_bytes >= MIN_LOG,
            "log of a new pool: expected at least {MIN_LOG} bytes, found {}",
            layout.log_size_bytes
        );
        debug_assert!(
            layout.cache_pages >= MIN_CACHE / page,
            "cache of a new pool: expected at least {} pages, found {}",
            MIN_CACHE / page,
            layout.cache_pages
        );
        layout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persist_cost_comes_from_the_model_presets() {
        let mut o = PoolOptions {
            tech: "pcm".into(),
            ..Default::default()
        };
        let pcm = nvarray_model::presets::preset("pcm")
            .unwrap()
            .load(&[])
            .unwrap();
        assert_eq!(o.persist_cost_ns().unwrap(), pcm.memory.write_latency_ns);
        o.tech = "no-such-memory".into();
        assert!(o.validate().unwrap_err().to_string().contains("tech"));
    }
}
