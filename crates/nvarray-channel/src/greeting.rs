//! The connections that have not yet said hello, read all at once so that none holds up
//! another.
//!
//! The daemon used to read each new connection's hello in turn, blocking, with a 2 s timeout
//! that every byte restarted: three silent connections kept a real client waiting 6 s, and
//! one that sent a byte every 1.9 s held every new client for 45 s, again and again (issue
//! 55). Now the accept loop polls the listener and every waiting connection together and
//! reads whatever each has sent (`Greeter`):
//!
//! - a connection has `HELLO_WAIT` from its accept for its whole hello, however it trickles;
//! - a user has at most `WAITING_PER_UID_MAX` connections waiting, and all users together
//!   `WAITING_MAX`: beyond either, the oldest waiting one (of that user, or of all) is closed
//!   to make room. A client sends its hello as soon as it connects, so only connections that
//!   stay silent are ever the oldest, and a user can crowd out only their own;
//! - every connection closed before its channel is logged with why (at most one line a
//!   second per reason, counting the others).

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::hello::HELLO_BYTES;
use crate::sys::{self, Credentials};

/// How long a connection has, from its accept, to send its whole hello.
pub const HELLO_WAIT: Duration = Duration::from_secs(2);
/// Connections of one user waiting for their hello at once.
pub const WAITING_PER_UID_MAX: usize = 16;
/// Connections waiting for their hello at once, all users together.
pub const WAITING_MAX: usize = 256;

const _: () = assert!(WAITING_PER_UID_MAX <= WAITING_MAX);

/// A connection waiting for its hello.
struct Waiting {
    stream: UnixStream,
    who: Credentials,
    hello: [u8; HELLO_BYTES],
    got: usize,
    since: Instant,
}

/// Why a connection was closed before it had a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Closed {
    /// No whole hello within `HELLO_WAIT`.
    Silent { got: usize },
    /// It closed its end first.
    Hung { got: usize },
    /// Its user (or everyone) had the most connections waiting: this, the oldest, made room.
    Crowded { uid: u32, per_uid: bool },
    /// Reading it failed.
    Failed(String),
}

impl Closed {
    /// A key for the log's rate limit: one line a second per kind of reason.
    fn kind(&self) -> u8 {
        match self {
            Closed::Silent { .. } => 0,
            Closed::Hung { .. } => 1,
            Closed::Crowded { .. } => 2,
            Closed::Failed(_) => 3,
        }
    }
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Closed::Silent { got } => write!(
                f,
                "no hello within {} s of connecting ({got} of its {HELLO_BYTES} bytes came)",
                HELLO_WAIT.as_secs()
            ),
            Closed::Hung { got } => write!(
                f,
                "it closed the connection before its hello ({got} of {HELLO_BYTES} bytes)"
            ),
            Closed::Crowded { uid, per_uid: true } => write!(
                f,
                "uid {uid} had {WAITING_PER_UID_MAX} connections waiting to say hello, the most \
                 one user may; the oldest was closed to make room"
            ),
            Closed::Crowded { per_uid: false, .. } => write!(
                f,
                "{WAITING_MAX} connections were waiting to say hello, the most the daemon \
                 keeps; the oldest was closed to make room"
            ),
            Closed::Failed(e) => write!(f, "reading its hello failed: {e}"),
        }
    }
}

/// A connection whose whole hello came: its socket (blocking again), who it is and the bytes.
pub struct Greeted {
    pub stream: UnixStream,
    pub who: Credentials,
    pub hello: [u8; HELLO_BYTES],
}

/// What happened to the waiting connections in one round.
#[derive(Default)]
pub struct Round {
    pub greeted: Vec<Greeted>,
    pub closed: Vec<(Credentials, Closed)>,
}

/// The connections waiting for their hello.
#[derive(Default)]
pub struct Greeter {
    waiting: Vec<Waiting>,
}

impl Greeter {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Takes a new connection (non-blocking from now on); closes the oldest waiting one of
    /// its user, or of all, if either is at its most. Returns those closed.
    pub fn add(&mut self, stream: UnixStream, now: Instant) -> Vec<(Credentials, Closed)> {
        let who = match sys::peer_credentials(&stream)
            .and_then(|who| stream.set_nonblocking(true).map(|()| who))
        {
            Ok(who) => who,
            Err(e) => {
                let unknown = Credentials {
                    pid: 0,
                    uid: u32::MAX,
                    gid: u32::MAX,
                };
                return vec![(unknown, Closed::Failed(e.to_string()))];
            }
        };
        let mut closed = Vec::new();
        let mine = self.waiting.iter().filter(|w| w.who.uid == who.uid).count();
        if mine >= WAITING_PER_UID_MAX {
            let oldest = self.oldest(|w| w.who.uid == who.uid);
            closed.push(self.evict(oldest, true));
        } else if self.waiting.len() >= WAITING_MAX {
            let oldest = self.oldest(|_| true);
            closed.push(self.evict(oldest, false));
        }
        self.waiting.push(Waiting {
            stream,
            who,
            hello: [0; HELLO_BYTES],
            got: 0,
            since: now,
        });
        assert!(
            self.waiting.len() <= WAITING_MAX,
            "{} waiting",
            self.waiting.len()
        );
        debug_assert!(
            self.waiting.iter().filter(|w| w.who.uid == who.uid).count() <= WAITING_PER_UID_MAX,
            "uid {} over its share",
            who.uid
        );
        closed
    }

    fn oldest(&self, of: impl Fn(&Waiting) -> bool) -> usize {
        let (index, _) = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, w)| of(w))
            .min_by_key(|(_, w)| w.since)
            .expect("a full budget has a waiting connection");
        index
    }

    fn evict(&mut self, index: usize, per_uid: bool) -> (Credentials, Closed) {
        let w = self.waiting.swap_remove(index);
        let uid = w.who.uid;
        (w.who, Closed::Crowded { uid, per_uid })
    }

    /// The waiting connections' descriptors, in order (for `poll`).
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.waiting.iter().map(|w| w.stream.as_raw_fd())
    }

    /// The soonest instant a waiting connection runs out of time.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiting.iter().map(|w| w.since + HELLO_WAIT).min()
    }

    /// Reads what the connections at `ready` (indices in `fds` order) have sent, then closes
    /// every connection out of time at `now`. Returns those whose hello is whole, and those
    /// closed.
    pub fn round(&mut self, ready: &[usize], now: Instant) -> Round {
        let mut round = Round::default();
        let mut done: Vec<(usize, Option<Closed>)> = Vec::new();
        for &i in ready {
            let w = &mut self.waiting[i];
            match (&w.stream).read(&mut w.hello[w.got..]) {
                Ok(0) => done.push((i, Some(Closed::Hung { got: w.got }))),
                Ok(n) => {
                    w.got += n;
                    // Read into what is left of the hello, never past it.
                    assert!(w.got <= HELLO_BYTES, "{} bytes of hello", w.got);
                    if w.got == HELLO_BYTES {
                        done.push((i, None));
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => done.push((i, Some(Closed::Failed(e.to_string())))),
            }
        }
        for (i, w) in self.waiting.iter().enumerate() {
            let decided = done.iter().any(|&(d, _)| d == i);
            if !decided && now >= w.since + HELLO_WAIT {
                done.push((i, Some(Closed::Silent { got: w.got })));
            }
        }
        // Highest index first, so `swap_remove` moves only entries already looked at.
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        // Each connection decided once (`ready` holds each index once, and the deadline skips
        // the decided), or `swap_remove` would take the wrong one.
        debug_assert!(
            done.windows(2).all(|d| d[0].0 > d[1].0),
            "a connection decided twice"
        );
        for (i, outcome) in done {
            let w = self.waiting.swap_remove(i);
            match outcome {
                Some(why) => round.closed.push((w.who, why)),
                None => match w.stream.set_nonblocking(false) {
                    Ok(()) => round.greeted.push(Greeted {
                        stream: w.stream,
                        who: w.who,
                        hello: w.hello,
                    }),
                    Err(e) => round.closed.push((w.who, Closed::Failed(e.to_string()))),
                },
            }
        }
        round
    }
}

/// Lines about closed connections: at most one a second per kind of reason, with a count of
/// the others since the last.
#[derive(Default)]
pub struct CloseLog {
    last: HashMap<u8, (Instant, u64)>,
}

impl CloseLog {
    /// The line to print about `who` closed for `why` at `now`, if one is due.
    pub fn line(&mut self, who: &Credentials, why: &Closed, now: Instant) -> Option<String> {
        const EVERY: Duration = Duration::from_secs(1);
        let entry = self.last.entry(why.kind()).or_insert((now - EVERY, 0));
        if now.duration_since(entry.0) < EVERY {
            entry.1 += 1;
            return None;
        }
        let others = std::mem::take(&mut entry.1);
        entry.0 = now;
        let more = match others {
            0 => String::new(),
            n => format!(" (and {n} more closed for this reason since the last such line)"),
        };
        Some(format!(
            "closed a connection from pid {} (uid {}): {why}{more}",
            who.pid, who.uid
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pair() -> (UnixStream, UnixStream) {
        UnixStream::pair().unwrap()
    }

    #[test]
    fn a_hello_trickled_in_pieces_is_whole_once_all_came() {
        let mut g = Greeter::default();
        let (server, mut client) = pair();
        let t0 = Instant::now();
        assert!(g.add(server, t0).is_empty());
        client.write_all(&[7u8; 10]).unwrap();
        assert!(g.round(&[0], t0).greeted.is_empty());
        client.write_all(&[8u8; HELLO_BYTES - 10]).unwrap();
        let round = g.round(&[0], t0);
        assert_eq!(round.greeted.len(), 1);
        assert_eq!(round.greeted[0].hello[..10], [7u8; 10]);
        assert_eq!(round.greeted[0].hello[HELLO_BYTES - 1], 8);
        assert!(g.is_empty());
    }

    #[test]
    fn the_deadline_counts_from_the_accept_not_from_the_last_byte() {
        let mut g = Greeter::default();
        let (server, mut client) = pair();
        let t0 = Instant::now();
        g.add(server, t0);
        client.write_all(&[1]).unwrap();
        assert!(g.round(&[0], t0 + HELLO_WAIT / 2).closed.is_empty());
        client.write_all(&[1]).unwrap();
        let round = g.round(&[0], t0 + HELLO_WAIT);
        assert_eq!(round.closed.len(), 1);
        assert_eq!(round.closed[0].1, Closed::Silent { got: 2 });
        assert_eq!(g.next_deadline(), None);
    }

    #[test]
    fn a_full_budget_closes_the_oldest_of_that_user() {
        let mut g = Greeter::default();
        let t0 = Instant::now();
        let mut clients = Vec::new();
        for i in 0..WAITING_PER_UID_MAX {
            let (server, client) = pair();
            assert!(g
                .add(server, t0 + Duration::from_millis(i as u64))
                .is_empty());
            clients.push(client);
        }
        let (server, _newest) = pair();
        let closed = g.add(server, t0 + Duration::from_secs(1));
        assert_eq!(closed.len(), 1);
        assert!(matches!(closed[0].1, Closed::Crowded { per_uid: true, .. }));
        assert_eq!(g.len(), WAITING_PER_UID_MAX);
        // The oldest (accepted at t0) is the one closed: its peer reads end of file.
        let mut buf = [0u8; 1];
        assert_eq!((&clients[0]).read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn a_closed_peer_is_hung_and_the_log_counts_repeats() {
        let mut g = Greeter::default();
        let (server, client) = pair();
        let t0 = Instant::now();
        g.add(server, t0);
        drop(client);
        let round = g.round(&[0], t0);
        assert_eq!(round.closed[0].1, Closed::Hung { got: 0 });
        let mut log = CloseLog::default();
        let who = round.closed[0].0;
        let why = &round.closed[0].1;
        assert!(log.line(&who, why, t0).is_some());
        assert!(log
            .line(&who, why, t0 + Duration::from_millis(10))
            .is_none());
        let again = log.line(&who, why, t0 + Duration::from_secs(2)).unwrap();
        assert!(again.contains("and 1 more"), "{again}");
    }
}
