//! The device's tags are shared fairly among connections (`tag_share.rs`): neither a client
//! that keeps hundreds of requests in flight nor one that stops taking its replies keeps the
//! tags from another connection.

use std::time::{Duration, Instant};

use nvarray_nbd::client::Reply;

mod common;
use common::{read_burst, Running};

/// A client sends 256 reads of 4 KiB at once (1 MiB of replies, more than the socket
/// buffers) and never reads a reply; another reads at queue depth 1 for a second. The device
/// has 8 tags and 1 ms memory, and the two clients' reads go to different banks, so the
/// second client waits only for tags.
///
/// Before: while the first connection issued its burst it re-took every tag the moment one
/// freed (the second client's slowest read: 510 ms); then it blocked on its full socket with
/// its commands still holding the tags, so the second client's next read waited until the
/// stalled one was dropped (`io::STALL_MAX`, 30 s). Now the second client's slowest read is
/// about 16 ms on an idle machine.
#[test]
fn a_greedy_then_stalled_client_does_not_keep_the_device_tags_from_another() {
    let running = Running::start_with(
        false,
        &[("controller.tags", "8"), ("memory.latency_ns", "1ms")],
    );
    let mut greedy = running.client(false);
    greedy.send_raw(&read_burst(0..256, 4096)).unwrap();
    let mut other = running.client(false);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut reads = 0u32;
    // The greedy connection issues its burst in about 0.3 s, then its socket is full.
    while started.elapsed() < Duration::from_secs(1) {
        let t = Instant::now();
        let reply = other.read(4096, 4096).unwrap();
        assert!(
            matches!(reply, Reply::Ok(ref d) if d.len() == 4096),
            "{reply:?}"
        );
        slowest = slowest.max(t.elapsed());
        reads += 1;
    }
    assert!(
        slowest < Duration::from_millis(200),
        "a read at queue depth 1 waited {slowest:?} for a tag ({reads} reads in 1 s)"
    );
    drop(greedy);
    running.stop();
}
