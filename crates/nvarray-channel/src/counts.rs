//! The daemon's counts, kept in atomics so the serving and accepting threads add to them and
//! a report reads them at any time (`nvarray_report::ChannelCounts`).

use std::sync::atomic::{AtomicU64, Ordering};

use nvarray_report::ChannelCounts;

#[derive(Debug, Default)]
pub struct Counts {
    pub opened: AtomicU64,
    pub refused: AtomicU64,
    pub live: AtomicU64,
    pub permission_denied: AtomicU64,
    pub malformed: AtomicU64,
    pub ring_faults: AtomicU64,
}

impl Counts {
    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ChannelCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ChannelCounts {
            opened: get(&self.opened),
            refused: get(&self.refused),
            live: get(&self.live),
            permission_denied: get(&self.permission_denied),
            malformed: get(&self.malformed),
            ring_faults: get(&self.ring_faults),
        }
    }
}
