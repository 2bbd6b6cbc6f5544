//! What the server keeps of connections that have ended, measured alone in its own test
//! process (other tests' buffers would blur the process's memory).

mod common;

use common::Running;
use nvarray_nbd::client::Reply;

/// Resident memory of this process now, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// What the server keeps of a connection after it ends is merged into one record: 1,500
/// connections in a row (each a handshake, one read and a clean disconnect) leave memory
/// flat. Before, every connection's statistics (~265 KB) were kept for ever: 400 MB here.
#[test]
fn ended_connections_leave_no_memory_behind() {
    let server = Running::start(false);
    // Warm up: the first connections allocate the queue pair and buffers that are reused.
    // Each ends with a disconnect that waits for the server's close, which gives its serving
    // slot back first: the next finds the slot free however slowly the machine runs.
    for _ in 0..50 {
        let mut c = server.client(true);
        c.read(0, 4096).unwrap();
        c.disconnect().unwrap();
    }
    let before = rss_bytes();
    for _ in 0..1500 {
        let mut c = server.client(true);
        assert_eq!(c.read(0, 4096).unwrap(), Reply::Ok(vec![0; 4096]));
        c.disconnect().unwrap();
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 48 << 20,
        "1,500 ended connections grew the process by {} MiB",
        grown >> 20
    );
    // Every request is still counted.
    assert_eq!(server.server.report().totals.requests, 1550);
    server.stop();
}
