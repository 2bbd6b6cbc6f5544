//! Loom model of the hand-off from the model's visitor to a queue pair's owner (`Mailbox`):
//! every interleaving (up to the preemption bound) of two visitors putting completions and
//! the owner taking them.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nvarray-emu --release --test loom_mailbox`.

#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use nvarray_emu::mailbox::Mailbox;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Two visitors put two items each; the owner, taking until it has all four, gets each once
/// and each visitor's items in the order they were put.
#[test]
fn every_item_arrives_once_and_each_putters_in_order() {
    model(|| {
        let mailbox = Arc::new(Mailbox::<u32>::default());
        let putters: Vec<_> = [10u32, 20]
            .into_iter()
            .map(|base| {
                let mailbox = Arc::clone(&mailbox);
                thread::spawn(move || {
                    mailbox.put_all(&mut vec![base + 1]);
                    mailbox.put_all(&mut vec![base + 2]);
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 4 {
            if !mailbox.take_into(&mut got) {
                thread::yield_now();
            }
        }
        for p in putters {
            p.join().unwrap();
        }
        assert!(!mailbox.take_into(&mut got), "nothing is taken twice");
        for base in [10, 20] {
            let mine: Vec<u32> = got
                .iter()
                .copied()
                .filter(|v| v / 10 == base / 10)
                .collect();
            assert_eq!(mine, [base + 1, base + 2]);
        }
    });
}

/// What the engine relies on to keep each queue's completions in deadline order: a visitor
/// puts what it finished and then publishes how far it advanced the model (Release); an owner
/// that sees that time (Acquire) finds every item put before it in its next `take_into`.
#[test]
fn an_item_put_before_the_published_time_is_seen_by_whoever_reads_the_time() {
    model(|| {
        let mailbox = Arc::new(Mailbox::<u32>::default());
        let advanced_ns = Arc::new(AtomicU64::new(0));
        let visitor = {
            let (mailbox, advanced_ns) = (Arc::clone(&mailbox), Arc::clone(&advanced_ns));
            thread::spawn(move || {
                mailbox.put_all(&mut vec![7]);
                advanced_ns.store(100, Ordering::Release);
            })
        };
        let mut got = Vec::new();
        if advanced_ns.load(Ordering::Acquire) == 100 {
            assert!(mailbox.take_into(&mut got));
            assert_eq!(got, [7]);
        }
        visitor.join().unwrap();
    });
}
