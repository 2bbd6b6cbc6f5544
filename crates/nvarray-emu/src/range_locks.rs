//! Locks over the device's byte ranges, so commands on different queue pairs move data in
//! parallel and two that touch the same bytes take turns.
//!
//! Each queue pair's commands are served by the thread that owns the pair, so two threads may
//! copy into or out of the backing at once. Commands in flight together have no defined order
//! (NVMe leaves it to the host), but their copies must not race: a range's stripes are locked
//! for the copy. A stripe covers `STRIPE_BYTES` and the stripes repeat every
//! `STRIPES × STRIPE_BYTES`, so a random small command takes one uncontended lock, and a
//! large one takes its stripes in ascending index order (no two threads can then wait on each
//! other in a cycle).
//!
//! The stripes are `parking_lot` mutexes: an uncontended lock and unlock are an atomic each,
//! where `std`'s, with its poisoning checks, cost about 75 instructions per data move (issue
//! 38); a guard over `()` has nothing a panic could leave half-written.

use parking_lot::{Mutex, MutexGuard};

use crossbeam_utils::CachePadded;

/// Bytes per stripe: one 4 KiB page.
pub const STRIPE_BYTES: u64 = 4096;
/// Stripes in all: 256 padded locks (32 KiB), so two threads on random blocks of a large
/// device share a stripe about once in 256 commands.
pub const STRIPES: usize = 256;

pub struct RangeLocks {
    stripes: Box<[CachePadded<Mutex<()>>]>,
}

/// The stripes of one range, held until dropped.
pub enum RangeGuard<'a> {
    One(#[allow(dead_code)] MutexGuard<'a, ()>),
    Many(#[allow(dead_code)] Vec<MutexGuard<'a, ()>>),
}

impl Default for RangeLocks {
    fn default() -> Self {
        RangeLocks {
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(Mutex::new(())))
                .collect(),
        }
    }
}

impl RangeLocks {
    /// Locks the stripes covering `[offset_bytes, offset_bytes + len_bytes)` (at least one).
    pub fn lock(&self, offset_bytes: u64, len_bytes: usize) -> RangeGuard<'_> {
        let first = offset_bytes / STRIPE_BYTES;
        let last = (offset_bytes + (len_bytes.max(1) as u64) - 1) / STRIPE_BYTES;
        let take = |i: usize| self.stripes[i].lock();
        if first == last {
            return RangeGuard::One(take((first % STRIPES as u64) as usize));
        }
        let count = (last - first + 1).min(STRIPES as u64) as usize;
        let start = (first % STRIPES as u64) as usize;
        let mut indices: Vec<usize> = (0..count).map(|k| (start + k) % STRIPES).collect();
        indices.sort_unstable();
        RangeGuard::Many(indices.into_iter().map(take).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(guard: &RangeGuard<'_>) -> usize {
        match guard {
            RangeGuard::One(_) => 1,
            RangeGuard::Many(guards) => guards.len(),
        }
    }

    #[test]
    fn a_range_holds_each_stripe_it_covers_once() {
        let locks = RangeLocks::default();
        assert_eq!(held(&locks.lock(0, 512)), 1);
        assert_eq!(held(&locks.lock(4095, 2)), 2);
        assert_eq!(
            held(&locks.lock(4096 * 255, 4096 * 2)),
            2,
            "wraps to stripe 0"
        );
        assert_eq!(
            held(&locks.lock(0, 1 << 24)),
            STRIPES,
            "never a stripe twice"
        );
    }

    #[test]
    fn ranges_that_share_a_stripe_exclude_each_other() {
        let locks = RangeLocks::default();
        let guard = locks.lock(8192, 512);
        // The same stripe, one period on: it must be busy while `guard` is held.
        let again = (8192 + STRIPE_BYTES * STRIPES as u64) / STRIPE_BYTES % STRIPES as u64;
        assert!(locks.stripes[again as usize].try_lock().is_none());
        assert!(
            locks.stripes[3].try_lock().is_some(),
            "another stripe stays free"
        );
        drop(guard);
        assert!(locks.stripes[again as usize].try_lock().is_some());
    }
}
