//! Loom model of the NVMe completion queue: the device posts three entries through two slots
//! (so it must see the host's head doorbell move and the phase must flip) while the host pops
//! them. Lost, repeated, torn or reordered entries fail the value checks.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p nvarray-emu --release --test loom_nvme_cq`.

#![cfg(loom)]

use loom::thread;
use nvarray_emu::nvme_cq::{split, Cqe};

const ENTRIES: u16 = 3;
const RETRIES_MAX: usize = 8;

fn cqe(i: u16) -> Cqe {
    Cqe {
        result: u32::from(i) + 100,
        sq_head: i,
        sq_id: 1,
        cid: i,
        status: i,
    }
}

#[test]
fn entries_arrive_once_whole_and_in_order() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let (mut dev, mut host) = split(2).unwrap();
        let device = thread::spawn(move || {
            for i in 0..ENTRIES {
                let mut retries = 0;
                while dev.post(cqe(i)).is_err() {
                    retries += 1;
                    assert!(retries < RETRIES_MAX, "post of {i} never succeeded");
                    thread::yield_now();
                }
            }
        });
        for i in 0..ENTRIES {
            let mut retries = 0;
            let got = loop {
                if let Some(got) = host.pop() {
                    break got;
                }
                retries += 1;
                assert!(retries < RETRIES_MAX, "entry {i} never arrived");
                thread::yield_now();
            };
            assert_eq!(got, cqe(i));
        }
        assert_eq!(host.pop(), None);
        device.join().unwrap();
    });
}
