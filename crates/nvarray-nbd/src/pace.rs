//! Pacing: how long a connection that has answered everything may wait before it reads its
//! next requests, without its client ever waiting for it.
//!
//! A client that keeps many requests in flight (fio at queue depth 16) is usually slower than
//! the server: the server answers each request within microseconds, and the replies pile up
//! unread in the client's socket. Served one by one as they trickle in, every request then
//! costs the server a `recv`, a `send` (which wakes the client) and a wait for the device of
//! its own. While the client still has unread replies to work through, the server loses
//! nothing by waiting: the requests the client sends meanwhile gather in the socket and are
//! read, issued and answered together, so that system calls, wake-ups and the device's
//! latency are paid once per burst instead of once per request (issue 17). This is interrupt
//! coalescing, bounded by the client's own backlog.
//!
//! The backlog is what the kernel still holds of this end's replies (`SIOCOUTQ` on a Unix
//! socket; `Stream::unread_by_peer`), in the kernel's accounting: each `send` costs its
//! payload plus a buffer overhead. The wait is only taken when that backlog, counted in
//! replies conservatively, leaves `REPLIES_KEPT` for the client to work on when the wait
//! ends, and it is bounded by `HOLD_NS_MAX`. A client at queue depth 1 never has a backlog
//! (it reads each reply before it sends its next request), so it never waits; nor does a
//! TCP client, whose backlog the server cannot see.

use std::time::Duration;

/// What the kernel charges for a `send` beyond its payload (the socket buffer's own memory,
/// ~700-900 bytes on Linux 6 for a small one); taken on the high side, so backlogs are
/// counted low and the wait is short rather than long.
pub const SEND_OVERHEAD_BYTES: u64 = 1024;

/// The least time a client spends on each reply, which the wait is measured in: fio's nbd
/// engine (libnbd) spends 7-9 µs of CPU per 4 KiB request on the 2-core VM (docs/perf.md).
pub const CLIENT_NS_PER_REPLY_MIN: u64 = 4_000;

/// Replies the client must still have unread when a wait ends, so it is busy while the
/// server reads, issues and answers the requests that gathered.
pub const REPLIES_KEPT: u64 = 2;

/// Shorter waits are not taken: a sleep costs a timer and a context switch.
pub const HOLD_NS_MIN: u64 = 8_000;

/// The longest wait, whatever the backlog.
pub const HOLD_NS_MAX: u64 = 50_000;

/// A blocking `recv` that returned sooner than this found its request already there: the
/// client was ahead of the server, and the backlog is worth a look (one `ioctl`) at the
/// next burst's end. Slower ones waited for the client (queue depth 1), and the next burst
/// does not look.
pub const QUICK_RECV_NS: u64 = 10_000;

const _: () = assert!(HOLD_NS_MIN <= HOLD_NS_MAX, "some wait is ever taken");

/// What a connection has answered so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pace {
    answers: u64,
    bytes_sent: u64,
}

impl Pace {
    /// A request has been answered (its final reply is queued).
    pub fn answered(&mut self) {
        self.answers += 1;
    }

    /// `bytes` of replies went out.
    pub fn sent(&mut self, bytes: usize) {
        self.bytes_sent += bytes as u64;
    }

    /// How long to wait before reading the next requests, when the client has
    /// `unread_bytes` of this connection's replies still to read; `None`: do not wait.
    pub fn hold(&self, unread_bytes: usize) -> Option<Duration> {
        if self.answers == 0 {
            return None;
        }
        let bytes_per_reply = self.bytes_sent / self.answers + SEND_OVERHEAD_BYTES;
        let unread_replies = unread_bytes as u64 / bytes_per_reply;
        let hold_ns = unread_replies
            .saturating_sub(REPLIES_KEPT)
            .saturating_mul(CLIENT_NS_PER_REPLY_MIN)
            .min(HOLD_NS_MAX);
        (hold_ns >= HOLD_NS_MIN).then(|| Duration::from_nanos(hold_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that answered `answers` requests in `bytes_sent` bytes, asked with
    /// `unread_bytes` unread, waits `expected_us`.
    fn check(answers: u64, bytes_sent: u64, unread_bytes: usize, expected_us: Option<u64>) {
        let pace = Pace {
            answers,
            bytes_sent,
        };
        assert_eq!(
            pace.hold(unread_bytes),
            expected_us.map(Duration::from_micros),
            "{answers} answers, {bytes_sent} bytes sent, {unread_bytes} unread"
        );
    }

    #[test]
    fn the_wait_follows_the_clients_backlog_in_replies() {
        // 4 KiB reads: 4124 bytes a reply, 5148 with the overhead.
        let read = 4124;
        check(100, 100 * read, 0, None); // queue depth 1: nothing unread
        check(100, 100 * read, 3 * 5148, None); // 1 reply beyond the kept 2: 4 µs, too short
        check(100, 100 * read, 4 * 5148, Some(8));
        check(100, 100 * read, 13 * 5148, Some(44));
        // Capped.
        check(100, 100 * read, 16 * 5148, Some(50));
        // Write replies: 16 bytes, 1040 with the overhead.
        check(100, 1600, 2 * 1040, None);
        check(100, 1600, 12 * 1040, Some(40));
        // Nothing answered yet: no basis for a guess.
        check(0, 0, 1 << 20, None);
    }
}
