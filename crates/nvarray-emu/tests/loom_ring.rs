//! Loom model of the SPSC ring: every interleaving (up to the preemption bound) of one producer
//! and one consumer on a 2-slot ring. Loom's checked `UnsafeCell` turns a too-weak ordering on
//! `head` or `tail` into a reported race on a slot, and the value checks catch lost, repeated or
//! reordered entries.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nvarray-emu --release --test loom_ring`.

#![cfg(loom)]

use loom::thread;
use nvarray_emu::ring::split;

/// Entries pushed through the 2-slot ring: one more than fits, so the producer must see the
/// consumer's `head` move to reuse a slot.
const ENTRIES: u64 = 3;
/// Retries of one push or pop before the model fails. Each retry yields, which loom takes as
/// "run another thread", so the other side always gets to move; hitting the bound means an
/// entry was lost.
const RETRIES_MAX: usize = 8;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    // Bugs in a two-thread handover need at most a couple of preemptions to show; 3 keeps the
    // run in seconds and still catches a Relaxed in place of Acquire on either side.
    builder.preemption_bound = Some(4);
    builder.check(f);
}

#[test]
fn entries_arrive_once_and_in_order() {
    model(|| {
        let (mut producer, mut consumer) = split::<(u64, u64)>(2).unwrap();
        let pusher = thread::spawn(move || {
            for v in 1..=ENTRIES {
                // The complement in the second half shows a torn or stale slot.
                let mut entry = (v, !v);
                let mut retries = 0;
                while let Err(back) = producer.push(entry) {
                    entry = back;
                    retries += 1;
                    assert!(retries <= RETRIES_MAX, "push of {v} never found room");
                    thread::yield_now();
                }
                assert!(producer.len() <= 2);
            }
        });
        for expected in 1..=ENTRIES {
            let mut retries = 0;
            let (v, check) = loop {
                if let Some(entry) = consumer.pop() {
                    break entry;
                }
                retries += 1;
                assert!(retries <= RETRIES_MAX, "entry {expected} never arrived");
                thread::yield_now();
            };
            assert_eq!(v, expected);
            assert_eq!(check, !expected);
            assert!(consumer.len() <= 2);
        }
        pusher.join().unwrap();
        assert_eq!(consumer.pop(), None);
        assert!(consumer.is_empty());
    });
}
