//! Loom models of the channel's two sleep-and-wake handshakes (`nvarray_channel::wakeups`),
//! on the functions the client and the serving thread call: under every interleaving, a
//! sleeper either sees the work or is woken.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nvarray-channel --release --test loom_wakeups`.

#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use nvarray_channel::wakeups::{
    announce_sleep, announce_wait, publish_commands, publish_completions,
};

/// A client makes a command visible while the serving thread decides to sleep: either the
/// thread sees the command (and stays up) or the client sees it asleep (and wakes it).
#[test]
fn a_command_is_never_left_with_the_serving_thread_asleep() {
    loom::model(|| {
        let sq_tail = Arc::new(AtomicU32::new(0));
        let sleeping = Arc::new(AtomicU32::new(0));
        let woken = Arc::new(AtomicBool::new(false));
        let client = {
            let (sq_tail, sleeping, woken) = (sq_tail.clone(), sleeping.clone(), woken.clone());
            thread::spawn(move || {
                if publish_commands(&*sq_tail, 1, &*sleeping) {
                    woken.store(true, Ordering::SeqCst);
                }
            })
        };
        let stays_up = announce_sleep(&*sleeping, &*sq_tail, 0);
        client.join().unwrap();
        assert!(
            stays_up || woken.load(Ordering::SeqCst),
            "the serving thread slept past a command and nobody woke it"
        );
    });
}

/// The serving thread posts a completion while the client decides to sleep on the tail:
/// either the client sees the completion (and does not sleep) or the thread sees it waiting
/// (and wakes it). A client that sleeps on the tail it saw is also woken by the futex itself
/// when the tail has moved since, so the one case to exclude is sleeping on the old tail
/// unwoken.
#[test]
fn a_completion_is_never_left_with_the_client_asleep() {
    loom::model(|| {
        let cq_tail = Arc::new(AtomicU32::new(0));
        let waiting = Arc::new(AtomicU32::new(0));
        let daemon = {
            let (cq_tail, waiting) = (cq_tail.clone(), waiting.clone());
            thread::spawn(move || publish_completions(&*cq_tail, 1, &*waiting))
        };
        let sleeps_on = announce_wait(&*waiting, &*cq_tail, 0);
        let woken = daemon.join().unwrap();
        assert!(
            sleeps_on.is_none() || woken,
            "the client slept on tail {sleeps_on:?} past a completion and nobody woke it"
        );
    });
}
