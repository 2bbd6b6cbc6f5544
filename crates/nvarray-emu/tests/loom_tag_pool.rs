//! Loom model of the tag pool: threads acquire, use and release tags of a 2-tag pool in every
//! interleaving (up to the preemption bound). Each tag owns a loom-checked `UnsafeCell`, standing
//! in for the per-tag DMA buffer: a tag handed out twice, or a hand-over without a
//! happens-before edge (a Relaxed where Acquire/Release belong), shows up as a race on that cell
//! or as a wrong value read back.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nvarray-emu --release --test loom_tag_pool`.

#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use nvarray_emu::tag_pool::{TagPool, TagPoolError};

const TAGS: usize = 2;

/// The pool plus per-tag state, as a queue pair would hold it.
struct Shared {
    pool: TagPool,
    /// The last writer of each tag's buffer; only the tag's holder may touch it.
    buffers: Vec<UnsafeCell<usize>>,
    /// Set while some thread holds the tag: a second holder fails the swap.
    held: Vec<AtomicBool>,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Shared {
            pool: TagPool::new(TAGS).unwrap(),
            buffers: (0..TAGS).map(|_| UnsafeCell::new(usize::MAX)).collect(),
            held: (0..TAGS).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// Tries once to take a tag, write `me` into its buffer, read it back, and release it.
    /// Returns whether a tag was free.
    fn use_a_tag(&self, me: usize, hint: usize) -> bool {
        let Some(tag) = self.pool.acquire(hint) else {
            return false;
        };
        let i = tag.index();
        assert!(i < TAGS);
        // Relaxed so that this check adds no synchronisation of its own: the pool's
        // Acquire/Release must carry the buffer hand-over alone.
        assert!(
            !self.held[i].swap(true, Ordering::Relaxed),
            "tag {i} handed out twice"
        );
        // SAFETY: holding the tag gives exclusive use of its buffer; loom reports any access
        // that is not ordered after the previous holder's.
        self.buffers[i].with_mut(|p| unsafe { *p = me });
        // SAFETY: as above.
        let back = self.buffers[i].with(|p| unsafe { *p });
        assert_eq!(back, me, "tag {i}'s buffer changed under its holder");
        assert!(self.held[i].swap(false, Ordering::Relaxed));
        self.pool.release(tag).unwrap();
        true
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(4);
    builder.check(f);
}

#[test]
fn two_threads_never_share_a_tag() {
    model(|| {
        let shared = Shared::new();
        let other = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                // Two rounds each, so a tag is handed from one thread to the other and back.
                for _ in 0..2 {
                    assert!(shared.use_a_tag(1, 0), "a 2-tag pool ran dry for 2 threads");
                }
            })
        };
        for _ in 0..2 {
            // Same hint: both threads start on the same word and race for the same bit.
            assert!(shared.use_a_tag(0, 0), "a 2-tag pool ran dry for 2 threads");
        }
        other.join().unwrap();
        assert_eq!(shared.pool.in_use(), 0);
    });
}

#[test]
fn three_threads_on_two_tags() {
    model(|| {
        let shared = Shared::new();
        let others: Vec<_> = (1..3)
            .map(|me| {
                let shared = Arc::clone(&shared);
                // One thread per word-hint: hints 1 and 2 start at different words.
                thread::spawn(move || {
                    shared.use_a_tag(me, me);
                })
            })
            .collect();
        // With 3 threads and 2 tags one may find the pool empty; that is allowed, sharing is not.
        shared.use_a_tag(0, 0);
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(shared.pool.in_use(), 0);
    });
}

#[test]
fn double_release_is_refused_under_a_race() {
    model(|| {
        let shared = Shared::new();
        let tag = shared.pool.acquire(0).unwrap();
        let racer = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || shared.pool.release(tag))
        };
        let mine = shared.pool.release(tag);
        let theirs = racer.join().unwrap();
        // Exactly one of two racing releases of the same tag succeeds.
        assert!(mine.is_ok() != theirs.is_ok());
        let err = if mine.is_err() { mine } else { theirs };
        assert_eq!(err, Err(TagPoolError::NotTaken(tag)));
        assert_eq!(shared.pool.in_use(), 0);
    });
}
