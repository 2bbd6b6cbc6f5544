//! Loom model of the word ring: one producer pushes three words through two slots while one
//! consumer pops them. A too-weak ordering shows as a stale read of the data the word refers
//! to (a loom-checked cell written before each push), the value checks catch lost, repeated
//! or reordered words.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nvarray-emu --release --test loom_word_ring`.

#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use nvarray_emu::word_ring::split;

const WORDS: u64 = 3;
const RETRIES_MAX: usize = 8;

/// One payload cell per word, standing in for the DMA buffer a command refers to.
struct Payload([UnsafeCell<u64>; WORDS as usize]);
// SAFETY: every access goes through loom's checked cell, which reports any access not ordered
// by the ring's hand-over as a failure: that is what the test verifies.
unsafe impl Sync for Payload {}

#[test]
fn words_and_their_payload_arrive_once_and_in_order() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let (mut p, mut c) = split(2).unwrap();
        let payload = Arc::new(Payload([
            UnsafeCell::new(0),
            UnsafeCell::new(0),
            UnsafeCell::new(0),
        ]));
        let producer_payload = Arc::clone(&payload);
        let producer = thread::spawn(move || {
            for w in 1..=WORDS {
                // SAFETY: the cell is the producer's until the push below publishes it.
                producer_payload.0[(w - 1) as usize].with_mut(|p| unsafe { *p = w * 10 });
                let mut retries = 0;
                while p.push(w).is_err() {
                    retries += 1;
                    assert!(retries < RETRIES_MAX, "push of {w} never succeeded");
                    thread::yield_now();
                }
            }
        });
        for w in 1..=WORDS {
            let mut retries = 0;
            let got = loop {
                if let Some(got) = c.pop() {
                    break got;
                }
                retries += 1;
                assert!(retries < RETRIES_MAX, "word {w} never arrived");
                thread::yield_now();
            };
            assert_eq!(got, w);
            // SAFETY: the pop's Acquire made the producer's write visible; loom checks it.
            payload.0[(w - 1) as usize].with(|p| assert_eq!(unsafe { *p }, w * 10));
        }
        producer.join().unwrap();
    });
}
