//! What a pool reports about itself: its statistics since the first process attached
//! (`Stats`) and what recovery did when it opened (`RecoveryReport`). Plain values: the pool's
//! state (`pool_state.rs`) fills them, `Pool` hands them out.

use std::time::Duration;

/// What the pool has done since the first process attached to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub commits: u64,
    pub aborts: u64,
    /// Writes refused because an older transaction held the page (wait-die).
    pub conflicts: u64,
    pub bytes_logged: u64,
    /// Log records applied to the write cache.
    pub records_digested: u64,
    pub pages_written_back: u64,
    pub writeback_rounds: u64,
    /// Commits that had to wait for log space.
    pub log_full_waits: u64,
    pub cache_evictions: u64,
    /// Dead processes whose transactions another process cleaned up.
    pub processes_reaped: u64,
    /// Reservations of stalled live committers that later commits fenced and passed
    /// (`PoolOptions::stall_timeout`); each one's commit failed with `Fenced`.
    pub fenced: u64,
    pub dirty_pages: u64,
    pub cache_pages: u64,
    /// Log bytes not yet applied to the cache.
    pub log_used_bytes: u64,
    pub log_size_bytes: u64,
}

impl Stats {
    /// (name, value) of every field, for tables and JSON.
    pub fn fields(&self) -> [(&'static str, u64); 15] {
        [
            ("commits", self.commits),
            ("aborts", self.aborts),
            ("conflicts", self.conflicts),
            ("bytes_logged", self.bytes_logged),
            ("records_digested", self.records_digested),
            ("pages_written_back", self.pages_written_back),
            ("writeback_rounds", self.writeback_rounds),
            ("log_full_waits", self.log_full_waits),
            ("cache_evictions", self.cache_evictions),
            ("processes_reaped", self.processes_reaped),
            ("fenced", self.fenced),
            ("dirty_pages", self.dirty_pages),
            ("cache_pages", self.cache_pages),
            ("log_used", self.log_used_bytes),
            ("log_size", self.log_size_bytes),
        ]
    }
}

/// What recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Dirty write-cache pages whose lines were copied to the backing file.
    pub cache_pages: u64,
    /// Committed log records replayed.
    pub records: u64,
    /// Bytes those records wrote.
    pub bytes: u64,
    /// Records from the first incomplete one on (itself included if its header survived):
    /// transactions in flight at the crash, never acknowledged, so discarded.
    pub discarded: u64,
    pub duration: Duration,
}
